//! Host interactions shown in the editor. Each runs on its own short-lived thread, so a dialog
//! waiting for the user never stalls streaming (of this or any other session):
//!
//! - `permission` and `sandbox_boundary` → `session/request_permission` with the tool call's
//!   details and options whose labels say their scope;
//! - `question` → `elicitation/create` (form) when the client supports it. Without it the
//!   question is never put in a permission dialog: clients pick options by kind and
//!   auto-approvers answer them, which would answer for the person. The host is told the client
//!   cannot show questions and the model asks in its reply instead.
//!
//! The answer goes to `interaction.answer`. A client answer of `cancelled` (or an error) after
//! our own `session/cancel` sends nothing — the host closes the interaction when it stops the
//! turn; otherwise it counts as deny / no answer. Nothing stays pending forever: an interaction
//! that cannot be shown is answered "deny" / "no answer" at once.

use super::host_link::Connected;
use super::projection::{diff_content, text_content};
use super::session::{AcpSession, Shared};
use crate::host_api::wire::{Interaction, InteractionAnswer, InteractionRequest, Question};
use crate::jsonrpc::CallResult;
use serde_json::{json, Value};
use std::sync::Arc;

const ALLOW_ONCE: &str = "allow_once";
const REJECT: &str = "reject";

pub fn spawn(
    session: Arc<AcpSession>,
    shared: Arc<Shared>,
    conn: Connected,
    interaction: Interaction,
) {
    let name = format!("acp-ask-{}", interaction.interaction_id);
    let spawned = std::thread::Builder::new()
        .name(name)
        .spawn(move || run(&session, &shared, &conn, interaction));
    if let Err(e) = spawned {
        log::error!("cannot start an interaction thread: {e}");
    }
}

fn run(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    conn: &Connected,
    interaction: Interaction,
) {
    let id = interaction.interaction_id.clone();
    let answer = match &interaction.request {
        InteractionRequest::Permission { .. } | InteractionRequest::SandboxBoundary { .. } => {
            let params = permission_params(&session.id, &interaction.request);
            match ask(session, shared, &id, "session/request_permission", params) {
                Answered(v) => Some(permission_answer(&interaction.request, &v)),
                Withdrawn => None,
                Refused => Some(deny(&interaction.request)),
            }
        }
        InteractionRequest::Question {
            tool_call_id,
            questions,
        } => ask_questions(session, shared, &id, tool_call_id, questions),
    };
    let Some(answer) = answer else { return };
    let input = json!({"sessionId": session.id, "interactionId": id, "answer": answer});
    if let Err(e) = conn.client.op("interaction.answer", &input) {
        // Already resolved (closed by a stop, answered elsewhere) is expected, not an error.
        log::debug!("interaction.answer {id}: {e}");
    }
}

enum Reply {
    /// The client answered.
    Answered(Value),
    /// Withdrawn by our own cancel, or closed by the host: send nothing.
    Withdrawn,
    /// The client refused or failed: deny / no answer.
    Refused,
}
use Reply::*;

/// Sends one agent→client request for interaction `id` and waits for the reply.
fn ask(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    id: &str,
    method: &str,
    params: Value,
) -> Reply {
    let call = {
        let mut st = session.lock();
        if st.closed {
            return Withdrawn;
        }
        let call = shared.calls.call(method, params);
        st.outstanding.insert(id.to_string(), call.id.clone());
        call
    };
    let reply: CallResult = call.wait();
    let mut st = session.lock();
    // Still registered → nobody withdrew it.
    let withdrawn = st.outstanding.remove(id).is_none();
    let cancelling = st.prompt.as_ref().is_some_and(|p| p.cancel_requested) || st.closed;
    drop(st);
    match reply {
        Ok(v)
            if v.pointer("/outcome/outcome") == Some(&json!("cancelled"))
                && (cancelling || withdrawn) =>
        {
            Withdrawn
        }
        Ok(v) => Answered(v),
        Err(_) if cancelling || withdrawn => Withdrawn,
        Err(e) => {
            log::warn!("the client failed {method} for interaction {id}: {e}");
            Refused
        }
    }
}

