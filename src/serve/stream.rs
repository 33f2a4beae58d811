//! One outbound stream of an ACP connection (the connection's, a session's, or a WebSocket's):
//! the messages the agent sent, numbered, kept in a bounded buffer so that a receiver that
//! drops and comes back gets every message it missed. A message's cursor (the SSE `id:` and
//! `_meta["acp/cursor"]`) is the stream's tag and its number, `<tag>-<n>`: a cursor of another
//! stream is refused, never taken for this one's ([`Refused::Foreign`]).
//!
//! A message is *delivered* once the client provably has it: a later `Last-Event-ID` names it
//! or a later one, or the receiver it was written to confirms it ([`Lease::confirm`], as
//! [`Unconfirmed`] tells: the client's TCP acknowledged its bytes, and the client was still
//! there [`CONFIRM_AFTER`] later). Being written to a socket proves nothing (the bytes may sit
//! in the server's send queue, or the socket may break with them unread), so until it is
//! delivered a message stays in the stream for the next receiver: one that comes without
//! `Last-Event-ID` starts at the first message not delivered, whatever an earlier receiver was
//! handed. A receiver that takes over from one whose client is gone needs nothing given back.
//!
//! Bounds, per connection (one [`Budget`] shared by all its streams): messages not yet
//! delivered may take [`MAX_BUFFERED_BYTES`] (the SDK's `DEFAULT_MAX_BUFFERED_BYTES`, per
//! connection as there); past that the connection is closed (a client that does not read is
//! not buffered for ever). Messages delivered are kept for replay up to
//! [`REPLAY_WINDOW_BYTES`] a stream and [`CONNECTION_REPLAY_BYTES`] a connection; a receiver
//! that asks for older ones gets an error, never a gap.

use crate::acp::out::Version;
use crate::jsonrpc::{Kind, Line};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Bytes of messages not yet delivered, per connection (the SDK's default).
pub const MAX_BUFFERED_BYTES: usize = 64 * 1024 * 1024;
/// Bytes of messages delivered kept for a receiver that reconnects, per stream.
pub const REPLAY_WINDOW_BYTES: usize = 4 * 1024 * 1024;
/// The same, for all the streams of a connection together.
pub const CONNECTION_REPLAY_BYTES: usize = 4 * REPLAY_WINDOW_BYTES;
/// Messages delivered kept for a receiver that reconnects, per stream, at most (within the
/// bytes above, whichever bound comes first): `retentionMessages`, advertised at `initialize`
/// as the upper bound it is.
pub const REPLAY_WINDOW_MESSAGES: usize = 4096;
/// Prompts and requests to the client a stream tracks for a session's turn state, at most
/// (the oldest forgotten first).
const TRACKED: usize = 256;
/// Sessions a WebSocket's stream tracks the turn state of, at most (a connection's session
/// streams are bounded the same: `conn::MAX_SESSIONS`); past it, an idle one is forgotten.
const TRACKED_SESSIONS: usize = 256;

/// A message counts as delivered once its bytes were acknowledged by the client's TCP and the
/// client is seen still there this long after (a client closing within it, or resetting with
/// it unread, gets the message again on its next receiver).
pub const CONFIRM_AFTER: Duration = Duration::from_secs(1);
/// Writes this close together are confirmed together.
const CONFIRM_STEP: Duration = Duration::from_millis(100);

/// The bytes a connection's streams hold, counted together.
#[derive(Default)]
pub struct Budget {
    waiting: AtomicUsize,
    replay: AtomicUsize,
}

impl Budget {
    /// Takes `len` waiting bytes if they fit under [`MAX_BUFFERED_BYTES`].
    fn take_waiting(&self, len: usize) -> bool {
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(len).filter(|&n| n <= MAX_BUFFERED_BYTES)
            })
            .is_ok()
    }
}

fn give_back(counter: &AtomicUsize, len: usize) {
    let _ = counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
        Some(held.saturating_sub(len))
    });
}

pub struct Stream {
    inner: Mutex<Inner>,
    wake: Condvar,
    budget: Arc<Budget>,
    /// What its cursors start with (`<tag>-<n>`): a keyed hash of its connection, route and
    /// incarnation (`AcpConn`), so that a cursor of another stream, or of an earlier
    /// incarnation of this one that numbered from 1 again, is told from its own and refused.
    tag: String,
}

#[derive(Default)]
struct Inner {
    /// (id, JSON text), oldest first; ids are consecutive.
    events: VecDeque<(u64, Arc<str>)>,
    /// The id the next message gets (ids start at 1).
    next_id: u64,
    /// Ids below this were delivered (the client has them: see the module's comment).
    delivered: u64,
    /// Ids below this were written to some receiver at least once.
    sent: u64,
    /// The bytes of the kept messages below `delivered` (replay), and from it (waiting).
    delivered_bytes: usize,
    waiting_bytes: usize,
    /// The lease of the active receiver.
    receiver: Option<u64>,
    /// Whether the active receiver's client is still there (its socket not closed).
    receiver_alive: Option<Box<dyn Fn() -> bool + Send>>,
    leases: u64,
    /// The id of the message after which the stream ends (a session's `session/close` or
    /// `session/delete` answer): a receiver handed it ends ([`Next::Ended`]); the stream is
    /// closed once it is delivered.
    last: Option<u64>,
    /// A WebSocket ping's payload to answer (the latest only).
    pong: Option<Vec<u8>>,
    /// The client's close frame for the writer of this lease to echo (RFC 6455 §5.5.1) as it
    /// lets go ([`Stream::detach_closing`]).
    farewell: Option<(u64, Vec<u8>)>,
    closed: Option<String>,
    /// A session's stream: its session.
    session: Option<String>,
    /// No turn states are told on this stream (an ACP v2 connection's: a v2 prompt is
    /// answered when it is inserted, not when its turn ends, so its answer says nothing of the
    /// turn, and a v2 client learns the state from the agent's own `state_update`s, which are
    /// this version's, as a line from serve would not be).
    no_turn_states: bool,
    /// What the turn states a receiver that comes back is told are read from: a session's
    /// stream tracks its session's turn; a WebSocket's, which carries every session of its
    /// connection, each session's (`grows`: a session's entry is made when it is first seen);
    /// a connection's event stream none.
    turns: Vec<Turn>,
    grows: bool,
    /// The ids of the turn state messages last appended (the first, and how many), while they
    /// are the stream's last messages and none is delivered: a receiver that comes back before
    /// anything else was sent replaces them.
    turn_states: Option<(u64, u64)>,
}

/// What one session's turn state is read from.
struct Turn {
    session: String,
    /// The prompts posted and not yet answered (by id key, with the id), oldest first.
    prompts: VecDeque<(String, Value)>,
    /// The agent's requests of this session the client has not answered, nor the agent
    /// withdrawn (`$/cancel_request`).
    asking: VecDeque<String>,
    /// The agent wrote for this session on this stream (a request, a notification, a
    /// success), or on an earlier one this continues: a session this connection opened or
    /// loaded. Only such a session is told its turn state (a stream for a made-up session id
    /// gets none, so it holds nothing and is forgotten once its receiver leaves).
    known: bool,
}

impl Turn {
    fn new(session: &str) -> Turn {
        Turn {
            session: session.to_string(),
            prompts: VecDeque::new(),
            asking: VecDeque::new(),
            known: false,
        }
    }
}

/// What a message appended does to where its stream ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum End {
    /// Not the last: after the last message, it makes the stream live again (a session loaded
    /// again right after its close).
    No,
    /// The stream's last message (a successful `session/close` or `session/delete` answer).
    Last,
    /// The end as it was: a kept answer sent again for a retry neither ends a live session's
    /// stream nor makes an ending one live again.
    Keep,
}

