//! Runtime Host errors → JSON-RPC errors. Every mapped error carries
//! `data: {makaCode, retryable, details?}` so clients can switch on the host's code.

use crate::host_api::client::ClientError;
use crate::host_api::wire::ErrorCode;
use crate::jsonrpc::{code, ResponseError};
use serde_json::json;

pub fn from_client(e: &ClientError) -> ResponseError {
    match e {
        ClientError::Transport(msg) => ResponseError::new(
            code::INTERNAL_ERROR,
            format!("The Runtime Host is unavailable: {msg}"),
        )
        .with_data(json!({"makaCode": "host_unavailable", "retryable": true})),
        ClientError::Protocol(msg) => ResponseError::new(
            code::INTERNAL_ERROR,
            "The Runtime Host sent a reply this agent cannot read; the operation did not complete.",
        )
        .with_data(json!({"makaCode": "host_protocol_error", "retryable": false, "details": msg})),
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

pub fn unknown_session(id: &str) -> ResponseError {
    ResponseError::new(code::RESOURCE_NOT_FOUND, format!("Unknown session {id:?}: create it with session/new or open it with session/load or session/resume"))
        .with_data(json!({"makaCode": "not_found", "sessionId": id}))
}