fn permission_params(session_id: &str, request: &InteractionRequest) -> Value {
    match request {
        InteractionRequest::Permission {
            tool_call_id,
            title,
            review,
            args,
            locations,
            diff,
            remember_for_turn_allowed,
            ..
        } => {
            let kind = match review.as_str() {
                "command" => "execute",
                "edit" | "write" => "edit",
                "plan" => "switch_mode",
                _ => "other",
            };
            let mut tool_call = json!({"toolCallId": tool_call_id, "title": title, "kind": kind, "status": "pending"});
            if let Some(a) = args {
                tool_call["rawInput"] = a.clone();
            }
            let locs: Vec<Value> = locations
                .iter()
                .filter(|l| l.path.starts_with('/'))
                .map(|l| json!({"path": l.path}))
                .collect();
            if !locs.is_empty() {
                tool_call["locations"] = json!(locs);
            }
            if let Some(d) = diff {
                tool_call["content"] = json!([diff_content(d)]);
            }
            if review == "plan" {
                // Plan mode: approving the plan is what lets the agent start changing things.
                let options = [
                    json!({"optionId": ALLOW_ONCE, "name": "Approve the plan and start", "kind": "allow_once"}),
                    json!({"optionId": REJECT, "name": "Keep planning", "kind": "reject_once"}),
                ];
                return json!({"sessionId": session_id, "toolCall": tool_call, "options": options});
            }
            // One option per kind: clients map options by kind (CodeCompanion keeps the last
            // option of a kind for its "Accept", auto-approvers take the first), so a second
            // allow — the host's "for the rest of this turn" — would be granted by a plain
            // Accept. And it is not `allow_always` either, which means a remembered choice
            // (clients label it "Always"). Bypass mode is the way to stop being asked.
            let _ = remember_for_turn_allowed;
            let options = [
                json!({"optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once"}),
                json!({"optionId": REJECT, "name": "Reject", "kind": "reject_once"}),
            ];
            json!({"sessionId": session_id, "toolCall": tool_call, "options": options})
        }
        InteractionRequest::SandboxBoundary {
            tool_call_id,
            paths,
            justification,
        } => {
            let listed: Vec<String> = paths
                .iter()
                .map(|p| format!("{} ({})", p.path, p.access))
                .collect();
            json!({
                "sessionId": session_id,
                "toolCall": {
                    "toolCallId": tool_call_id,
                    "title": format!("Allow access outside the project: {}", listed.join(", ")),
                    "status": "pending",
                    "content": [text_content(justification)],
                    "locations": paths.iter().filter(|p| p.path.starts_with('/')).map(|p| json!({"path": p.path})).collect::<Vec<_>>(),
                },
                "options": [
                    {"optionId": ALLOW_ONCE, "name": "Allow access for this turn", "kind": "allow_once"},
                    {"optionId": REJECT, "name": "Deny", "kind": "reject_once"},
                ]
            })
        }
        InteractionRequest::Question { .. } => Value::Null,
    }
}

fn deny(request: &InteractionRequest) -> InteractionAnswer {
    match request {
        InteractionRequest::SandboxBoundary { .. } => InteractionAnswer::SandboxBoundary {
            decision: "deny".into(),
        },
        InteractionRequest::Question { questions, .. } => InteractionAnswer::Question {
            answers: vec![None; questions.len()],
            unsupported: false,
        },
        InteractionRequest::Permission { .. } => InteractionAnswer::Permission {
            decision: "deny".into(),
            remember_for_turn: false,
        },
    }
}

fn permission_answer(request: &InteractionRequest, reply: &Value) -> InteractionAnswer {
    let selected = match reply.pointer("/outcome/outcome").and_then(Value::as_str) {
        Some("selected") => reply.pointer("/outcome/optionId").and_then(Value::as_str),
        _ => None,
    };
    match (request, selected) {
        (InteractionRequest::SandboxBoundary { .. }, Some(ALLOW_ONCE)) => {
            InteractionAnswer::SandboxBoundary {
                decision: "allow".into(),
            }
        }
        (InteractionRequest::Permission { .. }, Some(ALLOW_ONCE)) => {
            InteractionAnswer::Permission {
                decision: "allow".into(),
                remember_for_turn: false,
            }
        }
        _ => deny(request),
    }
}

