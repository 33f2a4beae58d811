//! Apache Maka's `_maka/` requests (`maka-adapter-surface.md` §1.2), each a translation onto
//! the host operations our own methods use: its params read into our inputs, our outputs
//! shaped as its results. Where our model cannot express one of its operations the answer is a
//! `-32602` naming it ([`unsupported`]), never a silent success. Which rows of the method table
//! (`methods.rs`) come here, and when (Maka's params, or Maka's dialect), the table says.

use crate::acp::agent::Ctx;
use crate::acp::errors::{self, MakaCode};
use crate::acp::host_link::Connected;
use crate::acp::params::{ParamResult, Params};
use crate::acp::session::AcpSession;
use crate::acp::types::to_json;
use crate::host_api::ops::{self, ArtifactAnswer, ArtifactQueryInput};
use crate::host_api::wire::{Goal, Session, TurnSnapshot};
use crate::jsonrpc::ResponseError;
use serde_json::{json, Value};
use std::sync::Arc;

/// Maka's own limits on goals (§1.2), and ours where they are tighter.
const MAKA_MAX_ITERATIONS: u64 = 200;
const OUR_MAX_TURNS: u64 = 100;
const MIN_TOKEN_BUDGET: u64 = 1000;
/// Maka's page and chunk bounds.
const MAX_CONTRIBUTIONS: u64 = 128;
const READ_CHUNK: u64 = 32 * 1024;

/// `-32602` for an operation of Maka's that our model cannot express: says which and why.
pub fn unsupported(operation: &str, why: &str) -> ResponseError {
    ResponseError::invalid_params(format_args!(
        "`{operation}` is Apache Maka's and maka-acp cannot express it: {why}"
    ))
    .with_data(json!({"reason": "unsupported_operation", "operation": operation}))
}

/// A `-32602` naming Maka's decode reason for `operation`.
fn invalid(reason: &str, operation: &str, message: impl std::fmt::Display) -> ResponseError {
    ResponseError::invalid_params(message)
        .with_data(json!({"reason": reason, "operation": operation}))
}

/// A session this connection owns (Maka's ownership rule), else its `unknown_session`.
fn owned(ctx: &Ctx, id: &str) -> Result<Arc<AcpSession>, ResponseError> {
    ctx.session(id).ok_or_else(|| errors::unknown_session(id))
}

fn optional_u64(p: &Params, field: &str) -> ParamResult<Option<u64>> {
    match p.get(field) {
        None => Ok(None),
        Some(_) => p.required_u64(field).map(Some),
    }
}

// ---- goals ----

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

/// `_maka/goal/query` in Maka's dialect → `{sessionId, goal: Goal | null}`.
pub fn goal_query(ctx: &Ctx, input: ops::SessionRef) -> Result<Value, ResponseError> {
    owned(ctx, &input.session_id)?;
    let conn = ctx.host()?;
    let view = ctx.call::<ops::GoalQuery>(&conn, &input)?;
    Ok(json!({"sessionId": input.session_id, "goal": view.goal.as_ref().map(maka_goal)}))
}

pub fn read_goal_arm(p: &Params) -> ParamResult<ops::GoalArmInput> {
    const OP: &str = "_maka/goal/arm";
    let condition = p.required_str("condition")?.trim();
    if condition.is_empty() {
        return Err(invalid(
            "invalid_goal_plan_input",
            OP,
            "`condition` is empty; say what the goal is",
        ));
    }
    let max_turns = match optional_u64(p, "maxIterations")? {
        Some(n) if n == 0 || n > MAKA_MAX_ITERATIONS => {
            return Err(invalid(
                "invalid_goal_plan_input",
                OP,
                format_args!("`maxIterations` must be 1 to {MAKA_MAX_ITERATIONS}"),
            ))
        }
        Some(n) if n > OUR_MAX_TURNS => {
            return Err(unsupported(
                "_maka/goal/arm maxIterations > 100",
                "a goal runs at most 100 turns here; ask for 100 or fewer",
            ))
        }
        n => n.map(|n| n as u32),
    };
    let max_tokens = match optional_u64(p, "tokenBudget")? {
        Some(n) if n < MIN_TOKEN_BUDGET => {
            return Err(invalid(
                "invalid_goal_plan_input",
                OP,
                format_args!("`tokenBudget` must be at least {MIN_TOKEN_BUDGET}"),
            ))
        }
        n => n,
    };
    Ok(ops::GoalArmInput {
        session_id: p.required_str("sessionId")?.into(),
        objective: condition.into(),
        max_turns,
        max_tokens,
        max_minutes: None,
    })
}

