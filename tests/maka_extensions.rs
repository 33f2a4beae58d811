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
