//! The projection's unit tests compare the JSON each update serializes to: what the client reads.

use super::*;
use crate::host_api::wire::{
    ContextUsage, FileDiff, Location, MessageContent, PlanEntry, TokenUsage, TranscriptBody,
    TranscriptItem,
};
use std::time::Duration;

/// What a frame shows, as the client reads it.
fn shown(p: &mut Projector, body: &FrameBody, now: Instant) -> Vec<Value> {
    p.frame(body, now)
        .iter()
        .map(crate::acp::types::to_json)
        .collect()
}

fn json_all(updates: Vec<SessionUpdate>) -> Vec<Value> {
    updates.iter().map(crate::acp::types::to_json).collect()
}

fn start(id: &str, kind: &str, name: &str, title: &str) -> FrameBody {
    FrameBody::ToolStart {
        turn_id: "t".into(),
        tool_call_id: id.into(),
        tool_name: name.into(),
        title: title.into(),
        activity_kind: kind.into(),
        args: json!({"command": title}),
        args_truncated: false,
        parent_tool_call_id: None,
        name: None,
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
    let u = shown(
        &mut p,
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
    let u = shown(
        &mut p,
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
    assert!(shown(
        &mut p,
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
    assert!(shown(&mut p, &started("mine"), Instant::now()).is_empty());
    let u = shown(&mut p, &started("theirs"), Instant::now());
    assert_eq!(
        u[0],
        json!({"sessionUpdate": "user_message_chunk", "messageId": "u_theirs", "content": {"type": "text", "text": "hello"}, "_meta": {"maka": {"turnId": "theirs"}}})
    );
}

#[test]
fn a_command_streams_throttled_output_then_its_result() {
    let mut p = Projector::default();
    let t0 = Instant::now();
    let u = shown(
        &mut p,
        &start("c1", "command", "run_command", "cargo test"),
        t0,
    );
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
    let first = shown(&mut p, &out("line 1\n"), t0);
    assert_eq!(first[0]["status"], "in_progress");
    assert!(first[0]["content"][0]["content"]["text"]
        .as_str()
        .unwrap()
        .contains("$ cargo test\nline 1\n"));
    assert!(
        shown(&mut p, &out("line 2\n"), t0 + Duration::from_millis(10)).is_empty(),
        "throttled"
    );
    let flushed = json_all(p.pending_output());
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
        status: crate::host_api::wire::ToolStatus::Failed,
        result: ToolResultContent::Terminal {
            command: "cargo test".into(),
            cwd: "/w".into(),
            exit_code: Some(101),
            signal: None,
            timed_out: false,
            output: "line 1\nline 2\n".into(),
            output_truncated: false,
            terminal_id: None,
            full_output_artifact_id: None,
        },
        truncated: false,
        duration_ms: Some(5),
    };
    let u = shown(&mut p, &result, t0);
    assert_eq!(u[0]["status"], "failed");
    assert!(u[0]["content"][0]["content"]["text"]
        .as_str()
        .unwrap()
        .ends_with("```\nExit code 101"));
    assert_eq!(u[0]["rawOutput"]["exitCode"], 101);
    assert!(
        shown(&mut p, &out("late"), t0 + Duration::from_secs(1)).is_empty(),
        "nothing after the terminal status"
    );
    assert!(p.close_open_tools("x").is_empty());
}

#[test]
fn every_tool_call_is_named_by_its_tool() {
    let mut p = Projector::default();
    let now = Instant::now();
    let name_of = |u: &[Value]| u[0]["name"].clone();
    let u = shown(&mut p, &start("a", "edit", "write_file", "Write a.rs"), now);
    assert_eq!(name_of(&u), json!("write_file"));
    let u = shown(&mut p, &start("b", "tool", "delegate", "helper: look"), now);
    assert_eq!(name_of(&u), json!("delegate"));
    // The host's name for clients wins (an MCP tool by its server's names).
    let mut mcp = start("c", "tool", "every_thing__echo", "every-thing: echo");
    if let FrameBody::ToolStart { name, .. } = &mut mcp {
        *name = Some("every-thing/echo".into());
    }
    assert_eq!(
        name_of(&shown(&mut p, &mcp, now)),
        json!("every-thing/echo")
    );
    // A delegation's call the host gave no name (its agent named it nothing usable); one its
    // agent named `update_plan` is still shown, and not as the plan tool.
    let child = |id: &str, name: Option<&str>| {
        let mut f = start(id, "command", "delegate", "helper: step");
        if let FrameBody::ToolStart {
            parent_tool_call_id,
            name: n,
            ..
        } = &mut f
        {
            *parent_tool_call_id = Some("b".into());
            *n = name.map(String::from);
        }
        f
    };
    let u = shown(&mut p, &child("d", None), now);
    assert!(u[0].get("name").is_none(), "{}", u[0]);
    let u = shown(&mut p, &child("e", Some("update_plan")), now);
    assert_eq!(
        (name_of(&u), u[0]["kind"].clone()),
        (json!("update_plan"), json!("execute"))
    );
}

#[test]
fn edits_become_diffs_and_open_tools_are_failed_at_turn_end() {
    let mut p = Projector::default();
    let now = Instant::now();
    shown(&mut p, &start("e1", "edit", "edit_file", "Edit a.rs"), now);
    let d = FileDiff {
        path: "/w/a.rs".into(),
        old_text: Some("a\n".into()),
        new_text: "b\n".into(),
        unified_diff: "@@".into(),
    };
    let u = shown(
        &mut p,
        &FrameBody::ToolResult {
            turn_id: "t".into(),
            tool_call_id: "e1".into(),
            status: crate::host_api::wire::ToolStatus::Completed,
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
    shown(&mut p, &start("r1", "read", "read_file", "Read b.rs"), now);
    let closed = json_all(p.close_open_tools("The turn ended before this tool finished."));
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
    let u = shown(
        &mut p,
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
    let u = shown(
        &mut p,
        &FrameBody::Usage {
            model: None,
            turn_id: None,
            delta: TokenUsage::default(),
            totals: TokenUsage::default(),
            context: Some(ContextUsage {
                used_tokens: 10,
                window_tokens: 100,
            }),
            cost: None,
        },
        now,
    );
    assert_eq!(
        u[0],
        json!({"sessionUpdate": "usage_update", "used": 10, "size": 100})
    );
    // With prices configured, the session's cost so far.
    let u = shown(
        &mut p,
        &FrameBody::Usage {
            model: None,
            turn_id: None,
            delta: TokenUsage::default(),
            totals: TokenUsage::default(),
            context: Some(ContextUsage {
                used_tokens: 10,
                window_tokens: 100,
            }),
            cost: Some(crate::host_api::wire::Cost {
                amount: 0.25,
                currency: "EUR".into(),
            }),
        },
        now,
    );
    assert_eq!(
        u[0],
        json!({"sessionUpdate": "usage_update", "used": 10, "size": 100, "cost": {"amount": 0.25, "currency": "EUR"}})
    );
    let u = shown(
        &mut p,
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
        .flat_map(|f| shown(&mut p, f, now))
        .collect();
    assert_eq!(replayed[0]["messageId"], "th_r_0");
    assert_eq!(
        replayed[1],
        json!({"sessionUpdate": "agent_message_chunk", "messageId": "m_r_0", "content": {"type": "text", "text": "Hello there"}})
    );
}

/// A notice is a live `notice` to a client that shows them, and nothing when replayed (notices
/// are not history); a client that does not sees its fallback live and replayed alike, once
/// (a catch-up from the transcript does not repeat it).
#[test]
fn notices_are_live_to_clients_that_show_them_and_the_same_fallback_otherwise() {
    let live = serde_json::from_value::<FrameBody>(json!({"kind": "notice", "turnId": "t",
        "notice": {"messageId": "retry_t_1", "severity": "warning",
            "title": "The model provider did not answer (HTTP 500); retrying in 500 ms (attempt 2 of 5).",
            "otherwise": "thought",
            "text": "The model provider did not answer (HTTP 500); retrying in 500 ms (attempt 2 of 5).\n"}}))
    .unwrap();
    let item: TranscriptItem = serde_json::from_value(json!({"messageSeq": 3, "ts": 0,
        "turnId": "t", "type": "notice", "messageId": "retry_t_1", "severity": "warning",
        "title": "The model provider did not answer (HTTP 500); retrying in 500 ms (attempt 2 of 5).",
        "otherwise": "thought",
        "text": "The model provider did not answer (HTTP 500); retrying in 500 ms (attempt 2 of 5).\n"}))
    .unwrap();
    let now = Instant::now();
    let updates = |p: &mut Projector, frames: Vec<FrameBody>, live: bool| -> Vec<Value> {
        frames
            .into_iter()
            .flat_map(|f| {
                if live {
                    p.apply(f, now, None)
                        .into_iter()
                        .flat_map(|e| match e {
                            Effect::Show(u) => u,
                            _ => vec![],
                        })
                        .collect::<Vec<_>>()
                } else {
                    p.frame(&f, now)
                }
            })
            .map(|u| serde_json::to_value(u).unwrap())
            .collect()
    };
    let notices = Shows {
        notices: true,
        ..Shows::default()
    };
    // A client that shows notices: the notice live, nothing on a catch-up or a reload.
    let mut p = Projector::new("s", notices);
    let shown = updates(&mut p, vec![live.clone()], true);
    assert_eq!(
        shown,
        [json!({"sessionUpdate": "notice", "severity": "warning",
            "title": "The model provider did not answer (HTTP 500); retrying in 500 ms (attempt 2 of 5)."})]
    );
    assert!(updates(&mut p, replay_frames(&item), false).is_empty());
    assert!(updates(
        &mut Projector::new("s", notices),
        replay_frames(&item),
        false
    )
    .is_empty());
    // A catch-up: a notice it was shown live is not shown again; one it missed live is.
    let caught_up = |p: &mut Projector| -> Vec<Value> {
        replay_frames(&item)
            .iter()
            .flat_map(|f| p.caught_up(f, now))
            .map(|u| serde_json::to_value(u).unwrap())
            .collect()
    };
    assert!(caught_up(&mut p).is_empty());
    assert_eq!(caught_up(&mut Projector::new("s", notices)), shown);
    // Any other client: the same thought live and on reload, and a catch-up adds nothing.
    let mut p = Projector::default();
    let live_shown = updates(&mut p, vec![live], true);
    assert_eq!(
        live_shown,
        [
            json!({"sessionUpdate": "agent_thought_chunk", "messageId": "retry_t_1",
            "content": {"type": "text",
                "text": "The model provider did not answer (HTTP 500); retrying in 500 ms (attempt 2 of 5).\n"}})
        ]
    );
    assert!(updates(&mut p, replay_frames(&item), false).is_empty());
    assert_eq!(
        updates(&mut Projector::default(), replay_frames(&item), false),
        live_shown
    );
    // An item written before notices had titles (an MCP failure): agent text, as it always was.
    let old: TranscriptItem = serde_json::from_value(json!({"messageSeq": 4, "ts": 0,
        "turnId": "t", "type": "notice", "messageId": "n_1", "text": "⚠ gone\n\n"}))
    .unwrap();
    assert_eq!(
        updates(&mut Projector::default(), replay_frames(&old), false),
        [
            json!({"sessionUpdate": "agent_message_chunk", "messageId": "n_1",
            "content": {"type": "text", "text": "⚠ gone\n\n"}})
        ]
    );
}

/// What an effect sends, as the client reads it: the updates' `params.update`, a notification's
/// method and params, the prompt's answer; a dialog and an editor call name what they ask (their
/// requests are made by threads of their own, `interaction.rs` and `client_call.rs`).
fn wire(e: Effect) -> Value {
    match e {
        Effect::Show(u) => json!({"updates": json_all(u)}),
        Effect::Notify(n) => match n.ours() {
            Some((method, params)) => json!({"method": method, "params": params}),
            None => match n {
                Notification::PlanChanged { plan, .. } => json!({"planChanged": plan.revision}),
                _ => json!({"untold": true}),
            },
        },
        Effect::Answer(Ok(r), _) => json!({"result": crate::acp::types::to_json(&r)}),
        Effect::Answer(Err(e), _) => {
            json!({"error": {"code": e.code, "message": e.message, "data": e.data}})
        }
        Effect::Ask(i, dialog::Dialog::Ask { method, params }) => {
            json!({"ask": i.interaction_id, "method": method, "params": params})
        }
        Effect::Ask(i, dialog::Dialog::Unshown(answer)) => {
            json!({"ask": i.interaction_id, "unshown": answer})
        }
        Effect::EditorCall(c) => match c.request("s") {
            Ok((method, params)) => {
                json!({"editorCall": c.invocation_id, "method": method, "params": params})
            }
            Err(why) => json!({"editorCall": c.invocation_id, "refused": why}),
        },
        Effect::Withdraw(id) => json!({"withdraw": id}),
        Effect::WindowEnd { session_removed } => {
            json!({"windowEnd": {"sessionRemoved": session_removed}})
        }
        Effect::Resync(kind) => json!({"resync": kind}),
    }
}

/// Every kind of frame, as the host writes it, and what a live one sends, exactly, in order.
/// (The match in `Projector::apply` has no wildcard: a new kind of frame must be added here
/// and there.)
#[test]
fn every_kind_of_frame_has_its_effects() {
    let goal = json!({"goalId": "g", "sessionId": "s", "objective": "o", "status": "active",
        "limits": {"maxTurns": 3}, "turnsRun": 0, "tokensUsed": 0, "startedAt": 0, "updatedAt": 0});
    let interaction = json!({"interactionId": "i1", "sessionId": "s", "turnId": "t",
        "status": "pending", "outcome": null, "request": {"kind": "question", "toolCallId": "c",
        "questions": [{"question": "q", "options": []}]}});
    let config = serde_json::to_value(crate::host_api::wire::Configuration::default()).unwrap();
    let table: Vec<(Value, Value)> = vec![
        (
            json!({"kind": "turn_started", "turnId": "t", "runId": "r", "origin": "client",
                "content": {"text": "hi"}, "contentTruncated": false}),
            json!([{"updates":[{"_meta":{"maka":{"turnId":"t"}},"content":{"text":"hi","type":"text"},"messageId":"u_t","sessionUpdate":"user_message_chunk"}]}]),
        ),
        (
            json!({"kind": "user_message", "turnId": "t", "messageId": "m0", "content": {"text": "more"}}),
            json!([{"updates":[{"_meta":{"maka":{"turnId":"t"}},"content":{"text":"more","type":"text"},"messageId":"m0","sessionUpdate":"user_message_chunk"}]}]),
        ),
        // The retry itself is told by its `notice` frame.
        (
            json!({"kind": "turn_status", "turnId": "t", "runId": "r", "status": "running",
                "providerRetry": {"attempt": 1, "delayMs": 500, "reason": "HTTP 503"}}),
            json!([{"updates":[]}]),
        ),
        (
            json!({"kind": "notice", "turnId": "t", "notice": {"messageId": "retry_t_1",
                "severity": "warning", "title": "Retrying.", "otherwise": "thought",
                "text": "Retrying.\n"}}),
            json!([{"updates":[{"content":{"text":"Retrying.\n","type":"text"},"messageId":"retry_t_1","sessionUpdate":"agent_thought_chunk"}]}]),
        ),
        (
            json!({"kind": "notice", "turnId": "t", "notice": {"messageId": "n1",
                "severity": "warning", "title": "MCP server `x` did not start.",
                "text": "⚠ MCP server `x` did not start\n\n"}}),
            json!([{"updates":[{"content":{"text":"⚠ MCP server `x` did not start\n\n","type":"text"},"messageId":"n1","sessionUpdate":"agent_message_chunk"}]}]),
        ),
        // The plan by id is for clients that show it so; this one gets the legacy `plan`.
        (
            json!({"kind": "plan_state", "revision": 4, "status": "approved",
                "entries": [{"content": "a", "status": "pending", "priority": "medium"}]}),
            json!([{"planChanged": 4}, {"updates":[]}]),
        ),
        (
            json!({"kind": "compaction", "turnId": "t", "compaction": {"compactionId": "c1",
                "status": "in_progress", "trigger": "automatic"}}),
            json!([{"updates":[]}]),
        ),
        (
            json!({"kind": "compaction", "turnId": "t", "compaction": {"compactionId": "c1",
                "status": "completed", "trigger": "automatic", "summary": "S.",
                "fallback": {"messageId": "compact_c1", "otherwise": "thought", "text": "Compacted.\n"}}}),
            json!([{"updates":[{"content":{"text":"Compacted.\n","type":"text"},"messageId":"compact_c1","sessionUpdate":"agent_thought_chunk"}]}]),
        ),
        (
            json!({"kind": "notice", "turnId": "t", "notice": {"messageId": "n2",
                "severity": "info", "title": "Allowed by your rule.", "otherwise": "nothing"}}),
            json!([{"updates":[]}]),
        ),
        (
            json!({"kind": "text_delta", "turnId": "t", "messageId": "m", "startOffset": 0,
                "text": "a", "complete": false}),
            json!([{"updates":[{"content":{"text":"a","type":"text"},"messageId":"m","sessionUpdate":"agent_message_chunk"}]}]),
        ),
        (
            json!({"kind": "thinking_delta", "turnId": "t", "messageId": "th", "startOffset": 0,
                "text": "b", "complete": false}),
            json!([{"updates":[{"content":{"text":"b","type":"text"},"messageId":"th","sessionUpdate":"agent_thought_chunk"}]}]),
        ),
        (
            json!({"kind": "tool_start", "turnId": "t", "toolCallId": "c1", "toolName": "run_command",
                "title": "ls", "activityKind": "command", "args": {}, "argsTruncated": false,
                "locations": []}),
            json!([{"updates":[{"kind":"execute","locations":[],"name":"run_command","rawInput":{},"sessionUpdate":"tool_call","status":"pending","title":"ls","toolCallId":"c1"}]}]),
        ),
        (
            json!({"kind": "tool_running", "turnId": "t", "toolCallId": "c1"}),
            json!([{"updates":[{"sessionUpdate":"tool_call_update","status":"in_progress","toolCallId":"c1"}]}]),
        ),
        (
            json!({"kind": "tool_output_delta", "turnId": "t", "toolCallId": "c1", "outSeq": 1,
                "stream": "stdout", "chunk": "x"}),
            json!([{"updates":[{"content":[{"content":{"text":"```console\n$ ls\nx\n```","type":"text"},"type":"content"}],"sessionUpdate":"tool_call_update","status":"in_progress","toolCallId":"c1"}]}]),
        ),
        (
            json!({"kind": "tool_result", "turnId": "t", "toolCallId": "c1", "status": "completed",
                "result": {"kind": "text", "text": "ok"}, "truncated": false}),
            json!([{"updates":[{"content":[{"content":{"text":"ok","type":"text"},"type":"content"}],"rawOutput":{"kind":"text","text":"ok"},"sessionUpdate":"tool_call_update","status":"completed","toolCallId":"c1"}]}]),
        ),
        (
            json!({"kind": "interaction_request", "interaction": interaction}),
            json!([{"ask":"i1","unshown":{"answers":[null],"kind":"question","unsupported":true}}]),
        ),
        (
            json!({"kind": "interaction_request", "interaction": {"interactionId": "i2",
                "sessionId": "s", "turnId": "t", "status": "pending", "outcome": null,
                "request": {"kind": "permission", "toolCallId": "c1", "toolName": "run_command",
                    "title": "rm x", "review": "command", "rememberForTurnAllowed": false}}}),
            json!([{"ask":"i2","method":"session/request_permission","params":{"options":[{"kind":"allow_once","name":"Allow once","optionId":"allow_once"},{"kind":"reject_once","name":"Reject","optionId":"reject"}],"sessionId":"s","toolCall":{"kind":"execute","status":"pending","title":"rm x","toolCallId":"c1"}}}]),
        ),
        (
            json!({"kind": "interaction_closed", "interactionId": "i1", "status": "closed",
                "outcome": {"kind": "closure", "reason": "turn_stopped"}}),
            json!([{"withdraw":"i1"}]),
        ),
        (
            json!({"kind": "plan_update", "turnId": "t", "entries": []}),
            json!([{"updates":[{"entries":[],"sessionUpdate":"plan"}]}]),
        ),
        (
            json!({"kind": "usage", "turnId": "t", "delta": {"inputTokens": 1, "outputTokens": 1},
                "totals": {"inputTokens": 1, "outputTokens": 1},
                "context": {"usedTokens": 1, "windowTokens": 10}}),
            json!([{"updates":[{"sessionUpdate":"usage_update","size":10,"used":1}]}]),
        ),
        (
            json!({"kind": "configuration_changed", "revision": 2, "configuration": config}),
            json!([{"updates":[{"configOptions":[{"category":"mode","currentValue":"ask","description":"What the agent may do without asking","id":"mode","name":"Mode","options":[{"description":"Reads freely; asks before editing files or running commands","name":"Ask","value":"ask"},{"description":"Edits files and runs commands without asking","name":"Bypass","value":"bypass"},{"description":"Read-only: no edits, no commands","name":"Explore","value":"explore"}],"type":"select"},{"category":"model","currentValue":"default","id":"model","name":"Model","options":[{"description":"The host's default model","name":"Default","value":"default"}],"type":"select"},{"currentValue":"agent","description":"In plan, the agent proposes a plan and waits for approval before writing or running anything","id":"collaboration_mode","name":"Plan first","options":[{"description":"Work directly","name":"Agent","value":"agent"},{"description":"Propose a plan, then wait for approval","name":"Plan first","value":"plan"}],"type":"select"}],"sessionUpdate":"config_option_update"},{"currentModeId":"ask","sessionUpdate":"current_mode_update"}]}]),
        ),
        (
            json!({"kind": "session_updated", "revision": 2, "name": "n", "lastUsedAt": 0,
                "isArchived": false}),
            json!([{"updates":[{"sessionUpdate":"session_info_update","title":"n","updatedAt":"1970-01-01T00:00:00.000Z"}]}]),
        ),
        (
            json!({"kind": "transcript_advanced", "throughMessageSeq": 3}),
            json!([]),
        ),
        (
            json!({"kind": "client_call", "invocationId": "v1", "service": "fs.read_text_file",
                "input": {"path": "/w/a.rs", "line": null}, "inputRef": false}),
            json!([{"editorCall":"v1","method":"fs/read_text_file","params":{"path":"/w/a.rs","sessionId":"s"}}]),
        ),
        (
            json!({"kind": "client_call", "invocationId": "v2", "service": "terminal.create",
                "input": {"command": "ls", "cwd": "/w"}, "inputRef": false}),
            json!([{"editorCall":"v2","method":"terminal/create","params":{"command":"ls","cwd":"/w","env":[],"sessionId":"s"}}]),
        ),
        (
            json!({"kind": "client_call", "invocationId": "v3", "service": "fs.delete",
                "input": {}, "inputRef": false}),
            json!([{"editorCall":"v3","refused":"this adapter does not perform fs.delete"}]),
        ),
        (
            json!({"kind": "client_call_cancelled", "invocationId": "v1"}),
            json!([{"withdraw":"v1"}]),
        ),
        (
            json!({"kind": "turn_terminal", "turnId": "t", "runId": "r", "outcome": "completed",
                "reason": "end_turn"}),
            json!([{"updates":[]},{"method":"_maka/turn_state","params":{"outcome":"completed","reason":"end_turn","sessionId":"s","turnId":"t"}}]),
        ),
        (
            json!({"kind": "goal_updated", "goal": goal}),
            json!([{"updates":[{"_meta":{"goal":{"controlMethod":"_session/goal","createdAt":0,"iterations":0,"maxIterations":3,"objective":"o","status":"active","tokensUsed":0}},"sessionUpdate":"session_info_update"}]},{"method":"_maka/goal_update","params":{"goal":{"goalId":"g","limits":{"maxTurns":3},"objective":"o","revision":0,"sessionId":"s","startedAt":0,"status":"active","tokensUsed":0,"turnsRun":0,"updatedAt":0},"sessionId":"s"}}]),
        ),
        (json!({"kind": "session_removed"}), json!([])),
        (
            json!({"kind": "frame_omitted", "omittedKind": "tool_result", "bytes": 9}),
            json!([{"resync":"tool_result"}]),
        ),
        (json!({"kind": "heartbeat", "headSeq": 4}), json!([])),
        (
            json!({"kind": "stream_end", "reason": "window_complete", "lastSeq": 4}),
            json!([{"windowEnd":{"sessionRemoved":false}}]),
        ),
        (
            json!({"kind": "stream_end", "reason": "session_removed", "lastSeq": 4}),
            json!([{"windowEnd":{"sessionRemoved":true}}]),
        ),
        (json!({"kind": "a_kind_from_a_newer_host"}), json!([])),
    ];
    let mut p = Projector::new("s", Shows::default());
    // The client was told the configuration at revision 1 (explore): a change is announced.
    let told = crate::acp::config_options::SessionConfig {
        revision: 1,
        configuration: crate::host_api::wire::Configuration {
            permission_mode: crate::host_api::wire::PermissionMode::Explore,
            ..Default::default()
        },
    };
    let mode = told.configuration.permission_mode;
    p.config.read(Some(told), Some(mode));
    let now = Instant::now();
    let mut wrong = vec![];
    for (frame, expected) in table {
        let body: FrameBody =
            serde_json::from_value(frame.clone()).unwrap_or_else(|e| panic!("{frame}: {e}"));
        let said: Vec<Value> = p
            .apply(body, now + Duration::from_secs(1), None)
            .into_iter()
            .map(wire)
            .collect();
        if Value::Array(said.clone()) != expected {
            wrong.push(format!(
                "{frame}\n  sent {}\n  not {expected}",
                Value::Array(said)
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The end of a turn, exactly as it is told: the prompt waiting for it is answered (each
/// outcome's stop reason, a failed turn's error sentence, usage as `_meta.quota`), another's
/// end is `_maka/turn_state` in our wording (Maka's is the connection's: `maka_dialect::told`).
#[test]
fn a_turns_end_answers_its_prompt_or_is_told() {
    let usage = json!({"kind": "usage", "turnId": "t", "model": "m",
        "delta": {"inputTokens": 2, "outputTokens": 1}, "totals": {"inputTokens": 2, "outputTokens": 1}});
    // (the prompt's turn, the end, what is sent after the settled tools; the first turn
    // reported its usage)
    let table: Vec<(Option<&str>, Value, Value)> = vec![
        (
            Some("t"),
            json!({"outcome": "completed", "reason": "end_turn"}),
            json!({"result":{"_meta":{"quota":{"model_usage":[{"model":"m","token_count":{"cached_input_tokens":0,"input_tokens":2,"output_tokens":1,"reasoning_output_tokens":0,"total_tokens":3}}],"token_count":{"cached_input_tokens":0,"input_tokens":2,"output_tokens":1,"reasoning_output_tokens":0,"total_tokens":3}}},"stopReason":"end_turn"}}),
        ),
        (
            Some("t"),
            json!({"outcome": "completed", "reason": "step_limit"}),
            json!({"result":{"stopReason":"max_turn_requests"}}),
        ),
        (
            Some("t"),
            json!({"outcome": "cancelled", "reason": "stopped"}),
            json!({"result":{"_meta":{"maka":{"outcome":"cancelled","reason":"stopped"}},"stopReason":"end_turn"}}),
        ),
        (
            Some("t"),
            json!({"outcome": "max_tokens", "reason": "max_tokens"}),
            json!({"result":{"stopReason":"max_tokens"}}),
        ),
        (
            Some("t"),
            json!({"outcome": "refused", "reason": "refusal"}),
            json!({"result":{"stopReason":"refusal"}}),
        ),
        (
            Some("t"),
            json!({"outcome": "failed", "reason": "error",
            "failureClass": "provider_error", "failureMessage": "the provider said no",
            "failureDetails": {"status": 503}}),
            json!({"error":{"code":-32603,"data":{"details":{"status":503},"failureClass":"provider_error","makaCode":"turn_failed","retryable":false,"turnId":"t"},"message":"The provider said no."}}),
        ),
        (
            Some("t"),
            json!({"outcome": "failed", "reason": "error"}),
            json!({"error":{"code":-32603,"data":{"failureClass":"runtime_error","makaCode":"turn_failed","retryable":false,"turnId":"t"},"message":"The turn failed; the agent's log has the details."}}),
        ),
        (
            Some("other"),
            json!({"outcome": "completed", "reason": "end_turn"}),
            json!({"method":"_maka/turn_state","params":{"outcome":"completed","reason":"end_turn","sessionId":"s","turnId":"t"}}),
        ),
        (
            None,
            json!({"outcome": "failed", "reason": "error",
            "failureClass": "provider_error"}),
            json!({"method":"_maka/turn_state","params":{"outcome":"failed","reason":"error","sessionId":"s","turnId":"t"}}),
        ),
    ];
    let mut wrong = vec![];
    for (row, (prompt, end, expected)) in table.into_iter().enumerate() {
        let mut p = Projector::new("s", Shows::default());
        let now = Instant::now();
        if row == 0 {
            p.apply(serde_json::from_value(usage.clone()).unwrap(), now, prompt);
        }
        let mut frame = json!({"kind": "turn_terminal", "turnId": "t", "runId": "r"});
        if let (Some(f), Some(e)) = (frame.as_object_mut(), end.as_object()) {
            f.extend(e.clone());
        }
        let body: FrameBody = serde_json::from_value(frame).unwrap();
        let said: Vec<Value> = p.apply(body, now, prompt).into_iter().map(wire).collect();
        let said = said.last().cloned().unwrap_or_default();
        if said != expected {
            wrong.push(format!("{end}\n  sent {said}\n  not {expected}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A compaction to a client that shows compactions: each state as it comes, a completed one
/// with its summary once (a catch-up or reload brings it again), nothing after it is done.
#[test]
fn compactions_are_shown_once_to_clients_that_show_them() {
    let frame = |status: &str, extra: Value| -> FrameBody {
        let mut c = json!({"compactionId": "c1", "status": status, "trigger": "manual"});
        if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(extra.clone());
        }
        serde_json::from_value(json!({"kind": "compaction", "turnId": "t", "compaction": c}))
            .unwrap()
    };
    let mut p = Projector::new(
        "s",
        Shows {
            compaction: true,
            ..Shows::default()
        },
    );
    let now = Instant::now();
    let kinds = |p: &mut Projector, f: &FrameBody| -> Vec<String> {
        shown(p, f, now)
            .iter()
            .map(|u| {
                format!(
                    "{}:{}",
                    u["sessionUpdate"].as_str().unwrap(),
                    u["status"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    assert_eq!(
        kinds(&mut p, &frame("in_progress", json!({}))),
        ["compaction_update:in_progress"]
    );
    let done = frame("completed", json!({"summary": "S."}));
    assert_eq!(
        kinds(&mut p, &done),
        ["compaction_summary_chunk:", "compaction_update:completed"]
    );
    assert!(kinds(&mut p, &done).is_empty(), "a catch-up shows it again");
    assert!(kinds(&mut p, &frame("failed", json!({"error": "e"}))).is_empty());
    let failed = shown(
        &mut Projector::new(
            "s",
            Shows {
                compaction: true,
                ..Shows::default()
            },
        ),
        &frame(
            "failed",
            json!({"error": "The model returned an empty summary."}),
        ),
        now,
    );
    assert_eq!(
        failed,
        [
            json!({"sessionUpdate": "compaction_update", "compactionId": "c1", "status": "failed",
            "error": "The model returned an empty summary."})
        ]
    );
    // Any other client: nothing but a completed one's fallback.
    let mut other = Projector::default();
    assert!(shown(&mut other, &frame("in_progress", json!({})), now).is_empty());
    assert!(shown(&mut other, &frame("failed", json!({"error": "e"})), now).is_empty());
    assert!(
        shown(&mut other, &done, now).is_empty(),
        "no fallback: an old item"
    );
}

/// The plan by id: a replayed decision takes its revision's entries; one on a revision never
/// seen shows nothing; the same state twice (a catch-up) once; revision 0 removes it, once.
#[test]
fn the_plan_by_id_follows_revisions_and_decisions() {
    let entry = json!([{"content": "a", "status": "pending", "priority": "high"}]);
    let state = |revision: u64, status: &str, entries: &Value| -> FrameBody {
        serde_json::from_value(json!({"kind": "plan_state", "revision": revision,
            "status": status, "entries": entries}))
        .unwrap()
    };
    let mut p = Projector::new(
        "s",
        Shows {
            plan: true,
            ..Shows::default()
        },
    );
    let now = Instant::now();
    assert!(shown(&mut p, &state(3, "approved", &json!([])), now).is_empty());
    let proposed = shown(&mut p, &state(5, "proposed", &entry), now);
    assert_eq!(
        proposed,
        [
            json!({"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "plan",
            "entries": [{"content": "a", "priority": "high", "status": "pending"}],
            "_meta": {"maka": {"revision": 5, "status": "proposed"}}}})
        ]
    );
    assert!(shown(&mut p, &state(5, "proposed", &entry), now).is_empty());
    let approved = shown(&mut p, &state(5, "approved", &json!([])), now);
    assert_eq!(
        approved[0]["plan"]["entries"],
        proposed[0]["plan"]["entries"]
    );
    assert_eq!(approved[0]["plan"]["_meta"]["maka"]["status"], "approved");
    let legacy = FrameBody::PlanUpdate {
        turn_id: "t".into(),
        entries: serde_json::from_value(entry.clone()).unwrap(),
    };
    assert!(shown(&mut p, &legacy, now).is_empty(), "no legacy plan");
    assert_eq!(
        shown(&mut p, &state(0, "none", &json!([])), now),
        [json!({"sessionUpdate": "plan_removed", "planId": "plan"})]
    );
    assert!(shown(&mut p, &state(0, "none", &json!([])), now).is_empty());
    // A client without the capability: the legacy plan, nothing for plan states.
    let mut other = Projector::default();
    assert!(shown(&mut other, &state(5, "proposed", &entry), now).is_empty());
    assert_eq!(shown(&mut other, &legacy, now)[0]["sessionUpdate"], "plan");
}

/// Updates as the client reads them, each with the session it is sent in ("s": the session).
fn routed(updates: Vec<SessionUpdate>) -> Vec<(String, Value)> {
    updates
        .into_iter()
        .map(|u| match u {
            SessionUpdate::InChild { session_id, update } => {
                (session_id, crate::acp::types::to_json(&*update))
            }
            u => ("s".to_string(), crate::acp::types::to_json(&u)),
        })
        .collect()
}

/// A delegation with one call of its agent that asks first, then its answer, as frames.
fn delegation_frames() -> Vec<Value> {
    vec![
        json!({"kind": "tool_start", "turnId": "t", "toolCallId": "d1", "toolName": "delegate",
            "title": "Delegate to helper", "activityKind": "tool",
            "args": {"agent": "helper", "task": "count the files"}}),
        json!({"kind": "tool_running", "turnId": "t", "toolCallId": "d1"}),
        json!({"kind": "tool_start", "turnId": "t", "toolCallId": "d1.c1", "toolName": "delegate",
            "title": "helper: ls", "activityKind": "command", "args": {"command": "ls"},
            "parentToolCallId": "d1"}),
        json!({"kind": "interaction_request", "interaction": {"interactionId": "i1",
            "sessionId": "s", "turnId": "t", "status": "pending", "outcome": null,
            "request": {"kind": "permission", "toolCallId": "d1.c1", "toolName": "delegate",
                "title": "helper: ls", "review": "command", "rememberForTurnAllowed": false}}}),
        json!({"kind": "tool_running", "turnId": "t", "toolCallId": "d1.c1"}),
        json!({"kind": "tool_result", "turnId": "t", "toolCallId": "d1.c1", "status": "completed",
            "result": {"kind": "text", "text": "a b"}}),
        json!({"kind": "tool_output_delta", "turnId": "t", "toolCallId": "d1", "outSeq": 1,
            "stream": "stdout", "chunk": "Two "}),
        json!({"kind": "tool_output_delta", "turnId": "t", "toolCallId": "d1", "outSeq": 2,
            "stream": "stdout", "chunk": "files."}),
        json!({"kind": "tool_result", "turnId": "t", "toolCallId": "d1", "status": "completed",
            "result": {"kind": "text", "text": "Two files."}}),
    ]
}

fn project_all(p: &mut Projector, frames: &[Value]) -> (Vec<(String, Value)>, usize) {
    let now = Instant::now();
    let mut out = vec![];
    let mut asks = 0;
    for f in frames {
        let body: FrameBody = serde_json::from_value(f.clone()).unwrap();
        for e in p.apply(body, now, None) {
            match e {
                Effect::Show(u) => out.extend(routed(u)),
                Effect::Ask(i, asked) => {
                    asks += 1;
                    let InteractionRequest::Permission { tool_call_id, .. } = &i.request else {
                        panic!("a permission")
                    };
                    let dialog::Dialog::Ask { params, .. } = asked else {
                        panic!("a permission is asked")
                    };
                    // Its dialog names the session its call is shown in.
                    let shown_in = params["sessionId"].as_str().unwrap_or("?").to_string();
                    out.push((shown_in, json!({"dialog": tool_call_id})));
                }
                _ => {}
            }
        }
    }
    (out, asks)
}

#[test]
fn a_delegation_is_a_child_session_to_clients_that_show_subagents() {
    let mut p = Projector::new(
        "s",
        Shows {
            subagents: true,
            ..Shows::default()
        },
    );
    let (out, asks) = project_all(&mut p, &delegation_frames());
    assert_eq!(asks, 1);
    let said: Vec<(String, String)> = out
        .iter()
        .map(|(s, u)| {
            let what = match u["sessionUpdate"].as_str() {
                Some("subagent_update") => format!(
                    "subagent_update {} {}",
                    u["sessionId"].as_str().unwrap(),
                    u["state"]["state"].as_str().unwrap_or("-")
                ),
                Some(k @ ("tool_call" | "tool_call_update")) => format!(
                    "{k} {} {}",
                    u["toolCallId"].as_str().unwrap(),
                    u["status"].as_str().unwrap()
                ),
                Some(k) => format!("{k} {}", u["messageId"].as_str().unwrap()),
                None => format!("dialog {}", u["dialog"].as_str().unwrap()),
            };
            (s.clone(), what)
        })
        .collect();
    let want: Vec<(&str, &str)> = vec![
        ("s", "tool_call d1 pending"),
        ("s", "subagent_update s:d1 -"),
        ("s:d1", "session_message d1.task"),
        ("s", "tool_call_update d1 in_progress"),
        ("s", "subagent_update s:d1 running"),
        ("s:d1", "tool_call d1.c1 pending"),
        ("s", "subagent_update s:d1 requires_action"),
        ("s:d1", "dialog d1.c1"),
        ("s", "subagent_update s:d1 running"),
        ("s:d1", "tool_call_update d1.c1 in_progress"),
        ("s:d1", "tool_call_update d1.c1 completed"),
        ("s:d1", "session_message_chunk d1.answer"),
        ("s:d1", "session_message_chunk d1.answer"),
        ("s:d1", "session_message d1.answer"),
        ("s", "tool_call_update d1 completed"),
        ("s", "subagent_update s:d1 idle"),
    ];
    let want: Vec<(String, String)> = want
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(said, want);
    // The announcement names the agent and its task; the task is the child's first message,
    // from the parent; the answer goes to the parent, whole; the delegate call links its child.
    assert_eq!(out[0].1["_meta"]["maka"]["subagentSessionId"], "s:d1");
    assert!(out[0].1["_meta"]["maka"].get("parentToolCallId").is_none());
    assert_eq!(out[1].1["title"], "helper");
    assert_eq!(out[1].1["description"], "count the files");
    assert_eq!(out[2].1["senderSessionId"], "s");
    assert_eq!(out[2].1["content"][0]["text"], "count the files");
    assert_eq!(out[5].1["_meta"], Value::Null, "{}", out[5].1);
    assert_eq!(out[11].1["content"]["text"], "Two ");
    assert_eq!(out[13].1["recipientSessionId"], "s");
    assert_eq!(out[13].1["content"][0]["text"], "Two files.");
    assert_eq!(out[15].1["state"]["stopReason"], "end_turn");
    // The delegate call's own content is its result, not the agent's streamed text, after
    // its link to the child session (ACP `SessionReference`), as when it started.
    let link = json!({"type": "session", "sessionId": "s:d1"});
    assert_eq!(out[0].1["content"], json!([link]));
    assert_eq!(out[14].1["content"][0], link);
    assert_eq!(out[14].1["content"][1]["content"]["text"], "Two files.");
    assert!(out
        .iter()
        .filter(|(s, _)| s == "s")
        .all(|(_, u)| u["sessionUpdate"] != "tool_call_update" || u["toolCallId"] == "d1"));
}

#[test]
fn without_subagents_a_delegation_is_folded_into_its_call_as_before() {
    let (out, _) = project_all(
        &mut Projector::new("s", Shows::default()),
        &delegation_frames(),
    );
    assert!(out.iter().all(|(s, _)| s == "s"), "{out:?}");
    let kinds: Vec<&str> = out
        .iter()
        .filter_map(|(_, u)| u["sessionUpdate"].as_str())
        .collect();
    assert!(kinds
        .iter()
        .all(|k| *k == "tool_call" || *k == "tool_call_update"));
    let child = out
        .iter()
        .find(|(_, u)| u["toolCallId"] == "d1.c1")
        .unwrap();
    assert_eq!(child.1["_meta"]["maka"]["parentToolCallId"], "d1");
    assert!(out[0].1.get("_meta").is_none(), "{}", out[0].1);
    // The agent's text streams into the delegate call's content.
    assert!(out.iter().any(|(_, u)| u["toolCallId"] == "d1"
        && u["status"] == "in_progress"
        && u["content"][0]["content"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Two"))));
}

#[test]
fn a_graph_task_is_a_child_and_an_unsettled_delegation_ends_idle_with_an_error() {
    let mut p = Projector::new(
        "s",
        Shows {
            subagents: true,
            ..Shows::default()
        },
    );
    let frames = vec![
        json!({"kind": "tool_start", "turnId": "t", "toolCallId": "g", "toolName": "delegate_graph",
            "title": "Delegate 1 task", "activityKind": "tool", "args": {"tasks": []}}),
        json!({"kind": "tool_start", "turnId": "t", "toolCallId": "g.a", "toolName": "delegate",
            "title": "helper: x", "activityKind": "tool", "args": {"agent": "helper", "task": "x"},
            "parentToolCallId": "g", "name": "delegate"}),
        json!({"kind": "tool_start", "turnId": "t", "toolCallId": "g.a.1", "toolName": "delegate",
            "title": "helper: read", "activityKind": "read", "args": {}, "parentToolCallId": "g.a"}),
    ];
    let (out, _) = project_all(&mut p, &frames);
    assert!(out[0].1.get("_meta").is_none());
    // The task stays under its graph call in the parent, and is a child of its own.
    assert_eq!(out[1].1["_meta"]["maka"]["parentToolCallId"], "g");
    assert_eq!(out[1].1["_meta"]["maka"]["subagentSessionId"], "s:g.a");
    assert_eq!(out[2].1["sessionUpdate"], "subagent_update");
    // A graph's task never says it runs: its agent's first call does.
    assert_eq!(out[4].0, "s");
    assert_eq!(out[4].1["state"]["state"], "running");
    assert_eq!(out[5].0, "s:g.a");
    assert_eq!(out[5].1["toolCallId"], "g.a.1");
    let end = routed(p.close_open_tools(TOOL_UNFINISHED));
    let idle = end
        .iter()
        .find(|(_, u)| u["sessionUpdate"] == "subagent_update")
        .unwrap();
    assert_eq!(idle.1["state"]["stopReason"], "error");
    assert_eq!(idle.1["state"]["error"]["message"], TOOL_UNFINISHED);
    assert!(end
        .iter()
        .any(|(s, u)| s == "s:g.a" && u["toolCallId"] == "g.a.1" && u["status"] == "failed"));
}

#[test]
fn a_dialog_about_the_delegation_itself_has_its_child_wait_until_its_agent_works_again() {
    let mut p = Projector::new(
        "s",
        Shows {
            subagents: true,
            ..Shows::default()
        },
    );
    let frames = vec![
        // A call that names no task starts no agent: no child for it.
        json!({"kind": "tool_start", "turnId": "t", "toolCallId": "d0", "toolName": "delegate",
            "title": "Delegate", "activityKind": "tool", "args": {"agent": "helper"}}),
        json!({"kind": "tool_start", "turnId": "t", "toolCallId": "d1", "toolName": "delegate",
            "title": "Delegate to helper", "activityKind": "tool",
            "args": {"agent": "helper", "task": "run it"}}),
        json!({"kind": "tool_running", "turnId": "t", "toolCallId": "d1"}),
        // The gate on the agent's own command (it never announced a call): about `d1`.
        json!({"kind": "interaction_request", "interaction": {"interactionId": "i1",
            "sessionId": "s", "turnId": "t", "status": "pending", "outcome": null,
            "request": {"kind": "permission", "toolCallId": "d1", "toolName": "delegate",
                "title": "helper: run make", "review": "command",
                "rememberForTurnAllowed": false}}}),
        json!({"kind": "tool_output_delta", "turnId": "t", "toolCallId": "d1", "outSeq": 1,
            "stream": "stdout", "chunk": "Ran."}),
    ];
    let (out, asks) = project_all(&mut p, &frames);
    assert_eq!(asks, 1);
    assert!(out[0].1["_meta"].is_null(), "{}", out[0].1);
    let states: Vec<(String, Value)> = out
        .iter()
        .filter(|(_, u)| u["sessionUpdate"] == "subagent_update")
        .map(|(s, u)| (s.clone(), u["state"]["state"].clone()))
        .collect();
    let want: Vec<(String, Value)> = [
        Value::Null,
        json!("running"),
        json!("requires_action"),
        json!("running"),
    ]
    .into_iter()
    .map(|v| ("s".to_string(), v))
    .collect();
    assert_eq!(states, want);
    // The dialog about the delegation itself is the parent's (its call is the parent's).
    assert!(out.contains(&("s".to_string(), json!({"dialog": "d1"}))));
    assert!(out.iter().all(|(_, u)| u["sessionId"] != "s:d0"));
}

/// Terminal output deltas are at most 64 KiB each, cut on character boundaries, nothing lost.
#[test]
fn output_pieces_are_bounded_and_whole() {
    let text = "é".repeat(70_000) + "x";
    let parts: Vec<&str> = crate::host_api::pieces(&text, super::TERMINAL_DELTA_BYTES).collect();
    assert!(parts.len() >= 3, "{}", parts.len());
    assert!(parts.iter().all(|p| p.len() <= 64 * 1024));
    assert_eq!(parts.concat(), text);
    let of = |t, n| crate::host_api::pieces(t, n).collect::<Vec<_>>();
    assert_eq!(of("", 4), [""]);
    assert_eq!(of("abcd", 4), ["abcd"]);
    assert_eq!(of("abcde", 4), ["abcd", "e"]);
    assert_eq!(
        of("éé", 1),
        ["é", "é"],
        "a character is never split, nor left behind"
    );
}

/// The echo rule, step by step: a client's own change is never echoed back; any other change
/// is announced once; one seen while a write of the client is in flight waits for its end.
#[test]
fn a_clients_own_configuration_change_is_never_echoed_and_any_other_is_announced_once() {
    use crate::acp::config_options::{SessionConfig, View};
    use crate::host_api::wire::{Configuration, PermissionMode};
    use config::{ConfigEcho, Reply};
    let with = |mode| Configuration {
        permission_mode: mode,
        ..Configuration::default()
    };
    let kinds = |updates: Vec<SessionUpdate>| -> Vec<String> {
        json_all(updates)
            .iter()
            .map(|u| u["sessionUpdate"].as_str().unwrap_or("?").to_string())
            .collect()
    };
    let mut echo = ConfigEcho::new(View::default());
    // Unknown until read: nothing to compare with, nothing announced.
    assert!(echo.changed(1, &with(PermissionMode::Ask)).is_empty());
    let read = SessionConfig {
        revision: 1,
        configuration: with(PermissionMode::Ask),
    };
    assert!(echo.read(Some(read), Some(PermissionMode::Ask)).is_some());
    // The same revision (this client's own, or one it read): not news.
    assert!(echo.changed(1, &with(PermissionMode::Bypass)).is_empty());
    // Another's change: the options and the mode, once.
    assert_eq!(
        kinds(echo.changed(2, &with(PermissionMode::Bypass))),
        ["config_option_update", "current_mode_update"]
    );
    assert!(echo.changed(2, &with(PermissionMode::Bypass)).is_empty());
    // The client's own write: the change its write made arrives while the write is in
    // flight; its response carries the options and the mode, so nothing is echoed.
    echo.begin_write();
    assert!(echo.changed(3, &with(PermissionMode::Explore)).is_empty());
    let committed = SessionConfig {
        revision: 3,
        configuration: with(PermissionMode::Explore),
    };
    echo.read(Some(committed), None);
    assert!(echo
        .end_write(Reply::Options(Some(PermissionMode::Explore)))
        .is_empty());
    // A write answered `{}` (`session/set_mode`): the options follow, the mode it set does not.
    echo.begin_write();
    let committed = SessionConfig {
        revision: 4,
        configuration: with(PermissionMode::Ask),
    };
    echo.read(Some(committed), None);
    assert_eq!(
        kinds(echo.end_write(Reply::Empty(Some(PermissionMode::Ask)))),
        ["config_option_update"]
    );
    // Another's change seen during a write that then failed: announced at the write's end.
    echo.begin_write();
    assert!(echo.changed(5, &with(PermissionMode::Bypass)).is_empty());
    assert_eq!(
        kinds(echo.end_write(Reply::Failed)),
        ["config_option_update", "current_mode_update"]
    );
}
