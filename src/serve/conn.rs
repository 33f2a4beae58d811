//! One ACP connection over HTTP or WebSocket: the same agent core the stdio transport drives
//! (`acp::serve` over a `jsonrpc::Connection`), fed from a channel instead of stdin, its output
//! routed to streams instead of stdout. Routing follows the SDK's server: a response goes where
//! its request came from (`session/load`'s too, after its replay), a request or notification with
//! a `sessionId` to that session's stream, everything else to the connection's stream; over
//! WebSocket, everything to the one socket.

use super::peek::Fields;
use super::stream::{Budget, End, Lease, Mark, Refused, Stream};
use crate::acp::out::Version;
use crate::acp::{AdapterConfig, LocalHost};
use crate::http::Principal;
use crate::jsonrpc::{lock, Kind, Line, LineSink, RequestId};
use crossbeam_channel::{bounded, Receiver, Sender};
use serde_json::Value;
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, BufRead, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Messages waiting for the connection's reader (then its dispatcher's own bounded inbox).
const INBOX: usize = 64;
/// Session streams one connection may hold (live ones: a stream is dropped once its session's
/// close answer was handed out, or when it has no receiver and holds nothing). A request over
/// it is refused (429); the connection goes on.
pub const MAX_SESSIONS: usize = 256;
/// Longest connection or session id routed (the SDK's `DEFAULT_MAX_ID_LENGTH`).
pub const MAX_ID_LENGTH: usize = 1024;

#[derive(Clone, PartialEq)]
pub enum Route {
    Connection,
    Session(String),
}

impl Route {
    /// Feeds the route to a hasher (a stream's tag, a request's fingerprint).
    fn hash_into(&self, h: &mut impl Hasher) {
        match self {
            Route::Connection => h.write_u8(0),
            Route::Session(s) => {
                h.write_u8(1);
                h.write(s.as_bytes());
            }
        }
    }
}

pub struct AcpConn {
    pub id: String,
    pub websocket: bool,
    /// Who opened it (`None` only where no principal is known, as in unit tests): every
    /// request on it must come from the same principal.
    pub principal: Option<Arc<Principal>>,
    /// Lines for the agent; `None` once the connection is closed (the agent sees the end of
    /// its input and takes its EOF path: answers, cancels turns, releases sessions).
    inbox: Mutex<Option<Sender<Vec<u8>>>>,
    /// Where the `initialize` response goes (the POST that opened the connection waits).
    initial: Mutex<Option<Sender<Arc<str>>>>,
    pub stream: Arc<Stream>,
    sessions: Mutex<HashMap<String, Arc<Stream>>>,
    /// Where the forgotten session streams' numbering left off (at most [`MAX_FORGOTTEN`]),
    /// so that one made again continues it. Locked inside `sessions`.
    forgotten: Mutex<HashMap<String, Forgotten>>,
    /// Session streams made (each one's tag hashes its number in).
    incarnations: AtomicU64,
    /// The bytes all these streams hold.
    budget: Arc<Budget>,
    /// The client's requests by their id's key: those in progress (their routes) and those
    /// answered lately (their answers, for a retry).
    pending: Mutex<Requests>,
    /// Keys the fingerprints of requests (random per connection).
    fingerprints: RandomState,
    /// The agent's requests' routes, for checking the client's answers.
    asked: Mutex<HashMap<String, Route>>,
    last_active: Mutex<Instant>,
    closed: Mutex<Option<String>>,
    /// What the `initialize` answer advertises of the transport (`agentCapabilities._meta`),
    /// and the id key of the `initialize` it answers (a WebSocket's: its first message).
    advertised: Value,
    initialize_key: Mutex<Option<String>>,
    /// The ACP version the connection speaks: its first `initialize` answer's
    /// `protocolVersion`, read where that answer is given its `acp/transport` (a later
    /// `initialize` never changes it: the agent answers a repeat with the version it chose).
    /// Until then, none (no session stream exists before the answer: its connection id comes
    /// with it).
    version: OnceLock<Version>,
}

/// The key of a JSON-RPC id (the SDK's `messageIdKey`), for the ids the agent's JSON-RPC layer
/// reads and echoes (`RequestId`'s one rule: `1.0` or `true` is none, so no route waits for
/// an answer that never comes).
pub fn id_key(id: &serde_json::Value) -> Option<String> {
    Some(request_key(&RequestId::from_value(id)?))
}

/// The key of an id the agent wrote (its line's head: nothing is read again).
pub fn request_key(id: &RequestId) -> String {
    match id {
        RequestId::Str(s) => format!("string:{s}"),
        RequestId::Null => "null".into(),
        RequestId::Int(n) => format!("number:{n}"),
        RequestId::Uint(n) => format!("number:{n}"),
    }
}

/// Which transport a connection speaks, and what its `initialize` answer advertises of it
/// (`agentCapabilities._meta["acp/transport"]`).
/// A session stream forgotten (its receiver gone, nothing kept, or its session closed and its
/// last message delivered): one made again continues it.
struct Forgotten {
    tag: String,
    next_id: u64,
    /// It ended with its session's close: a receiver that comes back with one of its cursors
    /// is told so.
    ended: bool,
}

