//! Durable state under the data dir: one directory per session with an atomically replaced
//! `session.json` (temp file, fsync, rename, fsync of the directory) and an append-only
//! `transcript.jsonl` (one item per line, fsync'd before the append is acknowledged).
//!
//! Reading is forgiving: a half-written last line (a crash mid-append) is dropped and the file
//! truncated back to its last complete line; a corrupt or foreign file is logged and that
//! session skipped, never a host that refuses to start.
//!
//! Everything the host writes under its data dir is its user's alone: files are created
//! [`PRIVATE_FILE`] and folders [`PRIVATE_DIR`], through the few writers at the end of this
//! file ([`write_atomic`], [`create_private_dir_all`], [`open_private_append`],
//! [`create_private`]); what an older build left looser is tightened at start
//! ([`tighten_modes`]).

use crate::host_api::wire::{Session, TranscriptItem};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

pub struct Store {
    root: PathBuf,
    /// fsync on every commit. Only benchmarks turn this off (`MAKA_HOST_FSYNC=0`).
    fsync: bool,
}

/// A transcript to append to. It holds no open file: each append opens, writes, syncs and
/// closes, so a host serving thousands of sessions holds no descriptor per session (the
/// open is microseconds beside the fsync every append pays anyway).
pub struct TranscriptFile {
    path: PathBuf,
    fsync: bool,
}

