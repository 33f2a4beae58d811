//! `/acp`: POST (messages; `initialize` opens a connection), GET (an event stream, or a
//! WebSocket upgrade), DELETE (closes a connection), with the SDK server's statuses. The
//! request that opens a connection chooses its dialect (`/acp?dialect=maka`,
//! [`Server::dialect_of`]).

use super::conn::{id_key, AcpConn, Admitted, IdRefused, Route, MAX_ID_LENGTH, MAX_PENDING};
use super::peek::{Fields, Peek};
use super::stream::{End as StreamEnd, Lease, Mark, Next, Refused, Unconfirmed, CONFIRM_AFTER};
use super::ws;
use super::Server;
use crate::acp::methods;
use crate::acp::out::Version;
use crate::acp::Dialect;
use crate::http::{Exchange, Request};
use crate::jsonrpc::line_reader::MAX_LINE_BYTES;
use crate::jsonrpc::{Line, Message, RequestId, ResponseError};
use serde_json::{json, Value};
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CONNECTION_ID: &str = "Acp-Connection-Id";
const SESSION_ID: &str = "Acp-Session-Id";
/// How long the POST that opens a connection waits for the `initialize` response.
const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a waiting stream checks that its client is still there.
const POLL: Duration = Duration::from_secs(1);
/// How often a stream whose session was closed looks for its last message's confirmation.
const SETTLE_POLL: Duration = Duration::from_millis(100);

pub fn handle(server: &Server, request: Request, ex: &mut Exchange) {
    let path = request.target.split('?').next().unwrap_or("");
    if path != "/acp" {
        return text(ex, 404, "Not Found: the ACP endpoint is /acp");
    }
    // The server resolved the token to a principal; a request without one gets this one
    // answer, and its socket is closed (`crate::http`).
    let Some(principal) = request.principal.clone() else {
        let why: &[u8] = if request.proxy_without_principal {
            b"Unauthorized: the authenticating proxy sent no usable principal (its principal header is missing or not a name of 1 to 64 letters, digits and . _ @ -)"
        } else {
            b"Unauthorized: send Authorization: Bearer <token> (the token is in the file maka-acp serve printed, or your line of its --tokens-file)"
        };
        return ex.respond(
            401,
            &[
                ("Content-Type", "text/plain"),
                ("WWW-Authenticate", &server.challenge),
            ],
            why,
        );
    };
    if let Err(why) = super::auth::origin_ok(
        request.header("Origin"),
        request.header("Host"),
        server.tls_proxied,
    ) {
        return text(ex, 403, &why);
    }
    // Counted against the principal's cap while it is handled (an event stream or a
    // WebSocket: while it is open).
    let _in_flight = match server.registry.request_begins(&principal) {
        Ok(guard) => guard,
        Err(why) => return text(ex, 429, &why),
    };
    match request.method.as_str() {
        "POST" => post(server, &request, ex),
        "GET" if is_upgrade(&request) => websocket(server, &request, ex),
        "GET" => get(server, &request, ex),
        "DELETE" => delete(server, &request, ex),
        _ => text(ex, 405, "Method Not Allowed"),
    }
}

/// A second receiver on a stream whose receiver is there (the resumable-transport draft
/// gives 409 to a cursor it cannot honour; "locked" says what this is).
const LOCKED: u16 = 423;

/// Why a cursor (`Last-Event-ID`) is refused: the draft's three cases.
#[derive(Clone, Copy)]
enum CursorRefusal {
    /// Never sent on this stream.
    Unknown,
    /// Sent, but no longer kept.
    Expired,
    /// Not this server's, or of a connection it no longer has.
    Foreign,
}

/// How a client gets a session's history again (the draft's `recovery`), in the version its
/// connection speaks: v1's `session/load`; v2 has none, its `session/resume` replays with
/// `replayFrom`. `None`: the connection is gone (the next one's version is the client's
/// choice): both are named, each with its version.
pub(super) fn reopen(version: Option<Version>) -> (&'static str, &'static str) {
    match version {
        Some(Version::V1) => ("session/load", "session/load"),
        Some(Version::V2) => (
            "session/resume",
            "session/resume with replayFrom {\"type\": \"start\"}",
        ),
        None => (
            "session/load",
            "session/load (ACP v1) or session/resume with replayFrom (v2)",
        ),
    }
}

/// 409 with a JSON-RPC error body: which cursor, why, and what to do (what was missed is
/// had again from the session's history: [`reopen`], in the version of `version`).
fn cursor_refused(
    ex: &mut Exchange,
    route: &Route,
    cursor: &str,
    reason: CursorRefusal,
    why: &str,
    version: Option<Version>,
) {
    let reason = match reason {
        CursorRefusal::Unknown => "unknown",
        CursorRefusal::Expired => "expired",
        CursorRefusal::Foreign => "foreign",
    };
    let (recovery, how) = reopen(version);
    let todo = match route {
        Route::Session(_) => format!("open the session's stream again without Last-Event-ID and call {how} to get its history (on a new connection, after initialize, if this one is gone)"),
        Route::Connection => format!("open the stream again without Last-Event-ID (on a new connection, after initialize, if this one is gone) and call {how} for the sessions you follow to get their history"),
    };
    let mut cut = cursor.len().min(64);
    while !cursor.is_char_boundary(cut) {
        cut -= 1;
    }
    let message = format!(
        "Cannot resume from Last-Event-ID {:?}: {why}; {todo}",
        &cursor[..cut]
    );
    let mut data = json!({"reason": reason, "lastEventId": &cursor[..cut], "recovery": recovery});
    if let Route::Session(s) = route {
        data["sessionId"] = json!(s);
    }
    let error = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": message, "data": data}});
    ex.respond(
        409,
        &[("Content-Type", "application/json")],
        error.to_string().as_bytes(),
    );
}

/// A session stream's receiver that came back after the stream ended with the session's
/// close answer: 409 with a JSON-RPC error saying so (`reason: "closed"`) — the connection is
/// there, the session is not open on it ([`reopen`] opens it again; its stream continues).
fn session_ended(ex: &mut Exchange, session: &str, cursor: &str, version: Version) {
    let mut cut = cursor.len().min(64);
    while !cursor.is_char_boundary(cut) {
        cut -= 1;
    }
    let (recovery, how) = reopen(Some(version));
    let message = format!("The stream of session {session} ended: the session was closed on this connection and its close answer delivered (the connection is open). To follow the session again, call {how} on this connection, then open its stream without Last-Event-ID");
    let error = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": message, "data": {
        "reason": "closed", "lastEventId": &cursor[..cut], "sessionId": session, "recovery": recovery}}});
    ex.respond(
        409,
        &[("Content-Type", "application/json")],
        error.to_string().as_bytes(),
    );
}