/// What a message does to its session's turn state.
#[derive(Clone, Copy)]
pub enum Mark<'a> {
    None,
    /// A response: to the prompt with this id key, if it is one.
    Answers(&'a str),
    /// The agent's request to the client, with this id key.
    Asks(&'a str),
}

/// What a receiver gets next.
pub enum Next {
    Event(u64, Arc<str>),
    Pong(Vec<u8>),
    /// Nothing within the wait (time for a keep-alive).
    Idle,
    /// The stream ended: why.
    Closed(String),
    /// This receiver was handed the stream's last message (its session was closed): nothing
    /// more comes; the stream ends once that message is confirmed.
    Ended,
    /// Another receiver took over, or this lease was released.
    Gone,
    /// The client closed this receiver's WebSocket: echo its close frame (this payload), then
    /// let go.
    Farewell(Vec<u8>),
}

pub enum Refused {
    /// A receiver is active and the new one has no cursor (423).
    Busy,
    /// The messages after the cursor are no longer kept.
    Gap,
    /// `Last-Event-ID` names an event this stream has not sent.
    Ahead,
    /// Not a cursor of this stream (another stream's, an earlier incarnation's, made up).
    Foreign,
    /// The connection already holds this many session streams (429).
    TooMany(usize),
    Closed(String),
}

/// Over the bound: the connection must close.
pub struct Overflow;

impl Stream {
    /// A stream with a budget of its own.
    #[cfg(test)]
    pub fn new() -> Arc<Stream> {
        Stream::new_in(Arc::default(), "t")
    }

    /// A stream of a connection whose streams share `budget`, its cursors tagged `tag`.
    pub fn new_in(budget: Arc<Budget>, tag: &str) -> Arc<Stream> {
        Stream::with(budget, tag)
    }

    /// The same, numbering its messages from `first_id`: a session's stream made again after
    /// an earlier one was forgotten (everything it sent delivered and out of the replay
    /// window), so that a receiver coming back with the last id it read resumes at once
    /// instead of naming an id the new stream never sent.
    pub fn resumed_in(budget: Arc<Budget>, tag: &str, first_id: u64) -> Arc<Stream> {
        let stream = Stream::with(budget, tag);
        {
            let mut s = stream.lock();
            let first_id = first_id.max(1);
            (s.next_id, s.delivered, s.sent) = (first_id, first_id, first_id);
        }
        stream
    }

    /// Where a stream made again for its session goes on, when this one numbered any: the
    /// id the next message gets, and whether this one ended (its session was closed); `None`
    /// for one that never carried a message. Ended or not, a stream made again continues the
    /// numbering with the same tag: a cursor never names two messages.
    pub fn continues_at(&self) -> Option<(u64, bool)> {
        let s = self.lock();
        (s.next_id > 1).then_some((s.next_id, s.closed.is_some()))
    }

    /// What its cursors start with.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The cursor of message `id` (the SSE `id:` and `_meta["acp/cursor"]`).
    pub fn cursor(&self, id: u64) -> String {
        format!("{}-{id}", self.tag)
    }

    /// The message a cursor names, if it is one of this stream's: `<tag>-<n>`; `0` is the
    /// cursor of a client that read nothing of it yet (it gets all that is kept).
    fn read_cursor(&self, cursor: &str) -> Option<u64> {
        if cursor == "0" {
            return Some(0);
        }
        let (tag, n) = cursor.rsplit_once('-')?;
        if tag != self.tag || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n.parse().ok()
    }

    /// A session's stream (numbered from `first_id`, see [`Stream::resumed_in`]) on a
    /// connection of ACP `version`: on v1, a receiver that comes back to it learns the
    /// session's turn state first ([`Stream::acquire`]).
    pub fn for_session(
        budget: Arc<Budget>,
        session: &str,
        tag: &str,
        first_id: u64,
        version: Version,
    ) -> Arc<Stream> {
        let stream = Stream::resumed_in(budget, tag, first_id);
        {
            let mut s = stream.lock();
            s.session = Some(session.to_string());
            s.no_turn_states = version != Version::V1;
            let mut turn = Turn::new(session);
            // One that continues a forgotten one that carried messages.
            turn.known = first_id > 1;
            s.turns.push(turn);
        }
        stream
    }

    /// This stream's connection speaks ACP v2: it tells no turn states (see `no_turn_states`).
    pub fn tell_no_turn_states(&self) {
        self.lock().no_turn_states = true;
    }

    /// A WebSocket's stream: it carries every session of its connection, and a receiver that
    /// comes back ([`Stream::acquire`] with a cursor) learns each one's turn state.
    pub fn for_websocket(budget: Arc<Budget>, tag: &str) -> Arc<Stream> {
        let stream = Stream::with(budget, tag);
        stream.lock().grows = true;
        stream
    }

    /// A prompt of `session` was posted (id key, id): its turn is running until its answer
    /// goes out.
    pub fn turn_posted(&self, session: &str, key: &str, id: &Value) {
        let mut s = self.lock();
        if s.no_turn_states {
            return;
        }
        let at = turn_at(&mut s, session);
        if let Some(turn) = at.and_then(|i| s.turns.get_mut(i)) {
            if turn.prompts.len() >= TRACKED {
                turn.prompts.pop_front();
            }
            turn.prompts.push_back((key.to_string(), id.clone()));
        }
    }

    /// The agent's request `key` is no longer the client's to answer: the client answered it,
    /// or the agent withdrew it (`$/cancel_request`: another client answered its dialog, or
    /// it gave up waiting).
    pub fn answered(&self, key: &str) {
        for turn in self.lock().turns.iter_mut() {
            turn.asking.retain(|k| k != key);
        }
    }

    fn with(budget: Arc<Budget>, tag: &str) -> Arc<Stream> {
        Arc::new(Stream {
            tag: tag.to_string(),
            inner: Mutex::new(Inner {
                next_id: 1,
                delivered: 1,
                sent: 1,
                ..Inner::default()
            }),
            wake: Condvar::new(),
            budget,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a message as it is (with no cursor in it); `Err` when the messages nobody has
    /// read exceed the bound. On a closed stream it goes nowhere.
    #[cfg(test)]
    pub fn push(&self, json: Arc<str>) -> Result<(), Overflow> {
        self.push_with(|_| json, End::No, Mark::None, None)
            .map(|_| ())
    }

    /// Appends one of the agent's messages with its cursor in `_meta["acp/cursor"]` (where
    /// its head says `_meta` goes); `end`: what it does to the stream's end ([`End`]).
    /// `Ok(Some(id))`: appended as message `id`; `Ok(None)`: the stream is closed (its session
    /// ended and its last message was delivered, or its connection closed) and took nothing:
    /// the caller puts the message where the connection's messages go.
    pub fn push_line(&self, line: &Line, end: End, mark: Mark) -> Result<Option<u64>, Overflow> {
        // An error answer is no sign the session is this connection's (a prompt for a
        // made-up session id is answered so).
        let known = !matches!(line.head.kind, Kind::Response { ok: false, .. });
        self.push_with(
            |id| Arc::from(line.with_meta(&cursor_entry(&self.cursor(id)))),
            end,
            mark,
            known.then_some(line.head.session.as_deref()),
        )
    }

    /// `known`: the message is a sign that its session (`Some(Some(id))`; a response names
    /// none: its prompt's, or the stream's own) is this connection's.
    fn push_with(
        &self,
        make: impl FnOnce(u64) -> Arc<str>,
        end: End,
        mark: Mark,
        known: Option<Option<&str>>,
    ) -> Result<Option<u64>, Overflow> {
        let mut s = self.lock();
        if s.closed.is_some() {
            return Ok(None);
        }
        append(&mut s, &self.budget, make)?;
        s.turn_states = None;
        let id = s.next_id - 1;
        match end {
            // A message after the last (a session loaded again right after its close, a late
            // update): the session is live again, so the stream neither ends nor is released.
            End::No => s.last = None,
            End::Last => s.last = Some(id),
            End::Keep => {}
        }
        // The message's session: a session stream's own, else the one it names.
        let session = s
            .session
            .clone()
            .or_else(|| known.flatten().map(str::to_string));
        let mut at = match &session {
            Some(id) => turn_at(&mut s, id),
            None => None,
        };
        if let Mark::Answers(key) = mark {
            // The prompt's session (a WebSocket's answer names none).
            if let Some(i) = s
                .turns
                .iter()
                .position(|t| t.prompts.iter().any(|(k, _)| k == key))
            {
                at = Some(i);
            }
        }
        if let Some(turn) = at.and_then(|i| s.turns.get_mut(i)) {
            match mark {
                Mark::None => {}
                Mark::Answers(key) => {
                    turn.prompts.retain(|(k, _)| k != key);
                    if turn.prompts.is_empty() {
                        turn.asking.clear();
                    }
                }
                Mark::Asks(key) => {
                    if turn.asking.len() >= TRACKED {
                        turn.asking.pop_front();
                    }
                    turn.asking.push_back(key.to_string());
                }
            }
            turn.known |= known.is_some();
        }
        if s.grows {
            // A made-up session's entry (a prompt for it answered with an error) holds nothing.
            s.turns.retain(|t| t.known || !t.prompts.is_empty());
        }
        drop(s);
        self.wake.notify_all();
        Ok(Some(id))
    }

    /// Whether message `id` of this stream was delivered (the client provably has it).
    pub fn has_delivered(&self, id: u64) -> bool {
        id < self.lock().delivered
    }

    /// Appends the stream's last message as it is.
    #[cfg(test)]
    pub fn push_last(&self, json: Arc<str>) -> Result<(), Overflow> {
        self.push_with(|_| json, End::Last, Mark::None, None)
            .map(|_| ())
    }

    /// Whether the stream can be forgotten: no receiver, and it ended or holds nothing and
    /// tracks no running turn (a receiver that comes back finds a new, empty one — as it
    /// would have).
    pub fn disposable(&self) -> bool {
        let s = self.lock();
        s.receiver.is_none()
            && (s.closed.is_some()
                || (s.events.is_empty() && s.turns.iter().all(|t| t.prompts.is_empty())))
    }

    /// Whether the stream's last message was handed out but is not yet delivered (it is kept,
    /// with what else is not delivered, for a receiver that comes back).
    pub fn ending(&self) -> bool {
        let s = self.lock();
        s.closed.is_none() && s.last.is_some_and(|last| last < s.sent)
    }

    /// Answers a WebSocket ping (through the socket's one writer).
    pub fn pong(&self, payload: Vec<u8>) {
        self.lock().pong = Some(payload);
        self.wake.notify_all();
    }

    pub fn close(&self, why: &str) {
        let mut s = self.lock();
        if s.closed.is_none() {
            s.closed = Some(why.to_string());
        }
        release(&mut s, &self.budget);
        drop(s);
        self.wake.notify_all();
    }

    pub fn has_receiver(&self) -> bool {
        self.lock().receiver.is_some()
    }

    /// Lets go of the receiver holding lease `lease` (its socket is gone), if it is still the
    /// active one (a resume may have taken over already): it learns it at once
    /// ([`Next::Gone`]); what it wrote and did not confirm waits for the next one.
    pub fn detach(&self, lease: u64) {
        let mut s = self.lock();
        if s.receiver != Some(lease) {
            return;
        }
        s.receiver = None;
        s.receiver_alive = None;
        drop(s);
        self.wake.notify_all();
    }

    /// [`Stream::detach`] for a WebSocket whose client sent a close frame that leaves the
    /// connection resumable: the socket's writer, the one that may write on it, echoes the
    /// close (`payload`) before it lets go ([`Next::Farewell`]).
    pub fn detach_closing(&self, lease: u64, payload: Vec<u8>) {
        let mut s = self.lock();
        if s.receiver != Some(lease) {
            return;
        }
        s.receiver = None;
        s.receiver_alive = None;
        s.farewell = Some((lease, payload));
        drop(s);
        self.wake.notify_all();
    }

    /// Becomes the stream's receiver, from the message after `last_seen` (SSE `Last-Event-ID`)
    /// or, without it, from the first message not yet delivered (what an earlier receiver was
    /// handed but could not confirm comes again). A receiver that resumes (`last_seen`: the
    /// cursor says exactly what its client has) takes the stream over from the one before,
    /// whatever the server can tell of that one's client: a half-open socket (the client's
    /// network changed) looks alive until TCP gives up on it. The receiver taken over from
    /// learns it at once ([`Next::Gone`]; its socket is then shut down) and what it wrote
    /// and did not confirm waits for the new one. A second receiver *without* a cursor is
    /// refused while the first one's client is there; one that comes after a client that has
    /// gone (closed or reset its side) takes the stream over (the server may not have seen the
    /// first one go yet: a client that reopens its stream at once must not be refused).
    /// [`Stream::acquire`] with a cursor as the client sent it (SSE `Last-Event-ID`, a
    /// WebSocket's `stream/resume`): one that is not this stream's is refused
    /// ([`Refused::Foreign`]).
    pub fn acquire_at(self: &Arc<Stream>, cursor: Option<&str>) -> Result<Lease, Refused> {
        let last_seen = match cursor {
            None => None,
            Some(c) => Some(self.read_cursor(c).ok_or(Refused::Foreign)?),
        };
        self.acquire(last_seen)
    }

    pub fn acquire(self: &Arc<Stream>, last_seen: Option<u64>) -> Result<Lease, Refused> {
        let mut s = self.lock();
        if let Some(why) = &s.closed {
            return Err(Refused::Closed(why.clone()));
        }
        // Without a cursor, a receiver whose client is there keeps its stream.
        if last_seen.is_none() && s.receiver.is_some() {
            let alive = s.receiver_alive.as_ref().is_none_or(|alive| alive());
            if alive {
                return Err(Refused::Busy);
            }
        }
        let from = match last_seen {
            None => s.delivered,
            // An id past what was ever sent would skip messages nobody read.
            Some(seen) if seen >= s.sent => return Err(Refused::Ahead),
            Some(seen) => {
                let from = seen + 1;
                // The client says it read up to `seen`.
                mark_delivered(&mut s, from, &self.budget);
                let oldest = s.events.front().map_or(s.next_id, |e| e.0);
                if from < oldest {
                    return Err(Refused::Gap);
                }
                from
            }
        };
        if s.closed.is_some() {
            // That id was the last message's: the stream ended with it.
            return Err(Refused::Closed(s.closed.clone().unwrap_or_default()));
        }
        // A receiver that comes back learns first, right after what it missed, whether its
        // sessions' turns survived (the draft's `acp/turnState`; a WebSocket's stream carries
        // every session of its connection: one message each): only for sessions of this
        // connection's, and one such message a session at the end of the stream (earlier ones
        // not delivered with nothing after them are replaced, not followed by more).
        if (last_seen.is_some() || s.leases > 0) && !s.no_turn_states {
            self.tell_turn_states(&mut s);
        }
        s.leases += 1;
        let lease = s.leases;
        s.receiver = Some(lease);
        s.receiver_alive = None;
        drop(s);
        // A receiver taken over from learns it now (`Next::Gone`), not at its next wake.
        self.wake.notify_all();
        Ok(Lease {
            stream: Arc::clone(self),
            lease,
            cursor: from,
        })
    }
}

/// The active receiver of a stream; released when dropped.
pub struct Lease {
    stream: Arc<Stream>,
    lease: u64,
    cursor: u64,
}

impl Lease {
    /// The id of the next message this receiver gets.
    #[cfg(test)]
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The cursor of message `id` of its stream (the SSE `id:`).
    pub fn cursor_of(&self, id: u64) -> String {
        self.stream.cursor(id)
    }

    /// Which lease this is (for [`Stream::detach`]).
    pub fn number(&self) -> u64 {
        self.lease
    }

    /// The messages below `upto` reached the client (it was still there well after they were
    /// written): they are delivered. Only the active receiver confirms (one taken over from
    /// had its client gone: what it wrote waits for the receiver that took over).
    pub fn confirm(&mut self, upto: u64) {
        let mut s = self.stream.lock();
        if s.receiver != Some(self.lease) {
            return;
        }
        mark_delivered(&mut s, upto.min(self.cursor), &self.stream.budget);
        let closed = s.closed.is_some();
        drop(s);
        if closed {
            self.stream.wake.notify_all();
        }
    }

    /// How to tell whether this receiver's client is still there.
    pub fn watch(&self, alive: impl Fn() -> bool + Send + 'static) {
        let mut s = self.stream.lock();
        if s.receiver == Some(self.lease) {
            s.receiver_alive = Some(Box::new(alive));
        }
    }

    /// The next message (or a pong, or the end), waiting at most `wait`.
    pub fn next(&mut self, wait: Duration) -> Next {
        let mut s = self.stream.lock();
        loop {
            if s.receiver != Some(self.lease) {
                if s.farewell.as_ref().is_some_and(|(l, _)| *l == self.lease) {
                    if let Some((_, payload)) = s.farewell.take() {
                        return Next::Farewell(payload);
                    }
                }
                return Next::Gone;
            }
            if let Some(why) = &s.closed {
                return Next::Closed(why.clone());
            }
            if let Some(p) = s.pong.take() {
                return Next::Pong(p);
            }
            if s.last.is_some_and(|last| self.cursor > last) {
                return Next::Ended;
            }
            let oldest = s.events.front().map_or(s.next_id, |e| e.0);
            let at = self.cursor.max(oldest);
            if at < s.next_id {
                let (id, json) = s.events[(at - oldest) as usize].clone();
                self.cursor = id + 1;
                s.sent = s.sent.max(id + 1);
                return Next::Event(id, json);
            }
            let (guard, timeout) = self
                .stream
                .wake
                .wait_timeout(s, wait)
                .unwrap_or_else(|p| p.into_inner());
            s = guard;
            if timeout.timed_out() {
                return Next::Idle;
            }
        }
    }
}

impl Stream {
    /// Appends the turn state of each known session (see [`Stream::acquire`]).
    fn tell_turn_states(&self, s: &mut Inner) {
        let states: Vec<(String, Value)> = s
            .turns
            .iter()
            .filter(|t| t.known)
            .map(|t| (t.session.clone(), turn_state(t)))
            .collect();
        if states.is_empty() {
            return;
        }
        let count = states.len() as u64;
        // Replaced only by as many or more: an id once handed out never names another message
        // with fewer (a client may hold the cursor of the last of them).
        let first = match s.turn_states {
            Some((at, n)) if at >= s.delivered && at + n == s.next_id && n <= count => at,
            _ => s.next_id,
        };
        for (i, (session, state)) in states.iter().enumerate() {
            let id = first + i as u64;
            let make = |id| turn_state_update(session, state, &self.cursor(id));
            if id < s.next_id {
                replace_at(s, &self.budget, id, || make(id));
            } else if append(s, &self.budget, make).is_err() {
                break;
            }
        }
        s.turn_states = Some((first, s.next_id - first));
    }
}

/// Where the turn of `session` is in `s.turns`: a session's stream's own; on a WebSocket's,
/// made when first seen (at most [`TRACKED_SESSIONS`]: an idle one, or the oldest, is
/// forgotten).
fn turn_at(s: &mut Inner, session: &str) -> Option<usize> {
    if let Some(at) = s.turns.iter().position(|t| t.session == session) {
        return Some(at);
    }
    if !s.grows {
        return None;
    }
    if s.turns.len() >= TRACKED_SESSIONS {
        let idle = s.turns.iter().position(|t| t.prompts.is_empty());
        s.turns.remove(idle.unwrap_or(0));
    }
    s.turns.push(Turn::new(session));
    Some(s.turns.len() - 1)
}

/// Appends the message `make` builds with the next id, if the connection's budget has room.
fn append(
    s: &mut Inner,
    budget: &Budget,
    make: impl FnOnce(u64) -> Arc<str>,
) -> Result<(), Overflow> {
    let id = s.next_id;
    let json = make(id);
    let len = json.len();
    if !budget.take_waiting(len) {
        return Err(Overflow);
    }
    s.next_id += 1;
    s.waiting_bytes += len;
    s.events.push_back((id, json));
    Ok(())
}

/// Replaces message `id` of the stream (kept: not delivered) with what `make` builds, if the
/// connection's budget has room for the difference (else it stays as it was).
fn replace_at(s: &mut Inner, budget: &Budget, id: u64, make: impl FnOnce() -> Arc<str>) {
    let oldest = s.events.front().map_or(s.next_id, |e| e.0);
    let Some(at) = id.checked_sub(oldest).map(|at| at as usize) else {
        return;
    };
    let Some(old) = s.events.get(at).map(|e| e.1.len()) else {
        return;
    };
    let json = make();
    if json.len() > old && !budget.take_waiting(json.len() - old) {
        return;
    }
    if json.len() < old {
        give_back(&budget.waiting, old - json.len());
    }
    s.waiting_bytes = s.waiting_bytes.saturating_sub(old) + json.len();
    if let Some(e) = s.events.get_mut(at) {
        e.1 = json;
    }
}

/// The `_meta` entry of a message's cursor: the SSE id, an opaque string (a tag and a number:
/// no character JSON escapes).
fn cursor_entry(cursor: &str) -> String {
    format!("\"acp/cursor\":\"{cursor}\"")
}

/// A session's turn state, the draft's advisory `acp/turnState`: `running` while a prompt
/// posted here is unanswered (`requires_action` while the client owes an answer to one of the
/// agent's requests), else `idle`; `promptRequestId` is the running prompt's JSON-RPC id.
fn turn_state(t: &Turn) -> Value {
    match t.prompts.front() {
        None => json!({"state": "idle", "promptRequestId": null}),
        Some((_, id)) => {
            let state = if t.asking.is_empty() {
                "running"
            } else {
                "requires_action"
            };
            json!({"state": state, "promptRequestId": id})
        }
    }
}

/// A `session_info_update` that carries only the turn state (and its cursor).
fn turn_state_update(session: &str, state: &Value, cursor: &str) -> Arc<str> {
    json!({"jsonrpc": "2.0", "method": "session/update", "params": {
        "_meta": {"acp/cursor": cursor, "acp/turnState": state},
        "sessionId": session,
        "update": {"sessionUpdate": "session_info_update"}}})
    .to_string()
    .into()
}

/// What one receiver wrote and has not confirmed: which messages, through which byte of its
/// socket, and since when the client's TCP has acknowledged them (bounded: one entry per
/// [`CONFIRM_STEP`] of writes, and writes stop while the socket's buffer is full).
#[derive(Default)]
pub struct Unconfirmed {
    /// (when written, the cursor after it, the bytes written through it, when acknowledged).
    writes: VecDeque<(Instant, u64, u64, Option<Instant>)>,
    /// Bytes written on the socket since the receiver began.
    written: u64,
}

impl Unconfirmed {
    /// `bytes` were written on the socket: message `id`'s, or a comment's (`None`).
    pub fn wrote(&mut self, id: Option<u64>, bytes: usize, now: Instant) {
        self.written = self.written.saturating_add(bytes as u64);
        let Some(id) = id else {
            return;
        };
        match self.writes.back_mut() {
            Some((at, upto, end, None)) if now.duration_since(*at) < CONFIRM_STEP => {
                *upto = id + 1;
                *end = self.written;
            }
            _ => self.writes.push_back((now, id + 1, self.written, None)),
        }
    }

    /// With `unacked` bytes still unacknowledged on the socket (its send queue), the cursor
    /// below which the messages are delivered, if it moved.
    pub fn settle(&mut self, unacked: u64, now: Instant) -> Option<u64> {
        let acked = self.written.saturating_sub(unacked);
        for (_, _, end, since) in self.writes.iter_mut() {
            if *end > acked {
                break;
            }
            since.get_or_insert(now);
        }
        let mut upto = None;
        while let Some(&(_, cursor, _, Some(since))) = self.writes.front() {
            if now.duration_since(since) < CONFIRM_AFTER {
                break;
            }
            upto = Some(cursor);
            self.writes.pop_front();
        }
        upto
    }

    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }
}

/// The bytes of the kept messages with ids in `from..to` (ids are consecutive: an index range).
fn bytes_between(s: &Inner, from: u64, to: u64) -> usize {
    let oldest = s.events.front().map_or(s.next_id, |e| e.0);
    let start = from.saturating_sub(oldest).min(s.events.len() as u64) as usize;
    let end = to.saturating_sub(oldest).min(s.events.len() as u64) as usize;
    s.events
        .range(start..end.max(start))
        .map(|e| e.1.len())
        .sum()
}

/// Counts the messages below `upto` as delivered (each one's bytes move from waiting to
/// replay once), then forgets what falls out of the replay window. The stream ends once its
/// last message is delivered.
fn mark_delivered(s: &mut Inner, upto: u64, budget: &Budget) {
    if upto <= s.delivered {
        return;
    }
    let moved = bytes_between(s, s.delivered, upto);
    s.delivered = upto;
    s.waiting_bytes = s.waiting_bytes.saturating_sub(moved);
    give_back(&budget.waiting, moved);
    s.delivered_bytes = s.delivered_bytes.saturating_add(moved);
    budget.replay.fetch_add(moved, Ordering::AcqRel);
    evict_replayed(s, budget);
    if s.closed.is_none() && s.last.is_some_and(|last| last < s.delivered) {
        s.closed = Some(super::conn::SESSION_CLOSED.into());
        release(s, budget);
    }
}

/// Gives what the stream holds back to the connection's budget.
fn release(s: &mut Inner, budget: &Budget) {
    give_back(&budget.waiting, std::mem::take(&mut s.waiting_bytes));
    give_back(&budget.replay, std::mem::take(&mut s.delivered_bytes));
    s.events.clear();
}

/// Forgets the oldest messages delivered beyond the stream's replay window, or while the
/// connection's streams together keep more than theirs (never one not delivered).
fn evict_replayed(s: &mut Inner, budget: &Budget) {
    while s.delivered_bytes > REPLAY_WINDOW_BYTES
        || budget.replay.load(Ordering::Acquire) > CONNECTION_REPLAY_BYTES
        || s.events
            .front()
            .is_some_and(|e| s.delivered - e.0 > REPLAY_WINDOW_MESSAGES as u64)
    {
        match s.events.front() {
            Some((id, json)) if *id < s.delivered => {
                s.delivered_bytes = s.delivered_bytes.saturating_sub(json.len());
                give_back(&budget.replay, json.len());
                s.events.pop_front();
            }
            _ => break,
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        give_back(&self.budget.waiting, s.waiting_bytes);
        give_back(&self.budget.replay, s.delivered_bytes);
        s.waiting_bytes = 0;
        s.delivered_bytes = 0;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut s = self.stream.lock();
        if s.receiver == Some(self.lease) {
            s.receiver = None;
            s.receiver_alive = None;
        }
        drop(s);
        self.stream.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(next: Next) -> (u64, String) {
        match next {
            Next::Event(id, json) => (id, json.to_string()),
            _ => panic!("expected an event"),
        }
    }

    #[test]
    fn a_receiver_that_comes_back_gets_what_it_missed_and_a_second_one_is_refused() {
        let s = Stream::new();
        for m in ["a", "b", "c"] {
            assert!(s.push(m.into()).is_ok());
        }
        let mut first = s.acquire(None).ok().unwrap();
        assert!(matches!(s.acquire(None), Err(Refused::Busy)));
        assert_eq!(event(first.next(Duration::ZERO)), (1, "a".into()));
        assert_eq!(event(first.next(Duration::ZERO)), (2, "b".into()));
        // Reopening without a cursor does not take a stream from a receiver whose client is
        // there; resuming with one does (the first may be half-open: the cursor says what the
        // client has).
        let mut again = s.acquire(Some(1)).ok().unwrap();
        assert!(matches!(first.next(Duration::ZERO), Next::Gone));
        drop(first);
        assert_eq!(event(again.next(Duration::ZERO)), (2, "b".into()));
        assert_eq!(event(again.next(Duration::ZERO)), (3, "c".into()));
        assert!(matches!(again.next(Duration::ZERO), Next::Idle));
        again.confirm(again.cursor());
        drop(again);
        // Without Last-Event-ID: only what was never delivered.
        assert!(s.push("d".into()).is_ok());
        let mut fresh = s.acquire(None).ok().unwrap();
        assert_eq!(event(fresh.next(Duration::ZERO)), (4, "d".into()));
        // A receiver whose client has gone is replaced without waiting for the server to see it.
        fresh.watch(|| false);
        assert!(s.acquire(None).is_ok());
    }

    #[test]
    fn what_left_the_replay_window_is_a_refusal_not_a_gap() {
        let s = Stream::new();
        let big: Arc<str> = "x".repeat(REPLAY_WINDOW_BYTES / 2 + 1).into();
        let mut lease = s.acquire(None).ok().unwrap();
        for _ in 0..3 {
            assert!(s.push(Arc::clone(&big)).is_ok());
            event(lease.next(Duration::ZERO));
        }
        // Handed out but not confirmed: kept, whatever their size.
        assert_eq!(s.lock().events.len(), 3);
        lease.confirm(lease.cursor());
        drop(lease);
        assert!(matches!(s.acquire(Some(0)), Err(Refused::Gap)));
        assert!(s.acquire(Some(2)).is_ok());
    }

    /// The bytes counted as waiting and as delivered are exactly those of the kept messages.
    fn accounted(s: &Stream) -> bool {
        let i = s.lock();
        let (delivered, waiting): (Vec<_>, Vec<_>) =
            i.events.iter().partition(|e| e.0 < i.delivered);
        let sum = |v: Vec<&(u64, Arc<str>)>| v.iter().map(|e| e.1.len()).sum::<usize>();
        sum(delivered) == i.delivered_bytes && sum(waiting) == i.waiting_bytes
    }

    #[test]
    fn a_last_event_id_beyond_what_was_sent_is_refused_and_the_bytes_stay_accounted() {
        let s = Stream::new();
        for m in ["a", "bb", "ccc"] {
            assert!(s.push(m.into()).is_ok());
        }
        // Nothing handed out yet: any id but 0 names an event this stream never sent.
        assert!(matches!(s.acquire(Some(2)), Err(Refused::Ahead)));
        let mut lease = s.acquire(Some(0)).ok().unwrap();
        assert_eq!(event(lease.next(Duration::ZERO)), (1, "a".into()));
        drop(lease);
        assert!(matches!(s.acquire(Some(99)), Err(Refused::Ahead)));
        assert!(accounted(&s));
        let mut lease = s.acquire(Some(1)).ok().unwrap();
        assert_eq!(event(lease.next(Duration::ZERO)), (2, "bb".into()));
        assert!(accounted(&s));
        // Past the replay window, eviction takes back exactly what was delivered.
        let big: Arc<str> = "x".repeat(REPLAY_WINDOW_BYTES).into();
        assert!(s.push(Arc::clone(&big)).is_ok());
        for _ in 0..2 {
            event(lease.next(Duration::ZERO));
        }
        assert!(accounted(&s));
        lease.confirm(lease.cursor());
        assert!(accounted(&s));
        drop(lease);
        assert!(s.acquire(Some(4)).is_ok());
    }

    #[test]
    fn a_connections_streams_share_one_budget_given_back_when_they_end() {
        let budget: Arc<Budget> = Arc::default();
        let (a, b) = (
            Stream::new_in(Arc::clone(&budget), "a"),
            Stream::new_in(Arc::clone(&budget), "b"),
        );
        let big: Arc<str> = "x".repeat(MAX_BUFFERED_BYTES / 2).into();
        assert!(a.push(Arc::clone(&big)).is_ok());
        assert!(b.push(Arc::clone(&big)).is_ok());
        // Together they hold the connection's bound: a third message anywhere overflows.
        assert!(a.push("y".into()).is_err());
        assert!(Stream::new_in(Arc::clone(&budget), "c")
            .push("y".into())
            .is_err());
        // Delivered, the bytes move to the replay budget (kept within its bound)...
        let mut lease = a.acquire(None).ok().unwrap();
        event(lease.next(Duration::ZERO));
        assert!(b.push("y".into()).is_err(), "handed out is not delivered");
        lease.confirm(lease.cursor());
        assert!(budget.replay.load(Ordering::Acquire) <= CONNECTION_REPLAY_BYTES);
        assert!(b.push("y".into()).is_ok());
        drop(lease);
        // ...and a stream that ends or is dropped gives back all it held.
        b.close("test");
        drop(a);
        assert_eq!(budget.waiting.load(Ordering::Acquire), 0);
        assert_eq!(budget.replay.load(Ordering::Acquire), 0);
    }

    #[test]
    fn what_a_vanished_receiver_could_not_confirm_is_handed_out_again() {
        let s = Stream::new();
        for m in ["a", "b", "c"] {
            assert!(s.push(m.into()).is_ok());
        }
        let mut lease = s.acquire(None).ok().unwrap();
        event(lease.next(Duration::ZERO));
        lease.confirm(lease.cursor());
        event(lease.next(Duration::ZERO));
        event(lease.next(Duration::ZERO));
        // Its client is gone; a receiver comes without Last-Event-ID before the server saw
        // it go: it takes over, and gets what the gone one could not confirm.
        lease.watch(|| false);
        let mut again = s.acquire(None).ok().unwrap();
        assert!(matches!(lease.next(Duration::ZERO), Next::Gone));
        lease.confirm(4);
        drop(lease);
        assert!(accounted(&s));
        assert_eq!(event(again.next(Duration::ZERO)), (2, "b".into()));
        assert_eq!(event(again.next(Duration::ZERO)), (3, "c".into()));
        assert!(accounted(&s));
        // The same when the server saw it go first (the receiver simply ends).
        drop(again);
        let mut third = s.acquire(None).ok().unwrap();
        assert_eq!(event(third.next(Duration::ZERO)), (2, "b".into()));
        assert!(accounted(&s));
    }

    #[test]
    fn a_sessions_last_message_ends_its_stream_once_delivered() {
        let s = Stream::new();
        assert!(s.push("a".into()).is_ok());
        assert!(s.push_last("closed".into()).is_ok());
        let mut lease = s.acquire(None).ok().unwrap();
        event(lease.next(Duration::ZERO));
        assert_eq!(event(lease.next(Duration::ZERO)), (2, "closed".into()));
        assert!(matches!(lease.next(Duration::ZERO), Next::Ended));
        assert!(s.ending() && !s.disposable());
        // Not confirmed (the socket broke): the next receiver gets it again.
        drop(lease);
        let mut again = s.acquire(None).ok().unwrap();
        assert_eq!(event(again.next(Duration::ZERO)), (1, "a".into()));
        assert_eq!(event(again.next(Duration::ZERO)), (2, "closed".into()));
        again.confirm(again.cursor());
        assert!(matches!(again.next(Duration::ZERO), Next::Closed(_)));
        drop(again);
        assert!(!s.ending() && s.disposable());
        assert!(matches!(s.acquire(None), Err(Refused::Closed(_))));
    }

    /// A message after the last (the session loaded again within the second its close answer
    /// waits for confirmation): the session is live again, and nothing is lost with the end.
    #[test]
    fn a_message_after_the_last_keeps_the_stream_going() {
        let s = Stream::new();
        assert!(s.push("update".into()).is_ok());
        assert!(s.push_last("close answer".into()).is_ok());
        assert!(s.push("load answer".into()).is_ok());
        let mut lease = s.acquire(None).ok().unwrap();
        assert_eq!(event(lease.next(Duration::ZERO)).0, 1);
        assert_eq!(event(lease.next(Duration::ZERO)).0, 2);
        assert_eq!(event(lease.next(Duration::ZERO)), (3, "load answer".into()));
        lease.confirm(lease.cursor());
        assert!(matches!(lease.next(Duration::ZERO), Next::Idle));
        assert!(!s.ending() && !s.disposable());
        assert!(accounted(&s));
    }

    /// A kept answer sent again for a retry ([`End::Keep`]) leaves the stream's end as it
    /// was: it does not end a live session's stream (the session loaded again after the close
    /// whose answer is repeated), nor make a closing one live again; a closed stream takes
    /// nothing and says so (the caller puts the message where the connection's go).
    #[test]
    fn an_answer_sent_again_leaves_the_streams_end_as_it_was() {
        let again = |s: &Stream, m: &str| {
            let m: Arc<str> = m.into();
            s.push_with(|_| m, End::Keep, Mark::None, None)
                .ok()
                .flatten()
        };
        let live = Stream::new();
        assert!(live.push_last("close answer".into()).is_ok());
        assert!(live.push("load answer".into()).is_ok());
        assert_eq!(again(&live, "close answer again"), Some(3));
        let mut lease = live.acquire(None).ok().unwrap();
        for id in 1..=3 {
            assert_eq!(event(lease.next(Duration::ZERO)).0, id);
        }
        lease.confirm(lease.cursor());
        assert!(matches!(lease.next(Duration::ZERO), Next::Idle));
        drop(lease);
        assert!(live.acquire(Some(3)).is_ok(), "the live stream ended");

        let closing = Stream::new();
        assert!(closing.push_last("close answer".into()).is_ok());
        assert_eq!(again(&closing, "a prompt's answer again"), Some(2));
        let mut lease = closing.acquire(None).ok().unwrap();
        assert_eq!(
            event(lease.next(Duration::ZERO)),
            (1, "close answer".into())
        );
        assert!(matches!(lease.next(Duration::ZERO), Next::Ended));
        lease.confirm(lease.cursor());
        drop(lease);
        assert!(matches!(closing.acquire(None), Err(Refused::Closed(_))));
        assert_eq!(
            again(&closing, "late"),
            None,
            "a closed stream took a message"
        );
    }

    /// A session's stream forgotten once it kept nothing (all delivered, out of the replay
    /// window) and made again continues its numbering: its receiver resumes with the last id
    /// it read, and an older id is a gap (410), not an id "never sent" (400).
    #[test]
    fn a_stream_made_again_continues_the_numbering_of_the_forgotten_one() {
        let first = Stream::new();
        for m in ["a", "b", "c"] {
            assert!(first.push(m.into()).is_ok());
        }
        let mut lease = first.acquire(None).ok().unwrap();
        for _ in 0..3 {
            event(lease.next(Duration::ZERO));
        }
        lease.confirm(lease.cursor());
        drop(lease);
        {
            let mut i = first.lock();
            i.events.clear(); // what eviction does to a stream past its replay window
        }
        assert!(first.disposable());
        let (next_id, ended) = first.continues_at().unwrap();
        assert_eq!((next_id, ended), (4, false));
        let again = Stream::resumed_in(Arc::default(), first.tag(), next_id);
        assert!(again.acquire(Some(3)).is_ok());
        assert!(matches!(again.acquire(Some(1)), Err(Refused::Gap)));
        assert!(again.push("d".into()).is_ok());
        let mut lease = again.acquire(Some(3)).ok().unwrap();
        assert_eq!(event(lease.next(Duration::ZERO)), (4, "d".into()));
        // One that never carried a message starts at 1, as any new stream.
        assert_eq!(Stream::new().continues_at(), None);
    }

    #[test]
    fn a_write_is_confirmed_a_second_after_the_clients_tcp_acknowledged_it() {
        let t0 = Instant::now();
        let mut u = Unconfirmed::default();
        u.wrote(Some(1), 10, t0);
        u.wrote(None, 3, t0 + Duration::from_millis(50));
        u.wrote(Some(2), 10, t0 + Duration::from_millis(200));
        // Long after the writes, nothing acknowledged: nothing confirmed.
        assert_eq!(u.settle(23, t0 + Duration::from_secs(5)), None);
        // The first message's bytes acknowledged: confirmed a second later, not before.
        assert_eq!(u.settle(13, t0 + Duration::from_secs(6)), None);
        assert_eq!(u.settle(13, t0 + Duration::from_millis(6999)), None);
        assert_eq!(u.settle(13, t0 + Duration::from_secs(7)), Some(2));
        assert_eq!(u.settle(0, t0 + Duration::from_secs(7)), None);
        assert_eq!(u.settle(0, t0 + Duration::from_secs(8)), Some(3));
        assert!(u.is_empty());
    }

    /// A receiver that comes back to a session's stream gets, right after what it missed, the
    /// turn state: `running` with the prompt's id while its answer is not out,
    /// `requires_action` while the client owes the agent an answer, `idle` after.
    #[test]
    fn a_receiver_that_comes_back_learns_the_turn_state_after_its_replay() {
        let line = |m: crate::jsonrpc::Message| m.to_routed_line();
        // The last message handed out (without Last-Event-ID, what was not confirmed comes
        // again first): the turn state.
        let state = |lease: &mut Lease| {
            let mut last = None;
            while let Next::Event(_, json) = lease.next(Duration::ZERO) {
                last = Some(json);
            }
            let v: Value = serde_json::from_str(&last.unwrap()).unwrap();
            v["params"]["_meta"]["acp/turnState"].clone()
        };
        let s = Stream::for_session(Arc::default(), "s", "t", 1, Version::V1);
        // The first receiver learns nothing (nothing to resume).
        let mut first = s.acquire(None).ok().unwrap();
        assert!(matches!(first.next(Duration::ZERO), Next::Idle));
        drop(first);
        s.turn_posted("s", "number:7", &json!(7));
        let update = line(crate::jsonrpc::Message::notification(
            "session/update",
            json!({"sessionId": "s", "update": {}}),
        ));
        assert!(s.push_line(&update, End::No, Mark::None).is_ok());
        let mut again = s.acquire(Some(0)).ok().unwrap();
        assert_eq!(event(again.next(Duration::ZERO)).0, 1, "the replay first");
        assert_eq!(
            state(&mut again),
            json!({"state": "running", "promptRequestId": 7})
        );
        drop(again);
        let ask = line(crate::jsonrpc::Message::request(
            crate::jsonrpc::RequestId::Int(0),
            "session/request_permission",
            json!({"sessionId": "s"}),
        ));
        assert!(s.push_line(&ask, End::No, Mark::Asks("number:0")).is_ok());
        let mut lease = s.acquire(None).ok().unwrap();
        assert_eq!(state(&mut lease)["state"], "requires_action");
        drop(lease);
        s.answered("number:0");
        let mut lease = s.acquire(None).ok().unwrap();
        assert_eq!(state(&mut lease)["state"], "running");
        drop(lease);
        let answer = line(crate::jsonrpc::Message::response(
            crate::jsonrpc::RequestId::Int(7),
            Ok(json!({"stopReason": "end_turn"})),
        ));
        assert!(s
            .push_line(&answer, End::No, Mark::Answers("number:7"))
            .is_ok());
        let mut lease = s.acquire(None).ok().unwrap();
        assert_eq!(
            state(&mut lease),
            json!({"state": "idle", "promptRequestId": null})
        );
        assert!(accounted(&s));
    }

    /// A session's stream on an ACP v2 connection tracks no prompt and tells no turn state: a
    /// v2 prompt is answered at its insertion, so its answer would make serve say `idle` while
    /// the turn runs, and the state is the agent's to tell (`state_update`).
    #[test]
    fn a_v2_session_stream_tells_no_turn_state() {
        let s = Stream::for_session(Arc::default(), "s", "t", 1, Version::V2);
        s.turn_posted("s", "number:7", &json!(7));
        let update = crate::jsonrpc::Message::notification(
            "session/update",
            json!({"sessionId": "s", "update": {}}),
        )
        .to_routed_line();
        assert!(s.push_line(&update, End::No, Mark::None).is_ok());
        let mut again = s.acquire(Some(0)).ok().unwrap();
        assert_eq!(event(again.next(Duration::ZERO)).0, 1, "the replay");
        assert!(
            matches!(again.next(Duration::ZERO), Next::Idle),
            "and nothing of serve's after it"
        );
        assert!(
            s.lock().turns.iter().all(|t| t.prompts.is_empty()),
            "no prompt tracked"
        );
        assert!(accounted(&s));
    }

    /// Receivers that come back one after another without confirming anything get one turn
    /// state message, the latest, not one more each (stale states piling up for every later
    /// receiver, and counted against the connection's budget); a stream of a session the agent
    /// never wrote for (a made-up session id) gets none, and is forgotten once its receiver
    /// leaves.
    #[test]
    fn the_turn_state_is_replaced_not_piled_up_and_only_for_a_known_session() {
        let line = |m: crate::jsonrpc::Message| m.to_routed_line();
        let made_up = Stream::for_session(Arc::default(), "made-up", "m", 1, Version::V1);
        let mut lease = made_up.acquire(Some(0)).ok().unwrap();
        assert!(matches!(lease.next(Duration::ZERO), Next::Idle));
        drop(lease);
        assert!(
            made_up.disposable(),
            "a made-up session's stream holds nothing"
        );
        // An error answer (a prompt for a session this connection does not have) is no sign.
        made_up.turn_posted("made-up", "number:1", &json!(1));
        let error = line(crate::jsonrpc::Message::response(
            crate::jsonrpc::RequestId::Int(1),
            Err(crate::jsonrpc::ResponseError::new(
                -32602,
                "no such session",
            )),
        ));
        assert!(made_up
            .push_line(&error, End::No, Mark::Answers("number:1"))
            .is_ok());
        let mut lease = made_up.acquire(Some(0)).ok().unwrap();
        assert_eq!(event(lease.next(Duration::ZERO)).0, 1);
        assert!(
            matches!(lease.next(Duration::ZERO), Next::Idle),
            "no turn state"
        );
        drop(lease);

        let s = Stream::for_session(Arc::default(), "s", "t", 1, Version::V1);
        let update = line(crate::jsonrpc::Message::notification(
            "session/update",
            json!({"sessionId": "s", "update": {}}),
        ));
        assert!(s.push_line(&update, End::No, Mark::None).is_ok());
        s.turn_posted("s", "number:7", &json!(7));
        for _ in 0..3 {
            let mut lease = s.acquire(Some(0)).ok().unwrap();
            assert_eq!(event(lease.next(Duration::ZERO)).0, 1);
            let (id, json) = event(lease.next(Duration::ZERO));
            assert_eq!(id, 2, "one turn state, the same cursor");
            assert!(json.contains("\"running\""), "{json}");
            assert!(json.contains("\"acp/cursor\":\"t-2\""), "{json}");
            assert!(matches!(lease.next(Duration::ZERO), Next::Idle));
        }
        assert_eq!(s.lock().events.len(), 2);
        assert!(accounted(&s));
        // The turn ended: the state message still waiting says so (replaced, not followed).
        s.lock().turns[0].prompts.clear();
        let mut lease = s.acquire(None).ok().unwrap();
        assert_eq!(event(lease.next(Duration::ZERO)).0, 1);
        let (id, json) = event(lease.next(Duration::ZERO));
        assert_eq!(id, 2);
        assert!(json.contains("\"idle\""), "{json}");
        assert!(accounted(&s));
        // Once something follows it, a receiver coming back gets a new one after that.
        drop(lease);
        assert!(s.push_line(&update, End::No, Mark::None).is_ok());
        let mut lease = s.acquire(Some(2)).ok().unwrap();
        assert_eq!(event(lease.next(Duration::ZERO)).0, 3);
        let (id, json) = event(lease.next(Duration::ZERO));
        assert_eq!(id, 4);
        assert!(json.contains("acp/turnState"), "{json}");
        assert!(accounted(&s));
    }

    /// A WebSocket's stream carries every session of its connection: a receiver that comes
    /// back learns each known session's turn state, one message each after its replay (none
    /// for a made-up session whose prompt was refused), replaced as a whole when it comes back
    /// again before anything else was sent.
    #[test]
    fn a_websockets_stream_tells_each_sessions_turn_state() {
        use crate::jsonrpc::{Message, RequestId, ResponseError};
        let s = Stream::for_websocket(Arc::default(), "w");
        let update = |sid: &str| {
            Message::notification("session/update", json!({"sessionId": sid, "update": {}}))
                .to_routed_line()
        };
        s.turn_posted("a", "number:1", &json!(1));
        assert!(s.push_line(&update("a"), End::No, Mark::None).is_ok());
        assert!(s.push_line(&update("b"), End::No, Mark::None).is_ok());
        s.turn_posted("made-up", "number:3", &json!(3));
        let refused = Message::response(
            RequestId::Int(3),
            Err(ResponseError::new(-32602, "no such session")),
        )
        .to_routed_line();
        assert!(s
            .push_line(&refused, End::No, Mark::Answers("number:3"))
            .is_ok());
        let states = |lease: &mut Lease| {
            let mut out = vec![];
            while let Next::Event(id, json) = lease.next(Duration::ZERO) {
                let v: Value = serde_json::from_str(&json).unwrap();
                if let Some(state) = v.pointer("/params/_meta/acp~1turnState") {
                    out.push((id, v["params"]["sessionId"].clone(), state["state"].clone()));
                }
            }
            out
        };
        for _ in 0..2 {
            let mut lease = s.acquire(Some(0)).ok().unwrap();
            assert_eq!(
                states(&mut lease),
                vec![
                    (4, json!("a"), json!("running")),
                    (5, json!("b"), json!("idle"))
                ]
            );
        }
        let answer = Message::response(RequestId::Int(1), Ok(json!({"stopReason": "end_turn"})))
            .to_routed_line();
        assert!(s
            .push_line(&answer, End::No, Mark::Answers("number:1"))
            .is_ok());
        let mut lease = s.acquire(Some(0)).ok().unwrap();
        assert_eq!(
            states(&mut lease),
            vec![
                (4, json!("a"), json!("running")),
                (5, json!("b"), json!("idle")),
                (7, json!("a"), json!("idle")),
                (8, json!("b"), json!("idle"))
            ]
        );
        assert!(accounted(&s));
    }

    /// A socket whose reader sees it gone only after a resume took its stream over lets go of
    /// its own lease, never of the one that took over.
    #[test]
    fn detaching_a_receiver_taken_over_leaves_the_new_one() {
        let s = Stream::new();
        assert!(s.push("a".into()).is_ok());
        let old = s.acquire(None).ok().unwrap();
        old.watch(|| false);
        let mut new = s.acquire(Some(0)).ok().unwrap();
        s.detach(old.number());
        assert_eq!(event(new.next(Duration::ZERO)), (1, "a".into()));
        s.detach(new.number());
        assert!(matches!(new.next(Duration::ZERO), Next::Gone));
    }

    /// A cursor is its stream's tag and a number: another stream's (another tag), a bare
    /// number, or a made-up one is refused, never taken as this stream's; `0` is a client's
    /// that read nothing yet.
    #[test]
    fn a_cursor_of_another_stream_is_foreign() {
        let budget: Arc<Budget> = Arc::default();
        let (a, b) = (
            Stream::new_in(Arc::clone(&budget), "aa"),
            Stream::new_in(Arc::clone(&budget), "bb"),
        );
        for m in ["x", "y", "z"] {
            assert!(a.push(m.into()).is_ok() && b.push(m.into()).is_ok());
        }
        let mut lease = b.acquire(None).ok().unwrap();
        for _ in 0..3 {
            event(lease.next(Duration::ZERO));
        }
        drop(lease);
        assert_eq!(a.cursor(2), "aa-2");
        for foreign in ["aa-2", "2", "bb-", "bb-+2", "bb-2-2", "x"] {
            assert!(
                matches!(b.acquire_at(Some(foreign)), Err(Refused::Foreign)),
                "{foreign}"
            );
        }
        let mut lease = b.acquire_at(Some("bb-2")).ok().unwrap();
        assert_eq!(event(lease.next(Duration::ZERO)), (3, "z".into()));
        drop(lease);
        assert!(b.acquire_at(Some("0")).is_ok());
    }

    #[test]
    fn unread_messages_past_the_bound_overflow() {
        let s = Stream::new();
        let big: Arc<str> = "x".repeat(MAX_BUFFERED_BYTES / 2).into();
        assert!(s.push(Arc::clone(&big)).is_ok());
        assert!(s.push(Arc::clone(&big)).is_ok());
        assert!(s.push("y".into()).is_err());
    }
}
