//! Session history operations: branches (`session.branch.create`), revisions
//! (`session.revision.create`, `session.revisions`) and rewinds (`session.revision.abandon`),
//! which take later turns out of the conversation and put back the files they changed.
//!
//! Every turn's start is a revision (`rev_<turnId>`); named ones are `revision` items in the
//! transcript. A rewind writes a `rewind` item naming the turns it abandons: their items stay
//! in the file (nothing is silently deleted) but leave the model's context and the replay.

use super::sessions::{admit, emit_session_updated, save, Admitted};
use super::{check_id, open_state};
use crate::host::changes::{self, Before, Fingerprint, Undo};
use crate::host::session::{SessionCell, SessionState};
use crate::host::tools::fs as fs_checked;
use crate::host::tools::CallError;
use crate::host::{random_id, Host};
use crate::host_api::ops::*;
use crate::host_api::wire::*;
use crossbeam_channel::Receiver;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long a rewind waits for the editor to read or write one file.
const EDITOR_TIMEOUT: Duration = Duration::from_secs(30);

/// A live turn: where it starts in the transcript, and its prompt.
struct TurnAt {
    turn_id: String,
    first_seq: u64,
    started_at: u64,
    /// Started by a prompt (not only a resumed run's items).
    prompted: bool,
    title: Option<String>,
}

/// The live turns in order of their first item (history markers have no turn).
fn turns_of(items: &[TranscriptItem]) -> Vec<TurnAt> {
    let mut out: Vec<TurnAt> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for item in items.iter().filter(|i| !i.turn_id.is_empty()) {
        if seen.insert(&item.turn_id) {
            out.push(TurnAt {
                turn_id: item.turn_id.clone(),
                first_seq: item.message_seq,
                started_at: item.ts,
                prompted: false,
                title: None,
            });
        }
        if let TranscriptBody::User {
            content,
            steered: false,
            ..
        } = &item.body
        {
            if let Some(t) = out.iter_mut().rev().find(|t| t.turn_id == item.turn_id) {
                if !t.prompted {
                    t.prompted = true;
                    t.title = super::turns::title_from(&content.text);
                }
            }
        }
    }
    out
}

/// A revision's position: turns whose first item comes after it are what abandoning it undoes.
fn position_of(items: &[TranscriptItem], turns: &[TurnAt], revision_id: &str) -> Option<u64> {
    if let Some(turn) = revision_id.strip_prefix("rev_") {
        if let Some(t) = turns.iter().find(|t| t.turn_id == turn && t.prompted) {
            return Some(t.first_seq.saturating_sub(1));
        }
    }
    items.iter().find_map(|i| match &i.body {
        TranscriptBody::Revision { revision_id: r, .. } if r == revision_id => Some(i.message_seq),
        _ => None,
    })
}

pub(super) fn revisions(host: &Host, input: SessionRef) -> Result<RevisionList, HostError> {
    let cell = host.cell(&input.session_id)?;
    let st = open_state(host, &cell)?;
    let items = st.transcript_items();
    let turns = turns_of(items);
    let after = |pos: u64| turns.iter().filter(|t| t.first_seq > pos).count() as u64;
    let mut at: Vec<(u64, Revision)> = Vec::new();
    for t in turns.iter().filter(|t| t.prompted) {
        let pos = t.first_seq.saturating_sub(1);
        at.push((
            pos,
            Revision {
                revision_id: format!("rev_{}", t.turn_id),
                kind: "turn_start".into(),
                label: t.title.clone(),
                created_at: t.started_at,
                turn_id: Some(t.turn_id.clone()),
                turns_after: after(pos),
            },
        ));
    }
    for i in items {
        if let TranscriptBody::Revision { revision_id, label } = &i.body {
            at.push((
                i.message_seq,
                Revision {
                    revision_id: revision_id.clone(),
                    kind: "named".into(),
                    label: Some(label.clone()),
                    created_at: i.ts,
                    turn_id: None,
                    turns_after: after(i.message_seq),
                },
            ));
        }
    }
    // At one position a named revision was made before the turn that follows it.
    at.sort_by_key(|(pos, r)| (*pos, r.kind == "turn_start"));
    Ok(RevisionList {
        revisions: at.into_iter().map(|(_, r)| r).collect(),
    })
}

