//! Stored plans over the real binaries: `_maka/plan/query`, `_maka/plan/control` (revise,
//! revision conflicts, approve, reject — also answering an open approval dialog) and
//! `_maka/plan/start`, with the ACP `plan` update kept in sync. Every line schema-checked.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::host::TempDir;
use support::{error_of, AgentProcess};

fn script() -> Value {
    json!({
        "rules": [
            {"when": "plan the work", "responses": [
                [{"tool": "update_plan", "args": {"entries": [{"content": "Write notes", "status": "pending"}]}}],
                [{"text": "Here is my plan."}]]},
            {"when": "Carry out the approved plan", "responses": [
                [{"tool": "write_file", "args": {"path": "notes.txt", "content": "done\n"}}],
                [{"echo": "user"}]]},
            {"when": "write now", "responses": [
                [{"tool": "write_file", "args": {"path": "now.txt", "content": "now\n"}}],
                [{"text": "Wrote now."}]]}
        ],
        "default": [[{"text": "Hello."}]]
    })
}

fn set(a: &mut AgentProcess, s: &str, id: &str, value: &str) {
    a.call_ok(
        "session/set_config_option",
        json!({"sessionId": s, "configId": id, "value": value}),
    );
}

#[test]
fn a_plan_is_revised_approved_outside_the_dialog_and_carried_out() {
    let data = TempDir::new("plans-data");
    let ws = TempDir::new("plans-ws");
    let mut a = AgentProcess::scripted(&script(), data.path());
    a.initialize();
    let s = a.new_session(ws.path());
    set(&mut a, &s, "mode", "bypass");
    a.recv(); // current_mode_update
    set(&mut a, &s, "collaboration_mode", "plan");

    let none = a.call_ok("_maka/plan/query", json!({"sessionId": s}));
    assert_eq!(none["status"], "none");
    let (resp, _) = a.call("_maka/plan/start", json!({"sessionId": s}));
    assert_eq!(
        error_of(&resp)["data"]["makaCode"],
        "plan_not_approved",
        "{resp}"
    );

    a.prompt(&s, "plan the work", |r| panic!("unexpected {r}"));
    let proposed = a.call_ok("_maka/plan/query", json!({"sessionId": s}));
    assert_eq!(proposed["status"], "proposed");
    assert_eq!(proposed["entries"][0]["content"], "Write notes");
    let rev = proposed["revision"].as_u64().unwrap();

    // The person's own version: proposed again, shown as the ACP plan at once.
    let entries = json!([
        {"content": "Write notes", "status": "pending", "priority": "high"},
        {"content": "Say what was done", "status": "pending", "priority": "low"}
    ]);
    let (resp, lines) = a.call(
        "_maka/plan/control",
        json!({"sessionId": s, "expectedRevision": rev, "action": "revise", "entries": entries}),
    );
    let revised = &resp["result"];
    assert_eq!(revised["kind"], "committed", "{resp}");
    let rev2 = revised["plan"]["revision"].as_u64().unwrap();
    assert!(rev2 > rev);
    assert_eq!(revised["plan"]["status"], "proposed");
    let mut after = lines;
    after.extend(a.recv_timeout(std::time::Duration::from_secs(5)));
    let shown = after
        .iter()
        .find(|l| l["params"]["update"]["sessionUpdate"] == "plan")
        .unwrap_or_else(|| panic!("no plan update: {after:?}"));
    assert_eq!(
        shown["params"]["update"]["entries"][1]["content"],
        "Say what was done"
    );

    // A stale revision is a conflict; bad params are named.
    let stale = a.call_ok(
        "_maka/plan/control",
        json!({"sessionId": s, "expectedRevision": rev, "action": "approve"}),
    );
    assert_eq!(stale["kind"], "revision_conflict");
    assert_eq!(stale["actual"], rev2);
    let (resp, _) = a.call(
        "_maka/plan/control",
        json!({"sessionId": s, "expectedRevision": rev2, "action": "maybe"}),
    );
    assert!(error_of(&resp)["message"]
        .as_str()
        .unwrap()
        .contains("`action`"));

    // Approved outside any dialog: the session leaves plan mode; the plan runs as a turn.
    let approved = a.call_ok(
        "_maka/plan/control",
        json!({"sessionId": s, "expectedRevision": rev2, "action": "approve"}),
    );
    assert_eq!(approved["plan"]["status"], "approved");
    let t = a.drive("_maka/plan/start", json!({"sessionId": s}), |r| {
        panic!("no dialog once approved: {r}")
    });
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{:?}",
        t.response
    );
    assert!(t.response["result"]["_meta"]["maka"]["turnId"].is_string());
    assert!(
        t.text().contains("1. [pending] Write notes"),
        "{}",
        t.text()
    );
    assert!(t.text().contains("2. [pending] Say what was done"));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("notes.txt")).unwrap(),
        "done\n"
    );
    let turns = a.call_ok("_maka/session/turns", json!({"sessionId": s}));
    assert_eq!(turns["turns"][1]["origin"], "plan");
}

