//! Another ACP agent as a subagent — here `maka-acp` itself with its scripted provider, declared
//! in the workspace's `.maka/agents.json` — driven through the real adapter: the trust dialog on
//! first use, its text streamed into the delegate call, its tool call shown under it with a
//! permission answered in the parent, a cancel that leaves no process behind, a crash named in
//! the result, and `session/load` replaying it all. Every line schema-checked.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::host::TempDir;
use support::{processes_with, select, AgentProcess, Reply};

fn parent_script() -> Value {
    json!({
        "rules": [
            {"when": "ask the helper", "responses": [
                [{"tool": "delegate", "args": {"agent": "helper", "task": "count the files"}}],
                [{"text": "Done asking."}]]},
            {"when": "helper writes", "responses": [
                [{"tool": "delegate", "args": {"agent": "helper", "task": "write the notes"}}],
                [{"text": "Delegated."}]]},
            {"when": "helper slow", "responses": [
                [{"tool": "delegate", "args": {"agent": "helper", "task": "slow job"}}],
                [{"text": "after"}]]},
            {"when": "helper runs", "responses": [
                [{"tool": "delegate", "args": {"agent": "helper", "task": "run the command"}}],
                [{"text": "It ran."}]]},
            {"when": "helper bypass", "responses": [
                [{"tool": "delegate", "args": {"agent": "helper", "task": "/mode bypass"}}],
                [{"text": "Switched."}]]},
            {"when": "helper recall", "responses": [
                [{"tool": "delegate", "args": {"agent": "helper", "task": "what did i say"}}],
                [{"text": "Recalled."}]]},
            {"when": "swarm now", "responses": [
                [{"tool": "delegate", "args": {"agent": "helper", "task": "part one"}},
                 {"tool": "delegate", "args": {"agent": "helper2", "task": "part two"}},
                 {"tool": "delegate", "args": {"agent": "helper3", "task": "part three"}}],
                [{"text": "Swarm done."}]]},
            {"when": "graph now", "responses": [
                [{"tool": "delegate_graph", "args": {"tasks": [
                    {"id": "a", "agent": "helper", "task": "count the files"},
                    {"id": "b", "agent": "helper2", "task": "what did i say", "dependsOn": ["a"]},
                    {"id": "c", "agent": "crasher", "task": "anything"},
                    {"id": "d", "agent": "helper3", "task": "count the files", "dependsOn": ["c"]}]}}],
                [{"text": "Graph done."}]]},
            {"when": "crasher", "responses": [
                [{"tool": "delegate", "args": {"agent": "crasher", "task": "anything"}}],
                [{"text": "Crash handled."}]]}
        ],
        "default": [[{"text": "Hello."}]]
    })
}

fn sub_script() -> Value {
    json!({
        "rules": [
            {"when": "count the files", "responses": [[{"text": "There are 3 files."}]]},
            {"when": "write the notes", "responses": [
                [{"tool": "write_file", "args": {"path": "notes.txt", "content": "from helper\n"}}],
                [{"text": "Wrote notes.txt."}]]},
            {"when": "slow job", "responses": [[{"text": "Starting"}, {"delayMs": 30000}, {"text": "never"}]]},
            {"when": "what did i say", "responses": [[{"echo": "user"}]]},
            {"when": "run the command", "responses": [
                [{"tool": "run_command", "args": {"command": "echo from-sub-terminal"}}],
                [{"text": "Ran it."}]]},
            {"when": "part one", "responses": [[{"text": "begin one"}, {"delayMs": 800}, {"text": " end one"}]]},
            {"when": "part two", "responses": [[{"text": "begin two"}, {"delayMs": 800}, {"text": " end two"}]]},
            {"when": "part three", "responses": [[{"text": "begin three"}, {"delayMs": 800}, {"text": " end three"}]]}
        ]
    })
}

fn helper(data: &std::path::Path) -> Value {
    json!({
        "command": env!("CARGO_BIN_EXE_maka-acp"),
        "args": ["--log-level", "warn"],
        "env": {"MAKA_SCRIPT": sub_script().to_string(), "MAKA_DATA_DIR": data,
                "MAKA_CONFIG": "/nonexistent/maka-sub-config.json"},
        "description": "another maka for small jobs"
    })
}

/// A workspace declaring `helper`, `helper2`, `helper3` (this very binary, scripted, each with
/// its own data dir under `sub_data`) and `crasher`.
fn workspace(sub_data: &std::path::Path) -> TempDir {
    let ws = TempDir::new("sub-ws");
    std::fs::create_dir_all(ws.path().join(".maka")).unwrap();
    let agents = json!({"agents": {
        "helper": helper(sub_data),
        "helper2": helper(&sub_data.join("2")),
        "helper3": helper(&sub_data.join("3")),
        "crasher": {"command": "sh", "args": ["-c", "echo boom >&2; exit 3"], "description": "always fails"}
    }});
    std::fs::write(ws.path().join(".maka/agents.json"), agents.to_string()).unwrap();
    ws
}

