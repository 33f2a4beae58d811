//! Ending a turn, once: by its own thread when it returns, or — when a stop was asked and the
//! thread has not ended the turn within [`STOP_BOUND`] (a tool stuck in a system call, say) —
//! by the turn's watchdog on its behalf. Whichever comes first ends it, under the session
//! lock; what the stuck thread produces afterwards (its tool's result, its frames, its own
//! end) is dropped.

use super::*;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::sync::atomic::{AtomicBool, Ordering};

/// How long a stopped turn's thread has to end the turn itself before the watchdog ends it:
/// a stop (`turn.stop`, ACP `session/cancel`) answers within this bound whatever a tool does.
pub const STOP_BOUND: Duration = Duration::from_secs(5);

/// What ending a turn needs, shared by the turn's thread and its watchdog.
pub(super) struct TurnEnd {
    host: Arc<Host>,
    cell: Arc<SessionCell>,
    turn_id: String,
    run_id: String,
    /// The goal the turn runs for: its end counts for that goal only.
    goal_id: Option<String>,
    tokens_at_start: u64,
    ended: AtomicBool,
}

impl TurnEnd {
    pub(super) fn new(
        host: &Arc<Host>,
        cell: &Arc<SessionCell>,
        spec: &TurnSpec,
        tokens_at_start: u64,
    ) -> TurnEnd {
        TurnEnd {
            host: Arc::clone(host),
            cell: Arc::clone(cell),
            turn_id: spec.turn_id.clone(),
            run_id: spec.run_id.clone(),
            goal_id: spec.goal_id.clone(),
            tokens_at_start,
            ended: AtomicBool::new(false),
        }
    }

    /// The turn was ended (by its thread or its watchdog): nothing more of it is recorded.
    /// Read under the session lock to be exact.
    pub(super) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Ends the turn with `t`, unless it was ended already: its pending dialogs and editor
    /// calls are closed, the tools still running are settled `cancelled` (their late results
    /// are dropped), the terminal state is recorded and the `turn_terminal` frame emitted.
    pub(super) fn finish(&self, t: Terminal) {
        let mut st = self.cell.lock();
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        // Added too late for a step (or the turn was stopped): kept in the conversation, where
        // the next turn's model sees it. Never dropped.
        take_in_steering(&self.cell, &self.turn_id, &mut st);
        let reason = if t.outcome == TurnOutcome::Cancelled {
            "turn_stopped"
        } else {
            "turn_terminal"
        };
        let pending: Vec<String> = st
            .interactions
            .iter()
            .filter(|(_, s)| s.answer_tx.is_some() && s.interaction.turn_id == self.turn_id)
            .map(|(id, _)| id.clone())
            .collect();
        for id in pending {
            close_interaction(&self.cell, &self.turn_id, &mut st, &id, reason);
        }
        for (_, call) in st.client_calls.drain() {
            let _ = call.tx.send(Err("the turn ended".into()));
        }
        self.settle_running_tools(&mut st);
        let status = match t.outcome {
            TurnOutcome::Completed => TurnStatus::Completed,
            TurnOutcome::Cancelled => TurnStatus::Cancelled,
            TurnOutcome::Failed => TurnStatus::Failed,
            TurnOutcome::MaxTokens => TurnStatus::MaxTokens,
            TurnOutcome::Refused => TurnStatus::Refused,
        };
        append(
            &self.cell,
            &self.turn_id,
            &mut st,
            vec![TranscriptBody::TurnState {
                run_id: self.run_id.clone(),
                status,
                origin: None,
                reason: Some(t.reason.clone()),
                failure_class: t.failure_class,
                failure_message: t.failure_message.clone(),
                resumed_from_run_id: None,
                goal_id: None,
            }],
        );
        if let Some(rec) = st.turns.get_mut(&self.turn_id) {
            rec.snapshot.status = status;
            rec.snapshot.reason = Some(t.reason.clone());
            rec.snapshot.failure_class = t.failure_class;
            rec.snapshot.failure_message = t.failure_message.clone();
            rec.snapshot.failure_details = t.failure_details.clone();
            rec.snapshot.ended_at = Some(now_ms());
        }
        st.active = None;
        if let Some(goal_id) = &self.goal_id {
            let used = st
                .usage_totals
                .input_tokens
                .saturating_add(st.usage_totals.output_tokens);
            let why = t.failure_message.clone().or_else(|| Some(t.reason.clone()));
            crate::host::goals::turn_finished(
                &self.host,
                &self.cell,
                &mut st,
                goal_id,
                status,
                why,
                used.saturating_sub(self.tokens_at_start),
            );
        }
        st.session.status = crate::host_api::wire::SessionStatus::Idle;
        st.session.active_turn_id = None;
        st.session.last_used_at = now_ms();
        if let Err(e) = self.host.store.save_session(&st.session) {
            log::error!(
                "session {}: cannot save the session record: {e}",
                self.cell.id
            );
        }
        let body = FrameBody::TurnTerminal {
            turn_id: self.turn_id.clone(),
            run_id: self.run_id.clone(),
            outcome: t.outcome,
            reason: t.reason,
            failure_class: t.failure_class,
            failure_message: t.failure_message,
            failure_details: t.failure_details,
        };
        self.cell.emit(&mut st, body);
        drop(st);
        self.host.turn_finished();
        // A prompt queued behind this turn starts now, after its terminal frame.
        crate::host::ops::start_queued(&self.host, &self.cell);
    }

