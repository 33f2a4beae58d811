//! Turn operations: start (admission), stop, query, and resume after a crash.

use super::sessions::{emit_session_updated, save};
use super::{check_id, open_state};
use crate::host::session::{
    ActiveTurn, CancelToken, QueuedTurn, SessionCell, SessionState, TurnRecord,
};
use crate::host::turn::{self, TurnSpec};
use crate::host::{random_id, Host};
use crate::host_api::ops::*;
use crate::host_api::wire::*;
use serde_json::json;
use std::sync::Arc;

pub(super) fn start(host: &Arc<Host>, input: TurnStartInput) -> Result<StartOutcome, HostError> {
    check_id("turnId", &input.turn_id)?;
    let fingerprint = fingerprint(&input.content);
    let cell = host.cell(&input.session_id)?;
    let mut input = input;
    store_large_attachments(host, &input.session_id, &mut input.content)?;
    let max_steps = input
        .max_steps
        .unwrap_or(host.tunables.max_steps)
        .clamp(1, 500);
    let queue = if input.queue {
        Queue::IfBusy
    } else {
        Queue::No
    };
    admit(
        host,
        &cell,
        &input.turn_id,
        "prompt",
        None,
        Some(input.content),
        fingerprint,
        max_steps,
        None,
        queue,
    )
}

/// Turns queued per session at most (`turn.start` with `queue`); past it, `session_busy`.
pub const QUEUED_TURNS: usize = 8;

/// How a turn is admitted while another runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Queue {
    /// `session_busy`.
    No,
    /// Queued behind it (`turn.start` with `queue`).
    IfBusy,
    /// The first queued turn, taken out of the queue to start ([`start_queued`]): if another
    /// turn got in first, it goes back to the head of the queue.
    Head,
}

/// The session's turn ended (or the start of a queued one failed): the first queued turn
/// starts now, admitted as any turn. One that cannot start ends at once (`turn_terminal`
/// `failed`, no `turn_started`: its client is answered) and the next is tried.
pub(crate) fn start_queued(host: &Arc<Host>, cell: &Arc<SessionCell>) {
    loop {
        // Looked at, not taken: it stays first (and the session busy for any other start)
        // until its admission takes it out, under the same lock that makes it active.
        let next = {
            let st = cell.lock();
            if st.active.is_some() || st.removed {
                return;
            }
            match st.queued.front() {
                Some(q) => (
                    q.turn_id.clone(),
                    q.content.clone(),
                    q.fingerprint.clone(),
                    q.max_steps,
                ),
                None => return,
            }
        };
        let (turn_id, content, fingerprint, max_steps) = next;
        let started = admit(
            host,
            cell,
            &turn_id,
            "prompt",
            None,
            Some(content),
            fingerprint,
            max_steps,
            None,
            Queue::Head,
        );
        let e = match started {
            Ok(_) => return,
            Err(e) => e,
        };
        let mut st = cell.lock();
        let first = st.queued.front().is_some_and(|q| q.turn_id == turn_id);
        if first {
            st.queued.pop_front();
        } else if e.code == ErrorCode::OperationConflict {
            // Stopped while it was being started: it never began, so nothing is told.
            continue;
        }
        log::warn!(
            "session {}: queued turn {turn_id} could not start: {e}",
            cell.id
        );
        if st.removed {
            return;
        }
        cell.emit(
            &mut st,
            FrameBody::TurnTerminal {
                turn_id,
                run_id: String::new(),
                outcome: TurnOutcome::Failed,
                reason: "error".into(),
                failure_class: Some(FailureClass::RuntimeError),
                failure_message: Some(format!("The queued prompt could not start: {}", e.message)),
                failure_details: None,
            },
        );
    }
}

/// What tells a retried start (same turn id, same content) from a conflicting one: a keyed
/// hash, not the content itself, which the turn's record would keep for the session's life (a
/// 10 MiB prompt, 10 MiB more per turn). Kept in memory only; the key is this process's.
fn fingerprint(content: &MessageContent) -> String {
    use std::hash::BuildHasher;
    static KEY: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    let hash = KEY
        .get_or_init(std::hash::RandomState::new)
        .hash_one(content);
    format!("content:{hash:016x}")
}

