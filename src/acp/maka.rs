//! The `_maka/` extension methods, read here under one convention (`docs/maka-extensions.md`):
//! params read like ACP's (`-32602` naming the field), an unknown session is `-32002`, a host
//! error keeps its code in `data.makaCode`, and every method is listed in
//! `agentCapabilities._meta.maka.methods` ([`METHODS`]). Queries are answered here
//! ([`serve`]); `_maka/turn/resume` runs like a prompt (`turns.rs`).

use super::agent::Ctx;
use super::errors::MakaCode;
use super::params::Params;
use super::types::to_json;
use crate::host_api::client::ClientError;
use crate::host_api::ops::{self, SessionRef};
use crate::host_api::random_hex;
use crate::jsonrpc::ResponseError;
use serde_json::{json, Value};

/// Every `_maka/` method this agent serves.
pub const METHODS: &[&str] = &[
    "_maka/session/turns",
    "_maka/session/branch",
    "_maka/session/revisions",
    "_maka/session/revision/create",
    "_maka/session/revision/abandon",
    "_maka/turn/resume",
    "_maka/turn/steer",
    "_maka/memory/query",
    "_maka/memory/mutate",
    "_maka/usage/query",
    "_maka/artifact/ingest",
    "_maka/artifact/list",
    "_maka/artifact/read",
    "_maka/artifact/delete",
    "_maka/subagent/list",
    "_maka/goal/arm",
    "_maka/goal/control",
    "_maka/goal/query",
    "_maka/plan/query",
    "_maka/plan/control",
    "_maka/plan/start",
];

/// The `_maka/` queries [`serve`] answers (`_maka/turn/resume` is `Request::ResumeTurn`).
pub enum MakaRequest {
    /// The session's turns: id, start, first line of the prompt, status, files changed.
    SessionTurns {
        session_id: String,
    },
    /// A new session with the conversation through a turn (all finished turns by default).
    Branch {
        session_id: String,
        through_turn_id: Option<String>,
    },
    /// The points the session can rewind to.
    Revisions {
        session_id: String,
    },
    /// A named point at the end of the conversation.
    RevisionCreate {
        session_id: String,
        label: String,
    },
    /// Rewinds to a revision: later turns leave the conversation, their file changes undone.
    RevisionAbandon {
        session_id: String,
        revision_id: String,
        restore_files: bool,
        force: bool,
    },
    /// A message for the running turn.
    Steer {
        session_id: String,
        prompt: Vec<Value>,
    },
    /// One step of a resumable upload (begin, part, status, commit, abort).
    ArtifactIngest(ops::IngestInput),
    /// List, or read a byte range of, the session's artifacts.
    ArtifactQuery(ops::ArtifactQueryInput),
    ArtifactDelete(ops::ArtifactRef),
    /// The agents a session may delegate to.
    SubagentList {
        session_id: String,
    },
    /// Keeps running turns toward an objective.
    GoalArm(ops::GoalArmInput),
    /// Pause, resume or cancel the goal.
    GoalControl(ops::GoalControlInput),
    GoalQuery {
        session_id: String,
    },
    /// The session's plan and its approval.
    PlanQuery {
        session_id: String,
    },
    /// Approve, reject or revise the plan.
    PlanControl {
        session_id: String,
        expected_revision: u64,
        action: ops::PlanAction,
    },
    /// Tokens and cost per session, model and turn.
    UsageQuery {
        session_id: String,
    },
    /// Memory entries: all, or what a session's model sees.
    MemoryQuery {
        session_id: Option<String>,
    },
    /// Add, update or forget an entry under the memory's revision.
    MemoryMutate {
        expected_revision: u64,
        change: ops::MemoryChange,
    },
}