/// The tag of a stream's cursors: a keyed hash (the key random per process) of its
/// connection, route and incarnation, 16 hex digits. A cursor of another stream, of another
/// connection or process, or of an incarnation of this stream that numbered from 1 again
/// (its numbering was forgotten) has another tag: refused, never taken for this stream's.
fn stream_tag(conn: &str, route: &Route, incarnation: u64) -> String {
    static KEY: OnceLock<RandomState> = OnceLock::new();
    let mut h = KEY.get_or_init(RandomState::new).build_hasher();
    h.write(conn.as_bytes());
    h.write_u8(0);
    route.hash_into(&mut h);
    h.write_u8(0);
    h.write_u64(incarnation);
    format!("{:016x}", h.finish())
}

pub struct Profile {
    pub websocket: bool,
    pub advertised: Value,
}

/// The client's requests in flight on one connection, at most (their routes are kept).
pub const MAX_PENDING: usize = 4096;

/// Answers kept for retries, per connection: at most this many ...
pub const ANSWERS_KEPT: usize = 1024;
/// ... of at most these bytes together (a stream's replay window; a larger answer is not kept) ...
pub const ANSWERS_KEPT_BYTES: usize = super::stream::REPLAY_WINDOW_BYTES;
/// ... each for this long after it was sent.
pub const ANSWERS_KEPT_FOR: Duration = Duration::from_secs(600);
/// Answers no longer kept before their time (past the count or bytes above, or too long to
/// keep) whose requests are still told from new ones, per connection, at most: a retry of one
/// is refused, not run again (see [`Tomb`]).
pub const TOMBS_KEPT: usize = 4096;

/// Why a request's id cannot be routed.
pub enum IdRefused {
    /// Not an id the agent echoes, or a string over [`MAX_ID_LENGTH`] (400).
    Invalid(String),
    /// A different request with this id is in flight (400): a retry repeats the method and
    /// params of the request it retries.
    InUse,
    /// [`MAX_PENDING`] requests are in flight (429).
    TooMany,
}

/// What becomes of a request whose id could be routed.
#[derive(Debug, PartialEq)]
pub enum Admitted {
    /// A new request: for the agent.
    Run,
    /// A retry of the request in progress with its id (the same method and params): it is not
    /// run again; the one answer goes where the first's goes.
    Joined,
    /// A retry of a request answered lately whose answer the client does not provably have
    /// yet (not delivered on its stream): not run again; its answer was sent again, where the
    /// first's went.
    Repeated,
    /// The same, but its answer is no longer kept (see [`Tomb`]): not run again; a `-32600`
    /// error saying so was sent where the answer went.
    Forgotten,
}

/// The client's requests on one connection, by their id's key. Retries are told from new
/// requests here, under one lock with the answers' bookkeeping: a retry racing its request's
/// answer either joins it or gets the answer again, never runs.
#[derive(Default)]
struct Requests {
    running: HashMap<String, Running>,
    answered: Answered,
}

struct Running {
    route: Route,
    /// Whether a successful answer ends its session (its stream's last message).
    ends: bool,
    /// The request's fingerprint (method, params and route).
    request: u64,
}

/// Recent answers, oldest first, bounded by [`ANSWERS_KEPT`], [`ANSWERS_KEPT_BYTES`] and
/// [`ANSWERS_KEPT_FOR`].
#[derive(Default)]
struct Answered {
    by_key: HashMap<String, Answer>,
    /// (key, serial) in the order answered; an entry whose serial is not its key's answer's
    /// any more was replaced or forgotten.
    order: VecDeque<(String, u64)>,
    bytes: usize,
    serial: u64,
    /// What is left of the answers not kept before their time, bounded by [`TOMBS_KEPT`] and
    /// [`ANSWERS_KEPT_FOR`], with their order as `order` has it.
    tombs: HashMap<String, Tomb>,
    tomb_order: VecDeque<(String, u64)>,
}

/// What is left of an answer that is no longer kept before [`ANSWERS_KEPT_FOR`] passed (the
/// answers kept took more than their count or bytes, or it was too long to keep): its
/// request's fingerprint and where it went, no body. A retry of it while it is not delivered
/// is still a retry — refused (`-32600`, "already answered"), never run a second time.
struct Tomb {
    serial: u64,
    request: u64,
    at: Instant,
    placed: Option<(Weak<Stream>, u64)>,
}

struct Answer {
    serial: u64,
    request: u64,
    route: Route,
    /// The answer as the agent wrote it, without a cursor: sent again, it gets the cursor
    /// of a new message on its stream.
    line: Arc<Line>,
    at: Instant,
    /// The stream it was last put on and its message id there (`None` until it is).
    placed: Option<(Weak<Stream>, u64)>,
}

/// Whether the client provably has an answer put at `placed`: its message was delivered (its
/// cursor came back, or the client's TCP acknowledged it and the client stayed). A stream
/// forgotten had everything it carried delivered (or ended with its delivered last message),
/// so an answer put on one is delivered.
fn delivered(placed: &Option<(Weak<Stream>, u64)>) -> bool {
    placed
        .as_ref()
        .is_some_and(|(stream, id)| stream.upgrade().is_none_or(|s| s.has_delivered(*id)))
}

impl Answered {
    /// Forgets the answer of `key` and what is left of it (a new request takes its id).
    fn forget(&mut self, key: &str) {
        self.take(key);
        self.tombs.remove(key);
    }

