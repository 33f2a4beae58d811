//! ACP over the Runtime Host, end to end: the real binary over pipes, the embedded host it
//! starts, the scripted provider. One test per architecture invariant, plus the stories an
//! editor depends on. Every line the agent writes is validated against the ACP v1 schema.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::host::TempDir;
use support::{error_of, select, AgentProcess, Reply, Spawn};

fn script() -> Value {
    json!({
        "rules": [
            {"when": "edit", "responses": [
                [{"text": "I'll edit a.txt."}, {"tool": "edit_file", "args": {"path": "a.txt", "old_text": "world", "new_text": "there"}}],
                [{"text": "Done."}]]},
            {"when": "work", "responses": [
                [{"thinking": "Planning."}, {"text": "Working on it."},
                 {"tool": "update_plan", "args": {"entries": [{"content": "Look", "status": "completed"}, {"content": "Change", "status": "in_progress", "priority": "high"}]}},
                 {"tool": "read_file", "args": {"path": "a.txt"}},
                 {"tool": "run_command", "args": {"command": "echo out; echo err >&2; exit 3"}}],
                [{"text": "All done."}]]},
            {"when": "slow", "responses": [[{"text": "Starting slowly"}, {"delayMs": 30000}, {"text": "never"}]]},
            {"when": "ask me", "responses": [
                [{"tool": "ask_user", "args": {"questions": [{"question": "Which DB?", "options": [{"label": "sqlite"}, {"label": "pg"}]}]}}],
                [{"text": "Noted."}]]},
            {"when": "chatty", "responses": [[{"repeat": {"text": "ab", "times": 300}}]]},
            {"when": "fail", "responses": [[{"fail": "provider_error", "message": "upstream exploded"}]]},
            {"when": "steps", "responses": [[{"tool": "list_directory", "args": {}}], [{"tool": "list_directory", "args": {}}]]}
        ],
        "default": [[{"text": "Hello from the script!"}]]
    })
}

struct Setup {
    agent: AgentProcess,
    ws: TempDir,
    _data: TempDir,
}

fn setup(tag: &str) -> Setup {
    let data = TempDir::new(&format!("acp-{tag}-data"));
    let ws = TempDir::new(&format!("acp-{tag}-ws"));
    std::fs::write(ws.path().join("a.txt"), "hello world\n").unwrap();
    let mut agent = AgentProcess::scripted(&script(), data.path());
    agent.initialize();
    Setup {
        agent,
        ws,
        _data: data,
    }
}

fn no_requests(r: &Value) -> Reply {
    panic!("unexpected request from the agent: {r}")
}

/// Invariant 2: nothing for a session before its new/load/resume response; invariant 3:
/// nothing of a turn after its prompt response.
#[test]
fn updates_never_precede_session_setup_nor_follow_the_prompt_response() {
    let mut s = setup("order");
    let t = s.agent.drive(
        "session/new",
        json!({"cwd": s.ws.path(), "mcpServers": []}),
        no_requests,
    );
    assert!(
        t.updates.is_empty(),
        "updates before the session/new response: {:?}",
        t.updates
    );
    let id = t.response["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    // The commands come right after the response, before anything else.
    s.agent.expect_commands(&id);
    let t = s.agent.prompt(&id, "hi", no_requests);
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert_eq!(t.text(), "Hello from the script!");
    for u in &t.updates {
        assert_eq!(u["params"]["sessionId"], id.as_str());
    }
    // After the response: silence, until the next request.
    s.agent.expect_silence(Duration::from_millis(300));
    let t = s.agent.drive(
        "session/resume",
        json!({"sessionId": id, "cwd": s.ws.path(), "mcpServers": []}),
        no_requests,
    );
    assert!(
        t.updates.is_empty(),
        "resume replays nothing: {:?}",
        t.kinds()
    );
    assert!(
        t.response["result"]["configOptions"].is_array(),
        "{}",
        t.response
    );
    s.agent.expect_commands(&id);
    s.agent.expect_silence(Duration::from_millis(200));
}

/// Invariant 4: every tool call reaches a terminal status before the response; the
/// projection carries kinds, titles, raw input, diffs, command output and plans.
#[test]
fn a_turn_with_tools_streams_everything_and_settles_every_tool_call() {
    let mut s = setup("tools");
    let id = s.agent.new_session(s.ws.path());
    let rev = s.ws.path().join("a.txt");
    let t = s.agent.prompt(&id, "do the work", |r| {
        assert_eq!(r["method"], "session/request_permission");
        assert_eq!(
            r["params"]["toolCall"]["title"],
            "echo out; echo err >&2; exit 3"
        );
        assert_eq!(r["params"]["toolCall"]["kind"], "execute");
        select("allow_once")
    });
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let ups = t.updates_for(&id);
    let kinds: Vec<&str> = ups
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"agent_thought_chunk")
            && kinds.contains(&"plan")
            && kinds.contains(&"usage_update"),
        "{kinds:?}"
    );
    let plan = ups.iter().find(|u| u["sessionUpdate"] == "plan").unwrap();
    assert_eq!(
        plan["entries"][1],
        json!({"content": "Change", "priority": "high", "status": "in_progress"})
    );
    // Every tool_call has a final status.
    let mut status = std::collections::HashMap::new();
    for u in &ups {
        if u["sessionUpdate"] == "tool_call" || u["sessionUpdate"] == "tool_call_update" {
            if let Some(st) = u["status"].as_str() {
                status.insert(
                    u["toolCallId"].as_str().unwrap().to_string(),
                    st.to_string(),
                );
            }
        }
    }
    // The plan tool is shown as the plan only, never also as a tool call.
    assert_eq!(
        status.len(),
        2,
        "read + command, not the plan tool: {status:?}"
    );
    assert!(
        !ups.iter().any(|u| u["title"] == "Update plan"),
        "the plan tool is not a tool call card"
    );
    // Tools that run go pending → in_progress → their final status.
    for id in status.keys() {
        let seq: Vec<&str> = ups
            .iter()
            .filter(|u| u["toolCallId"] == id.as_str())
            .filter_map(|u| u["status"].as_str())
            .collect();
        assert_eq!(seq.first(), Some(&"pending"), "{id}: {seq:?}");
        assert!(seq.contains(&"in_progress"), "{id}: {seq:?}");
    }
    let read = ups
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call" && u["kind"] == "read")
        .unwrap();
    assert_eq!(read["title"], "Read a.txt");
    assert_eq!(
        read["name"], "read_file",
        "ACP ToolCall.name: the tool's own name"
    );
    assert_eq!(read["locations"][0]["path"], rev.display().to_string());
    let read_id = read["toolCallId"].as_str().unwrap();
    assert_eq!(status[read_id], "completed");
    let cmd = ups
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call" && u["kind"] == "execute")
        .unwrap();
    let cmd_id = cmd["toolCallId"].as_str().unwrap();
    assert_eq!(cmd["name"], "run_command");
    assert_eq!(status[cmd_id], "failed", "exit code 3");
    let last = ups
        .iter()
        .rev()
        .find(|u| u["toolCallId"] == cmd_id)
        .unwrap();
    let text = last["content"][0]["content"]["text"].as_str().unwrap();
    assert!(
        text.contains("$ echo out")
            && text.contains("out\n")
            && text.contains("err\n")
            && text.contains("Exit code 3"),
        "{text}"
    );
    assert_eq!(last["rawOutput"]["exitCode"], 3);
    assert!(t.text().starts_with("Working on it.") && t.text().ends_with("All done."));
}