impl MakaRequest {
    /// `None` for a `_maka/` method this agent does not have.
    pub fn parse(method: &str, params: &Value) -> Option<Result<MakaRequest, ResponseError>> {
        let read = |f: fn(&Params) -> Result<MakaRequest, ResponseError>| {
            Some(Params::of(params).and_then(|p| f(&p)))
        };
        match method {
            "_maka/session/turns" => read(|p| {
                Ok(MakaRequest::SessionTurns {
                    session_id: p.required_str("sessionId")?.into(),
                })
            }),
            "_maka/session/branch" => read(|p| {
                Ok(MakaRequest::Branch {
                    session_id: p.required_str("sessionId")?.into(),
                    through_turn_id: p.optional_str("throughTurnId")?.map(String::from),
                })
            }),
            "_maka/session/revisions" => read(|p| {
                Ok(MakaRequest::Revisions {
                    session_id: p.required_str("sessionId")?.into(),
                })
            }),
            "_maka/session/revision/create" => read(|p| {
                Ok(MakaRequest::RevisionCreate {
                    session_id: p.required_str("sessionId")?.into(),
                    label: p.required_str("label")?.into(),
                })
            }),
            "_maka/session/revision/abandon" => read(|p| {
                Ok(MakaRequest::RevisionAbandon {
                    session_id: p.required_str("sessionId")?.into(),
                    revision_id: p.required_str("revisionId")?.into(),
                    restore_files: p.optional_bool("restoreFiles")?.unwrap_or(true),
                    force: p.optional_bool("force")?.unwrap_or(false),
                })
            }),
            "_maka/artifact/ingest" => read(|p| {
                p.required_str("sessionId")?;
                let kind = p.required_str("kind")?;
                if !matches!(kind, "begin" | "part" | "status" | "commit" | "abort") {
                    return Err(ResponseError::invalid_params(format_args!(
                        "`kind` must be begin, part, status, commit or abort, not {kind:?}"
                    )));
                }
                let value = Value::Object(p.object().clone());
                serde_json::from_value(value)
                    .map(MakaRequest::ArtifactIngest)
                    .map_err(|e| {
                        ResponseError::invalid_params(format_args!("`{kind}` params: {e}"))
                    })
            }),
            "_maka/artifact/list" => read(|p| {
                Ok(MakaRequest::ArtifactQuery(ops::ArtifactQueryInput::List {
                    session_id: p.required_str("sessionId")?.into(),
                }))
            }),
            "_maka/artifact/read" => read(|p| {
                let max_bytes = match p.get("maxBytes") {
                    None => None,
                    Some(_) => Some(p.required_u64("maxBytes")?),
                };
                let offset = match p.get("offset") {
                    None => 0,
                    Some(_) => p.required_u64("offset")?,
                };
                Ok(MakaRequest::ArtifactQuery(ops::ArtifactQueryInput::Read {
                    session_id: p.required_str("sessionId")?.into(),
                    artifact_id: p.required_str("artifactId")?.into(),
                    offset,
                    max_bytes,
                }))
            }),
            "_maka/artifact/delete" => read(|p| {
                Ok(MakaRequest::ArtifactDelete(ops::ArtifactRef {
                    session_id: p.required_str("sessionId")?.into(),
                    artifact_id: p.required_str("artifactId")?.into(),
                }))
            }),
            "_maka/subagent/list" => read(|p| {
                Ok(MakaRequest::SubagentList {
                    session_id: p.required_str("sessionId")?.into(),
                })
            }),
            "_maka/goal/arm" => read(|p| {
                let limit = |f: &str| match p.get(f) {
                    None => Ok(None),
                    Some(_) => p.required_u64(f).map(Some),
                };
                Ok(MakaRequest::GoalArm(ops::GoalArmInput {
                    session_id: p.required_str("sessionId")?.into(),
                    objective: p.required_str("objective")?.into(),
                    max_turns: limit("maxTurns")?.map(|n| n.min(u64::from(u32::MAX)) as u32),
                    max_tokens: limit("maxTokens")?,
                    max_minutes: limit("maxMinutes")?,
                }))
            }),
            "_maka/goal/control" => read(|p| {
                Ok(MakaRequest::GoalControl(ops::GoalControlInput {
                    session_id: p.required_str("sessionId")?.into(),
                    goal_id: p.required_str("goalId")?.into(),
                    action: p.required_str("action")?.into(),
                }))
            }),
            "_maka/goal/query" => read(|p| {
                Ok(MakaRequest::GoalQuery {
                    session_id: p.required_str("sessionId")?.into(),
                })
            }),
            "_maka/plan/query" => read(|p| {
                Ok(MakaRequest::PlanQuery {
                    session_id: p.required_str("sessionId")?.into(),
                })
            }),
            "_maka/plan/control" => read(|p| {
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
                Ok(MakaRequest::PlanControl {
                    session_id: p.required_str("sessionId")?.into(),
                    expected_revision: p.required_u64("expectedRevision")?,
                    action,
                })
            }),
            "_maka/usage/query" => read(|p| {
                Ok(MakaRequest::UsageQuery {
                    session_id: p.required_str("sessionId")?.into(),
                })
            }),
            "_maka/memory/query" => read(|p| {
                Ok(MakaRequest::MemoryQuery {
                    session_id: p.optional_str("sessionId")?.map(String::from),
                })
            }),
            "_maka/memory/mutate" => read(|p| {
                let raw = p.get("change").ok_or_else(|| p.missing("change"))?;
                let change = serde_json::from_value(raw.clone()).map_err(|e| {
                    ResponseError::invalid_params(format_args!(
                        "`change` must be {{kind: add|update|forget, …}}: {e}"
                    ))
                })?;
                Ok(MakaRequest::MemoryMutate {
                    expected_revision: p.required_u64("expectedRevision")?,
                    change,
                })
            }),
            "_maka/turn/steer" => read(|p| {
                Ok(MakaRequest::Steer {
                    session_id: p.required_str("sessionId")?.into(),
                    prompt: p.required_array("prompt")?.clone(),
                })
            }),
            _ => None,
        }
    }
}

