//! Host frame → ACP `session/update` payloads: the one place this mapping lives.
//!
//! Live streaming and `session/load` replay both go through [`Projector::frame`]; replay first
//! turns each durable transcript item into the frame it was live ([`replay_frames`]), so a
//! replayed turn shows what was streamed (modulo chunk boundaries). Pure: no I/O, no clocks
//! (the caller passes `now` for output throttling).

use crate::host_api::wire::{
    FileDiff, FrameBody, Location, PlanEntry, ToolResultContent, TranscriptBody, TranscriptItem,
};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Command output kept for the live view (ACP tool content replaces the whole list, so the
/// accumulated tail is re-sent each time).
pub const OUTPUT_TAIL_BYTES: usize = 64 * 1024;
/// Live output updates per tool call are sent at most this often.
pub const OUTPUT_THROTTLE: Duration = Duration::from_millis(100);

#[derive(Default)]
struct ToolState {
    /// The editor terminal the command runs in (`terminal/create`), when it does.
    client_terminal: Option<String>,
    /// Shown through the `_meta.terminal_*` display convention.
    display: bool,
    /// Some output went out through `_meta.terminal_output`.
    streamed: bool,
    command: Option<String>,
    output: String,
    truncated: bool,
    last_sent: Option<Instant>,
    dirty: bool,
    terminal: bool,
    /// Not shown as a tool call (`update_plan`: the plan is shown as the plan).
    hidden: bool,
}

/// Per-session projection state: open tool calls and which turns this connection started.
///
/// It also remembers what it has shown — text bytes per message, tool calls, echoed prompts —
/// so that feeding it the same content again (a catch-up from the transcript after the live
/// stream fell behind) shows only what is new.
#[derive(Default)]
pub struct Projector {
    /// Bytes of text shown per `messageId` (agent text, thinking, notices).
    shown: HashMap<String, u64>,
    /// Tool calls shown (`tool_call` sent) and turns whose prompt was echoed, for this turn.
    shown_tools: HashSet<String>,
    echoed: HashSet<String>,
    tools: HashMap<String, ToolState>,
    /// Tool calls in start order, to settle the open ones when a turn ends.
    order: Vec<String>,
    /// Turns started by this connection's prompts: their user message is not echoed back.
    own_turns: HashSet<String>,
    /// Command output goes through Zed's display-only `_meta.terminal_*` convention.
    display_terminal: bool,
}

impl Projector {
    pub fn new(display_terminal: bool) -> Projector {
        Projector {
            display_terminal,
            ..Projector::default()
        }
    }

    /// The command of `tool_call_id` runs in the editor's terminal `terminal_id`: embed it.
    pub fn attach_terminal(&mut self, tool_call_id: &str, terminal_id: &str) -> Value {
        let t = self.tools.entry(tool_call_id.to_string()).or_default();
        t.client_terminal = Some(terminal_id.to_string());
        json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": tool_call_id,
            "status": "in_progress",
            "content": [{"type": "terminal", "terminalId": terminal_id}],
        })
    }

    pub fn mark_own_turn(&mut self, turn_id: &str) {
        self.own_turns.insert(turn_id.to_string());
    }

    /// The `update` objects (the value of `params.update`) a frame becomes.
    pub fn frame(&mut self, body: &FrameBody, now: Instant) -> Vec<Value> {
        match body {
            FrameBody::TurnStarted {
                turn_id,
                content: Some(content),
                ..
            } if !self.own_turns.contains(turn_id) && self.echoed.insert(turn_id.clone()) => {
                user_message(turn_id, &content.text)
            }
            FrameBody::TextDelta {
                message_id,
                start_offset,
                text,
                ..
            } => match self.unseen(message_id, *start_offset, text) {
                Some(t) => vec![
                    json!({"sessionUpdate": "agent_message_chunk", "messageId": message_id, "content": {"type": "text", "text": t}}),
                ],
                None => vec![],
            },
            FrameBody::ThinkingDelta {
                message_id,
                start_offset,
                text,
                ..
            } => match self.unseen(message_id, *start_offset, text) {
                Some(t) => vec![
                    json!({"sessionUpdate": "agent_thought_chunk", "messageId": message_id, "content": {"type": "text", "text": t}}),
                ],
                None => vec![],
            },
            FrameBody::ToolStart {
                tool_call_id,
                tool_name,
                title,
                activity_kind,
                args,
                args_truncated,
                locations,
                ..
            } => {
                if !self.shown_tools.insert(tool_call_id.clone()) {
                    return vec![]; // shown already (a catch-up replays it)
                }
                let display = self.display_terminal && activity_kind == "command";
                let hidden = tool_name == PLAN_TOOL;
                let state = ToolState {
                    command: (activity_kind == "command").then(|| title.clone()),
                    display,
                    hidden,
                    ..ToolState::default()
                };
                if self.tools.insert(tool_call_id.clone(), state).is_none() {
                    self.order.push(tool_call_id.clone());
                }
                if hidden {
                    return vec![];
                }
                let mut update = json!({
                    "sessionUpdate": "tool_call",
                    "toolCallId": tool_call_id,
                    "title": title,
                    "kind": tool_kind(activity_kind, tool_name),
                    "status": "pending",
                    "rawInput": args,
                    "locations": locations_json(locations),
                });
                if *args_truncated {
                    update["_meta"] = json!({"maka": {"argsTruncated": true}});
                }
                if display {
                    update["content"] = json!([{"type": "terminal", "terminalId": tool_call_id}]);
                    update["_meta"]["terminal_info"] = json!({"terminal_id": tool_call_id});
                }
                vec![update]
            }
            // The provider is being retried: said as a thought (ACP v1 has no status update),
            // so the person does not stare at nothing. Live only; never replayed.
            FrameBody::TurnStatus {
                turn_id,
                provider_retry: Some(r),
                ..
            } => {
                let attempt = r["attempt"].as_u64().unwrap_or(1);
                let secs = r["delayMs"].as_u64().unwrap_or(0).div_ceil(1000);
                let why = r["reason"].as_str().unwrap_or("it failed");
                vec![json!({
                    "sessionUpdate": "agent_thought_chunk",
                    "messageId": format!("retry_{turn_id}_{attempt}"),
                    "content": {"type": "text", "text": format!("The model provider did not answer ({why}); retrying in {secs} s (attempt {} of 5).\n", attempt + 1)},
                })]
            }
            FrameBody::ToolRunning { tool_call_id, .. } => match self.tools.get(tool_call_id) {
                Some(t) if !t.terminal && !t.hidden => vec![json!({
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": tool_call_id,
                    "status": "in_progress",
                })],
                _ => vec![],
            },
            FrameBody::ToolOutputDelta {
                tool_call_id,
                chunk,
                ..
            } => {
                let Some(t) = self.tools.get_mut(tool_call_id) else {
                    return vec![];
                };
                if t.terminal || t.hidden || t.client_terminal.is_some() {
                    return vec![];
                }
                if t.display {
                    t.streamed = true;
                    return vec![json!({
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": tool_call_id,
                        "status": "in_progress",
                        "_meta": {"terminal_output": {"terminal_id": tool_call_id, "data": chunk}},
                    })];
                }
                t.output.push_str(chunk);
                t.truncated |= crate::host_api::keep_tail(&mut t.output, OUTPUT_TAIL_BYTES);
                t.dirty = true;
                if t.last_sent
                    .is_some_and(|at| now.duration_since(at) < OUTPUT_THROTTLE)
                {
                    return vec![];
                }
                t.last_sent = Some(now);
                t.dirty = false;
                let text = fenced_output(t.command.as_deref(), &t.output, t.truncated, None);
                vec![json!({
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": tool_call_id,
                    "status": "in_progress",
                    "content": [text_content(&text)],
                })]
            }
            FrameBody::ToolResult {
                tool_call_id,
                status,
                result,
                truncated,
                ..
            } => {
                let acp_status = if status == "completed" {
                    "completed"
                } else {
                    "failed"
                };
                let t = self.tools.entry(tool_call_id.clone()).or_default();
                if t.terminal {
                    return vec![];
                }
                t.terminal = true;
                if t.hidden {
                    return vec![];
                }
                let mut update = json!({
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": tool_call_id,
                    "status": acp_status,
                    "content": result_content(result, status),
                    "rawOutput": result,
                });
                if let ToolResultContent::Terminal {
                    output,
                    exit_code,
                    signal,
                    timed_out,
                    ..
                } = result
                {
                    if let Some(tid) = &t.client_terminal {
                        // The editor keeps showing its terminal after release.
                        let verdict =
                            terminal_verdict(status, *exit_code, signal.as_deref(), *timed_out);
                        update["content"] = json!([{"type": "terminal", "terminalId": tid}, text_content(&verdict)]);
                    } else if t.display {
                        update["content"] =
                            json!([{"type": "terminal", "terminalId": tool_call_id}]);
                        let mut meta = json!({"terminal_exit": {"terminal_id": tool_call_id, "exit_code": exit_code, "signal": signal}});
                        if !t.streamed {
                            // Replay (or output that never streamed): show it all at once.
                            meta["terminal_output"] =
                                json!({"terminal_id": tool_call_id, "data": output});
                        }
                        update["_meta"] = meta;
                    }
                }
                if let Some(locs) = result_locations(result) {
                    update["locations"] = locs;
                }
                if *truncated {
                    // Merged: a display terminal's `terminal_exit` is already in `_meta`.
                    update["_meta"]["maka"]["truncated"] = json!(true);
                }
                vec![update]
            }
            FrameBody::PlanUpdate { entries, .. } => vec![plan(entries)],
            FrameBody::Usage {
                context: Some(c), ..
            } => {
                vec![
                    json!({"sessionUpdate": "usage_update", "used": c.used_tokens, "size": c.window_tokens}),
                ]
            }
            FrameBody::SessionUpdated {
                name, last_used_at, ..
            } => {
                // An unknown title is omitted, never sent as null.
                let mut u = json!({"sessionUpdate": "session_info_update", "updatedAt": iso8601(*last_used_at)});
                if let Some(n) = name {
                    u["title"] = json!(n);
                }
                vec![u]
            }
            _ => vec![],
        }
    }

    /// Settles every tool call still open (a turn ended without their result): `failed`.
    pub fn close_open_tools(&mut self, why: &str) -> Vec<Value> {
        let mut out = vec![];
        for id in std::mem::take(&mut self.order) {
            if let Some(t) = self.tools.remove(&id) {
                if !t.terminal && !t.hidden {
                    out.push(json!({
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": id,
                        "status": "failed",
                        "content": [text_content(why)],
                    }));
                }
            }
        }
        self.tools.clear();
        out
    }

    /// Throttled output that never went out: flushed before the result or the turn's end.
    pub fn pending_output(&mut self) -> Vec<Value> {
        let mut out = vec![];
        for id in &self.order {
            if let Some(t) = self.tools.get_mut(id) {
                if t.dirty && !t.terminal && !t.hidden {
                    t.dirty = false;
                    let text = fenced_output(t.command.as_deref(), &t.output, t.truncated, None);
                    out.push(json!({"sessionUpdate": "tool_call_update", "toolCallId": id, "status": "in_progress", "content": [text_content(&text)]}));
                }
            }
        }
        out
    }

    /// Call after a turn's terminal frame: the turn's tool state is no longer needed.
    pub fn turn_finished(&mut self, turn_id: &str) {
        self.own_turns.remove(turn_id);
        self.shown.clear();
        self.shown_tools.clear();
        self.echoed.clear();
    }

    /// The part of a text delta not shown yet (§6.1 of the host protocol: `startOffset` is the
    /// byte length already sent for that message), or `None`.
    fn unseen<'t>(&mut self, message_id: &str, start: u64, text: &'t str) -> Option<&'t str> {
        // Looked up before inserting: no allocation per delta on the streaming path.
        if !self.shown.contains_key(message_id) {
            self.shown.insert(message_id.to_string(), 0);
        }
        let shown = self.shown.get_mut(message_id)?;
        let end = start + text.len() as u64;
        if text.is_empty() || end <= *shown {
            return None;
        }
        let mut skip = shown.saturating_sub(start) as usize;
        while !text.is_char_boundary(skip) {
            skip += 1;
        }
        *shown = end;
        Some(&text[skip..]).filter(|t| !t.is_empty())
    }
}

