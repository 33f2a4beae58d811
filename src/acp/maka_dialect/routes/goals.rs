//! Maka's goal requests over our goals.

use super::*;
use crate::acp::connection::Shared;
use crate::host_api::wire::TurnOutcome;
use std::collections::HashMap;
use std::sync::Mutex;

pub use crate::acp::maka_dialect::shapes::maka_goal;

/// `_maka/goal/query` in Maka's dialect → `{sessionId, goal: Goal | null}`.
pub fn goal_query(ctx: &Ctx, input: ops::SessionRef) -> Result<Value, ResponseError> {
    owned(ctx, &input.session_id)?;
    if let Some(goal) = ctx.shared.maka.armed.view(&input.session_id) {
        return Ok(json!({"sessionId": input.session_id, "goal": goal}));
    }
    let conn = ctx.host()?;
    let view = conn.request::<ops::GoalQuery>(&input)?;
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
    // The host's own bound, checked here: the goal is armed on the host only when the next
    // prompt completes, when nobody is waiting for this answer any more.
    if condition.chars().count() > 4000 {
        return Err(invalid(
            "invalid_goal_plan_input",
            OP,
            "`condition` is longer than 4000 characters",
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

/// A goal armed with Maka's params, waiting for the session's next prompt (Maka's arm stores
/// the goal; the person's next `session/prompt` starts the work and the host continues it).
/// Ours starts turns as soon as it is armed, so it is armed when that prompt has completed
/// ([`prompt_ended`]); until then it is shown from here.
struct Armed {
    goal_id: String,
    input: ops::GoalArmInput,
    set_at: u64,
}

/// The goals one connection armed for a next prompt (in its context, [`Kept`]), by session:
/// only this connection's prompts start them.
#[derive(Default)]
pub struct ArmedGoals(Mutex<HashMap<String, Armed>>);
/// Sessions with a goal waiting at once, per connection, at most.
const MAX_ARMED: usize = 1024;

impl ArmedGoals {
    fn view(&self, session_id: &str) -> Option<Value> {
        crate::jsonrpc::lock(&self.0)
            .get(session_id)
            .map(|a| armed_view(a, "active"))
    }

    fn arm(&self, armed: Armed) -> Result<(), ResponseError> {
        let mut all = crate::jsonrpc::lock(&self.0);
        if let Some(a) = all.get(&armed.input.session_id) {
            return Err(goal_exists(&a.goal_id, "armed"));
        }
        if all.len() >= MAX_ARMED {
            return Err(MakaCode::CapacityExceeded.error(format!(
                "{MAX_ARMED} sessions already have a goal waiting for a prompt; send one first"
            )));
        }
        all.insert(armed.input.session_id.clone(), armed);
        Ok(())
    }

    fn take(&self, session_id: &str) -> Option<Armed> {
        crate::jsonrpc::lock(&self.0).remove(session_id)
    }
}

fn armed_view(a: &Armed, status: &str) -> Value {
    json!({
        "goalId": a.goal_id,
        "revision": 0,
        "sessionId": a.input.session_id,
        "condition": a.input.objective,
        "status": status,
        "setAt": a.set_at,
        "iterations": 0,
        "maxIterations": a.input.max_turns.unwrap_or(10),
        "consecutiveNoProgress": 0,
        "blockCap": null,
        "tokenBudget": a.input.max_tokens,
        "tokensSpent": 0,
        "lastReason": null,
        "achievedAt": null,
        "pausedAt": null,
    })
}

fn goal_exists(goal_id: &str, status: &str) -> ResponseError {
    MakaCode::OperationConflict.error_with(
        format!("Goal {goal_id} is {status}; clear it before arming another"),
        json!({"goalId": goal_id}),
    )
}

/// `_maka/goal/arm` with Maka's params → `{sessionId, goal}`: the goal waits for the
/// session's next prompt, as Maka's does.
pub fn goal_arm(ctx: &Ctx, input: ops::GoalArmInput) -> Result<Value, ResponseError> {
    owned(ctx, &input.session_id)?;
    let conn = ctx.host()?;
    let at = ops::SessionRef {
        session_id: input.session_id.clone(),
    };
    if let Some(g) = conn.request::<ops::GoalQuery>(&at)?.goal {
        if g.is_live() || g.status == "paused" {
            return Err(goal_exists(&g.goal_id, &g.status));
        }
    }
    let armed = Armed {
        goal_id: format!("goal_{}", crate::host_api::random_hex(8)),
        input,
        set_at: crate::host_api::wire::now_ms(),
    };
    let view = armed_view(&armed, "active");
    ctx.shared.maka.armed.arm(armed)?;
    let session_id = at.session_id;
    crate::acp::maka_dialect::goal_status(&ctx.shared, &session_id, &view);
    Ok(json!({"sessionId": session_id, "goal": view}))
}

/// A prompt of this connection's ended: a goal this connection armed for it is armed on the
/// host now, and the session follows it (on its own thread: the reader that saw the end goes on
/// reading). While prompts the client queued behind it are still to run (the next is already
/// the pending one), the goal waits for the last of them: armed now, its turns would take the
/// session from them.
pub fn prompt_ended(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    conn: &Connected,
    outcome: TurnOutcome,
) {
    if outcome != TurnOutcome::Completed {
        return; // it waits for a prompt that completes
    }
    if session.prompt_turn().is_some() {
        return; // a queued prompt runs next: the goal waits for the queue's last
    }
    let Some(armed) = shared.maka.armed.take(&session.id) else {
        return;
    };
    let (session, shared, conn) = (Arc::clone(session), Arc::clone(shared), conn.clone());
    let spawned = crate::threads::spawn("maka-goal-arm", move || {
        match conn.call::<ops::GoalArm>(&armed.input) {
            Ok(goal) => {
                session.emit(|view| (view.goal(&goal), ()), |view| (view.goal(&goal), ()));
                crate::acp::follow::follow_goal(&session, &shared, &conn, &goal);
            }
            Err(e) => {
                // Told, not only logged: the client was answered `active` when it armed it.
                log::warn!(
                    "session {}: the goal armed for this prompt could not start: {e}",
                    session.id
                );
                let mut view = armed_view(&armed, "stalled");
                view["lastReason"] = json!(format!("the goal could not start: {e}"));
                crate::acp::maka_dialect::goal_status(&shared, &session.id, &view);
            }
        }
    });
    if spawned.is_none() {
        log::warn!("could not start a thread to arm the waiting goal");
    }
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
    if let Some(answer) = control_armed(ctx, &c)? {
        return Ok(answer);
    }
    let conn = ctx.host()?;
    let current = conn
        .request::<ops::GoalQuery>(&ops::SessionRef {
            session_id: c.session_id.clone(),
        })?
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
    let goal = conn.request::<ops::GoalControl>(&input)?;
    crate::acp::maka::show_goal(ctx, &conn, &c.session_id, &goal);
    Ok(json!({"sessionId": c.session_id, "goal": maka_goal(&goal)}))
}

/// Control of a goal still waiting for its prompt: `clear` forgets it; pausing or resuming a
/// goal that has not started is not something our goals can be. `None`: not a waiting goal.
fn control_armed(ctx: &Ctx, c: &GoalControl) -> Result<Option<Value>, ResponseError> {
    let Some(armed) = take_armed(&ctx.shared.maka.armed, c)? else {
        return Ok(None);
    };
    // Told outside the lock (a send).
    let view = armed_view(&armed, "cleared");
    crate::acp::maka_dialect::goal_status(&ctx.shared, &c.session_id, &view);
    Ok(Some(json!({"sessionId": c.session_id, "goal": view})))
}

/// The waiting goal `c` clears, taken out of `armed`; `None` when `c` is not about one.
fn take_armed(armed: &ArmedGoals, c: &GoalControl) -> Result<Option<Armed>, ResponseError> {
    let mut all = crate::jsonrpc::lock(&armed.0);
    if all
        .get(&c.session_id)
        .is_none_or(|a| a.goal_id != c.goal_id)
    {
        return Ok(None);
    }
    if c.expected_revision != 0 {
        return Err(revision_conflict(c.expected_revision, 0));
    }
    if c.action != "cancel" {
        return Err(unsupported(
            &format!("_maka/goal/control {} of a goal that has not started", c.action),
            "the goal starts with the session's next prompt; pause or resume it once it runs, or clear it",
        ));
    }
    Ok(all.remove(&c.session_id))
}
