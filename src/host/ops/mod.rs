//! Every host operation in one table ([`dispatch`]). Inputs and outputs are the typed
//! definitions of [`crate::host_api::ops`] (unknown fields ignored, wrong types →
//! `invalid_request`); expected races such as revision conflicts and parked resumes are
//! outputs, not errors. The handlers live by subject: `sessions`, `turns`, `calls`.

mod calls;
pub(crate) mod history;
pub(crate) mod knowledge;
mod sessions;
mod turns;

pub use sessions::{commit_configuration, commit_name};

use super::session::{SessionCell, SessionState};
use super::Host;
use crate::host_api::ops::{self as op, NamesSessions, Operation};
use crate::host_api::wire::*;
use serde_json::{json, Value};
use std::sync::Arc;

/// Who an operation runs for: a principal (`Maka-Principal`, a `maka-acp serve
/// --tokens-file` user), who may use only the sessions it made; or the machine's user (no
/// principal: the adapter on stdio, `serve` with one token), who holds the host's token and
/// may use every session of the data dir.
#[derive(Clone, Copy, Debug, Default)]
pub struct Caller<'a> {
    principal: Option<&'a str>,
}

impl<'a> Caller<'a> {
    pub fn principal(self) -> Option<&'a str> {
        self.principal
    }

    /// `Maka-Principal`'s value (none: the machine's user); a name that is not one is refused.
    pub fn from_header(value: Option<&'a str>) -> Result<Caller<'a>, HostError> {
        match value {
            None => Ok(Caller::default()),
            Some(name) if crate::host_api::wire::valid_principal(name) => Ok(Caller {
                principal: Some(name),
            }),
            Some(_) => Err(HostError::invalid(
                "`Maka-Principal` must match ^[A-Za-z0-9._@-]{1,64}$",
            )),
        }
    }

    /// Whether this caller may use the session.
    pub fn may_use(self, cell: &SessionCell) -> bool {
        self.principal.is_none() || self.principal == cell.owner.as_deref()
    }
}

/// The one owner gate: session `id` for `caller`, answered for a session of another principal
/// exactly as for one that does not exist (same code, same message: nothing says it exists).
pub fn cell_for(host: &Host, caller: Caller, id: &str) -> Result<Arc<SessionCell>, HostError> {
    let cell = host.cell(id)?;
    if caller.may_use(&cell) {
        Ok(cell)
    } else {
        Err(host.unknown_session(id))
    }
}

