//! The adapter's blocking client for the Runtime Host ([`HostApi`]; over HTTP, [`HostClient`]):
//! `call::<Op>` for every operation and `events` for one window of a session's event stream.
//! One error type separates what the host said (`Host`) from a reply that cannot be read
//! (`Protocol`: that one call fails) and from not reaching it at all (`Transport`, i.e. the
//! host is gone).

use super::ops::{HelloInput, HelloOutput, HostHello, Operation, ProtocolRange};
use super::wire::{Envelope, ErrorCode, Frame, HostError, PRINCIPAL_HEADER};
use crate::jsonrpc::line_reader::{Line, LineReader};
use serde::Deserialize;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::time::Duration;

/// Longest event-stream line accepted (frames are bounded far below this).
const MAX_FRAME_LINE: usize = 4 * 1024 * 1024;
/// Largest operation response read (a transcript page is at most ~1 MiB plus one item).
const MAX_RESPONSE: u64 = 32 * 1024 * 1024;

#[derive(Debug)]
pub enum ClientError {
    /// The host answered with an error envelope.
    Host(HostError),
    /// The host could not be reached or broke the connection.
    Transport(String),
    /// The host answered, but this reply or frame could not be read (too large, not JSON, no
    /// envelope). That one operation fails; it says nothing about the host's health.
    Protocol(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Host(e) => write!(f, "{e}"),
            ClientError::Transport(e) => write!(f, "Runtime Host unreachable: {e}"),
            ClientError::Protocol(e) => write!(f, "unreadable Runtime Host reply: {e}"),
        }
    }
}

impl ClientError {
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Host(e) => Some(e.code),
            ClientError::Transport(_) | ClientError::Protocol(_) => None,
        }
    }
}

/// The response envelope with the operation's own output type.
#[derive(Deserialize)]
struct Reply<T> {
    ok: bool,
    #[serde(default = "none")]
    result: Option<T>,
    #[serde(default)]
    error: Option<HostError>,
}

fn none<T>() -> Option<T> {
    None
}

type AgentConfig = ureq::config::ConfigBuilder<ureq::typestate::AgentScope>;

/// Certificate authorities to trust for an `https://` host instead of the bundled roots
/// (`MAKA_HOST_CA`: a TLS proxy with a private CA in front of a remote host).
#[derive(Clone, Debug, Default)]
pub struct HostTls {
    #[cfg(feature = "tls")]
    roots: Option<std::sync::Arc<Vec<ureq::tls::Certificate<'static>>>>,
}

impl HostTls {
    /// `MAKA_HOST_CA`'s value: a PEM file's path, or the PEM text itself (some editors put a
    /// file's contents in an agent's environment). Every certificate in it is trusted; none,
    /// or an unreadable file, is an error naming it.
    pub fn from_setting(value: &str) -> Result<HostTls, String> {
        if value.contains("-----BEGIN") {
            return HostTls::from_pem(value.as_bytes(), "the PEM text");
        }
        let path = std::path::Path::new(value);
        let pem =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        HostTls::from_pem(&pem, &path.display().to_string())
    }

    #[cfg(feature = "tls")]
    fn from_pem(pem: &[u8], source: &str) -> Result<HostTls, String> {
        let mut certs = vec![];
        for item in ureq::tls::parse_pem(pem) {
            match item {
                Ok(ureq::tls::PemItem::Certificate(c)) if !looks_like_x509(c.der()) => {
                    return Err(format!(
                        "{source} holds a CERTIFICATE block that is not an X.509 certificate"
                    ))
                }
                Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c),
                Ok(_) => {}
                Err(e) => return Err(format!("{source} is not valid PEM: {e}")),
            }
        }
        if certs.is_empty() {
            return Err(format!("{source} holds no certificate"));
        }
        Ok(HostTls {
            roots: Some(std::sync::Arc::new(certs)),
        })
    }

    #[cfg(not(feature = "tls"))]
    fn from_pem(_: &[u8], _: &str) -> Result<HostTls, String> {
        Err("this build has no TLS support (cargo feature `tls`)".into())
    }

    fn apply(&self, b: AgentConfig) -> AgentConfig {
        #[cfg(feature = "tls")]
        if let Some(roots) = &self.roots {
            return b.tls_config(
                ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::Specific(roots.clone()))
                    .build(),
            );
        }
        b
    }
}

