//! Goals over the real binaries: a goal that completes (its turns streamed to the client that
//! armed it, `_maka/goal_update` on each change), one stopped by its turn limit (paused and
//! resumed on the way), one that needs a permission while nobody is attached — it waits, and
//! goes on once a client answers. Every line schema-checked.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::host::TempDir;
use support::{error_of, AgentProcess};

fn script() -> Value {
    json!({
        "rules": [
            {"when": "Work toward this goal: make it shine", "responses": [[{"text": "Polishing."}]]},
            {"when": "Continue toward the goal: make it shine", "responses": [
                [{"tool": "goal_complete", "args": {"evidence": "It shines in every test."}}],
                [{"text": "Goal met."}]]},
            {"when": "never ends", "responses": [[{"delayMs": 150}, {"text": "Still going."}]]},
            {"when": "Work toward this goal: run the long job", "responses": [
                [{"tool": "run_command", "args": {"command": "sleep 600"}}],
                [{"text": "Stopped."}]]},
            {"when": "complete from a prompt", "responses": [
                [{"tool": "run_command", "args": {"command": "ls"}}],
                [{"tool": "goal_complete", "args": {"evidence": "claimed by a prompt"}}],
                [{"text": "Prompt done."}]]},
            {"when": "Work toward this goal: finish it", "responses": [
                [{"tool": "goal_complete", "args": {"evidence": "finished"}}],
                [{"text": "Finished."}]]},
            {"when": "Work toward this goal: write the report", "responses": [
                [{"delayMs": 1500}, {"tool": "write_file", "args": {"path": "report.txt", "content": "done\n"}}],
                [{"tool": "goal_complete", "args": {"evidence": "report.txt written"}}],
                [{"text": "Report written."}]]}
        ],
        "default": [[{"text": "Hello."}]]
    })
}

fn agent(data: &std::path::Path) -> AgentProcess {
    let mut a = AgentProcess::scripted(&script(), data);
    a.initialize();
    a
}

/// Reads lines until a `_maka/goal_update` whose goal has `status`; returns every line read.
fn until_goal(a: &mut AgentProcess, status: &str) -> Vec<Value> {
    let mut lines = vec![];
    loop {
        let v = a.recv();
        let done = v["method"] == "_maka/goal_update" && v["params"]["goal"]["status"] == status;
        lines.push(v);
        if done {
            return lines;
        }
    }
}

