//! JSON-RPC 2.0 over newline-delimited JSON, by hand: message types, bounded line reading,
//! the transport threads (stdio, or a `maka-acp serve` connection), and the tables for requests in flight in both directions.

pub mod incoming;
pub mod line;
pub mod line_reader;
pub mod message;
pub mod outgoing;
pub mod oversized;
pub mod transport;

pub use incoming::{CancelFlag, Held, Responder, Withdrawal};
pub use line::{Head, Kind, Line, MetaSlot};
pub use message::{code, Message, Notification, Request, RequestId, Response, ResponseError};
pub use outgoing::{CallFailure, CallResult, ClientCalls, PendingCall};
#[cfg(feature = "host")]
pub(crate) use transport::{outbox_pair, Outgoing};
pub use transport::{Connection, Incoming, LineSink, Outbox};

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, recovering the data if another thread panicked while holding it. Release
/// builds abort on a panic (Cargo.toml says why), so this matters where panics unwind: tests
/// and debug builds, where a test's failed assertion must not cascade into every other lock.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
