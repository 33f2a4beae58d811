//! ACP prompt content blocks → the host's `MessageContent`.
//!
//! `text` is concatenated in order; `image` becomes an inline attachment; a readable `file://`
//! `resource_link` is read and attached as text (other links are mentioned in the text);
//! `resource` (text or blob) becomes an attachment. `audio` and unknown blocks are rejected
//! with `-32602`, matching `promptCapabilities` (image and embeddedContext only).

use crate::host_api::wire::{Attachment, MessageContent};
use crate::jsonrpc::ResponseError;
use serde_json::Value;
use std::path::Path;

/// A linked file is attached only up to this size.
const LINKED_FILE_LIMIT: u64 = 1024 * 1024;

/// `resource_link` URIs naming a session artifact: `maka-artifact://<artifactId>`.
pub const ARTIFACT_SCHEME: &str = "maka-artifact://";

/// A prompt's text is moved out of the blocks, not copied (a pasted 10 MiB file is held once,
/// not twice).
pub fn to_message(blocks: &mut [Value]) -> Result<MessageContent, ResponseError> {
    let mut text = String::new();
    let mut attachments = Vec::new();
    let bad = |i: usize, what: String| {
        ResponseError::invalid_params(format_args!("`prompt[{i}]`: {what}"))
    };
    for (i, block) in blocks.iter_mut().enumerate() {
        let str_field = |k: &str| block.get(k).and_then(Value::as_str);
        match str_field("type") {
            Some("text") => {
                let Some(Value::String(t)) = block.get_mut("text") else {
                    return Err(bad(i, "a text block needs `text`".into()));
                };
                if text.is_empty() {
                    text = std::mem::take(t);
                } else if !t.is_empty() {
                    text.push('\n');
                    text.push_str(t);
                }
            }
            Some("image") => {
                let data = str_field("data")
                    .ok_or_else(|| bad(i, "an image block needs base64 `data`".into()))?;
                let mime = str_field("mimeType")
                    .ok_or_else(|| bad(i, "an image block needs `mimeType`".into()))?;
                attachments.push(Attachment {
                    kind: "image".into(),
                    name: str_field("uri").unwrap_or("image").to_string(),
                    uri: str_field("uri").map(String::from),
                    mime_type: Some(mime.into()),
                    text: None,
                    data_base64: Some(data.into()),
                    artifact_id: None,
                });
            }
            Some("resource_link") => {
                let uri =
                    str_field("uri").ok_or_else(|| bad(i, "a resource_link needs `uri`".into()))?;
                let name = str_field("name").unwrap_or(uri);
                if let Some(id) = uri.strip_prefix(ARTIFACT_SCHEME) {
                    // A session artifact: referenced, the model reads it with read_artifact.
                    attachments.push(Attachment {
                        kind: "artifact".into(),
                        name: name.into(),
                        uri: Some(uri.into()),
                        mime_type: str_field("mimeType").map(String::from),
                        text: None,
                        data_base64: None,
                        artifact_id: Some(id.into()),
                    });
                    continue;
                }
                match read_file_link(uri) {
                    Some(content) => attachments.push(Attachment {
                        kind: "text".into(),
                        name: name.into(),
                        uri: Some(uri.into()),
                        mime_type: str_field("mimeType").map(String::from),
                        text: Some(content),
                        data_base64: None,
                        artifact_id: None,
                    }),
                    None => {
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(&format!("[{name}]({uri})"));
                    }
                }
            }
            Some("resource") => attachments.push(embedded(block).map_err(|e| bad(i, e.into()))?),
            Some("audio") => {
                return Err(bad(
                    i,
                    "audio is not supported (promptCapabilities.audio is false)".into(),
                ))
            }
            Some(other) => return Err(bad(i, format!("unsupported content block type {other:?}"))),
            None => return Err(bad(i, "a content block needs a `type`".into())),
        }
    }
    if text.is_empty() && attachments.is_empty() {
        return Err(ResponseError::invalid_params("`prompt` is empty"));
    }
    Ok(MessageContent { text, attachments })
}

