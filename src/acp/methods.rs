//! Every method this agent serves, one line each: its name, how its params are read, where it
//! runs and what serves it. The dispatcher ([`super::agent`]) looks a request up here
//! ([`find`], by the connection's dialect); nothing else dispatches on a method name (other
//! code names one only in an error's text, or for a message it sends).
//! `agentCapabilities._meta.maka.methods` is this table's `_maka/` rows ([`maka_methods`]).
//!
//! Two tables, one handler per name in each dialect: [`METHODS`] is ours, and what both
//! dialects serve alike (ACP's methods, the names only Apache Maka's adapter has); on a
//! connection in Maka's dialect (`--acp`, or `serve`'s per-connection choice) [`MAKA_METHODS`]
//! gives the names both adapters use Maka's meaning instead. A request's params never choose.
//!
//! Where a method runs:
//! - [`Job::Initialize`]: on the dispatcher, at once (it decides what every later method may do);
//! - [`work`] / [`answer`] / [`forward`]: on the worker pool (they call the Runtime Host), so
//!   `session/cancel` is never stuck behind them; `forward` is a `_maka/` method that is one host
//!   operation whose answer is the method's;
//! - [`turn`]: registered on the dispatcher, in order with every other message (a
//!   `session/cancel` that follows always finds it), then started on a worker; the session's
//!   reader answers it after the turn's last update.
//!
//! Notifications ([`NOTIFICATIONS`]): `session/cancel`, and `$/cancel_request` of a request
//! in flight, answered by the JSON-RPC layer (`-32800`) but a prompt's: its session decides
//! ([`super::session::withdrawn`]).

use super::agent::Ctx;
use super::initialize::{self, Offer};
use super::maka_dialect::{self as md, Dialect};
use super::params::{ParamResult, Params};
use super::read;
use super::session;
use super::shared_names as names;
use super::turns::{self, Registered, TurnKind};
use super::types::to_json;
use super::{configure, lifecycle, maka};
use crate::host_api::ops::{self, Operation};
use crate::jsonrpc::{Responder, ResponseError};
use serde_json::Value;

/// One method: its name and its reader, which turns the params into the [`Job`] that serves it
/// (or the `-32602` naming the field that is wrong).
pub struct Method {
    pub name: &'static str,
    /// Served only with a host of this build's own, whose settings it changes (`logout`);
    /// without one the method is unknown, as if not listed.
    pub local_only: bool,
    pub read: fn(&Value) -> ParamResult<Job>,
}

/// A request whose params were read: what serves it, and where.
pub enum Job {
    Initialize(Offer),
    Work(Work),
    Turn(Turn),
}

/// Serves a request on a worker, answering through its responder.
pub type Work = Box<dyn FnOnce(&Ctx, Responder) + Send>;
/// Registers a turn on the dispatcher (answering the request itself when it cannot run).
pub type Turn = Box<dyn FnOnce(&Ctx, Responder) -> Option<Registered> + Send>;
/// Acts on a notification.
pub type OnNotification = fn(&Ctx, &Value);

pub(super) const fn m(name: &'static str, read: fn(&Value) -> ParamResult<Job>) -> Method {
    Method {
        name,
        local_only: false,
        read,
    }
}

/// A method served only with a host of this build's own ([`Method::local_only`]).
pub(super) const fn local(name: &'static str, read: fn(&Value) -> ParamResult<Job>) -> Method {
    Method {
        local_only: true,
        ..m(name, read)
    }
}

