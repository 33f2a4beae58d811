//! Agent→client requests (permission, elicitation, fs, terminal): ids, the pending table, and
//! routing of the client's responses back to the thread that waits for them.

use super::lock;
use super::message::{Message, RequestId, Response, ResponseError};
use super::transport::Outbox;
use crossbeam_channel::{bounded, Receiver, Sender};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;

pub type CallResult = Result<Value, ResponseError>;

/// Why [`ClientCalls::request`] has no result.
#[derive(Debug)]
pub enum CallFailure {
    /// The other side is gone.
    Closed,
    /// It answered with an error.
    Failed(ResponseError),
    TimedOut,
}

impl CallFailure {
    /// A sentence for a request of `method` to `who`.
    pub fn describe(&self, who: &str, method: &str, timeout: std::time::Duration) -> String {
        match self {
            CallFailure::Closed => format!("{who} stopped"),
            CallFailure::Failed(e) => e.message.clone(),
            CallFailure::TimedOut => {
                format!("no answer to {method} within {} s", timeout.as_secs())
            }
        }
    }
}

/// The table of requests this agent has sent to the client and not yet seen answered.
pub struct ClientCalls {
    next_id: AtomicI64,
    pending: Mutex<HashMap<RequestId, Sender<CallResult>>>,
    outbox: Outbox,
    closed: AtomicBool,
}

/// One request in flight to the client. The answer arrives on [`PendingCall::receiver`].
pub struct PendingCall {
    pub id: RequestId,
    rx: Receiver<CallResult>,
}

impl PendingCall {
    /// Blocks until the client answers (or the connection closes).
    pub fn wait(&self) -> CallResult {
        self.rx
            .recv()
            .unwrap_or_else(|_| Err(ResponseError::internal("connection closed")))
    }

    /// For `select!` against other events (a cancel, a host frame).
    pub fn receiver(&self) -> &Receiver<CallResult> {
        &self.rx
    }
}

impl ClientCalls {
    pub fn new(outbox: Outbox) -> ClientCalls {
        ClientCalls {
            next_id: AtomicI64::new(0),
            pending: Mutex::new(HashMap::new()),
            outbox,
            closed: AtomicBool::new(false),
        }
    }

    /// Sends `method` to the client and returns the handle to wait on.
    pub fn call(&self, method: &str, params: Value) -> PendingCall {
        let id = RequestId::Int(self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = bounded(1);
        if self.closed.load(Ordering::Acquire) {
            let _ = tx.send(Err(ResponseError::internal("connection closed")));
            return PendingCall { id, rx };
        }
        lock(&self.pending).insert(id.clone(), tx);
        self.outbox
            .send(&Message::request(id.clone(), method, params));
        PendingCall { id, rx }
    }

    /// Sends a request whose answer nobody waits for (e.g. releasing an editor terminal while
    /// shutting down). Works even after [`ClientCalls::close_all`]; the answer, if any, is
    /// logged as unknown and dropped.
    pub fn send_unawaited(&self, method: &str, params: Value) {
        let id = RequestId::Int(self.next_id.fetch_add(1, Ordering::Relaxed));
        self.outbox.send(&Message::request(id, method, params));
    }

    /// Routes a response from the client. Unknown ids are logged and dropped.
    pub fn complete(&self, response: Response) {
        match lock(&self.pending).remove(&response.id) {
            Some(tx) => {
                let _ = tx.send(response.result);
            }
            None => log::warn!(
                "dropping a response for unknown request id {} (never sent, or already answered)",
                response.id
            ),
        }
    }

    /// Asks the client to drop request `id` (`$/cancel_request`). The entry stays in the table:
    /// the client still answers (usually `-32800`), and that answer is still delivered.
    pub fn cancel(&self, id: &RequestId) {
        // Looked up, then sent without the table's lock: the stdin reader routes responses
        // through this table and must never wait for stdout.
        let pending = lock(&self.pending).contains_key(id);
        if pending {
            self.outbox.send(&Message::notification(
                "$/cancel_request",
                json!({ "requestId": id.to_value() }),
            ));
        }
    }

    /// One request, waited for at most `timeout` (a late answer is dropped): the one way every
    /// blocking caller (MCP servers, subagents) waits.
    pub fn request(
        &self,
        method: &str,
        params: Value,
        timeout: std::time::Duration,
    ) -> Result<Value, CallFailure> {
        if self.is_closed() {
            return Err(CallFailure::Closed);
        }
        let pending = self.call(method, params);
        match pending.receiver().recv_timeout(timeout) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(_)) if self.is_closed() => Err(CallFailure::Closed),
            Ok(Err(e)) => Err(CallFailure::Failed(e)),
            Err(_) => {
                self.forget(&pending.id);
                Err(CallFailure::TimedOut)
            }
        }
    }

    /// Stops waiting for request `id` (its caller gave up): a late answer is dropped.
    pub fn forget(&self, id: &RequestId) {
        lock(&self.pending).remove(id);
    }

    /// The client is gone: every waiter gets an error, later calls fail at once.
    pub fn close_all(&self) {
        self.closed.store(true, Ordering::Release);
        for (_, tx) in lock(&self.pending).drain() {
            let _ = tx.send(Err(ResponseError::internal("connection closed")));
        }
    }

    /// Fails every waiter without closing: the connection is being re-established (MCP over
    /// SSE after its stream dropped) and later calls go over the new one.
    pub fn fail_pending(&self, why: &str) {
        for (_, tx) in lock(&self.pending).drain() {
            let _ = tx.send(Err(ResponseError::internal(why)));
        }
    }

    /// Whether the client's side of the connection has closed (stdin EOF).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn pending_count(&self) -> usize {
        lock(&self.pending).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::transport::test_outbox;

    #[test]
    fn responses_reach_their_waiter_and_cancel_is_sent() {
        let (outbox, lines) = test_outbox();
        let calls = ClientCalls::new(outbox);
        let a = calls.call("session/request_permission", json!({"x": 1}));
        let b = calls.call("fs/read_text_file", json!({}));
        assert_eq!((&a.id, &b.id), (&RequestId::Int(0), &RequestId::Int(1)));
        calls.cancel(&a.id);
        calls.complete(Response {
            id: RequestId::Int(1),
            result: Ok(json!({"content": "x"})),
        });
        calls.complete(Response {
            id: RequestId::Int(0),
            result: Err(ResponseError::cancelled()),
        });
        assert_eq!(b.wait().unwrap(), json!({"content": "x"}));
        assert_eq!(a.wait().unwrap_err().code, -32800);
        let sent: Vec<String> = lines.try_iter().collect();
        assert_eq!(sent.len(), 3);
        assert_eq!(
            sent[2],
            r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":0}}"#
        );
        // A late or unknown response is dropped without effect.
        calls.complete(Response {
            id: RequestId::Int(0),
            result: Ok(json!({})),
        });
        assert_eq!(calls.pending_count(), 0);
    }

    #[test]
    fn close_all_wakes_waiters() {
        let (outbox, _lines) = test_outbox();
        let calls = ClientCalls::new(outbox);
        let a = calls.call("m", Value::Null);
        calls.close_all();
        assert!(a.wait().is_err());
        assert!(calls.call("m", Value::Null).wait().is_err());
    }
}
