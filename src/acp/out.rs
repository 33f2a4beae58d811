//! The two ways a connection writes a session's updates: [`Out<V1>`] and [`Out<V2>`]. Each
//! takes only its own version's update type, and each exists only on a connection that
//! negotiated that version ([`super::connection::Shared::v1`] / `v2` are the only makers), so a
//! v2 `state_update` has no path to a v1 client and a v1 `tool_call` none to a v2 client — the
//! compiler refuses the code that would try (a v1 facade that leaked a v2 update killed a
//! client: fontanierh/crab #263).

use crate::jsonrpc::Outbox;
use serde::Serialize;
use std::marker::PhantomData;

/// An ACP major version, as a type.
pub trait Protocol: Send + Sync + 'static {
    /// The number `initialize` answers with.
    const VERSION: u16;
    /// `session/update`'s `update`, in this version.
    type Update: Serialize;
}

/// ACP v1 (the default, and what every client before v2 speaks).
pub enum V1 {}
/// ACP v2 (the draft the TS SDK 2.4.0 ships as `experimental/v2`).
pub enum V2 {}

impl Protocol for V1 {
    const VERSION: u16 = 1;
    type Update = super::types::SessionUpdate;
}

impl Protocol for V2 {
    const VERSION: u16 = 2;
    type Update = super::v2::types::SessionUpdate;
}

/// The version a connection speaks, chosen once by its first successful `initialize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    /// What a client's `initialize.protocolVersion` picks: 2 or higher is v2 (the highest we
    /// speak at or below what it offered); anything lower, v1 (a v1 agent answers 1 to 0, as
    /// ACP v1 asks, and the client decides).
    pub fn for_offer(offered: u16) -> Version {
        if offered >= V2::VERSION {
            Version::V2
        } else {
            Version::V1
        }
    }
}

/// Writes one version's session updates on one connection.
pub struct Out<P: Protocol> {
    outbox: Outbox,
    _version: PhantomData<fn() -> P>,
}

impl<P: Protocol> Clone for Out<P> {
    fn clone(&self) -> Self {
        Out {
            outbox: self.outbox.clone(),
            _version: PhantomData,
        }
    }
}

impl<P: Protocol> Out<P> {
    /// Only the connection context makes one, for the version its client negotiated: the
    /// proof is constructible in `connection.rs` alone.
    pub(super) fn for_negotiated(outbox: &Outbox, _: super::connection::Negotiated) -> Out<P> {
        Out {
            outbox: outbox.clone(),
            _version: PhantomData,
        }
    }

    /// Enqueues one `session/update` of `session_id` (the only writer of the method).
    pub fn update(&self, session_id: &str, update: &P::Update) {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Params<'a, U> {
            session_id: &'a str,
            update: &'a U,
        }
        self.outbox
            .notify(session_id, "session/update", &Params { session_id, update });
    }
}
