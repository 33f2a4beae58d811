//! The connection context ([`Shared`]): everything that belongs to one ACP connection, in one
//! value that the connection's dispatcher makes when the connection opens and that is dropped
//! with it (once the session threads still holding it have ended). On stdio a process holds one
//! connection; under `maka-acp serve` it holds many, each with a context of its own, so nothing
//! one connection made, opened or armed is seen by another: no state about a connection lives
//! anywhere else in `src/acp` (no statics).

use super::host_link::HostLink;
use super::initialize::ClientCapabilities;
use super::session::AcpSession;
use super::types::SessionUpdate;
use crate::jsonrpc::{lock, ClientCalls, Outbox};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The sessions a connection holds, by id.
pub type Sessions = Mutex<HashMap<String, Arc<AcpSession>>>;

/// One ACP connection's context, shared by its dispatcher, its workers and its session threads.
/// (Next: the principal the connection authenticated as.)
pub struct Shared {
    pub outbox: Outbox,
    pub calls: Arc<ClientCalls>,
    pub link: Arc<HostLink>,
    /// Whose names and shapes this connection speaks (`--acp`: Apache Maka's).
    pub dialect: super::Dialect,
    /// What the client said it supports, set by `initialize`; none before it.
    caps: Mutex<ClientCapabilities>,
    /// The sessions this connection holds (loaded, resumed, created or copied here).
    pub sessions: Sessions,
    /// What Maka's dialect keeps about this connection: the copies it made, its open uploads,
    /// its goals waiting for a prompt (each bounded per connection).
    pub maka: super::maka_dialect::Kept,
}

impl Shared {
    /// A new connection's context: no capabilities, no sessions, nothing of Maka's kept.
    pub fn new(
        outbox: Outbox,
        calls: Arc<ClientCalls>,
        link: Arc<HostLink>,
        dialect: super::Dialect,
    ) -> Shared {
        Shared {
            outbox,
            calls,
            link,
            dialect,
            caps: Mutex::default(),
            sessions: Mutex::default(),
            maka: Default::default(),
        }
    }

    /// What the client supports (as its last `initialize` said).
    pub fn caps(&self) -> ClientCapabilities {
        *lock(&self.caps)
    }

    pub fn set_caps(&self, caps: ClientCapabilities) {
        *lock(&self.caps) = caps;
    }

    /// Tells the client what the projection says happened, worded for this client
    /// ([`super::maka_dialect::told`]: ours, or Apache Maka's to a client that opted in).
    pub fn tell(&self, n: &super::projection::Notification) {
        if let Some((method, params)) = super::maka_dialect::told(&self.caps(), n) {
            self.outbox.notify(method, &params);
        }
    }

    /// Who this connection's configuration options are shown to: its client's taste in
    /// option kinds and its dialect.
    pub fn config_view(&self) -> super::config_options::View {
        super::config_options::View {
            boolean: self.caps().boolean_config_options,
            dialect: self.dialect,
        }
    }

    /// Enqueues one `session/update` (of a child session, for an update that belongs to one).
    pub fn update(&self, session_id: &str, update: &SessionUpdate) {
        let (session_id, update) = match update {
            SessionUpdate::InChild { session_id, update } => (session_id.as_str(), &**update),
            update => (session_id, update),
        };
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Params<'a> {
            session_id: &'a str,
            update: &'a SessionUpdate,
        }
        self.outbox
            .notify("session/update", &Params { session_id, update });
    }
}
