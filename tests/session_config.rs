//! Session configuration from the editor: config options and legacy modes, their validation
//! and CAS retries, host-side changes, plan mode, slash commands, and authentication. The real
//! binary over pipes; every line it writes is validated against the ACP v1 schema.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::time::Duration;
use support::host::{HostProcess, TempDir};
use support::{error_of, option, select, AgentProcess, Reply, Spawn};

fn script() -> Value {
    json!({
        "models": [
            {"id": "deep", "label": "Deep", "thinkingLevels": ["low", "high"]},
            {"id": "fast", "label": "Fast"}
        ],
        "rules": [
            {"when": "make the file", "responses": [
                [{"tool": "write_file", "args": {"path": "out.txt", "content": "made"}}],
                [{"tool": "update_plan", "args": {"entries": [{"content": "Write out.txt", "status": "pending"}]}}],
                [{"tool": "write_file", "args": {"path": "out.txt", "content": "made"}}],
                [{"text": "Stopped."}]]},
            {"when": "go ahead", "responses": [
                [{"tool": "write_file", "args": {"path": "out.txt", "content": "made"}}],
                [{"text": "Written."}]]},
            {"when": "/compact", "responses": [[{"text": "The user greeted me several times."}, {"usage": {"input": 50, "output": 8}}]]}
        ],
        "default": [[{"text": "Hello from the script!"}]]
    })
}

fn no_requests(r: &Value) -> Reply {
    panic!("unexpected request from the agent: {r}")
}

struct Setup {
    agent: AgentProcess,
    ws: TempDir,
    _data: TempDir,
}

/// An agent on the scripted provider, initialized with `caps`.
fn setup(tag: &str, caps: Value) -> Setup {
    let data = TempDir::new(&format!("cfg-{tag}-data"));
    let ws = TempDir::new(&format!("cfg-{tag}-ws"));
    let mut agent = AgentProcess::scripted(&script(), data.path());
    agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": caps}),
    );
    Setup {
        agent,
        ws,
        _data: data,
    }
}

fn ids(options: &Value) -> Vec<String> {
    options
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap().to_string())
        .collect()
}

/// `session/new` → (id, its result); consumes the commands update that follows.
fn new_session(s: &mut Setup) -> (String, Value) {
    let r = s
        .agent
        .call_ok("session/new", json!({"cwd": s.ws.path(), "mcpServers": []}));
    let id = r["sessionId"].as_str().unwrap().to_string();
    s.agent.expect_commands(&id);
    (id, r)
}

fn set(s: &mut Setup, id: &str, config: &str, value: Value) -> Value {
    let (resp, before) = s.agent.call(
        "session/set_config_option",
        json!({"sessionId": id, "configId": config, "value": value}),
    );
    assert!(before.is_empty(), "nothing before the response: {before:?}");
    resp
}

