//! MCP servers a client passed with its session: their tools join the model's tool list as
//! `server__tool`. Hand-written MCP JSON-RPC over stdio (newline-delimited, like our own ACP
//! transport) and over streamable HTTP (ureq; JSON or SSE answers).
//!
//! Servers start in the background when the session is created or opened, so `session/new`
//! never waits for them; a turn waits (bounded) until they have all started or failed. A server
//! that fails to start or dies is reported to the user in the next turn, never dropped silently.

use super::tools::shell::kill_group;
use crossbeam_channel::{bounded, Sender};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long starting one server (spawn, initialize, tools/list) may take, and how long a
/// turn waits for a session's servers: `MAKA_MCP_START_TIMEOUT_MS`, else 30 s.
pub fn start_timeout() -> Duration {
    static T: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *T.get_or_init(|| {
        let ms = std::env::var("MAKA_MCP_START_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.trim().parse().ok());
        Duration::from_millis(ms.filter(|n| (100..=600_000).contains(n)).unwrap_or(30_000))
    })
}
/// How long one tool call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(600);
const PROTOCOL_VERSION: &str = "2025-06-18";
/// Longest line accepted from a stdio server.
const MAX_LINE: u64 = 16 * 1024 * 1024;

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
}

struct StdioTransport {
    child: Child,
    stdin: Arc<Mutex<ChildStdin>>,
    pending: Arc<Mutex<HashMap<u64, Sender<Value>>>>,
    /// Set by the reader when the server's stdout closes.
    dead: Arc<Mutex<Option<String>>>,
    /// Set by the reader on `notifications/tools/list_changed`.
    tools_changed: Arc<AtomicBool>,
}

struct HttpTransport {
    url: String,
    headers: Vec<(String, String)>,
    session: Option<String>,
    agent: ureq::Agent,
}

pub struct McpServer {
    pub name: String,
    transport: Transport,
    next_id: u64,
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
    /// Starts the server described by an ACP `McpServer` object. Unknown transports are an
    /// error the caller reports (and the session works without that server).
    pub fn start(spec: &Value, cwd: &str) -> Result<(McpServer, Vec<McpTool>), String> {
        let name = spec
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("mcp")
            .to_string();
        let transport = match spec.get("type").and_then(Value::as_str) {
            None | Some("stdio") => {
                let command = spec
                    .get("command")
                    .and_then(Value::as_str)
                    .ok_or("a stdio server needs `command`")?;
                let args = crate::host_api::string_list(spec.get("args"));
                let mut cmd = Command::new(command);
                cmd.args(&args)
                    .current_dir(cwd)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .process_group(0);
                for v in ["MAKA_HOST_TOKEN", "MAKA_OPENAI_API_KEY", "OPENAI_API_KEY"] {
                    cmd.env_remove(v);
                }
                for (k, v) in pairs(spec, "env") {
                    cmd.env(k, v);
                }
                let mut child = cmd
                    .spawn()
                    .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                super::reaper::track(child.id());
                let stdin = child.stdin.take().ok_or("no stdin")?;
                let stdout = child.stdout.take().ok_or("no stdout")?;
                let stdin = Arc::new(Mutex::new(stdin));
                let pending: Arc<Mutex<HashMap<u64, Sender<Value>>>> = Arc::default();
                let dead: Arc<Mutex<Option<String>>> = Arc::default();
                let tools_changed: Arc<AtomicBool> = Arc::default();
                let reader = StdioReader {
                    pending: Arc::clone(&pending),
                    dead: Arc::clone(&dead),
                    stdin: Arc::clone(&stdin),
                    tools_changed: Arc::clone(&tools_changed),
                    name: name.clone(),
                };
                let _ = std::thread::Builder::new()
                    .name(format!("mcp-{name}"))
                    .spawn(move || reader.run(stdout));
                Transport::Stdio(StdioTransport {
                    child,
                    stdin,
                    pending,
                    dead,
                    tools_changed,
                })
            }
            Some("http") => Transport::Http(HttpTransport {
                url: spec
                    .get("url")
                    .and_then(Value::as_str)
                    .ok_or("an http server needs `url`")?
                    .to_string(),
                headers: pairs(spec, "headers"),
                session: None,
                agent: ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_connect(Some(Duration::from_secs(10)))
                    .timeout_global(Some(CALL_TIMEOUT))
                    .build()
                    .into(),
            }),
            Some(other) => return Err(format!("transport type {other:?} is not supported")),
        };
        let mut server = McpServer {
            name,
            transport,
            next_id: 0,
        };
        let deadline = Instant::now() + start_timeout();
        let init = server.request(
            "initialize",
            json!({"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": "maka-acp", "version": env!("CARGO_PKG_VERSION")}}),
            start_timeout(),
        );
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
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        match &mut self.transport {
            Transport::Stdio(t) => {
                if let Ok(mut w) = t.stdin.lock() {
                    let _ = writeln!(w, "{msg}").and_then(|_| w.flush());
                }
            }
            Transport::Http(t) => {
                let _ = t.post(&msg);
            }
        }
    }

    pub fn request(
        &mut self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let reply = match &mut self.transport {
            Transport::Stdio(t) => {
                if let Some(why) = t.dead.lock().ok().and_then(|d| d.clone()) {
                    return Err(why);
                }
                let (tx, rx) = bounded(1);
                t.pending.lock().map_err(|_| "poisoned")?.insert(id, tx);
                let written =
                    t.stdin
                        .lock()
                        .map_err(|_| "poisoned".to_string())
                        .and_then(|mut w| {
                            writeln!(w, "{msg}")
                                .and_then(|_| w.flush())
                                .map_err(|e| format!("the server's stdin is closed: {e}"))
                        });
                if let Err(e) = written {
                    t.pending.lock().map_err(|_| "poisoned")?.remove(&id);
                    return Err(e);
                }
                let r = rx.recv_timeout(timeout);
                t.pending.lock().map_err(|_| "poisoned")?.remove(&id);
                match r {
                    Ok(v) => v,
                    Err(_) => {
                        return Err(t.dead.lock().ok().and_then(|d| d.clone()).unwrap_or_else(
                            || format!("no answer to {method} within {} s", timeout.as_secs()),
                        ))
                    }
                }
            }
            Transport::Http(t) => t
                .post(&msg)?
                .ok_or_else(|| format!("no answer to {method}"))?,
        };
        if let Some(e) = reply.get("error") {
            return Err(e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("error")
                .to_string());
        }
        reply
            .get("result")
            .cloned()
            .ok_or_else(|| format!("the answer to {method} has no result"))
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
            Transport::Http(_) => false,
        }
    }

    /// Why the server stopped, if it did.
    pub fn dead(&self) -> Option<String> {
        match &self.transport {
            Transport::Stdio(t) => t.dead.lock().ok().and_then(|d| d.clone()),
            Transport::Http(_) => None,
        }
    }

    pub fn stop(&mut self) {
        if let Transport::Stdio(t) = &mut self.transport {
            kill_group(t.child.id());
            let _ = t.child.kill();
            let _ = t.child.wait();
            super::reaper::untrack(t.child.id());
        }
    }
}

