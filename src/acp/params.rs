//! Typed reading of request params with errors that name the offending field
//! (`Invalid params: `clientCapabilities.fs.readTextFile` must be a boolean`).
//!
//! ACP params are parsed leniently (unknown fields are ignored, `null` equals absent) but a
//! field that is present with the wrong type is an error, never silently defaulted.

use crate::jsonrpc::message::json_type;
use crate::jsonrpc::ResponseError;
use serde_json::{Map, Value};
use std::sync::LazyLock;

static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

#[derive(Clone, Copy)]
pub struct Params<'a> {
    obj: &'a Map<String, Value>,
    /// Dotted path of this object inside the params, for error messages ("" at the top).
    path: &'a str,
}

pub type ParamResult<T> = Result<T, ResponseError>;

impl<'a> Params<'a> {
    /// The top-level params: an object, or absent/null (treated as `{}`).
    pub fn of(params: &'a Value) -> ParamResult<Params<'a>> {
        match params {
            Value::Object(obj) => Ok(Params { obj, path: "" }),
            Value::Null => Ok(Params {
                obj: &EMPTY,
                path: "",
            }),
            other => Err(ResponseError::invalid_params(format_args!(
                "params must be an object, got {}",
                json_type(other)
            ))),
        }
    }

    fn field_path(&self, field: &str) -> String {
        if self.path.is_empty() {
            field.to_string()
        } else {
            format!("{}.{field}", self.path)
        }
    }

    fn wrong_type(&self, field: &str, expected: &str, got: &Value) -> ResponseError {
        ResponseError::invalid_params(format_args!(
            "`{}` must be {expected}, got {}",
            self.field_path(field),
            json_type(got)
        ))
    }

    pub fn missing(&self, field: &str) -> ResponseError {
        ResponseError::invalid_params(format_args!("missing field `{}`", self.field_path(field)))
    }

    /// A value that is present and not null.
    pub fn get(&self, field: &str) -> Option<&'a Value> {
        self.obj.get(field).filter(|v| !v.is_null())
    }

    pub fn required_str(&self, field: &str) -> ParamResult<&'a str> {
        self.optional_str(field)?.ok_or_else(|| self.missing(field))
    }

    pub fn optional_str(&self, field: &str) -> ParamResult<Option<&'a str>> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.wrong_type(field, "a string", other)),
        }
    }

    pub fn optional_bool(&self, field: &str) -> ParamResult<Option<bool>> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.wrong_type(field, "a boolean", other)),
        }
    }

    pub fn required_u16(&self, field: &str) -> ParamResult<u16> {
        let v = self.get(field).ok_or_else(|| self.missing(field))?;
        v.as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .ok_or_else(|| self.wrong_type(field, "an integer from 0 to 65535", v))
    }

    /// The whole params object.
    pub fn object(&self) -> &'a serde_json::Map<String, Value> {
        self.obj
    }

    pub fn required_u64(&self, field: &str) -> ParamResult<u64> {
        let v = self.get(field).ok_or_else(|| self.missing(field))?;
        v.as_u64()
            .ok_or_else(|| self.wrong_type(field, "a non-negative integer", v))
    }

    /// A nested object; `path` must outlive it, so callers pass the dotted path in.
    pub fn optional_object(&self, field: &str, path: &'a str) -> ParamResult<Option<Params<'a>>> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Object(obj)) => Ok(Some(Params { obj, path })),
            Some(other) => Err(self.wrong_type(field, "an object", other)),
        }
    }

    pub fn required_array(&self, field: &str) -> ParamResult<&'a Vec<Value>> {
        self.optional_array(field)?
            .ok_or_else(|| self.missing(field))
    }

    pub fn optional_array(&self, field: &str) -> ParamResult<Option<&'a Vec<Value>>> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(other) => Err(self.wrong_type(field, "an array", other)),
        }
    }

    /// Whether a `{}`-style capability marker is present (`{}` = supported, absent/null = not).
    /// A capability marker (`{}`: supported). ACP reads a malformed one as not advertised
    /// (`x-deserialize-default-on-error`), so `true`, `false` or a string is not an error: only
    /// an object advertises it.
    pub fn marker(&self, field: &str) -> ParamResult<bool> {
        Ok(matches!(self.get(field), Some(Value::Object(_))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_the_field_path() {
        let v = json!({"protocolVersion": "1", "caps": {"fs": {"readTextFile": 3}}});
        let p = Params::of(&v).unwrap();
        let e = p.required_u16("protocolVersion").unwrap_err();
        assert!(
            e.message.contains("`protocolVersion` must be an integer"),
            "{}",
            e.message
        );
        let caps = p.optional_object("caps", "caps").unwrap().unwrap();
        let fs = caps.optional_object("fs", "caps.fs").unwrap().unwrap();
        let e = fs.optional_bool("readTextFile").unwrap_err();
        assert!(
            e.message
                .contains("`caps.fs.readTextFile` must be a boolean"),
            "{}",
            e.message
        );
        assert!(p
            .required_str("cwd")
            .unwrap_err()
            .message
            .contains("missing field `cwd`"));
        assert!(Params::of(&json!([1])).is_err());
        assert_eq!(
            Params::of(&Value::Null).unwrap().optional_str("x").unwrap(),
            None
        );
    }
}