/// Runs the operation `key` on `input` (the request body's bytes) for `caller`.
pub fn dispatch(
    host: &Arc<Host>,
    caller: Caller,
    key: &str,
    input: &[u8],
) -> Result<Value, HostError> {
    // One line per operation: the type names the key, the input and the output; every
    // session its input names passes the owner gate first (`NamesSessions`).
    macro_rules! table {
        ($($op:ty => $handler:expr,)*) => {
            $( if key == <$op>::KEY { return serve::<$op>(host, caller, input, $handler); } )*
        };
    }
    table! {
        op::HostHello => |i| hello(host, i),
        op::HostStatus => |_| Ok(host.status()),
        op::ModelsList => |_| Ok(host.providers().list()),
        op::ModelsReload => |_| Ok(host.reload_providers().list()),
        op::SkillsList => |i| skills_list(host, i),
        op::SessionCreate => |i| sessions::create(host, caller, i),
        op::SessionGet => |i| sessions::get(host, caller, i),
        op::SessionList => |i| sessions::list(host, caller, i),
        op::SessionOpen => |i| sessions::open(host, i),
        op::ConfigurationUpdate => |i| sessions::configuration_update(host, i),
        op::MetadataUpdate => |i| sessions::metadata_update(host, i),
        op::LifecycleSet => |i| sessions::lifecycle_set(host, i),
        op::SessionRemove => |i| sessions::remove(host, i),
        op::SessionRelease => |i| sessions::release(host, i),
        op::TranscriptPage => |i| sessions::transcript_page(host, i),
        op::TurnStart => |i| turns::start(host, i),
        op::TurnStop => |i| turns::stop(host, i),
        op::TurnQuery => |i| turns::query(host, i),
        op::ResumeQuery => |i| turns::resume_query(host, i),
        op::ResumeStart => |i| turns::resume_start(host, i),
        op::InteractionAnswerOp => |i| calls::interaction_answer(host, i),
        op::CapabilityReplace => |i| calls::capability_replace(host, i),
        op::ClientCallResult => |i| calls::client_call_result(host, i),
        op::ClientCallInput => |i| calls::client_call_input(host, i),
        op::SessionTurns => |i| turns::list(host, i),
        op::BranchCreate => |i| history::branch(host, i),
        op::RevisionCreate => |i| history::revision_create(host, i),
        op::RevisionsList => |i| history::revisions(host, i),
        op::RevisionAbandon => |i| history::abandon(host, i),
        op::MessageSubmit => |i| turns::submit(host, i),
        op::ToolCancel => |i| turns::cancel_tool(host, i),
        op::MemoryQuery => |i| knowledge::memory_query(host, caller, i),
        op::MemoryMutate => |i| knowledge::memory_mutate(host, caller, i),
        op::UsageQuery => |i| knowledge::usage_query(host, i),
        op::PlanQuery => |i| knowledge::plan_query(host, i),
        op::PlanControl => |i| knowledge::plan_control(host, i),
        op::PlanTurnStart => |i| knowledge::plan_turn_start(host, i),
        op::ArtifactIngest => |i| knowledge::artifact_ingest(host, i),
        op::ArtifactQuery => |i| knowledge::artifact_query(host, i),
        op::ArtifactDelete => |i| knowledge::artifact_delete(host, i),
        op::SubagentsList => |i| {
            // Whose trust: the session's owner's, or (before a session exists) the caller's.
            let (workspace, owner) = match (&i.session_id, &i.cwd) {
                (Some(id), _) => {
                    let cell = host.cell(id)?;
                    let workspace = cell.lock().session.workspace.path().to_string();
                    (workspace, cell.owner.clone())
                }
                (None, Some(cwd)) if std::path::Path::new(cwd).is_absolute() => {
                    (cwd.clone(), caller.principal().map(str::to_string))
                }
                _ => return Err(HostError::invalid("`sessionId` or an absolute `cwd` is required")),
            };
            Ok(crate::host::subagents::list(&host.data_dir, &workspace, owner.as_deref()))
        },
        op::GoalArm => |i| crate::host::goals::arm(host, i),
        op::GoalControl => |i| crate::host::goals::control(host, i),
        op::GoalQuery => |i| {
            let cell = host.cell(&i.session_id)?;
            let st = open_state(host, &cell)?;
            Ok(op::GoalView { goal: st.goal.clone() })
        },
    }
    Err(HostError::new(
        ErrorCode::OperationUnavailable,
        format!("unknown operation {key:?}"),
    ))
}

/// Decodes the input, checks that `caller` owns every session it names, runs the handler,
/// encodes its output.
fn serve<O: Operation>(
    host: &Host,
    caller: Caller,
    input: &[u8],
    handler: impl FnOnce(O::Input) -> Result<O::Output, HostError>,
) -> Result<Value, HostError> {
    let input: O::Input = parse(input)?;
    if caller.principal.is_some() {
        for id in input.sessions().into_iter().flatten() {
            owned_or_unknown::<O>(host, caller, id)?;
        }
    }
    let output = handler(input)?;
    serde_json::to_value(&output).map_err(|e| HostError::internal(e.to_string()))
}

/// The body read straight into the operation's input (no tree in between: a 10 MiB prompt is
/// held once). An empty body or `null` is `{}`; anything else must be a JSON object.
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, HostError> {
    let text = std::str::from_utf8(body).map_err(|_| {
        HostError::invalid("the body is not UTF-8").with_details(json!({"reason": "invalid_utf8"}))
    })?;
    let not_json = |e: serde_json::Error| {
        HostError::invalid(format!("the body is not JSON: {e}"))
            .with_details(json!({"reason": "invalid_json"}))
    };
    // JSON's own whitespace only (a form feed or a no-break space is not).
    let trimmed = text.trim_matches([' ', '\t', '\n', '\r']);
    let text = if trimmed.is_empty() || trimmed == "null" {
        "{}"
    } else if !trimmed.starts_with('{') {
        // Serde would read an array into a struct's fields by position: refuse it by shape.
        serde_json::from_str::<serde::de::IgnoredAny>(trimmed).map_err(not_json)?;
        return Err(HostError::invalid("the request body must be a JSON object"));
    } else {
        text
    };
    serde_json::from_str(text).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => HostError::invalid(format!("bad input: {e}")),
        _ => not_json(e),
    })
}

/// The gate for one session a principal's operation names: one that is not there and one of
/// another principal get the same answer, before the handler reads anything else of the input
/// (a handler that checked a field first would answer the two differently). `session.get`
/// answers both with `session: null` instead: its handler asks [`cell_for`] itself.
fn owned_or_unknown<O: Operation>(host: &Host, caller: Caller, id: &str) -> Result<(), HostError> {
    if O::KEY == op::SessionGet::KEY {
        return Ok(());
    }
    cell_for(host, caller, id).map(|_| ())
}

