//! Memory and workspace instructions: what the model is told before the conversation.
//!
//! Memory entries (`memory.json` in the data dir) are short notes scoped to the user, a
//! workspace or a session, changed under compare-and-set revisions. Instruction files are
//! read from disk at each turn's start: the user's `AGENTS.md` next to the config file, then
//! `AGENTS.md` at the root of the session's workspace and of each additional directory (the
//! file codex and opencode read). Both are composed into the system prompt within a budget
//! ([`compose`]).
//!
//! Each entry has an owner: the principal that added it (issue 56), or none for the machine's
//! user. A principal sees and changes only its own entries, and a session's model is told only
//! its owner's ([`Whose`]); the machine's user, through the host's API, sees and changes every
//! entry. Each principal has its own revision (moved only by changes of its entries) and its
//! own share of entries; the machine's user's revision moves with every change.

use crate::host_api::ops::{MemoryChange, MemoryEntry, MemoryOutcome, MemoryScope, MemoryView};
use crate::host_api::wire::{now_ms, ErrorCode, HostError, Session};
use crate::jsonrpc::lock;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// At most this many entries in all, each at most this many characters.
pub const MAX_ENTRIES: usize = 500;
/// At most this many entries of all owners together (the file's bound).
pub const MAX_ALL_ENTRIES: usize = 16 * MAX_ENTRIES;
pub const MAX_TEXT_CHARS: usize = 2000;
/// Budgets in the system prompt (bytes): instruction files, then memory.
pub const INSTRUCTIONS_BUDGET: usize = 32 * 1024;
pub const MEMORY_BUDGET: usize = 8 * 1024;
/// The name of the instruction file honoured in each folder.
pub const INSTRUCTION_FILE: &str = "AGENTS.md";

#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
struct Stored {
    /// Bumped by every change: the machine's user's compare-and-set token.
    revision: u64,
    /// Each principal's own token, bumped only by changes to its entries, so one principal
    /// neither sees another's activity nor races it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    revisions: BTreeMap<String, u64>,
    entries: Vec<MemoryEntry>,
}

impl Stored {
    /// The compare-and-set token `whose` reads and writes with.
    fn revision_of(&self, whose: Whose) -> u64 {
        match whose {
            Whose::Owner(Some(p)) => self.revisions.get(p).copied().unwrap_or(1),
            Whose::All | Whose::Owner(None) => self.revision,
        }
    }

    /// A change to an entry of `owner`: every token that covers it moves.
    fn changed(&mut self, owner: Option<&str>) {
        self.revision += 1;
        if let Some(p) = owner {
            *self.revisions.entry(p.to_string()).or_insert(1) += 1;
        }
    }
}

/// Whose entries a reader sees and a writer may change.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Whose<'a> {
    /// Every entry: the machine's user through the host's API (it holds the host's token).
    All,
    /// Only the entries of this owner (`None`: the machine's user's own, which have none).
    Owner(Option<&'a str>),
}

