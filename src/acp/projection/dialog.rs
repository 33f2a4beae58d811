//! A dialog as the person is asked it: `permission` and `sandbox_boundary` →
//! `session/request_permission` with the tool call's details and options whose labels say
//! their scope; `question` → an `elicitation/create` form to a client that has forms, and no
//! dialog at all to one that has not (the host is told at once). Pure: the dialog's thread
//! (`interaction.rs`) sends it and reads the reply.

use super::diff;
use crate::acp::types::{
    to_json, PermissionOption, PermissionOptionKind, RequestPermission, ToolCallContent,
    ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolKind,
};
use crate::host_api::wire::{InteractionAnswer, InteractionRequest, Question, Review};
use serde_json::{json, Value};

/// The permission options' ids (a reply names one).
pub const ALLOW_ONCE: &str = "allow_once";
pub const ALLOW_SESSION: &str = "allow_session";
pub const ALLOW_WORKSPACE: &str = "allow_workspace";
pub const REJECT: &str = "reject";
pub const REJECT_WORKSPACE: &str = "reject_workspace";

/// What putting an interaction to the person sends.
pub enum Dialog {
    /// This request of the client.
    Ask { method: &'static str, params: Value },
    /// Nothing can be asked (a question to a client without forms: never put in a permission
    /// dialog, where auto-approvers would answer for the person): this answer, at once.
    Unshown(InteractionAnswer),
}

/// The dialog for `request` of session `session_id`: a permission shown in `shown_in` (the
/// child session its call is shown in) if any, a question in the session itself; `forms`: the
/// client has elicitation forms.
pub fn dialog(
    request: &InteractionRequest,
    session_id: &str,
    shown_in: Option<&str>,
    forms: bool,
) -> Dialog {
    match request {
        InteractionRequest::Question { questions, .. } if !forms => {
            Dialog::Unshown(InteractionAnswer::Question {
                answers: vec![None; questions.len()],
                unsupported: true,
            })
        }
        InteractionRequest::Question {
            tool_call_id,
            questions,
        } => Dialog::Ask {
            method: "elicitation/create",
            params: question_form(session_id, tool_call_id, questions),
        },
        _ => Dialog::Ask {
            method: "session/request_permission",
            params: to_json(&permission_params(shown_in.unwrap_or(session_id), request)),
        },
    }
}

/// Questions as one form: a field `q{i}` per question, its options the offered labels.
fn question_form(session_id: &str, tool_call_id: &str, questions: &[Question]) -> Value {
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
    let message = match questions {
        [one] => one.question.clone(),
        _ => "The agent has some questions".to_string(),
    };
    json!({
        "sessionId": session_id,
        "toolCallId": tool_call_id,
        "mode": "form",
        "message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": []},
    })
}

fn option(id: &str, name: &str, kind: PermissionOptionKind) -> PermissionOption {
    PermissionOption {
        option_id: id.into(),
        name: name.into(),
        kind,
    }
}

fn absolute_locations<'a>(paths: impl Iterator<Item = &'a str>) -> Option<Vec<ToolCallLocation>> {
    let locs: Vec<ToolCallLocation> = paths
        .filter(|p| p.starts_with('/'))
        .map(|p| ToolCallLocation {
            path: p.into(),
            line: None,
        })
        .collect();
    (!locs.is_empty()).then_some(locs)
}

