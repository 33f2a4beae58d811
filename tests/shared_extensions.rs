//! The extensions other ACP agents share (issue 47), through the real binary over pipes, each
//! with a client that asks for it and one that does not: `_session/steering`, the turn's
//! `_meta.quota`, terminal output deltas, `_session/goal`. Every line the agent writes is checked against the ACP schema.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::host::TempDir;
use support::{error_of, select, AgentProcess};

fn script() -> Value {
    json!({
        "rules": [
            {"when": "what did i say", "responses": [[{"echo": "user"}]]},
            {"when": "Work toward this goal: make it shine", "responses": [[{"text": "Polishing."}]]},
            {"when": "Continue toward the goal: make it shine", "responses": [
                [{"tool": "goal_complete", "args": {"evidence": "It shines."}}],
                [{"text": "Goal met."}]]},
            {"when": "keep going", "responses": [[{"delayMs": 300}, {"text": "Still going."}]]},
            {"when": "run it", "responses": [
                [{"tool": "run_command", "args": {"command": "echo one; sleep 0.3; echo two; sleep 0.3; echo three"}}],
                [{"text": "ran"}]]},
            {"when": "two steps", "responses": [
                [{"tool": "update_plan", "args": {"entries": [{"content": "a", "status": "pending"}]}},
                 {"usage": {"input": 50, "output": 8, "cached": 20}}],
                [{"text": "two"}, {"usage": {"input": 70, "output": 5}}]]},
            {"when": "slow", "responses": [
                [{"text": "Working"}, {"delayMs": 1500}],
                [{"echo": "user"}]]}
        ],
        "default": [[{"text": "Hello."}]]
    })
}

fn agent(data: &std::path::Path) -> AgentProcess {
    AgentProcess::spawn_with(support::Spawn {
        args: vec![],
        env: vec![
            ("MAKA_SCRIPT".into(), script().to_string()),
            ("MAKA_DATA_DIR".into(), data.display().to_string()),
            (
                "XDG_CONFIG_HOME".into(),
                data.join("config").display().to_string(),
            ),
        ],
    })
}

fn text(prompt: &str) -> Value {
    json!([{"type": "text", "text": prompt}])
}

/// Lines until (and with) the first one `done` accepts.
fn until(a: &mut AgentProcess, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut lines = vec![];
    loop {
        let v = a.recv();
        let last = done(&v);
        lines.push(v);
        if last {
            return lines;
        }
    }
}

fn chunks(lines: &[Value], kind: &str) -> String {
    lines
        .iter()
        .filter(|l| {
            l["method"] == "session/update" && l["params"]["update"]["sessionUpdate"] == kind
        })
        .map(|l| {
            l["params"]["update"]["content"]["text"]
                .as_str()
                .unwrap_or("")
        })
        .collect()
}

