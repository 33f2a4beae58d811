//! `session/prompt`: registered on the dispatcher thread (so a `session/cancel` that follows
//! always finds it), then started on a worker — or, while another prompt of the session runs,
//! queued behind it and started when that one is answered. The session's reader answers it
//! when the turn ends.

use super::agent::Ctx;
use super::errors;
use super::errors::MakaCode;
use super::host_link::Connected;
use super::projection::config::ConfigEcho;
use super::prompt;
use super::read::Prompt;
use super::session::{AcpSession, Admission, PromptAnswer, PROMPT_QUEUE};
use super::types::{PromptResponse, StopReason};
use crate::host_api::ops::{self, OpenInput, ResumeDisposition, StartOutcome, TurnStartInput};
use crate::host_api::random_hex;
use crate::host_api::wire::MessageContent;
use crate::jsonrpc::Responder;
use crate::jsonrpc::ResponseError;
use std::sync::Arc;

/// A registered prompt, ready to start.
pub struct Registered {
    session: Arc<AcpSession>,
    turn_id: String,
    kind: TurnKind,
}

/// What a registered turn runs.
pub enum TurnKind {
    /// `session/prompt`'s content.
    Prompt(MessageContent),
    /// The run a host crash interrupted (`_maka/turn/resume`).
    Resume,
    /// The approved plan (`_maka/plan/start`).
    Plan,
}

/// `_maka/turn/resume` and `_maka/plan/start`: registered like a prompt (a `session/cancel`
/// finds it), answered like one when the turn ends.
pub fn register_generated(
    ctx: &Ctx,
    session_id: &str,
    kind: TurnKind,
    responder: Responder,
) -> Option<Registered> {
    let Some(session) = ctx.session(session_id) else {
        responder.respond(Err(errors::unknown_session(session_id)));
        return None;
    };
    let turn_id = format!("t_{}", random_hex(8));
    if let Err(responder) = session.begin_prompt(&turn_id, responder) {
        responder.respond(Err(errors::session_busy(session_id)));
        return None;
    }
    Some(Registered {
        session,
        turn_id,
        kind,
    })
}

/// Validates a prompt and makes it the session's pending prompt, or queues it behind the
/// pending one (started when that one is answered; past [`PROMPT_QUEUE`] waiting, busy).
/// Answers the request itself and returns `None` when the prompt cannot run, or when it was
/// queued (its start is then the session's to make).
pub fn register(ctx: &Ctx, mut p: Prompt, responder: Responder) -> Option<Registered> {
    let Some(session) = ctx.session(&p.session_id) else {
        responder.respond(Err(errors::unknown_session(&p.session_id)));
        return None;
    };
    // v2 echoes the prompt as the client sent it (read before the host's copy is made of it).
    let echo = (ctx.shared.version() == Some(super::out::Version::V2)).then(|| p.blocks.clone());
    let content = match prompt::to_message(&mut p.blocks) {
        Ok(c) => c,
        Err(e) => {
            responder.respond(Err(e));
            return None;
        }
    };
    let turn_id = format!("t_{}", random_hex(8));
    let mut registered = Some(Registered {
        session: Arc::clone(&session),
        turn_id: turn_id.clone(),
        kind: TurnKind::Prompt(content),
    });
    // Queued: the registration moves into the start the session makes when its turn comes.
    let queued = || -> Box<dyn FnOnce() + Send> {
        let (ctx, r) = (ctx.clone(), registered.take());
        Box::new(move || {
            if let Some(r) = r {
                start(&ctx, r)
            }
        })
    };
    let answer = PromptAnswer::for_connection(&ctx.shared, responder, || echo.unwrap_or_default());
    match session.admit_prompt(&turn_id, answer, queued) {
        Ok(Admission::Now) => registered,
        Ok(Admission::Queued(place)) => {
            log::debug!(
                "session {}: prompt {turn_id} waits behind the running one ({place} in line)",
                session.id
            );
            None
        }
        Err(answer) => {
            answer.refuse(errors::prompt_queue_full(&p.session_id, PROMPT_QUEUE));
            None
        }
    }
}

