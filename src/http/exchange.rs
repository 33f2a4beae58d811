//! One exchange on a connection: the route reads the body (within its deadline) and writes
//! exactly one answer, or takes the socket over for a stream or a WebSocket.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How long an idle keep-alive connection is kept (waiting for the next request's first byte),
/// and how long a body read may wait for its next bytes.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// After an answer given before its body was read, how long what the client still sends is
/// read and discarded (see [`linger`]).
pub const LINGER_TIME: Duration = Duration::from_secs(2);

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

impl<'a> Exchange<'a> {
    pub(super) fn new(
        reader: &'a mut BufReader<TcpStream>,
        body_left: u64,
        authenticated: bool,
        body_deadline: Duration,
        close: bool,
    ) -> Exchange<'a> {
        Exchange {
            reader,
            body_left,
            authenticated,
            body_deadline,
            close,
        }
    }

    /// The declared body bytes not read yet.
    pub(super) fn unread(&self) -> u64 {
        self.body_left
    }

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

/// After an answer given before the body was read (a refusal), read and discard what the
/// client is still sending — into a fixed buffer, at most [`LINGER_BYTES`] and [`LINGER_TIME`]
/// — so closing does not reset the connection before the client has read the answer; never
/// past `until`.
pub(super) fn linger(reader: &mut BufReader<TcpStream>, declared: u64, until: Instant) {
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
