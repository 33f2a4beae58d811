//! What the model knows beyond the conversation — memory (`memory.query`, `memory.mutate`) —
//! and what the session used (`usage.query`).

use super::Caller;
use crate::host::memory::Whose;
use crate::host::Host;
use crate::host_api::ops::*;
use crate::host_api::wire::*;

/// The caller's entries (a principal's own; every entry for the machine's user), or those the
/// session's model sees.
pub(super) fn memory_query(
    host: &Host,
    caller: Caller,
    input: MemoryQueryInput,
) -> Result<MemoryView, HostError> {
    let session = match &input.session_id {
        Some(id) => Some(super::cell_for(host, caller, id)?.lock().session.clone()),
        None => None,
    };
    let whose = Whose::caller(caller.principal());
    Ok(host.memory.view(whose, session.as_ref()))
}

/// A change by the caller: an entry it adds is its own; another principal's entry is, for it,
/// one that does not exist.
pub(super) fn memory_mutate(
    host: &Host,
    caller: Caller,
    input: MemoryMutateInput,
) -> Result<MemoryOutcome, HostError> {
    let session = match &input.change {
        MemoryChange::Add {
            session_id: Some(id),
            ..
        } => Some(super::cell_for(host, caller, id)?.lock().session.clone()),
        _ => None,
    };
    let whose = Whose::caller(caller.principal());
    host.memory.mutate(
        whose,
        input.expected_revision,
        input.change,
        session.as_ref(),
    )
}

pub(super) fn usage_query(host: &Host, input: SessionRef) -> Result<UsageReport, HostError> {
    let cell = host.cell(&input.session_id)?;
    let st = super::open_state(host, &cell)?;
    let providers = host.providers();
    let prices = &providers.prices;
    let priced = !prices.is_empty();
    let live: std::collections::HashSet<&str> = st
        .transcript_items()
        .iter()
        .filter(|i| !i.turn_id.is_empty())
        .map(|i| i.turn_id.as_str())
        .collect();
    let mut turns: Vec<TurnUsage> = Vec::new();
    for item in st.transcript_items() {
        let TranscriptBody::Usage {
            of_turn_id,
            model,
            usage,
        } = &item.body
        else {
            continue;
        };
        let cost = prices.cost(model, usage).or(priced.then_some(0.0));
        match turns.iter_mut().find(|t| t.turn_id == *of_turn_id) {
            Some(t) => {
                t.usage.add(usage);
                if let (Some(a), Some(b)) = (t.cost.as_mut(), cost) {
                    *a += b;
                }
            }
            None => turns.push(TurnUsage {
                turn_id: of_turn_id.clone(),
                usage: usage.clone(),
                cost,
                abandoned: !live.contains(of_turn_id.as_str()),
            }),
        }
    }
    let mut models: Vec<ModelUsage> = st
        .usage_by_model
        .iter()
        .map(|(m, u)| ModelUsage {
            model: m.clone(),
            usage: u.clone(),
            cost: prices.cost(m, u),
        })
        .collect();
    models.sort_by(|a, b| a.model.cmp(&b.model));
    let unpriced_models = if priced {
        models
            .iter()
            .filter(|m| m.cost.is_none())
            .map(|m| m.model.clone())
            .collect()
    } else {
        vec![]
    };
    Ok(UsageReport {
        totals: st.usage_totals.clone(),
        cost: st.cost(prices),
        unpriced_models,
        models,
        turns,
    })
}

// ---- plans ------------------------------------------------------------------------------------

