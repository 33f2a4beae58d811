//! Client→agent requests in flight: each gets exactly one response, even when it is cancelled
//! with `$/cancel_request` or its handler is dropped by mistake.

use super::lock;
use super::message::{Message, RequestId, ResponseError};
use super::transport::Outbox;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Set when the client cancelled the request; long handlers poll it between steps.
#[derive(Clone, Default, Debug)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
    fn set(&self) {
        self.0.store(true, Ordering::Release)
    }
    /// Whether both are the flag of one request (each request has its own).
    fn same(&self, other: &CancelFlag) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Methods whose `$/cancel_request` their handler answers ([`Responder::withdrawal`]) or
/// ignores: ACP v2's `session/prompt`, which only its session knows to be inserted.
pub type Held = &'static [&'static str];

pub struct IncomingRequests {
    /// Each request in flight: its flag and its method (whether its cancel is held is decided
    /// when the cancel comes: a request read before the protocol was negotiated is held too).
    inflight: Mutex<HashMap<RequestId, (CancelFlag, Box<str>)>>,
    /// Set once the connection's protocol says so ([`IncomingRequests::hold_cancels`]).
    held: OnceLock<Held>,
    /// Notified when the last request in flight is answered (see [`Self::wait_answered`]).
    drained: Condvar,
    outbox: Outbox,
}

/// The right (and duty) to answer one request.
pub struct Responder {
    id: Option<RequestId>,
    method: String,
    flag: CancelFlag,
    table: Arc<IncomingRequests>,
    /// How this connection words errors (a dialect's convention), applied to every answer.
    errors: Option<fn(ResponseError) -> ResponseError>,
}

impl IncomingRequests {
    pub fn new(outbox: Outbox) -> Arc<IncomingRequests> {
        Arc::new(IncomingRequests {
            inflight: Mutex::new(HashMap::new()),
            held: OnceLock::new(),
            drained: Condvar::new(),
            outbox,
        })
    }

    /// From now on (once: a connection's protocol is fixed), `held`'s cancels are held.
    pub fn hold_cancels(&self, held: Held) {
        let _ = self.held.set(held);
    }

    /// Registers a request. Fails when the id is already used by a request still in flight.
    pub fn begin(self: &Arc<Self>, id: RequestId, method: &str) -> Result<Responder, RequestId> {
        let mut inflight = lock(&self.inflight);
        if inflight.contains_key(&id) {
            return Err(id);
        }
        let flag = CancelFlag::default();
        inflight.insert(id.clone(), (flag.clone(), method.into()));
        Ok(Responder {
            id: Some(id),
            method: method.to_string(),
            flag,
            table: Arc::clone(self),
            errors: None,
        })
    }

    /// `$/cancel_request`: answers `-32800` now if the request is still being served; its
    /// handler's later answer is dropped. Unknown or finished ids are ignored; one of a [`Held`]
    /// method is left to its handler. Returns whether it was in flight (the handler is told).
    pub fn cancel(&self, id: &RequestId) -> bool {
        let held = self.held.get();
        if lock(&self.inflight)
            .get(id)
            .is_some_and(|(_, method)| held.is_some_and(|h| h.contains(&&**method)))
        {
            return true; // its handler decides
        }
        self.withdraw(id, None)
    }

    /// Answers request `id` `-32800` (only while it is the request of `own`, when given), as
    /// withdrawn: its handler's later answer is dropped. Returns whether it was in flight.
    fn withdraw(&self, id: &RequestId, own: Option<&CancelFlag>) -> bool {
        let Some(flag) = self.take(id, own) else {
            log::debug!("$/cancel_request for {id}, which is not in flight");
            return false;
        };
        flag.set();
        self.outbox.send(&Message::response(
            id.clone(),
            Err(ResponseError::cancelled()),
        ));
        true
    }