#[test]
fn permission_allow_edits_and_shows_the_diff_reject_leaves_the_file() {
    let mut s = setup("perm");
    let id = s.agent.new_session(s.ws.path());
    let t = s.agent.prompt(&id, "please edit", |r| {
        let tc = &r["params"]["toolCall"];
        assert_eq!(tc["title"], "Edit a.txt");
        assert_eq!(tc["kind"], "edit");
        assert_eq!(tc["content"][0]["type"], "diff");
        assert_eq!(tc["content"][0]["newText"], "hello there\n");
        let names: Vec<&str> = r["params"]["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            vec![
                "Allow once",
                "Allow changes to `a.txt` for this session",
                "Always allow changes to `a.txt` in this workspace",
                "Reject",
                "Always reject changes to `a.txt` in this workspace"
            ]
        );
        select("allow_once")
    });
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert_eq!(
        std::fs::read_to_string(s.ws.path().join("a.txt")).unwrap(),
        "hello there\n"
    );
    let done = t
        .updates_for(&id)
        .into_iter()
        .find(|u| u["status"] == "completed")
        .unwrap()
        .clone();
    assert_eq!(done["content"][0]["type"], "diff");
    assert_eq!(done["content"][0]["oldText"], "hello world\n");
    // The permission request came after the tool_call it refers to.
    let pos_call = t
        .lines
        .iter()
        .position(|l| l["params"]["update"]["sessionUpdate"] == "tool_call")
        .unwrap();
    let pos_req = t
        .lines
        .iter()
        .position(|l| l["method"] == "session/request_permission")
        .unwrap();
    assert!(pos_call < pos_req);

    std::fs::write(s.ws.path().join("a.txt"), "hello world\n").unwrap();
    let t = s
        .agent
        .prompt(&id, "please edit again", |_| select("reject"));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert_eq!(
        std::fs::read_to_string(s.ws.path().join("a.txt")).unwrap(),
        "hello world\n"
    );
    assert!(t.updates_for(&id).iter().any(|u| u["status"] == "failed"));
}

/// Invariant 5: cancel with a permission pending → `cancelled`, `$/cancel_request` for the
/// dialog, every tool call settled; never an error.
#[test]
fn cancel_with_a_pending_permission_answers_cancelled_and_withdraws_the_dialog() {
    let mut s = setup("cancel");
    let id = s.agent.new_session(s.ws.path());
    let prompt_id = s.agent.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "please edit"}]}),
    );
    let mut perm_id = None;
    let mut lines = vec![];
    while perm_id.is_none() {
        let v = s.agent.recv();
        if v["method"] == "session/request_permission" {
            perm_id = Some(v["id"].clone());
        }
        lines.push(v);
    }
    s.agent.notify("session/cancel", json!({"sessionId": id}));
    let mut saw_cancel_request = false;
    loop {
        let v = s.agent.recv();
        if v["method"] == "$/cancel_request" {
            assert_eq!(v["params"]["requestId"], perm_id.clone().unwrap());
            saw_cancel_request = true;
            // The client answers the withdrawn dialog as cancelled, as ACP asks.
            s.agent.send(&json!({"jsonrpc": "2.0", "id": perm_id.clone().unwrap(), "result": {"outcome": {"outcome": "cancelled"}}}));
        }
        let done = v["id"] == prompt_id && v.get("method").is_none();
        lines.push(v.clone());
        if done {
            assert_eq!(v["result"]["stopReason"], "cancelled", "{v}");
            break;
        }
    }
    assert!(
        saw_cancel_request,
        "the pending dialog was withdrawn with $/cancel_request"
    );
    let last_status = lines
        .iter()
        .rev()
        .find(|l| l["params"]["update"]["sessionUpdate"] == "tool_call_update")
        .unwrap();
    assert_eq!(last_status["params"]["update"]["status"], "failed");
    assert_eq!(
        std::fs::read_to_string(s.ws.path().join("a.txt")).unwrap(),
        "hello world\n"
    );
    // Cancel on an idle session is a no-op; the session still works.
    s.agent.notify("session/cancel", json!({"sessionId": id}));
    let t = s.agent.prompt(&id, "hi", no_requests);
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
}

#[test]
fn cancel_during_a_slow_model_call_and_right_after_the_prompt() {
    let mut s = setup("cancel2");
    let id = s.agent.new_session(s.ws.path());
    let prompt_id = s.agent.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "slow"}]}),
    );
    loop {
        let v = s.agent.recv();
        if v["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    let t0 = Instant::now();
    s.agent.notify("session/cancel", json!({"sessionId": id}));
    let (resp, _) = s.agent.response_to(&prompt_id);
    assert_eq!(resp["result"]["stopReason"], "cancelled");
    assert!(t0.elapsed() < Duration::from_secs(5));
    // A cancel that arrives while turn.start is still in flight still stops the turn.
    let prompt_id = s.agent.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "slow"}]}),
    );
    s.agent.notify("session/cancel", json!({"sessionId": id}));
    let (resp, _) = s.agent.response_to(&prompt_id);
    assert_eq!(resp["result"]["stopReason"], "cancelled");
}

/// Editors send a new message during a running turn by cancelling it and prompting at once:
/// the new prompt waits for the cancelled turn to settle instead of failing `session_busy`.
/// Both with output already streamed and before any.
#[test]
fn a_prompt_right_after_a_cancel_is_accepted() {
    let mut s = setup("redirect");
    let id = s.agent.new_session(s.ws.path());
    for wait_for_output in [true, false] {
        let first = s.agent.request(
            "session/prompt",
            json!({"sessionId": id, "prompt": [{"type": "text", "text": "slow"}]}),
        );
        if wait_for_output {
            loop {
                let v = s.agent.recv();
                if v["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
                    break;
                }
            }
        }
        s.agent.notify("session/cancel", json!({"sessionId": id}));
        let second = s.agent.request(
            "session/prompt",
            json!({"sessionId": id, "prompt": [{"type": "text", "text": "hello again"}]}),
        );
        let (resp, _) = s.agent.response_to(&first);
        assert_eq!(resp["result"]["stopReason"], "cancelled", "{resp}");
        let (resp, _) = s.agent.response_to(&second);
        assert_eq!(
            resp["result"]["stopReason"], "end_turn",
            "output first: {wait_for_output}: {resp}"
        );
    }
}

