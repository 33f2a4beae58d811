//! Goals: an objective the host keeps running turns toward — one driver thread per live goal —
//! until the model declares it met (`goal_complete`, with its evidence) or a limit (turns,
//! tokens, time) stops it. State lives in the session (`goal.json` next to the transcript) and
//! every change is a `goal_updated` frame. A goal turn that needs the person
//! (`waiting_for_approval`) waits for them rather than guessing; a goal left live by a host that
//! stopped is paused (`host_restarted`) until someone resumes it.

use super::session::{SessionCell, SessionState};
use super::Host;
use crate::host_api::ops::{GoalArmInput, GoalControlInput, StartOutcome};
use crate::host_api::wire::{
    now_ms, ErrorCode, FrameBody, Goal, GoalLimits, HostError, MessageContent, TurnStatus,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const FILE: &str = "goal.json";

/// The goal stored for a session; one left live by a host that stopped is paused.
pub fn load(session_dir: &Path) -> Option<Goal> {
    let bytes = std::fs::read(session_dir.join(FILE)).ok()?;
    let mut goal: Goal = match serde_json::from_slice(&bytes) {
        Ok(g) => g,
        Err(e) => {
            log::error!("{}: unreadable goal ({e}); ignored", session_dir.display());
            return None;
        }
    };
    if goal.is_live() {
        goal.status = "paused".into();
        goal.reason = Some("host_restarted".into());
    }
    Some(goal)
}

/// Records `goal` (durably) and tells the session's readers.
/// Stores `goal` as the session's next goal revision and emits it; returns it as stored (its
/// revision and time are the stored ones: an answer with the caller's copy would carry the
/// revision before the change, and a client ordering states by revision would drop it).
pub fn save(host: &Host, cell: &SessionCell, st: &mut SessionState, mut goal: Goal) -> Goal {
    goal.updated_at = now_ms();
    goal.revision = st.goal.as_ref().map_or(0, |g| g.revision) + 1;
    let dir = host.store.session_dir(&cell.id);
    match serde_json::to_vec_pretty(&goal) {
        Ok(bytes) => {
            if let Err(e) = super::store::write_atomic(&dir, FILE, &bytes, host.store.fsync()) {
                log::error!("session {}: cannot save the goal: {e}", cell.id);
            }
        }
        Err(e) => log::error!("session {}: cannot encode the goal: {e}", cell.id),
    }
    st.goal = Some(goal.clone());
    cell.emit(st, FrameBody::GoalUpdated { goal: goal.clone() });
    goal
}

fn ended(goal: &mut Goal, status: &str, reason: impl Into<String>) {
    goal.status = status.into();
    goal.reason = Some(reason.into());
}

pub fn arm(host: &Arc<Host>, input: GoalArmInput) -> Result<Goal, HostError> {
    let objective = input.objective.trim();
    if objective.is_empty() || objective.chars().count() > 4000 {
        return Err(HostError::invalid(
            "`objective` must be 1 to 4000 characters",
        ));
    }
    let max_turns = input.max_turns.unwrap_or(10);
    if !(1..=100).contains(&max_turns) {
        return Err(HostError::invalid("`maxTurns` must be between 1 and 100"));
    }
    if input.max_minutes == Some(0) || input.max_tokens == Some(0) {
        return Err(HostError::invalid("limits must be at least 1"));
    }
    let cell = host.cell(&input.session_id)?;
    let goal = {
        let mut st = super::ops::open_state(host, &cell)?;
        if st.session.is_archived {
            return Err(HostError::new(
                ErrorCode::SessionArchived,
                "the session is archived; make it active first",
            ));
        }
        if let Some(g) = st
            .goal
            .as_ref()
            .filter(|g| g.is_live() || g.status == "paused")
        {
            return Err(HostError::new(
                ErrorCode::OperationConflict,
                format!(
                    "goal {} is {}; cancel it before arming another",
                    g.goal_id, g.status
                ),
            ));
        }
        let now = now_ms();
        let goal = Goal {
            goal_id: super::random_id("goal"),
            revision: 0,
            session_id: cell.id.clone(),
            objective: objective.into(),
            status: "active".into(),
            limits: GoalLimits {
                max_turns,
                max_tokens: input.max_tokens,
                max_minutes: input.max_minutes,
            },
            turns_run: 0,
            tokens_used: 0,
            started_at: now,
            updated_at: now,
            reason: None,
            evidence: None,
        };
        save(host, &cell, &mut st, goal)
    };
    drive(host, &cell, &goal.goal_id)?;
    Ok(goal)
}

pub fn control(host: &Arc<Host>, input: GoalControlInput) -> Result<Goal, HostError> {
    let cell = host.cell(&input.session_id)?;
    let (goal, restart) = {
        let mut st = super::ops::open_state(host, &cell)?;
        let mut goal = st
            .goal
            .clone()
            .filter(|g| g.goal_id == input.goal_id)
            .ok_or_else(|| HostError::not_found(format!("goal {}", input.goal_id)))?;
        let illegal = |g: &Goal| {
            let message = if g.is_live() || g.status == "paused" {
                format!(
                    "goal {} is {}; it cannot {}",
                    g.goal_id, g.status, input.action
                )
            } else {
                // It has ended (met, stopped by a limit, failed, cancelled): say so, and what
                // can be done instead.
                let why = g
                    .reason
                    .as_deref()
                    .filter(|r| *r != g.status)
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                format!(
                    "goal {} has ended ({}{why}), so it cannot be {}; set a new goal instead",
                    g.goal_id,
                    g.status,
                    match input.action.as_str() {
                        "pause" => "paused",
                        "resume" => "resumed",
                        _ => "cancelled",
                    }
                )
            };
            HostError::new(ErrorCode::OperationConflict, message)
        };
        let mut restart = false;
        match input.action.as_str() {
            "pause" if goal.is_live() => ended(&mut goal, "paused", "paused"),
            "resume" if goal.status == "paused" => {
                goal.status = "active".into();
                goal.reason = None;
                restart = true;
            }
            "cancel" if goal.is_live() || goal.status == "paused" => {
                ended(&mut goal, "cancelled", "cancelled");
                // Its running turn stops too.
                if let Some(a) = st
                    .active
                    .as_ref()
                    .filter(|a| a.goal_id.as_deref() == Some(goal.goal_id.as_str()))
                {
                    a.cancel.cancel();
                }
            }
            "pause" | "resume" | "cancel" => return Err(illegal(&goal)),
            other => {
                return Err(HostError::invalid(format!(
                    "`action` must be pause, resume or cancel, not {other:?}"
                )))
            }
        }
        (save(host, &cell, &mut st, goal), restart)
    };
    if restart {
        drive(host, &cell, &goal.goal_id)?;
    }
    Ok(goal)
}

/// Starts the driver thread of `goal_id`, unless its driver still runs (it goes on with the
/// goal). A driver of an earlier goal may still be ending: it leaves at its next check.
fn drive(host: &Arc<Host>, cell: &Arc<SessionCell>, goal_id: &str) -> Result<(), HostError> {
    {
        let mut st = cell.lock();
        if st.goal_driver.as_deref() == Some(goal_id) {
            return Ok(());
        }
        st.goal_driver = Some(goal_id.to_string());
    }
    let (h, c, id) = (Arc::clone(host), Arc::clone(cell), goal_id.to_string());
    std::thread::Builder::new()
        .name(format!("goal-{goal_id}"))
        .spawn(move || driver(h, c, id))
        .map(|_| ())
        .map_err(|e| {
            leave(&mut cell.lock(), goal_id);
            HostError::internal(format!("cannot start the goal's driver: {e}"))
        })
}

/// The driver of `goal_id` leaves: the session has no driver unless another goal's took over.
fn leave(st: &mut SessionState, goal_id: &str) {
    if st.goal_driver.as_deref() == Some(goal_id) {
        st.goal_driver = None;
    }
}

fn prompt(goal: &Goal) -> String {
    if goal.turns_run == 0 {
        format!(
            "Work toward this goal: {}\n\nTake the next steps. When the goal is met, call goal_complete with the evidence; if it cannot be met, say why.",
            goal.objective
        )
    } else {
        format!(
            "Continue toward the goal: {}\n\n(Turn {} of at most {}.) When the goal is met, call goal_complete with the evidence.",
            goal.objective,
            goal.turns_run + 1,
            goal.limits.max_turns
        )
    }
}

/// Runs goal turns one after another while the goal is live and within its limits. Each turn
/// accounts for itself when it ends ([`turn_finished`]), before its terminal frame.
fn driver(host: Arc<Host>, cell: Arc<SessionCell>, goal_id: String) {
    loop {
        // Between turns: still ours and live, within limits, and the session free. Deciding to
        // stop and clearing `goal_driver` happen under one lock, so a resume never finds a
        // driver that is about to leave.
        let goal = {
            let mut st = cell.lock();
            let goal = st.goal.clone().filter(|g| g.goal_id == goal_id);
            let Some(mut goal) = goal.filter(|g| g.is_live() && !st.removed) else {
                leave(&mut st, &goal_id);
                return;
            };
            let minutes = (now_ms().saturating_sub(goal.started_at)) / 60_000;
            let limit = if goal.turns_run >= goal.limits.max_turns {
                Some("turn_limit")
            } else if goal
                .limits
                .max_tokens
                .is_some_and(|m| goal.tokens_used >= m)
            {
                Some("token_limit")
            } else if goal.limits.max_minutes.is_some_and(|m| minutes >= m) {
                Some("time_limit")
            } else {
                None
            };
            if let Some(reason) = limit {
                let at = match reason {
                    "turn_limit" => goal.limits.max_turns.into(),
                    "token_limit" => goal.limits.max_tokens.unwrap_or_default(),
                    _ => goal.limits.max_minutes.unwrap_or_default(),
                };
                let notice = super::notices::goal_limit(super::random_id("n"), reason, at);
                cell.notice(&mut st, "", notice);
                ended(&mut goal, "stopped", reason);
                let _ = save(&host, &cell, &mut st, goal);
                leave(&mut st, &goal_id);
                return;
            }
            if st.active.is_some() || !st.queued.is_empty() {
                // Another turn runs (a person's prompt, the goal's own), or prompts queued
                // behind it wait to go first: wait for their end.
                drop(cell.wait(st, Duration::from_secs(1)));
                continue;
            }
            goal
        };
        let turn_id = super::random_id("t");
        let content = MessageContent {
            text: prompt(&goal),
            attachments: vec![],
        };
        match super::ops::start_goal_turn(&host, &turn_id, &cell, &goal_id, content) {
            Ok(StartOutcome::Started { .. }) => {}
            Ok(StartOutcome::Parked { reason }) => {
                log::warn!("goal {goal_id}: turn not started ({reason})");
            }
            Ok(StartOutcome::Queued { .. }) => {} // never: a goal's turn is not queued
            // Someone else's turn got in first: wait for it (above). Or the goal stopped being
            // the live one since it was read: the check above lets the driver leave.
            Err(e)
                if e.code == ErrorCode::SessionBusy || e.code == ErrorCode::OperationConflict => {}
            Err(e) => {
                let mut st = cell.lock();
                if let Some(mut g) = st.goal.clone().filter(|g| g.goal_id == goal_id) {
                    // The host going away (the editor left) is no failure of the goal: it is
                    // paused, as after a crash, and resumable.
                    if host.is_draining() || e.code == ErrorCode::HostDraining {
                        ended(&mut g, "paused", "host_stopped");
                    } else {
                        ended(&mut g, "failed", e.message);
                    }
                    let _ = save(&host, &cell, &mut st, g);
                }
                leave(&mut st, &goal_id);
                return;
            }
        }
    }
}

/// A turn of goal `goal_id` ended (called by the turn, before its terminal frame): count it
/// and its tokens; a stopped turn pauses the goal, a failed one fails it. Only that goal's: a
/// turn stopped because its goal was replaced (`set` while it ran) ends after the new goal is
/// armed, and is none of the new goal's business.
pub fn turn_finished(
    host: &Host,
    cell: &SessionCell,
    st: &mut SessionState,
    goal_id: &str,
    status: TurnStatus,
    why: Option<String>,
    tokens: u64,
) {
    let Some(mut g) = st.goal.clone().filter(|g| g.goal_id == goal_id) else {
        return;
    };
    g.turns_run += 1;
    g.tokens_used = g.tokens_used.saturating_add(tokens);
    if g.is_live() {
        match status {
            TurnStatus::Completed => {}
            TurnStatus::Cancelled => ended(&mut g, "paused", "turn_stopped"),
            _ if host.is_draining() => ended(&mut g, "paused", "host_stopped"),
            _ => ended(
                &mut g,
                "failed",
                why.unwrap_or_else(|| "the turn did not finish".into()),
            ),
        }
    }
    let _ = save(host, cell, st, g);
}

/// The longest evidence a completed goal keeps.
const MAX_EVIDENCE_BYTES: usize = 16 * 1024;

/// `goal_complete`: the objective is met. Only goal `goal_id`, the one live when the calling
/// turn was admitted (a person's prompt too): a goal armed or replaced since is none of its
/// business, and a turn admitted with no live goal completes none.
pub fn complete(
    host: &Host,
    cell: &SessionCell,
    goal_id: Option<&str>,
    evidence: &str,
) -> Result<String, String> {
    let mut st = cell.lock();
    let Some(mut goal) = st.goal.clone().filter(Goal::is_live) else {
        return Err("No goal is armed in this session.".into());
    };
    let Some(goal_id) = goal_id else {
        return Err(
            "No goal was armed when this turn started, so it cannot complete the goal set since; nothing was marked complete. That goal's own turns complete it."
                .into(),
        );
    };
    if goal_id != goal.goal_id {
        return Err(
            "The goal this turn worked toward was cancelled or replaced; nothing was marked complete."
                .into(),
        );
    }
    goal.status = "completed".into();
    // Bounded: the goal travels in a frame (1 MiB at most) and in every `_maka/goal_update`;
    // unbounded evidence made the "completed" notification too large to send.
    let mut evidence = evidence.trim().to_string();
    if evidence.len() > MAX_EVIDENCE_BYTES {
        let mut end = MAX_EVIDENCE_BYTES;
        while !evidence.is_char_boundary(end) {
            end -= 1;
        }
        evidence.truncate(end);
        evidence.push_str(" [cut: evidence is kept to 16 KiB]");
    }
    goal.evidence = Some(evidence);
    goal.reason = None;
    let _ = save(host, cell, &mut st, goal);
    Ok("The goal is marked complete.".into())
}

/// A turn of goal `goal_id` waits on the person (`waiting`), or got its answer.
pub fn waiting(
    host: &Host,
    cell: &SessionCell,
    st: &mut SessionState,
    goal_id: &str,
    waiting: bool,
) {
    let Some(mut goal) = st.goal.clone().filter(|g| g.goal_id == goal_id) else {
        return;
    };
    let next = match (waiting, goal.status.as_str()) {
        (true, "active") => "waiting_for_approval",
        (false, "waiting_for_approval") => "active",
        _ => return,
    };
    goal.status = next.into();
    let _ = save(host, cell, st, goal);
}