/// `_session/steering` as claude-agent-acp and codex-acp serve it: advertised as
/// `_meta.steering.supported`; a running turn takes the message (`injected`, shown as a user
/// message where the turn took it, replayed by `session/load`); an idle session starts a turn
/// with it (`startedNewTurn`, followed to its end) unless the client asked for
/// `idleBehavior: "promptRequired"`; bad params are `-32602`.
#[test]
fn steering_injects_into_the_running_turn_or_starts_one() {
    let data = TempDir::new("shared-steer-data");
    let ws = TempDir::new("shared-steer-ws");
    let mut a = agent(data.path());
    let init = a.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    assert_eq!(
        init["_meta"]["steering"],
        json!({"supported": true}),
        "{init}"
    );
    let s = a.new_session(ws.path());

    // Idle, and the client sends the message as a prompt itself.
    let required = a.call_ok(
        "_session/steering",
        json!({"sessionId": s, "prompt": text("later"), "_meta": {"steering": {"idleBehavior": "promptRequired"}}}),
    );
    assert_eq!(
        required,
        json!({"outcome": "promptRequired", "reason": "noRunningTurn"})
    );
    for (params, names) in [
        (json!({"sessionId": s, "prompt": []}), "prompt"),
        (
            json!({"sessionId": s, "prompt": text("x"), "_meta": {"steering": {"idleBehavior": "queue"}}}),
            "idleBehavior",
        ),
        (json!({"sessionId": s}), "prompt"),
    ] {
        let (resp, _) = a.call("_session/steering", params);
        assert_eq!(error_of(&resp)["code"], -32602, "{resp}");
        assert!(
            error_of(&resp)["message"].as_str().unwrap().contains(names),
            "{resp}"
        );
    }
    let (resp, _) = a.call(
        "_session/steering",
        json!({"sessionId": "sess_nope", "prompt": text("x")}),
    );
    assert_eq!(error_of(&resp)["code"], -32002, "{resp}");

    // A running turn takes it at its next step.
    let prompt = a.request(
        "session/prompt",
        json!({"sessionId": s, "prompt": text("slow task")}),
    );
    let mut lines = until(&mut a, |v| {
        v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    let steer = a.request(
        "_session/steering",
        json!({"sessionId": s, "prompt": text("also check the tests")}),
    );
    let (mut steered, mut answered) = (None, None);
    while steered.is_none() || answered.is_none() {
        let v = a.recv();
        if v.get("id") == Some(&steer) && v.get("method").is_none() {
            steered = Some(v.clone());
        } else if v.get("id") == Some(&prompt) && v.get("method").is_none() {
            answered = Some(v.clone());
        }
        lines.push(v);
    }
    assert_eq!(steered.unwrap()["result"], json!({"outcome": "injected"}));
    assert_eq!(answered.unwrap()["result"]["stopReason"], "end_turn");
    assert_eq!(
        chunks(&lines, "agent_message_chunk"),
        "Workingheard: slow task | also check the tests"
    );
    assert_eq!(chunks(&lines, "user_message_chunk"), "also check the tests");

    // Idle, not opted in: a turn of its own, followed to its end (told as `_maka/turn_state`,
    // as a turn no prompt of this client waits for).
    let (started, _) = a.call(
        "_session/steering",
        json!({"sessionId": s, "prompt": text("what did i say")}),
    );
    assert_eq!(
        started["result"],
        json!({"outcome": "startedNewTurn"}),
        "{started}"
    );
    let lines = until(&mut a, |v| v["method"] == "_maka/turn_state");
    assert_eq!(
        chunks(&lines, "agent_message_chunk"),
        "heard: slow task | also check the tests | what did i say"
    );
    assert_eq!(lines.last().unwrap()["params"]["outcome"], "completed");

    // A turn started by steering is this client's to stop: session/cancel stops it.
    let (started, _) = a.call(
        "_session/steering",
        json!({"sessionId": s, "prompt": text("slow again")}),
    );
    assert_eq!(
        started["result"],
        json!({"outcome": "startedNewTurn"}),
        "{started}"
    );
    until(&mut a, |v| {
        v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    a.notify("session/cancel", json!({"sessionId": s}));
    let lines = until(&mut a, |v| v["method"] == "_maka/turn_state");
    assert_eq!(
        lines.last().unwrap()["params"]["outcome"],
        "cancelled",
        "{lines:#?}"
    );

    // Both messages are the conversation's, replayed where they were taken in.
    let mut other = agent(data.path());
    other.initialize();
    let load = other.drive(
        "session/load",
        json!({"sessionId": s, "cwd": ws.path(), "mcpServers": []}),
        |r| panic!("unexpected {r}"),
    );
    let users: Vec<&str> = load
        .updates_for(&s)
        .iter()
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        users,
        [
            "slow task",
            "also check the tests",
            "what did i say",
            "slow again"
        ]
    );
}

/// `PromptResponse._meta.quota`: the turn's token usage, in total and by model, as the
/// provider reported it (two model steps here).
#[test]
fn a_prompts_answer_carries_the_turns_token_usage() {
    let data = TempDir::new("shared-quota-data");
    let ws = TempDir::new("shared-quota-ws");
    let mut a = agent(data.path());
    a.initialize();
    let s = a.new_session(ws.path());
    let t = a.prompt(&s, "two steps", |r| panic!("unexpected {r}"));
    let quota = &t.response["result"]["_meta"]["quota"];
    let total = &quota["token_count"];
    assert_eq!(
        (
            &total["input_tokens"],
            &total["output_tokens"],
            &total["cached_input_tokens"]
        ),
        (&json!(120), &json!(13), &json!(20)),
        "{quota}"
    );
    let models = quota["model_usage"].as_array().unwrap();
    assert_eq!(models.len(), 1, "{quota}");
    assert!(models[0]["model"].as_str().is_some_and(|m| !m.is_empty()));
    assert_eq!(models[0]["token_count"], *total);
    assert!(
        t.response["result"].get("usage").is_none(),
        "ACP's unstable usage is opt-in"
    );

    // ACP's own `PromptResponse.usage` (unstable, issue 49 item 5), to a client that opted in.
    let mut b = agent(data.path());
    b.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"_meta": {"unstable_end_turn_token_usage": true}}}),
    );
    let s = b.new_session(ws.path());
    let t = b.prompt(&s, "two steps", |r| panic!("unexpected {r}"));
    assert_eq!(
        t.response["result"]["usage"],
        json!({"totalTokens": 133, "inputTokens": 120, "outputTokens": 13, "thoughtTokens": 0, "cachedReadTokens": 20})
    );
}