/// The agent with `args` (`--acp`: Apache Maka's dialect) on this file's script, initialized,
/// with a session; returns it, the session id and the data dir's path.
fn queue_setup(tag: &str, args: &[&str]) -> (Setup, String) {
    let data = TempDir::new(&format!("acp-{tag}-data"));
    let ws = TempDir::new(&format!("acp-{tag}-ws"));
    std::fs::write(ws.path().join("a.txt"), "hello world\n").unwrap();
    let mut agent = spawn_scripted(args, data.path());
    agent.initialize();
    let r = agent.call_ok("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    let id = r["sessionId"].as_str().unwrap().to_string();
    let s = Setup {
        agent,
        ws,
        _data: data,
    };
    (s, id)
}

fn spawn_scripted(args: &[&str], data: &std::path::Path) -> AgentProcess {
    AgentProcess::spawn_with(Spawn {
        args: args.iter().map(|a| a.to_string()).collect(),
        env: vec![
            ("RUST_LOG".into(), "info".into()),
            ("MAKA_SCRIPT".into(), script().to_string()),
            ("MAKA_DATA_DIR".into(), data.display().to_string()),
            (
                "XDG_CONFIG_HOME".into(),
                data.join("config").display().to_string(),
            ),
        ],
    })
}

/// The user messages a second agent on the same data dir replays for session `id`
/// (`session/load`), in order.
fn replayed_user_messages(s: &Setup, args: &[&str], id: &str) -> Vec<String> {
    let mut other = spawn_scripted(args, s._data.path());
    other.initialize();
    let t = other.drive(
        "session/load",
        json!({"sessionId": id, "cwd": s.ws.path(), "mcpServers": []}),
        no_requests,
    );
    assert!(t.response.get("result").is_some(), "{}", t.response);
    normalize(&t.updates_for(id).into_iter().cloned().collect::<Vec<_>>())
        .into_iter()
        .filter(|u| u["kind"] == "user_message_chunk")
        .map(|u| u["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The responses to requests `ids`, in whatever order they come, in the order of `ids`.
fn answers_to(agent: &mut AgentProcess, ids: &[Value]) -> Vec<Value> {
    let mut got: Vec<Option<Value>> = vec![None; ids.len()];
    while got.iter().any(Option::is_none) {
        let v = agent.recv();
        if v.get("method").is_none() {
            if let Some(i) = ids.iter().position(|id| v["id"] == *id) {
                got[i] = Some(v);
            }
        }
    }
    got.into_iter().flatten().collect()
}

fn prompt_request(s: &mut Setup, id: &str, text: &str) -> Value {
    s.agent.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": text}]}),
    )
}

/// Issue 57: a follow-up sent while a turn runs is queued, not refused. Two prompts sent back
/// to back are both answered `end_turn`, in order, each its own turn (the second's output
/// comes after the first's answer; nothing of it is merged into the first), and a load
/// replays two user messages. Both dialects. The first prompt is held at its permission
/// dialog until an inline-answered probe sent after the second shows the second was read:
/// it is still running then, whatever the machine's speed.
#[test]
fn prompts_sent_back_to_back_are_queued_and_answered_in_order() {
    for args in [&[][..], &["--acp"][..]] {
        let (mut s, id) = queue_setup("queue-order", args);
        let first = prompt_request(&mut s, &id, "please edit");
        let second = prompt_request(&mut s, &id, "and then hello");
        let probe = s.agent.request("_queue_test/probe", json!({}));
        let (mut held, mut probed) = (None, false);
        let mut lines = vec![];
        let mut answers = vec![];
        while answers.len() < 2 {
            let v = s.agent.recv();
            if v["method"] == "session/request_permission" {
                held = Some(v["id"].clone());
            } else if v.get("method").is_none() && v["id"] == probe {
                assert_eq!(error_of(&v)["code"], -32601, "{v}");
                probed = true;
            } else if v.get("method").is_none() && (v["id"] == first || v["id"] == second) {
                answers.push(v.clone());
            }
            if probed {
                if let Some(req) = held.take() {
                    let allow =
                        json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});
                    s.agent
                        .send(&json!({"jsonrpc": "2.0", "id": req, "result": allow}));
                }
            }
            lines.push(v);
        }
        let dialect = format!("{args:?}");
        assert_eq!(answers[0]["id"], first, "{dialect}: {answers:?}");
        assert_eq!(answers[1]["id"], second, "{dialect}: {answers:?}");
        for a in &answers {
            assert_eq!(a["result"]["stopReason"], "end_turn", "{dialect}: {a}");
        }
        let turn = |a: &Value| a["result"]["_meta"]["maka"]["turnId"].clone();
        assert_ne!(turn(&answers[0]), turn(&answers[1]), "two turns");
        // The second turn's output follows the first's answer; no user message is merged in.
        let at = |id: &Value| {
            lines
                .iter()
                .position(|v| v["id"] == *id && v.get("method").is_none())
        };
        let (end1, end2) = (at(&first).unwrap(), at(&second).unwrap());
        let text = |range: &[Value]| -> String {
            range
                .iter()
                .filter(|v| v["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
                .filter_map(|v| v["params"]["update"]["content"]["text"].as_str())
                .collect()
        };
        assert_eq!(
            text(&lines[end1..end2]),
            "Hello from the script!",
            "{dialect}"
        );
        assert!(text(&lines[..end1]).contains("Done."), "{dialect}");
        assert!(!text(&lines[..end1]).contains("Hello"), "{dialect}");
        assert!(
            lines
                .iter()
                .all(|v| v["params"]["update"]["sessionUpdate"] != "user_message_chunk"),
            "{dialect}: nothing is steered into the running turn"
        );
        assert_eq!(
            replayed_user_messages(&s, args, &id),
            ["please edit", "and then hello"],
            "{dialect}"
        );
    }
}

/// Issue 57: a queued prompt the client withdraws with `$/cancel_request` is answered
/// `-32800` and never runs (its turn never starts, its place is freed); the one queued after
/// it runs when the first is answered.
#[test]
fn a_queued_prompt_withdrawn_by_cancel_request_never_runs() {
    let (mut s, id) = queue_setup("queue-withdrawn", &[]);
    let first = prompt_request(&mut s, &id, "please edit");
    let withdrawn = prompt_request(&mut s, &id, "never mind this");
    s.agent
        .notify("$/cancel_request", json!({"requestId": withdrawn.clone()}));
    let last = prompt_request(&mut s, &id, "and then hello");
    let probe = s.agent.request("_queue_test/probe", json!({}));
    let (mut held, mut probed) = (None, false);
    let mut answers = vec![];
    while answers.len() < 3 {
        let v = s.agent.recv();
        if v["method"] == "session/request_permission" {
            held = Some(v["id"].clone());
        } else if v.get("method").is_none() && v["id"] == probe {
            probed = true;
        } else if v.get("method").is_none() {
            answers.push(v.clone());
        }
        if probed {
            if let Some(req) = held.take() {
                let allow = json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});
                s.agent
                    .send(&json!({"jsonrpc": "2.0", "id": req, "result": allow}));
            }
        }
    }
    assert_eq!(answers[0]["id"], withdrawn, "{answers:?}");
    assert_eq!(error_of(&answers[0])["code"], -32800, "{answers:?}");
    assert_eq!(answers[1]["id"], first, "{answers:?}");
    assert_eq!(answers[2]["id"], last, "{answers:?}");
    for a in &answers[1..] {
        assert_eq!(a["result"]["stopReason"], "end_turn", "{a}");
    }
    assert_eq!(
        replayed_user_messages(&s, &[], &id),
        ["please edit", "and then hello"]
    );
}

/// A second agent on the same data dir (so on the same host) with session `id` loaded.
fn second_client(s: &Setup, id: &str) -> AgentProcess {
    let mut other = spawn_scripted(&[], s._data.path());
    other.initialize();
    let t = other.drive(
        "session/load",
        json!({"sessionId": id, "cwd": s.ws.path(), "mcpServers": []}),
        no_requests,
    );
    assert!(t.response.get("result").is_some(), "{}", t.response);
    other
}

/// The first agent's prompt is held at its permission dialog: returns that request's id.
fn held_at_permission(s: &mut Setup) -> Value {
    loop {
        let v = s.agent.recv();
        if v["method"] == "session/request_permission" {
            return v["id"].clone();
        }
    }
}

fn allow(agent: &mut AgentProcess, request: Value) {
    let allow = json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});
    agent.send(&json!({"jsonrpc": "2.0", "id": request, "result": allow}));
}

