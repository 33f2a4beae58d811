//! Session history over the real binaries: `session/fork` (checked against the unstable
//! schema), `_maka/session/branch`, revisions and rewinds that put files back (on disk and
//! through the editor), `/fork` and `/rewind`, and steering a running turn. Every line the
//! agent writes is checked against the ACP schema.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::fs;
use support::host::{HostProcess, TempDir};
use support::{error_of, AgentProcess, Reply};

fn script() -> Value {
    json!({
        "rules": [
            {"when": "write a again", "responses": [
                [{"tool": "write_file", "args": {"path": "a.txt", "content": "three\n"}}], [{"text": "Again."}]]},
            {"when": "write a", "responses": [
                [{"tool": "write_file", "args": {"path": "a.txt", "content": "two\n"}}], [{"text": "Wrote a."}]]},
            {"when": "create b", "responses": [
                [{"tool": "write_file", "args": {"path": "b.txt", "content": "new\n"}},
                 {"tool": "write_file", "args": {"path": "c.txt", "content": "agent\n"}}],
                [{"text": "Created b."}]]},
            {"when": "write sub", "responses": [
                [{"tool": "write_file", "args": {"path": "sub/new.txt", "content": "agent new\n"}},
                 {"tool": "write_file", "args": {"path": "sub/old.txt", "content": "agent old\n"}}],
                [{"text": "Wrote sub."}]]},
            {"when": "what did i say", "responses": [[{"echo": "user"}]]},
            {"when": "slow", "responses": [
                [{"text": "Working"}, {"delayMs": 1500}],
                [{"echo": "user"}]]}
        ],
        "default": [[{"text": "Hello."}]]
    })
}

/// An agent in bypass mode (no permission dialogs) with its own data dir.
fn agent(data: &std::path::Path) -> AgentProcess {
    let mut a = AgentProcess::spawn_with(support::Spawn {
        args: vec![],
        env: vec![
            ("RUST_LOG".into(), "info".into()),
            ("MAKA_SCRIPT".into(), script().to_string()),
            ("MAKA_DATA_DIR".into(), data.display().to_string()),
            (
                "XDG_CONFIG_HOME".into(),
                data.join("config").display().to_string(),
            ),
        ],
    });
    a.initialize();
    a
}

fn new_bypass_session(a: &mut AgentProcess, ws: &std::path::Path) -> String {
    let id = a.new_session(ws);
    // The client's own change is not echoed: nothing follows the response.
    a.call_ok(
        "session/set_mode",
        json!({"sessionId": id, "modeId": "bypass"}),
    );
    id
}

fn say(a: &mut AgentProcess, session: &str, text: &str) -> (String, support::Transcript) {
    let t = a.prompt(session, text, |r| panic!("unexpected request {r}"));
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{:?}",
        t.response
    );
    let id = t.response["result"]["_meta"]["maka"]["turnId"]
        .as_str()
        .unwrap()
        .to_string();
    (id, t)
}

/// The updates a `session/load` replays, without the session id (to compare sessions).
fn replay(data: &std::path::Path, session: &str, cwd: &std::path::Path) -> Vec<Value> {
    let mut other = agent(data);
    let load = other.drive(
        "session/load",
        json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
        |r| panic!("unexpected {r}"),
    );
    assert!(load.response.get("result").is_some(), "{}", load.response);
    load.updates_for(session).into_iter().cloned().collect()
}

fn turn_of(update: &Value) -> Option<&str> {
    (update["sessionUpdate"] == "user_message_chunk")
        .then(|| update["_meta"]["maka"]["turnId"].as_str())
        .flatten()
}

