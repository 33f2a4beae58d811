//! The reference Runtime Host over real HTTP on loopback, as a client sees it: auth, envelopes
//! and error codes, sessions and paging, turns with the scripted provider, interactions, the
//! event stream with resume, and recovery after kill -9.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::host::{agent, kinds, HostProcess, TempDir};

fn script() -> Value {
    json!({
        "thinkingLevels": ["low", "high"],
        "rules": [
            {"when": "edit", "responses": [
                [{"text": "I'll edit a.txt."}, {"tool": "edit_file", "args": {"path": "a.txt", "old_text": "world", "new_text": "there"}}],
                [{"text": "Done editing."}]]},
            {"when": "run sleep", "responses": [[{"tool": "run_command", "args": {"command": "echo started; sleep 30; echo never"}}]]},
            {"when": "slow", "responses": [[{"text": "Thinking slowly"}, {"delayMs": 30000}, {"text": "never"}]]},
            {"when": "ask me", "responses": [
                [{"tool": "ask_user", "args": {"questions": [{"question": "Which DB?", "options": [{"label": "sqlite"}, {"label": "pg"}]}]}}],
                [{"text": "Noted."}]]},
            {"when": "write outside", "responses": [[{"tool": "read_file", "args": {"path": "/etc/hostname"}}], [{"text": "ok"}]]},
            {"when": "plan", "responses": [[{"tool": "update_plan", "args": {"entries": [{"content": "Read", "status": "completed"}, {"content": "Write", "status": "in_progress", "priority": "high"}]}}], [{"text": "Planned."}]]},
            {"when": "maxtok", "responses": [[{"text": "cut"}, {"finish": "max_tokens"}]]},
            {"when": "refuse", "responses": [[{"finish": "refusal"}]]},
            {"when": "fail", "responses": [[{"text": "partial"}, {"fail": "provider_error", "message": "upstream exploded"}]]},
            {"when": "loop", "responses": [[{"tool": "list_directory", "args": {}}], [{"tool": "list_directory", "args": {}}], [{"tool": "list_directory", "args": {}}]]},
            {"when": "many", "responses": [[{"repeat": {"text": "x", "times": 9000}}]]},
            {"when": "burst", "responses": [[{"repeat": {"text": "y", "times": 30000}}]]}
        ],
        "default": [[{"thinking": "Hmm."}, {"text": "Hello from the script!"}]]
    })
}

fn setup(tag: &str) -> (TempDir, TempDir, HostProcess) {
    let data = TempDir::new(&format!("{tag}-data"));
    let ws = TempDir::new(&format!("{tag}-ws"));
    std::fs::write(ws.path().join("a.txt"), "hello world\n").unwrap();
    let host = HostProcess::start(data.path(), Some(&script()));
    (data, ws, host)
}

#[test]
fn auth_is_required_and_browsers_are_refused() {
    let (_d, _w, host) = setup("auth");
    let a = agent();
    for (auth, origin) in [
        (None, None),
        (Some("Bearer wrong"), None),
        (
            Some(format!("Bearer {}", host.token).as_str()),
            Some("http://evil.example"),
        ),
    ] {
        let mut req = a.post(&host.url("/v1/op/host.status"));
        if let Some(v) = auth {
            req = req.header("Authorization", v);
        }
        if let Some(o) = origin {
            req = req.header("Origin", o);
        }
        let resp = req.send("{}").unwrap();
        assert_eq!(resp.status().as_u16(), 401);
        let v: Value = serde_json::from_str(&resp.into_body().read_to_string().unwrap()).unwrap();
        assert_eq!(v["error"]["code"], "unauthorized");
    }
    assert!(
        !host.stderr().contains(&host.token),
        "the token is never logged"
    );
    let st = host.ok("host.status", json!({}));
    assert_eq!(st["state"], "ready");
    assert_eq!(st["hostEpoch"], host.epoch);
}

#[test]
fn hello_negotiates_and_reports_limits() {
    let (_d, _w, host) = setup("hello");
    let r = host.ok("host.hello", json!({"client": {"name": "t", "version": "0"}, "protocol": {"min": 1, "max": 3}, "features": ["client_calls"]}));
    assert_eq!(r["protocol"], 1);
    assert_eq!(r["hostEpoch"], host.epoch);
    assert!(r["limits"]["maxRequestBytes"].as_u64().unwrap() > 0);
    let e = host.err(
        "host.hello",
        json!({"protocol": {"min": 2, "max": 3}}),
        "incompatible_protocol",
    );
    assert_eq!(e["details"]["max"], 1);
    let models = host.ok("models.list", json!({}));
    assert_eq!(models["connections"][0]["slug"], "script");
    assert_eq!(
        models["connections"][0]["models"][0]["thinkingLevels"],
        json!(["low", "high"])
    );
}

#[test]
fn bad_bodies_get_the_envelope_never_a_crash() {
    let (_d, ws, host) = setup("bodies");
    let (s, v) = host.op_raw("host.status", b"{not json".to_vec());
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (s, v) = host.op_raw("session.create", vec![0xff, 0xfe]);
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (s, v) = host.op_raw("session.get", b"[1,2]".to_vec());
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    host.err("session.get", json!({"sessionId": 5}), "invalid_request");
    host.err(
        "session.create",
        json!({"sessionId": "bad id!", "workspace": {"kind": "host_path", "path": ws.path()}}),
        "invalid_request",
    );
    host.err(
        "session.create",
        json!({"sessionId": "s", "workspace": {"kind": "host_path", "path": "relative/dir"}}),
        "invalid_request",
    );
    host.err("session.create", json!({"sessionId": "s", "workspace": {"kind": "host_path", "path": "/definitely/not/here"}}), "invalid_request");
    let (s, v) = host.op("no.such.op", json!({}));
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (404, Some("operation_unavailable"))
    );
    let big = vec![b' '; 33 * 1024 * 1024];
    let (s, v) = host.op_raw("host.status", big);
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (413, Some("payload_too_large"))
    );
    // Still serving.
    assert_eq!(host.ok("host.status", json!({}))["state"], "ready");
}

