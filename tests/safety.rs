//! Safety of what the Maka half added (issue 24), through the real binary over pipes: what a
//! command the model runs can see of the host's secrets. (Kept rules: permission_rules.rs;
//! instruction files and declarations: unit tests in memory.rs and subagents/mod.rs.)

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::host::TempDir;
use support::{select, AgentProcess, Spawn};

/// A command that prints its own environment and its parent's (the host's) initial one.
const SNOOP: &str = "echo @@OWN; env; echo @@PARENT; tr '\\0' '\\n' < /proc/$PPID/environ";

/// The embedded host's token is in no environment block a command can read, and neither the
/// token nor the provider's keys nor other secrets of the editor's environment reach the
/// command's own environment; what it needs to find its tools does.
#[test]
fn commands_see_neither_the_hosts_token_nor_provider_keys() {
    let data = TempDir::new("safety-env-data");
    let ws = TempDir::new("safety-env-ws");
    let script = json!({"default": [
        [{"tool": "run_command", "args": {"command": SNOOP}}],
        [{"text": "looked"}]
    ]});
    let mut a = AgentProcess::spawn_with(Spawn {
        args: vec![],
        env: vec![
            ("MAKA_SCRIPT".into(), script.to_string()),
            ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
            (
                "XDG_CONFIG_HOME".into(),
                data.path().join("config").display().to_string(),
            ),
            (
                "MAKA_OPENAI_API_KEY".into(),
                "sk-provider-key-never-shown".into(),
            ),
            (
                "GITHUB_TOKEN".into(),
                "ghp-editor-secret-never-shown".into(),
            ),
            ("LC_ALL".into(), "C.UTF-8".into()),
        ],
    });
    a.initialize();
    let id = a.new_session(ws.path());
    let t = a.prompt(&id, "look around", |_| select("allow_once"));
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
    let info: Value =
        serde_json::from_slice(&std::fs::read(data.path().join("host.json")).unwrap()).unwrap();
    let token = info["token"].as_str().expect("host.json names the token");
    let output: String = t
        .updates_for(&id)
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update")
        .filter_map(|u| u["content"][0]["content"]["text"].as_str())
        .collect();
    let (_, seen) = output
        .split_once("\n@@OWN\n")
        .unwrap_or_else(|| panic!("the command ran: {output}"));
    let (own, parents) = seen.split_once("\n@@PARENT\n").unwrap();
    for secret in [
        token,
        "sk-provider-key-never-shown",
        "ghp-editor-secret-never-shown",
    ] {
        assert!(
            !own.contains(secret),
            "the command's environment holds {secret}: {own}"
        );
    }
    assert!(
        !parents.contains(token),
        "the host's environment block holds its token"
    );
    assert!(!parents.contains("MAKA_HOST_TOKEN"), "{parents}");
    for needed in ["PATH=", "HOME=", "LC_ALL=C.UTF-8"] {
        assert!(own.contains(needed), "{needed} reaches the command: {own}");
    }
}
