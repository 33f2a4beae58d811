//! Test harness: spawns the real `maka-acp` binary over pipes and plays the client.
//!
//! Every line the agent writes is parsed and validated against the ACP schema (strict: no
//! unknown properties) on arrival; a test fails at its next step if any line was invalid. The
//! version is v1 until the agent's `initialize` answer names v2.
#![allow(dead_code)]

pub mod fake_openai;
pub mod fake_responses;
pub mod host;
pub mod rng;
pub mod schema;
pub mod tls;

use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_maka-acp");
/// How long a test waits for one expected line before failing (a hang, not a perf limit).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(20);

pub struct AgentProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    /// Lines received but not yet consumed by `recv_*` helpers that skipped over them.
    backlog: Vec<Value>,
    methods: Arc<Mutex<HashMap<String, String>>>,
    violations: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    next_id: i64,
    /// How long `recv` waits for the agent's next line ([`STEP_TIMEOUT`] unless the test
    /// says otherwise: a real model on a shared CPU takes longer than the scripted one).
    step: Duration,
}

/// Variables that configure a model provider; tests set them explicitly or not at all.
pub const PROVIDER_VARIABLES: [&str; 9] = [
    "MAKA_SCRIPT",
    "MAKA_OPENAI_BASE_URL",
    "OPENAI_BASE_URL",
    "MAKA_OPENAI_API_KEY",
    "OPENAI_API_KEY",
    "MAKA_MODEL",
    "MAKA_MODEL_THINKING_LEVELS",
    "MAKA_MODEL_CONTEXT_WINDOW",
    "MAKA_CONFIG",
];

pub struct Spawn {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Default for Spawn {
    fn default() -> Self {
        Spawn {
            args: vec![],
            env: vec![("RUST_LOG".into(), "debug".into())],
        }
    }
}

impl AgentProcess {
    /// Waits up to `step` for each of the agent's lines from now on.
    pub fn set_step(&mut self, step: Duration) {
        self.step = step;
    }

    pub fn spawn() -> AgentProcess {
        AgentProcess::spawn_with(Spawn::default())
    }

