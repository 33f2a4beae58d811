//! Maka's copy-source, branch and revision requests over our branches.

use super::*;
// ---- sessions: copy source, branch, revision ----

/// A session as Maka's catalog lists it.
fn catalog_item(s: &Session) -> Value {
    let mut item = json!({
        "sessionId": s.id,
        "cwd": s.workspace.path(),
        "updatedAt": crate::acp::projection::iso8601(s.last_used_at),
        "revision": s.revision,
    });
    if let Some(name) = &s.name {
        item["title"] = json!(name);
    }
    item
}

pub struct CopySource {
    session_id: String,
    through_sequence: Option<u64>,
    position: u64,
    max: u64,
}

pub fn read_copy_source(p: &Params) -> ParamResult<CopySource> {
    let max = optional_u64(p, "maxContributions")?.unwrap_or(MAX_CONTRIBUTIONS);
    if max == 0 || max > MAX_CONTRIBUTIONS {
        return Err(invalid(
            "invalid_copy_source_query",
            "_maka/session/copy-source/query",
            format_args!("`maxContributions` must be 1 to {MAX_CONTRIBUTIONS}"),
        ));
    }
    let position = match p.get("position") {
        None => 0,
        Some(Value::Number(_)) => p.required_u64("position")?,
        // An opaque position of ours is the decimal index we handed out.
        Some(Value::String(s)) => s.parse().map_err(|_| {
            invalid(
                "invalid_copy_source_query",
                "_maka/session/copy-source/query",
                "`position` is not one this agent handed out",
            )
        })?,
        Some(_) => {
            return Err(invalid(
                "invalid_copy_source_query",
                "_maka/session/copy-source/query",
                "`position` must be a number or a position string",
            ))
        }
    };
    Ok(CopySource {
        session_id: p.required_str("sessionId")?.into(),
        through_sequence: optional_u64(p, "throughSequence")?,
        position,
        max,
    })
}

/// `_maka/session/copy-source/query` → the turns a branch can copy through, a page at a time,
/// with the revision `branch/create` must name. A turn's `firstSequence` is its position (1
/// for the first turn).
pub fn copy_source(ctx: &Ctx, q: CopySource) -> Result<Value, ResponseError> {
    owned(ctx, &q.session_id)?;
    let conn = ctx.host()?;
    let at = ops::SessionRef {
        session_id: q.session_id.clone(),
    };
    let revision = conn
        .request::<ops::SessionGet>(&at)?
        .session
        .map(|s| s.revision)
        .ok_or_else(|| errors::unknown_session(&q.session_id))?;
    let turns = conn.request::<ops::SessionTurns>(&at)?.turns;
    let through = q.through_sequence.unwrap_or(u64::MAX);
    let eligible: Vec<(u64, &ops::TurnSummary)> = turns
        .iter()
        .enumerate()
        .map(|(i, t)| (i as u64 + 1, t))
        .filter(|(seq, _)| *seq <= through)
        .collect();
    let start = (q.position as usize).min(eligible.len());
    let end = start.saturating_add(q.max as usize).min(eligible.len());
    let contributions: Vec<Value> = eligible[start..end]
        .iter()
        .map(|(seq, t)| {
            json!({
                "turnId": t.turn_id,
                "firstSequence": seq,
                "userPromptPreview": t.title.clone().unwrap_or_default(),
                "latestState": t.status,
            })
        })
        .collect();
    Ok(json!({
        "sessionId": q.session_id,
        "expectedSourceRevision": revision,
        "throughSequence": q.through_sequence,
        "contributions": contributions,
        "nextPosition": (end < eligible.len()).then_some(end),
    }))
}

pub struct BranchCreate {
    source: String,
    target: String,
    source_turn_id: String,
    expected_source_revision: u64,
}

pub fn read_branch_create(p: &Params) -> ParamResult<BranchCreate> {
    Ok(BranchCreate {
        source: p.required_str("sourceSessionId")?.into(),
        target: p.required_str("targetSessionId")?.into(),
        source_turn_id: p.required_str("sourceTurnId")?.into(),
        expected_source_revision: p.required_u64("expectedSourceRevision")?,
    })
}

/// `_maka/session/branch/create` (and `revision/create` with Maka's params): a new session,
/// the client's `targetSessionId`, with the source's conversation through `sourceTurnId` →
/// `{kind: "committed", session}` or `{kind: "source_revision_conflict", expectedRevision,
/// actualRevision}`. The target is this connection's at once (no `session/load` needed).
pub fn branch_create(ctx: &Ctx, b: BranchCreate) -> Result<Value, ResponseError> {
    owned(ctx, &b.source)?;
    if ctx.session(&b.target).is_some() {
        return Err(ResponseError::invalid_params(format_args!(
            "`targetSessionId` {} is a session this connection already has; choose a new id",
            b.target
        ))
        .with_data(json!({"field": "targetSessionId", "reason": "target_owned"})));
    }
    ctx.shared.may_open_session()?;
    let conn = ctx.host()?;
    let input = ops::BranchInput {
        source_session_id: b.source,
        target_session_id: b.target,
        through_turn_id: Some(b.source_turn_id),
        expected_source_revision: Some(b.expected_source_revision),
        workspace: None,
        additional_directories: None,
        mcp_servers: vec![],
        system_prompt: None,
    };
    Ok(match conn.request::<ops::BranchCreate>(&input)? {
        ops::BranchOutcome::Committed { session } => {
            // The target is this connection's now, as Maka's is: it can be prompted at once.
            crate::acp::lifecycle::attach_made(ctx, &conn, &session)?;
            ctx.shared.maka.made.record(&session.id);
            json!({"kind": "committed", "session": catalog_item(&session)})
        }
        ops::BranchOutcome::SourceRevisionConflict { expected, actual } => json!({
            "kind": "source_revision_conflict",
            "expectedRevision": expected,
            "actualRevision": actual,
        }),
    })
}

pub fn read_abandon(p: &Params) -> ParamResult<String> {
    Ok(p.required_str("targetSessionId")?.into())
}

/// The copies one connection made with branch or revision create (in its context,
/// [`Kept`]): the only sessions its `abandon` deletes (a fork, another connection's copy or an
/// older one is kept). Bounded; a copy not recorded is retained, never deleted by mistake.
#[derive(Default)]
pub struct Made(std::sync::Mutex<Vec<String>>);
const MADE_MAX: usize = 4096;

impl Made {
    fn record(&self, id: &str) {
        let mut made = crate::jsonrpc::lock(&self.0);
        if made.len() < MADE_MAX {
            made.push(id.to_string());
        }
    }

    fn contains(&self, id: &str) -> bool {
        crate::jsonrpc::lock(&self.0).iter().any(|m| m == id)
    }

    fn forget(&self, id: &str) {
        crate::jsonrpc::lock(&self.0).retain(|m| m != id);
    }
}

/// `_maka/session/revision/abandon {targetSessionId}`: a copy this connection made (branch
/// or revision create) and still holds is deleted — `abandoned`; any other session of this
/// connection is kept — `retained`; a session it does not hold is Maka's unknown session.
pub fn abandon(ctx: &Ctx, target: String) -> Result<Value, ResponseError> {
    owned(ctx, &target)?;
    if !ctx.shared.maka.made.contains(&target) {
        return Ok(json!({"kind": "retained", "sessionId": target}));
    }
    crate::acp::lifecycle::delete(ctx, &target)?;
    ctx.shared.maka.made.forget(&target);
    Ok(json!({"kind": "abandoned", "sessionId": target}))
}