/// `_maka/goal/arm` with Maka's params → `{sessionId, goal}`. Our goal starts working at once
/// (Maka's waits for the next `session/prompt`): its turns stream as `session/update`s.
pub fn goal_arm(ctx: &Ctx, input: ops::GoalArmInput) -> Result<Value, ResponseError> {
    owned(ctx, &input.session_id)?;
    let conn = ctx.host()?;
    let goal = ctx.call::<ops::GoalArm>(&conn, &input)?;
    crate::acp::maka::show_goal(ctx, &conn, &input.session_id, &goal);
    Ok(json!({"sessionId": input.session_id, "goal": maka_goal(&goal)}))
}

pub struct GoalControl {
    session_id: String,
    goal_id: String,
    expected_revision: u64,
    /// Ours: `pause`, `resume`, `cancel`.
    action: &'static str,
}

pub fn read_goal_control(p: &Params) -> ParamResult<GoalControl> {
    let action = match p.required_str("action")? {
        "pause" => "pause",
        "resume" => "resume",
        "clear" => "cancel",
        other => {
            return Err(invalid(
                "invalid_goal_plan_input",
                "_maka/goal/control",
                format_args!("`action` must be pause, resume or clear, not {other:?}"),
            ))
        }
    };
    Ok(GoalControl {
        session_id: p.required_str("sessionId")?.into(),
        goal_id: p.required_str("goalId")?.into(),
        expected_revision: p.required_u64("expectedRevision")?,
        action,
    })
}

/// `_maka/goal/control` with Maka's params → `{sessionId, goal}`; a goal that changed since
/// `expectedRevision` is Maka's `revision_conflict` (checked just before the change).
pub fn goal_control(ctx: &Ctx, c: GoalControl) -> Result<Value, ResponseError> {
    owned(ctx, &c.session_id)?;
    let conn = ctx.host()?;
    let current = ctx
        .call::<ops::GoalQuery>(
            &conn,
            &ops::SessionRef {
                session_id: c.session_id.clone(),
            },
        )?
        .goal
        .filter(|g| g.goal_id == c.goal_id)
        .ok_or_else(|| {
            MakaCode::NotFound.error_with(
                format!("Session {} has no goal {}", c.session_id, c.goal_id),
                json!({"goalId": c.goal_id}),
            )
        })?;
    if current.revision != c.expected_revision {
        return Err(revision_conflict(c.expected_revision, current.revision));
    }
    let input = ops::GoalControlInput {
        session_id: c.session_id.clone(),
        goal_id: c.goal_id,
        action: c.action.into(),
    };
    let goal = ctx.call::<ops::GoalControl>(&conn, &input)?;
    crate::acp::maka::show_goal(ctx, &conn, &c.session_id, &goal);
    Ok(json!({"sessionId": c.session_id, "goal": maka_goal(&goal)}))
}

fn revision_conflict(expected: u64, actual: u64) -> ResponseError {
    MakaCode::RevisionConflict.error_with(
        "It changed since you read it; read it again and retry",
        json!({"code": "revision_conflict", "expectedRevision": expected, "actualRevision": actual}),
    )
}

// ---- sessions: copy source, branch, revision ----

/// A session as Maka's catalog lists it.
fn catalog_item(s: &Session) -> Value {
    let mut item = json!({
        "sessionId": s.id,
        "cwd": s.workspace.path(),
        "updatedAt": crate::acp::projection::iso8601(s.last_used_at),
        "revision": s.revision,
    });
    if let Some(name) = &s.name {
        item["title"] = json!(name);
    }
    item
}

pub struct CopySource {
    session_id: String,
    through_sequence: Option<u64>,
    position: u64,
    max: u64,
}

pub fn read_copy_source(p: &Params) -> ParamResult<CopySource> {
    let max = optional_u64(p, "maxContributions")?.unwrap_or(MAX_CONTRIBUTIONS);
    if max == 0 || max > MAX_CONTRIBUTIONS {
        return Err(invalid(
            "invalid_copy_source_query",
            "_maka/session/copy-source/query",
            format_args!("`maxContributions` must be 1 to {MAX_CONTRIBUTIONS}"),
        ));
    }
    let position = match p.get("position") {
        None => 0,
        Some(Value::Number(_)) => p.required_u64("position")?,
        // An opaque position of ours is the decimal index we handed out.
        Some(Value::String(s)) => s.parse().map_err(|_| {
            invalid(
                "invalid_copy_source_query",
                "_maka/session/copy-source/query",
                "`position` is not one this agent handed out",
            )
        })?,
        Some(_) => {
            return Err(invalid(
                "invalid_copy_source_query",
                "_maka/session/copy-source/query",
                "`position` must be a number or a position string",
            ))
        }
    };
    Ok(CopySource {
        session_id: p.required_str("sessionId")?.into(),
        through_sequence: optional_u64(p, "throughSequence")?,
        position,
        max,
    })
}