    /// Removes `id` from the table (only while it is the request of `own`, when given: after a
    /// cancel the id may name a newer request); the last one out wakes
    /// [`Self::wait_answered`].
    fn take(&self, id: &RequestId, own: Option<&CancelFlag>) -> Option<CancelFlag> {
        let mut inflight = lock(&self.inflight);
        if own.is_some_and(|own| !inflight.get(id).is_some_and(|(f, _)| f.same(own))) {
            return None;
        }
        let flag = inflight.remove(id).map(|(flag, _)| flag);
        if inflight.is_empty() {
            self.drained.notify_all();
        }
        flag
    }

    /// Waits (at most `timeout`) until every request registered so far has been answered.
    /// Returns how many are still in flight.
    pub fn wait_answered(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        let mut inflight = lock(&self.inflight);
        while !inflight.is_empty() {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            inflight = match self.drained.wait_timeout(inflight, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        inflight.len()
    }

    /// Answers every request still in flight with `error` (their handlers' later answers are
    /// dropped): the last word before the connection closes.
    pub fn answer_all(&self, error: &ResponseError) {
        let ids: Vec<(RequestId, (CancelFlag, Box<str>))> = lock(&self.inflight).drain().collect();
        for (id, (flag, _)) in ids {
            flag.set();
            self.outbox.send(&Message::response(id, Err(error.clone())));
        }
        self.drained.notify_all();
    }

    fn finish(&self, id: RequestId, own: &CancelFlag, result: Result<Value, ResponseError>) {
        if self.take(&id, Some(own)).is_some() {
            self.outbox.send(&Message::response(id, result));
        } else {
            log::debug!("request {id} was cancelled before its handler answered; answer dropped");
        }
    }
}

impl Responder {
    pub fn id(&self) -> Option<&RequestId> {
        self.id.as_ref()
    }

    pub fn method(&self) -> &str {
        &self.method
    }

    pub fn cancel_flag(&self) -> CancelFlag {
        self.flag.clone()
    }

    /// What answers it `-32800`, withdrawn, once a lock held to decide so is released.
    pub fn withdrawal(&self) -> Option<Withdrawal> {
        let id = self.id.clone()?;
        Some(Withdrawal(id, self.flag.clone(), Arc::clone(&self.table)))
    }

    /// Every error this responder answers passes through `map` first.
    pub fn map_errors(mut self, map: fn(ResponseError) -> ResponseError) -> Responder {
        self.errors = Some(map);
        self
    }

    pub fn respond(mut self, result: Result<Value, ResponseError>) {
        let result = match (result, self.errors) {
            (Err(e), Some(map)) => Err(map(e)),
            (r, _) => r,
        };
        if let Some(id) = self.id.take() {
            self.table.finish(id, &self.flag, result);
        }
    }
}

pub struct Withdrawal(RequestId, CancelFlag, Arc<IncomingRequests>);

impl Withdrawal {
    /// Answers `-32800`, unless it was answered already (a later answer is dropped).
    pub fn answer(self) {
        self.2.withdraw(&self.0, Some(&self.1));
    }
}

impl Drop for Responder {
    /// A handler that forgot to answer (or, where panics unwind, panicked) still produces a
    /// response, so the client never waits forever.
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            log::error!(
                "request {id} ({}) was dropped without an answer",
                self.method
            );
            self.table.finish(
                id,
                &self.flag,
                Err(ResponseError::internal(
                    "the request was dropped without an answer",
                )),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::transport::test_outbox;
    use serde_json::json;

    #[test]
    fn cancel_answers_once_and_drops_the_late_answer() {
        let (outbox, lines) = test_outbox();
        let table = IncomingRequests::new(outbox);
        let r = table.begin(RequestId::Int(7), "session/load").unwrap();
        assert!(
            table.begin(RequestId::Int(7), "x").is_err(),
            "duplicate id in flight"
        );
        assert!(table.cancel(&RequestId::Int(7)));
        assert!(r.cancel_flag().is_cancelled());
        r.respond(Ok(json!({})));
        assert!(!table.cancel(&RequestId::Int(7)));
        let sent: Vec<String> = lines.try_iter().collect();
        assert_eq!(
            sent,
            vec![
                r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"Request cancelled"}}"#
            ]
        );
    }

    #[test]
    fn a_dropped_responder_still_answers() {
        let (outbox, lines) = test_outbox();
        let table = IncomingRequests::new(outbox);
        drop(table.begin(RequestId::Str("a".into()), "m").unwrap());
        let sent: Vec<String> = lines.try_iter().collect();
        assert_eq!(sent.len(), 1);
        assert!(sent[0].contains(r#""id":"a","error":{"code":-32603"#));
    }

    /// A request cancelled with `$/cancel_request` is answered: its id may be used again at
    /// once (JSON-RPC allows it), and the cancelled handler's late answer is dropped — it does
    /// not take the place of the new request's answer.
    #[test]
    fn an_id_reused_after_a_cancel_gets_its_own_answer() {
        let (outbox, lines) = test_outbox();
        let table = IncomingRequests::new(outbox);
        let old = table.begin(RequestId::Int(3), "session/prompt").unwrap();
        assert!(table.cancel(&RequestId::Int(3)));
        let new = table.begin(RequestId::Int(3), "session/list").unwrap();
        old.respond(Ok(json!({"stopReason": "end_turn"})));
        assert!(
            table.begin(RequestId::Int(3), "x").is_err(),
            "the new request is still in progress"
        );
        new.respond(Ok(json!({"sessions": []})));
        let sent: Vec<String> = lines.try_iter().collect();
        assert_eq!(
            sent,
            vec![
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32800,"message":"Request cancelled"}}"#,
                r#"{"jsonrpc":"2.0","id":3,"result":{"sessions":[]}}"#,
            ]
        );
        assert_eq!(table.wait_answered(Duration::ZERO), 0);
    }

    /// A held method's `$/cancel_request` is answered by its handler's decision: withdrawn
    /// (`-32800` once, its late answer dropped) or answered as it is.
    #[test]
    fn a_held_cancel_is_answered_by_the_handlers_decision() {
        let (outbox, lines) = test_outbox();
        let table = IncomingRequests::new(outbox);
        table.hold_cancels(&["session/prompt"]);
        let (one, two) = (RequestId::Int(1), RequestId::Int(2));
        let withdrawn = table.begin(one.clone(), "session/prompt").unwrap();
        let kept = table.begin(two.clone(), "session/prompt").unwrap();
        assert!(table.cancel(&one) && table.cancel(&two) && lines.try_iter().next().is_none());
        withdrawn.withdrawal().unwrap().answer();
        withdrawn.respond(Ok(json!({"messageId": "late"})));
        kept.respond(Ok(json!({"messageId": "m"})));
        let sent: Vec<String> = lines.try_iter().collect();
        let cancelled =
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Request cancelled"}}"#;
        let answered = r#"{"jsonrpc":"2.0","id":2,"result":{"messageId":"m"}}"#;
        assert_eq!(sent, [cancelled, answered]);
    }

    /// A client that pipelines `initialize`, `session/load` and `session/prompt` has the prompt
    /// read (begun) before the dispatcher has negotiated v2 and set the hold. Its
    /// `$/cancel_request`, read after, must still be left to its session (which answers
    /// `-32800` only for a prompt the host never inserted), not answered here at once.
    #[test]
    fn a_request_begun_before_the_hold_was_set_has_its_cancel_held() {
        let (outbox, lines) = test_outbox();
        let table = IncomingRequests::new(outbox);
        let prompt = table.begin(RequestId::Int(3), "session/prompt").unwrap();
        table.hold_cancels(&["session/prompt"]);
        assert!(table.cancel(&RequestId::Int(3)));
        prompt.respond(Ok(json!({"messageId": "m"})));
        let sent: Vec<String> = lines.try_iter().collect();
        assert_eq!(
            sent,
            [r#"{"jsonrpc":"2.0","id":3,"result":{"messageId":"m"}}"#],
            "the cancel of a prompt begun before the hold was answered by the layer"
        );
    }
}
