//! A dialog as a v2 client is asked it: `permission` and `sandbox_boundary` →
//! `session/request_permission {sessionId, title, description, subject, options}` — the title
//! is the question's own (v2 keeps it apart from the call's), the subject the tool call it
//! gates; `question` → an `elicitation/create` form, as on v1, to a client with forms.
//! Options and their ids are v1's (`projection::dialog`), so the dialog's thread reads the
//! answer the same way.

use crate::acp::projection::dialog::{self as v1, Dialog};
use crate::acp::v2::types::{self as t, ToolCallContent, ToolCallUpdate};
use crate::host_api::wire::{InteractionAnswer, InteractionRequest, Review};

/// The dialog for `request` of session `session_id`.
pub fn dialog(session_id: &str, request: &InteractionRequest) -> Dialog {
    let (title, description, tool_call, options) = match request {
        InteractionRequest::Question { questions, .. } => {
            // v2 has no client capability for forms in step 1: never put in a permission
            // dialog (auto-approvers would answer for the person); the model asks instead.
            return Dialog::Unshown(InteractionAnswer::Question {
                answers: vec![None; questions.len()],
                unsupported: true,
            });
        }
        InteractionRequest::Permission {
            tool_call_id,
            title,
            review,
            args,
            locations,
            diff,
            rule,
            ..
        } => {
            let mut call = ToolCallUpdate::new(tool_call_id);
            call.kind = Some(match review {
                Review::Command => crate::acp::types::ToolKind::Execute,
                Review::Edit | Review::Write => crate::acp::types::ToolKind::Edit,
                Review::Plan => crate::acp::types::ToolKind::SwitchMode,
                Review::Tool => crate::acp::types::ToolKind::Other,
            });
            call.raw_input = args.clone();
            let l: Vec<_> = crate::acp::projection::content::locations(locations);
            if !l.is_empty() {
                call.locations = Some(l);
            }
            if let Some(d) = diff {
                call.content = Some(vec![crate::acp::v2::diff::content(d)]);
            }
            let question = match review {
                Review::Command => format!("Run `{title}`?"),
                Review::Plan => "Approve the plan and start?".to_string(),
                _ => format!("Allow: {title}?"),
            };
            (question, None, call, v1::permission_options(rule, *review))
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
            let mut call = ToolCallUpdate::new(tool_call_id);
            call.content = Some(vec![ToolCallContent::Content {
                content: crate::acp::v2::types::ContentBlock::Text {
                    text: justification.clone(),
                },
            }]);
            (
                format!("Allow access outside the project: {}?", listed.join(", ")),
                Some(justification.clone()),
                call,
                v1::boundary_options(),
            )
        }
    };
    let params = t::RequestPermission {
        session_id: session_id.to_string(),
        title,
        description,
        subject: Some(t::PermissionSubject::ToolCall {
            tool_call: Box::new(tool_call),
        }),
        options,
    };
    Dialog::Ask {
        method: "session/request_permission",
        params: crate::acp::types::to_json(&params),
    }
}
