//! An outgoing line and its [`Head`]: what a transport that routes messages (`maka-acp serve`)
//! needs of it — request, notification or response, its id, its session, and where entries
//! of `_meta` go — noted while the line is serialized, so that nothing reads the line again.
//! On stdio the head is ignored and the bytes are exactly what serde writes.

use super::message::{Message, RequestId};
use serde_json::{Map, Value};

/// One outgoing message: its JSON text (no newline) and its head.
#[derive(Clone, Debug)]
pub struct Line {
    pub text: String,
    pub head: Head,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Head {
    pub kind: Kind,
    /// `params.sessionId` of a request or notification.
    pub session: Option<String>,
    /// Where `_meta` entries go (`params._meta`, a success's `result._meta`, an error's
    /// `error.data._meta`).
    pub meta: MetaSlot,
    /// The request a `$/cancel_request` withdraws (its `params.requestId`).
    pub cancels: Option<RequestId>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Request(RequestId),
    Notification,
    /// `ok`: a result (not an error).
    Response {
        id: RequestId,
        ok: bool,
    },
}

/// Where `_meta` entries can be added to a line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MetaSlot {
    /// Nowhere: params, a result or an error's `data` that is not an object.
    None,
    /// The body object (no `_meta` in it) opens with the `{` at this byte; `empty`: it is `{}`.
    Add { at: usize, empty: bool },
    /// The body's first member is `_meta`, whose object opens at this byte.
    Merge { at: usize, empty: bool },
    /// The body has a `_meta` that is not its first member, or the message is an error
    /// (its `_meta` goes in `error.data`, ACP's free-form value, made an object if absent):
    /// adding means reading the line (errors are few).
    Reparse,
}

/// `"_meta":` as the first member of an object: the bytes before `_meta`'s own `{`.
const META_FIRST: &[u8] = br#"{"_meta":"#;

impl Line {
    /// The line with `entries` (`"key":value` pairs, comma-separated, without braces) added
    /// to its `_meta` — merged into one that is there, never a second `_meta` key. A line
    /// whose slot is [`MetaSlot::None`] comes back as it is.
    pub fn with_meta(&self, entries: &str) -> String {
        let text = &self.text;
        match self.head.meta {
            MetaSlot::None => text.clone(),
            MetaSlot::Add { at, empty } => {
                splice(text, at, &format!("\"_meta\":{{{entries}}}"), empty)
            }
            MetaSlot::Merge { at, empty } => splice(text, at, entries, empty),
            MetaSlot::Reparse => reparse(text, entries).unwrap_or_else(|| text.clone()),
        }
    }
}

/// `text` with `insert` right after the `{` at byte `at` (and a comma unless the object was
/// empty).
fn splice(text: &str, at: usize, insert: &str, empty: bool) -> String {
    if text.as_bytes().get(at) != Some(&b'{') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + insert.len() + 1);
    out.push_str(&text[..=at]);
    out.push_str(insert);
    if !empty {
        out.push(',');
    }
    out.push_str(&text[at + 1..]);
    out
}

/// The slow way, for a `_meta` not first or an error's: the line read, the entries merged,
/// written again.
fn reparse(text: &str, entries: &str) -> Option<String> {
    let mut message: Value = serde_json::from_str(text).ok()?;
    let add: Map<String, Value> = serde_json::from_str(&format!("{{{entries}}}")).ok()?;
    let body = if message.get("params").is_some() {
        message.get_mut("params")?
    } else if message.get("result").is_some() {
        message.get_mut("result")?
    } else {
        message
            .get_mut("error")?
            .as_object_mut()?
            .entry("data")
            .or_insert_with(|| Value::Object(Map::new()))
    };
    let meta = body
        .as_object_mut()?
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()?;
    meta.extend(add);
    serde_json::to_string(&message).ok()
}

/// Writes `body` at the end of `out`: the slot for its `_meta`.
fn push_body(out: &mut Vec<u8>, body: &Value) -> Result<MetaSlot, serde_json::Error> {
    let at = out.len();
    serde_json::to_writer(&mut *out, body)?;
    Ok(match body {
        Value::Object(m) => match m.get("_meta") {
            None => MetaSlot::Add {
                at,
                empty: m.is_empty(),
            },
            Some(Value::Object(meta)) => {
                if out[at..].starts_with(META_FIRST) {
                    MetaSlot::Merge {
                        at: at + META_FIRST.len(),
                        empty: meta.is_empty(),
                    }
                } else {
                    MetaSlot::Reparse
                }
            }
            // A `_meta` that is not an object is left as it is.
            Some(_) => MetaSlot::None,
        },
        _ => MetaSlot::None,
    })
}

