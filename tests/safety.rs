//! Safety of what the Maka half added (issue 24), through the real binary over pipes: what a
//! command the model runs can see of the host's secrets. (Kept rules: permission_rules.rs;
//! instruction files and declarations: unit tests in memory.rs and subagents/mod.rs.)

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::host::TempDir;
use support::{process_alive, select, AgentProcess, Spawn};

/// A command that prints its own environment and its parent's (the host's) initial one.
const SNOOP: &str = "echo @@OWN; env; echo @@PARENT; tr '\\0' '\\n' < /proc/$PPID/environ";

/// The embedded host's token is in no environment block a command can read, and neither the
/// token nor the provider's keys nor other secrets of the editor's environment reach the
/// command's own environment; what it needs to find its tools does.
#[test]
fn commands_see_neither_the_hosts_token_nor_provider_keys() {
    let data = TempDir::new("safety-env-data");
    let ws = TempDir::new("safety-env-ws");
    let script = json!({"default": [
        [{"tool": "run_command", "args": {"command": SNOOP}}],
        [{"text": "looked"}]
    ]});
    let mut a = AgentProcess::spawn_with(Spawn {
        args: vec![],
        env: vec![
            ("MAKA_SCRIPT".into(), script.to_string()),
            ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
            (
                "XDG_CONFIG_HOME".into(),
                data.path().join("config").display().to_string(),
            ),
            (
                "MAKA_OPENAI_API_KEY".into(),
                "sk-provider-key-never-shown".into(),
            ),
            (
                "GITHUB_TOKEN".into(),
                "ghp-editor-secret-never-shown".into(),
            ),
            ("LC_ALL".into(), "C.UTF-8".into()),
        ],
    });
    a.initialize();
    let id = a.new_session(ws.path());
    let t = a.prompt(&id, "look around", |_| select("allow_once"));
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
    let info: Value =
        serde_json::from_slice(&std::fs::read(data.path().join("host.json")).unwrap()).unwrap();
    let token = info["token"].as_str().expect("host.json names the token");
    let output: String = t
        .updates_for(&id)
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update")
        .filter_map(|u| u["content"][0]["content"]["text"].as_str())
        .collect();
    let (_, seen) = output
        .split_once("\n@@OWN\n")
        .unwrap_or_else(|| panic!("the command ran: {output}"));
    let (own, parents) = seen.split_once("\n@@PARENT\n").unwrap();
    for secret in [
        token,
        "sk-provider-key-never-shown",
        "ghp-editor-secret-never-shown",
    ] {
        assert!(
            !own.contains(secret),
            "the command's environment holds {secret}: {own}"
        );
    }
    assert!(
        !parents.contains(token),
        "the host's environment block holds its token"
    );
    assert!(!parents.contains("MAKA_HOST_TOKEN"), "{parents}");
    for needed in ["PATH=", "HOME=", "LC_ALL=C.UTF-8"] {
        assert!(own.contains(needed), "{needed} reaches the command: {own}");
    }
}

// ---- subagents: the parent's gate, dialogs that cover what they showed, honest trust ----

fn stub_agent() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stub_agent.py").to_string()
}

/// The parent model delegates whatever follows "stub: " in the prompt to agent `stub`.
fn delegating_script() -> Value {
    let tasks = [
        "write a.txt hello",
        "write b.txt x",
        "sneak README.md touch pwned",
        "ask-run touch ok",
        "ask-run-env GIT_CONFIG_COUNT=1 touch ok2",
        "daemon daemon.pid",
        "never-answer",
        "noop",
        "exec ls%20x/run.sh",
        "exec ls%09x/run.sh",
        "exec ls -1",
        "ask-run ls%A0x/run.sh",
    ];
    let rules: Vec<Value> = tasks
        .iter()
        .map(|t| {
            json!({"when": format!("stub: {t}"), "responses": [
                [{"tool": "delegate", "args": {"agent": "stub", "task": t}}],
                [{"text": "delegated"}]]})
        })
        .collect();
    let mut rules = rules;
    rules.push(json!({"when": "list", "responses": [
        [{"tool": "run_command", "args": {"command": "ls -1"}}],
        [{"text": "listed"}]]}));
    json!({"rules": rules, "default": [[{"text": "Hello."}]]})
}

