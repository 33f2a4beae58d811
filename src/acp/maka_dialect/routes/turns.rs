//! Maka's `_maka/turn/resume`, answered at admission.

use super::*;
// ---- turns ----

pub struct Resume {
    session_id: String,
    source_run_id: Option<String>,
    high_water: Option<u64>,
}

pub fn read_resume(p: &Params) -> ParamResult<Resume> {
    let source_run_id = p.optional_str("sourceRunId")?.map(String::from);
    let high_water = optional_u64(p, "expectedRuntimeEventHighWater")?;
    if high_water.is_some() && source_run_id.is_none() {
        return Err(invalid(
            "invalid_resume_query",
            "_maka/turn/resume",
            "`expectedRuntimeEventHighWater` needs `sourceRunId`",
        ));
    }
    Ok(Resume {
        session_id: p.required_str("sessionId")?.into(),
        source_run_id,
        high_water,
    })
}

/// `_maka/turn/resume` as Maka answers it: at admission, `{kind: "parked", plan}` or `{kind:
/// "started", turn, sourceRunId, sourceRuntimeEventHighWater}`; the run's output then streams
/// as `session/update`s and its end is `_maka/turn/status` (or our `_maka/turn_state`).
pub fn resume(ctx: &Ctx, r: Resume) -> Result<Value, ResponseError> {
    let session = owned(ctx, &r.session_id)?;
    let conn = ctx.host()?;
    let parked = |reason: &str| {
        json!({"kind": "parked", "plan": {
            "sessionId": r.session_id, "disposition": "parked", "reason": reason}})
    };
    let query = ops::SessionRef {
        session_id: r.session_id.clone(),
    };
    let (run, high_water) = match conn.request::<ops::ResumeQuery>(&query)? {
        ops::ResumeDisposition::Parked { reason } => return Ok(parked(&reason)),
        ops::ResumeDisposition::Ready {
            source_run_id,
            source_high_water,
            ..
        } => (source_run_id, source_high_water),
    };
    // The client's view of the run must still be the latest: else it is parked, as Maka's.
    if r.source_run_id.as_ref().is_some_and(|s| *s != run)
        || r.high_water.is_some_and(|h| h != high_water)
    {
        return Ok(parked("resume_candidate_missing"));
    }
    if session.prompt_turn().is_some() {
        return Ok(parked("session_busy"));
    }
    let turn_id = format!("t_{}", crate::host_api::random_hex(8));
    let input = ops::ResumeStartInput {
        session_id: r.session_id.clone(),
        turn_id: turn_id.clone(),
        source_run_id: run.clone(),
        source_high_water: high_water,
    };
    let started = crate::acp::turns::start_followed(ctx, &session, &turn_id, |conn| {
        conn.request::<ops::ResumeStart>(&input)
    })?;
    Ok(match started {
        ops::StartOutcome::Parked { reason } => {
            session.expect_turn(&turn_id, false);
            parked(&reason)
        }
        // Never: a resume is not queued.
        ops::StartOutcome::Queued { .. } => {
            session.expect_turn(&turn_id, false);
            parked("session_busy")
        }
        ops::StartOutcome::Started { turn } => json!({
            "kind": "started",
            "turn": turn_snapshot(&turn),
            "sourceRunId": run,
            "sourceRuntimeEventHighWater": high_water,
        }),
    })
}
