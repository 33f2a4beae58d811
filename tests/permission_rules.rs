//! Permission rules that last (issue 18, item 3): the dialog offers allow once, allow for this
//! session, always allow for this workspace, reject and always reject, each lasting option
//! naming what it covers and carrying its ACP kind; kept rules decide later calls without a
//! dialog, survive a restart (workspace rules), stay in their workspace, and `/permissions`
//! lists and revokes them. Real binary over pipes; every line validated against the schema.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::host::TempDir;
use support::{select, AgentProcess, Transcript};

fn script() -> Value {
    json!({
        "rules": [
            {"when": "echo twice", "responses": [
                [{"tool": "run_command", "args": {"command": "ls -a"}}],
                [{"tool": "run_command", "args": {"command": "ls -l --all"}}],
                [{"text": "done"}]
            ]},
            {"when": "echo once", "responses": [
                [{"tool": "run_command", "args": {"command": "ls -1"}}],
                [{"text": "done"}]
            ]},
            {"when": "compound", "responses": [
                [{"tool": "run_command", "args": {"command": "echo a && echo b"}}],
                [{"text": "done"}]
            ]},
            {"when": "planted vt", "responses": [
                [{"tool": "run_command", "args": {"command": "ls\u{0b}x/run.sh"}}],
                [{"text": "done"}]
            ]},
            {"when": "planted nbsp", "responses": [
                [{"tool": "run_command", "args": {"command": "ls\u{a0}x/run.sh"}}],
                [{"text": "done"}]
            ]},
            {"when": "planted path", "responses": [
                [{"tool": "run_command", "args": {"command": "PATH=x:/usr/bin:/bin ls"}}],
                [{"text": "done"}]
            ]},
            {"when": "write-a", "responses": [
                [{"tool": "write_file", "args": {"path": "src/a.txt", "content": "a\n"}}],
                [{"text": "done"}]
            ]},
            {"when": "write-b", "responses": [
                [{"tool": "write_file", "args": {"path": "src/deep/b.txt", "content": "b\n"}}],
                [{"text": "done"}]
            ]},
            {"when": "cat plain", "responses": [
                [{"tool": "run_command", "args": {"command": "cat src/plain.txt"}}],
                [{"text": "done"}]
            ]},
            {"when": "cat link", "responses": [
                [{"tool": "run_command", "args": {"command": "cat notes.txt"}}],
                [{"text": "done"}]
            ]},
            {"when": "grep plain", "responses": [
                [{"tool": "run_command", "args": {"command": "grep -rn token src"}}],
                [{"text": "done"}]
            ]},
            {"when": "grep below", "responses": [
                [{"tool": "run_command", "args": {"command": "grep -rn token docs"}}],
                [{"text": "done"}]
            ]},
            {"when": "grep vendor", "responses": [
                [{"tool": "run_command", "args": {"command": "grep -R token vendor"}}],
                [{"text": "done"}]
            ]}
        ],
        "default": [[{"text": "Hello."}]]
    })
}

fn agent(data: &TempDir) -> AgentProcess {
    let mut a = AgentProcess::scripted(&script(), data.path());
    a.initialize();
    a
}

/// The options of one dialog: (optionId, kind, name).
type Options = Vec<(String, String, String)>;

fn options(r: &Value) -> Options {
    r["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let s = |k: &str| o[k].as_str().unwrap().to_string();
            (s("optionId"), s("kind"), s("name"))
        })
        .collect()
}

/// Runs a prompt answering its permission dialogs with `answers`, in order; a dialog beyond
/// them fails the test. Returns the transcript and the dialogs' options.
fn run(
    a: &mut AgentProcess,
    session: &str,
    prompt: &str,
    answers: &[&str],
) -> (Transcript, Vec<Options>) {
    let mut asked = vec![];
    let t = a.prompt(session, prompt, |r| {
        assert_eq!(r["method"], "session/request_permission", "{r}");
        let answer = answers
            .get(asked.len())
            .unwrap_or_else(|| panic!("no dialog expected for {prompt:?}: {r}"));
        asked.push(options(r));
        select(answer)
    });
    assert_eq!(t.response["result"]["stopReason"], "end_turn", "{prompt}");
    assert_eq!(asked.len(), answers.len(), "dialogs for {prompt:?}");
    (t, asked)
}