    fn take(&mut self, key: &str) -> Option<Answer> {
        let a = self.by_key.remove(key)?;
        self.bytes = self.bytes.saturating_sub(a.line.text.len());
        Some(a)
    }

    /// Forgets what is past the bounds (the oldest first). An answer dropped before its time,
    /// and not delivered, leaves its tomb.
    fn trim(&mut self, now: Instant) {
        while let Some((key, serial)) = self.order.front() {
            let current = self.by_key.get(key).filter(|a| a.serial == *serial);
            let fresh = current.is_some_and(|a| now.duration_since(a.at) < ANSWERS_KEPT_FOR);
            let keep =
                fresh && self.order.len() <= ANSWERS_KEPT && self.bytes <= ANSWERS_KEPT_BYTES;
            if keep {
                break;
            }
            if current.is_some() {
                let key = key.clone();
                if let Some(a) = self.take(&key) {
                    if fresh && !delivered(&a.placed) {
                        self.bury(key, a.serial, a.request, a.at, a.placed);
                    }
                }
            }
            self.order.pop_front();
        }
        while let Some((key, serial)) = self.tomb_order.front() {
            let current = self.tombs.get(key).filter(|t| t.serial == *serial);
            let keep = current.is_some_and(|t| now.duration_since(t.at) < ANSWERS_KEPT_FOR)
                && self.tomb_order.len() <= TOMBS_KEPT;
            if keep {
                break;
            }
            if current.is_some() {
                let key = key.clone();
                self.tombs.remove(&key);
            }
            self.tomb_order.pop_front();
        }
    }

    /// Keeps what is left of an answer for `key` (see [`Tomb`]).
    fn bury(
        &mut self,
        key: String,
        serial: u64,
        request: u64,
        at: Instant,
        placed: Option<(Weak<Stream>, u64)>,
    ) {
        self.tomb_order.push_back((key.clone(), serial));
        self.tombs.insert(
            key,
            Tomb {
                serial,
                request,
                at,
                placed,
            },
        );
    }

    /// Keeps `answer` for `key`; returns its serial.
    fn keep(&mut self, key: String, answer: Answer) -> u64 {
        self.forget(&key);
        self.serial += 1;
        let serial = self.serial;
        self.bytes += answer.line.text.len();
        self.order.push_back((key.clone(), serial));
        self.by_key.insert(key, Answer { serial, ..answer });
        self.trim(Instant::now());
        serial
    }

    /// Keeps only what is left of an answer too long to keep, for `key`; returns its serial.
    fn keep_tomb(&mut self, key: String, request: u64) -> u64 {
        self.forget(&key);
        self.serial += 1;
        let serial = self.serial;
        self.bury(key, serial, request, Instant::now(), None);
        self.trim(Instant::now());
        serial
    }
}

impl AcpConn {
    /// Starts a connection: its agent on a thread of its own, sharing `local` (the one host).
    pub fn start(
        id: String,
        config: AdapterConfig,
        local: Arc<dyn LocalHost>,
        profile: Profile,
        agent: Option<Arc<crate::acp::Principal>>,
        principal: Option<Arc<Principal>>,
        on_end: impl FnOnce(&str, &str) + Send + 'static,
    ) -> io::Result<(Arc<AcpConn>, Receiver<Arc<str>>)> {
        let Profile {
            websocket,
            advertised,
        } = profile;
        let (tx, rx) = bounded(INBOX);
        let (initial_tx, initial_rx) = bounded(1);
        let budget: Arc<Budget> = Arc::default();
        let tag = stream_tag(&id, &Route::Connection, 0);
        let conn = Arc::new(AcpConn {
            id,
            websocket,
            principal,
            inbox: Mutex::new(Some(tx)),
            initial: Mutex::new((!websocket).then_some(initial_tx)),
            // A WebSocket's too: a socket that breaks leaves what it did not confirm for the
            // next one (`stream/resume`), and the turn state of each session after it.
            stream: match websocket {
                true => Stream::for_websocket(Arc::clone(&budget), &tag),
                false => Stream::new_in(Arc::clone(&budget), &tag),
            },
            sessions: Mutex::default(),
            forgotten: Mutex::default(),
            incarnations: AtomicU64::new(0),
            budget,
            pending: Mutex::default(),
            fingerprints: RandomState::new(),
            asked: Mutex::default(),
            last_active: Mutex::new(Instant::now()),
            closed: Mutex::default(),
            advertised,
            initialize_key: Mutex::default(),
            version: OnceLock::new(),
        });
        let name = format!("acp-{}", &conn.id[..8]);
        let sink = Sink {
            conn: Arc::clone(&conn),
        };
        let jsonrpc = crate::jsonrpc::Connection::from_sink(&name, ChannelReader::new(rx), sink)?;
        let agent_conn = Arc::clone(&conn);
        std::thread::Builder::new().name(name).spawn(move || {
            crate::acp::serve(jsonrpc, config, local, agent);
            agent_conn.close("the agent ended the connection");
            let why = agent_conn.closed().unwrap_or_default();
            on_end(&agent_conn.id, &why);
        })?;
        Ok((conn, initial_rx))
    }

    pub fn touch(&self) {
        *lock(&self.last_active) = Instant::now();
    }

