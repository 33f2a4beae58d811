//! The host's delegated calls (`client_call` frames) performed in the editor: files through
//! `fs/read_text_file` / `fs/write_text_file` (so the agent sees unsaved buffers and the editor
//! shows writes at once) and commands in real editor terminals (`terminal/*`). Each runs on a
//! short-lived thread; the result goes back with `client.call.result`.
//!
//! Terminals are tracked per session from `terminal/create` to `terminal/release`, so that one
//! the host could not release (a stop, a lost host, a closed session, the client leaving) is
//! released by the adapter: every terminal is released on every exit path.

use super::connection::Shared;
use super::host_link::Connected;
use super::session::AcpSession;
use crate::host_api::ops::{
    CallOutcome, CallRef, CallResultInput, ClientCallInput, ClientCallResult, ClientService,
};
use crate::jsonrpc::{code, ResponseError};
use serde_json::{json, Value};
use std::sync::Arc;

pub fn spawn(session: Arc<AcpSession>, shared: Arc<Shared>, conn: Connected, call: Call) {
    let name = format!("acp-call-{}", call.invocation_id);
    // Without it the call stays pending; the host times it out.
    let _ = crate::threads::spawn(name, move || run(&session, &shared, &conn, call));
}

use super::projection::EditorCall as Call;

fn run(session: &Arc<AcpSession>, shared: &Arc<Shared>, conn: &Connected, mut call: Call) {
    if call.input_ref {
        let fetched = conn.call::<ClientCallInput>(&CallRef {
            session_id: session.id.clone(),
            invocation_id: call.invocation_id.clone(),
        });
        match fetched {
            Ok(v) => call.input = v.input,
            Err(e) => {
                // Withdrawn meanwhile (the turn stopped), or the host is gone: nothing to do.
                log::debug!("client.call.input {}: {e}", call.invocation_id);
                return;
            }
        }
    }
    let failed = |message: String| CallOutcome {
        ok: false,
        result: Value::Null,
        error: Some(json!({ "message": message })),
    };
    let done = |result: Value| CallOutcome {
        ok: true,
        result,
        error: None,
    };
    let outcome = match call.request(&session.id) {
        Err(e) => failed(e),
        // The client stopped reading requests' answers (stdin EOF): a release still goes out,
        // fire and forget, so no editor terminal is left behind.
        Ok(("terminal/release", params)) if shared.calls.is_closed() => {
            shared.calls.send_unawaited("terminal/release", params);
            forget_terminal(session, &call.input);
            done(json!({}))
        }
        Ok((method, params)) => {
            // Sent, then tracked: a cancel in between is seen by `track` and withdrawn here.
            let pending = shared.calls.call(method, params);
            if !session.track(&call.invocation_id, pending.id.clone()) {
                shared.calls.cancel(&pending.id);
            }
            let reply = pending.wait().and_then(|r| {
                check_reply(method, &r).map_err(|m| ResponseError::new(code::INTERNAL_ERROR, m))?;
                Ok(r)
            });
            session.untrack(&call.invocation_id);
            match reply {
                Ok(result) => {
                    after_success(session, shared, &call, &result);
                    // `fs/write_text_file` may answer `null`; the host wants an object.
                    done(if result.is_null() { json!({}) } else { result })
                }
                Err(e) => {
                    if call.service == "terminal.release" {
                        forget_terminal(session, &call.input);
                    }
                    failed(e.message)
                }
            }
        }
    };
    let input = CallResultInput {
        session_id: session.id.clone(),
        invocation_id: call.invocation_id.clone(),
        outcome,
    };
    if let Err(e) = conn.call::<ClientCallResult>(&input) {
        log::debug!("client.call.result {}: {e}", call.invocation_id);
    }
}

/// A reply that is not a success in the shape the schema gives is a failure with the client's
/// words: avante answers a failed write with an error *string* as the result, which must not
/// count as "written".
fn check_reply(method: &str, result: &Value) -> Result<(), String> {
    let what = |v: &Value| match v {
        Value::String(s) => format!("the editor answered {method} with: {s}"),
        other => format!(
            "the editor answered {method} with {} instead of a result object",
            crate::jsonrpc::message::json_type(other)
        ),
    };
    match method {
        // `null` is tolerated (Toad answers writes with it).
        "fs/write_text_file" | "terminal/kill" | "terminal/release"
            if result.is_object() || result.is_null() =>
        {
            Ok(())
        }
        "fs/read_text_file" if result.get("content").is_some_and(Value::is_string) => Ok(()),
        "terminal/create" if result.get("terminalId").is_some_and(Value::is_string) => Ok(()),
        "terminal/output" | "terminal/wait_for_exit" if result.is_object() => Ok(()),
        _ => Err(what(result)),
    }
}

fn after_success(session: &Arc<AcpSession>, _shared: &Arc<Shared>, call: &Call, result: &Value) {
    match call.service.as_str() {
        "terminal.create" => {
            let Some(terminal_id) = result.get("terminalId").and_then(Value::as_str) else {
                return;
            };
            session.note_terminal(terminal_id, true);
            // Embed the live terminal in the tool call so the editor shows it as it runs.
            if let Some(tool) = &call.tool_call_id {
                // Editor terminals exist only on v1 (v2 has no client terminals).
                session.emit_v1(|view| (vec![view.attach_terminal(tool, terminal_id)], ()));
            }
        }
        "terminal.release" => forget_terminal(session, &call.input),
        _ => {}
    }
}

fn forget_terminal(session: &Arc<AcpSession>, input: &Value) {
    if let Some(id) = input.get("terminalId").and_then(Value::as_str) {
        session.note_terminal(id, false);
    }
}

/// Releases every terminal of `session` the host did not release (fire and forget).
pub fn release_all(session: &Arc<AcpSession>, shared: &Arc<Shared>) {
    let ids = session.take_terminals();
    for id in ids {
        log::info!("releasing terminal {id} of session {}", session.id);
        let params = json!({"sessionId": session.id, "terminalId": id});
        if shared.calls.is_closed() {
            // The client closed stdin (it may still read stdout): the call table no longer
            // takes requests, but the release must still go out.
            shared.calls.send_unawaited("terminal/release", params);
        } else {
            // Nobody waits for the answer; the call table drops it when it comes.
            let _ = shared.calls.call("terminal/release", params);
        }
    }
}

/// The services this client can perform for the host, for `client.capability.replace`.
pub fn services(caps: &super::initialize::ClientCapabilities) -> Vec<ClientService> {
    let mut s = vec![];
    if caps.fs_read_text_file {
        s.push(ClientService::ReadTextFile);
    }
    if caps.fs_write_text_file {
        s.push(ClientService::WriteTextFile);
    }
    if caps.terminal {
        s.push(ClientService::Terminal);
    }
    s
}
