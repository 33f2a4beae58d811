//! Model providers: which connections exist (from the environment and the config file), and
//! one streaming call per model step. A call runs on its own thread and reports through a
//! bounded channel, so the turn can drop it the moment the turn is stopped.
//!
//! Adding a provider is one new file: a type that implements [`Provider`] and a `connect`
//! function that reads its settings, listed in [`PROVIDERS`].

pub mod openai;
pub mod prices;
pub mod scripted;

use super::session::CancelToken;
use crate::config::ProviderSettings;
use crate::host_api::ops::{DefaultTarget, ModelCatalog, ModelConnection, ModelEntry};
use crate::host_api::wire::{ErrorCode, FailureClass, HostError, ModelTarget};
use crossbeam_channel::{bounded, Receiver, Sender};
use serde_json::Value;
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub id: String,
    pub label: String,
    pub thinking_levels: Vec<String>,
    pub context_window: u64,
}

/// A model provider: streams one model step as [`ModelEvent`]s into `tx` (on a thread of its
/// own), stopping when `cancel` fires or `tx`'s receiver is gone. Ends with `Finish` or `Error`.
pub trait Provider: Send + Sync {
    fn stream(&self, req: &ModelRequest, cancel: &CancelToken, tx: &Sender<ModelEvent>);
}

/// What a provider's `connect` makes of the settings: nothing (not configured), a connection,
/// or the one-sentence problem that keeps it from being used.
pub type Connect = fn(&ProviderSettings) -> Option<Result<Connection, String>>;

/// Every provider, in the order their connections are offered (the first is the default).
pub const PROVIDERS: &[Connect] = &[scripted::connect, openai::connect];

pub struct Connection {
    pub slug: String,
    pub label: String,
    pub provider: Arc<dyn Provider>,
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
    pub turn_prompt: Arc<str>,
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
        /// Input tokens the provider served from its cache.
        cached: u64,
    },
    /// The provider answered 429/5xx (or the connection failed) and the call is retried.
    Retry {
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
    /// Data arrived that produced no other event yet (tool-call arguments streaming): the
    /// provider is alive. At most about once a second.
    Progress,
    Finish(Finish),
    /// The call failed: `message` is one sentence for the person; `details` (status, body
    /// excerpt, endpoint) go to the log and the error's `data`.
    Error {
        class: FailureClass,
        message: String,
        details: Option<Value>,
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
    /// Per-model prices (re-read with the providers).
    pub prices: prices::Prices,
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
        // The config file is read once, for the providers and the prices.
        let file = crate::config::read_file();
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let settings = ProviderSettings::resolve(var, &file);
        Providers {
            prices: prices::Prices::load(&file),
            ..Self::from_settings(&settings)
        }
    }

    /// Providers from `settings` (no prices: those come with [`Providers::from_env`]).
    pub fn from_settings(settings: &ProviderSettings) -> Providers {
        let mut connections = Vec::new();
        let mut problems = Vec::new();
        for connect in PROVIDERS {
            match connect(settings) {
                Some(Ok(c)) => connections.push(c),
                Some(Err(problem)) => {
                    log::error!("{problem}");
                    problems.push(problem);
                }
                None => {}
            }
        }
        Providers {
            connections,
            problems,
            prices: prices::Prices::default(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.connections.is_empty()
    }

    /// `models.list`.
    pub fn list(&self) -> ModelCatalog {
        ModelCatalog {
            default_target: self.connections.first().map(|c| DefaultTarget {
                connection_slug: c.slug.clone(),
                model: c.models.first().map(|m| m.id.clone()),
            }),
            connections: self
                .connections
                .iter()
                .map(|c| ModelConnection {
                    slug: c.slug.clone(),
                    label: c.label.clone(),
                    ready: true,
                    models: c
                        .models
                        .iter()
                        .map(|m| ModelEntry {
                            id: m.id.clone(),
                            label: m.label.clone(),
                            thinking_levels: m.thinking_levels.clone(),
                            context_window: Some(m.context_window),
                        })
                        .collect(),
                })
                .collect(),
            problems: self.problems.clone(),
        }
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

/// Starts one model step on its own thread. Dropping the receiver abandons the call.
pub fn start_step(
    conn: &Connection,
    req: ModelRequest,
    cancel: CancelToken,
) -> Receiver<ModelEvent> {
    let (tx, rx) = bounded(1024);
    let provider = Arc::clone(&conn.provider);
    let spawned = std::thread::Builder::new()
        .name(format!("model-{}", conn.slug))
        .spawn(move || provider.stream(&req, &cancel, &tx));
    if let Err(e) = spawned {
        log::error!("cannot start a model thread: {e}");
    }
    rx
}

/// Sends an event; false when the turn dropped the call.
pub(crate) fn send(tx: &Sender<ModelEvent>, ev: ModelEvent) -> bool {
    tx.send(ev).is_ok()
}