pub(super) fn revision_create(
    host: &Host,
    input: RevisionCreateInput,
) -> Result<Revision, HostError> {
    let label = input.label.trim();
    if label.is_empty() || label.chars().count() > 200 {
        return Err(HostError::invalid(
            "`label` must be 1 to 200 characters of text",
        ));
    }
    let cell = host.cell(&input.session_id)?;
    let mut st = open_state(host, &cell)?;
    let revision_id = random_id("rev");
    let seq = st.append_transcript(vec![(
        String::new(),
        TranscriptBody::Revision {
            revision_id: revision_id.clone(),
            label: label.into(),
        },
    )])?;
    let created_at = st
        .transcript_items()
        .last()
        .map(|i| i.ts)
        .unwrap_or_else(now_ms);
    cell.emit(
        &mut st,
        FrameBody::TranscriptAdvanced {
            through_message_seq: seq,
        },
    );
    Ok(Revision {
        revision_id,
        kind: "named".into(),
        label: Some(label.into()),
        created_at,
        turn_id: None,
        turns_after: 0,
    })
}

pub(super) fn abandon(host: &Arc<Host>, input: AbandonInput) -> Result<AbandonOutcome, HostError> {
    let cell = host.cell(&input.session_id)?;
    let never = crossbeam_channel::never();
    let target = Target::Revision(&input.revision_id);
    rewind(
        host,
        &cell,
        target,
        input.restore_files,
        input.force,
        None,
        &never,
    )
}

/// What to rewind to.
pub enum Target<'a> {
    Revision(&'a str),
    /// The last `n` turns before the running one (`/rewind n`).
    LastTurns(usize),
}

/// Rewinds `cell` to `target`: abandons the later turns (durably, first), then restores the
/// files they changed — without the session's lock, since the editor may be asked. `running`
/// is the turn doing it (`/rewind`), which stays.
pub fn rewind(
    host: &Arc<Host>,
    cell: &SessionCell,
    target: Target,
    restore_files: bool,
    force: bool,
    running: Option<&str>,
    cancel: &Receiver<()>,
) -> Result<AbandonOutcome, HostError> {
    let (abandoned, plan, session, plan_after) = {
        let mut st = open_state(host, cell)?;
        if let Some(a) = &st.active {
            if running != Some(a.turn_id.as_str()) {
                return Err(HostError::new(
                    ErrorCode::SessionBusy,
                    "the session has a running turn; stop it or wait for it before rewinding",
                )
                .with_details(json!({"activeTurnId": a.turn_id})));
            }
        }
        if st.session.is_archived {
            return Err(HostError::new(
                ErrorCode::SessionArchived,
                "the session is archived; make it active first",
            ));
        }
        let items = st.transcript_items();
        let turns: Vec<TurnAt> = turns_of(items)
            .into_iter()
            .filter(|t| Some(t.turn_id.as_str()) != running)
            .collect();
        let (revision_id, abandoned): (String, Vec<String>) = match target {
            Target::Revision(id) => {
                let pos = position_of(items, &turns, id)
                    .ok_or_else(|| HostError::not_found(format!("revision {id}")))?;
                let later = turns.iter().filter(|t| t.first_seq > pos);
                (id.to_string(), later.map(|t| t.turn_id.clone()).collect())
            }
            Target::LastTurns(n) => {
                let skip = turns.len().saturating_sub(n);
                let later: Vec<String> = turns[skip..].iter().map(|t| t.turn_id.clone()).collect();
                let id = later
                    .first()
                    .map(|t| format!("rev_{t}"))
                    .unwrap_or_default();
                (id, later)
            }
        };
        if abandoned.is_empty() {
            return Ok(AbandonOutcome {
                abandoned_turn_ids: vec![],
                restored: vec![],
                conflicts: vec![],
                session: Box::new(st.session.clone()),
                plan: Some(super::knowledge::plan_view(&st)),
            });
        }
        let plan_before = super::knowledge::plan_view(&st).revision;
        st.abandon_turns(&revision_id, abandoned.clone())?;
        finish_commit(host, cell, &mut st)?;
        let plan_after = super::knowledge::plan_view(&st);
        if plan_after.revision != plan_before {
            super::knowledge::emit_plan_state(cell, &mut st);
        }
        let plan = if restore_files {
            let recorded = changes::read_for(&host.store.session_dir(&cell.id), &abandoned);
            changes::undo_plan(&recorded, &abandoned)
        } else {
            vec![]
        };
        (abandoned, plan, st.session.clone(), plan_after)
    };
    log::info!(
        "session {}: rewound {} turn(s); restoring {} file(s)",
        cell.id,
        abandoned.len(),
        plan.len()
    );
    let (restored, conflicts) = restore(cell, plan, force, cancel);
    host.bump_catalog();
    Ok(AbandonOutcome {
        abandoned_turn_ids: abandoned,
        restored,
        conflicts,
        session: Box::new(session),
        plan: Some(plan_after),
    })
}

