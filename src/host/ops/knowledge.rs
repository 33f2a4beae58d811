//! What the model knows beyond the conversation: memory (`memory.query`, `memory.mutate`).

use crate::host::Host;
use crate::host_api::ops::*;
use crate::host_api::wire::*;

pub(super) fn memory_query(host: &Host, input: MemoryQueryInput) -> Result<MemoryView, HostError> {
    let session = match &input.session_id {
        Some(id) => Some(host.cell(id)?.lock().session.clone()),
        None => None,
    };
    Ok(host.memory.view(session.as_ref()))
}

pub(super) fn memory_mutate(
    host: &Host,
    input: MemoryMutateInput,
) -> Result<MemoryOutcome, HostError> {
    let session = match &input.change {
        MemoryChange::Add {
            session_id: Some(id),
            ..
        } => Some(host.cell(id)?.lock().session.clone()),
        _ => None,
    };
    host.memory
        .mutate(input.expected_revision, input.change, session.as_ref())
}
