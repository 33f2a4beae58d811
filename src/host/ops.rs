//! Every host operation in one table (`dispatch`). Inputs are decoded into plain structs
//! (unknown fields ignored, wrong types → `invalid_request`); expected races such as revision
//! conflicts and parked resumes are results, not errors.

use super::session::{ActiveTurn, CancelToken, SessionCell, SessionState, TurnRecord};
use super::turn::{self, TurnSpec};
use super::{random_id, Host};
use crate::host_api::wire::*;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;

pub fn dispatch(host: &Arc<Host>, key: &str, input: Value) -> Result<Value, HostError> {
    match key {
        "host.hello" => hello(host, parse(input)?),
        "host.status" => Ok(host.status()),
        "models.list" => Ok(host.providers().list()),
        "models.reload" => Ok(host.reload_providers().list()),
        "skills.list" => skills_list(host, parse(input)?),
        "session.create" => session_create(host, parse(input)?),
        "session.get" => session_get(host, parse(input)?),
        "session.list" => session_list(host, parse(input)?),
        "session.open" => session_open(host, parse(input)?),
        "session.configuration.update" => configuration_update(host, parse(input)?),
        "session.metadata.update" => metadata_update(host, parse(input)?),
        "session.lifecycle.set" => lifecycle_set(host, parse(input)?),
        "session.remove" => session_remove(host, parse(input)?),
        "session.release" => session_release(host, parse(input)?),
        "session.transcript.page" => transcript_page(host, parse(input)?),
        "turn.start" => turn_start(host, parse(input)?),
        "turn.stop" => turn_stop(host, parse(input)?),
        "turn.query" => turn_query(host, parse(input)?),
        "turn.resume.query" => resume_query(host, parse(input)?),
        "turn.resume.start" => resume_start(host, parse(input)?),
        "interaction.answer" => interaction_answer(host, parse(input)?),
        "client.capability.replace" => capability_replace(host, parse(input)?),
        "client.call.result" => client_call_result(host, parse(input)?),
        "client.call.input" => client_call_input(host, parse(input)?),
        other => Err(HostError::new(
            ErrorCode::OperationUnavailable,
            format!("unknown operation {other:?}"),
        )),
    }
}

fn parse<T: DeserializeOwned>(input: Value) -> Result<T, HostError> {
    let input = if input.is_null() { json!({}) } else { input };
    if !input.is_object() {
        return Err(HostError::invalid("the request body must be a JSON object"));
    }
    serde_json::from_value(input).map_err(|e| HostError::invalid(format!("bad input: {e}")))
}

fn check_id(what: &str, id: &str) -> Result<(), HostError> {
    if valid_id(id) {
        Ok(())
    } else {
        Err(HostError::invalid(format!(
            "`{what}` must match ^[A-Za-z0-9_-]{{1,128}}$"
        )))
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Result<Value, HostError> {
    serde_json::to_value(v).map_err(|e| HostError::internal(e.to_string()))
}

/// Locks a session and loads its transcript (recovering it after a crash on first use).
fn open_state<'a>(
    host: &Host,
    cell: &'a SessionCell,
) -> Result<std::sync::MutexGuard<'a, SessionState>, HostError> {
    let mut st = cell.lock();
    if st.removed {
        return Err(HostError::not_found(format!("session {}", cell.id)));
    }
    st.ensure_transcript(&host.store)?;
    Ok(st)
}

// ---- host -------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct Hello {
    #[serde(default)]
    protocol: Option<ProtocolRange>,
}

#[derive(Deserialize)]
struct ProtocolRange {
    min: u32,
    max: u32,
}

