//! JSON-RPC 2.0 message types and their one-line wire form.
//!
//! Parsing is total: any byte string becomes either a [`Message`] or an [`Invalid`] that says
//! which error to answer and with which id. Nothing here panics on input.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};
use std::fmt;

/// JSON-RPC error codes used by ACP, with their numeric values.
pub mod code {
    /// The line is not valid JSON (or not UTF-8).
    pub const PARSE_ERROR: i32 = -32700;
    /// Valid JSON, but not a JSON-RPC request object.
    pub const INVALID_REQUEST: i32 = -32600;
    /// Unknown method, or a method whose capability is not advertised.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// Params fail to parse or validate.
    pub const INVALID_PARAMS: i32 = -32602;
    /// Implementation failure.
    pub const INTERNAL_ERROR: i32 = -32603;
    /// The request was cancelled (`$/cancel_request` or internal cancellation).
    pub const REQUEST_CANCELLED: i32 = -32800;
    /// ACP: authentication required.
    pub const AUTH_REQUIRED: i32 = -32000;
    /// ACP: resource (session, file, …) not found.
    pub const RESOURCE_NOT_FOUND: i32 = -32002;
}

/// A request id, echoed back with its exact JSON type (`1` and `"1"` are different ids).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RequestId {
    Int(i64),
    /// Integers above `i64::MAX` are legal JSON-RPC ids too.
    Uint(u64),
    Str(String),
    Null,
}

impl RequestId {
    /// Reads an id from JSON; fractional numbers, booleans, arrays and objects are not ids.
    pub fn from_value(value: &Value) -> Option<RequestId> {
        match value {
            Value::Null => Some(RequestId::Null),
            Value::String(s) => Some(RequestId::Str(s.clone())),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Some(RequestId::Int(i))
                } else {
                    n.as_u64().map(RequestId::Uint)
                }
            }
            _ => None,
        }
    }

    pub fn to_value(&self) -> Value {
        match self {
            RequestId::Int(i) => Value::from(*i),
            RequestId::Uint(u) => Value::from(*u),
            RequestId::Str(s) => Value::String(s.clone()),
            RequestId::Null => Value::Null,
        }
    }
}

impl fmt::Display for RequestId {
    /// Keeps `92` and `"92"` visibly different in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Int(i) => write!(f, "{i}"),
            RequestId::Uint(u) => write!(f, "{u}"),
            RequestId::Str(s) => write!(f, "{s:?}"),
            RequestId::Null => f.write_str("null"),
        }
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RequestId::Int(i) => s.serialize_i64(*i),
            RequestId::Uint(u) => s.serialize_u64(*u),
            RequestId::Str(v) => s.serialize_str(v),
            RequestId::Null => s.serialize_unit(),
        }
    }
}

/// The `error` member of a failed response.
#[derive(Clone, Debug, PartialEq)]
pub struct ResponseError {
    pub code: i32,
    pub message: String,
    pub data: Option<Value>,
}

impl ResponseError {
    pub fn new(code: i32, message: impl Into<String>) -> ResponseError {
        ResponseError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> ResponseError {
        self.data = Some(data);
        self
    }

    pub fn invalid_params(message: impl fmt::Display) -> ResponseError {
        ResponseError::new(code::INVALID_PARAMS, format!("Invalid params: {message}"))
    }

    pub fn method_not_found(method: &str) -> ResponseError {
        ResponseError::new(
            code::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )
    }

    pub fn internal(message: impl fmt::Display) -> ResponseError {
        ResponseError::new(code::INTERNAL_ERROR, format!("Internal error: {message}"))
    }

    pub fn cancelled() -> ResponseError {
        ResponseError::new(code::REQUEST_CANCELLED, "Request cancelled")
    }

    pub(crate) fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("code".into(), Value::from(self.code));
        m.insert("message".into(), Value::String(self.message.clone()));
        if let Some(d) = &self.data {
            m.insert("data".into(), d.clone());
        }
        Value::Object(m)
    }

    fn from_value(v: &Value) -> Option<ResponseError> {
        let o = v.as_object()?;
        let code = i32::try_from(o.get("code")?.as_i64()?).ok()?;
        let message = o.get("message")?.as_str()?.to_string();
        Some(ResponseError {
            code,
            message,
            data: o.get("data").cloned(),
        })
    }
}

impl fmt::Display for ResponseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub id: RequestId,
    pub method: String,
    /// `Value::Null` when the request had no params.
    pub params: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    pub method: String,
    pub params: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    pub id: RequestId,
    pub result: Result<Value, ResponseError>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    Request(Request),
    Notification(Notification),
    Response(Response),
}