#[test]
fn sessions_create_idempotently_list_with_paging_and_filter() {
    let (_d, ws, host) = setup("sessions");
    let other = TempDir::new("sessions-other");
    let first = host.create_session("s_1", ws.path(), "ask");
    assert_eq!(first["revision"], 1);
    assert_eq!(
        host.create_session("s_1", ws.path(), "ask")["createdAt"],
        first["createdAt"],
        "retry returns the same session"
    );
    host.err(
        "session.create",
        json!({"sessionId": "s_1", "workspace": {"kind": "host_path", "path": other.path()}}),
        "operation_conflict",
    );
    for i in 2..=25 {
        let cwd = if i % 2 == 0 { other.path() } else { ws.path() };
        host.create_session(&format!("s_{i}"), cwd, "ask");
    }
    assert_eq!(
        host.ok("session.get", json!({"sessionId": "nope"}))["session"],
        Value::Null
    );
    let mut seen = vec![];
    let mut cursor = Value::Null;
    loop {
        let page = host.ok("session.list", json!({"cursor": cursor, "limit": 7}));
        assert_eq!(page["kind"], "page");
        let rows = page["sessions"].as_array().unwrap();
        assert!(rows.len() <= 7);
        seen.extend(rows.iter().map(|s| s["id"].as_str().unwrap().to_string()));
        cursor = page["nextCursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        (seen.len(), sorted.len()),
        (25, 25),
        "every session exactly once"
    );
    let filtered = host.ok(
        "session.list",
        json!({"filter": {"cwd": ws.path()}, "limit": 100}),
    );
    assert_eq!(filtered["sessions"].as_array().unwrap().len(), 13);
    host.err(
        "session.list",
        json!({"cursor": "not-a-cursor"}),
        "invalid_request",
    );
    host.err("session.list", json!({"limit": 0}), "invalid_request");
    // Archive hides from the list; remove deletes.
    host.ok(
        "session.lifecycle.set",
        json!({"sessionId": "s_3", "state": "archived"}),
    );
    let all = host.ok("session.list", json!({"limit": 100}));
    assert!(all["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["id"] != "s_3"));
    let with = host.ok(
        "session.list",
        json!({"limit": 100, "filter": {"includeArchived": true}}),
    );
    assert_eq!(with["sessions"].as_array().unwrap().len(), 25);
    let rev = host.ok("session.get", json!({"sessionId": "s_5"}))["session"]["revision"]
        .as_u64()
        .unwrap();
    assert_eq!(
        host.ok(
            "session.remove",
            json!({"sessionId": "s_5", "expectedRevision": rev + 7})
        )["kind"],
        "revision_conflict"
    );
    assert_eq!(
        host.ok(
            "session.remove",
            json!({"sessionId": "s_5", "expectedRevision": rev})
        )["kind"],
        "removed"
    );
    assert_eq!(
        host.ok("session.get", json!({"sessionId": "s_5"}))["session"],
        Value::Null
    );
    assert!(!host.data_dir.join("sessions/s_5").exists());
}

#[test]
fn configuration_and_metadata_updates_use_revision_cas() {
    let (_d, ws, host) = setup("cas");
    host.create_session("s", ws.path(), "ask");
    let r = host.ok("session.configuration.update", json!({"sessionId": "s", "expectedRevision": 1, "patch": {"permissionMode": "bypass", "thinkingLevel": "high"}}));
    assert_eq!(r["kind"], "committed");
    assert_eq!(r["session"]["revision"], 2);
    assert_eq!(r["session"]["configuration"]["thinkingLevel"], "high");
    let stale = host.ok(
        "session.configuration.update",
        json!({"sessionId": "s", "expectedRevision": 1, "patch": {"permissionMode": "ask"}}),
    );
    assert_eq!(
        stale,
        json!({"kind": "revision_conflict", "expected": 1, "actual": 2})
    );
    host.err(
        "session.configuration.update",
        json!({"sessionId": "s", "expectedRevision": 2, "patch": {"thinkingLevel": "max"}}),
        "invalid_request",
    );
    host.err(
        "session.configuration.update",
        json!({"sessionId": "s", "expectedRevision": 2, "patch": {"bogus": 1}}),
        "invalid_request",
    );
    host.err(
        "session.configuration.update",
        json!({"sessionId": "nope", "expectedRevision": 2, "patch": {}}),
        "not_found",
    );
    let m = host.ok(
        "session.metadata.update",
        json!({"sessionId": "s", "expectedRevision": 2, "patch": {"name": "Renamed"}}),
    );
    assert_eq!(m["session"]["name"], "Renamed");
    let frames = host.events("s", 0, 50).1;
    assert!(kinds(&frames).contains(&"configuration_changed".into()));
    assert!(kinds(&frames).contains(&"session_updated".into()));
}

#[test]
fn a_turn_streams_text_tools_and_ends_with_its_terminal_frame() {
    let (_d, ws, host) = setup("turn");
    host.create_session("s", ws.path(), "bypass");
    let started = host.start_turn("s", "t_1", "please edit the file");
    assert_eq!(started["kind"], "started");
    // Retrying the same turn id with the same content is idempotent; different content conflicts.
    assert_eq!(
        host.start_turn("s", "t_1", "please edit the file")["turn"]["runId"],
        started["turn"]["runId"]
    );
    host.err(
        "turn.start",
        json!({"sessionId": "s", "turnId": "t_1", "content": {"text": "other"}}),
        "operation_conflict",
    );
    let frames = host.until_terminal("s", 0);
    let k = kinds(&frames);
    assert_eq!(k.first().map(String::as_str), Some("turn_started"));
    assert_eq!(k.last().map(String::as_str), Some("turn_terminal"));
    let text: String = frames
        .iter()
        .filter(|f| f["kind"] == "text_delta")
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "I'll edit a.txt.Done editing.");
    let start = frames.iter().find(|f| f["kind"] == "tool_start").unwrap();
    assert_eq!(start["title"], "Edit a.txt");
    assert_eq!(start["activityKind"], "edit");
    let result = frames.iter().find(|f| f["kind"] == "tool_result").unwrap();
    assert_eq!(result["status"], "completed");
    assert_eq!(result["result"]["kind"], "file_edit");
    assert!(result["result"]["unifiedDiff"]
        .as_str()
        .unwrap()
        .contains("-hello world\n+hello there"));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "hello there\n"
    );
    assert_eq!(frames.last().unwrap()["outcome"], "completed");
    assert_eq!(frames.last().unwrap()["reason"], "end_turn");
    // Offsets are UTF-8 byte positions that chain without gaps.
    let mut expect = std::collections::HashMap::new();
    for f in frames.iter().filter(|f| f["kind"] == "text_delta") {
        let id = f["messageId"].as_str().unwrap().to_string();
        let at = expect.entry(id).or_insert(0u64);
        assert_eq!(f["startOffset"].as_u64().unwrap(), *at);
        *at += f["text"].as_str().unwrap().len() as u64;
    }
    let q = host.ok("turn.query", json!({"sessionId": "s", "turnId": "t_1"}));
    assert_eq!(q["status"], "completed");
    // The transcript has the whole conversation, paged.
    let page = host.ok(
        "session.transcript.page",
        json!({"sessionId": "s", "limit": 3}),
    );
    assert_eq!(page["items"].as_array().unwrap().len(), 3);
    assert_eq!(page["items"][0]["type"], "user");
    let rest = host.ok(
        "session.transcript.page",
        json!({"sessionId": "s", "cursor": page["nextCursor"], "limit": 256}),
    );
    let types: Vec<&str> = rest["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert!(
        types.contains(&"tool_call")
            && types.contains(&"tool_result")
            && types.contains(&"assistant")
    );
    assert_eq!(types.last(), Some(&"turn_state"));
    assert_eq!(
        host.ok("session.get", json!({"sessionId": "s"}))["session"]["name"],
        "please edit the file"
    );
}

#[test]
fn every_terminal_outcome() {
    let (_d, ws, host) = setup("outcomes");
    host.create_session("s", ws.path(), "bypass");
    for (i, (prompt, outcome, reason)) in [
        ("maxtok", "max_tokens", "max_tokens"),
        ("refuse", "refused", "refusal"),
        ("fail", "failed", "error"),
        ("hi", "completed", "end_turn"),
    ]
    .iter()
    .enumerate()
    {
        let after = host.head_seq("s");
        host.start_turn("s", &format!("t_{i}"), prompt);
        let last = host.until_terminal("s", after).pop().unwrap();
        assert_eq!(
            (
                last["outcome"].as_str().unwrap(),
                last["reason"].as_str().unwrap()
            ),
            (*outcome, *reason),
            "{prompt}"
        );
        if *outcome == "failed" {
            assert_eq!(last["failureClass"], "provider_error");
            assert_eq!(last["failureMessage"], "upstream exploded");
        }
    }
    let after = host.head_seq("s");
    host.ok(
        "turn.start",
        json!({"sessionId": "s", "turnId": "t_loop", "content": {"text": "loop"}, "maxSteps": 2}),
    );
    let last = host.until_terminal("s", after).pop().unwrap();
    assert_eq!(
        (last["outcome"].as_str(), last["reason"].as_str()),
        (Some("completed"), Some("step_limit"))
    );
}

#[test]
fn permission_in_ask_mode_and_busy_sessions() {
    let (_d, ws, host) = setup("perm");
    host.create_session("s", ws.path(), "ask");
    host.start_turn("s", "t_1", "please edit");
    let frames = host.follow("s", 0, |f| f["kind"] == "interaction_request");
    let req = &frames.last().unwrap()["interaction"];
    assert_eq!(req["request"]["kind"], "permission");
    assert_eq!(req["request"]["review"], "edit");
    assert_eq!(req["request"]["title"], "Edit a.txt");
    assert!(req["request"]["diff"]["unifiedDiff"]
        .as_str()
        .unwrap()
        .contains("+hello there"));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "hello world\n",
        "nothing written before approval"
    );
    let busy = host.err(
        "turn.start",
        json!({"sessionId": "s", "turnId": "t_2", "content": {"text": "hi"}}),
        "session_busy",
    );
    assert_eq!(busy["details"]["activeTurnId"], "t_1");
    assert!(busy["retryable"].as_bool().unwrap());
    let id = req["interactionId"].as_str().unwrap();
    host.err("interaction.answer", json!({"sessionId": "s", "interactionId": id, "answer": {"kind": "question", "answers": []}}), "operation_conflict");
    host.ok("interaction.answer", json!({"sessionId": "s", "interactionId": id, "answer": {"kind": "permission", "decision": "allow", "rememberForTurn": false}}));
    host.err("interaction.answer", json!({"sessionId": "s", "interactionId": id, "answer": {"kind": "permission", "decision": "deny"}}), "already_resolved");
    let after = frames.last().unwrap()["seq"].as_u64().unwrap();
    let rest = host.until_terminal("s", after);
    assert!(kinds(&rest).contains(&"interaction_closed".into()));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "hello there\n"
    );

    // Denied: the tool fails and the file is untouched.
    std::fs::write(ws.path().join("a.txt"), "hello world\n").unwrap();
    let after = host.head_seq("s");
    host.start_turn("s", "t_3", "please edit again");
    let frames = host.follow("s", after, |f| f["kind"] == "interaction_request");
    let id = frames.last().unwrap()["interaction"]["interactionId"]
        .as_str()
        .unwrap()
        .to_string();
    host.ok("interaction.answer", json!({"sessionId": "s", "interactionId": id, "answer": {"kind": "permission", "decision": "deny"}}));
    let rest = host.until_terminal("s", frames.last().unwrap()["seq"].as_u64().unwrap());
    let result = rest.iter().find(|f| f["kind"] == "tool_result").unwrap();
    assert_eq!(result["status"], "failed");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "hello world\n"
    );
}

