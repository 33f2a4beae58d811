//! The model's view of the session: the transcript as chat messages, and what it is told a
//! tool returned.

use super::*;
use crate::host_api::wire::{SystemPrompt, SystemPromptMode, ToolStatus};

/// What the model is told a tool returned.
pub fn result_for_model(status: ToolStatus, result: &ToolResultContent) -> String {
    let body = match result {
        ToolResultContent::Text { text } | ToolResultContent::Agent { text, .. } => text.clone(),
        ToolResultContent::FileEdit { diff } => {
            format!("Edited {}.\n{}", diff.path, diff.unified_diff)
        }
        ToolResultContent::FileWrite { path, bytes, .. } => {
            format!("Wrote {bytes} bytes to {path}.")
        }
        ToolResultContent::Terminal {
            output,
            exit_code,
            signal,
            timed_out,
            output_truncated,
            full_output_artifact_id,
            ..
        } => {
            let mut s = String::new();
            match (output_truncated, full_output_artifact_id) {
                (true, Some(id)) => s.push_str(&format!(
                    "[output truncated; showing the tail. The whole output is artifact {id}: read it with read_artifact]\n"
                )),
                (true, None) => s.push_str("[output truncated; showing the tail]\n"),
                _ => {}
            }
            s.push_str(output);
            if *timed_out {
                s.push_str("\n[timed out: the command was killed]");
            } else {
                match (exit_code, signal) {
                    (Some(c), _) => s.push_str(&format!("\n[exit code {c}]")),
                    (None, Some(sig)) => s.push_str(&format!("\n[killed by {sig}]")),
                    (None, None) => s.push_str("\n[exit status unknown]"),
                }
            }
            s
        }
        ToolResultContent::Json { value } => match value.get("summary").and_then(Value::as_str) {
            Some(summary) => summary.to_string(),
            None => value.to_string(),
        },
    };
    if status == ToolStatus::Completed {
        body
    } else {
        format!("[{}] {body}", status.as_str())
    }
}

/// A rough token count (4 bytes per token) for context figures when the provider gives none.
pub(super) fn estimate_tokens(messages: &[Value]) -> u64 {
    messages
        .iter()
        .map(|m| m.to_string().len() as u64)
        .sum::<u64>()
        / 4
}

/// The system prompt of a session's turns. The built-in base prompt; `context` (instruction
/// files and memory, `host::memory::compose`); and the client's own (`systemPrompt`): `append`
/// adds it after all of these, `override` takes the base prompt's place. What the client
/// cannot replace is said in both modes: the host's rules (the workspace, the gate), and the
/// instruction files and memory. The gate itself is code, not words: no prompt lifts it.
pub fn system_text(cwd: &Path, context: &str, client: Option<&SystemPrompt>) -> String {
    let base = format!(
        "You are Maka, a careful coding agent. You work in {} and use the tools to read, search, edit and run things there. \
         Keep the user informed briefly; use update_plan for multi-step work; ask_user when a decision is theirs; \
         remember what the user asks you to keep in mind across sessions.",
        cwd.display()
    );
    match client {
        None => format!("{base}{context}"),
        Some(SystemPrompt {
            mode: SystemPromptMode::Append,
            text,
        }) => format!("{base}{context}\n\nInstructions from the client:\n{text}"),
        Some(SystemPrompt {
            mode: SystemPromptMode::Override,
            text,
        }) => format!(
            "{text}\n\nHost rules (always in force): you work in {}. Every tool call passes the session's permission mode and folder boundary; a call that is refused is final, so do not try to reach the same effect another way.{context}",
            cwd.display()
        ),
    }
}

