//! Maka's goal requests over our goals.

use super::*;
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
