//! One ACP session as this connection sees it: its bookkeeping, behind methods that keep its
//! rules — what the client sees is decided in `projection/` (held here as the view), shown
//! outside the live stream by `view.rs`, followed by `follow.rs`.
//!
//! Two locks, each with one rule:
//!
//! - `state` (the prompt, requests in flight in the client, terminals, the stream position and
//!   its reader, the goal's liveness) is held only for short sections that never block: never
//!   across a send to the client, an HTTP call or a wait. The dispatcher takes it (to register a
//!   prompt, to cancel), so nothing a client or a host does can stall the dispatcher through it.
//! - `view` (the [`Projector`]: what this client has been shown, the configuration as it was
//!   told) is held by the session thread that turns frames into updates, across enqueueing
//!   them, so that a session's updates leave in the order they were made. Only session threads
//!   (the reader, a load's worker, a call's thread, a configuration write's worker) take it;
//!   the dispatcher never does. Lock order: `view`, then `state`.

use super::connection::Shared;
use super::host_link::{Connected, HostLink};
use super::out::{Out, V1, V2};
use super::projection::config::ConfigEcho;
use super::projection::{self, Effect, Projector};
use super::types::{PromptResponse, SessionUpdate, StopReason};
use super::v2;
use crate::host_api::ops;
use crate::host_api::wire::FrameBody;
use crate::jsonrpc::{lock, RequestId, Responder, ResponseError, Withdrawal};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How a `session/prompt` is answered, by the connection's version.
pub enum PromptAnswer {
    /// v1: when its turn ends, with the stop reason.
    AtEnd(Responder),
    /// v2: when its user message is inserted (its turn started), with `{messageId}`; its end
    /// is then told by `state_update`. `None` once answered. With the client's blocks, which
    /// the inserted message echoes (v2 shows the prompt as the client sent it).
    OnInsert(Option<Responder>, Vec<serde_json::Value>),
}

impl PromptAnswer {
    /// The answer a connection of `shared`'s version gives a prompt of `blocks`.
    pub fn for_connection(
        shared: &Shared,
        responder: Responder,
        blocks: impl FnOnce() -> Vec<serde_json::Value>,
    ) -> PromptAnswer {
        match shared.version() {
            Some(super::out::Version::V2) => PromptAnswer::OnInsert(Some(responder), blocks()),
            _ => PromptAnswer::AtEnd(responder),
        }
    }

    /// v2: whether it is request `id`, not yet answered. Not once withdrawn (answered
    /// `-32800`): the client may use the id again for a new request, which a
    /// `$/cancel_request` then means.
    fn is_request(&self, id: &RequestId) -> bool {
        matches!(self, PromptAnswer::OnInsert(Some(r), _)
            if r.id() == Some(id) && !r.cancel_flag().is_cancelled())
    }

    /// v2: whether it was answered `-32800` (withdrawn: never to be inserted). A v1 prompt's
    /// `$/cancel_request` leaves its turn to run (v1 stops a turn with `session/cancel`).
    fn is_withdrawn_v2(&self) -> bool {
        matches!(self, PromptAnswer::OnInsert(Some(r), _) if r.cancel_flag().is_cancelled())
    }

    /// What answers it `-32800`, withdrawn (`None` once answered).
    fn withdrawal(&self) -> Option<Withdrawal> {
        match self {
            PromptAnswer::AtEnd(r) | PromptAnswer::OnInsert(Some(r), _) => r.withdrawal(),
            PromptAnswer::OnInsert(None, _) => None,
        }
    }

    /// Refuses it (it never ran) with `e`.
    pub fn refuse(self, e: ResponseError) {
        match self {
            PromptAnswer::AtEnd(r) | PromptAnswer::OnInsert(Some(r), _) => r.respond(Err(e)),
            PromptAnswer::OnInsert(None, _) => {}
        }
    }

    /// Whether the client withdrew it (`$/cancel_request`) before it was answered.
    fn withdrawn(&self) -> bool {
        match self {
            PromptAnswer::AtEnd(r) | PromptAnswer::OnInsert(Some(r), _) => {
                r.cancel_flag().is_cancelled()
            }
            PromptAnswer::OnInsert(None, _) => false,
        }
    }

    /// Answers it: v1 with its final answer; v2, if it was never inserted, with the error (a
    /// prompt cancelled before its turn started: `-32800`, as v2 asks of a held prompt).
    fn finish(self, result: Result<PromptResponse, ResponseError>, turn_id: &str, cancelled: bool) {
        match self {
            PromptAnswer::AtEnd(responder) => {
                let result = projection::answer::final_answer(result, turn_id, cancelled);
                responder.respond(result.map(|r| super::types::to_json(&r)));
            }
            // Its turn ended before its insertion was seen (a catch-up read past it): it
            // was inserted all the same, unless it was cancelled before it started.
            PromptAnswer::OnInsert(Some(responder), _) => responder.respond(match result {
                Err(e) => Err(e),
                Ok(_) if cancelled => Err(ResponseError::cancelled()),
                Ok(_) => Ok(super::types::to_json(&v2::types::PromptResponse {
                    message_id: v2::projection::user_message_id(turn_id),
                })),
            }),
            PromptAnswer::OnInsert(None, _) => {}
        }
    }
}

/// A `session/prompt` waiting for its turn to end.
struct PendingPrompt {
    answer: PromptAnswer,
    turn_id: String,
    /// `turn.start` has been sent: from here on the host may insert the prompt.
    start_sent: bool,
    /// `turn.start` has returned: `turn.stop` can be sent.
    started: bool,
    /// `turn.start` answered `queued` (another turn runs on the host: another client's, a
    /// goal's) and its `turn_started` has not been seen yet: the host holds it, and starts it
    /// when the session's active turn ends; a `turn.stop` takes it out of the host's queue,
    /// with no frame, so a cancel answers it here.
    queued_on_host: bool,
    cancel_requested: bool,
    /// Its `turn_started` has been seen (the host inserted it): whatever `turn.start` answers
    /// after that (`queued`: the host queued it, then started it from its queue before that
    /// answer was read), it is no longer in the host's queue.
    seen_started: bool,
    /// The client withdrew it (`$/cancel_request`) while its `turn.start` was in flight:
    /// decided when that returns — withdrawn if the host only queued it, ignored if the host
    /// inserted it ([`AcpSession::prompt_started`]).
    withdraw_asked: bool,
}