#[derive(Clone)]
pub struct HostClient {
    base: String,
    token: String,
    /// The principal every operation and stream is for (`Maka-Principal`); none: the
    /// machine's user.
    principal: Option<String>,
    ops: ureq::Agent,
    streams: ureq::Agent,
    /// Short timeouts: is the host alive? (A broken stream is not a dead host.)
    probe: ureq::Agent,
}

/// One window of the event stream. Iterate with [`EventStream::next_frame`].
pub struct EventStream {
    lines: LineReader<Box<dyn BufRead + Send>>,
}

impl EventStream {
    /// A stream over any reader of frame lines (a fake host's, in tests).
    pub fn from_reader(reader: Box<dyn BufRead + Send>) -> EventStream {
        EventStream {
            lines: LineReader::new(reader, MAX_FRAME_LINE),
        }
    }

    /// The next line (data frame, heartbeat or stream_end), or None at EOF. A line over the
    /// limit is skipped (never buffered) and reported; reading goes on after it.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ClientError> {
        let line = self
            .lines
            .next_line()
            .map_err(|e| ClientError::Transport(format!("event stream broke: {e}")))?;
        match line {
            None => Ok(None),
            Some(Line::TooLong { len, .. }) => Err(ClientError::Protocol(format!(
                "a frame of {len} bytes is over the {MAX_FRAME_LINE}-byte limit"
            ))),
            Some(Line::Complete(bytes)) => Frame::parse(bytes)
                .map(Some)
                .map_err(|e| ClientError::Protocol(format!("unreadable frame from the host: {e}"))),
        }
    }
}

impl HostClient {
    /// `stream_timeout`: how long one event-stream window may stay silent (the host ends
    /// every window within 60 s; when this fires, the host is asked whether it lives before
    /// anything is concluded — this side may simply not have read).
    pub fn new(base_url: &str, token: &str, stream_timeout: Duration) -> HostClient {
        HostClient::with_tls(base_url, token, stream_timeout, &HostTls::default())
    }

    /// As [`HostClient::new`], trusting `tls`'s authorities for an `https://` host.
    pub fn with_tls(
        base_url: &str,
        token: &str,
        stream_timeout: Duration,
        tls: &HostTls,
    ) -> HostClient {
        // A host on this machine is reached directly: a proxy from the environment
        // (HTTP_PROXY, …) would carry the plain-http token through itself, and most cannot
        // reach our loopback anyway. A remote https host goes through it, as configured.
        let loopback = base_url
            .strip_prefix("http://")
            .or_else(|| base_url.strip_prefix("https://"))
            .is_some_and(is_loopback_authority);
        let config = || {
            let b = ureq::Agent::config_builder();
            if loopback {
                b.proxy(None)
            } else {
                b
            }
        };
        let ops = tls
            .apply(config())
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let streams = tls
            .apply(config())
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_global(Some(stream_timeout))
            .build()
            .into();
        let probe = tls
            .apply(config())
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        HostClient {
            base: base_url.trim_end_matches('/').to_string(),
            token: token.to_string(),
            principal: None,
            ops,
            streams,
            probe,
        }
    }
}