/// Starts the registered prompt's turn on the host; the session's reader answers the prompt
/// when the turn ends.
pub fn start(ctx: &Ctx, r: Registered) {
    let Registered {
        session,
        turn_id,
        kind,
    } = r;
    if not_to_start(&session) {
        return;
    }
    let id = session.id.clone();
    let conn = match ctx.host() {
        Ok(c) => c,
        Err(e) => return session.finish_prompt(Err(e)),
    };
    let stream = match prepare(ctx, &session, &conn) {
        Ok(s) => s,
        Err(e) => return session.finish_prompt(Err(e)),
    };
    if !session.start_sending(&turn_id) {
        // Cancelled or withdrawn while its stream opened (which closes here); not another
        // prompt's answer, if this one was answered meanwhile.
        session.finish_prompt_of(&turn_id, Ok(PromptResponse::new(StopReason::Cancelled)));
        return;
    }
    // Ok(true): the host queued it behind the session's active turn (another client's, a
    // goal's); it starts when that one ends.
    let started = match kind {
        TurnKind::Prompt(content) => {
            let input = TurnStartInput {
                session_id: id,
                turn_id: turn_id.clone(),
                content,
                max_steps: None,
                queue: true,
            };
            conn.request::<ops::TurnStart>(&input)
                .map(|o| matches!(o, StartOutcome::Queued { .. }))
        }
        TurnKind::Resume => resume(&conn, &id, &turn_id).map(|()| false),
        TurnKind::Plan => plan(&conn, &id, &turn_id).map(|()| false),
    };
    let queued_on_host = match started {
        Ok(q) => q,
        Err(e) => return session.finish_prompt(Err(e)),
    };
    if queued_on_host {
        log::info!(
            "session {}: prompt {turn_id} waits in the host's queue behind the session's running turn",
            session.id
        );
    }
    if session.prompt_started(&turn_id, queued_on_host) {
        // session/cancel (or, queued, a withdrawal) arrived while turn.start was in flight.
        if queued_on_host {
            // Taken out of the host's queue by its stop, with no frame: answered here — unless
            // the host started it meanwhile.
            super::session::stop_queued_turn(&ctx.shared, &session, &turn_id);
        } else {
            super::session::stop_turn(&ctx.shared, &session.id, &turn_id);
        }
    }
    super::follow::ensure_reader(&session, &ctx.shared, &conn, stream);
}

/// A turn no prompt waits for (`_session/steering` on an idle session): started and followed
/// like a prompt's turn, its updates shown as they come; its end is told as
/// `_maka/turn_state`, as another client's turn is.
pub fn start_unprompted(
    ctx: &Ctx,
    session: &Arc<AcpSession>,
    content: MessageContent,
) -> Result<(), ResponseError> {
    let turn_id = format!("t_{}", random_hex(8));
    let input = TurnStartInput {
        session_id: session.id.clone(),
        turn_id: turn_id.clone(),
        content,
        max_steps: None,
        queue: false,
    };
    start_followed(ctx, session, &turn_id, |conn| {
        conn.request::<ops::TurnStart>(&input)
    })
    .map(|_| ())
}

/// Starts turn `turn_id` with `start` (a host operation) and follows it like a prompt's turn
/// that no prompt waits for: for requests answered at admission (Maka's `_maka/turn/resume`,
/// `_maka/plan/turn/start`) and `start_unprompted`.
pub fn start_followed<T>(
    ctx: &Ctx,
    session: &Arc<AcpSession>,
    turn_id: &str,
    start: impl FnOnce(&Connected) -> Result<T, ResponseError>,
) -> Result<T, ResponseError> {
    let conn = ctx.host()?;
    let stream = prepare(ctx, session, &conn)?;
    // Followed until it ends, from before it starts.
    session.expect_turn(turn_id, true);
    match start(&conn) {
        Ok(t) => {
            super::follow::ensure_reader(session, &ctx.shared, &conn, stream);
            Ok(t)
        }
        Err(e) => {
            session.expect_turn(turn_id, false);
            Err(e)
        }
    }
}

