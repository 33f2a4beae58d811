//! A session's reader thread: follows the host's event stream while a turn is followed,
//! shows every frame (through the session's view), starts dialogs and editor calls, and —
//! when it sees the terminal frame of the turn a `session/prompt` waits for — answers that
//! prompt itself. Because this one thread enqueues every update of the turn and then the
//! response, no update of the turn can follow the response. Idle sessions hold no stream.
//!
//! A gap (a 410, a sequence jump, an unreadable frame, a stream that broke while the host
//! lives) is repaired from durable state: a fresh snapshot, the transcript since the last item
//! seen, then what is in flight — the projector drops what it has shown already.

use super::client_call;
use super::errors::{self, MakaCode};
use super::host_link::Connected;
use super::interaction;
use super::session::{AcpSession, ReaderStep, Shared};
use super::types::{PromptResponse, StopReason, TurnStateNotification};
use crate::host_api::client::{ClientError, EventStream};
use crate::host_api::ops::{self, OpenSnapshot, TurnRef};
use crate::host_api::wire::{
    ErrorCode, FailureClass, Frame, FrameBody, StreamEndReason, TurnOutcome, TurnSnapshot,
    TurnStatus,
};
use crate::jsonrpc::ResponseError;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const TOOL_UNFINISHED: &str = "The turn ended before this tool finished.";

/// The reader thread: follows the stream until the followed turn has ended and no prompt is
/// waiting, reconnecting at every window end.
pub fn run(
    session: Arc<AcpSession>,
    shared: Arc<Shared>,
    conn: Connected,
    mut first: Option<EventStream>,
) {
    // Consecutive windows refused because the host's stream slots were full.
    let mut refused = 0u32;
    loop {
        let (after, epoch) = match session.reader_step(&conn.epoch) {
            ReaderStep::Stop => return,
            ReaderStep::AnswerCancelled => {
                stop(
                    &session,
                    &shared,
                    Ok(PromptResponse::new(StopReason::Cancelled)),
                );
                return;
            }
            ReaderStep::Follow { after, epoch } => (after, epoch.unwrap_or_default()),
        };
        let stream = match first.take() {
            Some(s) => Ok(s),
            None => conn.client.events(&session.id, after, &epoch, 25_000, true),
        };
        let mut stream = match stream {
            Ok(s) => {
                refused = 0;
                s
            }
            Err(ClientError::Host(h)) if h.code == ErrorCode::CapacityExceeded => {
                refused += 1;
                if refused > 100 {
                    // 10 s without a slot: nobody can follow this turn, so it stops.
                    if let Some(t) = session.active_turn() {
                        session.stop_turn(&shared, &t);
                    }
                    let e = errors::capacity_exceeded("this turn; it was stopped");
                    stop(&session, &shared, Err(e));
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            Err(e) => {
                if !recover(&session, &shared, &conn, &e) {
                    return;
                }
                continue;
            }
        };
        loop {
            let frame = match stream.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    if !recover(&session, &shared, &conn, &e) {
                        return;
                    }
                    break;
                }
            };
            match &frame.body {
                FrameBody::StreamEnd { reason, .. } => {
                    if *reason == StreamEndReason::SessionRemoved {
                        stop(&session, &shared, Err(errors::unknown_session(&session.id)));
                        return;
                    }
                    break;
                }
                FrameBody::Heartbeat { .. } => continue,
                FrameBody::FrameOmitted { omitted_kind, .. } => {
                    // The host could not emit a frame (a bug there): catch up from the
                    // durable state, then follow from the snapshot.
                    log::warn!(
                        "session {}: the host omitted a {omitted_kind} frame; catching up",
                        session.id
                    );
                    if !reopen(&session, &shared, &conn) {
                        return;
                    }
                    break;
                }
                _ => {}
            }
            let Some(seq) = frame.seq else { continue };
            let last = session.last_seq();
            if seq != last + 1 {
                log::warn!(
                    "session {}: frame {seq} after {last}: re-opening",
                    session.id
                );
                if !reopen(&session, &shared, &conn) {
                    return;
                }
                break;
            }
            handle_frame(&session, &shared, &conn, frame);
            if session.idle() {
                // The followed turn is over: detach (the response is already queued).
                break;
            }
        }
    }
}

