//! What a turn costs end to end (issue 27). Prints figures; it does not pass or fail.
//!
//! The shipped binary (`scripts/bench-turn` builds it and sets `MAKA_BENCH_BIN`) with its
//! embedded host and the real OpenAI provider code path, talking to a fake OpenAI-compatible
//! server on loopback in this process, driven over stdio like an editor:
//!
//! - prompt → first chunk, split at the provider: prompt → the provider has read the request,
//!   the provider's first byte → the `agent_message_chunk` line on stdout (fsync on, and off);
//! - adapter + host CPU per streamed chunk (utime + stime of both processes over one
//!   200 000-delta answer, read by a counting reader);
//! - a 10 MiB prompt end to end, the peak RSS of adapter and host together and the CPU they
//!   spent on it (`BENCH_BIG_RUNS`, default 3; `BENCH_BIG_TEXT=code` for a text full of escapes);
//! - cost as work grows, in 10× steps: a `session/list` page, host start (spawn → ready line),
//!   `session/load` of a long transcript (and the adapter's peak RSS), and the host's RSS and
//!   open descriptors after sessions prompted and closed.
//!
//! `BENCH_ONLY=first|cpu|big|scale` runs one part; `BENCH_SCALE_MAX` caps the 10× steps.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

fn bin() -> String {
    std::env::var("MAKA_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_maka-acp").into())
}

fn tempdir(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("maka-turnbench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The fake provider: every request is answered with `deltas` pieces of text (one SSE event
/// each, written at once); it records when it had read each request and wrote its first byte.
struct Provider {
    port: u16,
    deltas: Arc<AtomicUsize>,
    /// (request read, first byte written), per request.
    times: Arc<Mutex<Vec<(Instant, Instant)>>>,
}

fn provider() -> Provider {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let deltas = Arc::new(AtomicUsize::new(3));
    let times: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let (n, log) = (Arc::clone(&deltas), Arc::clone(&times));
    std::thread::spawn(move || {
        let mut cached: (usize, Vec<u8>) = (0, vec![]);
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_nodelay(true);
            let mut r = BufReader::new(stream.try_clone().unwrap());
            let mut len = 0usize;
            let mut line = String::new();
            loop {
                line.clear();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; len];
            let _ = r.read_exact(&mut body);
            let read = Instant::now();
            let want = n.load(Ordering::Relaxed);
            if cached.0 != want || cached.1.is_empty() {
                let mut b = Vec::with_capacity(want * 64);
                for _ in 0..want {
                    b.extend_from_slice(
                        b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n",
                    );
                }
                b.extend_from_slice(b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
                cached = (want, b);
            }
            let head =
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
            let _ = stream.write_all(head);
            let first = Instant::now();
            let _ = stream.write_all(&cached.1);
            log.lock().unwrap().push((read, first));
        }
    });
    Provider {
        port,
        deltas,
        times,
    }
}

const CHUNK: &str = "\"sessionUpdate\":\"agent_message_chunk\"";

struct Adapter {
    child: Child,
    stdin: ChildStdin,
    /// Every line but chunk lines, parsed, with its arrival time.
    lines: mpsc::Receiver<(Instant, Value)>,
    /// Chunk lines: counted, and the arrival of the first one since the count was reset.
    chunks: Arc<AtomicU64>,
    first_chunk: Arc<Mutex<Option<Instant>>>,
    next: i64,
}

impl Adapter {
    fn spawn(data: &Path, env: &[(&str, String)]) -> Adapter {
        let home = data.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut cmd = Command::new(bin());
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("MAKA_DATA_DIR", data.join("data"))
            .env("RUST_LOG", "warn");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        let chunks = Arc::new(AtomicU64::new(0));
        let first_chunk: Arc<Mutex<Option<Instant>>> = Arc::default();
        let (counted, first) = (Arc::clone(&chunks), Arc::clone(&first_chunk));
        std::thread::spawn(move || {
            let mut r = BufReader::with_capacity(1 << 16, stdout);
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 {
                if line.contains(CHUNK) {
                    if counted.fetch_add(1, Ordering::Relaxed) == 0 {
                        *first.lock().unwrap() = Some(Instant::now());
                    }
                } else if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send((Instant::now(), v)).is_err() {
                        break;
                    }
                }
                line.clear();
            }
        });
        let mut a = Adapter {
            child,
            stdin,
            lines,
            chunks,
            first_chunk,
            next: 0,
        };
        a.call("initialize", json!({"protocolVersion": 1}));
        a
    }

    fn openai(data: &Path, p: &Provider, fsync: bool) -> Adapter {
        let mut env = vec![
            (
                "MAKA_OPENAI_BASE_URL",
                format!("http://127.0.0.1:{}/v1", p.port),
            ),
            ("MAKA_OPENAI_API_KEY", "sk-bench".to_string()),
            ("MAKA_MODEL", "fake-model".to_string()),
        ];
        if !fsync {
            env.push(("MAKA_HOST_FSYNC", "0".into()));
        }
        Adapter::spawn(data, &env)
    }

    fn send(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next;
        self.next += 1;
        // One write, as clients write a line: `writeln!` on the pipe would make a system call
        // per escape in a long text (a 10 MiB text full of them took 1.5 s to send).
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).unwrap();
        id
    }

    fn wait(&mut self, id: i64) -> (Instant, Value) {
        loop {
            let (at, v) = self
                .lines
                .recv_timeout(Duration::from_secs(300))
                .expect("the adapter answered");
            if v["id"] == json!(id) && v.get("method").is_none() {
                assert!(v.get("error").is_none(), "{v}");
                return (at, v);
            }
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        self.wait(id).1
    }

    fn new_session(&mut self, ws: &Path) -> String {
        let r = self.call("session/new", json!({"cwd": ws, "mcpServers": []}));
        r["result"]["sessionId"].as_str().unwrap().to_string()
    }

    fn prompt(&mut self, sid: &str, text: &str) -> (Instant, Instant) {
        self.chunks.store(0, Ordering::Relaxed);
        *self.first_chunk.lock().unwrap() = None;
        // Built before the clock starts: copying a long text into the message is the bench's
        // cost, not the agent's.
        let params = json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]});
        let sent = Instant::now();
        let id = self.send("session/prompt", params);
        let (done, v) = self.wait(id);
        assert_eq!(v["result"]["stopReason"], "end_turn", "{v}");
        (sent, done)
    }

    /// The embedded host: the adapter's child.
    fn host_pid(&self) -> Option<u32> {
        let pid = self.child.id();
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        tasks
            .filter_map(Result::ok)
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|c| {
                c.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .next()
    }
}

