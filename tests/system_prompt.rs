//! ACP `systemPrompt` (issue 26 item 4; stable since ACP schema 1.20.0) over the real binary and the real
//! OpenAI-compatible provider path (a fake server on loopback that records each request):
//! `append` adds the client's text after the composed instructions (AGENTS.md, memory);
//! `override` replaces the built-in base prompt but keeps the host's rules and the instruction
//! files; it is stored with the session (kept by a resume without one, replaced by a load with
//! one, shown by `_maka/session/turns`); what this agent cannot apply is `-32602` and no session.
//! A session without one sends the model exactly what it sent before. Every line the agent
//! writes is validated (the `initialize` result against the unstable schema).

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::fake_openai::{fake_server, sse};
use support::host::TempDir;
use support::{error_of, AgentProcess};

fn answer(text: &str) -> String {
    sse(&[
        json!({"choices": [{"delta": {"content": text}}]}),
        json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
    ])
}

fn agent(port: u16, data: &TempDir) -> AgentProcess {
    let mut a = AgentProcess::on_fake_provider(port, data.path(), &[]);
    let init = a.call_ok("initialize", json!({"protocolVersion": 1}));
    assert_eq!(
        init["agentCapabilities"]["sessionCapabilities"]["systemPrompt"],
        json!({"mode": {"override": {}}})
    );
    a
}

fn prompt_of(mode: &str, text: &str) -> Value {
    json!({"mode": mode, "content": [{"type": "text", "text": text}]})
}

fn new_session(a: &mut AgentProcess, ws: &TempDir, system_prompt: Option<Value>) -> String {
    let mut params = json!({"cwd": ws.path(), "mcpServers": []});
    if let Some(sp) = system_prompt {
        params["systemPrompt"] = sp;
    }
    let r = a.call_ok("session/new", params);
    let id = r["sessionId"].as_str().unwrap().to_string();
    a.expect_commands(&id);
    id
}

#[test]
fn a_client_system_prompt_is_appended_or_overrides_the_base_and_is_stored() {
    let (port, seen) = fake_server((0..5).map(|i| answer(&format!("reply {i}"))).collect());
    let data = TempDir::new("sp-data");
    let ws = TempDir::new("sp-ws");
    std::fs::write(
        ws.path().join("AGENTS.md"),
        "Run cargo fmt before committing.\n",
    )
    .unwrap();
    let mut a = agent(port, &data);
    let plain = new_session(&mut a, &ws, None);
    let appended = new_session(&mut a, &ws, Some(prompt_of("append", "Answer in French.")));
    let overridden = new_session(
        &mut a,
        &ws,
        Some(prompt_of("override", "You are Pierre, a terse reviewer.")),
    );
    for s in [&plain, &appended, &overridden] {
        let t = a.prompt(s, "hello", |r| panic!("{r}"));
        assert_eq!(t.response["result"]["stopReason"], "end_turn");
    }
    let system = |i: usize| -> String {
        seen.lock().unwrap()[i].body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (base, with_append, with_override) = (system(0), system(1), system(2));
    // Without one: the built-in prompt and the instruction file, as always.
    assert!(
        base.starts_with("You are Maka, a careful coding agent."),
        "{base}"
    );
    assert!(base.contains("Run cargo fmt before committing."), "{base}");
    assert!(!base.contains("client"), "{base}");
    // Append: all of that, then the client's text.
    assert_eq!(
        with_append,
        format!("{base}\n\nInstructions from the client:\nAnswer in French.")
    );
    // Override: the client's text instead of the base; the host's rules and AGENTS.md stay.
    assert!(
        with_override.starts_with(
            "You are Pierre, a terse reviewer.\n\nHost rules (always in force): you work in "
        ),
        "{with_override}"
    );
    assert!(with_override.contains("a call that is refused is final"));
    assert!(with_override.contains("Run cargo fmt before committing."));
    assert!(!with_override.contains("You are Maka"), "{with_override}");

    // Stored with the session and shown by `_maka/session/turns`.
    let turns = a.call_ok("_maka/session/turns", json!({"sessionId": appended}));
    assert_eq!(
        turns["systemPrompt"],
        json!({"mode": "append", "text": "Answer in French."}),
        "{turns}"
    );
    let turns = a.call_ok("_maka/session/turns", json!({"sessionId": plain}));
    assert!(turns.get("systemPrompt").is_none(), "{turns}");
    drop(a);

    // Another client: a resume without one keeps it; a load with one replaces it.
    let mut b = agent(port, &data);
    b.call_ok(
        "session/resume",
        json!({"sessionId": appended, "cwd": ws.path(), "mcpServers": []}),
    );
    b.prompt(&appended, "again", |r| panic!("{r}"));
    assert!(system(3).ends_with("Instructions from the client:\nAnswer in French."));
    b.call_ok(
        "session/load",
        json!({"sessionId": appended, "cwd": ws.path(), "mcpServers": [],
            "systemPrompt": prompt_of("append", "Answer in German.")}),
    );
    b.prompt(&appended, "once more", |r| panic!("{r}"));
    assert!(system(4).ends_with("Instructions from the client:\nAnswer in German."));
    let turns = b.call_ok("_maka/session/turns", json!({"sessionId": appended}));
    assert_eq!(turns["systemPrompt"]["text"], "Answer in German.");
}

#[test]
fn a_system_prompt_this_agent_cannot_apply_creates_no_session() {
    let (port, _) = fake_server(vec![]);
    let data = TempDir::new("sp-bad-data");
    let ws = TempDir::new("sp-bad-ws");
    let mut a = agent(port, &data);
    let cases = [
        (
            json!({"mode": "replace", "content": [{"type": "text", "text": "x"}]}),
            "`systemPrompt.mode`",
        ),
        (
            json!({"mode": "append", "content": []}),
            "`systemPrompt.content` is empty",
        ),
        (
            json!({"mode": "override", "content": [{"type": "text", "text": "  "}]}),
            "`systemPrompt.content` has no text",
        ),
        (
            json!({"mode": "append", "content": [{"type": "image", "data": "", "mimeType": "image/png"}]}),
            "`systemPrompt.content[0]` is not a text block",
        ),
        (
            json!({"mode": "append", "content": [{"type": "text", "text": "x".repeat(70_000)}]}),
            "at most 65536",
        ),
        (
            json!({"content": [{"type": "text", "text": "x"}]}),
            "`systemPrompt.mode`",
        ),
    ];
    for (sp, says) in cases {
        let (resp, _) = a.call(
            "session/new",
            json!({"cwd": ws.path(), "mcpServers": [], "systemPrompt": sp}),
        );
        let err = error_of(&resp);
        assert_eq!(err["code"], -32602, "{resp}");
        assert!(err["message"].as_str().unwrap().contains(says), "{resp}");
    }
    // Nothing was made: the data dir holds no session.
    let sessions = data.path().join("sessions");
    let made = std::fs::read_dir(&sessions).map(|d| d.count()).unwrap_or(0);
    assert_eq!(made, 0, "{}", sessions.display());
    // (A good one is made there: the count above means something.)
    new_session(&mut a, &ws, Some(prompt_of("append", "x")));
    assert_eq!(
        std::fs::read_dir(&sessions).map(|d| d.count()).unwrap_or(0),
        1
    );
}