fn allow(r: &Value) -> Reply {
    assert_eq!(r["method"], "session/request_permission", "{r}");
    select("allow_once")
}

#[test]
fn a_subagent_streams_its_work_into_the_parent_asks_through_it_and_is_replayed() {
    let data = TempDir::new("sub-data");
    let sub_data = TempDir::new("sub-agent-data");
    let ws = workspace(sub_data.path());
    let mut a = AgentProcess::scripted(&parent_script(), data.path());
    a.initialize();
    let s = a.new_session(ws.path());

    let listed = a.call_ok("_maka/subagent/list", json!({"sessionId": s}));
    let names: Vec<(&str, bool)> = listed["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["name"].as_str().unwrap(), x["trusted"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("crasher", false),
            ("helper", false),
            ("helper2", false),
            ("helper3", false)
        ]
    );

    // First use: the person allows running the workspace's command — always, for this
    // declaration, the one lasting option, offered by name — then the agent works.
    let mut asked = vec![];
    let t = a.prompt(&s, "ask the helper", |r| {
        asked.push(r["params"]["toolCall"]["title"].clone());
        assert_eq!(
            support::options_offered(&r["params"]["options"]),
            [
                ("allow_once", "allow_once", "Allow once"),
                (
                    "allow_workspace",
                    "allow_always",
                    "Always allow agent `helper` as declared in this workspace"
                ),
                ("reject", "reject_once", "Reject")
            ]
        );
        select("allow_workspace")
    });
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{:?}",
        t.response
    );
    assert_eq!(asked.len(), 1);
    assert!(asked[0]
        .as_str()
        .unwrap()
        .starts_with("Run agent helper declared by this workspace: "));
    let updates = t.updates_for(&s);
    let delegate = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap();
    assert_eq!(delegate["title"], "helper: count the files");
    let id = delegate["toolCallId"].as_str().unwrap().to_string();
    let done = updates
        .iter()
        .find(|u| u["toolCallId"] == id.as_str() && u["status"] == "completed")
        .unwrap_or_else(|| panic!("{updates:?}"));
    assert!(done.to_string().contains("There are 3 files."), "{done}");
    assert!(t.text().ends_with("Done asking."));
    let listed = a.call_ok("_maka/subagent/list", json!({"sessionId": s}));
    assert_eq!(listed["agents"][1]["trusted"], true, "remembered");

    // Its tool call is shown under the delegate call; its permission request is ours to answer.
    let mut asked = vec![];
    let t = a.prompt(&s, "helper writes", |r| {
        asked.push(r["params"]["toolCall"]["title"].clone());
        allow(r)
    });
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert_eq!(asked, [json!("helper: Write notes.txt")]);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("notes.txt")).unwrap(),
        "from helper\n"
    );
    let updates = t.updates_for(&s);
    let parent = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call" && u["title"] == "helper: write the notes")
        .unwrap()["toolCallId"]
        .clone();
    let child = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call" && u["title"] == "helper: Write notes.txt")
        .unwrap_or_else(|| panic!("{updates:?}"));
    assert_eq!(child["_meta"]["maka"]["parentToolCallId"], parent);
    assert!(updates
        .iter()
        .any(|u| u["toolCallId"] == child["toolCallId"] && u["status"] == "completed"));

    // Its commands run in a terminal this host serves (gated by this session's mode).
    let mut asked = vec![];
    let t = a.prompt(&s, "helper runs", |r| {
        asked.push(r["params"]["toolCall"]["title"].clone());
        allow(r)
    });
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert_eq!(asked, [json!("helper: echo from-sub-terminal")]);
    let ran = t
        .updates_for(&s)
        .into_iter()
        .find(|u| {
            u["sessionUpdate"] == "tool_call_update"
                && u["status"] == "completed"
                && u.to_string().contains("from-sub-terminal\\n")
        })
        .cloned();
    assert!(ran.is_some(), "{:?}", t.updates);

    // A later delegation continues the same agent session (it resumes it): the agent heard
    // every task this session gave it.
    let t = a.prompt(&s, "helper recall", |r| panic!("unexpected {r}"));
    let done = t
        .updates_for(&s)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
        .cloned()
        .unwrap();
    assert!(
        done.to_string().contains(
            "heard: count the files | write the notes | run the command | what did i say"
        ),
        "{done}"
    );

    // Replayed by a load: the delegations and the subagent's tool call under its parent.
    let mut b = AgentProcess::scripted(&parent_script(), data.path());
    b.initialize();
    let load = b.drive(
        "session/load",
        json!({"sessionId": s, "cwd": ws.path(), "mcpServers": []}),
        |r| panic!("unexpected {r}"),
    );
    let replayed = load.updates_for(&s);
    let titles: Vec<&str> = replayed
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .map(|u| u["title"].as_str().unwrap())
        .collect();
    assert_eq!(
        titles,
        [
            "helper: count the files",
            "helper: write the notes",
            "helper: Write notes.txt",
            "helper: run the command",
            "helper: echo from-sub-terminal",
            "helper: what did i say"
        ]
    );
    let child = replayed
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call" && u["title"] == "helper: Write notes.txt")
        .unwrap();
    assert_eq!(child["_meta"]["maka"]["parentToolCallId"], parent);

    // An agent that starts a command without asking (its own mode is bypass): in this
    // session's ask mode the person is asked before it runs.
    let t = a.prompt(&s, "helper bypass", |r| panic!("unexpected {r}"));
    assert!(
        format!("{:?}", t.updates).contains("Mode set to bypass"),
        "{:?}",
        t.updates
    );
    let mut asked = vec![];
    a.prompt(&s, "helper runs", |r| {
        asked.push(r["params"]["toolCall"]["title"].clone());
        allow(r)
    });
    assert_eq!(asked, [json!("helper: run sh -c 'echo from-sub-terminal'")]);
    assert!(processes_with(&sub_data.path().display().to_string()).is_empty());
}