    /// Idle: no receiver on any stream and nothing posted for `timeout`.
    pub fn idle_for(&self, timeout: Duration) -> bool {
        if self.stream.has_receiver() || lock(&self.sessions).values().any(|s| s.has_receiver()) {
            self.touch();
            return false;
        }
        lock(&self.last_active).elapsed() >= timeout
    }

    pub fn closed(&self) -> Option<String> {
        lock(&self.closed).clone()
    }

    /// Hands a message to the agent (blocking while its inbox is full). False once closed.
    pub fn deliver(&self, line: Vec<u8>) -> bool {
        self.touch();
        let Some(tx) = lock(&self.inbox).clone() else {
            return false;
        };
        tx.send(line).is_ok()
    }

    /// Closes the connection: the agent's input ends, every stream ends with `why`.
    pub fn close(&self, why: &str) {
        {
            let mut closed = lock(&self.closed);
            if closed.is_some() {
                return;
            }
            *closed = Some(why.to_string());
        }
        log::info!("closing ACP connection {}: {why}", &self.id[..8]);
        drop(lock(&self.inbox).take());
        drop(lock(&self.initial).take());
        self.stream.close(why);
        let sessions: Vec<Arc<Stream>> = lock(&self.sessions).values().cloned().collect();
        for s in sessions {
            s.close(why);
        }
    }

    /// The live session streams (the ones that can be forgotten are, first). A closed
    /// session's stream kept until its last messages are delivered is not live.
    pub fn session_count(&self) -> usize {
        let mut sessions = lock(&self.sessions);
        forget_disposable(&mut sessions, &mut lock(&self.forgotten));
        sessions.values().filter(|s| !s.ending()).count()
    }

    /// The stream of `session` (made on first use, at most `cap` live ones), given to `with`
    /// under the sessions' lock: a stream is never forgotten between being found and used.
    fn with_session_stream<T>(
        &self,
        session: &str,
        cap: usize,
        with: impl FnOnce(&Arc<Stream>) -> T,
    ) -> Option<T> {
        let mut sessions = lock(&self.sessions);
        if let Some(s) = sessions.get(session).filter(|s| !s.disposable()) {
            return Some(with(s));
        }
        let mut forgotten = lock(&self.forgotten);
        forget_disposable(&mut sessions, &mut forgotten);
        if sessions.values().filter(|s| !s.ending()).count() >= cap {
            return None;
        }
        let s = self.session_stream_again(session, forgotten.remove(session));
        drop(forgotten);
        let out = with(&s);
        sessions.insert(session.to_string(), s);
        Some(out)
    }

    /// A stream for `session`: continuing the forgotten one's numbering and tag, or, without
    /// one, a new incarnation (a tag of its own: the cursors of an earlier one are foreign).
    fn session_stream_again(&self, session: &str, was: Option<Forgotten>) -> Arc<Stream> {
        let (tag, next_id) = match was {
            Some(f) => (f.tag, f.next_id),
            None => {
                let incarnation = self.incarnations.fetch_add(1, Ordering::Relaxed) + 1;
                let route = Route::Session(session.to_string());
                (stream_tag(&self.id, &route, incarnation), 1)
            }
        };
        let s = Stream::for_session(
            Arc::clone(&self.budget),
            session,
            &tag,
            next_id,
            self.version(),
        );
        if let Some(why) = lock(&self.closed).as_deref() {
            s.close(why);
        }
        s
    }

    /// Becomes the receiver of a stream, from after `cursor` (as the client sent it) or, without
    /// one, from the first message not delivered. A cursor of a session's stream that ended
    /// with the session's close (the stream since forgotten) is answered as that
    /// ([`Refused::Closed`]), not with a new stream.
    pub fn acquire(&self, route: &Route, cursor: Option<&str>) -> Result<Lease, Refused> {
        let session = match route {
            Route::Connection => return self.stream.acquire_at(cursor),
            Route::Session(id) => id,
        };
        let mut sessions = lock(&self.sessions);
        if let Some(s) = sessions.get(session).filter(|s| !s.disposable()) {
            return s.acquire_at(cursor);
        }
        let mut forgotten = lock(&self.forgotten);
        forget_disposable(&mut sessions, &mut forgotten);
        if let (Some(c), Some(f)) = (cursor, forgotten.get(session)) {
            if f.ended && c.rsplit_once('-').is_some_and(|(tag, _)| tag == f.tag) {
                return Err(Refused::Closed(SESSION_CLOSED.into()));
            }
        }
        if sessions.values().filter(|s| !s.ending()).count() >= MAX_SESSIONS {
            return Err(Refused::TooMany(MAX_SESSIONS));
        }
        let s = self.session_stream_again(session, forgotten.remove(session));
        drop(forgotten);
        let out = s.acquire_at(cursor);
        sessions.insert(session.to_string(), s);
        out
    }