fn text(ex: &mut Exchange, status: u16, body: &str) {
    ex.respond(status, &[("Content-Type", "text/plain")], body.as_bytes());
}

fn connection(server: &Server, request: &Request, ex: &mut Exchange) -> Option<Arc<AcpConn>> {
    let Some(id) = request.header(CONNECTION_ID) else {
        text(ex, 400, "Missing Acp-Connection-Id");
        return None;
    };
    match server.registry.get(id, request.principal.as_deref()) {
        Ok(c) => Some(c),
        Err(why) => {
            text(ex, 404, &why);
            None
        }
    }
}

fn post(server: &Server, request: &Request, ex: &mut Exchange) {
    let json_type = request
        .header("Content-Type")
        .and_then(|t| t.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if !json_type {
        return text(ex, 415, "Unsupported Media Type");
    }
    if request.content_length > MAX_LINE_BYTES as u64 {
        return text(
            ex,
            413,
            &format!("Payload Too Large: one message may have at most {MAX_LINE_BYTES} bytes"),
        );
    }
    if request
        .header("Expect")
        .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        ex.continue_100();
    }
    let body = match ex.read_body() {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            return text(ex, 408, &format!("Request Timeout: {e}"));
        }
        Err(_) => {
            ex.close = true;
            return;
        }
    };
    // Read once, for routing (a typed peek, no tree): the agent reads the message itself.
    let peek = match Peek::read(&body) {
        None => return text(ex, 400, "Invalid JSON"),
        Some(Peek::Array) => {
            let error = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid request", "data": "JSON-RPC batches are not supported"}});
            return ex.respond(
                400,
                &[("Content-Type", "application/json")],
                error.to_string().as_bytes(),
            );
        }
        Some(Peek::Other) => return text(ex, 400, "Invalid JSON-RPC message"),
        Some(Peek::Object(fields)) => fields,
    };
    // The agent reads one message a line: a body written over several lines is made one
    // (outside strings, where JSON cannot have them raw, line breaks are only whitespace).
    let mut line = body;
    for b in line.iter_mut().filter(|b| **b == b'\n' || **b == b'\r') {
        *b = b' ';
    }
    let method = peek.method.as_deref();
    let needs = method.map(methods::transport).unwrap_or_default();
    let is_initialize = needs.opens_connection && peek.id.is_some() && peek.v2;
    if is_initialize {
        if request.header(CONNECTION_ID).is_some() {
            return text(ex, 400, "Initialize not allowed on existing connection");
        }
        let dialect = match server.dialect_of(&request.target) {
            Ok(d) => d,
            Err(why) => return text(ex, 400, &why),
        };
        return initialize(server, request, peek.id.as_ref(), line, dialect, ex);
    }
    let Some(conn) = connection(server, request, ex) else {
        return;
    };
    if conn.websocket {
        // Its messages are its frames: a POST would reach its agent past the socket's reader
        // (and its first-message rule). The SDK's server accepts it; nothing of its sends it.
        return text(
            ex,
            409,
            "this connection is a WebSocket: send its messages as frames on it",
        );
    }
    let header_session = request.header(SESSION_ID);
    if header_session.is_some_and(|s| s.len() > MAX_ID_LENGTH) {
        return text(
            ex,
            400,
            &format!("Acp-Session-Id exceeds maxIdLength ({MAX_ID_LENGTH})"),
        );
    }
    let id = peek.id.as_ref();
    match method {
        None => {
            // The client's answer to one of the agent's requests: checked against its route
            // first, the route taken only once the answer is accepted (as the SDK does).
            let key = id.and_then(id_key);
            let route = key.as_deref().and_then(|k| conn.asked_route(k));
            if let Some(Route::Session(s)) = &route {
                match header_session {
                    None => return text(ex, 400, "Missing Acp-Session-Id"),
                    Some(h) if h != s => return text(ex, 400, "Mismatched Acp-Session-Id"),
                    _ => {}
                }
            }
            if let Some(k) = &key {
                conn.answered(k);
            }
        }
        Some(_) => {
            let params_session = peek.session.as_deref();
            if (needs.session_scoped || params_session.is_some()) && header_session.is_none() {
                return text(ex, 400, "Missing Acp-Session-Id");
            }
            if let (Some(h), Some(p)) = (header_session, params_session) {
                if h != p {
                    return text(ex, 400, "Mismatched Acp-Session-Id");
                }
            }
            if needs.opens_session && conn.session_count() >= super::conn::MAX_SESSIONS {
                return text(ex, 429, &format!(
                    "this connection already holds {} sessions, the most one may; close some (session/close) or open another connection",
                    super::conn::MAX_SESSIONS
                ));
            }
            let route = match header_session.or(params_session) {
                Some(s) => Route::Session(s.to_string()),
                None => Route::Connection,
            };
            // Unlike the SDK's server, `session/load`'s answer goes on the session's stream too:
            // after the history it replays there, never before it (on another stream a client
            // could read the answer before the replay and take the history as complete).
            // A retry (the same id, method and params) is not run again: it joins the request
            // in progress, or gets its answer again, on the stream the first's goes to.
            if let (Some(id), Some(method)) = (id, method) {
                let turn = match &route {
                    Route::Session(s) if needs.starts_turn => Some(s.clone()),
                    _ => None,
                };
                match conn.expect_response(id, route, needs.ends_session, method, peek.params) {
                    Ok(Admitted::Run) => {
                        if let Some(session) = turn {
                            conn.turn_posted(&session, id);
                        }
                    }
                    Ok(Admitted::Joined | Admitted::Repeated | Admitted::Forgotten) => {
                        return ex.respond(202, &[], b"")
                    }
                    Err(IdRefused::Invalid(why)) => return text(ex, 400, &why),
                    Err(IdRefused::InUse) => return text(ex, 400, "Request ID already in use by a request in progress on this connection: a retry repeats its method and params; another request takes another id"),
                    Err(IdRefused::TooMany) => return text(ex, 429, &format!("this connection already has {MAX_PENDING} requests in progress; wait for their answers")),
                }
            }
        }
    }
    if !conn.deliver(line) {
        let why = conn.closed().unwrap_or_default();
        return text(
            ex,
            404,
            &format!("Unknown Acp-Connection-Id: the connection was closed ({why})"),
        );
    }
    ex.respond(202, &[], b"");
}

