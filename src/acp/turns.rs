//! `session/prompt`: registered on the dispatcher thread (so a `session/cancel` that follows
//! always finds it), then started on a worker. The session's reader answers it when the turn
//! ends.

use super::agent::Ctx;
use super::errors;
use super::prompt;
use super::requests::Prompt;
use super::session::AcpSession;
use crate::host_api::ops::{self, OpenInput, TurnStartInput};
use crate::host_api::random_hex;
use crate::host_api::wire::MessageContent;
use crate::jsonrpc::Responder;
use std::sync::Arc;

/// A registered prompt, ready to start.
pub struct Registered {
    session: Arc<AcpSession>,
    turn_id: String,
    content: MessageContent,
}

/// Validates a prompt and makes it the session's pending prompt. Answers the request itself
/// and returns `None` when the prompt cannot run.
pub fn register(ctx: &Ctx, p: Prompt, responder: Responder) -> Option<Registered> {
    let Some(session) = ctx.session(&p.session_id) else {
        responder.respond(Err(errors::unknown_session(&p.session_id)));
        return None;
    };
    let content = match prompt::to_message(&p.blocks) {
        Ok(c) => c,
        Err(e) => {
            responder.respond(Err(e));
            return None;
        }
    };
    let turn_id = format!("t_{}", random_hex(8));
    if let Err(responder) = session.begin_prompt(&turn_id, responder) {
        responder.respond(Err(errors::session_busy(&p.session_id)));
        return None;
    }
    Some(Registered {
        session,
        turn_id,
        content,
    })
}

/// Starts the registered prompt's turn on the host; the session's reader answers the prompt
/// when the turn ends.
pub fn start(ctx: &Ctx, r: Registered) {
    let Registered {
        session,
        turn_id,
        content,
    } = r;
    let id = session.id.clone();
    let conn = match ctx.host() {
        Ok(c) => c,
        Err(e) => return session.fail_prompt(e),
    };
    if !session.positioned_for(&conn.epoch) {
        // First prompt on this host epoch (or after a host restart): take a snapshot barrier.
        let input = OpenInput {
            session_id: id.clone(),
            mcp_servers: None,
        };
        match ctx.call::<ops::SessionOpen>(&conn, &input) {
            Ok(open) => {
                session.observe_snapshot(&ctx.shared, &open);
                session.set_position(open.seq, &conn.epoch, None);
                session.saw_through(open.transcript.through_message_seq);
            }
            Err(e) => return session.fail_prompt(e),
        }
        // A new host epoch has forgotten what this client can do.
        if let Err(e) = ctx.register_services(&conn, &id) {
            return session.fail_prompt(e);
        }
    }
    // Followed before it runs: a turn nobody can follow is never started.
    let stream = match session.open_stream(&conn) {
        Ok(s) => s,
        Err(e) => return session.fail_prompt(e),
    };
    let input = TurnStartInput {
        session_id: id,
        turn_id: turn_id.clone(),
        content,
        max_steps: None,
    };
    if let Err(e) = ctx.call::<ops::TurnStart>(&conn, &input) {
        return session.fail_prompt(e);
    }
    if session.prompt_started() {
        // session/cancel arrived while turn.start was in flight.
        session.stop_turn(&ctx.shared, &turn_id);
    }
    session.ensure_reader(&ctx.shared, &conn, stream);
}