impl<'a> Whose<'a> {
    /// A caller of `memory.query` or `memory.mutate`: a principal, or the machine's user.
    pub fn caller(principal: Option<&'a str>) -> Whose<'a> {
        match principal {
            Some(p) => Whose::Owner(Some(p)),
            None => Whose::All,
        }
    }

    /// A session (its turns, its model's `remember`, its `/memory`): its owner's entries only.
    pub fn session(session: &'a Session) -> Whose<'a> {
        Whose::Owner(session.owner.as_deref())
    }

    fn covers(self, e: &MemoryEntry) -> bool {
        match self {
            Whose::All => true,
            Whose::Owner(o) => e.owner.as_deref() == o,
        }
    }
}

pub struct Memory {
    path: PathBuf,
    fsync: bool,
    /// What readers see; replaced after each durable write (never held across the write).
    state: Mutex<Stored>,
    /// Serializes writers; held across the write and its fsync.
    writer: Mutex<()>,
}

impl Memory {
    /// Reads `memory.json` under `data_dir`; a missing file is empty memory, an unreadable one
    /// is logged, kept aside and replaced by empty memory (the host still starts).
    pub fn open(data_dir: &Path, fsync: bool) -> Memory {
        let path = data_dir.join("memory.json");
        let state: Stored = crate::host::store::read_json_or_default(data_dir, "memory.json");
        Memory {
            path,
            fsync,
            state: Mutex::new(Stored {
                revision: state.revision.max(1),
                revisions: state.revisions,
                entries: state.entries,
            }),
            writer: Mutex::new(()),
        }
    }

    /// The entries `whose` may see: all of them, or those `session`'s model sees, with
    /// `whose` revision (a principal's moves only with its own entries).
    pub fn view(&self, whose: Whose, session: Option<&Session>) -> MemoryView {
        let st = lock(&self.state);
        MemoryView {
            revision: st.revision_of(whose),
            entries: st
                .entries
                .iter()
                .filter(|e| whose.covers(e) && session.is_none_or(|s| visible(e, s)))
                .cloned()
                .collect(),
        }
    }

    /// `whose` revision (the compare-and-set token of [`Memory::mutate`]).
    pub fn revision(&self, whose: Whose) -> u64 {
        lock(&self.state).revision_of(whose)
    }

    /// Applies `change` for `whose` if memory is still at `expected`. `session` resolves
    /// `workspace` and `session` scopes of an `add`. An added entry is `whose` owner's (for
    /// the machine's user, `session`'s owner's); an entry `whose` may not change is answered
    /// as one that does not exist.
    pub fn mutate(
        &self,
        whose: Whose,
        expected: u64,
        change: MemoryChange,
        session: Option<&Session>,
    ) -> Result<MemoryOutcome, HostError> {
        let _writer = lock(&self.writer);
        let mut next = lock(&self.state).clone();
        let actual = next.revision_of(whose);
        if actual != expected {
            return Ok(MemoryOutcome::RevisionConflict { expected, actual });
        }
        let now = now_ms();
        let entry = match change {
            MemoryChange::Add {
                scope,
                text,
                source,
                ..
            } => {
                let text = checked_text(&text)?;
                let owner = match whose {
                    Whose::Owner(o) => o.map(String::from),
                    Whose::All => session.and_then(|s| s.owner.clone()),
                };
                // Each owner's share: one user filling memory leaves the others theirs.
                let own = next.entries.iter().filter(|e| e.owner == owner).count();
                if own >= MAX_ENTRIES {
                    return Err(HostError::new(
                        ErrorCode::CapacityExceeded,
                        format!("memory holds {MAX_ENTRIES} entries of yours already; forget some first"),
                    ));
                }
                if next.entries.len() >= MAX_ALL_ENTRIES {
                    return Err(HostError::new(
                        ErrorCode::CapacityExceeded,
                        format!("memory holds {MAX_ALL_ENTRIES} entries of all its users; the machine's user can forget some"),
                    ));
                }
                let scope = match (scope.as_str(), session) {
                    ("user", _) => MemoryScope::User,
                    ("workspace", Some(s)) => MemoryScope::Workspace {
                        path: s.workspace.path().to_string(),
                    },
                    ("session", Some(s)) => MemoryScope::Session {
                        session_id: s.id.clone(),
                    },
                    ("workspace" | "session", None) => {
                        return Err(HostError::invalid(format!(
                            "a {scope} entry needs `sessionId`"
                        )))
                    }
                    (other, _) => {
                        return Err(HostError::invalid(format!(
                            "`scope` must be user, workspace or session, not {other:?}"
                        )))
                    }
                };
                let e = MemoryEntry {
                    id: crate::host::random_id("mem"),
                    scope,
                    text,
                    source: match source.as_deref() {
                        Some("agent") => "agent",
                        _ => "user",
                    }
                    .into(),
                    created_at: now,
                    updated_at: now,
                    owner,
                };
                next.entries.push(e.clone());
                Some(e)
            }
            MemoryChange::Update { id, text } => {
                let text = checked_text(&text)?;
                let e = next
                    .entries
                    .iter_mut()
                    .find(|e| e.id == id && whose.covers(e))
                    .ok_or_else(|| HostError::not_found(format!("memory entry {id}")))?;
                e.text = text;
                e.updated_at = now;
                Some(e.clone())
            }
            MemoryChange::Forget { id } => {
                let Some(at) = next
                    .entries
                    .iter()
                    .position(|e| e.id == id && whose.covers(e))
                else {
                    return Err(HostError::not_found(format!("memory entry {id}")));
                };
                let gone = next.entries.remove(at);
                next.changed(gone.owner.as_deref());
                None
            }
        };
        if let Some(e) = &entry {
            next.changed(e.owner.as_deref());
        }
        let bytes =
            serde_json::to_vec_pretty(&next).map_err(|e| HostError::internal(e.to_string()))?;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        crate::host::store::write_atomic(dir, "memory.json", &bytes, self.fsync).map_err(|e| {
            HostError::new(
                ErrorCode::PersistenceFailed,
                format!("cannot save memory: {e}"),
            )
        })?;
        let revision = next.revision_of(whose);
        *lock(&self.state) = next;
        Ok(MemoryOutcome::Committed { revision, entry })
    }
}

fn checked_text(text: &str) -> Result<String, HostError> {
    let t = text.trim();
    if t.is_empty() || t.chars().count() > MAX_TEXT_CHARS {
        return Err(HostError::invalid(format!(
            "`text` must be 1 to {MAX_TEXT_CHARS} characters"
        )));
    }
    Ok(t.to_string())
}

/// Whether `session`'s model sees `e`: an entry of the session's owner, for every session of
/// that owner, for the session's workspace or for the session itself.
fn visible(e: &MemoryEntry, session: &Session) -> bool {
    if e.owner != session.owner {
        return false;
    }
    match &e.scope {
        MemoryScope::User => true,
        MemoryScope::Workspace { path } => path == session.workspace.path(),
        MemoryScope::Session { session_id } => *session_id == session.id,
    }
}

/// The user's instruction file: `AGENTS.md` next to the config file.
fn user_instructions() -> Option<PathBuf> {
    crate::config::config_file_path().and_then(|p| p.parent().map(|d| d.join(INSTRUCTION_FILE)))
}

/// What the system prompt adds for `session`: its instruction files, then its memory, each
/// within its budget (cut with a note saying so); and the instruction files the person should
/// hear about (skipped, or cut), one sentence each.
pub fn compose(session: &Session, entries: &[MemoryEntry]) -> (String, Vec<String>) {
    // Each file with the folders it must stay inside: the workspace's in the session's
    // folders.
    let folders: Vec<PathBuf> = std::iter::once(session.workspace.path())
        .chain(session.additional_directories.iter().map(String::as_str))
        .map(PathBuf::from)
        .collect();
    // The user's own file may lead anywhere (stow and home-manager link it into the config
    // dir): nobody else controls it. It is still read only if regular, bounded and text.
    let mut files: Vec<(PathBuf, Vec<PathBuf>)> = user_instructions()
        .map(|f| (f, vec![PathBuf::from("/")]))
        .into_iter()
        .collect();
    files.extend(
        folders
            .iter()
            .map(|d| (d.join(INSTRUCTION_FILE), folders.clone())),
    );
    let mut out = String::new();
    let mut problems = vec![];
    let mut budget = INSTRUCTIONS_BUDGET;
    for (path, roots) in files {
        // Bounded read: never more than what is left of the budget (plus one byte to know).
        let text = match crate::host::tools::fs::read_host_input(&path, &roots, budget as u64 + 1) {
            Ok(Some(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
            Ok(None) => continue,
            Err(why) => {
                log::warn!("instruction file {} skipped: {why}", path.display());
                problems.push(format!(
                    "The instruction file {} was not read: {why}",
                    path.display()
                ));
                continue;
            }
        };
        if text.trim().is_empty() {
            continue;
        }
        if out.is_empty() {
            out.push_str("\n\nInstructions from the user and the workspace (follow them unless the user says otherwise in the conversation):");
        }
        out.push_str(&format!("\n\n## {}\n", path.display()));
        if text.len() > budget {
            problems.push(format!(
                "The instruction file {} was cut: instruction files may use {INSTRUCTIONS_BUDGET} bytes in all",
                path.display()
            ));
            out.push_str(cut(&text, budget));
            out.push_str(&format!(
                "\n[the rest is cut: instruction files may use {INSTRUCTIONS_BUDGET} bytes in all]"
            ));
            budget = 0;
        } else {
            budget -= text.len();
            out.push_str(&text);
        }
        if budget == 0 {
            break;
        }
    }
    if !entries.is_empty() {
        out.push_str("\n\nMemory (notes kept across sessions; the user lists and changes them with /memory):");
        let mut used = 0;
        for e in entries {
            let scope = match &e.scope {
                MemoryScope::User => "user",
                MemoryScope::Workspace { .. } => "workspace",
                MemoryScope::Session { .. } => "session",
            };
            let line = format!("\n- [{scope}] {}", e.text);
            if used + line.len() > MEMORY_BUDGET {
                out.push_str(&format!(
                    "\n[more entries are not shown: memory may use {MEMORY_BUDGET} bytes]"
                ));
                break;
            }
            used += line.len();
            out.push_str(&line);
        }
    }
    (out, problems)
}

/// The longest prefix of `s` within `max` bytes, on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_api::wire::{Configuration, SessionStatus, Workspace};

    fn session(ws: &Path) -> Session {
        Session {
            id: "s1".into(),
            revision: 1,
            workspace: Workspace::HostPath {
                path: ws.display().to_string(),
            },
            additional_directories: vec![],
            name: None,
            labels: vec![],
            is_archived: false,
            created_at: 0,
            last_used_at: 0,
            configuration: Configuration::default(),
            status: SessionStatus::Idle,
            active_turn_id: None,
            mcp_servers: vec![],
            turn_count: 0,
            lineage: None,
            system_prompt: None,
            owner: None,
        }
    }

    fn add(scope: &str, text: &str) -> MemoryChange {
        MemoryChange::Add {
            scope: scope.into(),
            session_id: None,
            text: text.into(),
            source: None,
        }
    }

    #[test]
    fn changes_are_revision_checked_durable_and_scoped() {
        let dir = std::env::temp_dir().join(format!("maka-memory-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let m = Memory::open(&dir, false);
        let s = session(&dir);
        assert_eq!(m.view(Whose::All, None).revision, 1);
        let MemoryOutcome::Committed { revision, entry } = m
            .mutate(
                Whose::All,
                1,
                add("workspace", " tabs, not spaces "),
                Some(&s),
            )
            .unwrap()
        else {
            panic!("not committed")
        };
        assert_eq!(revision, 2);
        assert_eq!(entry.unwrap().text, "tabs, not spaces");
        // A stale revision is a conflict, not an error; nothing changes.
        let stale = m.mutate(Whose::All, 1, add("user", "x"), None).unwrap();
        assert!(matches!(
            stale,
            MemoryOutcome::RevisionConflict {
                expected: 1,
                actual: 2
            }
        ));
        m.mutate(Whose::All, 2, add("user", "answer in English"), None)
            .unwrap();
        assert!(m.mutate(Whose::All, 3, add("session", "x"), None).is_err());
        assert!(m.mutate(Whose::All, 3, add("user", "  "), None).is_err());
        // Durable: a new store reads the same.
        let again = Memory::open(&dir, false);
        assert_eq!(again.view(Whose::All, None).entries.len(), 2);
        let mut other = session(Path::new("/elsewhere"));
        other.id = "s2".into();
        assert_eq!(
            again
                .view(Whose::session(&other), Some(&other))
                .entries
                .len(),
            1,
            "user scope only"
        );
        let text = compose(
            &other,
            &again.view(Whose::session(&other), Some(&other)).entries,
        )
        .0;
        assert!(text.contains("- [user] answer in English"), "{text}");
        assert!(!text.contains("tabs"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 56 review: one principal filling memory leaves the others their share.
    #[test]
    fn a_principal_that_fills_its_share_leaves_the_others_theirs() {
        let dir = std::env::temp_dir().join(format!("maka-memory-share-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let m = Memory::open(&dir, false);
        let bob = Whose::caller(Some("bob"));
        for n in 0..MAX_ENTRIES {
            let r = m.mutate(bob, m.revision(bob), add("user", &format!("b{n}")), None);
            assert!(matches!(r, Ok(MemoryOutcome::Committed { .. })));
        }
        let full = m
            .mutate(bob, m.revision(bob), add("user", "one more"), None)
            .err()
            .unwrap();
        assert_eq!(full.code, ErrorCode::CapacityExceeded);
        assert!(
            full.message.contains("entries of yours"),
            "{}",
            full.message
        );
        let alice = Whose::caller(Some("alice"));
        let r = m.mutate(alice, m.revision(alice), add("user", "mine"), None);
        assert!(
            matches!(r, Ok(MemoryOutcome::Committed { .. })),
            "alice has her share"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 56: each entry is its owner's. A principal sees and changes only its own (another's
    /// id is answered as an unknown one); a session is told only its owner's, the machine's
    /// user's sessions none of a principal's; an entry from before owners is the machine's
    /// user's.
    #[test]
    fn entries_are_their_owners_and_a_session_sees_only_its_owners() {
        let dir = std::env::temp_dir().join(format!("maka-memory-owners-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A file from before owners: its entry is the machine's user's.
        std::fs::write(
            dir.join("memory.json"),
            r#"{"revision": 3, "entries": [{"id": "mem_old", "scope": {"kind": "user"},
                "text": "OLD", "source": "user", "createdAt": 1, "updatedAt": 1}]}"#,
        )
        .unwrap();
        let m = Memory::open(&dir, false);
        let machine = session(&dir);
        let mut alices = session(&dir);
        alices.id = "s_alice".into();
        alices.owner = Some("alice".into());
        let alice = Whose::caller(Some("alice"));
        let bob = Whose::caller(Some("bob"));
        let committed = |o: Result<MemoryOutcome, HostError>| match o {
            Ok(MemoryOutcome::Committed { entry, .. }) => entry,
            _ => panic!("not committed"),
        };
        let a = committed(m.mutate(alice, m.revision(alice), add("user", "ALICE"), None)).unwrap();
        assert_eq!(a.owner.as_deref(), Some("alice"));
        // The model of alice's session keeps its notes for alice.
        let r = committed(m.mutate(
            Whose::session(&alices),
            m.revision(Whose::session(&alices)),
            add("session", "MINE"),
            Some(&alices),
        ));
        assert_eq!(r.unwrap().owner.as_deref(), Some("alice"));
        // The machine's user adding for alice's session adds for alice.
        let w = committed(m.mutate(Whose::All, 5, add("workspace", "FOR ALICE"), Some(&alices)));
        // Alice's own revision moved with each of her three entries, and only with them.
        assert_eq!(m.revision(alice), 4);
        assert_eq!(m.revision(bob), 1);
        assert_eq!(w.unwrap().owner.as_deref(), Some("alice"));
        let texts =
            |v: MemoryView| -> Vec<String> { v.entries.into_iter().map(|e| e.text).collect() };
        assert_eq!(texts(m.view(alice, None)), ["ALICE", "MINE", "FOR ALICE"]);
        assert_eq!(texts(m.view(bob, None)), Vec::<String>::new());
        assert_eq!(texts(m.view(Whose::All, None)).len(), 4);
        assert_eq!(
            texts(m.view(Whose::session(&alices), Some(&alices))),
            ["ALICE", "MINE", "FOR ALICE"]
        );
        assert_eq!(
            texts(m.view(Whose::session(&machine), Some(&machine))),
            ["OLD"]
        );
        // Even the machine's user asking for a session sees what that session is told.
        assert_eq!(texts(m.view(Whose::All, Some(&machine))), ["OLD"]);
        let text = compose(&machine, &m.view(Whose::All, Some(&machine)).entries).0;
        assert!(text.contains("OLD") && !text.contains("ALICE"), "{text}");
        // Bob on alice's entry: the answer for an entry that does not exist.
        for change in [
            |id: &str| MemoryChange::Update {
                id: id.into(),
                text: "BOB".into(),
            },
            |id: &str| MemoryChange::Forget { id: id.into() },
        ] {
            let on_alices = m.mutate(bob, 1, change(&a.id), None).err().unwrap();
            let on_none = m.mutate(bob, 1, change("mem_none"), None).err().unwrap();
            assert_eq!(on_alices.code, on_none.code);
            assert_eq!(
                on_alices.message.replace(&a.id, "ID"),
                on_none.message.replace("mem_none", "ID")
            );
            // A session of the machine's user may not change alice's entry either.
            assert!(m
                .mutate(Whose::session(&machine), 6, change(&a.id), None)
                .is_err());
        }
        assert_eq!(m.view(Whose::All, None).revision, 6, "nothing changed");
        // Durable.
        let again = Memory::open(&dir, false);
        assert_eq!(
            texts(again.view(alice, None)),
            ["ALICE", "MINE", "FOR ALICE"]
        );
        // The machine's user may change every entry.
        committed(again.mutate(
            Whose::All,
            6,
            MemoryChange::Forget { id: a.id.clone() },
            None,
        ));
        assert_eq!(texts(again.view(alice, None)), ["MINE", "FOR ALICE"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Hostile instruction files, one line a case: (how AGENTS.md is made, whether the
    /// model may see what it points at). A secret outside the session's folders never
    /// reaches the model; a FIFO or a folder never hangs or fails the turn; a link inside is
    /// followed.
    #[test]
    fn instruction_files_are_read_only_from_inside_and_only_when_regular() {
        type Make = fn(&Path, &Path);
        let cases: &[(&str, Make, bool)] = &[
            (
                "a link to a file outside",
                |ws, outside| {
                    std::os::unix::fs::symlink(outside.join("id_rsa"), ws.join(INSTRUCTION_FILE))
                        .unwrap()
                },
                false,
            ),
            (
                "a link to a folder outside, then the file",
                |ws, outside| {
                    std::os::unix::fs::symlink(outside, ws.join("docs")).unwrap();
                    std::os::unix::fs::symlink("docs/id_rsa", ws.join(INSTRUCTION_FILE)).unwrap()
                },
                false,
            ),
            (
                "a relative link climbing out",
                |ws, outside| {
                    let up = Path::new("..")
                        .join(outside.file_name().unwrap())
                        .join("id_rsa");
                    std::os::unix::fs::symlink(up, ws.join(INSTRUCTION_FILE)).unwrap()
                },
                false,
            ),
            (
                "a FIFO",
                |ws, _| {
                    let c = std::ffi::CString::new(ws.join(INSTRUCTION_FILE).to_str().unwrap())
                        .unwrap();
                    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
                },
                false,
            ),
            (
                "a folder",
                |ws, _| std::fs::create_dir(ws.join(INSTRUCTION_FILE)).unwrap(),
                false,
            ),
            (
                "binary content",
                |ws, _| std::fs::write(ws.join(INSTRUCTION_FILE), b"SECRET\0\x01\x02").unwrap(),
                false,
            ),
            (
                "a link to a file inside",
                |ws, _| {
                    std::fs::create_dir(ws.join("notes")).unwrap();
                    std::fs::write(ws.join("notes/agents.md"), "SECRET is fine here").unwrap();
                    std::os::unix::fs::symlink("notes/agents.md", ws.join(INSTRUCTION_FILE))
                        .unwrap()
                },
                true,
            ),
        ];
        let base = std::env::temp_dir().join(format!("maka-agents-hostile-{}", std::process::id()));
        for (what, make, shown) in cases {
            let _ = std::fs::remove_dir_all(&base);
            let (ws, outside) = (base.join("ws"), base.join("outside"));
            std::fs::create_dir_all(&ws).unwrap();
            std::fs::create_dir_all(&outside).unwrap();
            std::fs::write(outside.join("id_rsa"), "SECRET KEY").unwrap();
            make(&ws, &outside);
            let text = compose(&session(&ws), &[]).0;
            assert_eq!(text.contains("SECRET"), *shown, "{what}: {text}");
        }
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn instruction_files_are_read_within_the_budget() {
        let dir = std::env::temp_dir().join(format!("maka-agents-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(INSTRUCTION_FILE),
            "Run `make check` before finishing.\n",
        )
        .unwrap();
        let text = compose(&session(&dir), &[]).0;
        assert!(
            text.contains("Run `make check` before finishing."),
            "{text}"
        );
        std::fs::write(dir.join(INSTRUCTION_FILE), "é".repeat(INSTRUCTIONS_BUDGET)).unwrap();
        let text = compose(&session(&dir), &[]).0;
        assert!(text.contains("the rest is cut"));
        assert!(text.len() < INSTRUCTIONS_BUDGET + 1024);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