/// Opens a connection: the `initialize` response is the answer, with the connection's id.
fn initialize(
    server: &Server,
    request: &Request,
    id: Option<&Value>,
    line: Vec<u8>,
    dialect: Dialect,
    ex: &mut Exchange,
) {
    if id.is_none_or(Value::is_null) {
        return text(ex, 400, "Initialize request must include an ID");
    }
    let (conn, initial) = match server.open(false, dialect, request.principal.clone()) {
        Ok(c) => c,
        Err(refusal) => return refused(server, ex, refusal),
    };
    let answer = if conn.deliver(line) {
        initial.recv_timeout(INITIALIZE_TIMEOUT).ok()
    } else {
        None
    };
    let Some(answer) = answer else {
        server.registry.remove(&conn.id, "initialize failed");
        let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": "Initialize failed", "data": "the agent did not answer initialize"}});
        return ex.respond(
            500,
            &[("Content-Type", "application/json")],
            error.to_string().as_bytes(),
        );
    };
    conn.touch();
    ex.respond(
        200,
        &[
            ("Content-Type", "application/json"),
            (CONNECTION_ID, &conn.id),
        ],
        answer.as_bytes(),
    );
}

/// A connection that was not opened: 503 when the server is full, 429 at the principal's cap,
/// 401 when its token was withdrawn while the request was read.
fn refused(server: &Server, ex: &mut Exchange, refusal: super::Refusal) {
    match refusal {
        super::Refusal::Busy(why) => text(ex, 503, &why),
        super::Refusal::AtCap(why) => text(ex, 429, &why),
        super::Refusal::Withdrawn(why) => ex.respond(
            401,
            &[
                ("Content-Type", "text/plain"),
                ("WWW-Authenticate", &server.challenge),
            ],
            why.as_bytes(),
        ),
    }
}

fn delete(server: &Server, request: &Request, ex: &mut Exchange) {
    let Some(id) = request.header(CONNECTION_ID) else {
        return text(ex, 400, "Missing Acp-Connection-Id");
    };
    // Only its own principal's connection: another's (open or closed) is unknown to it.
    if server
        .registry
        .is_anothers(id, request.principal.as_deref())
    {
        return text(ex, 404, "Unknown Acp-Connection-Id");
    }
    match server.registry.remove(id, "the client closed it (DELETE)") {
        Some(_) => ex.respond(202, &[], b""),
        None => text(ex, 404, "Unknown Acp-Connection-Id"),
    }
}

/// An event stream: the connection's, or a session's (`Acp-Session-Id`), from the message
/// after `Last-Event-ID` when the client comes back.
fn get(server: &Server, request: &Request, ex: &mut Exchange) {
    let accepts = request
        .header("Accept")
        .is_some_and(|a| a.to_ascii_lowercase().contains("text/event-stream"));
    if !accepts {
        return text(ex, 406, "Not Acceptable");
    }
    let cursor = request.header("Last-Event-ID").map(str::trim);
    let route = match request.header(SESSION_ID) {
        Some(s) if s.len() > MAX_ID_LENGTH => {
            return text(
                ex,
                400,
                &format!("Acp-Session-Id exceeds maxIdLength ({MAX_ID_LENGTH})"),
            )
        }
        Some(s) => Route::Session(s.to_string()),
        None => Route::Connection,
    };
    let conn = match (request.header(CONNECTION_ID), cursor) {
        // A cursor of a connection this server no longer has (closed, or never its, or
        // another principal's): refused as the draft says, with what to do.
        // Another principal's is, to this one, an id never used (the same answer).
        (Some(id), Some(c)) => match server.registry.get(id, request.principal.as_deref()) {
            Ok(conn) => conn,
            Err(why) => {
                return cursor_refused(
                    ex,
                    &route,
                    c,
                    CursorRefusal::Foreign,
                    &format!("its connection is gone ({why})"),
                    None,
                )
            }
        },
        _ => match connection(server, request, ex) {
            Some(c) => c,
            None => return,
        },
    };
    if conn.websocket {
        return text(
            ex,
            LOCKED,
            "Locked: this connection is a WebSocket; its messages go on the socket",
        );
    }
    let given = cursor.unwrap_or_default();
    let version = Some(conn.version());
    let lease = match conn.acquire(&route, cursor) {
        Ok(l) => l,
        Err(Refused::Foreign) => {
            return cursor_refused(ex, &route, given, CursorRefusal::Foreign, "it is not a cursor of this stream (another stream's, an earlier one's of this session, or not one this server gave)", version)
        }
        Err(Refused::Busy) => {
            return text(ex, LOCKED, "Locked: this stream already has an active receiver; close it first, or resume with Last-Event-ID (the last id you read), which takes the stream over (a receiver whose client has gone is replaced at once)")
        }
        Err(Refused::Ahead) => {
            return cursor_refused(ex, &route, given, CursorRefusal::Unknown, "this stream has not sent it", version)
        }
        Err(Refused::TooMany(n)) => {
            return text(ex, 429, &format!("this connection already holds {n} session streams, the most one may; close a session (session/close) or its stream first"))
        }
        Err(Refused::Gap) => {
            return cursor_refused(ex, &route, given, CursorRefusal::Expired, &format!("the messages after it are no longer kept (at most {} messages or {} MiB a stream are)", super::stream::REPLAY_WINDOW_MESSAGES, super::stream::REPLAY_WINDOW_BYTES >> 20), version)
        }
        Err(Refused::Closed(why)) => match (&route, conn.closed()) {
            // The session's stream ended with its close answer, which the client has (its
            // cursor says so); the connection goes on.
            (Route::Session(s), None) => {
                return session_ended(ex, s, given, conn.version());
            }
            _ => {
                return text(
                    ex,
                    404,
                    &format!("Unknown Acp-Connection-Id: the connection was closed ({why})"),
                )
            }
        },
    };
    conn.touch();
    let socket = ex.stream();
    watch_liveness(socket, server.idle_timeout);
    if let Ok(probe) = socket.try_clone() {
        lease.watch(move || !client_gone(&probe));
    }
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: keep-alive\r\nX-Accel-Buffering: no\r\n\r\n";
    if socket
        .write_all(head.as_bytes())
        .and_then(|()| socket.flush())
        .is_err()
    {
        return;
    }
    pump_events(socket, lease, server.keepalive());
    conn.touch();
}

