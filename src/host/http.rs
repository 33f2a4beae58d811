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
//! One thread per connection, at most [`MAX_CONNECTIONS`]; keep-alive for operations, `close`
//! for event streams; heads bounded in size and time; `Transfer-Encoding` is refused (clients
//! send `Content-Length`).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Request line plus headers.
const MAX_HEAD_BYTES: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;
/// Headers a request may carry once: a second one is refused, never one of them chosen.
const SINGLE_HEADERS: &[&str] = &["Host", "Authorization", "Content-Length"];
/// Open connections served at once; more are answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 256;
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
/// One log line per this long while `accept` keeps failing.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(5);

/// What a server hands each request to (the routes).
pub type Route = Arc<dyn Fn(Request, &mut Exchange) + Send + Sync>;

pub struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    stopping: AtomicBool,
    open: Arc<AtomicUsize>,
    max_connections: usize,
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
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `Authorization: Bearer <token>` (the scheme case-insensitive, RFC 9110), compared in
/// constant time: the one check of both servers on this code, the host's and `serve`'s.
pub fn bearer_ok(header: Option<&str>, token: &str) -> bool {
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
    /// Set when the answer leaves the connection unusable for another request.
    pub close: bool,
}

impl Exchange<'_> {
    /// Reads the whole body; the caller has checked its declared length against its limit.
    pub fn read_body(&mut self) -> io::Result<Vec<u8>> {
        // Grown as the bytes arrive: a declared length the client never sends costs nothing.
        let mut buf = Vec::with_capacity(self.body_left.min(64 * 1024) as usize);
        (&mut *self.reader)
            .take(self.body_left)
            .read_to_end(&mut buf)?;
        if (buf.len() as u64) < self.body_left {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the body ended early",
            ));
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

impl Server {
    pub fn bind(addr: SocketAddr) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        Ok(Server {
            listener,
            addr,
            stopping: AtomicBool::new(false),
            open: Arc::default(),
            max_connections: MAX_CONNECTIONS.min(socket_cap()),
        })
    }

    /// Serves at most `max` connections at once (`maka-acp serve` holds one per event stream),
    /// fewer when the open-file limit does not leave room for them.
    #[cfg(feature = "serve")]
    pub fn with_max_connections(mut self, max: usize) -> Server {
        self.max_connections = max.min(socket_cap());
        self
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Accepts connections until [`Server::unblock`], handing each request to `route`.
    pub fn serve(&self, route: Route) {
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
            let n = self.open.fetch_add(1, Ordering::AcqRel);
            let guard = Open(Arc::clone(&self.open));
            if n >= self.max_connections {
                refuse_busy(stream);
                drop(guard);
                continue;
            }
            let route = Arc::clone(&route);
            let spawned = std::thread::Builder::new()
                .name("host-conn".into())
                .spawn(move || {
                    let _guard = guard;
                    connection(stream, accepted, &*route);
                });
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

struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers a socket over the cap and closes it; on the accept thread, so it never waits long.
fn refuse_busy(mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
    let body = br#"{"ok":false,"error":{"code":"capacity_exceeded","message":"too many open connections","retryable":true}}"#;
    let head = format!(
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body));
    // Closing with the client's request unread would reset the connection and could discard
    // the answer before the client read it: end our side (FIN after the answer), then drop
    // what already arrived, without waiting for more.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    if stream.set_nonblocking(true).is_ok() {
        let mut buf = [0u8; 4096];
        for _ in 0..16 {
            match stream.read(&mut buf) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
    }
}

fn connection(
    stream: TcpStream,
    accepted: Instant,
    route: &(dyn Fn(Request, &mut Exchange) + Send + Sync),
) {
    let remote = match stream.peer_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let _ = stream.set_read_timeout(Some(HEAD_TIMEOUT));
    let mut reader = BufReader::with_capacity(16 * 1024, stream);
    let mut deadline = accepted + HEAD_DEADLINE;
    loop {
        let head = read_head(&mut reader, remote, deadline);
        let _ = reader.get_ref().set_read_timeout(Some(HEAD_TIMEOUT));
        let request = match head {
            Ok(Some(r)) => r,
            Ok(None) => return, // closed between requests, or idle too long
            Err(HeadError::Bad(status, why)) => {
                let mut ex = Exchange {
                    reader: &mut reader,
                    body_left: 0,
                    close: true,
                };
                let body = format!(
                    r#"{{"ok":false,"error":{{"code":"invalid_request","message":{}}}}}"#,
                    serde_json::Value::String(why.into())
                );
                ex.respond(
                    status,
                    &[("Content-Type", "application/json")],
                    body.as_bytes(),
                );
                return;
            }
        };
        let mut ex = Exchange {
            body_left: request.content_length,
            close: request.close,
            reader: &mut reader,
        };
        route(request, &mut ex);
        if ex.body_left > 0 {
            let left = ex.body_left;
            linger(&mut reader, left);
            return;
        }
        if ex.close {
            return;
        }
        // Keep-alive: wait (idle) for the next request's first byte; its head has the
        // deadline from then.
        match reader.fill_buf() {
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
/// — so closing does not reset the connection before the client has read the answer.
fn linger(reader: &mut BufReader<TcpStream>, declared: u64) {
    const LINGER_BYTES: u64 = 64 * 1024 * 1024;
    const LINGER_TIME: Duration = Duration::from_secs(2);
    let stream = reader.get_mut();
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let deadline = std::time::Instant::now() + LINGER_TIME;
    let mut left = declared.min(LINGER_BYTES);
    let mut buf = [0u8; 16 * 1024];
    while left > 0 && std::time::Instant::now() < deadline {
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
    };
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
    if let Some(c) = request.header("Connection") {
        if c.eq_ignore_ascii_case("close") {
            request.close = true;
        } else if c.eq_ignore_ascii_case("keep-alive") {
            request.close = false;
        }
    }
    Ok(Some(request))
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