/// Prompts that wait behind the pending one at most (a `session/prompt` past it is busy).
pub const PROMPT_QUEUE: usize = 8;

/// A `session/prompt` sent while another ran: it waits here, in order, and becomes the
/// pending prompt when the one before it is answered ([`AcpSession::finish_prompt`]).
struct QueuedPrompt {
    answer: PromptAnswer,
    turn_id: String,
    /// Starts its turn (`turns::start`), on a thread of its own.
    start: Box<dyn FnOnce() + Send>,
}

impl PendingPrompt {
    fn new(answer: PromptAnswer, turn_id: &str) -> PendingPrompt {
        PendingPrompt {
            answer,
            turn_id: turn_id.to_string(),
            start_sent: false,
            started: false,
            queued_on_host: false,
            cancel_requested: false,
            seen_started: false,
            withdraw_asked: false,
        }
    }
}

/// How a `session/prompt` was admitted ([`AcpSession::admit_prompt`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// It is the pending prompt: start its turn.
    Now,
    /// It waits behind the pending prompt, at this place (1: next).
    Queued(usize),
}

/// What the session's threads share (behind `state`): seven plain parts.
#[derive(Default)]
struct SessionState {
    closed: bool,
    prompt: Option<PendingPrompt>,
    /// Prompts waiting behind `prompt` (never more than [`PROMPT_QUEUE`]; empty when `prompt`
    /// is `None`).
    queue: VecDeque<QueuedPrompt>,
    /// A turn this connection started without a prompt (`_session/steering`), until its end.
    unprompted: Option<String>,
    position: Position,
    editor: EditorRequests,
    goal: GoalState,
}

/// Where this connection is in the session's stream.
#[derive(Clone, Default)]
pub struct Position {
    /// The last frame seen and the host epoch it belongs to.
    pub last_seq: u64,
    pub epoch: Option<String>,
    /// The turn the host is running, as last observed on the stream.
    pub active_turn: Option<String>,
    /// The last durable transcript item this connection has seen (live or replayed): a
    /// catch-up after a gap starts after it.
    pub through: u64,
    /// A reader thread follows the stream.
    pub reader: bool,
}

/// What this session asks of the editor.
#[derive(Default)]
struct EditorRequests {
    /// Host interaction or invocation id → the ACP request in flight for it.
    outstanding: HashMap<String, RequestId>,
    /// Editor terminals created for this session and not yet released.
    terminals: HashSet<String>,
    /// Host operations in flight that may call the editor (a rewind restoring files through
    /// it): the reader follows the stream meanwhile, to forward those calls.
    ops: usize,
}

/// The session's goal, as far as following its turns goes.
#[derive(Default)]
struct GoalState {
    /// Live: its turns are followed (and shown) as they come.
    live: bool,
    /// The revision `live` was decided from (older states are ignored).
    revision: u64,
}

/// How long a prompt waits for the cancelled one before it to settle.
pub const CANCEL_SETTLE: Duration = Duration::from_secs(5);

/// What a session's client has been shown, with the writer it is shown through: one version's
/// projector paired with that version's output, so neither can show the other's updates.
pub enum View {
    V1(Projector, Out<V1>),
    V2(v2::projection::Projector, Out<V2>),
}

/// What a live frame leaves for the reader to do, by version.
pub enum Effects {
    V1(Vec<Effect>),
    V2(Vec<v2::projection::Effect>),
}

pub struct AcpSession {
    pub id: String,
    state: Mutex<SessionState>,
    view: Mutex<View>,
    prompt_done: Condvar,
    /// Set (under `view`) when the prompt was answered at stdin's end before its turn stopped:
    /// nothing more of this session is shown, since no update may follow the answer. Read
    /// under `view` on every emit, hence an atomic rather than a field of `state`.
    hushed: AtomicBool,
}

/// A frame that does not follow the last one seen (`last`): the stream skipped some.
pub struct OutOfSequence {
    pub last: u64,
}

/// What the reader should do next.
pub enum ReaderStep {
    /// Follow the stream after `after` in `epoch`.
    Follow { after: u64, epoch: Option<String> },
    /// Nothing left to follow: the reader has been marked stopped.
    Stop,
    /// The session was closed while a prompt waited: answer it `cancelled`.
    AnswerCancelled,
}

#[cfg(test)]
impl Effects {
    pub fn is_empty(&self) -> bool {
        match self {
            Effects::V1(e) => e.is_empty(),
            Effects::V2(e) => e.is_empty(),
        }
    }
}

impl AcpSession {
    /// A session with `view` (made by [`View::for_connection`]).
    pub fn with_view(id: &str, view: View) -> Arc<AcpSession> {
        Arc::new(AcpSession {
            id: id.to_string(),
            state: Mutex::new(SessionState::default()),
            view: Mutex::new(view),
            prompt_done: Condvar::new(),
            hushed: AtomicBool::new(false),
        })
    }

    /// The view of session `id` a client of `shared`'s version gets: v1's projector with
    /// the v1 writer, or v2's with the v2 writer. `shows`: what a v1 client can show beyond
    /// ACP's baseline. Before `initialize` chose a version there is none.
    pub fn for_connection(
        shared: &Shared,
        id: &str,
        shows: projection::Shows,
    ) -> Result<Arc<AcpSession>, ResponseError> {
        let view = match (shared.v1(), shared.v2()) {
            (Some(out), _) => View::V1(Projector::new(id, shows), out),
            (None, Some(out)) => View::V2(v2::projection::Projector::new(id, shows), out),
            (None, None) => return Err(ResponseError::new(
                crate::jsonrpc::code::INVALID_REQUEST,
                "This connection has not negotiated a protocol version; send `initialize` first",
            )),
        };
        Ok(AcpSession::with_view(id, view))
    }

    // ---- the view ------------------------------------------------------------------------