impl Message {
    pub fn request(id: RequestId, method: &str, params: Value) -> Message {
        Message::Request(Request {
            id,
            method: method.to_string(),
            params,
        })
    }

    pub fn notification(method: &str, params: Value) -> Message {
        Message::Notification(Notification {
            method: method.to_string(),
            params,
        })
    }

    pub fn response(id: RequestId, result: Result<Value, ResponseError>) -> Message {
        Message::Response(Response { id, result })
    }

    /// The compact single-line JSON form, without the trailing newline.
    pub fn to_line(&self) -> String {
        // serde_json escapes control characters inside strings, so the output never
        // contains a raw newline. Serializing plain JSON values cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| {
            log::error!("failed to serialize an outgoing message: {e}");
            String::from(
                r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Internal error: unserializable message"}}"#,
            )
        })
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("jsonrpc", "2.0")?;
        match self {
            Message::Request(r) => {
                m.serialize_entry("id", &r.id)?;
                m.serialize_entry("method", &r.method)?;
                if !r.params.is_null() {
                    m.serialize_entry("params", &r.params)?;
                }
            }
            Message::Notification(n) => {
                m.serialize_entry("method", &n.method)?;
                if !n.params.is_null() {
                    m.serialize_entry("params", &n.params)?;
                }
            }
            Message::Response(r) => {
                m.serialize_entry("id", &r.id)?;
                match &r.result {
                    Ok(v) => m.serialize_entry("result", v)?,
                    Err(e) => m.serialize_entry("error", &e.to_value())?,
                }
            }
        }
        m.end()
    }
}

/// A line that is not a usable message: the error to answer, and the id to answer it with.
#[derive(Debug, PartialEq)]
pub struct Invalid {
    pub id: RequestId,
    pub error: ResponseError,
}

impl Invalid {
    fn new(id: RequestId, code: i32, message: impl Into<String>) -> Invalid {
        Invalid {
            id,
            error: ResponseError::new(code, message),
        }
    }
}

/// The id of a line that is not JSON serde reads (a lone surrogate `"\ud800"` is valid JSON
/// grammar that serde refuses), read as an oversized line's is: its sender can then match the
/// `-32700` to its request instead of waiting for an answer that names `null`.
pub(crate) fn request_id_at_start(line: &[u8]) -> RequestId {
    match super::oversized::read_head(line) {
        super::oversized::Head::Request(id) => id,
        _ => RequestId::Null,
    }
}

/// Parses one ndjson line (without its newline).
pub fn parse_line(line: &[u8]) -> Result<Message, Invalid> {
    let text = std::str::from_utf8(line).map_err(|e| {
        Invalid::new(
            request_id_at_start(line),
            code::PARSE_ERROR,
            format!("Parse error: invalid UTF-8 at byte {}", e.valid_up_to()),
        )
    })?;
    let value: Value = serde_json::from_str(text).map_err(|e| {
        Invalid::new(
            request_id_at_start(line),
            code::PARSE_ERROR,
            format!("Parse error: {e}"),
        )
    })?;
    parse_value(value)
}

fn parse_value(value: Value) -> Result<Message, Invalid> {
    let mut obj =
        match value {
            Value::Object(o) => o,
            Value::Array(_) => return Err(Invalid::new(
                RequestId::Null,
                code::INVALID_REQUEST,
                "Invalid request: batches are not supported in ACP v1; send one message per line",
            )),
            other => {
                return Err(Invalid::new(
                    RequestId::Null,
                    code::INVALID_REQUEST,
                    format!(
                        "Invalid request: expected a JSON object, got {}",
                        json_type(&other)
                    ),
                ))
            }
        };

    // The id, when it is usable, is echoed even in the error for the rest of the message.
    let id = match obj.get("id") {
        None => None,
        Some(v) => match RequestId::from_value(v) {
            Some(id) => Some(id),
            None => {
                return Err(Invalid::new(
                    RequestId::Null,
                    code::INVALID_REQUEST,
                    format!(
                        "Invalid request: `id` must be an integer, a string or null, got {}",
                        json_type(v)
                    ),
                ))
            }
        },
    };
    let reply_id = id.clone().unwrap_or(RequestId::Null);

    match obj.get("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => {}
        Some(other) => {
            return Err(Invalid::new(
                reply_id,
                code::INVALID_REQUEST,
                format!("Invalid request: `jsonrpc` must be \"2.0\", got {other}"),
            ))
        }
        None => {
            return Err(Invalid::new(
                reply_id,
                code::INVALID_REQUEST,
                "Invalid request: missing `jsonrpc: \"2.0\"`",
            ))
        }
    }

    match obj.remove("method") {
        Some(Value::String(method)) => {
            let params = match obj.remove("params") {
                None | Some(Value::Null) => Value::Null,
                Some(p @ (Value::Object(_) | Value::Array(_))) => p,
                Some(other) => {
                    return Err(Invalid::new(
                        reply_id,
                        code::INVALID_REQUEST,
                        format!(
                            "Invalid request: `params` must be an object, got {}",
                            json_type(&other)
                        ),
                    ))
                }
            };
            Ok(match id {
                Some(id) => Message::Request(Request { id, method, params }),
                None => Message::Notification(Notification { method, params }),
            })
        }
        Some(other) => Err(Invalid::new(
            reply_id,
            code::INVALID_REQUEST,
            format!(
                "Invalid request: `method` must be a string, got {}",
                json_type(&other)
            ),
        )),
        None => parse_response(obj, id, reply_id),
    }
}

