//! Every host route in one place: `POST /v1/op/<key>`, `GET /v1/events`, `GET /v1/health`,
//! `POST /v1/shutdown`. Auth (bearer token, constant-time), the `Origin` and `Host` checks, body
//! limits (checked against the declared length before anything is read) and the NDJSON event
//! stream (written to the socket directly and flushed per batch). The HTTP plumbing is
//! [`crate::http`].

use super::ops::Caller;
use super::session::Since;
use super::Bounded;
use super::Host;
use crate::host_api::wire::StreamEndReason;
use crate::host_api::wire::{
    now_ms, Envelope, ErrorCode, Frame, FrameBody, HostError, PRINCIPAL_HEADER,
};
use crate::http::{Exchange, Request};
use serde_json::{json, Value};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
pub const MAX_STREAMS: usize = 64;
pub const MAX_INFLIGHT_OPS: usize = 128;
pub const HEARTBEAT: Duration = Duration::from_secs(10);
pub const DEFAULT_WAIT_MS: u64 = 25_000;
pub const MAX_WAIT_MS: u64 = 60_000;
/// Frames written per lock acquisition while catching up.
const BATCH: usize = 512;

pub fn serve(host: Arc<Host>, server: Arc<crate::http::Server>) {
    let h = Arc::clone(&host);
    server.serve(Arc::new(move |request, ex: &mut Exchange| {
        handle(&h, request, ex)
    }));
}

fn respond(host: &Host, ex: &mut Exchange, status: u16, envelope: &Envelope) {
    let body = serde_json::to_vec(envelope).unwrap_or_else(|_| b"{\"ok\":false}".to_vec());
    ex.respond(
        status,
        &[
            ("Content-Type", "application/json; charset=utf-8"),
            ("Maka-Host-Epoch", &host.epoch),
        ],
        &body,
    );
}

fn respond_error(host: &Host, ex: &mut Exchange, e: HostError) {
    let status = e.code.http_status();
    respond(
        host,
        ex,
        status,
        &Envelope {
            ok: false,
            result: None,
            error: Some(e),
        },
    );
}

fn respond_ok(host: &Host, ex: &mut Exchange, result: Value) {
    respond(
        host,
        ex,
        200,
        &Envelope {
            ok: true,
            result: Some(result),
            error: None,
        },
    );
}

fn header_value<'a>(request: &'a Request, name: &str) -> Option<&'a str> {
    request.header(name)
}

fn authorize(host: &Host, request: &Request) -> Result<(), HostError> {
    let deny = |why: &str| HostError::new(ErrorCode::Unauthorized, why.to_string());
    if header_value(request, "Origin").is_some() {
        return Err(deny(
            "requests from browsers (with an Origin header) are refused",
        ));
    }
    if !request.remote.ip().is_loopback() {
        return Err(deny("only loopback clients are served"));
    }
    if let Some(h) = header_value(request, "Host") {
        let port = host.port.load(Ordering::Relaxed);
        let bound = match host.listen_ip {
            std::net::IpAddr::V6(ip) => format!("[{ip}]:{port}"),
            ip => format!("{ip}:{port}"),
        };
        let ok = [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
            bound,
        ]
        .iter()
        .any(|allowed| h.eq_ignore_ascii_case(allowed));
        if !ok {
            return Err(deny("unexpected Host header"));
        }
    }
    // The server checked the token (the one check of both servers, `http::Request`).
    if !request.authenticated {
        return Err(deny("missing or wrong bearer token"));
    }
    Ok(())
}

