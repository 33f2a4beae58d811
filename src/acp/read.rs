//! The params of each method, typed, and their readers (one function per shape; the table in
//! `methods.rs` names which method uses which). Reading is lenient where ACP is (unknown
//! fields ignored, `null` = absent) and exact where it matters: a present field of the wrong
//! type is `-32602` naming the field ([`Params`]).

use super::params::{ParamResult, Params};
use crate::host_api::ops::SessionRef;
use crate::host_api::wire::{SystemPrompt, SystemPromptMode};
use crate::jsonrpc::ResponseError;
use serde_json::Value;
use std::path::Path;

pub struct NewSession {
    pub cwd: String,
    pub additional_directories: Vec<String>,
    /// ACP `McpServer` objects, passed to the host as they are.
    pub mcp_servers: Vec<Value>,
    /// ACP `systemPrompt`, stored with the session.
    pub system_prompt: Option<SystemPrompt>,
    /// Initial option values (`configOptions`, unstable), as `session/set_config_option` params.
    pub config_options: Vec<Value>,
}

pub struct ForkSession {
    pub session_id: String,
    pub cwd: String,
    pub additional_directories: Vec<String>,
    pub mcp_servers: Vec<Value>,
    pub system_prompt: Option<SystemPrompt>,
    pub config_options: Vec<Value>,
}

pub struct OpenSession {
    pub session_id: String,
    pub cwd: String,
    /// `session/load` (the conversation is replayed) rather than `session/resume`.
    pub replay: bool,
    /// `session/load` requires the list; `session/resume` may omit it (then what runs keeps
    /// running).
    pub mcp_servers: Option<Vec<Value>>,
    /// Replaces the stored one when given.
    pub system_prompt: Option<SystemPrompt>,
    pub config_options: Vec<Value>,
}

pub struct ListSessions {
    pub cwd: Option<String>,
    pub cursor: Option<String>,
}

pub struct Prompt {
    pub session_id: String,
    pub blocks: Vec<Value>,
}

/// `session/set_config_option` and `session/set_model` (earlier unstable ACP, still called by
/// some clients: the `model` option, answered as that method was). Validated against the
/// session's current options by the worker (they are not known here), so the params travel as
/// they came.
pub struct ConfigOption {
    pub session_id: String,
    pub params: Value,
    pub as_set_model: bool,
}

pub struct SetMode {
    pub session_id: String,
    pub mode_id: String,
}

pub fn nothing(_: &Params) -> ParamResult<()> {
    Ok(())
}

pub fn method_id(p: &Params) -> ParamResult<String> {
    Ok(p.required_str("methodId")?.into())
}

pub fn session_id(p: &Params) -> ParamResult<String> {
    Ok(p.required_str("sessionId")?.into())
}

pub fn session_ref(p: &Params) -> ParamResult<SessionRef> {
    Ok(SessionRef {
        session_id: session_id(p)?,
    })
}

pub fn new_session(p: &Params) -> ParamResult<NewSession> {
    Ok(NewSession {
        cwd: absolute(p, "cwd")?,
        additional_directories: directories(p)?,
        // Required by the schema; tolerated when absent (some clients omit an empty list).
        mcp_servers: p.optional_array("mcpServers")?.cloned().unwrap_or_default(),
        system_prompt: system_prompt(p)?,
        config_options: initial_options(p)?,
    })
}

/// `configOptions: [{configId, value, type?}]` (unstable): read here as far as their shape;
/// their values are checked against the session's options where it is created or opened.
fn initial_options(p: &Params) -> ParamResult<Vec<Value>> {
    let items = p
        .optional_array("configOptions")?
        .cloned()
        .unwrap_or_default();
    for (i, item) in items.iter().enumerate() {
        if !item.get("configId").is_some_and(Value::is_string) {
            return Err(ResponseError::invalid_params(format_args!(
                "`configOptions[{i}]` must be an object with a string `configId` and a `value`"
            )));
        }
    }
    Ok(items)
}

pub fn fork_session(p: &Params) -> ParamResult<ForkSession> {
    Ok(ForkSession {
        session_id: p.required_str("sessionId")?.into(),
        cwd: absolute(p, "cwd")?,
        additional_directories: directories(p)?,
        mcp_servers: p.optional_array("mcpServers")?.cloned().unwrap_or_default(),
        system_prompt: system_prompt(p)?,
        config_options: initial_options(p)?,
    })
}

/// `session/options` (unstable).
pub struct SessionOptions {
    pub cwd: String,
    pub session_id: Option<String>,
}

pub fn session_options(p: &Params) -> ParamResult<SessionOptions> {
    Ok(SessionOptions {
        cwd: absolute(p, "cwd")?,
        session_id: p.optional_str("sessionId")?.map(String::from),
    })
}

