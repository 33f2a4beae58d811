//! One data dir, one host (issue 13 §4): two editor windows on the same data dir share the host
//! already serving it, see the same sessions, and the host lives while any of them uses it.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::time::Duration;
use support::host::TempDir;
use support::{process_alive as alive, AgentProcess};

fn script() -> Value {
    json!({"default": [[{"text": "Hello from the one host."}]]})
}

fn host_pid(data: &TempDir) -> u32 {
    let info: Value =
        serde_json::from_slice(&std::fs::read(data.path().join("host.json")).unwrap()).unwrap();
    info["pid"].as_u64().unwrap() as u32
}

#[test]
fn two_adapters_on_one_data_dir_share_one_host_that_lives_while_either_does() {
    let data = TempDir::new("shared-data");
    let ws = TempDir::new("shared-ws");
    let mut a = AgentProcess::scripted(&script(), data.path());
    a.initialize();
    let id = a.new_session(ws.path());
    let t = a.prompt(&id, "hello", |r| panic!("{r}"));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let pid = host_pid(&data);
    let mode = std::fs::metadata(data.path().join("host.json")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600,
        "the discovery file holds the token"
    );

    // A second window: the same host, the same sessions.
    let mut b = AgentProcess::scripted(&script(), data.path());
    b.initialize();
    let listed = b.call_ok("session/list", json!({}));
    assert_eq!(listed["sessions"][0]["sessionId"], id.as_str(), "{listed}");
    assert!(b.stderr_contains("using the Runtime Host that already serves"));
    assert!(!b.stderr().contains("started the embedded Runtime Host"));
    // Live: a prompt in A is seen by B's list at once (same host, no stale copy).
    let id2 = a.new_session(ws.path());
    a.prompt(&id2, "second", |r| panic!("{r}"));
    let listed = b.call_ok("session/list", json!({}));
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 2, "{listed}");

    // The window that started the host leaves; the host stays for the other one.
    a.close_stdin();
    a.wait_exit(Duration::from_secs(10)).expect("A exits");
    assert!(alive(pid), "the host serves B still");
    let (resp, _) = b.call(
        "session/load",
        json!({"sessionId": id, "cwd": ws.path(), "mcpServers": []}),
    );
    assert!(resp.get("result").is_some(), "{resp}");
    b.expect_commands(&id);
    let t = b.prompt(&id, "are you there?", |r| panic!("{r}"));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");

    // The last one leaves: the host goes too.
    b.close_stdin();
    b.wait_exit(Duration::from_secs(10)).expect("B exits");
    let mut gone = false;
    for _ in 0..500 {
        if !alive(pid) {
            gone = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(gone, "the host outlived every adapter");
    assert!(!data.path().join("host.json").exists());

    // A new window right after: a new host on the same data dir, with the same sessions.
    let mut c = AgentProcess::scripted(&script(), data.path());
    c.initialize();
    let listed = c.call_ok("session/list", json!({}));
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 2, "{listed}");
}

#[test]
fn a_second_host_on_a_served_data_dir_is_refused() {
    let data = TempDir::new("second-data");
    let first = support::host::HostProcess::start(data.path(), None);
    let out = std::process::Command::new(support::BIN)
        .args(["host", "--data-dir"])
        .arg(data.path())
        .env("MAKA_HOST_TOKEN", "a-token-of-16-bytes-or-more")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("another maka-acp host serves") && err.contains(&first.child.id().to_string()),
        "{err}"
    );
}

/// A token short enough to guess is refused at start, with a way to make a good one.
#[test]
fn the_host_refuses_a_short_token() {
    let data = TempDir::new("short-token-data");
    let out = std::process::Command::new(support::BIN)
        .args(["host", "--data-dir"])
        .arg(data.path())
        .env("MAKA_HOST_TOKEN", "secret")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at least 16"), "{err}");
}
