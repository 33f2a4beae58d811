//! ACP v2 (draft) through the official Rust SDK's v2 client (`agent-client-protocol` 5.2.0 with
//! its `unstable_protocol_v2` feature: `Client.v2()`, the schema crate's `v2` types, =1.17.0),
//! issue 58. Every message is typed by the SDK: requests built from `v2::schema`, responses,
//! `session/update` (`UpdateSessionNotification`) and `session/request_permission` parsed into
//! it; and every line the agent sent is read with the SDK's type for it, written back and
//! compared with the line as sent (`wire.rs`): what the SDK cannot read, or reads silently
//! differently, is listed in `sdkDropped` (and an unreadable line fails the run).
//!
//! Steps, over stdio: `initialize` (`protocolVersion: 2`, through `send_initialize`);
//! `session/new` (`build_session(ws).start_session()`); "please write the notes" — the
//! `write_file` permission answered "allow once" by kind, followed to the `idle` state after the
//! prompt's `user_message` echo (v2 answers a prompt on insertion, with the message's id);
//! `session/resume` with `replayFrom: {type: "start"}` on the same connection, whose replay
//! (everything it sends before its answer) must fold to what was shown live; `session/close`.
//!
//! usage: maka-real-client-rust-v2 AGENT_BINARY WORKSPACE
//!   → prints the observation summary as JSON on stdout (compared with expected_rust_v2.json).

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use agent_client_protocol::schema::{MaybeUndefined, ProtocolVersion};
use agent_client_protocol::v2::schema as v2;
use agent_client_protocol::v2::{ConnectionTo, InitializeOutcome};
use agent_client_protocol::{AcpAgent, AcpAgentConfig, Agent, Client, Error, LineDirection};
use futures::StreamExt;
use futures::channel::mpsc;
use serde_json::{Value, json};

#[path = "../wire.rs"]
#[allow(dead_code)] // its v1 reader is the other client's
mod wire;

/// Every line the client wrote to the agent and read from it (the SDK's transport tap).
type Wire = Arc<Mutex<(Vec<String>, Vec<String>)>>;

/// The permission dialogs, as the SDK typed them, with the option kind answered.
type Dialogs = Arc<Mutex<Vec<(v2::RequestPermissionRequest, Option<String>)>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [agent_bin, ws] = args.as_slice() else {
        eprintln!("usage: maka-real-client-rust-v2 AGENT_BINARY WORKSPACE");
        std::process::exit(2);
    };
    match futures::executor::block_on(run(agent_bin, Path::new(ws))) {
        Ok(summary) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&summary).unwrap_or_default()
            );
            // The SDK answers an unreadable request with an error, but only logs an unreadable
            // notification and goes on: that must fail the run too.
            let unreadable: Vec<&str> = summary["sdkDropped"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter(|l| l.contains("unreadable"))
                .collect();
            if !unreadable.is_empty() {
                eprintln!("the Rust SDK could not read what the agent sent: {unreadable:?}");
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("the Rust SDK v2 client failed: {e:?}");
            std::process::exit(1);
        }
    }
}

/// ACP v2, as `v2::schema` reads it.
const V2: wire::Reader = wire::Reader {
    params: |method, params| match method {
        "session/update" => Some(wire::round_trip::<v2::UpdateSessionNotification>(params)),
        "session/request_permission" => {
            Some(wire::round_trip::<v2::RequestPermissionRequest>(params))
        }
        _ => None,
    },
    result: |method, result| match method {
        "initialize" => Some(wire::round_trip::<v2::InitializeResponse>(result)),
        "session/new" => Some(wire::round_trip::<v2::NewSessionResponse>(result)),
        "session/prompt" => Some(wire::round_trip::<v2::PromptResponse>(result)),
        "session/resume" => Some(wire::round_trip::<v2::ResumeSessionResponse>(result)),
        "session/close" => Some(wire::round_trip::<v2::CloseSessionResponse>(result)),
        _ => None,
    },
};

