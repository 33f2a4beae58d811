//! Host test harness: spawns `maka-acp host` (real HTTP on loopback) with a temp data dir and
//! the scripted provider, and talks to it like any client would.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("maka-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(std::fs::canonicalize(&p).unwrap())
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct HostProcess {
    pub child: Child,
    stdin: Option<ChildStdin>,
    pub port: u16,
    pub epoch: String,
    pub token: String,
    pub data_dir: PathBuf,
    pub env: Vec<(String, String)>,
    stderr: Arc<Mutex<String>>,
    agent: ureq::Agent,
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

impl HostProcess {
    /// Starts a host; `script` is the scripted provider's JSON (None = no provider).
    pub fn start(data_dir: &Path, script: Option<&Value>) -> HostProcess {
        let mut env = vec![];
        if let Some(s) = script {
            env.push(("MAKA_SCRIPT".to_string(), s.to_string()));
        }
        HostProcess::start_env(data_dir, env)
    }

    pub fn start_env(data_dir: &Path, env: Vec<(String, String)>) -> HostProcess {
        HostProcess::start_with(data_dir, env, &[])
    }

    /// `start_env` with extra command-line arguments (e.g. `--listen`).
    pub fn start_with(data_dir: &Path, env: Vec<(String, String)>, args: &[&str]) -> HostProcess {
        let token = format!(
            "tok-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let mut cmd = Command::new(super::BIN);
        cmd.args(["host", "--data-dir"])
            .arg(data_dir)
            .args(args)
            .env("MAKA_HOST_TOKEN", &token)
            .env("RUST_LOG", "info")
            .env_remove("MAKA_SCRIPT")
            .env_remove("MAKA_OPENAI_BASE_URL")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_API_KEY")
            .env_remove("MAKA_OPENAI_API_KEY")
            .env_remove("MAKA_MODEL")
            .env("XDG_CONFIG_HOME", data_dir.join("no-config"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn maka-acp host");
        let stderr: Arc<Mutex<String>> = Arc::default();
        {
            let mut pipe = child.stderr.take().unwrap();
            let stderr = stderr.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
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
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut ready = String::new();
        stdout.read_line(&mut ready).expect("ready line");
        let v: Value = serde_json::from_str(&ready).unwrap_or_else(|_| {
            panic!(
                "ready line is JSON: {ready:?}; stderr: {}",
                stderr.lock().unwrap()
            )
        });
        assert_eq!(v["kind"], "ready");
        // Anything more on stdout would be a protocol violation: keep reading to catch it.
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = stdout.read_to_string(&mut rest);
            assert!(
                rest.is_empty(),
                "host wrote more than the ready line on stdout: {rest}"
            );
        });
        let stdin = child.stdin.take();
        HostProcess {
            child,
            stdin,
            port: v["port"].as_u64().unwrap() as u16,
            epoch: v["hostEpoch"].as_str().unwrap().to_string(),
            token,
            data_dir: data_dir.to_path_buf(),
            env,
            stderr,
            agent: agent(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (bounded) until the host's stderr, read on another thread, contains `needle`.
    pub fn stderr_contains(&self, needle: &str) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if self.stderr().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Calls an operation; returns (HTTP status, envelope).
    pub fn op(&self, key: &str, input: Value) -> (u16, Value) {
        self.op_raw(key, input.to_string().into_bytes())
    }

    pub fn op_raw(&self, key: &str, body: Vec<u8>) -> (u16, Value) {
        self.op_raw_as(None, key, body)
    }

    /// Calls an operation for a principal (`Maka-Principal`); `None`: the machine's user.
    pub fn op_as(&self, principal: Option<&str>, key: &str, input: Value) -> (u16, Value) {
        self.op_raw_as(principal, key, input.to_string().into_bytes())
    }

    pub fn op_raw_as(&self, principal: Option<&str>, key: &str, body: Vec<u8>) -> (u16, Value) {
        let mut request = self
            .agent
            .post(&self.url(&format!("/v1/op/{key}")))
            .header("Authorization", format!("Bearer {}", self.token));
        if let Some(p) = principal {
            request = request.header("Maka-Principal", p);
        }
        let resp = request
            .content_type("application/json")
            .send(&body[..])
            .unwrap_or_else(|e| panic!("{key}: transport error {e}"));
        let status = resp.status().as_u16();
        let text = resp
            .into_body()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .unwrap();
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{key}: not a JSON envelope: {text}"));
        (status, v)
    }

    /// `op` that must succeed; returns the result.
    pub fn ok(&self, key: &str, input: Value) -> Value {
        let (status, env) = self.op(key, input);
        assert!(
            status == 200 && env["ok"] == true,
            "{key} failed: {status} {env}\n--- host stderr:\n{}",
            self.stderr()
        );
        env["result"].clone()
    }

    /// `op` that must fail with `code`; returns the error.
    pub fn err(&self, key: &str, input: Value, code: &str) -> Value {
        let (status, env) = self.op(key, input);
        assert_eq!(env["ok"], false, "{key} should fail with {code}: {env}");
        assert_eq!(env["error"]["code"], code, "{key}: {env}");
        assert!(status >= 400, "{key}: status {status}");
        env["error"].clone()
    }

    /// Reads one event-stream window: every line until `stream_end` (or EOF).
    pub fn events(&self, session: &str, after: u64, wait_ms: u64) -> (u16, Vec<Value>) {
        self.events_as(None, session, after, wait_ms)
    }

    /// [`HostProcess::events`] for a principal (`Maka-Principal`).
    pub fn events_as(
        &self,
        principal: Option<&str>,
        session: &str,
        after: u64,
        wait_ms: u64,
    ) -> (u16, Vec<Value>) {
        let mut request = self.agent.get(&self.url(&format!(
            "/v1/events?sessionId={session}&after={after}&waitMs={wait_ms}"
        )));
        if let Some(p) = principal {
            request = request
                .header("Authorization", format!("Bearer {}", self.token))
                .header("Maka-Principal", p);
        } else {
            request = request.header("Authorization", format!("Bearer {}", self.token));
        }
        let resp = request.call().unwrap();
        let status = resp.status().as_u16();
        let mut lines = vec![];
        let reader = BufReader::new(resp.into_body().into_reader());
        for line in reader.lines() {
            let Ok(line) = line else { break };
            let v: Value =
                serde_json::from_str(&line).unwrap_or_else(|_| panic!("bad frame line {line}"));
            let end = v["kind"] == "stream_end" || status != 200;
            lines.push(v);
            if end {
                break;
            }
        }
        (status, lines)
    }

    /// Follows the stream from `after` until a frame matches `stop`; returns the data frames.
    /// Returns as soon as the frame arrives (the window is abandoned, as a client may).
    pub fn follow(&self, session: &str, after: u64, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut got = vec![];
        let mut cursor = after;
        let start = Instant::now();
        loop {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "stream never showed the expected frame; got {got:#?}\n{}",
                self.stderr()
            );
            let resp = self
                .agent
                .get(&self.url(&format!(
                    "/v1/events?sessionId={session}&after={cursor}&waitMs=5000"
                )))
                .header("Authorization", format!("Bearer {}", self.token))
                .call()
                .unwrap();
            assert_eq!(resp.status().as_u16(), 200);
            for line in BufReader::new(resp.into_body().into_reader()).lines() {
                let Ok(line) = line else { break };
                let l: Value = serde_json::from_str(&line).unwrap();
                if l["kind"] == "stream_end" {
                    break;
                }
                if let Some(seq) = l["seq"].as_u64() {
                    assert_eq!(seq, cursor + 1, "frames arrive in order without gaps");
                    cursor = seq;
                    let done = stop(&l);
                    got.push(l);
                    if done {
                        return got;
                    }
                }
            }
        }
    }

    /// Waits for the turn's terminal frame and returns every frame since `after`.
    pub fn until_terminal(&self, session: &str, after: u64) -> Vec<Value> {
        self.follow(session, after, |f| f["kind"] == "turn_terminal")
    }

    pub fn create_session(&self, id: &str, cwd: &Path, mode: &str) -> Value {
        self.ok(
            "session.create",
            json!({
                "sessionId": id,
                "workspace": {"kind": "host_path", "path": cwd},
                "configuration": {"permissionMode": mode}
            }),
        )
    }

    pub fn head_seq(&self, session: &str) -> u64 {
        self.ok("session.open", json!({"sessionId": session}))["seq"]
            .as_u64()
            .unwrap()
    }

    pub fn start_turn(&self, session: &str, turn: &str, text: &str) -> Value {
        self.ok(
            "turn.start",
            json!({"sessionId": session, "turnId": turn, "content": {"text": text}}),
        )
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn kinds(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .map(|f| f["kind"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Every entry under `dir` (not following links), `dir` itself excluded, depth first.
pub fn entries_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(read) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in read.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The regular files under `dir` that hold `needle`, with the part of each that does.
pub fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    entries_under(dir)
        .into_iter()
        .filter(|p| p.is_file())
        .filter_map(|p| {
            let text = String::from_utf8_lossy(&std::fs::read(&p).ok()?).into_owned();
            let at = text.find(needle)?;
            let from = text[..at]
                .char_indices()
                .rev()
                .nth(80)
                .map_or(0, |(i, _)| i);
            Some(format!(
                "{}: …{}",
                p.display(),
                &text[from..at + needle.len()]
            ))
        })
        .collect()
}
