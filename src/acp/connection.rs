//! The connection context ([`Shared`]): everything that belongs to one ACP connection, in one
//! value that the connection's dispatcher makes when the connection opens and that is dropped
//! with it (once the session threads still holding it have ended). On stdio a process holds one
//! connection; under `maka-acp serve` it holds many, each with a context of its own, so nothing
//! one connection made, opened or armed is seen by another: no state about a connection lives
//! anywhere else in `src/acp` (no statics).

use super::host_link::HostLink;
use super::initialize::ClientCapabilities;
use super::out::{Out, Version, V1, V2};
use super::principal::Principal;
use super::session::AcpSession;
use crate::jsonrpc::{lock, ClientCalls, Message, Outbox};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Proof that a writer is made for the version the connection negotiated: its field is
/// private, so only this file can make one ([`Shared::v1`], [`Shared::v2`]).
pub struct Negotiated(());

/// The sessions a connection holds, by id.
pub type Sessions = Mutex<HashMap<String, Arc<AcpSession>>>;

/// One ACP connection's context, shared by its dispatcher, its workers and its session threads.
pub struct Shared {
    pub outbox: Outbox,
    pub calls: Arc<ClientCalls>,
    /// The host, as this connection's principal sees it (every call names it).
    pub link: Arc<HostLink>,
    /// Who the connection acts for (`serve --tokens-file`); none: the machine's user.
    pub principal: Option<Arc<Principal>>,
    /// Whose names and shapes this connection speaks (`--acp`: Apache Maka's).
    pub dialect: super::Dialect,
    /// The ACP version the first successful `initialize` chose: fixed for the connection's
    /// life (a repeated `initialize` cannot change it).
    version: OnceLock<Version>,
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
        principal: Option<Arc<Principal>>,
    ) -> Shared {
        Shared {
            outbox,
            calls,
            link,
            principal,
            dialect,
            version: OnceLock::new(),
            caps: Mutex::default(),
            sessions: Mutex::default(),
            maka: Default::default(),
        }
    }

    /// Whether `logout` is served here: it removes the machine's stored provider key, which
    /// every connection of this process uses, so only the machine's user may (never a
    /// principal of `serve --tokens-file`).
    pub fn can_log_out(&self) -> bool {
        self.principal.is_none() && self.link.local().can_log_out()
    }

    /// Whether this connection may open one more session (its principal's share).
    pub fn may_open_session(&self) -> Result<(), crate::jsonrpc::ResponseError> {
        self.principal.as_ref().map_or(Ok(()), |p| p.may_open())
    }

    /// Holds `session` here (replacing this connection's previous view of it, returned).
    pub fn hold_session(&self, session: &Arc<AcpSession>) -> Option<Arc<AcpSession>> {
        let old = lock(&self.sessions).insert(session.id.clone(), Arc::clone(session));
        if let (None, Some(p)) = (&old, &self.principal) {
            p.opened();
        }
        old
    }

    /// Lets go of session `id` (closed, deleted or detached here).
    pub fn drop_session(&self, id: &str) {
        let gone = lock(&self.sessions).remove(id);
        if let (Some(_), Some(p)) = (gone, &self.principal) {
            p.closed(1);
        }
    }

    /// What the client supports (as its last `initialize` said).
    pub fn caps(&self) -> ClientCapabilities {
        *lock(&self.caps)
    }

    pub fn set_caps(&self, caps: ClientCapabilities) {
        *lock(&self.caps) = caps;
    }

    /// Fixes the connection's version (the first call wins); returns the one in force.
    pub fn negotiate(&self, version: Version) -> Version {
        *self.version.get_or_init(|| version)
    }

    /// The version the client negotiated; none before a successful `initialize`.
    pub fn version(&self) -> Option<Version> {
        self.version.get().copied()
    }

    /// The v1 writer, on a connection that negotiated v1 (the only way to get one).
    pub fn v1(&self) -> Option<Out<V1>> {
        (self.version() == Some(Version::V1))
            .then(|| Out::for_negotiated(&self.outbox, Negotiated(())))
    }

    /// The v2 writer, on a connection that negotiated v2 (the only way to get one).
    pub fn v2(&self) -> Option<Out<V2>> {
        (self.version() == Some(Version::V2))
            .then(|| Out::for_negotiated(&self.outbox, Negotiated(())))
    }

    /// Tells the client what the projection says happened, worded for this client
    /// ([`super::maka_dialect::told`]: ours, or Apache Maka's to a client that opted in).
    pub fn tell(&self, n: &super::projection::Notification) {
        if self.version() != Some(Version::V1) {
            return; // v1's notifications: a v2 client learns the same from `state_update`
        }
        if let Some((method, params)) = super::maka_dialect::told(&self.caps(), n) {
            self.outbox.send(&Message::notification(method, params));
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
}

/// The sessions a closed connection still held no longer count against its principal.
impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(p) = &self.principal {
            let held = self.sessions.get_mut().map_or(0, |s| s.len());
            p.closed(held);
        }
    }
}
