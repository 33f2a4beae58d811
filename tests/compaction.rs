//! Context compaction (issue 26 item 3) over the real binary and the real OpenAI-compatible
//! provider code path (a local fake server that records what it was sent): a turn whose input
//! nears the model's context window compacts the conversation before it by itself, keeps its
//! own prompt after the summary, and counts the summary's call in usage; `/compact` is the same
//! path. A client that advertises `session.compaction` sees `compaction_update` and
//! `compaction_summary_chunk`, live and on `session/load`; any other client sees exactly what
//! it saw before (`/compact`'s reply as agent text) or, for the automatic one, a thought — the
//! same live and replayed. Every line is validated against the ACP v1 schema.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::fake_openai::{fake_server, sse};
use support::host::TempDir;
use support::AgentProcess;

fn answer(text: &str, prompt_tokens: u64) -> String {
    sse(&[
        json!({"choices": [{"delta": {"content": text}}]}),
        json!({"choices": [{"delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 7}}),
    ])
}

/// An agent on the fake provider with a 1 000-token context window, initialized with `caps`.
fn agent(port: u16, data: &TempDir, caps: Value) -> AgentProcess {
    let mut a =
        AgentProcess::on_fake_provider(port, data.path(), &[("MAKA_MODEL_CONTEXT_WINDOW", "1000")]);
    a.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": caps}),
    );
    a
}

/// What one scenario leaves: the second turn's updates, the requests the model saw, the
/// usage the session counted, and what a reload replays to each kind of client.
struct Run {
    second_turn: Vec<Value>,
    requests: Vec<Value>,
    usage_output_tokens: u64,
    replay_to_compaction_client: Vec<Value>,
    replay_to_other_client: Vec<Value>,
}

/// Turn 1 alone fills most of the window (nothing before it to compact: it runs as it is);
/// turn 2 finds the conversation over 80 % of the window and compacts turn 1 first.
fn run(caps: Value) -> Run {
    let (port, seen) = fake_server(vec![
        answer("Noted the long brief.", 900),
        answer("The user sent a long brief about lighthouses.", 950),
        answer("Lighthouses guide ships.", 200),
        answer("They shine at night.", 250),
    ]);
    let data = TempDir::new("compaction-data");
    let ws = TempDir::new("compaction-ws");
    let mut a = agent(port, &data, caps);
    let id = a.new_session(ws.path());
    let brief = format!("Here is a long brief: {}", "lighthouse ".repeat(300));
    let t1 = a.prompt(&id, &brief, |r| panic!("{r}"));
    assert_eq!(t1.response["result"]["stopReason"], "end_turn");
    let t2 = a.prompt(&id, "what do they do?", |r| panic!("{r}"));
    assert_eq!(t2.response["result"]["stopReason"], "end_turn");
    assert!(
        t2.text().ends_with("Lighthouses guide ships."),
        "{}",
        t2.text()
    );
    // A later turn: the summary, the turn it kept, then its own prompt (no second compaction:
    // what came before it is small now).
    let t3 = a.prompt(&id, "and at night?", |r| panic!("{r}"));
    assert_eq!(t3.text(), "They shine at night.");
    let usage = a.call_ok("_maka/usage/query", json!({"sessionId": id}));
    let replay = |caps: Value| -> Vec<Value> {
        let mut other = agent(port, &data, caps);
        let (_, lines) = other.call(
            "session/load",
            json!({"sessionId": id, "cwd": ws.path(), "mcpServers": []}),
        );
        lines
            .iter()
            .map(|l| l["params"]["update"].clone())
            .filter(|u| !u.is_null())
            .collect()
    };
    let requests = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.body.clone())
        .collect();
    Run {
        second_turn: t2.updates_for(&id).into_iter().cloned().collect(),
        requests,
        usage_output_tokens: usage["totals"]["outputTokens"].as_u64().unwrap_or_default(),
        replay_to_compaction_client: replay(json!({"session": {"compaction": {}}})),
        replay_to_other_client: replay(json!({})),
    }
}

fn of_kind<'a>(updates: &'a [Value], kind: &str) -> Vec<&'a Value> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

#[test]
fn a_turn_near_the_window_compacts_what_came_before_it_and_keeps_its_own_prompt() {
    let r = run(json!({"session": {"compaction": {}}}));
    // Four model calls: turn 1, the summary (no tools, the brief in it), turn 2's step, turn 3.
    assert_eq!(r.requests.len(), 4, "{:#?}", r.requests);
    let roles_and_text: Vec<(String, String)> = r.requests[3]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let pairs = [
        (
            "user",
            "Summary of the earlier conversation:\nThe user sent a long brief about lighthouses.",
        ),
        ("user", "what do they do?"),
        ("assistant", "Lighthouses guide ships."),
        ("user", "and at night?"),
    ]
    .map(|(a, b)| (a.to_string(), b.to_string()));
    assert_eq!(roles_and_text, pairs);
    let summary_request = &r.requests[1];
    assert!(
        summary_request
            .get("tools")
            .is_none_or(|t| t.as_array().is_some_and(|a| a.is_empty())),
        "{summary_request}"
    );
    let asked = summary_request["messages"].as_array().unwrap();
    assert!(asked.iter().any(|m| m["content"]
        .as_str()
        .is_some_and(|c| c.starts_with("Here is a long brief"))));
    assert!(
        !asked.iter().any(|m| m["content"] == "what do they do?"),
        "the running turn is not summarised: {asked:#?}"
    );
    // The step after it: the system prompt, the summary, then this turn's own prompt.
    let next = r.requests[2]["messages"].as_array().unwrap();
    assert_eq!(next.len(), 3, "{next:#?}");
    assert_eq!(
        next[1]["content"],
        "Summary of the earlier conversation:\nThe user sent a long brief about lighthouses."
    );
    assert_eq!(next[2]["content"], "what do they do?");
    // The summary's call is counted: 7 output tokens for each of the four calls.
    assert_eq!(r.usage_output_tokens, 28);

    // Live: in progress, then the summary and completed, under one id, before the reply.
    let updates = &r.second_turn;
    let states: Vec<(&str, &str)> = updates
        .iter()
        .filter(|u| {
            u["sessionUpdate"] == "compaction_update"
                || u["sessionUpdate"] == "compaction_summary_chunk"
        })
        .map(|u| {
            (
                u["sessionUpdate"].as_str().unwrap(),
                u["status"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("compaction_update", "in_progress"),
            ("compaction_summary_chunk", "-"),
            ("compaction_update", "completed")
        ],
        "{updates:#?}"
    );
    let id = &of_kind(updates, "compaction_update")[0]["compactionId"];
    assert!(of_kind(updates, "compaction_summary_chunk")[0]["compactionId"] == *id);
    assert_eq!(
        of_kind(updates, "compaction_summary_chunk")[0]["content"]["text"],
        "The user sent a long brief about lighthouses."
    );
    assert!(
        of_kind(updates, "agent_thought_chunk").is_empty(),
        "{updates:#?}"
    );
    let at = |kind: &str| updates.iter().position(|u| u["sessionUpdate"] == kind);
    assert!(at("compaction_summary_chunk") < at("agent_message_chunk"));

    // A reload replays the completed compaction, once, with its summary.
    let replay = &r.replay_to_compaction_client;
    let chunks = of_kind(replay, "compaction_summary_chunk");
    assert_eq!(chunks.len(), 1, "{replay:#?}");
    assert_eq!(chunks[0]["compactionId"], *id);
    let done = of_kind(replay, "compaction_update");
    assert_eq!(done.len(), 1, "{replay:#?}");
    assert_eq!(done[0]["status"], "completed");
}

#[test]
fn a_client_without_compaction_sees_a_thought_live_and_replayed_alike() {
    let r = run(json!({}));
    assert_eq!(r.requests.len(), 4);
    let updates = &r.second_turn;
    assert!(
        of_kind(updates, "compaction_update").is_empty(),
        "{updates:#?}"
    );
    assert!(of_kind(updates, "compaction_summary_chunk").is_empty());
    let thoughts = of_kind(updates, "agent_thought_chunk");
    assert_eq!(thoughts.len(), 1, "{updates:#?}");
    let said = thoughts[0]["content"]["text"].as_str().unwrap();
    assert!(
        said.starts_with("The conversation neared the model's context window: 2 earlier messages were compacted into a summary (context ≈"),
        "{said}"
    );
    let replayed = of_kind(&r.replay_to_other_client, "agent_thought_chunk");
    assert_eq!(replayed, thoughts, "the reload replays the same thought");
    assert!(of_kind(&r.replay_to_other_client, "compaction_update").is_empty());
}

/// A summary call that the provider refuses once (HTTP 503) is retried, and the retry is told
/// like any model call's — here as a thought, under an id of its own — before the compaction.
#[test]
fn a_retried_summary_call_is_told_like_any_other() {
    let (port, seen) = fake_server(vec![
        answer("Noted the long brief.", 900),
        support::fake_openai::http(
            503,
            "{\"error\":{\"message\":\"busy\"}}",
            &[("Retry-After", "0")],
        ),
        answer("The user sent a long brief about lighthouses.", 950),
        answer("Lighthouses guide ships.", 200),
    ]);
    let data = TempDir::new("compaction-retry-data");
    let ws = TempDir::new("compaction-retry-ws");
    let mut a = agent(port, &data, json!({}));
    let id = a.new_session(ws.path());
    let brief = format!("Here is a long brief: {}", "lighthouse ".repeat(300));
    a.prompt(&id, &brief, |r| panic!("{r}"));
    let t = a.prompt(&id, "what do they do?", |r| panic!("{r}"));
    assert!(
        t.text().ends_with("Lighthouses guide ships."),
        "{}",
        t.text()
    );
    assert_eq!(seen.lock().unwrap().len(), 4);
    let thoughts = t.thoughts(&id);
    assert_eq!(thoughts.len(), 2, "{thoughts:#?}");
    assert!(
        thoughts[0]
            .1
            .starts_with("The model provider did not answer (HTTP 503"),
        "{thoughts:#?}"
    );
    assert!(thoughts[1]
        .1
        .starts_with("The conversation neared the model's context window"));
    assert_ne!(thoughts[0].0, thoughts[1].0);
}