    pub fn spawn_with(spec: Spawn) -> AgentProcess {
        let mut cmd = Command::new(BIN);
        cmd.args(&spec.args)
            .env_remove("MAKA_HOST_URL")
            .env_remove("MAKA_HOST_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Hermetic: no provider from the developer's environment or config file.
        for k in PROVIDER_VARIABLES {
            cmd.env_remove(k);
        }
        cmd.env("MAKA_CONFIG", "/nonexistent/maka-acp-test-config.json");
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        AgentProcess::from_command(cmd)
    }

    /// Plays the client to whatever `cmd` starts (a shell line from the README, say): its
    /// stdin, stdout and stderr are piped here.
    pub fn from_command(mut cmd: Command) -> AgentProcess {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn maka-acp");
        let stdout = child.stdout.take().unwrap();
        let stderr_pipe = child.stderr.take().unwrap();
        let (tx, lines) = channel();
        let methods: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let violations: Arc<Mutex<Vec<String>>> = Arc::default();
        {
            let methods = methods.clone();
            let violations = violations.clone();
            thread::spawn(move || {
                // ACP v1 until an `initialize` answer names version 2; then v2 for it and
                // every later line.
                let mut acp = schema::Acp::V1;
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else {
                        violations
                            .lock()
                            .unwrap()
                            .push("stdout is not UTF-8".into());
                        break;
                    };
                    let lookup = |id: &Value| methods.lock().unwrap().get(&id.to_string()).cloned();
                    if negotiates_v2(&line, lookup) {
                        acp = schema::Acp::V2;
                    }
                    match schema::validate_agent_line_as(acp, &line, lookup) {
                        Ok(v) => {
                            let _ = tx.send(v);
                        }
                        Err(e) => {
                            violations
                                .lock()
                                .unwrap()
                                .push(format!("{e}\n  line: {}", truncate(&line)));
                            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                                let _ = tx.send(v);
                            }
                        }
                    }
                }
            });
        }
        let stderr: Arc<Mutex<String>> = Arc::default();
        {
            let stderr = stderr.clone();
            thread::spawn(move || {
                let mut buf = [0u8; 8192];
                let mut pipe = stderr_pipe;
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    stderr
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        let stdin = child.stdin.take();
        AgentProcess {
            child,
            stdin,
            lines,
            backlog: vec![],
            methods,
            violations,
            stderr,
            next_id: 0,
            step: STEP_TIMEOUT,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (bounded) until stderr, read on another thread, contains `needle`.
    pub fn stderr_contains(&self, needle: &str) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if self.stderr().contains(needle) {
                return true;
            }
            thread::sleep(Duration::from_millis(10));
        }
        false
    }

    fn assert_valid(&self) {
        let v = self.violations.lock().unwrap();
        assert!(
            v.is_empty(),
            "the agent wrote invalid ACP lines:\n{}\n--- stderr:\n{}",
            v.join("\n"),
            self.stderr()
        );
    }

    /// Tells the schema check which method a raw request with `id` was (for `send_raw`).
    pub fn expect_method(&self, id: &Value, method: &str) {
        self.methods
            .lock()
            .unwrap()
            .insert(id.to_string(), method.to_string());
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write to agent");
        stdin.flush().expect("flush to agent");
    }

    pub fn send(&mut self, message: &Value) {
        if let (Some(id), Some(m)) = (
            message.get("id"),
            message.get("method").and_then(Value::as_str),
        ) {
            self.methods
                .lock()
                .unwrap()
                .insert(id.to_string(), m.to_string());
        }
        let mut line = serde_json::to_vec(message).unwrap();
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// Writes many messages in one write (so they arrive back to back).
    pub fn send_all(&mut self, messages: &[Value]) {
        let mut bytes = Vec::new();
        for m in messages {
            if let (Some(id), Some(method)) = (m.get("id"), m.get("method").and_then(Value::as_str))
            {
                self.methods
                    .lock()
                    .unwrap()
                    .insert(id.to_string(), method.to_string());
            }
            bytes.extend_from_slice(&serde_json::to_vec(m).unwrap());
            bytes.push(b'\n');
        }
        self.send_raw(&bytes);
    }

    /// Sends a request with the next integer id and returns that id.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next_id);
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// The next line the agent writes.
    pub fn recv(&mut self) -> Value {
        let step = self.step;
        self.recv_timeout(step).unwrap_or_else(|| {
            panic!(
                "no line from the agent within {step:?}\n--- stderr:\n{}",
                self.stderr()
            )
        })
    }

    pub fn recv_timeout(&mut self, timeout: Duration) -> Option<Value> {
        if !self.backlog.is_empty() {
            self.assert_valid();
            return Some(self.backlog.remove(0));
        }
        let got = match self.lines.recv_timeout(timeout) {
            Ok(v) => Some(v),
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => None,
        };
        self.assert_valid();
        got
    }

    /// Asserts the agent writes nothing for `quiet`.
    pub fn expect_silence(&mut self, quiet: Duration) {
        if let Some(v) = self.recv_timeout(quiet) {
            panic!("expected no output, got {v}");
        }
    }

    /// Sends a request and returns its response, collecting anything written before it.
    pub fn call(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        let id = self.request(method, params);
        self.response_to(&id)
    }

    /// Waits for the response with `id`; returns it and the other lines written before it.
    pub fn response_to(&mut self, id: &Value) -> (Value, Vec<Value>) {
        let mut before = vec![];
        loop {
            let v = self.recv();
            if v.get("id") == Some(id) && v.get("method").is_none() {
                return (v, before);
            }
            before.push(v);
        }
    }

    /// `call` that expects success and returns the result.
    pub fn call_ok(&mut self, method: &str, params: Value) -> Value {
        let (resp, _) = self.call(method, params);
        match resp.get("result") {
            Some(r) => r.clone(),
            None => panic!("{method} failed: {resp}\n--- stderr:\n{}", self.stderr()),
        }
    }

    pub fn initialize(&mut self) -> Value {
        self.call_ok("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "harness", "version": "0"}}))
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for the process to exit; None if it did not within `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<(ExitStatus, Duration)> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some((status, start.elapsed()));
            }
            thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// Every line still to come until stdout closes.
    pub fn drain(&mut self) -> Vec<Value> {
        let mut out = std::mem::take(&mut self.backlog);
        while let Ok(v) = self.lines.recv_timeout(STEP_TIMEOUT) {
            out.push(v);
        }
        self.assert_valid();
        out
    }
}

/// What a test client does with a request from the agent: the `result` to send, or an error.
pub enum Reply {
    Result(Value),
    Error(i64, &'static str),
    /// Do not answer (yet): the request stays pending.
    Ignore,
    /// Answer, then send these messages too (e.g. the answer to an earlier, held request).
    ResultThen(Value, Vec<Value>),
}

/// Everything the agent wrote while a request was being served.
#[derive(Debug, Default)]
pub struct Transcript {
    pub response: Value,
    pub updates: Vec<Value>,
    pub requests: Vec<Value>,
    pub notifications: Vec<Value>,
    /// Every line in arrival order.
    pub lines: Vec<Value>,
}

impl Transcript {
    /// The `update` objects of `session/update` notifications for `session`.
    pub fn updates_for(&self, session: &str) -> Vec<&Value> {
        self.updates
            .iter()
            .filter(|u| u["params"]["sessionId"] == session)
            .map(|u| &u["params"]["update"])
            .collect()
    }
    pub fn kinds(&self) -> Vec<String> {
        self.updates
            .iter()
            .map(|u| {
                u["params"]["update"]["sessionUpdate"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string()
            })
            .collect()
    }
    /// The thoughts shown to `session`: (messageId, text), in order.
    pub fn thoughts(&self, session: &str) -> Vec<(String, String)> {
        self.updates_for(session)
            .into_iter()
            .filter(|u| u["sessionUpdate"] == "agent_thought_chunk")
            .map(|u| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (s(&u["messageId"]), s(&u["content"]["text"]))
            })
            .collect()
    }
    pub fn text(&self) -> String {
        self.updates
            .iter()
            .filter(|u| u["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
            .map(|u| {
                u["params"]["update"]["content"]["text"]
                    .as_str()
                    .unwrap_or("")
            })
            .collect()
    }
}

impl AgentProcess {
    /// An agent with the scripted provider and its own data dir (and no user config).
    pub fn scripted(script: &Value, data: &std::path::Path) -> AgentProcess {
        AgentProcess::spawn_with(Spawn {
            args: vec![],
            env: vec![
                ("RUST_LOG".into(), "info".into()),
                ("MAKA_SCRIPT".into(), script.to_string()),
                ("MAKA_DATA_DIR".into(), data.display().to_string()),
                (
                    "XDG_CONFIG_HOME".into(),
                    data.join("config").display().to_string(),
                ),
            ],
        })
    }

    /// An agent on the OpenAI-compatible provider at `http://127.0.0.1:{port}/v1` (a fake
    /// server, `fake_openai`), model `fake-model`, with its own data dir (and no user config)
    /// and `extra` variables.
    pub fn on_fake_provider(
        port: u16,
        data: &std::path::Path,
        extra: &[(&str, &str)],
    ) -> AgentProcess {
        let mut env: Vec<(String, String)> = vec![
            ("RUST_LOG".into(), "info".into()),
            ("MAKA_DATA_DIR".into(), data.display().to_string()),
            (
                "MAKA_OPENAI_BASE_URL".into(),
                format!("http://127.0.0.1:{port}/v1"),
            ),
            ("MAKA_MODEL".into(), "fake-model".into()),
            (
                "XDG_CONFIG_HOME".into(),
                data.join("config").display().to_string(),
            ),
        ];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        AgentProcess::spawn_with(Spawn { args: vec![], env })
    }

    /// `session/new`, then the `available_commands_update` that must follow its response.
    pub fn new_session(&mut self, cwd: &std::path::Path) -> String {
        let r = self.call_ok("session/new", json!({"cwd": cwd, "mcpServers": []}));
        let id = r["sessionId"].as_str().unwrap().to_string();
        self.expect_commands(&id);
        id
    }

    /// The next message of `session` is its `available_commands_update`; returns its commands.
    /// Messages about other sessions may come between (a goal of another session settling on a
    /// loaded machine): they are skipped.
    pub fn expect_commands(&mut self, session: &str) -> Vec<Value> {
        let mut v = self.recv();
        while v["params"]["sessionId"]
            .as_str()
            .is_some_and(|s| s != session)
            && v.get("id").is_none()
        {
            v = self.recv();
        }
        assert_eq!(
            v["method"], "session/update",
            "expected the commands, got {v}"
        );
        assert_eq!(v["params"]["sessionId"], session, "{v}");
        let u = &v["params"]["update"];
        assert_eq!(u["sessionUpdate"], "available_commands_update", "{v}");
        u["availableCommands"].as_array().unwrap().clone()
    }

    /// Sends a request and serves the agent's requests with `on_request` until its response.
    pub fn drive(
        &mut self,
        method: &str,
        params: Value,
        mut on_request: impl FnMut(&Value) -> Reply,
    ) -> Transcript {
        let id = self.request(method, params);
        self.drive_id(&id, &mut on_request)
    }

    pub fn drive_id(
        &mut self,
        id: &Value,
        on_request: &mut dyn FnMut(&Value) -> Reply,
    ) -> Transcript {
        let mut t = Transcript::default();
        loop {
            let v = self.recv();
            t.lines.push(v.clone());
            match (v.get("method").and_then(Value::as_str), v.get("id")) {
                (Some(_), Some(req_id)) => {
                    t.requests.push(v.clone());
                    match on_request(&v) {
                        Reply::Result(r) => self.send(&json!({"jsonrpc": "2.0", "id": req_id, "result": r})),
                        Reply::Error(code, msg) => self.send(&json!({"jsonrpc": "2.0", "id": req_id, "error": {"code": code, "message": msg}})),
                        Reply::Ignore => {}
                        Reply::ResultThen(r, more) => {
                            self.send(&json!({"jsonrpc": "2.0", "id": req_id, "result": r}));
                            for m in more {
                                self.send(&m);
                            }
                        }
                    }
                }
                (Some("session/update"), None) => t.updates.push(v),
                (Some(_), None) => t.notifications.push(v),
                (None, Some(rid)) if rid == id => {
                    t.response = v;
                    return t;
                }
                (None, _) => panic!("a response to a request we did not send: {v}"),
            }
        }
    }

    /// `session/prompt` with text, answering permission requests with `option`.
    pub fn prompt(
        &mut self,
        session: &str,
        text: &str,
        on_request: impl FnMut(&Value) -> Reply,
    ) -> Transcript {
        self.drive(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
            on_request,
        )
    }
}

/// Processes whose environment names `needle` (the subagent and the host it started).
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true);
        if !zombie && String::from_utf8_lossy(&env).contains(needle) {
            out.push(pid);
        }
    }
    out
}

/// Whether process `pid` runs (exists and is not a zombie).
pub fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Selects the permission option with `option_id`.
pub fn select(option_id: &str) -> Reply {
    Reply::Result(json!({"outcome": {"outcome": "selected", "optionId": option_id}}))
}

/// A permission request's options as `(optionId, kind, name)`, in the order offered.
pub fn options_offered(options: &Value) -> Vec<(&str, &str, &str)> {
    fn text<'a>(o: &'a Value, field: &str) -> &'a str {
        o[field].as_str().unwrap_or("")
    }
    options
        .as_array()
        .map(|all| {
            all.iter()
                .map(|o| (text(o, "optionId"), text(o, "kind"), text(o, "name")))
                .collect()
        })
        .unwrap_or_default()
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !thread::panicking() {
            self.assert_valid();
        }
    }
}

