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
use crate::host_api::ops::{self as op, Operation};
use crate::host_api::wire::*;
use serde_json::{json, Value};
use std::sync::Arc;

/// Runs the operation `key` on `input` (the request body).
pub fn dispatch(host: &Arc<Host>, key: &str, input: Value) -> Result<Value, HostError> {
    // One line per operation: the type names the key, the input and the output.
    macro_rules! table {
        ($($op:ty => $handler:expr,)*) => {
            $( if key == <$op>::KEY { return serve::<$op>(input, $handler); } )*
        };
    }
    table! {
        op::HostHello => |i| hello(host, i),
        op::HostStatus => |_| Ok(host.status()),
        op::ModelsList => |_| Ok(host.providers().list()),
        op::ModelsReload => |_| Ok(host.reload_providers().list()),
        op::SkillsList => |i| skills_list(host, i),
        op::SessionCreate => |i| sessions::create(host, i),
        op::SessionGet => |i| sessions::get(host, i),
        op::SessionList => |i| sessions::list(host, i),
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
        op::MemoryQuery => |i| knowledge::memory_query(host, i),
        op::MemoryMutate => |i| knowledge::memory_mutate(host, i),
        op::UsageQuery => |i| knowledge::usage_query(host, i),
        op::PlanQuery => |i| knowledge::plan_query(host, i),
        op::PlanControl => |i| knowledge::plan_control(host, i),
        op::PlanTurnStart => |i| knowledge::plan_turn_start(host, i),
        op::ArtifactIngest => |i| knowledge::artifact_ingest(host, i),
        op::ArtifactQuery => |i| knowledge::artifact_query(host, i),
        op::ArtifactDelete => |i| knowledge::artifact_delete(host, i),
        op::SubagentsList => |i| {
            let workspace = host.cell(&i.session_id)?.lock().session.workspace.path().to_string();
            Ok(crate::host::subagents::list(&host.data_dir, &workspace))
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

/// Decodes the input, runs the handler, encodes its output.
fn serve<O: Operation>(
    input: Value,
    handler: impl FnOnce(O::Input) -> Result<O::Output, HostError>,
) -> Result<Value, HostError> {
    let output = handler(parse(input)?)?;
    serde_json::to_value(&output).map_err(|e| HostError::internal(e.to_string()))
}

fn parse<T: serde::de::DeserializeOwned>(input: Value) -> Result<T, HostError> {
    let input = if input.is_null() { json!({}) } else { input };
    if !input.is_object() {
        return Err(HostError::invalid("the request body must be a JSON object"));
    }
    serde_json::from_value(input).map_err(|e| HostError::invalid(format!("bad input: {e}")))
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

/// A goal's turn (origin `goal`), admitted like a prompt.
pub(crate) fn start_goal_turn(
    host: &Arc<Host>,
    turn_id: &str,
    cell: &Arc<SessionCell>,
    content: MessageContent,
) -> Result<op::StartOutcome, HostError> {
    turns::start_with_origin(host, turn_id, cell, "goal", content)
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
