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

use super::connection::Shared;
use super::host_link::Connected;
use super::projection::dialog::{
    permission_params, Dialog, ALLOW_ONCE, ALLOW_SESSION, ALLOW_WORKSPACE, REJECT_WORKSPACE,
};
use super::session::AcpSession;
use super::types::{PermissionOutcome, PermissionReply};
use crate::host_api::ops::{AnswerInput, InteractionAnswerOp};
use crate::host_api::wire::{
    Decision, Interaction, InteractionAnswer, InteractionRequest, Question, RuleScope,
};
use crate::jsonrpc::CallResult;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

pub fn spawn(
    session: Arc<AcpSession>,
    shared: Arc<Shared>,
    conn: Connected,
    interaction: Interaction,
    dialog: Dialog,
) {
    let name = format!("acp-ask-{}", interaction.interaction_id);
    // Without it the dialog stays pending; the host closes it with the turn.
    let _ = crate::threads::spawn(name, move || {
        run(&session, &shared, &conn, interaction, dialog)
    });
}

/// Puts `dialog` (what the projection made of `interaction`) to the person and answers the host.
fn run(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    conn: &Connected,
    interaction: Interaction,
    dialog: Dialog,
) {
    let id = interaction.interaction_id.clone();
    let request = &interaction.request;
    let answer = match dialog {
        Dialog::Unshown(answer) => Some(answer),
        Dialog::Ask { method, params } => {
            let bound = match request {
                InteractionRequest::Question { .. } => None,
                _ => super::maka_dialect::permission_bound(
                    shared.dialect,
                    shared.link.tunables().permission_timeout_ms,
                ),
            };
            match (ask(session, shared, &id, method, params, bound), request) {
                (Withdrawn, _) => None,
                (Answered(v), InteractionRequest::Question { questions, .. }) => {
                    Some(question_answer(questions, &v))
                }
                (Answered(v), _) => Some(permission_answer(request, &v)),
                (Refused(why), _) => Some(failed(request, why)),
            }
        }
    };
    let Some(answer) = answer else { return };
    let input = AnswerInput {
        session_id: session.id.clone(),
        interaction_id: id.clone(),
        answer,
    };
    if let Err(e) = conn.call::<InteractionAnswerOp>(&input) {
        // Already resolved (closed by a stop, answered elsewhere) is expected, not an error.
        log::debug!("interaction.answer {id}: {e}");
    }
}

enum Reply {
    /// The client answered.
    Answered(Value),
    /// Withdrawn by our own cancel, or closed by the host: send nothing.
    Withdrawn,
    /// The client failed the request (why): deny / no answer, said as such.
    Refused(String),
}
use Reply::*;

/// Sends one agent→client request for interaction `id` and waits for the reply — at most
/// `bound`, after which the request is withdrawn and counts as refused (a client that cannot
/// answer, such as Paseo's Maka provider, must not hold the turn until it is cancelled).
fn ask(
    session: &Arc<AcpSession>,
    shared: &Arc<Shared>,
    id: &str,
    method: &str,
    params: Value,
    bound: Option<std::time::Duration>,
) -> Reply {
    if session.is_closed() {
        return Withdrawn;
    }
    // Sent first, then tracked (no lock is held across the send); a cancel that came in
    // between is seen by `track`, and the request is withdrawn here.
    let call = shared.calls.call(method, params);
    if !session.track(id, call.id.clone()) {
        shared.calls.cancel(&call.id);
    }
    let reply: CallResult = match bound {
        None => call.wait(),
        Some(bound) => match call.receiver().recv_timeout(bound) {
            Ok(reply) => reply,
            Err(_) => {
                shared.calls.cancel(&call.id);
                shared.calls.forget(&call.id);
                // Withdrawn meanwhile (a cancel, a close): not a denial by silence.
                if session.untrack(id).is_none() || session.is_cancelling() {
                    return Withdrawn;
                }
                log::warn!(
                    "no answer to {method} for interaction {id} within {} ms; denying it",
                    bound.as_millis()
                );
                return Refused(super::maka_dialect::unanswered(bound));
            }
        },
    };
    // Still registered → nobody withdrew it.
    let withdrawn = session.untrack(id).is_none();
    let cancelling = session.is_cancelling();
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
            Refused(format!(
                "the editor answered the request with an error: {}",
                e.message
            ))
        }
    }
}