/// Writes the stream's messages as SSE events (with their ids) until the stream or the client
/// ends; a comment keeps an idle stream alive through proxies. A message counts as delivered
/// once the client's TCP acknowledged its bytes and the client is seen still there
/// [`CONFIRM_AFTER`] later; the ones not confirmed when the client turns out to be gone, or
/// when another receiver takes over, stay in the stream for the next receiver (the SDK's
/// client reopens without `Last-Event-ID`).
fn pump_events(socket: &mut TcpStream, mut lease: Lease, keepalive: Duration) {
    let mut quiet_since = Instant::now();
    let mut unconfirmed = Unconfirmed::default();
    loop {
        let wait = POLL.min(keepalive.saturating_sub(quiet_since.elapsed()));
        let written = match lease.next(wait.max(Duration::from_millis(1))) {
            Next::Event(id, json) => {
                quiet_since = Instant::now();
                let event = format!("id: {}\ndata: {json}\n\n", lease.cursor_of(id));
                unconfirmed.wrote(Some(id), event.len(), Instant::now());
                socket.write_all(event.as_bytes())
            }
            Next::Idle if quiet_since.elapsed() >= keepalive => {
                quiet_since = Instant::now();
                unconfirmed.wrote(None, 3, Instant::now());
                socket.write_all(b":\n\n")
            }
            Next::Idle | Next::Pong(_) => Ok(()),
            Next::Closed(why) => {
                let _ = write!(socket, ": closed: {}\n\n", why.replace(['\n', '\r'], " "));
                let _ = socket.flush();
                return;
            }
            Next::Ended => {
                let _ = write!(socket, ": closed: its session was closed\n\n");
                let _ = socket.flush();
                // The stream ends once its last message is delivered: wait a while for its
                // confirmation (a client that leaves sooner finds it on its next receiver).
                let give_up = Instant::now() + 3 * CONFIRM_AFTER;
                while !unconfirmed.is_empty() && Instant::now() < give_up {
                    if !still_there_after(socket, SETTLE_POLL) {
                        return;
                    }
                    settle(socket, &mut unconfirmed, &mut lease);
                }
                return;
            }
            // Taken over by a receiver that resumed with its cursor (this one's client may be
            // half-open: its network changed): the socket is shut down, not left to linger.
            // (A farewell is a WebSocket's.)
            Next::Gone | Next::Farewell(_) => {
                let _ = socket.shutdown(std::net::Shutdown::Both);
                return;
            }
        };
        if written.is_err() || client_gone(socket) {
            return;
        }
        settle(socket, &mut unconfirmed, &mut lease);
    }
}

/// Confirms what the client's TCP acknowledged [`CONFIRM_AFTER`] ago (the client still there).
fn settle(socket: &TcpStream, unconfirmed: &mut Unconfirmed, lease: &mut Lease) {
    if let Some(upto) = unconfirmed.settle(unacked_bytes(socket), Instant::now()) {
        lease.confirm(upto);
    }
}

/// The bytes written on the socket that the client's TCP has not acknowledged (`SIOCOUTQ`:
/// not yet sent, or sent and not acknowledged). If the kernel cannot tell, none (a write then
/// counts once the client is seen there a second later, as before this was asked).
fn unacked_bytes(socket: &TcpStream) -> u64 {
    use std::os::fd::AsRawFd;
    let mut queued: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int we own, on a descriptor this TcpStream owns.
    let r = unsafe { libc::ioctl(socket.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    if r != 0 {
        return 0;
    }
    u64::try_from(queued).unwrap_or(0)
}

/// Whether the client is gone: it closed its side (an event stream's client sends nothing),
/// or the socket failed (reset, or TCP_USER_TIMEOUT: data unacknowledged that long). A peek
/// that does not wait and does not change the socket's mode (the writer may be mid-write).
fn client_gone(socket: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut byte = [0u8; 1];
    // SAFETY: a one-byte read into our own buffer, on a descriptor this TcpStream owns.
    let n = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            byte.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
        );
    }
    n == 0
}

