//! A session's reader thread: follows the host's event stream while a turn is followed. It
//! reads a frame, checks its `seq`, applies it (`AcpSession::apply`: what it becomes is
//! decided in `projection/`) and performs the effects in order — updates and notifications,
//! dialogs and editor calls on threads of their own, and, for the terminal frame of the turn
//! a `session/prompt` waits for, that prompt's answer. Because this one thread enqueues every update of the turn and then the
//! response, no update of the turn can follow the response. Idle sessions hold no stream.
//!
//! A gap (a 410, a sequence jump, an unreadable frame, a stream that broke while the host
//! lives) is repaired from durable state: a fresh snapshot, the transcript since the last item
//! seen, then what is in flight — the projector drops what it has shown already — at most
//! [`CATCH_UPS`] times in a row.

use super::client_call;
use super::connection::Shared;
use super::errors::{self, MakaCode};
use super::host_link::Connected;
use super::interaction;
use super::projection::{self, answer, Effect, TOOL_UNFINISHED};
use super::session::{AcpSession, Effects, ReaderStep};
use super::types::{PromptResponse, StopReason};
use super::v2;
use crate::host_api::client::{ClientError, EventStream};
use crate::host_api::ops::{self, OpenSnapshot, TurnRef};
use crate::host_api::wire::{ErrorCode, Frame};
use crate::jsonrpc::ResponseError;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Catch-ups tried in a row before the reader gives up (each after an error that allows one).
pub const CATCH_UPS: usize = 5;

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
            None => conn.events(&session.id, after, &epoch, 25_000, true),
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
                    if let Some(t) = session.position().active_turn {
                        super::session::stop_turn(&shared, &session.id, &t);
                    }
                    let e = errors::capacity_exceeded("this turn; it was stopped", &h.message);
                    stop(&session, &shared, Err(e));
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            Err(e) => {
                if !recover(&session, &shared, &conn, Some(e)) {
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
                    if !recover(&session, &shared, &conn, Some(e)) {
                        return;
                    }
                    break;
                }
            };
            // The stream's own frames (its end, heartbeats, an omission) carry no sequence
            // number; every other frame must (and must be the next one: `apply` checks).
            if projection::facts(&frame.body).sequenced && frame.seq.is_none() {
                continue;
            }
            match handle_frame(&session, &shared, &conn, frame) {
                Flow::Next if session.idle() => break, // the followed turn is over: detach
                Flow::Next => {}
                Flow::EndWindow => break,
                Flow::Stop => return,
            }
        }
    }
}

/// Starts the reader unless one is running; `first` is a stream already opened for it.
pub fn ensure_reader(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    conn: &Connected,
    first: Option<EventStream>,
) {
    if !session.claim_reader() {
        return;
    }
    let (s, sh, c) = (Arc::clone(session), Arc::clone(shared), conn.clone());
    let reader = crate::threads::spawn(format!("acp-session-{}", session.id), move || {
        run(s, sh, c, first)
    });
    if reader.is_none() {
        session.release_reader(false);
    }
}

/// The event stream a prompt will be followed on, opened before its turn starts: a turn
/// nobody can follow is never started. `None` when a reader already follows the session.
/// While the host's stream slots are full, retries for up to 5 s.
pub fn open_stream(
    session: &AcpSession,
    conn: &Connected,
) -> Result<Option<EventStream>, ResponseError> {
    let position = session.position();
    if position.reader {
        return Ok(None);
    }
    let after = position.last_seq;
    let epoch = position.epoch.unwrap_or_else(|| conn.epoch.clone());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match conn.events(&session.id, after, &epoch, 25_000, true) {
            Ok(s) => return Ok(Some(s)),
            // A prompt cancelled meanwhile stops waiting (its start answers it).
            Err(ClientError::Host(h))
                if h.code == ErrorCode::CapacityExceeded
                    && Instant::now() < deadline
                    && !session.is_cancelling() =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(ClientError::Host(h)) if h.code == ErrorCode::CapacityExceeded => {
                return Err(errors::capacity_exceeded(
                    "this prompt; it was not started",
                    &h.message,
                ))
            }
            Err(e) => return Err(errors::from_client(&e)),
        }
    }
}

/// Follows the session's turns while its goal is live (they start without a prompt here).
pub fn follow_goal(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    conn: &Connected,
    goal: &crate::host_api::wire::Goal,
) {
    if session.goal_seen(goal) && goal.is_live() {
        ensure_reader(session, shared, conn, None);
    }
}