impl HttpTransport {
    /// POSTs one message; the answer is JSON or an SSE stream carrying it.
    fn post(&mut self, msg: &Value) -> Result<Option<Value>, String> {
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
            .send(msg.to_string().as_str())
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        if let Some(s) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.session = Some(s.to_string());
        }
        if status == 202 || msg.get("id").is_none() {
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
                .limit(MAX_LINE)
                .read_to_string()
                .map_err(|e| e.to_string())?;
            return serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| format!("not JSON: {e}"));
        }
        let reader = BufReader::new(body.into_reader());
        for line in reader.lines() {
            let line = line.map_err(|e| e.to_string())?;
            if let Some(data) = line.strip_prefix("data:") {
                if let Ok(v) = serde_json::from_str::<Value>(data.trim()) {
                    if v.get("id") == msg.get("id")
                        && (v.get("result").is_some() || v.get("error").is_some())
                    {
                        return Ok(Some(v));
                    }
                }
            }
        }
        Err("the event stream ended without an answer".into())
    }
}

/// The stdio reader: routes answers, refuses server→client requests, notes list changes.
struct StdioReader {
    pending: Arc<Mutex<HashMap<u64, Sender<Value>>>>,
    dead: Arc<Mutex<Option<String>>>,
    stdin: Arc<Mutex<ChildStdin>>,
    tools_changed: Arc<AtomicBool>,
    name: String,
}

impl StdioReader {
    fn run(self, stdout: std::process::ChildStdout) {
        let name = &self.name;
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match std::io::Read::take(&mut reader, MAX_LINE).read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let Ok(v) = serde_json::from_str::<Value>(line.trim()) else {
                log::warn!("MCP server {name} wrote a line that is not JSON-RPC; ignoring it");
                continue;
            };
            match (v.get("id").and_then(Value::as_u64), v.get("method")) {
                (Some(id), None) => {
                    if let Some(tx) = self.pending.lock().ok().and_then(|mut p| p.remove(&id)) {
                        let _ = tx.send(v);
                    }
                }
                (_, Some(m)) if v.get("id").is_some() => {
                    // Sampling, roots, elicitation…: not offered by this client.
                    let answer = json!({"jsonrpc": "2.0", "id": v["id"], "error": {"code": -32601, "message": format!("maka-acp does not support {m}")}});
                    if let Ok(mut w) = self.stdin.lock() {
                        let _ = writeln!(w, "{answer}").and_then(|_| w.flush());
                    }
                }
                (_, Some(m)) if m == "notifications/tools/list_changed" => {
                    log::info!(
                        "MCP server {name}: its tool list changed; re-listing at the next turn"
                    );
                    self.tools_changed.store(true, Ordering::Release);
                }
                _ => {}
            }
        }
        if let Ok(mut d) = self.dead.lock() {
            *d = Some(format!("MCP server {name} stopped"));
        }
        // Wake everyone waiting: their answers will never come.
        if let Ok(mut p) = self.pending.lock() {
            p.clear();
        }
    }
}

