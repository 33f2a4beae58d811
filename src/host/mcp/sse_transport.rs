//! MCP's HTTP+SSE transport (the older one many servers still speak): a GET opens an event
//! stream whose first event names the endpoint to POST messages to; every answer and server
//! message arrives on that stream. Outgoing messages go through the JSON-RPC core's request
//! table like any transport's (an outbox whose lines a thread POSTs); a reader thread feeds the
//! stream's messages back to it. A stream that drops is reopened (at most 3 times in a row) and
//! the session initialized again; requests in flight at the drop fail.

use crate::host::sse::{SseItem, SseReader};
use crate::jsonrpc::message::parse_line;
use crate::jsonrpc::{code, ClientCalls, Message, Outbox, Outgoing, Response, ResponseError};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The longest event line read from the stream.
const MAX_EVENT: usize = 16 * 1024 * 1024;
const RECONNECTS: usize = 3;
/// How long one POST may take.
const POST_TIMEOUT: Duration = Duration::from_secs(8);

pub struct SseTransport {
    pub outbox: Outbox,
    pub calls: Arc<ClientCalls>,
    pub tools_changed: Arc<AtomicBool>,
    stopped: Arc<AtomicBool>,
}

struct Shared {
    url: String,
    headers: Vec<(String, String)>,
    /// Where to POST, from the stream's `endpoint` event.
    endpoint: Mutex<Option<String>>,
    /// For the long-lived event stream (no overall timeout).
    agent: ureq::Agent,
    /// For POSTs, which a healthy server accepts at once: one that hangs (a message for a
    /// session the server no longer knows, say) fails its request instead of stalling all.
    poster: ureq::Agent,
}

impl Shared {
    fn post(&self, line: &str) -> Result<(), String> {
        let endpoint = self
            .endpoint
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or("the server named no endpoint")?;
        let mut req = self.poster.post(&endpoint);
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let resp = req
            .content_type("application/json")
            .send(line)
            .map_err(|e| e.to_string())?;
        match resp.status().as_u16() {
            s if s < 300 => Ok(()),
            s => Err(format!("HTTP {s} from {endpoint}")),
        }
    }

    /// Opens the stream and reads up to its `endpoint` event (an absolute URL is kept, a path
    /// is resolved against the stream's URL).
    fn open(&self) -> Result<SseReader<ureq::BodyReader<'static>>, String> {
        let mut req = self
            .agent
            .get(&self.url)
            .header("Accept", "text/event-stream");
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let resp = req.call().map_err(|e| e.to_string())?;
        if resp.status().as_u16() >= 300 {
            return Err(format!("HTTP {} from {}", resp.status().as_u16(), self.url));
        }
        let mut reader = SseReader::new(resp.into_body().into_reader(), MAX_EVENT);
        loop {
            match reader.next().map_err(|e| e.to_string())? {
                // The endpoint is a URI; every other event is a JSON message.
                Some(SseItem::Data(d)) if !d.trim_start().starts_with('{') => {
                    let d = d.trim();
                    let absolute = if d.starts_with("http://") || d.starts_with("https://") {
                        d.to_string()
                    } else {
                        let origin: String = match self.url.find("://") {
                            Some(i) => {
                                let rest = &self.url[i + 3..];
                                let host_end = rest.find('/').unwrap_or(rest.len());
                                self.url[..i + 3 + host_end].to_string()
                            }
                            None => self.url.clone(),
                        };
                        format!("{origin}{}{d}", if d.starts_with('/') { "" } else { "/" })
                    };
                    *self.endpoint.lock().unwrap_or_else(|p| p.into_inner()) = Some(absolute);
                    return Ok(reader);
                }
                Some(_) => continue,
                None => return Err("the stream ended before naming its endpoint".into()),
            }
        }
    }
}

