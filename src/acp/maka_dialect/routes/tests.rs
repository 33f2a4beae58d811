//! Table tests of the translations.

use super::plans::revision_of;
use super::*;
use crate::acp::maka_dialect::shapes::plan_page;
use crate::host_api::wire::{Goal, GoalLimits, PlanEntry};

fn goal(status: &str, reason: Option<&str>) -> Goal {
    Goal {
        goal_id: "goal_1".into(),
        revision: 3,
        session_id: "s".into(),
        objective: "make it shine".into(),
        status: status.into(),
        limits: GoalLimits {
            max_turns: 7,
            max_tokens: Some(5000),
            max_minutes: None,
        },
        turns_run: 2,
        tokens_used: 900,
        started_at: 10,
        updated_at: 20,
        reason: reason.map(String::from),
        evidence: None,
    }
}

/// Our goal statuses as Maka's (one row a case), and its fields.
#[test]
fn goals_read_as_makas() {
    for (status, reason, want) in [
        ("active", None, "active"),
        ("waiting_for_approval", None, "waiting"),
        ("paused", Some("host_restarted"), "paused"),
        ("completed", None, "achieved"),
        ("cancelled", None, "cleared"),
        ("stopped", Some("turn_limit"), "max_iterations"),
        ("stopped", Some("token_limit"), "budget_limited"),
        ("stopped", Some("time_limit"), "stalled"),
        ("failed", Some("provider error"), "stalled"),
    ] {
        let g = maka_goal(&goal(status, reason));
        assert_eq!(g["status"], want, "{status} {reason:?}");
    }
    let g = maka_goal(&goal("completed", None));
    assert_eq!(g["condition"], "make it shine");
    assert_eq!(g["maxIterations"], 7);
    assert_eq!(g["tokenBudget"], 5000);
    assert_eq!(g["iterations"], 2);
    assert_eq!(g["achievedAt"], 20);
    assert_eq!(g["pausedAt"], Value::Null);
}

fn plan(revision: u64, status: &str, done: &[bool]) -> ops::PlanView {
    let entries = done
        .iter()
        .map(|d| {
            serde_json::from_value::<PlanEntry>(json!({
                "content": "step",
                "status": if *d { "completed" } else { "pending" },
                "priority": "medium",
            }))
            .unwrap()
        })
        .collect();
    ops::PlanView {
        revision,
        status: status.into(),
        entries,
        updated_at: None,
    }
}

/// Our plan as Maka's page (one row a case): (revision, status, steps done) → (latest
/// proposal, its status, active execution, items).
#[test]
fn plans_read_as_makas_pages() {
    for (p, latest, proposal, active, items) in [
        (plan(0, "none", &[]), None, None, None, 0),
        (
            plan(4, "proposed", &[false]),
            Some("proposal-4"),
            Some("pending_approval"),
            None,
            1,
        ),
        (
            plan(4, "rejected", &[false]),
            Some("proposal-4"),
            Some("stale"),
            None,
            1,
        ),
        (
            plan(5, "approved", &[true, false]),
            Some("proposal-5"),
            Some("approved"),
            Some("execution-5"),
            2,
        ),
        (
            plan(5, "approved", &[true, true]),
            Some("proposal-5"),
            Some("approved"),
            None,
            2,
        ),
    ] {
        let page = plan_page("s", &p);
        assert_eq!(page["latestProposalId"], json!(latest), "{page}");
        assert_eq!(page["activeExecutionId"], json!(active), "{page}");
        assert_eq!(page["items"].as_array().unwrap().len(), items, "{page}");
        if let Some(status) = proposal {
            assert_eq!(page["items"][0]["proposal"]["status"], status, "{page}");
        }
        assert_eq!(page["storeVersion"], p.revision);
    }
    assert_eq!(revision_of("proposal-12"), Some(12));
    assert_eq!(revision_of("execution-3"), Some(3));
    assert_eq!(revision_of("plan-3"), None);
}

/// Hostile params are named `-32602`s, with Maka's decode reasons (one row a case).
#[test]
fn makas_params_are_checked_before_any_host_call() {
    type Read = fn(&Params) -> Result<(), ResponseError>;
    let rows: [(Read, Value, &str); 9] = [
        (
            |p| read_goal_arm(p).map(|_| ()),
            json!({"sessionId": "s", "condition": "  "}),
            "invalid_goal_plan_input",
        ),
        (
            |p| read_goal_arm(p).map(|_| ()),
            json!({"sessionId": "s", "condition": "x", "maxIterations": 0}),
            "invalid_goal_plan_input",
        ),
        (
            |p| read_goal_control(p).map(|_| ()),
            json!({"sessionId": "s", "goalId": "g", "expectedRevision": 1, "action": "cancel"}),
            "invalid_goal_plan_input",
        ),
        (
            |p| read_copy_source(p).map(|_| ()),
            json!({"sessionId": "s", "maxContributions": 129}),
            "invalid_copy_source_query",
        ),
        (
            |p| read_copy_source(p).map(|_| ()),
            json!({"sessionId": "s", "position": "x"}),
            "invalid_copy_source_query",
        ),
        (
            |p| read_resume(p).map(|_| ()),
            json!({"sessionId": "s", "expectedRuntimeEventHighWater": 2}),
            "invalid_resume_query",
        ),
        (
            |p| read_plan_query(p).map(|_| ()),
            json!({"sessionId": "s", "kind": "list_all"}),
            "invalid_goal_plan_input",
        ),
        (
            |p| read_plan_turn(p).map(|_| ()),
            json!({"sessionId": "s", "kind": "request_revision", "proposalId": "proposal-1", "turnId": "t"}),
            "invalid_goal_plan_input",
        ),
        (
            |p| read_ingest(p).map(|_| ()),
            json!({"sessionId": "s", "kind": "chunk", "uploadId": "u", "offset": 0, "chunkBase64": "A".repeat(70_000)}),
            "",
        ),
    ];
    for (read, params, reason) in rows {
        let e = read(&Params::of(&params).unwrap()).expect_err(&params.to_string());
        assert_eq!(e.code, crate::jsonrpc::code::INVALID_PARAMS, "{params}");
        let data = e.data.unwrap_or_default();
        if reason.is_empty() {
            assert_eq!(data["code"], "invalid_request", "{params}");
        } else {
            assert_eq!(data["reason"], reason, "{params}");
        }
    }
}