/// Whether `line` answers `initialize` with `protocolVersion` 2.
fn negotiates_v2(line: &str, method_of: impl Fn(&Value) -> Option<String>) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return false;
    };
    v.pointer("/result/protocolVersion") == Some(&json!(2))
        && v.get("id")
            .and_then(method_of)
            .is_some_and(|m| m == "initialize")
}

fn truncate(s: &str) -> String {
    if s.chars().count() > 400 {
        format!("{}…", s.chars().take(400).collect::<String>())
    } else {
        s.to_string()
    }
}

/// The error object of a response, or a panic naming what came instead.
pub fn error_of(resp: &Value) -> &Value {
    resp.get("error")
        .unwrap_or_else(|| panic!("expected an error, got {resp}"))
}

/// The config option `id` of a `configOptions` list (a test failure naming the list when it is
/// not there).
pub fn option<'a>(options: &'a Value, id: &str) -> &'a Value {
    options
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == id)
        .unwrap_or_else(|| panic!("no option {id} in {options}"))
}

/// Raises this process's open-file limit toward `want` (the hard limit allowing); how many
/// descriptors it may then hold.
#[cfg(feature = "host")]
pub fn raise_open_file_limit(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read or write only the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < want {
            let raised = libc::rlimit {
                rlim_cur: want.min(lim.rlim_max),
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = raised.rlim_cur;
            }
        }
    }
    lim.rlim_cur
}

/// A hostile local client's sockets without the token (loopback only): `asking` of them each
/// send a request without it (answered 401), then `silent` more send nothing.
#[cfg(feature = "host")]
pub fn tokenless_flood(
    port: u16,
    path: &str,
    asking: usize,
    silent: usize,
) -> Vec<std::net::TcpStream> {
    let want = asking + silent;
    let room = raise_open_file_limit(want as u64 + 512) as usize;
    assert!(
        room >= want + 512,
        "this process may hold only {room} descriptors, {want} are needed"
    );
    let mut held = Vec::with_capacity(want);
    for i in 0..want {
        let Ok(mut sock) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            continue;
        };
        if i < asking {
            let head = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
            let _ = sock.write_all(head.as_bytes());
        }
        held.push(sock);
    }
    held
}