async fn run(agent_bin: &str, ws: &Path) -> Result<Value, Error> {
    let wire: Wire = Arc::default();
    let tap = wire.clone();
    let agent = AcpAgent::new(AcpAgentConfig::new(agent_bin)).with_debug(move |line, direction| {
        match direction {
            LineDirection::Stderr => eprintln!("agent: {line}"),
            LineDirection::Stdin => lock(&tap).0.push(line.to_string()),
            LineDirection::Stdout => lock(&tap).1.push(line.to_string()),
        }
    });
    // The session's updates reach the scenario in the order the SDK handed them over.
    let (updates_tx, updates) = mpsc::unbounded::<v2::UpdateSessionNotification>();
    let dialogs: Dialogs = Arc::default();
    let on_dialog = dialogs.clone();
    let ws = ws.to_path_buf();
    let seen_wire = wire.clone();
    let mut summary = Client
        .v2()
        .name("maka-real-client-rust-v2")
        .on_receive_notification(
            async move |n: v2::UpdateSessionNotification, _cx| {
                updates_tx
                    .unbounded_send(n)
                    .map_err(Error::into_internal_error)
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: v2::RequestPermissionRequest, responder, _cx| {
                // Answered by kind, as a person pressing "allow once" would.
                let allow = request
                    .options
                    .iter()
                    .find(|o| o.kind == v2::PermissionOptionKind::AllowOnce)
                    .map(|o| o.option_id.clone());
                let answered = allow.as_ref().map(|_| "allow_once".to_string());
                lock(&on_dialog).push((request, answered));
                responder.respond(v2::RequestPermissionResponse::new(match allow {
                    Some(id) => v2::RequestPermissionOutcome::Selected(
                        v2::SelectedPermissionOutcome::new(id),
                    ),
                    None => v2::CancelledPermissionOutcome::new().into(),
                }))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(agent, async move |cx: ConnectionTo<Agent>| {
            scenario(cx, &ws, updates, &dialogs, &seen_wire).await
        })
        .await?;
    let (sent, received) = std::mem::take(&mut *lock(&wire));
    if let Value::Object(m) = &mut summary {
        m.insert(
            "sdkDropped".into(),
            json!(wire::dropped_as(&V2, &sent, &received)),
        );
    }
    Ok(summary)
}

/// A client's view of one session, folded from its updates with the schema's upsert rules:
/// messages by id (a whole upsert replaces, `null` clears, a chunk appends), tool calls by id
/// (the fields an update carries replace the call's), and the states in order.
#[derive(Default)]
struct Fold {
    messages: Vec<(String, String, String)>, // id, role, text
    calls: Vec<(String, serde_json::Map<String, Value>)>,
    states: Vec<String>,
}

fn text_of(blocks: &[v2::ContentBlock]) -> String {
    blocks
        .iter()
        .map(|b| match b {
            v2::ContentBlock::Text(t) => t.text.clone(),
            _ => "[content]".to_string(),
        })
        .collect()
}

impl Fold {
    fn message(&mut self, id: &v2::MessageId, role: &str) -> &mut String {
        let id = id.to_string();
        let at = match self.messages.iter().position(|m| m.0 == id) {
            Some(at) => at,
            None => {
                self.messages.push((id, role.to_string(), String::new()));
                self.messages.len() - 1
            }
        };
        &mut self.messages[at].2
    }

    fn whole(
        &mut self,
        id: &v2::MessageId,
        role: &str,
        content: &MaybeUndefined<Vec<v2::ContentBlock>>,
    ) {
        let text = self.message(id, role);
        match content {
            MaybeUndefined::Value(blocks) => *text = text_of(blocks),
            MaybeUndefined::Null => text.clear(),
            MaybeUndefined::Undefined => {}
        }
    }

    fn apply(&mut self, update: &v2::SessionUpdate) {
        match update {
            v2::SessionUpdate::UserMessage(m) => self.whole(&m.message_id, "user", &m.content),
            v2::SessionUpdate::AgentMessage(m) => self.whole(&m.message_id, "agent", &m.content),
            v2::SessionUpdate::AgentThought(m) => self.whole(&m.message_id, "thought", &m.content),
            v2::SessionUpdate::UserMessageChunk(c) => self
                .message(&c.message_id, "user")
                .push_str(&text_of(std::slice::from_ref(&c.content))),
            v2::SessionUpdate::AgentMessageChunk(c) => self
                .message(&c.message_id, "agent")
                .push_str(&text_of(std::slice::from_ref(&c.content))),
            v2::SessionUpdate::AgentThoughtChunk(c) => self
                .message(&c.message_id, "thought")
                .push_str(&text_of(std::slice::from_ref(&c.content))),
            v2::SessionUpdate::ToolCallUpdate(t) => {
                // The fields as the SDK read them (what it writes back).
                let Ok(Value::Object(fields)) = serde_json::to_value(t) else {
                    return;
                };
                let id = t.tool_call_id.to_string();
                let at = match self.calls.iter().position(|c| c.0 == id) {
                    Some(at) => at,
                    None => {
                        self.calls.push((id, serde_json::Map::new()));
                        self.calls.len() - 1
                    }
                };
                for (k, v) in fields {
                    if k != "_meta" {
                        self.calls[at].1.insert(k, v);
                    }
                }
            }
            v2::SessionUpdate::StateUpdate(s) => self.states.push(match s {
                v2::StateUpdate::Running(_) => "running".into(),
                v2::StateUpdate::RequiresAction(_) => "requires_action".into(),
                v2::StateUpdate::Idle(i) => match stop_reason(i) {
                    Value::String(r) => format!("idle:{r}"),
                    _ => "idle".into(),
                },
                other => format!("other {}", json!(other)),
            }),
            _ => {}
        }
    }

    /// What a person would compare: each message's role and text, each call's title, status
    /// and content kinds.
    fn view(&self) -> (Value, Value) {
        let messages: Vec<Value> = self
            .messages
            .iter()
            .filter(|m| m.1 != "thought")
            .map(|m| json!({"role": m.1, "text": m.2}))
            .collect();
        let calls: Vec<Value> = self
            .calls
            .iter()
            .map(|(_, c)| {
                let kinds: Vec<Value> = c
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|x| x["type"].clone())
                    .collect();
                json!({"title": c.get("title"), "status": c.get("status"), "content": kinds})
            })
            .collect();
        (Value::Array(messages), Value::Array(calls))
    }
}

/// An idle state's stop reason, as sent (`StopReason` is a tagged enum flattened into the state:
/// it writes itself as `{"stopReason": ...}`).
fn stop_reason(idle: &v2::IdleStateUpdate) -> Value {
    json!(idle.stop_reason)["stopReason"].clone()
}

/// A call's `diff` content as a person checks it: the changes (paths relative to the
/// workspace), the patch's format, whether it is a git patch, and its added lines.
fn diff_of(call: &serde_json::Map<String, Value>, ws: &Path) -> Value {
    let Some(d) = call
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "diff")
    else {
        return Value::Null;
    };
    let changes: Vec<Value> = d["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let path = c["path"].as_str().unwrap_or_default();
            let rel = Path::new(path)
                .strip_prefix(ws)
                .map_or_else(|_| path.to_string(), |p| p.display().to_string());
            json!({"operation": c["operation"], "path": rel})
        })
        .collect();
    let patch = d["patch"]["text"].as_str().unwrap_or_default();
    json!({
        "changes": changes,
        "patchFormat": d["patch"]["format"],
        "patchIsGit": patch.starts_with("diff --git "),
        "patchAdds": patch.lines().filter(|l| l.starts_with('+') && !l.starts_with("+++")).collect::<Vec<_>>(),
    })
}

