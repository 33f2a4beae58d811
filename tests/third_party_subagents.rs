//! Subagents as third-party agents really behave (issue 30), through the real binary over pipes
//! with a small third-party stub agent (tests/fixtures/stub_agent.py) as the subagent: every
//! child call shown under its own id, its output kept wherever the agent reported it, swarm
//! agents started together, every conversation kept under a handle, explore mode honest about
//! the agent's own tools, a cancel bounded for agents that ignore it, and the agent's own
//! lasting choices put to the person. Every line schema-checked.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::host::TempDir;
use support::{process_alive, select, AgentProcess, Transcript};

fn stub_agent() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stub_agent.py").to_string()
}

/// A parent whose model, for a prompt `AGENT: TASK` (or `AGENT@HANDLE: TASK`), delegates TASK to
/// AGENT (continuing session HANDLE); `swarm: A | B` delegates both in one step.
fn parent_script(prompts: &[&str]) -> Value {
    let rules: Vec<Value> = prompts
        .iter()
        .map(|p| {
            let calls: Vec<Value> = p
                .strip_prefix("swarm: ")
                .map(|s| s.split(" | ").collect::<Vec<_>>())
                .unwrap_or_else(|| vec![p])
                .into_iter()
                .map(|one| {
                    let (who, task) = one.split_once(": ").unwrap();
                    let mut args = json!({"agent": who, "task": task});
                    if let Some((agent, handle)) = who.split_once('@') {
                        args = json!({"agent": agent, "task": task, "session": handle});
                    }
                    json!({"tool": "delegate", "args": args})
                })
                .collect();
            json!({"when": p, "responses": [calls, [{"text": "delegated"}]]})
        })
        .collect();
    json!({"rules": rules, "default": [[{"text": "Hello."}]]})
}

/// A parent (scripted for `prompts`) whose user config declares `agents` (trusted: no dialog).
fn parent(data: &TempDir, prompts: &[&str], agents: Value) -> AgentProcess {
    let config = data.path().join("config.json");
    std::fs::write(&config, json!({ "agents": agents }).to_string()).unwrap();
    let mut a = spawn(&parent_script(prompts), data, &config);
    a.initialize();
    a
}

fn spawn(script: &Value, data: &TempDir, config: &std::path::Path) -> AgentProcess {
    AgentProcess::spawn_with(support::Spawn {
        args: vec![],
        env: vec![
            ("RUST_LOG".into(), "info".into()),
            ("MAKA_SCRIPT".into(), script.to_string()),
            ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
            ("MAKA_CONFIG".into(), config.display().to_string()),
        ],
    })
}

fn stub(env: Value) -> Value {
    json!({"command": "python3", "args": [stub_agent()], "env": env, "description": "a stub"})
}

fn ended(t: &Transcript) {
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
}

