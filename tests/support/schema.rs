//! Strict validation of everything the agent writes against the newest ACP JSON schemas.
//!
//! ACP v1: `tests/schema/schema.json`, generated from the `agent-client-protocol-schema` 1.20.0
//! crate by `scripts/update-schema`; negotiated unstable features against
//! `schema.unstable.json`. ACP v2 (draft): `tests/schema/v2/schema.json` and
//! `schema.unstable.json`, copies of `../shared/acp/schema-v2-draft/` (the TypeScript SDK
//! 2.4.0's `schema/v2/`; `scripts/update-schema --check` compares them). A connection speaks
//! the version its `initialize` answer names ([`Acp`]).
//!
//! The schema is lenient about unknown properties, so every object-valued position is wrapped
//! as `{"allOf": [orig], "unevaluatedProperties": false}`; properties that tagged or flattened
//! sub-schemas contribute still count as evaluated, so valid messages pass while an extra key
//! at any depth fails. One validator per schema type, chosen by method.
//!
//! v2 is lenient about variants too: every open enum (`sessionUpdate`, tool call status,
//! content block, ...) ends in an `anyOf` branch titled `"other"` that takes any value but
//! the known ones, for custom and future variants (`ToolKind`'s is titled `"unknown"`). The
//! agent sends none, so those branches are dropped (34 in `schema.json`: 33 `"other"` and 1
//! `"unknown"`; 39 in `schema.unstable.json`): a misspelled or v1-only variant fails instead of
//! passing as a future one. (`ErrorCode`'s and `ErrorData`'s `"Other"` stay: any integer
//! code, any data, is valid JSON-RPC.)

