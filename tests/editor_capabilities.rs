//! Editor-side capabilities: files through `fs/*` (unsaved buffers, writes shown at once) and
//! commands in the editor's terminals through `terminal/*`, with their fallbacks. The test
//! plays an editor whose buffers differ from the disk and whose terminals it simulates.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;
use support::host::TempDir;
use support::{select, AgentProcess, Reply, Spawn};

fn script() -> Value {
    json!({"rules": [
        {"when": "read it", "responses": [[{"tool": "read_file", "args": {"path": "a.txt"}}], [{"text": "read"}]]},
        {"when": "edit it", "responses": [[{"tool": "edit_file", "args": {"path": "a.txt", "old_text": "buffer", "new_text": "BUFFER"}}], [{"text": "edited"}]]},
        {"when": "create it", "responses": [[{"tool": "write_file", "args": {"path": "new.txt", "content": "fresh\n"}}], [{"text": "created"}]]},
        {"when": "missing", "responses": [[{"tool": "read_file", "args": {"path": "nope.txt"}}], [{"text": "ok"}]]},
        {"when": "outside", "responses": [[{"tool": "read_file", "args": {"path": "/etc/hostname"}}], [{"text": "ok"}]]},
        {"when": "run it", "responses": [[{"tool": "run_command", "args": {"command": "make test"}}], [{"text": "ran"}]]},
        {"when": "forever short", "responses": [[{"tool": "run_command", "args": {"command": "tail -f log", "timeout_ms": 300}}], [{"text": "gave up"}]]},
        {"when": "forever", "responses": [[{"tool": "run_command", "args": {"command": "tail -f log"}}], [{"text": "never"}]]},
        {"when": "local echo", "responses": [[{"tool": "run_command", "args": {"command": "echo hi; echo there"}}], [{"text": "ok"}]]}
    ]})
}

struct Editor {
    agent: AgentProcess,
    ws: TempDir,
    _data: TempDir,
    session: String,
}

fn editor(tag: &str, caps: Value) -> Editor {
    let data = TempDir::new(&format!("ed-{tag}-data"));
    let ws = TempDir::new(&format!("ed-{tag}-ws"));
    std::fs::write(ws.path().join("a.txt"), "on disk\n").unwrap();
    let mut agent = AgentProcess::spawn_with(Spawn {
        args: vec![],
        env: vec![
            ("RUST_LOG".into(), "info".into()),
            ("MAKA_SCRIPT".into(), script().to_string()),
            ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
            (
                "XDG_CONFIG_HOME".into(),
                data.path().join("cfg").display().to_string(),
            ),
        ],
    });
    agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": caps}),
    );
    let session = agent.new_session(ws.path());
    Editor {
        agent,
        ws,
        _data: data,
        session,
    }
}