/// Repairs the stream after `cause` (`None`: a gap seen on the stream itself): a bounded loop
/// of catch-ups ([`reopen`]), each after an error that allows one. Returns false when the
/// reader must stop (it has answered the prompt).
fn recover(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    conn: &Connected,
    mut cause: Option<ClientError>,
) -> bool {
    for attempt in 0..CATCH_UPS {
        // Back to back the catch-ups would all fall into one short blip of the host: 0, 100,
        // 200, 400, 800 ms (1.5 s in all) before giving up.
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(50 << attempt));
        }
        if let Some(e) = cause.take() {
            if let Err(answer) = judge(session, conn, &e) {
                // The reader is released once, by `stop`; a host that went away takes its
                // epoch with it (the next reader follows the new host's).
                let host_gone = matches!(e, ClientError::Transport(_));
                stop_reader(session, shared, Err(answer), host_gone);
                return false;
            }
        }
        match reopen(session, shared, conn) {
            Ok(()) => return true,
            Err(Gap::Again(e)) => cause = Some(e),
            Err(Gap::Fatal(answer)) => {
                stop(session, shared, Err(answer));
                return false;
            }
        }
    }
    log::error!(
        "session {}: {CATCH_UPS} catch-ups in a row failed; giving up",
        session.id
    );
    let answer = match &cause {
        Some(e) => errors::from_client(e),
        None => MakaCode::HostUnavailable
            .error("The agent could not catch up with the Runtime Host; send the prompt again."),
    };
    stop(session, shared, Err(answer));
    false
}

/// Whether a stream error allows a catch-up; else the prompt's answer.
fn judge(session: &AcpSession, conn: &Connected, e: &ClientError) -> Result<(), ResponseError> {
    match e {
        // A stream that broke or stalled (this side stopped reading while the client did not
        // read stdout) is not a dead host: ask it. If it answers, catch up and go on.
        ClientError::Transport(msg) if conn.is_alive() => {
            log::info!(
                "session {}: the event stream broke ({msg}) but the host answers; catching up",
                session.id
            );
            Ok(())
        }
        ClientError::Protocol(msg) => {
            log::warn!(
                "session {}: skipped an unreadable frame ({msg}); catching up from the transcript",
                session.id
            );
            Ok(())
        }
        ClientError::Transport(msg) => {
            log::warn!("session {}: the Runtime Host went away ({msg})", session.id);
            conn.forget();
            Err(MakaCode::HostUnavailable.error("The Runtime Host stopped while this turn was running; the turn did not finish. Send the prompt again to continue."))
        }
        ClientError::Host(h) if h.code == ErrorCode::ResyncRequired => Ok(()),
        ClientError::Host(h) if h.code == ErrorCode::NotFound => {
            Err(errors::unknown_session(&session.id))
        }
        ClientError::Host(h) => {
            log::error!("session {}: the event stream failed: {h}", session.id);
            Err(errors::from_client(e))
        }
    }
}

/// Why a catch-up did not happen.
enum Gap {
    /// The snapshot could not be had: judge this error (another catch-up may follow).
    Again(ClientError),
    /// The reader stops with this answer.
    Fatal(ResponseError),
}

/// Ends the reader, answering a pending prompt with `result` (or `cancelled` if the client
/// cancelled it) after settling its open tool calls — updates first, then the response, on
/// this thread.
fn stop(session: &Arc<AcpSession>, shared: &Shared, result: Result<PromptResponse, ResponseError>) {
    stop_reader(session, shared, result, false)
}

/// [`stop`], `host_gone`: the host went away, and the stream position's epoch with it.
fn stop_reader(
    session: &Arc<AcpSession>,
    shared: &Shared,
    result: Result<PromptResponse, ResponseError>,
    host_gone: bool,
) {
    session.release_reader(host_gone);
    if session.prompt_turn().is_none() {
        // v2 tells every turn it follows (another client's, a goal's): its end too, as far
        // as this connection can tell — the reader stops, so nothing more of it is shown.
        // (v1 tells another's turn by `_maka/turn_state` from its frames alone, as before.)
        session.emit(
            |_| (vec![], ()),
            |view| {
                let mut out = view.end_unfinished(TOOL_UNFINISHED, false);
                out.extend(view.stopped(&result, false));
                (out, ())
            },
        );
        return;
    }
    settle(session, shared, result);
}

