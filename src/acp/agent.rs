//! The dispatcher: one table with every ACP method this agent serves.
//!
//! Quick methods are answered inline. Methods that wait on the Runtime Host run on worker
//! threads and answer through their [`Responder`], so `session/cancel` and `$/cancel_request`
//! are never stuck behind them.

use super::initialize::{self, ClientCapabilities, InitializeParams};
use crate::jsonrpc::{Connection, Incoming, Notification, Request, Responder, ResponseError};
use serde_json::Value;
use std::path::PathBuf;

/// Where the Runtime Host is, from the command line and environment.
#[derive(Clone, Debug, Default)]
pub struct AdapterConfig {
    /// An existing host; `None` starts the embedded one on first use.
    pub host_url: Option<String>,
    pub host_token: Option<String>,
    pub data_dir: Option<PathBuf>,
}

struct Agent {
    #[allow(dead_code)] // used by the session methods
    config: AdapterConfig,
    /// Set by `initialize`; before it, the client is assumed to support nothing.
    client: Option<InitializeParams>,
}

/// Serves one ACP connection until the client closes stdin.
pub fn serve(conn: Connection, config: AdapterConfig) {
    let mut agent = Agent {
        config,
        client: None,
    };
    while let Ok(incoming) = conn.inbox.recv() {
        match incoming {
            Incoming::Request(request, responder) => agent.handle_request(request, responder),
            Incoming::Notification(n) => agent.handle_notification(n),
        }
    }
    log::debug!("client closed the connection; shutting down");
    conn.finish();
}

impl Agent {
    fn handle_request(&mut self, request: Request, responder: Responder) {
        let Request { method, params, .. } = request;
        let result = match method.as_str() {
            "initialize" => self.initialize(&params),
            // Unknown methods, `_` extensions we do not implement, and methods whose
            // capability we do not advertise.
            _ => Err(ResponseError::method_not_found(&method)),
        };
        responder.respond(result);
    }

    fn handle_notification(&mut self, n: Notification) {
        // Unknown notifications (including `_…` extensions) are ignored, as ACP asks.
        log::debug!("ignoring notification {}", n.method);
    }

    fn initialize(&mut self, params: &Value) -> Result<Value, ResponseError> {
        let params = initialize::parse(params)?;
        if let Some(info) = &params.client_info {
            log::info!("client {} {} connected", info.name, info.version);
        }
        let result = initialize::result(&params);
        self.client = Some(params);
        Ok(result)
    }

    #[allow(dead_code)] // used by the session methods
    fn client_capabilities(&self) -> ClientCapabilities {
        self.client
            .as_ref()
            .map(|c| c.capabilities.clone())
            .unwrap_or_default()
    }
}
