//! The v2 projection, frame by frame: every kind of host frame has its v2 effects (the same
//! exhaustiveness as v1's table, with v2's own expectations), and every update it makes is
//! valid, strictly, against the v2 schema.

use super::*;
use crate::host_api::wire::FrameBody;
use serde_json::{json, Value};
use std::time::Instant;

#[allow(dead_code)]
#[path = "../../../../tests/support/schema.rs"]
mod schema;

/// Every kind of frame the host writes, by name: one `match` without a wildcard, so a new
/// kind cannot be added to the host's wire without a row in the table below.
fn kind(b: &FrameBody) -> &'static str {
    use FrameBody as F;
    match b {
        F::TurnStarted { .. } => "turn_started",
        F::UserMessage { .. } => "user_message",
        F::TurnStatus { .. } => "turn_status",
        F::TextDelta { .. } => "text_delta",
        F::ThinkingDelta { .. } => "thinking_delta",
        F::ToolStart { .. } => "tool_start",
        F::ToolRunning { .. } => "tool_running",
        F::ToolOutputDelta { .. } => "tool_output_delta",
        F::ToolResult { .. } => "tool_result",
        F::InteractionRequest { .. } => "interaction_request",
        F::InteractionClosed { .. } => "interaction_closed",
        F::PlanUpdate { .. } => "plan_update",
        F::PlanState { .. } => "plan_state",
        F::Usage { .. } => "usage",
        F::ConfigurationChanged { .. } => "configuration_changed",
        F::SessionUpdated { .. } => "session_updated",
        F::TranscriptAdvanced { .. } => "transcript_advanced",
        F::ClientCall { .. } => "client_call",
        F::ClientCallCancelled { .. } => "client_call_cancelled",
        F::TurnTerminal { .. } => "turn_terminal",
        F::Notice { .. } => "notice",
        F::Compaction { .. } => "compaction",
        F::GoalUpdated { .. } => "goal_updated",
        F::SessionRemoved {} => "session_removed",
        F::FrameOmitted { .. } => "frame_omitted",
        F::Heartbeat { .. } => "heartbeat",
        F::StreamEnd { .. } => "stream_end",
        F::Unknown => "unknown",
    }
}

/// An effect, in a few words: `show:<kinds of its updates>`, or the effect's name.
fn said(e: &Effect, shown: &mut Vec<Value>) -> String {
    match e {
        Effect::Show(u) => {
            let kinds: Vec<String> = u
                .iter()
                .map(|u| {
                    let v = serde_json::to_value(u).unwrap();
                    shown.push(v.clone());
                    let k = v["sessionUpdate"].as_str().unwrap_or("?").to_string();
                    match v["state"].as_str() {
                        Some(state) => format!("{k}={state}"),
                        None => k,
                    }
                })
                .collect();
            format!("show:{}", kinds.join(","))
        }
        Effect::Accepted { message_id, .. } => format!("accepted:{message_id}"),
        Effect::Ask(i, crate::acp::projection::dialog::Dialog::Ask { method, .. }) => {
            format!("ask:{}:{method}", i.interaction_id)
        }
        Effect::Ask(i, crate::acp::projection::dialog::Dialog::Unshown(_)) => {
            format!("unshown:{}", i.interaction_id)
        }
        Effect::Withdraw(id) => format!("withdraw:{id}"),
        Effect::Ended { turn_id, result } => {
            format!(
                "ended:{turn_id}:{}",
                if result.is_ok() { "ok" } else { "err" }
            )
        }
        Effect::WindowEnd { session_removed } => format!("windowEnd:{session_removed}"),
        Effect::Resync(kind) => format!("resync:{kind}"),
        Effect::StopTurn(turn_id) => format!("stop:{turn_id}"),
    }
}

