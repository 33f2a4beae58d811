//! What a session's client is shown outside the live stream, through the session's view
//! (`AcpSession::emit`): `session/load`'s replay and a reader's catch-up (one loop over the
//! durable transcript), what a snapshot says is in flight, a dialog found waiting, the tool
//! calls a turn left open. What each frame shows is decided in `projection/`.

use super::connection::Shared;
use super::host_link::Connected;
use super::projection::{self, Projector};
use super::session::AcpSession;
use super::types::SessionUpdate;
use crate::host_api::client::ClientError;
use crate::host_api::ops::{self, OpenSnapshot};
use crate::host_api::wire::FrameBody;
use std::time::Instant;

/// Projects frames and enqueues their updates. A turn this connection's prompt started is
/// not echoed back as a user message.
pub fn show(session: &AcpSession, shared: &Shared, frames: &[FrameBody]) {
    show_as(session, shared, frames, false)
}

/// As [`show`], for a catch-up ([`Projector::caught_up`]).
fn show_caught_up(session: &AcpSession, shared: &Shared, frames: &[FrameBody]) {
    show_as(session, shared, frames, true)
}

fn show_as(session: &AcpSession, _shared: &Shared, frames: &[FrameBody], catching_up: bool) {
    let now = Instant::now();
    let own = |frame: &FrameBody| {
        projection::facts(frame)
            .turn_started
            .filter(|t| session.prompt_turn().as_deref() == Some(*t))
            .map(str::to_string)
    };
    session.emit(
        |view| {
            let mut out = vec![];
            for frame in frames {
                if let Some(turn_id) = own(frame) {
                    view.mark_own_turn(&turn_id);
                }
                let project: fn(&mut Projector, &FrameBody, Instant) -> Vec<SessionUpdate> =
                    if catching_up {
                        Projector::caught_up
                    } else {
                        Projector::frame
                    };
                out.extend(project(view, frame, now));
            }
            (out, ())
        },
        // Content only: the state is the snapshot's, told after (`reconcile`).
        |view| {
            let mut out = vec![];
            for frame in frames {
                out.extend(view.replayed(frame, now));
            }
            (out, ())
        },
    )
}

/// A dialog found waiting (a catch-up): as a live one ([`Projector::dialog`]) — what is
/// asked, its child's state shown.
pub fn dialog(
    session: &AcpSession,
    _shared: &Shared,
    interaction: &crate::host_api::wire::Interaction,
) -> projection::dialog::Dialog {
    session.emit(
        |view| view.dialog(interaction),
        |view| view.dialog(interaction),
    )
}

/// Settles the tool calls still open (`failed`, saying `why`).
pub fn settle_tools(session: &AcpSession, _shared: &Shared, why: &str) {
    session.emit(
        |view| (view.close_open_tools(why), ()),
        |view| (view.end_unfinished(why, false), ()),
    );
}

// ---- replay and snapshots -------------------------------------------------------------

/// Shows the durable items after `after`, through `through` — `session/load`'s replay and a
/// reader's catch-up are this one loop — and records how far it got. `stop` is asked before
/// each page; `Ok(false)` when it said stop.
pub fn replay_transcript(
    session: &AcpSession,
    shared: &Shared,
    conn: &Connected,
    after: u64,
    through: u64,
    catching_up: bool,
    stop: &dyn Fn() -> bool,
) -> Result<bool, ClientError> {
    let mut from = after;
    while from < through {
        if stop() {
            return Ok(false);
        }
        let page = conn.call::<ops::TranscriptPage>(&ops::PageInput {
            session_id: session.id.clone(),
            direction: Some(ops::Direction::Newer),
            cursor: Some(format!("n{from}")),
            limit: Some(256),
            max_bytes: None,
            through_message_seq: Some(through),
        })?;
        let Some(last) = page.items.last().map(|i| i.message_seq) else {
            break;
        };
        let frames: Vec<FrameBody> = page
            .items
            .iter()
            .flat_map(projection::replay_frames)
            .collect();
        if catching_up {
            show_caught_up(session, shared, &frames);
        } else {
            show(session, shared, &frames);
        }
        session.saw_through(last);
        from = last;
        if page.next_cursor.is_none() {
            break;
        }
    }
    Ok(true)
}

/// Shows what a `session.open` snapshot says is in flight (streamed but not yet durable text,
/// running tools); what was shown already is not shown again.
pub fn show_in_flight(session: &AcpSession, shared: &Shared, open: &OpenSnapshot) {
    show(session, shared, &projection::snapshot_frames(open));
}