fn hello(host: &Host, input: Hello) -> Result<Value, HostError> {
    if let Some(p) = input.protocol {
        if !(p.min..=p.max).contains(&PROTOCOL_VERSION) {
            return Err(HostError::new(
                ErrorCode::IncompatibleProtocol,
                format!(
                    "this host speaks protocol {PROTOCOL_VERSION}; the client offered {}..={}",
                    p.min, p.max
                ),
            )
            .with_details(json!({"min": PROTOCOL_VERSION, "max": PROTOCOL_VERSION})));
        }
    }
    Ok(json!({
        "hostEpoch": host.epoch,
        "protocol": PROTOCOL_VERSION,
        "hostId": host.host_id,
        "state": if host.is_draining() { "draining" } else { "ready" },
        "features": ["client_calls"],
        "limits": super::limits(),
    }))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionRef {
    session_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OptionalSessionRef {
    #[serde(default)]
    session_id: Option<String>,
}

fn skills_list(host: &Host, input: OptionalSessionRef) -> Result<Value, HostError> {
    if let Some(id) = &input.session_id {
        host.cell(id)?;
    }
    Ok(super::commands::list())
}

// ---- sessions ---------------------------------------------------------------------------------

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct CreateInput {
    session_id: String,
    workspace: Workspace,
    #[serde(default)]
    additional_directories: Vec<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    configuration: Option<ConfigurationPatch>,
    #[serde(default)]
    mcp_servers: Vec<Value>,
}

fn absolute_dir(what: &str, p: &str) -> Result<(), HostError> {
    let path = Path::new(p);
    if !path.is_absolute() {
        return Err(HostError::invalid(format!(
            "{what} must be an absolute path, got {p:?}"
        )));
    }
    if !path.is_dir() {
        return Err(HostError::invalid(format!(
            "{what} {p:?} is not an existing directory"
        )));
    }
    Ok(())
}

fn session_create(host: &Arc<Host>, input: CreateInput) -> Result<Value, HostError> {
    check_id("sessionId", &input.session_id)?;
    if host.is_draining() {
        return Err(HostError::new(
            ErrorCode::HostDraining,
            "the host is shutting down",
        ));
    }
    absolute_dir("workspace.path", input.workspace.path())?;
    for d in &input.additional_directories {
        absolute_dir("additionalDirectories[]", d)?;
    }
    let mut configuration = Configuration::default();
    if let Some(patch) = &input.configuration {
        apply_patch(host, &mut configuration, patch)?;
    }
    let mut sessions = host.sessions_lock();
    if let Some(existing) = sessions.get(&input.session_id) {
        let st = existing.lock();
        let s = &st.session;
        let same = s.workspace == input.workspace
            && s.additional_directories == input.additional_directories
            && (input.name.is_none() || s.name == input.name);
        return if same && !st.removed {
            // A retried create: the same answer.
            to_value(s)
        } else {
            Err(HostError::new(
                ErrorCode::OperationConflict,
                format!(
                    "session {} already exists with different settings",
                    input.session_id
                ),
            ))
        };
    }
    let now = now_ms();
    let session = Session {
        id: input.session_id.clone(),
        revision: 1,
        workspace: input.workspace,
        additional_directories: input.additional_directories,
        name: input.name,
        labels: input.labels,
        is_archived: false,
        created_at: now,
        last_used_at: now,
        configuration,
        status: SessionStatus::Idle,
        active_turn_id: None,
        mcp_servers: input.mcp_servers,
        turn_count: 0,
    };
    host.store.save_session(&session).map_err(|e| {
        HostError::new(
            ErrorCode::PersistenceFailed,
            format!("cannot save the session: {e}"),
        )
    })?;
    let value = to_value(&session)?;
    let cwd = session.workspace.path().to_string();
    let specs = session.mcp_servers.clone();
    let cell = SessionCell::new(session);
    if !specs.is_empty() {
        cell.lock().mcp = Some(super::mcp::McpSet::start(&specs, &cwd));
    }
    sessions.insert(cell.id.clone(), cell);
    host.bump_catalog();
    Ok(value)
}

fn session_get(host: &Host, input: SessionRef) -> Result<Value, HostError> {
    let Ok(cell) = host.cell(&input.session_id) else {
        return Ok(json!({"session": null}));
    };
    // Loading the transcript (once) is what finds and moves aside unreadable lines.
    let st = open_state(host, &cell)?;
    let mut out = json!({"session": to_value(&st.session)?});
    if !st.quarantine.is_empty() {
        out["transcriptQuarantine"] = json!(st.quarantine);
    }
    Ok(out)
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ListFilter {
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    include_archived: bool,
    /// Only sessions with at least one turn (a conversation to resume).
    #[serde(default)]
    non_empty: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListInput {
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    filter: ListFilter,
}

/// Cursors are keyset positions `(lastUsedAt, id)` of the last item returned, hex-encoded so
/// clients treat them as opaque.
fn encode_cursor(last_used_at: u64, id: &str) -> String {
    format!("{last_used_at}:{id}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_cursor(c: &str) -> Option<(u64, String)> {
    if c.len() % 2 != 0 || c.len() > 512 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..c.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(c.get(i..i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let (ts, id) = text.split_once(':')?;
    Some((ts.parse().ok()?, id.to_string()))
}

fn session_list(host: &Host, input: ListInput) -> Result<Value, HostError> {
    let limit = input.limit.unwrap_or(50);
    if !(1..=100).contains(&limit) {
        return Err(HostError::invalid("`limit` must be between 1 and 100"));
    }
    let after = match &input.cursor {
        None => None,
        Some(c) => Some(
            decode_cursor(c)
                .ok_or_else(|| HostError::invalid("`cursor` is not a cursor this host issued"))?,
        ),
    };
    let mut rows: Vec<Session> = host
        .sessions_lock()
        .values()
        .map(|c| c.lock().session.clone())
        .filter(|s| input.filter.include_archived || !s.is_archived)
        .filter(|s| !input.filter.non_empty || s.turn_count > 0)
        .filter(|s| {
            input
                .filter
                .cwd
                .as_deref()
                .is_none_or(|cwd| s.workspace.path() == cwd)
        })
        .collect();
    // Newest first, then by id: a total order, so keyset paging never skips or repeats an
    // unchanged session.
    rows.sort_by(|a, b| {
        b.last_used_at
            .cmp(&a.last_used_at)
            .then_with(|| a.id.cmp(&b.id))
    });
    let start = match &after {
        None => 0,
        Some((ts, id)) => rows
            .iter()
            .position(|s| {
                s.last_used_at < *ts || (s.last_used_at == *ts && s.id.as_str() > id.as_str())
            })
            .unwrap_or(rows.len()),
    };
    let page: Vec<Session> = rows.iter().skip(start).take(limit).cloned().collect();
    let next = if start + page.len() < rows.len() {
        page.last().map(|s| encode_cursor(s.last_used_at, &s.id))
    } else {
        None
    };
    Ok(
        json!({"kind": "page", "revision": host.catalog_revision(), "sessions": page, "nextCursor": next}),
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OpenInput {
    session_id: String,
    /// MCP servers to (re)connect for this attachment; absent = keep what runs.
    #[serde(default)]
    mcp_servers: Option<Vec<Value>>,
}

fn session_open(host: &Host, input: OpenInput) -> Result<Value, HostError> {
    let cell = host.cell(&input.session_id)?;
    let mut st = open_state(host, &cell)?;
    if let Some(specs) = input.mcp_servers {
        if let Some(old) = st.mcp.take() {
            old.stop();
        }
        if !specs.is_empty() {
            st.mcp = Some(super::mcp::McpSet::start(
                &specs,
                st.session.workspace.path(),
            ));
        }
    }
    let active_turn = match &st.active {
        Some(a) => st
            .turns
            .get(&a.turn_id)
            .map(|r| to_value(&r.snapshot))
            .transpose()?,
        None => None,
    };
    let streams: Vec<Value> = st
        .active
        .iter()
        .flat_map(|a| a.streams.iter().map(move |s| json!({"kind": s.kind, "turnId": a.turn_id, "messageId": s.message_id, "text": s.text})))
        .collect();
    let tools: Vec<Value> = st.active.iter().flat_map(|a| a.tools.clone()).collect();
    let pending: Vec<&Interaction> = st
        .interactions
        .values()
        .filter(|s| s.answer_tx.is_some())
        .map(|s| &s.interaction)
        .collect();
    // Inputs by reference (`client.call.input`): the snapshot stays small.
    let calls: Vec<Value> = st
        .client_calls
        .iter()
        .map(|(id, c)| json!({"invocationId": id, "toolCallId": c.tool_call_id, "service": c.service}))
        .collect();
    Ok(json!({
        "hostEpoch": host.epoch,
        "seq": st.head_seq,
        "session": st.session,
        "activeTurn": active_turn,
        "activeStreams": streams,
        "activeTools": tools,
        "pendingInteractions": pending,
        "pendingClientCalls": calls,
        "usage": {"totals": st.usage_totals},
        "transcript": {"throughMessageSeq": st.through_message_seq()},
    }))
}

fn model_levels(host: &Host, target: &ModelTarget) -> Result<Vec<String>, HostError> {
    match host.providers().resolve(target) {
        Ok((_, m)) => Ok(m.thinking_levels.clone()),
        // No provider at all: sessions still work; levels are simply unknown (none).
        Err(_) if matches!(target, ModelTarget::Default) => Ok(vec![]),
        Err(e) => Err(HostError::invalid(e.message)),
    }
}

fn apply_patch(
    host: &Host,
    c: &mut Configuration,
    patch: &ConfigurationPatch,
) -> Result<(), HostError> {
    if let Some(t) = &patch.model_target {
        c.model_target = t.clone();
    }
    let levels = model_levels(host, &c.model_target)?;
    match &patch.thinking_level {
        Some(Some(level)) if !levels.contains(level) => {
            return Err(HostError::invalid(format!(
                "thinking level {level:?} is not offered by the selected model (it offers: {})",
                if levels.is_empty() {
                    "none".to_string()
                } else {
                    levels.join(", ")
                }
            )))
        }
        Some(level) => c.thinking_level = level.clone(),
        // A model change drops a level the new model does not have.
        None => {
            if c.thinking_level
                .as_ref()
                .is_some_and(|l| !levels.contains(l))
            {
                c.thinking_level = None;
            }
        }
    }
    if let Some(m) = patch.permission_mode {
        c.permission_mode = m;
    }
    if let Some(m) = patch.collaboration_mode {
        c.collaboration_mode = m;
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigUpdateInput {
    session_id: String,
    expected_revision: u64,
    patch: ConfigurationPatch,
}

fn configuration_update(host: &Host, input: ConfigUpdateInput) -> Result<Value, HostError> {
    let cell = host.cell(&input.session_id)?;
    let mut st = cell.lock();
    if let Some(conflict) = check_cas(&st.session, input.expected_revision)? {
        return Ok(conflict);
    }
    commit_configuration(host, &cell, &mut st, &input.patch)?;
    Ok(json!({"kind": "committed", "session": st.session}))
}

/// Applies a validated configuration patch: new revision, saved, `configuration_changed` emitted.
/// Also used by the agent itself (slash commands, plan approval), without a CAS.
pub fn commit_configuration(
    host: &Host,
    cell: &SessionCell,
    st: &mut SessionState,
    patch: &ConfigurationPatch,
) -> Result<(), HostError> {
    let mut next = st.session.configuration.clone();
    apply_patch(host, &mut next, patch)?;
    st.session.configuration = next.clone();
    st.session.revision += 1;
    save(host, &st.session)?;
    let revision = st.session.revision;
    cell.emit(
        st,
        FrameBody::ConfigurationChanged {
            revision,
            configuration: next,
        },
    );
    host.bump_catalog();
    Ok(())
}

/// Renames a session (the agent's `/title`), without a CAS.
pub fn commit_name(
    host: &Host,
    cell: &SessionCell,
    st: &mut SessionState,
    name: &str,
) -> Result<(), HostError> {
    let patch = MetadataPatch {
        name: Some(Some(name.to_string())),
        labels: None,
    };
    commit_metadata(host, cell, st, patch)
}

/// Applies a metadata patch: new revision, saved, `session_updated` emitted.
fn commit_metadata(
    host: &Host,
    cell: &SessionCell,
    st: &mut SessionState,
    patch: MetadataPatch,
) -> Result<(), HostError> {
    if let Some(name) = patch.name {
        st.session.name = name.map(|n| n.chars().take(256).collect());
    }
    if let Some(labels) = patch.labels {
        st.session.labels = labels;
    }
    st.session.revision += 1;
    save(host, &st.session)?;
    emit_session_updated(cell, st);
    host.bump_catalog();
    Ok(())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataPatch {
    #[serde(default, deserialize_with = "some_or_null")]
    name: Option<Option<String>>,
    #[serde(default)]
    labels: Option<Vec<String>>,
}

fn some_or_null<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataUpdateInput {
    session_id: String,
    expected_revision: u64,
    patch: MetadataPatch,
}

fn metadata_update(host: &Host, input: MetadataUpdateInput) -> Result<Value, HostError> {
    let cell = host.cell(&input.session_id)?;
    let mut st = cell.lock();
    if let Some(conflict) = check_cas(&st.session, input.expected_revision)? {
        return Ok(conflict);
    }
    commit_metadata(host, &cell, &mut st, input.patch)?;
    Ok(json!({"kind": "committed", "session": st.session}))
}

/// The shared start of every revision-CAS update: archived sessions refuse, a stale revision
/// is the `revision_conflict` result (not an error).
fn check_cas(session: &Session, expected: u64) -> Result<Option<Value>, HostError> {
    if session.is_archived {
        return Err(HostError::new(
            ErrorCode::SessionArchived,
            "the session is archived",
        ));
    }
    if session.revision != expected {
        return Ok(Some(
            json!({"kind": "revision_conflict", "expected": expected, "actual": session.revision}),
        ));
    }
    Ok(None)
}

fn emit_session_updated(cell: &SessionCell, st: &mut SessionState) {
    let body = FrameBody::SessionUpdated {
        revision: st.session.revision,
        name: st.session.name.clone(),
        last_used_at: st.session.last_used_at,
        is_archived: st.session.is_archived,
    };
    cell.emit(st, body);
}

fn save(host: &Host, s: &Session) -> Result<(), HostError> {
    host.store.save_session(s).map_err(|e| {
        HostError::new(
            ErrorCode::PersistenceFailed,
            format!("cannot save the session: {e}"),
        )
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LifecycleInput {
    session_id: String,
    state: String,
}

fn lifecycle_set(host: &Host, input: LifecycleInput) -> Result<Value, HostError> {
    let archived = match input.state.as_str() {
        "active" => false,
        "archived" => true,
        other => {
            return Err(HostError::invalid(format!(
                "`state` must be \"active\" or \"archived\", got {other:?}"
            )))
        }
    };
    let cell = host.cell(&input.session_id)?;
    let mut st = cell.lock();
    if archived && st.active.is_some() {
        return Err(HostError::new(
            ErrorCode::SessionBusy,
            "the session has a running turn; stop it first",
        ));
    }
    if st.session.is_archived != archived {
        st.session.is_archived = archived;
        st.session.revision += 1;
        save(host, &st.session)?;
        emit_session_updated(&cell, &mut st);
        host.bump_catalog();
    }
    to_value(&st.session)
}

/// The client detached (ACP `session/close`): stop what runs for it. Durable state stays.
fn session_release(host: &Host, input: SessionRef) -> Result<Value, HostError> {
    let cell = host.cell(&input.session_id)?;
    if let Some(m) = cell.lock().mcp.take() {
        m.stop();
    }
    Ok(json!({}))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RemoveInput {
    session_id: String,
    expected_revision: u64,
}

fn session_remove(host: &Host, input: RemoveInput) -> Result<Value, HostError> {
    let cell = host.cell(&input.session_id)?;
    {
        let mut st = cell.lock();
        if st.active.is_some() {
            return Err(HostError::new(
                ErrorCode::SessionBusy,
                "the session has a running turn; stop it first",
            ));
        }
        if st.session.revision != input.expected_revision {
            return Ok(
                json!({"kind": "revision_conflict", "expected": input.expected_revision, "actual": st.session.revision}),
            );
        }
        host.store.remove_session(&cell.id).map_err(|e| {
            HostError::new(
                ErrorCode::PersistenceFailed,
                format!("cannot remove the session: {e}"),
            )
        })?;
        st.removed = true;
        cell.emit(&mut st, FrameBody::SessionRemoved {});
    }
    host.sessions_lock().remove(&cell.id);
    host.bump_catalog();
    Ok(json!({"kind": "removed"}))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PageInput {
    session_id: String,
    #[serde(default)]
    direction: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    max_bytes: Option<usize>,
    #[serde(default)]
    through_message_seq: Option<u64>,
}

fn transcript_page(host: &Host, input: PageInput) -> Result<Value, HostError> {
    let newer = match input.direction.as_deref() {
        None | Some("newer") => true,
        Some("older") => false,
        Some(other) => {
            return Err(HostError::invalid(format!(
                "`direction` must be \"newer\" or \"older\", got {other:?}"
            )))
        }
    };
    let limit = input.limit.unwrap_or(100);
    if !(1..=256).contains(&limit) {
        return Err(HostError::invalid("`limit` must be between 1 and 256"));
    }
    let max_bytes = input
        .max_bytes
        .unwrap_or(1024 * 1024)
        .clamp(1024, 1024 * 1024);
    let cell = host.cell(&input.session_id)?;
    let st = open_state(host, &cell)?;
    let items = st.transcript_items();
    let through = input
        .through_message_seq
        .unwrap_or_else(|| st.through_message_seq());
    // Cursor: the messageSeq to continue from (exclusive), as "n<seq>".
    let from = match &input.cursor {
        None => None,
        Some(c) => Some(
            c.strip_prefix('n')
                .and_then(|n| n.parse::<u64>().ok())
                .ok_or_else(|| HostError::invalid("`cursor` is not a cursor this host issued"))?,
        ),
    };
    let mut page = Vec::new();
    let mut bytes = 0;
    let mut last_seq = None;
    let candidates: Box<dyn Iterator<Item = &TranscriptItem>> = if newer {
        Box::new(
            items
                .iter()
                .filter(|i| i.message_seq <= through && from.is_none_or(|f| i.message_seq > f)),
        )
    } else {
        Box::new(
            items
                .iter()
                .rev()
                .filter(|i| i.message_seq <= through && from.is_none_or(|f| i.message_seq < f)),
        )
    };
    let mut more = false;
    for item in candidates {
        let size = serde_json::to_string(item).map(|s| s.len()).unwrap_or(0);
        if page.len() >= limit || (!page.is_empty() && bytes + size > max_bytes) {
            more = true;
            break;
        }
        bytes += size;
        last_seq = Some(item.message_seq);
        page.push(item);
    }
    let next = if more {
        last_seq.map(|s| format!("n{s}"))
    } else {
        None
    };
    Ok(json!({"kind": "page", "throughMessageSeq": through, "items": page, "nextCursor": next}))
}

// ---- turns ------------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TurnStartInput {
    session_id: String,
    turn_id: String,
    content: MessageContent,
    #[serde(default)]
    max_steps: Option<usize>,
}

fn turn_start(host: &Arc<Host>, input: TurnStartInput) -> Result<Value, HostError> {
    check_id("turnId", &input.turn_id)?;
    let fingerprint = serde_json::to_string(&input.content).unwrap_or_default();
    let cell = host.cell(&input.session_id)?;
    let max_steps = input
        .max_steps
        .unwrap_or_else(turn::default_max_steps)
        .clamp(1, 500);
    admit(
        host,
        &cell,
        &input.turn_id,
        "prompt",
        Some(input.content),
        fingerprint,
        max_steps,
        None,
    )
}

/// Admits a turn (prompt or resume) and starts its thread.
#[allow(clippy::too_many_arguments)]
fn admit(
    host: &Arc<Host>,
    cell: &Arc<SessionCell>,
    turn_id: &str,
    origin: &str,
    content: Option<MessageContent>,
    fingerprint: String,
    max_steps: usize,
    resumed_from: Option<String>,
) -> Result<Value, HostError> {
    let mut st = open_state(host, cell)?;
    if let Some(rec) = st.turns.get(turn_id) {
        return if rec.fingerprint == fingerprint {
            Ok(json!({"kind": "started", "turn": rec.snapshot}))
        } else {
            Err(HostError::new(
                ErrorCode::OperationConflict,
                format!("turn {turn_id} already exists with different content"),
            ))
        };
    }
    if host.is_draining() {
        return Err(HostError::new(
            ErrorCode::HostDraining,
            "the host is shutting down",
        ));
    }
    if st.session.is_archived {
        return Err(HostError::new(
            ErrorCode::SessionArchived,
            "the session is archived; make it active first",
        ));
    }
    if let Some(a) = &st.active {
        return Err(HostError::new(
            ErrorCode::SessionBusy,
            format!("session {} already has an active turn", cell.id),
        )
        .with_details(json!({"activeTurnId": a.turn_id, "runId": a.run_id})));
    }
    let text = content
        .as_ref()
        .map(|c| c.text.as_str())
        .unwrap_or_default();
    if super::commands::needs_model(text) {
        host.providers()
            .resolve(&st.session.configuration.model_target)?;
    }
    let is_command = super::commands::parse(text).is_some();
    let run_id = random_id("r");
    let now = now_ms();
    let snapshot = TurnSnapshot {
        session_id: cell.id.clone(),
        turn_id: turn_id.into(),
        run_id: run_id.clone(),
        origin: origin.into(),
        status: TurnStatus::Running,
        reason: None,
        failure_class: None,
        failure_message: None,
        failure_details: None,
        started_at: now,
        ended_at: None,
    };
    let mut items = Vec::new();
    if let Some(c) = &content {
        items.push((
            turn_id.to_string(),
            TranscriptBody::User {
                message_id: format!("u_{turn_id}"),
                content: c.clone(),
            },
        ));
    }
    items.push((
        turn_id.to_string(),
        TranscriptBody::TurnState {
            run_id: run_id.clone(),
            status: TurnStatus::Running,
            origin: Some(origin.into()),
            reason: None,
            failure_class: None,
            failure_message: None,
            resumed_from_run_id: resumed_from,
        },
    ));
    st.append_transcript(items)?;
    let cancel = CancelToken::default();
    st.active = Some(ActiveTurn {
        turn_id: turn_id.into(),
        run_id: run_id.clone(),
        cancel: cancel.clone(),
        streams: vec![],
        tools: vec![],
        remembered: Default::default(),
        approved_paths: vec![],
    });
    st.turns.insert(
        turn_id.into(),
        TurnRecord {
            snapshot: snapshot.clone(),
            fingerprint,
        },
    );
    st.session.status = SessionStatus::Running;
    st.session.active_turn_id = Some(turn_id.into());
    st.session.last_used_at = now;
    st.session.turn_count += 1;
    let mut renamed = false;
    if st.session.name.is_none() && !is_command {
        if let Some(title) = content.as_ref().and_then(|c| title_from(&c.text)) {
            st.session.name = Some(title);
            st.session.revision += 1;
            renamed = true;
        }
    }
    save(host, &st.session)?;
    host.turn_started();
    cell.emit(&mut st, {
        let (shown, content_truncated) = content
            .as_ref()
            .map(frame_content)
            .map_or((None, false), |(c, cut)| (Some(c), cut));
        FrameBody::TurnStarted {
            turn_id: turn_id.into(),
            run_id: run_id.clone(),
            origin: origin.into(),
            content: shown,
            content_truncated,
        }
    });
    if renamed {
        emit_session_updated(cell, &mut st);
    }
    let prompt_text = content.map(|c| c.text).unwrap_or_default();
    drop(st);
    host.bump_catalog();
    let spec = TurnSpec {
        turn_id: turn_id.into(),
        run_id,
        prompt_text,
        max_steps,
        cancel,
    };
    let (h, c) = (Arc::clone(host), Arc::clone(cell));
    if let Err(e) = std::thread::Builder::new()
        .name(format!("turn-{turn_id}"))
        .spawn(move || turn::run(h, c, spec))
    {
        return Err(HostError::internal(format!(
            "cannot start the turn thread: {e}"
        )));
    }
    Ok(json!({"kind": "started", "turn": snapshot}))
}

/// Prompt text shown in a `turn_started` frame; the transcript keeps the whole prompt.
const FRAME_PROMPT_BYTES: usize = 64 * 1024;

/// A prompt as frames carry it (bounded): text up to 64 KiB, attachments by name only.
fn frame_content(c: &MessageContent) -> (MessageContent, bool) {
    let mut text = c.text.clone();
    let mut cut = text.len() > FRAME_PROMPT_BYTES;
    super::tools::fs::cut(&mut text, FRAME_PROMPT_BYTES);
    let attachments = c
        .attachments
        .iter()
        .map(|a| {
            cut |= a.text.is_some() || a.data_base64.is_some();
            Attachment {
                text: None,
                data_base64: None,
                ..a.clone()
            }
        })
        .collect();
    (MessageContent { text, attachments }, cut)
}

/// A session title from the first prompt: the first line of its plain text (markup tags such
/// as `<task>` that some clients wrap prompts in are removed), at most 80 characters.
fn title_from(text: &str) -> Option<String> {
    let plain = strip_tags(text);
    let line = plain
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .find(|l| !l.is_empty())?;
    let mut t: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        t.push('…');
    }
    Some(t)
}

/// Removes `<tag …>`, `</tag>` and `<tag/>` (a name starting with a letter); other `<` stay.
fn strip_tags(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('<') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let name = after.strip_prefix('/').unwrap_or(after);
        let is_tag = name.starts_with(|c: char| c.is_ascii_alphabetic())
            && after.find('>').is_some_and(|end| {
                !after[..end].contains('<') && !after[..end].contains('\n') && end <= 200
            });
        match (is_tag, after.find('>')) {
            (true, Some(end)) => {
                out.push(' ');
                rest = &after[end + 1..];
            }
            _ => {
                out.push('<');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TurnRef {
    session_id: String,
    turn_id: String,
    #[serde(default)]
    run_id: Option<String>,
}

fn turn_stop(host: &Host, input: TurnRef) -> Result<Value, HostError> {
    let cell = host.cell(&input.session_id)?;
    let st = cell.lock();
    let rec = st
        .turns
        .get(&input.turn_id)
        .ok_or_else(|| HostError::not_found(format!("turn {}", input.turn_id)))?;
    if let Some(a) = st.active.as_ref().filter(|a| a.turn_id == input.turn_id) {
        if let Some(run) = &input.run_id {
            if run != &a.run_id {
                return Err(HostError::new(
                    ErrorCode::OperationConflict,
                    format!("run {run} is not the current run of turn {}", input.turn_id),
                ));
            }
        }
        a.cancel.cancel();
    }
    to_value(&rec.snapshot)
}

fn turn_query(host: &Host, input: TurnRef) -> Result<Value, HostError> {
    let cell = host.cell(&input.session_id)?;
    let st = open_state(host, &cell)?;
    let rec = st
        .turns
        .get(&input.turn_id)
        .ok_or_else(|| HostError::not_found(format!("turn {}", input.turn_id)))?;
    to_value(&rec.snapshot)
}

/// The most recent run interrupted by a crash that has no continuation yet:
/// `(run_id, turn_id, high_water)`.
fn resume_candidate(st: &SessionState) -> Result<(String, String, u64), &'static str> {
    let items = st.transcript_items();
    let mut candidate: Option<(String, String)> = None;
    for item in items {
        if let TranscriptBody::TurnState {
            run_id,
            status,
            failure_class,
            resumed_from_run_id,
            ..
        } = &item.body
        {
            if let Some(src) = resumed_from_run_id {
                if candidate.as_ref().is_some_and(|(r, _)| r == src) {
                    candidate = None;
                }
            } else if *status == TurnStatus::Failed && failure_class.as_deref() == Some("crash") {
                candidate = Some((run_id.clone(), item.turn_id.clone()));
            } else if *status == TurnStatus::Running {
                // A later run started: an older interruption is no longer the latest state.
                candidate = None;
            }
        }
    }
    let (run, turn) = candidate.ok_or("resume_candidate_missing")?;
    if st.active.is_some() {
        return Err("session_busy");
    }
    Ok((run, turn, st.through_message_seq()))
}

fn resume_query(host: &Host, input: SessionRef) -> Result<Value, HostError> {
    let cell = host.cell(&input.session_id)?;
    let st = open_state(host, &cell)?;
    Ok(match resume_candidate(&st) {
        Ok((run, turn, hw)) => {
            json!({"disposition": "ready", "sourceRunId": run, "sourceTurnId": turn, "sourceHighWater": hw})
        }
        Err(reason) => json!({"disposition": "parked", "reason": reason}),
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResumeStartInput {
    session_id: String,
    turn_id: String,
    source_run_id: String,
    source_high_water: u64,
}

fn resume_start(host: &Arc<Host>, input: ResumeStartInput) -> Result<Value, HostError> {
    check_id("turnId", &input.turn_id)?;
    let cell = host.cell(&input.session_id)?;
    {
        let st = open_state(host, &cell)?;
        if let Some(rec) = st.turns.get(&input.turn_id) {
            return Ok(json!({"kind": "started", "turn": rec.snapshot}));
        }
        match resume_candidate(&st) {
            Ok((run, _, hw)) if run == input.source_run_id && hw == input.source_high_water => {}
            Ok(_) => return Ok(json!({"kind": "parked", "reason": "safety_check_failed"})),
            Err("resume_candidate_missing") => {
                return Ok(json!({"kind": "parked", "reason": "continuation_already_exists"}))
            }
            Err(reason) => return Ok(json!({"kind": "parked", "reason": reason})),
        }
    }
    let fingerprint = format!("resume:{}", input.source_run_id);
    admit(
        host,
        &cell,
        &input.turn_id,
        "resume",
        None,
        fingerprint,
        turn::default_max_steps(),
        Some(input.source_run_id),
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnswerInput {
    session_id: String,
    interaction_id: String,
    answer: InteractionAnswer,
}

fn interaction_answer(host: &Host, input: AnswerInput) -> Result<Value, HostError> {
    let cell = host.cell(&input.session_id)?;
    let mut st = open_state(host, &cell)?;
    let slot = st
        .interactions
        .get_mut(&input.interaction_id)
        .ok_or_else(|| HostError::not_found(format!("interaction {}", input.interaction_id)))?;
    if slot.answer_tx.is_none() {
        return Err(HostError::new(
            ErrorCode::AlreadyResolved,
            format!(
                "interaction {} was already {}",
                input.interaction_id, slot.interaction.status
            ),
        ));
    }
    let kinds_match = matches!(
        (&slot.interaction.request, &input.answer),
        (
            InteractionRequest::Permission { .. },
            InteractionAnswer::Permission { .. }
        ) | (
            InteractionRequest::Question { .. },
            InteractionAnswer::Question { .. }
        ) | (
            InteractionRequest::SandboxBoundary { .. },
            InteractionAnswer::SandboxBoundary { .. }
        )
    );
    if !kinds_match {
        return Err(HostError::new(
            ErrorCode::OperationConflict,
            "the answer kind does not match the interaction",
        ));
    }
    match &input.answer {
        InteractionAnswer::Permission { decision, .. }
        | InteractionAnswer::SandboxBoundary { decision }
            if decision != "allow" && decision != "deny" =>
        {
            return Err(HostError::invalid(
                "`decision` must be \"allow\" or \"deny\"",
            ));
        }
        _ => {}
    }
    let outcome = InteractionOutcome::Answer {
        answer: input.answer,
    };
    slot.interaction.status = "answered".into();
    slot.interaction.outcome = Some(outcome.clone());
    let interaction = slot.interaction.clone();
    let tx = slot.answer_tx.take();
    let turn_id = interaction.turn_id.clone();
    let through = st.append_transcript(vec![(
        turn_id,
        TranscriptBody::Interaction {
            interaction: interaction.clone(),
        },
    )])?;
    cell.emit(
        &mut st,
        FrameBody::TranscriptAdvanced {
            through_message_seq: through,
        },
    );
    cell.emit(
        &mut st,
        FrameBody::InteractionClosed {
            interaction_id: input.interaction_id,
            status: "answered".into(),
            outcome: outcome.clone(),
        },
    );
    if let Some(tx) = tx {
        let _ = tx.send(outcome);
    }
    to_value(&interaction)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CapabilityInput {
    session_id: String,
    services: Vec<String>,
}

const SERVICES: [&str; 3] = ["fs.read_text_file", "fs.write_text_file", "terminal"];

fn capability_replace(host: &Host, input: CapabilityInput) -> Result<Value, HostError> {
    if let Some(bad) = input
        .services
        .iter()
        .find(|s| !SERVICES.contains(&s.as_str()))
    {
        return Err(HostError::invalid(format!(
            "unknown client service {bad:?} (known: {})",
            SERVICES.join(", ")
        )));
    }
    let cell = host.cell(&input.session_id)?;
    let mut st = cell.lock();
    if input.services.is_empty() {
        // The client left: nobody will answer the calls still waiting for it.
        for (_, call) in st.client_calls.drain() {
            let _ = call
                .tx
                .send(Err("the editor is no longer connected".into()));
        }
    }
    st.client_services = input.services.clone();
    Ok(json!({"services": input.services}))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CallResultInput {
    session_id: String,
    invocation_id: String,
    outcome: CallOutcome,
}

#[derive(Deserialize)]
struct CallOutcome {
    ok: bool,
    #[serde(default)]
    result: Value,
    #[serde(default)]
    error: Option<Value>,
}

fn client_call_result(host: &Host, input: CallResultInput) -> Result<Value, HostError> {
    let cell = host.cell(&input.session_id)?;
    let mut st = cell.lock();
    // A late or duplicate result is ignored.
    if let Some(call) = st.client_calls.remove(&input.invocation_id) {
        let tx = call.tx;
        let r = if input.outcome.ok {
            Ok(input.outcome.result)
        } else {
            let msg = input
                .outcome
                .error
                .as_ref()
                .and_then(|e| {
                    e.get("message")
                        .and_then(Value::as_str)
                        .map(String::from)
                        .or_else(|| e.as_str().map(String::from))
                })
                .unwrap_or_else(|| "the editor reported an error".into());
            Err(msg)
        };
        let _ = tx.send(r);
    }
    Ok(json!({}))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CallRef {
    session_id: String,
    invocation_id: String,
}

/// The input of a pending client call (frames carry large inputs by reference).
fn client_call_input(host: &Host, input: CallRef) -> Result<Value, HostError> {
    let cell = host.cell(&input.session_id)?;
    let st = cell.lock();
    let call = st.client_calls.get(&input.invocation_id).ok_or_else(|| {
        HostError::not_found(format!("pending client call {}", input.invocation_id))
    })?;
    Ok(json!({"service": call.service, "input": call.input}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let c = encode_cursor(1767225601234, "s_1");
        assert_eq!(decode_cursor(&c), Some((1767225601234, "s_1".into())));
        assert_eq!(decode_cursor("zz"), None);
        assert_eq!(decode_cursor("abc"), None);
        assert_eq!(
            title_from("\n  Fix the build\nplease"),
            Some("Fix the build".into())
        );
        assert_eq!(
            title_from("<user-request>\n<task id=\"1\">Fix the   parser</task>\n</user-request>"),
            Some("Fix the parser".into())
        );
        assert_eq!(title_from("is a < b?"), Some("is a < b?".into()));
        assert_eq!(title_from("<only></only>"), None);
    }
}