#[test]
fn fork_and_branch_copy_the_conversation_and_list_their_source() {
    let data = TempDir::new("hist-fork-data");
    let ws = TempDir::new("hist-fork-ws");
    let mut a = agent(data.path());
    let init = a.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    assert_eq!(
        init["agentCapabilities"]["sessionCapabilities"]["fork"],
        json!({})
    );
    let source = new_bypass_session(&mut a, ws.path());
    let (t1, _) = say(&mut a, &source, "hello there");
    let (t2, _) = say(&mut a, &source, "write a please");
    let (_t3, _) = say(&mut a, &source, "and hello again");

    // session/fork: the whole conversation, in a session that is live here at once.
    let fork = a.call_ok(
        "session/fork",
        json!({"sessionId": source, "cwd": ws.path(), "mcpServers": []}),
    );
    let forked = fork["sessionId"].as_str().unwrap().to_string();
    assert_ne!(forked, source);
    assert!(fork["configOptions"].is_array(), "{fork}");
    a.expect_commands(&forked);
    let (_, t) = say(&mut a, &forked, "what did i say");
    assert_eq!(
        t.text(),
        "heard: hello there | write a please | and hello again | what did i say"
    );

    // _maka/session/branch through the first turn.
    let branch = a.call_ok(
        "_maka/session/branch",
        json!({"sessionId": source, "throughTurnId": t1}),
    );
    let branched = branch["sessionId"].as_str().unwrap().to_string();
    assert_eq!(branch["turnCount"], 1);
    assert_eq!(branch["source"]["throughTurnId"], t1.as_str());

    // Replays: the fork's equals the source's up to the fork point (then its own turn); the
    // branch's equals the source's up to the end of turn 1.
    let src = replay(data.path(), &source, ws.path());
    let frk = replay(data.path(), &forked, ws.path());
    assert_eq!(frk[..src.len()], src[..]);
    assert!(turn_of(&frk[src.len()]).is_some(), "{:?}", frk[src.len()]);
    let br = replay(data.path(), &branched, ws.path());
    let cut = src.iter().position(|u| turn_of(u) == Some(&t2)).unwrap();
    assert_eq!(br, src[..cut].to_vec());

    // The source is unchanged.
    let turns = a.call_ok("_maka/session/turns", json!({"sessionId": source}));
    assert_eq!(turns["turns"].as_array().unwrap().len(), 3);

    // session/list names each copy's source.
    let list = a.call_ok("session/list", json!({}));
    let entry = |id: &str| {
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["sessionId"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} not listed: {list}"))
    };
    assert_eq!(
        entry(&forked)["_meta"]["maka"]["source"]["sessionId"],
        source.as_str()
    );
    assert_eq!(
        entry(&branched)["_meta"]["maka"]["source"]["throughTurnId"],
        t1.as_str()
    );
    assert!(entry(&source).get("_meta").is_none());
    assert_eq!(entry(&forked)["title"], "hello there (fork)");

    // Unknown source or turn: -32002.
    let (resp, _) = a.call(
        "session/fork",
        json!({"sessionId": "sess_nope", "cwd": ws.path(), "mcpServers": []}),
    );
    assert_eq!(error_of(&resp)["code"], -32002, "{resp}");
    let (resp, _) = a.call(
        "_maka/session/branch",
        json!({"sessionId": source, "throughTurnId": "t_nope"}),
    );
    assert_eq!(error_of(&resp)["code"], -32002, "{resp}");
    let (resp, _) = a.call("session/fork", json!({"sessionId": source, "cwd": "rel"}));
    assert_eq!(error_of(&resp)["code"], -32602, "{resp}");

    // /fork from the conversation itself.
    let (_, t) = say(&mut a, &source, "/fork");
    let text = t.text();
    assert!(
        text.contains("Forked this conversation (3 turn(s))"),
        "{text}"
    );
    let new_id = text
        .split_whitespace()
        .find(|w| w.starts_with("sess_"))
        .unwrap()
        .trim_end_matches('.');
    let turns = a.call_ok("_maka/session/turns", json!({"sessionId": new_id}));
    assert_eq!(turns["turns"].as_array().unwrap().len(), 3);
}