/// The plan tool: shown as the ACP `plan`, not as a tool call.
const PLAN_TOOL: &str = "update_plan";

fn user_message(turn_id: &str, text: &str) -> Vec<Value> {
    if text.is_empty() {
        return vec![];
    }
    vec![
        json!({"sessionUpdate": "user_message_chunk", "messageId": format!("u_{turn_id}"), "content": {"type": "text", "text": text}}),
    ]
}

/// What a `session.open` snapshot says is in flight (streamed but not yet durable text, running
/// tools with their output tail), as frames.
pub fn snapshot_frames(open: &Value) -> Vec<FrameBody> {
    let mut frames = vec![];
    for s in open["activeStreams"].as_array().into_iter().flatten() {
        let (turn_id, message_id, text) = (
            s["turnId"].as_str().unwrap_or_default().to_string(),
            s["messageId"].as_str().unwrap_or_default().to_string(),
            s["text"].as_str().unwrap_or_default().to_string(),
        );
        frames.push(if s["kind"] == "thinking" {
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
    for t in open["activeTools"].as_array().into_iter().flatten() {
        let id = t["toolCallId"].as_str().unwrap_or_default().to_string();
        frames.push(FrameBody::ToolStart {
            turn_id: String::new(),
            tool_call_id: id.clone(),
            tool_name: t["toolName"].as_str().unwrap_or_default().into(),
            title: t["title"].as_str().unwrap_or_default().into(),
            activity_kind: t["activityKind"].as_str().unwrap_or("tool").into(),
            args: t["args"].clone(),
            args_truncated: false,
            locations: serde_json::from_value::<Vec<Location>>(t["locations"].clone())
                .unwrap_or_default(),
        });
        if let Some(tail) = t["outputTail"].as_str().filter(|s| !s.is_empty()) {
            frames.push(FrameBody::ToolOutputDelta {
                turn_id: String::new(),
                tool_call_id: id,
                out_seq: 0,
                stream: "stdout".into(),
                chunk: tail.into(),
            });
        }
    }
    frames
}

/// The frames a durable transcript item was (or stands for) when live.
pub fn replay_frames(item: &TranscriptItem) -> Vec<FrameBody> {
    let turn_id = item.turn_id.clone();
    match &item.body {
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
        } => {
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
                    text: t.clone(),
                    complete: true,
                });
            }
            if let Some(t) = text {
                out.push(FrameBody::TextDelta {
                    turn_id,
                    message_id: message_id.clone(),
                    start_offset: 0,
                    text: t.clone(),
                    complete: true,
                });
            }
            out
        }
        TranscriptBody::ToolCall {
            tool_call_id,
            tool_name,
            title,
            activity_kind,
            args,
            locations,
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
                });
            }
            out.push(FrameBody::ToolResult {
                turn_id,
                tool_call_id: tool_call_id.clone(),
                status: status.clone(),
                result: result.clone(),
                truncated: *truncated,
                duration_ms: None,
            });
            out
        }
        TranscriptBody::Notice { message_id, text } => vec![FrameBody::TextDelta {
            turn_id,
            message_id: message_id.clone(),
            start_offset: 0,
            text: text.clone(),
            complete: true,
        }],
        TranscriptBody::Plan { entries } => vec![FrameBody::PlanUpdate {
            turn_id,
            entries: entries.clone(),
        }],
        // The `/compact` reply that produced a summary already shows its text.
        TranscriptBody::Summary { .. } => vec![],
        // Past dialogs and turn bookkeeping are not shown again.
        TranscriptBody::Interaction { .. } | TranscriptBody::TurnState { .. } => vec![],
        // Written by a newer host: nothing this build knows how to show.
        TranscriptBody::Unknown => vec![],
    }
}