    /// Runs `f` on a v1 view and enqueues the updates it makes, in order, before any other
    /// thread can emit for this session. `None` on a v2 view, which `f` cannot show to (the
    /// caller is a v1-only path: an editor terminal, Maka's goal methods).
    pub fn emit_v1<R>(
        &self,
        f: impl FnOnce(&mut Projector) -> (Vec<SessionUpdate>, R),
    ) -> Option<R> {
        let mut view = lock(&self.view);
        let View::V1(projector, out) = &mut *view else {
            return None;
        };
        let (updates, r) = f(projector);
        if !self.hushed.load(Ordering::Acquire) {
            for u in &updates {
                send_v1(out, &self.id, u);
            }
        }
        Some(r)
    }

    /// Runs `v1` or `v2` on the view, whichever it is, and enqueues the updates it makes.
    pub fn emit<R>(
        &self,
        v1: impl FnOnce(&mut Projector) -> (Vec<SessionUpdate>, R),
        v2: impl FnOnce(&mut v2::projection::Projector) -> (Vec<v2::types::SessionUpdate>, R),
    ) -> R {
        let mut view = lock(&self.view);
        let hushed = self.hushed.load(Ordering::Acquire);
        match &mut *view {
            View::V1(projector, out) => {
                let (updates, r) = v1(projector);
                if !hushed {
                    for u in &updates {
                        send_v1(out, &self.id, u);
                    }
                }
                r
            }
            View::V2(projector, out) => {
                let (updates, r) = v2(projector);
                if !hushed {
                    for u in &updates {
                        out.update(&self.id, u);
                    }
                }
                r
            }
        }
    }

    /// A live frame (`seq`: its sequence number, which must follow the last one seen): what it
    /// tells the bookkeeping is recorded, then what it does ([`Projector::apply`]) — its
    /// updates and notifications are queued here, in order, under the view lock; the other
    /// effects are returned for the reader to perform, in order (after those: the prompt's
    /// answer never precedes them).
    pub fn apply(
        &self,
        shared: &Shared,
        seq: Option<u64>,
        body: FrameBody,
    ) -> Result<Effects, OutOfSequence> {
        let (prompt_turn, echo, withdrawn) = {
            let mut st = lock(&self.state);
            let last = st.position.last_seq;
            if seq.is_some_and(|seq| last.checked_add(1) != Some(seq)) {
                return Err(OutOfSequence { last });
            }
            let facts = projection::facts(&body);
            let starts = facts.turn_started.map(str::to_string);
            let prompt_turn = observe(&mut st, seq, facts);
            // v2 echoes the prompt's own blocks when its turn starts (copied only then) — unless
            // the client withdrew it (`$/cancel_request`, answered `-32800`: not inserted)
            // before this start was applied: then it is not shown, and its turn is stopped.
            let mut withdrawn = false;
            let echo = match (st.prompt.as_mut(), starts) {
                (Some(p), Some(t)) if p.turn_id == t => match &p.answer {
                    PromptAnswer::OnInsert(Some(r), _) if r.cancel_flag().is_cancelled() => {
                        p.cancel_requested = true;
                        withdrawn = true;
                        None
                    }
                    PromptAnswer::OnInsert(_, blocks) => Some(blocks.clone()),
                    PromptAnswer::AtEnd(_) => None,
                },
                _ => None,
            };
            (prompt_turn, echo, withdrawn)
        };
        let mut view = lock(&self.view);
        let hushed = self.hushed.load(Ordering::Acquire);
        match &mut *view {
            // Answered at stdin's end: nothing more is shown, asked or told.
            View::V1(..) if hushed => Ok(Effects::V1(vec![])),
            View::V2(..) if hushed => Ok(Effects::V2(vec![])),
            View::V1(projector, out) => {
                let mut rest = vec![];
                for effect in projector.apply(body, Instant::now(), prompt_turn.as_deref()) {
                    match effect {
                        Effect::Show(updates) => {
                            for u in &updates {
                                send_v1(out, &self.id, u);
                            }
                        }
                        Effect::Notify(n) => shared.tell(&n),
                        other => rest.push(other),
                    }
                }
                Ok(Effects::V1(rest))
            }
            View::V2(projector, out) => {
                let turn = v2::projection::TurnView {
                    prompt_turn: prompt_turn.as_deref(),
                    cancelled_by_client: self.is_cancelling(),
                    echo: echo.as_deref(),
                    withdrawn,
                };
                let mut rest = vec![];
                for effect in projector.apply(body, Instant::now(), turn) {
                    match effect {
                        v2::projection::Effect::Show(updates) => {
                            for u in &updates {
                                out.update(&self.id, u);
                            }
                        }
                        other => rest.push(other),
                    }
                }
                Ok(Effects::V2(rest))
            }
        }
    }

    // ---- the prompt ----------------------------------------------------------------------

    /// `_maka/turn/resume` and `_maka/plan/start`: makes `responder` the session's pending
    /// prompt for `turn_id`. Gives it back when a prompt is already pending (they are not
    /// queued: each acts on the session as it is when it is sent).
    ///
    /// A prompt the client has just cancelled is waited for (at most [`CANCEL_SETTLE`]). Any
    /// other pending prompt is busy.
    pub fn begin_prompt(&self, turn_id: &str, responder: Responder) -> Result<(), Responder> {
        // Waits only while the pending prompt is one the client cancelled.
        let mut st = wait_while(self, CANCEL_SETTLE, |st| {
            st.prompt.as_ref().is_some_and(|p| p.cancel_requested)
        });
        if st.prompt.is_some() {
            return Err(responder);
        }
        st.prompt = Some(PendingPrompt::new(PromptAnswer::AtEnd(responder), turn_id));
        Ok(())
    }