    /// Tools of this turn still running when it ends (only when the watchdog ends it: the
    /// turn's own thread settles each tool before it ends): each gets its `cancelled` result,
    /// so clients and the model's history see every call settled.
    fn settle_running_tools(&self, st: &mut crate::host::session::SessionState) {
        let running: Vec<String> = st
            .active
            .as_mut()
            .map(|a| a.tools.drain(..).map(|t| t.tool_call_id).collect())
            .unwrap_or_default();
        for id in running {
            let result = ToolResultContent::Text {
                text: "The turn was stopped while this tool was still running; it did not end within the stop bound, and whatever it does later is not recorded.".into(),
            };
            let body = FrameBody::ToolResult {
                turn_id: self.turn_id.clone(),
                tool_call_id: id.clone(),
                status: crate::host_api::wire::ToolStatus::Cancelled,
                result: result.clone(),
                truncated: false,
                duration_ms: None,
            };
            self.cell.emit(st, body);
            let item = TranscriptBody::ToolResult {
                tool_call_id: id,
                status: crate::host_api::wire::ToolStatus::Cancelled,
                result,
                truncated: false,
                ran: true,
            };
            append(&self.cell, &self.turn_id, st, vec![item]);
        }
    }
}

/// Watches a turn: once its stop is asked, the turn's thread has [`STOP_BOUND`] to end it
/// (`done` disconnects when the thread returns); after that the turn is ended here.
pub(super) fn watch(end: Arc<TurnEnd>, cancel: CancelToken, done: Receiver<()>) {
    select! {
        recv(done) -> _ => return,
        recv(cancel.receiver()) -> _ => {}
    }
    if done.recv_timeout(STOP_BOUND) == Err(RecvTimeoutError::Timeout) {
        log::warn!(
            "session {}: turn {} did not end within {} s of its stop (a tool is still running); it is ended without it",
            end.cell.id,
            end.turn_id,
            STOP_BOUND.as_secs()
        );
        end.finish(Terminal::cancelled());
    }
}

/// Records `bodies` as items of turn `turn_id`.
pub(super) fn append(
    cell: &SessionCell,
    turn_id: &str,
    st: &mut crate::host::session::SessionState,
    bodies: Vec<TranscriptBody>,
) {
    let items = bodies
        .into_iter()
        .map(|b| (turn_id.to_string(), b))
        .collect();
    if let Err(e) = cell.append(st, items) {
        log::error!("session {}: {e}", cell.id);
    }
}

/// Messages added to turn `turn_id` since its last step (`turn.message.submit`): into the
/// transcript (and so the model's context) here, shown to clients as they are taken in.
pub(super) fn take_in_steering(
    cell: &SessionCell,
    turn_id: &str,
    st: &mut crate::host::session::SessionState,
) {
    let queued = match st.active.as_mut() {
        Some(a) if !a.steering.is_empty() => std::mem::take(&mut a.steering),
        _ => return,
    };
    for (message_id, content) in queued {
        cell.emit(
            st,
            FrameBody::UserMessage {
                turn_id: turn_id.to_string(),
                message_id: message_id.clone(),
                content: content.clone(),
            },
        );
        append(
            cell,
            turn_id,
            st,
            vec![TranscriptBody::User {
                message_id,
                content,
                steered: true,
            }],
        );
    }
}

/// Closes a dialog nobody will answer now (`reason`: why).
pub(super) fn close_interaction(
    cell: &SessionCell,
    turn_id: &str,
    st: &mut crate::host::session::SessionState,
    id: &str,
    reason: &str,
) {
    let Some(slot) = st.interactions.get_mut(id) else {
        return;
    };
    if slot.answer_tx.take().is_none() {
        return;
    }
    let outcome = InteractionOutcome::Closure {
        reason: reason.into(),
    };
    slot.interaction.status = "closed".into();
    slot.interaction.outcome = Some(outcome.clone());
    let interaction = slot.interaction.clone();
    append(
        cell,
        turn_id,
        st,
        vec![TranscriptBody::Interaction { interaction }],
    );
    cell.emit(
        st,
        FrameBody::InteractionClosed {
            interaction_id: id.into(),
            status: "closed".into(),
            outcome,
        },
    );
}