#[test]
fn approving_through_the_extension_answers_the_open_approval_dialog() {
    let data = TempDir::new("plans2-data");
    let ws = TempDir::new("plans2-ws");
    let mut a = AgentProcess::scripted(&script(), data.path());
    a.initialize();
    let s = a.new_session(ws.path());
    set(&mut a, &s, "mode", "bypass");
    a.recv();
    set(&mut a, &s, "collaboration_mode", "plan");
    a.prompt(&s, "plan the work", |r| panic!("unexpected {r}"));
    let rev = a.call_ok("_maka/plan/query", json!({"sessionId": s}))["revision"].clone();

    // The next write asks for the plan's approval; the person approves from elsewhere.
    let prompt = a.request(
        "session/prompt",
        json!({"sessionId": s, "prompt": [{"type": "text", "text": "write now"}]}),
    );
    let dialog = loop {
        let v = a.recv();
        if v["method"] == "session/request_permission" {
            break v;
        }
    };
    assert!(dialog["params"]["toolCall"]["title"]
        .as_str()
        .unwrap()
        .starts_with("Approve the plan"));
    let control = a.request(
        "_maka/plan/control",
        json!({"sessionId": s, "expectedRevision": rev, "action": "approve"}),
    );
    let (mut withdrawn, mut answered, mut done) = (false, None, None);
    while answered.is_none() || done.is_none() {
        let v = a.recv();
        if v["method"] == "$/cancel_request" && v["params"]["requestId"] == dialog["id"] {
            withdrawn = true;
        } else if v["id"] == control && v.get("method").is_none() {
            answered = Some(v);
        } else if v["id"] == prompt && v.get("method").is_none() {
            done = Some(v);
        }
    }
    assert_eq!(answered.unwrap()["result"]["plan"]["status"], "approved");
    assert!(withdrawn, "the dialog was withdrawn from the client");
    assert_eq!(done.unwrap()["result"]["stopReason"], "end_turn");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("now.txt")).unwrap(),
        "now\n"
    );

    // Rejecting needs a plan and leaves plan mode on.
    set(&mut a, &s, "collaboration_mode", "plan");
    let rev = a.call_ok("_maka/plan/query", json!({"sessionId": s}))["revision"].clone();
    let rejected = a.call_ok(
        "_maka/plan/control",
        json!({"sessionId": s, "expectedRevision": rev, "action": "reject"}),
    );
    assert_eq!(rejected["plan"]["status"], "rejected");
    let (resp, _) = a.call("_maka/plan/start", json!({"sessionId": s}));
    assert_eq!(error_of(&resp)["data"]["makaCode"], "plan_not_approved");
    let (resp, _) = a.call("_maka/plan/query", json!({"sessionId": "nope"}));
    assert_eq!(error_of(&resp)["code"], -32002);
}
