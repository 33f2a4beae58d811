//! A deterministic fuzzer for the ACP side: thousands of hostile stdin lines (seeded mutations
//! of real requests, raw garbage, deep nesting, huge numbers, wrong types, unknown methods,
//! prompts and cancels for unknown and real sessions), with a liveness probe every few lines.
//! Nothing may panic, hang, or write a line that is not valid ACP. `MAKA_FUZZ_STDIN_LINES` and
//! `MAKA_FUZZ_SEED` change the run (scripts/fuzz runs a long one).

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::time::Duration;
use support::host::TempDir;
use support::rng::Rng;
use support::AgentProcess;

fn seeds(session: &str, cwd: &str) -> Vec<Value> {
    let prompt = |t: &str| json!({"sessionId": session, "prompt": [{"type": "text", "text": t}]});
    vec![
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": true}}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt("hello")}),
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "session/list", "params": {"cursor": "abc"}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "session/load", "params": {"sessionId": session, "cwd": cwd, "mcpServers": []}}),
        json!({"jsonrpc": "2.0", "id": 6, "method": "session/set_config_option", "params": {"sessionId": session, "configId": "mode", "value": "bypass"}}),
        json!({"jsonrpc": "2.0", "id": 7, "method": "session/set_mode", "params": {"sessionId": session, "modeId": "explore"}}),
        json!({"jsonrpc": "2.0", "id": 8, "method": "session/close", "params": {"sessionId": "sess_nope"}}),
        json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 3}}),
        json!({"jsonrpc": "2.0", "id": 9, "result": {"outcome": {"outcome": "cancelled"}}}),
        json!({"jsonrpc": "2.0", "id": 10, "method": "session/prompt", "params": {"sessionId": session, "prompt": [{"type": "image", "data": "@@", "mimeType": "x"}, {"type": "resource_link", "uri": "file:///etc/passwd", "name": "p"}]}}),
        json!({"jsonrpc": "2.0", "id": 11, "method": "authenticate", "params": {"methodId": "env"}}),
        json!([{"jsonrpc": "2.0", "id": 12, "method": "initialize"}]),
    ]
}

const JUNK: &[&str] = &[
    "null",
    "true",
    "-1",
    "1e999",
    "18446744073709551616",
    "\"\\ud800\"",
    "[]",
    "{}",
    "\"\u{0}\"",
    "{\"a\":",
    "\"x\"",
    "0.5",
    "-0",
];

/// One hostile line from a real message.
fn mutate(rng: &mut Rng, seed: &Value) -> Vec<u8> {
    match rng.below(10) {
        // Replace a value somewhere with junk.
        0..=3 => {
            let mut v = seed.clone();
            replace_random(rng, &mut v);
            serde_json::to_vec(&v).unwrap()
        }
        // Byte-level damage.
        4..=6 => {
            let mut b = serde_json::to_vec(seed).unwrap();
            for _ in 0..=rng.below(3) {
                if b.is_empty() {
                    break;
                }
                let at = rng.below(b.len() as u64) as usize;
                match rng.below(3) {
                    0 => b[at] = rng.next() as u8,
                    1 => {
                        b.remove(at);
                    }
                    _ => b.truncate(at),
                }
            }
            b.retain(|&c| c != b'\n');
            b
        }
        // Deep nesting.
        7 => {
            let depth = 50 + rng.below(5000) as usize;
            let mut s = "[".repeat(depth);
            s.push_str(&"]".repeat(depth));
            s.into_bytes()
        }
        // An unknown or extension method.
        8 => {
            let m = rng.pick(&[
                "_maka/x",
                "session/fork",
                "fs/read_text_file",
                "",
                "session/",
            ]);
            serde_json::to_vec(
                &json!({"jsonrpc": "2.0", "id": rng.below(1000), "method": m, "params": {}}),
            )
            .unwrap()
        }
        // Raw junk.
        _ => (*rng.pick(JUNK)).as_bytes().to_vec(),
    }
}

fn replace_random(rng: &mut Rng, v: &mut Value) {
    let text = *rng.pick(JUNK);
    let junk: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    match v {
        Value::Object(m) if !m.is_empty() && rng.below(3) != 0 => {
            let keys: Vec<String> = m.keys().cloned().collect();
            let k = rng.pick(&keys).clone();
            if let Some(child) = m.get_mut(&k) {
                replace_random(rng, child);
            }
        }
        Value::Array(a) if !a.is_empty() && rng.below(3) != 0 => {
            let i = rng.below(a.len() as u64) as usize;
            replace_random(rng, &mut a[i]);
        }
        _ => *v = junk,
    }
}

#[test]
fn stdin_fuzzer_never_crashes_hangs_or_writes_invalid_acp() {
    let lines: u64 = std::env::var("MAKA_FUZZ_STDIN_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let seed: u64 = std::env::var("MAKA_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0xac9_f00d_5eed);
    let data = TempDir::new("fuzz-data");
    let ws = TempDir::new("fuzz-ws");
    let script = json!({"default": [[{"text": "ok"}, {"tool": "read_file", "args": {"path": "nope"}}], [{"text": "done"}]]});
    let mut agent = AgentProcess::scripted(&script, data.path());
    agent.initialize();
    let session = agent.new_session(ws.path());
    let seeds = seeds(&session, &ws.path().display().to_string());
    let mut rng = Rng(seed);
    let mut probes = 0;
    for i in 0..lines {
        let seed_msg = rng.pick(&seeds).clone();
        let mut line = mutate(&mut rng, &seed_msg);
        // The harness types responses by the id of the request they answer: requests get ids
        // of their own (ids of invalid types are kept — their errors carry a null id).
        if let Ok(mut v) = serde_json::from_slice::<Value>(&line) {
            let valid_id = v
                .get("id")
                .is_some_and(|id| id.is_null() || id.is_string() || id.is_i64() || id.is_u64());
            if let (true, Some(m)) = (valid_id, v.get("method").and_then(Value::as_str)) {
                let m = m.to_string();
                let id = json!(format!("f-{i}"));
                v["id"] = id.clone();
                agent.expect_method(&id, &m);
                line = serde_json::to_vec(&v).unwrap();
            }
        }
        line.push(b'\n');
        agent.send_raw(&line);
        if i % 20 == 19 {
            // Liveness: a fresh request must be answered (other lines may come first).
            let probe = json!(format!("probe-{i}"));
            agent.expect_method(&probe, "session/list");
            agent.send(
                &json!({"jsonrpc": "2.0", "id": probe, "method": "session/list", "params": {}}),
            );
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            loop {
                let v = agent
                    .recv_timeout(Duration::from_secs(20))
                    .unwrap_or_else(|| {
                        panic!("no answer to probe {i} (seed {seed})\n{}", agent.stderr())
                    });
                // Answer anything the agent asks the client, as an editor would (an error).
                if let (Some(_), Some(id)) = (v.get("method"), v.get("id")) {
                    agent.send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": "no"}}));
                }
                if v.get("id") == Some(&probe) && v.get("method").is_none() {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "probe {i} starved");
            }
            probes += 1;
        }
    }
    assert!(probes >= lines / 20);
    assert!(
        !agent.stderr().contains("panicked"),
        "the agent panicked (seed {seed}):\n{}",
        agent.stderr()
    );
    // Still a working agent.
    assert_eq!(agent.initialize()["protocolVersion"], 1);
}