impl Drop for Adapter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// utime + stime of process `pid` (all its threads, living and ended), in seconds.
fn cpu_s(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 (utime, stime), 0-based 11 and 12 after the command name.
    (ticks(11) + ticks(12)) / 100.0
}

/// A `/proc/<pid>/status` figure in MiB (`VmRSS`, `VmHWM`).
fn status_mib(pid: u32, key: &str) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Prompt → first chunk over `runs` prompts of one session (after a warm-up prompt):
/// medians of (total, prompt → provider read the request, provider's first byte → chunk).
fn first_chunk(fsync: bool, runs: usize) -> (f64, f64, f64) {
    let p = provider();
    p.deltas.store(3, Ordering::Relaxed);
    let data = tempdir(if fsync { "first" } else { "first-nosync" });
    let ws = tempdir("first-ws");
    let mut a = Adapter::openai(&data, &p, fsync);
    let sid = a.new_session(&ws);
    a.prompt(&sid, "warm up");
    let (mut total, mut to_provider, mut from_provider) = (vec![], vec![], vec![]);
    for i in 0..runs {
        let before = p.times.lock().unwrap().len();
        let (sent, _) = a.prompt(&sid, &format!("prompt {i}"));
        let chunk = a.first_chunk.lock().unwrap().expect("a chunk was streamed");
        let times = p.times.lock().unwrap();
        let (read, first) = times[before];
        total.push(chunk.duration_since(sent).as_secs_f64() * 1e3);
        to_provider.push(read.duration_since(sent).as_secs_f64() * 1e3);
        from_provider.push(chunk.duration_since(first).as_secs_f64() * 1e3);
    }
    drop(a);
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(&ws);
    (median(total), median(to_provider), median(from_provider))
}

