//! What the SDK reads silently differently from what the agent wrote. The schema crate the SDK
//! pins (1.17.0) drops unknown fields, and turns an optional field or list item it cannot read
//! into its default; such a loss fails no parse. So each message the agent sent is parsed with
//! the SDK's type for it, written back, and compared with the line as sent: every key (or list
//! item, or value) that did not survive is listed as `METHOD[ TAG]: PATH`.

use std::collections::{BTreeSet, HashMap};

use agent_client_protocol::v1::schema::{
    CloseSessionResponse, InitializeResponse, LoadSessionResponse, NewSessionResponse,
    PromptResponse, RequestPermissionRequest, SessionNotification, SetSessionConfigOptionResponse,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

/// How one protocol version's types read what the agent sent, by method: the params of a
/// request or notification from the agent, and the result answering one of the client's
/// requests. Each gives the message as the SDK writes it back, `None` for a method it does not
/// type here.
pub struct Reader {
    pub params: fn(&str, &Value) -> Option<Result<Value, String>>,
    pub result: fn(&str, &Value) -> Option<Result<Value, String>>,
}

/// ACP v1, as `v1::schema` reads it.
pub const V1: Reader = Reader {
    params: request_or_notification,
    result: response,
};

/// The losses, one line each, sorted; `sent` gives the methods of the client's request ids.
pub fn dropped(sent: &[String], received: &[String]) -> Vec<String> {
    dropped_as(&V1, sent, received)
}

/// The same with the types of `reader`'s protocol version.
pub fn dropped_as(reader: &Reader, sent: &[String], received: &[String]) -> Vec<String> {
    let methods = request_methods(sent);
    let mut out = BTreeSet::new();
    for line in received {
        let Ok(msg) = serde_json::from_str::<Value>(line) else {
            out.insert(format!("unreadable line: {line:.80}"));
            continue;
        };
        let (label, payload, typed) =
            match (msg.get("method").and_then(Value::as_str), msg.get("id")) {
                (Some(method), _) => {
                    let params = msg.get("params").cloned().unwrap_or(Value::Null);
                    (
                        label(method, &params),
                        params.clone(),
                        (reader.params)(method, &params),
                    )
                }
                (None, Some(id)) => {
                    let Some(method) = methods.get(&id.to_string()) else {
                        continue;
                    };
                    let result = msg.get("result").cloned().unwrap_or(Value::Null);
                    (
                        format!("{method} result"),
                        result.clone(),
                        (reader.result)(method, &result),
                    )
                }
                (None, None) => continue,
            };
        match typed {
            Some(Ok(back)) => diff(&label, "", &payload, &back, &mut out),
            Some(Err(e)) => {
                out.insert(format!("{label}: unreadable ({e})"));
            }
            None => {}
        }
    }
    out.into_iter().collect()
}

fn request_methods(sent: &[String]) -> HashMap<String, String> {
    sent.iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|m| {
            Some((
                m.get("id")?.to_string(),
                m.get("method")?.as_str()?.to_string(),
            ))
        })
        .collect()
}

fn label(method: &str, params: &Value) -> String {
    match params
        .pointer("/update/sessionUpdate")
        .and_then(Value::as_str)
    {
        Some(tag) => format!("{method} {tag}"),
        None => method.to_string(),
    }
}

pub fn round_trip<T: DeserializeOwned + Serialize>(v: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

fn request_or_notification(method: &str, params: &Value) -> Option<Result<Value, String>> {
    match method {
        "session/update" => Some(round_trip::<SessionNotification>(params)),
        "session/request_permission" => Some(round_trip::<RequestPermissionRequest>(params)),
        _ => None,
    }
}

fn response(method: &str, result: &Value) -> Option<Result<Value, String>> {
    match method {
        "initialize" => Some(round_trip::<InitializeResponse>(result)),
        "session/new" => Some(round_trip::<NewSessionResponse>(result)),
        "session/load" => Some(round_trip::<LoadSessionResponse>(result)),
        "session/prompt" => Some(round_trip::<PromptResponse>(result)),
        "session/set_config_option" => Some(round_trip::<SetSessionConfigOptionResponse>(result)),
        "session/close" => Some(round_trip::<CloseSessionResponse>(result)),
        _ => None,
    }
}

/// Whether a value the SDK leaves out when writing is the default it would read it as: an
/// empty list or object, `null`, and the defaults of `ToolCall` (`kind` other, `status`
/// pending), which the schema crate skips when serializing.
fn written_as_absent(key: &str, v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::String(s) => matches!((key, s.as_str()), ("kind", "other") | ("status", "pending")),
        _ => false,
    }
}

