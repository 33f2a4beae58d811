//! The session methods: `session/new`, `session/load`, `session/resume`, `session/list`,
//! `session/close` and `session/delete`. Each runs on a worker thread.

use super::agent::Ctx;
use super::auth;
use super::client_call;
use super::config_options::{self, Catalog, SessionConfig};
use super::errors::{self, MakaCode};
use super::projection::iso8601;
use super::read::{ForkSession, ListSessions, NewSession, OpenSession, SessionOptions};
use super::session::AcpSession;
use super::types::{
    to_json, AvailableCommand, Chunk, CommandInput, Empty, InterruptedTurnNotification,
    ListSessionsResponse, SessionInfo, SessionSetup, SessionUpdate,
};
use crate::host_api::client::ClientError;
use crate::host_api::ops::{self, ModelCatalog, OpenSnapshot, RemoveOutcome, SessionRef};
use crate::host_api::random_hex;
use crate::host_api::wire::{Configuration, ErrorCode, Session, Workspace};
use crate::jsonrpc::{Responder, ResponseError};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn new(ctx: &Ctx, params: NewSession, responder: Responder) {
    answer_setup(ctx, create(ctx, params), responder);
}

/// A new session's result, then (after it) its commands.
fn answer_setup(
    ctx: &Ctx,
    made: Result<(SessionSetup, Arc<AcpSession>), ResponseError>,
    responder: Responder,
) {
    match made {
        Ok((result, session)) => {
            responder.respond(Ok(super::v2::lifecycle::setup_answer(ctx, &result)));
            send_commands(ctx, &session);
        }
        Err(e) => responder.respond(Err(e)),
    }
}

/// A session the host just made for this client (new or forked): live here from now on.
fn attach_new(
    ctx: &Ctx,
    conn: &super::host_link::Connected,
    record: &Session,
    models: Option<&ModelCatalog>,
) -> Result<(SessionSetup, Arc<AcpSession>), ResponseError> {
    let id = record.id.clone();
    ctx.register_services(conn, &id)?;
    let session = AcpSession::for_connection(&ctx.shared, &id, ctx.shows())?;
    let mut result = attach_config(ctx, &session, record, models);
    result.session_id = Some(id.clone());
    ctx.shared.hold_session(&session);
    Ok((result, session))
}

/// A session the host made for this client by another route (Maka's `branch/create`, whose
/// target the client owns at once): live here from now on.
pub fn attach_made(
    ctx: &Ctx,
    conn: &super::host_link::Connected,
    record: &Session,
) -> Result<(), ResponseError> {
    let models = auth::check_host(&ctx.shared.link, conn)?;
    attach_new(ctx, conn, record, models.as_ref()).map(|_| ())
}

fn create(ctx: &Ctx, p: NewSession) -> Result<(SessionSetup, Arc<AcpSession>), ResponseError> {
    auth::refuse_early(&ctx.shared.link)?;
    ctx.shared.may_open_session()?;
    let conn = ctx.host()?;
    let models = auth::check_host(&ctx.shared.link, &conn)?;
    // Initial option values, checked against the options a session here starts with: a bad
    // one is the `-32602` naming it, and nothing is created.
    let configuration = match p.config_options.as_slice() {
        [] => None,
        initial => {
            let catalog = starting_catalog(&conn, models.as_ref(), &p.cwd);
            Some(config_options::initial_patch(
                initial,
                &Configuration::default(),
                &catalog,
                ctx.shared.config_view(),
            )?)
        }
    };
    let id = format!("sess_{}", random_hex(12));
    let record = conn.request::<ops::SessionCreate>(&ops::CreateInput {
        session_id: id.clone(),
        workspace: Workspace::HostPath {
            path: p.cwd.clone(),
        },
        additional_directories: p.additional_directories,
        name: None,
        labels: vec![],
        configuration,
        mcp_servers: p.mcp_servers,
        system_prompt: p.system_prompt,
    })?;
    attach_new(ctx, &conn, &record, models.as_ref())
}

/// The options a session in `cwd` would be shown against: the host's models, and whether the
/// folder declares subagents.
fn starting_catalog(
    conn: &super::host_link::Connected,
    models: Option<&ModelCatalog>,
    cwd: &str,
) -> Catalog {
    let mut catalog = models.map(Catalog::from_models_list).unwrap_or_default();
    let input = ops::SubagentsQuery {
        session_id: None,
        cwd: Some(cwd.to_string()),
    };
    catalog.subagents = conn
        .request::<ops::SubagentsList>(&input)
        .is_ok_and(|l| !l.agents.is_empty());
    catalog
}