/// The final statuses of the turn's tool calls, and their last text.
fn tool_results(t: &Transcript, session: &str) -> Vec<(String, String)> {
    t.updates_for(session)
        .iter()
        .filter(|u| {
            u["sessionUpdate"] == "tool_call_update"
                && (u["status"] == "completed" || u["status"] == "failed")
        })
        .map(|u| {
            let text = u["content"][0]["content"]["text"]
                .as_str()
                .unwrap_or_default();
            (u["status"].as_str().unwrap().to_string(), text.to_string())
        })
        .collect()
}

#[test]
fn kept_rules_decide_later_calls_per_session_and_per_workspace() {
    let data = TempDir::new("rules-data");
    let ws = TempDir::new("rules-ws");
    let other_ws = TempDir::new("rules-ws2");
    let mut a = agent(&data);

    // 1. "For this session": the second command of the turn, and the next turn, ask nothing.
    let s1 = a.new_session(ws.path());
    let (t, asked) = run(&mut a, &s1, "echo twice", &["allow_session"]);
    let kinds: Vec<&str> = asked[0].iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "allow_once",
            "allow_always",
            "allow_always",
            "reject_once",
            "reject_always"
        ],
        "one allow_once, first; the lasting options are `always` kinds"
    );
    let names: Vec<&str> = asked[0].iter().map(|(_, _, n)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "Allow once",
            "Allow commands starting with `ls` for this session",
            "Always allow commands starting with `ls` in this workspace",
            "Reject",
            "Always reject commands starting with `ls` in this workspace"
        ]
    );
    let results = tool_results(&t, &s1);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results.iter().all(|(s, _)| s == "completed"), "{results:?}");
    run(&mut a, &s1, "echo once", &[]);

    // 2. Another session in the same folder is asked again; "always" keeps it for the folder.
    let s2 = a.new_session(ws.path());
    run(&mut a, &s2, "echo once", &["allow_workspace"]);
    // A compound command is never covered, and no rule is offered for it.
    let (_, asked) = run(&mut a, &s2, "compound", &["allow_once"]);
    let ids: Vec<&str> = asked[0].iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids, ["allow_once", "reject"], "once or not at all");
    // "Always reject" file changes under src/: this write fails and nothing is written.
    let (t, asked) = run(&mut a, &s2, "write-a", &["reject_workspace"]);
    assert!(
        asked[0]
            .iter()
            .any(|(_, _, n)| n == "Always reject file changes under `src/` in this workspace"),
        "{asked:?}"
    );
    assert_eq!(tool_results(&t, &s2)[0].0, "failed");
    assert!(!ws.path().join("src/a.txt").exists());

    // 3. A third session: both workspace rules decide without a dialog.
    let s3 = a.new_session(ws.path());
    run(&mut a, &s3, "echo once", &[]);
    let (t, _) = run(&mut a, &s3, "write-b", &[]);
    let (status, text) = &tool_results(&t, &s3)[0];
    assert_eq!(status, "failed");
    assert!(
        text.contains("always rejects file changes under `src/`") && text.contains("/permissions"),
        "{text}"
    );
    assert!(!ws.path().join("src/deep/b.txt").exists());
    let (t, _) = run(&mut a, &s3, "/permissions", &[]);
    let listed = t.text();
    assert!(
        listed.contains("1. allow commands starting with `ls`")
            && listed.contains("2. reject file changes under `src/`"),
        "{listed}"
    );
    // The session rule of s1 is not listed here.
    assert!(!listed.contains("For this session"), "{listed}");
    let (t, _) = run(&mut a, &s1, "/permissions", &[]);
    assert!(
        t.text()
            .contains("For this session:\n1. allow commands starting with `ls`"),
        "{}",
        t.text()
    );

    // 4. Rules stay in their workspace.
    let s5 = a.new_session(other_ws.path());
    run(&mut a, &s5, "echo once", &["allow_once"]);

    // 5. Workspace rules survive a restart, are stored by the host (not in the workspace),
    //    and revoking one brings its dialog back.
    drop(a);
    let stored: Value =
        serde_json::from_slice(&std::fs::read(data.path().join("permissions.json")).unwrap())
            .unwrap();
    let key = std::fs::canonicalize(ws.path()).unwrap();
    let kept = stored["workspaces"][key.to_str().unwrap()]
        .as_array()
        .unwrap_or_else(|| panic!("{stored}"));
    assert_eq!(kept.len(), 2, "{stored}");
    assert_eq!(kept[0]["decision"], "allow");
    assert_eq!(kept[0]["kind"], "command");
    assert_eq!(kept[0]["prefix"], "ls");
    assert_eq!(kept[1]["decision"], "deny");
    assert_eq!(kept[1]["path"], "src/**");
    assert!(!ws.path().join(".maka").exists());

    let mut b = agent(&data);
    let s4 = b.new_session(ws.path());
    run(&mut b, &s4, "echo once", &[]);
    let (t, _) = run(&mut b, &s4, "/permissions revoke 1", &[]);
    assert!(
        t.text()
            .contains("Revoked: always allow commands starting with `ls` in this workspace."),
        "{}",
        t.text()
    );
    let (t, _) = run(&mut b, &s4, "echo once", &["reject"]);
    assert_eq!(tool_results(&t, &s4)[0].0, "failed");
    let (t, _) = run(&mut b, &s4, "/permissions revoke 7", &[]);
    assert!(t.text().contains("There is no rule 7"), "{}", t.text());
}

