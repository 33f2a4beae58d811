//! Frames are bounded and large payloads travel by reference (10 MiB prompts, attachments,
//! writes and model deltas never make the adapter give up on a healthy host), and a client
//! that stops reading stdout loses no streamed text. The real adapter and embedded host.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::host::TempDir;
use support::{select, AgentProcess, Reply, Spawn};

const TEN_MIB: usize = 10 * 1024 * 1024;

fn big_script(dir: &std::path::Path) -> std::path::PathBuf {
    let content = "y".repeat(TEN_MIB);
    let word = "z".repeat(TEN_MIB);
    let script = json!({
        "rules": [
            {"when": "big write", "responses": [
                [{"tool": "write_file", "args": {"path": "big.txt", "content": content}}],
                [{"text": "written"}]
            ]},
            {"when": "one huge word", "responses": [[{"text": word}]]},
        ],
        "default": [[{"text": "got it"}]]
    });
    let path = dir.join("script.json");
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

fn agent(data: &TempDir, script: &std::path::Path, caps: Value) -> AgentProcess {
    let mut agent = AgentProcess::spawn_with(Spawn {
        args: vec![],
        env: vec![
            ("RUST_LOG".into(), "info".into()),
            ("MAKA_SCRIPT".into(), script.display().to_string()),
            ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
            (
                "XDG_CONFIG_HOME".into(),
                data.path().join("config").display().to_string(),
            ),
        ],
    });
    agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": caps}),
    );
    agent
}

fn assert_host_kept(agent: &AgentProcess) {
    let err = agent.stderr();
    assert!(!err.contains("lost the Runtime Host"), "{err}");
    assert_eq!(
        err.matches("started the embedded Runtime Host").count(),
        1,
        "one host for the whole test"
    );
}

/// Issue 13 §2: a 4.5 MiB prompt, a 4.5 MiB embedded file, a 3.4 MiB image, a 2.5 MB write
/// in ask mode or a 5 MiB write made the adapter kill its own host. At 10 MiB each: served.
#[test]
fn ten_mib_prompts_attachments_writes_and_deltas_keep_the_host() {
    let data = TempDir::new("big-data");
    let ws = TempDir::new("big-ws");
    let script = big_script(data.path());
    let mut agent = agent(&data, &script, json!({}));
    let id = agent.new_session(ws.path());
    let big_text = "x".repeat(TEN_MIB);
    let blob: String = (0..TEN_MIB)
        .map(|i| (b'A' + (i % 26) as u8) as char)
        .collect();
    for (what, prompt) in [
        ("text", json!([{"type": "text", "text": big_text}])),
        (
            "embedded file",
            json!([{"type": "text", "text": "see"}, {"type": "resource", "resource": {"uri": "file:///w/big.log", "text": big_text}}]),
        ),
        (
            "image",
            json!([{"type": "text", "text": "look"}, {"type": "image", "mimeType": "image/png", "data": blob}]),
        ),
    ] {
        let t = agent.drive(
            "session/prompt",
            json!({"sessionId": id, "prompt": prompt}),
            |r| panic!("{r}"),
        );
        assert_eq!(
            t.response["result"]["stopReason"], "end_turn",
            "{what}: {}",
            t.response
        );
    }
    // A 10 MiB write in ask mode: the dialog's diff is bounded, the file is whole.
    let t = agent.prompt(&id, "big write", |r| {
        assert_eq!(r["method"], "session/request_permission");
        let line = r.to_string();
        assert!(
            line.len() < 2 * 1024 * 1024,
            "dialog of {} bytes",
            line.len()
        );
        select("allow_once")
    });
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
    assert_eq!(
        std::fs::metadata(ws.path().join("big.txt")).unwrap().len(),
        TEN_MIB as u64
    );
    // One model delta of 10 MiB: split into bounded frames, all of it shown.
    let t = agent.prompt(&id, "one huge word", |r| panic!("{r}"));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert_eq!(t.text().len(), TEN_MIB);
    assert_host_kept(&agent);
}

