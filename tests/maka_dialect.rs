//! A client of Apache Maka's `maka --acp`, written from its surface as described in
//! `shared/design/maka-adapter-surface.md` §1 (not from our docs), driving `maka-acp --acp`:
//! each test names the rows of §1 it covers. The real binary over pipes; every line it writes
//! is validated against the ACP v1 schema.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::host::TempDir;
use support::{error_of, option, AgentProcess, Reply, Spawn};

fn script() -> Value {
    json!({
        "models": [{"id": "deep", "label": "Deep", "thinkingLevels": ["low", "high"]}],
        "rules": [
            {"when": "make the file", "responses": [
                [{"tool": "write_file", "args": {"path": "out.txt", "content": "made"}}],
                [{"text": "Could not write it."}]]},
            {"when": "Work toward this goal: make it shine", "responses": [[{"text": "Polishing."}]]},
            {"when": "Continue toward the goal: make it shine", "responses": [
                [{"tool": "goal_complete", "args": {"evidence": "It shines."}}],
                [{"text": "Goal met."}]]},
            {"when": "toward the goal: keep going", "responses": [[{"delayMs": 200}, {"text": "Still going."}]]},
            {"when": "plan the work", "responses": [
                [{"tool": "update_plan", "args": {"entries": [{"content": "Write notes", "status": "pending"}]}}],
                [{"text": "Here is my plan."}]]},
            {"when": "Carry out the approved plan", "responses": [
                [{"tool": "write_file", "args": {"path": "notes.txt", "content": "done\n"}}],
                [{"text": "Carried out."}]]},
            {"when": "slowly please", "responses": [[{"delayMs": 3000}, {"text": "Done slowly."}]]}
        ],
        "default": [[{"text": "Hello from the script!"}]]
    })
}

struct Maka {
    agent: AgentProcess,
    ws: TempDir,
    _data: TempDir,
}

/// `maka-acp --acp` on the scripted provider, initialized as a Maka client would (`client_meta`:
/// its `clientCapabilities._meta`); returns it and the `initialize` result.
fn maka(tag: &str, client_meta: Value, extra_env: &[(&str, &str)]) -> (Maka, Value) {
    let data = TempDir::new(&format!("makad-{tag}-data"));
    let ws = TempDir::new(&format!("makad-{tag}-ws"));
    let mut env = vec![
        ("RUST_LOG".to_string(), "info".to_string()),
        ("MAKA_SCRIPT".into(), script().to_string()),
        ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
        (
            "XDG_CONFIG_HOME".into(),
            data.path().join("config").display().to_string(),
        ),
    ];
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let mut agent = AgentProcess::spawn_with(Spawn {
        args: vec!["--acp".into()],
        env,
    });
    let init = agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {
            "elicitation": {"form": {}}, "_meta": client_meta}}),
    );
    (
        Maka {
            agent,
            ws,
            _data: data,
        },
        init,
    )
}

impl Maka {
    /// `session/new` → (sessionId, configOptions); skips the updates that follow it.
    fn new_session(&mut self) -> (String, Value) {
        let r = self.agent.call_ok(
            "session/new",
            json!({"cwd": self.ws.path(), "mcpServers": []}),
        );
        let id = r["sessionId"].as_str().unwrap().to_string();
        // The commands follow the response (after a host call of their own): read them here,
        // so a test's later silence is not broken by them arriving late on a loaded machine.
        self.agent.expect_commands(&id);
        (id, r["configOptions"].clone())
    }

    fn error(&mut self, method: &str, params: Value) -> Value {
        let (resp, _) = self.agent.call(method, params);
        error_of(&resp).clone()
    }
}

/// §1 "initialize result": `_meta["_maka/goalPlan"] = {version: 1}` (our `_meta.maka` beside
/// it), `loadSession`, `sessionCapabilities {list, resume, close}`.
#[test]
fn initialize_advertises_makas_goal_plan_extension() {
    let (_m, init) = maka("init", json!({}), &[]);
    let caps = &init["agentCapabilities"];
    assert_eq!(caps["_meta"]["_maka/goalPlan"], json!({"version": 1}));
    assert_eq!(caps["loadSession"], true);
    for c in ["list", "resume", "close"] {
        assert!(caps["sessionCapabilities"][c].is_object(), "{c}: {caps}");
    }
    assert_eq!(init["protocolVersion"], 1);
}