/// Attachments too large to keep inline (in the transcript, in frames) become artifacts: the
/// prompt keeps a reference, the model reads them in pages (`read_artifact`).
fn store_large_attachments(
    host: &Host,
    session_id: &str,
    content: &mut MessageContent,
) -> Result<(), HostError> {
    use crate::host::artifacts::INLINE_ATTACHMENT_BYTES;
    let dir = host.store.session_dir(session_id);
    for a in content.attachments.iter_mut() {
        let data = match (&a.text, &a.data_base64) {
            (Some(t), _) if t.len() > INLINE_ATTACHMENT_BYTES => t.as_bytes().to_vec(),
            (None, Some(b)) if b.len() > INLINE_ATTACHMENT_BYTES => {
                crate::host::codec::base64_decode(b).ok_or_else(|| {
                    HostError::invalid(format!(
                        "attachment {:?}: `dataBase64` is not base64",
                        a.name
                    ))
                })?
            }
            _ => continue,
        };
        let mime = a.mime_type.clone().unwrap_or_else(|| {
            if a.text.is_some() {
                "text/plain"
            } else {
                "application/octet-stream"
            }
            .into()
        });
        let name = a
            .name
            .rsplit('/')
            .next()
            .unwrap_or("attachment")
            .to_string();
        let stored = host
            .artifacts
            .store(&dir, session_id, &name, &mime, "attachment", &data)?;
        a.artifact_id = Some(stored.artifact_id);
        a.text = None;
        a.data_base64 = None;
    }
    Ok(())
}

/// A turn with generated content (`plan.turn.start`), admitted like a prompt.
pub(super) fn start_with_origin(
    host: &Arc<Host>,
    turn_id: &str,
    cell: &Arc<SessionCell>,
    origin: &str,
    goal_id: Option<&str>,
    content: MessageContent,
) -> Result<StartOutcome, HostError> {
    check_id("turnId", turn_id)?;
    let fingerprint = fingerprint(&content);
    let max_steps = host.tunables.max_steps.clamp(1, 500);
    admit(
        host,
        cell,
        turn_id,
        origin,
        goal_id,
        Some(content),
        fingerprint,
        max_steps,
        None,
        Queue::No,
    )
}

