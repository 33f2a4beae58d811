//! One MCP server: started from an ACP `McpServer` object, initialized, its tools listed and
//! called. Over stdio it is a [`Connection`] of the crate's JSON-RPC core (the same reader,
//! writer and request tables as the ACP side, with the child's pipes for stdin and stdout);
//! over streamable HTTP each message is a POST whose answer is JSON or an SSE stream.

use crate::host::child_peer::ChildPeer;
use crate::host::sse::{SseItem, SseReader};
use crate::jsonrpc::message::parse_line;
use crate::jsonrpc::{code, Incoming, Message, Response, ResponseError};
use serde_json::{json, Value};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one tool call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(600);
const PROTOCOL_VERSION: &str = "2025-06-18";
/// Longest answer accepted from an HTTP server.
const MAX_ANSWER: usize = 16 * 1024 * 1024;

#[derive(Clone, Debug)]
pub struct McpTool {
    /// The name the model sees: `server__tool`.
    pub exposed: String,
    pub server: String,
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

enum Transport {
    Stdio(StdioTransport),
    Http(HttpTransport),
    /// HTTP+SSE (`type: "sse"`): a GET event stream and POSTed messages.
    Sse(super::sse_transport::SseTransport),
}

struct StdioTransport {
    peer: ChildPeer,
    /// Set on `notifications/tools/list_changed`.
    tools_changed: Arc<AtomicBool>,
}

struct HttpTransport {
    url: String,
    headers: Vec<(String, String)>,
    session: Option<String>,
    next_id: i64,
    agent: ureq::Agent,
}

pub struct McpServer {
    pub name: String,
    transport: Transport,
}

/// What `initialize` says about us (also after an SSE server's stream is reopened).
pub(super) fn initialize_params() -> Value {
    json!({"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": "maka-acp", "version": env!("CARGO_PKG_VERSION")}})
}

/// A server name as it may appear in a tool name.
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn pairs(v: &Value, what: &str) -> Vec<(String, String)> {
    v.get(what)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e.get("name")?.as_str()?.to_string(),
                e.get("value")?.as_str()?.to_string(),
            ))
        })
        .collect()
}

impl McpServer {
    /// Starts the server described by an ACP `McpServer` object; starting, initializing and
    /// listing its tools may take `timeout`. Unknown transports are an error the caller
    /// reports (and the session works without that server).
    pub fn start(
        spec: &Value,
        cwd: &str,
        timeout: Duration,
        confinement: &crate::host::sandbox::Confinement,
    ) -> Result<(McpServer, Vec<McpTool>), String> {
        let name = spec
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("mcp")
            .to_string();
        let transport = match spec.get("type").and_then(Value::as_str) {
            None | Some("stdio") => Transport::Stdio(start_stdio(spec, cwd, &name, confinement)?),
            Some("http") => Transport::Http(HttpTransport {
                url: spec
                    .get("url")
                    .and_then(Value::as_str)
                    .ok_or("an http server needs `url`")?
                    .to_string(),
                headers: pairs(spec, "headers"),
                session: None,
                next_id: 0,
                agent: ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_connect(Some(Duration::from_secs(10)))
                    .timeout_global(Some(CALL_TIMEOUT))
                    .build()
                    .into(),
            }),
            Some("sse") => Transport::Sse(super::sse_transport::SseTransport::start(
                spec.get("url")
                    .and_then(Value::as_str)
                    .ok_or("an sse server needs `url`")?,
                pairs(spec, "headers"),
                &name,
            )?),
            Some(other) => return Err(format!("transport type {other:?} is not supported")),
        };
        let mut server = McpServer { name, transport };
        let deadline = Instant::now() + timeout;
        let init = server.request("initialize", initialize_params(), timeout);
        if let Err(e) = init {
            server.stop();
            return Err(format!("initialize failed: {e}"));
        }
        server.notify("notifications/initialized", json!({}));
        match server.list_tools(deadline) {
            Ok(tools) => Ok((server, tools)),
            Err(e) => {
                server.stop();
                Err(format!("tools/list failed: {e}"))
            }
        }
    }