/// §1.4 config options: Maka's ids, categories and order, `collaboration_mode` always;
/// `session/set_config_option` takes Maka's ids and answers the full set; bad id/value is
/// `-32602` with `data.field`.
#[test]
fn config_options_by_makas_ids_and_categories() {
    let (mut m, _) = maka("config", json!({}), &[]);
    let (sid, options) = m.new_session();
    let shown: Vec<(&str, &str)> = options
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["id"].as_str().unwrap(), o["category"].as_str().unwrap()))
        .collect();
    assert_eq!(
        shown,
        [
            ("permission_mode", "_maka/permission_mode"),
            ("thinking_level", "thought_level"),
            ("collaboration_mode", "mode"),
            ("orchestration_mode", "_maka/orchestration_mode"),
        ]
    );
    for o in options.as_array().unwrap() {
        assert_eq!(o["type"], "select", "{o}");
    }
    // Paseo's mode selector sends the category-`mode` option's values.
    for (id, value) in [
        ("collaboration_mode", "plan"),
        ("permission_mode", "bypass"),
        ("thinking_level", "high"),
        ("orchestration_mode", "swarm"),
    ] {
        let r = m.agent.call_ok(
            "session/set_config_option",
            json!({"sessionId": sid, "configId": id, "value": value}),
        );
        assert_eq!(
            option(&r["configOptions"], id)["currentValue"],
            value,
            "{r}"
        );
    }
    let e = m.error(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "speed", "value": "x"}),
    );
    assert_eq!(e["code"], -32602);
    assert_eq!(e["data"]["field"], "configId");
    let e = m.error(
        "session/set_config_option",
        json!({"sessionId": sid, "configId": "collaboration_mode", "value": "ask"}),
    );
    assert_eq!(e["code"], -32602);
    assert_eq!(e["data"]["field"], "value");
    // An error names the id the client sent, never ours (`mode`, `thought_level`), which a
    // Maka client was never offered.
    for (id, value, ours) in [
        ("permission_mode", json!("sometimes"), "`mode`"),
        ("thinking_level", json!("lots"), "`thought_level`"),
        ("thinking_level", json!(true), "`thought_level`"),
    ] {
        let e = m.error(
            "session/set_config_option",
            json!({"sessionId": sid, "configId": id, "value": value}),
        );
        assert_eq!(e["code"], -32602, "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{id}`")), "{id}: {message}");
        assert!(!message.contains(ours), "{id}: {message}");
    }
}

/// §1 "Ownership": a session this connection does not own is `-32602` with `data.reason:
/// "unknown_session"`, on ACP methods and `_maka/` ones alike.
#[test]
fn unknown_sessions_are_makas_error() {
    let (mut m, _) = maka("unknown", json!({}), &[]);
    for (method, params) in [
        (
            "session/prompt",
            json!({"sessionId": "nope", "prompt": [{"type": "text", "text": "hi"}]}),
        ),
        (
            "session/set_config_option",
            json!({"sessionId": "nope", "configId": "permission_mode", "value": "ask"}),
        ),
        ("session/close", json!({"sessionId": "nope"})),
    ] {
        let e = m.error(method, params);
        assert_eq!(e["code"], -32602, "{method}: {e}");
        assert_eq!(e["data"]["reason"], "unknown_session", "{method}: {e}");
    }
}

/// §3.6: Paseo's Maka provider drops `session/request_permission`. In `ask` mode the request
/// is withdrawn after the bound (`MAKA_PERMISSION_TIMEOUT_MS`; 60 s by default in this
/// dialect), the tool is denied saying why, and the turn ends normally instead of waiting
/// until cancelled.
#[test]
fn an_unanswered_permission_request_fails_the_tool_after_the_bound() {
    let (mut m, _) = maka("perm", json!({}), &[("MAKA_PERMISSION_TIMEOUT_MS", "300")]);
    let (sid, options) = m.new_session();
    assert_eq!(option(&options, "permission_mode")["currentValue"], "ask");
    let started = std::time::Instant::now();
    let t = m.agent.prompt(&sid, "make the file", |r| {
        assert_eq!(r["method"], "session/request_permission", "{r}");
        Reply::Ignore
    });
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{:?}",
        t.response
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    assert_eq!(t.requests.len(), 1);
    let asked = &t.requests[0]["id"];
    assert!(
        t.notifications
            .iter()
            .any(|n| n["method"] == "$/cancel_request" && n["params"]["requestId"] == *asked),
        "the request is withdrawn: {:?}",
        t.notifications
    );
    let failed = t
        .updates_for(&sid)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed")
        .unwrap_or_else(|| panic!("the tool fails: {:?}", t.updates))
        .to_string();
    assert!(
        failed.contains("did not answer the permission request"),
        "{failed}"
    );
    assert!(!m.ws.path().join("out.txt").exists(), "nothing was written");
}

/// Reads lines until one matches `done`; returns every line read (bounded by the harness's
/// step timeout per line).
fn until(a: &mut AgentProcess, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut lines = vec![];
    loop {
        let v = a.recv();
        let stop = done(&v);
        lines.push(v);
        if stop {
            return lines;
        }
    }
}

fn reason(e: &Value) -> &str {
    e["data"]["reason"].as_str().unwrap_or_default()
}

