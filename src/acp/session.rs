//! One ACP session as this connection sees it, and its reader thread.
//!
//! The reader follows the host's event stream, projects every frame into `session/update`
//! notifications, and — when it sees the terminal frame of the turn a `session/prompt` is
//! waiting for — enqueues that prompt's response itself. Because the same thread enqueues
//! every update of the turn and then the response, into the one stdout queue, no update can
//! follow the response. The reader runs only while a turn is being followed, so idle sessions
//! hold no stream.

use super::client_call;
use super::config_options::{self, Catalog, SessionConfig};
use super::errors;
use super::host_link::{Connected, HostLink};
use super::initialize::ClientCapabilities;
use super::interaction;
use super::projection::Projector;
use crate::host_api::client::{ClientError, EventStream, HostClient};
use crate::host_api::wire::{
    ErrorCode, Frame, FrameBody, Interaction, TranscriptItem, TurnOutcome,
};
use crate::jsonrpc::{code, ClientCalls, Message, Outbox, RequestId, Responder, ResponseError};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What session threads share with the dispatcher.
pub struct Shared {
    pub outbox: Outbox,
    pub calls: Arc<ClientCalls>,
    pub link: Arc<HostLink>,
    pub caps: ClientCapabilities,
}

impl Shared {
    pub fn update(&self, session_id: &str, update: Value) {
        self.outbox.send(&Message::notification(
            "session/update",
            json!({"sessionId": session_id, "update": update}),
        ));
    }
}

pub struct PendingPrompt {
    pub responder: Responder,
    pub turn_id: String,
    /// `turn.start` has returned: `turn.stop` can be sent.
    pub started: bool,
    pub cancel_requested: bool,
}

pub struct SessionState {
    reader_running: bool,
    /// The last frame seen and the host epoch it belongs to.
    last_seq: u64,
    epoch: Option<String>,
    /// The turn the host is running, as last observed on the stream.
    active_turn: Option<String>,
    /// The last durable transcript item this connection has seen (live or replayed): a
    /// catch-up after a gap starts after it.
    pub through: u64,
    pub prompt: Option<PendingPrompt>,
    pub projector: Projector,
    /// Host interaction or invocation id → the ACP request in flight for it.
    pub outstanding: HashMap<String, RequestId>,
    /// Editor terminals created for this session and not yet released.
    pub live_terminals: HashSet<String>,
    pub closed: bool,
    /// The session's configuration as last read or seen, and the model catalog it is shown
    /// against (from `models.list` when the session was attached).
    pub config: Option<SessionConfig>,
    pub catalog: Catalog,
    /// The last `configOptions` this client was given: a host-side change is announced only
    /// when it differs (so the client's own change is never echoed back).
    /// Kept serialized: a string is a fraction of a `Value` tree, per session.
    pub sent_options: String,
}

pub struct AcpSession {
    pub id: String,
    pub cwd: String,
    state: Mutex<SessionState>,
    prompt_done: Condvar,
    /// Held by a configuration change from its host write until its response is queued, and
    /// by the reader before it announces a host-side change: the reader then knows the
    /// client's own change and does not echo it.
    config_lock: Mutex<()>,
}

