//! The foundation as an editor sees it: `initialize`, every kind of bad input (each followed by
//! a request that still succeeds), id echo, EOF shutdown and stdout purity.

mod support;
use serde_json::{json, Value};
use std::time::Duration;
use support::{error_of, AgentProcess, Spawn, BIN};

#[test]
fn initialize_negotiates_version_1_and_describes_the_agent() {
    let mut agent = AgentProcess::spawn();
    for offered in [1, 2, 0, 65535] {
        let r = agent.call_ok("initialize", json!({"protocolVersion": offered}));
        assert_eq!(r["protocolVersion"], 1, "offered {offered}");
        assert_eq!(r["agentInfo"]["name"], "maka-acp");
        assert_eq!(r["agentInfo"]["version"], env!("CARGO_PKG_VERSION"));
        assert!(r["agentInfo"]["title"].is_string());
        assert!(r["agentCapabilities"].is_object());
    }
}

#[test]
fn initialize_with_full_client_capabilities_succeeds() {
    let mut agent = AgentProcess::spawn();
    let r = agent.call_ok(
        "initialize",
        json!({
            "protocolVersion": 1,
            "clientCapabilities": {
                "fs": {"readTextFile": true, "writeTextFile": true},
                "terminal": true,
                "auth": {"terminal": true},
                "elicitation": {"form": {}},
                "session": {"configOptions": {"boolean": {}}},
                "_meta": {"terminal_output": true}
            },
            "clientInfo": {"name": "zed", "title": "Zed", "version": "0.200.0"},
            "_meta": {"traceparent": "00-x"}
        }),
    );
    assert_eq!(r["protocolVersion"], 1);
}

/// Sends one bad line, checks the error, then proves the agent still serves.
fn bad_then_good(agent: &mut AgentProcess, raw: &[u8], want_code: i64, want_id: Value) -> Value {
    agent.send_raw(raw);
    let resp = agent.recv();
    let err = error_of(&resp).clone();
    assert_eq!(
        err["code"],
        want_code,
        "for {:?}: {resp}",
        String::from_utf8_lossy(raw)
    );
    assert_eq!(
        resp["id"],
        want_id,
        "id echo for {:?}",
        String::from_utf8_lossy(raw)
    );
    let r = agent.call_ok("initialize", json!({"protocolVersion": 1}));
    assert_eq!(r["protocolVersion"], 1);
    err
}

#[test]
fn malformed_input_gets_precise_errors_and_the_agent_keeps_serving() {
    let mut agent = AgentProcess::spawn();
    bad_then_good(&mut agent, b"{not json\n", -32700, Value::Null);
    bad_then_good(&mut agent, b"\xff\xfe\xfd\n", -32700, Value::Null);
    // A line JSON cannot read whose start shows a request's id is answered with that id (as
    // an oversized line is), so its sender is not left waiting: a truncated object, a lone
    // surrogate (grammatical JSON that serde refuses), bytes that are not UTF-8 in `params`.
    bad_then_good(
        &mut agent,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"\n",
        -32700,
        json!(1),
    );
    let e = bad_then_good(
        &mut agent,
        b"{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"session/prompt\",\"params\":{\"sessionId\":\"s\",\"prompt\":[{\"type\":\"text\",\"text\":\"\\ud800\"}]}}\n",
        -32700,
        json!(12),
    );
    assert!(
        e["message"].as_str().unwrap().starts_with("Parse error"),
        "{e}"
    );
    bad_then_good(
        &mut agent,
        b"{\"jsonrpc\":\"2.0\",\"method\":\"initialize\",\"id\":\"thirteen\",\"params\":{\"x\":\"\xff\"}}\n",
        -32700,
        json!("thirteen"),
    );
    // An id that itself cannot be read still names `null`.
    bad_then_good(
        &mut agent,
        b"{\"jsonrpc\":\"2.0\",\"id\":\"\\udc00\",\"method\":\"initialize\"}\n",
        -32700,
        Value::Null,
    );
    let e = bad_then_good(
        &mut agent,
        b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}]\n",
        -32600,
        Value::Null,
    );
    assert!(e["message"].as_str().unwrap().contains("batch"));
    bad_then_good(&mut agent, b"42\n", -32600, Value::Null);
    bad_then_good(&mut agent, b"\"hello\"\n", -32600, Value::Null);
    bad_then_good(&mut agent, b"null\n", -32600, Value::Null);
    let e = bad_then_good(
        &mut agent,
        b"{\"jsonrpc\":\"2.0\",\"id\":7}\n",
        -32600,
        json!(7),
    );
    assert!(e["message"].as_str().unwrap().contains("method"));
    let e = bad_then_good(&mut agent, b"{\"jsonrpc\":\"1.0\",\"id\":8,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1}}\n", -32600, json!(8));
    assert!(e["message"].as_str().unwrap().contains("jsonrpc"));
    bad_then_good(
        &mut agent,
        b"{\"id\":9,\"method\":\"initialize\"}\n",
        -32600,
        json!(9),
    );
    bad_then_good(
        &mut agent,
        b"{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":5}\n",
        -32600,
        json!(10),
    );
    bad_then_good(
        &mut agent,
        b"{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"initialize\"}\n",
        -32600,
        Value::Null,
    );
    bad_then_good(
        &mut agent,
        b"{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"initialize\",\"params\":\"x\"}\n",
        -32600,
        json!(11),
    );
}