fn handle(host: &Arc<Host>, request: Request, ex: &mut Exchange) {
    if let Err(e) = authorize(host, &request) {
        log::warn!(
            "refused {} {}: {}",
            request.method,
            redact_query(&request.target),
            e.message
        );
        return respond_error(host, ex, e);
    }
    let (path, query) = request
        .target
        .split_once('?')
        .unwrap_or((&request.target, ""));
    // Whom the request is for: the principal the adapter names (it holds the host's token,
    // and answers for whom it serves), or the machine's user.
    let caller = match Caller::from_header(request.header(PRINCIPAL_HEADER)) {
        Ok(c) => c,
        Err(e) => return respond_error(host, ex, e),
    };
    match (request.method.as_str(), path) {
        ("POST", p) if p.starts_with("/v1/op/") => {
            let key = &p["/v1/op/".len()..];
            let _guard = match host.slot_for(caller.principal(), Bounded::Ops) {
                Ok(g) => g,
                Err(e) => return respond_error(host, ex, e),
            };
            let body = match read_body_bytes(&request, ex) {
                Ok(b) => b,
                Err(e) => return respond_error(host, ex, e),
            };
            match super::ops::dispatch(host, caller, key, &body) {
                Ok(result) => respond_ok(host, ex, result),
                Err(e) => {
                    if e.code == ErrorCode::InternalFailure {
                        log::error!("{key}: {e}");
                    }
                    respond_error(host, ex, e)
                }
            }
        }
        ("GET", "/v1/events") => stream(host, caller, ex, query),
        ("GET", "/v1/attach") if !host.is_draining() => {
            let s = ex.stream();
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\nMaka-Host-Epoch: {}\r\n\r\n",
                host.epoch
            );
            if s.write_all(head.as_bytes())
                .and_then(|()| s.flush())
                .is_ok()
            {
                host.attached.hold(s);
            }
        }
        ("GET", "/v1/health") => {
            let result = json!({"state": if host.is_draining() { "draining" } else { "ready" }, "hostEpoch": host.epoch});
            respond_ok(host, ex, result)
        }
        ("POST", "/v1/shutdown") => {
            let input = read_body(&request, ex).unwrap_or(Value::Null);
            let drain = input
                .get("drainMs")
                .and_then(Value::as_u64)
                .unwrap_or(2000)
                .min(60_000);
            respond_ok(host, ex, json!({"accepted": true}));
            host.begin_shutdown(Duration::from_millis(drain));
        }
        (m, p) => respond_error(
            host,
            ex,
            HostError::new(ErrorCode::OperationUnavailable, format!("no route {m} {p}")),
        ),
    }
}

/// A target as logged: query values that may be secrets are replaced.
fn redact_query(target: &str) -> String {
    let Some((path, query)) = target.split_once('?') else {
        return target.to_string();
    };
    let redacted: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if is_secret_name(k) => format!("{k}=[redacted]"),
            _ => kv.to_string(),
        })
        .collect();
    format!("{path}?{}", redacted.join("&"))
}

fn is_secret_name(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    ["token", "key", "secret", "auth", "password", "bearer"]
        .iter()
        .any(|s| k.contains(s))
}

/// The body's bytes. A declared length over the limit is refused before a byte is read.
fn read_body_bytes(request: &Request, ex: &mut Exchange) -> Result<Vec<u8>, HostError> {
    if request.content_length > MAX_BODY_BYTES as u64 {
        return Err(HostError::new(
            ErrorCode::PayloadTooLarge,
            format!("the body exceeds {MAX_BODY_BYTES} bytes"),
        ));
    }
    ex.read_body()
        .map_err(|e| HostError::invalid(format!("cannot read the body: {e}")))
}

/// The body as JSON (`null` when empty), for the routes that are not operations.
fn read_body(request: &Request, ex: &mut Exchange) -> Result<Value, HostError> {
    let bytes = read_body_bytes(request, ex)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| HostError::invalid(format!("the body is not JSON: {e}")))
}

fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| {
        kv.split_once('=')
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v)
    })
}

