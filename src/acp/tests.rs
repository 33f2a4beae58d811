//! In-process tests of the adapter's logic against a scripted host ([`FakeHost`]): no process,
//! no socket, no timeout to wait out. What only real processes can show (pipes, restarts,
//! schema validation of every line) stays in `tests/`.

use super::agent::Ctx;
use super::connection::Shared;
use super::host_link::HostLink;
use super::session::AcpSession;
use crate::host_api::client::HostApi;
use crate::host_api::fake::FakeHost;
use crate::host_api::ops;
use crate::host_api::wire::{
    Configuration, Frame, FrameBody, MessageContent, Session, SessionStatus, TurnOutcome,
    TurnSnapshot, TurnStatus, Workspace,
};
use crate::jsonrpc::incoming::IncomingRequests;
use crate::jsonrpc::transport::{test_outbox, TestLines};
use crate::jsonrpc::{ClientCalls, RequestId};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn frame(seq: u64, body: FrameBody) -> Frame {
    Frame {
        seq: Some(seq),
        session_id: Some("s".into()),
        ts: 0,
        body,
    }
}

fn text(seq: u64, offset: u64, t: &str) -> Frame {
    frame(
        seq,
        FrameBody::TextDelta {
            turn_id: "t1".into(),
            message_id: "m1".into(),
            start_offset: offset,
            text: t.into(),
            complete: false,
        },
    )
}

/// A `session.open` snapshot of session `s` at seq 4 with nothing in flight.
fn snapshot() -> ops::OpenSnapshot {
    ops::OpenSnapshot {
        host_epoch: "e1".into(),
        seq: 4,
        session: record(2),
        active_turn: None,
        active_streams: vec![],
        active_tools: vec![],
        pending_interactions: vec![],
        pending_client_calls: vec![],
        usage: json!({}),
        transcript: ops::TranscriptPosition {
            through_message_seq: 0,
        },
        goal: None,
    }
}

fn record(revision: u64) -> Session {
    Session {
        id: "s".into(),
        revision,
        workspace: Workspace::HostPath { path: "/w".into() },
        additional_directories: vec![],
        name: None,
        labels: vec![],
        is_archived: false,
        created_at: 0,
        last_used_at: 0,
        configuration: Configuration::default(),
        status: SessionStatus::Running,
        active_turn_id: Some("t1".into()),
        mcp_servers: vec![],
        turn_count: 1,
        lineage: None,
        system_prompt: None,
        owner: None,
    }
}

fn shared(host: Arc<FakeHost>) -> (Arc<Shared>, TestLines) {
    let (outbox, lines) = test_outbox();
    let client: Arc<dyn HostApi> = host;
    let shared = Arc::new(Shared::new(
        outbox.clone(),
        Arc::new(ClientCalls::new(outbox)),
        Arc::new(HostLink::connected(client, "e1")),
        Default::default(),
        None,
    ));
    shared.negotiate(super::out::Version::V1);
    (shared, lines)
}

/// Lines written until `done` says stop (bounded: 5 s).
fn lines_until(lines: &TestLines, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut out = vec![];
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Some(l) = lines.next_before(deadline) {
        let v: Value = serde_json::from_str(&l).unwrap();
        let stop = done(&v);
        out.push(v);
        if stop {
            return out;
        }
    }
    panic!("gave up waiting; got {out:?}");
}

