//! The dispatcher: every ACP method this agent serves, in one table ([`Agent::handle`]).
//!
//! Requests are read into a typed [`Request`] on the dispatcher thread. Quick ones are answered
//! there; the ones that talk to the Runtime Host run on the worker pool and answer through their
//! [`Responder`], so `session/cancel` is never stuck behind them. A prompt is registered here,
//! in order with every other message, and its responder is handed to the session: the reader
//! thread answers it after the turn's last update.

use super::auth;
use super::errors::from_client;
use super::host_link::{Connected, HostLink};
use super::initialize::{self, InitializeParams};
use super::requests::{self, Request, Unreadable};
use super::session::{AcpSession, Shared};
use super::workers::Workers;
use super::{sessions, settings, turns};
use crate::host_api::client::ClientError;
use crate::host_api::ops::Operation;
use crate::host_api::ops::{self, CapabilityInput, SessionRef, TurnRef};
use crate::jsonrpc::{code, lock, Connection, Incoming, Notification, Responder, ResponseError};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the Runtime Host is, from the command line and environment.
#[derive(Clone, Debug, Default)]
pub struct AdapterConfig {
    /// An existing host; `None` starts the embedded one on first use.
    pub host_url: Option<String>,
    pub host_token: Option<String>,
    /// Authorities to trust for an `https://` host (`MAKA_HOST_CA`).
    pub host_tls: crate::host_api::client::HostTls,
    pub data_dir: Option<PathBuf>,
    /// `--log-level`, passed on to the embedded host.
    pub log_level: Option<String>,
    pub tunables: crate::settings::Tunables,
}

/// How long the requests read before stdin closed may take to be answered.
const EOF_GRACE: Duration = Duration::from_secs(10);

pub type Sessions = Arc<Mutex<HashMap<String, Arc<AcpSession>>>>;

struct Agent {
    conn_outbox: crate::jsonrpc::Outbox,
    calls: Arc<crate::jsonrpc::ClientCalls>,
    link: Arc<HostLink>,
    /// Set by `initialize`; before it, the client is assumed to support nothing.
    client: Option<InitializeParams>,
    sessions: Sessions,
    workers: Workers,
}

/// What a method needs: the connection's shared parts and its sessions.
#[derive(Clone)]
pub struct Ctx {
    pub shared: Arc<Shared>,
    pub sessions: Sessions,
}

impl Ctx {
    pub fn host(&self) -> Result<Connected, ResponseError> {
        self.shared.link.get()
    }

    /// Runs host operation `O`; a transport failure forgets the host (the next call restarts
    /// it).
    pub fn call<O: Operation>(
        &self,
        conn: &Connected,
        input: &O::Input,
    ) -> Result<O::Output, ResponseError> {
        conn.client
            .call::<O>(input)
            .map_err(|e| self.host_error(conn, &e))
    }

    /// A host client error as the client sees it; a transport failure forgets the host.
    pub fn host_error(&self, conn: &Connected, e: &ClientError) -> ResponseError {
        if matches!(e, ClientError::Transport(_)) {
            self.shared.link.lost(&conn.epoch);
        }
        from_client(e)
    }

    pub fn session(&self, id: &str) -> Option<Arc<AcpSession>> {
        lock(&self.sessions).get(id).cloned()
    }

    /// Command output through Zed's display-only `_meta.terminal_*` convention: only for a
    /// client that asks for it and has no real terminals.
    pub fn display_terminal(&self) -> bool {
        !self.shared.caps.terminal && self.shared.caps.terminal_output_meta
    }

    /// Tells the host what it may delegate to this client for `session_id` (files, terminals).
    pub fn register_services(
        &self,
        conn: &Connected,
        session_id: &str,
    ) -> Result<(), ResponseError> {
        let services = super::client_call::services(&self.shared.caps);
        if services.is_empty() {
            return Ok(());
        }
        let input = CapabilityInput {
            session_id: session_id.into(),
            services,
        };
        self.call::<ops::CapabilityReplace>(conn, &input)
            .map(|_| ())
    }
}