/// `_maka/session/copy-source/query` → the turns a branch can copy through, a page at a time,
/// with the revision `branch/create` must name. A turn's `firstSequence` is its position (1
/// for the first turn).
pub fn copy_source(ctx: &Ctx, q: CopySource) -> Result<Value, ResponseError> {
    owned(ctx, &q.session_id)?;
    let conn = ctx.host()?;
    let at = ops::SessionRef {
        session_id: q.session_id.clone(),
    };
    let revision = ctx
        .call::<ops::SessionGet>(&conn, &at)?
        .session
        .map(|s| s.revision)
        .ok_or_else(|| errors::unknown_session(&q.session_id))?;
    let turns = ctx.call::<ops::SessionTurns>(&conn, &at)?.turns;
    let through = q.through_sequence.unwrap_or(u64::MAX);
    let eligible: Vec<(u64, &ops::TurnSummary)> = turns
        .iter()
        .enumerate()
        .map(|(i, t)| (i as u64 + 1, t))
        .filter(|(seq, _)| *seq <= through)
        .collect();
    let start = (q.position as usize).min(eligible.len());
    let end = start.saturating_add(q.max as usize).min(eligible.len());
    let contributions: Vec<Value> = eligible[start..end]
        .iter()
        .map(|(seq, t)| {
            json!({
                "turnId": t.turn_id,
                "firstSequence": seq,
                "userPromptPreview": t.title.clone().unwrap_or_default(),
                "latestState": t.status,
            })
        })
        .collect();
    Ok(json!({
        "sessionId": q.session_id,
        "expectedSourceRevision": revision,
        "throughSequence": q.through_sequence,
        "contributions": contributions,
        "nextPosition": (end < eligible.len()).then_some(end),
    }))
}

pub struct BranchCreate {
    source: String,
    target: String,
    source_turn_id: String,
    expected_source_revision: u64,
}

pub fn read_branch_create(p: &Params) -> ParamResult<BranchCreate> {
    Ok(BranchCreate {
        source: p.required_str("sourceSessionId")?.into(),
        target: p.required_str("targetSessionId")?.into(),
        source_turn_id: p.required_str("sourceTurnId")?.into(),
        expected_source_revision: p.required_u64("expectedSourceRevision")?,
    })
}

/// `_maka/session/branch/create` (and `revision/create` with Maka's params): a new session,
/// the client's `targetSessionId`, with the source's conversation through `sourceTurnId` →
/// `{kind: "committed", session}` or `{kind: "source_revision_conflict", expectedRevision,
/// actualRevision}`. The target is this connection's at once (no `session/load` needed).
pub fn branch_create(ctx: &Ctx, b: BranchCreate) -> Result<Value, ResponseError> {
    owned(ctx, &b.source)?;
    if ctx.session(&b.target).is_some() {
        return Err(ResponseError::invalid_params(format_args!(
            "`targetSessionId` {} is a session this connection already has; choose a new id",
            b.target
        ))
        .with_data(json!({"field": "targetSessionId", "reason": "target_owned"})));
    }
    let conn = ctx.host()?;
    let input = ops::BranchInput {
        source_session_id: b.source,
        target_session_id: b.target,
        through_turn_id: Some(b.source_turn_id),
        expected_source_revision: Some(b.expected_source_revision),
        workspace: None,
        additional_directories: None,
        mcp_servers: vec![],
        system_prompt: None,
    };
    Ok(match ctx.call::<ops::BranchCreate>(&conn, &input)? {
        ops::BranchOutcome::Committed { session } => {
            // The target is this connection's now, as Maka's is: it can be prompted at once.
            crate::acp::lifecycle::attach_made(ctx, &conn, &session)?;
            json!({"kind": "committed", "session": catalog_item(&session)})
        }
        ops::BranchOutcome::SourceRevisionConflict { expected, actual } => json!({
            "kind": "source_revision_conflict",
            "expectedRevision": expected,
            "actualRevision": actual,
        }),
    })
}