    /// Every tool (following `nextCursor`).
    pub fn list_tools(&mut self, deadline: Instant) -> Result<Vec<McpTool>, String> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            let r = self.request("tools/list", params, left)?;
            let list = r
                .get("tools")
                .and_then(Value::as_array)
                .ok_or("the answer has no `tools`")?;
            for t in list {
                let Some(name) = t.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let mut exposed = format!("{}__{}", sanitize(&self.name), sanitize(name));
                exposed.truncate(64);
                tools.push(McpTool {
                    exposed,
                    server: self.name.clone(),
                    name: name.to_string(),
                    description: t
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    input_schema: t
                        .get("inputSchema")
                        .cloned()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({"type": "object"})),
                });
            }
            cursor = r
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(String::from);
            if cursor.is_none() {
                return Ok(tools);
            }
        }
        Err("too many tools/list pages".into())
    }

    fn notify(&mut self, method: &str, params: Value) {
        match &mut self.transport {
            Transport::Stdio(t) => {
                t.peer.outbox.send(&Message::notification(method, params));
            }
            Transport::Sse(t) => {
                t.outbox.send(&Message::notification(method, params));
            }
            Transport::Http(t) => {
                let _ = t.post(&Message::notification(method, params));
            }
        }
    }

    /// One request; its result, or the server's error message.
    pub fn request(
        &mut self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, String> {
        let who = format!("MCP server {}", self.name);
        match &mut self.transport {
            Transport::Stdio(t) => t
                .peer
                .calls
                .request(method, params, timeout)
                .map_err(|e| e.describe(&who, method, timeout)),
            Transport::Sse(t) => t
                .calls
                .request(method, params, timeout)
                .map_err(|e| e.describe(&who, method, timeout)),
            Transport::Http(t) => {
                t.next_id += 1;
                let id = crate::jsonrpc::RequestId::Int(t.next_id);
                let reply = t
                    .post(&Message::request(id, method, params))?
                    .ok_or_else(|| format!("no answer to {method}"))?;
                reply.result.map_err(|e| e.message)
            }
        }
    }

    /// Calls a tool; `Ok((text, is_error))`.
    pub fn call_tool(&mut self, name: &str, args: Value) -> Result<(String, bool), String> {
        let r = self.request(
            "tools/call",
            json!({"name": name, "arguments": args}),
            CALL_TIMEOUT,
        )?;
        let mut text = String::new();
        for c in r
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match c.get("type").and_then(Value::as_str) {
                Some("text") => text.push_str(c.get("text").and_then(Value::as_str).unwrap_or("")),
                Some("resource") => text.push_str(
                    c.pointer("/resource/text")
                        .and_then(Value::as_str)
                        .unwrap_or("[resource]"),
                ),
                Some(other) => text.push_str(&format!("[{other} content]")),
                None => {}
            }
            text.push('\n');
        }
        if text.is_empty() {
            if let Some(s) = r.get("structuredContent") {
                text = s.to_string();
            }
        }
        Ok((
            text.trim_end().to_string(),
            r.get("isError").and_then(Value::as_bool).unwrap_or(false),
        ))
    }

    /// Whether the server announced a new tool list since it was last read.
    pub fn take_tools_changed(&self) -> bool {
        match &self.transport {
            Transport::Stdio(t) => t.tools_changed.swap(false, Ordering::AcqRel),
            Transport::Sse(t) => t.tools_changed.swap(false, Ordering::AcqRel),
            Transport::Http(_) => false,
        }
    }

    /// Why the server stopped, if it did.
    pub fn dead(&self) -> Option<String> {
        match &self.transport {
            Transport::Stdio(t) if t.peer.calls.is_closed() => Some(match t.peer.last_words() {
                Some(last) => format!("MCP server {} stopped (it said: {last})", self.name),
                None => format!("MCP server {} stopped", self.name),
            }),
            Transport::Sse(t) if t.calls.is_closed() => Some(format!(
                "MCP server {} is unreachable (its event stream dropped and could not be reopened)",
                self.name
            )),
            _ => None,
        }
    }

    pub fn stop(&mut self) {
        if let Transport::Sse(t) = &self.transport {
            t.stop();
        }
        if let Transport::Stdio(t) = &mut self.transport {
            t.peer.stop();
        }
    }
}