/// The host's log line that says a prompt waits in its queue.
const QUEUED_ON_HOST: &str = "waits in the host's queue";

/// Issue 57: a prompt sent while another client's turn runs on the session is queued by the
/// host, not refused: it starts when that turn ends and is answered `end_turn` after it; the
/// replay has both user messages.
#[test]
fn a_prompt_behind_another_clients_turn_waits_on_the_host() {
    let (mut s, id) = queue_setup("queue-host", &[]);
    let first = prompt_request(&mut s, &id, "please edit");
    let dialog = held_at_permission(&mut s);
    let mut other = second_client(&s, &id);
    let second = other.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "and then hello"}]}),
    );
    assert!(other.stderr_contains(QUEUED_ON_HOST), "{}", other.stderr());
    allow(&mut s.agent, dialog);
    let (resp, _) = s.agent.response_to(&first);
    assert_eq!(resp["result"]["stopReason"], "end_turn", "{resp}");
    let (resp, before) = other.response_to(&second);
    assert_eq!(resp["result"]["stopReason"], "end_turn", "{resp}");
    let text: String = before
        .iter()
        .filter(|v| v["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|v| v["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(text.ends_with("Hello from the script!"), "{text}");
    assert_eq!(
        replayed_user_messages(&s, &[], &id),
        ["please edit", "and then hello"]
    );
}

/// Issue 57: a prompt waiting in the host's queue is answered `cancelled` by its client's
/// `session/cancel` at once (while the other client's turn still runs), and never runs.
#[test]
fn a_prompt_waiting_on_the_host_is_cancelled_at_once_and_never_runs() {
    let (mut s, id) = queue_setup("queue-host-cancel", &[]);
    let first = prompt_request(&mut s, &id, "please edit");
    let dialog = held_at_permission(&mut s);
    let mut other = second_client(&s, &id);
    let second = other.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "never mind"}]}),
    );
    assert!(other.stderr_contains(QUEUED_ON_HOST), "{}", other.stderr());
    other.notify("session/cancel", json!({"sessionId": id}));
    let (resp, _) = other.response_to(&second);
    assert_eq!(resp["result"]["stopReason"], "cancelled", "{resp}");
    allow(&mut s.agent, dialog);
    let (resp, _) = s.agent.response_to(&first);
    assert_eq!(resp["result"]["stopReason"], "end_turn", "{resp}");
    assert_eq!(replayed_user_messages(&s, &[], &id), ["please edit"]);
}