/// The Runtime Host as the adapter uses it: [`HostClient`] (HTTP) in the program, a scripted
/// fake in in-process tests (`host_api::fake`). Operations are typed on top of it
/// ([`HostApi::call`](trait.HostApi.html#method.call) on `dyn HostApi`).
pub trait HostApi: Send + Sync {
    /// POSTs operation `key` with its JSON input; the HTTP status and the reply body.
    fn post(&self, key: &str, body: String) -> Result<(u16, String), ClientError>;
    /// Opens one window of `session_id`'s stream after `after`. `until_terminal`: the window
    /// ends right after the next `turn_terminal` frame (a reader following one turn).
    fn events(
        &self,
        session_id: &str,
        after: u64,
        epoch: &str,
        wait_ms: u64,
        until_terminal: bool,
    ) -> Result<EventStream, ClientError>;
    /// Whether the host answers at all: tells a dead host from a stream that broke or stalled
    /// because this side stopped reading.
    fn is_alive(&self) -> bool;
    /// Asks the host to drain and exit.
    fn shutdown(&self, drain_ms: u64) -> Result<(), ClientError>;
    /// This host as principal `name` sees it: every operation and stream for `name`, who may
    /// use only the sessions it made. `None`: this client cannot name a principal (then it
    /// must not be used for one).
    fn for_principal(&self, name: &str) -> Option<std::sync::Arc<dyn HostApi>>;
    /// `GET /v1/attach`: while the returned connection is held, the host counts this adapter
    /// among its clients (a host another adapter started lives while any holds one).
    fn attach(&self) -> Result<Box<dyn Send>, ClientError>;
}

impl dyn HostApi + '_ {
    /// Runs the operation `O`: its input encoded, its output decoded. An output that does not
    /// match `O::Output` is a `Protocol` error (that one call fails; the host is fine).
    pub fn call<O: Operation>(&self, input: &O::Input) -> Result<O::Output, ClientError> {
        let body = serde_json::to_string(input)
            .map_err(|e| ClientError::Protocol(format!("cannot encode {}: {e}", O::KEY)))?;
        let (status, text) = self.post(O::KEY, body)?;
        match serde_json::from_slice::<Reply<O::Output>>(text.as_bytes()) {
            Ok(Reply {
                ok: true,
                result: Some(out),
                ..
            }) => Ok(out),
            // `{"ok":true}` for an output with no fields.
            Ok(Reply { ok: true, .. }) => serde_json::from_slice(b"{}").map_err(|_| {
                ClientError::Protocol(format!("the host answered {} without a result", O::KEY))
            }),
            Ok(Reply { error: Some(e), .. }) => Err(ClientError::Host(e)),
            Ok(Reply { .. }) => Err(ClientError::Host(HostError::internal(format!(
                "{} failed with HTTP {status}",
                O::KEY
            )))),
            Err(e) => match serde_json::from_slice::<Envelope>(text.as_bytes()) {
                Ok(Envelope {
                    error: Some(err), ..
                }) => Err(ClientError::Host(err)),
                Ok(_) => Err(ClientError::Protocol(format!(
                    "the {} reply does not match the protocol: {e}",
                    O::KEY
                ))),
                Err(_) => Err(ClientError::Protocol(format!(
                    "the host answered {} with HTTP {status} and no envelope",
                    O::KEY
                ))),
            },
        }
    }

    pub fn hello(&self) -> Result<HelloOutput, ClientError> {
        self.call::<HostHello>(&HelloInput {
            client: Some(json!({"name": "maka-acp", "version": env!("CARGO_PKG_VERSION")})),
            protocol: Some(ProtocolRange { min: 1, max: 1 }),
            features: vec!["client_calls".into()],
        })
    }
}

impl HostApi for HostClient {
    fn post(&self, key: &str, body: String) -> Result<(u16, String), ClientError> {
        let mut request = self
            .ops
            .post(&format!("{}/v1/op/{key}", self.base))
            .header("Authorization", format!("Bearer {}", self.token));
        if let Some(p) = &self.principal {
            request = request.header(PRINCIPAL_HEADER, p);
        }
        let resp = request
            .content_type("application/json")
            .send(body.as_str())
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let status = resp.status().as_u16();
        let text = resp
            .into_body()
            .with_config()
            .limit(MAX_RESPONSE)
            .read_to_string()
            .map_err(|e| match e {
                ureq::Error::BodyExceedsLimit(_) => ClientError::Protocol(format!(
                    "the {key} reply is over the {MAX_RESPONSE}-byte limit"
                )),
                e => ClientError::Transport(format!("reading the {key} response: {e}")),
            })?;
        Ok((status, text))
    }

