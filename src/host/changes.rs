//! What the agent's file tools changed, turn by turn (`changes.jsonl` next to the transcript),
//! so that a rewind can put the files back: the content before a turn's first change to a path
//! (bounded: larger or unreadable files are kept as a fingerprint only, and cannot be restored)
//! and a fingerprint of the content after its last change (to see whether someone changed the
//! file since).
//!
//! Append-only and forgiving like the transcript: a line that cannot be read is skipped.

use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;

/// Earlier content up to this size is kept; beyond it only a fingerprint.
pub const KEEP_LIMIT: usize = 1024 * 1024;

/// One write by a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileChange {
    pub turn_id: String,
    /// Absolute, links resolved (what the tool wrote).
    pub path: String,
    pub before: Before,
    pub after: Fingerprint,
    /// Written through the editor (`fs/write_text_file`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub via_editor: bool,
}

/// What was there before the write.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Before {
    /// No file: undoing the change deletes it.
    Absent,
    Text {
        text: String,
    },
    /// Not kept (over [`KEEP_LIMIT`], or it could not be read): cannot be restored.
    NotKept {
        why: String,
    },
    /// A later write in the same turn: the turn's first record of the path has the content
    /// from before the turn (only that one is needed to undo it).
    SameTurn,
}

impl Before {
    /// The earlier content as a tool saw it: `None` when the file did not exist.
    pub fn of(existed: bool, text: Option<&str>) -> Before {
        match (existed, text) {
            (false, _) => Before::Absent,
            (true, Some(t)) if t.len() <= KEEP_LIMIT => Before::Text { text: t.into() },
            (true, Some(t)) => Before::NotKept {
                why: format!(
                    "it was {} bytes, over the {KEEP_LIMIT}-byte limit kept for undo",
                    t.len()
                ),
            },
            (true, None) => Before::NotKept {
                why: "its earlier content could not be read".into(),
            },
        }
    }
}

/// Size and FNV-1a 64 of some content: enough to tell "changed since" (not a security check).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fingerprint {
    pub bytes: u64,
    pub fnv64: String,
}

impl Fingerprint {
    pub fn of(content: &[u8]) -> Fingerprint {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in content {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        Fingerprint {
            bytes: content.len() as u64,
            fnv64: format!("{h:016x}"),
        }
    }
}

/// Appends one change (fsync'd: an undo record is worth as much as the write it undoes).
pub fn append(session_dir: &Path, change: &FileChange, fsync: bool) -> io::Result<()> {
    let mut line = serde_json::to_vec(change).map_err(io::Error::other)?;
    line.push(b'\n');
    let mut f = crate::host::store::open_private_append(&session_dir.join("changes.jsonl"))?;
    f.write_all(&line)?;
    if fsync {
        f.sync_data()?;
    }
    Ok(())
}

/// The readable changes made by `turns`, oldest first. Read a line at a time: only those
/// turns' records are held in memory, however long the session's history.
pub fn read_for(session_dir: &Path, turns: &[String]) -> Vec<FileChange> {
    let Ok(f) = fs::File::open(session_dir.join("changes.jsonl")) else {
        return vec![];
    };
    let mut out = Vec::new();
    for line in BufReader::new(f).split(b'\n') {
        let Ok(line) = line else { break };
        match serde_json::from_slice::<FileChange>(&line) {
            Ok(c) if turns.contains(&c.turn_id) => out.push(c),
            Ok(_) => {}
            Err(e) => log::warn!(
                "{}: skipping an unreadable change record: {e}",
                session_dir.display()
            ),
        }
    }
    out
}

/// Every recorded write as (turn, path), oldest first: which files each turn changed, the
/// subagents' writes included (their content is skipped, not held).
pub fn paths_by_turn(session_dir: &Path) -> Vec<(String, String)> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Which {
        turn_id: String,
        path: String,
    }
    let Ok(f) = fs::File::open(session_dir.join("changes.jsonl")) else {
        return vec![];
    };
    BufReader::new(f)
        .split(b'\n')
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_slice::<Which>(&line).ok())
        .map(|w| (w.turn_id, w.path))
        .collect()
}