/// The next update of the session, in the order the SDK handed them over.
async fn next(
    updates: &mut mpsc::UnboundedReceiver<v2::UpdateSessionNotification>,
    sid: &v2::SessionId,
) -> Result<v2::SessionUpdate, Error> {
    loop {
        let n = updates.next().await.ok_or_else(|| {
            Error::internal_error().data("the agent went away before the session was idle")
        })?;
        if &n.session_id == sid {
            return Ok(n.update);
        }
    }
}

/// Every update received so far, without waiting.
fn drain(
    updates: &mut mpsc::UnboundedReceiver<v2::UpdateSessionNotification>,
) -> Vec<v2::UpdateSessionNotification> {
    let mut out = Vec::new();
    while let Ok(n) = updates.try_recv() {
        out.push(n);
    }
    out
}

/// `session/update` lines the agent sent from line `from` of what the client read (the transport
/// tap) to the answer to the client's last `method` request.
fn updates_before_answer(wire: &Wire, from: usize, method: &str) -> usize {
    let (sent, received) = &*lock(wire);
    let Some(id) = sent
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["method"] == method)
        .map(|m| m["id"].clone())
        .next_back()
    else {
        return 0;
    };
    received
        .iter()
        .skip(from)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .take_while(|m| !(m["id"] == id && m.get("method").is_none()))
        .filter(|m| m["method"] == "session/update")
        .count()
}

