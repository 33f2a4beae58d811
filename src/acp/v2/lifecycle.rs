//! The session methods on a v2 connection: v1's operations (`lifecycle`, `configure`), their
//! answers in v2's shapes, and the params only v2 has (`replayFrom`).

use crate::acp::agent::Ctx;
use crate::acp::out::Version;
use crate::acp::params::{ParamResult, Params};
use crate::acp::read::{self, OpenSession};
use crate::acp::types::{to_json, ConfigOptionsResponse, Empty, SessionSetup};
use crate::acp::v2::types as t;
use crate::jsonrpc::ResponseError;
use serde_json::Value;

fn is_v2(ctx: &Ctx) -> bool {
    ctx.shared.version() == Some(Version::V2)
}

/// `session/new`'s or `session/resume`'s answer, in the connection's version.
pub fn setup_answer(ctx: &Ctx, result: &SessionSetup) -> Value {
    if !is_v2(ctx) {
        return to_json(result);
    }
    let config_options = result
        .config_options
        .as_deref()
        .map(super::projection::config::options)
        .unwrap_or_default();
    match &result.session_id {
        Some(id) => to_json(&t::NewSessionResponse {
            session_id: id.clone(),
            config_options,
        }),
        None => to_json(&t::ResumeSessionResponse { config_options }),
    }
}

/// `session/set_config_option`'s answer, in the connection's version.
pub fn options_answer(ctx: &Ctx, response: ConfigOptionsResponse) -> Value {
    if !is_v2(ctx) {
        return to_json(&response);
    }
    to_json(&t::SetSessionConfigOptionResponse {
        config_options: super::projection::config::options(&response.config_options),
    })
}

/// `session/resume` on v2: v1's resume, with the transcript replayed when `replayFrom` is
/// `{"type": "start"}` (v2 has no `session/load`).
pub fn read_resume(p: &Params) -> ParamResult<OpenSession> {
    let replay = match p.optional_object("replayFrom", "replayFrom")? {
        None => false,
        Some(from) => match from.required_str("type")? {
            "start" => true,
            other => {
                return Err(ResponseError::invalid_params(format_args!(
                "`replayFrom.type` {other:?} is not supported: use \"start\", or omit replayFrom"
            )))
            }
        },
    };
    read::open_session(p, replay)
}

/// `session/close` on v2: closing a session this connection does not hold succeeds (v2 says
/// it SHOULD); one it holds is closed as on v1.
pub fn close(ctx: &Ctx, id: &str) -> Result<Value, ResponseError> {
    if ctx.session(id).is_none() {
        return Ok(to_json(&Empty {}));
    }
    crate::acp::lifecycle::close(ctx, id)
}

/// `tool_call/cancel`'s and `terminal/cancel`'s params: the session and the call (a display
/// terminal is its command's call: `term_<toolCallId>`).
pub struct CallRef {
    session_id: String,
    tool_call_id: String,
}

pub fn read_tool_call(p: &Params) -> ParamResult<CallRef> {
    Ok(CallRef {
        session_id: p.required_str("sessionId")?.to_string(),
        tool_call_id: p.required_str("toolCallId")?.to_string(),
    })
}

pub fn read_terminal(p: &Params) -> ParamResult<CallRef> {
    let terminal = p.required_str("terminalId")?;
    let tool_call_id = terminal
        .strip_prefix("term_")
        .filter(|id| !id.is_empty())
        .ok_or_else(|| {
            ResponseError::invalid_params(format_args!(
                "`terminalId` {terminal:?} is not a terminal of this agent (they are named term_<toolCallId>)"
            ))
        })?;
    Ok(CallRef {
        session_id: p.required_str("sessionId")?.to_string(),
        tool_call_id: tool_call_id.to_string(),
    })
}

/// Cancels one running call (a command): it ends `cancelled`, the turn goes on. Only a call
/// shown with `capabilities.cancel`; any other is `-32602` saying why.
pub fn cancel_call(ctx: &Ctx, call: CallRef) -> Result<Value, ResponseError> {
    use crate::host_api::ops::{ToolCancel, ToolCancelInput, ToolCancelOutcome as Outcome};
    if ctx.session(&call.session_id).is_none() {
        return Err(crate::acp::errors::unknown_session(&call.session_id));
    }
    let input = ToolCancelInput {
        session_id: call.session_id,
        tool_call_id: call.tool_call_id.clone(),
    };
    match ctx.host()?.request::<ToolCancel>(&input)? {
        Outcome::Cancelled => Ok(to_json(&Empty {})),
        Outcome::NotCancellable => Err(ResponseError::invalid_params(format_args!(
            "Tool call {} cannot be cancelled alone; cancel the turn with session/cancel",
            call.tool_call_id
        ))),
        Outcome::Unknown => Err(ResponseError::invalid_params(format_args!(
            "Tool call {} is not running (it finished, or never started)",
            call.tool_call_id
        ))),
    }
}