fn check_id(what: &str, id: &str) -> Result<(), HostError> {
    if valid_id(id) {
        Ok(())
    } else {
        Err(HostError::invalid(format!(
            "`{what}` must match ^[A-Za-z0-9_-]{{1,128}}$"
        )))
    }
}

/// A turn of goal `goal_id` (origin `goal`), admitted like a prompt while that goal is the
/// session's live one (else `operation_conflict`).
pub(crate) fn start_goal_turn(
    host: &Arc<Host>,
    turn_id: &str,
    cell: &Arc<SessionCell>,
    goal_id: &str,
    content: MessageContent,
) -> Result<op::StartOutcome, HostError> {
    turns::start_with_origin(host, turn_id, cell, "goal", Some(goal_id), content)
}

/// The session's turn ended: the first prompt queued behind it starts (see
/// [`turns::start_queued`]).
pub(crate) fn start_queued(host: &Arc<Host>, cell: &Arc<SessionCell>) {
    turns::start_queued(host, cell)
}

/// Locks a session and loads its transcript (recovering it after a crash on first use).
pub(crate) fn open_state<'a>(
    host: &Host,
    cell: &'a SessionCell,
) -> Result<std::sync::MutexGuard<'a, SessionState>, HostError> {
    let mut st = cell.lock();
    if st.removed {
        return Err(HostError::not_found(format!("session {}", cell.id)));
    }
    st.ensure_transcript(&host.store)?;
    Ok(st)
}

fn hello(host: &Host, input: op::HelloInput) -> Result<op::HelloOutput, HostError> {
    if let Some(p) = input.protocol {
        if !(p.min..=p.max).contains(&PROTOCOL_VERSION) {
            return Err(HostError::new(
                ErrorCode::IncompatibleProtocol,
                format!(
                    "this host speaks protocol {PROTOCOL_VERSION}; the client offered {}..={}",
                    p.min, p.max
                ),
            )
            .with_details(json!({"min": PROTOCOL_VERSION, "max": PROTOCOL_VERSION})));
        }
    }
    Ok(op::HelloOutput {
        host_epoch: host.epoch.clone(),
        protocol: PROTOCOL_VERSION,
        host_id: host.host_id.clone(),
        state: if host.is_draining() {
            "draining"
        } else {
            "ready"
        }
        .into(),
        features: vec!["client_calls".into()],
        limits: super::limits(),
    })
}

fn skills_list(host: &Host, input: op::OptionalSessionRef) -> Result<op::SkillList, HostError> {
    if let Some(id) = &input.session_id {
        host.cell(id)?;
    }
    Ok(super::commands::list())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Input {
        #[serde(default)]
        session_id: Option<String>,
    }

    fn reason(body: &[u8]) -> (String, Option<String>) {
        let e = parse::<Input>(body).unwrap_err();
        let reason = e
            .details
            .as_ref()
            .and_then(|d| d.get("reason"))
            .and_then(Value::as_str)
            .map(String::from);
        (e.message, reason)
    }

    #[test]
    fn bodies_are_read_into_the_input_and_each_bad_shape_is_named() {
        for empty in [&b""[..], b"  \n", b"null"] {
            assert_eq!(parse::<Input>(empty).unwrap().session_id, None);
        }
        let ok = parse::<Input>(br#"{"sessionId":"s","unknown":1}"#).unwrap();
        assert_eq!(ok.session_id.as_deref(), Some("s"));
        let (m, r) = reason(b"\xff{}");
        assert_eq!(
            (m.as_str(), r.as_deref()),
            ("the body is not UTF-8", Some("invalid_utf8"))
        );
        for not_json in [&b"{nope"[..], b"nope", b"{\"sessionId\":\"s\"} tail"] {
            let (m, r) = reason(not_json);
            assert!(m.starts_with("the body is not JSON"), "{m}");
            assert_eq!(r.as_deref(), Some("invalid_json"));
        }
        for not_object in [&b"[\"s\"]"[..], b"\"s\"", b"3"] {
            let (m, _) = reason(not_object);
            assert_eq!(m, "the request body must be a JSON object");
        }
        let (m, r) = reason(br#"{"sessionId": 3}"#);
        assert!(m.starts_with("bad input: invalid type"), "{m}");
        assert_eq!(r, None);
    }
}