/// Issue 57: `session/cancel` stops the running prompt and every queued one, each answered
/// `cancelled`; the queued one never ran (the replay has no user message of it), and the
/// next prompt runs as usual.
#[test]
fn cancel_answers_the_running_and_the_queued_prompt_cancelled() {
    let (mut s, id) = queue_setup("queue-cancel", &[]);
    let running = prompt_request(&mut s, &id, "slow");
    loop {
        if s.agent.recv()["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    let queued = prompt_request(&mut s, &id, "queued behind it");
    s.agent.notify("session/cancel", json!({"sessionId": id}));
    for resp in answers_to(&mut s.agent, &[running, queued]) {
        assert_eq!(resp["result"]["stopReason"], "cancelled", "{resp}");
    }
    let t = s.agent.prompt(&id, "after", no_requests);
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
    assert_eq!(replayed_user_messages(&s, &[], &id), ["slow", "after"]);
}

/// Issue 57: a queued prompt is never lost silently: when the client closes stdin, the
/// running prompt and the one queued behind it are both answered `cancelled` before the
/// agent exits.
#[test]
fn closing_stdin_answers_the_queued_prompt_too() {
    let (mut s, id) = queue_setup("queue-eof", &[]);
    let running = prompt_request(&mut s, &id, "slow");
    loop {
        if s.agent.recv()["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    let queued = prompt_request(&mut s, &id, "queued behind it");
    s.agent.close_stdin();
    for resp in answers_to(&mut s.agent, &[running, queued]) {
        assert_eq!(resp["result"]["stopReason"], "cancelled", "{resp}");
    }
    assert!(
        s.agent.wait_exit(Duration::from_secs(20)).is_some(),
        "exits"
    );
}

/// Issue 57: at most 8 prompts wait behind the running one; a 9th is refused `session_busy`
/// at once, saying why, and the 8 queued are answered `cancelled` by the cancel.
#[test]
fn a_ninth_queued_prompt_is_busy() {
    let (mut s, id) = queue_setup("queue-full", &[]);
    let running = prompt_request(&mut s, &id, "slow");
    loop {
        if s.agent.recv()["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    let queued: Vec<Value> = (0..8)
        .map(|i| prompt_request(&mut s, &id, &format!("queued {i}")))
        .collect();
    let refused = prompt_request(&mut s, &id, "one too many");
    let (resp, before) = s.agent.response_to(&refused);
    assert_eq!(
        error_of(&resp)["data"]["makaCode"],
        "session_busy",
        "{resp}"
    );
    assert!(
        error_of(&resp)["message"]
            .as_str()
            .unwrap()
            .contains("8 more are waiting"),
        "{resp}"
    );
    assert!(
        before.iter().all(|v| v.get("method").is_some()),
        "the 8 queued are not answered yet: {before:?}"
    );
    s.agent.notify("session/cancel", json!({"sessionId": id}));
    let all: Vec<Value> = std::iter::once(running).chain(queued).collect();
    for resp in answers_to(&mut s.agent, &all) {
        assert_eq!(resp["result"]["stopReason"], "cancelled", "{resp}");
    }
}

/// Invariant 6: `session/load` replays through the same projection as live streaming.
#[test]
fn load_replays_the_conversation_as_it_was_streamed() {
    let mut s = setup("replay");
    let id = s.agent.new_session(s.ws.path());
    let live1 = s.agent.prompt(&id, "do the work", |_| select("allow_once"));
    let live2 = s.agent.prompt(&id, "please edit", |_| select("allow_once"));
    // A second connection loads it.
    let data = s._data.path().to_path_buf();
    let mut other = AgentProcess::scripted(&script(), &data);
    other.initialize();
    let t = other.drive(
        "session/load",
        json!({"sessionId": id, "cwd": s.ws.path(), "mcpServers": []}),
        no_requests,
    );
    assert!(
        t.response["result"]["configOptions"].is_array(),
        "{}",
        t.response
    );
    let replay: Vec<&Value> = t.updates_for(&id);
    // Live: the user's prompt is the client's own, so add it to compare.
    let mut live: Vec<Value> =
        vec![json!({"sessionUpdate": "user_message_chunk", "text": "do the work"})];
    live.extend(live1.updates_for(&id).into_iter().cloned());
    live.push(json!({"sessionUpdate": "user_message_chunk", "text": "please edit"}));
    live.extend(live2.updates_for(&id).into_iter().cloned());
    assert_eq!(
        normalize(&replay.into_iter().cloned().collect::<Vec<_>>()),
        normalize(&live)
    );
    s.agent.expect_silence(Duration::from_millis(100));
    // The loaded session is usable.
    let t = other.prompt(&id, "hi", no_requests);
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
}

/// Merges consecutive chunks of one message, keeps the final state of each tool call, and
/// drops live-only updates (usage, output progress, titles), so streams compare modulo chunking.
fn normalize(updates: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = vec![];
    let mut tools: std::collections::HashMap<String, usize> = Default::default();
    for u in updates {
        let kind = u["sessionUpdate"].as_str().unwrap();
        match kind {
            "user_message_chunk" | "agent_message_chunk" | "agent_thought_chunk" => {
                let text = u["content"]["text"]
                    .as_str()
                    .or(u["text"].as_str())
                    .unwrap_or("")
                    .to_string();
                match out.last_mut() {
                    Some(last) if last["kind"] == kind => {
                        let t = format!("{}{}", last["text"].as_str().unwrap(), text);
                        last["text"] = json!(t);
                    }
                    _ => out.push(json!({"kind": kind, "text": text})),
                }
            }
            "tool_call" => {
                tools.insert(u["toolCallId"].as_str().unwrap().into(), out.len());
                out.push(json!({"kind": "tool", "title": u["title"], "name": u["name"], "toolKind": u["kind"], "rawInput": u["rawInput"], "status": u["status"], "content": null}));
            }
            "tool_call_update" => {
                let i = tools[u["toolCallId"].as_str().unwrap()];
                if let Some(st) = u["status"]
                    .as_str()
                    .filter(|s| *s == "completed" || *s == "failed")
                {
                    out[i]["status"] = json!(st);
                    out[i]["content"] = u["content"].clone();
                }
            }
            "plan" => out.push(json!({"kind": "plan", "entries": u["entries"]})),
            _ => {}
        }
    }
    out
}

#[test]
fn questions_use_elicitation_forms_and_never_a_permission_dialog() {
    // A client with elicitation forms.
    let data = TempDir::new("acp-ask-data");
    let ws = TempDir::new("acp-ask-ws");
    let mut agent = AgentProcess::scripted(&script(), data.path());
    agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"elicitation": {"form": {}}}}),
    );
    let id = agent.new_session(ws.path());
    let t = agent.prompt(&id, "ask me", |r| {
        assert_eq!(r["method"], "elicitation/create");
        assert_eq!(r["params"]["mode"], "form");
        assert_eq!(
            r["params"]["requestedSchema"]["properties"]["q0"]["oneOf"][1],
            json!({"const": "pg", "title": "pg"})
        );
        Reply::Result(json!({"action": "accept", "content": {"q0": "pg"}}))
    });
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let result = t
        .updates_for(&id)
        .into_iter()
        .find(|u| u["status"] == "completed")
        .unwrap()
        .clone();
    assert_eq!(result["content"][0]["content"]["text"], "pg");
    // Declined → no answer.
    let t = agent.prompt(&id, "ask me again", |_| {
        Reply::Result(json!({"action": "decline"}))
    });
    let result = t
        .updates_for(&id)
        .into_iter()
        .find(|u| u["status"] == "completed")
        .unwrap()
        .clone();
    assert_eq!(result["content"][0]["content"]["text"], "(no answer)");

    // A client without forms is never asked the question in a permission dialog: clients
    // pick options by kind and auto-approvers answer them, which would answer for the person.
    // Nothing is chosen; the tool call shows the question and the model is told to ask it.
    let mut plain = AgentProcess::scripted(&script(), data.path());
    plain.initialize();
    let id = plain.new_session(ws.path());
    let t = plain.prompt(&id, "ask me", |r| {
        panic!("no dialog may stand in for a question: {r}")
    });
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let result = t
        .updates_for(&id)
        .into_iter()
        .find(|u| u["status"] == "completed")
        .unwrap()
        .clone();
    let text = result["content"][0]["content"]["text"].as_str().unwrap();
    assert!(
        text.contains("cannot show questions") && text.contains("Which DB? (sqlite / pg)"),
        "{text}"
    );
}

#[test]
fn two_sessions_stream_concurrently_and_stay_attributed() {
    let mut s = setup("two");
    let a = s.agent.new_session(s.ws.path());
    let b = s.agent.new_session(s.ws.path());
    let pa = s.agent.request(
        "session/prompt",
        json!({"sessionId": a, "prompt": [{"type": "text", "text": "chatty"}]}),
    );
    let pb = s.agent.request(
        "session/prompt",
        json!({"sessionId": b, "prompt": [{"type": "text", "text": "chatty too"}]}),
    );
    let mut text = std::collections::HashMap::<String, String>::new();
    let mut done = 0;
    let mut responses = vec![];
    while done < 2 {
        let v = s.agent.recv();
        if v["method"] == "session/update"
            && v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        {
            let sid = v["params"]["sessionId"].as_str().unwrap().to_string();
            text.entry(sid)
                .or_default()
                .push_str(v["params"]["update"]["content"]["text"].as_str().unwrap());
        }
        if v.get("method").is_none() && (v["id"] == pa || v["id"] == pb) {
            responses.push(v.clone());
            done += 1;
        }
    }
    assert_eq!(text[&a], "ab".repeat(300));
    assert_eq!(text[&b], "ab".repeat(300));
    assert!(responses
        .iter()
        .all(|r| r["result"]["stopReason"] == "end_turn"));
}

#[test]
fn list_pages_through_250_sessions_with_cwd_filter() {
    let mut s = setup("list");
    let other = TempDir::new("acp-list-other");
    let mut ids = std::collections::HashSet::new();
    for i in 0..250 {
        let cwd = if i % 5 == 0 {
            other.path()
        } else {
            s.ws.path()
        };
        let id = s.agent.new_session(cwd);
        // A conversation (a slash command: no model call, and no title).
        let t = s.agent.prompt(&id, "/help", |r| panic!("{r}"));
        assert_eq!(t.response["result"]["stopReason"], "end_turn");
        ids.insert(id);
    }
    // Sessions never prompted have nothing to resume: not listed.
    for _ in 0..3 {
        s.agent.new_session(s.ws.path());
    }
    let mut seen = vec![];
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut params = json!({});
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let r = s.agent.call_ok("session/list", params);
        pages += 1;
        for info in r["sessions"].as_array().unwrap() {
            assert!(info["cwd"].as_str().unwrap().starts_with('/'));
            assert!(info["updatedAt"].as_str().unwrap().ends_with('Z'));
            // Unknown titles are omitted, never null (CodeCompanion's picker crashes on null).
            assert!(info.get("title").is_none_or(Value::is_string), "{info}");
            seen.push(info["sessionId"].as_str().unwrap().to_string());
        }
        match r["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 5);
    let unique: std::collections::HashSet<String> = seen.iter().cloned().collect();
    assert_eq!((seen.len(), unique), (250, ids));
    let filtered = s
        .agent
        .call_ok("session/list", json!({"cwd": other.path()}));
    assert_eq!(filtered["sessions"].as_array().unwrap().len(), 50);
    let (resp, _) = s
        .agent
        .call("session/list", json!({"cursor": "zz-not-ours"}));
    assert_eq!(error_of(&resp)["code"], -32602);
}

#[test]
fn load_of_a_2000_turn_session_replays_everything_before_the_response() {
    let data = TempDir::new("acp-big-data");
    let ws = TempDir::new("acp-big-ws");
    // Write the durable format directly (docs/runtime-host-protocol.md §7): 2000 turns.
    let dir = data.path().join("sessions/big");
    std::fs::create_dir_all(&dir).unwrap();
    let session = json!({"id": "big", "revision": 1, "workspace": {"kind": "host_path", "path": ws.path()}, "additionalDirectories": [],
        "name": "Big", "labels": [], "isArchived": false, "createdAt": 1, "lastUsedAt": 2,
        "configuration": {"modelTarget": {"kind": "default"}, "thinkingLevel": null, "permissionMode": "ask", "collaborationMode": "agent"},
        "status": "idle", "activeTurnId": null, "mcpServers": []});
    std::fs::write(dir.join("session.json"), session.to_string()).unwrap();
    let mut lines = String::new();
    let mut seq = 0;
    let mut push = |turn: usize, body: Value, lines: &mut String| {
        seq += 1;
        let mut item = json!({"messageSeq": seq, "ts": 1, "turnId": format!("t{turn}")});
        item.as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        lines.push_str(&item.to_string());
        lines.push('\n');
    };
    for turn in 0..2000 {
        push(
            turn,
            json!({"type": "user", "messageId": format!("u_t{turn}"), "content": {"text": format!("question {turn}")}}),
            &mut lines,
        );
        push(
            turn,
            json!({"type": "turn_state", "runId": format!("r{turn}"), "status": "running", "origin": "prompt"}),
            &mut lines,
        );
        push(
            turn,
            json!({"type": "assistant", "messageId": format!("m_r{turn}_0"), "text": format!("answer {turn}")}),
            &mut lines,
        );
        push(
            turn,
            json!({"type": "turn_state", "runId": format!("r{turn}"), "status": "completed", "reason": "end_turn"}),
            &mut lines,
        );
    }
    std::fs::write(dir.join("transcript.jsonl"), lines).unwrap();
    let mut agent = AgentProcess::scripted(&script(), data.path());
    agent.initialize();
    let t0 = Instant::now();
    let t = agent.drive(
        "session/load",
        json!({"sessionId": "big", "cwd": ws.path(), "mcpServers": []}),
        no_requests,
    );
    let took = t0.elapsed();
    assert!(t.response["result"]["configOptions"].is_array());
    let users: Vec<&Value> = t
        .updates
        .iter()
        .filter(|u| u["params"]["update"]["sessionUpdate"] == "user_message_chunk")
        .collect();
    let agents: Vec<&Value> = t
        .updates
        .iter()
        .filter(|u| u["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .collect();
    assert_eq!((users.len(), agents.len()), (2000, 2000));
    assert_eq!(
        users[1999]["params"]["update"]["content"]["text"],
        "question 1999"
    );
    assert_eq!(agents[0]["params"]["update"]["messageId"], "m_r0_0");
    eprintln!("load of 2000 turns (4000 updates) took {took:?}");
}

#[test]
fn close_cancels_a_running_turn_and_delete_removes_the_session() {
    let mut s = setup("close");
    let id = s.agent.new_session(s.ws.path());
    let prompt_id = s.agent.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "slow"}]}),
    );
    loop {
        if s.agent.recv()["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    let close_id = s.agent.request("session/close", json!({"sessionId": id}));
    let (prompt_resp, _) = s.agent.response_to(&prompt_id);
    assert_eq!(prompt_resp["result"]["stopReason"], "cancelled");
    let (close_resp, _) = s.agent.response_to(&close_id);
    assert_eq!(close_resp["result"], json!({}));
    let (resp, _) = s.agent.call(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "hi"}]}),
    );
    assert_eq!(
        error_of(&resp)["code"],
        -32002,
        "closed: unknown to this connection"
    );
    // Durable state is still there: it lists and resumes.
    let list = s.agent.call_ok("session/list", json!({}));
    assert!(list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["sessionId"] == id.as_str()));
    s.agent.call_ok(
        "session/resume",
        json!({"sessionId": id, "cwd": s.ws.path()}),
    );
    // Delete: gone from the list; deleting again (or an unknown id) succeeds silently.
    assert_eq!(
        s.agent.call_ok("session/delete", json!({"sessionId": id})),
        json!({})
    );
    let list = s.agent.call_ok("session/list", json!({}));
    assert!(list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["sessionId"] != id.as_str()));
    assert_eq!(
        s.agent.call_ok("session/delete", json!({"sessionId": id})),
        json!({})
    );
    assert_eq!(
        s.agent
            .call_ok("session/delete", json!({"sessionId": "never-existed"})),
        json!({})
    );
    let (resp, _) = s.agent.call(
        "session/load",
        json!({"sessionId": id, "cwd": s.ws.path(), "mcpServers": []}),
    );
    assert_eq!(error_of(&resp)["code"], -32002);
}

