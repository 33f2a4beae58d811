//! Maka's memory query and mutate kinds over our entries.

use super::*;
// ---- memory ----

pub struct MemoryQuery {
    kind: String,
    session_id: Option<String>,
    revision: Option<u64>,
}

pub fn read_memory_query(p: &Params) -> ParamResult<MemoryQuery> {
    let kind = p.required_str("kind")?;
    if !matches!(
        kind,
        "state" | "entries_start" | "entries_continue" | "document_start" | "document_continue"
    ) {
        return Err(adapter_error(
            "_maka/memory/query",
            format_args!("`kind` {kind:?} is not a memory query"),
        ));
    }
    Ok(MemoryQuery {
        kind: kind.into(),
        session_id: p.optional_str("sessionId")?.map(String::from),
        revision: optional_u64(p, "revision")?,
    })
}

/// `_maka/memory/query`: `state`, and the entries (one page; `entries_continue` at the same
/// revision is empty). Our memory is entries only: the document kinds have no counterpart.
pub fn memory_query(ctx: &Ctx, q: MemoryQuery) -> Result<Value, ResponseError> {
    if q.kind.starts_with("document_") {
        return Err(unsupported(
            &format!("_maka/memory/query {}", q.kind),
            "memory here is a list of entries, not a document; query entries_start",
        ));
    }
    if let Some(id) = &q.session_id {
        owned(ctx, id)?;
    }
    let conn = ctx.host()?;
    let input = ops::MemoryQueryInput {
        session_id: q.session_id.clone(),
    };
    let view = conn.request::<ops::MemoryQuery>(&input)?;
    Ok(match q.kind.as_str() {
        "state" => json!({"kind": "state", "revision": view.revision,
                          "entryCount": view.entries.len()}),
        "entries_continue" if q.revision.is_some_and(|r| r != view.revision) => json!({
            "kind": "revision_changed", "expected": q.revision, "actual": view.revision}),
        kind => json!({
            "kind": "entries_page", "revision": view.revision,
            "entries": if kind == "entries_start" { to_json(&view.entries) } else { json!([]) },
            "nextCursor": null,
        }),
    })
}

pub fn read_memory_mutate(p: &Params) -> ParamResult<(String, ops::MemoryMutateInput)> {
    const OP: &str = "_maka/memory/mutate";
    let kind = p.required_str("kind")?;
    let expected_revision = p.required_u64("expectedRevision")?;
    let change = match kind {
        "remember" => ops::MemoryChange::Add {
            scope: p.optional_str("scope")?.unwrap_or("user").into(),
            session_id: p.optional_str("sessionId")?.map(String::from),
            text: p.required_str("text")?.into(),
            source: Some("user".into()),
        },
        "propose" | "approve" | "reject" | "set_status" | "reset" | "restore_backup"
        | "replace_begin" | "replace_chunk" | "replace_commit" | "replace_abort" => {
            // Read here, refused when served: the precise error names the operation.
            ops::MemoryChange::Forget { id: String::new() }
        }
        other => {
            return Err(adapter_error(
                OP,
                format_args!("`kind` {other:?} is not a memory change"),
            ))
        }
    };
    Ok((
        kind.into(),
        ops::MemoryMutateInput {
            expected_revision,
            change,
        },
    ))
}

/// `_maka/memory/mutate`: `remember` adds an entry; a revision conflict is a result, as
/// Maka's. Proposals, statuses, backups and document replacement have no counterpart here.
pub fn memory_mutate(
    ctx: &Ctx,
    (kind, input): (String, ops::MemoryMutateInput),
) -> Result<Value, ResponseError> {
    if kind != "remember" {
        return Err(unsupported(
            &format!("_maka/memory/mutate {kind}"),
            "memory here is entries added, changed or forgotten at once, without proposals, statuses, backups or a document",
        ));
    }
    // A note for one session is for a session this connection holds, as Maka's are.
    if let ops::MemoryChange::Add {
        session_id: Some(id),
        ..
    } = &input.change
    {
        owned(ctx, id)?;
    }
    let conn = ctx.host()?;
    Ok(match conn.request::<ops::MemoryMutate>(&input)? {
        ops::MemoryOutcome::Committed { revision, entry } => {
            json!({"kind": "committed", "revision": revision, "entry": entry})
        }
        ops::MemoryOutcome::RevisionConflict { expected, actual } => json!({
            "kind": "revision_conflict", "expectedRevision": expected, "actualRevision": actual}),
    })
}