/// A 10 MiB write through the editor's `fs/write_text_file` in bypass mode: the host's frame
/// carries the call by reference, the adapter fetches the content, the editor gets all of it.
#[test]
fn a_ten_mib_editor_write_travels_by_reference() {
    let data = TempDir::new("bigfs-data");
    let ws = TempDir::new("bigfs-ws");
    let script = big_script(data.path());
    let caps = json!({"fs": {"readTextFile": true, "writeTextFile": true}});
    let mut agent = agent(&data, &script, caps);
    let id = agent.new_session(ws.path());
    agent.call_ok(
        "session/set_mode",
        json!({"sessionId": id, "modeId": "bypass"}),
    );
    let _ = agent.recv();
    let t = agent.prompt(&id, "big write", |r| {
        assert_eq!(r["method"], "fs/write_text_file", "{r}");
        assert_eq!(r["params"]["content"].as_str().unwrap().len(), TEN_MIB);
        Reply::Result(json!({}))
    });
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
    assert_host_kept(&agent);
}

/// Issue 13 §6: a client that stops reading stdout during a fast stream got part of the text
/// and then `end_turn`; a stall past the stream timeout made the adapter kill its host. Now
/// the adapter catches up from the transcript: every byte arrives, the host lives.
#[test]
fn a_client_that_stops_reading_loses_no_text() {
    let notices = stop_reading(json!({}));
    assert!(notices.is_empty(), "{notices:#?}");
}

/// ACP `notice` (issue 26 item 2): the same stall, to a client that shows notices: one info
/// notice says the updates were interrupted and caught up (the text is still all there).
#[test]
fn a_catch_up_after_a_stall_is_a_notice_to_clients_that_show_notices() {
    let notices = stop_reading(json!({"session": {"notices": {}}}));
    let titles: Vec<(&Value, &Value)> = notices
        .iter()
        .map(|n| (&n["severity"], &n["title"]))
        .collect();
    assert!(
        !titles.is_empty()
            && titles.iter().all(|(s, t)| *s == "info"
                && *t == "The agent's updates were interrupted; caught up from the saved session."),
        "{notices:#?}"
    );
}

/// Floods a turn while the client does not read; returns the notices it was shown after every
/// byte of the text arrived and the host lived.
fn stop_reading(capabilities: Value) -> Vec<Value> {
    let data = TempDir::new("slow-data");
    let ws = TempDir::new("slow-ws");
    let chunk = "0123456789".repeat(100); // 1000 bytes
    let times = 20_000; // 20 MB
    let script = json!({"rules": [{"when": "flood", "responses": [[{"repeat": {"text": chunk, "times": times}}]]}]});
    let mut child = Command::new(support::BIN)
        .env_remove("MAKA_HOST_URL")
        .env_remove("MAKA_HOST_TOKEN")
        .env("MAKA_CONFIG", "/nonexistent/config.json")
        .env("MAKA_SCRIPT", script.to_string())
        .env("MAKA_DATA_DIR", data.path())
        .env("MAKA_HOST_STREAM_TIMEOUT_MS", "2000")
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::with_capacity(1 << 16, child.stdout.take().unwrap());
    let stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
        s
    });
    let methods = std::sync::Mutex::new(std::collections::HashMap::new());
    let mut send = |id: i64, method: &str, params: Value| {
        methods
            .lock()
            .unwrap()
            .insert(id.to_string(), method.to_string());
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    };
    let read = |out: &mut BufReader<std::process::ChildStdout>| -> Value {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "stdout closed");
        let lookup = |id: &Value| methods.lock().unwrap().get(&id.to_string()).cloned();
        match support::schema::validate_agent_line(line.trim_end(), lookup) {
            Ok(v) => v,
            Err(e) => panic!("invalid line: {e}"),
        }
    };
    send(
        0,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": capabilities}),
    );
    read(&mut out);
    send(
        1,
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": []}),
    );
    let sid = read(&mut out)["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    send(
        2,
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "flood"}]}),
    );
    // Stop reading: well past the host's 2 s flow-control wait and the 2 s stream timeout.
    std::thread::sleep(Duration::from_secs(6));
    let mut text = 0usize;
    let mut notices = vec![];
    let response = loop {
        let v = read(&mut out);
        if v["id"] == 2 {
            break v;
        }
        if v["params"]["update"]["sessionUpdate"] == "notice" {
            notices.push(v["params"]["update"].clone());
        }
        if v["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            text += v["params"]["update"]["content"]["text"]
                .as_str()
                .unwrap()
                .len();
        }
    };
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    drop(stdin);
    let _ = child.wait();
    let log = log.join().unwrap();
    assert_eq!(
        text,
        chunk.len() * times,
        "every byte of the stream arrived\n{log}"
    );
    assert!(!log.contains("lost the Runtime Host"), "{log}");
    assert!(
        log.contains("catching up"),
        "the stall did make the adapter fall behind (else this test proves nothing)\n{log}"
    );
    notices
}