/// Issue 57: `turn.start` with `queue` while a turn runs waits in the session's queue
/// (`queued` at its position; a retry answers the same; at most 8, then `session_busy`), a
/// start without it is still busy, `turn.stop` takes a queued turn out (it never starts), and
/// the queued turns start in order, each after the terminal frame of the one before.
#[test]
fn queued_turns_start_in_order_when_the_active_one_ends() {
    let (_d, ws, host) = setup("queue");
    host.create_session("s", ws.path(), "ask");
    host.start_turn("s", "t_1", "please edit");
    let frames = host.follow("s", 0, |f| f["kind"] == "interaction_request");
    let start = |turn: &str, text: &str| json!({"sessionId": "s", "turnId": turn, "content": {"text": text}, "queue": true});
    let queue = |turn: &str, text: &str| host.ok("turn.start", start(turn, text));
    let q = queue("t_2", "second");
    assert_eq!(q["kind"], "queued", "{q}");
    assert_eq!(q["turnId"], "t_2");
    assert_eq!(q["position"], 1);
    assert_eq!(queue("t_2", "second")["position"], 1, "a retry is the same");
    assert_eq!(queue("t_3", "third")["position"], 2);
    assert_eq!(queue("t_gone", "never")["position"], 3);
    let busy = host.err(
        "turn.start",
        json!({"sessionId": "s", "turnId": "t_x", "content": {"text": "hi"}}),
        "session_busy",
    );
    assert_eq!(busy["details"]["activeTurnId"], "t_1");
    let stopped = host.ok("turn.stop", json!({"sessionId": "s", "turnId": "t_gone"}));
    assert_eq!(stopped["status"], "cancelled", "{stopped}");
    for i in 4..10 {
        assert_eq!(queue(&format!("t_{i}"), "more")["kind"], "queued");
    }
    let full = host.err("turn.start", start("t_10", "one too many"), "session_busy");
    assert_eq!(full["details"]["queued"], 8, "{full}");
    let id = frames.last().unwrap()["interaction"]["interactionId"]
        .as_str()
        .unwrap()
        .to_string();
    host.ok("interaction.answer", json!({"sessionId": "s", "interactionId": id, "answer": {"kind": "permission", "decision": "allow"}}));
    let after = frames.last().unwrap()["seq"].as_u64().unwrap();
    let rest = host.follow("s", after, |f| {
        f["kind"] == "turn_terminal" && f["turnId"] == "t_9"
    });
    let order: Vec<(String, String)> = rest
        .iter()
        .filter(|f| f["kind"] == "turn_started" || f["kind"] == "turn_terminal")
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (s("kind"), s("turnId"))
        })
        .collect();
    let mut want = vec![("turn_terminal".to_string(), "t_1".to_string())];
    for t in ["t_2", "t_3", "t_4", "t_5", "t_6", "t_7", "t_8", "t_9"] {
        want.push(("turn_started".into(), t.into()));
        want.push(("turn_terminal".into(), t.into()));
    }
    assert_eq!(order, want);
    let t2 = host.ok("turn.query", json!({"sessionId": "s", "turnId": "t_2"}));
    assert_eq!(t2["status"], "completed", "{t2}");
    host.err(
        "turn.query",
        json!({"sessionId": "s", "turnId": "t_gone"}),
        "not_found",
    );
}