#[test]
fn unknown_and_unadvertised_methods_are_method_not_found() {
    let mut agent = AgentProcess::spawn();
    agent.initialize();
    for method in [
        "no/such/method",
        "_zed.dev/workspace/buffers",
        "_maka/unknown",
        // Not advertised (unstable or v2 only), so clients must not call it; we answer -32601.
        // (`session/fork` is unstable too, but advertised and served; so is the earlier
        // unstable `session/set_model`, which clients call without a capability.)
        "session/archive",
        "providers/list",
    ] {
        let (resp, _) = agent.call(method, json!({}));
        assert_eq!(error_of(&resp)["code"], -32601, "{method}: {resp}");
        assert!(error_of(&resp)["message"]
            .as_str()
            .unwrap()
            .contains(method));
    }
    assert_eq!(agent.initialize()["protocolVersion"], 1);
}

#[test]
fn wrong_params_are_invalid_params_naming_the_field() {
    let mut agent = AgentProcess::spawn();
    for (params, field) in [
        (json!({"protocolVersion": "1"}), "`protocolVersion`"),
        (json!({}), "`protocolVersion`"),
        (json!({"protocolVersion": -1}), "`protocolVersion`"),
        (json!({"protocolVersion": 70000}), "`protocolVersion`"),
        (json!({"protocolVersion": 1.5}), "`protocolVersion`"),
        (
            json!({"protocolVersion": 1, "clientCapabilities": []}),
            "`clientCapabilities`",
        ),
        (
            json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": "yes"}}}),
            "`clientCapabilities.fs.readTextFile`",
        ),
        (json!([1]), "params must be an object"),
    ] {
        let (resp, _) = agent.call("initialize", params.clone());
        let err = error_of(&resp);
        assert_eq!(err["code"], -32602, "{params}: {resp}");
        assert!(
            err["message"].as_str().unwrap().contains(field),
            "{params}: {resp}"
        );
    }
    // A capability marker that is not an object is read as not advertised, as ACP reads it
    // (`x-deserialize-default-on-error`): no error, and the client is not sent the feature.
    let (resp, _) = agent.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"elicitation": {"form": true},
            "plan": true, "session": {"notices": false}}}),
    );
    assert_eq!(resp["result"]["protocolVersion"], 1, "{resp}");
    // Missing params entirely.
    agent.send(&json!({"jsonrpc": "2.0", "id": "no-params", "method": "initialize"}));
    let resp = agent.recv();
    assert_eq!(resp["id"], "no-params");
    assert_eq!(error_of(&resp)["code"], -32602);
    assert_eq!(agent.initialize()["protocolVersion"], 1);
}

#[test]
fn request_ids_are_echoed_with_their_exact_json_type() {
    let mut agent = AgentProcess::spawn();
    for id in [
        json!(0),
        json!(1),
        json!("1"),
        json!("abc-é"),
        json!(-5),
        json!(9007199254740993u64),
        json!(18446744073709551615u64),
        Value::Null,
    ] {
        agent.send(&json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {"protocolVersion": 1}}));
        let resp = agent.recv();
        assert_eq!(resp["id"], id);
        assert_eq!(
            serde_json::to_string(&resp["id"]).unwrap(),
            serde_json::to_string(&id).unwrap()
        );
        assert_eq!(resp["result"]["protocolVersion"], 1);
    }
}

