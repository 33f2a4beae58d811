//! The `_maka/` extension methods, read here under one convention (`docs/maka-extensions.md`):
//! params read like ACP's (`-32602` naming the field), an unknown session is `-32002`, a host
//! error keeps its code in `data.makaCode`, and every method is listed in
//! `agentCapabilities._meta.maka.methods` ([`METHODS`]). Queries are answered here
//! ([`serve`]); `_maka/turn/resume` runs like a prompt (`turns.rs`).

use super::agent::Ctx;
use super::params::Params;
use crate::host_api::ops::{self, SessionRef};
use crate::jsonrpc::ResponseError;
use serde_json::Value;

/// Every `_maka/` method this agent serves.
pub const METHODS: &[&str] = &["_maka/session/turns", "_maka/turn/resume"];

/// The `_maka/` queries [`serve`] answers (`_maka/turn/resume` is `Request::ResumeTurn`).
pub enum MakaRequest {
    /// The session's turns: id, start, first line of the prompt, status, files changed.
    SessionTurns { session_id: String },
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
            _ => None,
        }
    }
}

/// Runs a `_maka/` method (on a worker).
pub fn serve(ctx: &Ctx, request: MakaRequest) -> Result<Value, ResponseError> {
    match request {
        MakaRequest::SessionTurns { session_id } => {
            let conn = ctx.host()?;
            let list = ctx.call::<ops::SessionTurns>(&conn, &SessionRef { session_id })?;
            Ok(super::types::to_json(&list))
        }
    }
}
