//! Maka's plan requests over our plan: a proposal per plan revision, an execution once approved.

use super::*;
// ---- plans: a proposal per plan revision, an execution once approved ----

pub(super) use crate::acp::maka_dialect::shapes::revision_of;
use crate::acp::maka_dialect::shapes::{execution_id, plan_page, proposal_id};

pub struct PlanQuery {
    session_id: String,
    /// `list_continue`'s `storeVersion` (its cursor is ours: everything came in one page).
    continue_at: Option<u64>,
}

pub fn read_plan_query(p: &Params) -> ParamResult<PlanQuery> {
    let continue_at = match p.required_str("kind")? {
        "list_start" => None,
        "list_continue" => Some(p.required_u64("storeVersion")?),
        other => {
            return Err(invalid(
                "invalid_goal_plan_input",
                "_maka/plan/query",
                format_args!("`kind` must be list_start or list_continue, not {other:?}"),
            ))
        }
    };
    Ok(PlanQuery {
        session_id: p.required_str("sessionId")?.into(),
        continue_at,
    })
}

fn plan_of(conn: &Connected, session_id: &str) -> Result<ops::PlanView, ResponseError> {
    let at = ops::SessionRef {
        session_id: session_id.into(),
    };
    conn.request::<ops::PlanQuery>(&at)
}

/// `_maka/plan/query` with Maka's params → a page, or `revision_changed`.
pub fn plan_query(ctx: &Ctx, q: PlanQuery) -> Result<Value, ResponseError> {
    owned(ctx, &q.session_id)?;
    let conn = ctx.host()?;
    let plan = plan_of(&conn, &q.session_id)?;
    match q.continue_at {
        None => Ok(plan_page(&q.session_id, &plan)),
        Some(v) if v != plan.revision => Ok(json!({
            "kind": "revision_changed", "expected": v, "actual": plan.revision})),
        Some(_) => {
            let mut page = plan_page(&q.session_id, &plan);
            page["items"] = json!([]);
            Ok(page)
        }
    }
}

pub struct PlanControl {
    session_id: String,
    kind: String,
    /// The proposal or execution named.
    target: String,
    expected_store_version: Option<u64>,
    /// `plan/turn/start`'s client-chosen turn.
    turn_id: Option<String>,
}

fn read_plan_kind(p: &Params, operation: &str, turn: bool) -> ParamResult<PlanControl> {
    let kind = p.required_str("kind")?;
    let target = match kind {
        "approve_proposal" | "request_revision" | "abandon_proposal" => {
            p.required_str("proposalId")?
        }
        "resume_execution" | "cancel_execution" => p.required_str("executionId")?,
        other => {
            return Err(invalid(
                "invalid_goal_plan_input",
                operation,
                format_args!("`kind` {other:?} is not one of Maka's plan operations"),
            ))
        }
    };
    if !turn {
        p.required_str("operationId")?;
    }
    let expected_store_version = match kind {
        "approve_proposal" => Some(p.required_u64("expectedStoreVersion")?),
        _ => None,
    };
    Ok(PlanControl {
        session_id: p.required_str("sessionId")?.into(),
        kind: kind.into(),
        target: target.into(),
        expected_store_version,
        turn_id: if turn {
            Some(p.required_str("turnId")?.into())
        } else {
            None
        },
    })
}

pub fn read_plan_control(p: &Params) -> ParamResult<PlanControl> {
    read_plan_kind(p, "_maka/plan/control", false)
}

pub fn read_plan_turn(p: &Params) -> ParamResult<PlanControl> {
    let c = read_plan_kind(p, "_maka/plan/turn/start", true)?;
    if !matches!(c.kind.as_str(), "approve_proposal" | "resume_execution") {
        return Err(invalid(
            "invalid_goal_plan_input",
            "_maka/plan/turn/start",
            "`kind` must be approve_proposal or resume_execution",
        ));
    }
    // Checked before anything is approved: a turn id the host would refuse must not leave
    // the plan approved and no turn started.
    if !c
        .turn_id
        .as_deref()
        .is_some_and(crate::host_api::wire::valid_id)
    {
        return Err(invalid(
            "invalid_goal_plan_input",
            "_maka/plan/turn/start",
            "`turnId` must be 1 to 128 letters, digits, `_` or `-`",
        ));
    }
    Ok(c)
}

/// `_maka/plan/control` with Maka's params → `{sessionId, storeVersion, eventType,
/// proposalId, executionId}`. `approve_proposal` approves our plan, `request_revision` is our
/// "keep planning"; abandoning a proposal or cancelling an execution has no counterpart.
pub fn plan_control(ctx: &Ctx, c: PlanControl) -> Result<Value, ResponseError> {
    owned(ctx, &c.session_id)?;
    let conn = ctx.host()?;
    control_plan(ctx, &conn, &c)
}