/// A reply as the log and the person see it: compact JSON, at most 200 characters.
fn cut_reply(reply: &Value) -> String {
    let text = reply.to_string();
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

fn deny(request: &InteractionRequest) -> InteractionAnswer {
    match request {
        InteractionRequest::SandboxBoundary { .. } => InteractionAnswer::SandboxBoundary {
            decision: Decision::Deny,
        },
        InteractionRequest::Question { questions, .. } => InteractionAnswer::Question {
            answers: vec![None; questions.len()],
            unsupported: false,
        },
        InteractionRequest::Permission { .. } => InteractionAnswer::Permission {
            decision: Decision::Deny,
            remember_for_turn: false,
            remember: None,
            failure: None,
        },
    }
}

/// No answer could be had from the client: deny, saying why (the model is told the approval
/// could not be obtained, not that the person refused).
fn failed(request: &InteractionRequest, why: String) -> InteractionAnswer {
    match request {
        InteractionRequest::Permission { .. } => InteractionAnswer::Permission {
            decision: Decision::Deny,
            remember_for_turn: false,
            remember: None,
            failure: Some(why),
        },
        other => deny(other),
    }
}

fn permission_answer(request: &InteractionRequest, reply: &Value) -> InteractionAnswer {
    let offered: Vec<String> = permission_params("", request)
        .options
        .into_iter()
        .map(|o| o.option_id)
        .collect();
    let selected = match PermissionReply::deserialize(reply).map(|r| r.outcome) {
        Ok(PermissionOutcome::Selected { option_id }) if offered.contains(&option_id) => {
            Some(option_id)
        }
        // The person dismissed the dialog: a refusal.
        Ok(PermissionOutcome::Cancelled) => None,
        _ => {
            let shown = cut_reply(reply);
            log::warn!(
                "the client's answer to a permission request is not one of its outcomes (selected with an offered optionId, or cancelled): {shown}"
            );
            return failed(
                request,
                format!("the editor's reply could not be read: {shown}"),
            );
        }
    };
    match (request, selected.as_deref()) {
        (InteractionRequest::SandboxBoundary { .. }, Some(ALLOW_ONCE)) => {
            InteractionAnswer::SandboxBoundary {
                decision: Decision::Allow,
            }
        }
        (InteractionRequest::Permission { rule, .. }, Some(option)) => {
            let (decision, remember) = match option {
                ALLOW_ONCE => (Decision::Allow, None),
                ALLOW_SESSION => (Decision::Allow, Some(RuleScope::Session)),
                ALLOW_WORKSPACE => (Decision::Allow, Some(RuleScope::Workspace)),
                REJECT_WORKSPACE => (Decision::Deny, Some(RuleScope::Workspace)),
                _ => (Decision::Deny, None),
            };
            InteractionAnswer::Permission {
                decision,
                remember_for_turn: false,
                // Only a rule the host offered can be kept.
                remember: remember.filter(|_| rule.is_some()),
                failure: None,
            }
        }
        _ => deny(request),
    }
}

/// What the person chose in a question form (only an offered label counts as an answer).
fn question_answer(questions: &[Question], reply: &Value) -> InteractionAnswer {
    let accepted = reply.get("action").and_then(Value::as_str) == Some("accept");
    let answers = (0..questions.len())
        .map(|i| {
            let a = reply
                .pointer(&format!("/content/q{i}"))
                .and_then(Value::as_str)?;
            questions[i]
                .options
                .iter()
                .any(|o| o.label == a)
                .then(|| a.to_string())
        })
        .map(|a| if accepted { a } else { None })
        .collect();
    InteractionAnswer::Question {
        answers,
        unsupported: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acp::types::to_json;
    use crate::host_api::wire::Review;
    use crate::host_api::wire::{BoundaryPath, FileDiff, Location};

    #[test]
    fn permission_requests_name_the_action_and_its_scope() {
        let req = InteractionRequest::Permission {
            tool_call_id: "c1".into(),
            tool_name: "edit_file".into(),
            title: "Edit src/lib.rs".into(),
            review: Review::Edit,
            args: Some(json!({"path": "src/lib.rs"})),
            locations: vec![Location {
                path: "/w/src/lib.rs".into(),
                line: None,
            }],
            diff: Some(Box::new(FileDiff {
                path: "/w/src/lib.rs".into(),
                old_text: Some("a".into()),
                new_text: "b".into(),
                unified_diff: String::new(),
            })),
            remember_for_turn_allowed: true,
            rule: None,
        };
        let p = to_json(&permission_params("s", &req));
        assert_eq!(p["toolCall"]["title"], "Edit src/lib.rs");
        assert_eq!(p["toolCall"]["content"][0]["type"], "diff");
        let names: Vec<&str> = p["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["Allow once", "Reject"], "no rule: once or not");
        // With a rule the host can keep, each lasting option names it and has its kind.
        let mut ruled = req.clone();
        if let InteractionRequest::Permission { rule, .. } = &mut ruled {
            *rule = Some(crate::host_api::wire::RuleTarget::Files {
                path: "src/**".into(),
            });
        }
        let p = to_json(&permission_params("s", &ruled));
        let options: Vec<(&str, &str)> = p["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o["kind"].as_str().unwrap(), o["name"].as_str().unwrap()))
            .collect();
        assert_eq!(
            options,
            vec![
                ("allow_once", "Allow once"),
                (
                    "allow_always",
                    "Allow file changes under `src/` for this session"
                ),
                (
                    "allow_always",
                    "Always allow file changes under `src/` in this workspace"
                ),
                ("reject_once", "Reject"),
                (
                    "reject_always",
                    "Always reject file changes under `src/` in this workspace"
                ),
            ]
        );
        // A subagent's own dialog offers only the choices the agent offered, its lasting ones
        // named as its own; picking one is "remember" (the host sends the agent's option).
        let mut agents = req.clone();
        if let InteractionRequest::Permission { rule, .. } = &mut agents {
            *rule = Some(crate::host_api::wire::RuleTarget::InAgent {
                name: "codex".into(),
                allow_always: Some("Yes, for session".into()),
                reject_always: None,
                no_allow_once: true,
                no_reject_once: false,
            });
        }
        let p = to_json(&permission_params("s", &agents));
        let options: Vec<(&str, &str)> = p["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o["optionId"].as_str().unwrap(), o["name"].as_str().unwrap()))
            .collect();
        assert_eq!(
            options,
            vec![
                (
                    "allow_workspace",
                    "Always allow in codex (Yes, for session; codex remembers it)"
                ),
                ("reject", "Reject"),
            ]
        );
        let answer = permission_answer(
            &agents,
            &json!({"outcome": {"outcome": "selected", "optionId": "allow_workspace"}}),
        );
        assert!(matches!(
            answer,
            InteractionAnswer::Permission {
                decision: Decision::Allow,
                remember: Some(RuleScope::Workspace),
                ..
            }
        ));
        let pick = |id: &str| json!({"outcome": {"outcome": "selected", "optionId": id}});
        let kept = |a: InteractionAnswer| match a {
            InteractionAnswer::Permission {
                decision, remember, ..
            } => (decision, remember),
            _ => unreachable!(),
        };
        assert_eq!(
            kept(permission_answer(&ruled, &pick("allow_workspace"))),
            (Decision::Allow, Some(RuleScope::Workspace))
        );
        assert_eq!(
            kept(permission_answer(&ruled, &pick("allow_session"))),
            (Decision::Allow, Some(RuleScope::Session))
        );
        assert_eq!(
            kept(permission_answer(&ruled, &pick("reject_workspace"))),
            (Decision::Deny, Some(RuleScope::Workspace))
        );
        // An option that was not offered is not an answer the person gave.
        assert!(matches!(
            permission_answer(&req, &pick("allow_workspace")),
            InteractionAnswer::Permission {
                decision: Decision::Deny,
                failure: Some(_),
                ..
            }
        ));
        // Replies that are no outcome at all (acpbox and acplint send such): one line a case.
        for unreadable in [
            json!({}),
            json!({"outcome": "selected"}),
            json!({"outcome": {"outcome": "selected"}}),
            json!({"outcome": {"outcome": "selected", "optionId": 3}}),
            json!({"outcome": {"outcome": "approved", "optionId": "allow_once"}}),
            json!({"optionId": "allow_once"}),
            json!(null),
            json!("allow_once"),
        ] {
            match permission_answer(&req, &unreadable) {
                InteractionAnswer::Permission {
                    decision: Decision::Deny,
                    failure: Some(why),
                    ..
                } => assert!(why.contains("could not be read"), "{why}"),
                other => panic!("{unreadable}: {other:?}"),
            }
        }
        let allow = json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});
        assert_eq!(
            permission_answer(&req, &allow),
            InteractionAnswer::Permission {
                decision: Decision::Allow,
                remember_for_turn: false,
                remember: None,
                failure: None,
            }
        );
        assert_eq!(
            permission_answer(&req, &json!({"outcome": {"outcome": "cancelled"}})),
            InteractionAnswer::Permission {
                decision: Decision::Deny,
                remember_for_turn: false,
                remember: None,
                failure: None,
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
        assert!(to_json(&permission_params("s", &b))["toolCall"]["title"]
            .as_str()
            .unwrap()
            .contains("/etc/hosts (read)"));
    }
}
