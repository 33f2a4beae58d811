//! What survives damage and sudden death: transcripts with unreadable lines in the middle, and
//! hosts killed while they work. The real `maka-acp host` over HTTP.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::path::Path;
use support::host::{HostProcess, TempDir};

fn script() -> Value {
    json!({"default": [[{"text": "Sure, done."}]]})
}

fn all_items(host: &HostProcess, session: &str) -> Vec<Value> {
    let mut out = vec![];
    let mut cursor = Value::Null;
    loop {
        let page = host.ok(
            "session.transcript.page",
            json!({"sessionId": session, "cursor": cursor, "limit": 256}),
        );
        out.extend(page["items"].as_array().unwrap().iter().cloned());
        cursor = page["nextCursor"].clone();
        if cursor.is_null() {
            return out;
        }
    }
}

fn transcript_path(data: &Path, session: &str) -> std::path::PathBuf {
    data.join("sessions").join(session).join("transcript.jsonl")
}

/// Issue 13 §5: a flipped byte, a line of NULs or an item type from a newer version in the
/// middle of a 20-line transcript cut it to 7 lines for good. Now each unreadable line is moved
/// aside with its position, reported, and every readable item after it survives.
#[test]
fn unreadable_lines_in_the_middle_are_quarantined_and_the_rest_survives() {
    let data = TempDir::new("dur-q");
    let ws = TempDir::new("dur-q-ws");
    let mut host = HostProcess::start(data.path(), Some(&script()));
    host.create_session("s", ws.path(), "bypass");
    for i in 0..5 {
        let after = host.head_seq("s");
        host.start_turn("s", &format!("t{i}"), &format!("prompt {i}"));
        host.until_terminal("s", after);
    }
    let before = all_items(&host, "s");
    assert!(before.len() >= 15, "{}", before.len());
    host.close_stdin();
    host.wait_exit(std::time::Duration::from_secs(10)).unwrap();

    let path = transcript_path(data.path(), "s");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let n = lines.len();
    // An assistant message from line 5 on: a flipped byte that breaks the JSON. (Not a
    // turn's terminal record: losing that would leave the turn "running", and recovery would
    // rightly add a record for it.)
    let hit = 4 + lines[4..]
        .iter()
        .position(|l| l.contains(r#""type":"assistant""#))
        .unwrap();
    lines[hit] = lines[hit].replacen('{', "}", 1);
    // Four lines later: a run of NULs as a line of its own.
    lines.insert(hit + 4, "\0".repeat(64));
    // At the end: an item of a kind a newer host wrote (with the next sequence number).
    let next = before.last().unwrap()["messageSeq"].as_u64().unwrap() + 1;
    lines.push(format!(
        r#"{{"messageSeq":{next},"ts":1,"turnId":"t9","type":"hologram","beam":1}}"#
    ));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();

    let host = HostProcess::start(data.path(), Some(&script()));
    let got = host.ok("session.get", json!({"sessionId": "s"}));
    let q = got["transcriptQuarantine"].as_array().expect("reported");
    assert_eq!(q.len(), 2, "{got}");
    assert_eq!(q[0]["line"], hit + 1);
    assert_eq!(q[1]["line"], hit + 5);
    assert!(q[0]["offset"].as_u64().unwrap() > 0);
    let after = all_items(&host, "s");
    // Every readable item survives: all but the damaged one, plus the newer one (kept).
    assert_eq!(after.len(), n - 1 + 1, "{} of {n}", after.len());
    let last_before = before.last().unwrap()["messageSeq"].clone();
    assert!(after.iter().any(|i| i["messageSeq"] == last_before));
    assert!(after.iter().any(|i| i["messageSeq"] == next), "kept");
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains(r#""type":"hologram","beam":1"#),
        "kept byte for byte"
    );
    let aside =
        std::fs::read_to_string(path.with_file_name("transcript.quarantine.jsonl")).unwrap();
    assert_eq!(aside.lines().count(), 2);
    // Appends go on after the repair.
    let head = host.head_seq("s");
    host.start_turn("s", "t_after", "one more");
    host.until_terminal("s", head);
    assert!(all_items(&host, "s").len() > after.len());
    assert!(host.stderr_contains("moved to transcript.quarantine.jsonl"));
}

fn command_script(ws: &Path) -> Value {
    let pidfile = ws.join("sleep.pid");
    json!({"rules": [{"when": "long", "responses": [[{"tool": "run_command", "args": {
        "command": format!("sleep 300 & echo $! > {}; wait", pidfile.display()),
        "timeout_ms": 600000
    }}]]}]})
}

fn wait_for_pid(ws: &Path) -> u32 {
    let path = ws.join("sleep.pid");
    for _ in 0..500 {
        if let Some(pid) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the command did not start");
}

fn gone_within(pid: u32, secs: u64) -> bool {
    for _ in 0..secs * 100 {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        // Gone, or a zombie waiting for a parent that no longer matters.
        if state.is_none_or(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        }) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

fn children_of(pid: u32) -> Vec<(u32, String)> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let ppid: u32 = rest.split(' ').nth(1).unwrap().parse().unwrap();
        if ppid == pid {
            let cmd = std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default();
            out.push((p, cmd.replace('\0', " ")));
        }
    }
    out
}

/// Issue 13 §7: after SIGKILL of the host, `sh -c 'sleep 300'` kept running. The reaper kills
/// every process group the host started when the host dies, however it dies.
#[test]
fn commands_die_with_a_host_killed_by_sigkill() {
    let data = TempDir::new("dur-kill");
    let ws = TempDir::new("dur-kill-ws");
    let mut host = HostProcess::start(data.path(), Some(&command_script(ws.path())));
    host.create_session("s", ws.path(), "bypass");
    host.start_turn("s", "t", "long");
    let pid = wait_for_pid(ws.path());
    assert!(!gone_within(pid, 0), "the command runs");
    host.kill9();
    assert!(gone_within(pid, 10), "sleep {pid} outlived the host");
}

/// With the reaper killed as well (kill -9 of everything), the next host on the data dir
/// reaps the groups its predecessor recorded.
#[test]
fn a_host_starting_on_a_data_dir_reaps_what_a_crashed_one_left() {
    let data = TempDir::new("dur-reap");
    let ws = TempDir::new("dur-reap-ws");
    let mut host = HostProcess::start(data.path(), Some(&command_script(ws.path())));
    host.create_session("s", ws.path(), "bypass");
    host.start_turn("s", "t", "long");
    let pid = wait_for_pid(ws.path());
    let reaper = children_of(host.child.id())
        .into_iter()
        .find(|(_, cmd)| cmd.contains("__maka-reaper"))
        .expect("a reaper runs beside the host");
    // SAFETY-free: plain kill(1) of the reaper first, then the host.
    std::process::Command::new("kill")
        .args(["-KILL", &reaper.0.to_string()])
        .status()
        .unwrap();
    host.kill9();
    assert!(!gone_within(pid, 1), "nothing reaped it yet");
    let host = HostProcess::start(data.path(), Some(&command_script(ws.path())));
    assert!(
        gone_within(pid, 10),
        "sleep {pid} survived the next host's start"
    );
    assert!(host.stderr_contains("reaping process group"));
}

/// Issue 45 §12: a process a command started with `setsid` (or a double fork) left the
/// command's group and outlived the adapter. The host is a child subreaper: what its commands
/// leave behind becomes its child, is registered at the command's end, and dies with the host
/// — when the adapter leaves (stdin closed), when the host exits by itself and when it is
/// killed. One row a way out of the group; `PIDFILE` is where the process that must die writes
/// its pid.
#[test]
fn what_a_command_starts_outside_its_group_dies_with_the_host() {
    let rows = [
        (
            "setsid",
            "setsid sh -c 'echo $$ > PIDFILE; exec sleep 300' >/dev/null 2>&1 </dev/null &",
        ),
        (
            "double fork",
            "(setsid sh -c 'echo $$ > PIDFILE; exec sleep 300' >/dev/null 2>&1 </dev/null &)",
        ),
        (
            "child of a setsid",
            "setsid sh -c 'sleep 300 & echo $! > PIDFILE' >/dev/null 2>&1 </dev/null &",
        ),
        (
            "nohup, in the group",
            "nohup sleep 300 >/dev/null 2>&1 </dev/null & echo $! > PIDFILE",
        ),
    ];
    for (name, start) in rows {
        for ending in [Ending::AdapterLeaves, Ending::HostExits, Ending::HostKilled] {
            let data = TempDir::new("dur-setsid");
            let ws = TempDir::new("dur-setsid-ws");
            let pidfile = ws.path().join("escaped.pid");
            // The command ends once the process has written its pid (it has left the group).
            let command = format!("{start}\nwhile [ ! -s PIDFILE ]; do sleep 0.05; done")
                .replace("PIDFILE", &pidfile.display().to_string());
            let script = json!({"rules": [{"when": "escape", "responses": [
                [{"tool": "run_command", "args": {"command": command}}],
                [{"text": "started"}]
            ]}]});
            let leave = ending.run_turn(data.path(), ws.path(), &script, name);
            let pid = wait_for_pid_in(&pidfile);
            assert!(
                !gone_within(pid, 0),
                "{name}: the process runs after the turn"
            );
            leave();
            assert!(
                gone_within(pid, 10),
                "{name}: process {pid} outlived the host ({ending:?})"
            );
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Ending {
    /// The adapter's stdin closes: it stops its embedded host.
    AdapterLeaves,
    /// The host's own stdin closes.
    HostExits,
    HostKilled,
}

impl Ending {
    /// Runs the turn `escape` to its end (in bypass mode, or allowing its command), and returns
    /// what ends the host this way.
    fn run_turn(self, data: &Path, ws: &Path, script: &Value, name: &str) -> Box<dyn FnOnce()> {
        if let Ending::AdapterLeaves = self {
            let mut agent = support::AgentProcess::scripted(script, data);
            agent.initialize();
            let id = agent.new_session(ws);
            let t = agent.prompt(&id, "escape", |_| support::select("allow_once"));
            assert_eq!(t.response["result"]["stopReason"], "end_turn", "{name}");
            return Box::new(move || {
                agent.close_stdin();
                assert!(agent
                    .wait_exit(std::time::Duration::from_secs(10))
                    .is_some());
            });
        }
        let mut host = HostProcess::start(data, Some(script));
        host.create_session("s", ws, "bypass");
        host.start_turn("s", "t", "escape");
        let frames = host.until_terminal("s", 0);
        let end = frames.last().unwrap();
        assert_eq!(end["outcome"], "completed", "{name}: {end}");
        Box::new(move || {
            if let Ending::HostKilled = self {
                host.kill9();
            } else {
                host.close_stdin();
                assert!(host.wait_exit(std::time::Duration::from_secs(10)).is_some());
            }
        })
    }
}

fn wait_for_pid_in(path: &Path) -> u32 {
    for _ in 0..500 {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("no pid in {}", path.display());
}

/// What a command left behind becomes the host's child (it is a subreaper): when it exits, the
/// host collects it at the next command's end, so no zombie accumulates while the host runs.
#[test]
fn an_adopted_process_that_exits_is_reaped_at_the_next_commands_end() {
    let data = TempDir::new("dur-zombie");
    let ws = TempDir::new("dur-zombie-ws");
    let pidfile = ws.path().join("escaped.pid");
    let first = format!(
        "setsid sh -c 'echo $$ > {0}; exec sleep 1' >/dev/null 2>&1 </dev/null &\nwhile [ ! -s {0} ]; do sleep 0.05; done",
        pidfile.display()
    );
    let script = json!({"rules": [
        {"when": "first", "responses": [[{"tool": "run_command", "args": {"command": first}}], [{"text": "ok"}]]},
        {"when": "second", "responses": [[{"tool": "run_command", "args": {"command": "sleep 1.5"}}], [{"text": "ok"}]]}
    ]});
    let host = HostProcess::start(data.path(), Some(&script));
    host.create_session("s", ws.path(), "bypass");
    host.start_turn("s", "t1", "first");
    host.until_terminal("s", 0);
    let pid = wait_for_pid_in(&pidfile);
    let state = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = stat.rsplit_once(')')?.1.to_string();
        let mut fields = rest.split_whitespace().map(String::from);
        Some((fields.next()?, fields.next()?.parse::<u32>().ok()?))
    };
    assert_eq!(
        state(pid).map(|(_, ppid)| ppid),
        Some(host.child.id()),
        "the process left behind is the host's child"
    );
    let after = host.head_seq("s");
    host.start_turn("s", "t2", "second");
    host.until_terminal("s", after);
    assert_eq!(state(pid), None, "process {pid} was not reaped");
}