/// §1.2 goal rows: `_maka/goal/arm {condition, maxIterations, tokenBudget}`, `_maka/goal/query`
/// → `{sessionId, goal}` with Maka's Goal fields, `_maka/goal/control {goalId,
/// expectedRevision, action: pause|resume|clear}`; bounds and a stale revision answered as
/// errors.
#[test]
fn goals_by_makas_params_and_goal_shape() {
    let (mut m, _) = maka("goal", json!({}), &[]);
    let (sid, _) = m.new_session();
    let none = m
        .agent
        .call_ok("_maka/goal/query", json!({"sessionId": sid}));
    assert_eq!(none, json!({"sessionId": sid, "goal": null}));
    for (params, want) in [
        (json!({"maxIterations": 201}), "invalid_goal_plan_input"),
        (json!({"maxIterations": 150}), "unsupported_operation"),
        (json!({"tokenBudget": 10}), "invalid_goal_plan_input"),
    ] {
        let mut p = json!({"sessionId": sid, "condition": "make it shine"});
        p.as_object_mut()
            .unwrap()
            .extend(params.as_object().unwrap().clone());
        let e = m.error("_maka/goal/arm", p.clone());
        assert_eq!(e["code"], -32602, "{p}: {e}");
        assert_eq!(reason(&e), want, "{p}: {e}");
    }
    let armed = m.agent.call_ok(
        "_maka/goal/arm",
        json!({"sessionId": sid, "condition": "make it shine", "maxIterations": 5, "tokenBudget": null}),
    );
    assert_eq!(armed["sessionId"], sid.as_str());
    let goal = &armed["goal"];
    for field in [
        "goalId",
        "revision",
        "sessionId",
        "condition",
        "status",
        "setAt",
        "iterations",
        "maxIterations",
        "consecutiveNoProgress",
        "tokenBudget",
        "tokensSpent",
        "lastReason",
        "achievedAt",
        "pausedAt",
    ] {
        assert!(goal.get(field).is_some(), "{field} in {goal}");
    }
    assert_eq!(goal["condition"], "make it shine");
    assert_eq!(goal["maxIterations"], 5);
    // Armed, it waits for the next prompt (as Maka's): nothing runs, the query shows it.
    let waiting = m
        .agent
        .call_ok("_maka/goal/query", json!({"sessionId": sid}));
    assert_eq!(waiting["goal"]["goalId"], goal["goalId"], "{waiting}");
    m.agent
        .expect_silence(std::time::Duration::from_millis(300));
    let e = m.error(
        "_maka/goal/arm",
        json!({"sessionId": sid, "condition": "another", "maxIterations": null, "tokenBudget": null}),
    );
    assert_eq!(
        e["data"]["makaCode"], "operation_conflict",
        "one goal at a time: {e}"
    );
    // The prompt runs; then the goal goes on until the model declares it met: `achieved`.
    let t = m
        .agent
        .prompt(&sid, "start on it", |r| panic!("unexpected {r}"));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    until(&mut m.agent, |v| {
        v["method"] == "_maka/goal_update" && v["params"]["goal"]["status"] == "completed"
    });
    let q = m
        .agent
        .call_ok("_maka/goal/query", json!({"sessionId": sid}));
    assert_eq!(q["goal"]["status"], "achieved", "{q}");
    assert!(q["goal"]["achievedAt"].is_u64(), "{q}");

    // A goal not yet started can be cleared, not paused.
    let (sid2, _) = m.new_session();
    let arm = json!({"sessionId": sid2, "condition": "keep going", "maxIterations": 100, "tokenBudget": 100000});
    let g = m.agent.call_ok("_maka/goal/arm", arm.clone());
    let pending = g["goal"]["goalId"].clone();
    let control = |action: &str, goal_id: &Value, revision: Value| json!({"sessionId": sid2, "goalId": goal_id, "expectedRevision": revision, "action": action});
    let e = m.error("_maka/goal/control", control("pause", &pending, json!(0)));
    assert_eq!(reason(&e), "unsupported_operation", "{e}");
    let cleared = m
        .agent
        .call_ok("_maka/goal/control", control("clear", &pending, json!(0)));
    assert_eq!(cleared["goal"]["status"], "cleared", "{cleared}");
    let none = m
        .agent
        .call_ok("_maka/goal/query", json!({"sessionId": sid2}));
    assert_eq!(none["goal"], Value::Null);
    // Once it runs: paused, resumed and cleared by revision.
    m.agent.call_ok("_maka/goal/arm", arm);
    m.agent
        .prompt(&sid2, "start on it", |r| panic!("unexpected {r}"));
    let running = until(&mut m.agent, |v| v["method"] == "_maka/goal_update");
    let goal_id = running.last().unwrap()["params"]["goal"]["goalId"]
        .as_str()
        .unwrap()
        .to_string();
    let e = m.error(
        "_maka/goal/control",
        json!({"sessionId": sid2, "goalId": goal_id, "expectedRevision": 999, "action": "pause"}),
    );
    assert_eq!(e["code"], -32603, "{e}");
    assert_eq!(e["data"]["code"], "revision_conflict", "{e}");
    for (action, status) in [
        ("pause", "paused"),
        ("resume", "active"),
        ("clear", "cleared"),
    ] {
        let mut done = None;
        for _ in 0..20 {
            let rev = m
                .agent
                .call_ok("_maka/goal/query", json!({"sessionId": sid2}))["goal"]["revision"]
                .clone();
            let (resp, _) = m.agent.call(
                "_maka/goal/control",
                json!({"sessionId": sid2, "goalId": goal_id, "expectedRevision": rev, "action": action}),
            );
            if resp.get("result").is_some() {
                done = Some(resp["result"].clone());
                break;
            }
            assert_eq!(
                error_of(&resp)["data"]["code"],
                "revision_conflict",
                "{resp}"
            );
        }
        let r = done.unwrap_or_else(|| panic!("{action} kept conflicting"));
        assert_eq!(r["goal"]["status"], status, "{action}: {r}");
    }
    // The connection's dialect decides, not the params: ours on the same name are a `-32602`
    // naming Maka's field.
    let e = m.error(
        "_maka/goal/arm",
        json!({"sessionId": sid2, "objective": "make it shine", "maxTurns": 2}),
    );
    assert_eq!(e["code"], -32602, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("`condition`"),
        "{e}"
    );
}