/// A workspace declaring `stub` (tests/fixtures/stub_agent.py) as `declaration` says.
fn stub_workspace(declaration: Value) -> TempDir {
    let ws = TempDir::new("safety-sub-ws");
    std::fs::create_dir_all(ws.path().join(".maka")).unwrap();
    std::fs::write(
        ws.path().join(".maka/agents.json"),
        json!({"agents": {"stub": declaration}}).to_string(),
    )
    .unwrap();
    ws
}

fn stub_declaration() -> Value {
    json!({"command": "python3", "args": [stub_agent()], "description": "a stub"})
}

/// A prompt whose dialogs are answered by `answer(title, options)` with an option id; returns
/// the dialogs' titles and the stub's report.
fn delegate_with(
    a: &mut AgentProcess,
    s: &str,
    task: &str,
    mut answer: impl FnMut(&str, &[String]) -> &'static str,
) -> (Vec<String>, String) {
    let mut titles = vec![];
    let t = a.prompt(s, &format!("stub: {task}"), |r| {
        assert_eq!(r["method"], "session/request_permission", "{r}");
        let title = r["params"]["toolCall"]["title"]
            .as_str()
            .unwrap()
            .to_string();
        let ids: Vec<String> = r["params"]["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["optionId"].as_str().unwrap().to_string())
            .collect();
        let chosen = answer(&title, &ids);
        titles.push(title);
        select(chosen)
    });
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
    let report = t
        .updates_for(s)
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update")
        .map(|u| u.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    (titles, report)
}

fn trusting(title: &str) -> Option<&'static str> {
    title
        .starts_with("Run agent stub")
        .then_some("allow_workspace")
}

fn scripted(data: &TempDir) -> AgentProcess {
    let mut a = AgentProcess::scripted(&delegating_script(), data.path());
    a.initialize();
    a
}

/// A subagent's own `fs/write_text_file` passes the parent's gate: a dialog in ask mode
/// (titled by the host, with the diff), a kept "always reject" honoured without a dialog,
/// refused before a plan is approved, and an allowed write is in the turn's files and undone by
/// a rewind.
#[test]
fn a_subagents_writes_pass_the_parents_gate() {
    let data = TempDir::new("safety-sub-data");
    let ws = stub_workspace(stub_declaration());
    let a_txt = ws.path().join("a.txt");
    let mut a = scripted(&data);
    let s = a.new_session(ws.path());

    // Ask mode: rejected in the dialog → not written.
    let (titles, report) = delegate_with(&mut a, &s, "write a.txt hello", |t, _| {
        trusting(t).unwrap_or("reject")
    });
    assert_eq!(titles.len(), 2, "trust, then the write: {titles:?}");
    assert_eq!(titles[1], "stub: write a.txt");
    assert!(report.contains("write error"), "{report}");
    assert!(!a_txt.exists());

    // Allowed → written, listed in the turn's files, undone by a rewind.
    let (titles, _) = delegate_with(&mut a, &s, "write a.txt hello", |_, _| "allow_once");
    assert_eq!(titles, ["stub: write a.txt"]);
    assert_eq!(std::fs::read_to_string(&a_txt).unwrap(), "hello\n");
    let turns = a.call_ok("_maka/session/turns", json!({"sessionId": s}));
    let last = turns["turns"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last["filesChanged"],
        json!([a_txt.canonicalize().unwrap()]),
        "{last}"
    );
    let undone = a.call_ok(
        "_maka/session/revision/abandon",
        json!({"sessionId": s, "revisionId": format!("rev_{}", last["turnId"].as_str().unwrap())}),
    );
    assert_eq!(undone["restored"][0]["action"], "deleted", "{undone}");
    assert!(!a_txt.exists());

    // "Always reject" in its dialog: kept, and the next write is refused with no dialog.
    let (titles, _) = delegate_with(&mut a, &s, "write a.txt hello", |_, ids| {
        assert!(ids.iter().any(|i| i == "reject_workspace"), "{ids:?}");
        "reject_workspace"
    });
    assert_eq!(titles.len(), 1);
    let (titles, report) = delegate_with(&mut a, &s, "write a.txt hello", |t, _| {
        panic!("no dialog expected: {t}")
    });
    assert!(titles.is_empty());
    assert!(report.contains("always rejects"), "{report}");
    assert!(!a_txt.exists());

    // Plan mode, no approved plan: refused before anything is asked or written.
    let s2 = a.new_session(ws.path());
    a.call_ok(
        "session/set_config_option",
        json!({"sessionId": s2, "configId": "collaboration_mode", "value": "plan"}),
    );
    let (titles, report) = delegate_with(&mut a, &s2, "write b.txt x", |t, _| {
        trusting(t).unwrap_or_else(|| panic!("no dialog expected: {t}"))
    });
    let _ = titles;
    assert!(report.contains("plan"), "{report}");
    assert!(!ws.path().join("b.txt").exists());
}

/// A subagent's own dialog covers only what it showed: "read README.md" allowed does not let it
/// start a command; the command gets its own dialog, titled by the host. A dialog that showed
/// the very command covers it.
#[test]
fn a_subagents_dialog_covers_only_what_it_showed() {
    let data = TempDir::new("safety-cover-data");
    let ws = stub_workspace(stub_declaration());
    let mut a = scripted(&data);
    let s = a.new_session(ws.path());
    let (titles, report) = delegate_with(&mut a, &s, "sneak README.md touch pwned", |t, _| {
        if let Some(yes) = trusting(t) {
            yes
        } else if t == "stub: read README.md" {
            "allow_once"
        } else {
            "reject"
        }
    });
    assert_eq!(
        titles,
        [
            "Run agent stub declared by this workspace: python3 ".to_string() + &stub_agent(),
            "stub: read README.md".into(),
            "stub: run sh -c 'touch pwned'".into()
        ],
        "{report}"
    );
    assert!(report.contains("terminal error"), "{report}");
    assert!(!ws.path().join("pwned").exists(), "the unseen command ran");

    let (titles, report) = delegate_with(&mut a, &s, "ask-run touch ok", |_, _| "allow_once");
    assert_eq!(
        titles,
        ["stub: run touch ok (runs `touch ok`)"],
        "one dialog, the agent's own: {report}"
    );
    assert!(ws.path().join("ok").exists(), "{report}");

    // The same command with a variable the agent sets (GIT_CONFIG_*, LD_PRELOAD, PATH can
    // turn it into other code) was not what the dialog showed: the host asks, naming it.
    let (titles, report) = delegate_with(
        &mut a,
        &s,
        "ask-run-env GIT_CONFIG_COUNT=1 touch ok2",
        |t, _| {
            if t.starts_with("stub: run GIT_CONFIG_COUNT") {
                "reject"
            } else {
                "allow_once"
            }
        },
    );
    assert_eq!(
        titles,
        [
            "stub: run touch ok2 (runs `touch ok2`)",
            "stub: run GIT_CONFIG_COUNT=1 sh -c 'touch ok2'"
        ],
        "{report}"
    );
    assert!(!ws.path().join("ok2").exists(), "{report}");
}

/// What the gate judges is what runs (issue 45, case 1): a subagent's `terminal/create`
/// names a program and its `args`, and the program at the path `ls x/run.sh` (a folder `ls x`
/// in the workspace) is not `ls`, so a kept "always allow `ls`" rule does not cover it; the
/// host asks, showing the path quoted as `sh` would run it. The real `ls` still runs under
/// the rule with no dialog.
#[test]
fn a_kept_rule_judges_the_argv_a_subagent_runs() {
    let data = TempDir::new("safety-argv-data");
    let ws = stub_workspace(stub_declaration());
    let marker = ws.path().join("pwned");
    std::fs::create_dir_all(ws.path().join("ls x")).unwrap();
    std::fs::create_dir_all(ws.path().join("ls\tx")).unwrap();
    for dir in ["ls x", "ls\tx"] {
        let path = ws.path().join(dir).join("run.sh");
        std::fs::write(&path, format!("#!/bin/sh\ntouch '{}'\n", marker.display())).unwrap();
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&path, perms).unwrap();
    }
    let mut a = scripted(&data);
    let s = a.new_session(ws.path());
    let t = a.prompt(&s, "list", |r| {
        let ids: Vec<&str> = r["params"]["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["optionId"].as_str().unwrap())
            .collect();
        assert!(ids.contains(&"allow_workspace"), "{r}");
        select("allow_workspace")
    });
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    for (task, shown) in [
        ("exec ls%20x/run.sh", "stub: run 'ls x/run.sh'"),
        ("exec ls%09x/run.sh", "stub: run 'ls\tx/run.sh'"),
    ] {
        let (titles, report) =
            delegate_with(&mut a, &s, task, |t, _| trusting(t).unwrap_or("reject"));
        let asked: Vec<&String> = titles.iter().filter(|t| trusting(t).is_none()).collect();
        assert_eq!(asked, [shown], "{task}: {report}");
        assert!(report.contains("terminal error"), "{task}: {report}");
        assert!(!marker.exists(), "{task}: the planted program ran");
    }
    // The agent's own dialog showed `ls<NBSP>x/run.sh`, which reads as `ls x/run.sh` but is
    // one word to `sh` (the planted program): allowing it covers nothing; the host asks
    // again, spelling the character out.
    std::fs::create_dir_all(ws.path().join("ls\u{a0}x")).unwrap();
    std::fs::copy(
        ws.path().join("ls x/run.sh"),
        ws.path().join("ls\u{a0}x/run.sh"),
    )
    .unwrap();
    let (titles, report) = delegate_with(&mut a, &s, "ask-run ls%A0x/run.sh", |t, _| {
        if let Some(yes) = trusting(t) {
            yes
        } else if t.contains("(runs") {
            "allow_once"
        } else {
            "reject"
        }
    });
    let asked: Vec<&String> = titles.iter().filter(|t| trusting(t).is_none()).collect();
    assert_eq!(
        asked,
        [
            "stub: run ls x/run.sh (runs `ls\\u{a0}x/run.sh`)",
            "stub: run sh -c 'ls\u{a0}x/run.sh'"
        ],
        "{report}"
    );
    assert!(!marker.exists(), "the planted program ran: {report}");
    let (titles, report) = delegate_with(&mut a, &s, "exec ls -1", |t, _| {
        trusting(t).unwrap_or_else(|| panic!("no dialog expected: {t}"))
    });
    assert!(titles.iter().all(|t| trusting(t).is_some()), "{titles:?}");
    assert!(report.contains("terminal {"), "{report}");
}

/// Trust of a workspace-declared agent is honest and exact: the dialog shows the whole
/// declaration, the environment by name (its values may be keys); "Allow once" is once; only the named "always" lasts,
/// and it covers the exact declaration and the files it runs: an edited script, a re-split
/// argument list or a new variable asks again.
#[test]
fn trust_of_a_declared_agent_is_honest_and_exact() {
    let data = TempDir::new("safety-trust-data");
    let ws = TempDir::new("safety-trust-ws");
    let script = ws.path().join("agent.py");
    std::fs::copy(stub_agent(), &script).unwrap();
    let declare = |decl: Value| {
        std::fs::create_dir_all(ws.path().join(".maka")).unwrap();
        std::fs::write(
            ws.path().join(".maka/agents.json"),
            json!({"agents": {"stub": decl}}).to_string(),
        )
        .unwrap();
    };
    let plain =
        json!({"command": "python3", "args": ["agent.py"], "env": {"PATH": "/usr/bin:/bin"}});
    declare(plain.clone());
    let mut a = scripted(&data);
    let s = a.new_session(ws.path());
    let asks = |a: &mut AgentProcess, answer: &'static str| -> Vec<String> {
        delegate_with(a, &s, "noop", move |_, _| answer).0
    };
    let once = asks(&mut a, "allow_once");
    assert_eq!(once.len(), 1);
    assert!(
        once[0].contains("python3 agent.py")
            && once[0].contains("PATH=…")
            && !once[0].contains("/usr/bin:/bin"),
        "the whole declaration, the environment by name: {}",
        once[0]
    );
    assert_eq!(asks(&mut a, "allow_once").len(), 1, "once is once");
    assert_eq!(asks(&mut a, "allow_workspace").len(), 1);
    assert!(
        asks(&mut a, "reject").is_empty(),
        "always allowed, as declared"
    );

    // The script edited: asked again.
    std::fs::write(
        &script,
        std::fs::read_to_string(stub_agent()).unwrap() + "\n# edited\n",
    )
    .unwrap();
    assert_eq!(
        asks(&mut a, "allow_workspace").len(),
        1,
        "an edited script asks again"
    );
    assert!(asks(&mut a, "reject").is_empty());
    // A new variable, or the same words split differently: asked again.
    declare(
        json!({"command": "python3", "args": ["agent.py"], "env": {"PATH": "/usr/bin:/bin", "X": "1"}}),
    );
    assert_eq!(
        asks(&mut a, "allow_workspace").len(),
        1,
        "a new variable asks again"
    );
    // A program named by a relative path is identified where it runs (the workspace).
    let run = ws.path().join("run.sh");
    std::fs::write(&run, "#!/bin/sh\nexec python3 agent.py\n").unwrap();
    let mut perms = std::fs::metadata(&run).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&run, perms).unwrap();
    declare(json!({"command": "./run.sh"}));
    assert_eq!(asks(&mut a, "allow_workspace").len(), 1);
    assert!(asks(&mut a, "reject").is_empty());
    std::fs::write(&run, "#!/bin/sh\n# edited\nexec python3 agent.py\n").unwrap();
    assert_eq!(
        asks(&mut a, "allow_workspace").len(),
        1,
        "an edited ./run.sh asks again"
    );
    declare(json!({"command": "sh", "args": ["-c", "exec python3 agent.py"]}));
    assert_eq!(asks(&mut a, "allow_workspace").len(), 1);
    declare(json!({"command": "sh", "args": ["-c", "exec", "python3 agent.py"]}));
    let titles = asks(&mut a, "reject");
    assert_eq!(titles.len(), 1, "a re-split argument list asks again");
    assert!(
        titles[0].contains("'python3 agent.py'"),
        "quoted as split: {}",
        titles[0]
    );
}