/// Whether the client is still there `wait` from now (it sends nothing: waiting to read
/// finds it closed, or reset, or times out with it there).
fn still_there_after(socket: &TcpStream, wait: Duration) -> bool {
    if socket
        .set_read_timeout(Some(wait.max(Duration::from_millis(1))))
        .is_err()
    {
        return false;
    }
    let started = Instant::now();
    match socket.peek(&mut [0u8; 1]) {
        // Bytes the client sent on its event stream answer the peek at once: wait out the rest
        // (else a caller polling this spins until its deadline).
        Ok(n) if n > 0 => {
            std::thread::sleep(wait.saturating_sub(started.elapsed()));
            true
        }
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// Makes a long-lived socket notice a client that vanished without closing (sleep, a NAT
/// dropping it): TCP keep-alive probes, and unacknowledged data or probes for `idle` fail it.
fn watch_liveness(socket: &TcpStream, idle: Duration) {
    use std::os::fd::AsRawFd;
    let fd = socket.as_raw_fd();
    let secs = idle.as_secs().clamp(2, 3600) as libc::c_int;
    let millis = idle.as_millis().clamp(1000, 3_600_000) as libc::c_uint;
    let set = |level, name, value: libc::c_int| {
        // SAFETY: setsockopt reads one int we own, on a descriptor this TcpStream owns.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, (secs / 2).max(1));
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, (secs / 6).max(1));
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3);
    set(
        libc::IPPROTO_TCP,
        libc::TCP_USER_TIMEOUT,
        millis as libc::c_int,
    );
}

fn is_upgrade(request: &Request) -> bool {
    request.has_token("Upgrade", "websocket")
}

/// The WebSocket upgrade (RFC 6455 §4.2): checked, the connection opened and its stream
/// acquired, its writer thread started — and only then `101` with `Acp-Connection-Id`; any of
/// them failing is answered with a status instead. Then one JSON-RPC message per text frame
/// both ways; this thread reads, the writer writes.
fn websocket(server: &Server, request: &Request, ex: &mut Exchange) {
    if request.http10 {
        return text(
            ex,
            400,
            "Bad WebSocket upgrade: the handshake needs HTTP/1.1",
        );
    }
    let Some(key) = request
        .header("Sec-WebSocket-Key")
        .filter(|_| request.has_token("Connection", "upgrade"))
    else {
        return text(
            ex,
            400,
            "Bad WebSocket upgrade: Connection: Upgrade and Sec-WebSocket-Key are required",
        );
    };
    if !ws::key_ok(key) {
        return text(
            ex,
            400,
            "Bad WebSocket upgrade: Sec-WebSocket-Key must be 16 bytes in base64",
        );
    }
    if request.header("Sec-WebSocket-Version") != Some("13") {
        return ex.respond(
            426,
            &[
                ("Content-Type", "text/plain"),
                ("Sec-WebSocket-Version", "13"),
            ],
            b"Upgrade Required: WebSocket version 13",
        );
    }
    // A resume (the draft: the same `Acp-Connection-Id`, then `stream/resume` as the first
    // frame): the WebSocket connection it names, if this server has it, is this principal's
    // and has no socket now. Any other gets a new connection (whose `stream/resume` is
    // answered `stream/resume_failed`).
    if let Some(conn) = request
        .header(CONNECTION_ID)
        .and_then(|id| server.registry.get(id, request.principal.as_deref()).ok())
        .filter(|c| c.websocket)
    {
        return resume_websocket(server, &conn, key, ex);
    }
    let dialect = match server.dialect_of(&request.target) {
        Ok(d) => d,
        Err(why) => return text(ex, 400, &why),
    };
    let (conn, _) = match server.open(true, dialect, request.principal.clone()) {
        Ok(c) => c,
        Err(refusal) => return refused(server, ex, refusal),
    };
    let refuse = |ex: &mut Exchange, why: String| {
        server.registry.remove(&conn.id, &why);
        text(ex, 503, &format!("Service Unavailable: {why}"));
    };
    let lease = match conn.acquire(&Route::Connection, None) {
        Ok(l) => l,
        Err(Refused::Closed(why)) => {
            return refuse(ex, format!("the connection closed as it opened ({why})"))
        }
        Err(_) => {
            return refuse(
                ex,
                "the connection's stream is held by another receiver".into(),
            )
        }
    };
    // The writer starts writing once the `101` is out (dropped unsent: it leaves at once).
    let Some((start, lease)) = start_writer(server, &conn, ex.stream(), lease) else {
        return refuse(ex, "cannot start the WebSocket's writer thread".into());
    };
    let reader = ex.take_reader();
    if !switch_protocols(server, reader.get_mut(), key, &conn.id) {
        server
            .registry
            .remove(&conn.id, "the client left during the upgrade");
        return;
    }
    let _ = start.send(());
    // An upgrade that named a connection this server does not have for it (gone, never its,
    // not a WebSocket's): its `stream/resume` is refused `foreign`, as a GET's 409 is.
    let first = match request.header(CONNECTION_ID) {
        Some(_) => Opened::NamedGone,
        None => Opened::New,
    };
    serve_frames(server, reader, &conn, first, lease);
}

/// How a WebSocket's connection came to this socket.
#[derive(Clone, Copy, PartialEq)]
enum Opened {
    /// A new connection; the upgrade named none.
    New,
    /// A new connection, though the upgrade named one (`Acp-Connection-Id`) this server does
    /// not have for this client.
    NamedGone,
    /// Resumed (`stream/resume`).
    Resumed,
}

/// Writes the `101` (with the connection's id); false when the client left.
fn switch_protocols(server: &Server, socket: &mut TcpStream, key: &str, id: &str) -> bool {
    let head = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n{CONNECTION_ID}: {id}\r\n\r\n",
        ws::accept_key(key),
    );
    watch_liveness(socket, server.idle_timeout);
    socket
        .write_all(head.as_bytes())
        .and_then(|()| socket.flush())
        .is_ok()
}

/// Starts the socket's writer with `lease` (it writes once told to start), and the lease's
/// number; `None` when it cannot (no thread, no second handle on the socket).
fn start_writer(
    server: &Server,
    conn: &AcpConn,
    socket: &TcpStream,
    lease: Lease,
) -> Option<(crossbeam_channel::Sender<()>, u64)> {
    let writer = socket.try_clone().ok()?;
    let probe = socket.try_clone().ok()?;
    // A receiver whose client has gone is taken over at once by a resume.
    lease.watch(move || !client_gone(&probe));
    // A live client answers the writer's pings (at least three within the idle timeout):
    // silence for the idle timeout means it vanished without closing.
    let ping_every = server.keepalive().min(server.idle_timeout / 3);
    let (start, started) = crossbeam_channel::bounded::<()>(1);
    let number = lease.number();
    crate::threads::spawn(format!("ws-write-{}", &conn.id[..8]), move || {
        if started.recv().is_ok() {
            pump_frames(writer, lease, ping_every);
        }
    })?;
    Some((start, number))
}

/// Reads the socket's frames into its connection until it ends: a close or a protocol error
/// closes the connection; a socket that breaks or falls silent leaves it for a resume (the
/// reaper closes it once it has had no socket for the idle timeout).
fn serve_frames(
    server: &Server,
    reader: &mut BufReader<TcpStream>,
    conn: &Arc<AcpConn>,
    opened: Opened,
    lease: u64,
) {
    let mut input = Deadlined::new(reader, server);
    match read_frames(&mut input, conn, opened) {
        End::Close(why) => {
            server.registry.remove(&conn.id, &why);
        }
        End::Detach(why, echo) => {
            log::info!(
                "ACP connection {}: its WebSocket ended ({why}); kept {} s for a stream/resume",
                &conn.id[..8],
                server.idle_timeout.as_secs()
            );
            let socket = input.reader.get_ref();
            match echo {
                // The writer echoes the client's close (RFC 6455 §5.5.1), then shuts the
                // socket down. Not its read side first: the writer takes a read side that
                // reads as ended for a client that has gone (`client_gone`), and would leave
                // without the echo.
                Some(payload) => conn.stream.detach_closing(lease, payload),
                None => {
                    let _ = socket.shutdown(std::net::Shutdown::Both);
                    conn.stream.detach(lease);
                }
            }
        }
    }
}