/// §1.2 session rows: `copy-source/query` pages the turns with `expectedSourceRevision`;
/// `branch/create` and `revision/create` (Maka's params) copy into the client's
/// `targetSessionId`, a stale revision is a `source_revision_conflict` result;
/// `revision/abandon {targetSessionId}` abandons a copy and retains anything else; in this
/// dialect `revision/create` is Maka's whatever its params (ours, `{label}`, are a `-32602`).
#[test]
fn copy_source_branch_and_revisions_by_makas_params() {
    let (mut m, _) = maka("branch", json!({}), &[]);
    let (sid, _) = m.new_session();
    for text in ["first", "second"] {
        let t = m.agent.prompt(&sid, text, |r| panic!("unexpected {r}"));
        assert_eq!(t.response["result"]["stopReason"], "end_turn");
    }
    let page = m.agent.call_ok(
        "_maka/session/copy-source/query",
        json!({"sessionId": sid, "throughSequence": null, "position": 0, "maxContributions": 1}),
    );
    assert_eq!(page["contributions"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["contributions"][0]["userPromptPreview"], "first");
    assert_eq!(page["contributions"][0]["firstSequence"], 1);
    let next = page["nextPosition"].clone();
    assert!(!next.is_null(), "{page}");
    let rest = m.agent.call_ok(
        "_maka/session/copy-source/query",
        json!({"sessionId": sid, "throughSequence": null, "position": next, "maxContributions": 128}),
    );
    assert_eq!(rest["contributions"][0]["userPromptPreview"], "second");
    assert!(rest["nextPosition"].is_null());
    let revision = page["expectedSourceRevision"].clone();
    let first_turn = page["contributions"][0]["turnId"].clone();

    let branch = |m: &mut Maka, method: &str, target: &str, rev: Value| {
        m.agent.call_ok(
            method,
            json!({"sourceSessionId": sid, "targetSessionId": target,
                   "sourceTurnId": first_turn, "expectedSourceRevision": rev}),
        )
    };
    let b = branch(
        &mut m,
        "_maka/session/branch/create",
        "maka-branch-1",
        revision.clone(),
    );
    assert_eq!(b["kind"], "committed", "{b}");
    assert_eq!(b["session"]["sessionId"], "maka-branch-1");
    let stale = branch(
        &mut m,
        "_maka/session/branch/create",
        "maka-branch-2",
        json!(999_999),
    );
    assert_eq!(stale["kind"], "source_revision_conflict", "{stale}");
    assert_eq!(stale["expectedRevision"], 999_999);
    let r = branch(
        &mut m,
        "_maka/session/revision/create",
        "maka-revision-1",
        revision,
    );
    assert_eq!(r["kind"], "committed", "{r}");
    // The copy is this connection's at once, and holds the first turn only.
    let t = m
        .agent
        .prompt("maka-branch-1", "third", |r| panic!("unexpected {r}"));
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{:?}",
        t.response
    );
    let copied = m.agent.call_ok(
        "_maka/session/copy-source/query",
        json!({"sessionId": "maka-revision-1", "throughSequence": null, "position": 0, "maxContributions": 128}),
    );
    assert_eq!(
        copied["contributions"].as_array().unwrap().len(),
        1,
        "{copied}"
    );

    let abandoned = m.agent.call_ok(
        "_maka/session/revision/abandon",
        json!({"targetSessionId": "maka-revision-1"}),
    );
    assert_eq!(
        abandoned,
        json!({"kind": "abandoned", "sessionId": "maka-revision-1"})
    );
    let retained = m.agent.call_ok(
        "_maka/session/revision/abandon",
        json!({"targetSessionId": sid}),
    );
    assert_eq!(retained["kind"], "retained");
    // A fork (a copy, but not one made by branch/revision create here) is kept; a session
    // this connection does not hold is never touched (Maka's unknown session).
    let fork = m.agent.call_ok(
        "session/fork",
        json!({"sessionId": sid, "cwd": m.ws.path(), "mcpServers": []}),
    );
    let fork_id = fork["sessionId"].as_str().unwrap().to_string();
    let kept = m.agent.call_ok(
        "_maka/session/revision/abandon",
        json!({"targetSessionId": fork_id}),
    );
    assert_eq!(kept["kind"], "retained", "{kept}");
    let e = m.error(
        "_maka/session/revision/abandon",
        json!({"targetSessionId": "sess_of_someone_else"}),
    );
    assert_eq!(reason(&e), "unknown_session", "{e}");
    // The clashing name is Maka's on this connection, whatever the params: ours are a
    // `-32602` naming Maka's field.
    let e = m.error(
        "_maka/session/revision/create",
        json!({"sessionId": sid, "label": "before the change"}),
    );
    assert_eq!(e["code"], -32602, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("`sourceSessionId`"),
        "{e}"
    );
    // An unowned source is Maka's unknown_session.
    let e = m.error(
        "_maka/session/branch/create",
        json!({"sourceSessionId": "nope", "targetSessionId": "x1", "sourceTurnId": "t",
               "expectedSourceRevision": 1}),
    );
    assert_eq!(reason(&e), "unknown_session", "{e}");
}

