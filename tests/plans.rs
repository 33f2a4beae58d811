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

/// ACP `plan_update` / `plan_removed` (issue 26 item 5, unstable): a client that advertises
/// `clientCapabilities.plan` sees the stored plan by id — proposed, then approved (its revision
/// and status in `_meta.maka`), removed when a rewind leaves none — and no legacy `plan`; a
/// reload replays it so. A client without the capability sees the legacy `plan` as before.
/// Lines are checked against the unstable schema.
#[test]
fn a_client_that_shows_plans_by_id_follows_the_stored_plan() {
    let data = TempDir::new("plans-id-data");
    let ws = TempDir::new("plans-id-ws");
    let plan_client = |data: &TempDir| {
        let mut a = AgentProcess::scripted(&script(), data.path());
        a.call_ok(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {"plan": {}}}),
        );
        a
    };
    let mut a = plan_client(&data);
    let s = a.new_session(ws.path());
    set(&mut a, &s, "mode", "bypass");
    a.recv(); // current_mode_update
    set(&mut a, &s, "collaboration_mode", "plan");
    let t = a.prompt(&s, "plan the work", |r| panic!("unexpected {r}"));
    let updates: Vec<&Value> = t.updates_for(&s);
    assert!(
        !updates.iter().any(|u| u["sessionUpdate"] == "plan"),
        "no legacy plan: {updates:#?}"
    );
    let plans: Vec<&&Value> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "plan_update")
        .collect();
    assert_eq!(plans.len(), 1, "{updates:#?}");
    let rev = a.call_ok("_maka/plan/query", json!({"sessionId": s}))["revision"].clone();
    assert_eq!(
        *plans[0],
        &json!({"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "plan",
            "entries": [{"content": "Write notes", "priority": "medium", "status": "pending"}],
            "_meta": {"maka": {"revision": rev, "status": "proposed"}}}})
    );

    // Approved outside the dialog: the same plan, its status changed.
    let (resp, mut lines) = a.call(
        "_maka/plan/control",
        json!({"sessionId": s, "expectedRevision": rev, "action": "approve"}),
    );
    assert_eq!(resp["result"]["plan"]["status"], "approved", "{resp}");
    while let Some(l) = a.recv_timeout(std::time::Duration::from_millis(500)) {
        lines.push(l);
    }
    let statuses = |lines: &[Value]| -> Vec<String> {
        lines
            .iter()
            .map(|l| &l["params"]["update"])
            .filter(|u| u["sessionUpdate"] == "plan_update")
            .map(|u| {
                u["plan"]["_meta"]["maka"]["status"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(statuses(&lines), ["approved"], "{lines:#?}");

    // A reload replays the plan as it went: proposed, then approved; another client the
    // legacy plan once.
    let mut b = plan_client(&data);
    let (_, replay) = b.call(
        "session/load",
        json!({"sessionId": s, "cwd": ws.path(), "mcpServers": []}),
    );
    assert_eq!(statuses(&replay), ["proposed", "approved"]);
    drop(b);
    let mut c = AgentProcess::scripted(&script(), data.path());
    c.initialize();
    let (_, replay) = c.call(
        "session/load",
        json!({"sessionId": s, "cwd": ws.path(), "mcpServers": []}),
    );
    let kinds: Vec<&str> = replay
        .iter()
        .filter_map(|l| l["params"]["update"]["sessionUpdate"].as_str())
        .filter(|k| k.starts_with("plan"))
        .collect();
    assert_eq!(kinds, ["plan"]);
    drop(c);

    // Rewound past the turn that proposed it: the plan is gone.
    let turns = a.call_ok("_maka/session/turns", json!({"sessionId": s}));
    let t1 = turns["turns"][0]["turnId"].as_str().unwrap().to_string();
    let (resp, lines) = a.call(
        "_maka/session/revision/abandon",
        json!({"sessionId": s, "revisionId": format!("rev_{t1}")}),
    );
    assert_eq!(resp["result"]["abandonedTurnIds"], json!([t1]), "{resp}");
    let removed: Vec<&Value> = lines
        .iter()
        .map(|l| &l["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "plan_removed")
        .collect();
    assert_eq!(
        removed,
        [&json!({"sessionUpdate": "plan_removed", "planId": "plan"})],
        "{lines:#?}"
    );
}