#[test]
fn a_goal_runs_turns_until_the_model_declares_it_met() {
    let data = TempDir::new("goal-data");
    let ws = TempDir::new("goal-ws");
    let mut a = agent(data.path());
    let init = a.call_ok("initialize", json!({"protocolVersion": 1}));
    let notes = &init["agentCapabilities"]["_meta"]["maka"]["notifications"];
    assert!(notes
        .as_array()
        .unwrap()
        .contains(&json!("_maka/goal_update")));
    let s = a.new_session(ws.path());
    let (resp, early) = a.call(
        "_maka/goal/arm",
        json!({"sessionId": s, "objective": "make it shine", "maxTurns": 5}),
    );
    let goal = &resp["result"];
    assert_eq!(goal["status"], "active", "{resp}");
    let goal_id = goal["goalId"].as_str().unwrap().to_string();
    let mut lines = early;
    lines.extend(until_goal(&mut a, "completed"));
    let last = lines.last().unwrap()["params"]["goal"].clone();
    assert_eq!(last["evidence"], "It shines in every test.");
    assert_eq!(
        last["turnsRun"], 1,
        "completed during its second turn: {last}"
    );
    // The goal's turns streamed here as ordinary updates: its prompts, the agent's text.
    let texts: Vec<String> = lines
        .iter()
        .filter(|l| l["method"] == "session/update")
        .filter_map(|l| {
            let u = &l["params"]["update"];
            let t = u["content"]["text"].as_str()?;
            Some(format!(
                "{}:{}",
                u["sessionUpdate"].as_str()?,
                t.lines().next()?
            ))
        })
        .collect();
    assert!(
        texts.contains(&"user_message_chunk:Work toward this goal: make it shine".into()),
        "{texts:?}"
    );
    assert!(
        texts.contains(&"agent_message_chunk:Polishing.".into()),
        "{texts:?}"
    );
    // The second turn is still finishing; its end is announced too.
    let mut tail = vec![];
    while !tail
        .iter()
        .any(|l: &Value| l["method"] == "_maka/goal_update" && l["params"]["goal"]["turnsRun"] == 2)
    {
        tail.push(a.recv());
    }
    let q = a.call_ok("_maka/goal/query", json!({"sessionId": s}));
    assert_eq!(q["goal"]["goalId"], goal_id.as_str());
    assert_eq!(q["goal"]["status"], "completed");
    let turns = a.call_ok("_maka/session/turns", json!({"sessionId": s}));
    let origins: Vec<&str> = turns["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["origin"].as_str().unwrap())
        .collect();
    assert_eq!(origins, ["goal", "goal"]);
    // A finished goal cannot be paused; a new one can be armed.
    let (resp, _) = a.call(
        "_maka/goal/control",
        json!({"sessionId": s, "goalId": goal_id, "action": "pause"}),
    );
    assert!(
        error_of(&resp)["message"]
            .as_str()
            .unwrap()
            .contains("completed"),
        "{resp}"
    );
    let (resp, _) = a.call("_maka/goal/arm", json!({"sessionId": s}));
    assert!(error_of(&resp)["message"]
        .as_str()
        .unwrap()
        .contains("`objective`"));
}

#[test]
fn a_goal_is_paused_resumed_and_stopped_by_its_turn_limit() {
    let data = TempDir::new("goal2-data");
    let ws = TempDir::new("goal2-ws");
    let mut a = agent(data.path());
    let s = a.new_session(ws.path());
    // Armed from the prompt box; its turns start after this one.
    let t = a.prompt(&s, "/goal never ends", |r| panic!("unexpected {r}"));
    assert!(
        t.text().starts_with("Goal armed: never ends"),
        "{}",
        t.text()
    );
    let goal = a.call_ok("_maka/goal/query", json!({"sessionId": s}))["goal"].clone();
    let id = goal["goalId"].as_str().unwrap().to_string();
    let paused = a.call_ok(
        "_maka/goal/control",
        json!({"sessionId": s, "goalId": id, "action": "pause"}),
    );
    assert_eq!(paused["status"], "paused");
    let resumed = a.call_ok(
        "_maka/goal/control",
        json!({"sessionId": s, "goalId": id, "action": "resume"}),
    );
    assert_eq!(resumed["status"], "active");
    let lines = until_goal(&mut a, "stopped");
    let last = &lines.last().unwrap()["params"]["goal"];
    assert_eq!(last["reason"], "turn_limit");
    assert_eq!(last["turnsRun"], 10, "the default limit: {last}");
    assert!(
        !lines
            .iter()
            .any(|l| l["params"]["update"]["sessionUpdate"] == "notice"),
        "no notice to a client that did not advertise session.notices"
    );
    let t = a.prompt(&s, "/goal", |r| panic!("unexpected {r}"));
    assert!(
        t.text()
            .contains("Status: stopped (10 of at most 10 turns; turn_limit)"),
        "{}",
        t.text()
    );
}

#[test]
fn a_goal_waits_for_approval_while_nobody_is_attached_and_goes_on_when_answered() {
    let data = TempDir::new("goal3-data");
    let ws = TempDir::new("goal3-ws");
    let mut a = agent(data.path());
    let s = a.new_session(ws.path());
    let armed = a.call_ok(
        "_maka/goal/arm",
        json!({"sessionId": s, "objective": "write the report"}),
    );
    assert_eq!(armed["status"], "active");
    // Nobody stays: the window closes before the goal's turn needs a permission.
    a.call_ok("session/close", json!({"sessionId": s}));

    let mut b = agent(data.path());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let q = b.call_ok("_maka/goal/query", json!({"sessionId": s}));
        if q["goal"]["status"] == "waiting_for_approval" {
            break;
        }
        assert!(Instant::now() < deadline, "never waited for approval: {q}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!ws.path().join("report.txt").exists(), "nothing guessed");
    // A client comes back: the open dialog is shown; allowing it lets the goal go on.
    let load = b.drive(
        "session/load",
        json!({"sessionId": s, "cwd": ws.path(), "mcpServers": []}),
        |r| panic!("unexpected {r}"),
    );
    assert!(load.response.get("result").is_some());
    let mut lines = vec![];
    let dialog = loop {
        let v = b.recv();
        if v["method"] == "session/request_permission" {
            break v;
        }
        lines.push(v);
    };
    assert_eq!(dialog["params"]["toolCall"]["title"], "Write report.txt");
    let allow = dialog["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "allow_once")
        .unwrap()["optionId"]
        .clone();
    b.send(&json!({"jsonrpc": "2.0", "id": dialog["id"], "result": {"outcome": {"outcome": "selected", "optionId": allow}}}));
    let after = until_goal(&mut b, "completed");
    let statuses: Vec<&str> = after
        .iter()
        .filter(|l| l["method"] == "_maka/goal_update")
        .map(|l| l["params"]["goal"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses.first(), Some(&"active"), "{statuses:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("report.txt")).unwrap(),
        "done\n"
    );
}

/// A goal running when the editor closes normally is paused, as after a crash, and can be
/// resumed: both ways of leaving keep the work resumable. One line a case.
#[test]
fn a_goal_survives_the_editor_leaving_normally_or_not() {
    for how in ["close stdin", "kill -9"] {
        let data = TempDir::new("goal-leave-data");
        let ws = TempDir::new("goal-leave-ws");
        let mut a = agent(data.path());
        let s = a.new_session(ws.path());
        a.prompt(&s, "/goal never ends", |r| panic!("unexpected {r}"));
        until_goal(&mut a, "active");
        // Let one of its turns be under way.
        std::thread::sleep(std::time::Duration::from_millis(60));
        if how == "kill -9" {
            let host: Value =
                serde_json::from_slice(&std::fs::read(data.path().join("host.json")).unwrap())
                    .unwrap();
            for pid in [a.pid(), host["pid"].as_u64().unwrap() as u32] {
                std::process::Command::new("kill")
                    .args(["-s", "KILL", &pid.to_string()])
                    .status()
                    .unwrap();
            }
        } else {
            a.close_stdin();
        }
        a.wait_exit(std::time::Duration::from_secs(20))
            .expect("the adapter exits");
        drop(a);
        // Wait for the embedded host of the first adapter to be gone.
        let t0 = std::time::Instant::now();
        while data.path().join("host.json").exists()
            && t0.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut b = agent(data.path());
        b.call_ok(
            "session/load",
            json!({"sessionId": s, "cwd": ws.path(), "mcpServers": []}),
        );
        let goal = b.call_ok("_maka/goal/query", json!({"sessionId": s}))["goal"].clone();
        assert_eq!(goal["status"], "paused", "{how}: {goal}");
        let resumed = b.call_ok(
            "_maka/goal/control",
            json!({"sessionId": s, "goalId": goal["goalId"], "action": "resume"}),
        );
        assert_eq!(resumed["status"], "active", "{how}");
    }
}

/// ACP `notice` (issue 26 item 2): a client that shows notices is told, as a warning, that the
/// goal stopped at its limit before it was met — before the `_maka/goal_update` that says so.
#[test]
fn a_goal_stopped_at_its_limit_is_a_notice_to_clients_that_show_notices() {
    let data = TempDir::new("goal4-data");
    let ws = TempDir::new("goal4-ws");
    let mut a = AgentProcess::scripted(&script(), data.path());
    a.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"session": {"notices": {}}}}),
    );
    let s = a.new_session(ws.path());
    let (resp, early) = a.call(
        "_maka/goal/arm",
        json!({"sessionId": s, "objective": "never ends", "maxTurns": 2}),
    );
    assert_eq!(resp["result"]["status"], "active", "{resp}");
    let mut lines = early;
    lines.extend(until_goal(&mut a, "stopped"));
    let notices: Vec<&Value> = lines
        .iter()
        .map(|l| &l["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "notice")
        .collect();
    assert_eq!(notices.len(), 1, "{lines:#?}");
    let at = lines
        .iter()
        .position(|l| l["params"]["update"]["sessionUpdate"] == "notice");
    assert!(
        at < Some(lines.len() - 1),
        "before the goal_update that says it stopped"
    );
    assert_eq!(notices[0]["severity"], "warning");
    assert_eq!(
        notices[0]["title"],
        "The goal stopped at its limit of 2 turns before it was met."
    );
}

/// Plays the editor for one line of the agent's: allows a permission once, opens a terminal,
/// answers its output and release. `terminal/wait_for_exit` and `terminal/kill` are returned
/// unanswered, for the test to answer when it chooses.
fn play_editor(a: &mut AgentProcess, v: &Value) -> Option<Value> {
    let reply = match (v["method"].as_str(), v.get("id")) {
        (Some("session/request_permission"), Some(_)) => {
            json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})
        }
        (Some("terminal/create"), Some(_)) => json!({"terminalId": "term-1"}),
        (Some("terminal/output"), Some(_)) => json!({"output": "", "truncated": false}),
        (Some("terminal/release"), Some(_)) => json!({}),
        (Some("terminal/wait_for_exit" | "terminal/kill"), Some(_)) => return Some(v.clone()),
        _ => return None,
    };
    a.send(&json!({"jsonrpc": "2.0", "id": v["id"], "result": reply}));
    None
}