    /// `session/prompt`: makes `responder` the pending prompt for `turn_id` when none is
    /// ([`Admission::Now`]: the caller starts its turn), else puts it in the queue behind it,
    /// with the start `queued()` makes ([`Admission::Queued`]: started when the one before it
    /// is answered). Never waits: a `session/cancel` read after it is acted on at once. Gives
    /// the responder back when [`PROMPT_QUEUE`] prompts wait already (not counting those the
    /// client withdrew with `$/cancel_request`, which are dropped here and never start).
    ///
    /// Editors send a new message by cancelling the running prompt and prompting at once: the
    /// new prompt waits behind the cancelled one, which settles a few milliseconds later.
    pub fn admit_prompt(
        &self,
        turn_id: &str,
        answer: PromptAnswer,
        queued: impl FnOnce() -> Box<dyn FnOnce() + Send>,
    ) -> Result<Admission, PromptAnswer> {
        // Declared before the guard, so dropped after the lock is released.
        let _withdrawn: VecDeque<QueuedPrompt>;
        let mut st = lock(&self.state);
        if st.prompt.is_none() {
            st.prompt = Some(PendingPrompt::new(answer, turn_id));
            return Ok(Admission::Now);
        }
        _withdrawn = take_withdrawn(&mut st.queue);
        if st.queue.len() >= PROMPT_QUEUE {
            return Err(answer);
        }
        st.queue.push_back(QueuedPrompt {
            answer,
            turn_id: turn_id.to_string(),
            start: queued(),
        });
        Ok(Admission::Queued(st.queue.len()))
    }

    /// `turn.start` of `turn_id` returned (`queued_on_host`: it answered `queued`). Returns
    /// whether the client cancelled meanwhile (then the turn must be stopped now). A prompt
    /// answered at stdin's end meanwhile ([`AcpSession::answer_cancelled_at_exit`]) stops its
    /// turn too: nobody follows it. Only the pending prompt of `turn_id` is its: one answered
    /// meanwhile (its turn ran and ended before this answer was read) has left its place to
    /// the next, whose own `turn.start` decides for it.
    pub fn prompt_started(&self, turn_id: &str, queued_on_host: bool) -> bool {
        let mut st = lock(&self.state);
        match st.prompt.as_mut().filter(|p| p.turn_id == turn_id) {
            Some(p) => {
                // Started from the host's queue before this answer was read: inserted.
                let inserted =
                    p.seen_started || matches!(p.answer, PromptAnswer::OnInsert(None, _));
                let queued_on_host = queued_on_host && !inserted;
                p.started = true;
                p.queued_on_host = queued_on_host;
                if std::mem::take(&mut p.withdraw_asked) {
                    if queued_on_host {
                        // Withdrawn: its `turn.stop` takes it out of the host's queue, and
                        // its answer says whether it did ([`stop_queued_turn`]).
                        p.cancel_requested = true;
                    } else {
                        log::debug!(
                            "session {}: prompt {} was inserted before its withdrawal; the cancel is ignored",
                            self.id,
                            p.turn_id
                        );
                    }
                }
                p.cancel_requested
            }
            None => self.hushed.load(Ordering::Acquire),
        }
    }

    /// The `turn.start` of the pending prompt of `turn_id` is about to be sent: false (send
    /// nothing) when the client cancelled it, withdrew it or closed the session meanwhile, or
    /// it is no longer the pending prompt (answered meanwhile). From here on the host may
    /// insert it, so a withdrawal waits for `turn.start`'s answer.
    pub fn start_sending(&self, turn_id: &str) -> bool {
        let mut st = lock(&self.state);
        if st.closed {
            return false;
        }
        match st.prompt.as_mut().filter(|p| p.turn_id == turn_id) {
            // v2: a prompt answered `-32800` (by its session, or by the JSON-RPC layer for a
            // prompt read before the hold was set) is not inserted, so it never starts.
            Some(p) if !p.cancel_requested && !p.answer.is_withdrawn_v2() => {
                p.start_sent = true;
                true
            }
            _ => false,
        }
    }

    /// The turn the pending prompt waits for.
    pub fn prompt_turn(&self) -> Option<String> {
        lock(&self.state).prompt.as_ref().map(|p| p.turn_id.clone())
    }

    /// The turn the pending prompt waits for, once the host has started it (before, the host
    /// has no record of it: its `turn.start` is in flight, or it waits in the host's queue).
    pub fn started_prompt_turn(&self) -> Option<String> {
        let st = lock(&self.state);
        st.prompt
            .as_ref()
            .filter(|p| p.started && !p.queued_on_host)
            .map(|p| p.turn_id.clone())
    }

    /// Whether the client cancelled the prompt or closed the session: a dialog's refusal then
    /// is the cancel's, not the person's answer.
    pub fn is_cancelling(&self) -> bool {
        let st = lock(&self.state);
        st.closed || st.prompt.as_ref().is_some_and(|p| p.cancel_requested)
    }

    /// The prompt could not start (no host, `turn.start` refused), or its turn ended: answers it
    /// ([`projection::answer::final_answer`]) and wakes whoever waits for it (`session/close`).
    /// The next queued prompt then becomes the pending one, in the same section (a reader
    /// deciding whether to go on sees it), and its turn starts on a thread of its own, after
    /// this answer is queued: its turn's first update follows the answer before it. A closed
    /// or hushed session starts nothing more: what is queued is answered `cancelled`.
    pub fn finish_prompt(&self, result: Result<PromptResponse, ResponseError>) {
        let (prompt, next, dropped, _withdrawn) = {
            let mut st = lock(&self.state);
            let prompt = st.prompt.take();
            let withdrawn = take_withdrawn(&mut st.queue);
            if st.closed || self.hushed.load(Ordering::Acquire) {
                (prompt, None, st.queue.drain(..).collect(), withdrawn)
            } else {
                let next = st.queue.pop_front().map(|q| {
                    st.prompt = Some(PendingPrompt::new(q.answer, &q.turn_id));
                    (q.turn_id, q.start)
                });
                (prompt, next, Vec::new(), withdrawn)
            }
        };
        if let Some(p) = prompt {
            p.answer.finish(result, &p.turn_id, p.cancel_requested);
        }
        answer_queued_cancelled(dropped);
        {
            // Notified under the lock the waiter checks, so the wake-up cannot be missed.
            let _st = lock(&self.state);
            self.prompt_done.notify_all();
        }
        if let Some((turn_id, start)) = next {
            log::debug!("session {}: starting queued prompt {turn_id}", self.id);
            let name = format!("acp-queued-{}", self.id);
            if crate::threads::spawn(name, start).is_none() {
                self.finish_prompt(Err(super::errors::MakaCode::Internal.error(
                    "maka-acp could not start a thread for this queued prompt; send it again",
                )));
            }
        }
    }