#[test]
fn notifications_are_never_answered_and_unknown_responses_are_logged() {
    let mut agent = AgentProcess::spawn();
    agent.notify("_zed.dev/hello", json!({"x": 1}));
    agent.notify("some/unknown", json!({}));
    agent.notify("$/cancel_request", json!({"requestId": 12345}));
    agent.notify("session/cancel", json!({"sessionId": "nope"}));
    agent.send(
        &json!({"jsonrpc": "2.0", "id": 4242, "result": {"outcome": {"outcome": "cancelled"}}}),
    );
    agent
        .send(&json!({"jsonrpc": "2.0", "id": "x9", "error": {"code": -32800, "message": "gone"}}));
    // The next line is the response to this request: nothing was written for the above.
    let id = agent.request("initialize", json!({"protocolVersion": 1}));
    let next = agent.recv();
    assert_eq!(
        next["id"], id,
        "unexpected output before the response: {next}"
    );
    // stderr is collected on another thread: wait (bounded) for the lines.
    assert!(
        agent.stderr_contains("unknown request id 4242"),
        "stderr: {}",
        agent.stderr()
    );
    assert!(
        agent.stderr_contains("unknown request id \"x9\""),
        "stderr: {}",
        agent.stderr()
    );
}

/// A line over 64 MiB is skipped, and answered with the request's own id when the line's start
/// shows it (a top-level `id` before the kept few KiB end), else with `null`; the agent keeps
/// serving. One row a case: the line's start, the id of its answer.
#[test]
fn a_line_over_the_limit_is_answered_with_its_id_and_skipped_without_stopping() {
    let mut agent = AgentProcess::spawn_with(Spawn {
        env: vec![],
        ..Spawn::default()
    });
    let rows: &[(&str, Value)] = &[
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":1,"_meta":{"x":""#,
            json!(7),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"session/prompt","id":"p-\"8\"","params":{"sessionId":"s","prompt":[{"type":"text","text":""#,
            json!("p-\"8\""),
        ),
        // The only ids are inside params or after what is kept: null.
        (
            r#"{"jsonrpc":"2.0","method":"session/prompt","params":{"id":9,"prompt":[{"type":"text","text":""#,
            Value::Null,
        ),
    ];
    for (start, id) in rows {
        // 64 MiB + 1 byte of a string inside an otherwise valid request.
        let mut line = Vec::with_capacity(64 * 1024 * 1024 + 100);
        line.extend_from_slice(start.as_bytes());
        line.resize(64 * 1024 * 1024 + 1, b'a');
        line.extend_from_slice(b"\"}}}\n");
        agent.send_raw(&line);
        let resp = agent.recv();
        assert_eq!(&resp["id"], id, "for {start}: {resp}");
        assert_eq!(error_of(&resp)["code"], -32600, "{resp}");
        let message = error_of(&resp)["message"].as_str().unwrap_or_default();
        assert!(message.contains("limit"), "{resp}");
        assert_eq!(agent.initialize()["protocolVersion"], 1);
    }
}

#[test]
fn a_large_line_under_the_limit_is_served() {
    let mut agent = AgentProcess::spawn_with(Spawn {
        env: vec![],
        ..Spawn::default()
    });
    let big = "b".repeat(8 * 1024 * 1024);
    let r = agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "_meta": {"blob": big}}),
    );
    assert_eq!(r["protocolVersion"], 1);
}

#[test]
fn stdin_eof_exits_cleanly_and_promptly() {
    let mut agent = AgentProcess::spawn();
    agent.initialize();
    agent.close_stdin();
    let (status, _elapsed) = agent
        .wait_exit(Duration::from_secs(10))
        .expect("agent exits after EOF");
    assert!(status.success(), "exit status {status}");
    assert!(agent.drain().is_empty());
}

#[test]
fn eof_right_after_requests_still_answers_them_all() {
    let mut agent = AgentProcess::spawn();
    agent.initialize();
    let ids: Vec<Value> = (100..300).map(|i| json!(i)).collect();
    let batch: Vec<Value> = ids
        .iter()
        .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {"protocolVersion": 1}}))
        .collect();
    agent.send_all(&batch);
    agent.close_stdin();
    let got = agent.drain();
    let got_ids: Vec<Value> = got.iter().map(|v| v["id"].clone()).collect();
    assert_eq!(got_ids, ids, "every request answered, in order");
}

#[test]
fn stdout_carries_only_json_rpc_even_with_trace_logging() {
    let mut agent = AgentProcess::spawn_with(Spawn {
        args: vec!["--log-level".into(), "trace".into()],
        env: vec![],
    });
    agent.initialize();
    agent.send_raw(b"garbage\n");
    agent.recv();
    agent.call("nope", json!({}));
    agent.close_stdin();
    agent.drain();
    agent.wait_exit(Duration::from_secs(10)).expect("exit");
    // Every stdout line was validated by the harness; logs went to stderr.
    assert!(
        agent.stderr_contains("DEBUG") || agent.stderr_contains("WARN"),
        "stderr: {}",
        agent.stderr()
    );
}