/// Serves one ACP connection until the client closes stdin.
pub fn serve(conn: Connection, config: AdapterConfig) {
    let mut agent = Agent {
        conn_outbox: conn.outbox.clone(),
        calls: Arc::clone(&conn.client_calls),
        link: Arc::new(HostLink::new(config)),
        client: None,
        sessions: Arc::default(),
        workers: Workers::new(),
    };
    while let Ok(incoming) = conn.inbox.recv() {
        match incoming {
            Incoming::Request(request, responder) => {
                agent.handle(&request.method, &request.params, responder)
            }
            Incoming::Notification(n) => agent.handle_notification(n),
        }
    }
    log::debug!("client closed the connection; answering what it sent, then shutting down");
    agent.answer_what_was_read(&conn);
    agent.release_all();
    agent.link.shutdown();
    conn.finish();
}

impl Agent {
    fn ctx(&self) -> Ctx {
        Ctx {
            shared: Arc::new(Shared {
                outbox: self.conn_outbox.clone(),
                calls: Arc::clone(&self.calls),
                link: Arc::clone(&self.link),
                caps: self
                    .client
                    .as_ref()
                    .map(|c| c.capabilities.clone())
                    .unwrap_or_default(),
            }),
            sessions: Arc::clone(&self.sessions),
        }
    }

    /// Every ACP method, in one place.
    fn handle(&mut self, method: &str, params: &Value, responder: Responder) {
        let request = match Request::parse(method, params) {
            Ok(r) => r,
            // Unknown methods, `_` extensions we do not implement, and methods whose capability
            // we do not advertise.
            Err(Unreadable::UnknownMethod) => {
                return responder.respond(Err(ResponseError::method_not_found(method)))
            }
            Err(Unreadable::InvalidParams(e))
                if self.client.is_some() || method == "initialize" =>
            {
                return responder.respond(Err(e))
            }
            Err(Unreadable::InvalidParams(_)) => {
                return responder.respond(Err(needs_initialize(method)))
            }
        };
        if self.client.is_none() && !matches!(request, Request::Initialize(_)) {
            // Capabilities decide what every later method may do; without a successful
            // `initialize` there are none to go by.
            return responder.respond(Err(needs_initialize(method)));
        }
        let ctx = self.ctx();
        match request {
            Request::Initialize(p) => responder.respond(self.initialize(p)),
            Request::Prompt(p) => {
                // Registered here, in order with every other message, so a session/cancel
                // that follows the prompt always finds it.
                if let Some(started) = turns::register(&ctx, p, responder) {
                    self.workers.run(move || turns::start(&ctx, started));
                }
            }
            Request::Authenticate { method_id } => self
                .workers
                .run(move || responder.respond(settings::authenticate(&ctx, &method_id))),
            Request::Logout => self
                .workers
                .run(move || responder.respond(settings::logout(&ctx))),
            Request::NewSession(p) => self.workers.run(move || sessions::new(&ctx, p, responder)),
            Request::ForkSession(p) => self.workers.run(move || sessions::fork(&ctx, p, responder)),
            Request::OpenSession { open, replay } => self
                .workers
                .run(move || sessions::open(&ctx, open, replay, responder)),
            Request::ListSessions(p) => self
                .workers
                .run(move || responder.respond(sessions::list(&ctx, p))),
            Request::CloseSession { session_id } => self
                .workers
                .run(move || responder.respond(sessions::close(&ctx, &session_id))),
            Request::DeleteSession { session_id } => self
                .workers
                .run(move || responder.respond(sessions::delete(&ctx, &session_id))),
            Request::SetConfigOption {
                session_id,
                params,
                as_set_model,
            } => self.workers.run(move || {
                settings::set_config_option(&ctx, &session_id, &params, as_set_model, responder)
            }),
            Request::SetMode {
                session_id,
                mode_id,
            } => self
                .workers
                .run(move || settings::set_mode(&ctx, &session_id, &mode_id, responder)),
            Request::ResumeTurn { session_id } => {
                // Like a prompt: registered here, in order, then started on a worker.
                let kind = turns::TurnKind::Resume;
                if let Some(started) = turns::register_generated(&ctx, &session_id, kind, responder)
                {
                    self.workers.run(move || turns::start(&ctx, started));
                }
            }
            Request::PlanTurn { session_id } => {
                let kind = turns::TurnKind::Plan;
                if let Some(started) = turns::register_generated(&ctx, &session_id, kind, responder)
                {
                    self.workers.run(move || turns::start(&ctx, started));
                }
            }
            Request::Maka(r) => self
                .workers
                .run(move || responder.respond(super::maka::serve(&ctx, r))),
        }
    }

