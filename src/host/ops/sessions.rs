//! Session operations: create, get, list, open, configuration and metadata (revision CAS),
//! lifecycle, release, remove, and transcript pages.

use super::{check_id, open_state, Caller};
use crate::host::session::{SessionCell, SessionState};
use crate::host::Host;
use crate::host_api::ops::*;
use crate::host_api::wire::*;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

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

pub(super) fn create(
    host: &Arc<Host>,
    caller: Caller,
    input: CreateInput,
) -> Result<Session, HostError> {
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
        lineage: None,
        system_prompt: input.system_prompt,
        owner: caller.principal().map(str::to_string),
    };
    match admit(host, &session, || save(host, &session))? {
        Admitted::New => Ok(session),
        Admitted::Exists(existing) => retried_create(&existing, &session),
    }
}

/// What [`admit`] found.
pub(super) enum Admitted {
    New,
    /// A session of that id exists (or is being admitted by another call).
    Exists(Arc<SessionCell>),
}

/// Admits a new session — `session.create` and `branch.create` alike: its cell goes into the
/// table under the global lock with the cell itself locked, so a racing admission of the same
/// id finds it and waits on the cell, while `write` — the fsyncs that make it durable — runs
/// without the global lock. A failed write takes it out again, marked removed (a waiter must
/// not take it for made). Then its MCP servers start.
pub(super) fn admit(
    host: &Arc<Host>,
    session: &Session,
    write: impl FnOnce() -> Result<(), HostError>,
) -> Result<Admitted, HostError> {
    let cell = SessionCell::new(session.clone());
    let mut st = cell.lock();
    {
        let mut sessions = host.sessions_lock();
        if let Some(existing) = sessions.get(&host.store, &session.id)? {
            return Ok(Admitted::Exists(existing));
        }
        sessions.insert(Arc::clone(&cell));
    }
    if let Err(e) = write() {
        st.removed = true;
        drop(st);
        host.sessions_lock().remove(&cell.id);
        return Err(e);
    }
    if !session.mcp_servers.is_empty() {
        st.mcp = Some(crate::host::mcp::McpSet::start(
            &session.mcp_servers,
            session.workspace.path(),
            host.tunables.mcp_start_timeout,
            host.confinement(session.owner.as_deref()),
        ));
    }
    drop(st);
    host.bump_catalog();
    Ok(Admitted::New)
}

/// A create for an id that exists: the same answer when it is a retry with the same settings.
fn retried_create(existing: &SessionCell, wanted: &Session) -> Result<Session, HostError> {
    let st = existing.lock();
    let s = &st.session;
    let same = s.workspace == wanted.workspace
        && s.owner == wanted.owner
        && s.additional_directories == wanted.additional_directories
        && (wanted.name.is_none() || s.name == wanted.name);
    if same && !st.removed {
        Ok(s.clone())
    } else {
        Err(HostError::new(
            ErrorCode::OperationConflict,
            format!("session {} already exists with different settings", s.id),
        ))
    }
}