/// Our methods, and those both dialects serve alike.
#[rustfmt::skip]
pub static METHODS: &[Method] = &[
    m("initialize",                 |v| Ok(Job::Initialize(initialize::offer(v)?))),
    m("authenticate",               |v| answer_str(v, read::method_id, configure::authenticate)),
    local("logout",                 |v| answer(v, read::nothing, |c, ()| configure::logout(c))),
    m("session/new",                |v| work(v, read::new_session, lifecycle::new)),
    m("session/fork",               |v| work(v, read::fork_session, lifecycle::fork)),
    m("session/load",               |v| work(v, |p| read::open_session(p, true), lifecycle::open)),
    m("session/resume",             |v| work(v, |p| read::open_session(p, false), lifecycle::open)),
    m("session/list",               |v| answer(v, read::list_sessions, lifecycle::list)),
    m("session/options",            |v| answer(v, read::session_options, lifecycle::options)),
    m("session/close",              |v| answer_str(v, read::session_id, lifecycle::close)),
    m("session/delete",             |v| answer_str(v, read::session_id, lifecycle::delete)),
    m("session/set_config_option",  |v| work(v, read::config_option, configure::set_config_option)),
    m("session/set_model",          |v| work(v, read::set_model, configure::set_config_option)),
    m("session/set_mode",           |v| work(v, read::set_mode, configure::set_mode)),
    m("session/prompt",             |v| turn(v, read::prompt, turns::register)),
    m("_maka/session/turns",        |v| forward::<ops::SessionTurns>(v, read::session_ref)),
    m("_maka/session/branch",       |v| answer(v, maka::read_branch, maka::branch)),
    m("_maka/session/revisions",    |v| forward::<ops::RevisionsList>(v, read::session_ref)),
    m("_maka/session/revision/create", |v| forward::<ops::RevisionCreate>(v, maka::read_revision)),
    m("_maka/session/revision/abandon", |v| answer(v, maka::read_abandon, maka::abandon)),
    m("_maka/turn/resume",          |v| turn(v, read::session_id, resume_turn)),
    m("_maka/turn/steer",           |v| answer(v, maka::read_steer, maka::steer)),
    m("_maka/memory/query",         |v| forward::<ops::MemoryQuery>(v, maka::read_memory_query)),
    m("_maka/memory/mutate",        |v| forward::<ops::MemoryMutate>(v, maka::read_memory_mutate)),
    m("_maka/usage/query",          |v| forward::<ops::UsageQuery>(v, read::session_ref)),
    m("_maka/artifact/ingest",      |v| forward::<ops::ArtifactIngest>(v, maka::read_ingest)),
    m("_maka/artifact/list",        |v| forward::<ops::ArtifactQuery>(v, maka::read_artifact_list)),
    m("_maka/artifact/read",        |v| forward::<ops::ArtifactQuery>(v, maka::read_artifact_read)),
    m("_maka/artifact/delete",      |v| forward::<ops::ArtifactDelete>(v, maka::read_artifact_ref)),
    m("_maka/subagent/list",        |v| forward::<ops::SubagentsList>(v, maka::read_subagent_list)),
    m("_maka/goal/arm",             |v| answer(v, maka::read_goal_arm, maka::goal_arm)),
    m("_maka/goal/control",         |v| answer(v, maka::read_goal_control, maka::goal_control)),
    m("_maka/goal/query",           |v| forward::<ops::GoalQuery>(v, read::session_ref)),
    m("_maka/plan/query",           |v| forward::<ops::PlanQuery>(v, read::session_ref)),
    m("_maka/plan/control",         |v| answer(v, maka::read_plan_control, maka::plan_control)),
    m("_maka/plan/start",           |v| turn(v, read::session_id, plan_turn)),
    m("_session/steering",          |v| answer(v, names::read_steering, names::steering)),
    m("_session/goal",              |v| answer(v, names::read_goal, names::goal)),
    // Names only Apache Maka's adapter has: its meaning in both dialects.
    m("_maka/session/copy-source/query", |v| answer(v, md::read_copy_source, md::copy_source)),
    m("_maka/session/branch/create", |v| answer(v, md::read_branch_create, md::branch_create)),
    m("_maka/artifact/query",       |v| answer(v, md::read_artifact_query, md::artifact_query)),
    m("_maka/plan/turn/start",      |v| answer(v, md::read_plan_turn, md::plan_turn_start)),
];