#[test]
fn bad_sessions_prompts_and_content_get_precise_errors() {
    let mut s = setup("errors");
    let (resp, _) = s.agent.call(
        "session/new",
        json!({"cwd": "relative/path", "mcpServers": []}),
    );
    assert_eq!(error_of(&resp)["code"], -32602);
    let (resp, _) = s.agent.call(
        "session/new",
        json!({"cwd": "/no/such/dir/anywhere", "mcpServers": []}),
    );
    assert_eq!(error_of(&resp)["code"], -32602);
    let (resp, _) = s.agent.call("session/new", json!({"mcpServers": []}));
    assert!(error_of(&resp)["message"]
        .as_str()
        .unwrap()
        .contains("`cwd`"));
    let (resp, _) = s.agent.call(
        "session/prompt",
        json!({"sessionId": "nope", "prompt": [{"type": "text", "text": "hi"}]}),
    );
    assert_eq!(error_of(&resp)["code"], -32002);
    let id = s.agent.new_session(s.ws.path());
    let (resp, _) = s.agent.call("session/prompt", json!({"sessionId": id, "prompt": [{"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}]}));
    assert_eq!(error_of(&resp)["code"], -32602);
    let (resp, _) = s.agent.call(
        "session/load",
        json!({"sessionId": id, "cwd": "/tmp", "mcpServers": []}),
    );
    assert_eq!(error_of(&resp)["code"], -32602, "cwd mismatch");
    // Rich content is accepted.
    std::fs::write(s.ws.path().join("linked.md"), "# Linked").unwrap();
    let t = s.agent.drive(
        "session/prompt",
        json!({"sessionId": id, "prompt": [
            {"type": "text", "text": "look"},
            {"type": "resource_link", "uri": format!("file://{}/linked.md", s.ws.path().display()), "name": "linked.md"},
            {"type": "resource", "resource": {"uri": "file:///x/y.txt", "text": "embedded"}},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
        ]}),
        no_requests,
    );
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    // A cancelled prompt answers `cancelled` (a second prompt meanwhile waits behind it:
    // `prompts_sent_back_to_back_are_queued_and_answered_in_order`).
    let slow = s.agent.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "slow"}]}),
    );
    loop {
        if s.agent.recv()["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    s.agent.notify("session/cancel", json!({"sessionId": id}));
    let (resp, _) = s.agent.response_to(&slow);
    assert_eq!(resp["result"]["stopReason"], "cancelled");
    // A failed turn is a JSON-RPC error with the host's failure class; a step limit is max_turn_requests.
    let (resp, _) = s.agent.call(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "fail"}]}),
    );
    assert_eq!(error_of(&resp)["data"]["failureClass"], "provider_error");
    assert_eq!(error_of(&resp)["data"]["makaCode"], "turn_failed");
}