    /// [`AcpSession::finish_prompt`], if the pending prompt is still the one for `turn_id`.
    pub fn finish_prompt_of(&self, turn_id: &str, result: Result<PromptResponse, ResponseError>) {
        if self.prompt_turn().as_deref() == Some(turn_id) {
            self.finish_prompt(result);
        }
    }

    /// Waits until no prompt is pending (bounded).
    pub fn wait_prompt_done(&self, timeout: Duration) {
        drop(wait_while(self, timeout, |st| st.prompt.is_some()));
    }

    /// Marks the pending prompt cancelled (a turn not yet started never starts; one starting
    /// is stopped as soon as `turn.start` returns), answers every queued prompt `cancelled`
    /// and withdraws every request its turn has open in the client. Returns the started turn
    /// that the host must be asked to stop.
    pub fn cancel_prompt(&self, shared: &Shared) -> Option<ToStop> {
        let (turn, started, on_host_queue, repeated, outstanding, queued) = {
            let mut st = lock(&self.state);
            let Some(p) = st.prompt.as_mut() else {
                // A turn this connection started without a prompt (`_session/steering`) is
                // stopped like a prompt's.
                if let Some(turn) = st.unprompted.clone() {
                    let outstanding = take_outstanding(&mut st);
                    drop(st);
                    withdraw_all(shared, outstanding);
                    return Some(ToStop::Running(turn));
                }
                log::debug!(
                    "session/cancel for {} with no prompt running: nothing to do",
                    self.id
                );
                return None;
            };
            let repeated = std::mem::replace(&mut p.cancel_requested, true);
            let (turn, started, on_host_queue) = (p.turn_id.clone(), p.started, p.queued_on_host);
            // Every prompt waiting behind it is cancelled too: answered now (none started).
            let queued: Vec<QueuedPrompt> = st.queue.drain(..).collect();
            (
                turn,
                started,
                on_host_queue,
                repeated,
                take_outstanding(&mut st),
                queued,
            )
        };
        answer_queued_cancelled(queued);
        withdraw_all(shared, outstanding);
        match (started, on_host_queue) {
            // Cancelled already (a `session/cancel`, a withdrawal): its stop was sent, and
            // decides (a repeated cancel sends no other).
            (true, true) if repeated => Some(ToStop::Stopping(turn)),
            (true, true) => Some(ToStop::HostQueued(turn)),
            (true, false) => Some(ToStop::Running(turn)),
            (false, _) => None,
        }
    }

    /// At stdin's end: [`AcpSession::cancel_prompt`], a prompt waiting in the host's queue
    /// answered at once (nobody follows it any more). Returns the turn to stop.
    pub fn cancel_at_exit(&self, shared: &Shared) -> Option<String> {
        match self.cancel_prompt(shared)? {
            ToStop::Running(turn) => Some(turn),
            ToStop::HostQueued(turn) | ToStop::Stopping(turn) => {
                self.finish_prompt_of(&turn, Ok(PromptResponse::new(StopReason::Cancelled)));
                Some(turn)
            }
        }
    }

    /// Stdin closed and the prompt's turn did not stop in time: settles its open tool calls,
    /// answers it `cancelled` now, and shows nothing more of this session (its reader may still
    /// be following the turn, and no update may follow the answer). Under the view lock, so an
    /// update being shown goes out before the answer and none after it.
    pub fn answer_cancelled_at_exit(&self, shared: &Shared) {
        let mut view = lock(&self.view);
        if self.prompt_turn().is_none() || self.hushed.load(Ordering::Acquire) {
            return;
        }
        let why = projection::TOOL_UNFINISHED;
        match &mut *view {
            View::V1(projector, out) => {
                for u in &projector.close_open_tools(why) {
                    send_v1(out, &self.id, u);
                }
            }
            View::V2(projector, out) => {
                for u in &projector.end_unfinished(why, true) {
                    out.update(&self.id, u);
                }
            }
        }
        let _ = shared;
        self.hushed.store(true, Ordering::Release);
        self.finish_prompt(Ok(PromptResponse::new(StopReason::Cancelled)));
    }

    // ---- closing -------------------------------------------------------------------------

    /// Marks the session closed (nothing new is shown or asked; queued prompts are answered
    /// `cancelled`); returns the turn its prompt started, if one runs.
    pub fn close(&self) -> Option<String> {
        let (running, queued) = {
            let mut st = lock(&self.state);
            st.closed = true;
            let running = st
                .prompt
                .as_ref()
                .filter(|p| p.started)
                .map(|p| p.turn_id.clone())
                .or_else(|| st.unprompted.clone());
            (running, st.queue.drain(..).collect())
        };
        answer_queued_cancelled(queued);
        running
    }

    pub fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    /// Closes the session and withdraws every request it has open in the client.
    pub fn close_and_withdraw(&self, shared: &Shared) {
        let ids = {
            let mut st = lock(&self.state);
            st.closed = true;
            take_outstanding(&mut st)
        };
        withdraw_all(shared, ids);
    }

    // ---- requests in flight in the client -------------------------------------------------

    /// Records the client request `request` made for host item `key` (an interaction or an
    /// invocation). False when the session was closed meanwhile: the caller withdraws the
    /// request itself. (After a `session/cancel` requests are still tracked: the host's
    /// clean-up — killing and releasing a terminal — runs through them.)
    pub fn track(&self, key: &str, request: RequestId) -> bool {
        let mut st = lock(&self.state);
        if st.closed {
            return false;
        }
        st.editor.outstanding.insert(key.to_string(), request);
        true
    }

    /// Forgets `key`: its request, when it was still tracked (nobody withdrew it).
    pub fn untrack(&self, key: &str) -> Option<RequestId> {
        lock(&self.state).editor.outstanding.remove(key)
    }

    pub fn is_tracked(&self, key: &str) -> bool {
        lock(&self.state).editor.outstanding.contains_key(key)
    }

    // ---- editor terminals -----------------------------------------------------------------

    /// Editor terminal `id` was created (`open`) or released.
    pub fn note_terminal(&self, id: &str, open: bool) {
        let terminals = &mut lock(&self.state).editor.terminals;
        if open {
            terminals.insert(id.to_string());
        } else {
            terminals.remove(id);
        }
    }

    pub fn take_terminals(&self) -> Vec<String> {
        lock(&self.state).editor.terminals.drain().collect()
    }