#[test]
fn rewinding_takes_turns_out_of_the_conversation_and_puts_files_back() {
    let data = TempDir::new("hist-rewind-data");
    let ws = TempDir::new("hist-rewind-ws");
    let file = |name: &str| ws.path().join(name);
    fs::write(file("a.txt"), "one\n").unwrap();
    fs::write(file("c.txt"), "keep\n").unwrap();
    let mut a = agent(data.path());
    let s = new_bypass_session(&mut a, ws.path());

    let (t1, _) = say(&mut a, &s, "write a");
    let named = a.call_ok(
        "_maka/session/revision/create",
        json!({"sessionId": s, "label": "before b"}),
    );
    let (t2, _) = say(&mut a, &s, "create b");
    let (t3, _) = say(&mut a, &s, "write a again");
    assert_eq!(fs::read_to_string(file("a.txt")).unwrap(), "three\n");
    assert_eq!(fs::read_to_string(file("b.txt")).unwrap(), "new\n");
    // Someone edits c.txt after the agent did.
    fs::write(file("c.txt"), "user edit\n").unwrap();

    let revs = a.call_ok("_maka/session/revisions", json!({"sessionId": s}));
    let summary: Vec<(String, String, u64)> = revs["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["revisionId"].as_str().unwrap().to_string(),
                r["kind"].as_str().unwrap().to_string(),
                r["turnsAfter"].as_u64().unwrap(),
            )
        })
        .collect();
    let named_id = named["revisionId"].as_str().unwrap().to_string();
    assert_eq!(
        summary,
        vec![
            (format!("rev_{t1}"), "turn_start".into(), 3),
            (named_id.clone(), "named".into(), 2),
            (format!("rev_{t2}"), "turn_start".into(), 2),
            (format!("rev_{t3}"), "turn_start".into(), 1),
        ]
    );

    let undone = a.call_ok(
        "_maka/session/revision/abandon",
        json!({"sessionId": s, "revisionId": named_id}),
    );
    assert_eq!(undone["abandonedTurnIds"], json!([t2, t3]));
    let canon = |n: &str| {
        fs::canonicalize(ws.path())
            .unwrap()
            .join(n)
            .display()
            .to_string()
    };
    let mut restored: Vec<(String, String)> = undone["restored"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap().to_string(),
                r["action"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    restored.sort();
    assert_eq!(
        restored,
        vec![
            (canon("a.txt"), "written".to_string()),
            (canon("b.txt"), "deleted".to_string())
        ]
    );
    assert_eq!(undone["conflicts"].as_array().unwrap().len(), 1, "{undone}");
    assert_eq!(undone["conflicts"][0]["path"], canon("c.txt"));
    assert_eq!(undone["conflicts"][0]["reason"], "changed_since");
    // Exactly the agent's changes were undone; the person's edit stays.
    assert_eq!(fs::read_to_string(file("a.txt")).unwrap(), "two\n");
    assert!(!file("b.txt").exists());
    assert_eq!(fs::read_to_string(file("c.txt")).unwrap(), "user edit\n");

    // Out of the history, the replay and the model's context; still on disk.
    let turns = a.call_ok("_maka/session/turns", json!({"sessionId": s}));
    let ids: Vec<&str> = turns["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["turnId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [t1.as_str()]);
    let replayed: Vec<String> = replay(data.path(), &s, ws.path())
        .iter()
        .filter_map(|u| turn_of(u).map(String::from))
        .collect();
    assert_eq!(replayed, std::slice::from_ref(&t1));
    let (_, t) = say(&mut a, &s, "what did i say");
    assert_eq!(t.text(), "heard: write a | what did i say");
    let stored = fs::read_to_string(
        data.path()
            .join("sessions")
            .join(&s)
            .join("transcript.jsonl"),
    )
    .unwrap();
    assert!(stored.contains("create b") && stored.contains("\"type\":\"rewind\""));

    // Unknown revision: -32002; a missing field: -32602.
    let (resp, _) = a.call(
        "_maka/session/revision/abandon",
        json!({"sessionId": s, "revisionId": "rev_nope"}),
    );
    assert_eq!(error_of(&resp)["code"], -32002, "{resp}");
    let (resp, _) = a.call("_maka/session/revision/create", json!({"sessionId": s}));
    assert!(error_of(&resp)["message"]
        .as_str()
        .unwrap()
        .contains("`label`"));

    // force: a file changed since is restored anyway.
    let (t5, _) = say(&mut a, &s, "write a again");
    fs::write(file("a.txt"), "mine\n").unwrap();
    let undone = a.call_ok(
        "_maka/session/revision/abandon",
        json!({"sessionId": s, "revisionId": format!("rev_{t5}"), "force": true}),
    );
    assert_eq!(undone["conflicts"], json!([]));
    assert_eq!(fs::read_to_string(file("a.txt")).unwrap(), "two\n");

    // /rewind undoes the last turn (files included) and says what it did.
    say(&mut a, &s, "create b");
    assert!(file("b.txt").exists());
    let (_, t) = say(&mut a, &s, "/rewind");
    let text = t.text();
    assert!(text.contains("Rewound 1 turn(s)"), "{text}");
    assert!(text.contains("Deleted b.txt"), "{text}");
    assert!(text.contains("Restored c.txt"), "{text}");
    assert!(!file("b.txt").exists());
    // c.txt is back to what it was before that turn: the person's edit.
    assert_eq!(fs::read_to_string(file("c.txt")).unwrap(), "user edit\n");
    let (_, t) = say(&mut a, &s, "/rewind x");
    assert!(t.text().contains("Usage: /rewind"), "{}", t.text());
}

/// A client that offers files: the agent writes through it, and a rewind restores through it.
#[test]
fn files_written_through_the_editor_are_restored_through_the_editor() {
    let data = TempDir::new("hist-editor-data");
    let ws = TempDir::new("hist-editor-ws");
    let path = fs::canonicalize(ws.path()).unwrap().join("a.txt");
    fs::write(&path, "one\n").unwrap();
    let mut a = AgentProcess::spawn_with(support::Spawn {
        args: vec![],
        env: vec![
            ("MAKA_SCRIPT".into(), script().to_string()),
            ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
            (
                "XDG_CONFIG_HOME".into(),
                data.path().join("config").display().to_string(),
            ),
        ],
    });
    a.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}}}),
    );
    let s = new_bypass_session(&mut a, ws.path());
    // The editor's buffer: what it reads back and what writes change (never the disk).
    let mut buffer = String::from("one\n");
    let mut writes: Vec<String> = vec![];
    let editor = |r: &Value, buffer: &mut String, writes: &mut Vec<String>| -> Reply {
        assert_eq!(r["params"]["path"], path.display().to_string(), "{r}");
        match r["method"].as_str().unwrap() {
            "fs/read_text_file" => Reply::Result(json!({"content": buffer.clone()})),
            "fs/write_text_file" => {
                *buffer = r["params"]["content"].as_str().unwrap().to_string();
                writes.push(buffer.clone());
                Reply::Result(json!({}))
            }
            other => panic!("unexpected {other}"),
        }
    };
    let t = a.prompt(&s, "write a", |r| editor(r, &mut buffer, &mut writes));
    let turn = t.response["result"]["_meta"]["maka"]["turnId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(writes, ["two\n"]);
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "one\n",
        "the disk was not written"
    );

    let t = a.drive(
        "_maka/session/revision/abandon",
        json!({"sessionId": s, "revisionId": format!("rev_{turn}")}),
        |r| editor(r, &mut buffer, &mut writes),
    );
    let result = &t.response["result"];
    assert_eq!(result["restored"][0]["viaEditor"], true, "{result}");
    assert_eq!(writes, ["two\n", "one\n"]);
    assert_eq!(buffer, "one\n");
}