#[test]
fn garbage_mid_turn_is_answered_and_the_turn_completes() {
    let mut s = setup("garbage");
    let id = s.agent.new_session(s.ws.path());
    let prompt_id = s.agent.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "chatty"}]}),
    );
    s.agent.send_raw(b"{this is not json\n");
    s.agent.send_raw(b"[1,2,3]\n");
    s.agent.send_raw(b"\xff\xfe\n");
    let mut errors = 0;
    let mut text = String::new();
    loop {
        let v = s.agent.recv();
        if v["id"].is_null() && v.get("error").is_some() {
            errors += 1;
        }
        if v["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            text.push_str(v["params"]["update"]["content"]["text"].as_str().unwrap());
        }
        if v["id"] == prompt_id && v.get("method").is_none() {
            assert_eq!(v["result"]["stopReason"], "end_turn");
            break;
        }
    }
    assert_eq!(errors, 3);
    assert_eq!(text, "ab".repeat(300));
}

fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

fn embedded_host_pid(agent_pid: u32) -> Option<u32> {
    let out = std::process::Command::new("ps")
        .args(["-eo", "pid,ppid,args"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let mut parts = l.split_whitespace();
        let pid: u32 = parts.next()?.parse().ok()?;
        let ppid: u32 = parts.next()?.parse().ok()?;
        let rest: Vec<&str> = parts.collect();
        (ppid == agent_pid && rest.get(1) == Some(&"host")).then_some(pid)
    })
}

#[test]
fn the_embedded_host_starts_lazily_and_never_outlives_the_adapter() {
    let mut s = setup("lifecycle");
    assert_eq!(
        embedded_host_pid(s.agent.pid()),
        None,
        "initialize starts no host"
    );
    s.agent.new_session(s.ws.path());
    let host = embedded_host_pid(s.agent.pid()).expect("session/new started the embedded host");
    // EOF: the adapter stops the host and exits.
    s.agent.close_stdin();
    let (status, _) = s
        .agent
        .wait_exit(Duration::from_secs(10))
        .expect("adapter exits");
    assert!(status.success());
    let t0 = Instant::now();
    while process_alive(host) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!process_alive(host), "host stopped on EOF");

    // SIGKILL of the adapter: the host notices its stdin closing and exits by itself.
    let mut s = setup("lifecycle-kill");
    s.agent.new_session(s.ws.path());
    let host = embedded_host_pid(s.agent.pid()).unwrap();
    std::process::Command::new("kill")
        .args(["-KILL", &s.agent.pid().to_string()])
        .status()
        .unwrap();
    let t0 = Instant::now();
    while process_alive(host) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !process_alive(host),
        "no orphaned host after the adapter was killed"
    );
}