fn parse_response(
    obj: Map<String, Value>,
    id: Option<RequestId>,
    reply_id: RequestId,
) -> Result<Message, Invalid> {
    let (Some(id), result, error) = (id, obj.get("result"), obj.get("error")) else {
        return Err(Invalid::new(
            reply_id,
            code::INVALID_REQUEST,
            "Invalid request: missing `method`",
        ));
    };
    let result = match (result, error) {
        (Some(r), None) => Ok(r.clone()),
        (None, Some(e)) => Err(ResponseError::from_value(e).ok_or_else(|| {
            Invalid::new(
                RequestId::Null,
                code::INVALID_REQUEST,
                "Invalid response: `error` must be an object with an integer `code` and a string `message`",
            )
        })?),
        _ => {
            return Err(Invalid::new(
                id,
                code::INVALID_REQUEST,
                "Invalid request: missing `method` (a response needs exactly one of `result` and `error`)",
            ))
        }
    };
    Ok(Message::Response(Response { id, result }))
}

pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(line: &str) -> Invalid {
        parse_line(line.as_bytes()).unwrap_err()
    }

    #[test]
    fn ids_keep_their_json_type() {
        for (raw, id) in [
            ("0", RequestId::Int(0)),
            ("-7", RequestId::Int(-7)),
            ("18446744073709551615", RequestId::Uint(u64::MAX)),
            ("\"0\"", RequestId::Str("0".into())),
            ("null", RequestId::Null),
        ] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{raw},"method":"m"}}"#);
            let Message::Request(r) = parse_line(line.as_bytes()).unwrap() else {
                panic!("not a request: {line}")
            };
            assert_eq!(r.id, id);
            let out = Message::response(r.id, Ok(json!({}))).to_line();
            assert_eq!(
                out,
                format!(r#"{{"jsonrpc":"2.0","id":{raw},"result":{{}}}}"#)
            );
        }
    }

    #[test]
    fn classifies_bad_lines() {
        assert_eq!(err("{").error.code, code::PARSE_ERROR);
        assert_eq!(
            parse_line(b"\xff\xfe").unwrap_err().error.code,
            code::PARSE_ERROR
        );
        assert_eq!(err("[]").error.code, code::INVALID_REQUEST);
        assert_eq!(err("42").error.code, code::INVALID_REQUEST);
        let e = err(r#"{"jsonrpc":"1.0","id":3,"method":"m"}"#);
        assert_eq!(
            (e.id, e.error.code),
            (RequestId::Int(3), code::INVALID_REQUEST)
        );
        let e = err(r#"{"jsonrpc":"2.0","id":"a"}"#);
        assert_eq!(
            (e.id, e.error.code),
            (RequestId::Str("a".into()), code::INVALID_REQUEST)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#).id,
            RequestId::Null
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#)
                .error
                .code,
            code::INVALID_REQUEST
        );
    }

    #[test]
    fn parses_responses() {
        let m = parse_line(br#"{"jsonrpc":"2.0","id":4,"error":{"code":-32800,"message":"x"}}"#)
            .unwrap();
        assert_eq!(
            m,
            Message::response(RequestId::Int(4), Err(ResponseError::new(-32800, "x")))
        );
        let m = parse_line(br#"{"jsonrpc":"2.0","id":4,"result":null}"#).unwrap();
        assert_eq!(m, Message::response(RequestId::Int(4), Ok(Value::Null)));
    }

    #[test]
    fn output_is_one_line() {
        let line = Message::notification("n", json!({"text": "a\nb\r\u{2028}"})).to_line();
        assert!(!line.contains('\n') && !line.contains('\r'));
    }
}