/// The tool calls shown under `parent`, in order: (id, title).
fn children(updates: &[&Value], parent: &str) -> Vec<(String, String)> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .filter(|u| u["_meta"]["maka"]["parentToolCallId"] == parent)
        .map(|u| {
            (
                u["toolCallId"].as_str().unwrap().to_string(),
                u["title"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The last `tool_call_update` of `id` that settled it.
fn settled<'a>(updates: &[&'a Value], id: &str) -> &'a Value {
    updates
        .iter()
        .rev()
        .find(|u| {
            u["sessionUpdate"] == "tool_call_update"
                && u["toolCallId"] == id
                && (u["status"] == "completed" || u["status"] == "failed")
        })
        .unwrap_or_else(|| panic!("{id} never settled"))
}

fn text_of(u: &Value) -> String {
    u["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["content"]["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The delegate calls of a turn (tool calls with no parent), in order.
fn delegations(updates: &[&Value]) -> Vec<String> {
    updates
        .iter()
        .filter(|u| {
            u["sessionUpdate"] == "tool_call" && u["_meta"]["maka"]["parentToolCallId"].is_null()
        })
        .map(|u| u["toolCallId"].as_str().unwrap().to_string())
        .collect()
}

/// Item 1: three tool calls of one delegation are three child calls, each with its own id
/// (from the agent's `toolCallId`), each dialog pointing at its own call, each settled with its
/// own output; `session/load` replays the very same ids.
#[test]
fn every_child_call_is_shown_under_its_own_id_and_replayed_the_same() {
    let data = TempDir::new("tp-children-data");
    let ws = TempDir::new("tp-children-ws");
    let prompts = ["stub: tools 3 ask"];
    let mut a = parent(&data, &prompts, json!({"stub": stub(json!({}))}));
    let s = a.new_session(ws.path());
    let mut dialogs = vec![];
    let t = a.prompt(&s, prompts[0], |r| {
        dialogs.push(r["params"]["toolCall"].clone());
        select("allow_once")
    });
    ended(&t);
    let updates = t.updates_for(&s);
    let delegate = delegations(&updates).pop().unwrap();
    let kids = children(&updates, &delegate);
    let titles: Vec<&str> = kids.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        titles,
        ["stub: step 1", "stub: step 2", "stub: step 3"],
        "{kids:?}"
    );
    let ids: Vec<&str> = kids.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(
        ids,
        [1, 2, 3].map(|k| format!("{delegate}.call_{k}")),
        "one id per call, from the agent's"
    );
    // ACP `ToolCall.name`: `delegate` for the delegation, the agent's own for its calls when
    // it is a plain name (one with a `/` would pass for an MCP tool of this session: none);
    // a call the agent names `update_plan` is shown like any other (above: all three are).
    let names = |updates: &[&Value]| -> Vec<Value> {
        let mut ids = vec![delegate.clone()];
        ids.extend(children(updates, &delegate).into_iter().map(|(id, _)| id));
        ids.iter()
            .map(|id| {
                updates
                    .iter()
                    .find(|u| u["sessionUpdate"] == "tool_call" && u["toolCallId"] == id.as_str())
                    .map(|u| u["name"].clone())
                    .unwrap_or_default()
            })
            .collect()
    };
    let expected = [
        json!("delegate"),
        json!("shell"),
        Value::Null,
        json!("update_plan"),
    ];
    assert_eq!(names(&updates), expected);
    for (k, id) in ids.iter().enumerate() {
        assert_eq!(text_of(settled(&updates, id)), format!("out {}", k + 1));
        assert_eq!(
            dialogs[k]["toolCallId"], *id,
            "dialog {k} points at its call"
        );
    }

    // Replayed by a load, in a new process: the same calls under the same ids.
    drop(a);
    let mut b = spawn(
        &parent_script(&prompts),
        &data,
        &data.path().join("config.json"),
    );
    b.initialize();
    let (_, replay) = b.call(
        "session/load",
        json!({"sessionId": s, "cwd": ws.path(), "mcpServers": []}),
    );
    let replayed: Vec<&Value> = replay
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| &m["params"]["update"])
        .collect();
    assert_eq!(children(&replayed, &delegate), kids);
    assert_eq!(names(&replayed), expected);
    for (k, id) in ids.iter().enumerate() {
        assert_eq!(text_of(settled(&replayed, id)), format!("out {}", k + 1));
    }
}

/// Item 2: output an agent reports only in `rawOutput` (codex), only in the display terminal
/// `_meta.terminal_output`, or only while running is shown when the call settles, and its
/// `rawOutput` reaches the client as the agent sent it.
#[test]
fn a_child_calls_output_is_kept_wherever_the_agent_reported_it() {
    let data = TempDir::new("tp-raw-data");
    let ws = TempDir::new("tp-raw-ws");
    let prompts = ["stub: raw"];
    let mut a = parent(&data, &prompts, json!({"stub": stub(json!({}))}));
    let s = a.new_session(ws.path());
    let t = a.prompt(&s, prompts[0], |r| panic!("no dialog expected: {r}"));
    ended(&t);
    let updates = t.updates_for(&s);
    let delegate = delegations(&updates).pop().unwrap();
    let raw = settled(&updates, &format!("{delegate}.call_raw"));
    assert_eq!(text_of(raw), "raw says hi\n");
    assert_eq!(
        raw["rawOutput"],
        json!({"exit_code": 0, "aggregated_output": "raw says hi\n", "duration": {"secs": 0, "nanos": 1}}),
        "as the agent sent it"
    );
    let meta = settled(&updates, &format!("{delegate}.call_meta"));
    assert_eq!(text_of(meta), "meta says hi\n");
    let streamed = settled(&updates, &format!("{delegate}.call_streamed"));
    assert_eq!(text_of(streamed), "streamed says hi");
    assert_eq!(streamed["rawOutput"], json!({"exit_code": 0}));
}

/// Issue 48 item 4: what an agent sends is read as ACP's types, as the schema allows. An update
/// kind from the future, one without its kind, a call without its id and an image piece are
/// skipped; a call of an unknown kind with fields from the future is shown (as a plain tool)
/// with its output; a plan entry of an unknown status is left out; a `terminal/create` whose
/// params do not read is refused saying why, and nothing runs. The delegation goes on to its
/// answer.
#[test]
fn what_an_agent_sends_is_read_as_acp_types_tolerating_what_the_schema_allows() {
    let data = TempDir::new("tp-odd-data");
    let ws = TempDir::new("tp-odd-ws");
    let prompts = ["stub: odd"];
    let mut a = parent(&data, &prompts, json!({"stub": stub(json!({}))}));
    let s = a.new_session(ws.path());
    let t = a.prompt(&s, prompts[0], |r| panic!("no dialog expected: {r}"));
    ended(&t);
    let updates = t.updates_for(&s);
    let delegate = delegations(&updates).pop().unwrap();
    let odd = format!("{delegate}.call_odd");
    assert_eq!(
        children(&updates, &delegate),
        [(odd.clone(), "stub: beam up".to_string())],
        "only the call that reads is shown"
    );
    let shown = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call" && u["toolCallId"] == odd.as_str())
        .unwrap();
    assert_eq!(shown["kind"], "other", "an unknown kind: a plain tool");
    assert_eq!(text_of(settled(&updates, &odd)), "beamed");
    let result = text_of(settled(&updates, &delegate));
    assert!(
        result
            .contains("terminal error: Invalid params: terminal/create: invalid type: integer `5`"),
        "{result}"
    );
    assert!(result.contains("odd done"), "{result}");
    assert!(
        !result.contains("stopped"),
        "an answer without a stop reason ends the turn, it does not fail the delegation: {result}"
    );
    let streamed: String = updates
        .iter()
        .filter(|u| u["toolCallId"] == delegate.as_str())
        .map(|u| text_of(u))
        .collect();
    assert!(
        streamed.contains("stub's plan:\n[completed] look\n") && !streamed.contains("dream"),
        "{streamed}"
    );
}

/// Item 3: the agents of one swarm step start together. Each stub answers `initialize` only
/// once both have reached it (or after 10 s, alone): started one after another, the first
/// would wait alone.
#[test]
fn swarm_starts_its_agents_together() {
    let data = TempDir::new("tp-swarm-data");
    let ws = TempDir::new("tp-swarm-ws");
    let meet = TempDir::new("tp-swarm-meet");
    let env = json!({"STUB_RENDEZVOUS": format!("{}:2", meet.path().display())});
    let prompts = ["swarm: one: noop | two: noop"];
    let mut a = parent(
        &data,
        &prompts,
        json!({"one": stub(env.clone()), "two": stub(env)}),
    );
    let s = a.new_session(ws.path());
    a.call_ok(
        "session/set_config_option",
        json!({"sessionId": s, "configId": "orchestration_mode", "value": "swarm"}),
    );
    let t = a.prompt(&s, prompts[0], |r| panic!("no dialog expected: {r}"));
    ended(&t);
    let updates = t.updates_for(&s);
    for d in delegations(&updates) {
        let text = text_of(settled(&updates, &d));
        assert!(text.contains("met 2"), "{d} started alone: {text}");
    }
}

/// Item 4: two swarm calls to one agent get two conversations, each under its own handle, both
/// recorded; a later call continues the one it names, a call without one the latest, and a
/// handle that names nothing is refused, listing the agent's sessions.
#[test]
fn every_conversation_with_an_agent_is_kept_under_its_handle() {
    let data = TempDir::new("tp-handles-data");
    let ws = TempDir::new("tp-handles-ws");
    let state = TempDir::new("tp-handles-state");
    let prompts = [
        "swarm: stub: remember apple | stub: remember pear",
        "stub@stub#1: recall",
        "stub@stub#2: recall",
        "stub: recall",
        "stub@stub#9: recall",
        "stub@new: recall",
    ];
    let mut a = parent(
        &data,
        &prompts,
        json!({"stub": stub(json!({"STUB_STATE": state.path()}))}),
    );
    let s = a.new_session(ws.path());
    a.call_ok(
        "session/set_config_option",
        json!({"sessionId": s, "configId": "orchestration_mode", "value": "swarm"}),
    );
    let result = |a: &mut AgentProcess, p: &str| {
        let t = a.prompt(&s, p, |r| panic!("no dialog expected: {r}"));
        ended(&t);
        let updates = t.updates_for(&s);
        delegations(&updates)
            .iter()
            .map(|d| {
                let u = settled(&updates, d);
                (u["status"].as_str().unwrap().to_string(), text_of(u))
            })
            .collect::<Vec<_>>()
    };
    let both = result(&mut a, prompts[0]);
    assert!(
        both[0].1.contains("remembered apple") && both[0].1.contains("[session stub#1"),
        "{both:?}"
    );
    assert!(
        both[1].1.contains("remembered pear") && both[1].1.contains("[session stub#2"),
        "{both:?}"
    );
    let recorded =
        std::fs::read_to_string(data.path().join("sessions").join(&s).join("subagents.json"))
            .or_else(|_| {
                // Wherever the store keeps the session's folder.
                let found = walk(data.path(), "subagents.json");
                std::fs::read_to_string(found.expect("subagents.json is written"))
            })
            .unwrap();
    let recorded: Value = serde_json::from_str(&recorded).unwrap();
    assert_eq!(
        recorded["sessions"].as_object().unwrap().len(),
        2,
        "{recorded}"
    );

    assert!(result(&mut a, prompts[1])[0].1.contains("recalled apple\n"));
    assert!(result(&mut a, prompts[2])[0].1.contains("recalled pear\n"));
    let latest = result(&mut a, prompts[3]);
    assert!(
        latest[0].1.contains("recalled pear\n") && latest[0].1.contains("[session stub#2"),
        "{latest:?}"
    );
    let unknown = result(&mut a, prompts[4]);
    assert_eq!(unknown[0].0, "failed");
    assert!(
        unknown[0]
            .1
            .contains("has no session \"stub#9\"; its sessions: stub#1, stub#2"),
        "{unknown:?}"
    );
    let fresh = result(&mut a, prompts[5]);
    assert!(
        fresh[0].1.contains("recalled \n") || fresh[0].1.starts_with("recalled"),
        "{fresh:?}"
    );
    assert!(fresh[0].1.contains("[session stub#3"), "{fresh:?}");
}

fn walk(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
        if p.is_dir() {
            if let Some(f) = walk(&p, name) {
                return Some(f);
            }
        }
    }
    None
}

