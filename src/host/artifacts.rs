//! Artifacts: files that belong to a session, stored under its directory —
//! `artifacts/<artifactId>/{meta.json, data}` — and uploads in progress,
//! `uploads/<uploadId>/{meta.json, data}`. An upload's progress is its data file's length, so
//! it survives a crash and a client resumes from what the host reports. Commit checks the
//! length and the SHA-256 the client declared, then renames the upload into place.
//!
//! Parts of one upload are written one at a time (a claim, not a lock held across the write):
//! a second writer is refused, never interleaved.

use crate::host::codec::{base64_decode, base64_encode, Sha256};
use crate::host_api::ops::{Artifact, ArtifactAnswer, IngestOutcome};
use crate::host_api::wire::{now_ms, ErrorCode, HostError};
use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The largest artifact.
pub const MAX_ARTIFACT_BYTES: u64 = 1024 * 1024 * 1024;
/// The largest part of an upload (decoded).
pub const MAX_PART_BYTES: usize = 8 * 1024 * 1024;
/// The most a read returns.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;
/// Attachments larger than this (text or data) are stored as artifacts, not inline.
pub const INLINE_ATTACHMENT_BYTES: usize = 256 * 1024;

#[derive(Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct UploadMeta {
    name: String,
    mime_type: String,
    total_bytes: u64,
    sha256: String,
    source: String,
}

pub struct Artifacts {
    fsync: bool,
    /// Uploads with a part being written.
    busy: Mutex<HashSet<String>>,
}

/// Releases an upload's claim when dropped.
struct Claim<'a>(&'a Artifacts, String);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0
            .busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.1);
    }
}

fn io(what: &str, e: std::io::Error) -> HostError {
    HostError::new(ErrorCode::PersistenceFailed, format!("{what}: {e}"))
}

fn check_id(what: &str, id: &str) -> Result<(), HostError> {
    if crate::host_api::wire::valid_id(id) {
        Ok(())
    } else {
        Err(HostError::invalid(format!(
            "`{what}` must match ^[A-Za-z0-9_-]{{1,128}}$"
        )))
    }
}

impl Artifacts {
    pub fn new(fsync: bool) -> Artifacts {
        Artifacts {
            fsync,
            busy: Mutex::new(HashSet::new()),
        }
    }

