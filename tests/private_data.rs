//! Secrets stay out of sight (issue 45), through the real binary over pipes: a declared
//! subagent's environment values appear in no dialog, no line on stdout, no log line and no file
//! of the data dir. (A provider's key echoed in its error: openai_provider.rs.)

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::host::{files_holding, TempDir};
use support::{select, AgentProcess};

fn stub_agent() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stub_agent.py").to_string()
}

/// The parent model delegates "noop" to agent `stub` when told "stub: noop".
fn delegating_script() -> Value {
    json!({"rules": [{"when": "stub: noop", "responses": [
        [{"tool": "delegate", "args": {"agent": "stub", "task": "noop"}}],
        [{"text": "delegated"}]]}],
        "default": [[{"text": "Hello."}]]})
}

/// Declares `stub` in `ws` with `env`.
fn declare(ws: &TempDir, env: Value) {
    std::fs::create_dir_all(ws.path().join(".maka")).unwrap();
    std::fs::write(
        ws.path().join(".maka/agents.json"),
        json!({"agents": {"stub": {"command": "python3", "args": [stub_agent()], "env": env}}})
            .to_string(),
    )
    .unwrap();
}

/// (case 9) The trust dialog names a declared agent's variables, not their values (an API key,
/// often); no line on stdout, no log line and no file of the data dir holds a value. The trust
/// still covers the exact declaration: a changed value asks again.
#[test]
fn a_declared_agents_environment_values_stay_out_of_sight() {
    const VALUE: &str = "sk-subagent-secret-0123456789";
    const CHANGED: &str = "sk-subagent-secret-changed-42";
    let data = TempDir::new("private-env-data");
    let ws = TempDir::new("private-env-ws");
    declare(&ws, json!({"STUB_API_KEY": VALUE, "STUB_MODE": "quiet"}));
    let mut a = AgentProcess::scripted(&delegating_script(), data.path());
    a.initialize();
    let s = a.new_session(ws.path());
    let mut lines = vec![];
    let mut delegate = |a: &mut AgentProcess, answer: &'static str| -> Vec<String> {
        let mut titles = vec![];
        let t = a.prompt(&s, "stub: noop", |r| {
            assert_eq!(r["method"], "session/request_permission", "{r}");
            titles.push(
                r["params"]["toolCall"]["title"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
            select(answer)
        });
        assert_eq!(
            t.response["result"]["stopReason"], "end_turn",
            "{}",
            t.response
        );
        lines.extend(t.lines);
        titles
    };
    let titles = delegate(&mut a, "allow_workspace");
    assert_eq!(titles.len(), 1, "{titles:?}");
    assert!(
        titles[0].contains("STUB_API_KEY=…") && titles[0].contains("STUB_MODE=…"),
        "the names: {}",
        titles[0]
    );
    assert!(delegate(&mut a, "reject").is_empty(), "trusted as declared");
    declare(&ws, json!({"STUB_API_KEY": CHANGED, "STUB_MODE": "quiet"}));
    assert_eq!(
        delegate(&mut a, "allow_once").len(),
        1,
        "a changed value asks again"
    );

    a.close_stdin();
    lines.extend(a.drain());
    a.wait_exit(std::time::Duration::from_secs(10));
    for secret in [VALUE, CHANGED] {
        for line in &lines {
            assert!(!line.to_string().contains(secret), "on stdout: {line}");
        }
        assert!(!a.stderr().contains(secret), "in the log:\n{}", a.stderr());
        let held = files_holding(data.path(), secret);
        assert!(held.is_empty(), "in the data dir: {held:#?}");
    }
}