/// §1.2 `_maka/turn/resume` answers at admission: with no interrupted run it is `parked`
/// with a reason (never an error, never a wait), and its decode rule holds.
#[test]
fn turn_resume_answers_at_admission() {
    let (mut m, _) = maka("resume", json!({}), &[]);
    let (sid, _) = m.new_session();
    let r = m
        .agent
        .call_ok("_maka/turn/resume", json!({"sessionId": sid}));
    assert_eq!(r["kind"], "parked", "{r}");
    assert_eq!(r["plan"]["disposition"], "parked");
    assert!(r["plan"]["reason"].is_string(), "{r}");
    let e = m.error(
        "_maka/turn/resume",
        json!({"sessionId": sid, "expectedRuntimeEventHighWater": 3}),
    );
    assert_eq!(reason(&e), "invalid_resume_query", "{e}");
}

/// §1.2 plan rows over our plan: `plan/query` pages (a proposal per plan revision),
/// `plan/control` (`request_revision`; the kinds our model lacks are named `-32602`s) and
/// `plan/turn/start {approve_proposal, turnId}` answered at admission with `{plan, turn}`.
#[test]
fn plans_by_makas_params() {
    let (mut m, _) = maka("plan", json!({}), &[]);
    let (sid, _) = m.new_session();
    for (id, value) in [
        ("permission_mode", "bypass"),
        ("collaboration_mode", "plan"),
    ] {
        m.agent.call_ok(
            "session/set_config_option",
            json!({"sessionId": sid, "configId": id, "value": value}),
        );
    }
    let empty = m.agent.call_ok(
        "_maka/plan/query",
        json!({"kind": "list_start", "sessionId": sid}),
    );
    assert_eq!(empty["kind"], "page");
    assert_eq!(empty["latestProposalId"], Value::Null);
    m.agent
        .prompt(&sid, "plan the work", |r| panic!("unexpected {r}"));
    let page = m.agent.call_ok(
        "_maka/plan/query",
        json!({"kind": "list_start", "sessionId": sid}),
    );
    let proposal = &page["items"][0]["proposal"];
    assert_eq!(page["items"][0]["kind"], "proposal", "{page}");
    assert_eq!(proposal["status"], "pending_approval");
    let (pid, version) = (
        page["latestProposalId"].clone(),
        page["storeVersion"].clone(),
    );
    let moved = m.agent.call_ok(
        "_maka/plan/query",
        json!({"kind": "list_continue", "sessionId": sid, "storeVersion": 0, "cursor": "c"}),
    );
    assert_eq!(moved["kind"], "revision_changed", "{moved}");
    let e = m.error(
        "_maka/plan/control",
        json!({"kind": "abandon_proposal", "sessionId": sid, "proposalId": pid, "operationId": "op1"}),
    );
    assert_eq!(reason(&e), "unsupported_operation", "{e}");
    let e = m.error(
        "_maka/plan/control",
        json!({"kind": "cancel_execution", "sessionId": sid, "executionId": "execution-1", "operationId": "op2"}),
    );
    assert_eq!(reason(&e), "unsupported_operation", "{e}");
    let start = m.agent.call_ok(
        "_maka/plan/turn/start",
        json!({"kind": "approve_proposal", "sessionId": sid, "proposalId": pid,
               "expectedRevision": version, "expectedStoreVersion": version, "turnId": "maka-turn-1"}),
    );
    assert_eq!(start["plan"]["eventType"], "proposal_approved", "{start}");
    assert_eq!(start["turn"]["turnId"], "maka-turn-1", "{start}");
    // Its output streams; its end is told (ours: `_maka/turn_state`, not opted in to Maka's).
    let lines = until(&mut m.agent, |v| v["method"] == "_maka/turn_state");
    let said: String = lines
        .iter()
        .filter(|l| l["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|l| l["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert_eq!(said, "Carried out.");
    assert_eq!(
        std::fs::read_to_string(m.ws.path().join("notes.txt")).unwrap(),
        "done\n"
    );
    let after = m.agent.call_ok(
        "_maka/plan/query",
        json!({"kind": "list_start", "sessionId": sid}),
    );
    assert_eq!(after["items"][1]["kind"], "execution", "{after}");
}

/// §1.2 artifact rows: `ingest` with the client's `uploadId`, a `sha256:` digest and 48 KiB
/// chunks; `query` list/get/read_chunk; `delete`.
#[test]
fn artifacts_by_makas_params() {
    let (mut m, _) = maka("artifact", json!({}), &[]);
    let (sid, _) = m.new_session();
    // "hello maka" and its SHA-256.
    let data = "aGVsbG8gbWFrYQ==";
    let digest = "sha256:c6f8fe9ce3845602fd8135fe51fa897fcc03b4157b2017c18aa7cecd1347eb39";
    let e = m.error(
        "_maka/artifact/ingest",
        json!({"kind": "begin", "sessionId": sid, "uploadId": "u1", "name": "n.txt",
               "mimeType": "text/plain", "totalBytes": 10, "contentSha256": "md5:abc"}),
    );
    assert_eq!(e["data"]["code"], "invalid_request", "{e}");
    let opened = m.agent.call_ok(
        "_maka/artifact/ingest",
        json!({"kind": "begin", "sessionId": sid, "uploadId": "u1", "name": "n.txt",
               "mimeType": "text/plain", "totalBytes": 10, "contentSha256": digest}),
    );
    assert_eq!(opened["kind"], "upload_opened", "{opened}");
    assert_eq!(opened["nextOffset"], 0);
    let chunk = m.agent.call_ok(
        "_maka/artifact/ingest",
        json!({"kind": "chunk", "sessionId": sid, "uploadId": "u1", "offset": 0, "chunkBase64": data}),
    );
    assert_eq!(chunk["kind"], "chunk_accepted", "{chunk}");
    assert_eq!(chunk["nextOffset"], 10);
    let committed = m.agent.call_ok(
        "_maka/artifact/ingest",
        json!({"kind": "commit", "sessionId": sid, "uploadId": "u1"}),
    );
    check_committed(&mut m, &sid, &committed);
}

fn check_committed(m: &mut Maka, sid: &str, committed: &Value) {
    assert_eq!(committed["kind"], "committed", "{committed}");
    let reference = &committed["attachment"]["ref"];
    assert_eq!(reference["kind"], "session_file");
    let id = reference["relativePath"].clone();
    let list = m.agent.call_ok(
        "_maka/artifact/query",
        json!({"kind": "list_start", "sessionId": sid}),
    );
    assert_eq!(list["items"][0]["artifactId"], id, "{list}");
    assert!(list["items"][0]["contentSha256"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    let got = m.agent.call_ok(
        "_maka/artifact/query",
        json!({"kind": "get", "sessionId": sid, "artifactId": id}),
    );
    assert_eq!(got["artifact"]["artifactId"], id);
    let chunk = m.agent.call_ok(
        "_maka/artifact/query",
        json!({"kind": "read_chunk", "sessionId": sid, "artifactId": id, "offset": 0}),
    );
    assert_eq!(chunk["chunkBase64"], "aGVsbG8gbWFrYQ==", "{chunk}");
    assert!(chunk["nextOffset"].is_null());
    m.agent.call_ok(
        "_maka/artifact/delete",
        json!({"sessionId": sid, "artifactId": id}),
    );
    let gone = m.agent.call_ok(
        "_maka/artifact/query",
        json!({"kind": "list_start", "sessionId": sid}),
    );
    assert_eq!(gone["items"], json!([]));
}

/// §1.2 memory rows: `query` `state` / `entries_start`, `mutate` `remember` (a conflict is a
/// result); the kinds our memory lacks are named `-32602`s.
#[test]
fn memory_by_makas_params() {
    let (mut m, _) = maka("memory", json!({}), &[]);
    let state = m
        .agent
        .call_ok("_maka/memory/query", json!({"kind": "state"}));
    let rev = state["revision"].clone();
    let added = m.agent.call_ok(
        "_maka/memory/mutate",
        json!({"kind": "remember", "expectedRevision": rev, "text": "Tabs, not spaces."}),
    );
    assert_eq!(added["kind"], "committed", "{added}");
    let stale = m.agent.call_ok(
        "_maka/memory/mutate",
        json!({"kind": "remember", "expectedRevision": rev, "text": "again"}),
    );
    assert_eq!(stale["kind"], "revision_conflict", "{stale}");
    // A session's note only for a session this connection holds.
    let e = m.error(
        "_maka/memory/mutate",
        json!({"kind": "remember", "expectedRevision": rev, "scope": "session",
               "sessionId": "sess_of_someone_else", "text": "x"}),
    );
    assert_eq!(reason(&e), "unknown_session", "{e}");
    let entries = m
        .agent
        .call_ok("_maka/memory/query", json!({"kind": "entries_start"}));
    assert_eq!(
        entries["entries"][0]["text"], "Tabs, not spaces.",
        "{entries}"
    );
    for (method, kind) in [
        ("_maka/memory/query", "document_start"),
        ("_maka/memory/mutate", "propose"),
        ("_maka/memory/mutate", "replace_begin"),
    ] {
        let e = m.error(method, json!({"kind": kind, "expectedRevision": 1}));
        assert_eq!(e["code"], -32602, "{kind}: {e}");
        assert_eq!(reason(&e), "unsupported_operation", "{kind}: {e}");
    }
}

/// §1.3: a client that sets `_meta["_maka/turnStatus"]` and `["_maka/goalPlanStatus"]` gets
/// `_maka/turn/status`, `_maka/goal/status` and `_maka/plan/changed` with Maka's payloads, and
/// none of ours (`_maka/turn_state`, `_maka/goal_update`); the plan and goal tests above show a
/// client without the flags getting ours.
#[test]
fn opted_in_clients_get_makas_notifications_instead_of_ours() {
    let flags = json!({"_maka/turnStatus": true, "_maka/goalPlanStatus": true});
    let (mut m, _) = maka("notify", flags, &[]);
    let (sid, _) = m.new_session();
    for (id, value) in [
        ("permission_mode", "bypass"),
        ("collaboration_mode", "plan"),
    ] {
        m.agent.call_ok(
            "session/set_config_option",
            json!({"sessionId": sid, "configId": id, "value": value}),
        );
    }
    let t = m
        .agent
        .prompt(&sid, "plan the work", |r| panic!("unexpected {r}"));
    let mut seen: Vec<Value> = t.notifications.clone();
    let changed = t
        .notifications
        .iter()
        .find(|n| n["method"] == "_maka/plan/changed")
        .unwrap_or_else(|| panic!("no _maka/plan/changed: {:?}", t.notifications));
    let hint = &changed["params"];
    assert_eq!(hint["sessionId"], sid.as_str());
    assert!(hint["storeVersion"].as_u64().unwrap() > 0, "{hint}");
    let pid = hint["latestProposalId"].clone();
    assert!(pid.is_string(), "{hint}");
    assert!(hint.get("activeExecutionId").is_some(), "{hint}");
    let version = hint["storeVersion"].clone();
    let start = m.agent.call_ok(
        "_maka/plan/turn/start",
        json!({"kind": "approve_proposal", "sessionId": sid, "proposalId": pid,
               "expectedRevision": version, "expectedStoreVersion": version, "turnId": "maka-turn-2"}),
    );
    assert_eq!(start["turn"]["turnId"], "maka-turn-2");
    let lines = until(&mut m.agent, |v| v["method"] == "_maka/turn/status");
    let status = &lines.last().unwrap()["params"];
    assert_eq!(
        *status,
        json!({"sessionId": sid, "turnId": "maka-turn-2", "runId": "", "status": "completed"})
    );
    seen.extend(lines);

    let (sid2, _) = m.new_session();
    let (resp, early) = m.agent.call(
        "_maka/goal/arm",
        json!({"sessionId": sid2, "condition": "make it shine", "maxIterations": 5, "tokenBudget": null}),
    );
    assert!(
        early.iter().any(|l| l["method"] == "_maka/goal/status"),
        "arming is told: {early:?} {resp}"
    );
    let t = m
        .agent
        .prompt(&sid2, "start on it", |r| panic!("unexpected {r}"));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let lines = until(&mut m.agent, |v| {
        v["method"] == "_maka/goal/status" && v["params"]["goal"]["status"] == "achieved"
    });
    let goal = &lines.last().unwrap()["params"]["goal"];
    assert_eq!(goal["condition"], "make it shine");
    assert!(
        lines.iter().any(|l| l["method"] == "_maka/turn/status"),
        "the goal's turns end as _maka/turn/status"
    );
    seen.extend(lines);
    for l in &seen {
        assert!(
            l["method"] != "_maka/turn_state" && l["method"] != "_maka/goal_update",
            "ours not sent to an opted-in client: {l}"
        );
    }
}

/// §1.1 ACP methods as a Maka client uses them: `session/new` → `{sessionId, configOptions}`,
/// `session/prompt` → `{stopReason}` with message chunks, `session/list` `{sessions:
/// [{sessionId, cwd, title?, updatedAt?}]}`, `session/load` replays (user text as
/// `user_message_chunk`) then answers `{configOptions}`, `session/resume` answers
/// `{configOptions}` without replay, `session/cancel` stops a prompt (`cancelled`),
/// `session/close` → `{}`, then the session is no longer this connection's.
#[test]
fn acp_session_methods_as_a_maka_client_uses_them() {
    let (mut m, _) = maka("acp", json!({}), &[]);
    let (sid, options) = m.new_session();
    assert!(options.is_array());
    let t = m.agent.prompt(&sid, "hello", |r| panic!("unexpected {r}"));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert_eq!(t.text(), "Hello from the script!");
    let list = m.agent.call_ok("session/list", json!({"cwd": m.ws.path()}));
    let listed = &list["sessions"][0];
    assert_eq!(listed["sessionId"], sid.as_str(), "{list}");
    assert!(
        listed["cwd"].is_string() && listed["updatedAt"].is_string(),
        "{list}"
    );

    // Other connections (to the same host) load it (replay first) and resume it (no replay).
    let data = m._data.path().to_path_buf();
    let ws = m.ws.path().to_path_buf();
    let reopen = || {
        let mut a = AgentProcess::spawn_with(Spawn {
            args: vec!["--acp".into()],
            env: vec![
                ("MAKA_SCRIPT".into(), script().to_string()),
                ("MAKA_DATA_DIR".into(), data.display().to_string()),
                (
                    "XDG_CONFIG_HOME".into(),
                    data.join("config").display().to_string(),
                ),
            ],
        });
        a.call_ok(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        );
        a
    };
    let mut a = reopen();
    let (resp, before) = a.call(
        "session/load",
        json!({"sessionId": sid, "cwd": ws, "mcpServers": []}),
    );
    assert!(resp["result"]["configOptions"].is_array(), "{resp}");
    let replayed: Vec<&str> = before
        .iter()
        .filter_map(|l| l["params"]["update"]["sessionUpdate"].as_str())
        .collect();
    assert!(replayed.contains(&"user_message_chunk"), "{replayed:?}");
    assert!(replayed.contains(&"agent_message_chunk"), "{replayed:?}");
    drop(a);
    let mut a = reopen();
    let (resp, before) = a.call(
        "session/resume",
        json!({"sessionId": sid, "cwd": ws, "mcpServers": []}),
    );
    assert!(resp["result"]["configOptions"].is_array(), "{resp}");
    assert!(
        !before
            .iter()
            .any(|l| l["params"]["update"]["sessionUpdate"] == "user_message_chunk"),
        "resume does not replay: {before:?}"
    );
    // A prompt cancelled while it runs answers `cancelled`.
    let id = a.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "slowly please"}]}),
    );
    a.notify("session/cancel", json!({"sessionId": sid}));
    let (resp, _) = a.response_to(&id);
    assert_eq!(resp["result"]["stopReason"], "cancelled", "{resp}");
    assert_eq!(
        a.call_ok("session/close", json!({"sessionId": sid})),
        json!({})
    );
    let (resp, _) = a.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}),
    );
    assert_eq!(
        error_of(&resp)["data"]["reason"],
        "unknown_session",
        "{resp}"
    );
}