/// Issue 54 item 7 (a): `_session/goal` `set` while the old goal's turn runs. The old goal's
/// turn runs a command in the editor's terminal, and the editor holds the answers that let
/// that turn end (`terminal/kill`, `terminal/wait_for_exit`) until the new goal's `set` is
/// answered: the old turn's stop comes after the new goal is armed, every time. That stop is
/// the old goal's: the new goal, answered `active`, stays so — it is never paused by it — runs
/// its own turn and is met.
#[test]
fn a_goal_set_while_the_old_goals_turn_runs_is_not_stopped_by_that_turn() {
    let data = TempDir::new("goal-set-data");
    let ws = TempDir::new("goal-set-ws");
    let mut a = AgentProcess::scripted(&script(), data.path());
    a.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"terminal": true}}),
    );
    let s = a.new_session(ws.path());
    let (set, early) = a.call(
        "_session/goal",
        json!({"sessionId": s, "action": "set", "objective": "run the long job"}),
    );
    assert_eq!(set["result"]["goal"]["status"], "active", "{set}");
    let mut held: Vec<Value> = early
        .iter()
        .filter_map(|v| play_editor(&mut a, v))
        .collect();
    // The old goal's command runs in the editor's terminal: its wait is held.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !held.iter().any(|v| v["method"] == "terminal/wait_for_exit") {
        assert!(
            Instant::now() < deadline,
            "the old goal's command never ran"
        );
        let v = a.recv();
        held.extend(play_editor(&mut a, &v));
    }
    // The new goal is set while that turn cannot end.
    let id = a.request(
        "_session/goal",
        json!({"sessionId": s, "action": "set", "objective": "finish it"}),
    );
    let answer = loop {
        assert!(Instant::now() < deadline, "no answer to the second set");
        let v = a.recv();
        if v["id"] == id && v.get("method").is_none() {
            break v;
        }
        held.extend(play_editor(&mut a, &v));
    };
    assert_eq!(answer["result"]["goal"]["status"], "active", "{answer}");
    assert_eq!(answer["result"]["goal"]["objective"], "finish it");
    // Now the old turn may end: the kill and the wait are answered.
    let finish = |a: &mut AgentProcess, v: &Value| {
        let result = match v["method"].as_str() {
            Some("terminal/kill") => json!({}),
            _ => json!({"exitCode": null, "signal": "SIGKILL"}),
        };
        a.send(&json!({"jsonrpc": "2.0", "id": v["id"], "result": result}));
    };
    for v in std::mem::take(&mut held) {
        finish(&mut a, &v);
    }
    // Every state of the new goal shown from here on: never paused; met by its own turn.
    let mut shown = vec![];
    while shown.last() != Some(&"complete".to_string()) {
        assert!(
            Instant::now() < deadline,
            "the new goal never completed: {shown:?}"
        );
        let v = a.recv();
        if let Some(h) = play_editor(&mut a, &v) {
            finish(&mut a, &h);
        }
        let goal = &v["params"]["update"]["_meta"]["goal"];
        if v["params"]["update"]["sessionUpdate"] == "session_info_update"
            && goal["objective"] == "finish it"
        {
            assert_ne!(
                goal["status"], "paused",
                "paused by the old goal's turn: {v}"
            );
            shown.push(goal["status"].as_str().unwrap_or_default().to_string());
        }
    }
    let q = a.call_ok("_maka/goal/query", json!({"sessionId": s}));
    assert_eq!(q["goal"]["objective"], "finish it", "{q}");
    assert_eq!(q["goal"]["status"], "completed", "{q}");
    assert_eq!(q["goal"]["evidence"], "finished", "{q}");
}

