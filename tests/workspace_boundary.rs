//! No write escapes the session's folders: symbolic links — dangling ones, links to folders,
//! links swapped in while the agent works — lead to a boundary dialog or a refusal, never to a
//! silent write outside. The real adapter and host, scripted model, strict schema.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::os::unix::fs::symlink;
use std::path::Path;
use support::host::TempDir;
use support::{AgentProcess, Reply};

fn script() -> Value {
    let race: Vec<Value> = (0..30)
        .map(|_| json!([{"tool": "write_file", "args": {"path": "race", "content": "inside\n"}}]))
        .collect();
    json!({
        "rules": [
            {"when": "plant", "responses": [
                [{"tool": "write_file", "args": {"path": "dangling", "content": "planted\n"}}],
                [{"text": "ok"}]
            ]},
            {"when": "via dir", "responses": [
                [{"tool": "write_file", "args": {"path": "outdir/new.txt", "content": "planted\n"}}],
                [{"text": "ok"}]
            ]},
            {"when": "edit link", "responses": [
                [{"tool": "edit_file", "args": {"path": "to_secret", "old_text": "secret", "new_text": "pwned"}}],
                [{"text": "ok"}]
            ]},
            {"when": "write the link", "responses": [
                [{"tool": "write_file", "args": {"path": "hardlinked", "content": "pwned\n"}}],
                [{"tool": "edit_file", "args": {"path": "hardlinked", "old_text": "secret", "new_text": "pwned"}}],
                [{"text": "ok"}]
            ]},
            {"when": "race", "responses": race}
        ]
    })
}

struct Setup {
    agent: AgentProcess,
    ws: TempDir,
    outside: TempDir,
    _data: TempDir,
}

fn setup(tag: &str, caps: Value, mode: &str) -> (Setup, String) {
    let data = TempDir::new(&format!("wb-{tag}-data"));
    let ws = TempDir::new(&format!("wb-{tag}-ws"));
    let outside = TempDir::new(&format!("wb-{tag}-out"));
    symlink(
        outside.path().join("planted.txt"),
        ws.path().join("dangling"),
    )
    .unwrap();
    symlink(outside.path(), ws.path().join("outdir")).unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret\n").unwrap();
    symlink(
        outside.path().join("secret.txt"),
        ws.path().join("to_secret"),
    )
    .unwrap();
    let mut agent = AgentProcess::scripted(&script(), data.path());
    agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": caps}),
    );
    let id = agent.new_session(ws.path());
    agent.call_ok("session/set_mode", json!({"sessionId": id, "modeId": mode}));
    let _ = agent.recv(); // config_option_update
    (
        Setup {
            agent,
            ws,
            outside,
            _data: data,
        },
        id,
    )
}

/// Answers every boundary dialog "Deny" and records its title; anything else is a failure
/// unless it is a permission for a write inside (then allowed).
fn deny_boundaries(titles: &mut Vec<String>) -> impl FnMut(&Value) -> Reply + '_ {
    move |r: &Value| {
        assert_eq!(r["method"], "session/request_permission", "{r}");
        let title = r["params"]["toolCall"]["title"]
            .as_str()
            .unwrap()
            .to_string();
        let boundary = title.starts_with("Allow access outside the project");
        titles.push(title);
        let option = if boundary { "reject" } else { "allow_once" };
        Reply::Result(json!({"outcome": {"outcome": "selected", "optionId": option}}))
    }
}

fn last_status(t: &support::Transcript, id: &str) -> Value {
    t.updates_for(id)
        .into_iter()
        .rev()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"].is_string())
        .cloned()
        .unwrap()
}

/// Issue 13 §3: `dangling -> /outside/planted.txt` (target not existing yet) was written with
/// no dialog in bypass mode. Now the write asks to leave the session's folders, in every mode.
#[test]
fn a_dangling_link_asks_to_leave_the_folders_in_bypass_and_ask_mode() {
    for mode in ["bypass", "ask"] {
        let (mut s, id) = setup(&format!("dangling-{mode}"), json!({}), mode);
        let mut titles = vec![];
        let t = s.agent.prompt(&id, "plant", deny_boundaries(&mut titles));
        assert_eq!(titles.len(), 1, "{mode}: {titles:?}");
        assert!(
            titles[0].contains(&s.outside.path().join("planted.txt").display().to_string()),
            "{mode}: the dialog names the real target: {titles:?}"
        );
        assert_eq!(last_status(&t, &id)["status"], "failed", "{mode}");
        assert!(!s.outside.path().join("planted.txt").exists(), "{mode}");
    }
}

/// A link to a folder outside, and an edit through a link to a file outside; also with the
/// editor's `fs/*` (which is never asked to write outside the session's folders).
#[test]
fn links_to_outside_folders_and_files_are_boundaries_with_or_without_editor_files() {
    let caps = json!({"fs": {"readTextFile": true, "writeTextFile": true}});
    for caps in [json!({}), caps] {
        let (mut s, id) = setup("links", caps, "bypass");
        for prompt in ["via dir", "edit link"] {
            let mut titles = vec![];
            let t = s.agent.prompt(&id, prompt, deny_boundaries(&mut titles));
            assert_eq!(titles.len(), 1, "{prompt}: {titles:?}");
            assert!(titles[0].starts_with("Allow access outside the project"));
            assert_eq!(last_status(&t, &id)["status"], "failed", "{prompt}");
            assert!(
                !t.requests
                    .iter()
                    .any(|r| r["method"] == "fs/write_text_file"),
                "{prompt}: the editor was asked to write outside"
            );
        }
        assert!(!s.outside.path().join("new.txt").exists());
        assert_eq!(
            std::fs::read_to_string(s.outside.path().join("secret.txt")).unwrap(),
            "secret\n"
        );
        assert!(s.ws.path().join("to_secret").is_symlink());
    }
}