impl AcpSession {
    /// `display_terminal`: the client shows command output through Zed's `_meta.terminal_*`
    /// convention (it set `_meta.terminal_output` and has no real terminals).
    pub fn new(id: &str, cwd: &str, display_terminal: bool) -> Arc<AcpSession> {
        Arc::new(AcpSession {
            id: id.to_string(),
            cwd: cwd.to_string(),
            state: Mutex::new(SessionState {
                reader_running: false,
                last_seq: 0,
                epoch: None,
                active_turn: None,
                through: 0,
                prompt: None,
                projector: Projector::new(display_terminal),
                outstanding: HashMap::new(),
                live_terminals: HashSet::new(),
                closed: false,
                config: None,
                catalog: Catalog::default(),
                sent_options: String::new(),
            }),
            prompt_done: Condvar::new(),
            config_lock: Mutex::new(()),
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn config_guard(&self) -> MutexGuard<'_, ()> {
        self.config_lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a configuration read from the host (newer revisions only) and returns the
    /// options to show, remembering them as sent.
    pub fn record_config(&self, config: Option<SessionConfig>, boolean_options: bool) -> Value {
        let mut st = self.lock();
        if let Some(c) = config {
            if st
                .config
                .as_ref()
                .is_none_or(|old| c.revision >= old.revision)
            {
                st.config = Some(c);
            }
        }
        let Some(c) = st.config.as_ref() else {
            return Value::Null;
        };
        let options = config_options::options(&c.configuration, &st.catalog, boolean_options);
        st.sent_options = options.to_string();
        options
    }

    /// A `session.open` snapshot may carry a configuration this client has not seen (changed
    /// while nothing followed the stream): announce it like a live change.
    pub fn observe_snapshot(self: &Arc<Self>, shared: &Arc<Shared>, open: &Value) {
        if let Some(c) = SessionConfig::from_session(&open["session"]) {
            config_changed(self, shared, c.revision, c.configuration);
        }
    }

    /// Records the position a `session.open` snapshot gave.
    pub fn set_position(&self, seq: u64, epoch: &str, active_turn: Option<String>) {
        let mut st = self.lock();
        st.last_seq = seq;
        st.epoch = Some(epoch.to_string());
        st.active_turn = active_turn;
    }

    /// Whether the stream position is valid for this host epoch (else `session.open` first).
    pub fn positioned_for(&self, epoch: &str) -> bool {
        self.lock().epoch.as_deref() == Some(epoch)
    }

    /// The event stream a prompt will be followed on, opened before its turn starts: a turn
    /// nobody can follow is never started. `None` when a reader already follows the session.
    /// While the host's stream slots are full, retries for up to 5 s.
    pub fn open_stream(&self, conn: &Connected) -> Result<Option<EventStream>, ResponseError> {
        let (after, epoch) = {
            let st = self.lock();
            if st.reader_running {
                return Ok(None);
            }
            (
                st.last_seq,
                st.epoch.clone().unwrap_or_else(|| conn.epoch.clone()),
            )
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match conn.client.events(&self.id, after, &epoch, 25_000, true) {
                Ok(s) => return Ok(Some(s)),
                Err(ClientError::Host(h))
                    if h.code == ErrorCode::CapacityExceeded && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(ClientError::Host(h)) if h.code == ErrorCode::CapacityExceeded => {
                    return Err(capacity_exceeded("this prompt; it was not started"))
                }
                Err(e) => return Err(errors::from_client(&e)),
            }
        }
    }

    /// Starts the reader unless one is running; `first` is a stream already opened for it.
    pub fn ensure_reader(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        conn: &Connected,
        first: Option<EventStream>,
    ) {
        {
            let mut st = self.lock();
            if st.reader_running {
                return;
            }
            st.reader_running = true;
        }
        let (s, sh, c) = (Arc::clone(self), Arc::clone(shared), conn.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("acp-session-{}", self.id))
            .spawn(move || reader(s, sh, c, first));
        if let Err(e) = spawned {
            log::error!("cannot start the reader for {}: {e}", self.id);
            self.lock().reader_running = false;
        }
    }

    /// Waits until no prompt is pending (bounded).
    pub fn wait_prompt_done(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        while st.prompt.is_some() {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            st = match self.prompt_done.wait_timeout(st, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// `session/cancel`: asks the host to stop the turn (now, or as soon as `turn.start`
    /// returns) and withdraws every request this turn has open in the client.
    pub fn cancel(self: &Arc<Self>, shared: &Arc<Shared>) {
        let (turn, started, outstanding) = {
            let mut st = self.lock();
            let Some(p) = st.prompt.as_mut() else {
                log::debug!(
                    "session/cancel for {} with no prompt running: nothing to do",
                    self.id
                );
                return;
            };
            p.cancel_requested = true;
            // Taken out of the table: each is withdrawn exactly once, and its waiter sees
            // that it was withdrawn.
            let ids: Vec<RequestId> = st.outstanding.drain().map(|(_, r)| r).collect();
            let p = st.prompt.as_ref().map(|p| (p.turn_id.clone(), p.started));
            let (turn, started) = p.unwrap_or_default();
            (turn, started, ids)
        };
        for id in &outstanding {
            shared.calls.cancel(id);
        }
        if started {
            self.stop_turn(shared, &turn);
        }
    }

    /// Sends `turn.stop` without blocking the caller.
    pub fn stop_turn(self: &Arc<Self>, shared: &Arc<Shared>, turn_id: &str) {
        let (id, turn, link) = (
            self.id.clone(),
            turn_id.to_string(),
            Arc::clone(&shared.link),
        );
        let _ = std::thread::Builder::new()
            .name("acp-turn-stop".into())
            .spawn(move || match link.get() {
                Ok(conn) => {
                    if let Err(e) = conn
                        .client
                        .op("turn.stop", &json!({"sessionId": id, "turnId": turn}))
                    {
                        log::warn!("turn.stop for {id}/{turn}: {e}");
                    }
                }
                Err(e) => log::warn!("turn.stop for {id}/{turn}: {e}"),
            });
    }

    /// Shows the durable items after `after`, through `through` — `session/load`'s replay and a
    /// reader's catch-up are this one loop — and records how far it got. `stop` is asked before
    /// each page; `Ok(false)` when it said stop.
    pub fn replay_transcript(
        &self,
        shared: &Shared,
        client: &HostClient,
        after: u64,
        through: u64,
        stop: &dyn Fn() -> bool,
    ) -> Result<bool, ClientError> {
        let now = Instant::now();
        let mut from = after;
        while from < through {
            if stop() {
                return Ok(false);
            }
            let page = client.op(
                "session.transcript.page",
                &json!({"sessionId": self.id, "direction": "newer", "cursor": format!("n{from}"),
                        "limit": 256, "throughMessageSeq": through}),
            )?;
            let items: Vec<TranscriptItem> = serde_json::from_value(page["items"].clone())
                .map_err(|e| ClientError::Protocol(format!("unreadable transcript page: {e}")))?;
            let Some(last) = items.last().map(|i| i.message_seq) else {
                break;
            };
            let mut st = self.lock();
            for item in &items {
                for frame in super::projection::replay_frames(item) {
                    for u in st.projector.frame(&frame, now) {
                        shared.update(&self.id, u);
                    }
                }
            }
            st.through = st.through.max(last);
            drop(st);
            from = last;
            if page["nextCursor"].is_null() {
                break;
            }
        }
        Ok(true)
    }

    /// Shows what a `session.open` snapshot says is in flight (streamed but not yet durable text,
    /// running tools); what was shown already is not shown again.
    pub fn show_in_flight(&self, shared: &Shared, open: &Value) {
        let now = Instant::now();
        let mut st = self.lock();
        for frame in super::projection::snapshot_frames(open) {
            for u in st.projector.frame(&frame, now) {
                shared.update(&self.id, u);
            }
        }
    }

    /// The prompt could not start (no host, `turn.start` refused): answers it and wakes whoever
    /// waits for it (`session/close`).
    pub fn fail_prompt(&self, e: ResponseError) {
        self.finish_prompt(&mut self.lock(), Err(e));
    }

    /// Answers the pending prompt (if any) and wakes whoever waits for it. After the client's
    /// `session/cancel` the answer is `cancelled`, whatever happened meanwhile (ACP).
    fn finish_prompt(&self, st: &mut SessionState, result: Result<Value, ResponseError>) {
        if let Some(p) = st.prompt.take() {
            let result = if p.cancel_requested {
                Ok(json!({"stopReason": "cancelled"}))
            } else {
                result
            };
            p.responder.respond(result);
        }
        self.prompt_done.notify_all();
    }
}

/// The reader thread: follows the stream until the followed turn has ended and no prompt is
/// waiting, reconnecting at every window end.
fn reader(
    session: Arc<AcpSession>,
    shared: Arc<Shared>,
    conn: Connected,
    mut first: Option<EventStream>,
) {
    // Consecutive windows refused because the host's stream slots were full.
    let mut refused = 0u32;
    loop {
        let (after, epoch) = {
            let mut st = session.lock();
            if st.closed && st.prompt.is_some() {
                drop(st);
                stop_reader(&session, &shared, Ok(json!({"stopReason": "cancelled"})));
                return;
            }
            if st.closed || (st.prompt.is_none() && st.active_turn.is_none()) {
                st.reader_running = false;
                return;
            }
            (
                st.last_seq,
                st.epoch.clone().unwrap_or_else(|| conn.epoch.clone()),
            )
        };
        let stream = match first.take() {
            Some(s) => Ok(s),
            None => conn.client.events(&session.id, after, &epoch, 25_000, true),
        };
        let mut stream = match stream {
            Ok(s) => {
                refused = 0;
                s
            }
            Err(ClientError::Host(h)) if h.code == ErrorCode::CapacityExceeded => {
                refused += 1;
                if refused > 100 {
                    // 10 s without a slot: nobody can follow this turn, so it stops.
                    let turn = session.lock().active_turn.clone();
                    if let Some(t) = turn {
                        session.stop_turn(&shared, &t);
                    }
                    let e = capacity_exceeded("this turn; it was stopped");
                    stop_reader(&session, &shared, Err(e));
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            Err(e) => {
                if !recover(&session, &shared, &conn, &e) {
                    return;
                }
                continue;
            }
        };
        loop {
            let frame = match stream.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    if !recover(&session, &shared, &conn, &e) {
                        return;
                    }
                    break;
                }
            };
            match &frame.body {
                FrameBody::StreamEnd { reason, .. } => {
                    if reason == "session_removed" {
                        stop_reader(&session, &shared, Err(errors::unknown_session(&session.id)));
                        return;
                    }
                    break;
                }
                FrameBody::Heartbeat { .. } => continue,
                FrameBody::FrameOmitted { omitted_kind, .. } => {
                    // The host could not emit a frame (a bug there): catch up from the
                    // durable state, then follow from the snapshot.
                    log::warn!(
                        "session {}: the host omitted a {omitted_kind} frame; catching up",
                        session.id
                    );
                    if !reopen(&session, &shared, &conn) {
                        return;
                    }
                    break;
                }
                _ => {}
            }
            let Some(seq) = frame.seq else { continue };
            {
                let st = session.lock();
                if seq != st.last_seq + 1 {
                    log::warn!(
                        "session {}: frame {seq} after {}: re-opening",
                        session.id,
                        st.last_seq
                    );
                    drop(st);
                    if !reopen(&session, &shared, &conn) {
                        return;
                    }
                    break;
                }
            }
            handle_frame(&session, &shared, &conn, frame);
            let st = session.lock();
            if st.prompt.is_none() && st.active_turn.is_none() {
                // The followed turn is over: detach (the response is already queued).
                drop(st);
                break;
            }
        }
    }
}

/// The host's event-stream slots stayed full: `what` could not be followed.
fn capacity_exceeded(what: &str) -> ResponseError {
    ResponseError::new(
        code::INTERNAL_ERROR,
        format!("The Runtime Host is following too many sessions to follow {what}. Try again in a moment."),
    )
    .with_data(json!({"makaCode": "capacity_exceeded", "retryable": true}))
}

/// Handles a stream error. Returns false when the reader must stop.
fn recover(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    conn: &Connected,
    e: &ClientError,
) -> bool {
    match e {
        // A stream that broke or stalled (this side stopped reading while the client did not
        // read stdout) is not a dead host: ask it. If it answers, catch up and go on.
        ClientError::Transport(msg) if conn.client.is_alive() => {
            log::info!(
                "session {}: the event stream broke ({msg}) but the host answers; catching up",
                session.id
            );
            reopen(session, shared, conn)
        }
        ClientError::Protocol(msg) => {
            log::warn!(
                "session {}: skipped an unreadable frame ({msg}); catching up from the transcript",
                session.id
            );
            reopen(session, shared, conn)
        }
        ClientError::Transport(msg) => {
            log::warn!("session {}: the Runtime Host went away ({msg})", session.id);
            shared.link.lost(&conn.epoch);
            {
                let mut st = session.lock();
                st.epoch = None;
                st.active_turn = None;
            }
            let err = ResponseError::new(code::INTERNAL_ERROR, "The Runtime Host stopped while this turn was running; the turn did not finish. Send the prompt again to continue.")
                .with_data(json!({"makaCode": "host_unavailable", "retryable": true}));
            stop_reader(session, shared, Err(err));
            false
        }
        ClientError::Host(h) if h.code == ErrorCode::ResyncRequired => {
            reopen(session, shared, conn)
        }
        ClientError::Host(h) if h.code == ErrorCode::NotFound => {
            stop_reader(session, shared, Err(errors::unknown_session(&session.id)));
            false
        }
        ClientError::Host(h) => {
            log::error!("session {}: the event stream failed: {h}", session.id);
            stop_reader(session, shared, Err(errors::from_client(e)));
            false
        }
    }
}

/// Ends the reader, answering a pending prompt with `result` (or `cancelled` if the client
/// cancelled it) after settling its open tool calls — updates first, then the response, on
/// this thread.
fn stop_reader(session: &Arc<AcpSession>, shared: &Shared, result: Result<Value, ResponseError>) {
    let mut st = session.lock();
    st.reader_running = false;
    st.active_turn = None;
    if st.prompt.is_none() {
        return;
    }
    for u in st
        .projector
        .close_open_tools("The turn ended before this tool finished.")
    {
        shared.update(&session.id, u);
    }
    session.finish_prompt(&mut st, result);
}

/// After a 410, a sequence gap, an unreadable frame or a stream that broke: take a fresh
/// snapshot, catch up on what the live stream no longer holds (the durable items since the
/// last one seen, then what is in flight — nothing already shown is shown twice), and settle
/// the prompt if its turn ended meanwhile. Returns false when the reader must stop.
fn reopen(session: &Arc<AcpSession>, shared: &Arc<Shared>, conn: &Connected) -> bool {
    let open = match conn
        .client
        .op("session.open", &json!({"sessionId": session.id}))
    {
        Ok(o) => o,
        Err(ClientError::Protocol(m)) => {
            log::error!("session {}: unreadable snapshot ({m})", session.id);
            let e = errors::from_client(&ClientError::Protocol(m));
            stop_reader(session, shared, Err(e));
            return false;
        }
        Err(e) => return recover(session, shared, conn, &e),
    };
    let seq = open["seq"].as_u64().unwrap_or(0);
    session.observe_snapshot(shared, &open);
    if let Err(e) = catch_up(session, shared, conn, &open) {
        log::error!("session {}: catching up failed: {e}", session.id);
    }
    let active = open["activeTurn"]["turnId"].as_str().map(String::from);
    let waiting_turn = session.lock().prompt.as_ref().map(|p| p.turn_id.clone());
    session.set_position(seq, &conn.epoch, active.clone());
    if let Some(turn) = waiting_turn.filter(|t| active.as_deref() != Some(t)) {
        // Our turn finished while the ring moved past us: its outcome comes from turn.query.
        let result = match conn.client.op(
            "turn.query",
            &json!({"sessionId": session.id, "turnId": turn}),
        ) {
            Ok(snapshot) => outcome_result(&snapshot["status"], &snapshot, &turn),
            Err(e) => Err(errors::from_client(&e)),
        };
        let mut st = session.lock();
        let closing = st
            .projector
            .close_open_tools("The turn ended before this tool finished.");
        for u in closing {
            shared.update(&session.id, u);
        }
        session.finish_prompt(&mut st, result);
    }
    true
}

/// Replays the durable items after the last one this connection saw, through the snapshot's
/// `throughMessageSeq`, then the snapshot's in-flight text, tools, dialogs and editor calls.
/// The projector drops what it has already shown (text by offset, tool calls by id).
fn catch_up(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    conn: &Connected,
    open: &Value,
) -> Result<(), ClientError> {
    let through = open["transcript"]["throughMessageSeq"]
        .as_u64()
        .unwrap_or(0);
    let after = session.lock().through;
    session.replay_transcript(shared, &conn.client, after, through, &|| false)?;
    session.show_in_flight(shared, open);
    // Dialogs and editor calls the stream no longer shows.
    let pending: Vec<Interaction> =
        serde_json::from_value(open["pendingInteractions"].clone()).unwrap_or_default();
    for i in pending {
        if !session.lock().outstanding.contains_key(&i.interaction_id) {
            interaction::spawn(Arc::clone(session), Arc::clone(shared), conn.clone(), i);
        }
    }
    for c in open["pendingClientCalls"].as_array().into_iter().flatten() {
        let Some(id) = c["invocationId"].as_str() else {
            continue;
        };
        if session.lock().outstanding.contains_key(id) {
            continue;
        }
        let call = client_call::Call {
            invocation_id: id.to_string(),
            tool_call_id: c["toolCallId"].as_str().map(String::from),
            service: c["service"].as_str().unwrap_or_default().to_string(),
            input: Value::Null,
            input_ref: true,
        };
        client_call::spawn(Arc::clone(session), Arc::clone(shared), conn.clone(), call);
    }
    Ok(())
}

fn handle_frame(session: &Arc<AcpSession>, shared: &Arc<Shared>, conn: &Connected, frame: Frame) {
    let Frame { seq, body, .. } = frame;
    let now = Instant::now();
    let mut st = session.lock();
    if let Some(seq) = seq {
        st.last_seq = seq;
    }
    match &body {
        FrameBody::TurnStarted { turn_id, .. } => {
            st.active_turn = Some(turn_id.clone());
        }
        FrameBody::TranscriptAdvanced {
            through_message_seq,
        } => {
            st.through = st.through.max(*through_message_seq);
        }
        FrameBody::InteractionRequest { interaction: i }
            if !st.outstanding.contains_key(&i.interaction_id) =>
        {
            drop(st);
            interaction::spawn(
                Arc::clone(session),
                Arc::clone(shared),
                conn.clone(),
                i.clone(),
            );
            return;
        }
        FrameBody::ClientCall {
            invocation_id,
            tool_call_id,
            service,
            input,
            input_ref,
        } => {
            drop(st);
            let call = client_call::Call {
                invocation_id: invocation_id.clone(),
                tool_call_id: tool_call_id.clone(),
                service: service.clone(),
                input: input.clone(),
                input_ref: *input_ref,
            };
            client_call::spawn(Arc::clone(session), Arc::clone(shared), conn.clone(), call);
            return;
        }
        FrameBody::ConfigurationChanged {
            revision,
            configuration,
        } => {
            drop(st);
            config_changed(session, shared, *revision, configuration.clone());
            return;
        }
        FrameBody::SessionUpdated { revision, .. } => {
            if let Some(c) = st.config.as_mut() {
                c.revision = c.revision.max(*revision);
            }
        }
        FrameBody::ClientCallCancelled { invocation_id } => {
            if let Some(req) = st.outstanding.remove(invocation_id) {
                shared.calls.cancel(&req);
            }
        }
        FrameBody::InteractionClosed { interaction_id, .. } => {
            // Closed by the host (or another client) while the user still sees it.
            if let Some(req) = st.outstanding.remove(interaction_id) {
                shared.calls.cancel(&req);
            }
        }
        FrameBody::ToolResult { .. } => {
            for u in st.projector.pending_output() {
                shared.update(&session.id, u);
            }
        }
        FrameBody::TurnTerminal {
            turn_id,
            outcome,
            reason,
            failure_class,
            failure_message,
            failure_details,
            ..
        } => {
            for u in st.projector.pending_output() {
                shared.update(&session.id, u);
            }
            for u in st
                .projector
                .close_open_tools("The turn ended before this tool finished.")
            {
                shared.update(&session.id, u);
            }
            st.projector.turn_finished(turn_id);
            if st.active_turn.as_deref() == Some(turn_id) {
                st.active_turn = None;
            }
            let ours = st.prompt.as_ref().is_some_and(|p| &p.turn_id == turn_id);
            if ours {
                let result = terminal_result(
                    turn_id,
                    *outcome,
                    reason,
                    Failure {
                        class: failure_class.as_deref(),
                        message: failure_message.as_deref(),
                        details: failure_details.as_ref(),
                    },
                );
                session.finish_prompt(&mut st, result);
            } else {
                shared.outbox.send(&Message::notification(
                    "_maka/turn_state",
                    json!({"sessionId": session.id, "turnId": turn_id, "outcome": outcome, "reason": reason}),
                ));
            }
            return;
        }
        _ => {}
    }
    for u in st.projector.frame(&body, now) {
        shared.update(&session.id, u);
    }
}

/// A configuration change made on the host (the agent itself, another client): announced as
/// `config_option_update` (and `current_mode_update` when the mode moved) unless this client
/// already knows it.
pub fn config_changed(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    revision: u64,
    configuration: crate::host_api::wire::Configuration,
) {
    let _guard = session.config_guard();
    let mut st = session.lock();
    let Some(known) = st.config.as_ref() else {
        return;
    };
    if revision <= known.revision {
        return; // this client's own change, or one it has already re-read
    }
    let old_mode = known.configuration.permission_mode;
    let new_mode = configuration.permission_mode;
    st.config = Some(SessionConfig {
        revision,
        configuration,
    });
    let Some(c) = st.config.as_ref() else { return };
    let options = config_options::options(
        &c.configuration,
        &st.catalog,
        shared.caps.boolean_config_options,
    );
    let serialized = options.to_string();
    if serialized != st.sent_options {
        shared.update(
            &session.id,
            json!({"sessionUpdate": "config_option_update", "configOptions": options}),
        );
        st.sent_options = serialized;
    }
    if old_mode != new_mode {
        shared.update(
            &session.id,
            json!({"sessionUpdate": "current_mode_update", "currentModeId": config_options::mode_id(new_mode)}),
        );
    }
}

/// Why a turn failed, as the host said it.
struct Failure<'a> {
    class: Option<&'a str>,
    /// One sentence for the person.
    message: Option<&'a str>,
    details: Option<&'a Value>,
}

/// The `session/prompt` result for a terminal frame.
/// (A client that cancelled gets `cancelled` instead: [`AcpSession::finish_prompt`].)
fn terminal_result(
    turn_id: &str,
    outcome: TurnOutcome,
    reason: &str,
    failure: Failure,
) -> Result<Value, ResponseError> {
    match outcome {
        TurnOutcome::Completed if reason == "step_limit" => {
            Ok(json!({"stopReason": "max_turn_requests"}))
        }
        TurnOutcome::Completed => Ok(json!({"stopReason": "end_turn"})),
        // Stopped by someone else (another client, a host shutdown): not this client's cancel.
        TurnOutcome::Cancelled => Ok(
            json!({"stopReason": "end_turn", "_meta": {"maka": {"outcome": "cancelled", "reason": reason}}}),
        ),
        TurnOutcome::MaxTokens => Ok(json!({"stopReason": "max_tokens"})),
        TurnOutcome::Refused => Ok(json!({"stopReason": "refusal"})),
        TurnOutcome::Failed => Err(turn_failed(turn_id, failure)),
    }
}

/// The host's sentence is the message (it says what happened and what to do); the class and
/// the details (an HTTP status, the provider's answer) go in `data`.
fn turn_failed(turn_id: &str, f: Failure) -> ResponseError {
    let class = f.class.unwrap_or("runtime_error");
    let message = match f.message {
        Some(m) if !m.trim().is_empty() => sentence(m),
        _ => "The turn failed; the agent's log has the details.".to_string(),
    };
    let mut data = json!({"makaCode": "turn_failed", "failureClass": class, "turnId": turn_id});
    if let Some(d) = f.details {
        data["details"] = d.clone();
    }
    ResponseError::new(code::INTERNAL_ERROR, message).with_data(data)
}

/// Capitalised and ending with a full stop (older hosts send lower-case fragments).
fn sentence(m: &str) -> String {
    let m = m.trim();
    let mut out: String = m
        .chars()
        .take(1)
        .flat_map(char::to_uppercase)
        .chain(m.chars().skip(1))
        .collect();
    if !out.ends_with(['.', '!', '?', '…']) {
        out.push('.');
    }
    out
}

/// The prompt result from a `turn.query` snapshot (used after a resync).
fn outcome_result(status: &Value, snapshot: &Value, turn_id: &str) -> Result<Value, ResponseError> {
    let outcome = match status.as_str() {
        Some("completed") => TurnOutcome::Completed,
        Some("cancelled") => TurnOutcome::Cancelled,
        Some("max_tokens") => TurnOutcome::MaxTokens,
        Some("refused") => TurnOutcome::Refused,
        _ => TurnOutcome::Failed,
    };
    terminal_result(
        turn_id,
        outcome,
        snapshot["reason"].as_str().unwrap_or("end_turn"),
        Failure {
            class: snapshot["failureClass"].as_str(),
            message: snapshot["failureMessage"].as_str(),
            details: snapshot.get("failureDetails").filter(|d| !d.is_null()),
        },
    )
}
