//! Apache Maka's `_maka/` requests (`maka-adapter-surface.md` §1.2), each a translation onto
//! the host operations our own methods use: its params read into our inputs, our outputs
//! shaped as its results. Where our model cannot express one of its operations the answer is a
//! `-32602` naming it ([`unsupported`]), never a silent success. The method table (`methods.rs`)
//! sends here its `MAKA_METHODS` rows, on a connection in Maka's dialect (the names both
//! adapters use), and the names only Maka's adapter has, in either dialect; params never choose.

use crate::acp::agent::Ctx;
use crate::acp::errors::{self, MakaCode};
use crate::acp::host_link::Connected;
use crate::acp::params::{ParamResult, Params};
use crate::acp::session::AcpSession;
use crate::acp::types::to_json;
use crate::host_api::ops::{self, ArtifactAnswer, ArtifactQueryInput};
use crate::host_api::wire::{Session, TurnSnapshot};
use crate::jsonrpc::ResponseError;
use serde_json::{json, Value};
use std::sync::Arc;

/// Maka's own limits on goals (§1.2), and ours where they are tighter.
const MAKA_MAX_ITERATIONS: u64 = 200;
const OUR_MAX_TURNS: u64 = 100;
const MIN_TOKEN_BUDGET: u64 = 1000;
/// Maka's page and chunk bounds.
const MAX_CONTRIBUTIONS: u64 = 128;
const READ_CHUNK: u64 = 32 * 1024;

/// `-32602` for an operation of Maka's that our model cannot express: says which and why.
pub fn unsupported(operation: &str, why: &str) -> ResponseError {
    ResponseError::invalid_params(format_args!(
        "`{operation}` is Apache Maka's and maka-acp cannot express it: {why}"
    ))
    .with_data(json!({"reason": "unsupported_operation", "operation": operation}))
}

/// A `-32602` naming Maka's decode reason for `operation`.
fn invalid(reason: &str, operation: &str, message: impl std::fmt::Display) -> ResponseError {
    ResponseError::invalid_params(message)
        .with_data(json!({"reason": reason, "operation": operation}))
}

/// A session this connection owns (Maka's ownership rule), else its `unknown_session`.
fn owned(ctx: &Ctx, id: &str) -> Result<Arc<AcpSession>, ResponseError> {
    ctx.session(id).ok_or_else(|| errors::unknown_session(id))
}

fn optional_u64(p: &Params, field: &str) -> ParamResult<Option<u64>> {
    match p.get(field) {
        None => Ok(None),
        Some(_) => p.required_u64(field).map(Some),
    }
}

fn revision_conflict(expected: u64, actual: u64) -> ResponseError {
    MakaCode::RevisionConflict.error_with(
        "It changed since you read it; read it again and retry",
        json!({"code": "revision_conflict", "expectedRevision": expected, "actualRevision": actual}),
    )
}

fn turn_snapshot(t: &TurnSnapshot) -> Value {
    json!({
        "sessionId": t.session_id,
        "turnId": t.turn_id,
        "runId": t.run_id,
        "status": t.status,
    })
}

fn adapter_error(operation: &str, message: impl std::fmt::Display) -> ResponseError {
    ResponseError::invalid_params(message)
        .with_data(json!({"source": "adapter", "operation": operation, "code": "invalid_request"}))
}

/// What Maka's dialect keeps about one connection, in its context
/// ([`crate::acp::connection::Shared::maka`]) and dropped with it: each part bounded per
/// connection, none seen by another connection.
#[derive(Default)]
pub struct Kept {
    made: Made,
    uploads: Uploads,
    armed: ArmedGoals,
}

mod artifacts;
mod goals;
mod memory;
mod plans;
mod sessions;
mod turns;
pub use artifacts::*;
pub use goals::*;
pub use memory::*;
pub use plans::*;
pub use sessions::*;
pub use turns::*;

#[cfg(test)]
mod tests;
