//! The extension methods other ACP agents share, served on the same host operations as our
//! own `_maka/` ones (`docs/maka-extensions.md`, "Names other agents share"):
//!
//! - `_session/steering` (claude-agent-acp and codex-acp, advertised as
//!   `_meta.steering.supported`): a message for the running turn, as `_maka/turn/steer`; with
//!   no running turn it starts one, unless the client asked for
//!   `_meta.steering.idleBehavior: "promptRequired"`.
//! - `_session/goal` (claude-agent-acp's `docs/goal-extension.md`, advertised as `_meta.goal`):
//!   set, pause, resume or clear the session's goal, on the host's `goal.*` operations as
//!   `_maka/goal/*`; its state is `session_info_update._meta.goal`
//!   ([`super::projection::goal_snapshot`]).

use super::agent::Ctx;
use super::errors;
use super::params::{ParamResult, Params};
use crate::host_api::client::ClientError;
use crate::host_api::ops;
use crate::host_api::random_hex;
use crate::jsonrpc::ResponseError;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

pub struct Steering {
    session_id: String,
    prompt: Vec<Value>,
    /// `idleBehavior: "promptRequired"`: with no running turn, answer so (the client sends
    /// the message as a prompt itself) instead of starting a turn.
    prompt_required: bool,
}

pub fn read_steering(p: &Params) -> ParamResult<Steering> {
    let prompt = p.required_array("prompt")?;
    if prompt.is_empty() {
        return Err(ResponseError::invalid_params(
            "`prompt` is empty; send at least one content block",
        ));
    }
    // `_meta.steering.idleBehavior` as the adapters that share the name read it; also taken
    // at the top level.
    let idle = match p.optional_object("_meta", "_meta")? {
        Some(meta) => match meta.optional_object("steering", "_meta.steering")? {
            Some(s) => s.optional_str("idleBehavior")?,
            None => None,
        },
        None => None,
    };
    let idle = match idle {
        Some(v) => Some(v),
        None => p.optional_str("idleBehavior")?,
    };
    let prompt_required = match idle {
        None => false,
        Some("promptRequired") => true,
        Some(other) => {
            return Err(ResponseError::invalid_params(format_args!(
                "`idleBehavior` {other:?} is not one this agent knows; use \"promptRequired\" or leave it out"
            )))
        }
    };
    Ok(Steering {
        session_id: p.required_str("sessionId")?.into(),
        prompt: prompt.clone(),
        prompt_required,
    })
}

/// How long a steer waits for a prompt that was just sent to have its turn started (the
/// host knows no running turn until `turn.start` returns).
const PROMPT_STARTING: Duration = Duration::from_secs(5);

/// `_session/steering` → `{"outcome": "injected" | "startedNewTurn"}`, or `{"outcome":
/// "promptRequired", "reason": "noRunningTurn"}` when no turn runs and the client asked for
/// that. The injected text is the running turn's user message (`turn.message.submit`): shown
/// as a `user_message_chunk` and replayed by `session/load`; a started turn's is its prompt.
pub fn steering(ctx: &Ctx, mut s: Steering) -> Result<Value, ResponseError> {
    let session = ctx
        .session(&s.session_id)
        .ok_or_else(|| errors::unknown_session(&s.session_id))?;
    let conn = ctx.host()?;
    let content = super::prompt::to_message(&mut s.prompt)?;
    let input = ops::SubmitInput {
        session_id: s.session_id.clone(),
        message_id: format!("s_{}", random_hex(8)),
        content,
    };
    let deadline = Instant::now() + PROMPT_STARTING;
    let mut started_by_another = false;
    loop {
        match conn.call::<ops::MessageSubmit>(&input) {
            Ok(_) => return Ok(json!({"outcome": "injected"})),
            Err(ClientError::Host(h))
                if h.details.as_ref().and_then(|d| d.get("reason"))
                    == Some(&json!("no_active_turn")) => {}
            Err(e) => return Err(crate::acp::errors::from_client(&e)),
        }
        // A prompt of this client's whose turn is being started, or a turn another steer
        // just started: it will run, so the message is for it.
        if (session.prompt_turn().is_some() || started_by_another) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        if s.prompt_required {
            return Ok(json!({"outcome": "promptRequired", "reason": "noRunningTurn"}));
        }
        match super::turns::start_unprompted(ctx, &session, input.content.clone()) {
            Ok(()) => return Ok(json!({"outcome": "startedNewTurn"})),
            // Another steer (or a prompt) started a turn between the submit and this start:
            // the message goes into that one.
            Err(e) if busy(&e) && !started_by_another => started_by_another = true,
            Err(e) => return Err(e),
        }
    }
}