/// Apache Maka's meaning of the names both adapters use, on a connection in its dialect
/// (`maka_dialect/routes/`): each name is also one of [`METHODS`], which it replaces there.
#[rustfmt::skip]
pub static MAKA_METHODS: &[Method] = &[
    m("_maka/session/revision/create", |v| answer(v, md::read_branch_create, md::branch_create)),
    m("_maka/session/revision/abandon", |v| answer(v, md::read_abandon, md::abandon)),
    m("_maka/turn/resume",          |v| answer(v, md::read_resume, md::resume)),
    m("_maka/memory/query",         |v| answer(v, md::read_memory_query, md::memory_query)),
    m("_maka/memory/mutate",        |v| answer(v, md::read_memory_mutate, md::memory_mutate)),
    m("_maka/artifact/ingest",      |v| answer(v, md::read_ingest, md::ingest)),
    m("_maka/goal/arm",             |v| answer(v, md::read_goal_arm, md::goal_arm)),
    m("_maka/goal/control",         |v| answer(v, md::read_goal_control, md::goal_control)),
    m("_maka/goal/query",           |v| answer(v, read::session_ref, md::goal_query)),
    m("_maka/plan/query",           |v| answer(v, md::read_plan_query, md::plan_query)),
    m("_maka/plan/control",         |v| answer(v, md::read_plan_control, md::plan_control)),
];

/// The notifications this agent acts on.
pub static NOTIFICATIONS: &[(&str, OnNotification)] = &[
    ("session/cancel", cancel),
    ("$/cancel_request", session::withdrawn),
];

/// The method named `name` on a connection in `dialect`, when it is served (`local`: with a
/// host of this build's own that keeps settings): Maka's row first in Maka's dialect.
pub fn find(
    name: &str,
    local: bool,
    dialect: Dialect,
    version: Option<super::out::Version>,
) -> Option<&'static Method> {
    if version == Some(super::out::Version::V2) {
        return super::v2::methods::V2_METHODS
            .iter()
            .find(|m| m.name == name && (local || !m.local_only));
    }
    let maka: &[Method] = match dialect {
        Dialect::Maka => MAKA_METHODS,
        Dialect::Ours => &[],
    };
    maka.iter()
        .chain(METHODS)
        .find(|m| m.name == name && (local || !m.local_only))
}

/// The `_maka/` methods, as `initialize` advertises them.
pub fn maka_methods() -> Vec<&'static str> {
    METHODS
        .iter()
        .filter(|m| m.name.starts_with("_maka/"))
        .map(|m| m.name)
        .collect()
}

/// A method that answers through its responder itself (on a worker).
pub(super) fn work<P: Send + 'static>(
    v: &Value,
    read: fn(&Params) -> ParamResult<P>,
    serve: fn(&Ctx, P, Responder),
) -> ParamResult<Job> {
    let p = read(&Params::of(v)?)?;
    Ok(Job::Work(Box::new(move |ctx, r| serve(ctx, p, r))))
}

/// A method whose answer is what `serve` returns (on a worker).
pub(super) fn answer<P: Send + 'static>(
    v: &Value,
    read: fn(&Params) -> ParamResult<P>,
    serve: fn(&Ctx, P) -> Result<Value, ResponseError>,
) -> ParamResult<Job> {
    let p = read(&Params::of(v)?)?;
    Ok(Job::Work(Box::new(move |ctx, r| r.respond(serve(ctx, p)))))
}

/// [`answer`] for a `serve` that borrows the string read (an id).
pub(super) fn answer_str(
    v: &Value,
    read: fn(&Params) -> ParamResult<String>,
    serve: fn(&Ctx, &str) -> Result<Value, ResponseError>,
) -> ParamResult<Job> {
    let p = read(&Params::of(v)?)?;
    Ok(Job::Work(Box::new(move |ctx, r| r.respond(serve(ctx, &p)))))
}

