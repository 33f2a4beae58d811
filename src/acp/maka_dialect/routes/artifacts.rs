//! Maka's artifact query and ingest (the client's `uploadId` → the host's) over ours.

use super::*;
// ---- artifacts ----

pub struct ArtifactQuery {
    kind: String,
    session_id: String,
    artifact_id: Option<String>,
    offset: u64,
}

pub fn read_artifact_query(p: &Params) -> ParamResult<ArtifactQuery> {
    let kind = p.required_str("kind")?;
    let artifact_id = match kind {
        "list_start" | "list_continue" => None,
        "get" | "read_text" | "read_binary" | "read_chunk" => {
            Some(p.required_str("artifactId")?.to_string())
        }
        other => {
            return Err(ResponseError::invalid_params(format_args!(
                "`kind` {other:?} is not an artifact query"
            ))
            .with_data(
                json!({"source": "adapter", "operation": "_maka/artifact/query",
                              "code": "invalid_request"}),
            ))
        }
    };
    Ok(ArtifactQuery {
        kind: kind.into(),
        session_id: p.required_str("sessionId")?.into(),
        artifact_id,
        offset: optional_u64(p, "offset")?.unwrap_or(0),
    })
}

/// Our artifact as Maka's: its digest as `sha256:<hex>`.
fn maka_artifact(a: &ops::Artifact) -> Value {
    let mut v = to_json(a);
    v["contentSha256"] = json!(format!("sha256:{}", a.sha256));
    v
}

/// `_maka/artifact/query`: `list_start` (everything in one page; `list_continue` is then
/// empty), `get`, `read_chunk` (32 KiB from `offset`), `read_text` / `read_binary` (the
/// whole file up to 1 MiB, base64).
pub fn artifact_query(ctx: &Ctx, q: ArtifactQuery) -> Result<Value, ResponseError> {
    owned(ctx, &q.session_id)?;
    let conn = ctx.host()?;
    let session_id = q.session_id.clone();
    let artifact_id = q.artifact_id.clone().unwrap_or_default();
    let input = match q.kind.as_str() {
        "list_start" | "list_continue" => ArtifactQueryInput::List { session_id },
        "get" => ArtifactQueryInput::Get {
            session_id,
            artifact_id,
        },
        kind => ArtifactQueryInput::Read {
            session_id,
            artifact_id,
            offset: if kind == "read_chunk" { q.offset } else { 0 },
            max_bytes: (kind == "read_chunk").then_some(READ_CHUNK),
        },
    };
    Ok(match conn.request::<ops::ArtifactQuery>(&input)? {
        ArtifactAnswer::List { artifacts } => {
            let items: Vec<Value> = if q.kind == "list_continue" {
                vec![]
            } else {
                artifacts.iter().map(maka_artifact).collect()
            };
            json!({"kind": "page", "sessionId": q.session_id, "items": items, "nextCursor": null})
        }
        ArtifactAnswer::Artifact { artifact } => {
            json!({"kind": "artifact", "artifact": artifact.as_ref().map(maka_artifact)})
        }
        ArtifactAnswer::Chunk {
            total_bytes,
            offset,
            data_base64,
            next_offset,
        } if q.kind == "read_chunk" => json!({
            "kind": "chunk", "artifactId": q.artifact_id, "offset": offset,
            "totalBytes": total_bytes, "chunkBase64": data_base64, "nextOffset": next_offset,
        }),
        ArtifactAnswer::Chunk {
            total_bytes,
            data_base64,
            next_offset,
            ..
        } => json!({
            "kind": if q.kind == "read_text" { "text" } else { "binary" },
            "artifactId": q.artifact_id, "totalBytes": total_bytes,
            "dataBase64": data_base64, "truncated": next_offset.is_some(),
        }),
    })
}

// ---- artifact ingest: the client's `uploadId` → the host's ----

/// Maka's limit on uploads open at once, per connection.
const OPEN_UPLOADS: usize = 64;
/// Maka's chunk bound: 48 KiB of data (its base64 is 4/3 as long).
const MAX_CHUNK_BASE64: usize = 48 * 1024 * 4 / 3 + 4;