/// The choices a permission dialog offers: what `rule` can keep, named so the person sees what
/// "always" covers.
pub(crate) fn permission_options(
    rule: &Option<crate::host_api::wire::RuleTarget>,
    review: Review,
) -> Vec<PermissionOption> {
    use PermissionOptionKind::{AllowAlways, AllowOnce, RejectAlways, RejectOnce};
    if let Some(agent @ crate::host_api::wire::RuleTarget::Agent { .. }) = rule {
        // A subagent's trust: once, or always for this very declaration, by name.
        vec![
            option(ALLOW_ONCE, "Allow once", AllowOnce),
            option(
                ALLOW_WORKSPACE,
                &format!("Always allow {} in this workspace", agent.describe()),
                AllowAlways,
            ),
            option(REJECT, "Reject", RejectOnce),
        ]
    } else if let Some(crate::host_api::wire::RuleTarget::InAgent {
        name,
        allow_always,
        reject_always,
        no_allow_once,
        no_reject_once,
    }) = rule
    {
        // A subagent's own dialog: its lasting options are its own to keep, and
        // say so, with its words; only the choices it offered.
        let mut options = vec![];
        if !no_allow_once {
            options.push(option(ALLOW_ONCE, "Allow once", AllowOnce));
        }
        if let Some(label) = allow_always {
            options.push(option(
                ALLOW_WORKSPACE,
                &format!("Always allow in {name} ({label}; {name} remembers it)"),
                AllowAlways,
            ));
        }
        if !no_reject_once {
            options.push(option(REJECT, "Reject", RejectOnce));
        }
        if let Some(label) = reject_always {
            options.push(option(
                REJECT_WORKSPACE,
                &format!("Always reject in {name} ({label}; {name} remembers it)"),
                RejectAlways,
            ));
        }
        options
    } else if let (Some(rule), false) = (rule, review == Review::Plan) {
        // The rules the host can keep, named so the person sees what "always"
        // covers. `allow_once` comes first and is the only one of its kind: clients
        // that map options by kind, and auto-approvers, take the first `allow_once`,
        // so nothing lasting is granted without being picked by name.
        let what = rule.describe();
        vec![
            option(ALLOW_ONCE, "Allow once", AllowOnce),
            option(
                ALLOW_SESSION,
                &format!("Allow {what} for this session"),
                AllowAlways,
            ),
            option(
                ALLOW_WORKSPACE,
                &format!("Always allow {what} in this workspace"),
                AllowAlways,
            ),
            option(REJECT, "Reject", RejectOnce),
            option(
                REJECT_WORKSPACE,
                &format!("Always reject {what} in this workspace"),
                RejectAlways,
            ),
        ]
    } else if review == Review::Plan {
        // Plan mode: approving the plan is what lets the agent start changing things.
        vec![
            option(ALLOW_ONCE, "Approve the plan and start", AllowOnce),
            option(REJECT, "Keep planning", RejectOnce),
        ]
    } else {
        // No rule can cover this call (a compound command, a file outside the
        // working directory): once or not at all. Bypass mode stops the questions.
        vec![
            option(ALLOW_ONCE, "Allow once", AllowOnce),
            option(REJECT, "Reject", RejectOnce),
        ]
    }
}
/// A sandbox boundary's choices: this turn, or not.
pub(crate) fn boundary_options() -> Vec<PermissionOption> {
    use PermissionOptionKind::{AllowOnce, RejectOnce};
    vec![
        option(ALLOW_ONCE, "Allow access for this turn", AllowOnce),
        option(REJECT, "Deny", RejectOnce),
    ]
}

/// The dialog for a permission or a sandbox boundary (`question`s never get one).
pub fn permission_params(session_id: &str, request: &InteractionRequest) -> RequestPermission {
    let (tool_call, options) = match request {
        InteractionRequest::Permission {
            tool_call_id,
            title,
            review,
            args,
            locations,
            diff: d,
            rule,
            ..
        } => {
            let kind = match review {
                Review::Command => ToolKind::Execute,
                Review::Edit | Review::Write => ToolKind::Edit,
                Review::Plan => ToolKind::SwitchMode,
                Review::Tool => ToolKind::Other,
            };
            let tool_call = ToolCallUpdate {
                title: Some(title.clone()),
                kind: Some(kind),
                raw_input: args.clone(),
                locations: absolute_locations(locations.iter().map(|l| l.path.as_str())),
                content: d.as_ref().map(|d| vec![diff(d)]),
                ..ToolCallUpdate::new(tool_call_id, ToolCallStatus::Pending)
            };
            let options = permission_options(rule, *review);
            (tool_call, options)
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
            let tool_call = ToolCallUpdate {
                title: Some(format!(
                    "Allow access outside the project: {}",
                    listed.join(", ")
                )),
                content: Some(vec![ToolCallContent::text(justification)]),
                locations: Some(
                    absolute_locations(paths.iter().map(|p| p.path.as_str())).unwrap_or_default(),
                ),
                ..ToolCallUpdate::new(tool_call_id, ToolCallStatus::Pending)
            };
            (tool_call, boundary_options())
        }
        InteractionRequest::Question { tool_call_id, .. } => (
            ToolCallUpdate::new(tool_call_id, ToolCallStatus::Pending),
            vec![],
        ),
    };
    RequestPermission {
        session_id: session_id.into(),
        tool_call,
        options,
    }
}