/// A link swapped in and out while the agent writes (check-then-use): whatever the timing,
/// nothing is written outside — the write either lands inside, is refused at open, or asks.
#[test]
fn a_link_swapped_in_while_writing_never_leads_outside() {
    let (mut s, id) = setup("race", json!({}), "bypass");
    let race = s.ws.path().join("race");
    let target = s.outside.path().join("race.txt");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = {
        let (race, target, stop) = (race.clone(), target.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::remove_file(&race);
                if flips % 2 == 0 {
                    let _ = symlink(&target, &race);
                } else {
                    let _ = std::fs::write(&race, "inside\n");
                }
                flips += 1;
                std::thread::yield_now();
            }
            flips
        })
    };
    let mut titles = vec![];
    let t = s.agent.prompt(&id, "race", deny_boundaries(&mut titles));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 30, "the race ran ({flips} flips)");
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
    assert!(!exists(&target), "a write escaped through the swapped link");
}

fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

fn mkfifo(p: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .unwrap();
    assert!(status.success(), "mkfifo {}", p.display());
}

/// Issue 45 §4 and §5: `read_file` on a FIFO in the workspace blocked the turn and
/// `session/cancel` did not answer the prompt within 20 s; a character device was read with no
/// bound. Now whatever is not a regular file is refused at once by the tools' one opener, with
/// a sentence saying what it is, and a cancel sent meanwhile is answered well within the stop
/// bound (5 s). One row a kind of file.
#[test]
fn read_file_refuses_at_once_what_is_not_a_regular_file_and_a_cancel_is_answered() {
    type Make = fn(&Path) -> Option<std::os::unix::net::UnixListener>;
    // (what, how it is made, the word the refusal uses, whether a boundary dialog comes first)
    let rows: &[(&str, Make, &str, bool)] = &[
        (
            "fifo",
            |p| {
                mkfifo(p);
                None
            },
            "FIFO",
            false,
        ),
        (
            "socket",
            |p| Some(std::os::unix::net::UnixListener::bind(p).unwrap()),
            "socket",
            false,
        ),
        (
            "device via a link",
            |p| {
                symlink("/dev/zero", p).unwrap();
                None
            },
            "character device",
            true,
        ),
    ];
    for (what, make, word, asks) in rows {
        let data = TempDir::new("wb-special-data");
        let ws = TempDir::new("wb-special-ws");
        let _keep = make(&ws.path().join("special"));
        let script = json!({"rules": [{"when": "read it", "responses": [
            [{"tool": "read_file", "args": {"path": "special"}}],
            [{"text": "done"}]
        ]}]});
        let mut agent = AgentProcess::scripted(&script, data.path());
        agent.call_ok(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        );
        let id = agent.new_session(ws.path());
        agent.call_ok(
            "session/set_mode",
            json!({"sessionId": id, "modeId": "bypass"}),
        );
        let prompt = agent.request(
            "session/prompt",
            json!({"sessionId": id, "prompt": [{"type": "text", "text": "read it"}]}),
        );
        // The tool call is under way (a link out of the folders asks first: allowed here, so
        // that it is the opener that refuses): then the cancel.
        let mut seen = vec![];
        loop {
            let v = agent.recv();
            if v["method"] == "session/request_permission" {
                agent.send(&json!({"jsonrpc": "2.0", "id": v["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}));
                continue;
            }
            let u = &v["params"]["update"];
            let started = if *asks {
                // Past the dialog: the call runs (or already failed).
                u["sessionUpdate"] == "tool_call_update"
                    && (u["status"] == "in_progress" || u["status"] == "failed")
            } else {
                u["sessionUpdate"] == "tool_call"
            };
            let answered = v.get("id") == Some(&prompt);
            seen.push(v);
            if started || answered {
                break;
            }
        }
        let t0 = std::time::Instant::now();
        agent.notify("session/cancel", json!({"sessionId": id}));
        let response = match seen.last().filter(|v| v.get("id") == Some(&prompt)) {
            Some(r) => r.clone(),
            None => {
                let (r, before) = agent.response_to(&prompt);
                seen.extend(before);
                r
            }
        };
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "{what}: the prompt was answered {:?} after the cancel",
            t0.elapsed()
        );
        let stop = response["result"]["stopReason"].as_str().unwrap_or("");
        assert!(
            stop == "cancelled" || stop == "end_turn",
            "{what}: {response}"
        );
        let failed = seen
            .iter()
            .map(|v| &v["params"]["update"])
            .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed")
            .unwrap_or_else(|| panic!("{what}: the read failed: {seen:?}"));
        let text = failed.to_string();
        assert!(
            text.contains(word) && text.contains("not a regular file"),
            "{what}: {text}"
        );
    }
}

/// A workspace file that is a hard link to a file outside (the same file under two names):
/// `write_file` and `edit_file` write through no such file — they would change the outside
/// one — and say why (issue 45: a rewind with `force` wrote through one; the tools too).
#[test]
fn the_tools_write_through_no_hard_link() {
    let (mut s, id) = setup("hardlink", json!({}), "bypass");
    let outside = s.outside.path().join("secret.txt");
    std::fs::hard_link(&outside, s.ws.path().join("hardlinked")).unwrap();
    let t = s.agent.prompt(&id, "write the link", |r| {
        panic!("no dialog in bypass: {r}")
    });
    let settled: Vec<Value> = t
        .updates_for(&id)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed")
        .cloned()
        .collect();
    assert_eq!(settled.len(), 2, "both refused: {settled:#?}");
    for u in &settled {
        assert!(u.to_string().contains("hard links"), "{u}");
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret\n");
}
