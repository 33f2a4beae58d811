//! The host's HTTP/1.1 server, on `std::net`: accept, read one bounded request head, hand the
//! request to the router, write the answer. It owns every byte it reads, so nothing a client
//! declares can make it allocate: a body over the limit is refused from its `Content-Length`
//! before a byte of it is read, and that connection is closed.
//!
//! Why not tiny_http: it allocates `vec![0; content_length]` to drain an unread body when a
//! request is dropped, so `Content-Length: 99999999999999` aborted the host (out of memory)
//! without a token. The protocol needs little (loopback, one client library, no TLS): this file
//! is that little.
//!
//! One thread per connection; keep-alive for operations, `close` for event streams; heads
//! bounded in size and time, bodies in time; `Transfer-Encoding` is refused (clients send
//! `Content-Length`).
//!
//! Admission (issue 54): the server checks the bearer token itself, once per request
//! ([`Request::authenticated`]). A socket starts in a small pool of its own
//! ([`MAX_UNAUTHENTICATED`]; when it is full the oldest is closed to make room, so a new
//! socket always gets its head read) and lives there at most [`UNAUTHENTICATED_LIFE`]; a
//! request without the token gets one answer and its socket is closed. Only a request with
//! the token moves its socket into the served slots ([`MAX_CONNECTIONS`]), so sockets without
//! it — however many, however slow — never take a slot from a token holder.

use crate::jsonrpc::lock;
use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Request line plus headers.
const MAX_HEAD_BYTES: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;
/// Headers a request may carry once: a second one is refused, never one of them chosen.
const SINGLE_HEADERS: &[&str] = &[
    "Host",
    "Authorization",
    "Content-Length",
    "Origin",
    "Sec-WebSocket-Key",
    "Acp-Connection-Id",
    "Acp-Session-Id",
    "Last-Event-ID",
];
/// Sockets that have shown the token, served at once; a request with the token beyond them is
/// answered 503 and its socket closed.
pub const MAX_CONNECTIONS: usize = 256;
/// Sockets that have not shown the token yet (their first head being read, or their one
/// answer written), at once; the oldest is closed to make room for a new one.
pub const MAX_UNAUTHENTICATED: usize = 128;
/// How long a socket that has not shown the token may live, from accept to close, whatever it
/// sends: its head (within [`HEAD_DEADLINE`]), then one answer.
pub const UNAUTHENTICATED_LIFE: Duration = Duration::from_secs(15);
/// How long a whole request body may take to arrive, from when the route starts reading it
/// (`maka-acp serve` takes it from `MAKA_SERVE_BODY_DEADLINE_MS`).
pub const BODY_DEADLINE: Duration = Duration::from_secs(60);
/// How long an idle keep-alive connection is kept (waiting for the next request's first byte),
/// and how long a body read may wait for its next bytes.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a whole request head may take: from accept for the first request, from its first
/// byte for a later one. A deadline, not a per-read timeout: a client trickling one byte at a
/// time cannot hold a slot longer than this.
const HEAD_DEADLINE: Duration = Duration::from_secs(10);
/// A client that does not read its answer for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Descriptors kept free below the open-file limit for what is not a client's socket (the
/// store's files, tool processes' pipes, the server's own threads): at least this many, or a
/// quarter of the limit.
const FD_RESERVE: usize = 64;
/// The first pause after a failed `accept`, and the longest.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(1));
/// After an answer given before its body was read, how long what the client still sends is
/// read and discarded (see [`linger`]).
const LINGER_TIME: Duration = Duration::from_secs(2);
/// One log line per this long while `accept` keeps failing.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(5);

/// What a server hands each request to (the routes).
pub type Route = Arc<dyn Fn(Request, &mut Exchange) + Send + Sync>;

pub struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    stopping: AtomicBool,
    token: String,
    max_connections: usize,
    max_unauthenticated: usize,
    body_deadline: Duration,
    busy: Busy,
}