pub fn list_sessions(p: &Params) -> ParamResult<ListSessions> {
    let cwd = match p.optional_str("cwd")? {
        Some(c) if !Path::new(c).is_absolute() => {
            return Err(ResponseError::invalid_params(
                "`cwd` must be an absolute path",
            ))
        }
        other => other.map(String::from),
    };
    Ok(ListSessions {
        cwd,
        cursor: p.optional_str("cursor")?.map(String::from),
    })
}

pub fn config_option(p: &Params) -> ParamResult<ConfigOption> {
    Ok(ConfigOption {
        session_id: p.required_str("sessionId")?.into(),
        params: Value::Object(p.object().clone()),
        as_set_model: false,
    })
}

pub fn set_model(p: &Params) -> ParamResult<ConfigOption> {
    let session_id: String = p.required_str("sessionId")?.into();
    let value = p.required_str("modelId")?;
    Ok(ConfigOption {
        params: serde_json::json!({"sessionId": session_id, "configId": "model", "value": value}),
        session_id,
        as_set_model: true,
    })
}

pub fn set_mode(p: &Params) -> ParamResult<SetMode> {
    let mode_id = p.required_str("modeId")?.to_string();
    // Checked here: an unknown mode needs no session to be refused.
    super::config_options::mode_patch(&mode_id)?;
    Ok(SetMode {
        session_id: p.required_str("sessionId")?.into(),
        mode_id,
    })
}

pub fn prompt(p: &Params) -> ParamResult<Prompt> {
    Ok(Prompt {
        session_id: p.required_str("sessionId")?.into(),
        blocks: p.required_array("prompt")?.clone(),
    })
}

/// `session/load` (`replay`) and `session/resume`.
pub fn open_session(p: &Params, replay: bool) -> ParamResult<OpenSession> {
    let session_id = p.required_str("sessionId")?.to_string();
    let cwd = absolute(p, "cwd")?;
    directories(p)?;
    Ok(OpenSession {
        session_id,
        cwd,
        replay,
        mcp_servers: p.optional_array("mcpServers")?.cloned(),
        system_prompt: system_prompt(p)?,
        config_options: initial_options(p)?,
    })
}

/// The most text a `systemPrompt` may carry (the model's every request includes it).
const SYSTEM_PROMPT_BYTES: usize = 64 * 1024;

/// ACP `systemPrompt` (unstable): `{mode: append|override, content: [text blocks]}`. A mode or
/// a block this agent does not support, an empty or oversized prompt, is `-32602` — the
/// session is then not created, loaded or resumed, as ACP requires.
fn system_prompt(p: &Params) -> ParamResult<Option<SystemPrompt>> {
    let Some(sp) = p.optional_object("systemPrompt", "systemPrompt")? else {
        return Ok(None);
    };
    let mode = match sp.required_str("mode")? {
        "append" => SystemPromptMode::Append,
        "override" => SystemPromptMode::Override,
        other => {
            return Err(ResponseError::invalid_params(format_args!(
                "`systemPrompt.mode` {other:?} is not supported: use append or override"
            )))
        }
    };
    let blocks = sp.required_array("content")?;
    if blocks.is_empty() {
        return Err(ResponseError::invalid_params(
            "`systemPrompt.content` is empty: give at least one text block",
        ));
    }
    let mut text = String::new();
    for (i, b) in blocks.iter().enumerate() {
        match (
            b.get("type").and_then(Value::as_str),
            b.get("text").and_then(Value::as_str),
        ) {
            (Some("text"), Some(t)) => {
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(t);
            }
            _ => {
                return Err(ResponseError::invalid_params(format_args!(
                    "`systemPrompt.content[{i}]` is not a text block: only text is supported"
                )))
            }
        }
    }
    if text.trim().is_empty() {
        return Err(ResponseError::invalid_params(
            "`systemPrompt.content` has no text: give the instructions to use",
        ));
    }
    if text.len() > SYSTEM_PROMPT_BYTES {
        return Err(ResponseError::invalid_params(format_args!(
            "`systemPrompt` is {} bytes; at most {SYSTEM_PROMPT_BYTES} are accepted",
            text.len()
        )));
    }
    Ok(Some(SystemPrompt { mode, text }))
}

fn absolute(p: &Params, field: &str) -> ParamResult<String> {
    let v = p.required_str(field)?;
    if !Path::new(v).is_absolute() {
        return Err(ResponseError::invalid_params(format_args!(
            "`{field}` must be an absolute path, got {v:?}"
        )));
    }
    Ok(v.to_string())
}

fn directories(p: &Params) -> ParamResult<Vec<String>> {
    let Some(list) = p.optional_array("additionalDirectories")? else {
        return Ok(vec![]);
    };
    list.iter()
        .enumerate()
        .map(|(i, d)| match d.as_str() {
            Some(s) if Path::new(s).is_absolute() => Ok(s.to_string()),
            _ => Err(ResponseError::invalid_params(format_args!(
                "`additionalDirectories[{i}]` must be an absolute path"
            ))),
        })
        .collect()
}
