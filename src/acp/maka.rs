//! The `_maka/` extension methods that are more than one host operation, and the readers of
//! every `_maka/` method's params, under one convention (`docs/maka-extensions.md`): params
//! read like ACP's (`-32602` naming the field), an unknown session is `-32002`, a host error
//! keeps its code in `data.makaCode`. Which method is which is the table in `methods.rs`; the
//! ones that are one host operation are forwarded there.

use super::agent::Ctx;
use super::errors::MakaCode;
use super::params::{ParamResult, Params};
use super::types::to_json;
use crate::host_api::client::ClientError;
use crate::host_api::ops;
use crate::host_api::random_hex;
use crate::jsonrpc::ResponseError;
use serde_json::{json, Value};

// ---- readers ----

pub struct Branch {
    session_id: String,
    through_turn_id: Option<String>,
}

pub fn read_branch(p: &Params) -> ParamResult<Branch> {
    Ok(Branch {
        session_id: p.required_str("sessionId")?.into(),
        through_turn_id: p.optional_str("throughTurnId")?.map(String::from),
    })
}

pub fn read_revision(p: &Params) -> ParamResult<ops::RevisionCreateInput> {
    Ok(ops::RevisionCreateInput {
        session_id: p.required_str("sessionId")?.into(),
        label: p.required_str("label")?.into(),
    })
}

pub fn read_abandon(p: &Params) -> ParamResult<ops::AbandonInput> {
    Ok(ops::AbandonInput {
        session_id: p.required_str("sessionId")?.into(),
        revision_id: p.required_str("revisionId")?.into(),
        restore_files: p.optional_bool("restoreFiles")?.unwrap_or(true),
        force: p.optional_bool("force")?.unwrap_or(false),
    })
}

pub fn read_ingest(p: &Params) -> ParamResult<ops::IngestInput> {
    p.required_str("sessionId")?;
    let kind = p.required_str("kind")?;
    if !matches!(kind, "begin" | "part" | "status" | "commit" | "abort") {
        return Err(ResponseError::invalid_params(format_args!(
            "`kind` must be begin, part, status, commit or abort, not {kind:?}"
        )));
    }
    serde_json::from_value(Value::Object(p.object().clone()))
        .map_err(|e| ResponseError::invalid_params(format_args!("`{kind}` params: {e}")))
}

pub fn read_artifact_list(p: &Params) -> ParamResult<ops::ArtifactQueryInput> {
    Ok(ops::ArtifactQueryInput::List {
        session_id: p.required_str("sessionId")?.into(),
    })
}

pub fn read_artifact_read(p: &Params) -> ParamResult<ops::ArtifactQueryInput> {
    let max_bytes = match p.get("maxBytes") {
        None => None,
        Some(_) => Some(p.required_u64("maxBytes")?),
    };
    let offset = match p.get("offset") {
        None => 0,
        Some(_) => p.required_u64("offset")?,
    };
    Ok(ops::ArtifactQueryInput::Read {
        session_id: p.required_str("sessionId")?.into(),
        artifact_id: p.required_str("artifactId")?.into(),
        offset,
        max_bytes,
    })
}

pub fn read_artifact_ref(p: &Params) -> ParamResult<ops::ArtifactRef> {
    Ok(ops::ArtifactRef {
        session_id: p.required_str("sessionId")?.into(),
        artifact_id: p.required_str("artifactId")?.into(),
    })
}

pub fn read_goal_arm(p: &Params) -> ParamResult<ops::GoalArmInput> {
    let limit = |f: &str| match p.get(f) {
        None => Ok(None),
        Some(_) => p.required_u64(f).map(Some),
    };
    Ok(ops::GoalArmInput {
        session_id: p.required_str("sessionId")?.into(),
        objective: p.required_str("objective")?.into(),
        max_turns: limit("maxTurns")?.map(|n| n.min(u64::from(u32::MAX)) as u32),
        max_tokens: limit("maxTokens")?,
        max_minutes: limit("maxMinutes")?,
    })
}

