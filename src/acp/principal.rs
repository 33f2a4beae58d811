//! Who a connection acts for. Over stdio, and under `maka-acp serve` with one token, that is
//! the machine's user (no [`Principal`]): who holds the host's token and may use every session
//! of the data dir. Under `serve --tokens-file` each connection acts for the principal whose
//! token opened it: its host calls name it (`Maka-Principal`), so the host shows it only the
//! sessions it made (the host keeps each session's owner), and it holds at most its share of
//! sessions open in this process, counted across all its connections.

use super::errors::MakaCode;
use crate::jsonrpc::ResponseError;
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Principal {
    pub name: String,
    /// Sessions its connections may hold open here at once (a reload of the tokens file may
    /// change it).
    max_sessions: AtomicUsize,
    open: AtomicUsize,
}

impl Principal {
    pub fn new(name: &str, max_sessions: usize) -> Principal {
        Principal {
            name: name.to_string(),
            max_sessions: AtomicUsize::new(max_sessions),
            open: AtomicUsize::new(0),
        }
    }

    pub fn set_max_sessions(&self, max: usize) {
        self.max_sessions.store(max, Ordering::Release);
    }

    /// Sessions its connections hold open now.
    pub fn open_sessions(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Whether another session may be opened (`session/new`, `load`, `resume`, a fork): the
    /// check before the host is asked. Connections opening sessions at the same moment may
    /// each pass it, so the share can be passed by the few opens in flight, never more.
    pub fn may_open(&self) -> Result<(), ResponseError> {
        let open = self.open_sessions();
        let max = self.max_sessions.load(Ordering::Acquire);
        if open < max {
            return Ok(());
        }
        Err(MakaCode::CapacityExceeded
            .error(format!(
                "{} already has {open} sessions open on this server, its share; close one (session/close) and try again",
                self.name
            ))
            .with_data(serde_json::json!({
                "principal": self.name,
                "openSessions": open,
                "maxSessions": max,
            })))
    }

    pub(super) fn opened(&self) {
        self.open.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn closed(&self, n: usize) {
        let _ = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |o| {
                Some(o.saturating_sub(n))
            });
    }
}
