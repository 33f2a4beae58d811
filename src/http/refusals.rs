//! What the server refuses in a request head, in one table: each rule, the status its answer
//! carries and the reason it gives. `httparse` reads the head to the letter of RFC 9112; these
//! are our rules on top of it, where a lenient reading could differ from a proxy's in front
//! (issue 54 §6), and the limits of what one head may cost.

use std::net::Ipv6Addr;

/// Headers a request may carry once: a second one is refused, never one of them chosen.
pub const SINGLE_HEADERS: &[&str] = &[
    "Host",
    "Authorization",
    "Content-Length",
    "Origin",
    "Sec-WebSocket-Key",
    "Acp-Connection-Id",
    "Acp-Session-Id",
    "Last-Event-ID",
];

/// A rule a request head broke. Its status and reason are its row of [`TABLE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The head did not arrive whole within its deadline.
    Late,
    /// The client stopped sending in the middle of the head.
    EndedEarly,
    /// Over `MAX_HEAD_BYTES`.
    TooLarge,
    /// Over `MAX_HEADERS`.
    TooManyHeaders,
    /// Bytes that are not UTF-8 (every header is read as text).
    NotUtf8,
    /// Not `METHOD SP target SP version`, or a control character in it.
    RequestLine,
    /// Neither HTTP/1.1 nor HTTP/1.0.
    Version,
    /// Not a token before the colon: whitespace, a control character, no colon.
    HeaderName,
    /// A control character other than a tab in a value (RFC 9110 §5.5): a NUL or a CR is cut or
    /// split differently by whatever else reads it.
    ControlInValue,
    /// One of [`SINGLE_HEADERS`] twice.
    Repeated,
    /// An HTTP/1.1 request without `Host` (RFC 9112 §3.2).
    NoHost,
    /// A `Host` that is not a host (see [`valid_host`]).
    BadHost,
    /// `Transfer-Encoding`: clients send `Content-Length`.
    TransferEncoding,
    /// A `Content-Length` that is not digits only: `+5` or ` 5` would be read differently by
    /// a proxy in front.
    ContentLength,
}

/// Rule -> status -> reason, in the order of [`Refusal`]'s variants.
const TABLE: &[(Refusal, u16, &str)] = &[
    (
        Refusal::Late,
        408,
        "the request head did not arrive in time",
    ),
    (Refusal::EndedEarly, 400, "the request head ended early"),
    (Refusal::TooLarge, 431, "the request head is too large"),
    (Refusal::TooManyHeaders, 431, "too many headers"),
    (Refusal::NotUtf8, 400, "the request head is not UTF-8"),
    (Refusal::RequestLine, 400, "malformed request line"),
    (Refusal::Version, 505, "only HTTP/1.1 and 1.0 are served"),
    (Refusal::HeaderName, 400, "malformed header name"),
    (
        Refusal::ControlInValue,
        400,
        "a header value holds a control character",
    ),
    (
        Refusal::Repeated,
        400,
        "a header that may appear once appears twice",
    ),
    (Refusal::NoHost, 400, "an HTTP/1.1 request must carry Host"),
    (
        Refusal::BadHost,
        400,
        "Host is not a host name or address with an optional port (1-65535)",
    ),
    (
        Refusal::TransferEncoding,
        411,
        "send the body with a Content-Length",
    ),
    (
        Refusal::ContentLength,
        400,
        "Content-Length is not a number",
    ),
];

impl Refusal {
    /// The status of the answer.
    pub fn status(self) -> u16 {
        TABLE[self as usize].1
    }

    /// The reason the answer gives.
    pub fn reason(self) -> &'static str {
        TABLE[self as usize].2
    }

    /// The rule `httparse` found broken.
    pub fn of_parse_error(e: httparse::Error) -> Refusal {
        match e {
            httparse::Error::Version => Refusal::Version,
            httparse::Error::HeaderName => Refusal::HeaderName,
            // A CR not before LF is on a header line: the request line was checked before.
            httparse::Error::HeaderValue | httparse::Error::NewLine => Refusal::ControlInValue,
            httparse::Error::TooManyHeaders => Refusal::TooManyHeaders,
            httparse::Error::Token | httparse::Error::Status => Refusal::RequestLine,
        }
    }
}

/// The request line (without its line end) holds a control character.
pub fn control_in_request_line(line: &[u8]) -> bool {
    line.iter().any(u8::is_ascii_control)
}

/// A value holds a control character other than a tab.
pub fn control_in_value(value: &[u8]) -> bool {
    value.iter().any(|&b| b != b'\t' && b.is_ascii_control())
}

/// `Content-Length`'s value: digits only, that fit a `u64`.
pub fn content_length(value: &str) -> Result<u64, Refusal> {
    Some(value)
        .filter(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|l| l.parse().ok())
        .ok_or(Refusal::ContentLength)
}

/// A `Host` value (RFC 9110 §7.2, RFC 3986): empty, or a name or an address — an IPv6 one in
/// brackets — then an optional `:port` of digits from 1 to 65535.
pub fn valid_host(host: &str) -> bool {
    if host.is_empty() {
        return true;
    }
    let (name_ok, port) = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((ip, after)) => (ip.parse::<Ipv6Addr>().is_ok(), after),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each rule's row is at its variant's place, so a rule can never answer another's status.
    #[test]
    fn every_rule_has_its_own_row() {
        for (i, (rule, status, reason)) in TABLE.iter().enumerate() {
            assert_eq!(*rule as usize, i, "{rule:?}");
            assert_eq!((rule.status(), rule.reason()), (*status, *reason));
        }
        assert_eq!(TABLE.len(), Refusal::ContentLength as usize + 1);
    }

    #[test]
    fn hosts_are_names_or_addresses_with_a_port() {
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
        for host in ["localhost:0", "localhost:", "a b", "[::1]evil", "[nope]:80"] {
            assert!(!valid_host(host), "{host:?}");
        }
    }
}