pub fn read_subagent_list(p: &Params) -> ParamResult<ops::SubagentsQuery> {
    Ok(ops::SubagentsQuery {
        session_id: Some(p.required_str("sessionId")?.into()),
        cwd: None,
    })
}

pub fn read_goal_control(p: &Params) -> ParamResult<ops::GoalControlInput> {
    Ok(ops::GoalControlInput {
        session_id: p.required_str("sessionId")?.into(),
        goal_id: p.required_str("goalId")?.into(),
        action: p.required_str("action")?.into(),
    })
}

pub fn read_plan_control(p: &Params) -> ParamResult<ops::PlanControlInput> {
    let kind = p.required_str("action")?;
    let action = match kind {
        "approve" => ops::PlanAction::Approve,
        "reject" => ops::PlanAction::Reject,
        "revise" => {
            let raw = p.get("entries").ok_or_else(|| p.missing("entries"))?;
            let entries = serde_json::from_value(raw.clone()).map_err(|e| {
                ResponseError::invalid_params(format_args!(
                    "`entries` must be [{{content, status, priority}}]: {e}"
                ))
            })?;
            ops::PlanAction::Revise { entries }
        }
        other => {
            return Err(ResponseError::invalid_params(format_args!(
                "`action` must be approve, reject or revise, not {other:?}"
            )))
        }
    };
    Ok(ops::PlanControlInput {
        session_id: p.required_str("sessionId")?.into(),
        expected_revision: p.required_u64("expectedRevision")?,
        action,
    })
}

pub fn read_memory_query(p: &Params) -> ParamResult<ops::MemoryQueryInput> {
    Ok(ops::MemoryQueryInput {
        session_id: p.optional_str("sessionId")?.map(String::from),
    })
}

pub fn read_memory_mutate(p: &Params) -> ParamResult<ops::MemoryMutateInput> {
    let raw = p.get("change").ok_or_else(|| p.missing("change"))?;
    let change = serde_json::from_value(raw.clone()).map_err(|e| {
        ResponseError::invalid_params(format_args!(
            "`change` must be {{kind: add|update|forget, …}}: {e}"
        ))
    })?;
    Ok(ops::MemoryMutateInput {
        expected_revision: p.required_u64("expectedRevision")?,
        change,
    })
}

pub struct Steer {
    session_id: String,
    prompt: Vec<Value>,
}

pub fn read_steer(p: &Params) -> ParamResult<Steer> {
    Ok(Steer {
        session_id: p.required_str("sessionId")?.into(),
        prompt: p.required_array("prompt")?.clone(),
    })
}

// ---- the methods that do more than one host operation (on a worker) ----

/// A new session with the conversation through a turn (all finished turns by default).
pub fn branch(ctx: &Ctx, b: Branch) -> Result<Value, ResponseError> {
    let conn = ctx.host()?;
    let input = ops::BranchInput {
        source_session_id: b.session_id,
        target_session_id: format!("sess_{}", random_hex(12)),
        through_turn_id: b.through_turn_id,
        expected_source_revision: None,
        workspace: None,
        additional_directories: None,
        mcp_servers: vec![],
        system_prompt: None,
    };
    match conn.request::<ops::BranchCreate>(&input)? {
        ops::BranchOutcome::Committed { session } => Ok(json!({
            "sessionId": session.id,
            "cwd": session.workspace.path(),
            "turnCount": session.turn_count,
            "source": {
                "sessionId": input.source_session_id,
                "throughTurnId": session.lineage.and_then(|l| l.branch_of_turn_id),
            },
        })),
        ops::BranchOutcome::SourceRevisionConflict { .. } => Err(MakaCode::OperationConflict
            .error("The session changed while it was being branched; branch it again")),
    }
}

