//! The real-client scenario through the official Rust SDK (`agent-client-protocol` 5.2.0, which
//! pins `agent-client-protocol-schema` =1.17.0), issue 49 item 6. Every message is typed by the
//! SDK: requests are built from its schema types, responses, `session/update` notifications and
//! `session/request_permission` requests are parsed into them, so a field the SDK cannot read
//! (a required one missing, an unknown `sessionUpdate` tag) fails the run.
//!
//! Steps: `initialize` (advertising `plan` and `subagents`); `session/new` with a system prompt;
//! a prompt whose `write_file` call asks permission, answered by the client ("allow once");
//! a prompt in plan mode that proposes a plan (`plan_update`); a delegation to the stub agent
//! (tests/fixtures/stub_agent.py) seen as a child session; `session/load` replaying both.
//!
//! usage: maka-real-client-rust AGENT_BINARY WORKSPACE STUB_AGENT
//!   → prints the observation summary as JSON on stdout (compared with expected_rust.json).

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use agent_client_protocol::schema::{MaybeUndefined, ProtocolVersion};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, CloseSessionRequest, ContentBlock, Implementation, InitializeRequest,
    LoadSessionRequest, NewSessionRequest, PermissionOptionKind, PlanCapabilities,
    PlanUpdateContent, PromptRequest, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionId, SessionNotification,
    SessionUpdate, SetSessionConfigOptionRequest, StateUpdate, SubagentCapabilities, SystemPrompt,
    SystemPromptMode, TextContent, ToolCallContent, ToolCallStatus,
};
use agent_client_protocol::{AcpAgent, AcpAgentConfig, Agent, Client, LineDirection};

mod wire;
use serde_json::{Value, json};

/// What the client has seen so far, in arrival order: every `session/update` and every dialog.
#[derive(Default)]
struct Seen {
    updates: Vec<SessionNotification>,
    dialogs: Vec<RequestPermissionRequest>,
}

type Shared = Arc<Mutex<Seen>>;

/// Every line the client wrote to the agent and read from it (the SDK's transport tap).
type Wire = Arc<Mutex<(Vec<String>, Vec<String>)>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [agent_bin, ws, stub] = args.as_slice() else {
        eprintln!("usage: maka-real-client-rust AGENT_BINARY WORKSPACE STUB_AGENT");
        std::process::exit(2);
    };
    match futures::executor::block_on(run(agent_bin, Path::new(ws), stub)) {
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
            eprintln!("the Rust SDK client failed: {e:?}");
            std::process::exit(1);
        }
    }
}

async fn run(
    agent_bin: &str,
    ws: &Path,
    stub: &str,
) -> Result<Value, agent_client_protocol::Error> {
    // The stub agent, declared in the user's configuration (so trusted: no trust dialog).
    let config = ws.join("..").join("subagent-config.json");
    let agents = json!({"agents": {"stub": {"command": "python3", "args": [stub], "description": "a stub"}}});
    std::fs::write(&config, agents.to_string())
        .map_err(agent_client_protocol::Error::into_internal_error)?;
    let agent =
        AcpAgent::new(AcpAgentConfig::new(agent_bin).env("MAKA_CONFIG", config.to_string_lossy()));
    let wire: Wire = Arc::default();
    let tap = wire.clone();
    let agent = agent.with_debug(move |line, direction| match direction {
        LineDirection::Stderr => eprintln!("agent: {line}"),
        LineDirection::Stdin => lock(&tap).0.push(line.to_string()),
        LineDirection::Stdout => lock(&tap).1.push(line.to_string()),
    });
    let seen: Shared = Arc::default();
    let on_update = seen.clone();
    let on_dialog = seen.clone();
    let ws = ws.to_path_buf();
    let mut summary = Client
        .v1()
        .name("maka-real-client-rust")
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                lock(&on_update).updates.push(n);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: RequestPermissionRequest, responder, _cx| {
                // Answered by kind, as a person pressing "allow once" would.
                let allow = request
                    .options
                    .iter()
                    .find(|o| o.kind == PermissionOptionKind::AllowOnce)
                    .map(|o| o.option_id.clone());
                lock(&on_dialog).dialogs.push(request);
                responder.respond(RequestPermissionResponse::new(match allow {
                    Some(id) => {
                        RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id))
                    }
                    None => RequestPermissionOutcome::Cancelled,
                }))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(agent, async move |cx: ConnectionTo<Agent>| {
            scenario(cx, &ws, &seen).await
        })
        .await?;
    let (sent, received) = std::mem::take(&mut *lock(&wire));
    if let Value::Object(m) = &mut summary {
        m.insert("sdkDropped".into(), json!(wire::dropped(&sent, &received)));
    }
    Ok(summary)
}