/// `session/options` (unstable): the options and modes `session/new` in `cwd` would answer
/// with, or, with a `sessionId`, what `session/load` of it would — before anything exists.
pub fn options(ctx: &Ctx, p: SessionOptions) -> Result<Value, ResponseError> {
    let conn = ctx.host()?;
    let view = ctx.shared.config_view();
    let models = conn.request::<ops::ModelsList>(&ops::Empty {})?;
    let configuration = match &p.session_id {
        None => Configuration::default(),
        Some(id) => {
            let input = SessionRef {
                session_id: id.clone(),
            };
            let record = conn
                .request::<ops::SessionGet>(&input)?
                .session
                .ok_or_else(|| errors::unknown_session(id))?;
            if record.workspace.path() != p.cwd {
                return Err(ResponseError::invalid_params(format_args!(
                    "`cwd` ({}) is not this session's working directory ({})",
                    p.cwd,
                    record.workspace.path()
                )));
            }
            record.configuration
        }
    };
    let catalog = starting_catalog(&conn, Some(&models), &p.cwd);
    Ok(serde_json::json!({
        "configOptions": config_options::options(&configuration, &catalog, view),
        "modes": config_options::modes(&configuration),
    }))
}

/// `session/fork` (ACP unstable): a new session with the source's whole conversation (its
/// finished turns), attached here like `session/new`.
pub fn fork(ctx: &Ctx, p: ForkSession, responder: Responder) {
    answer_setup(ctx, fork_session(ctx, p), responder);
}

fn fork_session(
    ctx: &Ctx,
    p: ForkSession,
) -> Result<(SessionSetup, Arc<AcpSession>), ResponseError> {
    auth::refuse_early(&ctx.shared.link)?;
    ctx.shared.may_open_session()?;
    let conn = ctx.host()?;
    let models = auth::check_host(&ctx.shared.link, &conn)?;
    if !p.config_options.is_empty() {
        // Checked against the source's options before anything is created.
        let input = SessionRef {
            session_id: p.session_id.clone(),
        };
        let source = conn
            .request::<ops::SessionGet>(&input)?
            .session
            .ok_or_else(|| errors::unknown_session(&p.session_id))?;
        let catalog = starting_catalog(&conn, models.as_ref(), &p.cwd);
        config_options::initial_patch(
            &p.config_options,
            &source.configuration,
            &catalog,
            ctx.shared.config_view(),
        )?;
    }
    let id = format!("sess_{}", random_hex(12));
    let input = ops::BranchInput {
        source_session_id: p.session_id.clone(),
        target_session_id: id.clone(),
        through_turn_id: None,
        expected_source_revision: None,
        workspace: Some(Workspace::HostPath { path: p.cwd }),
        additional_directories: Some(p.additional_directories),
        mcp_servers: p.mcp_servers,
        system_prompt: p.system_prompt,
    };
    let record = match conn.call::<ops::BranchCreate>(&input) {
        Ok(ops::BranchOutcome::Committed { session }) => *session,
        // Only sent with an expected revision, which a fork does not give.
        Ok(ops::BranchOutcome::SourceRevisionConflict { .. }) => {
            return Err(MakaCode::OperationConflict
                .error("The session changed while it was being forked; fork it again"))
        }
        Err(ClientError::Host(h)) if h.code == ErrorCode::NotFound => {
            return Err(errors::unknown_session(&p.session_id))
        }
        Err(e) => return Err(crate::acp::errors::from_client(&e)),
    };
    let (mut result, session) = attach_new(ctx, &conn, &record, models.as_ref())?;
    if !p.config_options.is_empty() {
        match super::configure::apply_initial(ctx, &session, &p.config_options) {
            Ok(initial) => {
                result.config_options = Some(initial.options.clone());
                result.modes = Some(initial.modes.clone());
                // Nothing more is written; the answer carries what was.
                initial.done(&session);
            }
            Err(e) => {
                // Checked before the branch, refused after it (the host changed meanwhile):
                // the fork is undone, not left half made.
                if let Err(d) = delete(ctx, &record.id) {
                    log::warn!("cannot undo fork {}: {}", record.id, d.message);
                }
                return Err(e);
            }
        }
    }
    Ok((result, session))
}