    /// A request of the client's: its response goes back on `route` (its stream's last
    /// message when it `ends` the session, as `session/close` does). A request with the id of
    /// one in progress, or of one answered lately whose answer is not delivered yet, and the
    /// same `method` and `params` on the same route, is a retry: it is not run again
    /// ([`Admitted`]). Once the client provably has an answer, its id is free: the same
    /// request again is a new one (JSON-RPC allows reusing an answered id; stdio runs it).
    pub fn expect_response(
        &self,
        id: &serde_json::Value,
        route: Route,
        ends: bool,
        method: &str,
        params: Option<u64>,
    ) -> Result<Admitted, IdRefused> {
        if id.as_str().is_some_and(|s| s.len() > MAX_ID_LENGTH) {
            return Err(IdRefused::Invalid(format!(
                "Request ID exceeds maxIdLength ({MAX_ID_LENGTH})"
            )));
        }
        let Some(key) = id_key(id) else {
            return Err(IdRefused::Invalid(format!(
                "Invalid request id {id}: use a string, an integer or null"
            )));
        };
        let request = self.fingerprint(method, params, &route);
        let mut pending = lock(&self.pending);
        if let Some(running) = pending.running.get(&key) {
            return match running.request == request {
                true => Ok(Admitted::Joined),
                false => Err(IdRefused::InUse),
            };
        }
        pending.answered.trim(Instant::now());
        if let Some(a) = pending.answered.by_key.get(&key) {
            if a.request == request && !delivered(&a.placed) {
                let first = a.placed.as_ref().and_then(|(s, _)| s.upgrade());
                let (route, line, serial) = (a.route.clone(), Arc::clone(&a.line), a.serial);
                drop(pending);
                self.push_again(&key, serial, first, &route, &line);
                return Ok(Admitted::Repeated);
            }
        }
        if let Some(t) = pending.answered.tombs.get(&key) {
            if t.request == request && !delivered(&t.placed) {
                let serial = t.serial;
                drop(pending);
                let error = crate::jsonrpc::ResponseError::new(-32600, format!(
                    "Invalid request: request {id} was already answered and its answer is no longer kept; send it with a new id to run it again"
                ));
                let id = RequestId::from_value(id).unwrap_or(RequestId::Null);
                let line = crate::jsonrpc::Message::response(id, Err(error)).to_routed_line();
                let at = self.put(&route, &line, End::Keep, Mark::None);
                self.placed(&key, serial, at);
                return Ok(Admitted::Forgotten);
            }
        }
        if pending.running.len() >= MAX_PENDING {
            return Err(IdRefused::TooMany);
        }
        // A new request reusing an answered one's id (JSON-RPC allows it): a retry of the
        // earlier one can no longer be told from it.
        pending.answered.forget(&key);
        pending.running.insert(
            key,
            Running {
                route,
                ends,
                request,
            },
        );
        Ok(Admitted::Run)
    }

    /// What tells a retry from another request with the same id: its method, params (their
    /// digest, read with the peek) and route.
    fn fingerprint(&self, method: &str, params: Option<u64>, route: &Route) -> u64 {
        let mut h = self.fingerprints.build_hasher();
        h.write(method.as_bytes());
        h.write_u8(0);
        route.hash_into(&mut h);
        h.write_u8(0);
        match params {
            None => h.write_u8(0),
            Some(p) => {
                h.write_u8(1);
                h.write_u64(p);
            }
        }
        h.finish()
    }

    /// A WebSocket's message (its peek), before it goes to the agent: a request is admitted
    /// as [`AcpConn::expect_response`] says. `Ok(true)`: deliver it; `Ok(false)`: a retry,
    /// handled; `Err`: the JSON-RPC error to send instead (its id is in use by another request,
    /// or too many are in progress). A message whose id the agent will refuse itself goes to
    /// it.
    pub fn admit_frame(&self, frame: &Fields) -> Result<bool, Line> {
        let (Some(id), Some(method)) = (&frame.id, &frame.method) else {
            return Ok(true);
        };
        // Its id is `null` and the id in `data.id`: with the id, the client's JSON-RPC layer
        // would take it for the answer of its request in progress with that id (the one that
        // is not refused). Over HTTP the refusal is the POST's own answer (400).
        let refusal = |message: String| {
            let error = crate::jsonrpc::ResponseError::new(-32600, message)
                .with_data(serde_json::json!({ "id": id }));
            crate::jsonrpc::Message::response(RequestId::Null, Err(error)).to_routed_line()
        };
        match self.expect_response(id, Route::Connection, false, method, frame.params) {
            Ok(Admitted::Run) | Err(IdRefused::Invalid(_)) => Ok(true),
            Ok(Admitted::Joined | Admitted::Repeated | Admitted::Forgotten) => Ok(false),
            Err(IdRefused::InUse) => Err(refusal(format!(
                "Invalid request: id {id} is already used by a request in progress on this connection (a retry repeats its method and params)"
            ))),
            Err(IdRefused::TooMany) => Err(refusal(format!(
                "Invalid request: this connection already has {MAX_PENDING} requests in progress; wait for their answers"
            ))),
        }
    }

    /// The answer to the client's request `key`, on its way out: its request is no longer in
    /// progress, and the answer is kept for a retry (under the same lock, so that a retry sees
    /// the request running or its answer kept, never neither). Returns where it goes, whether
    /// it is its session stream's last message, and the kept answer's serial (for
    /// [`AcpConn::placed`]).
    fn answering(
        &self,
        key: &str,
        line: &Arc<Line>,
        success: bool,
    ) -> Option<(Route, bool, Option<u64>)> {
        let mut pending = lock(&self.pending);
        let running = pending.running.remove(key)?;
        let last = running.ends && success;
        let serial = if line.text.len() <= ANSWERS_KEPT_BYTES {
            let answer = Answer {
                serial: 0,
                request: running.request,
                route: running.route.clone(),
                line: Arc::clone(line),
                at: Instant::now(),
                placed: None,
            };
            pending.answered.keep(key.to_string(), answer)
        } else {
            pending.answered.keep_tomb(key.to_string(), running.request)
        };
        Some((running.route, last, Some(serial)))
    }