#[test]
fn a_steered_message_lands_in_the_running_turn_only() {
    let data = TempDir::new("hist-steer-data");
    let ws = TempDir::new("hist-steer-ws");
    let mut a = agent(data.path());
    let s = new_bypass_session(&mut a, ws.path());

    // No running turn: a clear error, nothing queued.
    let steer = json!({"sessionId": s, "prompt": [{"type": "text", "text": "too early"}]});
    let (resp, _) = a.call("_maka/turn/steer", steer);
    assert_eq!(error_of(&resp)["code"], -32002, "{resp}");
    assert_eq!(error_of(&resp)["data"]["makaCode"], "no_running_turn");

    let prompt = a.request(
        "session/prompt",
        json!({"sessionId": s, "prompt": [{"type": "text", "text": "slow task"}]}),
    );
    // Once the turn is visibly running, steer it.
    let mut lines = vec![];
    loop {
        let v = a.recv();
        let started = v["params"]["update"]["sessionUpdate"] == "agent_message_chunk";
        lines.push(v);
        if started {
            break;
        }
    }
    let steer = a.request(
        "_maka/turn/steer",
        json!({"sessionId": s, "prompt": [{"type": "text", "text": "also check the tests"}]}),
    );
    let (mut steer_resp, mut prompt_resp) = (None, None);
    while steer_resp.is_none() || prompt_resp.is_none() {
        let v = a.recv();
        if v.get("id") == Some(&steer) && v.get("method").is_none() {
            steer_resp = Some(v.clone());
        } else if v.get("id") == Some(&prompt) && v.get("method").is_none() {
            prompt_resp = Some(v.clone());
        }
        lines.push(v);
    }
    let (steer_resp, prompt_resp) = (steer_resp.unwrap(), prompt_resp.unwrap());
    let turn = prompt_resp["result"]["_meta"]["maka"]["turnId"].clone();
    assert_eq!(steer_resp["result"]["turnId"], turn, "{steer_resp}");
    assert_eq!(prompt_resp["result"]["stopReason"], "end_turn");
    let updates: Vec<&Value> = lines
        .iter()
        .filter(|l| l["method"] == "session/update")
        .map(|l| &l["params"]["update"])
        .collect();
    let text: String = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Workingheard: slow task | also check the tests");
    // Shown where it was taken in: after the first step's text, before the answer to it.
    let at = |pred: &dyn Fn(&Value) -> bool| updates.iter().position(|u| pred(u)).unwrap();
    let steered = at(&|u| u["sessionUpdate"] == "user_message_chunk");
    assert_eq!(updates[steered]["content"]["text"], "also check the tests");
    assert_eq!(updates[steered]["_meta"]["maka"]["turnId"], turn);
    assert!(at(&|u| u["content"]["text"] == "Working") < steered);
    assert!(
        steered
            < at(&|u| u["content"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("heard")))
    );

    // The replay shows it in the same place; the next turn does not get it again.
    let kinds: Vec<String> = replay(data.path(), &s, ws.path())
        .iter()
        .filter(|u| u["sessionUpdate"] != "available_commands_update")
        .map(|u| {
            format!(
                "{}:{}",
                u["sessionUpdate"].as_str().unwrap(),
                u["content"]["text"].as_str().unwrap_or("")
            )
        })
        .collect();
    let shown: Vec<&str> = kinds
        .iter()
        .map(String::as_str)
        .filter(|k| !k.ends_with(':'))
        .collect();
    assert_eq!(
        shown,
        [
            "user_message_chunk:slow task",
            "agent_message_chunk:Working",
            "user_message_chunk:also check the tests",
            "agent_message_chunk:heard: slow task | also check the tests",
        ]
    );
    let (_, t) = say(&mut a, &s, "what did i say");
    assert_eq!(
        t.text(),
        "heard: slow task | also check the tests | what did i say"
    );
}