/// Runs a `_maka/` method (on a worker).
pub fn serve(ctx: &Ctx, request: MakaRequest) -> Result<Value, ResponseError> {
    let conn = ctx.host()?;
    match request {
        MakaRequest::SessionTurns { session_id } => {
            let list = ctx.call::<ops::SessionTurns>(&conn, &SessionRef { session_id })?;
            Ok(to_json(&list))
        }
        MakaRequest::Branch {
            session_id,
            through_turn_id,
        } => {
            let input = ops::BranchInput {
                source_session_id: session_id,
                target_session_id: format!("sess_{}", random_hex(12)),
                through_turn_id,
                expected_source_revision: None,
                workspace: None,
                additional_directories: None,
                mcp_servers: vec![],
            };
            match ctx.call::<ops::BranchCreate>(&conn, &input)? {
                ops::BranchOutcome::Committed { session } => Ok(json!({
                    "sessionId": session.id,
                    "cwd": session.workspace.path(),
                    "turnCount": session.turn_count,
                    "source": {
                        "sessionId": input.source_session_id,
                        "throughTurnId": session.lineage.and_then(|l| l.branch_of_turn_id),
                    },
                })),
                ops::BranchOutcome::SourceRevisionConflict { .. } => {
                    Err(MakaCode::OperationConflict
                        .error("The session changed while it was being branched; branch it again"))
                }
            }
        }
        MakaRequest::Revisions { session_id } => {
            let list = ctx.call::<ops::RevisionsList>(&conn, &SessionRef { session_id })?;
            Ok(to_json(&list))
        }
        MakaRequest::RevisionCreate { session_id, label } => {
            let input = ops::RevisionCreateInput { session_id, label };
            let revision = ctx.call::<ops::RevisionCreate>(&conn, &input)?;
            Ok(to_json(&revision))
        }
        MakaRequest::RevisionAbandon {
            session_id,
            revision_id,
            restore_files,
            force,
        } => {
            let session = ctx.session(&session_id);
            let input = ops::AbandonInput {
                session_id,
                revision_id,
                restore_files,
                force,
            };
            let call = || ctx.call::<ops::RevisionAbandon>(&conn, &input);
            // Files the editor wrote are restored through it: its calls must get through.
            let o = match session {
                Some(s) => s.with_editor_calls(&ctx.shared, &conn, call)?,
                None => call()?,
            };
            Ok(json!({
                "abandonedTurnIds": o.abandoned_turn_ids,
                "restored": o.restored,
                "conflicts": o.conflicts,
            }))
        }
        MakaRequest::ArtifactIngest(input) => {
            Ok(to_json(&ctx.call::<ops::ArtifactIngest>(&conn, &input)?))
        }
        MakaRequest::ArtifactQuery(input) => {
            Ok(to_json(&ctx.call::<ops::ArtifactQuery>(&conn, &input)?))
        }
        MakaRequest::ArtifactDelete(input) => {
            Ok(to_json(&ctx.call::<ops::ArtifactDelete>(&conn, &input)?))
        }
        MakaRequest::SubagentList { session_id } => {
            let list = ctx.call::<ops::SubagentsList>(&conn, &SessionRef { session_id })?;
            Ok(to_json(&list))
        }
        MakaRequest::GoalArm(input) => {
            let id = input.session_id.clone();
            let goal = ctx.call::<ops::GoalArm>(&conn, &input)?;
            if let Some(s) = ctx.session(&id) {
                s.follow_goal(&ctx.shared, &conn, &goal);
            }
            Ok(to_json(&goal))
        }
        MakaRequest::GoalControl(input) => {
            let id = input.session_id.clone();
            let goal = ctx.call::<ops::GoalControl>(&conn, &input)?;
            if let Some(s) = ctx.session(&id) {
                s.follow_goal(&ctx.shared, &conn, &goal);
            }
            Ok(to_json(&goal))
        }
        MakaRequest::GoalQuery { session_id } => {
            let view = ctx.call::<ops::GoalQuery>(&conn, &SessionRef { session_id })?;
            Ok(to_json(&view))
        }
        MakaRequest::PlanQuery { session_id } => {
            let plan = ctx.call::<ops::PlanQuery>(&conn, &SessionRef { session_id })?;
            Ok(to_json(&plan))
        }
        MakaRequest::PlanControl {
            session_id,
            expected_revision,
            action,
        } => {
            let revised = matches!(action, ops::PlanAction::Revise { .. });
            let input = ops::PlanControlInput {
                session_id: session_id.clone(),
                expected_revision,
                action,
            };
            let outcome = ctx.call::<ops::PlanControl>(&conn, &input)?;
            // The ACP plan follows a revision: through the reader while a turn runs, else here.
            if let (true, ops::PlanOutcome::Committed { plan }, Some(s)) =
                (revised, &outcome, ctx.session(&session_id))
            {
                if !s.has_prompt() {
                    let entries = super::projection::plan_entries(&plan.entries);
                    s.emit(&ctx.shared, |_| {
                        (vec![super::types::SessionUpdate::Plan { entries }], ())
                    });
                }
            }
            Ok(to_json(&outcome))
        }
        MakaRequest::UsageQuery { session_id } => {
            let report = ctx.call::<ops::UsageQuery>(&conn, &SessionRef { session_id })?;
            Ok(to_json(&report))
        }
        MakaRequest::MemoryQuery { session_id } => {
            let view =
                ctx.call::<ops::MemoryQuery>(&conn, &ops::MemoryQueryInput { session_id })?;
            Ok(to_json(&view))
        }
        MakaRequest::MemoryMutate {
            expected_revision,
            change,
        } => {
            let input = ops::MemoryMutateInput {
                expected_revision,
                change,
            };
            let outcome = ctx.call::<ops::MemoryMutate>(&conn, &input)?;
            Ok(to_json(&outcome))
        }
        MakaRequest::Steer { session_id, prompt } => {
            let content = super::prompt::to_message(&prompt)?;
            let input = ops::SubmitInput {
                session_id,
                message_id: format!("s_{}", random_hex(8)),
                content,
            };
            match conn.client.call::<ops::MessageSubmit>(&input) {
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
                Err(e) => Err(ctx.host_error(&conn, &e)),
            }
        }
    }
}