/// Admits a turn (prompt or resume; a goal's, for goal `goal_id`) and starts its thread.
#[allow(clippy::too_many_arguments)]
fn admit(
    host: &Arc<Host>,
    cell: &Arc<SessionCell>,
    turn_id: &str,
    origin: &str,
    goal_id: Option<&str>,
    content: Option<MessageContent>,
    fingerprint: String,
    max_steps: usize,
    resumed_from: Option<String>,
    queue: Queue,
) -> Result<StartOutcome, HostError> {
    let mut st = open_state(host, cell)?;
    if queue == Queue::Head && st.queued.front().is_none_or(|q| q.turn_id != turn_id) {
        // Taken out of the queue (`turn.stop`) since it was looked at: it never starts.
        return Err(HostError::new(
            ErrorCode::OperationConflict,
            format!("turn {turn_id} is no longer queued"),
        ));
    }
    // A retried start of a turn still queued: where it waits.
    let waiting = st.queued.iter().position(|q| q.turn_id == turn_id);
    if let Some(i) = waiting.filter(|_| queue != Queue::Head) {
        return if st.queued[i].fingerprint == fingerprint {
            Ok(StartOutcome::Queued {
                turn_id: turn_id.into(),
                position: i + 1,
            })
        } else {
            Err(HostError::new(
                ErrorCode::OperationConflict,
                format!("turn {turn_id} already exists with different content"),
            ))
        };
    }
    if let Some(rec) = st.turns.get(turn_id) {
        return if rec.fingerprint == fingerprint {
            Ok(StartOutcome::Started {
                turn: rec.snapshot.clone(),
            })
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
    // A goal's turn starts only while its goal is the session's live one: a driver that read
    // the goal just before it was cancelled or replaced starts nothing for it. (A resume of a
    // goal's run carries its goal, live or paused: [`resume_start`].)
    if let Some(goal_id) = goal_id.filter(|_| origin == "goal") {
        if !st
            .goal
            .as_ref()
            .is_some_and(|g| g.goal_id == goal_id && g.is_live())
        {
            return Err(HostError::new(
                ErrorCode::OperationConflict,
                format!("goal {goal_id} is no longer the session's live goal; no turn was started for it"),
            ));
        }
    }
    // Busy while a turn runs, and while turns wait (they go first) unless this is the first of
    // them starting.
    let busy = st.active.is_some() || (queue != Queue::Head && !st.queued.is_empty());
    if busy && queue == Queue::No {
        let mut details = json!({"queued": st.queued.len()});
        if let Some(a) = &st.active {
            details["activeTurnId"] = json!(a.turn_id);
            details["runId"] = json!(a.run_id);
        }
        return Err(HostError::new(
            ErrorCode::SessionBusy,
            format!("session {} already has an active turn", cell.id),
        )
        .with_details(details));
    }
    let text = content
        .as_ref()
        .map(|c| c.text.as_str())
        .unwrap_or_default();
    if crate::host::commands::needs_model(text) {
        host.providers()
            .resolve(&st.session.configuration.model_target)?;
    }
    if queue == Queue::Head {
        if busy {
            // Another turn got in first (a stop of it ended it meanwhile, say): this one stays
            // first, started when that one ends.
            return Ok(StartOutcome::Queued {
                turn_id: turn_id.into(),
                position: 1,
            });
        }
        // Admitted: out of the queue, under the lock that makes it the active turn.
        if st.queued.front().is_some_and(|q| q.turn_id == turn_id) {
            st.queued.pop_front();
        }
    } else if busy {
        let queued = QueuedTurn {
            turn_id: turn_id.into(),
            content: content.unwrap_or_default(),
            fingerprint,
            max_steps,
        };
        let position = if st.queued.len() >= QUEUED_TURNS {
            return Err(HostError::new(
                ErrorCode::SessionBusy,
                format!(
                    "session {} already has {QUEUED_TURNS} prompts queued behind its active turn",
                    cell.id
                ),
            )
            .with_details(json!({"queued": st.queued.len()})));
        } else {
            st.queued.push_back(queued);
            st.queued.len()
        };
        return Ok(StartOutcome::Queued {
            turn_id: turn_id.into(),
            position,
        });
    }
    let is_command = crate::host::commands::parse(text).is_some();
    // The goal live when the turn is admitted: the only one its `goal_complete` may complete.
    let live_goal = st
        .goal
        .as_ref()
        .filter(|g| g.is_live())
        .map(|g| g.goal_id.clone());
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
                steered: false,
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
            goal_id: goal_id.map(String::from),
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
        steering: vec![],
        goal_id: goal_id.map(String::from),
        cancellable_call: None,
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
    let prompt_text: Arc<str> = content.map(|c| c.text).unwrap_or_default().into();
    drop(st);
    host.bump_catalog();
    let spec = TurnSpec {
        turn_id: turn_id.into(),
        goal_id: goal_id.map(String::from),
        live_goal,
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
    Ok(StartOutcome::Started { turn: snapshot })
}

/// Prompt text shown in a `turn_started` frame; the transcript keeps the whole prompt.
const FRAME_PROMPT_BYTES: usize = 64 * 1024;

/// A prompt as frames carry it (bounded): text up to 64 KiB, attachments by name only.
fn frame_content(c: &MessageContent) -> (MessageContent, bool) {
    let mut cut = c.text.len() > FRAME_PROMPT_BYTES;
    // Copies only what the frame shows.
    let text = crate::host::tools::fs::head(&c.text, FRAME_PROMPT_BYTES).to_string();
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
pub(super) fn title_from(text: &str) -> Option<String> {
    // The title is in the first lines: a pasted file's megabytes are not copied or scanned.
    let plain = strip_tags(crate::host::tools::fs::head(text, 16 * 1024));
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

pub(super) fn stop(host: &Host, input: TurnRef) -> Result<TurnSnapshot, HostError> {
    let cell = host.cell(&input.session_id)?;
    let mut st = cell.lock();
    // A queued turn is taken out of the queue: it never starts (no frame: it never began).
    if let Some(i) = st.queued.iter().position(|q| q.turn_id == input.turn_id) {
        st.queued.remove(i);
        let now = now_ms();
        return Ok(TurnSnapshot {
            session_id: cell.id.clone(),
            turn_id: input.turn_id,
            run_id: String::new(),
            origin: "prompt".into(),
            status: TurnStatus::Cancelled,
            reason: Some("turn_stopped".into()),
            failure_class: None,
            failure_message: None,
            failure_details: None,
            started_at: now,
            ended_at: Some(now),
        });
    }
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
    Ok(rec.snapshot.clone())
}

/// `turn.tool.cancel`: the running call ends `cancelled` (its process killed); the turn
/// goes on, its model told the call was cancelled.
pub(super) fn cancel_tool(
    host: &Host,
    input: crate::host_api::ops::ToolCancelInput,
) -> Result<crate::host_api::ops::ToolCancelOutcome, HostError> {
    use crate::host_api::ops::ToolCancelOutcome as Outcome;
    let cell = host.cell(&input.session_id)?;
    let st = cell.lock();
    let Some(active) = st.active.as_ref() else {
        return Ok(Outcome::Unknown);
    };
    if let Some((_, token)) = active
        .cancellable_call
        .as_ref()
        .filter(|(id, _)| *id == input.tool_call_id)
    {
        token.cancel();
        return Ok(Outcome::Cancelled);
    }
    if active
        .tools
        .iter()
        .any(|t| t.tool_call_id == input.tool_call_id)
    {
        return Ok(Outcome::NotCancellable);
    }
    Ok(Outcome::Unknown)
}

pub(super) fn query(host: &Host, input: TurnRef) -> Result<TurnSnapshot, HostError> {
    let cell = host.cell(&input.session_id)?;
    let st = open_state(host, &cell)?;
    let rec = st
        .turns
        .get(&input.turn_id)
        .ok_or_else(|| HostError::not_found(format!("turn {}", input.turn_id)))?;
    Ok(rec.snapshot.clone())
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
            } else if *status == TurnStatus::Failed && *failure_class == Some(FailureClass::Crash) {
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

pub(super) fn resume_query(host: &Host, input: SessionRef) -> Result<ResumeDisposition, HostError> {
    let cell = host.cell(&input.session_id)?;
    let st = open_state(host, &cell)?;
    Ok(match resume_candidate(&st) {
        Ok((run, turn, hw)) => ResumeDisposition::Ready {
            source_run_id: run,
            source_turn_id: turn,
            source_high_water: hw,
        },
        Err(reason) => ResumeDisposition::Parked {
            reason: reason.into(),
        },
    })
}

pub(super) fn resume_start(
    host: &Arc<Host>,
    input: ResumeStartInput,
) -> Result<StartOutcome, HostError> {
    check_id("turnId", &input.turn_id)?;
    let cell = host.cell(&input.session_id)?;
    {
        let st = open_state(host, &cell)?;
        if let Some(rec) = st.turns.get(&input.turn_id) {
            return Ok(StartOutcome::Started {
                turn: rec.snapshot.clone(),
            });
        }
        match resume_candidate(&st) {
            Ok((run, _, hw)) if run == input.source_run_id && hw == input.source_high_water => {}
            Ok(_) => return Ok(parked("safety_check_failed")),
            Err("resume_candidate_missing") => return Ok(parked("continuation_already_exists")),
            Err(reason) => return Ok(parked(reason)),
        }
    }
    let fingerprint = format!("resume:{}", input.source_run_id);
    // A goal's run resumed is still that goal's (its cancel stops it, its end counts for it),
    // while the session's goal is still that one (paused by the restart, or live again).
    let goal_id = {
        let st = open_state(host, &cell)?;
        run_goal(&st, &input.source_run_id).filter(|id| {
            st.goal
                .as_ref()
                .is_some_and(|g| &g.goal_id == id && (g.is_live() || g.status == "paused"))
        })
    };
    admit(
        host,
        &cell,
        &input.turn_id,
        "resume",
        goal_id.as_deref(),
        None,
        fingerprint,
        host.tunables.max_steps,
        Some(input.source_run_id),
        Queue::No,
    )
}

/// The goal run `run_id` worked toward, from its `running` record.
fn run_goal(st: &SessionState, run_id: &str) -> Option<String> {
    st.transcript_items()
        .iter()
        .find_map(|item| match &item.body {
            TranscriptBody::TurnState {
                run_id: r,
                goal_id: Some(goal_id),
                ..
            } if r == run_id => Some(goal_id.clone()),
            _ => None,
        })
}

/// `session.turns`: every turn in transcript order, with its latest status and the files its
/// tools changed.
pub(super) fn list(host: &Host, input: SessionRef) -> Result<TurnList, HostError> {
    let cell = host.cell(&input.session_id)?;
    let st = open_state(host, &cell)?;
    let system_prompt = st.session.system_prompt.clone();
    let mut turns: Vec<TurnSummary> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    // History markers (revisions, rewinds) belong to no turn.
    for item in st
        .transcript_items()
        .iter()
        .filter(|i| !i.turn_id.is_empty())
    {
        let i = *index.entry(item.turn_id.clone()).or_insert_with(|| {
            turns.push(TurnSummary {
                turn_id: item.turn_id.clone(),
                started_at: item.ts,
                title: None,
                origin: "prompt".into(),
                status: TurnStatus::Running,
                files_changed: vec![],
            });
            turns.len() - 1
        });
        let t = &mut turns[i];
        match &item.body {
            TranscriptBody::User { content, .. } => {
                t.title = t.title.take().or_else(|| title_from(&content.text));
            }
            TranscriptBody::TurnState { status, origin, .. } => {
                t.status = *status;
                if let Some(o) = origin {
                    t.origin = o.clone();
                }
            }
            TranscriptBody::ToolResult {
                status: ToolStatus::Completed,
                result,
                ..
            } => {
                let path = match result {
                    ToolResultContent::FileEdit { diff } => Some(&diff.path),
                    ToolResultContent::FileWrite { path, .. } => Some(path),
                    _ => None,
                };
                if let Some(p) = path.filter(|p| !t.files_changed.contains(p)) {
                    t.files_changed.push(p.clone());
                }
            }
            _ => {}
        }
    }
    // Writes no tool result of this session shows (a subagent's `fs/write_text_file`) are in
    // the undo records.
    let dir = host.store.session_dir(&cell.id);
    for (turn, path) in crate::host::changes::paths_by_turn(&dir) {
        if let Some(t) = index.get(&turn).map(|&i| &mut turns[i]) {
            if !t.files_changed.contains(&path) {
                t.files_changed.push(path);
            }
        }
    }
    Ok(TurnList {
        turns,
        system_prompt,
    })
}

/// Steering: a message for the running turn, taken in at its next model step.
pub(super) fn submit(host: &Host, input: SubmitInput) -> Result<SubmitOutcome, HostError> {
    check_id("messageId", &input.message_id)?;
    if input.content.text.trim().is_empty() && input.content.attachments.is_empty() {
        return Err(HostError::invalid("the message is empty"));
    }
    let cell = host.cell(&input.session_id)?;
    let mut st = open_state(host, &cell)?;
    let already = st.transcript_items().iter().any(|i| {
        matches!(&i.body, TranscriptBody::User { message_id, .. } if *message_id == input.message_id)
    });
    let Some(active) = st.active.as_mut() else {
        return Err(HostError::new(
            ErrorCode::OperationConflict,
            "no turn is running in this session; send the message as a new prompt",
        )
        .with_details(json!({"reason": "no_active_turn"})));
    };
    // A retry of a message already queued or taken in: the same answer, not a second copy.
    let queued = active
        .steering
        .iter()
        .any(|(id, _)| *id == input.message_id);
    if !already && !queued {
        if active.steering.len() >= 16 {
            return Err(HostError::new(
                ErrorCode::CapacityExceeded,
                "16 messages are already waiting for this turn's next step",
            ));
        }
        active.steering.push((input.message_id, input.content));
    }
    Ok(SubmitOutcome {
        disposition: "steering".into(),
        turn_id: active.turn_id.clone(),
    })
}

fn parked(reason: &str) -> StartOutcome {
    StartOutcome::Parked {
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_come_from_the_prompt_text_without_markup() {
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
        // A pasted file of one 10 MiB line: the title is its first 80 characters.
        let huge = "é".repeat(5 << 20);
        let t = title_from(&huge).unwrap();
        assert_eq!(t, format!("{}…", "é".repeat(80)));
    }
}