/// CPU per chunk over one answer of `deltas` pieces (µs: adapter, host), and chunks/s; from
/// the OpenAI provider path, or (`scripted`) the scripted provider, which parses nothing.
fn cpu_per_chunk(deltas: usize, scripted: bool) -> (f64, f64, f64) {
    let p = provider();
    let data = tempdir("cpu");
    let ws = tempdir("cpu-ws");
    let mut a = if scripted {
        let script = json!({"rules": [
            {"when": "go", "responses": [[{"repeat": {"text": "x", "times": deltas}}]]},
            {"when": "*", "responses": [[{"text": "ok"}]]}
        ]});
        Adapter::spawn(&data, &[("MAKA_SCRIPT", script.to_string())])
    } else {
        Adapter::openai(&data, &p, true)
    };
    let sid = a.new_session(&ws);
    p.deltas.store(3, Ordering::Relaxed);
    a.prompt(&sid, "warm up");
    p.deltas.store(deltas, Ordering::Relaxed);
    let host = a.host_pid().expect("the embedded host runs");
    let (adapter0, host0) = (cpu_s(a.child.id()), cpu_s(host));
    let (sent, done) = a.prompt(&sid, "go");
    let (adapter1, host1) = (cpu_s(a.child.id()), cpu_s(host));
    let seen = a.chunks.load(Ordering::Relaxed);
    assert_eq!(seen as usize, deltas, "every delta became one chunk");
    drop(a);
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(&ws);
    (
        (adapter1 - adapter0) / deltas as f64 * 1e6,
        (host1 - host0) / deltas as f64 * 1e6,
        deltas as f64 / done.duration_since(sent).as_secs_f64(),
    )
}

/// A prompt of `mib` MiB end to end (ms), the peak RSS of adapter and host (MiB), and the CPU
/// both spent on it (ms).
fn big_prompt(mib: usize) -> (f64, f64, f64, f64) {
    let p = provider();
    let data = tempdir("big");
    let ws = tempdir("big-ws");
    let mut a = Adapter::openai(&data, &p, true);
    let sid = a.new_session(&ws);
    p.deltas.store(3, Ordering::Relaxed);
    // Plain by default; `BENCH_BIG_TEXT=code` pastes something like source code instead, a
    // quote, a tab and a newline in every 32 bytes: each is an escape for every writer.
    let text = match std::env::var("BENCH_BIG_TEXT").as_deref() {
        Ok("code") => "\tlet s = \"0123456789abcdefghi\";\n".repeat(mib * 32768),
        _ => "0123456789abcdef".repeat(mib * 65536),
    };
    let host = a.host_pid().expect("the embedded host runs");
    let cpu = |a: &Adapter| cpu_s(a.child.id()) + cpu_s(host);
    let cpu0 = cpu(&a);
    let (sent, done) = a.prompt(&sid, &text);
    let figures = (
        done.duration_since(sent).as_secs_f64() * 1e3,
        status_mib(a.child.id(), "VmHWM:"),
        status_mib(host, "VmHWM:"),
        (cpu(&a) - cpu0) * 1e3,
    );
    drop(a);
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(&ws);
    figures
}

/// Waits (10 s at most) until process `pid` has exited (gone, or a zombie nobody reaps).
fn wait_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(s)
                if !s
                    .rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z')) =>
            {
                std::thread::sleep(Duration::from_millis(5))
            }
            _ => return,
        }
    }
}