/// "Always allow commands starting with `ls`" must not run a program planted in the workspace
/// behind characters `sh` does not split on (a vertical tab, a no-break space) or an
/// environment assignment: each asks, and a rejection leaves the planted program unrun.
#[test]
fn a_kept_rule_does_not_stretch_to_a_planted_program() {
    let data = TempDir::new("rules-planted-data");
    let ws = TempDir::new("rules-planted-ws");
    let x = ws.path().join("x");
    std::fs::create_dir_all(&x).unwrap();
    let marker = ws.path().join("pwned");
    for planted in ["run.sh", "ls", "ls\u{0b}x", "ls\u{a0}x"] {
        let path = x.join(planted);
        std::fs::write(&path, format!("#!/bin/sh\ntouch '{}'\n", marker.display())).unwrap();
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&path, perms).unwrap();
    }
    let mut a = agent(&data);
    let s = a.new_session(ws.path());
    run(&mut a, &s, "echo once", &["allow_workspace"]);
    run(&mut a, &s, "echo once", &[]);
    for prompt in ["planted vt", "planted nbsp", "planted path"] {
        let (t, asked) = run(&mut a, &s, prompt, &["reject"]);
        // No lasting rule is offered for a command the matcher cannot read with certainty.
        let ids: Vec<&str> = asked[0].iter().map(|(id, _, _)| id.as_str()).collect();
        assert_eq!(ids, ["allow_once", "reject"], "{prompt}");
        assert_eq!(tool_results(&t, &s)[0].0, "failed", "{prompt}");
        assert!(!marker.exists(), "{prompt}: the planted program ran");
    }
}

