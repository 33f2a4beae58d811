//! Every method this agent serves, one line each: its name, how its params are read, where it
//! runs and what serves it. The dispatcher ([`super::agent`]) looks a request up here; nothing
//! else knows method names. `agentCapabilities._meta.maka.methods` is this table's `_maka/`
//! rows ([`maka_methods`]).
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
//! Notifications: `session/cancel` ([`NOTIFICATIONS`]); every other one is ignored, as ACP asks.
//! `$/cancel_request` is answered by the JSON-RPC layer itself (`jsonrpc/incoming.rs`): it
//! cancels the waiting request's responder, whichever method it is.

use super::agent::Ctx;
use super::initialize::{self, InitializeParams};
use super::maka_dialect::{self as md, Dialect};
use super::params::{ParamResult, Params};
use super::read;
use super::turns::{self, Registered, TurnKind};
use super::types::to_json;
use super::{configure, lifecycle, maka, shared_names};
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
    Initialize(InitializeParams),
    Work(Work),
    Turn(Turn),
    /// A name both dialects use with the same params: the connection's dialect picks the job.
    ByDialect(Box<dyn FnOnce(Dialect) -> ParamResult<Job> + Send>),
}

impl Job {
    /// The job for a connection in `dialect`.
    pub fn in_dialect(self, dialect: Dialect) -> ParamResult<Job> {
        match self {
            Job::ByDialect(pick) => pick(dialect),
            job => Ok(job),
        }
    }
}

/// Serves a request on a worker, answering through its responder.
pub type Work = Box<dyn FnOnce(&Ctx, Responder) + Send>;
/// Registers a turn on the dispatcher (answering the request itself when it cannot run).
pub type Turn = Box<dyn FnOnce(&Ctx, Responder) -> Option<Registered> + Send>;
/// Acts on a notification.
pub type OnNotification = fn(&Ctx, &Value);

const fn m(name: &'static str, read: fn(&Value) -> ParamResult<Job>) -> Method {
    Method {
        name,
        local_only: false,
        read,
    }
}