use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The ACP version a connection negotiated in `initialize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acp {
    V1,
    V2,
}

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

const V2_SCHEMA: &str = include_str!("../schema/v2/schema.json");
/// v2's unstable schema: stable's plus providers, auth status, session fork / archive /
/// status / title / system prompt, MCP over ACP, proxies (its methods are checked against it,
/// as they are nowhere else) and the update kinds below.
const V2_UNSTABLE: &str = include_str!("../schema/v2/schema.unstable.json");
/// `session/update` kinds only v2's unstable schema has.
const V2_UNSTABLE_UPDATES: &[&str] = &[
    "plan_removed",
    "subagent_update",
    "session_message",
    "session_message_chunk",
];
/// How many open-enum fallback branches (titled `"other"` or `"unknown"`) each v2 file has;
/// `load` checks it drops exactly these, so a schema update that marks them differently is
/// noticed.
const V2_OTHER_BRANCHES: usize = 34;
const V2_UNSTABLE_OTHER_BRANCHES: usize = 39;
/// The titles of those branches.
const OPEN_VARIANT_TITLES: [&str; 2] = ["other", "unknown"];

struct Schema {
    defs: Value,
    /// (method, "request" | "response" | "notification") → `$defs` type name, for messages
    /// the agent writes.
    types: HashMap<(String, &'static str), String>,
    validators: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
}

fn schema() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| load(SCHEMA, None))
}

fn unstable() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| load(UNSTABLE, None))
}

fn v2() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| load(V2_SCHEMA, Some(V2_OTHER_BRANCHES)))
}

fn v2_unstable() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| load(V2_UNSTABLE, Some(V2_UNSTABLE_OTHER_BRANCHES)))
}

/// The schema for `method`'s lines.
fn schema_for(method: &str) -> &'static Schema {
    if UNSTABLE_METHODS.contains(&method) {
        unstable()
    } else {
        schema()
    }
}

/// `closed`: drop the open-enum fallback branches, which must be exactly this many.
fn load(text: &str, closed: Option<usize>) -> Schema {
    {
        let root: Value = serde_json::from_str(text).expect("vendored schema parses");
        let mut defs = root["$defs"].clone();
        if let Some(expected) = closed {
            let dropped = drop_open_variants(&mut defs);
            assert_eq!(
                dropped, expected,
                "the v2 schema's open-enum fallbacks (anyOf branches titled \"other\" or \"unknown\")"
            );
        }
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
        // An error's `data` is free-form (v2's `ErrorData` ends in an `"Other"` branch that is
        // any value): left unwrapped, or a data object of the agent's own would fail.
        let data = defs.pointer("/Error/properties/data").cloned();
        strictify_defs(&mut defs);
        if let (Some(data), Some(slot)) = (data, defs.pointer_mut("/Error/properties/data")) {
            *slot = data;
        }
        Schema {
            defs,
            types,
            validators: Mutex::new(HashMap::new()),
        }
    }
}

/// Removes every `anyOf` / `oneOf` branch titled `"other"` or `"unknown"` (the open-enum
/// fallback for custom and future variants) at any depth; returns how many.
fn drop_open_variants(s: &mut Value) -> usize {
    match s {
        Value::Object(o) => {
            let mut n = 0;
            for k in ["anyOf", "oneOf"] {
                if let Some(Value::Array(list)) = o.get_mut(k) {
                    let before = list.len();
                    list.retain(|b| {
                        !b.get("title")
                            .and_then(Value::as_str)
                            .is_some_and(|t| OPEN_VARIANT_TITLES.contains(&t))
                    });
                    n += before - list.len();
                }
            }
            n + o.values_mut().map(drop_open_variants).sum::<usize>()
        }
        Value::Array(a) => a.iter_mut().map(drop_open_variants).sum(),
        _ => 0,
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

/// Validates one line the agent wrote on an ACP v1 connection. `method_of` resolves the method
/// of a client request id (for typing responses); it returns None for ids the client never
/// sent.
pub fn validate_agent_line(
    line: &str,
    method_of: impl Fn(&Value) -> Option<String>,
) -> Result<Value, String> {
    validate_agent_line_as(Acp::V1, line, method_of)
}

/// Validates one line the agent wrote on a connection that negotiated `acp`.
pub fn validate_agent_line_as(
    acp: Acp,
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
            check_id(acp, id, false)?;
            if method.starts_with('_') {
                extension_negotiated(acp, method)?;
                return Ok(v);
            }
            let (s, ty) = typed(acp, method, "request", "")
                .ok_or_else(|| format!("the agent sent an unknown request method `{method}`"))?;
            check(s, ty, o.get("params").unwrap_or(&Value::Null))?;
        }
        (Some(m), None) => {
            keys_within(o, &["jsonrpc", "method", "params"])?;
            let method = m.as_str().ok_or("method is not a string")?;
            if method.starts_with('_') {
                extension_negotiated(acp, method)?;
                return Ok(v);
            }
            let params = o.get("params").unwrap_or(&Value::Null);
            let (s, ty) = typed(
                acp,
                method,
                "notification",
                update_tier(acp, method, params),
            )
            .ok_or_else(|| format!("the agent sent an unknown notification `{method}`"))?;
            check(s, ty, params)?;
        }
        (None, Some(id)) => match (o.get("result"), o.get("error")) {
            (Some(result), None) => {
                check_id(acp, id, false)?;
                keys_within(o, &["jsonrpc", "id", "result"])?;
                let method = method_of(id)
                    .ok_or_else(|| format!("a result for id {id}, which the client never sent"))?;
                check_result(acp, &method, result)?;
            }
            (None, Some(error)) => {
                check_id(acp, id, true)?;
                keys_within(o, &["jsonrpc", "id", "error"])?;
                match acp {
                    Acp::V1 => check(schema(), "Error", error)?,
                    Acp::V2 => check(v2(), "Error", error)?,
                }
            }
            _ => return Err("a response needs exactly one of result and error".into()),
        },
        (None, None) => return Err("neither a request, a notification nor a response".into()),
    }
    Ok(v)
}

/// `"unstable"` when a notification's params use something only the unstable schema has.
/// Our extension methods (`_maka/…`, `_session/…`) are negotiated on ACP v1 only (a v1
/// client's capabilities opt in to them); a v2 connection negotiates none, so one of them
/// on v2 is a v1 line that leaked to a v2 client. Other `_` methods are free on both (ACP's
/// extension rule: a client ignores what it does not know).
fn extension_negotiated(acp: Acp, method: &str) -> Result<(), String> {
    let ours = ["_maka/", "_session/"];
    if acp == Acp::V2 && ours.iter().any(|p| method.starts_with(p)) {
        return Err(format!(
            "the agent sent `{method}`, a v1 extension, on a v2 connection (v2 negotiates none)"
        ));
    }
    Ok(())
}

fn update_tier(acp: Acp, method: &str, params: &Value) -> &'static str {
    if method != "session/update" {
        return "";
    }
    let kind = params
        .pointer("/update/sessionUpdate")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let unstable = match acp {
        Acp::V1 => UNSTABLE_UPDATES.contains(&kind),
        // `usage` on an idle `state_update` is unstable too.
        Acp::V2 => {
            V2_UNSTABLE_UPDATES.contains(&kind)
                || (kind == "state_update" && params.pointer("/update/usage").is_some())
        }
    };
    if unstable {
        "unstable"
    } else {
        ""
    }
}

/// The schema and `$defs` type of `method`'s `kind` line ("request", "notification",
/// "response"); `tier` "unstable" forces the unstable schema.
fn typed(
    acp: Acp,
    method: &str,
    kind: &'static str,
    tier: &str,
) -> Option<(&'static Schema, &'static String)> {
    let key = (method.to_string(), kind);
    match acp {
        Acp::V1 => {
            let s = if tier == "unstable" {
                unstable()
            } else {
                schema_for(method)
            };
            s.types.get(&key).map(|t| (s, t))
        }
        // v2's unstable methods are the ones only its unstable schema defines.
        Acp::V2 => {
            let stable = (tier != "unstable")
                .then(|| v2().types.get(&key).map(|t| (v2(), t)))
                .flatten();
            stable.or_else(|| v2_unstable().types.get(&key).map(|t| (v2_unstable(), t)))
        }
    }
}

fn check_result(acp: Acp, method: &str, result: &Value) -> Result<(), String> {
    if method == "initialize" {
        return match acp {
            Acp::V1 => check_initialize(result),
            Acp::V2 => check_initialize_v2(result),
        };
    }
    if method == "stream/resume" {
        // The resumable-transport draft's, in neither ACP schema: its answer is an object
        // (`{}` and the cursor's `_meta`).
        result
            .as_object()
            .ok_or("stream/resume's result is no object")?;
        return Ok(());
    }
    if method.starts_with('_') {
        return Ok(());
    }
    if acp == Acp::V1 && method == "session/set_model" {
        // An earlier unstable ACP method, gone from today's schema: its answer was
        // `SetSessionModelResponse`, an object with only `_meta`.
        let keys = result
            .as_object()
            .ok_or("set_model's result is no object")?;
        if keys.keys().any(|k| k != "_meta") {
            return Err(format!("set_model's result has more than _meta: {result}"));
        }
        return Ok(());
    }
    // v1's `PromptResponse.usage` is unstable: only a client that opted in gets it.
    let tier = if acp == Acp::V1 && method == "session/prompt" && result.get("usage").is_some() {
        "unstable"
    } else {
        ""
    };
    let (s, ty) = typed(acp, method, "response", tier)
        .ok_or_else(|| format!("a result for `{method}`, which ACP does not define"))?;
    check(s, ty, result)
}

/// Validates `instance` as the `$defs` type `type_name` of `acp`'s stable schema, strictly (for
/// unit tests of single values).
pub fn validate_type(acp: Acp, type_name: &str, instance: &Value) -> Result<(), String> {
    match acp {
        Acp::V1 => check(schema(), type_name, instance),
        Acp::V2 => check(v2(), type_name, instance),
    }
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

/// v2's `initialize` result: valid against the unstable schema, and against the stable one
/// without the capabilities only the unstable one has (so nothing else unstable slips in).
fn check_initialize_v2(result: &Value) -> Result<(), String> {
    check(v2_unstable(), "InitializeResponse", result)?;
    let mut stable = result.clone();
    // The properties the two files' capability types differ by (AgentCapabilities,
    // AgentAuthCapabilities, SessionCapabilities, McpCapabilities).
    let unstable_keys: [(&str, &[&str]); 4] = [
        ("/capabilities", &["providers"]),
        ("/capabilities/auth", &["status"]),
        (
            "/capabilities/session",
            &["systemPrompt", "fork", "archive", "status", "title"],
        ),
        ("/capabilities/session/mcp", &["acp"]),
    ];
    for (at, keys) in unstable_keys {
        if let Some(o) = stable.pointer_mut(at).and_then(Value::as_object_mut) {
            for k in keys {
                o.remove(*k);
            }
        }
    }
    check(v2(), "InitializeResponse", &stable)
}

/// v1 allows any string, integer or null id; v2 string or integer, null only on an error
/// answer (to a request whose id could not be read).
fn check_id(acp: Acp, id: &Value, error: bool) -> Result<(), String> {
    match id {
        Value::String(_) => Ok(()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(()),
        Value::Null if acp == Acp::V1 || error => Ok(()),
        other => Err(format!("bad id {other}")),
    }
}