impl Store {
    pub fn open(root: &Path, fsync: bool) -> io::Result<Store> {
        create_private_dir_all(&root.join("sessions"))?;
        Ok(Store {
            root: root.to_path_buf(),
            fsync,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn session_dir(&self, id: &str) -> PathBuf {
        self.root.join("sessions").join(id)
    }

    pub fn fsync(&self) -> bool {
        self.fsync
    }

    /// Writes a whole transcript for a new session (a branch's copy), atomically.
    pub fn write_transcript(&self, id: &str, items: &[TranscriptItem]) -> io::Result<()> {
        let dir = self.session_dir(id);
        create_private_dir_all(&dir)?;
        let buf = transcript_lines(items, |_, _| {})?;
        write_atomic(&dir, "transcript.jsonl", &buf, self.fsync)
    }

    /// Removes what writes interrupted by a kill left behind (`.<name>.tmp` beside the files
    /// [`write_atomic`] replaces) in the data dir itself. Called by the data dir's owner at
    /// start, before anything is written. A session's folder is cleaned when the session is
    /// first opened ([`Store::open_transcript`]): at start that would be a directory read per
    /// session, and [`write_atomic`] replaces a leftover of its own name anyway.
    pub fn remove_stale_temps(&self) {
        remove_stale_temps_in(&self.root);
    }

    /// The ids of the sessions on disk (one directory read: their records are read when
    /// first needed, see [`Store::load_session`]).
    pub fn session_ids(&self) -> Vec<String> {
        let entries = match fs::read_dir(self.root.join("sessions")) {
            Ok(e) => e,
            Err(e) => {
                log::error!("cannot list {}: {e}", self.root.display());
                return Vec::new();
            }
        };
        entries
            .flatten()
            // The entry's type comes with the directory read (no stat per session; a
            // symbolic link is followed, as before).
            .filter(|e| {
                e.file_type()
                    .is_ok_and(|t| t.is_dir() || (t.is_symlink() && e.path().is_dir()))
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.'))
            .collect()
    }

    /// Session `id`'s record: `Ok(None)` (logged) when it is not a session — no or a corrupt
    /// `session.json`, or one naming another session — and `Err` when it could not be read
    /// now (a full descriptor table, an I/O error): that one is asked again later, never
    /// taken for absent (a create with its id would write over it).
    pub fn load_session(&self, id: &str) -> io::Result<Option<Session>> {
        let dir = self.session_dir(id);
        let path = dir.join("session.json");
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                log::error!("skipping session {id:?}: it has no {}", path.display());
                return Ok(None);
            }
            Err(e) => {
                log::error!("cannot read {} now: {e}", path.display());
                return Err(e);
            }
        };
        match serde_json::from_slice::<Session>(&bytes) {
            Ok(mut s) if s.id == id => {
                // Records from before `turnCount` existed: a non-empty transcript means
                // the session has a conversation.
                if s.turn_count == 0
                    && fs::metadata(dir.join("transcript.jsonl")).is_ok_and(|m| m.len() > 0)
                {
                    s.turn_count = 1;
                }
                Ok(Some(s))
            }
            Ok(s) => {
                log::error!(
                    "skipping {}: it describes session {:?}, not {id:?}",
                    path.display(),
                    s.id
                );
                Ok(None)
            }
            Err(e) => {
                log::error!(
                    "skipping session {id:?}: cannot read {}: {e}",
                    path.display()
                );
                Ok(None)
            }
        }
    }

    /// Writes the session record atomically (and creates its directory on first write).
    pub fn save_session(&self, s: &Session) -> io::Result<()> {
        let dir = self.session_dir(&s.id);
        create_private_dir_all(&dir)?;
        let bytes = serde_json::to_vec_pretty(s).map_err(io::Error::other)?;
        write_atomic(&dir, "session.json", &bytes, self.fsync)
    }

    /// Deletes a session's directory for good.
    pub fn remove_session(&self, id: &str) -> io::Result<()> {
        let dir = self.session_dir(id);
        // Rename first so a crash mid-delete never leaves a half-deleted session that loads.
        let trash = self.root.join("sessions").join(format!(".removed-{id}"));
        match fs::rename(&dir, &trash) {
            Ok(()) => fs::remove_dir_all(&trash),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Reads a transcript and opens it for appending. A torn last line (a crash mid-append) is
    /// dropped. Any other line that cannot be read (a flipped byte, a run of NULs) is moved
    /// aside — to `transcript.quarantine.jsonl`, with its line number and byte offset — and
    /// every readable item after it is kept: the transcript is rewritten atomically from its
    /// good lines, byte for byte (items of kinds this build does not know stay as they were).
    pub fn open_transcript(&self, id: &str) -> io::Result<OpenedTranscript> {
        let dir = self.session_dir(id);
        create_private_dir_all(&dir)?;
        // Opened on first use since start, or again after `release` unloaded an idle session:
        // nothing of ours writes in its folder now. Its writers hold the session's lock, which
        // our caller holds, except subagents.json, written only during a turn, which keeps the
        // session loaded.
        remove_stale_temps_in(&dir);
        let path = dir.join("transcript.jsonl");
        let mut items = Vec::new();
        let mut good: Vec<u8> = Vec::new();
        let mut problems = Vec::new();
        let mut torn = false;
        if let Ok(f) = File::open(&path) {
            let mut reader = BufReader::new(f);
            let mut line = Vec::new();
            let (mut offset, mut number) = (0u64, 0u64);
            loop {
                line.clear();
                let n = reader.read_until(b'\n', &mut line)?;
                if n == 0 {
                    break;
                }
                number += 1;
                if line.last() != Some(&b'\n') {
                    log::warn!(
                        "{}: dropping a half-written last line ({n} bytes) left by a crash",
                        path.display()
                    );
                    torn = true;
                    break;
                }
                match serde_json::from_slice::<TranscriptItem>(&line[..n - 1]) {
                    Ok(item) => {
                        items.push(item);
                        good.extend_from_slice(&line);
                    }
                    Err(e) => {
                        log::error!(
                            "{}: line {number} (byte {offset}, {n} bytes) is unreadable ({e}); moved to transcript.quarantine.jsonl, the rest is kept",
                            path.display()
                        );
                        problems.push(Quarantined {
                            line: number,
                            offset,
                            bytes: n as u64 - 1,
                            error: e.to_string(),
                            raw: String::from_utf8_lossy(&line[..n - 1]).into_owned(),
                        });
                    }
                }
                offset += n as u64;
            }
        }
        if !problems.is_empty() {
            // Aside first (appended, durable), then the clean transcript replaces the old one.
            let mut aside = open_private_append(&dir.join("transcript.quarantine.jsonl"))?;
            for q in &problems {
                let mut l = serde_json::to_vec(q).map_err(io::Error::other)?;
                l.push(b'\n');
                aside.write_all(&l)?;
            }
            aside.sync_all()?;
            write_atomic(&dir, "transcript.jsonl", &good, true)?;
            torn = false;
        }
        let file = open_private_append(&path)?;
        if torn {
            file.set_len(good.len() as u64)?;
            file.sync_all()?;
        }
        drop(file);
        Ok(OpenedTranscript {
            items,
            file: TranscriptFile {
                path,
                fsync: self.fsync,
            },
        })
    }

    /// What opens of this transcript moved aside (`transcript.quarantine.jsonl`), for
    /// `session.get`.
    pub fn quarantined(&self, id: &str) -> Vec<serde_json::Value> {
        let path = self.session_dir(id).join("transcript.quarantine.jsonl");
        let Ok(text) = fs::read_to_string(path) else {
            return vec![];
        };
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|mut v| {
                if let Some(o) = v.as_object_mut() {
                    o.remove("raw"); // the bytes stay in the file; the report says where
                }
                v
            })
            .collect()
    }
}

/// A transcript as read: its items and the file to append to.
pub struct OpenedTranscript {
    pub items: Vec<TranscriptItem>,
    pub file: TranscriptFile,
}

/// An unreadable transcript line, kept aside with where it was.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Quarantined {
    line: u64,
    offset: u64,
    bytes: u64,
    error: String,
    raw: String,
}

impl TranscriptFile {
    /// Appends items; they are durable when this returns Ok. Known secrets are redacted in
    /// the file and in `items` alike, so what is kept in memory is what a reload reads.
    pub fn append(&mut self, items: &mut [TranscriptItem]) -> io::Result<()> {
        let mut redacted = vec![];
        let buf = transcript_lines(items, |i, tree| redacted.push((i, tree.clone())))?;
        let mut file = OpenOptions::new().append(true).open(&self.path)?;
        file.write_all(&buf)?;
        if self.fsync {
            file.sync_data()?;
        }
        for (i, tree) in redacted {
            if let Ok(clean) = serde_json::from_value(tree) {
                items[i] = clean;
            }
        }
        Ok(())
    }
}

/// Transcript items as JSON lines, every known secret redacted ([`crate::secrets`]);
/// `redacted` is given the index and the written tree of each item that held one.
///
/// Each is written through a `Value` by the `Value`'s own `Display`: that is serde_json's
/// serializer as serde_json itself instantiates it, compiled at opt-level 3. One instantiated
/// for `TranscriptItem` is compiled in this crate, at "z" (Cargo.toml), and escapes a long text
/// (a pasted file) several times slower: ~40 ms for 10 MiB (issue 27, docs/benchmarks.md).
fn transcript_lines(
    items: &[TranscriptItem],
    mut redacted: impl FnMut(usize, &serde_json::Value),
) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let mut tree = serde_json::to_value(item).map_err(io::Error::other)?;
        if crate::secrets::redact_json(&mut tree) {
            redacted(i, &tree);
        }
        writeln!(buf, "{tree}")?;
    }
    Ok(buf)
}

/// Reads one of the host's small JSON files (`memory.json`, `permissions.json`): missing is
/// the default; unreadable is logged and moved aside (`<name>.unreadable-<ms>.json`) so the host
/// still starts, and the next write does not destroy what a person may want back.
pub fn read_json_or_default<T: serde::de::DeserializeOwned + Default>(dir: &Path, name: &str) -> T {
    let path = dir.join(name);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return T::default(),
        Err(e) => {
            log::error!("cannot read {} ({e}); starting without it", path.display());
            return T::default();
        }
    };
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        let stem = name.strip_suffix(".json").unwrap_or(name);
        let aside = dir.join(format!(
            "{stem}.unreadable-{}.json",
            crate::host_api::wire::now_ms()
        ));
        log::error!(
            "{} is unreadable ({e}); moved to {} and starting without it",
            path.display(),
            aside.display()
        );
        if let Err(e) = fs::rename(&path, &aside) {
            log::error!("cannot move {} aside: {e}", path.display());
        }
        T::default()
    })
}