#[test]
fn a_sequence_gap_is_repaired_from_a_snapshot_without_repeating_text_and_the_response_comes_last() {
    let host = Arc::new(FakeHost::default().answer::<ops::SessionOpen>(|_| {
        Ok(ops::OpenSnapshot {
            active_turn: Some(turn_snapshot(
                "t1",
                "r",
                "prompt",
                TurnStatus::Running,
                None,
                None,
            )),
            // Frames 3 and 4 were lost; the snapshot has the text they carried.
            active_streams: vec![ops::ActiveStreamView {
                kind: "text".into(),
                turn_id: "t1".into(),
                message_id: "m1".into(),
                text: "Hello".into(),
            }],
            ..snapshot()
        })
    }));
    host.window(vec![
        frame(
            1,
            FrameBody::TurnStarted {
                turn_id: "t1".into(),
                run_id: "r".into(),
                origin: "prompt".into(),
                content: Some(MessageContent {
                    text: "hi".into(),
                    attachments: vec![],
                }),
                content_truncated: false,
            },
        ),
        text(2, 0, "Hel"),
        text(5, 5, " world"),
    ]);
    host.window(vec![
        text(5, 5, " world"),
        frame(
            6,
            FrameBody::TurnTerminal {
                turn_id: "t1".into(),
                run_id: "r".into(),
                outcome: TurnOutcome::Completed,
                reason: "end_turn".into(),
                failure_class: None,
                failure_message: None,
                failure_details: None,
            },
        ),
    ]);
    let (shared, lines) = shared(Arc::clone(&host));
    let session = AcpSession::for_connection(&shared, "s", Default::default()).unwrap();
    session.set_position(0, "e1", None);
    let requests = IncomingRequests::new(shared.outbox.clone());
    let responder = requests
        .begin(RequestId::Int(7), "session/prompt")
        .ok()
        .unwrap();
    assert!(session.begin_prompt("t1", responder).is_ok());
    let conn = shared.link.current().unwrap();
    super::follow::ensure_reader(&session, &shared, &conn, None);

    let out = lines_until(&lines, |v| v["id"] == 7);
    let shown: Vec<&str> = out
        .iter()
        .filter_map(|v| v["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert_eq!(shown, ["Hel", "lo", " world"], "{out:?}");
    assert!(
        out.iter()
            .all(|v| v["params"]["update"]["sessionUpdate"] != "user_message_chunk"),
        "this connection's own prompt is not echoed"
    );
    let last = out.last().unwrap();
    assert_eq!(last["result"]["stopReason"], "end_turn", "{last}");
    assert_eq!(host.called(), ["session.open"]);
}

#[test]
fn delete_gives_up_after_three_conflicting_writes_with_a_retryable_error() {
    let host = Arc::new(
        FakeHost::default()
            .answer::<ops::SessionGet>(|_| {
                Ok(ops::SessionLookup {
                    session: Some(Session {
                        revision: 3,
                        status: SessionStatus::Idle,
                        active_turn_id: None,
                        ..record(3)
                    }),
                    transcript_quarantine: vec![],
                })
            })
            .answer::<ops::SessionRemove>(|_| {
                Ok(ops::RemoveOutcome::RevisionConflict {
                    expected: 3,
                    actual: 4,
                })
            }),
    );
    let (shared, _lines) = shared(Arc::clone(&host));
    let ctx = Ctx { shared };
    let e = super::lifecycle::delete(&ctx, "s").unwrap_err();
    let data = e.data.unwrap_or_default();
    assert_eq!(
        (data["makaCode"].as_str(), data["retryable"].as_bool()),
        (Some("operation_conflict"), Some(true))
    );
    assert_eq!(
        host.called(),
        [
            "session.get",
            "session.remove",
            "session.get",
            "session.remove",
            "session.get",
            "session.remove"
        ]
    );
}

/// A subagent's call still running when a client opens the session is shown where it runs —
/// under its delegate call, with the name the host gave it — as it was live.
#[test]
fn a_running_subagent_call_in_a_snapshot_is_shown_under_its_delegate_call() {
    let tool = |id: &str, name: &str, shown: Option<&str>, parent: Option<&str>| ops::ActiveTool {
        tool_call_id: id.into(),
        tool_name: name.into(),
        title: id.into(),
        activity_kind: "command".into(),
        args: json!({}),
        locations: vec![],
        output_tail: String::new(),
        name: shown.map(String::from),
        parent_tool_call_id: parent.map(String::from),
    };
    let open = ops::OpenSnapshot {
        active_tools: vec![
            tool("d", "delegate", None, None),
            tool("d.1", "delegate", Some("shell"), Some("d")),
        ],
        ..snapshot()
    };
    let mut view = super::projection::Projector::default();
    let shown: Vec<Value> = super::projection::snapshot_frames(&open)
        .iter()
        .flat_map(|f| view.frame(f, Instant::now()))
        .map(|u| super::types::to_json(&u))
        .collect();
    let calls: Vec<(Value, Value, Value)> = shown
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .map(|u| {
            let parent = u["_meta"]["maka"]["parentToolCallId"].clone();
            (u["toolCallId"].clone(), u["name"].clone(), parent)
        })
        .collect();
    assert_eq!(
        calls,
        [
            (json!("d"), json!("delegate"), Value::Null),
            (json!("d.1"), json!("shell"), json!("d")),
        ]
    );
}

/// At stdin's end, a prompt whose turn did not stop in time is answered `cancelled` from the
/// session table: its open tool calls are settled first, and nothing of the session is shown
/// after the answer, although its reader may still be following the turn.
#[test]
fn a_prompt_answered_at_exit_is_the_sessions_last_word() {
    let (shared, lines) = shared(Arc::new(FakeHost::default()));
    let session = AcpSession::for_connection(&shared, "s", Default::default()).unwrap();
    let requests = IncomingRequests::new(shared.outbox.clone());
    let responder = requests.begin(RequestId::Int(9), "session/prompt").ok();
    assert!(session.begin_prompt("t1", responder.unwrap()).is_ok());
    session.prompt_started("t1", false);
    let tool = FrameBody::ToolStart {
        turn_id: "t1".into(),
        tool_call_id: "c1".into(),
        tool_name: "run_command".into(),
        title: "sleep 300".into(),
        activity_kind: "command".into(),
        args: json!({}),
        args_truncated: false,
        locations: vec![],
        parent_tool_call_id: None,
        name: None,
    };
    assert!(session
        .apply(&shared, None, tool)
        .is_ok_and(|e| e.is_empty()));
    assert_eq!(
        session.cancel_prompt(&shared),
        Some(super::session::ToStop::Running("t1".into()))
    );

    session.answer_cancelled_at_exit(&shared);
    session.answer_cancelled_at_exit(&shared); // a second call answers nothing
    let late = text(3, 0, "still running");
    assert!(session
        .apply(&shared, None, late.body.clone())
        .is_ok_and(|e| e.is_empty()));
    super::view::show(&session, &shared, &[late.body]);

    let out: Vec<Value> = lines
        .try_iter()
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    let what: Vec<String> = out
        .iter()
        .map(|v| match &v["params"]["update"]["sessionUpdate"] {
            Value::String(kind) => format!("{kind} {}", v["params"]["update"]["status"]),
            _ => format!("answer {}", v["result"]["stopReason"]),
        })
        .collect();
    assert_eq!(
        what,
        [
            "tool_call \"pending\"",
            "tool_call_update \"failed\"",
            "answer \"cancelled\""
        ],
        "{out:?}"
    );
    assert!(session.prompt_turn().is_none());
}

/// A host that answers every catch-up with "resync required" (a hostile or broken one) does
/// not make the reader recurse until its stack overflows: it catches up a bounded number of
/// times, then answers the prompt with an error.
#[test]
fn a_host_that_always_asks_for_a_resync_is_given_up_on_after_a_few_catch_ups() {
    use crate::host_api::wire::{ErrorCode, HostError};
    let host =
        Arc::new(FakeHost::default().answer::<ops::SessionOpen>(|_| {
            Err(HostError::new(ErrorCode::ResyncRequired, "resync"))
        }));
    host.window(vec![text(5, 0, "after a gap")]);
    let (shared, lines) = shared(Arc::clone(&host));
    let session = AcpSession::for_connection(&shared, "s", Default::default()).unwrap();
    session.set_position(0, "e1", None);
    let requests = IncomingRequests::new(shared.outbox.clone());
    let responder = requests.begin(RequestId::Int(7), "session/prompt").ok();
    assert!(session.begin_prompt("t1", responder.unwrap()).is_ok());
    let conn = shared.link.current().unwrap();
    super::follow::ensure_reader(&session, &shared, &conn, None);

    let out = lines_until(&lines, |v| v["id"] == 7);
    let last = out.last().unwrap();
    assert!(last["error"]["message"].is_string(), "{last}");
    let opens = host
        .called()
        .iter()
        .filter(|k| *k == "session.open")
        .count();
    assert_eq!(opens, super::follow::CATCH_UPS, "{:?}", host.called());
}

/// What a host frame becomes is decided in the projections alone (v1's `projection/`, v2's
/// `v2/projection/`): no other adapter file names a `FrameBody` variant (which any match on
/// it, or any alias of it, needs). The host, which produces frames, and `host_api`, which
/// defines them, are not the adapter; test files build frames to feed it.
#[test]
fn no_adapter_file_outside_projection_matches_on_frames() {
    let not_adapter = [
        "acp/projection/",
        "acp/v2/projection/",
        "host/",
        "host_api/",
    ];
    let offenders = lines_outside(&not_adapter, |line| {
        line.contains("FrameBody::") || line.contains("FrameBody as")
    });
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

/// Every error the agent makes about what it or the host did carries `data.makaCode`: the
/// codes that mean that (`-32603`, `-32002`, `-32000`) are written by `errors.rs` alone. The
/// others: `client_call.rs` reports a client's unreadable reply to the host (not an answer to
/// the client), `projection/subagents.rs` shows a child session's failure in its state, and
/// `maka_dialect.rs` reshapes errors as Maka's (`errors.rs` says so).
#[test]
fn the_agents_own_errors_are_made_in_errors_rs() {
    let elsewhere = [
        "acp/errors.rs",
        "acp/client_call.rs",
        "acp/projection/subagents.rs",
        "acp/maka_dialect.rs",
        "host/",
        "host_api/",
        "jsonrpc/",
        "cli",
        "embedded.rs",
        "login.rs",
        "demo.rs",
    ];
    let offenders = lines_outside(&elsewhere, |line| {
        [
            "INTERNAL_ERROR",
            "RESOURCE_NOT_FOUND",
            "AUTH_REQUIRED",
            "ResponseError::internal(",
        ]
        .iter()
        .any(|c| line.contains(c))
    });
    assert!(
        offenders.is_empty(),
        "use MakaCode:\n{}",
        offenders.join("\n")
    );
}

/// The lines of `src/` (before each file's unit tests; test files skipped) outside the
/// `skipped` prefixes that `matches` says yes to.
/// What belongs to a connection is in its context (`connection.rs`), made and dropped with it:
/// no static in `src/acp` can change (a lock, an atomic, a cell, a value set once), so under
/// `serve` no connection's state is another's.
#[test]
fn no_static_in_the_agent_holds_state() {
    let offenders = source_lines(
        |rel| rel.starts_with("acp/"),
        |line| {
            let line = line.trim_start();
            let declares = [
                "static ",
                "pub static ",
                "pub(crate) static ",
                "pub(super) static ",
            ]
            .iter()
            .any(|s| line.starts_with(s))
                || line.contains("thread_local!");
            declares
                && (line.contains("static mut ")
                    || ["Mutex", "RwLock", "Atomic", "Cell", "Once", "Condvar"]
                        .iter()
                        .any(|t| line.contains(t))
                    || line.contains("thread_local!"))
        },
    );
    assert!(
        offenders.is_empty(),
        "keep it in the connection context (acp/connection.rs):\n{}",
        offenders.join("\n")
    );
}

/// The projection says what happened in no client's dialect: it names neither the dialect nor
/// anything of Apache Maka's wording (its notifications, its shapes); the connection words
/// what the projection returns on the way out (`maka_dialect::told`).
#[test]
fn the_projection_knows_no_dialect() {
    let offenders = source_lines(
        |rel| rel.starts_with("acp/projection/"),
        |line| {
            let code = line.trim_start();
            !code.starts_with("//")
                && [
                    "maka_dialect",
                    "Dialect",
                    "mod maka",
                    "_maka/turn/status",
                    "_maka/goal/status",
                    "_maka/plan/changed",
                ]
                .iter()
                .any(|t| code.contains(t))
        },
    );
    assert!(
        offenders.is_empty(),
        "word it for the client in maka_dialect::told:\n{}",
        offenders.join("\n")
    );
}

/// Nor does it reach the dialect through what it uses: the projection and the configuration
/// options it shows (`config_options.rs`) use only the adapter's leaf modules (types, params,
/// errors), so neither sits in an import cycle with the connection, the dialect or the method
/// table.
#[test]
fn the_projection_uses_only_leaf_modules() {
    let others = [
        "agent",
        "auth",
        "client_call",
        "configure",
        "connection",
        "follow",
        "host_link",
        "initialize",
        "interaction",
        "lifecycle",
        "maka",
        "maka_dialect",
        "methods",
        "prompt",
        "read",
        "session",
        "shared_names",
        "turns",
        "view",
        "workers",
    ];
    let offenders = source_lines(
        |rel| rel.starts_with("acp/projection/") || rel == "acp/config_options.rs",
        |line| {
            let code = line.trim_start();
            let names = |prefix: &str| {
                code.match_indices(prefix).any(|(i, _)| {
                    let name: String = code[i + prefix.len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    others.contains(&name.as_str())
                })
            };
            !code.starts_with("//") && (names("crate::acp::") || names("super::"))
        },
    );
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

fn lines_outside(skipped: &[&str], matches: impl Fn(&str) -> bool) -> Vec<String> {
    source_lines(|rel| !skipped.iter().any(|p| rel.starts_with(p)), matches)
}

/// The lines of `src/` that `matches`, in the files (by their path under `src/`) `include`
/// takes, before their unit tests.
fn source_lines(include: impl Fn(&str) -> bool, matches: impl Fn(&str) -> bool) -> Vec<String> {
    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    assert!(files.len() > 50, "the scan found the sources");
    let mut offenders = vec![];
    for path in &files {
        let rel = path
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if !include(&rel) || rel.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim() == "#[cfg(test)]"
                && text.lines().nth(n + 1).is_some_and(|l| l.ends_with('{'))
            {
                break;
            }
            if matches(line) {
                offenders.push(format!("src/{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    offenders
}

/// The one rule for a lost host: any operation that finds the host not answering (a transport
/// failure) forgets it, whichever call site made it, so the next call starts or finds a new
/// one — unless the host still answers its health check (one slow call does not kill a host
/// every session uses); an error the host answered with does not.
#[test]
fn any_host_call_that_finds_the_host_gone_forgets_it() {
    use crate::host_api::fake::Unreachable;
    // A host whose call failed but that answers its health check is kept.
    let link = HostLink::connected(Arc::new(Unreachable { alive: true }), "e1");
    let conn = link.current().unwrap();
    assert!(conn.call::<ops::ModelsList>(&ops::Empty {}).is_err());
    assert!(link.current().is_some(), "a slow but living host is kept");
    // A host that answers with an error is kept.
    let (shared, _lines) = shared(Arc::new(FakeHost::default()));
    let conn = shared.link.current().unwrap();
    assert!(conn.call::<ops::ModelsList>(&ops::Empty {}).is_err());
    assert!(shared.link.current().is_some());
    // A host that does not answer is forgotten, by either kind of call.
    for by_request in [false, true] {
        let link = HostLink::connected(Arc::new(Unreachable { alive: false }), "e1");
        let conn = link.current().unwrap();
        if by_request {
            assert!(conn.request::<ops::ModelsList>(&ops::Empty {}).is_err());
        } else {
            assert!(conn.call::<ops::ModelsList>(&ops::Empty {}).is_err());
        }
        assert!(link.current().is_none(), "by_request: {by_request}");
    }
}

/// A host that numbers its frames up to `u64::MAX` does not make the sequence check overflow:
/// any frame after that is out of sequence (the reader catches up), never a panic.
#[test]
fn a_frame_after_the_last_sequence_number_is_out_of_sequence() {
    let (shared, _lines) = shared(Arc::new(FakeHost::default()));
    let session = AcpSession::for_connection(&shared, "s", Default::default()).unwrap();
    session.set_position(u64::MAX, "e1", None);
    for seq in [0, 1, u64::MAX] {
        let late = text(seq, 0, "x");
        let applied = session.apply(&shared, late.seq, late.body);
        assert!(applied.is_err_and(|gap| gap.last == u64::MAX), "seq {seq}");
    }
    session.set_position(4, "e1", None);
    let next = text(5, 0, "x");
    assert!(session.apply(&shared, next.seq, next.body).is_ok());
}

// ---- found by review 58 ----------------------------------------------------------------

/// A v2 connection follows a turn it did not prompt (another client's, a goal's): it is told
/// `running`. The turn ends inside a gap of the stream; the catch-up's snapshot says no turn
/// is active. `follow::reopen` settles only this connection's own prompt, so nothing ever
/// says `idle`: the session stays "running" for the client (until some later turn ends).
#[test]
fn v2_a_turn_that_ended_in_a_gap_is_told_idle() {
    let host = Arc::new(FakeHost::default().answer::<ops::SessionOpen>(|_| Ok(snapshot())));
    host.window(vec![
        frame(
            1,
            FrameBody::TurnStarted {
                turn_id: "g1".into(),
                run_id: "r".into(),
                origin: "goal".into(),
                content: None,
                content_truncated: false,
            },
        ),
        text(2, 0, "Hel"),
        // Frames 3 (more text) and 4 (its `turn_terminal`) were lost.
        text(5, 0, "next"),
    ]);
    let (outbox, lines) = test_outbox();
    let client: Arc<dyn HostApi> = host.clone();
    let shared = Arc::new(Shared::new(
        outbox.clone(),
        Arc::new(ClientCalls::new(outbox)),
        Arc::new(HostLink::connected(client, "e1")),
        Default::default(),
        None,
    ));
    shared.negotiate(super::out::Version::V2);
    let session = AcpSession::for_connection(&shared, "s", Default::default()).unwrap();
    session.set_position(0, "e1", Some("g1".into()));
    let conn = shared.link.current().unwrap();
    super::follow::ensure_reader(&session, &shared, &conn, None);
    let mut states = vec![];
    let deadline = Instant::now() + Duration::from_secs(3);
    while let Some(l) = lines.next_before(deadline) {
        let v: Value = serde_json::from_str(&l).unwrap();
        if let Some(s) = v["params"]["update"]["state"].as_str() {
            states.push(s.to_string());
        }
    }
    assert_eq!(
        states.last().map(String::as_str),
        Some("idle"),
        "the turn that ended in the gap left the client `running`: {states:?}"
    );
}

/// Only the typed writers (`out.rs`: `Out<V1>`, `Out<V2>`, each made only for the version
/// its connection negotiated) write `session/update`: no other adapter file names the
/// method, so no update can leave except through a writer of its own version's type.
#[test]
fn only_the_typed_writers_write_session_updates() {
    let offenders = source_lines(
        |rel| rel.starts_with("acp/") && rel != "acp/out.rs" && !rel.ends_with("tests.rs"),
        |line| line.contains("\"session/update\""),
    );
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

// ---- review 58b (second pass) ----

fn v2_shared(host: Arc<FakeHost>) -> (Arc<Shared>, TestLines) {
    let (outbox, lines) = test_outbox();
    let client: Arc<dyn HostApi> = host;
    let shared = Arc::new(Shared::new(
        outbox.clone(),
        Arc::new(ClientCalls::new(outbox)),
        Arc::new(HostLink::connected(client, "e1")),
        Default::default(),
        None,
    ));
    shared.negotiate(super::out::Version::V2);
    (shared, lines)
}

fn started(seq: u64, turn: &str) -> Frame {
    frame(
        seq,
        FrameBody::TurnStarted {
            turn_id: turn.into(),
            run_id: "r".into(),
            origin: "prompt".into(),
            content: Some(MessageContent {
                text: "hi".into(),
                attachments: vec![],
            }),
            content_truncated: false,
        },
    )
}

/// Every line written until none comes for the rest of `secs` (bounded).
fn all_lines(lines: &TestLines, secs: u64) -> Vec<Value> {
    let mut out = vec![];
    let deadline = Instant::now() + Duration::from_secs(secs);
    while let Some(l) = lines.next_before(deadline) {
        out.push(serde_json::from_str(&l).unwrap());
    }
    out
}

/// Review 58b: this connection's own v2 prompt whose turn ended (max_tokens) while the reader
/// was in a sequence gap. `reopen` reconciles first (`idle` without a stop reason, the
/// foreground now idle), then `settle` tells `stopped(max_tokens)`, which `idle()` drops
/// because the foreground is idle already: the client never learns why its turn ended.
#[test]
fn v2_own_turn_that_ended_in_a_gap_keeps_its_stop_reason() {
    let host = Arc::new(
        FakeHost::default()
            .answer::<ops::SessionOpen>(|_| Ok(snapshot()))
            .answer::<ops::TurnQuery>(|_| {
                Ok(turn_snapshot(
                    "t1",
                    "r",
                    "prompt",
                    TurnStatus::MaxTokens,
                    Some("max_tokens"),
                    Some(1),
                ))
            }),
    );
    // Frames 3 (more text) and 4 (its `turn_terminal`, max_tokens) were lost.
    host.window(vec![started(1, "t1"), text(2, 0, "Hel"), text(5, 0, "x")]);
    let (ctx, lines, session, _requests) = v2_prompt(&host, false);
    let shared = Arc::clone(&ctx.shared);
    let conn = shared.link.current().unwrap();
    super::follow::ensure_reader(&session, &shared, &conn, None);
    let out = all_lines(&lines, 3);
    let states: Vec<&Value> = out
        .iter()
        .map(|v| &v["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "state_update")
        .collect();
    let last = states.last().expect("a state");
    assert_eq!(
        (last["state"].as_str(), last["stopReason"].as_str()),
        (Some("idle"), Some("max_tokens")),
        "the own turn's end lost its stop reason: {states:?}"
    );
}

/// Review 58b: a v2 prompt answered `-32800` before the dispatcher acts on it (a table that
/// does not hold `session/prompt`'s cancels, or a prompt the host started from its queue just
/// as it was withdrawn): if its `turn_started` is applied in between, the client, told "not
/// inserted", must neither see its message inserted nor its turn run on.
#[test]
fn v2_prompt_answered_32800_as_its_turn_starts_does_not_run() {
    // turn.stop is recorded (its answer does not matter here).
    let host = Arc::new(FakeHost::default());
    host.window(vec![started(1, "t1"), text(2, 0, "Hel")]);
    let (ctx, lines, session, requests) = v2_prompt(&host, false);
    let shared = Arc::clone(&ctx.shared);
    assert!(!session.prompt_started("t1", false), "not cancelled yet");
    // The reader thread answers the `$/cancel_request` at once...
    assert!(requests.cancel(&RequestId::Int(7)));
    // ...the session's reader applies the turn's start before the dispatcher gets to it...
    let conn = shared.link.current().unwrap();
    super::follow::ensure_reader(&session, &shared, &conn, None);
    let out = lines_until(&lines, |v| {
        v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    // ...then the dispatcher acts on the notification.
    let ctx = Ctx {
        shared: Arc::clone(&shared),
    };
    let (_, withdrawn) = super::methods::NOTIFICATIONS
        .iter()
        .find(|(m, _)| *m == "$/cancel_request")
        .unwrap();
    withdrawn(&ctx, &json!({"requestId": 7}));
    let refused = out
        .iter()
        .any(|v| v["id"] == 7 && v["error"]["code"] == -32800);
    let inserted = out
        .iter()
        .any(|v| v["params"]["update"]["sessionUpdate"] == "user_message");
    assert!(refused, "{out:?}");
    let deadline = Instant::now() + Duration::from_secs(3);
    while !host.called().iter().any(|c| c == "turn.stop") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !inserted && host.called().iter().any(|c| c == "turn.stop"),
        "answered -32800 (not inserted), yet its user message was shown ({inserted}) and its \
         turn was not stopped ({:?}): {out:?}",
        host.called()
    );
}

/// Review 58b: the same gap, but the next turn (a goal's, another client's) is already
/// running in the snapshot. `reconcile(running)` says nothing (running → running), then
/// `settle` ends the own prompt with `idle end_turn`: the client is told the session is idle
/// while a turn runs, and nothing of that turn says `running` again (only a `turn_status` or
/// `turn_started` would, and both are behind the snapshot).
#[test]
fn v2_own_turn_that_ended_in_a_gap_before_the_next_leaves_it_running() {
    let host = Arc::new(
        FakeHost::default()
            .answer::<ops::SessionOpen>(|_| {
                Ok(ops::OpenSnapshot {
                    active_turn: Some(turn_snapshot(
                        "g2",
                        "r2",
                        "goal",
                        TurnStatus::Running,
                        None,
                        None,
                    )),
                    ..snapshot()
                })
            })
            .answer::<ops::TurnQuery>(|_| {
                Ok(turn_snapshot(
                    "t1",
                    "r",
                    "prompt",
                    TurnStatus::Completed,
                    Some("end_turn"),
                    Some(1),
                ))
            }),
    );
    // Frames 3 (t1's `turn_terminal`) and 4 (g2's `turn_started`) were lost.
    host.window(vec![started(1, "t1"), text(2, 0, "Hel"), text(5, 0, "x")]);
    // After the catch-up, g2 goes on live.
    host.window(vec![frame(
        5,
        FrameBody::TextDelta {
            turn_id: "g2".into(),
            message_id: "m2".into(),
            start_offset: 0,
            text: "goal words".into(),
            complete: false,
        },
    )]);
    let (ctx, lines, session, _requests) = v2_prompt(&host, false);
    let shared = Arc::clone(&ctx.shared);
    let conn = shared.link.current().unwrap();
    super::follow::ensure_reader(&session, &shared, &conn, None);
    let out = all_lines(&lines, 3);
    // (When that window ends, this fake host's stream ends too and a second catch-up
    // reconciles again: only what the client was told while g2 streamed counts.)
    let live = out
        .iter()
        .position(|v| v["params"]["update"]["content"]["text"] == "goal words")
        .expect("g2's live text");
    let states: Vec<&Value> = out[..live]
        .iter()
        .map(|v| &v["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "state_update")
        .collect();
    assert_eq!(
        states.last().and_then(|s| s["state"].as_str()),
        Some("running"),
        "g2 streams, yet the client was last told: {states:?}"
    );
}

// ---- a withdrawn v2 prompt: `-32800` exactly when the host never inserted it ----

/// A v2 session whose connection holds `session/prompt`'s cancels, as the agent's does, with
/// prompt 7 admitted (turn `t1`).
fn held_prompt(host: &Arc<FakeHost>) -> (Ctx, TestLines, Arc<AcpSession>, Arc<IncomingRequests>) {
    v2_prompt(host, true)
}

/// A v2 session with prompt 7 admitted (turn `t1`); `hold`: its connection holds
/// `session/prompt`'s cancels, as the agent's does once v2 is negotiated.
fn v2_prompt(
    host: &Arc<FakeHost>,
    hold: bool,
) -> (Ctx, TestLines, Arc<AcpSession>, Arc<IncomingRequests>) {
    let (shared, lines) = v2_shared(Arc::clone(host));
    let session = AcpSession::for_connection(&shared, "s", Default::default()).unwrap();
    session.set_position(0, "e1", None);
    shared.hold_session(&session);
    let requests = IncomingRequests::new(shared.outbox.clone());
    if hold {
        requests.hold_cancels(super::HELD_CANCELS);
    }
    let responder = requests.begin(RequestId::Int(7), "session/prompt").unwrap();
    let answer = super::session::PromptAnswer::OnInsert(Some(responder), vec![]);
    assert!(session
        .admit_prompt("t1", answer, || Box::new(|| {}))
        .is_ok());
    (Ctx { shared }, lines, session, requests)
}

/// What the reader and the dispatcher do with `$/cancel_request` of request `id`.
fn cancel_request(ctx: &Ctx, requests: &IncomingRequests, id: i64) {
    if requests.cancel(&RequestId::Int(id)) {
        let (_, withdrawn) = super::methods::NOTIFICATIONS
            .iter()
            .find(|(m, _)| *m == "$/cancel_request")
            .unwrap();
        withdrawn(ctx, &json!({"requestId": id}));
    }
}

fn refused(out: &[Value], id: i64) -> bool {
    out.iter()
        .any(|v| v["id"] == id && v["error"]["code"] == -32800)
}

#[test]
fn a_v2_prompt_withdrawn_before_its_start_is_sent_is_refused_and_never_starts() {
    let host = Arc::new(FakeHost::default());
    let (ctx, lines, session, requests) = held_prompt(&host);
    cancel_request(&ctx, &requests, 7);
    assert!(refused(&all_lines(&lines, 1), 7));
    assert!(
        !session.start_sending("t1"),
        "its turn.start must not be sent"
    );
}

#[test]
fn a_v2_prompt_withdrawn_while_the_host_inserts_it_is_answered_inserted_not_refused() {
    let host = Arc::new(FakeHost::default());
    host.window(vec![started(1, "t1"), text(2, 0, "Hel")]);
    let (ctx, lines, session, requests) = held_prompt(&host);
    assert!(session.start_sending("t1"));
    // `turn.start` is in flight: the withdrawal waits for its answer...
    cancel_request(&ctx, &requests, 7);
    assert!(all_lines(&lines, 1).is_empty(), "decided too early");
    // ...which says the host started the turn: the prompt is in its history.
    assert!(
        !session.prompt_started("t1", false),
        "an inserted prompt's turn goes on"
    );
    let conn = ctx.shared.link.current().unwrap();
    super::follow::ensure_reader(&session, &ctx.shared, &conn, None);
    let out = lines_until(&lines, |v| {
        v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    assert!(!refused(&out, 7), "{out:?}");
    let answered = out
        .iter()
        .any(|v| v["id"] == 7 && v["result"]["messageId"].is_string());
    let shown = out
        .iter()
        .any(|v| v["params"]["update"]["sessionUpdate"] == "user_message");
    assert!(answered && shown, "{out:?}");
    assert!(!host.called().iter().any(|c| c == "turn.stop"));
}

#[test]
fn a_v2_prompt_withdrawn_while_the_host_queues_it_is_refused_and_stopped() {
    let host = Arc::new(FakeHost::default().answer::<ops::TurnStop>(|_| Ok(stopped_snapshot(""))));
    let (ctx, lines, session, requests) = held_prompt(&host);
    assert!(session.start_sending("t1"));
    cancel_request(&ctx, &requests, 7);
    assert!(all_lines(&lines, 1).is_empty(), "decided too early");
    // The host only queued it (behind another client's turn): withdrawn, its turn stopped
    // (`turns::start` then stops it; the stop's answer says it was taken out of the queue).
    assert!(
        session.prompt_started("t1", true),
        "its queued turn must be stopped"
    );
    super::session::stop_queued_turn(&ctx.shared, &session, "t1");
    assert!(refused(&all_lines(&lines, 1), 7));
}

#[test]
fn a_cancel_of_an_inserted_v2_prompt_is_ignored() {
    let host = Arc::new(FakeHost::default());
    host.window(vec![started(1, "t1"), text(2, 0, "Hel")]);
    let (ctx, lines, session, requests) = held_prompt(&host);
    assert!(session.start_sending("t1"));
    assert!(!session.prompt_started("t1", false));
    cancel_request(&ctx, &requests, 7);
    let conn = ctx.shared.link.current().unwrap();
    super::follow::ensure_reader(&session, &ctx.shared, &conn, None);
    let out = lines_until(&lines, |v| {
        v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    });
    assert!(!refused(&out, 7), "{out:?}");
    assert!(out
        .iter()
        .any(|v| v["id"] == 7 && v["result"]["messageId"].is_string()));
}

#[test]
fn a_queued_v2_prompt_withdrawn_is_refused_at_once_and_never_starts() {
    let host = Arc::new(FakeHost::default());
    let (ctx, lines, session, requests) = held_prompt(&host);
    let responder = requests.begin(RequestId::Int(8), "session/prompt").unwrap();
    let answer = super::session::PromptAnswer::OnInsert(Some(responder), vec![]);
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ran_in = Arc::clone(&ran);
    let start = move || -> Box<dyn FnOnce() + Send> {
        Box::new(move || ran_in.store(true, std::sync::atomic::Ordering::SeqCst))
    };
    assert!(session.admit_prompt("t2", answer, start).is_ok());
    cancel_request(&ctx, &requests, 8);
    assert!(refused(&all_lines(&lines, 1), 8));
    let done = Ok(super::types::PromptResponse::new(
        super::types::StopReason::EndTurn,
    ));
    session.finish_prompt(done);
    // Had it stayed in the queue, it would be the pending prompt now, its start spawned.
    assert_eq!(
        session.prompt_turn(),
        None,
        "the withdrawn prompt became pending"
    );
    assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(requests.wait_answered(Duration::ZERO), 0);
}

/// The host queued the prompt (`turn.start` answered `queued`) and started it from its queue
/// before that answer was read: the reader applied its `turn_started` and answered it inserted.
/// A withdrawal asked while `turn.start` was in flight must then be ignored, as for any
/// inserted prompt — not stop its turn, nor take it for one still in the host's queue (a later
/// cancel would then answer it before its turn's end).
#[test]
fn a_v2_prompt_withdrawn_then_started_from_the_hosts_queue_before_its_start_returns_goes_on() {
    let host = Arc::new(FakeHost::default());
    let (ctx, lines, session, requests) = held_prompt(&host);
    assert!(session.start_sending("t1"));
    cancel_request(&ctx, &requests, 7);
    // The reader applies the turn's start (the host ran it from its queue) and answers it.
    assert!(session
        .apply(&ctx.shared, Some(1), started(1, "t1").body)
        .is_ok());
    if let Some(r) = session.accept_prompt("t1") {
        r.respond(Ok(json!({"messageId": "m"})));
    }
    // Only now is `turn.start`'s answer, `queued`, read.
    assert!(
        !session.prompt_started("t1", true),
        "the inserted prompt's turn was stopped"
    );
    assert_eq!(
        session.started_prompt_turn().as_deref(),
        Some("t1"),
        "the running turn is taken for one in the host's queue"
    );
    let out = all_lines(&lines, 1);
    assert!(!refused(&out, 7), "{out:?}");
    assert!(out
        .iter()
        .any(|v| v["id"] == 7 && v["result"]["messageId"].is_string()));
}

/// `turn.start`'s answer for one prompt is read after its turn ran and ended (the reader
/// answered it, and the next queued prompt became pending, its own `turn.start` in flight):
/// that answer is the first prompt's, and decides nothing of the next one's withdrawal.
#[test]
fn a_late_turn_start_answer_does_not_decide_the_next_prompts_withdrawal() {
    let host = Arc::new(FakeHost::default().answer::<ops::TurnStop>(|_| Ok(stopped_snapshot(""))));
    let (ctx, lines, session, requests) = held_prompt(&host);
    let responder = requests.begin(RequestId::Int(8), "session/prompt").unwrap();
    let answer = super::session::PromptAnswer::OnInsert(Some(responder), vec![]);
    assert!(session
        .admit_prompt("t2", answer, || Box::new(|| {}))
        .is_ok());
    assert!(session.start_sending("t1"));
    // t1 ran and ended (the host had queued it, then ran it) before its `turn.start` answer
    // was read: prompt 7 answered, prompt 8 pending, its `turn.start` sent.
    let done = Ok(super::types::PromptResponse::new(
        super::types::StopReason::EndTurn,
    ));
    session.finish_prompt(done);
    assert_eq!(session.prompt_turn().as_deref(), Some("t2"));
    assert!(session.start_sending("t2"));
    cancel_request(&ctx, &requests, 8);
    // t1's `turn.start` answer (`queued`) is read now.
    session.prompt_started("t1", true);
    let out = all_lines(&lines, 1);
    assert!(
        !refused(&out, 8),
        "prompt 8 was withdrawn on t1's turn.start answer, before its own: {out:?}"
    );
    // Its own answer decides: the host only queued it.
    assert!(session.prompt_started("t2", true));
    super::session::stop_queued_turn(&ctx.shared, &session, "t2");
    assert!(refused(&all_lines(&lines, 1), 8));
}

/// A client may use an id again once its request is answered: prompt 7, withdrawn before its
/// start (answered `-32800`, still pending until its start thread sees it), then a new prompt 7
/// queued behind it. A `$/cancel_request` of 7 is the new one's: withdrawn, never started —
/// not taken for the old one, already answered, and lost.
#[test]
fn a_withdrawal_of_a_reused_id_withdraws_the_request_in_flight() {
    let host = Arc::new(FakeHost::default());
    let (ctx, lines, session, requests) = held_prompt(&host);
    cancel_request(&ctx, &requests, 7);
    assert!(refused(&all_lines(&lines, 1), 7));
    let responder = requests.begin(RequestId::Int(7), "session/prompt").unwrap();
    let answer = super::session::PromptAnswer::OnInsert(Some(responder), vec![]);
    assert!(session
        .admit_prompt("t2", answer, || Box::new(|| {}))
        .is_ok());
    cancel_request(&ctx, &requests, 7);
    assert!(
        refused(&all_lines(&lines, 1), 7),
        "the second prompt 7 was not withdrawn"
    );
    assert_eq!(requests.wait_answered(Duration::ZERO), 0);
}

/// A `turn.stop` answer: `run` empty for a turn taken out of the host's queue (it never
/// started), a run's id for one the host had started.
fn stopped_snapshot(run: &str) -> TurnSnapshot {
    turn_snapshot(
        "t1",
        run,
        "prompt",
        TurnStatus::Cancelled,
        Some("turn_stopped"),
        Some(0),
    )
}

/// Session `s`'s turn `turn` as the host tells it (started at 0).
fn turn_snapshot(
    turn: &str,
    run: &str,
    origin: &str,
    status: TurnStatus,
    reason: Option<&str>,
    ended_at: Option<u64>,
) -> TurnSnapshot {
    TurnSnapshot {
        session_id: "s".into(),
        turn_id: turn.into(),
        run_id: run.into(),
        origin: origin.into(),
        status,
        reason: reason.map(str::to_string),
        failure_class: None,
        failure_message: None,
        failure_details: None,
        started_at: 0,
        ended_at,
    }
}

/// A v2 prompt waiting in the host's queue is withdrawn just as the host starts it (the turn
/// before it ended): the `turn.stop` meant to take it out of the queue finds it running (its
/// answer names a run). The prompt is in the host's history: it must not be answered `-32800`
/// (the reader answers it inserted, its turn ends stopped) — which is known only from that
/// answer, not when the withdrawal is decided.
#[test]
fn a_v2_prompt_withdrawn_from_the_hosts_queue_as_the_host_starts_it_is_not_refused() {
    let host = Arc::new(FakeHost::default().answer::<ops::TurnStop>(|_| Ok(stopped_snapshot("r"))));
    let (ctx, lines, session, requests) = held_prompt(&host);
    assert!(session.start_sending("t1"));
    assert!(!session.prompt_started("t1", true), "queued on the host");
    cancel_request(&ctx, &requests, 7);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !host.called().iter().any(|c| c == "turn.stop") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = all_lines(&lines, 1);
    assert!(
        !refused(&out, 7),
        "answered -32800 though the host ran it: {out:?}"
    );
    assert_eq!(
        session.prompt_turn().as_deref(),
        Some("t1"),
        "the running prompt was settled as if taken out of the host's queue"
    );
}

/// The same when the host did take it out of its queue (the stop's answer names no run):
/// answered `-32800`, and settled (no frame will come for it).
#[test]
fn a_v2_prompt_withdrawn_from_the_hosts_queue_is_refused_once_the_host_took_it_out() {
    let host = Arc::new(FakeHost::default().answer::<ops::TurnStop>(|_| Ok(stopped_snapshot(""))));
    let (ctx, lines, session, requests) = held_prompt(&host);
    assert!(session.start_sending("t1"));
    assert!(!session.prompt_started("t1", true), "queued on the host");
    cancel_request(&ctx, &requests, 7);
    let out = lines_until(&lines, |v| v["id"] == 7);
    assert!(refused(&out, 7), "{out:?}");
    session.wait_prompt_done(Duration::from_secs(5));
    assert_eq!(session.prompt_turn(), None);
    assert!(host.called().iter().any(|c| c == "turn.stop"));
}

/// A client that repeats its `$/cancel_request` while the withdrawn prompt's stop is on its
/// way sends one `turn.stop`, not one (and a thread) per repeat.
#[test]
fn a_repeated_withdrawal_of_a_host_queued_prompt_sends_one_stop() {
    let host = Arc::new(FakeHost::default().answer::<ops::TurnStop>(|_| Ok(stopped_snapshot("r"))));
    let (ctx, lines, session, requests) = held_prompt(&host);
    assert!(session.start_sending("t1"));
    assert!(!session.prompt_started("t1", true), "queued on the host");
    for _ in 0..5 {
        cancel_request(&ctx, &requests, 7);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while !host.called().iter().any(|c| c == "turn.stop") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = all_lines(&lines, 1);
    let stops = host.called().iter().filter(|c| *c == "turn.stop").count();
    assert_eq!(stops, 1, "{:?}", host.called());
}

/// `session/cancel` of a prompt in the host's queue goes by the stop's answer too: one the host
/// started from its queue before the stop arrived is not answered as taken out (its turn's
/// frames, the stop's among them, are still to come and end it).
#[test]
fn a_cancel_of_a_host_queued_prompt_the_host_started_meanwhile_waits_for_its_turn() {
    for (run, taken_out) in [("r", false), ("", true)] {
        let host = Arc::new(
            FakeHost::default().answer::<ops::TurnStop>(move |_| Ok(stopped_snapshot(run))),
        );
        let (ctx, lines, session, _requests) = held_prompt(&host);
        assert!(session.start_sending("t1"));
        assert!(!session.prompt_started("t1", true), "queued on the host");
        super::session::cancel(&session, &ctx.shared);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !host.called().iter().any(|c| c == "turn.stop") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if taken_out {
            session.wait_prompt_done(Duration::from_secs(5));
            assert!(refused(&lines_until(&lines, |v| v["id"] == 7), 7));
        } else {
            let out = all_lines(&lines, 1);
            assert!(!out.iter().any(|v| v["id"] == 7), "answered early: {out:?}");
        }
        assert_eq!(session.prompt_turn().is_none(), taken_out, "run {run:?}");
    }
}

/// An editor that sends `session/cancel` again while the prompt waits in the host's queue and
/// its stop is on its way (the stop found the turn started, whose frames are still to come)
/// sends no second `turn.stop` and starts no thread for one: one per cancel grows without end
/// with the cancels, as the repeated `$/cancel_request` already does not.
#[test]
fn a_repeated_cancel_of_a_host_queued_prompt_sends_one_stop() {
    let host = Arc::new(FakeHost::default().answer::<ops::TurnStop>(|_| Ok(stopped_snapshot("r"))));
    let (ctx, lines, session, _requests) = held_prompt(&host);
    assert!(session.start_sending("t1"));
    assert!(!session.prompt_started("t1", true), "queued on the host");
    for _ in 0..5 {
        super::session::cancel(&session, &ctx.shared);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while !host.called().iter().any(|c| c == "turn.stop") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = all_lines(&lines, 1);
    let stops = host.called().iter().filter(|c| *c == "turn.stop").count();
    assert_eq!(stops, 1, "{:?}", host.called());
    assert_eq!(
        session.prompt_turn().as_deref(),
        Some("t1"),
        "still pending"
    );
}

/// A v2 prompt whose `$/cancel_request` the JSON-RPC layer answered `-32800` itself (read
/// before the dispatcher negotiated v2 and set the hold: a pipelining client) is, by that
/// answer, not inserted: its `turn.start` must not be sent, or the host's history holds a
/// prompt the client was told it never got (before the hold, such a prompt was withdrawn here).
#[test]
fn a_v2_prompt_answered_32800_by_the_layer_before_its_start_never_starts() {
    let host = Arc::new(FakeHost::default());
    // No hold: the layer answers the cancel at once.
    let (ctx, lines, session, requests) = v2_prompt(&host, false);
    cancel_request(&ctx, &requests, 7);
    assert!(refused(&all_lines(&lines, 1), 7));
    assert!(
        !session.start_sending("t1"),
        "answered -32800, yet its turn.start would be sent"
    );
}
