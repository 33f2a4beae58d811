//! A client of Apache Maka's `maka --acp`, written from its surface as described in
//! `shared/design/maka-adapter-surface.md` §1 (not from our docs), driving `maka-acp --acp`:
//! each test names the rows of §1 it covers. The real binary over pipes; every line it writes
//! is validated against the ACP v1 schema.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::host::TempDir;
use support::{error_of, AgentProcess, Reply, Spawn};

fn script() -> Value {
    json!({
        "models": [{"id": "deep", "label": "Deep", "thinkingLevels": ["low", "high"]}],
        "rules": [
            {"when": "make the file", "responses": [
                [{"tool": "write_file", "args": {"path": "out.txt", "content": "made"}}],
                [{"text": "Could not write it."}]]}
        ],
        "default": [[{"text": "Hello from the script!"}]]
    })
}

struct Maka {
    agent: AgentProcess,
    ws: TempDir,
    _data: TempDir,
}

/// `maka-acp --acp` on the scripted provider, initialized as a Maka client would (`client_meta`:
/// its `clientCapabilities._meta`); returns it and the `initialize` result.
fn maka(tag: &str, client_meta: Value, extra_env: &[(&str, &str)]) -> (Maka, Value) {
    let data = TempDir::new(&format!("makad-{tag}-data"));
    let ws = TempDir::new(&format!("makad-{tag}-ws"));
    let mut env = vec![
        ("RUST_LOG".to_string(), "info".to_string()),
        ("MAKA_SCRIPT".into(), script().to_string()),
        ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
        (
            "XDG_CONFIG_HOME".into(),
            data.path().join("config").display().to_string(),
        ),
    ];
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let mut agent = AgentProcess::spawn_with(Spawn {
        args: vec!["--acp".into()],
        env,
    });
    let init = agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {
            "elicitation": {"form": {}}, "_meta": client_meta}}),
    );
    (
        Maka {
            agent,
            ws,
            _data: data,
        },
        init,
    )
}

impl Maka {
    /// `session/new` → (sessionId, configOptions); skips the updates that follow it.
    fn new_session(&mut self) -> (String, Value) {
        let r = self.agent.call_ok(
            "session/new",
            json!({"cwd": self.ws.path(), "mcpServers": []}),
        );
        let id = r["sessionId"].as_str().unwrap().to_string();
        (id, r["configOptions"].clone())
    }

    fn error(&mut self, method: &str, params: Value) -> Value {
        let (resp, _) = self.agent.call(method, params);
        error_of(&resp).clone()
    }
}

fn option<'a>(options: &'a Value, id: &str) -> &'a Value {
    options
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == id)
        .unwrap_or_else(|| panic!("no option {id} in {options}"))
}

/// §1 "initialize result": `_meta["_maka/goalPlan"] = {version: 1}` (our `_meta.maka` beside
/// it), `loadSession`, `sessionCapabilities {list, resume, close}`.
#[test]
fn initialize_advertises_makas_goal_plan_extension() {
    let (_m, init) = maka("init", json!({}), &[]);
    let caps = &init["agentCapabilities"];
    assert_eq!(caps["_meta"]["_maka/goalPlan"], json!({"version": 1}));
    assert_eq!(caps["loadSession"], true);
    for c in ["list", "resume", "close"] {
        assert!(caps["sessionCapabilities"][c].is_object(), "{c}: {caps}");
    }
    assert_eq!(init["protocolVersion"], 1);
}

/// §1.4 config options: Maka's ids, categories and order, `collaboration_mode` always;
/// `session/set_config_option` takes Maka's ids and answers the full set; bad id/value is
/// `-32602` with `data.field`.
#[test]
fn config_options_by_makas_ids_and_categories() {
    let (mut m, _) = maka("config", json!({}), &[]);
    let (sid, options) = m.new_session();
    let shown: Vec<(&str, &str)> = options
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["id"].as_str().unwrap(), o["category"].as_str().unwrap()))
        .collect();
    assert_eq!(
        shown,
        [
            ("permission_mode", "_maka/permission_mode"),
            ("thinking_level", "thought_level"),
            ("collaboration_mode", "mode"),
            ("orchestration_mode", "_maka/orchestration_mode"),
        ]
    );
    for o in options.as_array().unwrap() {
        assert_eq!(o["type"], "select", "{o}");
    }
    // Paseo's mode selector sends the category-`mode` option's values.
    for (id, value) in [
        ("collaboration_mode", "plan"),
        ("permission_mode", "bypass"),
        ("thinking_level", "high"),
        ("orchestration_mode", "swarm"),
    ] {
        let r = m.agent.call_ok(
            "session/set_config_option",
            json!({"sessionId": sid, "configId": id, "value": value}),
        );
        assert_eq!(
            option(&r["configOptions"], id)["currentValue"],
            value,
            "{r}"
        );
    }
    let e = m.error(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "speed", "value": "x"}),
    );
    assert_eq!(e["code"], -32602);
    assert_eq!(e["data"]["field"], "configId");
    let e = m.error(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "collaboration_mode", "value": "ask"}),
    );
    assert_eq!(e["code"], -32602);
    assert_eq!(e["data"]["field"], "value");
}

/// §1 "Ownership": a session this connection does not own is `-32602` with `data.reason:
/// "unknown_session"`, on ACP methods and `_maka/` ones alike.
#[test]
fn unknown_sessions_are_makas_error() {
    let (mut m, _) = maka("unknown", json!({}), &[]);
    for (method, params) in [
        (
            "session/prompt",
            json!({"sessionId": "nope", "prompt": [{"type": "text", "text": "hi"}]}),
        ),
        (
            "session/set_config_option",
            json!({"sessionId": "nope", "configId": "permission_mode", "value": "ask"}),
        ),
        ("session/close", json!({"sessionId": "nope"})),
    ] {
        let e = m.error(method, params);
        assert_eq!(e["code"], -32602, "{method}: {e}");
        assert_eq!(e["data"]["reason"], "unknown_session", "{method}: {e}");
    }
}

/// §3.6: Paseo's Maka provider drops `session/request_permission`. In `ask` mode the request
/// is withdrawn after the bound (`MAKA_PERMISSION_TIMEOUT_MS`; 60 s by default in this
/// dialect), the tool is denied saying why, and the turn ends normally instead of waiting
/// until cancelled.
#[test]
fn an_unanswered_permission_request_fails_the_tool_after_the_bound() {
    let (mut m, _) = maka("perm", json!({}), &[("MAKA_PERMISSION_TIMEOUT_MS", "300")]);
    let (sid, options) = m.new_session();
    assert_eq!(option(&options, "permission_mode")["currentValue"], "ask");
    let started = std::time::Instant::now();
    let t = m.agent.prompt(&sid, "make the file", |r| {
        assert_eq!(r["method"], "session/request_permission", "{r}");
        Reply::Ignore
    });
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{:?}",
        t.response
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    assert_eq!(t.requests.len(), 1);
    let asked = &t.requests[0]["id"];
    assert!(
        t.notifications
            .iter()
            .any(|n| n["method"] == "$/cancel_request" && n["params"]["requestId"] == *asked),
        "the request is withdrawn: {:?}",
        t.notifications
    );
    let failed = t
        .updates_for(&sid)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed")
        .unwrap_or_else(|| panic!("the tool fails: {:?}", t.updates))
        .to_string();
    assert!(
        failed.contains("did not answer the permission request"),
        "{failed}"
    );
    assert!(!m.ws.path().join("out.txt").exists(), "nothing was written");
}