/// What undoing a set of turns means for one file: the content before their first change and
/// the fingerprint after their last.
#[derive(Debug, PartialEq)]
pub struct Undo {
    pub path: String,
    pub before: Before,
    pub after: Fingerprint,
    pub via_editor: bool,
}

/// The files `turns` changed, each once, in the order they were first changed.
pub fn undo_plan(changes: &[FileChange], turns: &[String]) -> Vec<Undo> {
    let mut out: Vec<Undo> = Vec::new();
    for c in changes.iter().filter(|c| turns.contains(&c.turn_id)) {
        match out.iter_mut().find(|u| u.path == c.path) {
            Some(u) => {
                u.after = c.after.clone();
                u.via_editor |= c.via_editor;
            }
            None => out.push(Undo {
                path: c.path.clone(),
                before: c.before.clone(),
                after: c.after.clone(),
                via_editor: c.via_editor,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(turn: &str, path: &str, before: Before, after: &str) -> FileChange {
        FileChange {
            turn_id: turn.into(),
            path: path.into(),
            before,
            after: Fingerprint::of(after.as_bytes()),
            via_editor: false,
        }
    }

    #[test]
    fn the_plan_keeps_the_first_before_and_the_last_after_per_file() {
        let text = |t: &str| Before::Text { text: t.into() };
        let changes = vec![
            change("t1", "/a", text("a0"), "a1"),
            change("t2", "/a", text("a1"), "a2"),
            change("t2", "/b", Before::Absent, "b1"),
            change("t3", "/a", text("a2"), "a3"),
        ];
        let plan = undo_plan(&changes, &["t2".into(), "t3".into()]);
        assert_eq!(plan.len(), 2);
        assert_eq!(plan[0].path, "/a");
        assert_eq!(plan[0].before, text("a1"));
        assert_eq!(plan[0].after, Fingerprint::of(b"a3"));
        assert_eq!(plan[1].before, Before::Absent);
        assert!(undo_plan(&changes, &["t9".into()]).is_empty());
    }

    #[test]
    fn large_or_unreadable_earlier_content_is_not_kept() {
        assert!(matches!(Before::of(false, None), Before::Absent));
        assert!(matches!(Before::of(true, None), Before::NotKept { .. }));
        let big = "x".repeat(KEEP_LIMIT + 1);
        assert!(matches!(
            Before::of(true, Some(&big)),
            Before::NotKept { .. }
        ));
        assert_eq!(Fingerprint::of(b"").fnv64, "cbf29ce484222325");
        assert_ne!(Fingerprint::of(b"a"), Fingerprint::of(b"b"));
    }

    #[test]
    fn records_are_appended_and_read_back_for_the_asked_turns_only() {
        let dir = std::env::temp_dir().join(format!("maka-changes-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let text = |t: &str| Before::Text { text: t.into() };
        append(&dir, &change("t1", "/a", text("a0"), "a1"), false).unwrap();
        append(&dir, &change("t2", "/a", text("a1"), "a2"), false).unwrap();
        // A torn or foreign line is skipped, not the end of the history.
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(dir.join("changes.jsonl"))
            .unwrap();
        f.write_all(b"{not json\n").unwrap();
        append(&dir, &change("t2", "/a", Before::SameTurn, "a3"), false).unwrap();
        let got = read_for(&dir, &["t2".into()]);
        assert_eq!(got.len(), 2);
        let plan = undo_plan(&got, &["t2".into()]);
        assert_eq!(plan[0].before, text("a1"));
        assert_eq!(plan[0].after, Fingerprint::of(b"a3"));
        assert!(read_for(&dir, &["t9".into()]).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }
}