fn ask_questions(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    id: &str,
    tool_call_id: &str,
    questions: &[Question],
) -> Option<InteractionAnswer> {
    if shared.caps.elicitation_form {
        let mut properties = serde_json::Map::new();
        for (i, q) in questions.iter().enumerate() {
            let choices: Vec<Value> = q
                .options
                .iter()
                .map(|o| json!({"const": o.label, "title": o.label}))
                .collect();
            properties.insert(
                format!("q{i}"),
                json!({"type": "string", "title": q.question, "oneOf": choices}),
            );
        }
        let message = if questions.len() == 1 {
            questions[0].question.clone()
        } else {
            "The agent has some questions".to_string()
        };
        let params = json!({
            "sessionId": session.id,
            "toolCallId": tool_call_id,
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": properties, "required": []},
        });
        return match ask(session, shared, id, "elicitation/create", params) {
            Withdrawn => None,
            Refused => Some(InteractionAnswer::Question {
                answers: vec![None; questions.len()],
                unsupported: false,
            }),
            Answered(v) => {
                let accepted = v.get("action").and_then(Value::as_str) == Some("accept");
                let answers = (0..questions.len())
                    .map(|i| {
                        let a = v
                            .pointer(&format!("/content/q{i}"))
                            .and_then(Value::as_str)?;
                        // Only an offered label counts as an answer.
                        questions[i]
                            .options
                            .iter()
                            .any(|o| o.label == a)
                            .then(|| a.to_string())
                    })
                    .map(|a| if accepted { a } else { None })
                    .collect();
                Some(InteractionAnswer::Question {
                    answers,
                    unsupported: false,
                })
            }
        };
    }
    // No form support: nothing is asked in a permission dialog (see the module docs).
    Some(InteractionAnswer::Question {
        answers: vec![None; questions.len()],
        unsupported: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_api::wire::{BoundaryPath, FileDiff, Location};

    #[test]
    fn permission_requests_name_the_action_and_its_scope() {
        let req = InteractionRequest::Permission {
            tool_call_id: "c1".into(),
            tool_name: "edit_file".into(),
            title: "Edit src/lib.rs".into(),
            review: "edit".into(),
            args: Some(json!({"path": "src/lib.rs"})),
            locations: vec![Location {
                path: "/w/src/lib.rs".into(),
                line: None,
            }],
            diff: Some(FileDiff {
                path: "/w/src/lib.rs".into(),
                old_text: Some("a".into()),
                new_text: "b".into(),
                unified_diff: String::new(),
            }),
            remember_for_turn_allowed: true,
        };
        let p = permission_params("s", &req);
        assert_eq!(p["toolCall"]["title"], "Edit src/lib.rs");
        assert_eq!(p["toolCall"]["content"][0]["type"], "diff");
        let names: Vec<&str> = p["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["Allow once", "Reject"], "one option per kind");
        let allow = json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});
        assert_eq!(
            permission_answer(&req, &allow),
            InteractionAnswer::Permission {
                decision: "allow".into(),
                remember_for_turn: false
            }
        );
        assert_eq!(
            permission_answer(&req, &json!({"outcome": {"outcome": "cancelled"}})),
            InteractionAnswer::Permission {
                decision: "deny".into(),
                remember_for_turn: false
            }
        );
        let b = InteractionRequest::SandboxBoundary {
            tool_call_id: "c2".into(),
            paths: vec![BoundaryPath {
                path: "/etc/hosts".into(),
                access: "read".into(),
            }],
            justification: "why".into(),
        };
        assert!(permission_params("s", &b)["toolCall"]["title"]
            .as_str()
            .unwrap()
            .contains("/etc/hosts (read)"));
    }
}
