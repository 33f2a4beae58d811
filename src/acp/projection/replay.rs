//! Frames from what is stored: a durable transcript item as the frames it was live, and a
//! `session.open` snapshot's in-flight state as frames. Both then go through the one
//! projection ([`super::Projector::frame`]), so a replayed turn shows what was streamed.

use crate::host_api::ops::OpenSnapshot;
use crate::host_api::wire::{
    Compaction, CompactionStatus, FrameBody, TranscriptBody, TranscriptItem,
};

/// What a `session.open` snapshot says is in flight (streamed but not yet durable text, running
/// tools with their output tail), as frames.
pub fn snapshot_frames(open: &OpenSnapshot) -> Vec<FrameBody> {
    let mut frames = vec![];
    for s in &open.active_streams {
        let (turn_id, message_id, text) = (s.turn_id.clone(), s.message_id.clone(), s.text.clone());
        frames.push(if s.kind == "thinking" {
            FrameBody::ThinkingDelta {
                turn_id,
                message_id,
                start_offset: 0,
                text,
                complete: false,
            }
        } else {
            FrameBody::TextDelta {
                turn_id,
                message_id,
                start_offset: 0,
                text,
                complete: false,
            }
        });
    }
    for t in &open.active_tools {
        frames.push(FrameBody::ToolStart {
            turn_id: String::new(),
            tool_call_id: t.tool_call_id.clone(),
            tool_name: t.tool_name.clone(),
            title: t.title.clone(),
            activity_kind: t.activity_kind.clone(),
            args: t.args.clone(),
            args_truncated: false,
            locations: t.locations.clone(),
            parent_tool_call_id: t.parent_tool_call_id.clone(),
            name: t.name.clone(),
        });
        if !t.output_tail.is_empty() {
            frames.push(FrameBody::ToolOutputDelta {
                turn_id: String::new(),
                tool_call_id: t.tool_call_id.clone(),
                out_seq: 0,
                stream: "stdout".into(),
                chunk: t.output_tail.clone(),
            });
        }
    }
    frames
}

/// An assistant message as it streamed: its thinking (under the id the live stream gave it),
/// then its text.
fn assistant_frames(
    turn_id: String,
    message_id: &str,
    text: Option<&str>,
    thinking: Option<&str>,
) -> Vec<FrameBody> {
    let mut out = vec![];
    if let Some(t) = thinking {
        let thinking_id = message_id
            .strip_prefix("m_")
            .map(|rest| format!("th_{rest}"))
            .unwrap_or_else(|| format!("{message_id}_th"));
        out.push(FrameBody::ThinkingDelta {
            turn_id: turn_id.clone(),
            message_id: thinking_id,
            start_offset: 0,
            text: t.to_string(),
            complete: true,
        });
    }
    if let Some(t) = text {
        out.push(FrameBody::TextDelta {
            turn_id,
            message_id: message_id.to_string(),
            start_offset: 0,
            text: t.to_string(),
            complete: true,
        });
    }
    out
}

/// The frames a durable transcript item was (or stands for) when live.
pub fn replay_frames(item: &TranscriptItem) -> Vec<FrameBody> {
    let turn_id = item.turn_id.clone();
    match &item.body {
        TranscriptBody::User {
            message_id,
            content,
            steered: true,
        } => vec![FrameBody::UserMessage {
            turn_id,
            message_id: message_id.clone(),
            content: content.clone(),
        }],
        TranscriptBody::User { content, .. } => vec![FrameBody::TurnStarted {
            turn_id,
            run_id: String::new(),
            origin: "prompt".into(),
            content: Some(content.clone()),
            content_truncated: false,
        }],
        TranscriptBody::Assistant {
            message_id,
            text,
            thinking,
        } => assistant_frames(turn_id, message_id, text.as_deref(), thinking.as_deref()),
        TranscriptBody::ToolCall { .. } | TranscriptBody::ToolResult { .. } => {
            tool_frames(turn_id, &item.body)
        }
        TranscriptBody::Notice(notice) => vec![FrameBody::Notice {
            turn_id,
            notice: notice.clone(),
        }],
        TranscriptBody::Plan { entries } => vec![
            FrameBody::PlanUpdate {
                turn_id,
                entries: entries.clone(),
            },
            FrameBody::PlanState {
                revision: item.message_seq,
                status: "proposed".into(),
                entries: entries.clone(),
            },
        ],
        TranscriptBody::PlanDecision { revision, status } => vec![FrameBody::PlanState {
            revision: *revision,
            status: status.clone(),
            entries: vec![],
        }],
        // A compaction, as it completed (items from before compactions had ids and fallbacks
        // kept `/compact`'s reply as an assistant item of its own).
        TranscriptBody::Summary {
            text,
            compaction_id,
            trigger,
            fallback,
            ..
        } => vec![FrameBody::Compaction {
            turn_id,
            compaction: Compaction {
                compaction_id: if compaction_id.is_empty() {
                    format!("c{}", item.message_seq)
                } else {
                    compaction_id.clone()
                },
                status: CompactionStatus::Completed,
                trigger: *trigger,
                summary: Some(text.clone()),
                error: None,
                fallback: fallback.clone(),
            },
        }],
        // Past dialogs and turn bookkeeping are not shown again.
        TranscriptBody::Interaction { .. } | TranscriptBody::TurnState { .. } => vec![],
        // Rewind points and markers are history bookkeeping (`_maka/session/revisions`).
        TranscriptBody::Revision { .. } | TranscriptBody::Rewind { .. } => vec![],
        // Usage is not replayed (`_maka/usage/query` reports it).
        TranscriptBody::Usage { .. } => vec![],
        // Written by a newer host: nothing this build knows how to show.
        TranscriptBody::Unknown => vec![],
    }
}

/// A tool call's item as the frames it was: its start, or its run and result.
fn tool_frames(turn_id: String, body: &TranscriptBody) -> Vec<FrameBody> {
    match body {
        TranscriptBody::ToolCall {
            tool_call_id,
            tool_name,
            title,
            activity_kind,
            args,
            locations,
            parent_tool_call_id,
            name,
            ..
        } => vec![FrameBody::ToolStart {
            turn_id,
            tool_call_id: tool_call_id.clone(),
            tool_name: tool_name.clone(),
            title: title.clone(),
            activity_kind: activity_kind.clone(),
            args: args.clone(),
            args_truncated: false,
            locations: locations.clone(),
            parent_tool_call_id: parent_tool_call_id.clone(),
            name: name.clone(),
        }],
        TranscriptBody::ToolResult {
            tool_call_id,
            status,
            result,
            truncated,
            ran,
        } => {
            let mut out = vec![];
            if *ran {
                out.push(FrameBody::ToolRunning {
                    turn_id: turn_id.clone(),
                    tool_call_id: tool_call_id.clone(),
                    cancellable: false, // settled: nothing to cancel any more
                });
            }
            out.push(FrameBody::ToolResult {
                turn_id,
                tool_call_id: tool_call_id.clone(),
                status: *status,
                result: result.clone(),
                truncated: *truncated,
                duration_ms: None,
            });
            out
        }
        _ => vec![],
    }
}