/// The answer to a request with the token when every served slot is taken (503).
#[derive(Clone)]
struct Busy {
    content_type: &'static str,
    body: Vec<u8>,
}

/// What every connection of a running server shares: the token, and who holds which slot.
struct Gate {
    token: String,
    /// Sockets that have shown the token.
    authenticated: AtomicUsize,
    max_authenticated: usize,
    unauthenticated: Mutex<Unauthenticated>,
    max_unauthenticated: usize,
    body_deadline: Duration,
    busy: Busy,
}

/// The sockets that have not shown the token, oldest first: each one's descriptor and the end
/// of its life. A descriptor is here only while its [`Conn`] holds it open (a `Conn` leaves
/// this table before its socket is closed, under its lock), so shutting one down from here
/// never touches a descriptor that was reused.
#[derive(Default)]
struct Unauthenticated {
    next: u64,
    sockets: BTreeMap<u64, (RawFd, Instant)>,
}

/// Which slot a socket holds.
enum Slot {
    Unauthenticated(u64),
    Authenticated,
}

/// One accepted socket and its slot: dropped, it gives the slot back before its socket is
/// closed (`drop` runs before the fields are dropped).
struct Conn {
    gate: Arc<Gate>,
    slot: Slot,
    reader: BufReader<TcpStream>,
}

/// Why a request with the token is not served.
enum Admission {
    /// Every served slot is taken (503).
    Full,
    /// The socket was closed to make room while its head was read.
    Evicted,
}