/// Host activity kind → ACP `ToolKind`.
pub fn tool_kind(activity_kind: &str, tool_name: &str) -> &'static str {
    match (activity_kind, tool_name) {
        (_, "update_plan") => "think",
        ("read", _) => "read",
        ("edit", _) => "edit",
        ("search" | "explore" | "websearch", _) => "search",
        ("command" | "computer", _) => "execute",
        ("webfetch" | "browser", _) => "fetch",
        _ => "other",
    }
}

fn locations_json(locations: &[Location]) -> Value {
    Value::Array(
        locations
            .iter()
            .filter(|l| l.path.starts_with('/'))
            .map(|l| match l.line {
                Some(line) if line > 0 => json!({"path": l.path, "line": line}),
                _ => json!({"path": l.path}),
            })
            .collect(),
    )
}

pub fn text_content(text: &str) -> Value {
    json!({"type": "content", "content": {"type": "text", "text": text}})
}

pub fn diff_content(d: &FileDiff) -> Value {
    let mut v = json!({"type": "diff", "path": d.path, "newText": d.new_text});
    if let Some(old) = &d.old_text {
        v["oldText"] = json!(old);
    }
    v
}

fn fenced_output(
    command: Option<&str>,
    output: &str,
    truncated: bool,
    exit: Option<&str>,
) -> String {
    let mut s = String::from("```console\n");
    if let Some(c) = command {
        s.push_str(&format!("$ {c}\n"));
    }
    if truncated {
        s.push_str("[… earlier output truncated]\n");
    }
    // A fence inside the output must not end ours.
    s.push_str(&output.replace("```", "ˋˋˋ"));
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s.push_str("```");
    if let Some(e) = exit {
        s.push('\n');
        s.push_str(e);
    }
    s
}