/// Spawn → ready line of `maka-acp host` over `data` (ms).
fn host_start(data: &Path) -> f64 {
    let t = Instant::now();
    let mut child = Command::new(bin())
        .args(["host", "--token-stdin", "--data-dir"])
        .arg(data)
        // (No provider is configured: its warning is not a figure.)
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(
        child.stdin.as_mut().unwrap(),
        "bench-token-0123456789abcdef"
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(line.contains("port"), "a ready line: {line}");
    let _ = child.kill();
    let _ = child.wait();
    ms
}

fn scale(max: usize) {
    let dir = tempdir("scale");
    let ws = tempdir("scale-ws");
    let script = json!({"rules": [{"when": "*", "responses": [[{"text": "ok"}]]}]}).to_string();
    let env = [("MAKA_SCRIPT", script.clone())];
    // Sessions in the data dir: session/list's first page, host start.
    let mut a = Adapter::spawn(&dir, &env);
    let mut made = 0;
    let mut step = 10;
    while step <= max {
        while made < step {
            a.new_session(&ws);
            made += 1;
        }
        let list: Vec<f64> = (0..7)
            .map(|_| {
                let t = Instant::now();
                let r = a.call("session/list", json!({}));
                assert!(r["result"]["sessions"].is_array(), "{r}");
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        // The data dir has one owner: stop this adapter's host before starting others there.
        let host = a.host_pid();
        drop(a);
        if let Some(pid) = host {
            wait_gone(pid);
        }
        let start: Vec<f64> = (0..5).map(|_| host_start(&dir.join("data"))).collect();
        a = Adapter::spawn(&dir, &env);
        println!(
            "{step:>6} sessions in the data dir: session/list page {:.2} ms, host start (spawn -> ready) {:.1} ms   (targets at 10 000: <= 20 ms, <= 100 ms)",
            median(list),
            median(start)
        );
        step *= 10;
    }
    drop(a);
    // A long transcript: session/load in a fresh adapter (the host already running there).
    let data = tempdir("scale-load");
    let mut a = Adapter::spawn(&data, &env);
    let sid = a.new_session(&ws);
    let mut items = 0;
    let mut step = 10;
    while step <= max {
        // A prompt adds four items: the user's message, the turn's start, the answer, its end.
        while items < step {
            a.prompt(&sid, "hi");
            items += 4;
        }
        let mut ms = vec![];
        let mut hwm = vec![];
        for _ in 0..3 {
            let mut b = Adapter::spawn(&data, &env);
            b.call("session/list", json!({}));
            let t = Instant::now();
            b.call(
                "session/load",
                json!({"sessionId": sid, "cwd": ws, "mcpServers": []}),
            );
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            hwm.push(status_mib(b.child.id(), "VmHWM:"));
        }
        println!(
            "{step:>6}-item transcript: session/load {:.1} ms, adapter peak RSS {:.1} MiB   (target at 10 000: <= 150 ms, bounded)",
            median(ms),
            median(hwm)
        );
        step *= 10;
    }
    drop(a);
    // Sessions prompted and closed: what the host keeps.
    let churn = tempdir("scale-churn");
    let mut a = Adapter::spawn(&churn, &env);
    let host = a.host_pid().unwrap_or(0);
    let sid = a.new_session(&ws);
    a.call("session/close", json!({"sessionId": sid}));
    let host = if host == 0 {
        a.host_pid().expect("the embedded host runs")
    } else {
        host
    };
    let (rss0, fds0) = (status_mib(host, "VmRSS:"), fds(host));
    let mut done = 1;
    let mut step = 20;
    while step <= max.min(2000) {
        while done < step {
            let sid = a.new_session(&ws);
            a.prompt(&sid, "hi");
            a.call("session/close", json!({"sessionId": sid}));
            done += 1;
        }
        println!(
            "{step:>6} sessions prompted and closed: host RSS {:.1} MiB (after 1: {rss0:.1}), open fds {} (after 1: {fds0})   (target at 2 000: <= 30 MiB)",
            status_mib(host, "VmRSS:"),
            fds(host)
        );
        step *= 10;
    }
    drop(a);
    for d in [&dir, &ws, &data, &churn] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A count from the environment (`default` when unset or not a number), at least 1: a median of
/// no runs has no figure.
fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
        .max(1)
}

fn main() {
    println!("turn costs (medians), binary {}", bin());
    println!("load average at start: {}", loadavg());
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let runs = |part: &str| only.is_empty() || only == part;
    if runs("first") {
        for fsync in [true, false] {
            let (total, to, from) = first_chunk(fsync, 31);
            println!(
                "prompt -> first chunk (fsync {}): {total:.2} ms = prompt -> provider has the request {to:.2} ms, provider's first byte -> chunk on stdout {from:.2} ms   (target <= 3 ms)",
                if fsync { "on" } else { "off" }
            );
        }
    }
    if runs("cpu") {
        for (path, scripted) in [("OpenAI provider path", false), ("scripted provider", true)] {
            let n = env_count("BENCH_DELTAS", 200_000);
            let r: Vec<(f64, f64, f64)> = (0..5).map(|_| cpu_per_chunk(n, scripted)).collect();
            let (ad, ho) = (
                median(r.iter().map(|x| x.0).collect()),
                median(r.iter().map(|x| x.1).collect()),
            );
            println!(
                "CPU per chunk, {path}, {n} deltas: adapter {ad:.2} + host {ho:.2} = {:.2} us, {:.0} chunks/s   (target on the OpenAI path <= 1.5 us)",
                ad + ho,
                median(r.iter().map(|x| x.2).collect())
            );
        }
    }
    if runs("big") {
        let n = env_count("BENCH_BIG_RUNS", 3);
        let r: Vec<_> = (0..n).map(|_| big_prompt(10)).collect();
        let (ms, ad, ho, cpu) = (
            median(r.iter().map(|x| x.0).collect()),
            median(r.iter().map(|x| x.1).collect()),
            median(r.iter().map(|x| x.2).collect()),
            median(r.iter().map(|x| x.3).collect()),
        );
        println!(
            "10 MiB prompt end to end: {ms:.0} ms, peak RSS adapter {ad:.1} + host {ho:.1} = {:.1} MiB, CPU adapter + host {cpu:.0} ms   (targets <= 100 ms, <= 40 MiB)",
            ad + ho
        );
    }
    if runs("scale") {
        let max = env_count("BENCH_SCALE_MAX", 10_000);
        scale(max);
    }
    println!("load average at the end: {}", loadavg());
}
