//! Secrets stay out of sight (issue 45), through the real binary over pipes: a declared
//! subagent's environment values appear in no dialog, no line on stdout, no log line and no file
//! of the data dir. (A provider's key echoed in its error: openai_provider.rs.)

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::host::{files_holding, TempDir};
use support::{select, AgentProcess};

fn stub_agent() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stub_agent.py").to_string()
}

/// The parent model delegates "noop" to agent `stub` when told "stub: noop".
fn delegating_script() -> Value {
    json!({"rules": [{"when": "stub: noop", "responses": [
        [{"tool": "delegate", "args": {"agent": "stub", "task": "noop"}}],
        [{"text": "delegated"}]]}],
        "default": [[{"text": "Hello."}]]})
}

/// Declares `stub` in `ws` with `env`.
fn declare(ws: &TempDir, env: Value) {
    std::fs::create_dir_all(ws.path().join(".maka")).unwrap();
    std::fs::write(
        ws.path().join(".maka/agents.json"),
        json!({"agents": {"stub": {"command": "python3", "args": [stub_agent()], "env": env}}})
            .to_string(),
    )
    .unwrap();
}

/// (case 9) The trust dialog names a declared agent's variables, not their values (an API key,
/// often); no line on stdout, no log line and no file of the data dir holds a value. The trust
/// still covers the exact declaration: a changed value asks again.
#[test]
fn a_declared_agents_environment_values_stay_out_of_sight() {
    const VALUE: &str = "sk-subagent-secret-0123456789";
    const CHANGED: &str = "sk-subagent-secret-changed-42";
    let data = TempDir::new("private-env-data");
    let ws = TempDir::new("private-env-ws");
    declare(&ws, json!({"STUB_API_KEY": VALUE, "STUB_MODE": "quiet"}));
    let mut a = AgentProcess::scripted(&delegating_script(), data.path());
    a.initialize();
    let s = a.new_session(ws.path());
    let mut lines = vec![];
    let mut delegate = |a: &mut AgentProcess, answer: &'static str| -> Vec<String> {
        let mut titles = vec![];
        let t = a.prompt(&s, "stub: noop", |r| {
            assert_eq!(r["method"], "session/request_permission", "{r}");
            titles.push(
                r["params"]["toolCall"]["title"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
            select(answer)
        });
        assert_eq!(
            t.response["result"]["stopReason"], "end_turn",
            "{}",
            t.response
        );
        lines.extend(t.lines);
        titles
    };
    let titles = delegate(&mut a, "allow_workspace");
    assert_eq!(titles.len(), 1, "{titles:?}");
    assert!(
        titles[0].contains("STUB_API_KEY=…") && titles[0].contains("STUB_MODE=…"),
        "the names: {}",
        titles[0]
    );
    assert!(delegate(&mut a, "reject").is_empty(), "trusted as declared");
    declare(&ws, json!({"STUB_API_KEY": CHANGED, "STUB_MODE": "quiet"}));
    assert_eq!(
        delegate(&mut a, "allow_once").len(),
        1,
        "a changed value asks again"
    );

    a.close_stdin();
    lines.extend(a.drain());
    a.wait_exit(std::time::Duration::from_secs(10));
    for secret in [VALUE, CHANGED] {
        for line in &lines {
            assert!(!line.to_string().contains(secret), "on stdout: {line}");
        }
        assert!(!a.stderr().contains(secret), "in the log:\n{}", a.stderr());
        let held = files_holding(data.path(), secret);
        assert!(held.is_empty(), "in the data dir: {held:#?}");
    }
}

/// Every entry under `data` with its mode, as `(path relative to data, is a folder, mode)`.
fn modes_under(data: &std::path::Path) -> Vec<(String, bool, u32)> {
    use std::os::unix::fs::PermissionsExt;
    support::host::entries_under(data)
        .into_iter()
        .filter_map(|p| {
            let m = std::fs::symlink_metadata(&p).ok()?;
            let rel = p.strip_prefix(data).unwrap().display().to_string();
            Some((rel, m.is_dir(), m.permissions().mode() & 0o777))
        })
        .collect()
}

/// The entries of `modes` that others may read, write or enter, or that are not files or folders.
fn loose(modes: &[(String, bool, u32)], data: &std::path::Path) -> Vec<String> {
    modes
        .iter()
        .filter(|(rel, dir, mode)| {
            let is_file = std::fs::symlink_metadata(data.join(rel)).is_ok_and(|m| m.is_file());
            let want = if *dir { 0o700 } else { 0o600 };
            (!dir && !is_file) || *mode != want
        })
        .map(|(rel, _, mode)| format!("{rel}: {mode:o}"))
        .collect()
}

/// (case 9, the data dir) After a session with a turn, tool calls (a write, a command, a read),
/// a kept rule and an artifact, every file under the data dir is 0600 and every folder 0700 —
/// the transcript was 0644. One row a kind of file that must be there.
#[test]
fn every_file_of_the_data_dir_is_private() {
    let script = json!({"rules": [{"when": "work", "responses": [
        [{"tool": "write_file", "args": {"path": "a.txt", "content": "hello\n"}}],
        [{"tool": "run_command", "args": {"command": "echo hi"}}],
        [{"tool": "read_file", "args": {"path": "a.txt"}}],
        [{"text": "done"}]]}],
        "default": [[{"text": "Hello."}]]});
    let data = TempDir::new("private-modes-data");
    let ws = TempDir::new("private-modes-ws");
    let mut a = AgentProcess::scripted(&script, data.path());
    a.initialize();
    let s = a.new_session(ws.path());
    let t = a.prompt(&s, "work", |r| {
        // "Always in this workspace": a kept rule, in the data dir.
        let options = support::options_offered(&r["params"]["options"]);
        let always = options.iter().find(|(id, _, _)| *id == "allow_workspace");
        select(always.or(options.first()).expect("options").0)
    });
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
    assert!(ws.path().join("a.txt").exists());
    let big_text = "0123456789abcdef\n".repeat(20_000);
    let t = a.drive(
        "session/prompt",
        json!({"sessionId": s, "prompt": [
            {"type": "text", "text": "what did i say"},
            {"type": "resource", "resource": {"uri": "file:///tmp/dump.txt", "mimeType": "text/plain", "text": big_text}}]}),
        |r| panic!("unexpected {r}"),
    );
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );

    let modes = modes_under(data.path());
    let session = format!("sessions/{s}");
    for must in [
        "host.lock".to_string(),
        "host.json".into(),
        "permissions.json".into(),
        "process-groups".into(),
        "sessions".into(),
        session.clone(),
        format!("{session}/session.json"),
        format!("{session}/transcript.jsonl"),
        format!("{session}/changes.jsonl"),
        format!("{session}/artifacts"),
    ] {
        assert!(
            modes.iter().any(|(rel, _, _)| *rel == must),
            "{must} is there: {modes:#?}"
        );
    }
    assert!(
        modes
            .iter()
            .any(|(rel, dir, _)| rel.starts_with(&format!("{session}/artifacts/")) && !dir),
        "an artifact's files: {modes:#?}"
    );
    let loose = loose(&modes, data.path());
    assert!(loose.is_empty(), "not private: {loose:#?}");
}