fn result_content(result: &ToolResultContent, status: &str) -> Value {
    let items = match result {
        ToolResultContent::Text { text } => vec![text_content(text)],
        ToolResultContent::FileEdit { diff } => vec![diff_content(diff)],
        ToolResultContent::FileWrite { diff: Some(d), .. } => vec![diff_content(d)],
        ToolResultContent::FileWrite {
            path,
            bytes,
            diff: None,
        } => vec![text_content(&format!("Wrote {bytes} bytes to {path}"))],
        ToolResultContent::Terminal {
            command,
            output,
            output_truncated,
            exit_code,
            signal,
            timed_out,
            ..
        } => {
            let verdict = if *timed_out {
                "Timed out: the command was killed.".to_string()
            } else if status == "cancelled" {
                "Cancelled: the command was killed.".to_string()
            } else {
                match (exit_code, signal) {
                    (Some(c), _) => format!("Exit code {c}"),
                    (None, Some(s)) => format!("Killed by {s}"),
                    (None, None) => String::new(),
                }
            };
            vec![text_content(&fenced_output(
                Some(command),
                output,
                *output_truncated,
                Some(&verdict),
            ))]
        }
        ToolResultContent::Json { value } => {
            let text = match value.get("answers").and_then(Value::as_array) {
                Some(answers) => answers
                    .iter()
                    .map(|a| a.as_str().unwrap_or("(no answer)").to_string())
                    .collect::<Vec<_>>()
                    .join("\n"),
                None => value.to_string(),
            };
            vec![text_content(&text)]
        }
    };
    Value::Array(items)
}

