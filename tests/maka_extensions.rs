//! The `_maka/` extension methods over the real binary (every line checked against the ACP
//! schema; extension results are specified in docs/maka-extensions.md).

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::host::TempDir;
use support::{error_of, select, AgentProcess};

fn script() -> Value {
    json!({
        "rules": [
            {"when": "write", "responses": [
                [{"tool": "write_file", "args": {"path": "notes.txt", "content": "hi\n"}}],
                [{"text": "Written."}]]}
        ],
        "default": [[{"text": "Hello."}]]
    })
}

#[test]
fn turns_have_ids_clients_see_and_the_history_lists_them() {
    let data = TempDir::new("maka-turns-data");
    let ws = TempDir::new("maka-turns-ws");
    let mut agent = AgentProcess::scripted(&script(), data.path());
    let init = agent.initialize();
    let methods = &init["agentCapabilities"]["_meta"]["maka"]["methods"];
    assert!(
        methods
            .as_array()
            .unwrap()
            .contains(&json!("_maka/session/turns")),
        "{init}"
    );
    let session = agent.new_session(ws.path());

    let first = agent.prompt(&session, "please write the notes\nmore", |r| {
        assert_eq!(r["method"], "session/request_permission", "{r}");
        select("allow_once")
    });
    let second = agent.prompt(&session, "say hello", |r| panic!("unexpected {r}"));
    let id_of = |t: &support::Transcript| {
        t.response["result"]["_meta"]["maka"]["turnId"]
            .as_str()
            .unwrap_or_else(|| panic!("no turn id in {}", t.response))
            .to_string()
    };
    let (t1, t2) = (id_of(&first), id_of(&second));
    assert_ne!(t1, t2);
    assert_eq!(first.response["result"]["stopReason"], "end_turn");

    let turns = agent.call_ok("_maka/session/turns", json!({"sessionId": session}));
    let turns = turns["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2, "{turns:?}");
    assert_eq!(turns[0]["turnId"], t1.as_str());
    assert_eq!(turns[0]["title"], "please write the notes");
    assert_eq!(turns[0]["status"], "completed");
    let written = ws.path().join("notes.txt").canonicalize().unwrap();
    assert_eq!(turns[0]["filesChanged"], json!([written]));
    assert_eq!(turns[1]["turnId"], t2.as_str());
    assert_eq!(turns[1]["filesChanged"], json!([]));
    assert!(turns[0]["startedAt"].as_u64() <= turns[1]["startedAt"].as_u64());

    // Replayed user messages name their turns too.
    let mut other = AgentProcess::scripted(&script(), data.path());
    other.initialize();
    let load = other.drive(
        "session/load",
        json!({"sessionId": session, "cwd": ws.path(), "mcpServers": []}),
        |r| panic!("unexpected {r}"),
    );
    let replayed: Vec<&Value> = load
        .updates
        .iter()
        .map(|u| &u["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .map(|u| &u["_meta"]["maka"]["turnId"])
        .collect();
    assert_eq!(replayed, [&json!(t1), &json!(t2)]);

    // The convention: -32602 naming the field, -32002 for an unknown session, -32601 for a
    // `_maka/` method this agent does not have.
    let (resp, _) = agent.call("_maka/session/turns", json!({}));
    assert_eq!(error_of(&resp)["code"], -32602);
    assert!(error_of(&resp)["message"]
        .as_str()
        .unwrap()
        .contains("`sessionId`"));
    let (resp, _) = agent.call("_maka/session/turns", json!({"sessionId": "nope"}));
    assert_eq!(error_of(&resp)["code"], -32002, "{resp}");
    let (resp, _) = agent.call("_maka/session/nothing", json!({}));
    assert_eq!(error_of(&resp)["code"], -32601);
}

fn adapter_for(host: &support::host::HostProcess) -> AgentProcess {
    let mut agent = AgentProcess::spawn_with(support::Spawn {
        args: vec!["--host-url".into(), host.url("")],
        env: vec![
            ("RUST_LOG".into(), "info".into()),
            ("MAKA_HOST_TOKEN".into(), host.token.clone()),
        ],
    });
    agent.initialize();
    agent
}

#[test]
fn a_turn_interrupted_by_a_host_crash_is_offered_after_load_and_resumed_once() {
    let data = TempDir::new("maka-resume-data");
    let ws = TempDir::new("maka-resume-ws");
    let script = json!({
        "rules": [{"when": "slow", "responses": [[{"text": "Starting slowly"}, {"delayMs": 30000}, {"text": "never"}]]}],
        "default": [[{"text": "Picked up where it stopped."}]]
    });
    let env = vec![("MAKA_SCRIPT".to_string(), script.to_string())];
    let mut host = support::host::HostProcess::start_env(data.path(), env.clone());
    let mut first = adapter_for(&host);
    let session = first.new_session(ws.path());
    let prompt = first.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "slow work"}]}),
    );
    // The turn runs (its first words arrived); then the host dies under it.
    loop {
        let v = first.recv();
        if v["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    host.kill9();
    let (resp, _) = first.response_to(&prompt);
    assert_eq!(
        error_of(&resp)["data"]["makaCode"],
        "host_unavailable",
        "{resp}"
    );

    let host = support::host::HostProcess::start_env(data.path(), env);
    let mut agent = adapter_for(&host);
    agent.call_ok(
        "session/load",
        json!({"sessionId": session, "cwd": ws.path(), "mcpServers": []}),
    );
    agent.expect_commands(&session);
    let offer = agent.recv();
    assert_eq!(offer["method"], "_maka/turn_state", "{offer}");
    assert_eq!(
        (
            offer["params"]["state"].as_str(),
            offer["params"]["disposition"].as_str()
        ),
        (Some("interrupted"), Some("ready"))
    );
    let said = agent.recv();
    assert_eq!(
        said["params"]["update"]["sessionUpdate"],
        "agent_message_chunk"
    );
    assert!(said["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap()
        .contains("interrupted"));

    let resumed = agent.drive("_maka/turn/resume", json!({"sessionId": session}), |r| {
        panic!("unexpected {r}")
    });
    assert_eq!(
        resumed.response["result"]["stopReason"], "end_turn",
        "{}",
        resumed.response
    );
    assert!(resumed.text().contains("Picked up where it stopped."));
    let resumed_id = resumed.response["result"]["_meta"]["maka"]["turnId"].clone();

    // Never twice: the run was continued, so there is nothing left to resume.
    let (again, _) = agent.call("_maka/turn/resume", json!({"sessionId": session}));
    assert_eq!(
        error_of(&again)["data"]["makaCode"],
        "resume_parked",
        "{again}"
    );

    let turns = agent.call_ok("_maka/session/turns", json!({"sessionId": session}));
    let turns = turns["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2, "{turns:?}");
    assert_eq!(turns[0]["status"], "failed");
    assert_eq!(
        (turns[1]["origin"].as_str(), turns[1]["status"].as_str()),
        (Some("resume"), Some("completed"))
    );
    assert_eq!(turns[1]["turnId"], resumed_id);
}

/// Without `--acp` the names both adapters use are ours whatever the params: Apache Maka's
/// params (`condition`, `targetSessionId`, `kind`) are read as ours — a `-32602` naming our
/// field — and never switch the request to Maka's meaning (the connection's dialect does).
#[test]
fn makas_params_do_not_choose_makas_meaning_without_acp() {
    let data = TempDir::new("maka-sniff-data");
    let ws = TempDir::new("maka-sniff-ws");
    let mut agent = AgentProcess::scripted(&script(), data.path());
    agent.initialize();
    let session = agent.new_session(ws.path());
    for (method, params, field) in [
        (
            "_maka/goal/arm",
            json!({"sessionId": session, "condition": "make it shine"}),
            "`objective`",
        ),
        (
            "_maka/session/revision/abandon",
            json!({"targetSessionId": session}),
            "`sessionId`",
        ),
    ] {
        let (resp, _) = agent.call(method, params);
        let e = error_of(&resp);
        assert_eq!(e["code"], -32602, "{method}: {resp}");
        assert!(
            e["message"].as_str().unwrap().contains(field),
            "{method}: {resp}"
        );
    }
    // Maka's memory query by `kind` is our memory view, not Maka's `state`.
    let memory = agent.call_ok("_maka/memory/query", json!({"kind": "state"}));
    assert!(memory.get("kind").is_none(), "{memory}");
}