impl Conn {
    /// Moves the socket into the served slots (once; a socket that holds one keeps it).
    fn authenticate(&mut self) -> Result<(), Admission> {
        let Slot::Unauthenticated(id) = self.slot else {
            return Ok(());
        };
        let mut pool = lock(&self.gate.unauthenticated);
        if !pool.sockets.contains_key(&id) {
            return Err(Admission::Evicted);
        }
        let taken =
            self.gate
                .authenticated
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < self.gate.max_authenticated).then_some(n + 1)
                });
        if taken.is_err() {
            return Err(Admission::Full);
        }
        pool.sockets.remove(&id);
        self.slot = Slot::Authenticated;
        Ok(())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        match self.slot {
            Slot::Unauthenticated(id) => {
                lock(&self.gate.unauthenticated).sockets.remove(&id);
            }
            Slot::Authenticated => {
                self.gate.authenticated.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl Gate {
    /// Gives a new socket a place among those without the token: the ones past their life,
    /// and the oldest while there is no room, are shut down first (their threads see the
    /// socket end and leave).
    fn admit(&self, fd: RawFd, now: Instant) -> u64 {
        let mut pool = lock(&self.unauthenticated);
        while let Some((&id, &(old, until))) = pool.sockets.first_key_value() {
            if until > now && pool.sockets.len() < self.max_unauthenticated {
                break;
            }
            pool.sockets.remove(&id);
            // SAFETY: `old` is open while it is in the table (see `Unauthenticated`), and the
            // lock is held; shutdown only ends the connection, the descriptor stays its owner's.
            unsafe { libc::shutdown(old, libc::SHUT_RDWR) };
        }
        let id = pool.next;
        pool.next += 1;
        pool.sockets.insert(id, (fd, now + UNAUTHENTICATED_LIFE));
        id
    }
}

/// A parsed request head. The body, if any, is still on the connection.
pub struct Request {
    pub method: String,
    /// The request target: path and query.
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub remote: SocketAddr,
    /// The declared body length (0 when absent).
    pub content_length: u64,
    /// HTTP/1.0, or `Connection: close`: no second request on this connection.
    pub close: bool,
    /// HTTP/1.0 (a WebSocket upgrade needs 1.1).
    pub http10: bool,
    /// It carries the server's bearer token (`Authorization: Bearer …`, the scheme
    /// case-insensitive, compared in constant time): the one check of both servers on this
    /// code. A request without it gets one answer, and its socket is closed.
    pub authenticated: bool,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether a list header (`Connection`, `Upgrade`: comma-separated tokens, in any of its
    /// lines) holds `token`, case-insensitive.
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }
}

/// `Authorization: Bearer <token>` (the scheme case-insensitive, RFC 9110), compared in
/// constant time.
fn bearer_ok(header: Option<&str>, token: &str) -> bool {
    use subtle::ConstantTimeEq;
    let Some((scheme, given)) = header.and_then(|h| h.split_once(' ')) else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("Bearer") {
        return false;
    }
    given.trim().as_bytes().ct_eq(token.as_bytes()).into()
}

/// One connection: the router reads the body and writes exactly one answer (or a stream).
pub struct Exchange<'a> {
    reader: &'a mut BufReader<TcpStream>,
    body_left: u64,
    /// Whether the request carried the token (a body is read only then).
    authenticated: bool,
    body_deadline: Duration,
    /// Set when the answer leaves the connection unusable for another request.
    pub close: bool,
}

impl Exchange<'_> {
    /// Reads the whole body within the server's body deadline; the caller has checked its
    /// declared length against its limit. `TimedOut`: it did not arrive whole in time.
    pub fn read_body(&mut self) -> io::Result<Vec<u8>> {
        if !self.authenticated {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "a body is read only from a request with the token",
            ));
        }
        let deadline = Instant::now() + self.body_deadline;
        // Grown as the bytes arrive: a declared length the client never sends costs nothing.
        let mut buf = Vec::with_capacity(self.body_left.min(64 * 1024) as usize);
        let mut left = self.body_left;
        while left > 0 {
            if self.reader.buffer().is_empty() {
                let time = deadline.saturating_duration_since(Instant::now());
                if time.is_zero() {
                    return Err(body_late(self.body_deadline));
                }
                self.reader
                    .get_ref()
                    .set_read_timeout(Some(time.min(HEAD_TIMEOUT)))?;
            }
            let available = match self.reader.fill_buf() {
                Ok(a) => a,
                Err(e) if is_timeout(&e) && Instant::now() >= deadline => {
                    return Err(body_late(self.body_deadline))
                }
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the body ended early",
                ));
            }
            let take = available.len().min(left as usize);
            buf.extend_from_slice(&available[..take]);
            self.reader.consume(take);
            left -= take as u64;
        }
        self.body_left = 0;
        Ok(buf)
    }

    /// Writes a complete answer with a `Content-Length`.
    pub fn respond(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        if self.body_left > 0 {
            // The body was not read (refused before it): the connection cannot be reused.
            self.close = true;
        }
        let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        if self.close {
            head.push_str("Connection: close\r\n");
        }
        head.push_str("\r\n");
        let stream = self.reader.get_mut();
        let written = stream
            .write_all(head.as_bytes())
            .and_then(|()| stream.write_all(body))
            .and_then(|()| stream.flush());
        if let Err(e) = written {
            log::debug!("client went away before the answer: {e}");
            self.close = true;
        }
    }

    /// Takes the connection over for a streamed answer (the caller writes the head). The
    /// connection is closed afterwards.
    pub fn stream(&mut self) -> &mut TcpStream {
        self.close = true;
        self.reader.get_mut()
    }

    /// Answers `Expect: 100-continue` (curl sends it before a body over 1 KiB and waits a second
    /// for it): the body may come.
    #[cfg(feature = "serve")]
    pub fn continue_100(&mut self) {
        let stream = self.reader.get_mut();
        if stream
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .and_then(|()| stream.flush())
            .is_err()
        {
            self.close = true;
        }
    }

    /// Takes the connection over with what was read past the head (a WebSocket: the client
    /// may send its first frame at once). The connection is closed afterwards.
    #[cfg(feature = "serve")]
    pub fn take_reader(&mut self) -> &mut BufReader<TcpStream> {
        self.close = true;
        self.reader
    }
}

fn body_late(limit: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "the body did not arrive whole within {} ms",
            limit.as_millis()
        ),
    )
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