/// Spawns a stdio server and connects the JSON-RPC core to its pipes. A thread answers what
/// the server asks of us (sampling, roots, elicitation: not offered) and notes tool-list
/// changes.
fn start_stdio(
    spec: &Value,
    cwd: &str,
    name: &str,
    confinement: &crate::host::sandbox::Confinement,
) -> Result<StdioTransport, String> {
    let command = spec
        .get("command")
        .and_then(Value::as_str)
        .ok_or("a stdio server needs `command`")?;
    let args = crate::host_api::string_list(spec.get("args"));
    let mut cmd = Command::new(command);
    cmd.args(&args).current_dir(cwd);
    crate::host::child_env::apply(&mut cmd, pairs(spec, "env"));
    confinement.apply(
        &mut cmd,
        &format!("MCP server `{name}`"),
        std::path::Path::new(cwd),
        &[],
    )?;
    let peer = ChildPeer::spawn(&format!("mcp-{name}"), cmd)
        .map_err(|e| format!("cannot start `{command}`: {e}"))?;
    let tools_changed: Arc<AtomicBool> = Arc::default();
    let (inbox, changed, server) = (
        peer.incoming.clone(),
        Arc::clone(&tools_changed),
        name.to_string(),
    );
    let spawned = std::thread::Builder::new()
        .name(format!("mcp-{name}"))
        .spawn(move || {
            for incoming in inbox {
                match incoming {
                    Incoming::Request(r, responder) => responder.respond(Err(ResponseError::new(
                        code::METHOD_NOT_FOUND,
                        format!("maka-acp does not support {}", r.method),
                    ))),
                    Incoming::Notification(n) if n.method == "notifications/tools/list_changed" => {
                        log::info!(
                            "MCP server {server}: its tool list changed; re-listing at the next turn"
                        );
                        changed.store(true, Ordering::Release);
                    }
                    Incoming::Notification(_) => {}
                }
            }
        });
    if let Err(e) = spawned {
        log::warn!("MCP server {name}: cannot start its message thread: {e}");
    }
    Ok(StdioTransport {
        peer,
        tools_changed,
    })
}

impl HttpTransport {
    /// POSTs one message; the answer (for a request) is JSON or an SSE stream carrying it.
    fn post(&mut self, msg: &Message) -> Result<Option<Response>, String> {
        let mut req = self
            .agent
            .post(&self.url)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", PROTOCOL_VERSION);
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        if let Some(s) = &self.session {
            req = req.header("Mcp-Session-Id", s.as_str());
        }
        let resp = req
            .content_type("application/json")
            .send(msg.to_line().as_str())
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        if let Some(s) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.session = Some(s.to_string());
        }
        let Message::Request(request) = msg else {
            return Ok(None); // a notification: nothing to wait for
        };
        if status == 202 {
            return Ok(None);
        }
        if status >= 400 {
            return Err(format!("HTTP {status}"));
        }
        let is_sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let body = resp.into_body();
        if !is_sse {
            let text = body
                .into_with_config()
                .limit(MAX_ANSWER as u64)
                .read_to_string()
                .map_err(|e| e.to_string())?;
            return answer(text.as_bytes(), &request.id)
                .map(Some)
                .ok_or_else(|| "the answer is not a JSON-RPC response to this request".into());
        }
        // The stream may carry the server's own requests and notifications first.
        let mut events = SseReader::new(body.into_reader(), MAX_ANSWER);
        while let Some(item) = events.next().map_err(|e| e.to_string())? {
            if let SseItem::Data(data) = item {
                if let Some(r) = answer(data.as_bytes(), &request.id) {
                    return Ok(Some(r));
                }
            }
        }
        Err("the event stream ended without an answer".into())
    }
}

/// `bytes` as the response to request `id`, if it is one.
fn answer(bytes: &[u8], id: &crate::jsonrpc::RequestId) -> Option<Response> {
    match parse_line(bytes) {
        Ok(Message::Response(r)) if &r.id == id => Some(r),
        _ => None,
    }
}
