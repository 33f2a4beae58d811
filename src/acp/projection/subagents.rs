//! A delegation as ACP's subagent session (unstable; only for a client that advertises
//! `clientCapabilities.subagents`): the `delegate` call of the parent session stays its tool
//! call, and the agent it runs becomes a child session of its own —
//!
//! - announced on the parent (`subagent_update`: the agent's name, the task) when the call
//!   starts, before anything of the child is shown;
//! - the task is the child's first message, from the parent (`session_message`);
//! - its work state is patched on the parent: `running` when the call runs, `requires_action`
//!   while one of its dialogs waits, `idle` with the stop reason when the call settles;
//! - its text streams as its answer to the parent (`session_message_chunk`), and the answer
//!   as settled replaces it (`session_message` with the content): live and replayed, the
//!   child ends with the same answer (the streamed pieces are not stored, the answer is);
//! - its tool calls and their dialogs carry the child's session id.
//!
//! The child's id is the parent's and the call's, so a replay names the same child.

use crate::acp::types::{
    ChildError, ChildState, ContentBlock, SessionMessage, SessionUpdate, Subagent,
};
use crate::host_api::wire::ToolStatus;
use serde_json::Value;

/// Whether a `delegate` call's arguments name an agent and a task: only such a call can start
/// one (any other fails at once, and is shown as the failed tool call it is).
pub fn names_a_task(args: &Value) -> bool {
    let named = |k| {
        args.get(k)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.trim().is_empty())
    };
    named("agent") && named("task")
}

/// The child session a delegation call runs in.
pub fn child_id(parent: &str, tool_call_id: &str) -> String {
    format!("{parent}:{tool_call_id}")
}

/// The updates that start a child: its announcement (on the parent), then the task (on the
/// child).
pub fn started(parent: &str, child: &str, tool_call_id: &str, args: &Value) -> Vec<SessionUpdate> {
    let agent = args.get("agent").and_then(Value::as_str);
    let task = args.get("task").and_then(Value::as_str).unwrap_or("");
    let mut out = vec![SessionUpdate::SubagentUpdate(Subagent {
        session_id: child.to_string(),
        title: agent.map(str::to_string),
        description: (!task.is_empty()).then(|| short(task, 200)),
        state: None,
    })];
    if !task.is_empty() {
        out.push(
            SessionUpdate::SessionMessage(SessionMessage {
                message_id: task_id(tool_call_id),
                sender_session_id: Some(parent.to_string()),
                recipient_session_id: None,
                content: Some(vec![text(task)]),
            })
            .in_session(Some(child)),
        );
    }
    out
}

/// The child's work state, on the parent.
pub fn state(child: &str, state: ChildState) -> SessionUpdate {
    SessionUpdate::SubagentUpdate(Subagent {
        session_id: child.to_string(),
        title: None,
        description: None,
        state: Some(state),
    })
}

/// `running` or `requires_action`.
pub fn working(state: &'static str) -> ChildState {
    ChildState {
        state,
        stop_reason: None,
        error: None,
    }
}

/// Idle, with why its work stopped (a failure's message as a JSON-RPC error).
pub fn idle(status: ToolStatus, why: &str) -> ChildState {
    let (reason, error) = match status {
        ToolStatus::Completed => ("end_turn", None),
        ToolStatus::Cancelled => ("cancelled", None),
        ToolStatus::Failed => {
            let line = why.lines().find(|l| !l.trim().is_empty()).unwrap_or(why);
            let code = crate::jsonrpc::code::INTERNAL_ERROR;
            (
                "error",
                Some(ChildError {
                    code,
                    message: short(line, 300),
                }),
            )
        }
    };
    ChildState {
        state: "idle",
        stop_reason: Some(reason),
        error,
    }
}

/// A piece of the child's answer, as it streams (on the child).
pub fn answer_chunk(child: &str, tool_call_id: &str, piece: &str) -> SessionUpdate {
    SessionUpdate::SessionMessageChunk {
        message_id: answer_id(tool_call_id),
        content: text(piece),
    }
    .in_session(Some(child))
}

/// The child's answer as settled, to the parent (on the child): it replaces what streamed.
pub fn answer(parent: &str, child: &str, tool_call_id: &str, answer: &str) -> SessionUpdate {
    SessionUpdate::SessionMessage(SessionMessage {
        message_id: answer_id(tool_call_id),
        sender_session_id: None,
        recipient_session_id: Some(parent.to_string()),
        content: Some(if answer.is_empty() {
            vec![]
        } else {
            vec![text(answer)]
        }),
    })
    .in_session(Some(child))
}

fn task_id(tool_call_id: &str) -> String {
    format!("{tool_call_id}.task")
}

fn answer_id(tool_call_id: &str) -> String {
    format!("{tool_call_id}.answer")
}

fn text(t: &str) -> ContentBlock {
    ContentBlock::Text {
        text: t.to_string(),
    }
}

/// At most `max` bytes of `s`, cut on a character boundary, with `…` when anything was cut.
fn short(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    format!("{}…", crate::host_api::head(s, max).trim_end())
}