/// After a rewind: the record counts the live turns, takes a new revision (a branch expecting
/// the old one conflicts) and is saved.
fn finish_commit(host: &Host, cell: &SessionCell, st: &mut SessionState) -> Result<(), HostError> {
    let live = turns_of(st.transcript_items()).len() as u64;
    st.session.turn_count = live;
    st.session.revision += 1;
    st.session.last_used_at = now_ms();
    save(host, &st.session)?;
    let seq = st.through_message_seq();
    cell.emit(
        st,
        FrameBody::TranscriptAdvanced {
            through_message_seq: seq,
        },
    );
    emit_session_updated(cell, st);
    Ok(())
}

/// Puts each file back as it was before the abandoned turns, unless it changed since the
/// agent's last write (then it is a conflict, left alone unless `force`).
fn restore(
    cell: &SessionCell,
    plan: Vec<Undo>,
    force: bool,
    cancel: &Receiver<()>,
) -> (Vec<FileRestore>, Vec<FileConflict>) {
    let (mut restored, mut conflicts) = (vec![], vec![]);
    let (editor_reads, editor_writes) = {
        let st = cell.lock();
        (
            st.offers("fs.read_text_file"),
            st.offers("fs.write_text_file"),
        )
    };
    for undo in plan {
        let path = Path::new(&undo.path);
        let conflict = |reason: &str, message: String| FileConflict {
            path: undo.path.clone(),
            reason: reason.into(),
            message,
        };
        let editor = |service: &str, input: Value| {
            crate::host::turn::call_client(cell, service, input, None, EDITOR_TIMEOUT, cancel)
                .map_err(|e: CallError| e.to_string())
        };
        // The boundary check writes have: the recorded path must still be itself (no folder
        // on it became a link since); every action below goes through a verified descriptor.
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            conflicts.push(conflict(
                "changed_since",
                "it is now a symbolic link; left as it is".into(),
            ));
            continue;
        }
        if let Err(now) = fs_checked::still_itself(path) {
            conflicts.push(conflict(
                "changed_since",
                format!(
                    "a folder on its path is now a link (it leads to {}); left as it is",
                    now.display()
                ),
            ));
            continue;
        }
        // A FIFO, a device, a socket or a file with other names (hard links) is left alone,
        // `force` or not: reading it could block or never end, writing it would change what
        // the other names lead to.
        if let Err(why) = fs_checked::replaceable(path) {
            conflicts.push(conflict("cannot_restore", format!("{why}; left as it is")));
            continue;
        }
        // What is there now, as the agent would see it (the editor's buffer for files it
        // wrote through the editor): `Some(true)` when it is what the agent last wrote.
        let current: Result<Option<bool>, String> = if !path.exists() {
            Ok(None)
        } else if undo.via_editor && editor_reads {
            editor("fs.read_text_file", json!({"path": undo.path}))
                .and_then(|v| {
                    v.get("content")
                        .and_then(Value::as_str)
                        .map(|t| Fingerprint::of(t.as_bytes()) == undo.after)
                        .ok_or_else(|| "the editor returned no content".into())
                })
                .map(Some)
        } else {
            is_unchanged(path, &undo.after).map(Some)
        };
        let current = match current {
            Ok(c) => c,
            Err(e) => {
                conflicts.push(conflict("failed", format!("it could not be read: {e}")));
                continue;
            }
        };
        if current != Some(true) && !force {
            let what = if current.is_none() {
                "it was deleted"
            } else {
                "it was changed"
            };
            conflicts.push(conflict(
                "changed_since",
                format!("{what} after the agent's last change; left as it is (rewind with force to restore it anyway)"),
            ));
            continue;
        }
        let outcome = match &undo.before {
            Before::SameTurn => {
                conflicts.push(conflict(
                    "cannot_restore",
                    "the record of its earlier content is missing".into(),
                ));
                continue;
            }
            Before::NotKept { why } => {
                conflicts.push(conflict(
                    "cannot_restore",
                    format!("its earlier content was not kept ({why})"),
                ));
                continue;
            }
            Before::Absent => fs_checked::remove_verified(path).map(|()| ("deleted", false)),
            Before::Text { text } if undo.via_editor && editor_writes => editor(
                "fs.write_text_file",
                json!({"path": undo.path, "content": text}),
            )
            .map(|_| ("written", true)),
            Before::Text { text } => {
                fs_checked::replace_verified(path, text.as_bytes()).map(|_| ("written", false))
            }
        };
        match outcome {
            Ok((action, via_editor)) => restored.push(FileRestore {
                path: undo.path.clone(),
                action: action.into(),
                via_editor,
            }),
            Err(e) => conflicts.push(conflict("failed", format!("it could not be restored: {e}"))),
        }
    }
    (restored, conflicts)
}

