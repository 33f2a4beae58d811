//! What routing reads of an incoming message, read in one pass over its bytes without
//! building a tree of it: whether it is an object (or a batch), `jsonrpc`, `id`, `method`,
//! `params.sessionId`, and a digest of `params` (what tells a retry from another request with
//! its id; `params._meta` left out: a client library may stamp each attempt's own, a trace
//! parent or an attempt counter, on a retry). Everything else is skipped; the agent reads the
//! message itself, once.

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

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
    /// A digest of `params` (see [`Digest`]), when present.
    pub params: Option<u64>,
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
                    (f.session, f.cursor, f.params) = (p.session, p.cursor, Some(p.digest));
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
/// object with them, and its digest.
#[derive(Default)]
struct Params {
    session: Option<String>,
    cursor: Option<String>,
    digest: u64,
}

impl<'de> Deserialize<'de> for Params {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Params, D::Error> {
        d.deserialize_any(ParamsVisitor)
    }
}

struct ParamsVisitor;

/// Params that are not an object: only their digest.
macro_rules! no_params {
    ($($name:ident: $ty:ty),*) => {
        $(fn $name<E: de::Error>(self, v: $ty) -> Result<Params, E> {
            Ok(Params { digest: DigestVisitor.$name::<E>(v)?.0, ..Params::default() })
        })*
    };
}