impl Server {
    /// Listens on `addr`; `token` is the bearer token a request must carry to be served.
    pub fn bind(addr: SocketAddr, token: String) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let (served, unauthenticated) = socket_budget(MAX_CONNECTIONS);
        Ok(Server {
            listener,
            addr,
            stopping: AtomicBool::new(false),
            token,
            max_connections: served,
            max_unauthenticated: unauthenticated,
            body_deadline: BODY_DEADLINE,
            busy: Busy {
                content_type: "application/json",
                body: br#"{"ok":false,"error":{"code":"capacity_exceeded","message":"too many open connections","retryable":true}}"#.to_vec(),
            },
        })
    }

    /// Serves at most `max` sockets with the token at once (`maka-acp serve` holds one per
    /// event stream), fewer when the open-file limit does not leave room for them.
    #[cfg(feature = "serve")]
    pub fn with_max_connections(mut self, max: usize) -> Server {
        (self.max_connections, self.max_unauthenticated) = socket_budget(max);
        self
    }

    /// How long a whole request body may take to arrive.
    #[cfg(feature = "serve")]
    pub fn with_body_deadline(mut self, deadline: Duration) -> Server {
        self.body_deadline = deadline;
        self
    }

    /// What a request with the token is answered (503) when every slot is taken.
    #[cfg(feature = "serve")]
    pub fn with_busy_answer(mut self, content_type: &'static str, body: &str) -> Server {
        self.busy = Busy {
            content_type,
            body: body.as_bytes().to_vec(),
        };
        self
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Accepts connections until [`Server::unblock`], handing each request to `route`.
    pub fn serve(&self, route: Route) {
        let gate = Arc::new(Gate {
            token: self.token.clone(),
            authenticated: AtomicUsize::new(0),
            max_authenticated: self.max_connections,
            unauthenticated: Mutex::default(),
            max_unauthenticated: self.max_unauthenticated,
            body_deadline: self.body_deadline,
            busy: self.busy.clone(),
        });
        let mut backoff = AcceptBackoff::default();
        for conn in self.listener.incoming() {
            let accepted = Instant::now();
            if self.stopping.load(Ordering::Acquire) {
                break;
            }
            let stream = match conn {
                Ok(s) => s,
                Err(e) => {
                    // Out of descriptors (EMFILE) or memory: the pending connection stays in the
                    // backlog, so retrying at once would spin; wait for sockets to close.
                    backoff.failed(&e);
                    continue;
                }
            };
            backoff.succeeded();
            let id = gate.admit(stream.as_raw_fd(), accepted);
            let conn = Conn {
                gate: Arc::clone(&gate),
                slot: Slot::Unauthenticated(id),
                reader: BufReader::with_capacity(16 * 1024, stream),
            };
            let route = Arc::clone(&route);
            let spawned = std::thread::Builder::new()
                .name("host-conn".into())
                .spawn(move || connection(conn, accepted, &*route));
            if let Err(e) = spawned {
                log::error!("cannot start a connection thread: {e}");
            }
        }
    }

    /// Stops [`Server::serve`] (wakes its `accept` with a connection of our own).
    pub fn unblock(&self) {
        self.stopping.store(true, Ordering::Release);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

/// Pauses after a failed `accept` (growing while it keeps failing) and logs it at most once
/// per [`ACCEPT_LOG_EVERY`].
#[derive(Default)]
struct AcceptBackoff {
    delay: Option<Duration>,
    logged: Option<Instant>,
    unlogged: u64,
}

impl AcceptBackoff {
    fn failed(&mut self, e: &io::Error) {
        if self.logged.is_none_or(|t| t.elapsed() >= ACCEPT_LOG_EVERY) {
            log::warn!(
                "accept failed: {e} ({} more failures since the last report); waiting before the next accept",
                self.unlogged
            );
            self.logged = Some(Instant::now());
            self.unlogged = 0;
        } else {
            self.unlogged += 1;
        }
        let delay = self.delay.unwrap_or(ACCEPT_BACKOFF.0);
        std::thread::sleep(delay);
        self.delay = Some((delay * 3 / 2).min(ACCEPT_BACKOFF.1));
    }

    fn succeeded(&mut self) {
        self.delay = None;
    }
}

/// How many sockets with the token, and how many without, fit below the open-file limit (at
/// most `wanted` and [`MAX_UNAUTHENTICATED`]): those without get an eighth of the room.
fn socket_budget(wanted: usize) -> (usize, usize) {
    let room = socket_cap();
    let unauthenticated = MAX_UNAUTHENTICATED.min(room / 8).max(1);
    let served = wanted.min(room.saturating_sub(unauthenticated)).max(1);
    (served, unauthenticated)
}

/// How many client sockets fit below the open-file limit, after raising its soft value to the
/// hard one (a server should not stop at a shell's default of 1024 when it may hold more).
fn socket_cap() -> usize {
    let limit = raise_open_file_limit();
    limit.saturating_sub(FD_RESERVE.max(limit / 4)).max(1)
}

/// Raises `RLIMIT_NOFILE`'s soft limit to its hard one (at most 2^20); the soft limit after.
fn raise_open_file_limit() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write or read only the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    let wanted = lim.rlim_max.min(1 << 20);
    if lim.rlim_cur < wanted {
        let raised = libc::rlimit {
            rlim_cur: wanted,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = wanted;
        }
    }
    usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
}

fn connection(
    mut conn: Conn,
    accepted: Instant,
    route: &(dyn Fn(Request, &mut Exchange) + Send + Sync),
) {
    let remote = match conn.reader.get_ref().peer_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    let gate = Arc::clone(&conn.gate);
    let _ = conn.reader.get_ref().set_nodelay(true);
    let _ = conn.reader.get_ref().set_write_timeout(Some(WRITE_TIMEOUT));
    let _ = conn.reader.get_ref().set_read_timeout(Some(HEAD_TIMEOUT));
    let life = accepted + UNAUTHENTICATED_LIFE;
    let mut deadline = accepted + HEAD_DEADLINE;
    loop {
        let head = read_head(&mut conn.reader, remote, deadline);
        let _ = conn.reader.get_ref().set_read_timeout(Some(HEAD_TIMEOUT));
        let mut request = match head {
            Ok(Some(r)) => r,
            Ok(None) => return, // closed between requests, or idle too long
            Err(HeadError::Bad(status, why)) => {
                let mut ex = Exchange {
                    reader: &mut conn.reader,
                    body_left: 0,
                    authenticated: false,
                    body_deadline: gate.body_deadline,
                    close: true,
                };
                let body = format!(
                    r#"{{"ok":false,"error":{{"code":"invalid_request","message":{}}}}}"#,
                    serde_json::Value::String(why.into())
                );
                if matches!(conn.slot, Slot::Unauthenticated(_)) {
                    let left = life.saturating_duration_since(Instant::now());
                    let _ = ex
                        .reader
                        .get_ref()
                        .set_write_timeout(Some(left.max(Duration::from_millis(100))));
                }
                ex.respond(
                    status,
                    &[("Content-Type", "application/json")],
                    body.as_bytes(),
                );
                return;
            }
        };
        request.authenticated = bearer_ok(request.header("Authorization"), &gate.token);
        if request.authenticated {
            match conn.authenticate() {
                Ok(()) => {}
                Err(Admission::Evicted) => return,
                Err(Admission::Full) => {
                    let mut ex = Exchange {
                        body_left: request.content_length,
                        authenticated: false,
                        body_deadline: gate.body_deadline,
                        close: true,
                        reader: &mut conn.reader,
                    };
                    ex.respond(
                        503,
                        &[
                            ("Content-Type", gate.busy.content_type),
                            ("Retry-After", "1"),
                        ],
                        &gate.busy.body,
                    );
                    if ex.body_left > 0 {
                        linger(&mut conn.reader, request.content_length, life);
                    }
                    return;
                }
            }
        } else if matches!(conn.slot, Slot::Unauthenticated(_)) {
            // One answer, written within the socket's life.
            let left = life.saturating_duration_since(Instant::now());
            let _ = conn
                .reader
                .get_ref()
                .set_write_timeout(Some(left.max(Duration::from_millis(100))));
        }
        let authenticated = request.authenticated;
        let mut ex = Exchange {
            body_left: request.content_length,
            authenticated,
            body_deadline: gate.body_deadline,
            // A request without the token gets one answer: no second one on its socket.
            close: request.close || !authenticated,
            reader: &mut conn.reader,
        };
        route(request, &mut ex);
        if ex.body_left > 0 {
            let left = ex.body_left;
            let until = if authenticated {
                Instant::now() + LINGER_TIME
            } else {
                life
            };
            linger(&mut conn.reader, left, until);
            return;
        }
        if ex.close {
            return;
        }
        // Keep-alive: wait (idle) for the next request's first byte; its head has the
        // deadline from then.
        let _ = conn.reader.get_ref().set_read_timeout(Some(HEAD_TIMEOUT));
        match conn.reader.fill_buf() {
            Ok(b) if !b.is_empty() => deadline = Instant::now() + HEAD_DEADLINE,
            _ => return,
        }
    }
}

/// Reads up to and including `\n` (at most `max` bytes) before `deadline`: the socket's read
/// timeout is set to what is left before each read.
fn read_line_by(
    reader: &mut BufReader<TcpStream>,
    deadline: Instant,
    max: usize,
    line: &mut Vec<u8>,
) -> io::Result<usize> {
    let mut read = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        reader.get_ref().set_read_timeout(Some(left))?;
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(read);
        }
        let room = max - read;
        let (take, done) = match available.iter().take(room).position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len().min(room), false),
        };
        line.extend_from_slice(&available[..take]);
        reader.consume(take);
        read += take;
        if done || read >= max {
            return Ok(read);
        }
    }
}