pub fn read_abandon(p: &Params) -> ParamResult<String> {
    Ok(p.required_str("targetSessionId")?.into())
}

/// `_maka/session/revision/abandon {targetSessionId}`: a copy (a session made by branch or
/// revision create) is deleted — `abandoned`; any other session is kept — `retained`.
pub fn abandon(ctx: &Ctx, target: String) -> Result<Value, ResponseError> {
    let conn = ctx.host()?;
    let at = ops::SessionRef {
        session_id: target.clone(),
    };
    let copy = ctx
        .call::<ops::SessionGet>(&conn, &at)?
        .session
        .is_some_and(|s| s.lineage.is_some());
    if !copy {
        return Ok(json!({"kind": "retained", "sessionId": target}));
    }
    crate::acp::lifecycle::delete(ctx, &target)?;
    Ok(json!({"kind": "abandoned", "sessionId": target}))
}

// ---- turns ----

fn turn_snapshot(t: &TurnSnapshot) -> Value {
    json!({
        "sessionId": t.session_id,
        "turnId": t.turn_id,
        "runId": t.run_id,
        "status": t.status,
    })
}

pub struct Resume {
    session_id: String,
    source_run_id: Option<String>,
    high_water: Option<u64>,
}

pub fn read_resume(p: &Params) -> ParamResult<Resume> {
    let source_run_id = p.optional_str("sourceRunId")?.map(String::from);
    let high_water = optional_u64(p, "expectedRuntimeEventHighWater")?;
    if high_water.is_some() && source_run_id.is_none() {
        return Err(invalid(
            "invalid_resume_query",
            "_maka/turn/resume",
            "`expectedRuntimeEventHighWater` needs `sourceRunId`",
        ));
    }
    Ok(Resume {
        session_id: p.required_str("sessionId")?.into(),
        source_run_id,
        high_water,
    })
}

/// `_maka/turn/resume` as Maka answers it: at admission, `{kind: "parked", plan}` or `{kind:
/// "started", turn, sourceRunId, sourceRuntimeEventHighWater}`; the run's output then streams
/// as `session/update`s and its end is `_maka/turn/status` (or our `_maka/turn_state`).
pub fn resume(ctx: &Ctx, r: Resume) -> Result<Value, ResponseError> {
    let session = owned(ctx, &r.session_id)?;
    let conn = ctx.host()?;
    let parked = |reason: &str| {
        json!({"kind": "parked", "plan": {
            "sessionId": r.session_id, "disposition": "parked", "reason": reason}})
    };
    let query = ops::SessionRef {
        session_id: r.session_id.clone(),
    };
    let (run, high_water) = match ctx.call::<ops::ResumeQuery>(&conn, &query)? {
        ops::ResumeDisposition::Parked { reason } => return Ok(parked(&reason)),
        ops::ResumeDisposition::Ready {
            source_run_id,
            source_high_water,
            ..
        } => (source_run_id, source_high_water),
    };
    // The client's view of the run must still be the latest: else it is parked, as Maka's.
    if r.source_run_id.as_ref().is_some_and(|s| *s != run)
        || r.high_water.is_some_and(|h| h != high_water)
    {
        return Ok(parked("resume_candidate_missing"));
    }
    if session.has_prompt() {
        return Ok(parked("session_busy"));
    }
    let turn_id = format!("t_{}", crate::host_api::random_hex(8));
    let input = ops::ResumeStartInput {
        session_id: r.session_id.clone(),
        turn_id: turn_id.clone(),
        source_run_id: run.clone(),
        source_high_water: high_water,
    };
    let started = crate::acp::turns::start_followed(ctx, &session, &turn_id, |conn| {
        ctx.call::<ops::ResumeStart>(conn, &input)
    })?;
    Ok(match started {
        ops::StartOutcome::Parked { reason } => {
            session.turn_ended(&turn_id);
            parked(&reason)
        }
        ops::StartOutcome::Started { turn } => json!({
            "kind": "started",
            "turn": turn_snapshot(&turn),
            "sourceRunId": run,
            "sourceRuntimeEventHighWater": high_water,
        }),
    })
}

// ---- plans: a proposal per plan revision, an execution once approved ----

fn proposal_id(revision: u64) -> String {
    format!("proposal-{revision}")
}

fn execution_id(revision: u64) -> String {
    format!("execution-{revision}")
}