    fn handle_notification(&mut self, n: Notification) {
        match n.method.as_str() {
            "session/cancel" => {
                let Some(id) = requests::cancel_target(&n.params) else {
                    log::warn!("session/cancel without a sessionId");
                    return;
                };
                let ctx = self.ctx();
                match ctx.session(id) {
                    Some(s) => s.cancel(&ctx.shared),
                    None => log::debug!("session/cancel for unknown session {id}"),
                }
            }
            // Unknown notifications (including `_…` extensions) are ignored, as ACP asks.
            other => log::debug!("ignoring notification {other}"),
        }
    }

    fn initialize(&mut self, params: InitializeParams) -> Result<Value, ResponseError> {
        if let Some(info) = &params.client_info {
            log::info!("client {} {} connected", info.name, info.version);
        }
        let ready = auth::provider_configured(&self.link);
        let methods = auth::methods(&params.capabilities, ready, self.link.is_embedded());
        let result = initialize::result(&params, methods);
        self.client = Some(params);
        Ok(super::types::to_json(&result))
    }

    /// Stdin closed: every request already read still gets its answer (a script that pipes
    /// requests and closes stdin reads them all). A prompt still running is cancelled as if the
    /// client had sent `session/cancel` (it answers `cancelled`); the agent's own requests to
    /// the client fail at once (nobody can answer them now). What is still unanswered after
    /// [`EOF_GRACE`] is answered with an error.
    fn answer_what_was_read(&self, conn: &Connection) {
        let ctx = self.ctx();
        conn.client_calls.close_all();
        let sessions: Vec<Arc<AcpSession>> = lock(&self.sessions).values().cloned().collect();
        for s in &sessions {
            s.cancel(&ctx.shared);
        }
        let left = conn.incoming.wait_answered(EOF_GRACE);
        if left > 0 {
            log::warn!(
                "{left} request(s) still unanswered {} s after stdin closed; answering them with an error",
                EOF_GRACE.as_secs()
            );
            conn.incoming.answer_all(&ResponseError::new(
                code::INTERNAL_ERROR,
                "maka-acp stopped before this request finished, because the client closed stdin",
            ));
        }
    }

    /// The client left. Editor terminals are released first (the client may still read stdout
    /// after closing stdin); an external host outlives us, so it must stop waiting for this
    /// editor (its calls fail at once), stop the turns nobody can follow, and stop this
    /// client's MCP servers.
    fn release_all(&self) {
        let ctx = self.ctx();
        let sessions: Vec<Arc<AcpSession>> = lock(&self.sessions).values().cloned().collect();
        for s in &sessions {
            let running = s.close();
            super::client_call::release_all(s, &ctx.shared);
            let Some(conn) = self.link.current() else {
                continue;
            };
            let id = s.id.clone();
            let detach = CapabilityInput {
                session_id: id.clone(),
                services: vec![],
            };
            if let Err(e) = conn.client.call::<ops::CapabilityReplace>(&detach) {
                log::warn!("client.capability.replace for {id} at exit: {e}");
            }
            if let Some(turn_id) = running {
                let stop = TurnRef {
                    session_id: id.clone(),
                    turn_id,
                    run_id: None,
                };
                if let Err(e) = conn.client.call::<ops::TurnStop>(&stop) {
                    log::warn!("turn.stop for {id} at exit: {e}");
                }
            }
            let release = SessionRef { session_id: id };
            if let Err(e) = conn.client.call::<ops::SessionRelease>(&release) {
                log::warn!("session.release for {} at exit: {e}", s.id);
            }
        }
    }
}

fn needs_initialize(method: &str) -> ResponseError {
    ResponseError::new(
        code::INVALID_REQUEST,
        format!("{method} needs a successful `initialize` first; send `initialize` and check its answer"),
    )
}