/// Puts the session on this host epoch (a snapshot barrier the first time) and opens the
/// stream its turn will be followed on: a turn nobody can follow is never started. `None`
/// when a reader already follows the session.
fn prepare(
    ctx: &Ctx,
    session: &Arc<AcpSession>,
    conn: &Connected,
) -> Result<Option<crate::host_api::client::EventStream>, ResponseError> {
    let id = session.id.clone();
    if session.position().epoch.as_deref() != Some(&conn.epoch) {
        // First prompt on this host epoch (or after a host restart): take a snapshot barrier.
        let input = OpenInput {
            session_id: id.clone(),
            mcp_servers: None,
            system_prompt: None,
        };
        match conn.request::<ops::SessionOpen>(&input) {
            Ok(open) => {
                let config = &open.session;
                let changed =
                    |c: &mut ConfigEcho| (c.changed(config.revision, &config.configuration), ());
                session.configure(changed);
                session.set_position(open.seq, &conn.epoch, None);
                session.saw_through(open.transcript.through_message_seq);
            }
            Err(e) => return Err(e),
        }
        // A new host epoch has forgotten what this client can do.
        ctx.register_services(conn, &id)?;
    }
    super::follow::open_stream(session, conn)
}

/// A prompt cancelled before its turn started (the client's `session/cancel`, its closing the
/// session, the end of stdin) is answered `cancelled` here and its turn never starts: at
/// stdin's end a thousand queued starts cost a check each, not a start and a stop.
fn not_to_start(session: &AcpSession) -> bool {
    if !session.is_cancelling() {
        return false;
    }
    session.finish_prompt(Ok(PromptResponse::new(StopReason::Cancelled)));
    true
}

/// Carries out the approved plan as turn `turn_id`; a plan not approved is an error saying so.
fn plan(conn: &Connected, session_id: &str, turn_id: &str) -> Result<(), ResponseError> {
    let input = ops::TurnRef {
        session_id: session_id.into(),
        turn_id: turn_id.into(),
        run_id: None,
    };
    match conn.call::<ops::PlanTurnStart>(&input) {
        Ok(_) => Ok(()),
        Err(crate::host_api::client::ClientError::Host(h))
            if h.code == crate::host_api::wire::ErrorCode::OperationConflict =>
        {
            Err(MakaCode::PlanNotApproved.error_with(
                format!(
                    "Session {session_id} has no approved plan to carry out: {}.",
                    h.message
                ),
                h.details.clone().unwrap_or_default(),
            ))
        }
        Err(e) => Err(crate::acp::errors::from_client(&e)),
    }
}

/// Continues the interrupted run as turn `turn_id`: the host checks it is still the latest
/// interrupted run (`turn.resume.query`, then `turn.resume.start` with its high-water mark), so
/// a turn is never run twice. A run that must not be resumed is an error naming why.
fn resume(conn: &Connected, session_id: &str, turn_id: &str) -> Result<(), ResponseError> {
    let query = ops::SessionRef {
        session_id: session_id.into(),
    };
    let parked = |reason: String| {
        MakaCode::ResumeParked.error_with(
            format!("There is no interrupted turn to resume in session {session_id} ({reason})."),
            serde_json::json!({"reason": reason}),
        )
    };
    let (source_run_id, source_high_water) = match conn.request::<ops::ResumeQuery>(&query)? {
        ResumeDisposition::Ready {
            source_run_id,
            source_high_water,
            ..
        } => (source_run_id, source_high_water),
        ResumeDisposition::Parked { reason } => return Err(parked(reason)),
    };
    let input = ops::ResumeStartInput {
        session_id: session_id.into(),
        turn_id: turn_id.into(),
        source_run_id,
        source_high_water,
    };
    match conn.request::<ops::ResumeStart>(&input)? {
        StartOutcome::Started { .. } => Ok(()),
        StartOutcome::Parked { reason } => Err(parked(reason)),
        // Never: a resume is not queued.
        StartOutcome::Queued { .. } => Err(parked("session_busy".into())),
    }
}