/// Keys only in `back` (defaults the SDK fills in) are not losses, nor defaults it leaves out.
fn diff(label: &str, path: &str, sent: &Value, back: &Value, out: &mut BTreeSet<String>) {
    match (sent, back) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    Some(w) => diff(label, &p, v, w, out),
                    None if written_as_absent(k, v) => {}
                    // A list all of whose items were dropped is left out: name the items.
                    None if v.is_array() => diff(label, &p, v, &Value::Array(Vec::new()), out),
                    None => {
                        out.insert(format!("{label}: {} dropped", &p[1..]));
                    }
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (v, w) in a.iter().zip(b) {
                diff(label, &format!("{path}[]"), v, w, out);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            // Which items went: the first `type` tags (or values) missing from what came back.
            let gone: Vec<String> = a
                .iter()
                .filter(|v| !b.contains(v))
                .map(|v| {
                    v.get("type")
                        .map_or_else(|| v.to_string(), |t| format!("type {t}"))
                })
                .collect();
            out.insert(format!(
                "{label}: {}[] items dropped: {}",
                path.trim_start_matches('.'),
                gone.join(", ")
            ));
        }
        (a, b) if a != b => {
            out.insert(format!(
                "{label}: {} read as {b} (sent {a})",
                path.trim_start_matches('.')
            ));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::dropped;

    fn update(u: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s","update":{u}}}}}"#
        )
    }

    /// One row a case: what the agent sends, what the comparison must report.
    #[test]
    fn losses_are_named_and_defaults_are_not() {
        let rows: &[(&str, &[&str])] = &[
            (
                r#"{"sessionUpdate":"tool_call","toolCallId":"c","title":"t","kind":"other","status":"pending","locations":[]}"#,
                &[],
            ),
            (
                r#"{"sessionUpdate":"tool_call","toolCallId":"c","title":"t","bogus":1}"#,
                &["session/update tool_call: update.bogus dropped"],
            ),
            (
                r#"{"sessionUpdate":"tool_call","toolCallId":"c","title":"t","content":[{"type":"future","x":1}]}"#,
                &["session/update tool_call: update.content[] items dropped: type \"future\""],
            ),
            (
                r#"{"sessionUpdate":"tool_call","toolCallId":"c","title":"t","status":"done"}"#,
                &["session/update tool_call: update.status dropped"],
            ),
            (
                r#"{"sessionUpdate":"agent_message_chonk","content":{"type":"text","text":"x"}}"#,
                &[
                    "session/update agent_message_chonk: unreadable (unknown variant `agent_message_chonk`, expected one of `user_message_chunk`, `agent_message_chunk`, `agent_thought_chunk`, `tool_call`, `tool_call_update`, `plan`, `plan_update`, `plan_removed`, `available_commands_update`, `current_mode_update`, `config_option_update`, `session_info_update`, `usage_update`, `notice`, `compaction_update`, `compaction_summary_chunk`, `subagent_update`, `session_message`, `session_message_chunk`)",
                ],
            ),
        ];
        for (sent, want) in rows {
            assert_eq!(
                dropped(&[], &[update(sent)]),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{sent}"
            );
        }
    }

    /// A `usage` without its required counts is read as none: the response's loss, by method.
    #[test]
    fn responses_are_read_as_their_request_methods() {
        let sent =
            [r#"{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{}}"#.to_string()];
        let got = [r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn","usage":{"totalTokens":1}}}"#.to_string()];
        assert_eq!(
            dropped(&sent, &got),
            ["session/prompt result: usage dropped"]
        );
    }
}