/// Issue 54 item 7 (b): pausing or resuming a goal that has ended (here stopped by its turn
/// limit, `limited` to `_session/goal`) says what is true — it has ended; set a new one — with
/// the code of the other changes its state does not allow (`_maka/goal/control`'s), not "no
/// goal" (`-32002`).
#[test]
fn pausing_a_goal_that_has_ended_says_it_has_ended() {
    let data = TempDir::new("goal-ended-data");
    let ws = TempDir::new("goal-ended-ws");
    let mut a = agent(data.path());
    let s = a.new_session(ws.path());
    let armed = a.call_ok(
        "_maka/goal/arm",
        json!({"sessionId": s, "objective": "never ends", "maxTurns": 1}),
    );
    let lines = until_goal(&mut a, "stopped");
    assert_eq!(
        lines.last().unwrap()["params"]["goal"]["reason"],
        "turn_limit"
    );
    let (other, _) = a.call(
        "_maka/goal/control",
        json!({"sessionId": s, "goalId": armed["goalId"], "action": "pause"}),
    );
    let other = error_of(&other).clone();
    for action in ["pause", "resume"] {
        let (resp, _) = a.call("_session/goal", json!({"sessionId": s, "action": action}));
        let e = error_of(&resp);
        assert_eq!(e["code"], other["code"], "{action}: {resp} vs {other}");
        assert_eq!(e["code"], -32603, "{action}: {resp}");
        assert_eq!(e["data"]["makaCode"], "operation_conflict", "{resp}");
        assert_eq!(e["data"]["retryable"], false, "{resp}");
        let message = e["message"].as_str().unwrap();
        assert!(
            message.contains("has ended (stopped: turn_limit)")
                && message.contains("set a new goal"),
            "{action}: {message}"
        );
    }
    // A new goal can be set over it.
    let set = a.call_ok(
        "_session/goal",
        json!({"sessionId": s, "action": "set", "objective": "make it shine"}),
    );
    assert_eq!(set["goal"]["status"], "active", "{set}");
}