/// Handles a stream error. Returns false when the reader must stop.
fn recover(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    conn: &Connected,
    e: &ClientError,
) -> bool {
    match e {
        // A stream that broke or stalled (this side stopped reading while the client did not
        // read stdout) is not a dead host: ask it. If it answers, catch up and go on.
        ClientError::Transport(msg) if conn.client.is_alive() => {
            log::info!(
                "session {}: the event stream broke ({msg}) but the host answers; catching up",
                session.id
            );
            reopen(session, shared, conn)
        }
        ClientError::Protocol(msg) => {
            log::warn!(
                "session {}: skipped an unreadable frame ({msg}); catching up from the transcript",
                session.id
            );
            reopen(session, shared, conn)
        }
        ClientError::Transport(msg) => {
            log::warn!("session {}: the Runtime Host went away ({msg})", session.id);
            shared.link.lost(&conn.epoch);
            session.forget_position();
            let err = MakaCode::HostUnavailable.error("The Runtime Host stopped while this turn was running; the turn did not finish. Send the prompt again to continue.");
            stop(session, shared, Err(err));
            false
        }
        ClientError::Host(h) if h.code == ErrorCode::ResyncRequired => {
            reopen(session, shared, conn)
        }
        ClientError::Host(h) if h.code == ErrorCode::NotFound => {
            stop(session, shared, Err(errors::unknown_session(&session.id)));
            false
        }
        ClientError::Host(h) => {
            log::error!("session {}: the event stream failed: {h}", session.id);
            stop(session, shared, Err(errors::from_client(e)));
            false
        }
    }
}

/// Ends the reader, answering a pending prompt with `result` (or `cancelled` if the client
/// cancelled it) after settling its open tool calls — updates first, then the response, on
/// this thread.
fn stop(session: &Arc<AcpSession>, shared: &Shared, result: Result<PromptResponse, ResponseError>) {
    session.release_reader();
    if !session.has_prompt() {
        return;
    }
    session.settle_tools(shared, TOOL_UNFINISHED);
    session.finish_prompt(result);
}

/// After a 410, a sequence gap, an unreadable frame or a stream that broke: take a fresh
/// snapshot, catch up on what the live stream no longer holds (the durable items since the
/// last one seen, then what is in flight — nothing already shown is shown twice), and settle
/// the prompt if its turn ended meanwhile. Returns false when the reader must stop.
fn reopen(session: &Arc<AcpSession>, shared: &Arc<Shared>, conn: &Connected) -> bool {
    let input = ops::OpenInput {
        session_id: session.id.clone(),
        mcp_servers: None,
    };
    let open = match conn.client.call::<ops::SessionOpen>(&input) {
        Ok(o) => o,
        Err(ClientError::Protocol(m)) => {
            log::error!("session {}: unreadable snapshot ({m})", session.id);
            let e = errors::from_client(&ClientError::Protocol(m));
            stop(session, shared, Err(e));
            return false;
        }
        Err(e) => return recover(session, shared, conn, &e),
    };
    session.observe_snapshot(shared, &open);
    if let Err(e) = catch_up(session, shared, conn, &open) {
        log::error!("session {}: catching up failed: {e}", session.id);
    }
    let active = open.active_turn.as_ref().map(|t| t.turn_id.clone());
    let waiting_turn = session.prompt_turn();
    session.set_position(open.seq, &conn.epoch, active.clone());
    if let Some(turn) = waiting_turn.filter(|t| active.as_deref() != Some(t)) {
        // Our turn finished while the ring moved past us: its outcome comes from turn.query.
        let input = TurnRef {
            session_id: session.id.clone(),
            turn_id: turn.clone(),
            run_id: None,
        };
        let result = match conn.client.call::<ops::TurnQuery>(&input) {
            Ok(snapshot) => snapshot_result(&snapshot),
            Err(e) => Err(errors::from_client(&e)),
        };
        session.settle_tools(shared, TOOL_UNFINISHED);
        session.finish_prompt(result);
    }
    true
}