/// The slot of a typed body already written at `out[at..]`.
fn typed_slot(out: &[u8], at: usize) -> MetaSlot {
    let body = &out[at..];
    if body.starts_with(META_FIRST) {
        let open = at + META_FIRST.len();
        return match out.get(open) {
            Some(b'{') => MetaSlot::Merge {
                at: open,
                empty: out.get(open + 1) == Some(&b'}'),
            },
            _ => MetaSlot::None,
        };
    }
    if body.first() != Some(&b'{') {
        return MetaSlot::None;
    }
    // A `_meta` somewhere (most likely nested, in an update): looked at only if asked for.
    if body.windows(7).any(|w| w == b"\"_meta\"") {
        return MetaSlot::Reparse;
    }
    MetaSlot::Add {
        at,
        empty: body.get(1) == Some(&b'}'),
    }
}

fn finish(out: Vec<u8>, head: Head) -> Line {
    let text = String::from_utf8(out)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    Line { text, head }
}

const UNSERIALIZABLE: &str = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Internal error: unserializable message"}}"#;

fn unserializable(e: serde_json::Error) -> Line {
    log::error!("failed to serialize an outgoing message: {e}");
    Line {
        text: UNSERIALIZABLE.into(),
        head: Head {
            kind: Kind::Response {
                id: RequestId::Null,
                ok: false,
            },
            session: None,
            meta: MetaSlot::None,
            cancels: None,
        },
    }
}

impl Message {
    /// The line (the same bytes as [`Message::to_line`]) and its head.
    pub fn to_routed_line(&self) -> Line {
        self.write_routed().unwrap_or_else(unserializable)
    }