/// Records the model catalog and the session's configuration, and returns the
/// `configOptions` + `modes` part of a new/load/resume result.
fn attach_config(
    ctx: &Ctx,
    session: &AcpSession,
    record: &Session,
    models: Option<&ModelCatalog>,
) -> SessionSetup {
    if let Some(m) = models {
        let catalog = Catalog::from_models_list(m);
        session.configure(|c| (vec![], c.set_catalog(catalog)));
    }
    // Subagents make the orchestration option meaningful (a host without them: no option).
    let declared = ctx.host().ok().and_then(|conn| {
        let input = ops::SubagentsQuery {
            session_id: Some(record.id.clone()),
            cwd: None,
        };
        conn.call::<ops::SubagentsList>(&input).ok()
    });
    let declared = declared.is_some_and(|l| !l.agents.is_empty());
    let config = SessionConfig::from_session(record);
    let mode = config.configuration.permission_mode;
    let modes = config_options::modes(&config.configuration);
    let options = session.configure(|c| {
        c.set_subagents(declared);
        (vec![], c.read(Some(config), Some(mode)))
    });
    SessionSetup {
        session_id: None,
        config_options: options,
        modes: Some(modes),
    }
}

/// `available_commands_update` (after the new/load/resume response): the host's commands.
fn send_commands(ctx: &Ctx, session: &AcpSession) {
    let input = ops::OptionalSessionRef {
        session_id: Some(session.id.clone()),
    };
    let listed = ctx
        .host()
        .and_then(|conn| conn.request::<ops::SkillsList>(&input));
    let skills = match listed {
        Ok(v) => v,
        Err(e) => {
            log::warn!("skills.list for {}: {}", session.id, e.message);
            return;
        }
    };
    let commands: Vec<AvailableCommand> = skills
        .skills
        .into_iter()
        .map(|s| AvailableCommand {
            name: s.name,
            description: s.description,
            input: s.input_hint.map(|hint| CommandInput { hint }),
        })
        .collect();
    session.emit(
        |_| {
            let update = SessionUpdate::AvailableCommandsUpdate {
                available_commands: commands.clone(),
            };
            (vec![update], ())
        },
        |_| (vec![super::v2::projection::commands_update(&commands)], ()),
    );
}

/// `session/load` (`replay`) and `session/resume`.
pub fn open(ctx: &Ctx, params: OpenSession, responder: Responder) {
    let replay = params.replay;
    let initial = params.config_options.clone();
    let attached = attach(ctx, params, &responder, replay).and_then(
        |(session, mut result, snapshot, conn)| {
            let applied = match initial.as_slice() {
                [] => None,
                initial => {
                    let values = super::configure::apply_initial(ctx, &session, initial)?;
                    result.config_options = Some(values.options.clone());
                    result.modes = Some(values.modes.clone());
                    Some(values)
                }
            };
            Ok((session, result, snapshot, conn, applied))
        },
    );
    match attached {
        Ok((session, result, snapshot, conn, applied)) => {
            // Loading again replaces this connection's previous view of the session.
            let old = ctx.shared.hold_session(&session);
            if let Some(old) = old {
                old.close();
            }
            responder.respond(Ok(super::v2::lifecycle::setup_answer(ctx, &result)));
            if let Some(values) = applied {
                values.done(&session);
            }
            // Only after the response: the commands, then live frames and dialogs of a turn
            // already running.
            send_commands(ctx, &session);
            if snapshot.active_turn.is_some() {
                super::follow::ensure_reader(&session, &ctx.shared, &conn, None);
            } else {
                offer_resume(ctx, &session, &conn);
            }
            // The goal as it stands (the goal extension's snapshot), and a live goal's turns as
            // they come.
            if let Some(goal) = &snapshot.goal {
                if goal.status != "cancelled" {
                    session.emit(|view| (view.goal(goal), ()), |view| (view.goal(goal), ()));
                }
                super::follow::follow_goal(&session, &ctx.shared, &conn, goal);
            }
            // Dialogs and editor calls still waiting (the same start as a reader's catch-up).
            super::follow::start_pending(&session, &ctx.shared, &conn, &snapshot);
        }
        Err(e) => responder.respond(Err(e)),
    }
}