/// A WebSocket that resumes a connection: `101` with its id, then its first frame must be
/// `stream/resume {cursor}`: the messages after the cursor, then live — or
/// `stream/resume_failed {reason}` and a close, never a silent live stream.
fn resume_websocket(server: &Server, conn: &Arc<AcpConn>, key: &str, ex: &mut Exchange) {
    let writer = match ex.stream().try_clone() {
        Ok(w) => w,
        Err(e) => {
            return text(
                ex,
                503,
                &format!("Service Unavailable: cannot share the socket: {e}"),
            )
        }
    };
    let reader = ex.take_reader();
    if !switch_protocols(server, reader.get_mut(), key, &conn.id) {
        return;
    }
    conn.touch();
    let mut input = Deadlined::new(reader, server);
    let mut partial = None;
    let first = loop {
        match ws::read_message(&mut input, MAX_LINE_BYTES, &mut partial) {
            Ok(Ok(Some(ws::Incoming::Text(text)))) => break text,
            Ok(Ok(Some(ws::Incoming::Ping(_) | ws::Incoming::Pong | ws::Incoming::Binary))) => {}
            // Closed before it resumed: its close echoed (no writer runs yet); the connection
            // still waits for a resume.
            Ok(Ok(Some(ws::Incoming::Close(code)))) => {
                let mut socket = writer;
                let _ = ws::write_frame(&mut socket, ws::OP_CLOSE, &close_echo(code));
                let _ = socket.flush();
                let _ = socket.shutdown(std::net::Shutdown::Both);
                return;
            }
            _ => return,
        }
    };
    let mut socket = writer;
    let version = Some(conn.version());
    let again = format!(
        "send initialize on a new WebSocket, then call {} for the sessions you follow",
        reopen(version).1
    );
    let fields = match Peek::read(first.as_bytes()) {
        Some(Peek::Object(f)) if f.method.as_deref() == Some(STREAM_RESUME) => Some(f),
        _ => None,
    };
    let id = fields.as_ref().and_then(|f| f.id.clone());
    let fail = |socket: &mut TcpStream, reason: &str, message: &str| {
        for answer in resume_failed(id.as_ref(), reason, message, version) {
            let _ = ws::write_frame(socket, ws::OP_TEXT, answer.text.as_bytes());
        }
        let _ = ws::write_frame(
            socket,
            ws::OP_CLOSE,
            &ws::close_payload(ws::CLOSE_POLICY, "stream/resume failed"),
        );
        let _ = socket.flush();
        let _ = socket.shutdown(std::net::Shutdown::Both);
    };
    let fields = match fields {
        Some(f) => f,
        None => {
            let why = "the first frame on a resumed connection must be stream/resume";
            let _ = ws::write_frame(
                &mut socket,
                ws::OP_CLOSE,
                &ws::close_payload(ws::CLOSE_PROTOCOL, why),
            );
            let _ = socket.shutdown(std::net::Shutdown::Both);
            return;
        }
    };
    let Some(cursor) = fields.cursor.as_deref() else {
        return fail(
            &mut socket,
            "foreign",
            &format!("params.cursor is missing; {again}"),
        );
    };
    let lease = match conn.acquire(&Route::Connection, Some(cursor)) {
        Ok(l) => l,
        Err(Refused::Foreign) => {
            return fail(
                &mut socket,
                "foreign",
                &format!("params.cursor is not a cursor of this connection's stream; {again}"),
            )
        }
        // (Not with a cursor: a resume takes the stream over from a socket still open.)
        Err(Refused::Busy) => {
            return fail(
                &mut socket,
                "locked",
                "another WebSocket of this connection is still open; close it first",
            )
        }
        Err(Refused::Ahead) => {
            return fail(
                &mut socket,
                "unknown",
                &format!("this connection never sent that cursor; {again}"),
            )
        }
        Err(Refused::Gap) => {
            return fail(
                &mut socket,
                "expired",
                &format!("the messages after that cursor are no longer kept; {again}"),
            )
        }
        Err(Refused::TooMany(_) | Refused::Closed(_)) => {
            return fail(
                &mut socket,
                "foreign",
                &format!("the connection is gone; {again}"),
            )
        }
    };
    let Some((start, lease)) = start_writer(server, conn, &socket, lease) else {
        return fail(
            &mut socket,
            "unknown",
            "the server cannot start this socket's writer; try again",
        );
    };
    // A `stream/resume` sent as a request (with an id) is answered, after the messages it
    // replays: `{}` with its cursor (as a notification, the replay is the only answer).
    if let Some(id) = &fields.id {
        let id = RequestId::from_value(id).unwrap_or(RequestId::Null);
        push_own(conn, &Message::response(id, Ok(json!({}))).to_routed_line());
    }
    let _ = start.send(());
    serve_frames(server, input.reader, conn, Opened::Resumed, lease);
}

/// A WebSocket's input: the socket's read timeout is the idle timeout between frames, and
/// what is left of the frame's deadline within one (a frame trickled a byte at a time cannot
/// outlive it).
struct Deadlined<'a> {
    reader: &'a mut BufReader<TcpStream>,
    idle: Duration,
    frame_limit: Duration,
    /// When the frame being read must be whole.
    due: Option<Instant>,
    /// The frame's deadline passed.
    overdue: bool,
}

impl<'a> Deadlined<'a> {
    /// A WebSocket's reader, with the server's idle timeout and frame deadline.
    fn new(reader: &'a mut BufReader<TcpStream>, server: &Server) -> Deadlined<'a> {
        Deadlined {
            reader,
            idle: server.idle_timeout,
            frame_limit: server.body_deadline,
            due: None,
            overdue: false,
        }
    }
}

impl std::io::Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.reader.buffer().is_empty() {
            let wait = match self.due {
                None => self.idle,
                Some(due) => {
                    let left = due.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        self.overdue = true;
                        return Err(std::io::ErrorKind::TimedOut.into());
                    }
                    left.min(self.idle)
                }
            };
            self.reader.get_ref().set_read_timeout(Some(wait))?;
        }
        let read = std::io::Read::read(self.reader, buf);
        if read.is_err() && self.due.is_some_and(|due| Instant::now() >= due) {
            self.overdue = true;
        }
        read
    }
}

impl ws::FrameInput for Deadlined<'_> {
    fn frame_begins(&mut self) {
        self.due = Some(Instant::now() + self.frame_limit);
    }
    fn frame_ends(&mut self) {
        self.due = None;
    }
}

/// How a WebSocket ended.
enum End {
    /// The client closed it, or broke the protocol: the connection closes.
    Close(String),
    /// The socket broke or fell silent, or the client closed it with another code than 1000
    /// (`Some`: its close frame's payload, echoed): the connection waits for a
    /// `stream/resume`.
    Detach(String, Option<Vec<u8>>),
}

