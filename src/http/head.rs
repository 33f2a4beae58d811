//! One request head: read from the socket within its size and time limits, tokenized by
//! `httparse`, then held to our rules ([`super::refusals`]). The body stays on the connection.

use super::keys::Principal;
use super::refusals::{self, Refusal, SINGLE_HEADERS};
use std::io::{self, BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Instant;

/// Request line plus headers.
const MAX_HEAD_BYTES: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;

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
    /// It carries a bearer token of the server's (`Authorization: Bearer …`, the scheme
    /// case-insensitive, compared in constant time): the one check of both servers on this
    /// code. A request without it gets one answer, and its socket is closed.
    pub authenticated: bool,
    /// Who it is: the principal of its token (`authenticated` is `principal.is_some()`).
    pub principal: Option<Arc<Principal>>,
    /// It carries a trusted proxy's token but the proxy named no usable principal (it is not
    /// authenticated).
    pub proxy_without_principal: bool,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A header that must appear once: `None` when it is absent or repeated (a proxy's identity
    /// header sent twice is nobody's).
    pub fn single_header(&self, name: &str) -> Option<&str> {
        let mut lines = self
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name));
        match (lines.next(), lines.next()) {
            (Some((_, v)), None) => Some(v.as_str()),
            _ => None,
        }
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

/// Reads one request head (bounded: [`MAX_HEAD_BYTES`], [`MAX_HEADERS`], `deadline`). `None`:
/// the client closed or went idle before its first byte.
pub fn read_head(
    reader: &mut BufReader<TcpStream>,
    remote: SocketAddr,
    deadline: Instant,
) -> Result<Option<Request>, Refusal> {
    let mut head = Vec::new();
    let mut total = 0usize;
    let mut lines = 0usize;
    loop {
        let start = head.len();
        let n = match read_line_by(reader, deadline, MAX_HEAD_BYTES - total + 1, &mut head) {
            Ok(n) => n,
            Err(_) if total == 0 => return Ok(None),
            Err(_) => return Err(Refusal::Late),
        };
        if n == 0 {
            return if total == 0 {
                Ok(None)
            } else {
                Err(Refusal::EndedEarly)
            };
        }
        total += n;
        if total > MAX_HEAD_BYTES {
            return Err(Refusal::TooLarge);
        }
        if head.last() != Some(&b'\n') {
            return Err(Refusal::EndedEarly);
        }
        if head[start..].iter().all(|&b| b == b'\r' || b == b'\n') {
            if start == 0 {
                head.clear(); // tolerated: blank lines before a request
                continue;
            }
            break;
        }
        lines += 1;
        if lines > MAX_HEADERS + 1 {
            return Err(Refusal::TooManyHeaders);
        }
    }
    parse_head(&head, remote).map(Some)
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

/// A whole head (through its blank line): `httparse` tokenizes it, then our rules hold.
pub(crate) fn parse_head(head: &[u8], remote: SocketAddr) -> Result<Request, Refusal> {
    if std::str::from_utf8(head).is_err() {
        return Err(Refusal::NotUtf8);
    }
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let request_line = head[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&head[..line_end]);
    if refusals::control_in_request_line(request_line) {
        return Err(Refusal::RequestLine);
    }
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut slots);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(Refusal::EndedEarly),
        Err(e) => return Err(Refusal::of_parse_error(e)),
    }
    let (Some(method), Some(target), Some(version)) = (parsed.method, parsed.path, parsed.version)
    else {
        return Err(Refusal::RequestLine);
    };
    let http10 = version == 0;
    let mut headers: Vec<(String, String)> = Vec::with_capacity(parsed.headers.len());
    for h in parsed.headers.iter() {
        if refusals::control_in_value(h.value) {
            return Err(Refusal::ControlInValue);
        }
        let value = std::str::from_utf8(h.value).map_err(|_| Refusal::NotUtf8)?;
        let once = SINGLE_HEADERS
            .iter()
            .any(|s| s.eq_ignore_ascii_case(h.name));
        if once && headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(h.name)) {
            return Err(Refusal::Repeated);
        }
        headers.push((h.name.to_string(), value.trim().to_string()));
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
        principal: None,
        proxy_without_principal: false,
    };
    match request.header("Host") {
        None if !http10 => return Err(Refusal::NoHost),
        Some(h) if !refusals::valid_host(h) => return Err(Refusal::BadHost),
        _ => {}
    }
    if request.header("Transfer-Encoding").is_some() {
        return Err(Refusal::TransferEncoding);
    }
    if let Some(len) = request.header("Content-Length") {
        request.content_length = refusals::content_length(len)?;
    }
    // `Connection` is a list of tokens (`keep-alive, Upgrade`), in any case.
    if request.has_token("Connection", "close") {
        request.close = true;
    } else if request.has_token("Connection", "keep-alive") {
        request.close = false;
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_as(head: &str) -> Result<Request, Refusal> {
        let remote = SocketAddr::from(([127, 0, 0, 1], 9));
        parse_head(format!("{head}\r\n\r\n").as_bytes(), remote)
    }

    fn parse(head: &str) -> Result<Request, u16> {
        parse_as(head).map_err(Refusal::status)
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
        let r = parse("GET / HTTP/1.1\r\nHost: a\r\nX: tab\there").unwrap();
        assert_eq!(r.header("X"), Some("tab\there"), "a tab is a value's own");
    }

    /// What `httparse` refuses is answered with our table's status: a line without a colon,
    /// a folded line, a space before the colon, more headers than the limit.
    #[test]
    fn what_the_tokenizer_refuses_has_the_tables_status() {
        let many: String = (0..65).map(|i| format!("\r\nX{i}: v")).collect();
        for (head, rule) in [
            ("GET / HTTP/1.1\r\nHost: a\r\nNoColon", Refusal::HeaderName),
            (
                "GET / HTTP/1.1\r\nHost: a\r\n folded: x",
                Refusal::HeaderName,
            ),
            ("GET / HTTP/1.1\r\nHost : a", Refusal::HeaderName),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nX: \x7f",
                Refusal::ControlInValue,
            ),
            ("GET  / HTTP/1.1\r\nHost: a", Refusal::RequestLine),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked",
                Refusal::TransferEncoding,
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +5",
                Refusal::ContentLength,
            ),
            (
                &format!("GET / HTTP/1.1\r\nHost: a{many}"),
                Refusal::TooManyHeaders,
            ),
        ] {
            assert_eq!(parse_as(head).err(), Some(rule), "{head:?}");
        }
        assert_eq!(
            parse("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 12").map(|r| r.content_length),
            Ok(12)
        );
        let remote = SocketAddr::from(([127, 0, 0, 1], 9));
        let bare_lf = parse_head(b"GET /acp HTTP/1.1\nHost: a\n\n", remote);
        assert_eq!(
            bare_lf.map(|r| r.target),
            Ok("/acp".to_string()),
            "LF alone ends a line"
        );
    }
}
