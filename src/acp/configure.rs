//! The methods that change settings: `session/set_config_option`, `session/set_mode`,
//! `authenticate` and `logout`. Each runs on a worker thread.

use super::agent::Ctx;
use super::auth;
use super::config_options::{self, CasStep, Catalog, SessionConfig};
use super::errors::{self, MakaCode};
use super::params::Params;
use super::projection::config::Reply;
use super::read;
use super::session::AcpSession;
use super::types::{to_json, ConfigOption, ConfigOptionsResponse, Empty};
use crate::host_api::ops::{self, CasOutcome, ConfigUpdateInput, SessionRef};
use crate::host_api::wire::{Configuration, ConfigurationPatch, PermissionMode};
use crate::jsonrpc::{Responder, ResponseError};
use serde_json::Value;
use std::sync::Arc;

fn attached(ctx: &Ctx, id: &str) -> Result<Arc<AcpSession>, ResponseError> {
    ctx.session(id).ok_or_else(|| errors::unknown_session(id))
}

/// What a configuration change did, for the response and the notifications after it.
struct Changed {
    options: Vec<ConfigOption>,
    new_mode: PermissionMode,
}

/// Validates (`make_patch`, before any host call), writes under revision CAS with bounded
/// retries, and records the result. Changes the host announces meanwhile wait until the
/// caller ends the write ([`super::projection::config::ConfigEcho::end_write`]) after its response.
fn change_config(
    ctx: &Ctx,
    session: &AcpSession,
    make_patch: impl FnOnce(&Configuration, &Catalog) -> Result<ConfigurationPatch, ResponseError>,
) -> Result<Changed, ResponseError> {
    let (known, catalog) = session.configure(|c| (vec![], c.known()));
    let known = known.ok_or_else(|| {
        MakaCode::Internal.error("the session's configuration is unknown; load the session again")
    })?;
    let patch = make_patch(&known.configuration, &catalog)?;
    let conn = ctx.host()?;
    let id = &session.id;
    let read = |config: SessionConfig| {
        let options = session.configure(|c| (vec![], c.read(Some(config), None)));
        options.unwrap_or_default()
    };
    let committed = config_options::with_cas_retry(
        known.revision,
        |revision| {
            let input = ConfigUpdateInput {
                session_id: id.clone(),
                expected_revision: revision,
                patch: patch.clone(),
            };
            match conn.request::<ops::ConfigurationUpdate>(&input)? {
                CasOutcome::Committed { session } => Ok(CasStep::Committed(*session)),
                CasOutcome::RevisionConflict { .. } => {
                    log::info!(
                        "session {id}: configuration revision conflict at {revision}; re-reading"
                    );
                    Ok(CasStep::Conflict)
                }
            }
        },
        || {
            let get = SessionRef {
                session_id: id.clone(),
            };
            let fresh = conn
                .request::<ops::SessionGet>(&get)?
                .session
                .ok_or_else(|| errors::unknown_session(id))?;
            // Whatever the other writer changed shows in this change's response.
            read(SessionConfig::from_session(&fresh));
            Ok(fresh.revision)
        },
        || {
            MakaCode::RevisionConflict.error(format!(
                "Session {id}'s configuration kept changing ({} conflicting writes); try again",
                config_options::CAS_RETRIES + 1
            ))
        },
    )?;
    let fresh = SessionConfig::from_session(&committed);
    let new_mode = fresh.configuration.permission_mode;
    let options = read(fresh);
    Ok(Changed { options, new_mode })
}

/// Initial option values on `session/load|resume|fork` (`configOptions`, unstable), applied
/// as `session/set_config_option` applies one, before the response: returns the options and
/// the legacy modes the response carries (so nothing is announced again after it).
/// On success the write stays open: the caller ends it ([`InitialValues::done`]) once the
/// response is queued, so nothing is announced before it.
pub fn apply_initial(
    ctx: &Ctx,
    session: &AcpSession,
    initial: &[Value],
) -> Result<InitialValues, ResponseError> {
    let view = ctx.shared.config_view();
    begin_write(session);
    let changed = change_config(ctx, session, |c, catalog| {
        config_options::initial_patch(initial, c, catalog, view)
    });
    let changed = match changed {
        Ok(c) => c,
        Err(e) => {
            end_write(session, Reply::Failed);
            return Err(e);
        }
    };
    let (config, _) = session.configure(|c| (vec![], c.known()));
    let modes = match config {
        Some(c) => config_options::modes(&c.configuration),
        None => {
            end_write(session, Reply::Failed);
            return Err(MakaCode::Internal
                .error("the session's configuration is unknown; load the session again"));
        }
    };
    Ok(InitialValues {
        options: changed.options,
        modes,
        mode: changed.new_mode,
    })
}

