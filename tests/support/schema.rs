//! Strict validation of everything the agent writes against the newest ACP v1 JSON schema
//! (`tests/schema/schema.json`, generated from the `agent-client-protocol-schema` 1.20.0 crate
//! by `scripts/update-schema`; negotiated unstable features against `schema.unstable.json`).
//!
//! The schema is lenient about unknown properties, so every object-valued position is wrapped
//! as `{"allOf": [orig], "unevaluatedProperties": false}`; properties that tagged or flattened
//! sub-schemas contribute still count as evaluated, so valid messages pass while an extra key
//! at any depth fails. One validator per schema type, chosen by method.

use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

const SCHEMA: &str = include_str!("../schema/schema.json");
/// The unstable schema: `session/fork`, `session/options` and the capabilities they are
/// advertised by.
const UNSTABLE: &str = include_str!("../schema/schema.unstable.json");
/// Methods whose lines are checked against the unstable schema.
const UNSTABLE_METHODS: &[&str] = &["session/fork", "session/options"];
/// `session/update` kinds only the unstable schema has (sent only to clients that negotiated
/// them): their lines are checked against it. (Plans by id and subagent sessions are stable
/// in 1.20.0.)
const UNSTABLE_UPDATES: &[&str] = &[];

struct Schema {
    defs: Value,
    /// (method, "request" | "response" | "notification") → `$defs` type name, for messages
    /// the agent writes.
    types: HashMap<(String, &'static str), String>,
    validators: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
}

fn schema() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| load(SCHEMA))
}

fn unstable() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| load(UNSTABLE))
}

/// The schema for `method`'s lines.
fn schema_for(method: &str) -> &'static Schema {
    if UNSTABLE_METHODS.contains(&method) {
        unstable()
    } else {
        schema()
    }
}

fn load(text: &str) -> Schema {
    {
        let root: Value = serde_json::from_str(text).expect("vendored schema parses");
        let mut defs = root["$defs"].clone();
        let mut types = HashMap::new();
        for (name, def) in defs.as_object().expect("$defs").iter() {
            let (Some(method), Some(side)) = (def["x-method"].as_str(), def["x-side"].as_str())
            else {
                continue;
            };
            // x-side says who *receives* it. The agent writes responses to agent methods,
            // and requests/notifications to the client, plus protocol-level notifications.
            let kind = if name.ends_with("Response") && side == "agent" {
                "response"
            } else if name.ends_with("Request") && side == "client" {
                "request"
            } else if name.ends_with("Notification") && (side == "client" || side == "protocol") {
                "notification"
            } else {
                continue;
            };
            types.insert((method.to_string(), kind), name.clone());
        }
        strictify_defs(&mut defs);
        Schema {
            defs,
            types,
            validators: Mutex::new(HashMap::new()),
        }
    }
}

fn is_open(s: &Value) -> bool {
    match s {
        Value::Bool(true) => true,
        Value::Object(o) => {
            o.get("additionalProperties") == Some(&Value::Bool(true))
                || ![
                    "type",
                    "$ref",
                    "allOf",
                    "anyOf",
                    "oneOf",
                    "properties",
                    "enum",
                    "const",
                ]
                .iter()
                .any(|k| o.contains_key(*k))
        }
        _ => true,
    }
}

fn wrap(s: &mut Value) {
    strictify(s);
    if !is_open(s) {
        let orig = s.take();
        *s = json!({"allOf": [orig], "unevaluatedProperties": false});
    }
}

fn strictify(s: &mut Value) {
    let Value::Object(o) = s else { return };
    if let Some(Value::Object(props)) = o.get_mut("properties") {
        for p in props.values_mut() {
            wrap(p);
        }
    }
    if let Some(items) = o.get_mut("items") {
        wrap(items);
    }
    if let Some(ap @ Value::Object(_)) = o.get_mut("additionalProperties") {
        wrap(ap);
    }
    for k in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(list)) = o.get_mut(k) {
            for item in list {
                strictify(item);
            }
        }
    }
}

fn strictify_defs(defs: &mut Value) {
    if let Value::Object(m) = defs {
        for d in m.values_mut() {
            strictify(d);
        }
    }
}

fn validator(s: &Schema, type_name: &str) -> Arc<jsonschema::Validator> {
    let mut cache = s.validators.lock().unwrap();
    cache
        .entry(type_name.to_string())
        .or_insert_with(|| {
            let doc = json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$defs": s.defs,
                "allOf": [{"$ref": format!("#/$defs/{type_name}")}],
                "unevaluatedProperties": false
            });
            Arc::new(
                jsonschema::draft202012::new(&doc)
                    .unwrap_or_else(|e| panic!("schema for {type_name} compiles: {e}")),
            )
        })
        .clone()
}