/// After a load or resume of a session whose last run a host crash interrupted: tells the
/// client (`_maka/turn_state`, for programs) and the person (an agent message) that the turn
/// can be continued with `_maka/turn/resume`.
fn offer_resume(ctx: &Ctx, session: &AcpSession, conn: &super::host_link::Connected) {
    let query = SessionRef {
        session_id: session.id.clone(),
    };
    let Ok(ops::ResumeDisposition::Ready { source_turn_id, .. }) =
        conn.call::<ops::ResumeQuery>(&query)
    else {
        return; // nothing interrupted (or the host cannot say): nothing to offer
    };
    if ctx.shared.v1().is_some() {
        ctx.shared.outbox.notify(
            &session.id,
            "_maka/turn_state",
            &InterruptedTurnNotification {
                session_id: session.id.clone(),
                turn_id: source_turn_id.clone(),
                state: "interrupted",
                disposition: "ready",
            },
        );
    }
    let text = "The last turn was interrupted when the agent's runtime stopped, before it finished. \
                It can be continued where it stopped (your client's \"resume\", `_maka/turn/resume`), \
                or you can send a new prompt.\n";
    let message_id = format!("m_interrupted_{source_turn_id}");
    session.emit(
        |_| {
            let chunk = Chunk::text(message_id.clone(), text);
            (vec![SessionUpdate::AgentMessageChunk(chunk)], ())
        },
        // v2 has no `_maka/turn/resume`: it is told what it can do.
        |_| {
            let text = "The last turn was interrupted when the agent's runtime stopped, before it finished. Send a new prompt to go on.\n";
            (
                vec![super::v2::projection::agent_text(&message_id, text)],
                (),
            )
        },
    );
}

type Attached = (
    Arc<AcpSession>,
    SessionSetup,
    OpenSnapshot,
    super::host_link::Connected,
);

fn attach(
    ctx: &Ctx,
    p: OpenSession,
    responder: &Responder,
    replay: bool,
) -> Result<Attached, ResponseError> {
    let id = p.session_id;
    match ctx.session(&id) {
        Some(s) if s.prompt_turn().is_some() => {
            return Err(MakaCode::SessionBusy.error(format!(
                "Session {id} has a prompt running on this connection; cancel it (session/cancel) before opening the session again"
            )));
        }
        Some(_) => {} // loaded again: it is held already
        None => ctx.shared.may_open_session()?,
    }
    let conn = ctx.host()?;
    let input = SessionRef {
        session_id: id.clone(),
    };
    let record = conn
        .request::<ops::SessionGet>(&input)?
        .session
        .ok_or_else(|| errors::unknown_session(&id))?;
    let path = record.workspace.path();
    if path != p.cwd {
        return Err(ResponseError::invalid_params(format_args!(
            "`cwd` ({}) is not this session's working directory ({path})",
            p.cwd
        )));
    }
    if !p.config_options.is_empty() {
        // Checked before anything is opened or replayed (and applied after, by `open`).
        let models = conn.request::<ops::ModelsList>(&ops::Empty {})?;
        let catalog = starting_catalog(&conn, Some(&models), &p.cwd);
        config_options::initial_patch(
            &p.config_options,
            &record.configuration,
            &catalog,
            ctx.shared.config_view(),
        )?;
    }
    let open_input = ops::OpenInput {
        session_id: id.clone(),
        mcp_servers: p.mcp_servers,
        system_prompt: p.system_prompt,
    };
    let open = conn.request::<ops::SessionOpen>(&open_input)?;
    ctx.register_services(&conn, &id)?;
    let session = AcpSession::for_connection(&ctx.shared, &id, ctx.shows())?;
    let models = conn.request::<ops::ModelsList>(&ops::Empty {})?;
    let result = attach_config(ctx, &session, &open.session, Some(&models));
    let active_turn = open.active_turn.as_ref().map(|t| t.turn_id.clone());
    session.set_position(open.seq, &conn.epoch, active_turn.clone());
    // Replayed (load) or not wanted (resume): a later catch-up starts after this point.
    let through = open.transcript.through_message_seq;
    session.saw_through(through);
    if replay {
        // A `$/cancel_request` for this load has already been answered; stop working.
        let cancel = responder.cancel_flag();
        let done = super::view::replay_transcript(
            &session,
            &ctx.shared,
            &conn,
            0,
            through,
            false,
            &|| cancel.is_cancelled(),
        )
        .map_err(|e| crate::acp::errors::from_client(&e))?;
        if !done {
            return Err(ResponseError::cancelled());
        }
        // Tools of an interrupted past turn never got a result: show them settled.
        if active_turn.is_none() {
            super::view::settle_tools(
                &session,
                &ctx.shared,
                "This tool did not finish (the turn was interrupted).",
            );
        }
    }
    super::view::show_in_flight(&session, &ctx.shared, &open);
    // A v2 client is told the session's state before the answer, replayed or not.
    let running = open.active_turn.is_some();
    let pending = &open.pending_interactions;
    session.emit(
        |_| (vec![], ()),
        |view| (view.reconcile(running, pending, true), ()),
    );
    Ok((session, result, open, conn))
}