/// After an answer given before the body was read (a refusal), read and discard what the
/// client is still sending — into a fixed buffer, at most [`LINGER_BYTES`] and [`LINGER_TIME`]
/// — so closing does not reset the connection before the client has read the answer; never
/// past `until`.
fn linger(reader: &mut BufReader<TcpStream>, declared: u64, until: Instant) {
    const LINGER_BYTES: u64 = 64 * 1024 * 1024;
    let stream = reader.get_mut();
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let deadline = until.min(Instant::now() + LINGER_TIME);
    let mut left = declared.min(LINGER_BYTES);
    let mut buf = [0u8; 16 * 1024];
    while left > 0 && Instant::now() < deadline {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n as u64),
        }
    }
}

enum HeadError {
    /// Answer with this status and close.
    Bad(u16, &'static str),
}

/// Reads one request head (bounded). `None`: the client closed or went idle.
fn read_head(
    reader: &mut BufReader<TcpStream>,
    remote: SocketAddr,
    deadline: Instant,
) -> Result<Option<Request>, HeadError> {
    let mut lines: Vec<String> = Vec::new();
    let mut total = 0usize;
    loop {
        let mut line = Vec::new();
        let n = match read_line_by(reader, deadline, MAX_HEAD_BYTES - total + 1, &mut line) {
            Ok(n) => n,
            Err(_) if lines.is_empty() && total == 0 => return Ok(None),
            Err(_) => {
                return Err(HeadError::Bad(
                    408,
                    "the request head did not arrive in time",
                ))
            }
        };
        if n == 0 {
            if lines.is_empty() && total == 0 {
                return Ok(None);
            }
            return Err(HeadError::Bad(400, "the request head ended early"));
        }
        total += n;
        if total > MAX_HEAD_BYTES {
            return Err(HeadError::Bad(431, "the request head is too large"));
        }
        if line.last() != Some(&b'\n') {
            return Err(HeadError::Bad(400, "the request head ended early"));
        }
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        if line.is_empty() {
            if lines.is_empty() {
                continue; // tolerated: blank lines before a request
            }
            break;
        }
        let text = String::from_utf8(line)
            .map_err(|_| HeadError::Bad(400, "the request head is not UTF-8"))?;
        lines.push(text);
        if lines.len() > MAX_HEADERS + 1 {
            return Err(HeadError::Bad(431, "too many headers"));
        }
    }
    parse_head(&lines, remote).map(Some)
}

/// A request head from its lines (the request line first), to the letter of RFC 9112 where
/// a lenient reading could differ from a proxy's in front.
fn parse_head(lines: &[String], remote: SocketAddr) -> Result<Request, HeadError> {
    if lines[0].bytes().any(|b| b.is_ascii_control()) {
        return Err(HeadError::Bad(400, "malformed request line"));
    }
    let mut parts = lines[0].split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Bad(400, "malformed request line"));
    };
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Err(HeadError::Bad(505, "only HTTP/1.1 is served")),
    };
    let mut headers: Vec<(String, String)> = Vec::with_capacity(lines.len() - 1);
    for l in &lines[1..] {
        let Some((k, v)) = l.split_once(':') else {
            return Err(HeadError::Bad(400, "malformed header line"));
        };
        // RFC 9112: no whitespace in a field name, none between it and the colon.
        if k.is_empty()
            || k.bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(HeadError::Bad(400, "malformed header name"));
        }
        // RFC 9110 §5.5: a value is visible characters, spaces and tabs; a NUL or a CR in it
        // is cut or split differently by whatever else reads it.
        if v.bytes().any(|b| b != b'\t' && b.is_ascii_control()) {
            return Err(HeadError::Bad(
                400,
                "a header value holds a control character",
            ));
        }
        let once = SINGLE_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(k));
        if once && headers.iter().any(|(h, _)| h.eq_ignore_ascii_case(k)) {
            return Err(HeadError::Bad(
                400,
                "a header that may appear once appears twice",
            ));
        }
        headers.push((k.to_string(), v.trim().to_string()));
    }
    let mut request = Request {
        method: method.to_string(),
        target: target.to_string(),
        headers,
        remote,
        content_length: 0,
        close: http10,
        http10,
        authenticated: false,
    };
    // RFC 9112 §3.2: an HTTP/1.1 request without Host, or with one that is not a host, is 400.
    match request.header("Host") {
        None if !http10 => {
            return Err(HeadError::Bad(400, "an HTTP/1.1 request must carry Host"));
        }
        Some(h) if !valid_host(h) => {
            return Err(HeadError::Bad(
                400,
                "Host is not a host name or address with an optional port (1-65535)",
            ));
        }
        _ => {}
    }
    if request.header("Transfer-Encoding").is_some() {
        return Err(HeadError::Bad(411, "send the body with a Content-Length"));
    }
    if let Some(len) = request.header("Content-Length") {
        // Digits only: `+5` or ` 5` would be read differently by a proxy in front.
        request.content_length = Some(len)
            .filter(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|l| l.parse().ok())
            .ok_or(HeadError::Bad(400, "Content-Length is not a number"))?;
    }
    // `Connection` is a list of tokens (`keep-alive, Upgrade`), in any case.
    if request.has_token("Connection", "close") {
        request.close = true;
    } else if request.has_token("Connection", "keep-alive") {
        request.close = false;
    }
    Ok(request)
}

