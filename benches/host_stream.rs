//! Host streaming benchmark (issue 3). Prints figures; it does not pass or fail.
//!
//! - frames/s: one turn of the real `maka-acp host` binary emitting 100 000 text deltas
//!   (scripted provider) to one stream reader that parses every frame; and 20 sessions doing
//!   the same at once (aggregate);
//! - append → receive latency p50/p99: the same server code in-process, frames appended every
//!   100 µs, timed with one monotonic clock;
//! - idle RSS of the host binary.
//!
//! Run: `cargo bench --bench host_stream` (or `scripts/bench-host`).

use maka_acp::host;
use maka_acp::host_api::wire::{Frame, FrameBody};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_maka-acp");
const TOKEN: &str = "bench-token-0123456789";

fn tempdir(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("maka-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

struct HostBin {
    child: Child,
    port: u16,
}

impl Drop for HostBin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_host(data: &Path, script: &serde_json::Value) -> HostBin {
    let mut child = Command::new(BIN)
        .args(["host", "--data-dir"])
        .arg(data)
        .env("MAKA_HOST_TOKEN", TOKEN)
        .env("MAKA_SCRIPT", script.to_string())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    HostBin {
        child,
        port: v["port"].as_u64().unwrap() as u16,
    }
}

fn op(port: u16, key: &str, body: serde_json::Value) -> serde_json::Value {
    let resp = agent()
        .post(&format!("http://127.0.0.1:{port}/v1/op/{key}"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .send(body.to_string().as_str())
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&resp.into_body().read_to_string().unwrap()).unwrap();
    assert_eq!(v["ok"], true, "{key}: {v}");
    v["result"].clone()
}

/// Reads frames from `after` until `turn_terminal`, parsing each; returns the count and the
/// instant the terminal frame arrived. Reconnects at window ends like a real client.
fn read_until_terminal(port: u16, session: &str, mut after: u64) -> (u64, Instant) {
    let mut frames = 0;
    loop {
        let resp = agent()
            .get(&format!(
                "http://127.0.0.1:{port}/v1/events?sessionId={session}&after={after}&waitMs=60000"
            ))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .call()
            .unwrap();
        assert_eq!(
            resp.status().as_u16(),
            200,
            "stream refused (reader fell out of the ring?)"
        );
        let mut reader = BufReader::with_capacity(64 * 1024, resp.into_body().into_reader());
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let f = Frame::parse(line.as_bytes()).unwrap();
            match f.body {
                FrameBody::StreamEnd { reason, .. } => {
                    assert_ne!(
                        reason,
                        maka_acp::host_api::wire::StreamEndReason::ResyncRequired,
                        "the reader fell behind the ring"
                    );
                    break;
                }
                FrameBody::TurnTerminal { .. } => return (frames + 1, Instant::now()),
                _ => {}
            }
            if let Some(seq) = f.seq {
                after = seq;
                frames += 1;
            }
        }
    }
}

fn throughput(sessions: usize, deltas: u64) -> f64 {
    let data = tempdir(&format!("tp{sessions}"));
    let ws = tempdir(&format!("tpws{sessions}"));
    let script = json!({"default": [[{"repeat": {"text": "x", "times": deltas}}]]});
    let h = start_host(&data, &script);
    let ids: Vec<String> = (0..sessions).map(|i| format!("s{i}")).collect();
    for id in &ids {
        op(
            h.port,
            "session.create",
            json!({"sessionId": id, "workspace": {"kind": "host_path", "path": ws}}),
        );
    }
    let start = Instant::now();
    let readers: Vec<_> = ids
        .iter()
        .map(|id| {
            let (port, id) = (h.port, id.clone());
            std::thread::spawn(move || read_until_terminal(port, &id, 0))
        })
        .collect();
    for id in &ids {
        op(
            h.port,
            "turn.start",
            json!({"sessionId": id, "turnId": "t", "content": {"text": "go"}}),
        );
    }
    let mut total = 0;
    let mut last = start;
    for r in readers {
        let (n, t) = r.join().unwrap();
        total += n;
        last = last.max(t);
    }
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(&ws);
    total as f64 / last.duration_since(start).as_secs_f64()
}

fn latency(frames: usize) -> (f64, f64, f64) {
    let data = tempdir("lat");
    let ws = tempdir("latws");
    let bound = host::bind(
        "127.0.0.1:0".parse().unwrap(),
        &data,
        TOKEN.into(),
        maka_acp::tunables::Tunables::default(),
        &[],
    )
    .unwrap();
    let (h, port) = (bound.host.clone(), bound.port);
    std::thread::spawn(move || host::serve(bound));
    host::ops::dispatch(
        &h,
        host::ops::Caller::default(),
        "session.create",
        json!({"sessionId": "s", "workspace": {"kind": "host_path", "path": ws}})
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    let cell = h.cell("s").unwrap();
    let reader = std::thread::spawn(move || {
        let resp = agent()
            .get(&format!(
                "http://127.0.0.1:{port}/v1/events?sessionId=s&after=0&waitMs=60000"
            ))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .call()
            .unwrap();
        let mut reader = BufReader::new(resp.into_body().into_reader());
        let mut arrivals = Vec::with_capacity(frames);
        let mut line = String::new();
        while arrivals.len() < frames {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let f = Frame::parse(line.as_bytes()).unwrap();
            if let Some(seq) = f.seq {
                arrivals.push((seq, Instant::now()));
            }
        }
        arrivals
    });
    std::thread::sleep(Duration::from_millis(100));
    let mut appended = Vec::with_capacity(frames);
    for i in 0..frames {
        let t = Instant::now();
        let mut st = cell.lock();
        cell.emit(
            &mut st,
            FrameBody::TextDelta {
                turn_id: "t".into(),
                message_id: "m".into(),
                start_offset: i as u64,
                text: "x".into(),
                complete: false,
            },
        );
        drop(st);
        appended.push(t);
        // Sleep (not spin): on 2 cores a spinning producer would starve the reader it measures.
        std::thread::sleep(Duration::from_micros(100));
    }
    let arrivals = reader.join().unwrap();
    let mut lat: Vec<f64> = arrivals
        .iter()
        .map(|(seq, at)| at.duration_since(appended[*seq as usize - 1]).as_secs_f64() * 1e6)
        .collect();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pick = |q: f64| lat[((lat.len() as f64 - 1.0) * q) as usize];
    h.begin_shutdown(Duration::from_millis(10));
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(&ws);
    (pick(0.5), pick(0.99), pick(0.999))
}

fn idle_rss_mib() -> f64 {
    let data = tempdir("rss");
    let h = start_host(&data, &json!({}));
    std::thread::sleep(Duration::from_millis(300));
    let status = std::fs::read_to_string(format!("/proc/{}/status", h.child.id())).unwrap();
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    drop(h);
    let _ = std::fs::remove_dir_all(&data);
    kib / 1024.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let runs = 3;
    println!("host streaming benchmark ({runs} runs each, medians)");
    println!("idle RSS: {:.2} MiB   (target <= 10 MiB)", idle_rss_mib());
    let one = median((0..runs).map(|_| throughput(1, 100_000)).collect());
    println!("1 session, 100000 deltas: {one:.0} frames/s   (target >= 100000)");
    let twenty = median((0..runs).map(|_| throughput(20, 50_000)).collect());
    println!("20 sessions x 50000 deltas at once: {twenty:.0} frames/s aggregate");
    let lats: Vec<(f64, f64, f64)> = (0..runs).map(|_| latency(10_000)).collect();
    let p50 = median(lats.iter().map(|l| l.0).collect());
    let p99 = median(lats.iter().map(|l| l.1).collect());
    let p999 = median(lats.iter().map(|l| l.2).collect());
    println!("append -> reader latency (10000 frames, one per >=100 us): p50 {p50:.0} us, p99 {p99:.0} us, p99.9 {p999:.0} us   (target p99 <= 2000 us)");
}