fn read_frames(input: &mut Deadlined, conn: &AcpConn, opened: Opened) -> End {
    let resumed = opened == Opened::Resumed;
    let mut partial = None;
    let mut initialized = resumed;
    // JSON-RPC objects read (a `stream/resume` is only ever the first).
    let mut frames = u64::from(resumed);
    loop {
        let read = ws::read_message(input, MAX_LINE_BYTES, &mut partial);
        if matches!(read, Ok(Ok(Some(_)))) {
            // Any frame is a sign of the client (a pong too).
            conn.touch();
        }
        match read {
            Ok(Ok(Some(ws::Incoming::Text(text)))) => {
                // Read once, for routing (a typed peek, no tree): the agent reads it itself.
                let fields = match Peek::read(text.as_bytes()) {
                    Some(Peek::Object(fields)) => fields,
                    peek => {
                        push_own(conn, &refusal(&text, peek));
                        continue;
                    }
                };
                frames += 1;
                if fields.method.as_deref() == Some(STREAM_RESUME) {
                    let id = fields.id.as_ref();
                    let answers = if frames == 1 && opened == Opened::NamedGone {
                        resume_failed(id, "foreign", &format!("The connection this upgrade names (Acp-Connection-Id) is gone or not yours, so this socket is a new connection: send initialize on it, then call {} for the sessions you follow", reopen(None).1), None)
                    } else if frames == 1 {
                        resume_failed(id, "unknown", &format!("No stream to resume on a new WebSocket: resume with the Acp-Connection-Id of the connection in the upgrade, or send initialize on this socket, then call {} for the sessions you follow", reopen(None).1), None)
                    } else {
                        resume_failed(id, "not_first", "stream/resume must be the first frame after the upgrade; this socket's stream is already live", Some(conn.version()))
                    };
                    for answer in &answers {
                        push_own(conn, answer);
                    }
                    continue;
                }
                if !initialized {
                    match first_message(&fields) {
                        First::Initialize => {
                            initialized = true;
                            if let Some(id) = &fields.id {
                                conn.initialize_sent(id);
                            }
                        }
                        First::Ignored => continue,
                        First::Refused(why) => {
                            conn.close(&format!("{} {why}", ws::CLOSE_PROTOCOL));
                            return End::Close(format!("WebSocket protocol error: {why}"));
                        }
                    }
                } else if matches!(first_message(&fields), First::Initialize) {
                    // Another `initialize` (the first was refused, or a repeat): its answer
                    // is read too for the connection's version and advertises the transport.
                    if let Some(id) = &fields.id {
                        conn.initialize_sent(id);
                    }
                }
                match conn.admit_frame(&fields) {
                    Ok(true) => ws_admitted(conn, &fields),
                    // A retry: joined to its request, or its answer sent again.
                    Ok(false) => continue,
                    Err(refusal) => {
                        push_own(conn, &refusal);
                        continue;
                    }
                }
                // One message a line: outside strings, line breaks are only whitespace.
                let mut line = text.into_bytes();
                for b in line.iter_mut().filter(|b| **b == b'\n' || **b == b'\r') {
                    *b = b' ';
                }
                if !conn.deliver(line) {
                    return End::Close("the connection was closed".into());
                }
            }
            Ok(Ok(Some(ws::Incoming::Ping(p)))) => conn.stream.pong(p),
            Ok(Ok(Some(ws::Incoming::Pong | ws::Incoming::Binary))) => {}
            // Only a normal close (1000) ends the connection: the client is done with it. Any
            // other close — 1001 "going away" (a browser's reload or navigation), a close
            // without a code (`ws.close()` before a reconnect), an error or application code —
            // leaves it for a `stream/resume`, as a socket that breaks does: its turns run on
            // within the idle timeout.
            Ok(Ok(Some(ws::Incoming::Close(Some(ws::CLOSE_NORMAL))))) => {
                return End::Close("the client closed the WebSocket".into())
            }
            Ok(Ok(Some(ws::Incoming::Close(code)))) => {
                let why = code.map_or("no code".to_string(), |c| c.to_string());
                return End::Detach(
                    format!("the client closed the WebSocket ({why})"),
                    Some(close_echo(code)),
                );
            }
            Ok(Ok(None)) => {
                return End::Detach(
                    "the client's socket closed without a close frame".into(),
                    None,
                )
            }
            Ok(Err(ws::Violation(code, why))) => {
                conn.close(&format!("{code} {why}"));
                return End::Close(format!("WebSocket protocol error: {why}"));
            }
            Err(_) if input.overdue => {
                let why = format!(
                    "a frame did not arrive whole within {} ms",
                    input.frame_limit.as_millis()
                );
                conn.close(&format!("{} {why}", ws::CLOSE_POLICY));
                return End::Close(format!("WebSocket closed: {why}"));
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return End::Detach(
                    "no sign of the client (not even a pong) within the idle timeout".into(),
                    None,
                )
            }
            Err(e) => return End::Detach(format!("the WebSocket broke: {e}"), None),
        }
    }
}

/// A WebSocket's message admitted for the agent, as its session's turn state sees it: a
/// `session/prompt` starts a turn (running until its answer); an answer to one of the agent's
/// requests means the client no longer owes it.
fn ws_admitted(conn: &AcpConn, fields: &Fields) {
    match (&fields.method, &fields.id) {
        (Some(method), Some(id)) if methods::transport(method).starts_turn => {
            if let Some(session) = &fields.session {
                conn.turn_posted(session, id);
            }
        }
        (None, Some(id)) if fields.answer => {
            if let Some(key) = id_key(id) {
                conn.answered(&key);
            }
        }
        _ => {}
    }
}