/// The host operations behind them: revision-checked branches, idempotent retries, busy
/// sources.
#[test]
fn branch_create_checks_the_source_revision_and_is_idempotent() {
    let data = TempDir::new("hist-host-data");
    let ws = TempDir::new("hist-host-ws");
    let host = HostProcess::start(data.path(), Some(&script()));
    host.create_session("s", ws.path(), "bypass");
    host.start_turn("s", "t_1", "hello");
    host.until_terminal("s", 0);
    let rev = host.ok("session.get", json!({"sessionId": "s"}))["session"]["revision"]
        .as_u64()
        .unwrap();
    let input = |target: &str, expected: u64| json!({"sourceSessionId": "s", "targetSessionId": target, "expectedSourceRevision": expected});
    let stale = host.ok("session.branch.create", input("b0", rev - 1));
    assert_eq!(stale["kind"], "source_revision_conflict", "{stale}");
    assert_eq!(stale["actual"], rev);
    let made = host.ok("session.branch.create", input("b1", rev));
    assert_eq!(made["kind"], "committed");
    assert_eq!(made["session"]["lineage"]["parentSessionId"], "s");
    assert_eq!(made["session"]["lineage"]["branchOfTurnId"], "t_1");
    // A retry is the same answer; the same id from another source is a conflict.
    let again = host.ok("session.branch.create", input("b1", rev));
    assert_eq!(again["session"]["createdAt"], made["session"]["createdAt"]);
    host.err(
        "session.branch.create",
        json!({"sourceSessionId": "b1", "targetSessionId": "s"}),
        "operation_conflict",
    );
    // Branching through the running turn is refused; without a turn, finished ones are copied.
    let head = host.ok("session.open", json!({"sessionId": "s"}))["seq"]
        .as_u64()
        .unwrap();
    host.start_turn("s", "t_2", "slow task");
    host.err(
        "session.branch.create",
        json!({"sourceSessionId": "s", "targetSessionId": "b2", "throughTurnId": "t_2"}),
        "session_busy",
    );
    let during = host.ok(
        "session.branch.create",
        json!({"sourceSessionId": "s", "targetSessionId": "b3"}),
    );
    assert_eq!(during["session"]["lineage"]["branchOfTurnId"], "t_1");
    // Rewinding while a turn runs is refused too.
    host.err(
        "session.revision.abandon",
        json!({"sessionId": "s", "revisionId": "rev_t_1"}),
        "session_busy",
    );
    // A rewind moves the revision: a branch expecting the old one conflicts.
    host.until_terminal("s", head);
    host.ok(
        "session.revision.abandon",
        json!({"sessionId": "s", "revisionId": "rev_t_2"}),
    );
    let after = host.ok("session.branch.create", input("b4", rev));
    assert_eq!(after["kind"], "source_revision_conflict");
}