/// One connection's open uploads (in its context, [`Kept`]): the host's upload id of each, by
/// (session, the client's `uploadId`). At most [`OPEN_UPLOADS`].
#[derive(Default)]
pub struct Uploads(std::sync::Mutex<std::collections::HashMap<(String, String), String>>);

impl Uploads {
    fn host_upload(&self, session_id: &str, upload_id: &str) -> Option<String> {
        let key = (session_id.to_string(), upload_id.to_string());
        crate::jsonrpc::lock(&self.0).get(&key).cloned()
    }

    fn full(&self) -> bool {
        crate::jsonrpc::lock(&self.0).len() >= OPEN_UPLOADS
    }

    fn open(&self, key: (String, String), host: String) {
        crate::jsonrpc::lock(&self.0).insert(key, host);
    }

    fn settled(&self, key: &(String, String)) {
        crate::jsonrpc::lock(&self.0).remove(key);
    }
}

pub enum Ingest {
    /// A commit or an abort: of the host's upload this connection opened for the client's
    /// `uploadId`, else forwarded as it is.
    Settle(ops::IngestInput),
    Begin {
        input: ops::IngestInput,
        upload_id: String,
    },
    Chunk {
        session_id: String,
        upload_id: String,
        offset: u64,
        data_base64: String,
    },
}

pub fn read_ingest(p: &Params) -> ParamResult<Ingest> {
    let bad = |m: String| adapter_error("_maka/artifact/ingest", m);
    match p.required_str("kind")? {
        "begin" => {
            let digest = p.required_str("contentSha256")?;
            let hex = digest
                .strip_prefix("sha256:")
                .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
                .ok_or_else(|| {
                    bad(format!(
                        "`contentSha256` must be sha256:<64 hex>, not {digest:?}"
                    ))
                })?;
            Ok(Ingest::Begin {
                upload_id: p.required_str("uploadId")?.into(),
                input: ops::IngestInput::Begin {
                    session_id: p.required_str("sessionId")?.into(),
                    name: p.required_str("name")?.into(),
                    mime_type: p.optional_str("mimeType")?.map(String::from),
                    total_bytes: p.required_u64("totalBytes")?,
                    sha256: hex.to_ascii_lowercase(),
                    source: None,
                },
            })
        }
        "chunk" => {
            let data = p.required_str("chunkBase64")?;
            if data.len() > MAX_CHUNK_BASE64 {
                return Err(bad(
                    "`chunkBase64` holds more than 48 KiB; send smaller chunks".into(),
                ));
            }
            Ok(Ingest::Chunk {
                session_id: p.required_str("sessionId")?.into(),
                upload_id: p.required_str("uploadId")?.into(),
                offset: p.required_u64("offset")?,
                data_base64: data.into(),
            })
        }
        "commit" | "abort" => crate::acp::maka::read_ingest(p).map(Ingest::Settle),
        other => Err(bad(format!(
            "`kind` {other:?} is not one of Apache Maka's ingests: begin, chunk, commit or abort"
        ))),
    }
}

/// `_maka/artifact/ingest` in Maka's dialect (ours forwards `artifact.ingest` as it is): Maka's
/// `begin` / `chunk` / `commit` / `abort` with the client's `uploadId` → `upload_opened` / `chunk_accepted` / `committed {attachment}` /
/// `aborted`.
pub fn ingest(ctx: &Ctx, i: Ingest) -> Result<Value, ResponseError> {
    let conn = ctx.host()?;
    match i {
        Ingest::Begin { input, upload_id } => begin(ctx, &conn, input, upload_id),
        Ingest::Chunk {
            session_id,
            upload_id,
            offset,
            data_base64,
        } => {
            let host = ctx
                .shared
                .maka
                .uploads
                .host_upload(&session_id, &upload_id)
                .ok_or_else(|| no_upload(&upload_id))?;
            let part = ops::IngestInput::Part {
                session_id,
                upload_id: host,
                offset,
                data_base64,
            };
            let out = conn.request::<ops::ArtifactIngest>(&part)?;
            Ok(maka_ingest(&upload_id, out, false))
        }
        Ingest::Settle(input) => settle(ctx, &conn, input),
    }
}