/// Rewinds to a revision: later turns leave the conversation, their file changes undone —
/// through the editor for the files it wrote (its calls must get through meanwhile).
pub fn abandon(ctx: &Ctx, input: ops::AbandonInput) -> Result<Value, ResponseError> {
    let conn = ctx.host()?;
    let call = || conn.request::<ops::RevisionAbandon>(&input);
    let o = match ctx.session(&input.session_id) {
        Some(s) => s.with_editor_calls(&ctx.shared, &conn, call)?,
        None => call()?,
    };
    // The plan may be gone with the turns: a client that shows plans by id is told before the
    // answer (shown once, whether or not a reader also saw the host's frame).
    if let (Some(s), Some(plan)) = (ctx.session(&input.session_id), &o.plan) {
        super::view::show(&s, &ctx.shared, &[plan.frame()]);
    }
    Ok(json!({
        "abandonedTurnIds": o.abandoned_turn_ids,
        "restored": o.restored,
        "conflicts": o.conflicts,
    }))
}

/// Arms a goal; the session follows it (its turns are shown as they run).
pub fn goal_arm(ctx: &Ctx, input: ops::GoalArmInput) -> Result<Value, ResponseError> {
    let id = input.session_id.clone();
    goal_change::<ops::GoalArm>(ctx, &id, &input)
}

/// Pauses, resumes or cancels the goal; the session follows what it becomes.
pub fn goal_control(ctx: &Ctx, input: ops::GoalControlInput) -> Result<Value, ResponseError> {
    let id = input.session_id.clone();
    goal_change::<ops::GoalControl>(ctx, &id, &input)
}

/// A goal operation of session `session_id`: the session follows the goal it returns.
fn goal_change<O: ops::Operation<Output = crate::host_api::wire::Goal>>(
    ctx: &Ctx,
    session_id: &str,
    input: &O::Input,
) -> Result<Value, ResponseError> {
    let conn = ctx.host()?;
    let goal = conn.request::<O>(input)?;
    show_goal(ctx, &conn, session_id, &goal);
    Ok(to_json(&goal))
}

/// A goal that just changed: shown as the goal extension's snapshot, and the session follows
/// it (its turns are shown as they run). The reader's frame of the same change shows nothing
/// again.
pub fn show_goal(
    ctx: &Ctx,
    conn: &super::host_link::Connected,
    session_id: &str,
    goal: &crate::host_api::wire::Goal,
) {
    if let Some(s) = ctx.session(session_id) {
        s.emit(|view| (view.goal(goal), ()), |view| (view.goal(goal), ()));
        super::follow::follow_goal(&s, &ctx.shared, conn, goal);
    }
}

/// Approves, rejects or revises the plan; a revision is shown as the ACP plan (through the
/// reader while a turn runs, else here).
pub fn plan_control(ctx: &Ctx, input: ops::PlanControlInput) -> Result<Value, ResponseError> {
    let conn = ctx.host()?;
    let revised = matches!(input.action, ops::PlanAction::Revise { .. });
    let outcome = conn.request::<ops::PlanControl>(&input)?;
    if let (ops::PlanOutcome::Committed { plan }, Some(s)) =
        (&outcome, ctx.session(&input.session_id))
    {
        // No reader follows the session between turns: the change is shown here, as the
        // frames the host emitted for it would be (a revision is also the legacy `plan`).
        if s.prompt_turn().is_none() {
            let frames = super::projection::plan_change_frames(plan, revised);
            super::view::show(&s, &ctx.shared, &frames);
        }
    }
    Ok(to_json(&outcome))
}

/// A message for the running turn.
pub fn steer(ctx: &Ctx, mut s: Steer) -> Result<Value, ResponseError> {
    let conn = ctx.host()?;
    let content = super::prompt::to_message(&mut s.prompt)?;
    let input = ops::SubmitInput {
        session_id: s.session_id,
        message_id: format!("s_{}", random_hex(8)),
        content,
    };
    match conn.call::<ops::MessageSubmit>(&input) {
        Ok(o) => Ok(json!({"turnId": o.turn_id, "messageId": input.message_id})),
        Err(ClientError::Host(h))
            if h.details.as_ref().and_then(|d| d.get("reason"))
                == Some(&json!("no_active_turn")) =>
        {
            Err(MakaCode::NoRunningTurn.error_with(
                "No turn is running in this session; send the message with session/prompt instead",
                json!({"sessionId": input.session_id}),
            ))
        }
        Err(e) => Err(crate::acp::errors::from_client(&e)),
    }
}