#[rustfmt::skip]
pub static METHODS: &[Method] = &[
    m("initialize",                     |v| Ok(Job::Initialize(initialize::parse(v)?))),
    m("authenticate",                   |v| answer(v, read::method_id, |c, id| configure::authenticate(c, &id))),
    Method { local_only: true, ..m("logout", |v| answer(v, read::nothing, |c, ()| configure::logout(c))) },
    m("session/new",                    |v| work(v, read::new_session, lifecycle::new)),
    m("session/fork",                   |v| work(v, read::fork_session, lifecycle::fork)),
    m("session/load",                   |v| work(v, |p| read::open_session(p, true), lifecycle::open)),
    m("session/resume",                 |v| work(v, |p| read::open_session(p, false), lifecycle::open)),
    m("session/list",                   |v| answer(v, read::list_sessions, lifecycle::list)),
    m("session/options",                |v| answer(v, read::session_options, lifecycle::options)),
    m("session/close",                  |v| answer(v, read::session_id, |c, id| lifecycle::close(c, &id))),
    m("session/delete",                 |v| answer(v, read::session_id, |c, id| lifecycle::delete(c, &id))),
    m("session/set_config_option",      |v| work(v, read::config_option, configure::set_config_option)),
    m("session/set_model",              |v| work(v, read::set_model, configure::set_config_option)),
    m("session/set_mode",               |v| work(v, read::set_mode, configure::set_mode)),
    m("session/prompt",                 |v| turn(v, read::prompt, turns::register)),
    m("_maka/session/turns",            |v| forward::<ops::SessionTurns>(v, read::session_ref)),
    m("_maka/session/branch",           |v| answer(v, maka::read_branch, maka::branch)),
    m("_maka/session/revisions",        |v| forward::<ops::RevisionsList>(v, read::session_ref)),
    m("_maka/session/copy-source/query", |v| answer(v, md::read_copy_source, md::copy_source)),
    m("_maka/session/branch/create",    |v| answer(v, md::read_branch_create, md::branch_create)),
    m("_maka/session/revision/create",  |v| theirs_if(v, "targetSessionId", |v| answer(v, md::read_branch_create, md::branch_create), |v| forward::<ops::RevisionCreate>(v, maka::read_revision_create))),
    m("_maka/session/revision/abandon", |v| theirs_if(v, "targetSessionId", |v| answer(v, md::read_abandon, md::abandon), |v| answer(v, maka::read_abandon, maka::abandon))),
    m("_maka/turn/resume",              |v| by_dialect(v, maka_resume, |v| theirs_if(v, "sourceRunId", maka_resume, |v| turn(v, read::session_id, |c, id, r| turns::register_generated(c, &id, TurnKind::Resume, r))))),
    m("_maka/turn/steer",               |v| answer(v, maka::read_steer, maka::steer)),
    m("_maka/memory/query",             |v| theirs_if(v, "kind", |v| answer(v, md::read_memory_query, md::memory_query), |v| forward::<ops::MemoryQuery>(v, maka::read_memory_query))),
    m("_maka/memory/mutate",            |v| theirs_if(v, "kind", |v| answer(v, md::read_memory_mutate, md::memory_mutate), |v| forward::<ops::MemoryMutate>(v, maka::read_memory_mutate))),
    m("_maka/usage/query",              |v| forward::<ops::UsageQuery>(v, read::session_ref)),
    m("_maka/artifact/ingest",          |v| answer(v, md::read_ingest, md::ingest)),
    m("_maka/artifact/list",            |v| forward::<ops::ArtifactQuery>(v, maka::read_artifact_list)),
    m("_maka/artifact/read",            |v| forward::<ops::ArtifactQuery>(v, maka::read_artifact_read)),
    m("_maka/artifact/query",           |v| answer(v, md::read_artifact_query, md::artifact_query)),
    m("_maka/artifact/delete",          |v| forward::<ops::ArtifactDelete>(v, maka::read_artifact_ref)),
    m("_maka/subagent/list",            |v| forward::<ops::SubagentsList>(v, maka::read_subagent_list)),
    m("_maka/goal/arm",                 |v| theirs_if(v, "condition", |v| answer(v, md::read_goal_arm, md::goal_arm), |v| answer(v, maka::read_goal_arm, maka::goal_arm))),
    m("_maka/goal/control",             |v| theirs_if(v, "expectedRevision", |v| answer(v, md::read_goal_control, md::goal_control), |v| answer(v, maka::read_goal_control, maka::goal_control))),
    m("_maka/goal/query",               |v| by_dialect(v, |v| answer(v, read::session_ref, md::goal_query), |v| forward::<ops::GoalQuery>(v, read::session_ref))),
    m("_maka/plan/query",               |v| theirs_if(v, "kind", |v| answer(v, md::read_plan_query, md::plan_query), |v| forward::<ops::PlanQuery>(v, read::session_ref))),
    m("_maka/plan/control",             |v| theirs_if(v, "kind", |v| answer(v, md::read_plan_control, md::plan_control), |v| answer(v, maka::read_plan_control, maka::plan_control))),
    m("_maka/plan/start",               |v| turn(v, read::session_id, |c, id, r| turns::register_generated(c, &id, TurnKind::Plan, r))),
    m("_maka/plan/turn/start",          |v| answer(v, md::read_plan_turn, md::plan_turn_start)),
    m("_session/steering",              |v| answer(v, shared_names::read_steering, shared_names::steering)),
    m("_session/goal",                  |v| answer(v, shared_names::read_goal, shared_names::goal)),
];

/// The notifications this agent acts on.
pub static NOTIFICATIONS: &[(&str, OnNotification)] = &[("session/cancel", cancel)];

/// The method named `name`, when it is served (`local`: with a host of this build's own that
/// keeps settings).
pub fn find(name: &str, local: bool) -> Option<&'static Method> {
    METHODS
        .iter()
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

/// A name Apache Maka's adapter and ours share: Maka's meaning when its params arrive (`field`
/// present), ours otherwise.
fn theirs_if(
    v: &Value,
    field: &str,
    theirs: fn(&Value) -> ParamResult<Job>,
    ours: fn(&Value) -> ParamResult<Job>,
) -> ParamResult<Job> {
    match v.get(field) {
        Some(f) if !f.is_null() => theirs(v),
        _ => ours(v),
    }
}