/// The pending prompt's turn is over without its terminal frame (the stream was lost, or its
/// end was read from a snapshot): its open tool calls settled, a v2 client told the session
/// is idle (and why), then the prompt answered.
fn settle(
    session: &Arc<AcpSession>,
    shared: &Shared,
    result: Result<PromptResponse, ResponseError>,
) {
    super::view::settle_tools(session, shared, TOOL_UNFINISHED);
    let cancelled = session.is_cancelling();
    session.emit(
        |_| (vec![], ()),
        |view| (view.stopped(&result, cancelled), ()),
    );
    session.finish_prompt(result);
}

/// After a 410, a sequence gap, an unreadable frame or a stream that broke: take a fresh
/// snapshot, catch up on what the live stream no longer holds (the durable items since the
/// last one seen, then what is in flight — nothing already shown is shown twice), and settle
/// the prompt if its turn ended meanwhile.
fn reopen(session: &Arc<AcpSession>, shared: &Arc<Shared>, conn: &Connected) -> Result<(), Gap> {
    let input = ops::OpenInput {
        session_id: session.id.clone(),
        mcp_servers: None,
        system_prompt: None,
    };
    let open = match conn.call::<ops::SessionOpen>(&input) {
        Ok(o) => o,
        Err(ClientError::Protocol(m)) => {
            log::error!("session {}: unreadable snapshot ({m})", session.id);
            return Err(Gap::Fatal(errors::from_client(&ClientError::Protocol(m))));
        }
        Err(e) => return Err(Gap::Again(e)),
    };
    let config = &open.session;
    session.configure(|c| (c.changed(config.revision, &config.configuration), ()));
    match catch_up(session, shared, conn, &open) {
        Ok(()) => {
            // Unnumbered: never out of sequence; its only effect is the notice shown.
            let _ = session.apply(shared, None, projection::caught_up_notice(open.seq));
        }
        Err(e) => log::error!("session {}: catching up failed: {e}", session.id),
    }
    let active = open.active_turn.as_ref().map(|t| t.turn_id.clone());
    let waiting_turn = session.prompt_turn();
    session.set_position(open.seq, &conn.epoch, active.clone());
    // v2: the state as the snapshot has it (a turn that ended in the gap, a dialog closed in
    // it), and the pending prompt answered if its turn started in the gap.
    let pending = &open.pending_interactions;
    // Told after the own prompt is settled (its stop reason first, then the snapshot's state:
    // the next turn may already run).
    let reconcile = || {
        session.emit(
            |_| (vec![], ()),
            |view| (view.reconcile(active.is_some(), pending, false), ()),
        )
    };
    if let Some(turn) = waiting_turn
        .as_deref()
        .filter(|t| active.as_deref() == Some(*t))
    {
        if let Some(responder) = session.accept_prompt(turn) {
            let answer = v2::types::PromptResponse {
                message_id: v2::projection::user_message_id(turn),
            };
            responder.respond(Ok(super::types::to_json(&answer)));
        }
    }
    if let Some(turn) = waiting_turn.filter(|t| active.as_deref() != Some(t)) {
        // Our turn finished while the ring moved past us: its outcome comes from turn.query.
        let input = TurnRef {
            session_id: session.id.clone(),
            turn_id: turn.clone(),
            run_id: None,
        };
        let result = match conn.call::<ops::TurnQuery>(&input) {
            Ok(snapshot) => answer::snapshot_result(&snapshot),
            // Not started yet (a queued prompt just promoted, its `turn.start` in flight): it
            // starts after this snapshot, and its frames are read live.
            Err(ClientError::Host(h))
                if h.code == ErrorCode::NotFound
                    && session.started_prompt_turn().as_deref() != Some(turn.as_str()) =>
            {
                reconcile();
                return Ok(());
            }
            Err(e) => Err(errors::from_client(&e)),
        };
        settle(session, shared, result);
    }
    reconcile();
    Ok(())
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
    let after = session.position().through;
    super::view::replay_transcript(session, shared, conn, after, through, true, &|| false)?;
    super::view::show_in_flight(session, shared, open);
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
            let asked = super::view::dialog(session, shared, i);
            interaction::spawn(
                Arc::clone(session),
                Arc::clone(shared),
                conn.clone(),
                i.clone(),
                asked,
            );
        }
    }
    for c in &open.pending_client_calls {
        if session.is_tracked(&c.invocation_id) {
            continue;
        }
        let call = projection::EditorCall {
            invocation_id: c.invocation_id.clone(),
            tool_call_id: c.tool_call_id.clone(),
            service: c.service.clone(),
            input: Value::Null,
            input_ref: true,
        };
        client_call::spawn(Arc::clone(session), Arc::clone(shared), conn.clone(), call);
    }
}