fn terminal_verdict(
    status: &str,
    exit_code: Option<i32>,
    signal: Option<&str>,
    timed_out: bool,
) -> String {
    if timed_out {
        "Timed out: the command was killed.".to_string()
    } else if status == "cancelled" {
        "Cancelled: the command was killed.".to_string()
    } else {
        match (exit_code, signal) {
            (Some(c), _) => format!("Exit code {c}"),
            (None, Some(s)) => format!("Killed by {s}"),
            (None, None) => String::new(),
        }
    }
}

fn result_locations(result: &ToolResultContent) -> Option<Value> {
    match result {
        ToolResultContent::FileEdit { diff } => Some(json!([{"path": diff.path}])),
        ToolResultContent::FileWrite { path, .. } => Some(json!([{"path": path}])),
        _ => None,
    }
}

fn plan(entries: &[PlanEntry]) -> Value {
    json!({"sessionUpdate": "plan", "entries": entries.iter().map(|e| json!({
        "content": e.content,
        "priority": match e.priority.as_str() { "high" => "high", "low" => "low", _ => "medium" },
        "status": match e.status.as_str() { "in_progress" => "in_progress", "completed" => "completed", _ => "pending" },
    })).collect::<Vec<_>>()})
}

/// Milliseconds since the epoch → `2026-11-30T02:34:47.123Z`.
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_api::wire::{ContextUsage, MessageContent, TokenUsage};

    fn start(id: &str, kind: &str, name: &str, title: &str) -> FrameBody {
        FrameBody::ToolStart {
            turn_id: "t".into(),
            tool_call_id: id.into(),
            tool_name: name.into(),
            title: title.into(),
            activity_kind: kind.into(),
            args: json!({"command": title}),
            args_truncated: false,
            locations: vec![
                Location {
                    path: "/w/a.rs".into(),
                    line: Some(3),
                },
                Location {
                    path: "relative".into(),
                    line: None,
                },
            ],
        }
    }

    #[test]
    fn text_and_thinking_deltas_keep_message_ids_and_skip_empty_completions() {
        let mut p = Projector::default();
        let now = Instant::now();
        let u = p.frame(
            &FrameBody::TextDelta {
                turn_id: "t".into(),
                message_id: "m_1".into(),
                start_offset: 0,
                text: "Hi".into(),
                complete: false,
            },
            now,
        );
        assert_eq!(
            u,
            vec![
                json!({"sessionUpdate": "agent_message_chunk", "messageId": "m_1", "content": {"type": "text", "text": "Hi"}})
            ]
        );
        let u = p.frame(
            &FrameBody::ThinkingDelta {
                turn_id: "t".into(),
                message_id: "th_1".into(),
                start_offset: 0,
                text: "hm".into(),
                complete: false,
            },
            now,
        );
        assert_eq!(u[0]["sessionUpdate"], "agent_thought_chunk");
        assert!(p
            .frame(
                &FrameBody::TextDelta {
                    turn_id: "t".into(),
                    message_id: "m_1".into(),
                    start_offset: 2,
                    text: "".into(),
                    complete: true
                },
                now
            )
            .is_empty());
    }

    #[test]
    fn user_messages_are_echoed_only_for_turns_started_elsewhere() {
        let mut p = Projector::default();
        let started = |turn: &str| FrameBody::TurnStarted {
            turn_id: turn.into(),
            run_id: "r".into(),
            origin: "prompt".into(),
            content: Some(MessageContent {
                text: "hello".into(),
                attachments: vec![],
            }),
            content_truncated: false,
        };
        p.mark_own_turn("mine");
        assert!(p.frame(&started("mine"), Instant::now()).is_empty());
        let u = p.frame(&started("theirs"), Instant::now());
        assert_eq!(
            u[0],
            json!({"sessionUpdate": "user_message_chunk", "messageId": "u_theirs", "content": {"type": "text", "text": "hello"}})
        );
    }

    #[test]
    fn a_command_streams_throttled_output_then_its_result() {
        let mut p = Projector::default();
        let t0 = Instant::now();
        let u = p.frame(&start("c1", "command", "run_command", "cargo test"), t0);
        assert_eq!(u[0]["kind"], "execute");
        assert_eq!(u[0]["title"], "cargo test");
        assert_eq!(
            u[0]["locations"],
            json!([{"path": "/w/a.rs", "line": 3}]),
            "relative paths are dropped"
        );
        let out = |chunk: &str| FrameBody::ToolOutputDelta {
            turn_id: "t".into(),
            tool_call_id: "c1".into(),
            out_seq: 1,
            stream: "stdout".into(),
            chunk: chunk.into(),
        };
        let first = p.frame(&out("line 1\n"), t0);
        assert_eq!(first[0]["status"], "in_progress");
        assert!(first[0]["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("$ cargo test\nline 1\n"));
        assert!(
            p.frame(&out("line 2\n"), t0 + Duration::from_millis(10))
                .is_empty(),
            "throttled"
        );
        let flushed = p.pending_output();
        assert!(
            flushed[0]["content"][0]["content"]["text"]
                .as_str()
                .unwrap()
                .contains("line 1\nline 2\n"),
            "accumulated tail"
        );
        let result = FrameBody::ToolResult {
            turn_id: "t".into(),
            tool_call_id: "c1".into(),
            status: "failed".into(),
            result: ToolResultContent::Terminal {
                command: "cargo test".into(),
                cwd: "/w".into(),
                exit_code: Some(101),
                signal: None,
                timed_out: false,
                output: "line 1\nline 2\n".into(),
                output_truncated: false,
                terminal_id: None,
            },
            truncated: false,
            duration_ms: Some(5),
        };
        let u = p.frame(&result, t0);
        assert_eq!(u[0]["status"], "failed");
        assert!(u[0]["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .ends_with("```\nExit code 101"));
        assert_eq!(u[0]["rawOutput"]["exitCode"], 101);
        assert!(
            p.frame(&out("late"), t0 + Duration::from_secs(1))
                .is_empty(),
            "nothing after the terminal status"
        );
        assert!(p.close_open_tools("x").is_empty());
    }

    #[test]
    fn edits_become_diffs_and_open_tools_are_failed_at_turn_end() {
        let mut p = Projector::default();
        let now = Instant::now();
        p.frame(&start("e1", "edit", "edit_file", "Edit a.rs"), now);
        let d = FileDiff {
            path: "/w/a.rs".into(),
            old_text: Some("a\n".into()),
            new_text: "b\n".into(),
            unified_diff: "@@".into(),
        };
        let u = p.frame(
            &FrameBody::ToolResult {
                turn_id: "t".into(),
                tool_call_id: "e1".into(),
                status: "completed".into(),
                result: ToolResultContent::FileEdit { diff: d },
                truncated: false,
                duration_ms: None,
            },
            now,
        );
        assert_eq!(
            u[0]["content"],
            json!([{"type": "diff", "path": "/w/a.rs", "oldText": "a\n", "newText": "b\n"}])
        );
        assert_eq!(u[0]["locations"], json!([{"path": "/w/a.rs"}]));
        p.frame(&start("r1", "read", "read_file", "Read b.rs"), now);
        let closed = p.close_open_tools("The turn ended before this tool finished.");
        assert_eq!(closed.len(), 1);
        assert_eq!(
            (
                closed[0]["toolCallId"].as_str(),
                closed[0]["status"].as_str()
            ),
            (Some("r1"), Some("failed"))
        );
    }

    #[test]
    fn plans_usage_and_titles() {
        let mut p = Projector::default();
        let now = Instant::now();
        let u = p.frame(
            &FrameBody::PlanUpdate {
                turn_id: "t".into(),
                entries: vec![PlanEntry {
                    content: "A".into(),
                    status: "in_progress".into(),
                    priority: "high".into(),
                }],
            },
            now,
        );
        assert_eq!(
            u[0],
            json!({"sessionUpdate": "plan", "entries": [{"content": "A", "priority": "high", "status": "in_progress"}]})
        );
        let u = p.frame(
            &FrameBody::Usage {
                turn_id: None,
                delta: TokenUsage::default(),
                totals: TokenUsage::default(),
                context: Some(ContextUsage {
                    used_tokens: 10,
                    window_tokens: 100,
                }),
            },
            now,
        );
        assert_eq!(
            u[0],
            json!({"sessionUpdate": "usage_update", "used": 10, "size": 100})
        );
        let u = p.frame(
            &FrameBody::SessionUpdated {
                revision: 2,
                name: Some("Fix".into()),
                last_used_at: 1_796_007_345_172,
                is_archived: false,
            },
            now,
        );
        assert_eq!(u[0]["updatedAt"], "2026-11-30T02:55:45.172Z");
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn replay_of_an_item_equals_its_live_projection() {
        let item = TranscriptItem {
            message_seq: 4,
            ts: 0,
            turn_id: "t".into(),
            body: TranscriptBody::Assistant {
                message_id: "m_r_0".into(),
                text: Some("Hello there".into()),
                thinking: Some("hm".into()),
            },
        };
        let mut p = Projector::default();
        let now = Instant::now();
        let replayed: Vec<Value> = replay_frames(&item)
            .iter()
            .flat_map(|f| p.frame(f, now))
            .collect();
        assert_eq!(replayed[0]["messageId"], "th_r_0");
        assert_eq!(
            replayed[1],
            json!({"sessionUpdate": "agent_message_chunk", "messageId": "m_r_0", "content": {"type": "text", "text": "Hello there"}})
        );
    }
}