/// The model's context: a system prompt plus the transcript as chat messages. Tool calls that
/// never got a result (a stopped turn) get a placeholder result so the history stays valid.
/// `context` is appended to the system prompt: instruction files and memory
/// (`host::memory::compose`).
pub fn build_messages(system: &str, items: &[crate::host_api::wire::TranscriptItem]) -> Vec<Value> {
    let mut msgs = vec![json!({"role": "system", "content": system})];
    // The last summary stands for what came before it, or, automatic, for the items through
    // `throughMessageSeq` (the running turn's items stay after it).
    let summary = items
        .iter()
        .rposition(|i| matches!(i.body, TranscriptBody::Summary { .. }));
    let through = summary.and_then(|at| match &items[at].body {
        TranscriptBody::Summary {
            through_message_seq,
            ..
        } => *through_message_seq,
        _ => None,
    });
    let (start, kept_after) = match (summary, through) {
        (Some(at), Some(through)) => {
            let first = items.partition_point(|i| i.message_seq <= through);
            (first.min(at), Some(at))
        }
        (Some(at), None) => (at, None),
        (None, _) => (0, None),
    };
    // An automatic compaction's summary goes in front of the items it kept.
    if let Some(at) = kept_after {
        push_summary(&mut msgs, &items[at].body);
    }
    let mut open_calls: Vec<String> = Vec::new();
    // Host id → the id the model gave the call (the model sees only its own ids).
    let mut provider_ids: std::collections::HashMap<&str, &str> = Default::default();
    let mut delegated: std::collections::HashSet<&str> = Default::default();
    let close_open = |msgs: &mut Vec<Value>, open: &mut Vec<String>| {
        for id in open.drain(..) {
            msgs.push(json!({"role": "tool", "tool_call_id": id, "content": "[no result: the turn was stopped]"}));
        }
    };
    for (at, item) in items.iter().enumerate().skip(start) {
        match &item.body {
            // Already in front (an automatic compaction's summary).
            TranscriptBody::Summary { .. } if kept_after == Some(at) => {}
            body @ TranscriptBody::Summary { .. } => push_summary(&mut msgs, body),
            TranscriptBody::User { content, .. } => {
                close_open(&mut msgs, &mut open_calls);
                msgs.push(json!({"role": "user", "content": user_text(content)}));
            }
            TranscriptBody::Assistant { text, .. } => {
                close_open(&mut msgs, &mut open_calls);
                msgs.push(
                    json!({"role": "assistant", "content": text.clone().unwrap_or_default()}),
                );
            }
            // A subagent's own call (and, below, its result) is its agent's work, not the
            // model's: the model made the `delegate` call, whose result says what came of it.
            TranscriptBody::ToolCall {
                tool_call_id,
                parent_tool_call_id: Some(_),
                ..
            } => {
                delegated.insert(tool_call_id.as_str());
            }
            TranscriptBody::ToolResult { tool_call_id, .. }
                if delegated.contains(tool_call_id.as_str()) => {}
            TranscriptBody::ToolCall {
                tool_call_id,
                tool_name,
                args,
                provider_call_id,
                ..
            } => {
                let model_id = provider_call_id.as_deref().unwrap_or(tool_call_id);
                provider_ids.insert(tool_call_id, model_id);
                let call = json!({"id": model_id, "type": "function", "function": {"name": tool_name, "arguments": args.to_string()}});
                let attach = matches!(msgs.last(), Some(m) if m["role"] == "assistant");
                if !attach {
                    msgs.push(json!({"role": "assistant", "content": Value::Null}));
                }
                if let Some(last) = msgs.last_mut() {
                    match last.get_mut("tool_calls").and_then(Value::as_array_mut) {
                        Some(list) => list.push(call),
                        None => last["tool_calls"] = json!([call]),
                    }
                }
                open_calls.push(model_id.to_string());
            }
            TranscriptBody::ToolResult {
                tool_call_id,
                status,
                result,
                ..
            } => {
                let model_id = provider_ids
                    .get(tool_call_id.as_str())
                    .copied()
                    .unwrap_or(tool_call_id);
                if let Some(i) = open_calls.iter().position(|id| id == model_id) {
                    open_calls.remove(i);
                }
                msgs.push(json!({"role": "tool", "tool_call_id": model_id, "content": result_for_model(*status, result)}));
            }
            _ => {}
        }
    }
    close_open(&mut msgs, &mut open_calls);
    msgs
}

/// A `summary` item as the model reads it.
fn push_summary(msgs: &mut Vec<Value>, body: &TranscriptBody) {
    if let TranscriptBody::Summary { text, .. } = body {
        msgs.push(summary_message(text));
    }
}

/// A compaction's summary as a message of the model's context.
pub(super) fn summary_message(text: &str) -> Value {
    json!({"role": "user", "content": format!("Summary of the earlier conversation:\n{text}")})
}

pub(super) fn user_text(content: &MessageContent) -> String {
    let mut text = content.text.clone();
    for a in &content.attachments {
        match (&a.artifact_id, &a.text, &a.uri) {
            (Some(id), _, _) => text.push_str(&format!(
                "\n\n[attached {} {}: stored as artifact {id}; read it with read_artifact]",
                a.kind, a.name
            )),
            (None, Some(t), uri) => {
                text.push_str(&format!("\n\n[{}]\n{t}", uri.as_deref().unwrap_or(&a.name)))
            }
            (None, None, _) => text.push_str(&format!("\n\n[attached {} {}]", a.kind, a.name)),
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_api::wire::{ToolResultContent, ToolStatus, TranscriptItem};

    fn item(n: u64, body: TranscriptBody) -> TranscriptItem {
        TranscriptItem {
            message_seq: n,
            ts: 0,
            turn_id: "t".into(),
            body,
        }
    }

    fn call(id: &str, name: &str, parent: Option<&str>) -> TranscriptBody {
        TranscriptBody::ToolCall {
            tool_call_id: id.into(),
            tool_name: name.into(),
            title: id.into(),
            activity_kind: "tool".into(),
            args: json!({"id": id}),
            locations: vec![],
            provider_call_id: None,
            parent_tool_call_id: parent.map(String::from),
            name: None,
        }
    }

    fn result(id: &str) -> TranscriptBody {
        TranscriptBody::ToolResult {
            tool_call_id: id.into(),
            status: ToolStatus::Completed,
            result: ToolResultContent::Text {
                text: format!("{id} done"),
            },
            truncated: false,
            ran: true,
        }
    }

    /// The model sees the delegation it made and its result, never the subagent's own calls
    /// (which the host records under the delegate call, named as their agent named them).
    #[test]
    fn a_subagents_calls_are_not_the_models() {
        let items = [
            item(1, call("d", "delegate", None)),
            item(2, call("d.1", "shell", Some("d"))),
            item(3, call("d.2", "", Some("d"))),
            item(4, result("d.1")),
            item(5, result("d.2")),
            item(6, result("d")),
        ];
        let msgs = build_messages(&system_text(Path::new("/w"), "", None), &items);
        let calls: Vec<&Value> = msgs
            .iter()
            .filter_map(|m| m.get("tool_calls"))
            .flat_map(|c| c.as_array().into_iter().flatten())
            .collect();
        assert_eq!(calls.len(), 1, "{msgs:#?}");
        assert_eq!(calls[0]["function"]["name"], "delegate");
        let results: Vec<&Value> = msgs.iter().filter(|m| m["role"] == "tool").collect();
        assert_eq!(results.len(), 1, "{msgs:#?}");
        assert_eq!(results[0]["tool_call_id"], "d");
    }
}