    // ---- the stream position --------------------------------------------------------------

    /// Records the position a `session.open` snapshot gave.
    pub fn set_position(&self, seq: u64, epoch: &str, active_turn: Option<String>) {
        let mut st = lock(&self.state);
        st.position.last_seq = seq;
        st.position.epoch = Some(epoch.to_string());
        st.position.active_turn = active_turn;
    }

    /// Where this connection is in the session's stream.
    pub fn position(&self) -> Position {
        lock(&self.state).position.clone()
    }

    /// A turn this connection starts without a prompt (`_session/steering`): followed from
    /// before it starts until its own end is seen — whatever the stream says of earlier turns
    /// or a re-read snapshot — and stopped by a cancel, a close or stdin's end, as a prompt's.
    /// `expected` false: it did not start after all (no longer followed for it).
    pub fn expect_turn(&self, turn_id: &str, expected: bool) {
        let mut st = lock(&self.state);
        if expected {
            st.unprompted = Some(turn_id.to_string());
        } else {
            let ended = projection::Facts {
                turn_ended: Some(turn_id),
                ..Default::default()
            };
            observe(&mut st, None, ended);
        }
    }

    pub fn saw_through(&self, seq: u64) {
        let mut st = lock(&self.state);
        st.position.through = st.position.through.max(seq);
    }

    // ---- the reader ----------------------------------------------------------------------

    /// Marks a reader as running; false when one already runs.
    pub fn claim_reader(&self) -> bool {
        let mut st = lock(&self.state);
        !std::mem::replace(&mut st.position.reader, true)
    }

    /// The reader stops; `host_gone`: its host is gone, so the position means nothing any
    /// more.
    pub fn release_reader(&self, host_gone: bool) {
        let mut st = lock(&self.state);
        st.position.reader = false;
        st.position.active_turn = None;
        if host_gone {
            st.position.epoch = None;
        }
    }

    /// The reader's next step, decided (and, for `Stop`, recorded) in one section.
    pub fn reader_step(&self, default_epoch: &str) -> ReaderStep {
        let mut st = lock(&self.state);
        if st.closed && st.prompt.is_some() {
            return ReaderStep::AnswerCancelled;
        }
        if st.closed || nothing_to_follow(&st) {
            st.position.reader = false;
            return ReaderStep::Stop;
        }
        ReaderStep::Follow {
            after: st.position.last_seq,
            epoch: Some(
                st.position
                    .epoch
                    .clone()
                    .unwrap_or_else(|| default_epoch.to_string()),
            ),
        }
    }

    /// Whether nothing is left to follow (the followed turn is over, no prompt waits).
    pub fn idle(&self) -> bool {
        nothing_to_follow(&lock(&self.state))
    }

    /// A state of the goal (from the stream, or an answer): whether to keep following. An
    /// older state than one already seen changes nothing (a frame the reader is behind on
    /// must not undo a resume the client just made). Returns whether it was applied.
    pub fn goal_seen(&self, goal: &crate::host_api::wire::Goal) -> bool {
        see_goal(&mut lock(&self.state), goal)
    }

    /// Runs `op` (a host call that may call the editor) with the stream followed meanwhile,
    /// so the editor calls it makes reach the client.
    pub fn with_editor_calls<T>(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        conn: &Connected,
        op: impl FnOnce() -> T,
    ) -> T {
        lock(&self.state).editor.ops += 1;
        super::follow::ensure_reader(self, shared, conn, None);
        let out = op();
        lock(&self.state).editor.ops -= 1;
        out
    }

    // ---- configuration ----------------------------------------------------------------------

    /// Runs `f` on the session's configuration as the client was told it, and queues the
    /// updates it makes (under the view lock, in order with the session's other updates).
    pub fn configure<R>(&self, f: impl FnOnce(&mut ConfigEcho) -> (Vec<SessionUpdate>, R)) -> R {
        let mut view = lock(&self.view);
        let hushed = self.hushed.load(Ordering::Acquire);
        match &mut *view {
            View::V1(projector, out) => {
                let (updates, r) = f(&mut projector.config);
                if !hushed {
                    for u in &updates {
                        send_v1(out, &self.id, u);
                    }
                }
                r
            }
            View::V2(projector, out) => {
                let (updates, r) = f(&mut projector.config);
                if !hushed {
                    for u in &v2::projection::config::from_echo(&updates) {
                        out.update(&self.id, u);
                    }
                }
                r
            }
        }
    }

    /// v2: the pending prompt's user message was inserted (its turn started): its answer,
    /// `{messageId}`, to be sent by the caller after the message's update. `None` when the
    /// pending prompt is not `turn_id`'s or was answered already.
    pub fn accept_prompt(&self, turn_id: &str) -> Option<Responder> {
        let mut st = lock(&self.state);
        let p = st.prompt.as_mut().filter(|p| p.turn_id == turn_id)?;
        match &mut p.answer {
            // Withdrawn (answered `-32800`): never answered as inserted.
            PromptAnswer::OnInsert(Some(r), _) if r.cancel_flag().is_cancelled() => None,
            PromptAnswer::OnInsert(r, _) => r.take(),
            PromptAnswer::AtEnd(_) => None,
        }
    }