/// Issue 54 item 7, review: `goal_complete` completes only the goal that was live when its
/// turn was admitted. A person's prompt starts with no goal armed; while it waits on a
/// dialog, a goal is armed; the prompt's model then calls `goal_complete`: it is refused,
/// saying why, and the goal armed since is not completed (its own driver has not run a turn
/// for it yet).
#[test]
fn goal_complete_from_a_turn_admitted_before_the_goal_completes_nothing() {
    let data = TempDir::new("goal-foreign-data");
    let ws = TempDir::new("goal-foreign-ws");
    let mut a = agent(data.path());
    let s = a.new_session(ws.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    let prompt = a.request(
        "session/prompt",
        json!({"sessionId": s, "prompt": [{"type": "text", "text": "complete from a prompt"}]}),
    );
    let mut lines = vec![];
    let dialog = loop {
        assert!(Instant::now() < deadline, "no dialog: {lines:#?}");
        let v = a.recv();
        if v["method"] == "session/request_permission" {
            break v;
        }
        lines.push(v);
    };
    // A goal is armed while the prompt's turn waits.
    let arm = a.request(
        "_maka/goal/arm",
        json!({"sessionId": s, "objective": "stay the course", "maxTurns": 1}),
    );
    let armed = loop {
        assert!(Instant::now() < deadline, "no answer to arm");
        let v = a.recv();
        if v["id"] == arm && v.get("method").is_none() {
            break v;
        }
        lines.push(v);
    };
    assert_eq!(armed["result"]["status"], "active", "{armed}");
    a.send(&json!({"jsonrpc": "2.0", "id": dialog["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}));
    let answer = loop {
        assert!(
            Instant::now() < deadline,
            "the prompt never ended: {lines:#?}"
        );
        let v = a.recv();
        if v["id"] == prompt && v.get("method").is_none() {
            break v;
        }
        lines.push(v);
    };
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let refused = lines.iter().find(|v| {
        let u = &v["params"]["update"];
        u["sessionUpdate"] == "tool_call_update"
            && u["status"] == "failed"
            && u["content"][0]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("nothing was marked complete"))
    });
    assert!(
        refused.is_some(),
        "goal_complete was not refused: {lines:#?}"
    );
    let q = a.call_ok("_maka/goal/query", json!({"sessionId": s}));
    assert_eq!(q["goal"]["objective"], "stay the course", "{q}");
    assert_ne!(q["goal"]["status"], "completed", "{q}");
    assert!(q["goal"].get("evidence").is_none(), "{q}");
}

/// Issue 54 item 7, review: a goal's turn interrupted by a crash and resumed is still that
/// goal's. The goal's turn waits on a permission when the host is killed; after the restart
/// the goal is paused and the turn resumed, and waits again: cancelling the goal stops the
/// resumed turn, and its end counts as a turn of that goal.
#[test]
fn a_resumed_goal_turn_is_still_its_goals() {
    use support::host::HostProcess;
    let script = json!({
        "rules": [
            // The goal's turn and its resume (which has no prompt of its own).
            {"when": "*", "responses": [
                [{"tool": "run_command", "args": {"command": "ls"}}],
                [{"text": "Listed."}]]}
        ]
    });
    let data = TempDir::new("goal-resume-data");
    let ws = TempDir::new("goal-resume-ws");
    let waits = |f: &Value| f["kind"] == "interaction_request";
    let mut host = HostProcess::start(data.path(), Some(&script));
    host.create_session("s", ws.path(), "ask");
    let goal = host.ok(
        "goal.arm",
        json!({"sessionId": "s", "objective": "wait here", "maxTurns": 5}),
    );
    let goal_id = goal["goalId"].as_str().unwrap().to_string();
    host.follow("s", 0, waits);
    host.kill9();

    let host = HostProcess::start(data.path(), Some(&script));
    let q = host.ok("goal.query", json!({"sessionId": "s"}));
    assert_eq!(q["goal"]["status"], "paused", "{q}");
    let plan = host.ok("turn.resume.query", json!({"sessionId": "s"}));
    assert_eq!(plan["disposition"], "ready", "{plan}");
    let after = host.head_seq("s");
    let started = host.ok(
        "turn.resume.start",
        json!({"sessionId": "s", "turnId": "t_r", "sourceRunId": plan["sourceRunId"],
               "sourceHighWater": plan["sourceHighWater"]}),
    );
    assert_eq!(started["kind"], "started", "{started}");
    let frames = host.follow("s", after, waits);
    let after = frames.last().unwrap()["seq"].as_u64().unwrap();
    host.ok(
        "goal.control",
        json!({"sessionId": "s", "goalId": goal_id, "action": "cancel"}),
    );
    let rest = host.until_terminal("s", after);
    assert_eq!(
        rest.last().unwrap()["outcome"],
        "cancelled",
        "the goal's cancel stops its resumed turn"
    );
    let q = host.ok("goal.query", json!({"sessionId": "s"}));
    assert_eq!(q["goal"]["status"], "cancelled", "{q}");
    assert_eq!(q["goal"]["turnsRun"], 1, "the resumed turn counts: {q}");
}