impl<'de> Visitor<'de> for ParamsVisitor {
    type Value = Params;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    no_params!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64, visit_str: &str);

    fn visit_unit<E: de::Error>(self) -> Result<Params, E> {
        Ok(Params {
            digest: DigestVisitor.visit_unit::<E>()?.0,
            ..Params::default()
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Params, A::Error> {
        Ok(Params {
            digest: DigestVisitor.visit_seq(seq)?.0,
            ..Params::default()
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Params, A::Error> {
        let mut p = Params::default();
        let mut members = Members::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<str>>()? {
            let value = match &*key {
                "sessionId" => {
                    let v = map.next_value::<Value>()?;
                    p.session = v.as_str().map(str::to_string);
                    digest_value(&v)
                }
                "cursor" => {
                    let v = map.next_value::<Value>()?;
                    p.cursor = cursor_of(&v);
                    digest_value(&v)
                }
                // Per attempt, not per request: a retry may carry another.
                "_meta" => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                _ => map.next_value::<Digest>()?.0,
            };
            members.add(&key, value);
        }
        p.digest = members.finish();
        Ok(p)
    }
}

/// A cursor: a string, or a non-negative integer (as its decimal string); else none.
fn cursor_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => n.as_u64().map(|n| n.to_string()),
        _ => None,
    }
}

/// The digest of a JSON value, read in one pass without a tree: equal values (members in any
/// order, as a JSON object's are) have equal digests, and different ones — to anyone who does
/// not know this process's random key — have different ones. Integers are told from floats,
/// as `serde_json::Value` tells them.
pub struct Digest(pub u64);

/// This process's key for digests (random: a client cannot craft two requests with one
/// digest).
fn keys() -> &'static RandomState {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    KEYS.get_or_init(RandomState::new)
}

fn hash_of(tag: u8, bytes: &[u8]) -> u64 {
    let mut h = keys().build_hasher();
    h.write_u8(tag);
    h.write_usize(bytes.len());
    h.write(bytes);
    h.finish()
}

const NULL: u8 = 0;
const FALSE: u8 = 1;
const TRUE: u8 = 2;
const INT: u8 = 3;
const FLOAT: u8 = 4;
const STRING: u8 = 5;
const ARRAY: u8 = 6;
const OBJECT: u8 = 7;

/// An integer's digest: a non-negative one as `u64` whichever way it was read.
fn int_digest(n: i128) -> u64 {
    hash_of(INT, &n.to_le_bytes())
}

/// An object's members, combined whatever their order.
#[derive(Default)]
struct Members {
    sum: u64,
    count: u64,
}

impl Members {
    fn add(&mut self, key: &str, value: u64) {
        let mut h = keys().build_hasher();
        h.write_usize(key.len());
        h.write(key.as_bytes());
        h.write_u64(value);
        self.sum = self.sum.wrapping_add(h.finish());
        self.count += 1;
    }

    fn finish(&self) -> u64 {
        let mut h = keys().build_hasher();
        h.write_u8(OBJECT);
        h.write_u64(self.count);
        h.write_u64(self.sum);
        h.finish()
    }
}

/// An array's elements, in order.
struct Elements(std::collections::hash_map::DefaultHasher, u64);

impl Elements {
    fn new() -> Elements {
        let mut h = keys().build_hasher();
        h.write_u8(ARRAY);
        Elements(h, 0)
    }

    fn add(&mut self, value: u64) {
        self.0.write_u64(value);
        self.1 += 1;
    }

    fn finish(mut self) -> u64 {
        self.0.write_u64(self.1);
        self.0.finish()
    }
}

/// The digest of a value already read (the same as [`Digest`] reads from its text).
fn digest_value(v: &Value) -> u64 {
    match v {
        Value::Null => hash_of(NULL, &[]),
        Value::Bool(false) => hash_of(FALSE, &[]),
        Value::Bool(true) => hash_of(TRUE, &[]),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => int_digest(i128::from(u)),
            (None, Some(i), _) => int_digest(i128::from(i)),
            (None, None, Some(f)) => hash_of(FLOAT, &f.to_bits().to_le_bytes()),
            _ => hash_of(NULL, &[]),
        },
        Value::String(s) => hash_of(STRING, s.as_bytes()),
        Value::Array(items) => {
            let mut e = Elements::new();
            for item in items {
                e.add(digest_value(item));
            }
            e.finish()
        }
        Value::Object(map) => {
            let mut m = Members::default();
            for (k, v) in map {
                m.add(k, digest_value(v));
            }
            m.finish()
        }
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        d.deserialize_any(DigestVisitor)
    }
}

struct DigestVisitor;

impl<'de> Visitor<'de> for DigestVisitor {
    type Value = Digest;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Digest, E> {
        Ok(Digest(hash_of(NULL, &[])))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Digest, E> {
        Ok(Digest(hash_of(if v { TRUE } else { FALSE }, &[])))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Digest, E> {
        Ok(Digest(int_digest(i128::from(v))))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Digest, E> {
        Ok(Digest(int_digest(i128::from(v))))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Digest, E> {
        Ok(Digest(hash_of(FLOAT, &v.to_bits().to_le_bytes())))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Digest, E> {
        Ok(Digest(hash_of(STRING, v.as_bytes())))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Digest, A::Error> {
        let mut e = Elements::new();
        while let Some(Digest(d)) = seq.next_element()? {
            e.add(d);
        }
        Ok(Digest(e.finish()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Digest, A::Error> {
        let mut m = Members::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<str>>()? {
            let Digest(d) = map.next_value()?;
            m.add(&key, d);
        }
        Ok(Digest(m.finish()))
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

    /// The digest of `params` tells a retry from another request: the same params (members in
    /// any order, spacing, escapes) give the same digest, as the tree would; any other value
    /// (another text, an integer for a float, an element moved, `sessionId` changed) another.
    #[test]
    fn the_params_digest_is_the_values() {
        let digest = |text: &str| fields(text).params;
        let a = digest(
            r#"{"id":1,"params":{"sessionId":"s","prompt":[{"type":"text","text":"hi"}],"n":1}}"#,
        );
        assert!(a.is_some());
        let same = [
            r#"{"params":{"n":1,"prompt":[{"text":"hi","type":"text"}],"sessionId":"s"},"id":1}"#,
            r#"{"id":1,"params": { "sessionId" : "\u0073", "prompt":[{"type":"text","text":"h\u0069"}],"n":1 }}"#,
            // `params._meta` is left out (each attempt's trace parent, attempt counter).
            r#"{"id":1,"params":{"_meta":{"traceparent":"00-1","attempt":2},"sessionId":"s","prompt":[{"type":"text","text":"hi"}],"n":1}}"#,
        ];
        for text in same {
            assert_eq!(digest(text), a, "{text}");
        }
        let other = [
            r#"{"id":1,"params":{"sessionId":"s","prompt":[{"type":"text","text":"ho"}],"n":1}}"#,
            r#"{"id":1,"params":{"sessionId":"t","prompt":[{"type":"text","text":"hi"}],"n":1}}"#,
            r#"{"id":1,"params":{"sessionId":"s","prompt":[{"type":"text","text":"hi"}],"n":1.0}}"#,
            r#"{"id":1,"params":{"sessionId":"s","prompt":[{"type":"text","text":"hi"}]}}"#,
            r#"{"id":1,"params":{"sessionId":"s","prompt":[{"type":"text","text":"hi"},{}],"n":1}}"#,
            r#"{"id":1,"params":{"sessionId":"s","prompt":{"type":"text","text":"hi"},"n":1}}"#,
        ];
        for text in other {
            assert_ne!(digest(text), a, "{text}");
        }
        assert_eq!(digest(r#"{"id":1}"#), None);
        assert_ne!(digest(r#"{"params":[1,2]}"#), digest(r#"{"params":[2,1]}"#));
        assert_ne!(digest(r#"{"params":null}"#), None);
        // The tree's digest is the text's.
        let v: Value = serde_json::from_str(r#"{"x":[1,-2,2.5,"s",null,true,{"y":{}}]}"#).unwrap();
        assert_eq!(
            Some(digest_value(&v)),
            digest(r#"{"params":{"x":[1,-2,2.5,"s",null,true,{"y":{}}]}}"#)
        );
    }
}