#[test]
fn explore_mode_refuses_writes_and_outside_paths_need_a_boundary_approval() {
    let (_d, ws, host) = setup("explore");
    host.create_session("s", ws.path(), "explore");
    host.start_turn("s", "t_1", "please edit");
    let frames = host.until_terminal("s", 0);
    let result = frames.iter().find(|f| f["kind"] == "tool_result").unwrap();
    assert_eq!(result["status"], "failed");
    assert!(result["result"]["text"]
        .as_str()
        .unwrap()
        .contains("explore"));
    assert!(!kinds(&frames).contains(&"interaction_request".into()));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "hello world\n"
    );

    let after = host.head_seq("s");
    host.start_turn("s", "t_2", "write outside");
    let frames = host.follow("s", after, |f| f["kind"] == "interaction_request");
    let i = &frames.last().unwrap()["interaction"];
    assert_eq!(i["request"]["kind"], "sandbox_boundary");
    assert!(i["request"]["paths"][0]["path"]
        .as_str()
        .unwrap()
        .ends_with("hostname"));
    host.ok("interaction.answer", json!({"sessionId": "s", "interactionId": i["interactionId"], "answer": {"kind": "sandbox_boundary", "decision": "deny"}}));
    let rest = host.until_terminal("s", frames.last().unwrap()["seq"].as_u64().unwrap());
    assert_eq!(
        rest.iter().find(|f| f["kind"] == "tool_result").unwrap()["status"],
        "failed"
    );
}

#[test]
fn questions_and_plans() {
    let (_d, ws, host) = setup("ask");
    host.create_session("s", ws.path(), "ask");
    host.start_turn("s", "t_1", "ask me");
    let frames = host.follow("s", 0, |f| f["kind"] == "interaction_request");
    let i = &frames.last().unwrap()["interaction"];
    assert_eq!(i["request"]["questions"][0]["options"][1]["label"], "pg");
    host.ok("interaction.answer", json!({"sessionId": "s", "interactionId": i["interactionId"], "answer": {"kind": "question", "answers": ["pg"]}}));
    let rest = host.until_terminal("s", frames.last().unwrap()["seq"].as_u64().unwrap());
    let r = rest.iter().find(|f| f["kind"] == "tool_result").unwrap();
    assert_eq!(r["result"]["value"]["answers"], json!(["pg"]));

    let after = host.head_seq("s");
    host.start_turn("s", "t_2", "plan it");
    let frames = host.until_terminal("s", after);
    let plan = frames.iter().find(|f| f["kind"] == "plan_update").unwrap();
    assert_eq!(
        plan["entries"][1],
        json!({"content": "Write", "status": "in_progress", "priority": "high"})
    );
}

#[test]
fn stop_cancels_promptly_closes_interactions_and_kills_commands() {
    let (_d, ws, host) = setup("stop");
    host.create_session("s", ws.path(), "ask");
    // A pending permission is closed as turn_stopped.
    host.start_turn("s", "t_1", "please edit");
    let frames = host.follow("s", 0, |f| f["kind"] == "interaction_request");
    let run = frames[0]["runId"].as_str().unwrap().to_string();
    host.err(
        "turn.stop",
        json!({"sessionId": "s", "turnId": "t_1", "runId": "r_other"}),
        "operation_conflict",
    );
    host.ok(
        "turn.stop",
        json!({"sessionId": "s", "turnId": "t_1", "runId": run}),
    );
    let rest = host.until_terminal("s", frames.last().unwrap()["seq"].as_u64().unwrap());
    let closed = rest
        .iter()
        .find(|f| f["kind"] == "interaction_closed")
        .unwrap();
    assert_eq!(
        closed["outcome"],
        json!({"kind": "closure", "reason": "turn_stopped"})
    );
    assert_eq!(rest.last().unwrap()["outcome"], "cancelled");

    // A model call in a long delay is dropped.
    host.ok("session.configuration.update", json!({"sessionId": "s", "expectedRevision": host.ok("session.get", json!({"sessionId": "s"}))["session"]["revision"], "patch": {"permissionMode": "bypass"}}));
    let after = host.head_seq("s");
    host.start_turn("s", "t_2", "slow");
    host.follow("s", after, |f| f["kind"] == "text_delta");
    let t0 = Instant::now();
    host.ok("turn.stop", json!({"sessionId": "s", "turnId": "t_2"}));
    let rest = host.until_terminal("s", after);
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "stop took {:?}",
        t0.elapsed()
    );
    assert_eq!(rest.last().unwrap()["outcome"], "cancelled");

    // A running command's whole process group is killed.
    let after = host.head_seq("s");
    host.start_turn("s", "t_3", "run sleep");
    let frames = host.follow("s", after, |f| f["kind"] == "tool_output_delta");
    assert!(frames.last().unwrap()["chunk"]
        .as_str()
        .unwrap()
        .contains("started"));
    host.ok("turn.stop", json!({"sessionId": "s", "turnId": "t_3"}));
    let rest = host.until_terminal("s", frames.last().unwrap()["seq"].as_u64().unwrap());
    let result = rest.iter().find(|f| f["kind"] == "tool_result").unwrap();
    assert_eq!(result["status"], "cancelled");
    std::thread::sleep(Duration::from_millis(200));
    let ps = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&ps.stdout)
            .lines()
            .any(|l| l.contains("sleep 30; echo never")),
        "the command's processes are gone"
    );
}