/// What initial values made of a session, for its response.
pub struct InitialValues {
    pub options: Vec<ConfigOption>,
    pub modes: super::types::SessionModeState,
    mode: PermissionMode,
}

impl InitialValues {
    /// The response with these options and modes is queued: the write ends, announcing only
    /// what someone else changed meanwhile.
    pub fn done(&self, session: &AcpSession) {
        end_write(session, Reply::Options(Some(self.mode)));
    }
}

/// `session/set_config_option`, and the earlier unstable `session/set_model` as the `model`
/// option (`as_set_model`): checked against the offered options; `set_config_option` answers
/// with the options, `set_model` answers `{}` as that method did, and the option view follows
/// as an update.
pub fn set_config_option(ctx: &Ctx, p: read::ConfigOption, responder: Responder) {
    let read::ConfigOption {
        session_id,
        params,
        as_set_model,
    } = p;
    let params = &params;
    let session = match attached(ctx, &session_id) {
        Ok(s) => s,
        Err(e) => return responder.respond(Err(e)),
    };
    let view = ctx.shared.config_view();
    begin_write(&session);
    let changed = change_config(ctx, &session, |c, catalog| {
        let p = Params::of(params)?;
        config_options::patch_for(&p, c, catalog, view)
    });
    let reply = match changed {
        Ok(_) if as_set_model => {
            responder.respond(Ok(to_json(&Empty {})));
            Reply::Empty(None)
        }
        Ok(ch) => {
            responder.respond(Ok(super::v2::lifecycle::options_answer(
                ctx,
                ConfigOptionsResponse {
                    config_options: ch.options,
                },
            )));
            Reply::Options(None)
        }
        Err(e) => {
            responder.respond(Err(e));
            Reply::Failed
        }
    };
    // Then what the response did not carry: the options after `{}`, the legacy mode view
    // when the change moved the mode, and anything another writer changed meanwhile.
    end_write(&session, reply);
}

pub fn set_mode(ctx: &Ctx, p: read::SetMode, responder: Responder) {
    let (session_id, mode) = (&p.session_id, p.mode_id.as_str());
    let session = match attached(ctx, session_id) {
        Ok(s) => s,
        Err(e) => return responder.respond(Err(e)),
    };
    begin_write(&session);
    let reply = match change_config(ctx, &session, |_, _| config_options::mode_patch(mode)) {
        Ok(ch) => {
            responder.respond(Ok(to_json(&Empty {})));
            // The client set this mode itself; the option view follows.
            Reply::Empty(Some(ch.new_mode))
        }
        Err(e) => {
            responder.respond(Err(e));
            Reply::Failed
        }
    };
    end_write(&session, reply);
}

/// A configuration write of this client begins: changes seen meanwhile wait for its end.
fn begin_write(session: &AcpSession) {
    session.configure(|c| (vec![], c.begin_write()));
}

/// The write is over (its response, which told `reply`, is queued).
fn end_write(session: &AcpSession, reply: Reply) {
    session.configure(|c| (c.end_write(reply), ()));
}

pub fn authenticate(ctx: &Ctx, method: &str) -> Result<Value, ResponseError> {
    match method {
        auth::ENV_METHOD => {}
        auth::TERMINAL_METHOD => {
            return Err(ResponseError::invalid_params(
                "`login` is a terminal method; the client runs `maka-acp login` itself",
            ))
        }
        other => {
            return Err(ResponseError::invalid_params(format_args!(
                "`methodId` {other:?} is not an authentication method of this agent"
            )))
        }
    }
    // check_host re-reads the settings when they changed since the host started (a login in
    // another terminal).
    let conn = ctx.host()?;
    auth::check_host(&ctx.shared.link, &conn).map(|_| to_json(&Empty {}))
}

/// `logout`: the stored key is removed and a running host re-reads its providers.
pub fn logout(ctx: &Ctx) -> Result<Value, ResponseError> {
    let link = &ctx.shared.link;
    if !ctx.shared.can_log_out() {
        return Err(ResponseError::method_not_found("logout"));
    }
    match link.local().log_out() {
        Ok(removed) => log::info!(
            "logout: {}",
            if removed {
                "the stored key was removed"
            } else {
                "no stored key"
            }
        ),
        Err(e) => {
            return Err(MakaCode::Internal.error(format!("cannot update the config file: {e}")))
        }
    }
    auth::reload_host(link);
    Ok(to_json(&Empty {}))
}