    /// The kept answer `key` (if still the one of `serial`) was put on `stream` as message
    /// `id`: once that is delivered, the client has it.
    fn placed(&self, key: &str, serial: u64, at: Option<(Arc<Stream>, u64)>) {
        let Some((stream, id)) = at else {
            return;
        };
        let placed = Some((Arc::downgrade(&stream), id));
        let mut pending = lock(&self.pending);
        let answered = &mut pending.answered;
        if let Some(a) = answered.by_key.get_mut(key).filter(|a| a.serial == serial) {
            a.placed = placed;
        } else if let Some(t) = answered.tombs.get_mut(key).filter(|t| t.serial == serial) {
            t.placed = placed;
        }
    }

    /// A kept answer sent again: a new message, with a cursor of its own (the next), on the
    /// stream the first went on (`first`, or `route`'s when it was not put on one yet). It
    /// leaves that stream's end as it is ([`End::Keep`]): a repeated `session/close` answer
    /// does not end the stream of the session loaded again since.
    fn push_again(
        &self,
        key: &str,
        serial: u64,
        first: Option<Arc<Stream>>,
        route: &Route,
        line: &Line,
    ) {
        let at = match first {
            Some(stream) => match stream.push_line(line, End::Keep, Mark::None) {
                Ok(Some(id)) => Some((stream, id)),
                Ok(None) => self.put(&Route::Connection, line, End::No, Mark::None),
                Err(_) => self.overflow(),
            },
            None => self.put(route, line, End::Keep, Mark::None),
        };
        self.placed(key, serial, at);
    }

    /// Closes the connection whose client reads nothing.
    fn overflow<T>(&self) -> Option<T> {
        self.close(&format!(
            "the client read none of the last {} MiB the agent sent on its streams",
            super::stream::MAX_BUFFERED_BYTES >> 20
        ));
        None
    }

    /// Puts `line` on `route`'s stream: a session's (made if need be), else the connection's.
    /// A session's message goes on the connection's stream, not nowhere, when there is no room
    /// for its stream (the agent writes only for sessions this connection opened, and POSTs
    /// that would open more are refused at the cap: past twice the cap, races of
    /// session/new) or its stream ended (closed with its last message delivered, its
    /// receiver still attached). Returns the stream it went on and its message id there;
    /// `None` once the connection is closed (nobody can receive it).
    fn put(&self, route: &Route, line: &Line, end: End, mark: Mark) -> Option<(Arc<Stream>, u64)> {
        if let Route::Session(id) = route {
            let pushed = self.with_session_stream(id, 2 * MAX_SESSIONS, |s| {
                s.push_line(line, end, mark)
                    .map(|at| at.map(|n| (Arc::clone(s), n)))
            });
            match pushed {
                Some(Ok(Some(at))) => return Some(at),
                Some(Err(_)) => return self.overflow(),
                Some(Ok(None)) => {
                    log::warn!("ACP connection {}: the stream of session {id} has ended; its message goes on the connection's stream", &self.id[..8]);
                }
                None => {
                    log::warn!("ACP connection {}: no room for the stream of session {id}; its message goes on the connection's stream", &self.id[..8]);
                }
            }
        }
        // (A WebSocket's stream tracks its sessions' turns: the mark goes with the message.)
        match self.stream.push_line(line, End::No, mark) {
            Ok(at) => at.map(|n| (Arc::clone(&self.stream), n)),
            Err(_) => self.overflow(),
        }
    }

    /// The route of the agent's request the client answers (looked at: the answer may still
    /// be refused; [`AcpConn::answered`] takes it once accepted).
    pub fn asked_route(&self, key: &str) -> Option<Route> {
        lock(&self.asked).get(key).cloned()
    }

    /// The client's answer to the agent's request `key` was accepted (one answer each), or the
    /// agent withdrew the request (`$/cancel_request`): the client no longer owes an answer.
    pub fn answered(&self, key: &str) {
        let route = lock(&self.asked).remove(key);
        if self.websocket {
            self.stream.answered(key);
            return;
        }
        if let Some(Route::Session(session)) = route {
            let stream = lock(&self.sessions).get(&session).cloned();
            if let Some(s) = stream {
                s.answered(key);
            }
        }
    }

    /// The ACP version the connection speaks (v1 until its `initialize` is answered).
    pub fn version(&self) -> Version {
        self.version.get().copied().unwrap_or(Version::V1)
    }

    /// A `session/prompt` (id `id`) was posted for `session`: on ACP v1 its turn runs until
    /// its answer (`acp/turnState`; on v2 nothing is tracked: [`Stream::turn_posted`]).
    /// Tracked on the stream its messages go on: the session's, or a WebSocket's one.
    pub fn turn_posted(&self, session: &str, id: &Value) {
        let Some(key) = id_key(id) else {
            return;
        };
        if self.websocket {
            self.stream.turn_posted(session, &key, id);
            return;
        }
        self.with_session_stream(session, MAX_SESSIONS, |s| s.turn_posted(session, &key, id));
    }

    /// A WebSocket's `initialize` (its first message) has this id: its answer advertises the
    /// transport.
    pub fn initialize_sent(&self, id: &Value) {
        *lock(&self.initialize_key) = id_key(id);
    }