/// The session's plan: its latest version (`plan` items, from `update_plan` or a revise) and the
/// decision recorded for that version.
pub(crate) fn plan_view(st: &crate::host::session::SessionState) -> PlanView {
    let items = st.transcript_items();
    let Some((latest, entries)) = items.iter().rev().find_map(|i| match &i.body {
        TranscriptBody::Plan { entries } => Some((i, entries)),
        _ => None,
    }) else {
        return PlanView {
            revision: 0,
            status: "none".into(),
            entries: vec![],
            updated_at: None,
        };
    };
    let status = items
        .iter()
        .rev()
        .take_while(|i| i.message_seq > latest.message_seq)
        .find_map(|i| match &i.body {
            TranscriptBody::PlanDecision { revision, status }
                if *revision == latest.message_seq =>
            {
                Some(status.clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| "proposed".into());
    PlanView {
        revision: latest.message_seq,
        status,
        entries: entries.clone(),
        updated_at: Some(latest.ts),
    }
}

/// Tells the session's readers where its plan stands now (a `plan_state` frame).
pub(crate) fn emit_plan_state(
    cell: &crate::host::session::SessionCell,
    st: &mut crate::host::session::SessionState,
) {
    let frame = plan_view(st).frame();
    cell.emit(st, frame);
}

pub(super) fn plan_query(host: &Host, input: SessionRef) -> Result<PlanView, HostError> {
    let cell = host.cell(&input.session_id)?;
    let st = super::open_state(host, &cell)?;
    Ok(plan_view(&st))
}

pub(super) fn plan_control(host: &Host, input: PlanControlInput) -> Result<PlanOutcome, HostError> {
    let cell = host.cell(&input.session_id)?;
    let pending_dialog;
    let plan = {
        let mut st = super::open_state(host, &cell)?;
        let current = plan_view(&st);
        if current.revision != input.expected_revision {
            return Ok(PlanOutcome::RevisionConflict {
                expected: input.expected_revision,
                actual: current.revision,
            });
        }
        // A turn waiting on the plan-approval dialog.
        pending_dialog = st
            .interactions
            .values()
            .filter(|s| s.answer_tx.is_some())
            .find(|s| {
                matches!(
                    s.interaction.request,
                    InteractionRequest::Permission {
                        review: Review::Plan,
                        ..
                    }
                )
            })
            .map(|s| s.interaction.interaction_id.clone());
        let decide = |st: &mut crate::host::session::SessionState, status: &str| {
            st.append_transcript(vec![(
                String::new(),
                TranscriptBody::PlanDecision {
                    revision: current.revision,
                    status: status.into(),
                },
            )])
        };
        match &input.action {
            PlanAction::Approve | PlanAction::Reject if current.revision == 0 => {
                return Err(HostError::invalid(
                    "the session has no plan yet: a plan is proposed in plan mode (update_plan)",
                ))
            }
            PlanAction::Approve => {
                decide(&mut st, "approved")?;
                if st.session.configuration.collaboration_mode == CollaborationMode::Plan {
                    let patch = ConfigurationPatch {
                        collaboration_mode: Some(CollaborationMode::Agent),
                        ..Default::default()
                    };
                    super::commit_configuration(host, &cell, &mut st, &patch)?;
                }
            }
            PlanAction::Reject => {
                decide(&mut st, "rejected")?;
            }
            PlanAction::Revise { entries } => {
                if entries.is_empty() || entries.len() > 100 {
                    return Err(HostError::invalid("a plan has 1 to 100 entries"));
                }
                let turn_id = st
                    .active
                    .as_ref()
                    .map(|a| a.turn_id.clone())
                    .unwrap_or_default();
                let seq = st.append_transcript(vec![(
                    turn_id.clone(),
                    TranscriptBody::Plan {
                        entries: entries.clone(),
                    },
                )])?;
                cell.emit(
                    &mut st,
                    FrameBody::PlanUpdate {
                        turn_id,
                        entries: entries.clone(),
                    },
                );
                cell.emit(
                    &mut st,
                    FrameBody::TranscriptAdvanced {
                        through_message_seq: seq,
                    },
                );
            }
        }
        emit_plan_state(&cell, &mut st);
        plan_view(&st)
    };
    // Answered outside the session's lock, like any client answer.
    if let Some(interaction_id) =
        pending_dialog.filter(|_| !matches!(input.action, PlanAction::Revise { .. }))
    {
        let decision = match input.action {
            PlanAction::Approve => Decision::Allow,
            _ => Decision::Deny,
        };
        let answer = AnswerInput {
            session_id: input.session_id.clone(),
            interaction_id,
            answer: InteractionAnswer::Permission {
                decision,
                remember_for_turn: false,
                remember: None,
                failure: None,
            },
        };
        if let Err(e) = super::calls::interaction_answer(host, answer) {
            log::debug!(
                "plan.control: the approval dialog was already answered: {}",
                e.message
            );
        }
    }
    Ok(PlanOutcome::Committed { plan })
}

/// A turn carrying out the approved plan (origin `plan`; its prompt lists the steps).
pub(super) fn plan_turn_start(
    host: &std::sync::Arc<Host>,
    input: TurnRef,
) -> Result<StartOutcome, HostError> {
    let cell = host.cell(&input.session_id)?;
    let plan = plan_view(&*super::open_state(host, &cell)?);
    if plan.status != "approved" {
        return Err(HostError::new(
            ErrorCode::OperationConflict,
            format!(
                "the plan is {}; approve it first (plan.control approve)",
                if plan.status == "none" {
                    "missing"
                } else {
                    &plan.status
                }
            ),
        )
        .with_details(serde_json::json!({"reason": "plan_not_approved", "status": plan.status})));
    }
    let mut text = String::from("Carry out the approved plan:");
    for (i, e) in plan.entries.iter().enumerate() {
        text.push_str(&format!("\n{}. [{}] {}", i + 1, e.status, e.content));
    }
    let content = MessageContent {
        text,
        attachments: vec![],
    };
    super::turns::start_with_origin(host, &input.turn_id, &cell, "plan", None, content)
}

// ---- artifacts --------------------------------------------------------------------------------

/// The session's directory (the session must exist).
fn session_dir(host: &Host, session_id: &str) -> Result<std::path::PathBuf, HostError> {
    host.cell(session_id)?;
    Ok(host.store.session_dir(session_id))
}

pub(super) fn artifact_ingest(host: &Host, input: IngestInput) -> Result<IngestOutcome, HostError> {
    let a = &host.artifacts;
    match input {
        IngestInput::Begin {
            session_id,
            name,
            mime_type,
            total_bytes,
            sha256,
            source,
        } => {
            let dir = session_dir(host, &session_id)?;
            // Clients upload; the other sources are the host's own.
            let source = source
                .filter(|s| s == "attachment" || s == "tool_output")
                .unwrap_or_else(|| "upload".into());
            a.begin(
                &dir,
                &name,
                mime_type.as_deref(),
                total_bytes,
                &sha256,
                &source,
            )
        }
        IngestInput::Part {
            session_id,
            upload_id,
            offset,
            data_base64,
        } => a.part(
            &session_dir(host, &session_id)?,
            &upload_id,
            offset,
            &data_base64,
        ),
        IngestInput::Status {
            session_id,
            upload_id,
        } => a.status(&session_dir(host, &session_id)?, &upload_id),
        IngestInput::Commit {
            session_id,
            upload_id,
        } => {
            let dir = session_dir(host, &session_id)?;
            a.commit(&dir, &session_id, &upload_id)
                .map(|artifact| IngestOutcome::Committed { artifact })
        }
        IngestInput::Abort {
            session_id,
            upload_id,
        } => a.abort(&session_dir(host, &session_id)?, &upload_id),
    }
}

pub(super) fn artifact_query(
    host: &Host,
    input: ArtifactQueryInput,
) -> Result<ArtifactAnswer, HostError> {
    let a = &host.artifacts;
    match input {
        ArtifactQueryInput::List { session_id } => Ok(ArtifactAnswer::List {
            artifacts: a.list(&session_dir(host, &session_id)?),
        }),
        ArtifactQueryInput::Get {
            session_id,
            artifact_id,
        } => Ok(ArtifactAnswer::Artifact {
            artifact: a
                .list(&session_dir(host, &session_id)?)
                .into_iter()
                .find(|x| x.artifact_id == artifact_id),
        }),
        ArtifactQueryInput::Read {
            session_id,
            artifact_id,
            offset,
            max_bytes,
        } => a.read(
            &session_dir(host, &session_id)?,
            &artifact_id,
            offset,
            max_bytes.unwrap_or(crate::host::artifacts::MAX_READ_BYTES),
        ),
    }
}

pub(super) fn artifact_delete(host: &Host, input: ArtifactRef) -> Result<Deleted, HostError> {
    let deleted = host
        .artifacts
        .delete(&session_dir(host, &input.session_id)?, &input.artifact_id)?;
    Ok(Deleted { deleted })
}