#[test]
fn a_cancel_reaches_the_subagent_and_a_crash_is_named() {
    let data = TempDir::new("sub2-data");
    let sub_data = TempDir::new("sub2-agent-data");
    let ws = workspace(sub_data.path());
    let mut a = AgentProcess::scripted(&parent_script(), data.path());
    a.initialize();
    let s = a.new_session(ws.path());

    let prompt = a.request(
        "session/prompt",
        json!({"sessionId": s, "prompt": [{"type": "text", "text": "helper slow"}]}),
    );
    // Trust first; then wait until the subagent's first words arrive in the delegate call.
    loop {
        let v = a.recv();
        if v["method"] == "session/request_permission" {
            a.send(&json!({"jsonrpc": "2.0", "id": v["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}));
        } else if v.to_string().contains("Starting") {
            break;
        }
    }
    let sub = sub_data.path().display().to_string();
    assert!(!processes_with(&sub).is_empty(), "the subagent runs");
    a.notify("session/cancel", json!({"sessionId": s}));
    let (resp, _) = a.response_to(&prompt);
    assert_eq!(resp["result"]["stopReason"], "cancelled", "{resp}");
    // No process left behind: the agent and the host it started are gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_with(&sub).is_empty() {
        assert!(
            Instant::now() < deadline,
            "left behind: {:?}",
            processes_with(&sub)
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // A subagent that dies at once: the delegate call fails saying what it said.
    let t = a.prompt(&s, "crasher", allow);
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let failed = t
        .updates_for(&s)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed")
        .cloned()
        .unwrap_or_else(|| panic!("{:?}", t.updates));
    let text = failed.to_string();
    assert!(
        text.contains("agent crasher could not start") && text.contains("boom"),
        "{text}"
    );
    assert!(t.text().ends_with("Crash handled."));
}

fn set_orchestration(a: &mut AgentProcess, s: &str, value: &str) {
    let r = a.call_ok(
        "session/set_config_option",
        json!({"sessionId": s, "configId": "orchestration_mode", "value": value}),
    );
    let opt = r["configOptions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "orchestration_mode")
        .cloned()
        .unwrap();
    assert_eq!(opt["currentValue"], value);
}

#[test]
fn swarm_runs_delegations_together_and_a_graph_follows_its_dependencies() {
    let data = TempDir::new("sub3-data");
    let sub_data = TempDir::new("sub3-agent-data");
    let ws = workspace(sub_data.path());
    let mut a = AgentProcess::scripted(&parent_script(), data.path());
    a.initialize();
    let s = a.new_session(ws.path());
    set_orchestration(&mut a, &s, "swarm");

    // Three delegations of one step: every agent has begun before any has finished.
    let t = a.prompt(&s, "swarm now", allow);
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let lines: Vec<String> = t.updates_for(&s).iter().map(|u| u.to_string()).collect();
    let first_done = lines
        .iter()
        .position(|l| l.contains("\"status\":\"completed\"") && l.contains(" end "))
        .unwrap_or_else(|| panic!("{lines:#?}"));
    for part in ["begin one", "begin two", "begin three"] {
        let at = lines.iter().position(|l| l.contains(part)).unwrap();
        assert!(at < first_done, "{part} only after a delegation finished");
    }
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("\"status\":\"completed\"") && l.contains(" end "))
            .count(),
        3
    );
    assert!(t.text().ends_with("Swarm done."));

    // A graph: b gets a's result; c crashes, so d is not run.
    set_orchestration(&mut a, &s, "graph");
    let t = a.prompt(&s, "graph now", allow);
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let updates = t.updates_for(&s);
    let graph = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call" && u["title"] == "Delegate 4 tasks")
        .unwrap_or_else(|| panic!("{updates:?}"))["toolCallId"]
        .clone();
    let child = |title: &str| {
        updates
            .iter()
            .find(|u| u["sessionUpdate"] == "tool_call" && u["title"] == title)
            .cloned()
            .unwrap_or_else(|| panic!("no {title}: {updates:?}"))
    };
    let b = child("helper2: what did i say");
    assert_eq!(b["_meta"]["maka"]["parentToolCallId"], graph);
    let settled = |id: &Value| {
        updates
            .iter()
            .rev()
            .find(|u| {
                u["toolCallId"] == *id
                    && u["status"].is_string()
                    && u["status"] != "in_progress"
                    && u["status"] != "pending"
            })
            .cloned()
            .unwrap()
    };
    let b_done = settled(&b["toolCallId"]);
    assert_eq!(b_done["status"], "completed");
    assert!(
        b_done.to_string().contains("There are 3 files."),
        "{b_done}"
    );
    let d_done = settled(&child("helper3: count the files")["toolCallId"]);
    assert_eq!(d_done["status"], "failed");
    assert!(
        d_done
            .to_string()
            .contains("not run: the task it depends on, c, failed"),
        "{d_done}"
    );
    let g_done = settled(&graph);
    assert_eq!(g_done["status"], "failed");
    assert!(
        g_done.to_string().contains("2 of 4 tasks failed"),
        "{g_done}"
    );
    assert!(t.text().ends_with("Graph done."));
    let sub = sub_data.path().display().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_with(&sub).is_empty() {
        assert!(
            Instant::now() < deadline,
            "left behind: {:?}",
            processes_with(&sub)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A third-party ACP agent from a registry as the subagent: opencode (npm
/// `opencode-linux-x64`, installed by `scripts/test`), configured in the session's folder
/// against a local fake OpenAI-compatible server. The delegate call carries its streamed answer.
#[test]
fn opencode_from_npm_works_as_a_subagent_against_a_local_model() {
    use support::fake_openai::{fake_server, sse};
    let opencode = std::env::var("MAKA_TEST_OPENCODE").unwrap_or_else(|_| {
        panic!("MAKA_TEST_OPENCODE is not set: run the tests with scripts/test, which installs opencode")
    });
    let reply = || {
        sse(&[
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello from "}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "the local model."}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 4}}),
        ])
    };
    // opencode asks for a title and for the answer (in either order): both get the answer.
    let (port, seen) = fake_server((0..6).map(|_| reply()).collect());
    let ws = TempDir::new("oc-ws");
    let home = TempDir::new("oc-home");
    std::fs::write(
        ws.path().join("opencode.json"),
        json!({"provider": {"fake": {"npm": "@ai-sdk/openai-compatible",
               "options": {"baseURL": format!("http://127.0.0.1:{port}/v1"), "apiKey": "x"},
               "models": {"fake-model": {}}}},
               "model": "fake/fake-model"})
        .to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(ws.path().join(".maka")).unwrap();
    std::fs::write(
        ws.path().join(".maka/agents.json"),
        json!({"agents": {"opencode": {"command": opencode, "args": ["acp"],
               "env": {"HOME": home.path()}, "description": "opencode"}}})
        .to_string(),
    )
    .unwrap();
    let parent = json!({"rules": [{"when": "ask opencode", "responses": [
        [{"tool": "delegate", "args": {"agent": "opencode", "task": "say hello"}}],
        [{"text": "Asked."}]]}]});
    let data = TempDir::new("oc-data");
    let mut a = AgentProcess::scripted(&parent, data.path());
    a.initialize();
    let s = a.new_session(ws.path());
    let t = a.prompt(&s, "ask opencode", allow);
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{:?}",
        t.response
    );
    let done = t
        .updates_for(&s)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
        .cloned()
        .unwrap_or_else(|| panic!("{:?}", t.updates));
    assert!(
        done.to_string().contains("Hello from the local model."),
        "{done}\n--- agent stderr:\n{}",
        a.stderr()
    );
    assert!(t.text().ends_with("Asked."));
    assert!(
        !seen.lock().unwrap().is_empty(),
        "opencode called the local model"
    );
}