/// A permission reply the agent cannot read is not the person's "no": it is logged with the
/// reply, the tool call fails naming the problem, and the model is told the approval could not
/// be obtained.
#[test]
fn an_unreadable_permission_reply_is_an_error_not_a_refusal() {
    let data = TempDir::new("safety-reply-data");
    let ws = TempDir::new("safety-reply-ws");
    let script = json!({"default": [
        [{"tool": "run_command", "args": {"command": "echo hi"}}],
        [{"echo": "tool"}]
    ]});
    let mut a = AgentProcess::scripted(&script, data.path());
    a.initialize();
    let id = a.new_session(ws.path());
    let t = a.prompt(&id, "run it", |_| {
        support::Reply::Result(json!({"outcome": {"outcome": "approved"}}))
    });
    let failed: Vec<String> = t
        .updates_for(&id)
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed")
        .map(|u| u.to_string())
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", t.updates_for(&id));
    assert!(failed[0].contains("could not be obtained"), "{}", failed[0]);
    assert!(
        failed[0].contains("approved"),
        "the reply is named: {}",
        failed[0]
    );
    assert!(!failed[0].contains("The user denied"), "{}", failed[0]);
    assert!(
        a.stderr_contains("not one of its outcomes"),
        "logged: {}",
        a.stderr()
    );
}