/// `clientCapabilities._meta.terminal_output_delta: true` (JetBrains' convention): a running
/// command's output also comes as appended pieces, `tool_call_update._meta
/// .terminal_output_delta = {terminal_id, data}`, in order and whole; beside the output the
/// call shows as before. A client that does not ask sees none of them and nothing else changes.
#[test]
fn terminal_output_deltas_go_only_to_clients_that_ask() {
    let data = TempDir::new("shared-delta-data");
    let ws = TempDir::new("shared-delta-ws");
    let run = |caps: Value| {
        let mut a = agent(data.path());
        a.call_ok(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": caps}),
        );
        let s = a.new_session(ws.path());
        let t = a.prompt(&s, "run it", |_| select("allow_once"));
        assert_eq!(
            t.response["result"]["stopReason"], "end_turn",
            "{}",
            t.response
        );
        let updates: Vec<Value> = t.updates_for(&s).into_iter().cloned().collect();
        updates
    };
    let deltas = |updates: &[Value]| -> Vec<(String, String)> {
        updates
            .iter()
            .filter_map(|u| u["_meta"].get("terminal_output_delta"))
            .map(|d| {
                (
                    d["terminal_id"].as_str().unwrap().to_string(),
                    d["data"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let with = run(json!({"_meta": {"terminal_output_delta": true}}));
    let pieces = deltas(&with);
    assert!(pieces.len() >= 2, "{pieces:?}");
    let call = with
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap()["toolCallId"]
        .clone();
    assert!(pieces.iter().all(|(id, _)| *id == call), "{pieces:?}");
    let whole: String = pieces.iter().map(|(_, d)| d.as_str()).collect();
    assert_eq!(whole, "one\ntwo\nthree\n");
    let done = with.iter().find(|u| u["status"] == "completed").unwrap();
    assert!(
        done["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("three"),
        "the output is shown as before: {done}"
    );

    let without = run(json!({}));
    assert!(deltas(&without).is_empty());
    assert!(without
        .iter()
        .all(|u| u["_meta"].get("terminal_output_delta").is_none()));
}

/// The goal snapshots (`session_info_update._meta.goal`) among `lines`, in order.
fn goal_snapshots(lines: &[Value]) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| l["params"]["update"]["sessionUpdate"] == "session_info_update")
        .filter_map(|l| l["params"]["update"]["_meta"].get("goal").cloned())
        .collect()
}

/// The lines that came with a call (`early`, before its response) and after it, until a goal
/// snapshot that `done` accepts: a goal's own answer shows its snapshot before the response,
/// the reader's frame of it after.
fn call_until_snapshot(
    a: &mut AgentProcess,
    early: Vec<Value>,
    done: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    if goal_snapshots(&early).iter().any(&done) {
        return early;
    }
    let mut lines = early;
    lines.extend(until_snapshot(a, done));
    lines
}

/// Lines until a goal snapshot that `done` accepts.
fn until_snapshot(a: &mut AgentProcess, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    until(a, |v| {
        v["params"]["update"]["sessionUpdate"] == "session_info_update"
            && v["params"]["update"]["_meta"]
                .get("goal")
                .is_some_and(&done)
    })
}

/// `_session/goal` as claude-agent-acp's goal extension defines it: advertised as `_meta.goal`
/// with the actions it supports; set, pause, resume and clear on our goals; the state as
/// `session_info_update._meta.goal` (`null` once cleared), live and on `session/load`; a
/// session without a goal sees none of it.
#[test]
fn the_goal_extension_sets_pauses_resumes_and_clears_our_goals() {
    let data = TempDir::new("shared-goal-data");
    let ws = TempDir::new("shared-goal-ws");
    let mut a = agent(data.path());
    let init = a.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    assert_eq!(
        init["_meta"]["goal"],
        json!({"version": 1, "controlMethod": "_session/goal", "actions": ["set", "pause", "resume", "clear"]})
    );

    // A goal the model meets: live snapshots, the last one `complete`.
    let s = a.new_session(ws.path());
    let (set, early) = a.call(
        "_session/goal",
        json!({"sessionId": s, "action": "set", "objective": "make it shine"}),
    );
    let goal = &set["result"]["goal"];
    assert_eq!(
        (&goal["objective"], &goal["status"]),
        (&json!("make it shine"), &json!("active")),
        "{set}"
    );
    assert_eq!(goal["controlMethod"], "_session/goal");
    assert!(
        goal["createdAt"]
            .as_u64()
            .is_some_and(|t| t > 1_700_000_000_000),
        "{goal}"
    );
    let mut lines = early;
    lines.extend(until_snapshot(&mut a, |g| g["status"] == "complete"));
    // The goal's last turn ends after the goal is met.
    lines.extend(until(&mut a, |v| {
        v["method"] == "_maka/turn_state" && v["params"]["sessionId"] == s.as_str()
    }));
    let shown = goal_snapshots(&lines);
    assert_eq!(shown.first().unwrap()["status"], "active", "{shown:?}");
    let met = shown.iter().find(|g| g["status"] == "complete").unwrap();
    assert_eq!(
        met["iterations"], 1,
        "met during its second turn: {shown:?}"
    );
    assert_eq!(shown.last().unwrap()["status"], "complete", "{shown:?}");

    // Pause, resume, clear; pause with nothing to pause and a set without an objective fail.
    let s2 = a.new_session(ws.path());
    let (bad, _) = a.call("_session/goal", json!({"sessionId": s2, "action": "pause"}));
    assert_eq!(error_of(&bad)["code"], -32002, "{bad}");
    let (bad, _) = a.call("_session/goal", json!({"sessionId": s2, "action": "set"}));
    assert_eq!(error_of(&bad)["code"], -32602, "{bad}");
    let (bad, _) = a.call("_session/goal", json!({"sessionId": s2, "action": "stop"}));
    assert_eq!(error_of(&bad)["code"], -32602, "{bad}");
    let (set, _) = a.call(
        "_session/goal",
        json!({"sessionId": s2, "action": "set", "objective": "keep going"}),
    );
    assert_eq!(set["result"]["goal"]["status"], "active", "{set}");
    for (action, status) in [("pause", json!("paused")), ("resume", json!("active"))] {
        let (r, early) = a.call("_session/goal", json!({"sessionId": s2, "action": action}));
        assert_eq!(r["result"]["goal"]["status"], status, "{action}: {r}");
        call_until_snapshot(&mut a, early, |g| g["status"] == status);
    }
    let (r, early) = a.call("_session/goal", json!({"sessionId": s2, "action": "clear"}));
    assert_eq!(r["result"], json!({"goal": null}), "{r}");
    call_until_snapshot(&mut a, early, Value::is_null);
    let (r, _) = a.call("_session/goal", json!({"sessionId": s2, "action": "clear"}));
    assert_eq!(
        r["result"],
        json!({"goal": null}),
        "clearing nothing is done: {r}"
    );
    // Set again on the same session (a later goal revision): shown and followed again, and
    // set over a running goal replaces it (the old one's `null`, then the new one).
    let (set, early) = a.call(
        "_session/goal",
        json!({"sessionId": s2, "action": "set", "objective": "keep going"}),
    );
    assert_eq!(set["result"]["goal"]["status"], "active", "{set}");
    let mut lines = early;
    lines.extend(until(&mut a, |v| {
        v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    }));
    assert!(
        goal_snapshots(&lines)
            .iter()
            .any(|g| g["status"] == "active" && g["objective"] == "keep going"),
        "{lines:#?}"
    );
    let (set, early) = a.call(
        "_session/goal",
        json!({"sessionId": s2, "action": "set", "objective": "keep going further"}),
    );
    assert_eq!(
        set["result"]["goal"]["objective"], "keep going further",
        "{set}"
    );
    let lines = call_until_snapshot(&mut a, early, |g| g["objective"] == "keep going further");
    let shown = goal_snapshots(&lines);
    assert!(
        shown.iter().any(Value::is_null),
        "the replaced goal is cleared: {shown:?}"
    );
    let (r, _) = a.call("_session/goal", json!({"sessionId": s2, "action": "clear"}));
    assert_eq!(r["result"], json!({"goal": null}), "{r}");

    // On load: the goal as it stands, after the history.
    let mut other = agent(data.path());
    other.initialize();
    let (loaded, _) = other.call(
        "session/load",
        json!({"sessionId": s, "cwd": ws.path(), "mcpServers": []}),
    );
    assert!(loaded.get("result").is_some(), "{loaded}");
    let after = until_snapshot(&mut other, |g| g["status"] == "complete");
    assert_eq!(goal_snapshots(&after).len(), 1);

    // A session that never had a goal shows none (a client of its own: the goals above may
    // still be winding down on this one).
    let s3 = other.new_session(ws.path());
    let t = other.prompt(&s3, "hello", |r| panic!("unexpected {r}"));
    assert!(goal_snapshots(&t.lines).is_empty());
}