/// Item 5: in explore mode an agent writing with its own tools (not `fs/*`) changes nothing in
/// the session's folders — they are read-only for it — while it still works and writes its own
/// state elsewhere; in ask mode the same write happens. Where the machine cannot set folders
/// read-only, explore mode refuses the delegation, saying why.
#[test]
fn explore_mode_keeps_a_subagents_own_writes_out_of_the_folders() {
    let data = TempDir::new("tp-explore-data");
    let ws = TempDir::new("tp-explore-ws");
    let state = TempDir::new("tp-explore-state");
    let prompts = [
        "stub: write-own x.txt hi",
        "stub: remember kiwi",
        "stub: write-rel y.txt hi",
    ];
    let mut a = parent(
        &data,
        &prompts,
        json!({"stub": stub(json!({"STUB_STATE": state.path()}))}),
    );
    let s = a.new_session(ws.path());
    a.call_ok(
        "session/set_mode",
        json!({"sessionId": s, "modeId": "explore"}),
    );
    let t = a.prompt(&s, prompts[0], |r| panic!("no dialog expected: {r}"));
    ended(&t);
    let updates = t.updates_for(&s);
    let d = delegations(&updates).pop().unwrap();
    let text = text_of(settled(&updates, &d));
    assert!(
        !ws.path().join("x.txt").exists(),
        "explore mode let it write: {text}"
    );
    if text.contains("is not run") {
        assert!(text.contains("switch to ask mode"), "{text}");
    } else {
        assert!(
            text.contains("could not write: Read-only file system"),
            "{text}"
        );
        let t = a.prompt(&s, prompts[2], |r| panic!("no dialog expected: {r}"));
        let updates = t.updates_for(&s);
        let d = delegations(&updates).pop().unwrap();
        let text = text_of(settled(&updates, &d));
        assert!(
            text.contains("could not write: Read-only file system"),
            "{text}"
        );
        assert!(
            !ws.path().join("y.txt").exists(),
            "a relative path wrote through"
        );
        let t = a.prompt(&s, prompts[1], |r| panic!("no dialog expected: {r}"));
        let updates = t.updates_for(&s);
        let d = delegations(&updates).pop().unwrap();
        assert!(
            text_of(settled(&updates, &d)).contains("remembered kiwi"),
            "it still works"
        );
    }
    // Ask mode: its own write happens (maka cannot ask about tools it does not see).
    a.call_ok("session/set_mode", json!({"sessionId": s, "modeId": "ask"}));
    let t = a.prompt(&s, prompts[0], |r| panic!("no dialog expected: {r}"));
    ended(&t);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("x.txt")).unwrap(),
        "hi\n"
    );
}

