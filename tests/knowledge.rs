//! Memory and workspace instructions over the real binaries: `_maka/memory/*` with its
//! revision checks, the `remember` tool and `/memory`, and `AGENTS.md` plus memory reaching the
//! model (checked at a fake OpenAI-compatible server). Every line checked against the schema.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::fake_openai::{fake_server, sse};
use support::host::TempDir;
use support::{error_of, AgentProcess};

fn scripted(data: &std::path::Path) -> AgentProcess {
    let script = json!({
        "rules": [{"when": "remember", "responses": [
            [{"tool": "remember", "args": {"text": "The user prefers tabs.", "scope": "workspace"}}],
            [{"text": "Noted."}]]}],
        "default": [[{"text": "Hello."}]]
    });
    let mut a = AgentProcess::scripted(&script, data);
    a.initialize();
    a
}

#[test]
fn memory_is_revision_checked_and_the_model_and_person_can_both_change_it() {
    let data = TempDir::new("mem-data");
    let ws = TempDir::new("mem-ws");
    let mut a = scripted(data.path());
    let s = a.new_session(ws.path());

    let empty = a.call_ok("_maka/memory/query", json!({}));
    assert_eq!(empty, json!({"revision": 1, "entries": []}));
    let added = a.call_ok(
        "_maka/memory/mutate",
        json!({"expectedRevision": 1, "change": {"kind": "add", "scope": "user", "text": "Answer briefly."}}),
    );
    assert_eq!(added["kind"], "committed");
    assert_eq!(added["revision"], 2);
    assert_eq!(added["entry"]["scope"], json!({"kind": "user"}));
    assert_eq!(added["entry"]["source"], "user");
    // A stale revision: a conflict result, nothing changed.
    let stale = a.call_ok(
        "_maka/memory/mutate",
        json!({"expectedRevision": 1, "change": {"kind": "add", "scope": "user", "text": "x"}}),
    );
    assert_eq!(
        stale,
        json!({"kind": "revision_conflict", "expected": 1, "actual": 2})
    );
    // The convention: fields named, unknown entries -32002.
    let (resp, _) = a.call(
        "_maka/memory/mutate",
        json!({"change": {"kind": "forget", "id": "x"}}),
    );
    assert!(
        error_of(&resp)["message"]
            .as_str()
            .unwrap()
            .contains("`expectedRevision`"),
        "{resp}"
    );
    let (resp, _) = a.call(
        "_maka/memory/mutate",
        json!({"expectedRevision": 2, "change": {"kind": "shout"}}),
    );
    assert_eq!(error_of(&resp)["code"], -32602, "{resp}");
    let (resp, _) = a.call(
        "_maka/memory/mutate",
        json!({"expectedRevision": 2, "change": {"kind": "forget", "id": "mem_nope"}}),
    );
    assert_eq!(error_of(&resp)["code"], -32002, "{resp}");
    let (resp, _) = a.call(
        "_maka/memory/mutate",
        json!({"expectedRevision": 2, "change": {"kind": "add", "scope": "workspace", "text": "x"}}),
    );
    assert!(
        error_of(&resp)["message"]
            .as_str()
            .unwrap()
            .contains("sessionId"),
        "{resp}"
    );

    // The model's `remember` tool: a workspace entry from the agent, shown as a tool call.
    let t = a.prompt(&s, "please remember my preference", |r| {
        panic!("unexpected {r}")
    });
    let call = t
        .updates_for(&s)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .cloned()
        .unwrap();
    assert_eq!(call["title"], "Remember: The user prefers tabs.");
    let mine = a.call_ok("_maka/memory/query", json!({"sessionId": s}));
    assert_eq!(mine["revision"], 3);
    let texts: Vec<&str> = mine["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Answer briefly.", "The user prefers tabs."]);
    assert_eq!(mine["entries"][1]["source"], "agent");
    assert_eq!(mine["entries"][1]["scope"]["kind"], "workspace");

    // Another workspace's session sees only the user entry.
    let other_ws = TempDir::new("mem-ws2");
    let s2 = a.new_session(other_ws.path());
    let theirs = a.call_ok("_maka/memory/query", json!({"sessionId": s2}));
    assert_eq!(theirs["entries"].as_array().unwrap().len(), 1);

    // /memory lists, adds and forgets.
    let t = a.prompt(&s, "/memory", |r| panic!("unexpected {r}"));
    assert!(
        t.text().contains("2. [workspace] The user prefers tabs."),
        "{}",
        t.text()
    );
    let t = a.prompt(&s, "/memory add session only for this chat", |r| {
        panic!("unexpected {r}")
    });
    assert!(
        t.text()
            .contains("Remembered (session): only for this chat"),
        "{}",
        t.text()
    );
    let t = a.prompt(&s, "/memory forget 1", |r| panic!("unexpected {r}"));
    assert!(t.text().starts_with("Forgot mem_"), "{}", t.text());
    let after = a.call_ok("_maka/memory/query", json!({}));
    let texts: Vec<&str> = after["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["The user prefers tabs.", "only for this chat"]);

    // Durable: a new adapter and host read the same memory.
    drop(a);
    let mut b = scripted(data.path());
    let again = b.call_ok("_maka/memory/query", json!({}));
    assert_eq!(again["revision"], after["revision"]);
    assert_eq!(again["entries"], after["entries"]);
}