/// The largest recorded content a rewind reads back to compare (a record saying more is not
/// trusted to size a read: the file counts as changed).
const COMPARE_LIMIT: u64 = 256 * 1024 * 1024;

/// Whether the file at a recorded path is what the agent last wrote (`after`): read through
/// the tools' opener (a regular file only, never blocking) and never more than `after`'s size
/// and one byte, so a file grown huge since costs nothing to tell apart.
fn is_unchanged(path: &Path, after: &Fingerprint) -> Result<bool, String> {
    if after.bytes > COMPARE_LIMIT {
        return Ok(false);
    }
    let mut f = fs_checked::open_verified(path)?;
    let (bytes, whole) = fs_checked::read_at_most(&mut f, after.bytes)?;
    Ok(whole && Fingerprint::of(&bytes) == *after)
}

pub fn branch(host: &Arc<Host>, input: BranchInput) -> Result<BranchOutcome, HostError> {
    check_id("targetSessionId", &input.target_session_id)?;
    if host.is_draining() {
        return Err(HostError::new(
            ErrorCode::HostDraining,
            "the host is shutting down",
        ));
    }
    // A retry of a branch that was made: the same answer. Made from this source by its
    // owner: a session that took a deleted source's id is not the source the branch was made
    // from (the owner gate let its owner name it; the branch is someone else's).
    if let Ok(existing) = host.cell(&input.target_session_id) {
        let source_owner = host
            .cell(&input.source_session_id)
            .ok()
            .map(|c| c.owner.clone());
        let st = existing.lock();
        let same = st
            .session
            .lineage
            .as_ref()
            .is_some_and(|l| l.parent_session_id == input.source_session_id)
            && source_owner.is_none_or(|o| o == existing.owner);
        return if same && !st.removed {
            Ok(BranchOutcome::Committed {
                session: Box::new(st.session.clone()),
            })
        } else {
            Err(HostError::new(
                ErrorCode::OperationConflict,
                format!("session {} already exists", input.target_session_id),
            ))
        };
    }
    let source = host.cell(&input.source_session_id)?;
    let (items, src, through, copied_turns) = {
        let st = open_state(host, &source)?;
        if let Some(expected) = input.expected_source_revision {
            if expected != st.session.revision {
                return Ok(BranchOutcome::SourceRevisionConflict {
                    expected,
                    actual: st.session.revision,
                });
            }
        }
        let active = st.active.as_ref().map(|a| a.turn_id.clone());
        let turns: Vec<TurnAt> = turns_of(st.transcript_items())
            .into_iter()
            .filter(|t| Some(&t.turn_id) != active.as_ref())
            .collect();
        let upto = match &input.through_turn_id {
            Some(t) if Some(t) == active.as_ref() => {
                return Err(HostError::new(
                    ErrorCode::SessionBusy,
                    format!("turn {t} is still running; branch through an earlier turn or wait"),
                ))
            }
            Some(t) => turns
                .iter()
                .position(|x| &x.turn_id == t)
                .ok_or_else(|| HostError::not_found(format!("turn {t}")))?,
            None if turns.is_empty() => usize::MAX,
            None => turns.len() - 1,
        };
        let keep: HashSet<&str> = turns
            .iter()
            .take(upto.saturating_add(1))
            .map(|t| t.turn_id.as_str())
            .collect();
        let through = (upto != usize::MAX).then(|| turns[upto].turn_id.clone());
        let last = st
            .transcript_items()
            .iter()
            .filter(|i| keep.contains(i.turn_id.as_str()))
            .map(|i| i.message_seq)
            .max()
            .unwrap_or(0);
        let items: Vec<TranscriptItem> = st
            .transcript_items()
            .iter()
            .filter(|i| {
                keep.contains(i.turn_id.as_str())
                    || matches!(i.body, TranscriptBody::Revision { .. }) && i.message_seq <= last
            })
            .cloned()
            .collect();
        (items, st.session.clone(), through, keep.len() as u64)
    };
    let workspace = input.workspace.unwrap_or(src.workspace.clone());
    let additional = input
        .additional_directories
        .unwrap_or(src.additional_directories.clone());
    for d in std::iter::once(workspace.path()).chain(additional.iter().map(String::as_str)) {
        if !Path::new(d).is_absolute() || !Path::new(d).is_dir() {
            return Err(HostError::invalid(format!(
                "{d:?} is not an existing absolute directory"
            )));
        }
    }
    let now = now_ms();
    let session = Session {
        id: input.target_session_id.clone(),
        revision: 1,
        workspace,
        additional_directories: additional,
        // Pickers tell the two apart by title.
        name: src.name.as_ref().map(|n| format!("{n} (fork)")),
        labels: vec![],
        is_archived: false,
        created_at: now,
        last_used_at: now,
        configuration: src.configuration.clone(),
        status: SessionStatus::Idle,
        active_turn_id: None,
        mcp_servers: input.mcp_servers,
        turn_count: copied_turns,
        lineage: Some(Lineage {
            parent_session_id: src.id.clone(),
            branch_of_turn_id: through,
        }),
        system_prompt: input.system_prompt.or_else(|| src.system_prompt.clone()),
        owner: src.owner.clone(),
    };
    // The transcript first: a directory without `session.json` is not a session, so a crash
    // in between leaves nothing half-made.
    let write = || {
        host.store
            .write_transcript(&session.id, &items)
            .map_err(|e| {
                HostError::new(
                    ErrorCode::PersistenceFailed,
                    format!("cannot write the branch's transcript: {e}"),
                )
            })
            .and_then(|()| save(host, &session))
    };
    if let Admitted::Exists(_) = admit(host, &session, write)? {
        return Err(HostError::new(
            ErrorCode::OperationConflict,
            format!("session {} already exists", session.id),
        ));
    }
    log::info!(
        "session {}: branched from {} ({} turn(s))",
        session.id,
        src.id,
        copied_turns
    );
    Ok(BranchOutcome::Committed {
        session: Box::new(session),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(seq: u64, turn: &str, body: TranscriptBody) -> TranscriptItem {
        TranscriptItem {
            message_seq: seq,
            ts: seq,
            turn_id: turn.into(),
            body,
        }
    }

    fn user(text: &str, steered: bool) -> TranscriptBody {
        TranscriptBody::User {
            message_id: "u".into(),
            content: MessageContent {
                text: text.into(),
                attachments: vec![],
            },
            steered,
        }
    }

    #[test]
    fn revisions_stand_before_their_turn_or_where_they_were_named() {
        let items = vec![
            item(1, "t1", user("one", false)),
            item(2, "t1", user("more", true)),
            item(
                3,
                "",
                TranscriptBody::Revision {
                    revision_id: "rev_x".into(),
                    label: "named".into(),
                },
            ),
            item(4, "t2", user("two", false)),
        ];
        let turns = turns_of(&items);
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[0].title.as_deref(), Some("one"));
        assert_eq!(position_of(&items, &turns, "rev_t1"), Some(0));
        assert_eq!(position_of(&items, &turns, "rev_t2"), Some(3));
        assert_eq!(position_of(&items, &turns, "rev_x"), Some(3));
        assert_eq!(position_of(&items, &turns, "rev_nope"), None);
    }
}