/// A `Host` value (RFC 9110 §7.2, RFC 3986): empty, or a name or an address — an IPv6 one in
/// brackets — then an optional `:port` of digits from 1 to 65535.
fn valid_host(host: &str) -> bool {
    if host.is_empty() {
        return true;
    }
    let (name_ok, port) = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((ip, after)) => (ip.parse::<std::net::Ipv6Addr>().is_ok(), after),
            None => return false,
        },
        None => {
            let (name, port) = match host.split_once(':') {
                Some((name, _)) => (name, &host[name.len()..]),
                None => (host, ""),
            };
            let ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%".contains(&b));
            (ok, port)
        }
    };
    let port_ok = port.is_empty()
        || port.strip_prefix(':').is_some_and(|p| {
            !p.is_empty()
                && p.len() <= 5
                && p.bytes().all(|b| b.is_ascii_digit())
                && p.parse::<u32>().is_ok_and(|n| (1..=65535).contains(&n))
        });
    name_ok && port_ok
}

/// The reason phrase of a status (empty for one not listed); also used to describe the
/// answers of model providers.
pub fn reason(status: u16) -> &'static str {
    match status {
        101 => "Switching Protocols",
        200 => "OK",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        426 => "Upgrade Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_passes() {
        let t = "0123456789abcdef0123";
        for (header, ok) in [
            (Some("Bearer 0123456789abcdef0123"), true),
            (Some("Bearer 0123456789abcdef012"), false),
            (Some("Bearer 0123456789abcdef01234"), false),
            (Some("bearer 0123456789abcdef0123"), true),
            (Some("BEARER 0123456789abcdef0123"), true),
            (Some("Basic 0123456789abcdef0123"), false),
            (Some("Bearer "), false),
            (None, false),
        ] {
            assert_eq!(bearer_ok(header, t), ok, "{header:?}");
        }
    }

    fn parse(head: &str) -> Result<Request, u16> {
        let lines: Vec<String> = head.split("\r\n").map(str::to_string).collect();
        let remote = SocketAddr::from(([127, 0, 0, 1], 9));
        parse_head(&lines, remote).map_err(|HeadError::Bad(status, _)| status)
    }

    /// The head to the letter (issue 54 §6): what a lenient reading would let through.
    #[test]
    fn heads_are_read_to_the_letter() {
        let ok = |h: &str| parse(h).map(|r| (r.close, r.http10));
        assert_eq!(ok("GET / HTTP/1.1\r\nHost: a"), Ok((false, false)));
        assert_eq!(ok("GET / HTTP/1.0"), Ok((true, true)), "1.0 needs no Host");
        assert_eq!(
            ok("GET / HTTP/1.0\r\nConnection: Keep-Alive"),
            Ok((false, true))
        );
        assert_eq!(
            ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, CLOSE"),
            Ok((true, false)),
            "Connection is a token list"
        );
        assert_eq!(
            ok("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nConnection: close"),
            Ok((true, false)),
            "in any of its lines"
        );
        for (head, status) in [
            ("GET / HTTP/1.1", 400),
            ("GET / HTTP/1.1\r\nHost: a\r\nX: a\0b", 400),
            ("GET / HTTP/1.1\r\nHost: a\r\nX: a\rb", 400),
            ("GET /\0 HTTP/1.1\r\nHost: a", 400),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nOrigin: http://a\r\nOrigin: http://b",
                400,
            ),
            ("GET / HTTP/1.1\r\nHost: localhost:99999999999", 400),
            ("GET / HTTP/1.1\r\nHost: localhost:65536", 400),
            ("GET / HTTP/1.1\r\nHost: localhost:0", 400),
            ("GET / HTTP/1.1\r\nHost: localhost:", 400),
            ("GET / HTTP/1.1\r\nHost: a b", 400),
            ("GET / HTTP/1.1\r\nHost: [::1]evil", 400),
            ("GET / HTTP/1.1\r\nHost: [nope]:80", 400),
            ("GET / HTTP/2.0\r\nHost: a", 505),
        ] {
            assert_eq!(parse(head).err(), Some(status), "{head:?}");
        }
        for host in [
            "localhost:65535",
            "127.0.0.1:8430",
            "[::1]:1",
            "[::1]",
            "acp.example.com",
            "",
        ] {
            assert!(valid_host(host), "{host:?}");
        }
        let r = parse("GET / HTTP/1.1\r\nHost: a\r\nX: tab\there").unwrap();
        assert_eq!(r.header("X"), Some("tab\there"), "a tab is a value's own");
    }
}