#[test]
fn agents_md_and_memory_reach_the_model() {
    let ws = TempDir::new("agents-ws");
    let extra = TempDir::new("agents-extra");
    std::fs::write(
        ws.path().join("AGENTS.md"),
        "# Project rules\nRun `make check` before saying you are done.\n",
    )
    .unwrap();
    std::fs::write(
        extra.path().join("AGENTS.md"),
        "The docs folder is generated.\n",
    )
    .unwrap();
    let reply = || {
        sse(&[
            json!({"choices": [{"delta": {"content": "OK."}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
        ])
    };
    let (port, seen) = fake_server(vec![reply(), reply()]);
    let data = TempDir::new("agents-data");
    let mut a = AgentProcess::spawn_with(support::Spawn {
        args: vec![],
        env: vec![
            ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
            // The user's instruction file is read next to the config file.
            (
                "MAKA_CONFIG".into(),
                data.path()
                    .join("config/maka-acp/config.json")
                    .display()
                    .to_string(),
            ),
            (
                "MAKA_OPENAI_BASE_URL".into(),
                format!("http://127.0.0.1:{port}/v1"),
            ),
            ("MAKA_OPENAI_API_KEY".into(), "sk-test".into()),
            ("MAKA_MODEL".into(), "fake-model".into()),
        ],
    });
    // The user's own instruction file, next to the config file.
    std::fs::create_dir_all(data.path().join("config/maka-acp")).unwrap();
    std::fs::write(
        data.path().join("config/maka-acp/AGENTS.md"),
        "Call me Sam.\n",
    )
    .unwrap();
    a.initialize();
    let r = a.call_ok(
        "session/new",
        json!({"cwd": ws.path(), "additionalDirectories": [extra.path()], "mcpServers": []}),
    );
    let s = r["sessionId"].as_str().unwrap().to_string();
    a.expect_commands(&s);
    a.call_ok(
        "_maka/memory/mutate",
        json!({"expectedRevision": 1, "change": {"kind": "add", "scope": "workspace", "sessionId": s, "text": "Deploys happen on Fridays."}}),
    );
    let t = a.prompt(&s, "hi", |r| panic!("unexpected {r}"));
    assert_eq!(t.text(), "OK.");
    let system = |i: usize| -> String {
        let seen = seen.lock().unwrap();
        let m: &Value = &seen[i].body["messages"][0];
        assert_eq!(m["role"], "system");
        m["content"].as_str().unwrap().to_string()
    };
    let first = system(0);
    for needle in [
        "Call me Sam.",
        "Run `make check` before saying you are done.",
        "The docs folder is generated.",
        "- [workspace] Deploys happen on Fridays.",
    ] {
        assert!(
            first.contains(needle),
            "{needle:?} not in the system prompt:\n{first}"
        );
    }
    // Read at each turn's start: a change is seen by the next turn.
    std::fs::write(ws.path().join("AGENTS.md"), "Use British spelling.\n").unwrap();
    a.prompt(&s, "again", |r| panic!("unexpected {r}"));
    let second = system(1);
    assert!(second.contains("Use British spelling.") && !second.contains("make check"));
}

#[test]
fn usage_is_counted_per_turn_and_model_and_priced_when_prices_are_set() {
    let data = TempDir::new("usage-data");
    let ws = TempDir::new("usage-ws");
    let script = json!({
        "default": [[{"text": "Counted."}, {"usage": {"input": 1000, "output": 500, "cached": 200}}]]
    });
    let spawn = |prices: bool| {
        let mut env = vec![
            ("MAKA_SCRIPT".into(), script.to_string()),
            ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
        ];
        if prices {
            env.push((
                "MAKA_PRICES".into(),
                json!({"currency": "USD", "models": {"script": {"input": 1.0, "output": 2.0, "cachedInput": 0.5}}})
                    .to_string(),
            ));
        }
        let mut a = AgentProcess::spawn_with(support::Spawn { args: vec![], env });
        a.initialize();
        a
    };
    let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
    let mut a = spawn(true);
    let s = a.new_session(ws.path());
    let mut costs = vec![];
    let mut turns = vec![];
    for _ in 0..2 {
        let t = a.prompt(&s, "count this", |r| panic!("unexpected {r}"));
        turns.push(t.response["result"]["_meta"]["maka"]["turnId"].clone());
        let usage = t
            .updates_for(&s)
            .into_iter()
            .find(|u| u["sessionUpdate"] == "usage_update")
            .cloned()
            .unwrap();
        assert_eq!(usage["cost"]["currency"], "USD", "{usage}");
        costs.push(usage["cost"]["amount"].as_f64().unwrap());
    }
    // (800 fresh × 1 + 200 cached × 0.5 + 500 out × 2) per million = 0.0019 per turn.
    assert!(
        close(costs[0], 0.0019) && close(costs[1], 0.0038),
        "{costs:?}"
    );

    let report = a.call_ok("_maka/usage/query", json!({"sessionId": s}));
    assert_eq!(report["totals"]["inputTokens"], 2000);
    assert_eq!(report["totals"]["outputTokens"], 1000);
    assert_eq!(report["totals"]["cachedTokens"], 400);
    assert!(
        close(report["cost"]["amount"].as_f64().unwrap(), 0.0038),
        "{report}"
    );
    assert_eq!(report["models"][0]["model"], "script");
    assert_eq!(report["turns"].as_array().unwrap().len(), 2);
    assert_eq!(report["turns"][1]["turnId"], turns[1]);
    assert!(close(report["turns"][1]["cost"].as_f64().unwrap(), 0.0019));

    // A rewound turn's tokens were spent: still counted, marked abandoned.
    a.call_ok(
        "_maka/session/revision/abandon",
        json!({"sessionId": s, "revisionId": format!("rev_{}", turns[1].as_str().unwrap())}),
    );
    let report = a.call_ok("_maka/usage/query", json!({"sessionId": s}));
    assert_eq!(report["totals"]["inputTokens"], 2000);
    assert_eq!(report["turns"][1]["abandoned"], true);

    // Durable, and without prices no cost is invented.
    drop(a);
    let mut b = spawn(false);
    let report = b.call_ok("_maka/usage/query", json!({"sessionId": s}));
    assert_eq!(report["totals"]["outputTokens"], 1000);
    assert!(report.get("cost").is_none(), "{report}");
    b.call_ok(
        "session/load",
        json!({"sessionId": s, "cwd": ws.path(), "mcpServers": []}),
    );
    b.expect_commands(&s);
    let t = b.prompt(&s, "once more", |r| panic!("unexpected {r}"));
    let usage = t
        .updates_for(&s)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "usage_update")
        .cloned()
        .unwrap();
    assert!(usage.get("cost").is_none(), "{usage}");
    let (resp, _) = b.call("_maka/usage/query", json!({"sessionId": "nope"}));
    assert_eq!(error_of(&resp)["code"], -32002);
}

/// ACP `notice` (issue 26 item 2): an instruction file the host will not read (here a link out
/// of the workspace) is told once per session to a client that shows notices — not at every
/// turn — and to no other client.
#[test]
fn a_skipped_instruction_file_is_told_once_to_clients_that_show_notices() {
    let data = TempDir::new("instr-data");
    let ws = TempDir::new("instr-ws");
    let outside = TempDir::new("instr-outside");
    std::fs::write(outside.path().join("secret.md"), "not for the model\n").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.md"),
        ws.path().join("AGENTS.md"),
    )
    .unwrap();
    let notices = |a: &mut AgentProcess, s: &str| -> Vec<Value> {
        let t = a.prompt(s, "hi", |r| panic!("{r}"));
        assert_eq!(t.text(), "Hello.");
        t.updates_for(s)
            .into_iter()
            .filter(|u| u["sessionUpdate"] == "notice")
            .cloned()
            .collect()
    };
    let mut plain = scripted(data.path());
    let s = plain.new_session(ws.path());
    assert_eq!(notices(&mut plain, &s), Vec::<Value>::new());
    drop(plain);

    let script = json!({"default": [[{"text": "Hello."}]]});
    let mut a = AgentProcess::scripted(&script, data.path());
    a.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"session": {"notices": {}}}}),
    );
    let s = a.new_session(ws.path());
    let first = notices(&mut a, &s);
    assert_eq!(first.len(), 1, "{first:#?}");
    assert_eq!(first[0]["severity"], "warning");
    let title = first[0]["title"].as_str().unwrap();
    assert!(
        title.starts_with("The instruction file ")
            && title.contains("AGENTS.md was not read")
            && title.ends_with('.'),
        "{title}"
    );
    assert_eq!(notices(&mut a, &s), Vec::<Value>::new(), "told once");
}