    /// The client withdrew prompt `id` (`$/cancel_request`, left to this session by the
    /// JSON-RPC layer: [`HELD_CANCELS`]). Decided here, where the prompt's
    /// insertion is known, so that `-32800` means the host's history never holds it:
    ///
    /// - waiting in this adapter's queue, or its `turn.start` not sent yet: withdrawn, never
    ///   started;
    /// - `turn.start` in flight: decided when it returns ([`AcpSession::prompt_started`]);
    /// - waiting in the host's queue: its turn stopped (the returned turn), and answered
    ///   `-32800` once the stop's answer says it took the turn out of that queue — not if the
    ///   host started it meanwhile, which inserted it ([`stop_queued_turn`]);
    /// - inserted (its turn started on the host): the cancel is ignored, as v2 asks of a
    ///   request already done; the prompt is answered with its message id.
    ///
    /// v1 holds no cancel: the JSON-RPC layer answers a v1 prompt's `-32800` at once, as every
    /// request's, and its turn goes on (v1 stops a turn with `session/cancel`); a v1 prompt
    /// withdrawn from the adapter's queue is dropped there ([`take_withdrawn`]).
    pub fn withdraw_prompt(&self, id: &RequestId) -> Withdraw {
        let (outcome, withdrawal, dropped) = {
            let mut st = lock(&self.state);
            if let Some(p) = st.prompt.as_mut().filter(|p| p.answer.is_request(id)) {
                let outcome = if !p.start_sent {
                    p.cancel_requested = true;
                    Withdraw::Settled
                } else if !p.started {
                    p.withdraw_asked = true;
                    Withdraw::Deferred
                } else if p.queued_on_host && p.cancel_requested {
                    // Its stop is on its way (a repeated cancel): that stop decides.
                    Withdraw::Deferred
                } else if p.queued_on_host {
                    p.cancel_requested = true;
                    Withdraw::StopTurn(p.turn_id.clone())
                } else {
                    Withdraw::Inserted
                };
                // Taken out of the host's queue: answered once the stop says it was
                // ([`stop_queued_turn`]).
                let decided = matches!(outcome, Withdraw::Settled);
                let withdrawal = decided.then(|| p.answer.withdrawal()).flatten();
                (outcome, withdrawal, None)
            } else if let Some(at) = st.queue.iter().position(|q| q.answer.is_request(id)) {
                (Withdraw::Settled, None, st.queue.remove(at))
            } else {
                (Withdraw::NotHere, None, None)
            }
        };
        log::debug!(
            "session {}: withdrawal of prompt {id}: {outcome:?}",
            self.id
        );
        if let Some(w) = withdrawal {
            w.answer();
        }
        // Taken out of the queue, its turn never started: answered as withdrawn.
        if let Some(q) = dropped {
            q.answer.refuse(ResponseError::cancelled());
        }
        outcome
    }
}

/// A cancelled prompt's turn, which the host must be asked to stop ([`AcpSession::cancel_prompt`]).
#[derive(Debug, PartialEq, Eq)]
pub enum ToStop {
    /// Running on the host.
    Running(String),
    /// Waiting in the host's queue, or started from it since: [`stop_queued_turn`] answers
    /// the prompt if the stop takes it out (no frame will).
    HostQueued(String),
    /// [`ToStop::HostQueued`], whose stop was sent already (a repeated cancel): that stop
    /// decides, and nothing more is sent for it (but at stdin's end).
    Stopping(String),
}

/// What a prompt's withdrawal came to ([`AcpSession::withdraw_prompt`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Withdraw {
    /// No prompt of this session is that request.
    NotHere,
    /// Answered `-32800`; nothing started for it.
    Settled,
    /// Decided when its `turn.start` returns (or the stop already sent for it).
    Deferred,
    /// The host had queued its turn, which must be stopped ([`stop_queued_turn`]: answered
    /// `-32800` if that takes it out of the queue).
    StopTurn(String),
    /// The host had inserted it: the cancel is ignored.
    Inserted,
}

/// The methods whose `$/cancel_request` the JSON-RPC layer of a v2 connection leaves to
/// [`withdrawn`]: a prompt is withdrawn (`-32800`) only if the host has not inserted it; once
/// it has, the request is answered as inserted and the cancel is ignored, so that what the
/// client is told and what the session's history keeps agree.
pub const HELD_CANCELS: crate::jsonrpc::Held = &["session/prompt"];

/// `$/cancel_request` of a request in flight (the JSON-RPC layer answered it `-32800`, unless
/// it is a v2 prompt, [`HELD_CANCELS`]): a v2 prompt the host has not inserted is withdrawn
/// here ([`AcpSession::withdraw_prompt`]); anything else goes on as the layer left it.
pub fn withdrawn(ctx: &super::agent::Ctx, params: &serde_json::Value) {
    let Some(id) = params.get("requestId").and_then(RequestId::from_value) else {
        return;
    };
    let sessions: Vec<_> = lock(&ctx.shared.sessions).values().cloned().collect();
    for s in sessions {
        match s.withdraw_prompt(&id) {
            Withdraw::NotHere => continue,
            Withdraw::StopTurn(turn) => stop_queued_turn_apart(&ctx.shared, &s, turn),
            _ => {}
        }
        return;
    }
}

/// [`stop_queued_turn`] on a thread of its own (a host call: never on the dispatcher); without
/// one, the prompt is answered as taken out.
fn stop_queued_turn_apart(shared: &Arc<Shared>, session: &Arc<AcpSession>, turn: String) {
    let (shared, on_thread, t) = (Arc::clone(shared), Arc::clone(session), turn.clone());
    let stop = move || stop_queued_turn(&shared, &on_thread, &t);
    if crate::threads::spawn("acp-turn-stop", stop).is_none() {
        session.finish_prompt_of(&turn, Ok(PromptResponse::new(StopReason::Cancelled)));
    }
}

/// Stops turn `turn_id` of the pending prompt, which waits in the host's queue — or did: the
/// host may have started it since (the turn before it ended). `turn.stop` takes a queued turn
/// out with no frame, and says so (its snapshot names no run): the prompt, which never ran, is
/// answered here (`cancelled`; v2: `-32800`, as a withdrawn prompt). A turn the host had
/// started was inserted: it ends by its frames, as any stopped turn, and its prompt is answered
/// by the reader (v2: with its message id). When the host cannot say, the prompt is answered
/// here, as taken out. Calls the host: never on the dispatcher.
pub fn stop_queued_turn(shared: &Shared, session: &AcpSession, turn_id: &str) {
    let input = ops::TurnRef {
        session_id: session.id.clone(),
        turn_id: turn_id.to_string(),
        run_id: None,
    };
    let taken_out = match shared.link.get() {
        Ok(conn) => match conn.call::<ops::TurnStop>(&input) {
            Ok(snapshot) => snapshot.run_id.is_empty(),
            Err(e) => {
                log::warn!("turn.stop for {}/{turn_id}: {e}", session.id);
                true
            }
        },
        Err(e) => {
            log::warn!("turn.stop for {}/{turn_id}: {}", session.id, e.message);
            true
        }
    };
    if taken_out {
        let cancelled = Ok(PromptResponse::new(StopReason::Cancelled));
        session.finish_prompt_of(turn_id, cancelled);
    } else {
        log::debug!(
            "session {}: prompt {turn_id} started on the host before its stop: inserted",
            session.id
        );
    }
}