/// Removes the `.<name>.tmp` files in `dir` (see [`Store::remove_stale_temps`]).
fn remove_stale_temps_in(dir: &Path) {
    for entry in fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
    {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.ends_with(".tmp") {
            match fs::remove_file(entry.path()) {
                Ok(()) => log::info!(
                    "removed {} left by an interrupted write",
                    entry.path().display()
                ),
                Err(e) => log::warn!("cannot remove {}: {e}", entry.path().display()),
            }
        }
    }
}

/// The mode of every file the host writes under its data dir.
pub const PRIVATE_FILE: u32 = 0o600;
/// The mode of every folder the host makes under its data dir (and of the data dir).
pub const PRIVATE_DIR: u32 = 0o700;

/// `fs::create_dir_all`, each folder it creates [`PRIVATE_DIR`].
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR)
        .create(dir)
}

/// Opens `path` for appending, creating it [`PRIVATE_FILE`].
pub fn open_private_append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(PRIVATE_FILE)
        .open(path)
}

/// Creates (or truncates) `path` for writing, creating it [`PRIVATE_FILE`].
pub fn create_private(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(PRIVATE_FILE)
        .open(path)
}

/// Tightens what under `data_dir` (itself included) others may read: files to
/// [`PRIVATE_FILE`], folders to [`PRIVATE_DIR`] — a data dir an older build wrote (0644
/// transcripts). Links are neither followed nor changed; each change is made on the opened
/// file (`O_NOFOLLOW`), so a link swapped in cannot redirect it. Returns (files, folders)
/// tightened; the caller logs them.
pub fn tighten_modes(data_dir: &Path) -> (usize, usize) {
    // Once per data dir: everything written since is private from the start, and host start
    // reads one directory, not every session's (a walk of 2,000 sessions on every start).
    let done = data_dir.join(MODES_TIGHTENED);
    if done.exists() {
        return (0, usize::from(tighten(data_dir, PRIVATE_DIR)));
    }
    let (files, dirs) = tighten_tree(data_dir);
    if let Err(e) = write_atomic(data_dir, MODES_TIGHTENED, b"1\n", false) {
        log::warn!("cannot record that {} is private: {e}", data_dir.display());
    }
    (files, dirs)
}