    fn write_routed(&self) -> Result<Line, serde_json::Error> {
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(br#"{"jsonrpc":"2.0""#);
        let session = |params: &Value| {
            params
                .get("sessionId")
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let head = match self {
            Message::Request(r) => {
                out.extend_from_slice(br#","id":"#);
                serde_json::to_writer(&mut out, &r.id)?;
                out.extend_from_slice(br#","method":"#);
                serde_json::to_writer(&mut out, &r.method)?;
                let mut meta = MetaSlot::None;
                if !r.params.is_null() {
                    out.extend_from_slice(br#","params":"#);
                    meta = push_body(&mut out, &r.params)?;
                }
                Head {
                    kind: Kind::Request(r.id.clone()),
                    session: session(&r.params),
                    meta,
                    cancels: None,
                }
            }
            Message::Notification(n) => {
                out.extend_from_slice(br#","method":"#);
                serde_json::to_writer(&mut out, &n.method)?;
                let mut meta = MetaSlot::None;
                if !n.params.is_null() {
                    out.extend_from_slice(br#","params":"#);
                    meta = push_body(&mut out, &n.params)?;
                }
                Head {
                    kind: Kind::Notification,
                    session: session(&n.params),
                    meta,
                    cancels: (n.method == "$/cancel_request")
                        .then(|| n.params.get("requestId").and_then(RequestId::from_value))
                        .flatten(),
                }
            }
            Message::Response(r) => {
                out.extend_from_slice(br#","id":"#);
                serde_json::to_writer(&mut out, &r.id)?;
                let meta = match &r.result {
                    Ok(v) => {
                        out.extend_from_slice(br#","result":"#);
                        push_body(&mut out, v)?
                    }
                    Err(e) => {
                        out.extend_from_slice(br#","error":"#);
                        serde_json::to_writer(&mut out, &e.to_value())?;
                        match &e.data {
                            None | Some(Value::Object(_)) => MetaSlot::Reparse,
                            Some(_) => MetaSlot::None,
                        }
                    }
                };
                Head {
                    kind: Kind::Response {
                        id: r.id.clone(),
                        ok: r.result.is_ok(),
                    },
                    session: None,
                    meta,
                    cancels: None,
                }
            }
        };
        out.push(b'}');
        Ok(finish(out, head))
    }
}

/// A notification of `session` whose params are a typed value, serialized straight to its
/// line (no `Value` tree on the streaming path).
pub fn notification<P: serde::Serialize>(
    session: Option<&str>,
    method: &str,
    params: &P,
) -> Result<Line, serde_json::Error> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","method":"#);
    serde_json::to_writer(&mut out, method)?;
    out.extend_from_slice(br#","params":"#);
    let at = out.len();
    serde_json::to_writer(&mut out, params)?;
    let meta = typed_slot(&out, at);
    out.push(b'}');
    Ok(finish(
        out,
        Head {
            kind: Kind::Notification,
            session: session.map(str::to_string),
            meta,
            cancels: None,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::ResponseError;
    use serde_json::json;

    const CURSOR: &str = r#""acp/cursor":"7""#;

    /// Every kind of line gets the entries where the schema allows `_meta` (a request's or
    /// notification's params, a success's result, an error's `data`, made an object if
    /// absent), merged with a `_meta` already there (first or not), never a second key; an
    /// error whose `data` is not an object is left as it is. The bytes before are exactly
    /// serde's.
    #[test]
    fn meta_entries_go_where_the_schema_allows_them_merged_never_twice() {
        let rows: Vec<(Message, Value)> = vec![
            (
                Message::notification(
                    "session/update",
                    json!({"sessionId": "s", "update": {"_meta": {"x": 1}}}),
                ),
                json!({"_meta": {"acp/cursor": "7"}, "sessionId": "s", "update": {"_meta": {"x": 1}}}),
            ),
            (
                Message::request(
                    RequestId::Int(3),
                    "fs/read_text_file",
                    json!({"sessionId": "s"}),
                ),
                json!({"_meta": {"acp/cursor": "7"}, "sessionId": "s"}),
            ),
            (
                Message::response(
                    RequestId::Int(4),
                    Ok(json!({"_meta": {"quota": 1}, "stopReason": "end_turn"})),
                ),
                json!({"_meta": {"acp/cursor": "7", "quota": 1}, "stopReason": "end_turn"}),
            ),
            (
                Message::response(RequestId::Int(5), Ok(json!({"A": 1, "_meta": {}}))),
                json!({"A": 1, "_meta": {"acp/cursor": "7"}}),
            ),
            (
                Message::response(RequestId::Int(6), Ok(json!({}))),
                json!({"_meta": {"acp/cursor": "7"}}),
            ),
            (
                Message::response(RequestId::Int(7), Err(ResponseError::new(-32603, "no"))),
                json!({"_meta": {"acp/cursor": "7"}}),
            ),
            (
                Message::response(
                    RequestId::Int(8),
                    Err(ResponseError::new(-32603, "no").with_data(json!({"makaCode": "x"}))),
                ),
                json!({"_meta": {"acp/cursor": "7"}, "makaCode": "x"}),
            ),
            (
                Message::response(
                    RequestId::Int(9),
                    Err(ResponseError::new(-32603, "no").with_data(json!("text"))),
                ),
                Value::Null,
            ),
            (Message::notification("n", json!([1])), Value::Null),
        ];
        for (message, want) in rows {
            let line = message.to_routed_line();
            assert_eq!(line.text, message.to_line(), "the same bytes as before");
            let out: Value = serde_json::from_str(&line.with_meta(CURSOR)).unwrap();
            let body = out
                .get("params")
                .or(out.get("result"))
                .or(out.pointer("/error/data"))
                .cloned();
            if want.is_null() {
                assert_eq!(line.with_meta(CURSOR), line.text);
            } else {
                assert_eq!(body, Some(want), "{}", line.text);
            }
            assert!(line.with_meta(CURSOR).matches("\"_meta\":{\"acp").count() <= 1);
        }
    }

    #[test]
    fn a_typed_notification_knows_its_session_and_slot() {
        #[derive(serde::Serialize)]
        struct P {
            #[serde(rename = "sessionId")]
            session_id: &'static str,
            update: Value,
        }
        let line = notification(
            Some("s"),
            "session/update",
            &P {
                session_id: "s",
                update: json!({"sessionUpdate": "x"}),
            },
        )
        .unwrap();
        assert_eq!(line.head.session.as_deref(), Some("s"));
        assert!(matches!(line.head.meta, MetaSlot::Add { .. }));
        let out: Value = serde_json::from_str(&line.with_meta(CURSOR)).unwrap();
        assert_eq!(out["params"]["_meta"]["acp/cursor"], "7");
        assert_eq!(out["params"]["update"]["sessionUpdate"], "x");
        // A nested `_meta`: the slow way, the same result.
        let nested = notification(
            Some("s"),
            "session/update",
            &P {
                session_id: "s",
                update: json!({"_meta": {"m": 1}}),
            },
        )
        .unwrap();
        assert_eq!(nested.head.meta, MetaSlot::Reparse);
        let out: Value = serde_json::from_str(&nested.with_meta(CURSOR)).unwrap();
        assert_eq!(out["params"]["_meta"], json!({"acp/cursor": "7"}));
        assert_eq!(out["params"]["update"]["_meta"], json!({"m": 1}));
    }
}