fn full_caps() -> Value {
    json!({"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true})
}

/// An editor's side of the protocol: buffers, terminals, permissions.
#[derive(Default)]
struct Client {
    buffers: HashMap<String, String>,
    calls: Vec<String>,
    /// terminal id → a held `wait_for_exit` request id.
    held_wait: HashMap<String, Value>,
    next_terminal: usize,
    /// Commands that never exit on their own.
    never_exit: bool,
    fail_reads: bool,
    fail_create: bool,
    /// The editor reports no exit status at all (`wait_for_exit` → `{}`, no `exitStatus`):
    /// both valid.
    no_status: bool,
}

impl Client {
    fn serve(&mut self, r: &Value) -> Reply {
        let method = r["method"].as_str().unwrap();
        let p = &r["params"];
        self.calls.push(method.to_string());
        match method {
            "session/request_permission" => select("allow_once"),
            "fs/read_text_file" => {
                if self.fail_reads {
                    return Reply::Error(-32002, "file not found in the editor");
                }
                match self.buffers.get(p["path"].as_str().unwrap()) {
                    Some(text) => Reply::Result(json!({"content": text})),
                    None => Reply::Error(-32002, "file not found in the editor"),
                }
            }
            "fs/write_text_file" => {
                self.buffers.insert(
                    p["path"].as_str().unwrap().to_string(),
                    p["content"].as_str().unwrap().to_string(),
                );
                Reply::Result(Value::Null) // some clients answer null
            }
            "terminal/create" => {
                if self.fail_create {
                    return Reply::Error(-32603, "no shell available");
                }
                assert_eq!(p["command"], "sh");
                assert!(p["args"][1].is_string());
                self.next_terminal += 1;
                Reply::Result(json!({"terminalId": format!("term-{}", self.next_terminal)}))
            }
            "terminal/wait_for_exit" => {
                if self.never_exit {
                    self.held_wait.insert(
                        p["terminalId"].as_str().unwrap().to_string(),
                        r["id"].clone(),
                    );
                    Reply::Ignore
                } else if self.no_status {
                    Reply::Result(json!({}))
                } else {
                    Reply::Result(json!({"exitCode": 0}))
                }
            }
            "terminal/kill" => {
                // Killing ends the held wait.
                match self.held_wait.remove(p["terminalId"].as_str().unwrap()) {
                    Some(wait_id) => Reply::ResultThen(
                        json!({}),
                        vec![
                            json!({"jsonrpc": "2.0", "id": wait_id, "result": {"exitCode": null, "signal": "SIGKILL"}}),
                        ],
                    ),
                    None => Reply::Result(json!({})),
                }
            }
            "terminal/output" if self.no_status => {
                Reply::Result(json!({"output": "all good\n", "truncated": false}))
            }
            "terminal/output" => Reply::Result(
                json!({"output": "all good\n", "truncated": false, "exitStatus": {"exitCode": 0}}),
            ),
            "terminal/release" => Reply::Result(json!({})),
            other => panic!("unexpected request {other}"),
        }
    }
}

/// Plays the editor until the command's `terminal/wait_for_exit` is pending (held).
fn serve_until_wait_is_held(e: &mut Editor, client: &mut Client) {
    loop {
        let v = e.agent.recv();
        if v.get("method").is_some() && v.get("id").is_some() {
            let held = v["method"] == "terminal/wait_for_exit";
            if let Reply::Result(r) = client.serve(&v) {
                e.agent
                    .send(&json!({"jsonrpc": "2.0", "id": v["id"], "result": r}));
            }
            if held {
                return;
            }
        }
    }
}

#[test]
fn reads_see_unsaved_buffers_and_edits_go_to_the_editor_with_a_diff() {
    let mut e = editor("fs", full_caps());
    let path = e.ws.path().join("a.txt").display().to_string();
    let mut client = Client::default();
    client
        .buffers
        .insert(path.clone(), "unsaved buffer\n".into());
    let t = e.agent.prompt(&e.session, "read it", |r| client.serve(r));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let done = t
        .updates_for(&e.session)
        .into_iter()
        .find(|u| u["status"] == "completed")
        .unwrap()
        .clone();
    assert_eq!(
        done["content"][0]["content"]["text"], "unsaved buffer\n",
        "the agent saw the editor's buffer, not the disk"
    );
    let read = t
        .requests
        .iter()
        .find(|r| r["method"] == "fs/read_text_file")
        .unwrap();
    assert_eq!(read["params"]["path"], path.as_str());

    let t = e.agent.prompt(&e.session, "edit it", |r| client.serve(r));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert_eq!(
        client.buffers[&path], "unsaved BUFFER\n",
        "written through fs/write_text_file"
    );
    assert_eq!(
        std::fs::read_to_string(e.ws.path().join("a.txt")).unwrap(),
        "on disk\n",
        "the disk is the editor's business"
    );
    let done = t
        .updates_for(&e.session)
        .into_iter()
        .find(|u| u["status"] == "completed")
        .unwrap()
        .clone();
    assert_eq!(
        done["content"][0],
        json!({"type": "diff", "path": path, "oldText": "unsaved buffer\n", "newText": "unsaved BUFFER\n"})
    );

    // A new file: written through the editor, without first asking it to read a file that
    // does not exist (clients show that failed read to the user as an error).
    client.calls.clear();
    let t = e.agent.prompt(&e.session, "create it", |r| client.serve(r));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert_eq!(
        client.calls,
        ["session/request_permission", "fs/write_text_file"]
    );
    let created = e.ws.path().join("new.txt").display().to_string();
    assert_eq!(client.buffers[&created], "fresh\n");
}

#[test]
fn an_editor_error_fails_the_tool_not_the_turn_and_outside_paths_use_the_disk() {
    let mut e = editor("fserr", full_caps());
    let mut client = Client {
        fail_reads: true,
        ..Client::default()
    };
    let t = e.agent.prompt(&e.session, "missing", |r| client.serve(r));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let failed = t
        .updates_for(&e.session)
        .into_iter()
        .find(|u| u["status"] == "failed")
        .unwrap()
        .clone();
    assert!(
        failed["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("file not found in the editor"),
        "{failed}"
    );

    let mut client = Client::default();
    let t = e.agent.prompt(&e.session, "outside", |r| client.serve(r));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert!(
        !client.calls.contains(&"fs/read_text_file".to_string()),
        "outside the roots the host reads the disk: {:?}",
        client.calls
    );
    assert!(
        client
            .calls
            .contains(&"session/request_permission".to_string()),
        "after a boundary approval"
    );
}

/// An editor that reports no exit status at all (issue 45, case 11): the command is
/// `completed`, its verdict says the status is unknown, and its output is kept, never an
/// empty `failed`.
#[test]
fn a_command_whose_exit_status_the_editor_never_reports_is_completed_with_its_output() {
    let mut e = editor("term-nostatus", full_caps());
    let mut client = Client {
        no_status: true,
        ..Client::default()
    };
    let t = e.agent.prompt(&e.session, "run it", |r| client.serve(r));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let ups = t.updates_for(&e.session);
    let done = ups
        .iter()
        .find(|u| u["status"] == "completed" || u["status"] == "failed")
        .unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["content"][1]["content"]["text"],
        "Exit status unknown: the editor did not report one.",
        "{done}"
    );
    assert_eq!(done["rawOutput"]["output"], "all good\n");
}

#[test]
fn commands_run_in_an_editor_terminal_that_is_embedded_and_released() {
    let mut e = editor("term", full_caps());
    let mut client = Client::default();
    let t = e.agent.prompt(&e.session, "run it", |r| client.serve(r));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let terminal_calls: Vec<&str> = client
        .calls
        .iter()
        .map(String::as_str)
        .filter(|m| m.starts_with("terminal/"))
        .collect();
    assert_eq!(
        terminal_calls,
        vec![
            "terminal/create",
            "terminal/wait_for_exit",
            "terminal/output",
            "terminal/release"
        ]
    );
    let ups = t.updates_for(&e.session);
    let embedded = ups
        .iter()
        .find(|u| u["content"][0]["type"] == "terminal")
        .expect("the terminal is embedded in the tool call");
    assert_eq!(embedded["content"][0]["terminalId"], "term-1");
    let done = ups.iter().find(|u| u["status"] == "completed").unwrap();
    assert_eq!(
        done["content"][0],
        json!({"type": "terminal", "terminalId": "term-1"})
    );
    assert_eq!(done["content"][1]["content"]["text"], "Exit code 0");
    assert_eq!(done["rawOutput"]["output"], "all good\n");
    // The embed came before the release.
    let pos_embed = t
        .lines
        .iter()
        .position(|l| l["params"]["update"]["content"][0]["type"] == "terminal")
        .unwrap();
    let pos_release = t
        .lines
        .iter()
        .position(|l| l["method"] == "terminal/release")
        .unwrap();
    assert!(pos_embed < pos_release);
}

#[test]
fn a_command_that_never_exits_is_killed_at_its_timeout_and_released() {
    let mut e = editor("timeout", full_caps());
    let mut client = Client {
        never_exit: true,
        ..Client::default()
    };
    let t = e
        .agent
        .prompt(&e.session, "forever short", |r| client.serve(r));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let terminal_calls: Vec<&str> = client
        .calls
        .iter()
        .map(String::as_str)
        .filter(|m| m.starts_with("terminal/"))
        .collect();
    assert_eq!(
        terminal_calls,
        vec![
            "terminal/create",
            "terminal/wait_for_exit",
            "terminal/kill",
            "terminal/output",
            "terminal/release"
        ]
    );
    let failed = t
        .updates_for(&e.session)
        .into_iter()
        .find(|u| u["status"] == "failed")
        .unwrap()
        .clone();
    assert_eq!(failed["rawOutput"]["timedOut"], true);
}

#[test]
fn cancel_during_a_terminal_withdraws_the_wait_kills_releases_and_answers_cancelled() {
    let mut e = editor("cancel", full_caps());
    let mut client = Client {
        never_exit: true,
        ..Client::default()
    };
    let prompt = e.agent.request(
        "session/prompt",
        json!({"sessionId": e.session, "prompt": [{"type": "text", "text": "forever"}]}),
    );
    serve_until_wait_is_held(&mut e, &mut client);
    e.agent
        .notify("session/cancel", json!({"sessionId": e.session}));
    let mut saw_cancel_request = false;
    loop {
        let v = e.agent.recv();
        if v["method"] == "$/cancel_request" {
            let held = client.held_wait.values().next().cloned().unwrap();
            assert_eq!(
                v["params"]["requestId"], held,
                "the pending wait_for_exit is withdrawn"
            );
            saw_cancel_request = true;
            e.agent.send(&json!({"jsonrpc": "2.0", "id": held, "error": {"code": -32800, "message": "cancelled"}}));
            client.held_wait.clear();
            continue;
        }
        if v.get("method").is_some() && v.get("id").is_some() {
            match client.serve(&v) {
                Reply::Result(r) => e
                    .agent
                    .send(&json!({"jsonrpc": "2.0", "id": v["id"], "result": r})),
                Reply::ResultThen(r, _) => e
                    .agent
                    .send(&json!({"jsonrpc": "2.0", "id": v["id"], "result": r})),
                _ => {}
            }
            continue;
        }
        if v["id"] == prompt && v.get("method").is_none() {
            assert_eq!(v["result"]["stopReason"], "cancelled", "{v}");
            break;
        }
    }
    assert!(saw_cancel_request);
    assert!(
        client.calls.contains(&"terminal/kill".to_string()),
        "{:?}",
        client.calls
    );
    assert!(
        client.calls.contains(&"terminal/release".to_string()),
        "{:?}",
        client.calls
    );
}

#[test]
fn an_editor_that_cannot_start_the_command_fails_the_tool_only() {
    let mut e = editor("nocreate", full_caps());
    let mut client = Client {
        fail_create: true,
        ..Client::default()
    };
    let t = e.agent.prompt(&e.session, "run it", |r| client.serve(r));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let failed = t
        .updates_for(&e.session)
        .into_iter()
        .find(|u| u["status"] == "failed")
        .unwrap()
        .clone();
    assert!(
        failed["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("no shell available"),
        "{failed}"
    );
}

#[test]
fn terminals_are_released_when_the_session_closes_and_when_the_client_leaves() {
    // Close while a command runs.
    let mut e = editor("close", full_caps());
    let mut client = Client {
        never_exit: true,
        ..Client::default()
    };
    let prompt = e.agent.request(
        "session/prompt",
        json!({"sessionId": e.session, "prompt": [{"type": "text", "text": "forever"}]}),
    );
    serve_until_wait_is_held(&mut e, &mut client);
    let close = e
        .agent
        .request("session/close", json!({"sessionId": e.session}));
    let mut done = (false, false);
    while !(done.0 && done.1) {
        let v = e.agent.recv();
        if v["method"] == "$/cancel_request" {
            let held = client.held_wait.drain().next().map(|(_, id)| id);
            if let Some(id) = held {
                e.agent.send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32800, "message": "cancelled"}}));
            }
        } else if v.get("method").is_some() && v.get("id").is_some() {
            if let Reply::Result(r) | Reply::ResultThen(r, _) = client.serve(&v) {
                e.agent
                    .send(&json!({"jsonrpc": "2.0", "id": v["id"], "result": r}));
            }
        } else if v["id"] == prompt {
            assert_eq!(v["result"]["stopReason"], "cancelled");
            done.0 = true;
        } else if v["id"] == close {
            done.1 = true;
        }
    }
    assert!(
        client.calls.contains(&"terminal/release".to_string()),
        "{:?}",
        client.calls
    );

    // The client leaves (stdin EOF) while a command runs: the terminal is still released.
    let mut e = editor("eof", full_caps());
    let mut client = Client {
        never_exit: true,
        ..Client::default()
    };
    e.agent.request(
        "session/prompt",
        json!({"sessionId": e.session, "prompt": [{"type": "text", "text": "forever"}]}),
    );
    serve_until_wait_is_held(&mut e, &mut client);
    e.agent.close_stdin();
    let rest = e.agent.drain();
    assert!(
        rest.iter()
            .any(|l| l["method"] == "terminal/release" && l["params"]["terminalId"] == "term-1"),
        "{rest:#?}"
    );
    let (status, _) = e.agent.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(status.success());
}

#[test]
fn without_terminals_output_uses_the_display_convention_when_asked() {
    let mut e = editor("display", json!({"_meta": {"terminal_output": true}}));
    let t = e.agent.prompt(&e.session, "local echo", |r| {
        assert_eq!(r["method"], "session/request_permission");
        select("allow_once")
    });
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let ups = t.updates_for(&e.session);
    let call = ups
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap();
    let id = call["toolCallId"].as_str().unwrap();
    assert_eq!(
        call["content"][0],
        json!({"type": "terminal", "terminalId": id})
    );
    assert_eq!(call["_meta"]["terminal_info"]["terminal_id"], id);
    let streamed: String = ups
        .iter()
        .filter_map(|u| u["_meta"]["terminal_output"]["data"].as_str())
        .collect();
    assert_eq!(streamed, "hi\nthere\n");
    let done = ups.iter().find(|u| u["status"] == "completed").unwrap();
    assert_eq!(done["_meta"]["terminal_exit"]["exit_code"], 0);
}
