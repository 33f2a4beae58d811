//! Interaction answers and calls into the editor: `interaction.answer`,
//! `client.capability.replace`, `client.call.result`, `client.call.input`.

use super::open_state;
use crate::host::Host;
use crate::host_api::ops::*;
use crate::host_api::wire::*;
use serde_json::Value;

pub(super) fn interaction_answer(
    host: &Host,
    input: AnswerInput,
) -> Result<Interaction, HostError> {
    let cell = host.cell(&input.session_id)?;
    let mut st = open_state(host, &cell)?;
    let slot = st
        .interactions
        .get_mut(&input.interaction_id)
        .ok_or_else(|| HostError::not_found(format!("interaction {}", input.interaction_id)))?;
    if slot.answer_tx.is_none() {
        return Err(HostError::new(
            ErrorCode::AlreadyResolved,
            format!(
                "interaction {} was already {}",
                input.interaction_id, slot.interaction.status
            ),
        ));
    }
    let kinds_match = matches!(
        (&slot.interaction.request, &input.answer),
        (
            InteractionRequest::Permission { .. },
            InteractionAnswer::Permission { .. }
        ) | (
            InteractionRequest::Question { .. },
            InteractionAnswer::Question { .. }
        ) | (
            InteractionRequest::SandboxBoundary { .. },
            InteractionAnswer::SandboxBoundary { .. }
        )
    );
    if !kinds_match {
        return Err(HostError::new(
            ErrorCode::OperationConflict,
            "the answer kind does not match the interaction",
        ));
    }
    let outcome = InteractionOutcome::Answer {
        answer: input.answer,
    };
    slot.interaction.status = "answered".into();
    slot.interaction.outcome = Some(outcome.clone());
    let interaction = slot.interaction.clone();
    let tx = slot.answer_tx.take();
    let turn_id = interaction.turn_id.clone();
    let through = st.append_transcript(vec![(
        turn_id,
        TranscriptBody::Interaction {
            interaction: interaction.clone(),
        },
    )])?;
    cell.emit(
        &mut st,
        FrameBody::TranscriptAdvanced {
            through_message_seq: through,
        },
    );
    cell.emit(
        &mut st,
        FrameBody::InteractionClosed {
            interaction_id: input.interaction_id,
            status: "answered".into(),
            outcome: outcome.clone(),
        },
    );
    if let Some(tx) = tx {
        let _ = tx.send(outcome);
    }
    Ok(interaction)
}

pub(super) fn capability_replace(
    host: &Host,
    input: CapabilityInput,
) -> Result<Services, HostError> {
    let cell = host.cell(&input.session_id)?;
    let mut st = cell.lock();
    if input.services.is_empty() {
        // The client left: nobody will answer the calls still waiting for it.
        for (_, call) in st.client_calls.drain() {
            let _ = call
                .tx
                .send(Err("the editor is no longer connected".into()));
        }
    }
    st.client_services = input
        .services
        .iter()
        .map(|s| s.as_str().to_string())
        .collect();
    Ok(Services {
        services: input.services,
    })
}

pub(super) fn client_call_result(host: &Host, input: CallResultInput) -> Result<Empty, HostError> {
    let cell = host.cell(&input.session_id)?;
    let mut st = cell.lock();
    // A late or duplicate result is ignored.
    if let Some(call) = st.client_calls.remove(&input.invocation_id) {
        let tx = call.tx;
        let r = if input.outcome.ok {
            Ok(input.outcome.result)
        } else {
            let msg = input
                .outcome
                .error
                .as_ref()
                .and_then(|e| {
                    e.get("message")
                        .and_then(Value::as_str)
                        .map(String::from)
                        .or_else(|| e.as_str().map(String::from))
                })
                .unwrap_or_else(|| "the editor reported an error".into());
            Err(msg)
        };
        let _ = tx.send(r);
    }
    Ok(Empty {})
}

/// The input of a pending client call (frames carry large inputs by reference).
pub(super) fn client_call_input(host: &Host, input: CallRef) -> Result<CallInput, HostError> {
    let cell = host.cell(&input.session_id)?;
    let st = cell.lock();
    let call = st.client_calls.get(&input.invocation_id).ok_or_else(|| {
        HostError::not_found(format!("pending client call {}", input.invocation_id))
    })?;
    Ok(CallInput {
        service: call.service.clone(),
        input: call.input.clone(),
    })
}