/// The marker [`tighten_modes`] leaves once it has made a whole data dir private.
const MODES_TIGHTENED: &str = "modes-private";

fn tighten_tree(data_dir: &Path) -> (usize, usize) {
    let (mut files, mut dirs) = (0, 0);
    let mut pending = vec![data_dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        if tighten(&dir, PRIVATE_DIR) {
            dirs += 1;
        }
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => pending.push(entry.path()),
                Ok(t) if t.is_file() => {
                    let loose = entry.metadata().is_ok_and(|m| {
                        std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o077 != 0
                    });
                    if loose && tighten(&entry.path(), PRIVATE_FILE) {
                        files += 1;
                    }
                }
                _ => {}
            }
        }
    }
    (files, dirs)
}

/// Sets `path`'s mode to `mode` if others may read, write or enter it. Whether it changed.
fn tighten(path: &Path, mode: u32) -> bool {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(f) => f,
        Err(e) => {
            log::warn!("cannot check the mode of {}: {e}", path.display());
            return false;
        }
    };
    let Ok(meta) = file.metadata() else {
        return false;
    };
    if meta.permissions().mode() & 0o077 == 0 {
        return false;
    }
    match file.set_permissions(fs::Permissions::from_mode(mode)) {
        Ok(()) => true,
        Err(e) => {
            log::warn!("cannot make {} private: {e}", path.display());
            false
        }
    }
}