/// The plan revision a proposal or execution id names.
fn revision_of(id: &str) -> Option<u64> {
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
pub(super) fn plan_page(session_id: &str, plan: &ops::PlanView) -> Value {
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

fn plan_of(ctx: &Ctx, conn: &Connected, session_id: &str) -> Result<ops::PlanView, ResponseError> {
    let at = ops::SessionRef {
        session_id: session_id.into(),
    };
    ctx.call::<ops::PlanQuery>(conn, &at)
}

/// `_maka/plan/query` with Maka's params → a page, or `revision_changed`.
pub fn plan_query(ctx: &Ctx, q: PlanQuery) -> Result<Value, ResponseError> {
    owned(ctx, &q.session_id)?;
    let conn = ctx.host()?;
    let plan = plan_of(ctx, &conn, &q.session_id)?;
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
    let plan = plan_of(ctx, conn, &c.session_id)?;
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
    match ctx.call::<ops::PlanControl>(conn, &input)? {
        ops::PlanOutcome::Committed { plan } => {
            super::plan_changed(&ctx.shared, &c.session_id, &plan);
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
    let conn = ctx.host()?;
    let plan_result = if c.kind == "approve_proposal" {
        control_plan(ctx, &conn, &c)?
    } else {
        let plan = plan_of(ctx, &conn, &c.session_id)?;
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
    if session.has_prompt() {
        return Err(errors::session_busy(&c.session_id));
    }
    let turn_id = c.turn_id.clone().unwrap_or_default();
    let input = ops::TurnRef {
        session_id: c.session_id.clone(),
        turn_id: turn_id.clone(),
        run_id: None,
    };
    let started = crate::acp::turns::start_followed(ctx, &session, &turn_id, |conn| {
        ctx.call::<ops::PlanTurnStart>(conn, &input)
    })?;
    match started {
        ops::StartOutcome::Started { turn } => {
            Ok(json!({"plan": plan_result, "turn": turn_snapshot(&turn)}))
        }
        ops::StartOutcome::Parked { reason } => {
            session.turn_ended(&turn_id);
            Err(MakaCode::PlanNotApproved
                .error_with("The plan's turn could not start", json!({"reason": reason})))
        }
    }
}

// ---- artifacts ----

pub struct ArtifactQuery {
    kind: String,
    session_id: String,
    artifact_id: Option<String>,
    offset: u64,
}

pub fn read_artifact_query(p: &Params) -> ParamResult<ArtifactQuery> {
    let kind = p.required_str("kind")?;
    let artifact_id = match kind {
        "list_start" | "list_continue" => None,
        "get" | "read_text" | "read_binary" | "read_chunk" => {
            Some(p.required_str("artifactId")?.to_string())
        }
        other => {
            return Err(ResponseError::invalid_params(format_args!(
                "`kind` {other:?} is not an artifact query"
            ))
            .with_data(
                json!({"source": "adapter", "operation": "_maka/artifact/query",
                              "code": "invalid_request"}),
            ))
        }
    };
    Ok(ArtifactQuery {
        kind: kind.into(),
        session_id: p.required_str("sessionId")?.into(),
        artifact_id,
        offset: optional_u64(p, "offset")?.unwrap_or(0),
    })
}

/// Our artifact as Maka's: its digest as `sha256:<hex>`.
fn maka_artifact(a: &ops::Artifact) -> Value {
    let mut v = to_json(a);
    v["contentSha256"] = json!(format!("sha256:{}", a.sha256));
    v
}

/// `_maka/artifact/query`: `list_start` (everything in one page; `list_continue` is then
/// empty), `get`, `read_chunk` (32 KiB from `offset`), `read_text` / `read_binary` (the
/// whole file up to 1 MiB, base64).
pub fn artifact_query(ctx: &Ctx, q: ArtifactQuery) -> Result<Value, ResponseError> {
    owned(ctx, &q.session_id)?;
    let conn = ctx.host()?;
    let session_id = q.session_id.clone();
    let artifact_id = q.artifact_id.clone().unwrap_or_default();
    let input = match q.kind.as_str() {
        "list_start" | "list_continue" => ArtifactQueryInput::List { session_id },
        "get" => ArtifactQueryInput::Get {
            session_id,
            artifact_id,
        },
        kind => ArtifactQueryInput::Read {
            session_id,
            artifact_id,
            offset: if kind == "read_chunk" { q.offset } else { 0 },
            max_bytes: (kind == "read_chunk").then_some(READ_CHUNK),
        },
    };
    Ok(match ctx.call::<ops::ArtifactQuery>(&conn, &input)? {
        ArtifactAnswer::List { artifacts } => {
            let items: Vec<Value> = if q.kind == "list_continue" {
                vec![]
            } else {
                artifacts.iter().map(maka_artifact).collect()
            };
            json!({"kind": "page", "sessionId": q.session_id, "items": items, "nextCursor": null})
        }
        ArtifactAnswer::Artifact { artifact } => {
            json!({"kind": "artifact", "artifact": artifact.as_ref().map(maka_artifact)})
        }
        ArtifactAnswer::Chunk {
            total_bytes,
            offset,
            data_base64,
            next_offset,
        } if q.kind == "read_chunk" => json!({
            "kind": "chunk", "artifactId": q.artifact_id, "offset": offset,
            "totalBytes": total_bytes, "chunkBase64": data_base64, "nextOffset": next_offset,
        }),
        ArtifactAnswer::Chunk {
            total_bytes,
            data_base64,
            next_offset,
            ..
        } => json!({
            "kind": if q.kind == "read_text" { "text" } else { "binary" },
            "artifactId": q.artifact_id, "totalBytes": total_bytes,
            "dataBase64": data_base64, "truncated": next_offset.is_some(),
        }),
    })
}

// ---- memory ----

pub struct MemoryQuery {
    kind: String,
    session_id: Option<String>,
    revision: Option<u64>,
}

fn memory_error(operation: &str, message: impl std::fmt::Display) -> ResponseError {
    ResponseError::invalid_params(message)
        .with_data(json!({"source": "adapter", "operation": operation, "code": "invalid_request"}))
}

pub fn read_memory_query(p: &Params) -> ParamResult<MemoryQuery> {
    let kind = p.required_str("kind")?;
    if !matches!(
        kind,
        "state" | "entries_start" | "entries_continue" | "document_start" | "document_continue"
    ) {
        return Err(memory_error(
            "_maka/memory/query",
            format_args!("`kind` {kind:?} is not a memory query"),
        ));
    }
    Ok(MemoryQuery {
        kind: kind.into(),
        session_id: p.optional_str("sessionId")?.map(String::from),
        revision: optional_u64(p, "revision")?,
    })
}

/// `_maka/memory/query`: `state`, and the entries (one page; `entries_continue` at the same
/// revision is empty). Our memory is entries only: the document kinds have no counterpart.
pub fn memory_query(ctx: &Ctx, q: MemoryQuery) -> Result<Value, ResponseError> {
    if q.kind.starts_with("document_") {
        return Err(unsupported(
            &format!("_maka/memory/query {}", q.kind),
            "memory here is a list of entries, not a document; query entries_start",
        ));
    }
    if let Some(id) = &q.session_id {
        owned(ctx, id)?;
    }
    let conn = ctx.host()?;
    let input = ops::MemoryQueryInput {
        session_id: q.session_id.clone(),
    };
    let view = ctx.call::<ops::MemoryQuery>(&conn, &input)?;
    Ok(match q.kind.as_str() {
        "state" => json!({"kind": "state", "revision": view.revision,
                          "entryCount": view.entries.len()}),
        "entries_continue" if q.revision.is_some_and(|r| r != view.revision) => json!({
            "kind": "revision_changed", "expected": q.revision, "actual": view.revision}),
        kind => json!({
            "kind": "entries_page", "revision": view.revision,
            "entries": if kind == "entries_start" { to_json(&view.entries) } else { json!([]) },
            "nextCursor": null,
        }),
    })
}

pub fn read_memory_mutate(p: &Params) -> ParamResult<(String, ops::MemoryMutateInput)> {
    const OP: &str = "_maka/memory/mutate";
    let kind = p.required_str("kind")?;
    let expected_revision = p.required_u64("expectedRevision")?;
    let change = match kind {
        "remember" => ops::MemoryChange::Add {
            scope: p.optional_str("scope")?.unwrap_or("user").into(),
            session_id: p.optional_str("sessionId")?.map(String::from),
            text: p.required_str("text")?.into(),
            source: Some("user".into()),
        },
        "propose" | "approve" | "reject" | "set_status" | "reset" | "restore_backup"
        | "replace_begin" | "replace_chunk" | "replace_commit" | "replace_abort" => {
            // Read here, refused when served: the precise error names the operation.
            ops::MemoryChange::Forget { id: String::new() }
        }
        other => {
            return Err(memory_error(
                OP,
                format_args!("`kind` {other:?} is not a memory change"),
            ))
        }
    };
    Ok((
        kind.into(),
        ops::MemoryMutateInput {
            expected_revision,
            change,
        },
    ))
}

/// `_maka/memory/mutate`: `remember` adds an entry; a revision conflict is a result, as
/// Maka's. Proposals, statuses, backups and document replacement have no counterpart here.
pub fn memory_mutate(
    ctx: &Ctx,
    (kind, input): (String, ops::MemoryMutateInput),
) -> Result<Value, ResponseError> {
    if kind != "remember" {
        return Err(unsupported(
            &format!("_maka/memory/mutate {kind}"),
            "memory here is entries added, changed or forgotten at once, without proposals, statuses, backups or a document",
        ));
    }
    let conn = ctx.host()?;
    Ok(match ctx.call::<ops::MemoryMutate>(&conn, &input)? {
        ops::MemoryOutcome::Committed { revision, entry } => {
            json!({"kind": "committed", "revision": revision, "entry": entry})
        }
        ops::MemoryOutcome::RevisionConflict { expected, actual } => json!({
            "kind": "revision_conflict", "expectedRevision": expected, "actualRevision": actual}),
    })
}

// ---- artifact ingest: the client's `uploadId` → the host's ----

/// Maka's limit on uploads open at once (per connection: one process serves one).
const OPEN_UPLOADS: usize = 64;
/// Maka's chunk bound: 48 KiB of data (its base64 is 4/3 as long).
const MAX_CHUNK_BASE64: usize = 48 * 1024 * 4 / 3 + 4;

/// The host's upload id of each open upload, by (session, the client's `uploadId`).
static UPLOADS: std::sync::Mutex<Option<std::collections::HashMap<(String, String), String>>> =
    std::sync::Mutex::new(None);

fn host_upload(session_id: &str, upload_id: &str) -> Option<String> {
    let key = (session_id.to_string(), upload_id.to_string());
    crate::jsonrpc::lock(&UPLOADS).as_ref()?.get(&key).cloned()
}

pub enum Ingest {
    /// Ours (`docs/maka-extensions.md`), forwarded as it is unless its `uploadId` is a
    /// Maka client's (commit, abort).
    Ours(ops::IngestInput),
    Begin {
        input: ops::IngestInput,
        upload_id: String,
    },
    Chunk {
        session_id: String,
        upload_id: String,
        offset: u64,
        data_base64: String,
    },
}

pub fn read_ingest(p: &Params) -> ParamResult<Ingest> {
    let bad = |m: String| memory_error("_maka/artifact/ingest", m);
    match p.required_str("kind")? {
        "begin" if p.get("contentSha256").is_some() => {
            let digest = p.required_str("contentSha256")?;
            let hex = digest
                .strip_prefix("sha256:")
                .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
                .ok_or_else(|| {
                    bad(format!(
                        "`contentSha256` must be sha256:<64 hex>, not {digest:?}"
                    ))
                })?;
            Ok(Ingest::Begin {
                upload_id: p.required_str("uploadId")?.into(),
                input: ops::IngestInput::Begin {
                    session_id: p.required_str("sessionId")?.into(),
                    name: p.required_str("name")?.into(),
                    mime_type: p.optional_str("mimeType")?.map(String::from),
                    total_bytes: p.required_u64("totalBytes")?,
                    sha256: hex.to_ascii_lowercase(),
                    source: None,
                },
            })
        }
        "chunk" => {
            let data = p.required_str("chunkBase64")?;
            if data.len() > MAX_CHUNK_BASE64 {
                return Err(bad(
                    "`chunkBase64` holds more than 48 KiB; send smaller chunks".into(),
                ));
            }
            Ok(Ingest::Chunk {
                session_id: p.required_str("sessionId")?.into(),
                upload_id: p.required_str("uploadId")?.into(),
                offset: p.required_u64("offset")?,
                data_base64: data.into(),
            })
        }
        _ => crate::acp::maka::read_ingest(p).map(Ingest::Ours),
    }
}

/// `_maka/artifact/ingest`: ours as it is; Maka's `begin` / `chunk` / `commit` / `abort` with
/// the client's `uploadId` → `upload_opened` / `chunk_accepted` / `committed {attachment}` /
/// `aborted`.
pub fn ingest(ctx: &Ctx, i: Ingest) -> Result<Value, ResponseError> {
    let conn = ctx.host()?;
    match i {
        Ingest::Begin { input, upload_id } => {
            let ops::IngestInput::Begin { session_id, .. } = &input else {
                return Err(ResponseError::internal(
                    "an upload's begin without its session",
                ));
            };
            let session_id = session_id.clone();
            owned(ctx, &session_id)?;
            if let Some(host) = host_upload(&session_id, &upload_id) {
                let status = ops::IngestInput::Status {
                    session_id,
                    upload_id: host,
                };
                return Ok(maka_ingest(
                    &upload_id,
                    ctx.call::<ops::ArtifactIngest>(&conn, &status)?,
                    true,
                ));
            }
            if crate::jsonrpc::lock(&UPLOADS)
                .as_ref()
                .is_some_and(|m| m.len() >= OPEN_UPLOADS)
            {
                return Err(MakaCode::CapacityExceeded.error(format!(
                    "{OPEN_UPLOADS} uploads are open on this connection; commit or abort one first"
                )));
            }
            let out = ctx.call::<ops::ArtifactIngest>(&conn, &input)?;
            if let ops::IngestOutcome::Upload {
                upload_id: host, ..
            } = &out
            {
                crate::jsonrpc::lock(&UPLOADS)
                    .get_or_insert_with(Default::default)
                    .insert((session_id, upload_id.clone()), host.clone());
            }
            Ok(maka_ingest(&upload_id, out, true))
        }
        Ingest::Chunk {
            session_id,
            upload_id,
            offset,
            data_base64,
        } => {
            let host = host_upload(&session_id, &upload_id).ok_or_else(|| no_upload(&upload_id))?;
            let part = ops::IngestInput::Part {
                session_id,
                upload_id: host,
                offset,
                data_base64,
            };
            Ok(maka_ingest(
                &upload_id,
                ctx.call::<ops::ArtifactIngest>(&conn, &part)?,
                false,
            ))
        }
        Ingest::Ours(input) => {
            let (ops::IngestInput::Commit {
                session_id,
                upload_id,
            }
            | ops::IngestInput::Abort {
                session_id,
                upload_id,
            }) = &input
            else {
                return Ok(to_json(&ctx.call::<ops::ArtifactIngest>(&conn, &input)?));
            };
            let Some(host) = host_upload(session_id, upload_id) else {
                return Ok(to_json(&ctx.call::<ops::ArtifactIngest>(&conn, &input)?));
            };
            let key = (session_id.clone(), upload_id.clone());
            let theirs = match &input {
                ops::IngestInput::Commit { .. } => ops::IngestInput::Commit {
                    session_id: key.0.clone(),
                    upload_id: host,
                },
                _ => ops::IngestInput::Abort {
                    session_id: key.0.clone(),
                    upload_id: host,
                },
            };
            let out = ctx.call::<ops::ArtifactIngest>(&conn, &theirs);
            if let Some(m) = crate::jsonrpc::lock(&UPLOADS).as_mut() {
                m.remove(&key);
            }
            Ok(maka_ingest(&key.1, out?, false))
        }
    }
}

fn no_upload(upload_id: &str) -> ResponseError {
    ResponseError::invalid_params(format_args!(
        "No open upload {upload_id:?} on this connection; begin it first"
    ))
    .with_data(
        json!({"source": "adapter", "operation": "_maka/artifact/ingest",
                      "code": "invalid_request"}),
    )
}

/// `begun`: the answer to a `begin` (`upload_opened`, also when it resumes an open upload).
fn maka_ingest(upload_id: &str, out: ops::IngestOutcome, begun: bool) -> Value {
    match out {
        ops::IngestOutcome::Upload {
            received,
            total_bytes,
            ..
        } => json!({
            "kind": if begun { "upload_opened" } else { "chunk_accepted" },
            "uploadId": upload_id, "nextOffset": received, "totalBytes": total_bytes,
        }),
        ops::IngestOutcome::Committed { artifact } => json!({
            "kind": "committed",
            "uploadId": upload_id,
            "attachment": {
                "name": artifact.name,
                "mimeType": artifact.mime_type,
                "sizeBytes": artifact.bytes,
                "ref": {"kind": "session_file", "relativePath": artifact.artifact_id},
            },
            "artifact": maka_artifact(&artifact),
        }),
        ops::IngestOutcome::Aborted {} => json!({"kind": "aborted", "uploadId": upload_id}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_api::wire::{GoalLimits, PlanEntry};

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
}