    fn events(
        &self,
        session_id: &str,
        after: u64,
        epoch: &str,
        wait_ms: u64,
        until_terminal: bool,
    ) -> Result<EventStream, ClientError> {
        let until = if until_terminal {
            "&untilTerminal=1"
        } else {
            ""
        };
        let url = format!(
            "{}/v1/events?sessionId={session_id}&after={after}&epoch={epoch}&waitMs={wait_ms}{until}",
            self.base
        );
        let mut request = self
            .streams
            .get(&url)
            .header("Authorization", format!("Bearer {}", self.token));
        if let Some(p) = &self.principal {
            request = request.header(PRINCIPAL_HEADER, p);
        }
        let resp = request
            .call()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        if resp.status().as_u16() != 200 {
            let text = resp
                .into_body()
                .with_config()
                .limit(1 << 20)
                .read_to_string()
                .unwrap_or_default();
            let env: Option<Envelope> = serde_json::from_slice(text.as_bytes()).ok();
            let err = env
                .and_then(|e| e.error)
                .unwrap_or_else(|| HostError::internal("the event stream was refused"));
            return Err(ClientError::Host(err));
        }
        Ok(EventStream::from_reader(Box::new(
            BufReader::with_capacity(64 * 1024, resp.into_body().into_reader()),
        )))
    }

    fn is_alive(&self) -> bool {
        self.probe
            .get(&format!("{}/v1/health", self.base))
            .header("Authorization", format!("Bearer {}", self.token))
            .call()
            .is_ok_and(|r| r.status().as_u16() == 200)
    }

    fn attach(&self) -> Result<Box<dyn Send>, ClientError> {
        let resp = self
            .streams
            .get(&format!("{}/v1/attach", self.base))
            .header("Authorization", format!("Bearer {}", self.token))
            .call()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        if resp.status().as_u16() != 200 {
            return Err(ClientError::Transport(format!(
                "the host refused to attach (HTTP {})",
                resp.status().as_u16()
            )));
        }
        // The body is never read: holding it holds the connection.
        Ok(Box::new(resp.into_body().into_reader()))
    }

    fn for_principal(&self, name: &str) -> Option<std::sync::Arc<dyn HostApi>> {
        Some(std::sync::Arc::new(HostClient {
            principal: Some(name.to_string()),
            ..self.clone()
        }))
    }

    fn shutdown(&self, drain_ms: u64) -> Result<(), ClientError> {
        self.ops
            .post(&format!("{}/v1/shutdown", self.base))
            .header("Authorization", format!("Bearer {}", self.token))
            .send(json!({"drainMs": drain_ms}).to_string().as_str())
            .map(|_| ())
            .map_err(|e| ClientError::Transport(e.to_string()))
    }
}

/// Whether `der` has an X.509 certificate's outer shape: a DER SEQUENCE spanning exactly the
/// bytes, whose first element is a SEQUENCE (the to-be-signed part). Enough to refuse garbage
/// at start-up; the TLS library checks the rest when it uses the certificate.
#[cfg(feature = "tls")]
fn looks_like_x509(der: &[u8]) -> bool {
    /// (content start, content length) of the DER element at `at`.
    fn element(der: &[u8], at: usize) -> Option<(usize, usize)> {
        let first = *der.get(at + 1)?;
        if first < 0x80 {
            return Some((at + 2, first as usize));
        }
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | *der.get(at + 2 + i)? as usize;
        }
        Some((at + 2 + n, len))
    }
    match element(der, 0) {
        Some((start, len)) if der.first() == Some(&0x30) && start + len == der.len() => {
            der.get(start) == Some(&0x30)
                && element(der, start).is_some_and(|(s, l)| s + l <= der.len())
        }
        _ => false,
    }
}

/// `url` as it may be shown or logged: a password in it (`https://user:secret@host`) is
/// replaced by `***`.
pub fn shown_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            format!("{scheme}://{user}:***@{host}{path}")
        }
        None => url.to_string(),
    }
}

/// Whether the authority at the start of `rest` (what follows `http://`) names this machine:
/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
pub fn is_loopback_authority(rest: &str) -> bool {
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, _)) => h,
            None => return false,
        }
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
