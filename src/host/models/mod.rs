//! Model providers: which connections exist (from the environment and the config file), and
//! one streaming call per model step. A call runs on its own thread and reports through a
//! bounded channel, so the turn can drop it the moment the turn is stopped.

pub mod openai;
pub mod scripted;

use super::session::CancelToken;
use crate::host_api::wire::{ErrorCode, HostError, ModelTarget};
use crossbeam_channel::{bounded, Receiver, Sender};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub id: String,
    pub label: String,
    pub thinking_levels: Vec<String>,
    pub context_window: u64,
}

pub enum ConnectionKind {
    OpenAi(openai::OpenAiConfig),
    Scripted(Arc<scripted::Script>),
}

pub struct Connection {
    pub slug: String,
    pub label: String,
    pub kind: ConnectionKind,
    pub models: Vec<ModelInfo>,
}

/// What one model step sees.
pub struct ModelRequest {
    pub model: String,
    /// OpenAI chat-format messages.
    pub messages: Vec<Value>,
    /// OpenAI function tool specs.
    pub tools: Vec<Value>,
    pub thinking_level: Option<String>,
    /// The text of the prompt that opened the turn (the scripted provider picks its rule by it).
    pub turn_prompt: String,
    /// 0 for the first model call of the turn.
    pub step: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ModelEvent {
    Text(String),
    Thinking(String),
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    Usage {
        input: u64,
        output: u64,
    },
    /// The provider answered 429/5xx (or the connection failed) and the call is retried.
    Retry {
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
    Finish(Finish),
    Error {
        class: String,
        message: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Finish {
    Stop,
    ToolCalls,
    Length,
    Refusal,
}

pub struct Providers {
    pub connections: Vec<Connection>,
    /// Why a configured provider could not be used (shown when a prompt has no provider).
    pub problems: Vec<String>,
}

/// The message a prompt gets when no provider is configured: exactly what to set.
pub const NO_PROVIDER_HELP: &str = "No model provider is configured. Set MAKA_OPENAI_BASE_URL \
(any OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1 for Ollama), MAKA_MODEL and, if \
the endpoint needs one, MAKA_OPENAI_API_KEY (OPENAI_API_KEY and OPENAI_BASE_URL work too); or run \
`maka-acp login` to write them to the config file; or set MAKA_SCRIPT=<file> for the offline \
scripted provider.";

impl Providers {
    /// Reads `MAKA_SCRIPT`, the OpenAI-compatible variables and the config file.
    pub fn from_env() -> Providers {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let mut connections = Vec::new();
        let mut problems = Vec::new();
        if let Some(src) = var("MAKA_SCRIPT") {
            match scripted::Script::load(&src) {
                Ok(script) => connections.push(Connection {
                    slug: "script".into(),
                    label: "Scripted (offline)".into(),
                    models: vec![ModelInfo {
                        id: "script".into(),
                        label: "Scripted model".into(),
                        thinking_levels: script.thinking_levels.clone(),
                        context_window: 128_000,
                    }],
                    kind: ConnectionKind::Scripted(Arc::new(script)),
                }),
                Err(e) => {
                    log::error!("MAKA_SCRIPT: {e}");
                    problems.push(format!("MAKA_SCRIPT: {e}"));
                }
            }
        }
        let file = config_file_values();
        let base_url = var("MAKA_OPENAI_BASE_URL")
            .or_else(|| var("OPENAI_BASE_URL"))
            .or_else(|| {
                file.get("baseUrl")
                    .and_then(Value::as_str)
                    .map(String::from)
            });
        let api_key = var("MAKA_OPENAI_API_KEY")
            .or_else(|| var("OPENAI_API_KEY"))
            .or_else(|| file.get("apiKey").and_then(Value::as_str).map(String::from));
        let model = var("MAKA_MODEL")
            .or_else(|| file.get("model").and_then(Value::as_str).map(String::from));
        if base_url.is_some() || api_key.is_some() {
            let base_url = base_url.unwrap_or_else(|| "https://api.openai.com/v1".into());
            match model {
                Some(model) => {
                    let levels = var("MAKA_MODEL_THINKING_LEVELS")
                        .map(|v| {
                            v.split(',')
                                .map(|s| s.trim().to_string())
                                .filter(|s| !s.is_empty())
                                .collect()
                        })
                        .or_else(|| {
                            file.get("thinkingLevels")
                                .and_then(Value::as_array)
                                .map(|a| {
                                    a.iter()
                                        .filter_map(Value::as_str)
                                        .map(String::from)
                                        .collect()
                                })
                        })
                        .unwrap_or_default();
                    let context_window = var("MAKA_MODEL_CONTEXT_WINDOW")
                        .and_then(|v| v.parse().ok())
                        .or_else(|| file.get("contextWindow").and_then(Value::as_u64))
                        .unwrap_or(128_000);
                    connections.push(Connection {
                        slug: "openai".into(),
                        label: format!("OpenAI-compatible ({base_url})"),
                        models: vec![ModelInfo {
                            id: model.clone(),
                            label: model,
                            thinking_levels: levels,
                            context_window,
                        }],
                        kind: ConnectionKind::OpenAi(openai::OpenAiConfig { base_url, api_key }),
                    });
                }
                None => problems.push(
                    "an OpenAI-compatible endpoint is configured but no model: set MAKA_MODEL"
                        .into(),
                ),
            }
        }
        Providers {
            connections,
            problems,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.connections.is_empty()
    }

    /// `models.list`.
    pub fn list(&self) -> Value {
        let default = self.connections.first().map(
            |c| json!({"connectionSlug": c.slug, "model": c.models.first().map(|m| m.id.clone())}),
        );
        json!({
            "defaultTarget": default,
            "connections": self.connections.iter().map(|c| json!({
                "slug": c.slug,
                "label": c.label,
                "ready": true,
                "models": c.models.iter().map(|m| json!({
                    "id": m.id,
                    "label": m.label,
                    "thinkingLevels": m.thinking_levels,
                    "contextWindow": m.context_window,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "problems": self.problems,
        })
    }

    pub fn resolve(&self, target: &ModelTarget) -> Result<(&Connection, &ModelInfo), HostError> {
        let unavailable = || {
            let mut msg = NO_PROVIDER_HELP.to_string();
            for p in &self.problems {
                msg.push_str(" Problem: ");
                msg.push_str(p);
            }
            HostError::new(ErrorCode::CapabilityUnavailable, msg)
        };
        match target {
            ModelTarget::Default => {
                let c = self.connections.first().ok_or_else(unavailable)?;
                let m = c.models.first().ok_or_else(unavailable)?;
                Ok((c, m))
            }
            ModelTarget::Explicit {
                connection_slug,
                model,
            } => {
                let c = self
                    .connections
                    .iter()
                    .find(|c| &c.slug == connection_slug)
                    .ok_or_else(|| {
                        HostError::new(
                            ErrorCode::CapabilityUnavailable,
                            format!("model connection {connection_slug:?} is not configured"),
                        )
                    })?;
                let m = c.models.iter().find(|m| &m.id == model).ok_or_else(|| {
                    HostError::new(
                        ErrorCode::CapabilityUnavailable,
                        format!("connection {connection_slug:?} has no model {model:?}"),
                    )
                })?;
                Ok((c, m))
            }
        }
    }
}

/// `$MAKA_CONFIG`, else `$XDG_CONFIG_HOME/maka-acp/config.json`, else `~/.config/maka-acp/config.json`.
pub fn config_file_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MAKA_CONFIG").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("maka-acp").join("config.json"))
}

fn config_file_values() -> serde_json::Map<String, Value> {
    let Some(path) = config_file_path() else {
        return Default::default();
    };
    match std::fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(m)) => m,
            _ => {
                log::error!("{}: not a JSON object; ignoring it", path.display());
                Default::default()
            }
        },
        Err(_) => Default::default(),
    }
}

/// Starts one model step on its own thread. Dropping the receiver abandons the call.
pub fn start_step(
    conn: &Connection,
    req: ModelRequest,
    cancel: CancelToken,
) -> Receiver<ModelEvent> {
    let (tx, rx) = bounded(1024);
    let spawned = match &conn.kind {
        ConnectionKind::Scripted(script) => {
            let script = Arc::clone(script);
            std::thread::Builder::new()
                .name("model-scripted".into())
                .spawn(move || script.run(&req, &cancel, &tx))
        }
        ConnectionKind::OpenAi(cfg) => {
            let cfg = cfg.clone();
            std::thread::Builder::new()
                .name("model-openai".into())
                .spawn(move || openai::run(&cfg, &req, &cancel, &tx))
        }
    };
    if let Err(e) = spawned {
        log::error!("cannot start a model thread: {e}");
    }
    rx
}

/// Sends an event; false when the turn dropped the call.
pub(crate) fn send(tx: &Sender<ModelEvent>, ev: ModelEvent) -> bool {
    tx.send(ev).is_ok()
}