/// Maka's `begin`: a new upload on the host (at most [`OPEN_UPLOADS`] open on a connection),
/// or, for an `uploadId` this connection already opened, that upload's status.
fn begin(
    ctx: &Ctx,
    conn: &Connected,
    input: ops::IngestInput,
    upload_id: String,
) -> Result<Value, ResponseError> {
    let ops::IngestInput::Begin { session_id, .. } = &input else {
        return Err(
            crate::acp::errors::MakaCode::Internal.error("an upload's begin without its session")
        );
    };
    let session_id = session_id.clone();
    owned(ctx, &session_id)?;
    let uploads = &ctx.shared.maka.uploads;
    if let Some(host) = uploads.host_upload(&session_id, &upload_id) {
        let status = ops::IngestInput::Status {
            session_id,
            upload_id: host,
        };
        return Ok(maka_ingest(
            &upload_id,
            conn.request::<ops::ArtifactIngest>(&status)?,
            true,
        ));
    }
    if uploads.full() {
        return Err(MakaCode::CapacityExceeded.error(format!(
            "{OPEN_UPLOADS} uploads are open on this connection; commit or abort one first"
        )));
    }
    let out = conn.request::<ops::ArtifactIngest>(&input)?;
    if let ops::IngestOutcome::Upload {
        upload_id: host, ..
    } = &out
    {
        uploads.open((session_id, upload_id.clone()), host.clone());
    }
    Ok(maka_ingest(&upload_id, out, true))
}

/// Maka's `commit` / `abort` of an upload this connection opened (anything else goes to the
/// host as it is).
fn settle(ctx: &Ctx, conn: &Connected, input: ops::IngestInput) -> Result<Value, ResponseError> {
    let (ops::IngestInput::Commit {
        session_id,
        upload_id,
    }
    | ops::IngestInput::Abort {
        session_id,
        upload_id,
    }) = &input
    else {
        return Ok(to_json(&conn.request::<ops::ArtifactIngest>(&input)?));
    };
    let Some(host) = ctx.shared.maka.uploads.host_upload(session_id, upload_id) else {
        return Ok(to_json(&conn.request::<ops::ArtifactIngest>(&input)?));
    };
    let key = (session_id.clone(), upload_id.clone());
    let theirs = match &input {
        ops::IngestInput::Commit { .. } => ops::IngestInput::Commit {
            session_id: key.0.clone(),
            upload_id: host,
        },
        _ => ops::IngestInput::Abort {
            session_id: key.0.clone(),
            upload_id: host,
        },
    };
    let out = conn.request::<ops::ArtifactIngest>(&theirs);
    // Forgotten once it is settled — committed, aborted, or gone on the host — so a
    // commit that failed for a passing reason can be sent again (and an upload the
    // host dropped does not hold a place for ever).
    let gone = out
        .as_ref()
        .err()
        .and_then(|e| e.data.as_ref())
        .and_then(|d| d.get("makaCode"))
        == Some(&json!("not_found"));
    if out.is_ok() || gone {
        ctx.shared.maka.uploads.settled(&key);
    }
    Ok(maka_ingest(&key.1, out?, false))
}

fn no_upload(upload_id: &str) -> ResponseError {
    ResponseError::invalid_params(format_args!(
        "No open upload {upload_id:?} on this connection; begin it first"
    ))
    .with_data(
        json!({"source": "adapter", "operation": "_maka/artifact/ingest",
                      "code": "invalid_request"}),
    )
}

/// `begun`: the answer to a `begin` (`upload_opened`, also when it resumes an open upload).
fn maka_ingest(upload_id: &str, out: ops::IngestOutcome, begun: bool) -> Value {
    match out {
        ops::IngestOutcome::Upload {
            received,
            total_bytes,
            ..
        } => json!({
            "kind": if begun { "upload_opened" } else { "chunk_accepted" },
            "uploadId": upload_id, "nextOffset": received, "totalBytes": total_bytes,
        }),
        ops::IngestOutcome::Committed { artifact } => json!({
            "kind": "committed",
            "uploadId": upload_id,
            "attachment": {
                "name": artifact.name,
                "mimeType": artifact.mime_type,
                "sizeBytes": artifact.bytes,
                "ref": {"kind": "session_file", "relativePath": artifact.artifact_id},
            },
            "artifact": maka_artifact(&artifact),
        }),
        ops::IngestOutcome::Aborted {} => json!({"kind": "aborted", "uploadId": upload_id}),
    }
}