/// `_maka/turn/resume` (ours): the run a host crash interrupted, as a turn.
fn resume_turn(ctx: &Ctx, id: String, r: Responder) -> Option<Registered> {
    turns::register_generated(ctx, &id, TurnKind::Resume, r)
}

/// `_maka/plan/start`: a turn that proposes a plan.
fn plan_turn(ctx: &Ctx, id: String, r: Responder) -> Option<Registered> {
    turns::register_generated(ctx, &id, TurnKind::Plan, r)
}

/// A `_maka/` method that is host operation `O`: its input read from the params, its output the
/// answer (on a worker).
fn forward<O: Operation + 'static>(
    v: &Value,
    read: fn(&Params) -> ParamResult<O::Input>,
) -> ParamResult<Job>
where
    O::Input: Send,
{
    let input = read(&Params::of(v)?)?;
    Ok(Job::Work(Box::new(move |ctx, r| {
        r.respond(
            ctx.host()
                .and_then(|conn| Ok(to_json(&conn.request::<O>(&input)?))),
        )
    })))
}

/// A turn: registered on the dispatcher by `register` (which answers the request itself when
/// the turn cannot run), then started on a worker.
pub(super) fn turn<P: Send + 'static>(
    v: &Value,
    read: fn(&Params) -> ParamResult<P>,
    register: fn(&Ctx, P, Responder) -> Option<Registered>,
) -> ParamResult<Job> {
    let p = read(&Params::of(v)?)?;
    Ok(Job::Turn(Box::new(move |ctx, r| register(ctx, p, r))))
}

/// `session/cancel`: the session's running turn stops (its prompt answers `cancelled`).
pub(super) fn cancel(ctx: &Ctx, params: &Value) {
    let Some(id) = params.get("sessionId").and_then(Value::as_str) else {
        log::warn!("session/cancel without a sessionId");
        return;
    };
    match ctx.session(id) {
        Some(s) => super::session::cancel(&s, &ctx.shared),
        None => log::debug!("session/cancel for unknown session {id}"),
    }
}

/// What a transport needs to know of a method beyond its message: `serve` routes a POST by it
/// (and by whether it names a session, or is a response), and knows no method name.
#[cfg(feature = "serve")]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Transport {
    /// It opens the connection: the first message, answered before any other.
    pub opens_connection: bool,
    /// It acts on a session, so its POST must carry `Acp-Session-Id` (the TypeScript SDK's
    /// `SESSION_SCOPED_METHODS`).
    pub session_scoped: bool,
    /// The connection holds one more session once it is answered.
    pub opens_session: bool,
    /// Its answer is its session stream's last message.
    pub ends_session: bool,
    /// A turn of its session runs until its answer (the session's `acp/turnState`, which
    /// serve tells on ACP v1 connections only: a v2 prompt is answered at its insertion).
    pub starts_turn: bool,
}

#[cfg(feature = "serve")]
const PLAIN: Transport = Transport {
    opens_connection: false,
    session_scoped: false,
    opens_session: false,
    ends_session: false,
    starts_turn: false,
};

/// The methods a transport treats apart; every other needs nothing ([`PLAIN`]).
#[cfg(feature = "serve")]
#[rustfmt::skip]
static TRANSPORT: &[(&str, Transport)] = &[
    ("initialize",                Transport { opens_connection: true, ..PLAIN }),
    ("session/new",               Transport { opens_session: true, ..PLAIN }),
    ("session/load",              Transport { session_scoped: true, opens_session: true, ..PLAIN }),
    ("session/resume",            Transport { session_scoped: true, opens_session: true, ..PLAIN }),
    ("session/fork",              Transport { session_scoped: true, opens_session: true, ..PLAIN }),
    ("session/close",             Transport { session_scoped: true, ends_session: true, ..PLAIN }),
    ("session/delete",            Transport { session_scoped: true, ends_session: true, ..PLAIN }),
    ("session/cancel",            Transport { session_scoped: true, ..PLAIN }),
    ("session/prompt",            Transport { session_scoped: true, starts_turn: true, ..PLAIN }),
    ("session/set_config_option", Transport { session_scoped: true, ..PLAIN }),
    ("session/set_mode",          Transport { session_scoped: true, ..PLAIN }),
    ("session/set_model",         Transport { session_scoped: true, ..PLAIN }),
];