/// Replays the durable items after the last one this connection saw, through the snapshot's
/// `throughMessageSeq`, then the snapshot's in-flight text, tools, dialogs and editor calls.
/// The projector drops what it has already shown (text by offset, tool calls by id).
fn catch_up(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    conn: &Connected,
    open: &OpenSnapshot,
) -> Result<(), ClientError> {
    let through = open.transcript.through_message_seq;
    session.replay_transcript(shared, &*conn.client, session.through(), through, &|| false)?;
    session.show_in_flight(shared, open);
    start_pending(session, shared, conn, open);
    Ok(())
}

/// Dialogs and editor calls a snapshot says are waiting, unless already shown.
pub(super) fn start_pending(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    conn: &Connected,
    open: &OpenSnapshot,
) {
    for i in &open.pending_interactions {
        if !session.is_tracked(&i.interaction_id) {
            interaction::spawn(
                Arc::clone(session),
                Arc::clone(shared),
                conn.clone(),
                i.clone(),
            );
        }
    }
    for c in &open.pending_client_calls {
        if session.is_tracked(&c.invocation_id) {
            continue;
        }
        let call = client_call::Call {
            invocation_id: c.invocation_id.clone(),
            tool_call_id: c.tool_call_id.clone(),
            service: c.service.clone(),
            input: Value::Null,
            input_ref: true,
        };
        client_call::spawn(Arc::clone(session), Arc::clone(shared), conn.clone(), call);
    }
}

fn handle_frame(session: &Arc<AcpSession>, shared: &Arc<Shared>, conn: &Connected, frame: Frame) {
    let Frame { seq, body, .. } = frame;
    session.observe_frame(seq, &body);
    match body {
        FrameBody::InteractionRequest { interaction: i } => {
            if !session.is_tracked(&i.interaction_id) {
                interaction::spawn(Arc::clone(session), Arc::clone(shared), conn.clone(), i);
            }
        }
        FrameBody::ClientCall {
            invocation_id,
            tool_call_id,
            service,
            input,
            input_ref,
        } => {
            let call = client_call::Call {
                invocation_id,
                tool_call_id,
                service,
                input,
                input_ref,
            };
            client_call::spawn(Arc::clone(session), Arc::clone(shared), conn.clone(), call);
        }
        FrameBody::ConfigurationChanged {
            revision,
            configuration,
        } => session.config_changed(shared, revision, configuration),
        FrameBody::GoalUpdated { goal } => {
            session.goal_seen(&goal);
            shared.outbox.notify(
                "_maka/goal_update",
                &serde_json::json!({"sessionId": session.id, "goal": goal}),
            );
        }
        // Closed by the host (or another client) while the user still sees it.
        FrameBody::ClientCallCancelled { invocation_id } => {
            session.withdraw(shared, &invocation_id)
        }
        FrameBody::InteractionClosed { interaction_id, .. } => {
            session.withdraw(shared, &interaction_id)
        }
        FrameBody::ToolResult { .. } => {
            // Throttled output first, then the result.
            session.emit(shared, |view| {
                let mut out = view.pending_output();
                out.extend(view.frame(&body, std::time::Instant::now()));
                (out, ())
            });
        }
        FrameBody::TurnTerminal {
            turn_id,
            outcome,
            reason,
            failure_class,
            failure_message,
            failure_details,
            ..
        } => {
            session.emit(shared, |view| {
                let mut out = view.pending_output();
                out.extend(view.close_open_tools(TOOL_UNFINISHED));
                view.turn_finished(&turn_id);
                (out, ())
            });
            if session.turn_ended(&turn_id) {
                let failure = Failure {
                    class: failure_class,
                    message: failure_message.as_deref(),
                    details: failure_details.as_ref(),
                };
                session.finish_prompt(terminal_result(&turn_id, outcome, &reason, failure));
            } else {
                shared.outbox.notify(
                    "_maka/turn_state",
                    &TurnStateNotification {
                        session_id: session.id.clone(),
                        turn_id,
                        outcome,
                        reason,
                    },
                );
            }
        }
        body => session.show(shared, std::slice::from_ref(&body)),
    }
}