#[test]
fn every_kind_of_frame_has_its_v2_effects_and_every_update_is_valid() {
    let goal = json!({"goalId": "g", "sessionId": "s", "objective": "o", "status": "active",
        "limits": {"maxTurns": 3}, "turnsRun": 0, "tokensUsed": 0, "startedAt": 0, "updatedAt": 0});
    let config = serde_json::to_value(crate::host_api::wire::Configuration::default()).unwrap();
    let permission = json!({"interactionId": "i2", "sessionId": "s", "turnId": "t",
        "status": "pending", "outcome": null, "request": {"kind": "permission", "toolCallId": "c2",
        "toolName": "edit_file", "title": "Edit a.txt", "review": "edit",
        "rememberForTurnAllowed": false, "diff": {"path": "/w/a.txt", "oldText": "a\n",
        "newText": "b\n", "unifiedDiff": "--- a/a.txt\n+++ b/a.txt\n@@ -1,1 +1,1 @@\n-a\n+b\n"}}});
    let question = json!({"interactionId": "i1", "sessionId": "s", "turnId": "t",
        "status": "pending", "outcome": null, "request": {"kind": "question", "toolCallId": "c",
        "questions": [{"question": "q", "options": []}]}});
    // (frame, what it does) — in a turn of this connection's prompt `t`.
    let table: Vec<(Value, &str)> = vec![
        (
            json!({"kind": "turn_started", "turnId": "t", "runId": "r", "origin": "client",
                "content": {"text": "hi"}}),
            "show:user_message,state_update=running accepted:u_t",
        ),
        (
            json!({"kind": "user_message", "turnId": "t", "messageId": "m0", "content": {"text": "more"}}),
            "show:user_message",
        ),
        (
            json!({"kind": "turn_status", "turnId": "t", "runId": "r", "status": "running"}),
            "show:",
        ),
        (
            json!({"kind": "text_delta", "turnId": "t", "messageId": "m", "startOffset": 0, "text": "a"}),
            "show:agent_message_chunk",
        ),
        (
            json!({"kind": "text_delta", "turnId": "t", "messageId": "m", "startOffset": 0, "text": "a"}),
            "show:",
        ),
        (
            json!({"kind": "thinking_delta", "turnId": "t", "messageId": "th", "startOffset": 0, "text": "b"}),
            "show:agent_thought_chunk",
        ),
        (
            json!({"kind": "tool_start", "turnId": "t", "toolCallId": "c1", "toolName": "run_command",
                "title": "ls", "activityKind": "command", "args": {}}),
            "show:terminal_update,tool_call_update",
        ),
        (
            json!({"kind": "tool_running", "turnId": "t", "toolCallId": "c1", "cancellable": true}),
            "show:terminal_update,tool_call_update",
        ),
        (
            json!({"kind": "tool_output_delta", "turnId": "t", "toolCallId": "c1", "outSeq": 1,
                "stream": "stdout", "chunk": "x\n"}),
            "show:terminal_output_chunk",
        ),
        (
            json!({"kind": "tool_result", "turnId": "t", "toolCallId": "c1", "status": "completed",
                "result": {"kind": "terminal", "command": "ls", "cwd": "/w", "exitCode": 0,
                    "timedOut": false, "output": "x\n", "outputTruncated": false}}),
            "show:terminal_update,tool_call_update",
        ),
        (
            json!({"kind": "tool_start", "turnId": "t", "toolCallId": "c2", "toolName": "edit_file",
                "title": "Edit a.txt", "activityKind": "edit", "args": {"path": "a.txt"},
                "locations": [{"path": "/w/a.txt"}]}),
            "show:tool_call_update",
        ),
        (
            json!({"kind": "interaction_request", "interaction": permission}),
            "show:state_update=requires_action ask:i2:session/request_permission",
        ),
        (
            json!({"kind": "interaction_closed", "interactionId": "i2", "status": "answered",
                "outcome": {"kind": "closure", "reason": "answered"}}),
            "show:state_update=running withdraw:i2",
        ),
        (
            json!({"kind": "tool_result", "turnId": "t", "toolCallId": "c2", "status": "completed",
                "result": {"kind": "file_edit", "path": "/w/a.txt", "oldText": "a\n", "newText": "b\n",
                    "unifiedDiff": "--- a/a.txt\n+++ b/a.txt\n@@ -1,1 +1,1 @@\n-a\n+b\n"}}),
            "show:tool_call_update",
        ),
        (
            json!({"kind": "interaction_request", "interaction": question}),
            // Not put to the person (no forms): nothing for them to act on, no state.
            "show: unshown:i1",
        ),
        (
            json!({"kind": "interaction_closed", "interactionId": "i1", "status": "closed",
                "outcome": {"kind": "closure", "reason": "turn_stopped"}}),
            "show: withdraw:i1",
        ),
        (
            json!({"kind": "tool_start", "turnId": "t", "toolCallId": "c3", "toolName": "delegate",
                "title": "Ask the reviewer", "activityKind": "other", "args": {}}),
            "show:tool_call_update",
        ),
        (
            json!({"kind": "tool_output_delta", "turnId": "t", "toolCallId": "c3", "outSeq": 1,
                "stream": "stdout", "chunk": "thinking"}),
            "show:tool_call_content_chunk",
        ),
        (
            json!({"kind": "plan_update", "turnId": "t", "entries": []}),
            "show:",
        ),
        (
            json!({"kind": "plan_state", "revision": 4, "status": "approved",
                "entries": [{"content": "a", "status": "pending", "priority": "medium"}]}),
            "show:plan_update",
        ),
        (
            json!({"kind": "usage", "turnId": "t", "delta": {"inputTokens": 1, "outputTokens": 1},
                "totals": {"inputTokens": 1, "outputTokens": 1},
                "context": {"usedTokens": 1, "windowTokens": 10}}),
            "show:usage_update",
        ),
        (
            json!({"kind": "configuration_changed", "revision": 2, "configuration": config}),
            "show:config_option_update",
        ),
        (
            json!({"kind": "session_updated", "revision": 2, "name": "n", "lastUsedAt": 0,
                "isArchived": false}),
            "show:session_info_update",
        ),
        (
            json!({"kind": "notice", "turnId": "t", "notice": {"messageId": "n1",
                "severity": "warning", "title": "MCP server `x` did not start.", "text": "x"}}),
            "show:notice",
        ),
        (
            json!({"kind": "compaction", "turnId": "t", "compaction": {"compactionId": "c1",
                "status": "completed", "trigger": "automatic", "summary": "S.",
                "fallback": {"messageId": "compact_c1", "otherwise": "thought", "text": "Compacted.\n"}}}),
            "show:agent_message_chunk",
        ),
        (
            json!({"kind": "goal_updated", "goal": goal}),
            "show:session_info_update",
        ),
        (
            json!({"kind": "transcript_advanced", "throughMessageSeq": 3}),
            "",
        ),
        (
            json!({"kind": "client_call", "invocationId": "v1", "service": "fs.read_text_file",
                "input": {"path": "/w/a.rs"}}),
            "",
        ),
        (
            json!({"kind": "client_call_cancelled", "invocationId": "v1"}),
            "withdraw:v1",
        ),
        (
            json!({"kind": "tool_start", "turnId": "t", "toolCallId": "c4", "toolName": "read_file",
                "title": "Read b", "activityKind": "read", "args": {}}),
            "show:tool_call_update",
        ),
        (
            json!({"kind": "turn_terminal", "turnId": "t", "runId": "r", "outcome": "completed",
                "reason": "end_turn"}),
            // The delegation (c3) and the read (c4) never got a result: settled `failed`.
            "show:tool_call_update,tool_call_update,state_update=idle ended:t:ok",
        ),
        (json!({"kind": "session_removed"}), ""),
        (
            json!({"kind": "frame_omitted", "omittedKind": "tool_result", "bytes": 9}),
            "resync:tool_result",
        ),
        (json!({"kind": "heartbeat", "headSeq": 4}), ""),
        (
            json!({"kind": "stream_end", "reason": "window_complete", "lastSeq": 4}),
            "windowEnd:false",
        ),
        (
            json!({"kind": "stream_end", "reason": "session_removed", "lastSeq": 4}),
            "windowEnd:true",
        ),
        (json!({"kind": "a_kind_from_a_newer_host"}), ""),
    ];
    let mut p = Projector::new("s", Default::default());
    let told = crate::acp::config_options::SessionConfig {
        revision: 1,
        configuration: crate::host_api::wire::Configuration {
            permission_mode: crate::host_api::wire::PermissionMode::Explore,
            ..Default::default()
        },
    };
    let mode = told.configuration.permission_mode;
    p.config.read(Some(told), Some(mode));
    let turn = TurnView {
        prompt_turn: Some("t"),
        cancelled_by_client: false,
        echo: None,
        withdrawn: false,
    };
    let (mut wrong, mut kinds, mut shown) = (vec![], std::collections::HashSet::new(), vec![]);
    for (frame, expected) in table {
        let body: FrameBody =
            serde_json::from_value(frame.clone()).unwrap_or_else(|e| panic!("{frame}: {e}"));
        kinds.insert(kind(&body));
        let effects: Vec<String> = p
            .apply(body, Instant::now(), turn)
            .iter()
            .map(|e| said(e, &mut shown))
            .collect();
        if effects.join(" ") != expected {
            wrong.push(format!(
                "{frame}\n  did {}\n  not {expected}",
                effects.join(" ")
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(kinds.len(), 28, "every kind of frame has a row: {kinds:?}");
    for update in shown {
        let line = json!({"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": "s", "update": update}});
        if let Err(e) = schema::validate_agent_line_as(schema::Acp::V2, &line.to_string(), |_| None)
        {
            panic!("{e}\n  {line}");
        }
    }
}

/// A turn another client (or a goal) runs is told by state too, and one the client cancelled
/// settles its open calls `cancelled` and ends `cancelled`.
#[test]
fn every_turn_is_told_by_state_and_a_cancelled_one_ends_cancelled() {
    let mut p = Projector::new("s", Default::default());
    let frame = |v: Value| serde_json::from_value::<FrameBody>(v).unwrap();
    let none = TurnView::default();
    let start = p.apply(
        frame(json!({"kind": "turn_started", "turnId": "g1", "runId": "r", "origin": "goal"})),
        Instant::now(),
        none,
    );
    let mut shown = vec![];
    let said: Vec<String> = start.iter().map(|e| said(e, &mut shown)).collect();
    // Work the agent starts itself has no user message (v2 needs none).
    assert_eq!(said, ["show:state_update=running"]);
    p.apply(
        frame(
            json!({"kind": "tool_start", "turnId": "g1", "toolCallId": "c", "toolName": "x",
            "title": "x", "activityKind": "other", "args": {}}),
        ),
        Instant::now(),
        none,
    );
    let cancelled = TurnView {
        prompt_turn: Some("g1"),
        cancelled_by_client: true,
        echo: None,
        withdrawn: false,
    };
    let end = p.apply(
        frame(
            json!({"kind": "turn_terminal", "turnId": "g1", "runId": "r", "outcome": "cancelled",
            "reason": "cancelled"}),
        ),
        Instant::now(),
        cancelled,
    );
    let Effect::Show(updates) = &end[0] else {
        panic!("updates first");
    };
    let v: Vec<Value> = updates
        .iter()
        .map(|u| serde_json::to_value(u).unwrap())
        .collect();
    assert_eq!(v[0]["status"], "cancelled", "{v:?}");
    assert_eq!(v[1]["state"], "idle");
    assert_eq!(v[1]["stopReason"], "cancelled");
}

/// A catch-up shows a running command's snapshot (`snapshot_frames`: its start and its
/// output tail, `outSeq` 0) as its terminal's whole output, replacing what the client has:
/// the bytes streamed live are not appended a second time. The client's terminal is modelled
/// as v2 says: a chunk appends, `terminal_update.output` replaces.
#[test]
fn a_catch_up_replaces_a_commands_output_instead_of_appending_it_again() {
    let mut p = Projector::new("s", Default::default());
    let frame = |v: Value| serde_json::from_value::<FrameBody>(v).unwrap();
    let start = json!({"kind": "tool_start", "turnId": "t", "toolCallId": "c1",
        "toolName": "run_command", "title": "ls", "activityKind": "command", "args": {}});
    let live = [
        start.clone(),
        json!({"kind": "tool_output_delta", "turnId": "t", "toolCallId": "c1", "outSeq": 1,
            "stream": "stdout", "chunk": "hello\n"}),
    ];
    let mut terminal = String::new();
    let mut show = |updates: Vec<SessionUpdate>| {
        for u in updates {
            let v = serde_json::to_value(&u).unwrap();
            if v["sessionUpdate"] == "terminal_output_chunk" {
                terminal.push_str(v["data"].as_str().unwrap());
            } else if let Some(data) = v["output"]["data"].as_str() {
                terminal = data.to_string();
            }
        }
    };
    for f in live {
        for e in p.apply(frame(f), Instant::now(), TurnView::default()) {
            if let Effect::Show(u) = e {
                show(u);
            }
        }
    }
    // The catch-up after a gap: the snapshot's frames for the same running command.
    let snapshot = [
        start,
        json!({"kind": "tool_output_delta", "turnId": "", "toolCallId": "c1", "outSeq": 0,
            "stream": "stdout", "chunk": "hello\n"}),
    ];
    for f in snapshot {
        show(p.replayed(&frame(f), Instant::now()));
    }
    assert_eq!(
        terminal,
        crate::base64::encode(b"hello\n"),
        "the terminal shows it once"
    );
}

/// `session/resume` with `replayFrom: start`: a replayed history shows its content, not its
/// state (a replayed turn's start is not work running now), and the resume ends with the
/// session's state as the snapshot has it: a session at rest is `idle`.
#[test]
fn a_replayed_history_ends_idle() {
    let mut p = Projector::new("s", Default::default());
    let frame = |v: Value| serde_json::from_value::<FrameBody>(v).unwrap();
    let mut states = vec![];
    let mut note = |updates: Vec<SessionUpdate>| {
        for u in updates {
            let v = serde_json::to_value(&u).unwrap();
            if v["sessionUpdate"] == "state_update" {
                states.push(v["state"].as_str().unwrap().to_string());
            }
        }
    };
    // What `replay_frames` makes of one finished turn.
    for f in [
        json!({"kind": "turn_started", "turnId": "t1", "runId": "", "origin": "prompt",
            "content": {"text": "hi"}}),
        json!({"kind": "text_delta", "turnId": "t1", "messageId": "m1", "startOffset": 0,
            "text": "hello", "complete": true}),
    ] {
        note(p.replayed(&frame(f), Instant::now()));
    }
    // What `lifecycle::attach` does next for a session with no active turn.
    note(p.end_unfinished("interrupted", false));
    note(p.reconcile(false, &[], true));
    assert_ne!(
        states.last().map(String::as_str),
        Some("running"),
        "a resumed idle session is told it runs: {states:?}"
    );
}

/// After a resume or a catch-up, the state is the snapshot's, counting only the dialogs a v2
/// client is asked: a question it has no form for is answered at once, never shown, so it
/// does not make the session `requires_action`; a permission does.
#[test]
fn reconcile_counts_only_the_dialogs_the_client_is_asked() {
    let interaction = |id: &str, request: Value| -> crate::host_api::wire::Interaction {
        serde_json::from_value(json!({"interactionId": id, "sessionId": "s", "turnId": "t",
            "status": "pending", "outcome": null, "request": request}))
        .unwrap()
    };
    let question = interaction(
        "q",
        json!({"kind": "question", "toolCallId": "c", "questions": [{"question": "q", "options": []}]}),
    );
    let permission = interaction(
        "p",
        json!({"kind": "permission", "toolCallId": "c1", "toolName": "run_command",
            "title": "rm x", "review": "command", "rememberForTurnAllowed": false}),
    );
    let state = |updates: Vec<SessionUpdate>| -> Vec<String> {
        updates
            .iter()
            .map(|u| {
                serde_json::to_value(u).unwrap()["state"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    };
    let mut p = Projector::new("s", Default::default());
    assert_eq!(
        state(p.reconcile(true, std::slice::from_ref(&question), true)),
        ["running"]
    );
    assert_eq!(
        state(p.reconcile(true, &[question, permission], false)),
        ["requires_action"]
    );
}