/// What a transport needs to know of `method`.
#[cfg(feature = "serve")]
pub fn transport(method: &str) -> Transport {
    TRANSPORT
        .iter()
        .find(|(name, _)| *name == method)
        .map_or(PLAIN, |(_, t)| *t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every method is listed once in each table, reads `{}` without panicking (a job, or
    /// `-32602`), and the advertised `_maka/` methods are exactly the table's; Maka's rows
    /// only give names of ours Maka's meaning, so both dialects serve (and advertise) the same
    /// names, each with one handler.
    #[test]
    fn the_table_is_the_one_list_of_methods() {
        for table in [METHODS, MAKA_METHODS] {
            let mut names: Vec<&str> = table.iter().map(|m| m.name).collect();
            names.sort();
            let n = names.len();
            names.dedup();
            assert_eq!(names.len(), n, "a method is listed twice");
        }
        for m in METHODS.iter().chain(MAKA_METHODS) {
            for params in [
                Value::Null,
                serde_json::json!({}),
                serde_json::json!({"sessionId": 3}),
            ] {
                if let Err(e) = (m.read)(&params) {
                    assert_eq!(e.code, crate::jsonrpc::code::INVALID_PARAMS, "{}", m.name);
                }
            }
        }
        for theirs in MAKA_METHODS {
            let ours = find(theirs.name, true, Dialect::Ours, None);
            assert!(ours.is_some(), "{} is a name of ours", theirs.name);
            let found = find(theirs.name, true, Dialect::Maka, None).map(|m| m as *const Method);
            assert_eq!(found, Some(theirs as *const Method), "{}", theirs.name);
        }
        let advertised = initialize::agent_capabilities(true);
        let listed = serde_json::to_value(&advertised).unwrap()["_meta"]["maka"]["methods"].clone();
        assert_eq!(listed, serde_json::json!(maka_methods()));
        for name in maka_methods() {
            for dialect in [Dialect::Ours, Dialect::Maka] {
                assert!(
                    find(name, false, dialect, None).is_some(),
                    "{name} is advertised and served"
                );
            }
        }
        assert!(find("_maka/session/nothing", true, Dialect::Maka, None).is_none());
        assert!(find("logout", true, Dialect::Ours, None).is_some());
        assert!(find("logout", false, Dialect::Ours, None).is_none());
    }

    /// Each row of the table fits on one screen line.
    #[test]
    fn each_row_fits_on_a_line() {
        let text = include_str!("methods.rs");
        let long: Vec<&str> = text.lines().filter(|l| l.chars().count() > 100).collect();
        assert!(long.is_empty(), "{long:#?}");
    }
}

#[cfg(all(test, feature = "serve"))]
mod transport_tests {
    use super::*;

    /// What a transport is told of a method is told of a method this agent serves (or the one
    /// notification it acts on): a row renamed in the table cannot leave `serve` routing by
    /// the old name.
    #[test]
    fn the_transport_knows_only_the_tables_methods() {
        for (name, _) in TRANSPORT {
            let served = [Dialect::Ours, Dialect::Maka]
                .into_iter()
                .any(|d| find(name, true, d, None).is_some())
                || NOTIFICATIONS.iter().any(|(n, _)| n == name);
            assert!(served, "{name} is not in the method table");
        }
        assert!(transport("initialize").opens_connection);
        assert_eq!(transport("_maka/session/turns"), PLAIN);
    }
}