/// A data dir an older build left readable by others is made private when the host starts,
/// and the log says so. One row a path and the mode it had.
#[test]
fn a_data_dir_left_readable_is_made_private_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let data = TempDir::new("private-old-data");
    let ws = TempDir::new("private-old-ws");
    let rows: [(&str, bool, u32); 6] = [
        ("", true, 0o755),
        ("sessions", true, 0o755),
        ("sessions/s_old", true, 0o775),
        ("sessions/s_old/transcript.jsonl", false, 0o644),
        ("sessions/s_old/changes.jsonl", false, 0o666),
        ("sessions/s_old/subagents.json", false, 0o604),
    ];
    for (rel, dir, _) in rows {
        let p = data.path().join(rel);
        if dir {
            std::fs::create_dir_all(&p).unwrap();
        } else {
            std::fs::write(&p, "{}\n").unwrap();
        }
    }
    for (rel, _, mode) in rows.iter().rev() {
        let p = data.path().join(rel);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    let mut a = AgentProcess::scripted(&delegating_script(), data.path());
    a.initialize();
    a.new_session(ws.path());
    assert!(a.stderr_contains("made private"), "{}", a.stderr());
    for (rel, dir, _) in rows {
        let mode = std::fs::metadata(data.path().join(rel))
            .unwrap_or_else(|e| panic!("{rel}: {e}: {:#?}", modes_under(data.path())))
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, if dir { 0o700 } else { 0o600 }, "{rel:?}");
    }
    let loose = loose(&modes_under(data.path()), data.path());
    assert!(loose.is_empty(), "not private: {loose:#?}");
}