fn config_updates(t: &support::Transcript) -> Vec<&Value> {
    t.updates
        .iter()
        .map(|u| &u["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "config_option_update")
        .collect()
}

#[test]
fn options_follow_the_model_and_reject_bad_values_before_touching_the_host() {
    let mut s = setup("vocab", json!({}));
    let (id, r) = new_session(&mut s);
    let opts = &r["configOptions"];
    assert_eq!(
        ids(opts),
        ["mode", "model", "thought_level", "collaboration_mode"]
    );
    assert_eq!(option(opts, "mode")["currentValue"], "ask");
    assert_eq!(option(opts, "mode")["category"], "mode");
    assert_eq!(option(opts, "model")["currentValue"], "default");
    // One provider: flat options (avante cannot pick from groups; one group says nothing).
    let models = option(opts, "model")["options"].as_array().unwrap();
    assert_eq!(models[0]["name"], "Default (Deep)");
    assert!(
        models.iter().all(|m| m.get("group").is_none()),
        "{models:?}"
    );
    assert_eq!(models[2]["value"], "script/fast");
    let levels: Vec<&Value> = option(opts, "thought_level")["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| &o["value"])
        .collect();
    assert_eq!(levels, ["default", "low", "high"]);
    assert_eq!(r["modes"]["currentModeId"], "ask");
    assert_eq!(r["modes"]["availableModes"].as_array().unwrap().len(), 3);

    // Rejected with -32602, naming what is offered.
    for (config, value, needle) in [
        ("speed", json!("fast"), "`mode`, `model`, `thought_level`"),
        ("mode", json!(true), "select option"),
        ("mode", json!("yolo"), "`ask`, `bypass`, `explore`"),
        ("model", json!("script/nope"), "`script/fast`"),
        ("thought_level", json!("max"), "`high`"),
        ("plan_first", json!(true), "not an option"),
    ] {
        let resp = set(&mut s, &id, config, value);
        assert_eq!(error_of(&resp)["code"], -32602, "{config}: {resp}");
        let msg = error_of(&resp)["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{config}: {msg}");
    }

    // A level, then a model without levels drops it and the option disappears.
    let resp = set(&mut s, &id, "thought_level", json!("high"));
    assert_eq!(
        option(&resp["result"]["configOptions"], "thought_level")["currentValue"],
        "high"
    );
    let resp = set(&mut s, &id, "model", json!("script/fast"));
    let opts = &resp["result"]["configOptions"];
    assert_eq!(ids(opts), ["mode", "model", "collaboration_mode"]);
    assert_eq!(option(opts, "model")["currentValue"], "script/fast");
    // Back to a model with levels: the old level did not survive the switch.
    let resp = set(&mut s, &id, "model", json!("script/deep"));
    assert_eq!(
        option(&resp["result"]["configOptions"], "thought_level")["currentValue"],
        "default"
    );
    // The choice is durable: a second connection loads it.
    let mut other = AgentProcess::scripted(&script(), s._data.path());
    other.initialize();
    let r = other.call_ok(
        "session/load",
        json!({"sessionId": id, "cwd": s.ws.path(), "mcpServers": []}),
    );
    assert_eq!(
        option(&r["configOptions"], "model")["currentValue"],
        "script/deep"
    );
}

/// `session/set_model` (an earlier unstable ACP method that acpc, simple-acp-client,
/// jupyterlab-acp and agent-shell call) sets the `model` option: answered `{}`, the option view
/// follows as an update, an unknown model is -32602 naming what is offered.
#[test]
fn set_model_sets_the_model_option() {
    let mut s = setup("setmodel", json!({}));
    let (id, _) = new_session(&mut s);
    let t = s.agent.drive(
        "session/set_model",
        json!({"sessionId": id, "modelId": "script/fast"}),
        |r| panic!("{r}"),
    );
    assert_eq!(t.response["result"], json!({}), "{}", t.response);
    let updates = config_updates(&t);
    let last = updates.last().copied().unwrap_or(&Value::Null);
    let last = if last.is_null() {
        // The update may come right after the answer.
        let v = s.agent.recv();
        v["params"]["update"].clone()
    } else {
        last.clone()
    };
    assert_eq!(last["sessionUpdate"], "config_option_update", "{last}");
    assert_eq!(
        option(&last["configOptions"], "model")["currentValue"],
        "script/fast"
    );
    // A model's bare id and its display name are accepted where they name one model (acpc,
    // simple-acp-client and soulacp send the bare id), for set_config_option too.
    for (named, value) in [
        ("deep", "script/deep"),
        ("Fast", "script/fast"),
        ("default", "default"),
    ] {
        let (resp, _) = s.agent.call(
            "session/set_model",
            json!({"sessionId": id, "modelId": named}),
        );
        assert_eq!(resp["result"], json!({}), "{named}: {resp}");
        let update = s.agent.recv();
        assert_eq!(
            option(&update["params"]["update"]["configOptions"], "model")["currentValue"],
            value,
            "{named}: {update}"
        );
        let resp = set(&mut s, &id, "model", json!(named));
        assert_eq!(
            option(&resp["result"]["configOptions"], "model")["currentValue"],
            value,
            "{named}: {resp}"
        );
    }
    let (resp, _) = s.agent.call(
        "session/set_model",
        json!({"sessionId": id, "modelId": "script/nope"}),
    );
    assert_eq!(error_of(&resp)["code"], -32602, "{resp}");
    assert!(error_of(&resp)["message"]
        .as_str()
        .unwrap()
        .contains("`script/fast`"));
    let (resp, _) = s.agent.call("session/set_model", json!({"sessionId": id}));
    assert!(
        error_of(&resp)["message"]
            .as_str()
            .unwrap()
            .contains("`modelId`"),
        "{resp}"
    );
}

#[test]
fn a_boolean_plan_first_only_for_clients_that_accept_booleans() {
    let mut s = setup(
        "boolean",
        json!({"session": {"configOptions": {"boolean": {}}}}),
    );
    let (id, r) = new_session(&mut s);
    let plan = option(&r["configOptions"], "plan_first");
    assert_eq!(plan["type"], "boolean");
    assert_eq!(plan["currentValue"], false);
    let (resp, _) = s.agent.call(
        "session/set_config_option",
        json!({"sessionId": id, "configId": "plan_first", "type": "boolean", "value": true}),
    );
    assert_eq!(
        option(&resp["result"]["configOptions"], "plan_first")["currentValue"],
        true
    );
    let resp = set(&mut s, &id, "plan_first", json!("plan"));
    assert_eq!(error_of(&resp)["code"], -32602);
}

#[test]
fn set_mode_and_the_mode_option_stay_in_sync_and_own_changes_are_not_echoed() {
    let mut s = setup("modes", json!({}));
    let (id, _) = new_session(&mut s);
    // Legacy set_mode: `{}`, then the config view follows.
    let (resp, _) = s.agent.call(
        "session/set_mode",
        json!({"sessionId": id, "modeId": "bypass"}),
    );
    assert_eq!(resp["result"], json!({}));
    let u = s.agent.recv();
    assert_eq!(
        u["params"]["update"]["sessionUpdate"],
        "config_option_update"
    );
    assert_eq!(
        option(&u["params"]["update"]["configOptions"], "mode")["currentValue"],
        "bypass"
    );
    // The mode option: the response, then the legacy view follows.
    let resp = set(&mut s, &id, "mode", json!("explore"));
    assert_eq!(
        option(&resp["result"]["configOptions"], "mode")["currentValue"],
        "explore"
    );
    let u = s.agent.recv();
    assert_eq!(
        u["params"]["update"],
        json!({"sessionUpdate": "current_mode_update", "currentModeId": "explore"})
    );
    let (resp, _) = s.agent.call(
        "session/set_mode",
        json!({"sessionId": id, "modeId": "yolo"}),
    );
    assert_eq!(error_of(&resp)["code"], -32602);
    // The next turn replays the host's configuration frames: none reaches the client again.
    let t = s.agent.prompt(&id, "hi", no_requests);
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert!(
        config_updates(&t).is_empty() && !t.kinds().contains(&"current_mode_update".into()),
        "own changes echoed: {:?}",
        t.kinds()
    );
}

#[test]
fn host_side_changes_and_a_conflicting_second_writer() {
    let data = TempDir::new("cfg-cas-data");
    let ws = TempDir::new("cfg-cas-ws");
    let host = HostProcess::start(data.path(), Some(&script()));
    let mut agent = AgentProcess::spawn_with(Spawn {
        args: vec!["--host-url".into(), host.url("")],
        env: vec![
            ("MAKA_HOST_TOKEN".into(), host.token.clone()),
            ("RUST_LOG".into(), "info".into()),
        ],
    });
    agent.initialize();
    let r = agent.call_ok("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    let id = r["sessionId"].as_str().unwrap().to_string();
    agent.expect_commands(&id);

    // A second writer moves the revision on: the adapter's write conflicts, re-reads, retries.
    let rev = host.ok("session.get", json!({"sessionId": id}))["session"]["revision"].clone();
    let renamed = host.ok(
        "session.metadata.update",
        json!({"sessionId": id, "expectedRevision": rev, "patch": {"name": "renamed elsewhere"}}),
    );
    assert_eq!(renamed["kind"], "committed");
    let (resp, _) = agent.call(
        "session/set_config_option",
        json!({"sessionId": id, "configId": "mode", "value": "bypass"}),
    );
    assert_eq!(
        option(&resp["result"]["configOptions"], "mode")["currentValue"],
        "bypass"
    );
    assert!(
        agent.stderr_contains("revision conflict"),
        "no retry was needed?"
    );
    assert_eq!(
        agent.recv()["params"]["update"]["sessionUpdate"],
        "current_mode_update"
    );
    let got = host.ok("session.get", json!({"sessionId": id}));
    assert_eq!(got["session"]["configuration"]["permissionMode"], "bypass");
    assert_eq!(
        got["session"]["name"], "renamed elsewhere",
        "both writes kept"
    );

    // Another client changes the mode: this client hears it at its next turn, before the
    // turn's output, as both updates.
    let rev = got["session"]["revision"].clone();
    let changed = host.ok(
        "session.configuration.update",
        json!({"sessionId": id, "expectedRevision": rev, "patch": {"permissionMode": "explore"}}),
    );
    assert_eq!(changed["kind"], "committed");
    let t = agent.prompt(&id, "hi", no_requests);
    let kinds = t.kinds();
    let at = kinds.iter().position(|k| k == "config_option_update");
    let text_at = kinds.iter().position(|k| k == "agent_message_chunk");
    assert!(at.is_some() && at < text_at, "{kinds:?}");
    assert_eq!(
        option(&config_updates(&t)[0]["configOptions"], "mode")["currentValue"],
        "explore"
    );
    assert!(kinds.contains(&"current_mode_update".into()), "{kinds:?}");

    // The agent itself changes it (a slash command): announced during the turn.
    let t = agent.prompt(&id, "/mode ask", no_requests);
    assert_eq!(t.text(), "Mode set to ask.");
    assert_eq!(
        option(&config_updates(&t)[0]["configOptions"], "mode")["currentValue"],
        "ask"
    );
}

#[test]
fn plan_mode_blocks_writes_until_the_plan_is_approved() {
    let mut s = setup("plan", json!({}));
    let (id, _) = new_session(&mut s);
    set(&mut s, &id, "mode", json!("bypass"));
    s.agent.recv(); // current_mode_update
    set(&mut s, &id, "collaboration_mode", json!("plan"));
    let out = s.ws.path().join("out.txt");

    // No plan yet: refused outright. Then a plan; the next write asks; rejected.
    let mut asked = vec![];
    let t = s.agent.prompt(&id, "make the file", |r| {
        asked.push(r.clone());
        select("reject")
    });
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert!(!out.exists(), "written without an approved plan");
    assert_eq!(asked.len(), 1, "one approval request: {asked:?}");
    let req = &asked[0]["params"];
    assert_eq!(req["toolCall"]["kind"], "switch_mode");
    assert!(req["toolCall"]["title"]
        .as_str()
        .unwrap()
        .starts_with("Approve the plan"));
    assert_eq!(
        req["toolCall"]["rawInput"]["plan"][0]["content"],
        "Write out.txt"
    );
    assert!(t.kinds().contains(&"plan".into()), "{:?}", t.kinds());
    let failed: Vec<&Value> = t
        .updates
        .iter()
        .map(|u| &u["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed")
        .collect();
    assert_eq!(failed.len(), 2, "both writes failed: {failed:?}");

    // Approved: the write happens and the session leaves plan mode, announced to the client.
    let t = s.agent.prompt(&id, "go ahead", |r| {
        assert!(r["params"]["toolCall"]["title"]
            .as_str()
            .unwrap()
            .starts_with("Approve the plan"));
        select("allow_once")
    });
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "made");
    let updates = config_updates(&t);
    assert_eq!(updates.len(), 1, "{:?}", t.kinds());
    assert_eq!(
        option(&updates[0]["configOptions"], "collaboration_mode")["currentValue"],
        "agent"
    );
}

#[test]
fn slash_commands_are_listed_after_the_response_and_run_by_the_host() {
    let mut s = setup("commands", json!({}));
    let r = s
        .agent
        .call_ok("session/new", json!({"cwd": s.ws.path(), "mcpServers": []}));
    let id = r["sessionId"].as_str().unwrap().to_string();
    let commands = s.agent.expect_commands(&id);
    let names: Vec<&str> = commands
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "plan",
            "mode",
            "model",
            "title",
            "compact",
            "agents",
            "goal",
            "memory",
            "fork",
            "rewind",
            "permissions",
            "help"
        ]
    );
    assert!(commands
        .iter()
        .all(|c| !c["description"].as_str().unwrap().is_empty()));
    assert_eq!(commands[1]["input"]["hint"], "ask | bypass | explore");

    let t = s.agent.prompt(&id, "/help", no_requests);
    assert!(t.text().contains("/compact"), "{}", t.text());
    let t = s.agent.prompt(&id, "/frobnicate now", no_requests);
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert!(
        t.text().starts_with("Unknown command /frobnicate."),
        "{}",
        t.text()
    );
    let t = s.agent.prompt(&id, "/title Release checklist", no_requests);
    let info: Vec<&Value> = t
        .updates
        .iter()
        .map(|u| &u["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "session_info_update")
        .collect();
    assert_eq!(info.last().unwrap()["title"], "Release checklist");
    let t = s.agent.prompt(&id, "/model script/fast", no_requests);
    assert_eq!(t.text(), "Model set to script/fast.");
    assert_eq!(
        ids(&config_updates(&t)[0]["configOptions"]),
        ["mode", "model", "collaboration_mode"]
    );
    let listed = s.agent.call_ok("session/list", json!({}));
    assert_eq!(listed["sessions"][0]["title"], "Release checklist");

    // Resume lists the commands again, after its response.
    let mut other = AgentProcess::scripted(&script(), s._data.path());
    other.initialize();
    let (resp, before) = other.call(
        "session/resume",
        json!({"sessionId": id, "cwd": s.ws.path(), "mcpServers": []}),
    );
    assert!(resp["result"]["configOptions"].is_array());
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(other.expect_commands(&id).len(), 12);
}

#[test]
fn compact_summarises_a_long_session_and_reports_the_smaller_context() {
    let mut s = setup("compact", json!({}));
    // Instructions the system prompt carries: the context after compaction still holds them.
    std::fs::write(s.ws.path().join("AGENTS.md"), "Keep it short. ".repeat(300)).unwrap();
    let (id, _) = new_session(&mut s);
    for i in 0..8 {
        s.agent
            .prompt(&id, &format!("hello number {i}"), no_requests);
    }
    let t = s.agent.prompt(&id, "/compact", no_requests);
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let text = t.text();
    assert!(
        text.starts_with("Compacted 16 earlier messages into a summary"),
        "{text}"
    );
    assert!(
        text.contains("The user greeted me several times."),
        "{text}"
    );
    let figures: Vec<u64> = text
        .split('≈')
        .skip(1)
        .map(|p| {
            p.split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(figures[1] < figures[0], "context did not shrink: {text}");
    assert!(
        figures[1] > 4500 / 4,
        "the system prompt (with AGENTS.md) is counted after compaction: {text}"
    );
    let usage: Vec<&Value> = t
        .updates
        .iter()
        .map(|u| &u["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "usage_update")
        .collect();
    assert_eq!(usage.last().unwrap()["used"], figures[1], "{usage:?}");
    // What was streamed is what a reload replays: the same reply, byte for byte.
    let reply: Vec<&Value> = t
        .updates_for(&id)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .collect();
    let mut other = AgentProcess::scripted(&script(), s._data.path());
    other.initialize();
    let (_, replay) = other.call(
        "session/load",
        json!({"sessionId": id, "cwd": s.ws.path(), "mcpServers": []}),
    );
    let replayed: Vec<&Value> = replay
        .iter()
        .map(|l| &l["params"]["update"])
        .filter(|u| {
            u["sessionUpdate"] == "agent_message_chunk"
                && u["content"]["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("Compacted"))
        })
        .collect();
    assert_eq!(replayed, reply);
    // Too little to compact on a fresh session.
    let (fresh, _) = new_session(&mut s);
    let t = s.agent.prompt(&fresh, "/compact", no_requests);
    assert_eq!(t.text(), "Nothing to compact yet.");
}

/// `/compact` to a client that advertises `session.compaction` (issue 26 item 3): the
/// compaction's state and summary as ACP compaction updates, no agent text; the reload
/// replays the completed compaction once.
#[test]
fn compact_is_a_compaction_to_clients_that_show_compactions() {
    let caps = json!({"session": {"compaction": {}}});
    let mut s = setup("compact-caps", caps.clone());
    let (id, _) = new_session(&mut s);
    for i in 0..3 {
        s.agent
            .prompt(&id, &format!("hello number {i}"), no_requests);
    }
    let t = s.agent.prompt(&id, "/compact", no_requests);
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert_eq!(t.text(), "", "no agent text");
    let shown: Vec<(String, String)> = t
        .updates_for(&id)
        .into_iter()
        .filter(|u| {
            u["sessionUpdate"]
                .as_str()
                .unwrap()
                .starts_with("compaction")
        })
        .map(|u| {
            let what = u["status"]
                .as_str()
                .or(u["content"]["text"].as_str())
                .unwrap();
            (
                u["sessionUpdate"].as_str().unwrap().to_string(),
                what.to_string(),
            )
        })
        .collect();
    let expected = [
        ("compaction_update", "in_progress"),
        (
            "compaction_summary_chunk",
            "The user greeted me several times.",
        ),
        ("compaction_update", "completed"),
    ]
    .map(|(a, b)| (a.to_string(), b.to_string()));
    assert_eq!(shown, expected);
    let mut other = AgentProcess::scripted(&script(), s._data.path());
    other.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": caps}),
    );
    let (_, replay) = other.call(
        "session/load",
        json!({"sessionId": id, "cwd": s.ws.path(), "mcpServers": []}),
    );
    let replayed: Vec<&str> = replay
        .iter()
        .filter_map(|l| l["params"]["update"]["sessionUpdate"].as_str())
        .filter(|k| k.starts_with("compaction"))
        .collect();
    assert_eq!(replayed, ["compaction_summary_chunk", "compaction_update"]);
    assert!(!replay
        .iter()
        .any(|l| l["params"]["update"]["content"]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Compacted"))));
}

// ---- authentication ----------------------------------------------------------------------

/// An agent with no provider at all; its config file lives in `config_dir`.
fn unconfigured(data: &TempDir, config: &std::path::Path) -> AgentProcess {
    AgentProcess::spawn_with(Spawn {
        args: vec![],
        env: vec![
            ("RUST_LOG".into(), "debug".into()),
            ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
            ("MAKA_CONFIG".into(), config.display().to_string()),
        ],
    })
}

#[test]
fn without_a_provider_editors_are_asked_to_authenticate() {
    let data = TempDir::new("cfg-auth-data");
    let ws = TempDir::new("cfg-auth-ws");
    let config = data.path().join("conf").join("config.json");
    let mut agent = unconfigured(&data, &config);
    let init = agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"auth": {"terminal": true}}}),
    );
    assert_eq!(init["agentCapabilities"]["auth"], json!({"logout": {}}));
    let methods = init["authMethods"].as_array().unwrap();
    assert_eq!(methods.len(), 2, "{methods:?}");
    assert_eq!(methods[0]["id"], "env");
    assert!(methods[0]["description"]
        .as_str()
        .unwrap()
        .contains("MAKA_OPENAI_BASE_URL"));
    assert_eq!(methods[1]["type"], "terminal");
    assert_eq!(methods[1]["args"], json!(["login"]));
    // Without auth.terminal: no terminal method.
    let init = agent.call_ok("initialize", json!({"protocolVersion": 1}));
    assert_eq!(init["authMethods"].as_array().unwrap().len(), 1);

    let (resp, _) = agent.call("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    assert_eq!(error_of(&resp)["code"], -32000);
    let msg = error_of(&resp)["message"].as_str().unwrap();
    assert!(
        msg.contains("MAKA_OPENAI_BASE_URL") && msg.contains("maka-acp login"),
        "{msg}"
    );
    let (resp, _) = agent.call("authenticate", json!({"methodId": "env"}));
    assert_eq!(error_of(&resp)["code"], -32000);
    let (resp, _) = agent.call("authenticate", json!({"methodId": "login"}));
    assert_eq!(
        error_of(&resp)["code"],
        -32602,
        "terminal methods are not for authenticate"
    );

    // What `maka-acp login` writes (hosted OpenAI: a key, no base URL); then authenticate.
    let key = "sk-test-0123456789-secret";
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(
        &config,
        json!({"provider": "openai", "model": "gpt-test", "apiKey": key}).to_string(),
    )
    .unwrap();
    assert_eq!(
        agent.call_ok("authenticate", json!({"methodId": "env"})),
        json!({})
    );
    let r = agent.call_ok("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    let id = r["sessionId"].as_str().unwrap().to_string();
    assert_eq!(
        option(&r["configOptions"], "model")["options"][1]["value"],
        "openai/gpt-test"
    );
    agent.expect_commands(&id);
    let listed = agent.call_ok("session/list", json!({}));
    assert!(!listed.to_string().contains(key));

    // Logout removes the key; sessions need authentication again.
    assert_eq!(agent.call_ok("logout", json!({})), json!({}));
    let saved: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    assert_eq!(saved, json!({"provider": "openai", "model": "gpt-test"}));
    let (resp, _) = agent.call("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    assert_eq!(error_of(&resp)["code"], -32000);
    // A login in another terminal while the agent runs: the next session/new sees it.
    std::fs::write(
        &config,
        json!({"provider": "openai", "model": "gpt-test", "apiKey": key}).to_string(),
    )
    .unwrap();
    let r = agent.call_ok("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    agent.expect_commands(r["sessionId"].as_str().unwrap());
    agent.close_stdin();
    agent.wait_exit(Duration::from_secs(10));
    assert!(!agent.stderr().contains(key), "the key reached the logs");
}

/// A provider that is set but broken is no provider: the error says what is wrong with it.
#[test]
fn a_broken_provider_setting_is_reported_when_a_session_is_created() {
    let data = TempDir::new("cfg-broken-data");
    let ws = TempDir::new("cfg-broken-ws");
    let mut agent = AgentProcess::spawn_with(Spawn {
        args: vec![],
        env: vec![
            ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
            ("MAKA_SCRIPT".into(), "{not json".into()),
        ],
    });
    agent.initialize();
    let (resp, _) = agent.call("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    assert_eq!(error_of(&resp)["code"], -32000);
    let msg = error_of(&resp)["message"].as_str().unwrap();
    assert!(
        msg.contains("Problem: MAKA_SCRIPT: not valid JSON"),
        "{msg}"
    );
}

/// `maka-acp login` in a pseudo-terminal (Python's pty module drives it like a person would).
#[test]
fn login_in_a_terminal_saves_a_private_config() {
    let data = TempDir::new("cfg-login");
    let config = data.path().join("maka").join("config.json");
    let key = "sk-typed-in-a-terminal-42";
    let out = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/pty_login.py"
        ))
        .arg(support::BIN)
        .arg(&config)
        .arg(key)
        .output()
        .expect("python3");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{screen}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(screen.contains("Provider [1]:"), "{screen}");
    assert!(screen.contains("Saved: model llama3"), "{screen}");
    assert!(!screen.contains(key), "the key was echoed: {screen}");
    let saved: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    assert_eq!(
        saved,
        json!({"provider": "openai-compatible", "baseUrl": "http://127.0.0.1:9/v1", "model": "llama3", "apiKey": key})
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&config).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// `session/options` and initial `configOptions` (issue 49 item 4, unstable, advertised as
/// `sessionCapabilities.options`): the options a new session in a folder would start with,
/// or an existing one's; initial values applied before the first turn on new, load and fork,
/// each checked as `session/set_config_option` checks it — a bad one is the `-32602` naming
/// it, and `session/new` then creates nothing.
#[test]
fn session_options_and_initial_values_before_the_first_turn() {
    let mut s = setup("initial", json!({}));
    let init = s.agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    assert_eq!(
        init["agentCapabilities"]["sessionCapabilities"]["options"],
        json!({})
    );
    let cwd = s.ws.path().to_path_buf();
    let before = s.agent.call_ok("session/options", json!({"cwd": cwd}));
    assert_eq!(
        option(&before["configOptions"], "mode")["currentValue"],
        "ask"
    );
    assert_eq!(
        option(&before["configOptions"], "model")["currentValue"],
        "default"
    );
    assert_eq!(before["modes"]["currentModeId"], "ask");

    // A bad value: the error names it, and no session is made.
    let sessions = |s: &Setup| {
        std::fs::read_dir(s._data.path().join("sessions"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let made = sessions(&s);
    for (bad, names) in [
        (
            json!([{"configId": "mode", "value": "nope"}]),
            "configOptions[0]",
        ),
        (
            json!([{"configId": "mode", "value": "bypass"}, {"configId": "thought_level", "value": "ultra"}]),
            "configOptions[1]",
        ),
        (json!([{"value": "bypass"}]), "configOptions[0]"),
    ] {
        let (resp, _) = s.agent.call(
            "session/new",
            json!({"cwd": cwd, "mcpServers": [], "configOptions": bad}),
        );
        assert_eq!(error_of(&resp)["code"], -32602, "{resp}");
        assert!(
            error_of(&resp)["message"].as_str().unwrap().contains(names),
            "{resp}"
        );
    }
    assert_eq!(sessions(&s), made, "nothing was created");

    // Good values, in order (the thinking level of the model chosen before it).
    let r = s.agent.call_ok(
        "session/new",
        json!({"cwd": cwd, "mcpServers": [], "configOptions": [
            {"configId": "mode", "value": "bypass"},
            {"configId": "model", "value": "script/deep"},
            {"configId": "thought_level", "value": "high"}]}),
    );
    let id = r["sessionId"].as_str().unwrap().to_string();
    s.agent.expect_commands(&id);
    assert_eq!(
        option(&r["configOptions"], "mode")["currentValue"],
        "bypass"
    );
    assert_eq!(
        option(&r["configOptions"], "model")["currentValue"],
        "script/deep"
    );
    assert_eq!(
        option(&r["configOptions"], "thought_level")["currentValue"],
        "high"
    );
    assert_eq!(r["modes"]["currentModeId"], "bypass");
    // Applied before the first turn: a write runs with no dialog (bypass).
    let t = s
        .agent
        .prompt(&id, "go ahead", |r| panic!("no dialog in bypass: {r}"));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");

    // The session's own options; on load, initial values again, in the response.
    let now = s
        .agent
        .call_ok("session/options", json!({"cwd": cwd, "sessionId": id}));
    assert_eq!(
        option(&now["configOptions"], "mode")["currentValue"],
        "bypass"
    );
    let (unknown, _) = s.agent.call(
        "session/options",
        json!({"cwd": cwd, "sessionId": "sess_nope"}),
    );
    assert_eq!(error_of(&unknown)["code"], -32002, "{unknown}");
    let mut other = AgentProcess::scripted(&script(), s._data.path());
    other.initialize();
    let load = other.drive(
        "session/load",
        json!({"sessionId": id, "cwd": cwd, "mcpServers": [],
               "configOptions": [{"configId": "mode", "value": "explore"}]}),
        |r| panic!("{r}"),
    );
    let loaded = &load.response["result"];
    assert_eq!(
        option(&loaded["configOptions"], "mode")["currentValue"],
        "explore",
        "{loaded}"
    );
    assert_eq!(loaded["modes"]["currentModeId"], "explore");
    let fork = other.call_ok(
        "session/fork",
        json!({"sessionId": id, "cwd": cwd, "mcpServers": [],
               "configOptions": [{"configId": "mode", "value": "ask"}]}),
    );
    assert_eq!(
        option(&fork["configOptions"], "mode")["currentValue"],
        "ask"
    );
    assert_ne!(fork["sessionId"], json!(id));
}