/// An embedded `resource` block (its text, or its base64 blob) as an attachment.
fn embedded(block: &Value) -> Result<Attachment, &'static str> {
    let r = block
        .get("resource")
        .ok_or("a resource block needs `resource`")?;
    let uri = r
        .get("uri")
        .and_then(Value::as_str)
        .ok_or("`resource.uri` is required")?;
    let mime = r.get("mimeType").and_then(Value::as_str).map(String::from);
    let (kind, text, blob) = match (
        r.get("text").and_then(Value::as_str),
        r.get("blob").and_then(Value::as_str),
    ) {
        (Some(t), _) => ("text", Some(t.to_string()), None),
        (None, Some(b)) => ("blob", None, Some(b.to_string())),
        _ => return Err("`resource` needs `text` or `blob`"),
    };
    Ok(Attachment {
        kind: kind.into(),
        name: uri.rsplit('/').next().unwrap_or(uri).to_string(),
        uri: Some(uri.into()),
        mime_type: mime,
        text,
        data_base64: blob,
        artifact_id: None,
    })
}

/// `O_NONBLOCK` (the adapter-only build has no libc): a FIFO opens at once instead of
/// waiting for a writer.
#[cfg(target_os = "linux")]
const O_NONBLOCK: i32 = 0o4000;
#[cfg(not(target_os = "linux"))]
const O_NONBLOCK: i32 = 0x0004;

/// The text of a readable local file behind a `file://` URI: a regular file (checked on the
/// descriptor, so nothing swapped in after a look at the path gets through), opened without
/// blocking and read at most to the limit, whatever its size says.
fn read_file_link(uri: &str) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let path = uri.strip_prefix("file://")?;
    let path = percent_decode(path);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(Path::new(&path))
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > LINKED_FILE_LIMIT {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(LINKED_FILE_LIMIT + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes.len() as u64 > LINKED_FILE_LIMIT {
        return None;
    }
    String::from_utf8(bytes).ok()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A `file://` link to a FIFO (or anything that is not a regular file) is not read, and
    /// does not block: it stays a link in the text (issue 45's "regular files only").
    #[test]
    fn a_link_to_a_fifo_is_not_read_and_does_not_block() {
        let dir = std::env::temp_dir().join(format!("maka-prompt-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let uri = format!("file://{}", fifo.display());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(read_file_link(&uri)));
        let read = rx.recv_timeout(std::time::Duration::from_secs(5));
        assert_eq!(read, Ok(None), "answered at once, not read");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn maps_every_supported_block() {
        let dir = std::env::temp_dir().join(format!("maka-prompt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a b.txt");
        std::fs::write(&f, "linked text").unwrap();
        let uri = format!("file://{}", f.display().to_string().replace(' ', "%20"));
        let m = to_message(&mut [
            json!({"type": "text", "text": "Look at"}),
            json!({"type": "resource_link", "uri": uri, "name": "a b.txt"}),
            json!({"type": "resource_link", "uri": "https://example.com/x", "name": "x"}),
            json!({"type": "resource", "resource": {"uri": "file:///w/n.md", "text": "embedded"}}),
            json!({"type": "image", "data": "iVBO", "mimeType": "image/png"}),
        ])
        .unwrap();
        assert_eq!(m.text, "Look at\n[x](https://example.com/x)");
        assert_eq!(m.attachments[0].text.as_deref(), Some("linked text"));
        assert_eq!(m.attachments[1].text.as_deref(), Some("embedded"));
        assert_eq!(m.attachments[2].kind, "image");
        std::fs::remove_dir_all(dir).unwrap();
        for bad in [
            json!({"type": "audio", "data": "x", "mimeType": "audio/wav"}),
            json!({"type": "video"}),
            json!({"text": "no type"}),
            json!({"type": "text"}),
        ] {
            let e = to_message(&mut [bad.clone()]).unwrap_err();
            assert_eq!(e.code, -32602, "{bad}");
            assert!(e.message.contains("prompt[0]"), "{}", e.message);
        }
        assert!(to_message(&mut []).is_err());
    }
}