/// ACP `notice` (issue 26 item 2): when a kept rule, not a dialog, decides a call, a client that
/// advertises `session.notices` is told which rule did (info for an allowance, warning for a
/// refusal); a client that does not sees exactly what it saw before: no notice, no extra text.
#[test]
fn a_kept_rule_that_decides_a_call_is_told_to_clients_that_show_notices() {
    let data = TempDir::new("rules-notice-data");
    let ws = TempDir::new("rules-notice-ws");
    let mut plain = agent(&data);
    let s = plain.new_session(ws.path());
    run(&mut plain, &s, "echo once", &["allow_workspace"]);
    run(&mut plain, &s, "write-a", &["reject_workspace"]);
    let (t, _) = run(&mut plain, &s, "echo once", &[]);
    let without: Vec<Value> = t.updates_for(&s).into_iter().cloned().collect();
    assert!(
        !without.iter().any(|u| u["sessionUpdate"] == "notice"),
        "{without:#?}"
    );
    drop(plain);

    let mut a = AgentProcess::scripted(&script(), data.path());
    a.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"session": {"notices": {}}}}),
    );
    let s = a.new_session(ws.path());
    let notices = |t: &Transcript| -> Vec<(String, String)> {
        t.updates_for(&s)
            .iter()
            .filter(|u| u["sessionUpdate"] == "notice")
            .map(|u| {
                (
                    u["severity"].as_str().unwrap().to_string(),
                    u["title"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let (t, _) = run(&mut a, &s, "echo once", &[]);
    assert_eq!(
        notices(&t),
        [(
            "info".to_string(),
            "Allowed by your rule: commands starting with `ls` in this workspace.".to_string()
        )]
    );
    // Apart from the notice (and a new session's title), the turn shows what the other
    // client saw.
    let kinds = |us: Vec<&Value>| -> Vec<String> {
        us.iter()
            .map(|u| u["sessionUpdate"].as_str().unwrap().to_string())
            .filter(|k| k != "notice" && k != "session_info_update")
            .collect()
    };
    assert_eq!(kinds(t.updates_for(&s)), kinds(without.iter().collect()));
    let (t, _) = run(&mut a, &s, "write-a", &[]);
    assert_eq!(
        notices(&t),
        [(
            "warning".to_string(),
            "Refused by your rule: file changes under `src/` in this workspace.".to_string()
        )]
    );
    // A dialog the person answers is no rule's decision: no notice.
    let (t, _) = run(&mut a, &s, "compound", &["allow_once"]);
    assert!(notices(&t).is_empty(), "{:#?}", t.updates_for(&s));
}

/// Runs a prompt whose one dialog is answered `answer`: the transcript and the dialog's title.
fn run_one_dialog(
    a: &mut AgentProcess,
    session: &str,
    prompt: &str,
    answer: &str,
) -> (Transcript, Vec<String>) {
    let mut titles = vec![];
    let t = a.prompt(session, prompt, |r| {
        assert_eq!(r["method"], "session/request_permission", "{r}");
        titles.push(
            r["params"]["toolCall"]["title"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        select(answer)
    });
    assert_eq!(t.response["result"]["stopReason"], "end_turn", "{prompt}");
    (t, titles)
}

/// Issue 54 item 3: "always allow commands starting with `cat`" (or `grep`) covers reading the
/// workspace, never what a link in it leads to. `cat notes.txt` where `notes.txt` links to a
/// file outside, `grep -R` over a linked folder and `grep -r` over a folder with such a link
/// below it each get the dialog `read_file` gets for that path, naming where the link leads;
/// refused, nothing outside is read. The same commands inside the workspace run unasked.
#[test]
fn a_kept_rule_for_a_reading_program_asks_before_reading_through_a_link() {
    let data = TempDir::new("rules-link-data");
    let ws = TempDir::new("rules-link-ws");
    let out = TempDir::new("rules-link-outside");
    let secret = out.path().join("secret.txt");
    std::fs::write(&secret, "token OUTSIDE-SECRET\n").unwrap();
    let keys = out.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::write(keys.join("id.txt"), "token OUTSIDE-KEY\n").unwrap();
    std::fs::create_dir_all(ws.path().join("src")).unwrap();
    std::fs::write(ws.path().join("src/plain.txt"), "token inside\n").unwrap();
    std::os::unix::fs::symlink(&secret, ws.path().join("notes.txt")).unwrap();
    std::fs::create_dir_all(ws.path().join("docs")).unwrap();
    std::fs::write(ws.path().join("docs/guide.md"), "token guide\n").unwrap();
    std::os::unix::fs::symlink(&keys, ws.path().join("docs/more")).unwrap();
    std::os::unix::fs::symlink(&keys, ws.path().join("vendor")).unwrap();

    let mut a = agent(&data);
    let s = a.new_session(ws.path());
    run(&mut a, &s, "cat plain", &["allow_workspace"]);
    run(&mut a, &s, "grep plain", &["allow_workspace"]);
    // Inside the workspace the kept rules decide: no dialog.
    for (prompt, shown) in [
        ("cat plain", "token inside"),
        ("grep plain", "src/plain.txt:1:token inside"),
    ] {
        let (t, _) = run(&mut a, &s, prompt, &[]);
        let results = tool_results(&t, &s);
        assert_eq!(results[0].0, "completed", "{prompt}: {results:?}");
        assert!(results[0].1.contains(shown), "{prompt}: {results:?}");
    }
    // Through a link: the boundary dialog, naming the outside path; refused, nothing read.
    for (prompt, outside) in [
        ("cat link", &secret),
        ("grep vendor", &keys),
        ("grep below", &keys),
    ] {
        let (t, titles) = run_one_dialog(&mut a, &s, prompt, "reject");
        assert_eq!(
            titles,
            [format!(
                "Allow access outside the project: {} (read)",
                outside.display()
            )],
            "{prompt}"
        );
        let results = tool_results(&t, &s);
        assert_eq!(results[0].0, "failed", "{prompt}: {results:?}");
        assert!(
            results[0]
                .1
                .contains("Access outside the session's folders was denied"),
            "{prompt}: {results:?}"
        );
        let seen = serde_json::to_string(&t.updates_for(&s)).unwrap();
        assert!(!seen.contains("OUTSIDE-"), "{prompt}: read outside: {seen}");
    }
    // Allowed for the turn, as `read_file`'s boundary is: then it runs.
    let (t, _) = run_one_dialog(&mut a, &s, "grep vendor", "allow_once");
    let results = tool_results(&t, &s);
    assert_eq!(results[0].0, "completed", "{results:?}");
    assert!(results[0].1.contains("OUTSIDE-KEY"), "{results:?}");
}

/// Issue 54 item 3, review: "allow for this turn" is a rule too — it gets the boundary
/// `read_file` gets: after one command allowed for the turn, `cat notes.txt` through a link to
/// a file outside asks "Allow access outside the project"; refused, nothing outside is read.
/// (Bypass mode asks nothing about commands, as before.)
#[test]
fn a_command_allowed_for_the_turn_asks_before_reading_through_a_link() {
    use support::host::HostProcess;
    let script = json!({
        "rules": [
            {"when": "plain then link", "responses": [
                [{"tool": "run_command", "args": {"command": "cat src/plain.txt"}}],
                [{"tool": "run_command", "args": {"command": "cat notes.txt"}}],
                [{"text": "done"}]
            ]},
            {"when": "link", "responses": [
                [{"tool": "run_command", "args": {"command": "cat notes.txt"}}],
                [{"text": "done"}]
            ]}
        ],
        "default": [[{"text": "Hello."}]]
    });
    let data = TempDir::new("turn-link-data");
    let ws = TempDir::new("turn-link-ws");
    let out = TempDir::new("turn-link-outside");
    let secret = out.path().join("secret.txt");
    std::fs::write(&secret, "OUTSIDE-SECRET\n").unwrap();
    std::fs::create_dir_all(ws.path().join("src")).unwrap();
    std::fs::write(ws.path().join("src/plain.txt"), "INSIDE-PLAIN\n").unwrap();
    std::os::unix::fs::symlink(&secret, ws.path().join("notes.txt")).unwrap();
    let host = HostProcess::start(data.path(), Some(&script));
    let answer = |session: &str, frame: &Value, answer: Value| {
        host.ok(
            "interaction.answer",
            json!({"sessionId": session,
                   "interactionId": frame["interaction"]["interactionId"],
                   "answer": answer}),
        );
    };
    let asks = |f: &Value| f["kind"] == "interaction_request" || f["kind"] == "turn_terminal";

    // Ask mode: the first command allowed for the rest of the turn.
    host.create_session("a", ws.path(), "ask");
    host.start_turn("a", "t_1", "plain then link");
    let frames = host.follow("a", 0, asks);
    let first = frames.last().unwrap();
    assert_eq!(
        first["interaction"]["request"]["review"], "command",
        "{first}"
    );
    answer(
        "a",
        first,
        json!({"kind": "permission", "decision": "allow", "rememberForTurn": true}),
    );
    let frames = host.follow("a", first["seq"].as_u64().unwrap(), asks);
    let boundary = frames.last().unwrap();
    assert_eq!(
        boundary["interaction"]["request"]["kind"], "sandbox_boundary",
        "the link is asked about, not read: {frames:#?}"
    );
    assert_eq!(
        boundary["interaction"]["request"]["paths"][0]["path"],
        secret.display().to_string()
    );
    answer(
        "a",
        boundary,
        json!({"kind": "sandbox_boundary", "decision": "deny"}),
    );
    let rest = host.until_terminal("a", boundary["seq"].as_u64().unwrap());
    let seen = serde_json::to_string(&[frames, rest]).unwrap();
    assert!(
        seen.contains("INSIDE-PLAIN"),
        "the allowed command ran: {seen}"
    );
    assert!(!seen.contains("OUTSIDE-"), "read outside: {seen}");
}