    fn claim(&self, upload_id: &str) -> Result<Claim<'_>, HostError> {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        if !busy.insert(upload_id.to_string()) {
            return Err(HostError::new(
                ErrorCode::OperationConflict,
                format!(
                    "another part of upload {upload_id} is being written; retry when it is done"
                ),
            ));
        }
        Ok(Claim(self, upload_id.to_string()))
    }

    pub fn begin(
        &self,
        session_dir: &Path,
        name: &str,
        mime_type: Option<&str>,
        total_bytes: u64,
        sha256: &str,
        source: &str,
    ) -> Result<IngestOutcome, HostError> {
        let name = name.trim();
        // A name is shown to people and models: no path tricks, no terminal escapes.
        if name.is_empty()
            || name.len() > 255
            || name.contains(['/', '\\'])
            || name == "."
            || name == ".."
            || name.chars().any(char::is_control)
        {
            return Err(HostError::invalid(
                "`name` must be a file name of 1 to 255 bytes: not `.` or `..`, without `/`, `\\` or control characters",
            ));
        }
        if total_bytes > MAX_ARTIFACT_BYTES {
            return Err(HostError::new(
                ErrorCode::PayloadTooLarge,
                format!("an artifact may have at most {MAX_ARTIFACT_BYTES} bytes"),
            ));
        }
        let sha = sha256.to_ascii_lowercase();
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(HostError::invalid("`sha256` must be 64 hex digits"));
        }
        let upload_id = crate::host::random_id("up");
        let dir = session_dir.join("uploads").join(&upload_id);
        crate::host::store::create_private_dir_all(&dir)
            .map_err(|e| io("cannot create the upload", e))?;
        let meta = UploadMeta {
            name: name.into(),
            mime_type: mime_type.unwrap_or("application/octet-stream").to_string(),
            total_bytes,
            sha256: sha,
            source: source.into(),
        };
        crate::host::store::create_private(&dir.join("data"))
            .map_err(|e| io("cannot create the upload", e))?;
        let bytes = serde_json::to_vec(&meta).map_err(|e| HostError::internal(e.to_string()))?;
        crate::host::store::write_atomic(&dir, "meta.json", &bytes, self.fsync)
            .map_err(|e| io("cannot create the upload", e))?;
        Ok(IngestOutcome::Upload {
            upload_id,
            received: 0,
            total_bytes,
        })
    }

    fn upload(
        &self,
        session_dir: &Path,
        upload_id: &str,
    ) -> Result<(PathBuf, UploadMeta), HostError> {
        check_id("uploadId", upload_id)?;
        let dir = session_dir.join("uploads").join(upload_id);
        let meta = fs::read(dir.join("meta.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<UploadMeta>(&b).ok())
            .ok_or_else(|| HostError::not_found(format!("upload {upload_id}")))?;
        Ok((dir, meta))
    }

    fn received(dir: &Path) -> Result<u64, HostError> {
        fs::metadata(dir.join("data"))
            .map(|m| m.len())
            .map_err(|e| io("cannot read the upload", e))
    }

    pub fn status(&self, session_dir: &Path, upload_id: &str) -> Result<IngestOutcome, HostError> {
        let (dir, meta) = self.upload(session_dir, upload_id)?;
        Ok(IngestOutcome::Upload {
            upload_id: upload_id.into(),
            received: Self::received(&dir)?,
            total_bytes: meta.total_bytes,
        })
    }

    pub fn part(
        &self,
        session_dir: &Path,
        upload_id: &str,
        offset: u64,
        data_base64: &str,
    ) -> Result<IngestOutcome, HostError> {
        let (dir, meta) = self.upload(session_dir, upload_id)?;
        let _claim = self.claim(upload_id)?;
        let data = base64_decode(data_base64)
            .ok_or_else(|| HostError::invalid("`dataBase64` is not base64"))?;
        if data.len() > MAX_PART_BYTES {
            return Err(HostError::new(
                ErrorCode::PayloadTooLarge,
                format!("a part may have at most {MAX_PART_BYTES} bytes"),
            ));
        }
        let received = Self::received(&dir)?;
        if offset != received {
            return Err(HostError::new(
                ErrorCode::OperationConflict,
                format!("the upload has {received} bytes; send the part at offset {received}"),
            )
            .with_details(serde_json::json!({"received": received})));
        }
        if received + data.len() as u64 > meta.total_bytes {
            return Err(HostError::invalid(format!(
                "the part would take the upload past its declared {} bytes",
                meta.total_bytes
            )));
        }
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.join("data"))
            .map_err(|e| io("cannot write the upload", e))?;
        f.write_all(&data)
            .map_err(|e| io("cannot write the upload", e))?;
        if self.fsync {
            f.sync_data()
                .map_err(|e| io("cannot write the upload", e))?;
        }
        Ok(IngestOutcome::Upload {
            upload_id: upload_id.into(),
            received: received + data.len() as u64,
            total_bytes: meta.total_bytes,
        })
    }

    pub fn commit(
        &self,
        session_dir: &Path,
        session_id: &str,
        upload_id: &str,
    ) -> Result<Artifact, HostError> {
        let (dir, meta) = self.upload(session_dir, upload_id)?;
        let _claim = self.claim(upload_id)?;
        let received = Self::received(&dir)?;
        if received != meta.total_bytes {
            return Err(HostError::new(
                ErrorCode::OperationConflict,
                format!(
                    "the upload has {received} of its {} bytes; send the rest first",
                    meta.total_bytes
                ),
            )
            .with_details(serde_json::json!({"received": received})));
        }
        let mut hasher = Sha256::default();
        let mut f = File::open(dir.join("data")).map_err(|e| io("cannot read the upload", e))?;
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = f
                .read(&mut buf)
                .map_err(|e| io("cannot read the upload", e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        let actual = hasher.hex();
        if actual != meta.sha256 {
            // The bytes are not what the client meant to send: nothing is kept.
            let _ = fs::remove_dir_all(&dir);
            return Err(HostError::invalid(format!(
                "the upload's SHA-256 is {actual}, not the declared {}; it was discarded — upload it again",
                meta.sha256
            ))
            .with_details(serde_json::json!({"expected": meta.sha256, "actual": actual})));
        }
        let artifact = Artifact {
            artifact_id: crate::host::random_id("art"),
            session_id: session_id.into(),
            name: meta.name,
            mime_type: meta.mime_type,
            bytes: received,
            sha256: actual,
            created_at: now_ms(),
            source: meta.source,
        };
        let bytes =
            serde_json::to_vec(&artifact).map_err(|e| HostError::internal(e.to_string()))?;
        crate::host::store::write_atomic(&dir, "meta.json", &bytes, self.fsync)
            .map_err(|e| io("cannot store the artifact", e))?;
        let target = session_dir.join("artifacts").join(&artifact.artifact_id);
        crate::host::store::create_private_dir_all(&session_dir.join("artifacts"))
            .and_then(|()| fs::rename(&dir, &target))
            .map_err(|e| io("cannot store the artifact", e))?;
        Ok(artifact)
    }

    pub fn abort(&self, session_dir: &Path, upload_id: &str) -> Result<IngestOutcome, HostError> {
        let (dir, _) = self.upload(session_dir, upload_id)?;
        let _claim = self.claim(upload_id)?;
        fs::remove_dir_all(&dir).map_err(|e| io("cannot remove the upload", e))?;
        Ok(IngestOutcome::Aborted {})
    }

    /// Stores `data` whole (a large attachment, a tool's full output).
    pub fn store(
        &self,
        session_dir: &Path,
        session_id: &str,
        name: &str,
        mime_type: &str,
        source: &str,
        data: &[u8],
    ) -> Result<Artifact, HostError> {
        let sha = crate::host::codec::sha256_hex(data);
        let IngestOutcome::Upload { upload_id, .. } = self.begin(
            session_dir,
            name,
            Some(mime_type),
            data.len() as u64,
            &sha,
            source,
        )?
        else {
            return Err(HostError::internal("begin did not start an upload"));
        };
        let dir = session_dir.join("uploads").join(&upload_id);
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.join("data"))
            .map_err(|e| io("cannot write the artifact", e))?;
        f.write_all(data)
            .map_err(|e| io("cannot write the artifact", e))?;
        if self.fsync {
            f.sync_data()
                .map_err(|e| io("cannot write the artifact", e))?;
        }
        self.commit(session_dir, session_id, &upload_id)
    }

    /// Every artifact of the session, oldest first.
    pub fn list(&self, session_dir: &Path) -> Vec<Artifact> {
        let mut out: Vec<Artifact> = fs::read_dir(session_dir.join("artifacts"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| fs::read(e.path().join("meta.json")).ok())
            .filter_map(|b| serde_json::from_slice(&b).ok())
            .collect();
        out.sort_by(|a: &Artifact, b| {
            (a.created_at, &a.artifact_id).cmp(&(b.created_at, &b.artifact_id))
        });
        out
    }

    /// By id, or by name (the newest with that name): the model often knows only the name.
    pub fn find(&self, session_dir: &Path, id_or_name: &str) -> Option<Artifact> {
        self.list(session_dir)
            .into_iter()
            .rev()
            .find(|a| a.artifact_id == id_or_name || a.name == id_or_name)
    }

    pub fn read(
        &self,
        session_dir: &Path,
        artifact_id: &str,
        offset: u64,
        max_bytes: u64,
    ) -> Result<ArtifactAnswer, HostError> {
        check_id("artifactId", artifact_id)?;
        let (total, data) = self.read_bytes(session_dir, artifact_id, offset, max_bytes)?;
        let end = offset + data.len() as u64;
        Ok(ArtifactAnswer::Chunk {
            total_bytes: total,
            offset,
            data_base64: base64_encode(&data),
            next_offset: (end < total).then_some(end),
        })
    }

    /// `(total size, bytes at offset)`.
    pub fn read_bytes(
        &self,
        session_dir: &Path,
        artifact_id: &str,
        offset: u64,
        max_bytes: u64,
    ) -> Result<(u64, Vec<u8>), HostError> {
        let path = session_dir.join("artifacts").join(artifact_id).join("data");
        let mut f = File::open(&path)
            .map_err(|_| HostError::not_found(format!("artifact {artifact_id}")))?;
        let total = f
            .metadata()
            .map_err(|e| io("cannot read the artifact", e))?
            .len();
        if offset > total {
            return Err(HostError::invalid(format!(
                "`offset` {offset} is past the artifact's {total} bytes"
            )));
        }
        f.seek(SeekFrom::Start(offset))
            .map_err(|e| io("cannot read the artifact", e))?;
        let mut data = Vec::new();
        f.take(max_bytes.clamp(1, MAX_READ_BYTES))
            .read_to_end(&mut data)
            .map_err(|e| io("cannot read the artifact", e))?;
        Ok((total, data))
    }

    pub fn delete(&self, session_dir: &Path, artifact_id: &str) -> Result<bool, HostError> {
        check_id("artifactId", artifact_id)?;
        match fs::remove_dir_all(session_dir.join("artifacts").join(artifact_id)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io("cannot delete the artifact", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::codec::sha256_hex;

    #[test]
    fn uploads_resume_at_the_received_offset_and_commit_only_a_matching_hash() {
        let dir = std::env::temp_dir().join(format!("maka-artifacts-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let a = Artifacts::new(false);
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let sha = sha256_hex(&data);
        let IngestOutcome::Upload { upload_id, .. } = a
            .begin(&dir, "blob.bin", None, data.len() as u64, &sha, "upload")
            .unwrap()
        else {
            panic!()
        };
        a.part(&dir, &upload_id, 0, &base64_encode(&data[..100_000]))
            .unwrap();
        // A resend of the first part: refused, naming where to continue.
        let e = a
            .part(&dir, &upload_id, 0, &base64_encode(&data[..100_000]))
            .unwrap_err();
        assert_eq!(e.details.unwrap()["received"], 100_000);
        // Resuming: a fresh handle reads the progress from disk.
        let b = Artifacts::new(false);
        assert!(matches!(
            b.status(&dir, &upload_id).unwrap(),
            IngestOutcome::Upload {
                received: 100_000,
                ..
            }
        ));
        assert!(b.commit(&dir, "s", &upload_id).is_err(), "incomplete");
        b.part(&dir, &upload_id, 100_000, &base64_encode(&data[100_000..]))
            .unwrap();
        let art = b.commit(&dir, "s", &upload_id).unwrap();
        assert_eq!(art.bytes, 300_000);
        let (total, got) = b.read_bytes(&dir, &art.artifact_id, 299_990, 100).unwrap();
        assert_eq!((total, &got[..]), (300_000, &data[299_990..]));
        assert_eq!(
            b.find(&dir, "blob.bin").unwrap().artifact_id,
            art.artifact_id
        );
        // A wrong hash: refused and discarded.
        let IngestOutcome::Upload { upload_id, .. } = b
            .begin(&dir, "x", None, 3, &sha256_hex(b"abd"), "upload")
            .unwrap()
        else {
            panic!()
        };
        b.part(&dir, &upload_id, 0, &base64_encode(b"abc")).unwrap();
        assert!(b.commit(&dir, "s", &upload_id).is_err());
        assert!(b.status(&dir, &upload_id).is_err(), "discarded");
        assert!(b.delete(&dir, &art.artifact_id).unwrap());
        assert!(b.list(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }
}
