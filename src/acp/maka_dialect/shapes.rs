//! Our goal and plan in the shapes of Apache Maka's dialect (`maka-adapter-surface.md` §1.2),
//! for a client that speaks it (its requests, `routes/`; its notifications, [`super::told`]): its `Goal`, its plan page (a proposal per plan revision, an
//! execution once approved) and `_maka/plan/changed`'s params. Pure.

use crate::acp::types::to_json;
use crate::host_api::ops;
use crate::host_api::wire::Goal;
use serde_json::{json, Value};

/// Our goal as Maka's `Goal` (§1.2). Statuses: `waiting_for_approval` → `waiting`, `completed`
/// → `achieved`, `cancelled` → `cleared`, a limit (`stopped`) → `max_iterations` /
/// `budget_limited` / `stalled`, `failed` → `stalled`.
pub fn maka_goal(g: &Goal) -> Value {
    let status = match (g.status.as_str(), g.reason.as_deref()) {
        ("waiting_for_approval", _) => "waiting",
        ("completed", _) => "achieved",
        ("cancelled", _) => "cleared",
        ("stopped", Some("turn_limit")) => "max_iterations",
        ("stopped", Some("token_limit")) => "budget_limited",
        ("stopped" | "failed", _) => "stalled",
        (other, _) => other,
    };
    let at = |s: &str| (g.status == s).then_some(g.updated_at);
    json!({
        "goalId": g.goal_id,
        "revision": g.revision,
        "sessionId": g.session_id,
        "condition": g.objective,
        "status": status,
        "setAt": g.started_at,
        "iterations": g.turns_run,
        "maxIterations": g.limits.max_turns,
        "consecutiveNoProgress": 0,
        "blockCap": null,
        "tokenBudget": g.limits.max_tokens,
        "tokensSpent": g.tokens_used,
        "lastReason": g.reason,
        "achievedAt": at("completed"),
        "pausedAt": at("paused"),
    })
}

pub fn proposal_id(revision: u64) -> String {
    format!("proposal-{revision}")
}

pub fn execution_id(revision: u64) -> String {
    format!("execution-{revision}")
}

/// The plan revision a proposal or execution id names.
pub fn revision_of(id: &str) -> Option<u64> {
    id.strip_prefix("proposal-")
        .or_else(|| id.strip_prefix("execution-"))?
        .parse()
        .ok()
}

fn steps(plan: &ops::PlanView) -> Value {
    to_json(&plan.entries)
}

fn execution_active(plan: &ops::PlanView) -> bool {
    plan.status == "approved" && plan.entries.iter().any(|e| e.status != "completed")
}

/// Our plan as Maka's page: its latest version is a proposal (`pending_approval`,
/// `approved`, or `stale` once rejected); an approved one also has an execution.
pub fn plan_page(session_id: &str, plan: &ops::PlanView) -> Value {
    let mut items = vec![];
    let (mut latest, mut active) = (None, None);
    if plan.revision > 0 {
        let status = match plan.status.as_str() {
            "approved" => "approved",
            "rejected" => "stale",
            _ => "pending_approval",
        };
        latest = Some(proposal_id(plan.revision));
        items.push(json!({"kind": "proposal", "proposal": {
            "proposalId": latest, "sessionId": session_id, "revision": plan.revision,
            "status": status, "steps": steps(plan), "createdAt": plan.updated_at,
        }}));
        if plan.status == "approved" {
            let running = execution_active(plan);
            if running {
                active = Some(execution_id(plan.revision));
            }
            items.push(json!({"kind": "execution", "execution": {
                "executionId": execution_id(plan.revision), "proposalId": latest,
                "sessionId": session_id,
                "status": if running { "active" } else { "completed" },
                "steps": steps(plan),
            }}));
        }
    }
    json!({
        "kind": "page",
        "sessionId": session_id,
        "storeVersion": plan.revision,
        "latestProposalId": latest,
        "activeExecutionId": active,
        "items": items,
        "nextCursor": null,
    })
}

/// `_maka/plan/changed {sessionId, storeVersion, latestProposalId, activeExecutionId}`'s params.
pub fn plan_changed(session_id: &str, plan: &crate::host_api::ops::PlanView) -> Value {
    let page = plan_page(session_id, plan);
    json!({
        "sessionId": session_id,
        "storeVersion": page["storeVersion"],
        "latestProposalId": page["latestProposalId"],
        "activeExecutionId": page["activeExecutionId"],
    })
}