impl SseTransport {
    pub fn start(
        url: &str,
        headers: Vec<(String, String)>,
        name: &str,
    ) -> Result<SseTransport, String> {
        let shared = Arc::new(Shared {
            url: url.into(),
            headers,
            endpoint: Mutex::new(None),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_connect(Some(Duration::from_secs(10)))
                .build()
                .into(),
            poster: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_connect(Some(Duration::from_secs(10)))
                .timeout_global(Some(POST_TIMEOUT))
                .build()
                .into(),
        });
        let reader = shared.open()?;
        let (outbox, lines) = crate::jsonrpc::outbox_pair();
        let calls = Arc::new(ClientCalls::new(outbox.clone()));
        let tools_changed: Arc<AtomicBool> = Arc::default();
        let stopped: Arc<AtomicBool> = Arc::default();
        // Writer: every outgoing line is a POST; a request that cannot be sent fails at once
        // (its answer would never come).
        let (s, c, server) = (Arc::clone(&shared), Arc::clone(&calls), name.to_string());
        std::thread::Builder::new()
            .name(format!("mcp-{name}-post"))
            .spawn(move || {
                for out in lines {
                    match out {
                        Outgoing::Line(line) => {
                            let line = line.text;
                            if let Err(e) = s.post(&line) {
                                log::warn!("MCP server {server}: a message could not be sent: {e}");
                                if let Ok(Message::Request(r)) = parse_line(line.as_bytes()) {
                                    c.complete(Response {
                                        id: r.id,
                                        result: Err(ResponseError::internal(format!(
                                            "MCP server {server} could not be reached: {e}"
                                        ))),
                                    });
                                }
                            }
                        }
                        Outgoing::Stop => break,
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        // Reader: the stream's messages back to the request table; reopened when it drops.
        let (s, c, changed, stop, server) = (
            Arc::clone(&shared),
            Arc::clone(&calls),
            Arc::clone(&tools_changed),
            Arc::clone(&stopped),
            name.to_string(),
        );
        std::thread::Builder::new()
            .name(format!("mcp-{name}-sse"))
            .spawn(move || {
                let mut reader = Some(reader);
                let mut failures = 0;
                while let Some(mut r) = reader.take() {
                    while let Ok(Some(item)) = r.next() {
                        let SseItem::Data(d) = item else { continue };
                        failures = 0;
                        deliver(&d, &c, &changed, &s);
                    }
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    // Dropped: what was in flight is lost; reopen and initialize again.
                    c.fail_pending("the MCP server's event stream dropped");
                    while failures < RECONNECTS && reader.is_none() {
                        // Back off a little: a restarting server needs a moment to listen.
                        std::thread::sleep(Duration::from_millis(250 << failures));
                        failures += 1;
                        log::warn!("MCP server {server}: its event stream dropped; reconnecting");
                        match s.open() {
                            Ok(r) => {
                                let init = Message::notification("notifications/initialized", json!({}));
                                let hello = json!({"jsonrpc": "2.0", "id": "reconnect", "method": "initialize",
                                    "params": super::server::initialize_params()});
                                if s.post(&hello.to_string()).is_ok() && s.post(&init.to_line()).is_ok() {
                                    reader = Some(r);
                                }
                            }
                            Err(e) => log::warn!("MCP server {server}: cannot reconnect: {e}"),
                        }
                    }
                }
                c.close_all();
            })
            .map_err(|e| e.to_string())?;
        Ok(SseTransport {
            outbox,
            calls,
            tools_changed,
            stopped,
        })
    }

    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.calls.close_all();
    }
}

/// One message from the stream.
fn deliver(data: &str, calls: &ClientCalls, changed: &AtomicBool, shared: &Shared) {
    match parse_line(data.as_bytes()) {
        Ok(Message::Response(r)) => {
            // The answer to a reconnect's initialize is ours alone.
            if r.id != crate::jsonrpc::RequestId::Str("reconnect".into()) {
                calls.complete(r);
            }
        }
        Ok(Message::Notification(n)) if n.method == "notifications/tools/list_changed" => {
            changed.store(true, Ordering::Release);
        }
        Ok(Message::Notification(_)) => {}
        Ok(Message::Request(req)) => {
            let answer = Response {
                id: req.id,
                result: Err(ResponseError::new(
                    code::METHOD_NOT_FOUND,
                    format!("maka-acp does not support {}", req.method),
                )),
            };
            let _ = shared.post(&Message::Response(answer).to_line());
        }
        Err(e) => log::warn!("an MCP server sent an unreadable message: {e:?}"),
    }
}