/// Threads that send a batch of `turn.stop`s: at stdin's end every running turn is stopped,
/// and a thousand of them cost this many threads, not a thousand.
const TURN_STOPPERS: usize = 8;

/// Asks the host to stop each `(session, turn)`, on at most [`TURN_STOPPERS`] threads, without
/// waiting for them.
pub fn stop_turns(link: &Arc<HostLink>, turns: Vec<(String, String)>) {
    let link = Arc::clone(link);
    crate::threads::for_each("acp-turn-stop", TURN_STOPPERS, turns, move |(id, turn)| {
        send_turn_stop(&link, &id, &turn)
    });
}

fn send_turn_stop(link: &HostLink, id: &str, turn: &str) {
    match link.get() {
        Ok(conn) => {
            let input = ops::TurnRef {
                session_id: id.to_string(),
                turn_id: turn.to_string(),
                run_id: None,
            };
            if let Err(e) = conn.call::<ops::TurnStop>(&input) {
                log::warn!("turn.stop for {id}/{turn}: {e}");
            }
        }
        Err(e) => log::warn!("turn.stop for {id}/{turn}: {}", e.message),
    }
}

/// One v1 update (of a child session, for an update that belongs to one).
fn send_v1(out: &Out<V1>, session_id: &str, update: &SessionUpdate) {
    match update {
        SessionUpdate::InChild { session_id, update } => out.update(session_id, update),
        update => out.update(session_id, update),
    }
}

/// A state of the goal: whether it was applied (an older one than seen is not).
fn see_goal(st: &mut SessionState, goal: &crate::host_api::wire::Goal) -> bool {
    if goal.revision < st.goal.revision {
        return false;
    }
    st.goal.revision = goal.revision;
    st.goal.live = goal.is_live();
    true
}

/// No prompt waits, no turn runs, no host call may call the editor and no goal is live.
fn nothing_to_follow(st: &SessionState) -> bool {
    st.prompt.is_none()
        && st.unprompted.is_none()
        && st.position.active_turn.is_none()
        && st.editor.ops == 0
        && !st.goal.live
}

/// The client requests in flight, taken out of the table: each is withdrawn exactly once, and
/// its waiter sees that it was withdrawn.
fn take_outstanding(st: &mut SessionState) -> Vec<RequestId> {
    st.editor.outstanding.drain().map(|(_, r)| r).collect()
}

/// Queued prompts the client withdrew with `$/cancel_request` (already answered `-32800`),
/// taken out of the queue: their turns never start, and they hold no place in it.
fn take_withdrawn(queue: &mut VecDeque<QueuedPrompt>) -> VecDeque<QueuedPrompt> {
    let (withdrawn, kept) = std::mem::take(queue)
        .into_iter()
        .partition(|q| q.answer.withdrawn());
    *queue = kept;
    withdrawn
}

/// Answers prompts taken out of the queue `cancelled` (outside the state lock: it sends).
/// Their turns never started.
fn answer_queued_cancelled(queued: Vec<QueuedPrompt>) {
    for q in queued {
        let cancelled = Ok(PromptResponse::new(StopReason::Cancelled));
        q.answer.finish(cancelled, &q.turn_id, true);
    }
}

/// Withdraws each request from the client (outside the state lock: it sends).
fn withdraw_all(shared: &Shared, ids: Vec<RequestId>) {
    for id in &ids {
        shared.calls.cancel(id);
    }
}

/// `session/cancel`: asks the host to stop the turn (now, or as soon as `turn.start`
/// returns) and withdraws every request this turn has open in the client.
pub fn cancel(session: &Arc<AcpSession>, shared: &Arc<Shared>) {
    match session.cancel_prompt(shared) {
        Some(ToStop::Running(turn)) => stop_turn(shared, &session.id, &turn),
        Some(ToStop::HostQueued(turn)) => stop_queued_turn_apart(shared, session, turn),
        Some(ToStop::Stopping(_)) | None => {}
    }
}

/// Sends `turn.stop` without blocking the caller.
pub fn stop_turn(shared: &Shared, session_id: &str, turn_id: &str) {
    stop_turns(
        &shared.link,
        vec![(session_id.to_string(), turn_id.to_string())],
    );
}

/// The state, once `waiting` is false of it or `timeout` has passed (woken by
/// [`AcpSession::finish_prompt`]).
fn wait_while<'s>(
    session: &'s AcpSession,
    timeout: Duration,
    waiting: impl Fn(&SessionState) -> bool,
) -> std::sync::MutexGuard<'s, SessionState> {
    let deadline = Instant::now() + timeout;
    let mut st = lock(&session.state);
    while waiting(&st) {
        let left = deadline.checked_duration_since(Instant::now());
        let Some(left) = left.filter(|d| !d.is_zero()) else {
            break;
        };
        st = match session.prompt_done.wait_timeout(st, left) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
    }
    st
}

/// Records a frame's sequence number and what it tells of the turns, the transcript, the
/// configuration and the goal; returns the turn the pending prompt waits for.
fn observe(st: &mut SessionState, seq: Option<u64>, facts: projection::Facts) -> Option<String> {
    if let Some(seq) = seq {
        st.position.last_seq = seq;
    }
    if let Some(turn_id) = facts.turn_started {
        st.position.active_turn = Some(turn_id.to_string());
        if let Some(p) = st.prompt.as_mut().filter(|p| p.turn_id == turn_id) {
            p.queued_on_host = false; // the host started it
            p.seen_started = true;
        }
    }
    if let Some(turn_id) = facts.turn_ended {
        if st.position.active_turn.as_deref() == Some(turn_id) {
            st.position.active_turn = None;
        }
        if st.unprompted.as_deref() == Some(turn_id) {
            st.unprompted = None;
        }
    }
    if let Some(through) = facts.through {
        st.position.through = st.position.through.max(through);
    }
    if let Some(goal) = facts.goal {
        see_goal(st, goal);
    }
    st.prompt.as_ref().map(|p| p.turn_id.clone())
}