/// Item 6: an agent that ignores `session/cancel` is stopped (its process gone) within about a
/// second of the cancel, and the turn ends `cancelled`.
#[test]
fn a_subagent_that_ignores_cancel_is_stopped_within_a_second() {
    let data = TempDir::new("tp-cancel-data");
    let ws = TempDir::new("tp-cancel-ws");
    let marker = format!("tp-cancel-{}", std::process::id());
    let prompts = ["stub: never-answer", "stub: ask-always"];
    let mut a = parent(
        &data,
        &prompts,
        json!({"stub": stub(json!({"STUB_MARKER": marker}))}),
    );
    let s = a.new_session(ws.path());
    for prompt in prompts {
        let id = a.request(
            "session/prompt",
            json!({"sessionId": s, "prompt": [{"type": "text", "text": prompt}]}),
        );
        // Until the delegate call runs (the agent has its task), or its dialog is up.
        loop {
            let v = a.recv();
            if v["method"] == "session/update" && v.to_string().contains("waiting forever") {
                break;
            }
            if v["method"] == "session/request_permission" {
                break;
            }
        }
        let pids = support::processes_with(&marker);
        assert!(!pids.is_empty(), "the stub runs");
        a.notify("session/cancel", json!({"sessionId": s}));
        let cancelled_at = Instant::now();
        let (response, _) = a.response_to(&id);
        let took = cancelled_at.elapsed();
        assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
        assert!(
            pids.iter().all(|p| !process_alive(*p)),
            "the agent still runs after the turn ended"
        );
        assert!(took < Duration::from_millis(2000), "took {took:?}");
    }
}

