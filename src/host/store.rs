//! Durable state under the data dir: one directory per session with an atomically replaced
//! `session.json` (temp file, fsync, rename, fsync of the directory) and an append-only
//! `transcript.jsonl` (one item per line, fsync'd before the append is acknowledged).
//!
//! Reading is forgiving: a half-written last line (a crash mid-append) is dropped and the file
//! truncated back to its last complete line; a corrupt or foreign file is logged and that
//! session skipped, never a host that refuses to start.

use crate::host_api::wire::{Session, TranscriptItem};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

pub struct Store {
    root: PathBuf,
    /// fsync on every commit. Only benchmarks turn this off (`MAKA_HOST_FSYNC=0`).
    fsync: bool,
}

/// An open transcript: appends go to the end of the file.
pub struct TranscriptFile {
    file: File,
    fsync: bool,
}

impl Store {
    pub fn open(root: &Path, fsync: bool) -> io::Result<Store> {
        fs::create_dir_all(root.join("sessions"))?;
        Ok(Store {
            root: root.to_path_buf(),
            fsync,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn session_dir(&self, id: &str) -> PathBuf {
        self.root.join("sessions").join(id)
    }

    /// Every readable session record. Unreadable ones are logged and skipped.
    pub fn load_sessions(&self) -> Vec<Session> {
        let mut out = Vec::new();
        let entries = match fs::read_dir(self.root.join("sessions")) {
            Ok(e) => e,
            Err(e) => {
                log::error!("cannot list {}: {e}", self.root.display());
                return out;
            }
        };
        for entry in entries.flatten() {
            let dir = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !dir.is_dir() || name.starts_with('.') {
                continue;
            }
            let path = dir.join("session.json");
            match fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<Session>(&b).map_err(|e| e.to_string()))
            {
                Ok(mut s) if s.id == name => {
                    // Records from before `turnCount` existed: a non-empty transcript means
                    // the session has a conversation.
                    if s.turn_count == 0
                        && fs::metadata(dir.join("transcript.jsonl")).is_ok_and(|m| m.len() > 0)
                    {
                        s.turn_count = 1;
                    }
                    out.push(s)
                }
                Ok(s) => log::error!(
                    "skipping {}: it describes session {:?}, not {name:?}",
                    path.display(),
                    s.id
                ),
                Err(e) => log::error!(
                    "skipping session {name:?}: cannot read {}: {e}",
                    path.display()
                ),
            }
        }
        out
    }

    /// Writes the session record atomically (and creates its directory on first write).
    pub fn save_session(&self, s: &Session) -> io::Result<()> {
        let dir = self.session_dir(&s.id);
        fs::create_dir_all(&dir)?;
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

    /// Reads a transcript, dropping (and truncating away) a torn last line, and opens it for
    /// appending.
    pub fn open_transcript(&self, id: &str) -> io::Result<(Vec<TranscriptItem>, TranscriptFile)> {
        let dir = self.session_dir(id);
        fs::create_dir_all(&dir)?;
        let path = dir.join("transcript.jsonl");
        let mut items = Vec::new();
        let mut good_len: u64 = 0;
        let mut torn = false;
        if let Ok(f) = File::open(&path) {
            let mut reader = BufReader::new(f);
            let mut line = Vec::new();
            loop {
                line.clear();
                let n = reader.read_until(b'\n', &mut line)?;
                if n == 0 {
                    break;
                }
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
                        good_len += n as u64;
                    }
                    Err(e) => {
                        log::error!(
                            "{}: unreadable item after {} good ones ({e}); ignoring the rest",
                            path.display(),
                            items.len()
                        );
                        torn = true;
                        break;
                    }
                }
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        if torn {
            file.set_len(good_len)?;
            file.sync_all()?;
        }
        Ok((
            items,
            TranscriptFile {
                file,
                fsync: self.fsync,
            },
        ))
    }
}

impl TranscriptFile {
    /// Appends items; they are durable when this returns Ok.
    pub fn append(&mut self, items: &[TranscriptItem]) -> io::Result<()> {
        let mut buf = Vec::new();
        for item in items {
            serde_json::to_writer(&mut buf, item).map_err(io::Error::other)?;
            buf.push(b'\n');
        }
        self.file.write_all(&buf)?;
        if self.fsync {
            self.file.sync_data()?;
        }
        Ok(())
    }
}

/// temp file → fsync → rename → fsync(dir): after a crash either the old or the new content is
/// there, never a mix.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8], fsync: bool) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    {
        let mut f = File::create(&tmp)?;
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
            },
        }
    }

    #[test]
    fn torn_last_line_is_dropped_and_appends_continue() {
        let root = tmpdir("torn");
        let store = Store::open(&root, true).unwrap();
        let (items, mut t) = store.open_transcript("s1").unwrap();
        assert!(items.is_empty());
        t.append(&[item(1), item(2)]).unwrap();
        drop(t);
        let path = root.join("sessions/s1/transcript.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"messageSeq":3,"ts":0,"tu"#).unwrap();
        drop(f);
        let (items, mut t) = store.open_transcript("s1").unwrap();
        assert_eq!(items.len(), 2);
        t.append(&[item(3)]).unwrap();
        let (items, _) = store.open_transcript("s1").unwrap();
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
        assert!(store.load_sessions().is_empty());
        fs::remove_dir_all(root).unwrap();
    }
}