#[test]
fn cli_help_version_and_usage_errors() {
    let out = std::process::Command::new(BIN)
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("maka-acp {}\n", env!("CARGO_PKG_VERSION"))
    );
    let out = std::process::Command::new(BIN)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--host-url",
        "--data-dir",
        "--log-level",
        "MAKA_HOST_URL",
        "MAKA_HOST_TOKEN",
        "MAKA_DATA_DIR",
        "RUST_LOG",
    ] {
        assert!(help.contains(flag), "help mentions {flag}");
    }
    for args in [
        vec!["--frobnicate"],
        vec!["--log-level", "chatty"],
        vec!["--host-url", "http://127.0.0.1:1"],
        vec!["stray"],
    ] {
        let out = std::process::Command::new(BIN)
            .args(&args)
            .env_remove("MAKA_HOST_TOKEN")
            .env_remove("MAKA_HOST_URL")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: one line, got {err:?}"
        );
        assert!(err.starts_with("maka-acp: "), "{err}");
    }
}

/// A UTF-8 byte-order mark before the first message (some Windows tools write one) was a
/// parse error; it is tolerated there, and only there.
#[test]
fn a_byte_order_mark_before_the_first_message_is_tolerated() {
    let mut agent = AgentProcess::spawn();
    agent.expect_method(&json!(1), "initialize");
    agent.expect_method(&json!(2), "initialize");
    agent.send_raw(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1}}\n");
    let resp = agent.recv();
    assert_eq!(resp["result"]["protocolVersion"], 1, "{resp}");
    agent.send_raw(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1}}\n");
    let resp = agent.recv();
    assert_eq!(error_of(&resp)["code"], -32700, "{resp}");
}

/// JSON-RPC ids name one request at a time (issue 57 item 3): a request whose id is that of a
/// request still in progress is refused with `-32600` naming the id (it is not run, and the
/// first is answered as if it had not come); once the first is answered its id may be used
/// again.
#[test]
fn a_request_whose_id_is_in_progress_is_refused_naming_it() {
    let data = support::host::TempDir::new("stdio-dup-id");
    let ws = support::host::TempDir::new("stdio-dup-id-ws");
    let script = json!({"rules": [{"when": "run it", "responses": [
        [{"tool": "run_command", "args": {"command": "echo hi"}}],
        [{"text": "Ran it."}]]}]});
    let mut agent = AgentProcess::scripted(&script, data.path());
    agent.initialize();
    let sid = agent.new_session(ws.path());
    let prompt = json!({"jsonrpc": "2.0", "id": 5, "method": "session/prompt", "params":
        {"sessionId": sid, "prompt": [{"type": "text", "text": "run it"}]}});
    agent.send(&prompt);
    // The turn waits on its permission dialog: request 5 is in progress.
    let ask = loop {
        let v = agent.recv();
        if v["method"] == "session/request_permission" {
            break v;
        }
        assert!(v.get("id") != Some(&json!(5)), "answered too soon: {v}");
    };
    // Another request with id 5, then the same prompt again: each refused, naming the id.
    let raw = |agent: &mut AgentProcess, line: String| {
        agent.send_raw(format!("{line}\n").as_bytes());
        let v = agent.recv();
        assert_eq!(v["id"], 5, "{v}");
        let e = error_of(&v);
        assert_eq!(e["code"], -32600, "{v}");
        let message = e["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("id 5 ") && message.contains("in progress"),
            "{v}"
        );
    };
    raw(
        &mut agent,
        json!({"jsonrpc": "2.0", "id": 5, "method": "session/list", "params": {}}).to_string(),
    );
    raw(&mut agent, prompt.to_string());
    // The first goes on and is answered once, normally.
    let option = ask["params"]["options"]
        .as_array()
        .and_then(|o| o.iter().find(|o| o["kind"] == "allow_once"))
        .map(|o| o["optionId"].clone())
        .expect("an allow_once option");
    agent.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result":
        {"outcome": {"outcome": "selected", "optionId": option}}}));
    let (answer, _) = agent.response_to(&json!(5));
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    // Answered: the id is free again (JSON-RPC allows it), and the turn ran once.
    agent.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "_maka/session/turns", "params": {"sessionId": sid}}));
    let (turns, _) = agent.response_to(&json!(5));
    let turns = turns["result"]["turns"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(turns.len(), 1, "{turns:?}");
}