/// What the reader does after a frame.
enum Flow {
    Next,
    /// The window ended (or was caught up): open the next one.
    EndWindow,
    Stop,
}

/// A live frame: its updates are shown ([`AcpSession::apply`]), then its other effects
/// performed here, in order — I/O only: what each frame does is decided in
/// [`super::projection::Projector::apply`].
fn handle_frame(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    conn: &Connected,
    frame: Frame,
) -> Flow {
    let Frame { seq, body, .. } = frame;
    let effects = match session.apply(shared, seq, body) {
        Ok(effects) => effects,
        Err(gap) => {
            let seq = seq.unwrap_or_default();
            log::warn!(
                "session {}: frame {seq} after {}: re-opening",
                session.id,
                gap.last
            );
            return if recover(session, shared, conn, None) {
                Flow::EndWindow
            } else {
                Flow::Stop
            };
        }
    };
    let effects = match effects {
        Effects::V1(effects) => effects,
        Effects::V2(effects) => return handle_v2(session, shared, conn, effects),
    };
    for effect in effects {
        match effect {
            Effect::Show(_) | Effect::Notify(_) => {} // sent by `apply`
            Effect::Ask(i, asked) => {
                if !session.is_tracked(&i.interaction_id) {
                    let (session, shared) = (Arc::clone(session), Arc::clone(shared));
                    interaction::spawn(session, shared, conn.clone(), i, asked);
                }
            }
            Effect::EditorCall(call) => {
                client_call::spawn(Arc::clone(session), Arc::clone(shared), conn.clone(), call)
            }
            Effect::Withdraw(key) => {
                // The host closed it (answered elsewhere, withdrawn): withdrawn from the editor.
                if let Some(request) = session.untrack(&key) {
                    shared.calls.cancel(&request);
                }
            }
            Effect::Answer(answer, outcome) => {
                session.finish_prompt(answer);
                super::maka_dialect::prompt_ended(session, shared, conn, outcome);
            }
            Effect::WindowEnd {
                session_removed: true,
            } => {
                stop(session, shared, Err(errors::unknown_session(&session.id)));
                return Flow::Stop;
            }
            Effect::WindowEnd { .. } => return Flow::EndWindow,
            Effect::Resync(kind) => {
                // The host could not emit a frame (a bug there): catch up from the durable
                // state, then follow from the snapshot.
                log::warn!(
                    "session {}: the host omitted a {kind} frame; catching up",
                    session.id
                );
                return if recover(session, shared, conn, None) {
                    Flow::EndWindow
                } else {
                    Flow::Stop
                };
            }
        }
    }
    Flow::Next
}

/// [`handle_frame`]'s effects on a v2 connection: the same I/O, and v2's own — a prompt
/// answered when its message is inserted, the prompt slot freed when its turn is idle.
fn handle_v2(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    conn: &Connected,
    effects: Vec<v2::projection::Effect>,
) -> Flow {
    use v2::projection::Effect as E;
    for effect in effects {
        match effect {
            E::Show(_) => {} // sent by `apply`
            E::Ask(i, asked) => {
                if !session.is_tracked(&i.interaction_id) {
                    let (session, shared) = (Arc::clone(session), Arc::clone(shared));
                    interaction::spawn(session, shared, conn.clone(), *i, asked);
                }
            }
            E::Withdraw(key) => {
                if let Some(request) = session.untrack(&key) {
                    shared.calls.cancel(&request);
                }
            }
            E::Accepted {
                turn_id,
                message_id,
            } => {
                if let Some(responder) = session.accept_prompt(&turn_id) {
                    let answer = v2::types::PromptResponse { message_id };
                    responder.respond(Ok(super::types::to_json(&answer)));
                }
            }
            E::Ended { turn_id, result } => session.finish_prompt_of(&turn_id, result),
            E::StopTurn(turn_id) => super::session::stop_turn(shared, &session.id, &turn_id),
            E::WindowEnd {
                session_removed: true,
            } => {
                stop(session, shared, Err(errors::unknown_session(&session.id)));
                return Flow::Stop;
            }
            E::WindowEnd { .. } => return Flow::EndWindow,
            E::Resync(kind) => {
                log::warn!(
                    "session {}: the host omitted a {kind} frame; catching up",
                    session.id
                );
                return if recover(session, shared, conn, None) {
                    Flow::EndWindow
                } else {
                    Flow::Stop
                };
            }
        }
    }
    Flow::Next
}