/// `maka-acp --acp` on an external host, initialized as a Maka client with `client_meta`.
fn maka_on(host: &support::host::HostProcess, client_meta: Value) -> AgentProcess {
    let mut agent = AgentProcess::spawn_with(Spawn {
        args: vec!["--acp".into(), "--host-url".into(), host.url("")],
        env: vec![
            ("RUST_LOG".into(), "info".into()),
            ("MAKA_HOST_TOKEN".into(), host.token.clone()),
        ],
    });
    agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"_meta": client_meta}}),
    );
    agent
}

/// §1.2 `_maka/turn/resume` after a host crash: `{kind: "started", turn, sourceRunId,
/// sourceRuntimeEventHighWater}` at admission, the run's output as `session/update`s, its end
/// as `_maka/turn/status`; asked again, or with a run that is not the latest, it is `parked`.
#[test]
fn turn_resume_starts_the_interrupted_run_at_admission() {
    let data = TempDir::new("makad-resume-data");
    let ws = TempDir::new("makad-resume-ws");
    let script = json!({
        "rules": [{"when": "slow", "responses": [[{"text": "Starting slowly"}, {"delayMs": 30000}, {"text": "never"}]]}],
        "default": [[{"text": "Picked up where it stopped."}]]
    });
    let env = vec![("MAKA_SCRIPT".to_string(), script.to_string())];
    let mut host = support::host::HostProcess::start_env(data.path(), env.clone());
    let mut first = maka_on(&host, json!({}));
    let r = first.call_ok("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    let sid = r["sessionId"].as_str().unwrap().to_string();
    first.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "slow work"}]}),
    );
    until(&mut first, |v| {
        v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    host.kill9();
    drop(first);

    let host = support::host::HostProcess::start_env(data.path(), env);
    let mut m = maka_on(&host, json!({"_maka/turnStatus": true}));
    m.call_ok(
        "session/load",
        json!({"sessionId": sid, "cwd": ws.path(), "mcpServers": []}),
    );
    let stale = m.call_ok(
        "_maka/turn/resume",
        json!({"sessionId": sid, "sourceRunId": "run_not_the_latest"}),
    );
    assert_eq!(stale["kind"], "parked", "{stale}");
    assert_eq!(stale["plan"]["reason"], "resume_candidate_missing");
    let (resp, _) = m.call("_maka/turn/resume", json!({"sessionId": sid}));
    let started = &resp["result"];
    assert_eq!(started["kind"], "started", "{resp}");
    assert!(started["sourceRunId"].is_string(), "{started}");
    assert!(started["sourceRuntimeEventHighWater"].is_u64(), "{started}");
    let turn_id = started["turn"]["turnId"].clone();
    assert_eq!(started["turn"]["sessionId"], sid.as_str());
    let lines = until(&mut m, |v| v["method"] == "_maka/turn/status");
    let said: String = lines
        .iter()
        .filter(|l| l["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|l| l["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(said.contains("Picked up where it stopped."), "{said:?}");
    let end = &lines.last().unwrap()["params"];
    assert_eq!(end["turnId"], turn_id, "{end}");
    assert_eq!(end["status"], "completed", "{end}");
    let again = m.call_ok("_maka/turn/resume", json!({"sessionId": sid}));
    assert_eq!(again["kind"], "parked", "never twice: {again}");
}