fn text(s: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::Text(TextContent::new(s))]
}

async fn scenario(
    cx: ConnectionTo<Agent>,
    ws: &Path,
    seen: &Shared,
) -> Result<Value, agent_client_protocol::Error> {
    let mut out = serde_json::Map::new();
    // Also opted in (maka-acp's convention for the unstable `PromptResponse.usage`).
    let mut opt_in = serde_json::Map::new();
    opt_in.insert("unstable_end_turn_token_usage".into(), json!(true));
    let caps = ClientCapabilities::new()
        .plan(PlanCapabilities::new())
        .subagents(SubagentCapabilities::new())
        .meta(opt_in);
    let init = cx
        .send_request(
            InitializeRequest::new(ProtocolVersion::V1)
                .client_capabilities(caps)
                .client_info(Implementation::new("maka-real-client-rust", "1")),
        )
        .block_task()
        .await?;
    let sc = &init.agent_capabilities.session_capabilities;
    out.insert(
        "initialize".into(),
        json!({
            "protocolVersion": init.protocol_version,
            "loadSession": init.agent_capabilities.load_session,
            "systemPrompt": sc.system_prompt,
            "close": sc.close.is_some(),
        }),
    );

    // session/new with the client's system prompt; the permission prompt runs in it.
    let prompt = SystemPrompt::new(text("Answer briefly.")).mode(SystemPromptMode::Append);
    let with_prompt = cx
        .send_request(NewSessionRequest::new(ws.to_path_buf()).system_prompt(prompt))
        .block_task()
        .await?;
    let sid = with_prompt.session_id;
    let option_ids: Vec<String> = with_prompt
        .config_options
        .unwrap_or_default()
        .iter()
        .map(|o| o.id.to_string())
        .collect();
    out.insert("sessionNew".into(), json!({"configOptions": option_ids}));

    let r = cx
        .send_request(PromptRequest::new(
            sid.clone(),
            text("please write the notes"),
        ))
        .block_task()
        .await?;
    let mut permission = permission_view(&r.stop_reason, ws, seen);
    // The counts depend on the prompt's length (paths included): only their shape is compared.
    permission["usage"] = match &r.usage {
        Some(u) => json!({"totalIsSum": u.total_tokens == u.input_tokens + u.output_tokens,
            "output": u.output_tokens > 0}),
        None => Value::Null,
    };
    out.insert("permission".into(), permission);

    // Plan mode: the plan by id.
    let set = |id: &'static str, value: &'static str| {
        cx.send_request(SetSessionConfigOptionRequest::new(sid.clone(), id, value))
            .block_task()
    };
    set("mode", "bypass").await?;
    set("collaboration_mode", "plan").await?;
    clear(seen);
    let r = cx
        .send_request(PromptRequest::new(sid.clone(), text("plan the work")))
        .block_task()
        .await?;
    out.insert(
        "plan".into(),
        json!({"stopReason": r.stop_reason, "plans": plans(seen)}),
    );
    cx.send_request(CloseSessionRequest::new(sid.clone()))
        .block_task()
        .await?;
    clear(seen);
    cx.send_request(LoadSessionRequest::new(sid.clone(), ws.to_path_buf()))
        .block_task()
        .await?;
    out.insert(
        "load".into(),
        json!({"plans": plans(seen), "toolCalls": tool_calls(&sid, seen)}),
    );

    // A delegation, live and replayed.
    let sub = cx
        .send_request(NewSessionRequest::new(ws.to_path_buf()))
        .block_task()
        .await?
        .session_id;
    clear(seen);
    let r = cx
        .send_request(PromptRequest::new(sub.clone(), text("delegate the count")))
        .block_task()
        .await?;
    let mut live = subagent_view(&sub, seen);
    live.insert("stopReason".into(), json!(r.stop_reason));
    live.insert("dialogs".into(), dialogs_view(&sub, seen));
    out.insert("subagent".into(), Value::Object(live));
    cx.send_request(CloseSessionRequest::new(sub.clone()))
        .block_task()
        .await?;
    clear(seen);
    cx.send_request(LoadSessionRequest::new(sub.clone(), ws.to_path_buf()))
        .block_task()
        .await?;
    out.insert("subLoad".into(), Value::Object(subagent_view(&sub, seen)));
    Ok(Value::Object(out))
}