/// Two windows on one data dir (one host): B loads the session while A's turn runs, follows it,
/// steers it, and is told when it ends (`_maka/turn_state`); A sees B's message in its turn.
#[test]
fn another_window_follows_steers_and_hears_the_end_of_a_turn_it_did_not_prompt() {
    let data = TempDir::new("hist-two-data");
    let ws = TempDir::new("hist-two-ws");
    let mut a = agent(data.path());
    let s = new_bypass_session(&mut a, ws.path());
    let prompt = a.request(
        "session/prompt",
        json!({"sessionId": s, "prompt": [{"type": "text", "text": "slow task"}]}),
    );
    while a.recv()["params"]["update"]["sessionUpdate"] != "agent_message_chunk" {}

    let mut b = agent(data.path());
    let load = b.call_ok(
        "session/load",
        json!({"sessionId": s, "cwd": ws.path(), "mcpServers": []}),
    );
    assert!(load["configOptions"].is_array());
    let steer = b.request(
        "_maka/turn/steer",
        json!({"sessionId": s, "prompt": [{"type": "text", "text": "from window b"}]}),
    );
    let mut ended = None;
    let mut b_text = String::new();
    while ended.is_none() {
        let v = b.recv();
        if v["method"] == "_maka/turn_state" {
            ended = Some(v["params"].clone());
        } else if v["id"] == steer && v.get("method").is_none() {
            assert!(v.get("result").is_some(), "{v}");
        } else if let Some(t) = v["params"]["update"]["content"]["text"].as_str() {
            if v["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
                b_text.push_str(t);
            }
        }
    }
    let (resp, lines) = a.response_to(&prompt);
    let turn = &resp["result"]["_meta"]["maka"]["turnId"];
    let ended = ended.unwrap();
    assert_eq!(ended["turnId"], *turn, "{ended}");
    assert_eq!(ended["outcome"], "completed");
    assert!(
        b_text.ends_with("heard: slow task | from window b"),
        "{b_text}"
    );
    // A, which prompted, sees B's message as a user message of its turn.
    let shown: Vec<&Value> = lines
        .iter()
        .map(|l| &l["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .collect();
    assert_eq!(shown.len(), 1, "{lines:?}");
    assert_eq!(shown[0]["content"]["text"], "from window b");
    assert_eq!(shown[0]["_meta"]["maka"]["turnId"], *turn);
}

/// A rewind never writes or deletes outside the workspace: when the folder the agent wrote
/// into is replaced by a link to an outside folder (holding files of the same names), the
/// rewind reports conflicts and leaves the outside files alone, with and without `force`.
/// One line a case: how `sub` is replaced, and whether `force` is asked.
#[test]
fn a_rewind_never_acts_through_a_folder_that_became_a_link() {
    type Swap = fn(&std::path::Path, &std::path::Path);
    let cases: &[(&str, Swap, bool)] = &[
        (
            "sub -> outside",
            |sub, outside| {
                fs::remove_dir_all(sub).unwrap();
                std::os::unix::fs::symlink(outside, sub).unwrap();
            },
            false,
        ),
        (
            "sub -> outside, force",
            |sub, outside| {
                fs::remove_dir_all(sub).unwrap();
                std::os::unix::fs::symlink(outside, sub).unwrap();
            },
            true,
        ),
        (
            "sub -> relative link out, force",
            |sub, outside| {
                fs::remove_dir_all(sub).unwrap();
                let rel = std::path::Path::new("..").join(outside.file_name().unwrap());
                std::os::unix::fs::symlink(rel, sub).unwrap();
            },
            true,
        ),
    ];
    for (what, swap, force) in cases {
        let data = TempDir::new("hist-linkswap-data");
        let base = TempDir::new("hist-linkswap");
        let ws = base.path().join("ws");
        let outside = base.path().join("outside");
        fs::create_dir_all(ws.join("sub")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(ws.join("sub/old.txt"), "before\n").unwrap();
        let mut a = agent(data.path());
        let s = new_bypass_session(&mut a, &ws);
        let (t1, _) = say(&mut a, &s, "write sub");
        // The outside folder holds what the agent's files would be, byte for byte, so that
        // "changed since" cannot be what stops the rewind.
        fs::write(outside.join("new.txt"), "agent new\n").unwrap();
        fs::write(outside.join("old.txt"), "agent old\n").unwrap();
        swap(&ws.join("sub"), &outside);
        let undone = a.call_ok(
            "_maka/session/revision/abandon",
            json!({"sessionId": s, "revisionId": format!("rev_{t1}"), "force": force}),
        );
        assert_eq!(undone["restored"], json!([]), "{what}: {undone}");
        assert_eq!(
            undone["conflicts"].as_array().map(Vec::len),
            Some(2),
            "{what}: both files are conflicts: {undone}"
        );
        assert_eq!(
            fs::read_to_string(outside.join("new.txt")).unwrap(),
            "agent new\n",
            "{what}"
        );
        assert_eq!(
            fs::read_to_string(outside.join("old.txt")).unwrap(),
            "agent old\n",
            "{what}"
        );
    }
}

/// Issue 45 §5 and §8: a forced rewind wrote through a hard link to a file outside the
/// workspace, and a rewind over a device never answered. A rewind replaces files by rename
/// only: a name that is now a hard link, a FIFO, a socket or a device is left alone and
/// reported (`cannot_restore`, saying why), `force` or not, and the answer comes at once. One
/// row a kind of file.
#[test]
fn a_rewind_leaves_hard_links_and_special_files_alone_even_with_force() {
    type Swap = fn(&std::path::Path, &std::path::Path) -> Option<std::os::unix::net::UnixListener>;
    let rows: &[(&str, Swap, &str)] = &[
        (
            "hard link to a file outside",
            |a, outside| {
                fs::remove_file(a).unwrap();
                fs::hard_link(outside, a).unwrap();
                None
            },
            "hard links",
        ),
        (
            "fifo",
            |a, _| {
                fs::remove_file(a).unwrap();
                let ok = std::process::Command::new("mkfifo")
                    .arg(a)
                    .status()
                    .unwrap();
                assert!(ok.success());
                None
            },
            "FIFO",
        ),
        (
            "socket",
            |a, _| {
                fs::remove_file(a).unwrap();
                Some(std::os::unix::net::UnixListener::bind(a).unwrap())
            },
            "socket",
        ),
        (
            // /dev/zero's numbers; only where the tests may make a device (as root).
            "character device",
            |a, _| {
                fs::remove_file(a).unwrap();
                let made = std::process::Command::new("mknod")
                    .args([a.as_os_str(), "c".as_ref(), "1".as_ref(), "5".as_ref()])
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if !made {
                    fs::write(a, "no device\n").unwrap();
                }
                None
            },
            "character device",
        ),
    ];
    for (what, swap, word) in rows {
        let data = TempDir::new("hist-special-data");
        let base = TempDir::new("hist-special");
        let ws = base.path().join("ws");
        fs::create_dir_all(&ws).unwrap();
        let outside = base.path().join("outside.txt");
        // What the agent will write, byte for byte: "changed since" is not what stops it.
        fs::write(&outside, "two\n").unwrap();
        fs::write(ws.join("a.txt"), "one\n").unwrap();
        let mut a = agent(data.path());
        let s = new_bypass_session(&mut a, &ws);
        let (t1, _) = say(&mut a, &s, "write a");
        let _keep = swap(&ws.join("a.txt"), &outside);
        let kind = fs::symlink_metadata(ws.join("a.txt")).unwrap().file_type();
        // (Never read here: the test would block on the FIFO or read the device forever.)
        if *what == "character device" && kind.is_file() {
            eprintln!("{what}: skipped (cannot make a device here)");
            continue;
        }
        let t0 = std::time::Instant::now();
        let undone = a.call_ok(
            "_maka/session/revision/abandon",
            json!({"sessionId": s, "revisionId": format!("rev_{t1}"), "force": true}),
        );
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(5),
            "{what}: {:?}",
            t0.elapsed()
        );
        assert_eq!(undone["restored"], json!([]), "{what}: {undone}");
        let conflict = &undone["conflicts"][0];
        assert_eq!(conflict["reason"], "cannot_restore", "{what}: {undone}");
        assert!(
            conflict["message"].as_str().unwrap_or("").contains(word),
            "{what}: {undone}"
        );
        assert_eq!(fs::read_to_string(&outside).unwrap(), "two\n", "{what}");
        assert_eq!(
            fs::symlink_metadata(ws.join("a.txt")).unwrap().file_type(),
            kind,
            "{what}: left as it is"
        );
    }
}