    /// The `initialize` answer with what this transport offers in
    /// `agentCapabilities._meta["acp/transport"]` (ACP v1 has no field for it); the
    /// connection's version is read from it. Read as a tree: one message a connection.
    fn advertise(&self, text: &str) -> String {
        let Ok(mut answer) = serde_json::from_str::<Value>(text) else {
            return text.to_string();
        };
        let answered = answer
            .pointer("/result/protocolVersion")
            .and_then(Value::as_u64);
        if let Some(v) = answered.and_then(|v| u16::try_from(v).ok()) {
            let version = Version::for_offer(v);
            let _ = self.version.set(version);
            if version != Version::V1 {
                // A WebSocket's one stream carries every session: it tells no turn states.
                self.stream.tell_no_turn_states();
            }
        }
        // v1's `agentCapabilities`, or v2's `capabilities` (the connection's version).
        let at = if answer.pointer("/result/agentCapabilities").is_some() {
            "/result/agentCapabilities"
        } else {
            "/result/capabilities"
        };
        let Some(caps) = answer.pointer_mut(at).and_then(Value::as_object_mut) else {
            return text.to_string();
        };
        let meta = caps
            .entry("_meta")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("acp/transport".into(), self.advertised.clone());
        }
        answer.to_string()
    }

    /// One line the agent wrote: to the POST waiting for `initialize`, or onto its stream,
    /// routed by its head (the line is not read again).
    fn route_outgoing(&self, line: Line) {
        let initial = lock(&self.initial).take();
        if let Some(initial) = initial {
            let _ = initial.send(Arc::from(self.advertise(&line.text)));
            return;
        }
        let line = match &line.head.kind {
            Kind::Response { id, ok: true }
                if self.websocket
                    && lock(&self.initialize_key).as_deref() == Some(&request_key(id)) =>
            {
                *lock(&self.initialize_key) = None;
                Line {
                    text: self.advertise(&line.text),
                    head: line.head,
                }
            }
            _ => line,
        };
        // The agent withdrew one of its requests: the client owes it no answer (its turn
        // state is no longer `requires_action` for it).
        if let Some(id) = &line.head.cancels {
            self.answered(&request_key(id));
        }
        // Shared with the answers kept for retries (the text is not copied).
        let line = Arc::new(line);
        let (route, last, key, kept) = match (&line.head.kind, self.websocket) {
            (Kind::Request(id), true) => (Route::Connection, false, Some(request_key(id)), None),
            (_, true) => {
                let (key, kept) = self.note_answer(&line);
                (Route::Connection, false, key, kept)
            }
            (_, false) => self.outgoing_route(&line),
        };
        let mark = match (&line.head.kind, &key) {
            (Kind::Response { .. }, Some(k)) => Mark::Answers(k),
            (Kind::Request(_), Some(k)) => Mark::Asks(k),
            _ => Mark::None,
        };
        let end = if last { End::Last } else { End::No };
        let at = self.put(&route, &line, end, mark);
        if let (Some(key), Some(serial)) = (&key, kept) {
            self.placed(key, serial, at);
        }
    }

    /// A WebSocket's outgoing message: when it answers a request of the client's, that request
    /// is answered (its answer kept for a retry): its id key and the kept answer's serial.
    /// Read from its head only.
    fn note_answer(&self, line: &Arc<Line>) -> (Option<String>, Option<u64>) {
        if let Kind::Response { id, ok } = &line.head.kind {
            let key = request_key(id);
            if let Some((_, _, kept)) = self.answering(&key, line, *ok) {
                return (Some(key), kept);
            }
        }
        (None, None)
    }

    /// Where an outgoing message goes, whether it is its session stream's last (a successful
    /// `session/close` or `session/delete` answer), its id key (a response's or a request's),
    /// and, for an answer kept for a retry, its serial.
    fn outgoing_route(&self, line: &Arc<Line>) -> (Route, bool, Option<String>, Option<u64>) {
        let route_of = |session: &Option<String>| match session {
            Some(s) => Route::Session(s.clone()),
            None => Route::Connection,
        };
        match &line.head.kind {
            Kind::Response { id, ok } => {
                let key = request_key(id);
                match self.answering(&key, line, *ok) {
                    Some((route, last, kept)) => (route, last, Some(key), kept),
                    None => (Route::Connection, false, None, None),
                }
            }
            Kind::Request(id) => {
                let key = request_key(id);
                let route = route_of(&line.head.session);
                lock(&self.asked).insert(key.clone(), route.clone());
                (route, false, Some(key), None)
            }
            Kind::Notification => (route_of(&line.head.session), false, None, None),
        }
    }
}

/// Why a session's stream ended: its session was closed (its close answer delivered).
pub const SESSION_CLOSED: &str = "its session was closed";

/// How many forgotten session streams' numbering a connection remembers (a few bytes each).
const MAX_FORGOTTEN: usize = 4096;

