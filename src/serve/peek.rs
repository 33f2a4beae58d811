//! What routing reads of an incoming message, read in one pass over its bytes without
//! building a tree of it: whether it is an object (or a batch), `jsonrpc`, `id`, `method`,
//! and `params.sessionId`. Everything else is skipped; the agent reads the message itself,
//! once.

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use std::fmt;

/// An incoming message, as far as routing is concerned.
pub enum Peek {
    Object(Fields),
    /// A JSON-RPC batch (refused: ACP v1 has none).
    Array,
    /// Valid JSON, but not an object or an array.
    Other,
}

#[derive(Default)]
pub struct Fields {
    /// `jsonrpc` is `"2.0"`.
    pub v2: bool,
    /// `id` as sent, when present (`Value::Null` for `"id": null`).
    pub id: Option<Value>,
    /// `method`, when it is a string.
    pub method: Option<String>,
    /// `params.sessionId`, when it is a string.
    pub session: Option<String>,
    /// `params.cursor` (`stream/resume`'s), a string or an integer, as a string.
    pub cursor: Option<String>,
    /// It has a `result` or an `error` (an answer).
    pub answer: bool,
}

impl Peek {
    /// `None`: not JSON.
    pub fn read(body: &[u8]) -> Option<Peek> {
        serde_json::from_slice(body).ok()
    }
}

impl<'de> Deserialize<'de> for Peek {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Peek, D::Error> {
        d.deserialize_any(PeekVisitor)
    }
}

struct PeekVisitor;

/// Accepts any scalar as [`Peek::Other`].
macro_rules! other {
    ($($name:ident: $ty:ty),*) => {
        $(fn $name<E: de::Error>(self, _: $ty) -> Result<Peek, E> { Ok(Peek::Other) })*
    };
}

impl<'de> Visitor<'de> for PeekVisitor {
    type Value = Peek;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    other!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64, visit_str: &str);

    fn visit_unit<E: de::Error>(self) -> Result<Peek, E> {
        Ok(Peek::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Peek, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Peek::Array)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Peek, A::Error> {
        let mut f = Fields::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Jsonrpc => f.v2 = map.next_value::<Text>()?.0.as_deref() == Some("2.0"),
                Key::Id => f.id = Some(map.next_value()?),
                Key::Method => f.method = map.next_value::<Text>()?.0,
                Key::Params => {
                    let p = map.next_value::<Params>()?;
                    (f.session, f.cursor) = (p.session, p.cursor);
                }
                Key::Answer => {
                    f.answer = true;
                    map.next_value::<IgnoredAny>()?;
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Peek::Object(f))
    }
}

enum Key {
    Jsonrpc,
    Id,
    Method,
    Params,
    Answer,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        let key = std::borrow::Cow::<str>::deserialize(d)?;
        Ok(match &*key {
            "jsonrpc" => Key::Jsonrpc,
            "id" => Key::Id,
            "method" => Key::Method,
            "params" => Key::Params,
            "result" | "error" => Key::Answer,
            _ => Key::Other,
        })
    }
}

/// A string, or `None` for any other value (skipped).
struct Text(Option<String>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text, D::Error> {
        d.deserialize_any(TextVisitor).map(Text)
    }
}

struct TextVisitor;

macro_rules! none {
    ($($name:ident: $ty:ty),*) => {
        $(fn $name<E: de::Error>(self, _: $ty) -> Result<Option<String>, E> { Ok(None) })*
    };
}

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    none!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64);

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<String>, E> {
        Ok(Some(v.to_string()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<String>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// `params`: its `sessionId` (a string) and `cursor` (a string or an integer) when it is an
/// object with them; anything else skipped.
#[derive(Default)]
struct Params {
    session: Option<String>,
    cursor: Option<String>,
}

impl<'de> Deserialize<'de> for Params {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Params, D::Error> {
        d.deserialize_any(ParamsVisitor)
    }
}

struct ParamsVisitor;

macro_rules! no_params {
    ($($name:ident: $ty:ty),*) => {
        $(fn $name<E: de::Error>(self, _: $ty) -> Result<Params, E> { Ok(Params::default()) })*
    };
}

impl<'de> Visitor<'de> for ParamsVisitor {
    type Value = Params;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    no_params!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64, visit_str: &str);

    fn visit_unit<E: de::Error>(self) -> Result<Params, E> {
        Ok(Params::default())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Params, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Params::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Params, A::Error> {
        let mut p = Params::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<str>>()? {
            match &*key {
                "sessionId" => p.session = map.next_value::<Text>()?.0,
                "cursor" => p.cursor = map.next_value::<Cursor>()?.0,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(p)
    }
}

/// A cursor: a string, or a non-negative integer (as its decimal string); else none.
struct Cursor(Option<String>);

impl<'de> Deserialize<'de> for Cursor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Cursor, D::Error> {
        let v = Value::deserialize(d)?;
        Ok(Cursor(match v {
            Value::String(s) => Some(s),
            Value::Number(n) => n.as_u64().map(|n| n.to_string()),
            _ => None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(text: &str) -> Fields {
        match Peek::read(text.as_bytes()) {
            Some(Peek::Object(f)) => f,
            _ => panic!("an object: {text}"),
        }
    }

    /// The peek reads what `Value` would, for routing: an absent id apart from a null one, a
    /// method or session that is not a string as none, escapes decoded, and any shape.
    #[test]
    fn the_peek_reads_what_routing_needs_and_skips_the_rest() {
        let f = fields(
            r#"{"jsonrpc":"2.0","id":null,"method":"session/prompt","params":{"prompt":[{"x":{"sessionId":"no"}}],"sessionId":"s\u0031"}}"#,
        );
        assert!(f.v2);
        assert_eq!(f.id, Some(Value::Null));
        assert_eq!(f.method.as_deref(), Some("session/prompt"));
        assert_eq!(f.session.as_deref(), Some("s1"));
        let f = fields(r#"{"jsonrpc":"1.0","method":7,"params":[1],"result":{"a":1}}"#);
        assert!(!f.v2 && f.id.is_none() && f.method.is_none() && f.session.is_none());
        let f = fields(r#"{"id":{"a":1},"params":{"sessionId":3}}"#);
        assert_eq!(f.id, Some(json!({"a": 1})));
        assert!(f.session.is_none());
        let f = fields(r#"{"method":"stream/resume","params":{"cursor":17}}"#);
        assert_eq!(f.cursor.as_deref(), Some("17"));
        assert!(matches!(Peek::read(b"[1,{}]"), Some(Peek::Array)));
        assert!(matches!(Peek::read(b"3"), Some(Peek::Other)));
        assert!(matches!(Peek::read(b"null"), Some(Peek::Other)));
        assert!(Peek::read(b"{").is_none());
        assert!(
            Peek::read(b"\"\\ud800\"").is_none()
                || matches!(Peek::read(b"\"\\ud800\""), Some(Peek::Other))
        );
    }
}