/// Why a turn failed, as the host said it.
struct Failure<'a> {
    class: Option<FailureClass>,
    /// One sentence for the person.
    message: Option<&'a str>,
    details: Option<&'a Value>,
}

/// The `session/prompt` result for a terminal frame.
/// (A client that cancelled gets `cancelled` instead: [`AcpSession::finish_prompt`].)
fn terminal_result(
    turn_id: &str,
    outcome: TurnOutcome,
    reason: &str,
    failure: Failure,
) -> Result<PromptResponse, ResponseError> {
    let stop = |r| Ok(PromptResponse::new(r));
    match outcome {
        TurnOutcome::Completed if reason == "step_limit" => stop(StopReason::MaxTurnRequests),
        TurnOutcome::Completed => stop(StopReason::EndTurn),
        // Stopped by someone else (another client, a host shutdown): not this client's cancel.
        TurnOutcome::Cancelled => Ok(PromptResponse {
            stop_reason: StopReason::EndTurn,
            meta: Some(json!({"maka": {"outcome": "cancelled", "reason": reason}})),
        }),
        TurnOutcome::MaxTokens => stop(StopReason::MaxTokens),
        TurnOutcome::Refused => stop(StopReason::Refusal),
        TurnOutcome::Failed => Err(turn_failed(turn_id, failure)),
    }
}

/// The host's sentence is the message (it says what happened and what to do); the class and
/// the details (an HTTP status, the provider's answer) go in `data`.
fn turn_failed(turn_id: &str, f: Failure) -> ResponseError {
    let class = f.class.unwrap_or(FailureClass::RuntimeError);
    let message = match f.message {
        Some(m) if !m.trim().is_empty() => sentence(m),
        _ => "The turn failed; the agent's log has the details.".to_string(),
    };
    let mut extra = json!({"failureClass": class, "turnId": turn_id});
    if let Some(d) = f.details {
        extra["details"] = d.clone();
    }
    MakaCode::TurnFailed.error_with(message, extra)
}

/// Capitalised and ending with a full stop (older hosts send lower-case fragments).
fn sentence(m: &str) -> String {
    let m = m.trim();
    let mut out: String = m
        .chars()
        .take(1)
        .flat_map(char::to_uppercase)
        .chain(m.chars().skip(1))
        .collect();
    if !out.ends_with(['.', '!', '?', '…']) {
        out.push('.');
    }
    out
}

/// The prompt result from a `turn.query` snapshot (used after a resync).
fn snapshot_result(snapshot: &TurnSnapshot) -> Result<PromptResponse, ResponseError> {
    let outcome = match snapshot.status {
        TurnStatus::Completed => TurnOutcome::Completed,
        TurnStatus::Cancelled => TurnOutcome::Cancelled,
        TurnStatus::MaxTokens => TurnOutcome::MaxTokens,
        TurnStatus::Refused => TurnOutcome::Refused,
        _ => TurnOutcome::Failed,
    };
    terminal_result(
        &snapshot.turn_id,
        outcome,
        snapshot.reason.as_deref().unwrap_or("end_turn"),
        Failure {
            class: snapshot.failure_class,
            message: snapshot.failure_message.as_deref(),
            details: snapshot.failure_details.as_ref().filter(|d| !d.is_null()),
        },
    )
}