/// Item 7: a subagent's own "always" options reach the person, labelled as the agent's (it
/// remembers them, not maka), and the choice reaches the agent as the option it offered.
#[test]
fn a_subagents_own_lasting_choices_reach_the_person() {
    let data = TempDir::new("tp-always-data");
    let ws = TempDir::new("tp-always-ws");
    let prompts = ["stub: ask-always"];
    let mut a = parent(&data, &prompts, json!({"stub": stub(json!({}))}));
    let s = a.new_session(ws.path());
    for (pick, agent_got) in [
        ("allow_workspace", "approved-for-session"),
        ("reject_workspace", "never"),
        ("allow_once", "approved"),
        ("reject", "abort"),
    ] {
        let mut options = Value::Null;
        let t = a.prompt(&s, prompts[0], |r| {
            options = r["params"]["options"].clone();
            select(pick)
        });
        ended(&t);
        assert_eq!(
            support::options_offered(&options),
            [
                ("allow_once", "allow_once", "Allow once"),
                (
                    "allow_workspace",
                    "allow_always",
                    "Always allow in stub (Yes, for session; stub remembers it)"
                ),
                ("reject", "reject_once", "Reject"),
                (
                    "reject_workspace",
                    "reject_always",
                    "Always reject in stub (No, never; stub remembers it)"
                ),
            ]
        );
        let updates = t.updates_for(&s);
        let d = delegations(&updates).pop().unwrap();
        let text = text_of(settled(&updates, &d));
        assert!(
            text.contains(&format!("\"optionId\": \"{agent_got}\"")),
            "{pick}: {text}"
        );
    }
}

