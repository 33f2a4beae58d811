//! Every error this agent answers with, in one place; the message is one sentence a person can
//! act on, details go in `data`.
//!
//! Which errors carry `data.makaCode` (a [`MakaCode`], with `retryable`), so clients can switch
//! on it: every error about what the agent or the host did — the host's own errors pass its
//! code through ([`from_client`]), and the agent's are made here ([`MakaCode::error`]; nothing
//! else in `acp/` writes `-32603`, `-32002` or `-32000`, and a test checks it). Errors about
//! the request itself carry none, since JSON-RPC's code says it all: `-32600` (invalid request,
//! e.g. before `initialize`), `-32601` (no such method), `-32602` (bad params, naming the field
//! in the message) and `-32800` (cancelled). The JSON-RPC layer's own answers (`-32700` for a
//! line that is not JSON, an oversized line, `-32603` for a handler that never answered, which
//! is a bug) carry none either. Under `--acp` (Maka's dialect)
//! a not-found error is reshaped as Maka's (`maka_dialect::maka_error`).

use crate::host_api::client::ClientError;
use crate::host_api::wire::ErrorCode;
use crate::jsonrpc::{code, ResponseError};
use serde_json::{json, Value};

/// The agent's own error codes (`data.makaCode`). Host errors pass the host's code through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MakaCode {
    /// The Runtime Host cannot be reached (or stopped).
    HostUnavailable,
    /// The host answered something this agent cannot read.
    HostProtocolError,
    NotFound,
    /// The session already runs a prompt.
    SessionBusy,
    /// The host's event-stream slots are full.
    CapacityExceeded,
    /// A configuration write kept conflicting.
    RevisionConflict,
    /// A write kept racing another writer.
    OperationConflict,
    TurnFailed,
    AuthRequired,
    /// `_maka/turn/resume` found no interrupted run it may continue (`data.reason`).
    ResumeParked,
    /// `_maka/turn/steer` with no turn running.
    NoRunningTurn,
    /// `_maka/plan/start` without an approved plan.
    PlanNotApproved,
    /// What the agent could not do for a reason of its own (a config file it could not
    /// write, a state it lost, stopping before the answer): the message says which.
    Internal,
}

impl MakaCode {
    pub const fn as_str(self) -> &'static str {
        match self {
            MakaCode::HostUnavailable => "host_unavailable",
            MakaCode::HostProtocolError => "host_protocol_error",
            MakaCode::NotFound => "not_found",
            MakaCode::SessionBusy => "session_busy",
            MakaCode::CapacityExceeded => "capacity_exceeded",
            MakaCode::RevisionConflict => "revision_conflict",
            MakaCode::OperationConflict => "operation_conflict",
            MakaCode::TurnFailed => "turn_failed",
            MakaCode::AuthRequired => "auth_required",
            MakaCode::ResumeParked => "resume_parked",
            MakaCode::NoRunningTurn => "no_running_turn",
            MakaCode::PlanNotApproved => "plan_not_approved",
            MakaCode::Internal => "internal_error",
        }
    }

    /// Whether trying the same request again later can succeed.
    pub const fn retryable(self) -> bool {
        matches!(
            self,
            MakaCode::HostUnavailable
                | MakaCode::SessionBusy
                | MakaCode::CapacityExceeded
                | MakaCode::RevisionConflict
                | MakaCode::OperationConflict
        )
    }

    const fn rpc_code(self) -> i32 {
        match self {
            MakaCode::NotFound | MakaCode::NoRunningTurn => code::RESOURCE_NOT_FOUND,
            MakaCode::AuthRequired => code::AUTH_REQUIRED,
            _ => code::INTERNAL_ERROR,
        }
    }

    /// The JSON-RPC error: `message` for the person, `data: {makaCode, retryable}`.
    pub fn error(self, message: impl Into<String>) -> ResponseError {
        self.error_with(message, json!({}))
    }

    /// Like [`MakaCode::error`], with more fields merged into `data`.
    pub fn error_with(self, message: impl Into<String>, extra: Value) -> ResponseError {
        let mut data = json!({"makaCode": self.as_str(), "retryable": self.retryable()});
        if let (Some(d), Value::Object(extra)) = (data.as_object_mut(), extra) {
            d.extend(extra);
        }
        ResponseError::new(self.rpc_code(), message).with_data(data)
    }
}

/// A host client error as the client sees it.
pub fn from_client(e: &ClientError) -> ResponseError {
    match e {
        ClientError::Transport(msg) => {
            MakaCode::HostUnavailable.error(format!("The Runtime Host is unavailable: {msg}"))
        }
        ClientError::Protocol(msg) => MakaCode::HostProtocolError.error_with(
            "The Runtime Host sent a reply this agent cannot read; the operation did not complete.",
            json!({"details": msg}),
        ),
        ClientError::Host(h) => {
            let c = match h.code {
                ErrorCode::InvalidRequest | ErrorCode::PayloadTooLarge => code::INVALID_PARAMS,
                ErrorCode::NotFound => code::RESOURCE_NOT_FOUND,
                ErrorCode::OperationUnavailable => code::METHOD_NOT_FOUND,
                _ => code::INTERNAL_ERROR,
            };
            let mut data = json!({"makaCode": h.code.as_str(), "retryable": h.retryable});
            if let Some(d) = &h.details {
                data["details"] = d.clone();
            }
            ResponseError::new(c, h.message.clone()).with_data(data)
        }
    }
}

/// A session this connection has not opened. Worded for both ACP versions: it names only
/// methods both serve (v2 has no `session/load`).
pub fn unknown_session(id: &str) -> ResponseError {
    MakaCode::NotFound.error_with(
        format!("Unknown session {id:?}: start a new one with session/new, or open this one with session/resume"),
        json!({"sessionId": id, "reason": "unknown_session"}),
    )
}

pub fn session_busy(id: &str) -> ResponseError {
    MakaCode::SessionBusy.error(format!(
        "Session {id} is already running a prompt; wait for it or send session/cancel"
    ))
}

/// A `session/prompt` while `queued` prompts already wait behind the running one.
pub fn prompt_queue_full(id: &str, queued: usize) -> ResponseError {
    MakaCode::SessionBusy.error_with(
        format!("Session {id} is running a prompt and {queued} more are waiting, the most it queues; wait for one to finish or send session/cancel"),
        json!({"sessionId": id, "queued": queued}),
    )
}

/// The host's event-stream slots (or this principal's share of them) stayed full: `what`
/// could not be followed; `host_said` is which.
pub fn capacity_exceeded(what: &str, host_said: &str) -> ResponseError {
    MakaCode::CapacityExceeded.error(format!(
        "The Runtime Host has no event stream free to follow {what} ({host_said}). Try again in a moment."
    ))
}