pub fn list(ctx: &Ctx, p: ListSessions) -> Result<Value, ResponseError> {
    let conn = ctx.host()?;
    // Sessions never prompted have nothing to resume: not listed (pickers would fill up with
    // empty entries). They can still be loaded by id.
    let input = ops::ListInput {
        cursor: p.cursor.clone(),
        limit: Some(50),
        filter: ops::ListFilter {
            cwd: p.cwd,
            include_archived: false,
            non_empty: true,
        },
    };
    let page = match conn.call::<ops::SessionList>(&input) {
        Ok(page) => page,
        // The only input the client chose is the cursor.
        Err(ClientError::Host(h)) if h.code == ErrorCode::InvalidRequest && p.cursor.is_some() => {
            return Err(ResponseError::invalid_params(
                "`cursor` is not a cursor this agent issued",
            ))
        }
        Err(e) => return Err(crate::acp::errors::from_client(&e)),
    };
    let sessions = page
        .sessions
        .into_iter()
        .map(|s| SessionInfo {
            cwd: s.workspace.path().to_string(),
            session_id: s.id,
            // An unknown title is omitted, never null (CodeCompanion's picker crashes on null).
            title: s.name,
            updated_at: iso8601(s.last_used_at),
            additional_directories: s.additional_directories,
            meta: s.lineage.map(|l| {
                serde_json::json!({"maka": {"source": {
                    "sessionId": l.parent_session_id,
                    "throughTurnId": l.branch_of_turn_id,
                }}})
            }),
        })
        .collect();
    Ok(to_json(&ListSessionsResponse {
        sessions,
        next_cursor: page.next_cursor,
    }))
}

/// Cancels like `session/cancel`, waits (bounded) for the prompt to be answered, then drops
/// the session from this connection. Durable state is untouched.
fn detach(ctx: &Ctx, session: &Arc<AcpSession>) {
    super::session::cancel(session, &ctx.shared);
    session.wait_prompt_done(Duration::from_secs(10));
    client_call::release_all(session, &ctx.shared);
    session.close_and_withdraw(&ctx.shared);
    ctx.shared.drop_session(&session.id);
    // The host stops what it ran for this client (MCP servers); durable state stays.
    if let Ok(conn) = ctx.host() {
        let input = SessionRef {
            session_id: session.id.clone(),
        };
        if let Err(e) = conn.call::<ops::SessionRelease>(&input) {
            log::debug!("session.release {}: {e}", session.id);
        }
    }
}

pub fn close(ctx: &Ctx, id: &str) -> Result<Value, ResponseError> {
    let session = ctx.session(id).ok_or_else(|| errors::unknown_session(id))?;
    detach(ctx, &session);
    Ok(to_json(&Empty {}))
}

pub fn delete(ctx: &Ctx, id: &str) -> Result<Value, ResponseError> {
    if let Some(session) = ctx.session(id) {
        detach(ctx, &session);
    }
    let conn = ctx.host()?;
    let get = SessionRef {
        session_id: id.into(),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    for _ in 0..3 {
        // Unknown or already deleted: success, silently.
        let Some(record) = conn.request::<ops::SessionGet>(&get)?.session else {
            return Ok(to_json(&Empty {}));
        };
        if let Some(turn_id) = record.active_turn_id {
            // Another client's turn (ours was cancelled by detach): stop it, then retry.
            let stop = ops::TurnRef {
                session_id: id.into(),
                turn_id,
                run_id: None,
            };
            conn.request::<ops::TurnStop>(&stop)?;
            while Instant::now() < deadline {
                let s = conn.request::<ops::SessionGet>(&get)?;
                if s.session.is_none_or(|s| s.active_turn_id.is_none()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        }
        let remove = ops::RemoveInput {
            session_id: id.into(),
            expected_revision: record.revision,
        };
        match conn.call::<ops::SessionRemove>(&remove) {
            Ok(RemoveOutcome::Removed) => return Ok(to_json(&Empty {})),
            Ok(RemoveOutcome::RevisionConflict { .. }) => continue, // re-read and retry
            // Removed by someone else meanwhile: what was asked for.
            Err(ClientError::Host(h)) if h.code == ErrorCode::NotFound => {
                return Ok(to_json(&Empty {}))
            }
            Err(e) => return Err(crate::acp::errors::from_client(&e)),
        }
    }
    Err(MakaCode::OperationConflict.error(format!(
        "Session {id} kept changing while being deleted; try again"
    )))
}