#[test]
fn a_host_killed_mid_turn_ends_the_prompt_with_host_unavailable_and_is_restarted() {
    let mut s = setup("hostkill");
    let id = s.agent.new_session(s.ws.path());
    let prompt_id = s.agent.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "slow"}]}),
    );
    loop {
        if s.agent.recv()["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    let host = embedded_host_pid(s.agent.pid()).unwrap();
    std::process::Command::new("kill")
        .args(["-KILL", &host.to_string()])
        .status()
        .unwrap();
    let (resp, _) = s.agent.response_to(&prompt_id);
    assert_eq!(
        error_of(&resp)["data"]["makaCode"],
        "host_unavailable",
        "{resp}"
    );
    // The next prompt starts a new host, re-opens the session and works.
    let t = s.agent.prompt(&id, "hi", no_requests);
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
    let new_host = embedded_host_pid(s.agent.pid()).unwrap();
    assert_ne!(new_host, host);
}

#[test]
fn a_step_limit_is_max_turn_requests() {
    let data = TempDir::new("acp-steps-data");
    let ws = TempDir::new("acp-steps-ws");
    let mut agent = AgentProcess::spawn_with(support::Spawn {
        args: vec![],
        env: vec![
            ("MAKA_SCRIPT".into(), script().to_string()),
            ("MAKA_MAX_STEPS".into(), "2".into()),
            ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
            (
                "XDG_CONFIG_HOME".into(),
                data.path().join("cfg").display().to_string(),
            ),
        ],
    });
    agent.initialize();
    let id = agent.new_session(ws.path());
    let t = agent.prompt(&id, "steps", no_requests);
    assert_eq!(t.response["result"]["stopReason"], "max_turn_requests");
    let t = agent.prompt(&id, "hi", no_requests);
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
}

#[test]
fn a_pending_dialog_never_stalls_another_session() {
    let mut s = setup("stall");
    let a = s.agent.new_session(s.ws.path());
    let b = s.agent.new_session(s.ws.path());
    // Session A asks for permission; the client leaves the dialog open.
    let pa = s.agent.request(
        "session/prompt",
        json!({"sessionId": a, "prompt": [{"type": "text", "text": "please edit"}]}),
    );
    let dialog = loop {
        let v = s.agent.recv();
        if v["method"] == "session/request_permission" {
            break v;
        }
    };
    // Session B streams to completion meanwhile.
    let t = s.agent.prompt(&b, "chatty", no_requests);
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert_eq!(t.text(), "ab".repeat(300));
    // Now answer A's dialog; A completes too.
    s.agent.send(&json!({"jsonrpc": "2.0", "id": dialog["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}));
    let (resp, _) = s.agent.response_to(&pa);
    assert_eq!(resp["result"]["stopReason"], "end_turn");
}

/// A script that pipes its requests and closes stdin (`printf … | maka-acp`) gets an answer to
/// every one of them, including those that start the host, before the process exits.
#[test]
fn every_request_piped_before_eof_is_answered() {
    let data = TempDir::new("acp-eof-script-data");
    let ws = TempDir::new("acp-eof-script-ws");
    let mut agent = AgentProcess::scripted(&script(), data.path());
    let cwd = ws.path().display().to_string();
    let script = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/list", "params": {}}),
        json!({"jsonrpc": "2.0", "id": "four", "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "session/list", "params": {"cwd": cwd}}),
        json!({"jsonrpc": "2.0", "id": 6, "method": "no/such/method", "params": {}}),
    ];
    agent.send_all(&script);
    agent.close_stdin();
    let lines = agent.drain();
    let (status, _) = agent
        .wait_exit(Duration::from_secs(20))
        .expect("the agent exits after answering");
    assert!(status.success(), "exit status {status}");
    let answered: Vec<&Value> = lines.iter().filter(|l| l.get("method").is_none()).collect();
    for request in &script {
        let id = &request["id"];
        let answers: Vec<&&Value> = answered.iter().filter(|a| &a["id"] == id).collect();
        assert_eq!(answers.len(), 1, "request {id} answered once: {lines:?}");
        let answer = answers[0];
        if request["method"] == "no/such/method" {
            assert_eq!(error_of(answer)["code"], -32601, "{answer}");
        } else {
            assert!(answer.get("result").is_some(), "{id} succeeded: {answer}");
        }
    }
}

/// Stdin closing while a prompt runs is the client leaving: the prompt answers `cancelled`,
/// whether the turn had already streamed something or not (one outcome, one stop reason).
#[test]
fn eof_during_a_prompt_answers_it_cancelled() {
    for wait_for_output in [true, false] {
        let mut s = setup("eof-prompt");
        let id = s.agent.new_session(s.ws.path());
        let prompt_id = s.agent.request(
            "session/prompt",
            json!({"sessionId": id, "prompt": [{"type": "text", "text": "slow"}]}),
        );
        if wait_for_output {
            let first = s.agent.recv();
            assert_eq!(first["method"], "session/update", "{first}");
        }
        s.agent.close_stdin();
        let lines = s.agent.drain();
        let answer = lines
            .iter()
            .find(|l| l["id"] == prompt_id && l.get("method").is_none())
            .unwrap_or_else(|| {
                panic!("the prompt is answered (output first: {wait_for_output}): {lines:?}")
            });
        assert_eq!(
            answer["result"]["stopReason"], "cancelled",
            "output first: {wait_for_output}: {answer}"
        );
        let (status, elapsed) = s
            .agent
            .wait_exit(Duration::from_secs(20))
            .expect("the agent exits");
        assert!(status.success(), "exit status {status}");
        assert!(elapsed < Duration::from_secs(15), "exit took {elapsed:?}");
    }
}

/// Stdin closing with 1,000 prompts in flight (more than the host follows at once: most are
/// still waiting to start) drains like one: every prompt is answered `cancelled`, once, and the
/// process exits within the same bound. The drain's cost must not grow with the number in
/// flight (issue 45: 962 of 1,000 were unanswered after 20 s and the adapter never exited).
#[test]
fn eof_with_a_thousand_prompts_in_flight_answers_them_all_cancelled() {
    let sessions: usize = std::env::var("EOF_SCALE_SESSIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    for wait_for_output in [true, false] {
        eof_with_prompts_in_flight(sessions, wait_for_output);
    }
}

fn eof_with_prompts_in_flight(sessions: usize, wait_for_output: bool) {
    let mut s = setup("eof-scale");
    let cwd = s.ws.path().display().to_string();
    let news: Vec<Value> = (0..sessions)
        .map(|i| json!({"jsonrpc": "2.0", "id": format!("new-{i}"), "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}}))
        .collect();
    s.agent.send_all(&news);
    let mut ids = Vec::with_capacity(sessions);
    while ids.len() < sessions {
        let v = s.agent.recv();
        if v.get("method").is_none() {
            let id = v["result"]["sessionId"].as_str();
            ids.push(
                id.unwrap_or_else(|| panic!("session/new failed: {v}"))
                    .to_string(),
            );
        }
    }
    let prompts: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| json!({"jsonrpc": "2.0", "id": format!("prompt-{i}"), "method": "session/prompt", "params": {"sessionId": id, "prompt": [{"type": "text", "text": "slow"}]}}))
        .collect();
    s.agent.send_all(&prompts);
    // Some turns are running (their first words are out) when the client leaves, or none
    // has started yet.
    if wait_for_output {
        while s.agent.recv()["params"]["update"]["sessionUpdate"] != "agent_message_chunk" {}
    }
    let closed = Instant::now();
    s.agent.close_stdin();
    let lines = s.agent.drain();
    let mut answers = std::collections::HashMap::new();
    for l in lines.iter().filter(|l| l.get("method").is_none()) {
        if let Some(id) = l["id"].as_str().filter(|id| id.starts_with("prompt-")) {
            assert!(
                answers.insert(id.to_string(), l.clone()).is_none(),
                "{id} answered twice"
            );
        }
    }
    let not_cancelled: Vec<&Value> = answers
        .values()
        .filter(|a| a["result"]["stopReason"] != "cancelled")
        .collect();
    assert!(
        answers.len() == sessions && not_cancelled.is_empty(),
        "output first: {wait_for_output}: {} of {sessions} prompts answered; not `cancelled`: {} (first: {:?})\n--- stderr tail:\n{}",
        answers.len(),
        not_cancelled.len(),
        not_cancelled.first(),
        tail(&s.agent.stderr())
    );
    let (status, _) = s
        .agent
        .wait_exit(Duration::from_secs(20))
        .expect("the agent exits");
    assert!(status.success(), "exit status {status}");
    let elapsed = closed.elapsed();
    assert!(
        elapsed < Duration::from_secs(15),
        "output first: {wait_for_output}: exit took {elapsed:?}"
    );
    eprintln!("output first: {wait_for_output}: {sessions} prompts drained, exit {elapsed:?} after stdin closed");
}

fn tail(text: &str) -> &str {
    let start = text.len().saturating_sub(4000);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    &text[start..]
}