/// A shared name whose params are alike: the connection's dialect decides.
fn by_dialect(
    v: &Value,
    theirs: fn(&Value) -> ParamResult<Job>,
    ours: fn(&Value) -> ParamResult<Job>,
) -> ParamResult<Job> {
    let v = v.clone();
    Ok(Job::ByDialect(Box::new(move |d| match d {
        Dialect::Maka => theirs(&v),
        Dialect::Ours => ours(&v),
    })))
}

/// `_maka/turn/resume` as Maka's: answered at admission.
fn maka_resume(v: &Value) -> ParamResult<Job> {
    answer(v, md::read_resume, md::resume)
}

/// A method that answers through its responder itself (on a worker).
fn work<P: Send + 'static>(
    v: &Value,
    read: fn(&Params) -> ParamResult<P>,
    serve: fn(&Ctx, P, Responder),
) -> ParamResult<Job> {
    let p = read(&Params::of(v)?)?;
    Ok(Job::Work(Box::new(move |ctx, r| serve(ctx, p, r))))
}

/// A method whose answer is what `serve` returns (on a worker).
fn answer<P: Send + 'static>(
    v: &Value,
    read: fn(&Params) -> ParamResult<P>,
    serve: fn(&Ctx, P) -> Result<Value, ResponseError>,
) -> ParamResult<Job> {
    let p = read(&Params::of(v)?)?;
    Ok(Job::Work(Box::new(move |ctx, r| r.respond(serve(ctx, p)))))
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
fn turn<P: Send + 'static>(
    v: &Value,
    read: fn(&Params) -> ParamResult<P>,
    register: fn(&Ctx, P, Responder) -> Option<Registered>,
) -> ParamResult<Job> {
    let p = read(&Params::of(v)?)?;
    Ok(Job::Turn(Box::new(move |ctx, r| register(ctx, p, r))))
}

/// `session/cancel`: the session's running turn stops (its prompt answers `cancelled`).
fn cancel(ctx: &Ctx, params: &Value) {
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
}

#[cfg(feature = "serve")]
const PLAIN: Transport = Transport {
    opens_connection: false,
    session_scoped: false,
    opens_session: false,
    ends_session: false,
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
    ("session/prompt",            Transport { session_scoped: true, ..PLAIN }),
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

    /// Every method is listed once, reads `{}` without panicking (a job, or `-32602`), and the
    /// advertised `_maka/` methods are exactly the table's.
    #[test]
    fn the_table_is_the_one_list_of_methods() {
        let mut names: Vec<&str> = METHODS.iter().map(|m| m.name).collect();
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a method is listed twice");
        for m in METHODS {
            for params in [
                Value::Null,
                serde_json::json!({}),
                serde_json::json!({"sessionId": 3}),
            ] {
                for dialect in [Dialect::Ours, Dialect::Maka] {
                    if let Err(e) = (m.read)(&params).and_then(|j| j.in_dialect(dialect)) {
                        assert_eq!(e.code, crate::jsonrpc::code::INVALID_PARAMS, "{}", m.name);
                    }
                }
            }
        }
        let advertised = initialize::agent_capabilities(true);
        let listed = serde_json::to_value(&advertised).unwrap()["_meta"]["maka"]["methods"].clone();
        assert_eq!(listed, serde_json::json!(maka_methods()));
        for name in maka_methods() {
            assert!(
                find(name, false).is_some(),
                "{name} is advertised and served"
            );
        }
        assert!(find("_maka/session/nothing", true).is_none());
        assert!(find("logout", true).is_some() && find("logout", false).is_none());
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
            let served = find(name, true).is_some() || NOTIFICATIONS.iter().any(|(n, _)| n == name);
            assert!(served, "{name} is not in the method table");
        }
        assert!(transport("initialize").opens_connection);
        assert_eq!(transport("_maka/session/turns"), PLAIN);
    }
}