/// Item 9: codex-acp (npm `@zed-industries/codex-acp-linux-x64`, pinned and installed by
/// scripts/test) as a subagent, against a local stand-in for the OpenAI Responses API: three
/// commands of one delegation are three child calls with their output and codex's own
/// `rawOutput`; a later delegation naming its session continues the conversation (codex offers
/// `session/resume`: the model is sent the earlier task again); a cancel leaves no codex
/// process behind.
#[test]
fn codex_acp_from_npm_works_as_a_subagent_against_a_local_responses_api() {
    let Ok(codex) = std::env::var("MAKA_TEST_CODEX_ACP") else {
        panic!("MAKA_TEST_CODEX_ACP is not set: run the tests with scripts/test, which installs codex-acp");
    };
    let (port, requests) = support::fake_responses::start();
    let data = TempDir::new("tp-codex-data");
    let ws = TempDir::new("tp-codex-ws");
    let home = TempDir::new("tp-codex-home");
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "model = \"gpt-test\"\nmodel_provider = \"local\"\napproval_policy = \"never\"\n\
             sandbox_mode = \"danger-full-access\"\n\n[model_providers.local]\nname = \"local\"\n\
             base_url = \"http://127.0.0.1:{port}/v1\"\nwire_api = \"responses\"\n"
        ),
    )
    .unwrap();
    let marker = format!("tp-codex-{}", std::process::id());
    let prompts = [
        "codex: please run three commands",
        "codex@codex#1: what did I ask?",
        "codex: hang on",
    ];
    // Its own HOME too: the commands it runs (and a login shell's profile) are the test's,
    // and a cancel that kills one mid-way leaves nothing behind in the machine's home.
    let codex_decl = json!({"command": codex, "env": {
        "CODEX_HOME": home.path(), "HOME": home.path(), "TMPDIR": home.path(),
        "MAKA_TEST_MARKER": marker}});
    let mut a = parent(&data, &prompts, json!({ "codex": codex_decl }));
    let s = a.new_session(ws.path());

    let t = a.prompt(&s, prompts[0], |r| panic!("no dialog expected: {r}"));
    ended(&t);
    let updates = t.updates_for(&s);
    let delegate = delegations(&updates).pop().unwrap();
    let kids = children(&updates, &delegate);
    let ids: Vec<&str> = kids.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(
        ids,
        [1, 2, 3].map(|k| format!("{delegate}.call_{k}")),
        "{kids:?}"
    );
    for (k, (id, title)) in kids.iter().enumerate() {
        let out = format!("out-{}", k + 1);
        assert_eq!(title, &format!("codex: echo {out}"));
        let done = settled(&updates, id);
        assert_eq!(done["status"], "completed", "{done}");
        assert!(text_of(done).contains(&out), "{done}");
        // codex's own record of the command, as it sent it.
        assert_eq!(done["rawOutput"]["exit_code"], 0, "{done}");
        assert_eq!(
            done["rawOutput"]["call_id"],
            format!("call_{}", k + 1),
            "{done}"
        );
    }
    let answer = text_of(settled(&updates, &delegate));
    assert!(answer.contains("ran 3;"), "{answer}");
    assert!(answer.contains("[session codex#1"), "{answer}");

    // Continued: the model sees the earlier task in the same conversation.
    let before = requests.lock().unwrap().len();
    let t = a.prompt(&s, prompts[1], |r| panic!("no dialog expected: {r}"));
    ended(&t);
    let updates = t.updates_for(&s);
    let answer = text_of(settled(&updates, &delegations(&updates).pop().unwrap()));
    assert!(
        answer.contains("please run three commands | what did I ask?"),
        "not the same conversation: {answer}"
    );
    assert!(requests.lock().unwrap().len() > before);
    assert!(
        a.stderr_contains("(continuing its session"),
        "reopened with session/resume: {}",
        a.stderr()
    );

    // Cancelled while its model hangs: no codex process is left.
    let id = a.request(
        "session/prompt",
        json!({"sessionId": s, "prompt": [{"type": "text", "text": prompts[2]}]}),
    );
    let asked = requests.lock().unwrap().len();
    let waited = Instant::now();
    while requests.lock().unwrap().len() == asked {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "codex never asked its model"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!support::processes_with(&marker).is_empty(), "codex runs");
    a.notify("session/cancel", json!({"sessionId": s}));
    let (response, _) = a.response_to(&id);
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    let left = support::processes_with(&marker);
    assert!(left.is_empty(), "codex processes left: {left:?}");
}

/// A subagent's dialog names the command it covers as it is: one hiding a second command after
/// a newline is spelled out (`\n`) and covers nothing, so the host asks again before it runs.
#[test]
fn a_command_hidden_after_a_newline_is_spelled_out_and_asked_again() {
    let data = TempDir::new("tp-newline-data");
    let ws = TempDir::new("tp-newline-ws");
    let prompts = ["stub: ask-run-nl echo hi NL touch pwned"];
    let mut a = parent(&data, &prompts, json!({"stub": stub(json!({}))}));
    let s = a.new_session(ws.path());
    let mut titles = vec![];
    let t = a.prompt(&s, prompts[0], |r| {
        let title = r["params"]["toolCall"]["title"]
            .as_str()
            .unwrap()
            .to_string();
        let first = titles.is_empty();
        titles.push(title);
        select(if first { "allow_once" } else { "reject" })
    });
    ended(&t);
    assert_eq!(
        titles,
        [
            "stub: run echo hi (runs `echo hi\\ntouch pwned`)",
            "stub: run sh -c 'echo hi\ntouch pwned'"
        ],
        "the first dialog spells the newline out; the command is asked about again"
    );
    assert!(!ws.path().join("pwned").exists(), "the hidden command ran");
}