/// The MCP servers of one session.
#[derive(Default)]
pub struct McpSet {
    state: Mutex<SetState>,
    ready: Condvar,
}

#[derive(Default)]
struct SetState {
    starting: usize,
    servers: Vec<Arc<Mutex<McpServer>>>,
    tools: Vec<McpTool>,
    /// Problems not yet shown to the user.
    unreported: Vec<String>,
    stopped: bool,
}

impl McpSet {
    /// Starts every server in the background.
    pub fn start(specs: &[Value], cwd: &str) -> Arc<McpSet> {
        let set = Arc::new(McpSet::default());
        for spec in specs {
            let name = spec
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            set.lock().starting += 1;
            let (s, spec, cwd) = (Arc::clone(&set), spec.clone(), cwd.to_string());
            let spawned = std::thread::Builder::new()
                .name(format!("mcp-start-{name}"))
                .spawn(move || {
                    let result = McpServer::start(&spec, &cwd);
                    let mut st = s.lock();
                    st.starting -= 1;
                    match result {
                        Ok((server, tools)) if !st.stopped => {
                            log::info!("MCP server {name} started with {} tool(s)", tools.len());
                            st.tools.extend(tools);
                            st.servers.push(Arc::new(Mutex::new(server)));
                        }
                        Ok((mut server, _)) => server.stop(),
                        Err(e) => {
                            log::warn!("MCP server {name}: {e}");
                            st.unreported
                                .push(format!("MCP server `{name}` is unavailable: {e}"));
                        }
                    }
                    s.ready.notify_all();
                });
            if spawned.is_err() {
                set.lock().starting -= 1;
            }
        }
        set
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits (bounded) until every server has started or failed; returns the tools and the
    /// problems to tell the user about (each reported once).
    pub fn ready(&self, timeout: Duration) -> (Vec<McpTool>, Vec<String>) {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        while st.starting > 0 && Instant::now() < deadline {
            st = match self.ready.wait_timeout(st, deadline - Instant::now()) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        if st.starting > 0 {
            let msg = format!(
                "{} MCP server(s) are still starting; this turn runs without them",
                st.starting
            );
            st.unreported.push(msg);
        }
        // Servers that died since the last turn.
        let mut dead = vec![];
        st.servers
            .retain(|s| match s.lock().ok().and_then(|g| g.dead()) {
                Some(why) => {
                    dead.push(why);
                    false
                }
                None => true,
            });
        for why in dead {
            log::warn!("{why}");
            let server = why
                .trim_start_matches("MCP server ")
                .trim_end_matches(" stopped")
                .to_string();
            st.tools.retain(|t| t.server != server);
            st.unreported
                .push(format!("{why}; its tools are no longer available"));
        }
        // Servers that announced a new tool list: read it again.
        let changed: Vec<Arc<Mutex<McpServer>>> = st
            .servers
            .iter()
            .filter(|s| s.lock().map(|g| g.take_tools_changed()).unwrap_or(false))
            .cloned()
            .collect();
        for server in changed {
            let Ok(mut g) = server.lock() else { continue };
            let name = g.name.clone();
            match g.list_tools(Instant::now() + start_timeout()) {
                Ok(tools) => {
                    st.tools.retain(|t| t.server != name);
                    st.tools.extend(tools);
                }
                Err(e) => st.unreported.push(format!(
                    "MCP server `{name}` changed its tools but cannot list them: {e}"
                )),
            }
        }
        let problems = std::mem::take(&mut st.unreported);
        (st.tools.clone(), problems)
    }

    pub fn server(&self, name: &str) -> Option<Arc<Mutex<McpServer>>> {
        self.lock()
            .servers
            .iter()
            .find(|s| s.lock().map(|g| g.name == name).unwrap_or(false))
            .cloned()
    }

    pub fn tool(&self, exposed: &str) -> Option<McpTool> {
        self.lock()
            .tools
            .iter()
            .find(|t| t.exposed == exposed)
            .cloned()
    }

    /// Stops every server (and any still starting, when it finishes).
    pub fn stop(&self) {
        let servers = {
            let mut st = self.lock();
            st.stopped = true;
            st.tools.clear();
            std::mem::take(&mut st.servers)
        };
        for s in servers {
            if let Ok(mut g) = s.lock() {
                g.stop();
            }
        }
    }
}