#[test]
fn the_stream_resumes_with_after_and_asks_for_resync_when_it_cannot() {
    let (_d, ws, host) = setup("stream");
    host.create_session("s", ws.path(), "bypass");
    host.start_turn("s", "t_1", "hi");
    let all = host.until_terminal("s", 0);
    let mid = all[2]["seq"].as_u64().unwrap();
    let (status, resumed) = host.events("s", mid, 50);
    assert_eq!(status, 200);
    let data: Vec<&Value> = resumed.iter().filter(|f| f["seq"].is_number()).collect();
    assert_eq!(data.len(), all.len() - 3);
    assert_eq!(data[0], &all[3]);
    assert_eq!(resumed.last().unwrap()["kind"], "stream_end");
    // Heartbeats arrive on a quiet stream (10 s) — not waited for here; window end is.
    let (status, lines) = host.events("s", all.last().unwrap()["seq"].as_u64().unwrap(), 100);
    assert_eq!((status, lines.len()), (200, 1));
    assert_eq!(lines[0]["reason"], "window_elapsed");
    // after past the head, unknown session, stale epoch.
    let (status, lines) = host.events("s", 10_000, 50);
    assert_eq!(
        (status, lines[0]["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (status, _) = host.events("nope", 0, 50);
    assert_eq!(status, 404);
    let resp = agent()
        .get(&host.url("/v1/events?sessionId=s&after=0&epoch=he_old"))
        .header("Authorization", format!("Bearer {}", host.token))
        .call()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 410);
    // More frames than the ring holds: an old cursor gets 410 resync_required.
    host.start_turn("s", "t_2", "many");
    let head_before = all.last().unwrap()["seq"].as_u64().unwrap();
    host.follow("s", head_before, |f| f["kind"] == "turn_terminal");
    let (status, lines) = host.events("s", 1, 50);
    assert_eq!(status, 410);
    assert_eq!(lines[0]["error"]["code"], "resync_required");
    assert_eq!(lines[0]["error"]["details"]["reason"], "ring_evicted");
    let open = host.ok("session.open", json!({"sessionId": "s"}));
    let (status, _) = host.events("s", open["seq"].as_u64().unwrap(), 50);
    assert_eq!(status, 200, "re-opening gives a usable cursor");
}

#[test]
fn no_provider_means_sessions_work_and_prompts_say_what_to_set() {
    let data = TempDir::new("noprov");
    let ws = TempDir::new("noprov-ws");
    let host = HostProcess::start(data.path(), None);
    host.create_session("s", ws.path(), "ask");
    let e = host.err(
        "turn.start",
        json!({"sessionId": "s", "turnId": "t", "content": {"text": "hi"}}),
        "capability_unavailable",
    );
    let msg = e["message"].as_str().unwrap();
    for v in [
        "MAKA_OPENAI_BASE_URL",
        "MAKA_MODEL",
        "MAKA_OPENAI_API_KEY",
        "MAKA_SCRIPT",
        "maka-acp login",
    ] {
        assert!(msg.contains(v), "message names {v}: {msg}");
    }
    assert_eq!(
        host.ok("session.list", json!({}))["sessions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn kill_9_mid_turn_loses_nothing_acknowledged_and_the_turn_can_resume() {
    let (data, ws, mut host) = setup("crash");
    host.create_session("s", ws.path(), "ask");
    host.start_turn("s", "t_1", "hi");
    host.until_terminal("s", 0);
    host.start_turn("s", "t_2", "please edit");
    let frames = host.follow("s", 0, |f| {
        f["kind"] == "interaction_request" && f["interaction"]["turnId"] == "t_2"
    });
    let pending_id = frames.last().unwrap()["interaction"]["interactionId"]
        .as_str()
        .unwrap()
        .to_string();
    host.kill9();
    // A crash mid-append leaves a torn line; recovery drops it.
    let transcript = data.path().join("sessions/s/transcript.jsonl");
    let before = std::fs::read_to_string(&transcript).unwrap();
    std::fs::write(
        &transcript,
        format!("{before}{{\"messageSeq\":999,\"ts\":1,\"turnId\":\"t_2\",\"ty"),
    )
    .unwrap();
    // A corrupt neighbour must not stop the host.
    std::fs::create_dir_all(data.path().join("sessions/junk")).unwrap();
    std::fs::write(data.path().join("sessions/junk/session.json"), "{{{").unwrap();

    let host = HostProcess::start(data.path(), Some(&script()));
    // Records are read when first needed: the listing reads the corrupt one, logs and skips it.
    let sessions = host.ok("session.list", json!({}));
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 1);
    assert!(
        host.stderr_contains("junk"),
        "the corrupt session is logged: {}",
        host.stderr()
    );
    let q = host.ok("turn.query", json!({"sessionId": "s", "turnId": "t_2"}));
    assert_eq!(
        (q["status"].as_str(), q["failureClass"].as_str()),
        (Some("failed"), Some("crash"))
    );
    let items = host.ok(
        "session.transcript.page",
        json!({"sessionId": "s", "limit": 256}),
    )["items"]
        .as_array()
        .unwrap()
        .clone();
    let texts: Vec<String> = items
        .iter()
        .filter(|i| i["type"] == "user")
        .map(|i| i["content"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        texts,
        vec!["hi", "please edit"],
        "every acknowledged user message survived"
    );
    assert!(
        items.iter().all(|i| i["messageSeq"] != 999),
        "the torn line is gone"
    );
    let closure = items
        .iter()
        .rfind(|i| {
            i["type"] == "interaction" && i["interaction"]["interactionId"] == pending_id.as_str()
        })
        .unwrap();
    assert_eq!(
        closure["interaction"]["outcome"],
        json!({"kind": "closure", "reason": "host_restarted"})
    );
    let plan = host.ok("turn.resume.query", json!({"sessionId": "s"}));
    assert_eq!(plan["disposition"], "ready");
    assert_eq!(plan["sourceTurnId"], "t_2");
    host.ok("session.configuration.update", json!({"sessionId": "s", "expectedRevision": host.ok("session.get", json!({"sessionId": "s"}))["session"]["revision"], "patch": {"permissionMode": "bypass"}}));
    let bad = host.ok("turn.resume.start", json!({"sessionId": "s", "turnId": "t_r0", "sourceRunId": plan["sourceRunId"], "sourceHighWater": 1}));
    assert_eq!(
        bad,
        json!({"kind": "parked", "reason": "safety_check_failed"})
    );
    let started = host.ok("turn.resume.start", json!({"sessionId": "s", "turnId": "t_r", "sourceRunId": plan["sourceRunId"], "sourceHighWater": plan["sourceHighWater"]}));
    assert_eq!(started["kind"], "started");
    assert_eq!(started["turn"]["origin"], "resume");
    let frames = host.until_terminal("s", 0);
    assert_eq!(frames.last().unwrap()["outcome"], "completed");
    assert_eq!(
        host.ok("turn.resume.query", json!({"sessionId": "s"}))["disposition"],
        "parked"
    );
}

#[test]
fn client_calls_delegate_file_reads_to_the_editor() {
    let data = TempDir::new("calls");
    let ws = TempDir::new("calls-ws");
    std::fs::write(ws.path().join("a.txt"), "on disk\n").unwrap();
    let script = json!({"default": [[{"tool": "read_file", "args": {"path": "a.txt"}}], [{"text": "read it"}]]});
    let host = HostProcess::start(data.path(), Some(&script));
    host.create_session("s", ws.path(), "bypass");
    host.err(
        "client.capability.replace",
        json!({"sessionId": "s", "services": ["teleport"]}),
        "invalid_request",
    );
    host.ok(
        "client.capability.replace",
        json!({"sessionId": "s", "services": ["fs.read_text_file"]}),
    );
    host.start_turn("s", "t", "read");
    let frames = host.follow("s", 0, |f| f["kind"] == "client_call");
    let call = frames.last().unwrap();
    assert_eq!(call["service"], "fs.read_text_file");
    assert!(call["input"]["path"].as_str().unwrap().ends_with("/a.txt"));
    host.ok("client.call.result", json!({"sessionId": "s", "invocationId": call["invocationId"], "outcome": {"ok": true, "result": {"content": "unsaved buffer\n"}}}));
    // A duplicate result is ignored.
    host.ok("client.call.result", json!({"sessionId": "s", "invocationId": call["invocationId"], "outcome": {"ok": true, "result": {}}}));
    let rest = host.until_terminal("s", call["seq"].as_u64().unwrap());
    let r = rest.iter().find(|f| f["kind"] == "tool_result").unwrap();
    assert_eq!(r["result"]["text"], "unsaved buffer\n");
}

#[test]
fn shutdown_drains_and_stdin_eof_exits() {
    let (_d, ws, mut host) = setup("shutdown");
    host.create_session("s", ws.path(), "bypass");
    let resp = agent()
        .post(&host.url("/v1/shutdown"))
        .header("Authorization", format!("Bearer {}", host.token))
        .send(r#"{"drainMs": 500}"#)
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let status = host
        .wait_exit(Duration::from_secs(10))
        .expect("host exits after shutdown");
    assert!(status.success());

    let (_d2, _w2, mut host) = setup("eof");
    host.close_stdin();
    let status = host
        .wait_exit(Duration::from_secs(10))
        .expect("host exits when stdin closes");
    assert!(status.success());
}

#[test]
fn archived_sessions_draining_hosts_and_stream_capacity_are_refused() {
    let (_d, ws, host) = setup("refusals");
    host.create_session("s", ws.path(), "bypass");
    host.ok(
        "session.lifecycle.set",
        json!({"sessionId": "s", "state": "archived"}),
    );
    host.err(
        "turn.start",
        json!({"sessionId": "s", "turnId": "t", "content": {"text": "hi"}}),
        "session_archived",
    );
    host.err(
        "session.configuration.update",
        json!({"sessionId": "s", "expectedRevision": 2, "patch": {}}),
        "session_archived",
    );
    host.ok(
        "session.lifecycle.set",
        json!({"sessionId": "s", "state": "active"}),
    );

    // 64 open streams fill the capacity; the 65th is refused with 429.
    let streams: Vec<_> = (0..64)
        .map(|_| {
            agent()
                .get(&host.url("/v1/events?sessionId=s&after=0&waitMs=3000"))
                .header("Authorization", format!("Bearer {}", host.token))
                .call()
                .unwrap()
        })
        .collect();
    let (status, lines) = host.events("s", 0, 10);
    assert_eq!(status, 429);
    assert_eq!(lines[0]["error"]["code"], "capacity_exceeded");
    drop(streams);
    // The host frees a slot when its stream thread notices the client left (at the latest when
    // the 3 s window ends); wait for that, bounded, before opening more streams.
    let t0 = Instant::now();
    while host.events("s", 0, 10).0 == 429 {
        assert!(t0.elapsed() < Duration::from_secs(10), "slots never freed");
        std::thread::sleep(Duration::from_millis(50));
    }

    // While draining (a slow turn keeps the host alive), new work is refused.
    host.start_turn("s", "t_slow", "slow");
    host.follow("s", 0, |f| f["kind"] == "text_delta");
    let resp = agent()
        .post(&host.url("/v1/shutdown"))
        .header("Authorization", format!("Bearer {}", host.token))
        .send(r#"{"drainMs": 60000}"#)
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    host.err(
        "session.create",
        json!({"sessionId": "s2", "workspace": {"kind": "host_path", "path": ws.path()}}),
        "host_draining",
    );
    assert_eq!(host.ok("host.status", json!({}))["state"], "draining");
}

#[test]
fn a_reader_that_keeps_up_loses_nothing_and_one_that_stops_cannot_stall_the_turn() {
    let (_d, ws, host) = setup("flow");
    host.create_session("s", ws.path(), "bypass");
    // A burst far larger than the ring: the producer waits for the live reader, which sees
    // every frame in order (follow() asserts seq continuity and a 200 for every window).
    host.start_turn("s", "t_1", "burst");
    let frames = host.until_terminal("s", 0);
    let deltas = frames
        .iter()
        .filter(|f| f["kind"] == "text_delta" && f["text"] == "y")
        .count();
    assert_eq!(deltas, 30000);

    // A reader that opens a stream and never reads: the turn still finishes promptly.
    let head = host.head_seq("s");
    let mut stalled = std::net::TcpStream::connect(("127.0.0.1", host.port)).unwrap();
    use std::io::Write;
    write!(stalled, "GET /v1/events?sessionId=s&after={head}&waitMs=60000 HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {}\r\n\r\n", host.port, host.token).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    host.start_turn("s", "t_2", "burst again");
    let frames = host.until_terminal("s", head);
    assert_eq!(frames.last().unwrap()["outcome"], "completed");
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "the stalled reader held the turn for {:?}",
        t0.elapsed()
    );
    drop(stalled);
}

/// Issue 56: a session belongs to the principal that made it (`Maka-Principal` on its
/// `session.create`), kept with the session across a restart. Another principal is answered,
/// for every operation that names it and for its event stream, exactly as for a session that
/// does not exist; its listing shows only its own; the machine's user (no principal) sees all.
#[test]
fn sessions_belong_to_their_principal_and_another_is_answered_as_for_none() {
    let (data, ws, mut host) = setup("owners");
    let create = |who: Option<&str>, id: &str| {
        let (status, env) = host.op_as(
            who,
            "session.create",
            json!({"sessionId": id, "workspace": {"kind": "host_path", "path": ws.path()}}),
        );
        assert_eq!((status, &env["ok"]), (200, &json!(true)), "{env}");
        assert_eq!(
            env["result"]["owner"],
            who.map_or(Value::Null, |w| json!(w))
        );
    };
    create(Some("alice"), "s_alice");
    create(None, "s_machine");
    let (_, started) = host.op_as(
        Some("alice"),
        "turn.start",
        json!({"sessionId": "s_alice", "turnId": "t_1", "content": {"text": "hi"}}),
    );
    assert_eq!(started["ok"], true, "{started}");
    host.until_terminal("s_alice", 0);

    let listed = |who: Option<&str>| -> Vec<String> {
        let (_, env) = host.op_as(who, "session.list", json!({}));
        let mut ids: Vec<String> = env["result"]["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(listed(Some("alice")), ["s_alice"]);
    assert_eq!(listed(Some("bob")), Vec::<String>::new());
    assert_eq!(listed(None), ["s_alice", "s_machine"]);

    // Every operation that names a session, with an input that parses; bob on alice's session
    // gets exactly what bob gets on a session that does not exist.
    let inputs = |sid: &str| -> Vec<(&'static str, Value)> {
        vec![
            ("session.get", json!({"sessionId": sid})),
            ("session.open", json!({"sessionId": sid})),
            (
                "session.configuration.update",
                json!({"sessionId": sid, "expectedRevision": 1, "patch": {}}),
            ),
            (
                "session.metadata.update",
                json!({"sessionId": sid, "expectedRevision": 1, "patch": {"name": "x"}}),
            ),
            (
                "session.lifecycle.set",
                json!({"sessionId": sid, "state": "archived"}),
            ),
            (
                "session.remove",
                json!({"sessionId": sid, "expectedRevision": 1}),
            ),
            ("session.release", json!({"sessionId": sid})),
            ("session.transcript.page", json!({"sessionId": sid})),
            (
                "turn.start",
                json!({"sessionId": sid, "turnId": "t_2", "content": {"text": "hi"}}),
            ),
            ("turn.stop", json!({"sessionId": sid, "turnId": "t_1"})),
            ("turn.query", json!({"sessionId": sid, "turnId": "t_1"})),
            ("turn.resume.query", json!({"sessionId": sid})),
            (
                "turn.resume.start",
                json!({"sessionId": sid, "turnId": "t_3", "sourceRunId": "r", "sourceHighWater": 0}),
            ),
            (
                "interaction.answer",
                json!({"sessionId": sid, "interactionId": "i", "answer": {"kind": "permission", "decision": "allow"}}),
            ),
            (
                "client.capability.replace",
                json!({"sessionId": sid, "services": []}),
            ),
            (
                "client.call.result",
                json!({"sessionId": sid, "invocationId": "c", "outcome": {"ok": true}}),
            ),
            (
                "client.call.input",
                json!({"sessionId": sid, "invocationId": "c"}),
            ),
            ("session.turns", json!({"sessionId": sid})),
            (
                "session.branch.create",
                json!({"sourceSessionId": sid, "targetSessionId": "s_copy"}),
            ),
            (
                "session.revision.create",
                json!({"sessionId": sid, "label": "x"}),
            ),
            ("session.revisions", json!({"sessionId": sid})),
            (
                "session.revision.abandon",
                json!({"sessionId": sid, "revisionId": "r"}),
            ),
            (
                "turn.message.submit",
                json!({"sessionId": sid, "messageId": "m", "content": {"text": "x"}}),
            ),
            ("memory.query", json!({"sessionId": sid})),
            (
                "memory.mutate",
                json!({"expectedRevision": 1, "change": {"kind": "add", "scope": "session", "sessionId": sid, "text": "x"}}),
            ),
            ("usage.query", json!({"sessionId": sid})),
            ("plan.query", json!({"sessionId": sid})),
            (
                "plan.control",
                json!({"sessionId": sid, "expectedRevision": 0, "action": {"kind": "approve"}}),
            ),
            (
                "plan.turn.start",
                json!({"sessionId": sid, "turnId": "t_4"}),
            ),
            (
                "artifact.ingest",
                json!({"kind": "status", "sessionId": sid, "uploadId": "u"}),
            ),
            ("artifact.query", json!({"kind": "list", "sessionId": sid})),
            (
                "artifact.delete",
                json!({"sessionId": sid, "artifactId": "a"}),
            ),
            ("goal.arm", json!({"sessionId": sid, "objective": "x"})),
            (
                "goal.control",
                json!({"sessionId": sid, "goalId": "g", "action": "pause"}),
            ),
            ("goal.query", json!({"sessionId": sid})),
            ("subagent.list", json!({"sessionId": sid})),
            ("skills.list", json!({"sessionId": sid})),
        ]
    };
    let as_unknown = |v: &Value| -> String { v.to_string().replace("s_nobod_", "ID") };
    let as_alices = |v: &Value| -> String { v.to_string().replace("s_alice", "ID") };
    for ((key, on_alices), (_, on_none)) in inputs("s_alice").into_iter().zip(inputs("s_nobod_")) {
        let (status_a, bob_on_alices) = host.op_as(Some("bob"), key, on_alices.clone());
        let (status_n, bob_on_none) = host.op_as(Some("bob"), key, on_none);
        assert!(
            !bob_on_none.to_string().contains("bad input"),
            "{key}: the input does not parse: {bob_on_none}"
        );
        assert_eq!(
            (status_a, as_alices(&bob_on_alices)),
            (status_n, as_unknown(&bob_on_none)),
            "{key}: bob is told something about alice's session"
        );
    }
    // The gate is what answered: alice herself is served (a read of each kind).
    for key in [
        "session.get",
        "session.turns",
        "usage.query",
        "artifact.query",
    ] {
        let input = inputs("s_alice")
            .into_iter()
            .find(|(k, _)| *k == key)
            .unwrap()
            .1;
        let (_, env) = host.op_as(Some("alice"), key, input);
        assert_eq!(env["ok"], true, "{key} for alice: {env}");
    }
    let (_, got) = host.op_as(Some("bob"), "session.get", json!({"sessionId": "s_alice"}));
    assert_eq!(got["result"]["session"], Value::Null, "{got}");
    // The event stream: the same refusal as for no session.
    let (sa, fa) = host.events_as(Some("bob"), "s_alice", 0, 100);
    let (sn, fn_) = host.events_as(Some("bob"), "s_nobod_", 0, 100);
    assert_eq!((sa, as_alices(&json!(fa))), (sn, as_unknown(&json!(fn_))));
    assert_eq!(sa, 404, "{fa:?}");
    let (status, frames) = host.events_as(Some("alice"), "s_alice", 0, 100);
    assert_eq!(status, 200, "{frames:?}");
    // A name that is not one is refused.
    let (status, env) = host.op_as(Some("bob smith"), "session.list", json!({}));
    assert_eq!(
        (status, &env["error"]["code"]),
        (400, &json!("invalid_request")),
        "{env}"
    );

    // The owner is durable: after a restart the host still knows whose each session is.
    host.kill9();
    let host = HostProcess::start(data.path(), Some(&script()));
    let (_, env) = host.op_as(Some("bob"), "session.list", json!({}));
    assert_eq!(env["result"]["sessions"], json!([]), "{env}");
    let (_, env) = host.op_as(
        Some("alice"),
        "session.get",
        json!({"sessionId": "s_alice"}),
    );
    assert_eq!(env["result"]["session"]["owner"], "alice", "{env}");
    let (_, env) = host.op_as(
        Some("bob"),
        "session.turns",
        json!({"sessionId": "s_alice"}),
    );
    assert_eq!(env["error"]["code"], "not_found", "{env}");
}

/// Issue 56: memory is each principal's own. `memory.query` shows a principal only its
/// entries; another's entry is, for `update` and `forget`, exactly an entry that does not
/// exist; the model's `remember` keeps a note for the session's owner; a session's turns are
/// told only its owner's notes (a principal's session none of the machine's user's, and the
/// machine's user's sessions none of a principal's); the machine's user sees every entry. The
/// owner is durable.
#[test]
fn memory_is_each_principals_own_and_a_session_is_told_only_its_owners_notes() {
    let mut rules = script();
    rules["rules"].as_array_mut().unwrap().splice(
        0..0,
        [
            json!({"when": "show system", "responses": [[{"echo": "system"}]]}),
            json!({"when": "remember mine", "responses": [
                [{"tool": "remember", "args": {"text": "ALICE REMEMBERED", "scope": "user"}}],
                [{"text": "Noted."}]]}),
        ],
    );
    let data = TempDir::new("memory-owners-data");
    let ws = TempDir::new("memory-owners-ws");
    let mut host = HostProcess::start(data.path(), Some(&rules));
    for (who, id) in [
        (Some("alice"), "s_alice"),
        (Some("bob"), "s_bob"),
        (None, "s_machine"),
    ] {
        let (_, env) = host.op_as(
            who,
            "session.create",
            json!({"sessionId": id, "workspace": {"kind": "host_path", "path": ws.path()},
                   "configuration": {"permissionMode": "bypass"}}),
        );
        assert_eq!(env["ok"], true, "{env}");
    }
    let revision = |host: &HostProcess, who: Option<&str>| -> u64 {
        let (_, env) = host.op_as(who, "memory.query", json!({}));
        env["result"]["revision"].as_u64().unwrap()
    };
    let mutate = |host: &HostProcess, who: Option<&str>, change: Value| -> (u16, Value) {
        let expected = revision(host, who);
        host.op_as(
            who,
            "memory.mutate",
            json!({"expectedRevision": expected, "change": change}),
        )
    };
    let add = |who: Option<&str>, scope: &str, session: Option<&str>, text: &str| -> String {
        let mut change = json!({"kind": "add", "scope": scope, "text": text});
        if let Some(s) = session {
            change["sessionId"] = json!(s);
        }
        let (_, env) = mutate(&host, who, change);
        assert_eq!(env["result"]["kind"], "committed", "{env}");
        env["result"]["entry"]["id"].as_str().unwrap().to_string()
    };
    // Every note in the same workspace: only the owner tells them apart.
    add(None, "user", None, "MACHINE USER");
    add(None, "workspace", Some("s_machine"), "MACHINE WS");
    let alices = add(Some("alice"), "user", None, "ALICE USER");
    add(Some("alice"), "workspace", Some("s_alice"), "ALICE WS");
    add(Some("bob"), "user", None, "BOB USER");
    add(Some("bob"), "workspace", Some("s_bob"), "BOB WS");

    let texts = |host: &HostProcess, who: Option<&str>, input: Value| -> Vec<String> {
        let (_, env) = host.op_as(who, "memory.query", input);
        let mut t: Vec<String> = env["result"]["entries"]
            .as_array()
            .unwrap_or_else(|| panic!("{env}"))
            .iter()
            .map(|e| e["text"].as_str().unwrap().to_string())
            .collect();
        t.sort();
        t
    };
    let alice_query = texts(&host, Some("alice"), json!({}));
    assert_eq!(alice_query, ["ALICE USER", "ALICE WS"]);
    assert_eq!(
        texts(&host, Some("alice"), json!({"sessionId": "s_alice"})),
        alice_query
    );
    assert_eq!(texts(&host, Some("bob"), json!({})), ["BOB USER", "BOB WS"]);
    assert_eq!(
        texts(&host, None, json!({})).len(),
        6,
        "the machine's user sees all"
    );
    assert_eq!(
        texts(&host, None, json!({"sessionId": "s_machine"})),
        ["MACHINE USER", "MACHINE WS"]
    );

    // Bob changing or forgetting alice's entry is answered as an entry that does not exist.
    let (_, env) = host.op_as(Some("alice"), "memory.query", json!({}));
    assert!(env["result"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["owner"] == "alice"));
    for change in [
        json!({"kind": "update", "id": "ID", "text": "BOB WAS HERE"}),
        json!({"kind": "forget", "id": "ID"}),
    ] {
        let on = |id: &str| {
            let c = change.to_string().replace("ID", id);
            let (status, env) = mutate(&host, Some("bob"), serde_json::from_str(&c).unwrap());
            (status, env.to_string().replace(id, "ID"))
        };
        let (on_alices, on_none) = (on(&alices), on("mem_0123456789abcdef"));
        assert_eq!(
            on_alices, on_none,
            "{change}: bob is told about alice's entry"
        );
        assert_eq!(on_none.0, 404, "{on_none:?}");
    }
    assert_eq!(texts(&host, Some("alice"), json!({})), alice_query);

    // The same from a session of bob's: `/memory forget` of alice's entry.
    let (_, env) = host.op_as(
        Some("bob"),
        "turn.start",
        json!({"sessionId": "s_bob", "turnId": "t_f", "content": {"text": format!("/memory forget {alices}")}}),
    );
    assert_eq!(env["ok"], true, "{env}");
    let said = |frames: &[Value]| -> String {
        frames
            .iter()
            .filter(|f| f["kind"] == "text_delta")
            .map(|f| f["text"].as_str().unwrap())
            .collect()
    };
    let told = said(&host.until_terminal("s_bob", 0));
    assert!(told.contains("not found"), "{told}");
    assert_eq!(texts(&host, Some("alice"), json!({})), alice_query);

    // The model's `remember` in alice's session keeps a note for alice.
    let turn = |host: &HostProcess, who: Option<&str>, session: &str, id: &str, text: &str| {
        let after = host.head_seq(session);
        let (_, env) = host.op_as(
            who,
            "turn.start",
            json!({"sessionId": session, "turnId": id, "content": {"text": text}}),
        );
        assert_eq!(env["ok"], true, "{env}");
        said(&host.until_terminal(session, after))
    };
    turn(&host, Some("alice"), "s_alice", "t_r", "remember mine");
    assert_eq!(
        texts(&host, Some("alice"), json!({})),
        ["ALICE REMEMBERED", "ALICE USER", "ALICE WS"]
    );
    assert_eq!(texts(&host, Some("bob"), json!({})), ["BOB USER", "BOB WS"]);

    // What each session's model is told: its owner's notes and nobody else's.
    let mentions = |system: &str| -> Vec<&str> {
        [
            "ALICE REMEMBERED",
            "ALICE USER",
            "ALICE WS",
            "BOB USER",
            "BOB WS",
            "MACHINE USER",
            "MACHINE WS",
        ]
        .into_iter()
        .filter(|n| system.contains(n))
        .collect()
    };
    let system = turn(&host, Some("alice"), "s_alice", "t_s", "show system");
    assert_eq!(
        mentions(&system),
        ["ALICE REMEMBERED", "ALICE USER", "ALICE WS"],
        "{system}"
    );
    let system = turn(&host, Some("bob"), "s_bob", "t_s", "show system");
    assert_eq!(mentions(&system), ["BOB USER", "BOB WS"], "{system}");
    let system = turn(&host, None, "s_machine", "t_s", "show system");
    assert_eq!(
        mentions(&system),
        ["MACHINE USER", "MACHINE WS"],
        "{system}"
    );

    // Durable: after a restart each entry is still its owner's.
    host.kill9();
    let host = HostProcess::start(data.path(), Some(&rules));
    assert_eq!(texts(&host, Some("bob"), json!({})), ["BOB USER", "BOB WS"]);
    assert_eq!(texts(&host, None, json!({})).len(), 7);
}