fn control_plan(ctx: &Ctx, conn: &Connected, c: &PlanControl) -> Result<Value, ResponseError> {
    let (action, event) = match c.kind.as_str() {
        "approve_proposal" => (ops::PlanAction::Approve, "proposal_approved"),
        "request_revision" => (ops::PlanAction::Reject, "revision_requested"),
        "resume_execution" => {
            return Err(unsupported(
                "_maka/plan/control resume_execution",
                "an approved plan is carried out by a turn; use _maka/plan/turn/start",
            ))
        }
        other => {
            return Err(unsupported(
                &format!("_maka/plan/control {other}"),
                "a plan here is proposed, approved or sent back; it is not abandoned or cancelled on its own (cancel the turn that carries it out)",
            ))
        }
    };
    let plan = plan_of(conn, &c.session_id)?;
    if revision_of(&c.target) != Some(plan.revision) || plan.revision == 0 {
        return Err(MakaCode::NotFound.error_with(
            format!(
                "{} is not the latest plan of session {}",
                c.target, c.session_id
            ),
            json!({"proposalId": c.target, "latestProposalId": proposal_id(plan.revision)}),
        ));
    }
    let expected = c.expected_store_version.unwrap_or(plan.revision);
    let input = ops::PlanControlInput {
        session_id: c.session_id.clone(),
        expected_revision: expected,
        action,
    };
    match conn.request::<ops::PlanControl>(&input)? {
        ops::PlanOutcome::Committed { plan } => {
            crate::acp::maka_dialect::plan_changed(&ctx.shared, &c.session_id, &plan);
            let approved = plan.status == "approved";
            Ok(json!({
                "sessionId": c.session_id,
                "storeVersion": plan.revision,
                "eventType": event,
                "proposalId": proposal_id(plan.revision),
                "executionId": approved.then(|| execution_id(plan.revision)),
            }))
        }
        ops::PlanOutcome::RevisionConflict { expected, actual } => {
            Err(revision_conflict(expected, actual))
        }
    }
}

/// `_maka/plan/turn/start`: approves the proposal (or takes the approved one) and carries it
/// out as the client's `turnId`, answered at admission `{plan, turn}`.
pub fn plan_turn_start(ctx: &Ctx, c: PlanControl) -> Result<Value, ResponseError> {
    let session = owned(ctx, &c.session_id)?;
    // Busy is known before the plan is touched: nothing is approved for a turn that cannot
    // start.
    if session.prompt_turn().is_some() {
        return Err(errors::session_busy(&c.session_id));
    }
    let conn = ctx.host()?;
    let plan_result = if c.kind == "approve_proposal" {
        control_plan(ctx, &conn, &c)?
    } else {
        let plan = plan_of(&conn, &c.session_id)?;
        if revision_of(&c.target) != Some(plan.revision) || plan.status != "approved" {
            return Err(MakaCode::PlanNotApproved.error_with(
                format!(
                    "{} is not an approved plan of session {}",
                    c.target, c.session_id
                ),
                json!({"executionId": c.target}),
            ));
        }
        json!({"sessionId": c.session_id, "storeVersion": plan.revision,
               "eventType": "execution_resumed", "proposalId": proposal_id(plan.revision),
               "executionId": execution_id(plan.revision)})
    };
    if session.prompt_turn().is_some() {
        return Err(errors::session_busy(&c.session_id));
    }
    let turn_id = c.turn_id.clone().unwrap_or_default();
    let input = ops::TurnRef {
        session_id: c.session_id.clone(),
        turn_id: turn_id.clone(),
        run_id: None,
    };
    let started = crate::acp::turns::start_followed(ctx, &session, &turn_id, |conn| {
        conn.request::<ops::PlanTurnStart>(&input)
    })?;
    match started {
        ops::StartOutcome::Started { turn } => {
            Ok(json!({"plan": plan_result, "turn": turn_snapshot(&turn)}))
        }
        ops::StartOutcome::Parked { reason } => {
            session.expect_turn(&turn_id, false);
            Err(MakaCode::PlanNotApproved
                .error_with("The plan's turn could not start", json!({"reason": reason})))
        }
        // Never: a plan's turn is not queued.
        ops::StartOutcome::Queued { .. } => {
            session.expect_turn(&turn_id, false);
            Err(errors::session_busy(&c.session_id))
        }
    }
}