/// The host refused a turn because one runs.
fn busy(e: &ResponseError) -> bool {
    e.data
        .as_ref()
        .and_then(|d| d.get("makaCode"))
        .is_some_and(|c| c == "session_busy")
}

/// What `_session/goal` may do, as `initialize` advertises it.
pub const GOAL_ACTIONS: &[&str] = &["set", "pause", "resume", "clear"];

pub enum GoalAction {
    Set(String),
    Pause,
    Resume,
    Clear,
}

pub struct GoalControl {
    session_id: String,
    action: GoalAction,
}

pub fn read_goal(p: &Params) -> ParamResult<GoalControl> {
    let action = match p.required_str("action")? {
        "set" => match p.optional_str("objective")?.map(str::trim) {
            Some(o) if !o.is_empty() => GoalAction::Set(o.to_string()),
            _ => {
                return Err(ResponseError::invalid_params(
                    "`objective` is required to set a goal: say what the goal is",
                ))
            }
        },
        "pause" => GoalAction::Pause,
        "resume" => GoalAction::Resume,
        "clear" => GoalAction::Clear,
        other => {
            return Err(ResponseError::invalid_params(format_args!(
                "`action` {other:?} is not one of {}",
                GOAL_ACTIONS.join(", ")
            )))
        }
    };
    Ok(GoalControl {
        session_id: p.required_str("sessionId")?.into(),
        action,
    })
}

/// `_session/goal` → `{"goal": snapshot | null}`. `set` replaces a goal still running or
/// paused; `clear` of no goal is done already; `pause` and `resume` need a goal to act on —
/// one that has ended (met, stopped by a limit, failed) is refused by the host as any change
/// its state does not allow (`operation_conflict`, saying it has ended).
pub fn goal(ctx: &Ctx, g: GoalControl) -> Result<Value, ResponseError> {
    let session_id = g.session_id;
    if ctx.session(&session_id).is_none() {
        return Err(errors::unknown_session(&session_id));
    }
    let conn = ctx.host()?;
    let goal = conn
        .request::<ops::GoalQuery>(&ops::SessionRef {
            session_id: session_id.clone(),
        })?
        .goal;
    let current = goal.clone().filter(|g| g.is_live() || g.status == "paused");
    let control = |goal_id: &str, action: &str| {
        let input = ops::GoalControlInput {
            session_id: session_id.clone(),
            goal_id: goal_id.to_string(),
            action: action.to_string(),
        };
        conn.request::<ops::GoalControl>(&input)
    };
    let changed = match (g.action, current) {
        (GoalAction::Set(objective), current) => {
            if let Some(old) = current {
                let cleared = control(&old.goal_id, "cancel")?;
                super::maka::show_goal(ctx, &conn, &session_id, &cleared);
            }
            let input = ops::GoalArmInput {
                session_id: session_id.clone(),
                objective,
                max_turns: None,
                max_tokens: None,
                max_minutes: None,
            };
            conn.request::<ops::GoalArm>(&input)?
        }
        (GoalAction::Clear, None) => return Ok(json!({"goal": null})),
        (GoalAction::Clear, Some(goal)) => control(&goal.goal_id, "cancel")?,
        // A goal that ended (one cleared is none): the host refuses it, saying so.
        (action @ (GoalAction::Pause | GoalAction::Resume), None) => {
            match goal.filter(|g| g.status != "cancelled") {
                Some(ended) => {
                    let name = if matches!(action, GoalAction::Pause) {
                        "pause"
                    } else {
                        "resume"
                    };
                    control(&ended.goal_id, name)?
                }
                None => {
                    return Err(super::errors::MakaCode::NotFound.error_with(
                        format!(
                            "Session {session_id} has no goal to pause or resume; set one first"
                        ),
                        json!({"sessionId": session_id}),
                    ))
                }
            }
        }
        (GoalAction::Pause, Some(goal)) => control(&goal.goal_id, "pause")?,
        (GoalAction::Resume, Some(goal)) => control(&goal.goal_id, "resume")?,
    };
    super::maka::show_goal(ctx, &conn, &session_id, &changed);
    Ok(json!({"goal": super::projection::goal_snapshot(&changed)}))
}