fn clear(seen: &Shared) {
    let mut s = lock(seen);
    s.updates.clear();
    s.dialogs.clear();
}

/// The write prompt: its dialog(s), the tool call's statuses, the file on disk.
fn permission_view(stop: &impl serde::Serialize, ws: &Path, seen: &Shared) -> Value {
    let s = lock(seen);
    let dialogs: Vec<Value> = s
        .dialogs
        .iter()
        .map(|d| {
            let kinds: Vec<Value> = d.options.iter().map(|o| json!(o.kind)).collect();
            json!({"title": d.tool_call.fields.title, "optionKinds": kinds})
        })
        .collect();
    let sid = s.updates.first().map(|n| n.session_id.clone());
    drop(s);
    json!({
        "stopReason": stop,
        "dialogs": dialogs,
        "toolCalls": sid.map(|sid| tool_calls(&sid, seen)).unwrap_or_default(),
        "file": std::fs::read_to_string(ws.join("notes.txt")).ok(),
    })
}

/// `tool_call` / `tool_call_update` lines of one session that start or end a call.
fn tool_calls(sid: &SessionId, seen: &Shared) -> Vec<Value> {
    lock(seen)
        .updates
        .iter()
        .filter(|n| &n.session_id == sid)
        .filter_map(|n| match &n.update {
            SessionUpdate::ToolCall(t) => {
                Some(json!({"kind": "tool_call", "title": t.title, "status": t.status}))
            }
            SessionUpdate::ToolCallUpdate(u) => match u.fields.status {
                Some(st @ (ToolCallStatus::Completed | ToolCallStatus::Failed)) => {
                    Some(json!({"kind": "tool_call_update", "status": st}))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn plans(seen: &Shared) -> Vec<Value> {
    lock(seen)
        .updates
        .iter()
        .filter_map(|n| match &n.update {
            SessionUpdate::PlanUpdate(p) => Some(match &p.plan {
                PlanUpdateContent::Items(items) => json!({
                    "kind": "plan_update",
                    "planId": items.plan_id.to_string(),
                    "type": "items",
                    "entries": items.entries.iter().map(|e| e.content.clone()).collect::<Vec<_>>(),
                    "status": items.meta.as_ref().and_then(|m| m.get("maka")).and_then(|m| m.get("status")),
                }),
                other => json!({"kind": "plan_update", "other": other}),
            }),
            SessionUpdate::PlanRemoved(_) => Some(json!({"kind": "plan_removed"})),
            SessionUpdate::Plan(_) => Some(json!({"kind": "plan"})),
            _ => None,
        })
        .collect()
}

fn dialogs_view(parent: &SessionId, seen: &Shared) -> Value {
    let s = lock(seen);
    s.dialogs
        .iter()
        .map(|d| {
            let id = d.tool_call.tool_call_id.to_string();
            let call = id.rsplit('.').next().unwrap_or_default();
            json!({"where": if &d.session_id == parent { "parent" } else { "child" }, "toolCall": call})
        })
        .collect()
}

/// An id with the delegate call's id (a prefix of the child's ids) replaced by `D`.
fn masked(x: &str, delegate: &Option<String>) -> String {
    match delegate {
        Some(d) => x.replace(d.as_str(), "D"),
        None => x.to_string(),
    }
}

fn defined<T: Clone>(v: &MaybeUndefined<T>) -> Option<T> {
    match v {
        MaybeUndefined::Value(x) => Some(x.clone()),
        _ => None,
    }
}

/// A delegation as a subagent-aware client sees it: session ids replaced by their role
/// (`parent`, `child`), the delegate call's id by `D`; the delegate call's `session` content
/// must name the announced child.
fn subagent_view(parent: &SessionId, seen: &Shared) -> serde_json::Map<String, Value> {
    let s = lock(seen);
    let mut announced: Vec<SessionId> = Vec::new();
    let mut delegate: Option<String> = None;
    let mut linked: Vec<SessionId> = Vec::new();
    let mut rows: Vec<Value> = Vec::new();
    let role = |sid: &SessionId, announced: &[SessionId]| -> String {
        if sid == parent {
            "parent".into()
        } else if announced.contains(sid) {
            "child".into()
        } else {
            format!("unannounced {sid}")
        }
    };
    for n in &s.updates {
        if let SessionUpdate::SubagentUpdate(u) = &n.update
            && !announced.contains(&u.session_id)
        {
            announced.push(u.session_id.clone());
        }
        let at = role(&n.session_id, &announced);
        match &n.update {
            SessionUpdate::SubagentUpdate(u) => {
                let (state, stop) = match defined(&u.state) {
                    Some(StateUpdate::Running(_)) => (json!("running"), Value::Null),
                    Some(StateUpdate::Idle(i)) => {
                        (json!("idle"), json!(i.stop_reason)["stopReason"].clone())
                    }
                    Some(StateUpdate::RequiresAction(_)) => (json!("requires_action"), Value::Null),
                    Some(other) => (json!(other), Value::Null),
                    None => (Value::Null, Value::Null),
                };
                rows.push(
                    json!({"where": at, "kind": "subagent_update", "title": defined(&u.title),
                    "state": state, "stopReason": stop}),
                );
            }
            SessionUpdate::SessionMessage(m) => {
                let id = |x: &str| masked(x, &delegate);
                let body: String = defined(&m.content)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|c| match c {
                        ContentBlock::Text(t) => Some(t.text.clone()),
                        _ => None,
                    })
                    .collect();
                let first = body.lines().next().unwrap_or_default().to_string();
                rows.push(json!({"where": at, "kind": "session_message", "messageId": id(&m.message_id.to_string()),
                    "from": defined(&m.sender_session_id).map(|x| role(&x, &announced)),
                    "to": defined(&m.recipient_session_id).map(|x| role(&x, &announced)),
                    "text": first}));
            }
            // Many or few pieces: one line for all of them.
            SessionUpdate::SessionMessageChunk(_)
                if rows.last().and_then(|r| r.get("kind"))
                    != Some(&json!("session_message_chunk")) =>
            {
                rows.push(json!({"where": at, "kind": "session_message_chunk"}));
            }
            SessionUpdate::ToolCall(t) => {
                if t.name.as_deref() == Some("delegate") {
                    delegate = Some(t.tool_call_id.to_string());
                }
                let id = |x: &str| masked(x, &delegate);
                for c in &t.content {
                    if let ToolCallContent::Session(r) = c {
                        linked.push(r.session_id.clone());
                    }
                }
                rows.push(json!({"where": at, "kind": "tool_call", "toolCallId": id(&t.tool_call_id.to_string()),
                    "name": t.name, "status": t.status}));
            }
            SessionUpdate::ToolCallUpdate(u) => {
                let id = |x: &str| masked(x, &delegate);
                for c in u.fields.content.iter().flatten() {
                    if let ToolCallContent::Session(r) = c {
                        linked.push(r.session_id.clone());
                    }
                }
                if let Some(st @ (ToolCallStatus::Completed | ToolCallStatus::Failed)) =
                    u.fields.status
                {
                    rows.push(json!({"where": at, "kind": "tool_call_update",
                        "toolCallId": id(&u.tool_call_id.to_string()), "status": st}));
                }
            }
            _ => {}
        }
    }
    let mut m = serde_json::Map::new();
    m.insert("children".into(), json!(announced.len()));
    // Where the delegate call's `session` content points, once everything has been seen.
    let links: Vec<Value> = linked
        .iter()
        .map(|sid| json!(role(sid, &announced)))
        .collect();
    m.insert("sessionLinks".into(), Value::Array(links));
    m.insert("seen".into(), Value::Array(rows));
    m
}