pub(super) fn get(
    host: &Host,
    caller: Caller,
    input: SessionRef,
) -> Result<SessionLookup, HostError> {
    let Ok(cell) = super::cell_for(host, caller, &input.session_id) else {
        return Ok(SessionLookup {
            session: None,
            transcript_quarantine: vec![],
        });
    };
    // Loading the transcript (once) is what finds and moves aside unreadable lines.
    let st = open_state(host, &cell)?;
    Ok(SessionLookup {
        session: Some(st.session.clone()),
        transcript_quarantine: st.quarantine.clone(),
    })
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

pub(super) fn list(
    host: &Host,
    caller: Caller,
    input: ListInput,
) -> Result<SessionPage, HostError> {
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
    // The cells are read after the global lock is released: a cell's lock may be held across
    // an fsync, and nothing else should wait for that.
    let cells = host.all_cells();
    let mut rows: Vec<Session> = cells
        .iter()
        .filter(|c| caller.may_use(c))
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
    Ok(SessionPage {
        revision: host.catalog_revision(),
        sessions: page,
        next_cursor: next,
    })
}

pub(super) fn open(host: &Host, input: OpenInput) -> Result<OpenSnapshot, HostError> {
    let cell = host.cell(&input.session_id)?;
    let mut st = open_state(host, &cell)?;
    if let Some(prompt) = input
        .system_prompt
        .filter(|p| st.session.system_prompt.as_ref() != Some(p))
    {
        // The client's instructions for later turns (a running one keeps what it started with).
        let mut session = st.session.clone();
        session.system_prompt = Some(prompt);
        session.revision += 1;
        save(host, &session)?;
        st.session = session;
        // Other readers learn of the new revision (their next CAS would conflict unexplained).
        emit_session_updated(&cell, &mut st);
        host.bump_catalog();
    }
    let mut replaced = None;
    if let Some(specs) = input.mcp_servers {
        replaced = st.mcp.take();
        if !specs.is_empty() {
            st.mcp = Some(crate::host::mcp::McpSet::start(
                &specs,
                st.session.workspace.path(),
                host.tunables.mcp_start_timeout,
                host.confinement(st.session.owner.as_deref()),
            ));
        }
    }
    let active = st.active.as_ref();
    let snapshot = OpenSnapshot {
        host_epoch: host.epoch.clone(),
        seq: st.head_seq,
        session: st.session.clone(),
        active_turn: active
            .and_then(|a| st.turns.get(&a.turn_id))
            .map(|r| r.snapshot.clone()),
        active_streams: active
            .into_iter()
            .flat_map(|a| {
                a.streams.iter().map(|s| ActiveStreamView {
                    kind: s.kind.into(),
                    turn_id: a.turn_id.clone(),
                    message_id: s.message_id.clone(),
                    text: s.text.clone(),
                })
            })
            .collect(),
        active_tools: active.into_iter().flat_map(|a| a.tools.clone()).collect(),
        pending_interactions: st
            .interactions
            .values()
            .filter(|s| s.answer_tx.is_some())
            .map(|s| s.interaction.clone())
            .collect(),
        // Inputs by reference (`client.call.input`): the snapshot stays small.
        pending_client_calls: st
            .client_calls
            .iter()
            .map(|(id, c)| PendingClientCall {
                invocation_id: id.clone(),
                tool_call_id: c.tool_call_id.clone(),
                service: c.service.clone(),
            })
            .collect(),
        usage: json!({"totals": st.usage_totals}),
        transcript: TranscriptPosition {
            through_message_seq: st.through_message_seq(),
        },
        goal: st.goal.clone(),
    };
    drop(st);
    // Stopping servers waits for processes: not under the session's lock.
    if let Some(old) = replaced {
        old.stop();
    }
    Ok(snapshot)
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
    if let Some(m) = patch.orchestration_mode {
        c.orchestration_mode = m;
    }
    Ok(())
}

pub(super) fn configuration_update(
    host: &Host,
    input: ConfigUpdateInput,
) -> Result<CasOutcome, HostError> {
    let cell = host.cell(&input.session_id)?;
    let mut st = cell.lock();
    if let Some(conflict) = check_cas(&st.session, input.expected_revision)? {
        return Ok(conflict);
    }
    commit_configuration(host, &cell, &mut st, &input.patch)?;
    Ok(CasOutcome::Committed {
        session: Box::new(st.session.clone()),
    })
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

pub(super) fn metadata_update(
    host: &Host,
    input: MetadataUpdateInput,
) -> Result<CasOutcome, HostError> {
    let cell = host.cell(&input.session_id)?;
    let mut st = cell.lock();
    if let Some(conflict) = check_cas(&st.session, input.expected_revision)? {
        return Ok(conflict);
    }
    commit_metadata(host, &cell, &mut st, input.patch)?;
    Ok(CasOutcome::Committed {
        session: Box::new(st.session.clone()),
    })
}

/// The shared start of every revision-CAS update: archived sessions refuse, a stale revision
/// is the `revision_conflict` result (not an error).
fn check_cas(session: &Session, expected: u64) -> Result<Option<CasOutcome>, HostError> {
    if session.is_archived {
        return Err(HostError::new(
            ErrorCode::SessionArchived,
            "the session is archived",
        ));
    }
    if session.revision != expected {
        return Ok(Some(CasOutcome::RevisionConflict {
            expected,
            actual: session.revision,
        }));
    }
    Ok(None)
}

pub(super) fn emit_session_updated(cell: &SessionCell, st: &mut SessionState) {
    let body = FrameBody::SessionUpdated {
        revision: st.session.revision,
        name: st.session.name.clone(),
        last_used_at: st.session.last_used_at,
        is_archived: st.session.is_archived,
    };
    cell.emit(st, body);
}

pub(super) fn save(host: &Host, s: &Session) -> Result<(), HostError> {
    host.store.save_session(s).map_err(|e| {
        HostError::new(
            ErrorCode::PersistenceFailed,
            format!("cannot save the session: {e}"),
        )
    })
}

pub(super) fn lifecycle_set(host: &Host, input: LifecycleInput) -> Result<Session, HostError> {
    let archived = input.state == Lifecycle::Archived;
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
    Ok(st.session.clone())
}

/// The client detached (ACP `session/close`): stop what runs for it. Durable state stays.
pub(super) fn release(host: &Host, input: SessionRef) -> Result<Empty, HostError> {
    let cell = host.cell(&input.session_id)?;
    let servers = cell.lock().mcp.take();
    if let Some(m) = servers {
        m.stop();
    }
    // Nothing of it stays cached while nobody uses it (it is read again on the next use).
    cell.lock().unload_if_idle();
    Ok(Empty {})
}

pub(super) fn remove(host: &Host, input: RemoveInput) -> Result<RemoveOutcome, HostError> {
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
            return Ok(RemoveOutcome::RevisionConflict {
                expected: input.expected_revision,
                actual: st.session.revision,
            });
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
    Ok(RemoveOutcome::Removed)
}

pub(super) fn transcript_page(host: &Host, input: PageInput) -> Result<Page, HostError> {
    let newer = input.direction != Some(Direction::Older);
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
    Ok(Page {
        through_message_seq: through,
        items: page.into_iter().cloned().collect(),
        next_cursor: next,
    })
}

// ---- turns ------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let c = encode_cursor(1767225601234, "s_1");
        assert_eq!(decode_cursor(&c), Some((1767225601234, "s_1".into())));
        assert_eq!(decode_cursor("zz"), None);
        assert_eq!(decode_cursor("abc"), None);
    }
}