/// Every line naming a session other than `parent` names a child announced before it (ACP:
/// the announcing `subagent_update` comes before anything of the child); returns the children
/// in the order announced.
fn announced_before_use(lines: &[Value], parent: &str) -> Vec<String> {
    let mut announced: Vec<String> = vec![];
    for l in lines {
        let Some(sid) = l.pointer("/params/sessionId").and_then(Value::as_str) else {
            continue;
        };
        if sid == parent {
            let u = &l["params"]["update"];
            if u["sessionUpdate"] == "subagent_update" {
                let child = u["sessionId"].as_str().unwrap().to_string();
                if !announced.contains(&child) {
                    announced.push(child);
                }
            }
            continue;
        }
        assert!(
            announced.iter().any(|c| c == sid),
            "a line names session {sid} before it was announced: {l}"
        );
    }
    announced
}

/// Issue 26 item 6: to a client that advertises `subagents`, a delegation is a child session:
/// announced on the parent, the task its first message (from the parent), its calls and their
/// dialogs under its own session id, its work state on the parent (running, waiting on a
/// dialog, idle at the end), its answer a message to the parent. `session/load` shows the same
/// child with the same calls and answer; a client without the capability still gets the calls
/// under the delegate call. Every line is checked against the unstable schema.
#[test]
fn a_delegation_is_a_child_session_for_clients_that_show_subagents() {
    let data = TempDir::new("tp-subagent-session-data");
    let ws = TempDir::new("tp-subagent-session-ws");
    let prompts = ["stub: tools 2 ask"];
    let config = data.path().join("config.json");
    std::fs::write(
        &config,
        json!({"agents": {"stub": stub(json!({}))}}).to_string(),
    )
    .unwrap();
    let subagents_client = json!({"protocolVersion": 1, "clientCapabilities": {"subagents": {}},
        "clientInfo": {"name": "harness", "version": "0"}});
    let mut a = spawn(&parent_script(&prompts), &data, &config);
    a.call_ok("initialize", subagents_client.clone());
    let s = a.new_session(ws.path());
    let mut dialogs = vec![];
    let t = a.prompt(&s, prompts[0], |r| {
        dialogs.push(r["params"].clone());
        select("allow_once")
    });
    ended(&t);
    let announced = announced_before_use(&t.lines, &s);
    assert_eq!(announced.len(), 1, "one child: {announced:?}");
    let child = &announced[0];
    let parent_updates = t.updates_for(&s);
    let kid_updates = t.updates_for(child);

    // On the parent: the delegate call (linking its child), the child's states — and none of
    // the agent's calls.
    let delegate = parent_updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap();
    assert_eq!(delegate["name"], "delegate");
    assert_eq!(
        delegate["_meta"]["maka"]["subagentSessionId"],
        child.as_str()
    );
    // ACP's link from the call to the session it started (issue 49), first in its content
    // when it starts and when it settles.
    let link = json!({"type": "session", "sessionId": child});
    assert_eq!(delegate["content"], json!([link]), "{delegate}");
    let delegate_id = delegate["toolCallId"].as_str().unwrap().to_string();
    assert_eq!(settled(&parent_updates, &delegate_id)["content"][0], link);
    assert!(parent_updates
        .iter()
        .filter(|u| u["toolCallId"].is_string())
        .all(|u| u["toolCallId"] == delegate_id.as_str()));
    let announce = parent_updates
        .iter()
        .find(|u| u["sessionUpdate"] == "subagent_update")
        .unwrap();
    assert_eq!(announce["title"], "stub");
    assert_eq!(announce["description"], "tools 2 ask");
    let states: Vec<&str> = parent_updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "subagent_update" && u["state"].is_object())
        .map(|u| u["state"]["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        [
            "running",
            "requires_action",
            "running",
            "requires_action",
            "running",
            "idle"
        ],
        "{parent_updates:#?}"
    );
    let last = parent_updates
        .iter()
        .rev()
        .find(|u| u["sessionUpdate"] == "subagent_update")
        .unwrap();
    assert_eq!(last["state"]["stopReason"], "end_turn");

    // In the child: the task from the parent, its two calls (no parent meta: they are the
    // child's), each settled with its output, and the answer to the parent.
    let task = kid_updates[0];
    assert_eq!(task["sessionUpdate"], "session_message");
    assert_eq!(task["senderSessionId"], s.as_str());
    assert_eq!(task["content"][0]["text"], "tools 2 ask");
    let calls: Vec<&str> = kid_updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .map(|u| u["toolCallId"].as_str().unwrap())
        .collect();
    let want: Vec<String> = [1, 2].map(|k| format!("{delegate_id}.call_{k}")).to_vec();
    assert_eq!(calls, want);
    assert!(kid_updates
        .iter()
        .all(|u| u["_meta"]["maka"]["parentToolCallId"].is_null()));
    for (k, id) in want.iter().enumerate() {
        assert_eq!(text_of(settled(&kid_updates, id)), format!("out {}", k + 1));
        assert_eq!(dialogs[k]["sessionId"], child.as_str(), "dialog {k}");
        assert_eq!(dialogs[k]["toolCall"]["toolCallId"], id.as_str());
    }
    let answer = kid_updates
        .iter()
        .rev()
        .find(|u| u["sessionUpdate"] == "session_message")
        .unwrap();
    assert_eq!(answer["recipientSessionId"], s.as_str());
    let answered = answer["content"][0]["text"].as_str().unwrap().to_string();
    assert!(answered.contains("ran 2"), "{answered}");
    // What streamed is the same answer.
    let streamed: String = kid_updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "session_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert!(
        !streamed.is_empty() && answered.starts_with(streamed.trim_end()),
        "{streamed:?} / {answered:?}"
    );
    // The delegate call settles with the answer the model got.
    assert_eq!(text_of(settled(&parent_updates, &delegate_id)), answered);
    // The child is driven through its parent only: no mutation of it is served.
    let (refused, _) = a.call(
        "session/prompt",
        json!({"sessionId": child, "prompt": [{"type": "text", "text": "hi"}]}),
    );
    assert_eq!(refused["error"]["code"], -32002, "{refused}");

    // Replayed in a new process: the same child, calls and answer.
    drop(a);
    let mut b = spawn(&parent_script(&prompts), &data, &config);
    b.call_ok("initialize", subagents_client);
    let (_, replay) = b.call(
        "session/load",
        json!({"sessionId": s, "cwd": ws.path(), "mcpServers": []}),
    );
    assert_eq!(announced_before_use(&replay, &s), announced);
    let replayed_parent: Vec<&Value> = replay
        .iter()
        .filter(|m| m["params"]["sessionId"] == s.as_str())
        .map(|m| &m["params"]["update"])
        .collect();
    assert_eq!(settled(&replayed_parent, &delegate_id)["content"][0], link);
    let replayed_kid: Vec<&Value> = replay
        .iter()
        .filter(|m| m["params"]["sessionId"] == child.as_str())
        .map(|m| &m["params"]["update"])
        .collect();
    let replayed_calls: Vec<&str> = replayed_kid
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .map(|u| u["toolCallId"].as_str().unwrap())
        .collect();
    assert_eq!(replayed_calls, want);
    let replayed_answer = replayed_kid
        .iter()
        .rev()
        .find(|u| u["sessionUpdate"] == "session_message")
        .unwrap();
    assert_eq!(replayed_answer["content"][0]["text"], answered.as_str());
    drop(b);

    // A client without the capability: no child, the calls under the delegate call.
    let mut c = spawn(&parent_script(&prompts), &data, &config);
    c.initialize();
    let (_, replay) = c.call(
        "session/load",
        json!({"sessionId": s, "cwd": ws.path(), "mcpServers": []}),
    );
    assert!(replay
        .iter()
        .filter(|m| m["method"] == "session/update")
        .all(|m| m["params"]["sessionId"] == s.as_str()
            && ![
                "subagent_update",
                "session_message",
                "session_message_chunk"
            ]
            .contains(
                &m["params"]["update"]["sessionUpdate"]
                    .as_str()
                    .unwrap_or("")
            )));
    let updates: Vec<&Value> = replay
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| &m["params"]["update"])
        .collect();
    assert!(
        updates.iter().all(|u| u["content"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|c| c["type"] != "session")),
        "no session link without the capability"
    );
    let kids: Vec<String> = children(&updates, &delegate_id)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(kids, want);
}