/// temp file → fsync → rename → fsync(dir): after a crash either the old or the new content is
/// there, never a mix.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8], fsync: bool) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    {
        // The host's files are the user's alone (its data dir is 0700 too): a leftover
        // temporary file of another mode is replaced, not reused.
        use std::os::unix::fs::OpenOptionsExt;
        let _ = fs::remove_file(&tmp);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(PRIVATE_FILE)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if fsync {
            f.sync_all()?;
        }
    }
    fs::rename(&tmp, dir.join(name))?;
    if fsync {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_api::wire::TranscriptBody;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("maka-store-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn item(seq: u64) -> TranscriptItem {
        TranscriptItem {
            message_seq: seq,
            ts: 0,
            turn_id: "t".into(),
            body: TranscriptBody::Summary {
                text: format!("item {seq}"),
                compaction_id: String::new(),
                trigger: Default::default(),
                through_message_seq: None,
                fallback: None,
            },
        }
    }

    /// Lines written through a tree hold the JSON serde_json writes for the item itself and
    /// read back as the items: a user message with a long text needing every escape, a tool
    /// call (its arguments a tree), an edit's result (a flattened diff).
    #[test]
    fn transcript_lines_hold_the_items_json() {
        use crate::host_api::wire::{FileDiff, MessageContent, ToolResultContent, ToolStatus};
        let text = "a \"quote\", a \\ slash\n\ttab \u{1} é 🦀 ".repeat(4096);
        let with = |seq: u64, body: TranscriptBody| TranscriptItem { body, ..item(seq) };
        let items = [
            item(1),
            with(
                2,
                TranscriptBody::User {
                    message_id: "m".into(),
                    content: MessageContent {
                        text: text.clone(),
                        attachments: vec![],
                    },
                    steered: false,
                },
            ),
            with(
                3,
                TranscriptBody::ToolCall {
                    tool_call_id: "c".into(),
                    tool_name: "edit".into(),
                    title: "Edit a".into(),
                    activity_kind: "edit".into(),
                    args: serde_json::json!({"path": "a", "n": u64::MAX, "x": [1.5, null]}),
                    locations: vec![],
                    provider_call_id: Some("p".into()),
                    parent_tool_call_id: None,
                    name: None,
                },
            ),
            with(
                4,
                TranscriptBody::ToolResult {
                    tool_call_id: "c".into(),
                    status: ToolStatus::Completed,
                    result: ToolResultContent::FileEdit {
                        diff: FileDiff {
                            path: "a".into(),
                            old_text: None,
                            new_text: text,
                            unified_diff: "+".into(),
                        },
                    },
                    truncated: false,
                    ran: true,
                },
            ),
        ];
        let lines = transcript_lines(&items, |_, _| {}).unwrap();
        let lines = std::str::from_utf8(&lines).unwrap();
        assert_eq!(lines.lines().count(), items.len());
        for (line, item) in lines.lines().zip(&items) {
            let back: TranscriptItem = serde_json::from_str(line).unwrap();
            assert_eq!(&back, item);
            // The same JSON as serde_json's writer gives for the item (keys aside).
            let ours: serde_json::Value = serde_json::from_str(line).unwrap();
            let theirs: serde_json::Value =
                serde_json::from_slice(&serde_json::to_vec(item).unwrap()).unwrap();
            assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn torn_last_line_is_dropped_and_appends_continue() {
        let root = tmpdir("torn");
        let store = Store::open(&root, true).unwrap();
        let o = store.open_transcript("s1").unwrap();
        let (items, mut t) = (o.items, o.file);
        assert!(items.is_empty());
        t.append(&mut [item(1), item(2)]).unwrap();
        drop(t);
        let path = root.join("sessions/s1/transcript.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"messageSeq":3,"ts":0,"tu"#).unwrap();
        drop(f);
        let o = store.open_transcript("s1").unwrap();
        let (items, mut t) = (o.items, o.file);
        assert_eq!(items.len(), 2);
        t.append(&mut [item(3)]).unwrap();
        let items = store.open_transcript("s1").unwrap().items;
        assert_eq!(
            items.iter().map(|i| i.message_seq).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn foreign_and_corrupt_files_are_skipped() {
        let root = tmpdir("corrupt");
        let store = Store::open(&root, false).unwrap();
        fs::create_dir_all(root.join("sessions/bad")).unwrap();
        fs::write(root.join("sessions/bad/session.json"), b"{not json").unwrap();
        fs::write(root.join("sessions/stray.txt"), b"hello").unwrap();
        fs::create_dir_all(root.join("sessions/empty")).unwrap();
        // A session folder that is a symbolic link is a session folder.
        fs::create_dir_all(root.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join("sessions/linked")).unwrap();
        let mut ids = store.session_ids();
        ids.sort();
        assert_eq!(
            ids,
            ["bad", "empty", "linked"],
            "folders, not the stray file"
        );
        assert!(ids
            .iter()
            .all(|id| matches!(store.load_session(id), Ok(None))));
        fs::remove_dir_all(root).unwrap();
    }

    /// What is tightened and what is left alone, one row a kind of entry: a loose file or folder
    /// becomes private; a link is not followed (its target, outside, keeps its mode).
    #[test]
    fn tighten_modes_makes_files_and_folders_private_and_follows_no_link() {
        use std::os::unix::fs::PermissionsExt;
        let root = tmpdir("tighten");
        let outside = tmpdir("tighten-outside");
        fs::create_dir_all(root.join("sessions/s")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("theirs"), "x").unwrap();
        fs::write(root.join("sessions/s/transcript.jsonl"), "").unwrap();
        fs::write(root.join("sessions/s/session.json"), "{}").unwrap();
        std::os::unix::fs::symlink(outside.join("theirs"), root.join("sessions/s/link")).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let set = |p: &Path, m: u32| fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
        set(&outside.join("theirs"), 0o644);
        set(&root.join("sessions/s/session.json"), 0o600);
        for (path, before) in [
            (root.join("sessions/s/transcript.jsonl"), 0o644),
            (root.join("sessions/s"), 0o755),
            (root.join("sessions"), 0o750),
            (root.clone(), 0o711),
        ] {
            set(&path, before);
        }
        assert_eq!(tighten_modes(&root), (1, 3));
        for (path, after) in [
            (root.join("sessions/s/transcript.jsonl"), 0o600),
            (root.join("sessions/s/session.json"), 0o600),
            (root.join("sessions/s"), 0o700),
            (root.join("sessions"), 0o700),
            (root.clone(), 0o700),
            (outside.join("theirs"), 0o644),
        ] {
            assert_eq!(mode(&path), after, "{}", path.display());
        }
        assert_eq!(tighten_modes(&root), (0, 0), "nothing left to do");
        // Walked once per data dir (every later file is written private): the data dir
        // itself is still checked at each start, the tree no more.
        assert_eq!(mode(&root.join(MODES_TIGHTENED)), 0o600);
        set(&root.join("sessions/s/session.json"), 0o644);
        set(&root, 0o755);
        assert_eq!(tighten_modes(&root), (0, 1));
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&root.join("sessions/s/session.json")), 0o644);
        fs::remove_dir_all(root).unwrap();
        fs::remove_dir_all(outside).unwrap();
    }
}