/// Forgets the session streams that can be forgotten (remembering where their numbering left
/// off), and closed sessions' streams kept for
/// their undelivered last messages beyond [`MAX_SESSIONS`] of them (with no receiver: their
/// clients left in the second after the close answer and did not come back for it).
fn forget_disposable(
    sessions: &mut HashMap<String, Arc<Stream>>,
    forgotten: &mut HashMap<String, Forgotten>,
) {
    let mut ending = 0;
    sessions.retain(|id, s| {
        if s.disposable() {
            if let Some((next_id, ended)) = s.continues_at() {
                // One forgotten here is made again as a new incarnation (a new tag).
                if forgotten.len() >= MAX_FORGOTTEN {
                    let any = forgotten.keys().next().cloned();
                    if let Some(k) = any {
                        forgotten.remove(&k);
                    }
                }
                let tag = s.tag().to_string();
                forgotten.insert(
                    id.clone(),
                    Forgotten {
                        tag,
                        next_id,
                        ended,
                    },
                );
            }
            return false;
        }
        if s.ending() && !s.has_receiver() {
            ending += 1;
            return ending <= MAX_SESSIONS;
        }
        true
    });
}

/// The agent's input: each message from the channel, as one line; the end when it closes.
struct ChannelReader {
    rx: Receiver<Vec<u8>>,
    buf: Vec<u8>,
    at: usize,
}

impl ChannelReader {
    fn new(rx: Receiver<Vec<u8>>) -> ChannelReader {
        ChannelReader {
            rx,
            buf: Vec::new(),
            at: 0,
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for ChannelReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.at >= self.buf.len() {
            match self.rx.recv() {
                Ok(mut line) => {
                    line.push(b'\n');
                    self.buf = line;
                    self.at = 0;
                }
                Err(_) => return Ok(&[]),
            }
        }
        Ok(&self.buf[self.at..])
    }

    fn consume(&mut self, n: usize) {
        self.at = (self.at + n).min(self.buf.len());
    }
}

/// The agent's output: each line routed by its head as the writer takes it from the outbox.
struct Sink {
    conn: Arc<AcpConn>,
}

impl LineSink for Sink {
    fn write_line(&mut self, line: Line) -> io::Result<()> {
        self.conn.route_outgoing(line);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(json: &str) -> Answer {
        Answer {
            serial: 0,
            request: 1,
            route: Route::Connection,
            line: Arc::new(Line {
                text: json.to_string(),
                head: crate::jsonrpc::Head {
                    kind: Kind::Notification,
                    session: None,
                    meta: crate::jsonrpc::MetaSlot::None,
                    cancels: None,
                },
            }),
            at: Instant::now(),
            placed: None,
        }
    }

    /// The answers kept for retries stay within their count, bytes and time (the oldest go
    /// first), and an answer replaced counts once.
    #[test]
    fn kept_answers_stay_within_their_bounds() {
        let mut kept = Answered::default();
        for i in 0..ANSWERS_KEPT + 10 {
            kept.keep(format!("number:{i}"), answer("{}"));
        }
        assert_eq!(kept.by_key.len(), ANSWERS_KEPT);
        assert!(!kept.by_key.contains_key("number:9") && kept.by_key.contains_key("number:10"));
        kept.keep("number:10".into(), answer("{\"again\":1}"));
        assert_eq!(kept.by_key.len(), ANSWERS_KEPT);
        assert_eq!(kept.bytes, (ANSWERS_KEPT - 1) * 2 + 11);
        assert!(kept.order.len() <= ANSWERS_KEPT + 1);

        let big = "x".repeat(ANSWERS_KEPT_BYTES / 3);
        for i in 0..4 {
            kept.keep(format!("big:{i}"), answer(&big));
        }
        assert!(kept.bytes <= ANSWERS_KEPT_BYTES, "{}", kept.bytes);
        assert!(!kept.by_key.contains_key("big:0") && kept.by_key.contains_key("big:3"));

        kept.trim(Instant::now() + ANSWERS_KEPT_FOR);
        assert!(kept.by_key.is_empty() && kept.order.is_empty());
        assert_eq!(kept.bytes, 0);
        assert!(kept.tombs.is_empty() && kept.tomb_order.is_empty());
    }

    /// An answer dropped before its time (past the count or bytes) or too long to keep
    /// leaves a tomb (its fingerprint, no body) for its retry; the tombs stay within their
    /// count and time, and a new request with the id forgets its tomb.
    #[test]
    fn answers_dropped_before_their_time_leave_bounded_tombs() {
        let mut kept = Answered::default();
        for i in 0..ANSWERS_KEPT + 10 {
            kept.keep(format!("number:{i}"), answer("{}"));
        }
        assert!(kept.tombs.contains_key("number:9") && !kept.tombs.contains_key("number:10"));
        assert!(!kept.by_key.contains_key("number:9"));
        let serial = kept.keep_tomb("string:big".into(), 7);
        let tomb = &kept.tombs["string:big"];
        assert_eq!((tomb.serial, tomb.request), (serial, 7));
        kept.forget("string:big");
        assert!(!kept.tombs.contains_key("string:big"));
        for i in 0..TOMBS_KEPT + ANSWERS_KEPT {
            kept.keep(format!("string:{i}"), answer("{}"));
        }
        assert_eq!(kept.tombs.len(), TOMBS_KEPT);
        assert!(kept.tomb_order.len() <= TOMBS_KEPT);
        assert!(!kept.tombs.contains_key("number:0"), "the oldest go first");
        kept.trim(Instant::now() + ANSWERS_KEPT_FOR);
        assert!(kept.tombs.is_empty() && kept.tomb_order.is_empty());
    }
}
