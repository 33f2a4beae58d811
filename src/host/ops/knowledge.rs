//! What the model knows beyond the conversation — memory (`memory.query`, `memory.mutate`) —
//! and what the session used (`usage.query`).

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