fn stream(host: &Arc<Host>, caller: Caller, ex: &mut Exchange, query: &str) {
    let Some(session_id) = query_param(query, "sessionId") else {
        return respond_error(host, ex, HostError::invalid("`sessionId` is required"));
    };
    let after: u64 = match query_param(query, "after").map(str::parse).transpose() {
        Ok(a) => a.unwrap_or(0),
        Err(_) => return respond_error(host, ex, HostError::invalid("`after` must be an integer")),
    };
    // A reader that follows one turn asks to end the window right after its terminal frame,
    // so its slot is free at once (not after the next heartbeat finds the socket closed).
    let until_terminal = query_param(query, "untilTerminal") == Some("1");
    let wait_ms = query_param(query, "waitMs")
        .and_then(|w| w.parse().ok())
        .unwrap_or(DEFAULT_WAIT_MS)
        .min(MAX_WAIT_MS);
    if let Some(epoch) = query_param(query, "epoch").filter(|e| *e != host.epoch) {
        let e = HostError::new(
            ErrorCode::ResyncRequired,
            format!("host epoch changed (was {epoch}, now {})", host.epoch),
        )
        .with_details(json!({"reason": "epoch_changed", "hostEpoch": host.epoch}));
        return respond_error(host, ex, e);
    }
    let cell = match super::ops::cell_for(host, caller, session_id) {
        Ok(c) => c,
        Err(e) => return respond_error(host, ex, e),
    };
    {
        let st = cell.lock();
        if after > st.head_seq {
            let e = HostError::invalid(format!(
                "`after` ({after}) is past the head ({})",
                st.head_seq
            ));
            drop(st);
            return respond_error(host, ex, e);
        }
        if let Since::Evicted { oldest_seq } = st.frames_since(after, 1) {
            let e = HostError::new(ErrorCode::ResyncRequired, "the event ring no longer holds `after`; re-open the session")
                .with_details(json!({"reason": "ring_evicted", "oldestSeq": oldest_seq, "headSeq": st.head_seq, "hostEpoch": host.epoch}));
            drop(st);
            return respond_error(host, ex, e);
        }
    }
    let _slot = match host.slot_for(caller.principal(), Bounded::Streams) {
        Ok(s) => s,
        Err(e) => return respond_error(host, ex, e),
    };
    let out = ex.stream();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nCache-Control: no-store\r\nConnection: close\r\nMaka-Host-Epoch: {}\r\n\r\n",
        host.epoch
    );
    if out
        .write_all(head.as_bytes())
        .and_then(|_| out.flush())
        .is_err()
    {
        return;
    }
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    let mut cursor = after;
    let reader_id = {
        let mut st = cell.lock();
        cell.add_reader(&mut st, after)
    };
    // Unregisters the reader however the stream ends.
    struct Registered<'a>(&'a super::session::SessionCell, u64);
    impl Drop for Registered<'_> {
        fn drop(&mut self) {
            let mut st = self.0.lock();
            self.0.remove_reader(&mut st, self.1);
        }
    }
    let _registered = Registered(&cell, reader_id);
    let mut last_write = Instant::now();
    let mut buf = Vec::with_capacity(64 * 1024);
    let end_reason = loop {
        let (batch, end) = {
            let mut st = cell.lock();
            cell.reader_at(&mut st, reader_id, cursor);
            loop {
                if st.removed {
                    break (Vec::new(), Some(StreamEndReason::SessionRemoved));
                }
                if st.head_seq > cursor {
                    match st.frames_since(cursor, BATCH) {
                        Since::Frames(f) => break (f, None),
                        // The reader fell behind the ring: end, and let it re-open.
                        Since::Evicted { .. } => {
                            break (Vec::new(), Some(StreamEndReason::ResyncRequired))
                        }
                    }
                }
                if host.is_draining() && host.active_turns() == 0 {
                    break (Vec::new(), Some(StreamEndReason::HostDraining));
                }
                let now = Instant::now();
                if now >= deadline {
                    break (Vec::new(), Some(StreamEndReason::WindowElapsed));
                }
                let heartbeat_due = last_write + HEARTBEAT;
                if now >= heartbeat_due {
                    break (Vec::new(), None);
                }
                st = cell.wait(st, heartbeat_due.min(deadline) - now);
            }
        };
        buf.clear();
        let (batch, end) = match batch.iter().position(|l| until_terminal && is_terminal(l)) {
            Some(i) => (&batch[..=i], Some(StreamEndReason::TurnTerminal)),
            None => (&batch[..], end),
        };
        if batch.is_empty() && end.is_none() {
            let hb = Frame {
                seq: None,
                session_id: None,
                ts: now_ms(),
                body: FrameBody::Heartbeat { head_seq: cursor },
            };
            let _ = serde_json::to_writer(&mut buf, &hb);
            buf.push(b'\n');
        }
        for line in batch {
            buf.extend_from_slice(line.as_bytes());
            buf.push(b'\n');
        }
        cursor += batch.len() as u64;
        if !buf.is_empty() {
            if out.write_all(&buf).and_then(|_| out.flush()).is_err() {
                return;
            }
            last_write = Instant::now();
        }
        if let Some(reason) = end {
            break reason;
        }
    };
    let end = Frame {
        seq: None,
        session_id: None,
        ts: now_ms(),
        body: FrameBody::StreamEnd {
            reason: end_reason,
            last_seq: cursor,
        },
    };
    if let Ok(mut line) = serde_json::to_vec(&end) {
        line.push(b'\n');
        let _ = out.write_all(&line).and_then(|_| out.flush());
    }
}

/// Whether a serialized frame is a `turn_terminal`. Inside string values quotes are escaped,
/// so this exact key-value text can only be the frame's own `kind`.
fn is_terminal(line: &str) -> bool {
    line.contains("\"kind\":\"turn_terminal\"")
}

/// The `limits` object of `host.hello`.
pub fn limit_values() -> Value {
    json!({
        "maxRequestBytes": MAX_BODY_BYTES,
        "ringFrames": super::session::RING_FRAMES,
        "ringBytes": super::session::RING_BYTES,
        "maxWaitMs": MAX_WAIT_MS,
        "heartbeatMs": HEARTBEAT.as_millis() as u64,
        "maxPendingInteractions": super::session::MAX_PENDING_INTERACTIONS,
        "maxStreams": MAX_STREAMS,
    })
}