enum First {
    Initialize,
    /// A response before `initialize` (the SDK's server drops it).
    Ignored,
    /// Close 1002 with this reason (the SDK's server's).
    Refused(&'static str),
}

/// What the SDK's server does with a WebSocket's first JSON object: only `initialize`, with an
/// id, opens the connection.
fn first_message(message: &Fields) -> First {
    let method = message.method.as_deref();
    if method.is_none() && message.answer {
        return First::Ignored;
    }
    if !method.is_some_and(|m| methods::transport(m).opens_connection) {
        return First::Refused("First message must be initialize");
    }
    if message.id.as_ref().is_none_or(Value::is_null) {
        return First::Refused("Initialize request must include an ID");
    }
    First::Initialize
}

/// The resumable-transport draft's WebSocket resume (`{"method": "stream/resume", "params":
/// {"cursor": …}}` as the first frame after the upgrade).
const STREAM_RESUME: &str = "stream/resume";

/// The draft's refusal of a `stream/resume`: why (`unknown`, `expired`, `foreign`, `locked`,
/// `not_first`), what to do, and the way back ([`reopen`], in the version of `version`) —
/// `stream/resume_failed`, and, for one sent as a request (with `id`), its error answer after
/// it (`-32600`, the same message, `data.reason`): a JSON-RPC client awaiting the answer is
/// not left hanging.
fn resume_failed(
    id: Option<&Value>,
    reason: &str,
    message: &str,
    version: Option<Version>,
) -> Vec<Line> {
    let recovery = reopen(version).0;
    let mut lines = vec![Message::notification(
        "stream/resume_failed",
        json!({"reason": reason, "message": message, "recovery": recovery}),
    )
    .to_routed_line()];
    if let Some(id) = id {
        let id = RequestId::from_value(id).unwrap_or(RequestId::Null);
        let error = ResponseError::new(-32600, message)
            .with_data(json!({"reason": reason, "recovery": recovery}));
        lines.push(Message::response(id, Err(error)).to_routed_line());
    }
    lines
}

/// One of the transport's own messages (a refusal, `stream/resume_failed`) on a WebSocket's
/// stream: a line as the agent's are, so it carries its cursor as they do and a resume after
/// it does not send it again.
fn push_own(conn: &AcpConn, line: &Line) {
    let _ = conn.stream.push_line(line, StreamEnd::No, Mark::None);
}

/// The answer to a message the SDK's server answers itself: not JSON, a batch, not an object.
/// Its `data`, when it has one, is an object: its cursor goes in `data._meta`.
fn refusal(text: &str, peek: Option<Peek>) -> Line {
    // A request serde cannot read (a lone surrogate) is answered with the id its start shows,
    // as on stdio: `null` would leave its sender waiting.
    let mut id = RequestId::Null;
    let (code, message) = match peek {
        None => {
            id = crate::jsonrpc::message::request_id_at_start(text.as_bytes());
            (-32700, "Parse error")
        }
        Some(Peek::Array) => (
            -32600,
            "Invalid request: JSON-RPC batches are not supported",
        ),
        Some(_) => (-32600, "Invalid request"),
    };
    Message::response(id, Err(ResponseError::new(code, message))).to_routed_line()
}

/// The close frame that answers a client's (RFC 6455 §5.5.1): its code echoed (a code a peer
/// may send: the reader checked it), or none when it had none.
fn close_echo(code: Option<u16>) -> Vec<u8> {
    code.map(|c| ws::close_payload(c, "")).unwrap_or_default()
}

/// The close code for a connection closed for `why`: the client's own close is normal, a
/// protocol violation carries its code (`"1002 …"`), anything else is a policy close.
fn close_code(why: &str) -> u16 {
    if why.starts_with("the client") {
        return ws::CLOSE_NORMAL;
    }
    why.get(..4)
        .and_then(|c| c.parse::<u16>().ok())
        .filter(|c| (1000..1012).contains(c))
        .unwrap_or(ws::CLOSE_POLICY)
}

/// Writes the connection's messages as text frames; a close frame with the reason when the
/// connection closes.
fn pump_frames(mut socket: TcpStream, mut lease: Lease, ping_every: Duration) {
    // A ping every `ping_every` even while messages flow: the client's pongs are what tells the
    // reader it is still there.
    let mut last_ping = Instant::now();
    // A message is delivered once confirmed, as on an event stream: until then a resume gets
    // it again.
    let mut unconfirmed = Unconfirmed::default();
    loop {
        let due = ping_every.saturating_sub(last_ping.elapsed());
        let written = match lease.next(due.max(Duration::from_millis(1))) {
            Next::Event(id, json) => {
                unconfirmed.wrote(Some(id), ws::frame_len(json.len()), Instant::now());
                ws::write_frame(&mut socket, ws::OP_TEXT, json.as_bytes())
            }
            Next::Pong(p) => {
                unconfirmed.wrote(None, ws::frame_len(p.len()), Instant::now());
                ws::write_frame(&mut socket, ws::OP_PONG, &p)
            }
            Next::Idle => Ok(()),
            Next::Closed(why) => {
                let code = close_code(&why);
                // The reason without the code it may start with (`"1002 …"`): said once.
                let reason = why.strip_prefix(&format!("{code} ")).unwrap_or(&why);
                let _ =
                    ws::write_frame(&mut socket, ws::OP_CLOSE, &ws::close_payload(code, reason));
                let _ = socket.shutdown(std::net::Shutdown::Both);
                return;
            }
            // Taken over by a `stream/resume` (this socket may be half-open: the client's
            // network changed): shut down, so that its reader ends too.
            Next::Gone => {
                let _ = socket.shutdown(std::net::Shutdown::Both);
                return;
            }
            // The client closed the socket (the connection waits for a resume): its close
            // echoed, then the socket shut down.
            Next::Farewell(payload) => {
                let _ = ws::write_frame(&mut socket, ws::OP_CLOSE, &payload);
                let _ = socket.flush();
                let _ = socket.shutdown(std::net::Shutdown::Both);
                return;
            }
            // (A WebSocket's stream has no last message: no session stream is one.)
            Next::Ended => return,
        };
        let written = written.and_then(|()| {
            if last_ping.elapsed() < ping_every {
                return Ok(());
            }
            last_ping = Instant::now();
            unconfirmed.wrote(None, ws::frame_len(0), Instant::now());
            ws::write_frame(&mut socket, ws::OP_PING, b"")
        });
        if written.and_then(|()| socket.flush()).is_err() || client_gone(&socket) {
            let _ = socket.shutdown(std::net::Shutdown::Both);
            return;
        }
        settle(&socket, &mut unconfirmed, &mut lease);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that sent bytes on its event stream answers the liveness peek at once: the
    /// check still takes its whole wait, so a loop polling it does not spin (the settle loop
    /// after a session's last message ran at 100% CPU for 3 s).
    #[test]
    fn a_liveness_check_waits_even_when_the_client_sent_bytes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        client.write_all(b"x").unwrap();
        let wait = Duration::from_millis(200);
        let started = Instant::now();
        assert!(still_there_after(&server, wait));
        assert!(started.elapsed() >= wait, "{:?}", started.elapsed());
        drop(client);
    }
}