fn check(s: &Schema, type_name: &str, instance: &Value) -> Result<(), String> {
    let v = validator(s, type_name);
    let errors: Vec<String> = v
        .iter_errors(instance)
        .take(5)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("not a valid {type_name}: {}", errors.join("; ")))
    }
}

fn keys_within(o: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    match o.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!("unexpected top-level key `{k}`")),
        None => Ok(()),
    }
}

/// Validates one line the agent wrote. `method_of` resolves the method of a client request id
/// (for typing responses); it returns None for ids the client never sent.
pub fn validate_agent_line(
    line: &str,
    method_of: impl Fn(&Value) -> Option<String>,
) -> Result<Value, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON ({e})"))?;
    let o = v.as_object().ok_or("not a JSON object")?;
    if o.get("jsonrpc") != Some(&json!("2.0")) {
        return Err("missing jsonrpc: \"2.0\"".into());
    }
    match (o.get("method"), o.get("id")) {
        (Some(m), Some(id)) => {
            keys_within(o, &["jsonrpc", "id", "method", "params"])?;
            let method = m.as_str().ok_or("method is not a string")?;
            check_id(id)?;
            if method.starts_with('_') {
                return Ok(v);
            }
            let s = schema_for(method);
            let ty = s
                .types
                .get(&(method.to_string(), "request"))
                .ok_or_else(|| format!("the agent sent an unknown request method `{method}`"))?;
            check(s, ty, o.get("params").unwrap_or(&Value::Null))?;
        }
        (Some(m), None) => {
            keys_within(o, &["jsonrpc", "method", "params"])?;
            let method = m.as_str().ok_or("method is not a string")?;
            if method.starts_with('_') {
                return Ok(v);
            }
            let kind = v
                .pointer("/params/update/sessionUpdate")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let s = if method == "session/update" && UNSTABLE_UPDATES.contains(&kind) {
                unstable()
            } else {
                schema_for(method)
            };
            let ty = s
                .types
                .get(&(method.to_string(), "notification"))
                .ok_or_else(|| format!("the agent sent an unknown notification `{method}`"))?;
            check(s, ty, o.get("params").unwrap_or(&Value::Null))?;
        }
        (None, Some(id)) => {
            check_id(id)?;
            match (o.get("result"), o.get("error")) {
                (Some(result), None) => {
                    keys_within(o, &["jsonrpc", "id", "result"])?;
                    let method = method_of(id).ok_or_else(|| {
                        format!("a result for id {id}, which the client never sent")
                    })?;
                    if method == "initialize" {
                        check_initialize(result)?;
                    } else if method == "stream/resume" {
                        // The resumable-transport draft's, not in ACP v1's schema: its answer
                        // is an object (`{}` and the cursor's `_meta`).
                        result
                            .as_object()
                            .ok_or("stream/resume's result is no object")?;
                    } else if method == "session/set_model" {
                        // An earlier unstable ACP method, gone from today's schema: its answer
                        // was `SetSessionModelResponse`, an object with only `_meta`.
                        let keys = result
                            .as_object()
                            .ok_or("set_model's result is no object")?;
                        if keys.keys().any(|k| k != "_meta") {
                            return Err(format!(
                                "set_model's result has more than _meta: {result}"
                            ));
                        }
                    } else if !method.starts_with('_') {
                        // `PromptResponse.usage` is unstable: only a client that opted in gets it.
                        let s = if method == "session/prompt" && result.get("usage").is_some() {
                            unstable()
                        } else {
                            schema_for(&method)
                        };
                        let ty = s.types.get(&(method.clone(), "response")).ok_or_else(|| {
                            format!("a result for `{method}`, which ACP does not define")
                        })?;
                        check(s, ty, result)?;
                    }
                }
                (None, Some(error)) => {
                    keys_within(o, &["jsonrpc", "id", "error"])?;
                    check(schema(), "Error", error)?;
                }
                _ => return Err("a response needs exactly one of result and error".into()),
            }
        }
        (None, None) => return Err("neither a request, a notification nor a response".into()),
    }
    Ok(v)
}

/// `initialize`'s result advertises `sessionCapabilities.fork` and `.systemPrompt`, which only the unstable schema
/// has: valid against that one, and against the stable one without it (so nothing else
/// unstable slips in).
fn check_initialize(result: &Value) -> Result<(), String> {
    check(unstable(), "InitializeResponse", result)?;
    let mut stable = result.clone();
    if let Some(caps) = stable
        .pointer_mut("/agentCapabilities/sessionCapabilities")
        .and_then(Value::as_object_mut)
    {
        // Unstable in ACP 1.20.0 (`systemPrompt` is stable: checked against both).
        caps.remove("fork");
        caps.remove("options");
    }
    check(schema(), "InitializeResponse", &stable)
}

fn check_id(id: &Value) -> Result<(), String> {
    match id {
        Value::Null | Value::String(_) => Ok(()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(()),
        other => Err(format!("bad id {other}")),
    }
}