async fn scenario(
    cx: ConnectionTo<Agent>,
    ws: &Path,
    mut updates: mpsc::UnboundedReceiver<v2::UpdateSessionNotification>,
    dialogs: &Dialogs,
    wire: &Wire,
) -> Result<Value, Error> {
    let mut out = serde_json::Map::new();
    let init = cx
        .send_initialize(v2::InitializeRequest::new(
            ProtocolVersion::V2,
            v2::Implementation::new("maka-real-client-rust-v2", "1"),
        ))
        .block_task()
        .await?;
    let init = match init {
        InitializeOutcome::Initialized(r) => r,
        other => {
            return Err(
                Error::internal_error().data(format!("the agent did not choose v2: {other:?}"))
            );
        }
    };
    let mut session_caps: Vec<String> = match serde_json::to_value(&init.capabilities.session) {
        Ok(Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    };
    session_caps.sort();
    out.insert(
        "initialize".into(),
        json!({"protocolVersion": init.protocol_version, "agent": init.info.name,
            "session": session_caps}),
    );

    let setup = cx.build_session(ws).start_session().block_task().await?;
    let session = setup.session;
    let sid = session.session_id().clone();

    // The prompt, followed to the idle state after its message was inserted.
    let mut live = Fold::default();
    let text = "please write the notes";
    let answer = session.send_prompt(text).block_task().await?;
    let mut echoed = None;
    let mut states = Vec::new();
    let stop = loop {
        let u = next(&mut updates, &sid).await?;
        live.apply(&u);
        match &u {
            v2::SessionUpdate::UserMessage(m) if m.message_id == answer.message_id => {
                echoed = Some(match &m.content {
                    MaybeUndefined::Value(b) => text_of(b),
                    _ => String::new(),
                });
            }
            v2::SessionUpdate::StateUpdate(s) if echoed.is_some() => {
                states.push(live.states.last().cloned().unwrap_or_default());
                if let v2::StateUpdate::Idle(i) = s {
                    break stop_reason(i);
                }
            }
            _ => {}
        }
    };
    let states: Vec<String> = states
        .iter()
        .map(|s| s.split(':').next().unwrap_or_default().to_string())
        .collect();
    let agent_text: Vec<&str> = live
        .messages
        .iter()
        .filter(|m| m.1 == "agent")
        .map(|m| m.2.as_str())
        .collect();
    let calls: Vec<Value> = live
        .calls
        .iter()
        .map(|(_, c)| json!({"status": c.get("status"), "diff": diff_of(c, ws)}))
        .collect();
    let permissions: Vec<Value> = lock(dialogs)
        .iter()
        .map(|(d, answered)| {
            let (subject, known) = match &d.subject {
                Some(v2::RequestPermissionSubject::ToolCall(t)) => (
                    json!("tool_call"),
                    live.calls
                        .iter()
                        .any(|c| c.0 == t.tool_call.tool_call_id.to_string()),
                ),
                Some(other) => (json!(other), false),
                None => (Value::Null, false),
            };
            json!({
                "titled": !d.title.is_empty(),
                "subject": subject,
                "callKnown": known,
                "kinds": d.options.iter().map(|o| json!(o.kind)).collect::<Vec<_>>(),
                "answered": answered,
            })
        })
        .collect();
    out.insert(
        "write".into(),
        json!({
            "echoed": echoed.as_deref() == Some(text),
            "states": states,
            "stop": stop,
            "agentText": agent_text.join(" | "),
            "calls": calls,
            "onDisk": std::fs::read_to_string(ws.join("notes.txt")).ok(),
            "permissions": permissions,
        }),
    );

    // Anything after the idle state (none expected) belongs to the live view.
    for n in drain(&mut updates) {
        if n.session_id == sid {
            live.apply(&n.update);
        }
    }

    // Resume with replay on the same connection: what the agent sends before its answer goes to
    // a fresh fold. (The session is idle: nothing more comes before the resume is sent.)
    let mark = lock(wire).1.len();
    let resumed = cx
        .resume_session_from(
            v2::ResumeSessionRequest::new(sid.clone(), ws)
                .replay_from(v2::ReplayFrom::Start(v2::ReplayFromStart::new())),
        )
        .start_session()
        .block_task()
        .await?;
    let mut replay = Fold::default();
    // The agent sent them all before its answer (counted on the wire); the SDK hands them to
    // the handler on its own schedule, so the ones not handed over yet are awaited (the run is
    // bounded by scripts/real-clients' timeout).
    let on_wire = updates_before_answer(wire, mark, "session/resume");
    let mut replayed = drain(&mut updates);
    while replayed.len() < on_wire {
        match updates.next().await {
            Some(n) => replayed.push(n),
            None => break,
        }
    }
    for n in &replayed {
        if n.session_id == sid {
            replay.apply(&n.update);
        }
    }
    let (lm, lc) = live.view();
    let (rm, rc) = replay.view();
    if lm != rm || lc != rc {
        eprintln!("live:   {lm} {lc}\nreplay: {rm} {rc}");
    }
    out.insert(
        "resume".into(),
        json!({
            "answered": true,
            // Every update the agent sent before its answer reached the handler (the tap that
            // counts them on the wire may lag the handler: at least as many, not exactly).
            "allHandedOver": replayed.len() >= on_wire && on_wire > 0,
            "stateAtAnswer": replay.states.last(),
            "sameMessages": lm == rm,
            "sameCalls": lc == rc,
            "messages": rm.as_array().map_or(0, Vec::len),
        }),
    );

    resumed.session.close().block_task().await?;
    out.insert("close".into(), json!({"answered": true}));
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::{V2, wire};

    fn update(u: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s","update":{u}}}}}"#
        )
    }

    /// The v2 reader names what `v2::schema` loses and nothing it keeps: one row a case.
    #[test]
    fn v2_losses_are_named_and_what_survives_is_not() {
        let rows: &[(&str, &[&str])] = &[
            (
                r#"{"sessionUpdate":"tool_call_update","toolCallId":"c","status":"in_progress","capabilities":{"cancel":{}}}"#,
                &[],
            ),
            (
                r#"{"sessionUpdate":"state_update","state":"idle","stopReason":"end_turn"}"#,
                &[],
            ),
            (
                r#"{"sessionUpdate":"tool_call_update","toolCallId":"c","title":7}"#,
                &["session/update tool_call_update: update.title dropped"],
            ),
            (
                r#"{"sessionUpdate":"user_message","messageId":"m","bogus":1}"#,
                &["session/update user_message: update.bogus dropped"],
            ),
        ];
        for (sent, want) in rows {
            assert_eq!(
                wire::dropped_as(&V2, &[], &[update(sent)]),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{sent}"
            );
        }
    }
}