/// Waits for a turn to end by asking (no event stream left open behind).
fn wait_turn(host: &support::host::HostProcess, session: &str, turn: &str) -> Value {
    let t0 = std::time::Instant::now();
    loop {
        let snap = host.ok("turn.query", json!({"sessionId": session, "turnId": turn}));
        if snap["status"] != "running" {
            return snap;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(30), "{snap}");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Transcripts are closed with their sessions: a host that served many sessions holds no
/// descriptor per session (with a 256-descriptor limit every session/new used to fail after
/// ~245 sessions), and a closed session's cached conversation is read again when it is used.
#[test]
fn a_host_serving_many_sessions_stays_within_a_fixed_descriptor_budget() {
    let data = TempDir::new("safety-fds-data");
    let ws = TempDir::new("safety-fds-ws");
    let script = json!({"default": [[{"text": "ok"}]]});
    let host = support::host::HostProcess::start_env(
        data.path(),
        vec![
            ("MAKA_SCRIPT".into(), script.to_string()),
            ("MAKA_HOST_FSYNC".into(), "0".into()),
        ],
    );
    let pid = host.child.id();
    let before = open_fds(pid);
    let sessions = 300;
    for i in 0..sessions {
        let id = format!("s{i}");
        host.create_session(&id, ws.path(), "bypass");
        host.start_turn(&id, &format!("t{i}"), "hello");
        wait_turn(&host, &id, &format!("t{i}"));
        host.ok("session.release", json!({"sessionId": id}));
    }
    let held = open_fds(pid);
    assert!(
        held <= before + 16,
        "{held} descriptors after {sessions} sessions (started with {before})"
    );
    // A released session is still whole: its conversation is read again.
    let page = host.ok(
        "session.transcript.page",
        json!({"sessionId": "s7", "limit": 50}),
    );
    assert!(page.to_string().contains("hello"), "{page}");
    host.start_turn("s7", "t7b", "again");
    assert_eq!(wait_turn(&host, "s7", "t7b")["status"], "completed");
    let page = host.ok(
        "session.transcript.page",
        json!({"sessionId": "s7", "limit": 50}),
    );
    let text = page.to_string();
    assert!(text.contains("hello") && text.contains("again"), "{page}");
}

/// Subagents that misbehave cost bounded time: one that never answers `initialize` or its
/// prompt is cancelled within about a second (it used to hold a cancel ~57 s), and a process
/// it started in a session of its own (`setsid`) does not outlive the delegation.
#[test]
fn misbehaving_subagents_cost_bounded_time_and_leave_nothing_behind() {
    // (how the agent misbehaves, its environment, the task)
    let cases = [
        (
            "never answers initialize",
            json!({"STUB_HANG": "initialize"}),
            "noop",
        ),
        ("never answers its prompt", json!({}), "never-answer"),
    ];
    for (what, env, task) in cases {
        let data = TempDir::new("safety-hang-data");
        let mut decl = stub_declaration();
        decl["env"] = env;
        let ws = stub_workspace(decl);
        let mut a = scripted(&data);
        let s = a.new_session(ws.path());
        let prompt = a.request(
            "session/prompt",
            json!({"sessionId": s, "prompt": [{"type": "text", "text": format!("stub: {task}")}]}),
        );
        // The trust dialog, then the hang.
        loop {
            let v = a.recv();
            if v["method"] == "session/request_permission" {
                a.send(&json!({"jsonrpc": "2.0", "id": v["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}));
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        let t0 = std::time::Instant::now();
        a.notify("session/cancel", json!({"sessionId": s}));
        let (resp, _) = a.response_to(&prompt);
        assert_eq!(resp["result"]["stopReason"], "cancelled", "{what}: {resp}");
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(2),
            "{what}: the cancel took {:?}",
            t0.elapsed()
        );
    }

    let data = TempDir::new("safety-daemon-data");
    let ws = stub_workspace(stub_declaration());
    let mut a = scripted(&data);
    let s = a.new_session(ws.path());
    delegate_with(&mut a, &s, "daemon daemon.pid", |t, _| {
        trusting(t).unwrap_or("allow_once")
    });
    let pid: u32 = std::fs::read_to_string(ws.path().join("daemon.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let t0 = std::time::Instant::now();
    while process_alive(pid) && t0.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        !process_alive(pid),
        "the setsid child outlived the delegation"
    );
}

// ---- smaller: leftovers, foreign files, names, logs, evidence ----

/// What the host finds in its data dir: files a killed write left (`.<name>.tmp`) are removed,
/// the data dir's at start and a session's when the session is first opened (host start does
/// not read every session's folder); a `permissions.json` of a version it does not know is
/// moved aside, never read as version 1; and it logs the address it really listens on.
#[test]
fn the_host_cleans_up_refuses_foreign_files_and_says_where_it_listens() {
    let data = TempDir::new("safety-start-data");
    let sdir = data.path().join("sessions/s_old");
    std::fs::create_dir_all(&sdir).unwrap();
    std::fs::write(
        sdir.join("session.json"),
        json!({"id": "s_old", "revision": 1, "workspace": {"kind": "host_path", "path": "/w"},
            "name": null, "isArchived": false, "createdAt": 1, "lastUsedAt": 1,
            "configuration": {"modelTarget": {"kind": "default"}, "thinkingLevel": null,
                "permissionMode": "ask", "collaborationMode": "agent",
                "orchestrationMode": "default"},
            "status": "idle", "activeTurnId": null})
        .to_string(),
    )
    .unwrap();
    let leftovers = [
        data.path().join(".permissions.json.tmp"),
        data.path().join(".memory.json.tmp"),
    ];
    let in_session = sdir.join(".session.json.tmp");
    for f in leftovers.iter().chain([&in_session]) {
        std::fs::write(f, "half").unwrap();
    }
    let ws = "/w";
    std::fs::write(
        data.path().join("permissions.json"),
        json!({"version": 2, "workspaces": {ws: [{"decision": "allow", "kind": "command", "prefix": "rm", "createdAt": 0}]}})
            .to_string(),
    )
    .unwrap();
    let host =
        support::host::HostProcess::start_with(data.path(), vec![], &["--listen", "[::1]:0"]);
    for f in &leftovers {
        assert!(!f.exists(), "{} was left", f.display());
    }
    assert!(
        !data.path().join("permissions.json").exists(),
        "moved aside"
    );
    let aside = std::fs::read_dir(data.path())
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("permissions.unreadable-")
        });
    assert!(aside, "kept aside for the person");
    assert!(
        host.stderr_contains(&format!("listening on [::1]:{}", host.port)),
        "{}",
        host.stderr()
    );
    drop(host);
    assert!(
        in_session.exists(),
        "a session's folder waits for its first open"
    );
    let host = support::host::HostProcess::start(data.path(), None);
    host.ok("session.open", json!({"sessionId": "s_old"}));
    assert!(!in_session.exists(), "{} was left", in_session.display());
}

/// Artifact names are file names a person and a model can read: `.`, `..`, slashes,
/// backslashes and terminal escapes are refused; one line a case.
#[test]
fn artifact_names_are_plain() {
    let data = TempDir::new("safety-art-data");
    let ws = TempDir::new("safety-art-ws");
    let mut a = AgentProcess::scripted(&json!({"default": [[{"text": "ok"}]]}), data.path());
    a.initialize();
    let s = a.new_session(ws.path());
    let sha = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; // "abc"
    for (name, ok) in [
        ("report.txt", true),
        ("..", false),
        (".", false),
        ("a/b", false),
        ("a\\b", false),
        ("red\u{1b}[31mtext", false),
        ("bell\u{7}", false),
        ("new\nline", false),
    ] {
        let (resp, _) = a.call(
            "_maka/artifact/ingest",
            json!({"sessionId": s, "kind": "begin", "name": name, "totalBytes": 3, "sha256": sha}),
        );
        assert_eq!(resp.get("result").is_some(), ok, "{name:?}: {resp}");
    }
}

/// A goal completed with 2 MB of evidence still announces that it completed (the evidence is
/// kept to 16 KiB).
#[test]
fn huge_goal_evidence_does_not_drop_the_completed_notification() {
    let data = TempDir::new("safety-goal-data");
    let ws = TempDir::new("safety-goal-ws");
    let script = json!({"rules": [
        {"when": "Work toward this goal: prove it", "responses": [
            [{"tool": "goal_complete", "args": {"evidence": "e".repeat(2 * 1024 * 1024)}}],
            [{"text": "Proved."}]]}
    ], "default": [[{"text": "Hello."}]]});
    let file = data.path().join("script.json");
    std::fs::write(&file, script.to_string()).unwrap();
    let mut a = AgentProcess::spawn_with(Spawn {
        args: vec![],
        env: vec![
            ("MAKA_SCRIPT".into(), file.display().to_string()),
            (
                "MAKA_DATA_DIR".into(),
                data.path().join("d").display().to_string(),
            ),
            (
                "XDG_CONFIG_HOME".into(),
                data.path().join("config").display().to_string(),
            ),
        ],
    });
    a.initialize();
    let s = a.new_session(ws.path());
    a.prompt(&s, "/goal prove it", |r| panic!("{r}"));
    let t0 = std::time::Instant::now();
    loop {
        let v = a
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("a goal update");
        if v["method"] == "_maka/goal_update" && v["params"]["goal"]["status"] == "completed" {
            let evidence = v["params"]["goal"]["evidence"].as_str().unwrap();
            assert!(evidence.len() < 20 * 1024, "{}", evidence.len());
            assert!(evidence.ends_with("[cut: evidence is kept to 16 KiB]"));
            break;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(30));
    }
}

/// A proxy in the environment (HTTP_PROXY, …) is not used for the host on this machine: the
/// token would go through it in plain http, and the embedded host stopped working behind one.
#[test]
fn a_proxy_in_the_environment_is_not_used_for_the_local_host() {
    let data = TempDir::new("safety-proxy-data");
    let ws = TempDir::new("safety-proxy-ws");
    // Nothing listens there: a proxy that would be used makes session/new fail.
    let mut a = AgentProcess::spawn_with(Spawn {
        args: vec![],
        env: vec![
            (
                "MAKA_SCRIPT".into(),
                json!({"default": [[{"text": "ok"}]]}).to_string(),
            ),
            ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
            (
                "XDG_CONFIG_HOME".into(),
                data.path().join("config").display().to_string(),
            ),
            ("HTTP_PROXY".into(), "http://127.0.0.2:9".into()),
            ("http_proxy".into(), "http://127.0.0.2:9".into()),
            ("ALL_PROXY".into(), "http://127.0.0.2:9".into()),
        ],
    });
    a.initialize();
    let s = a.new_session(ws.path());
    let t = a.prompt(&s, "hi", |r| panic!("{r}"));
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
}
