//! The reference host's tools: what the model sees (specs), how each call is shown and gated
//! (title, kind, locations, permission review, paths touched), and how it runs — one [`Tool`]
//! per tool, all listed in [`TOOLS`].

pub mod diff;
mod files;
pub mod fs;
pub mod glob;
mod search;
pub mod shell;
mod turn_tools;

use super::session::CancelToken;
use crate::host_api::wire::{Location, Review, ToolResultContent, ToolStatus};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Text kept inline in a tool result (frames and transcript); longer output keeps its tail.
pub const RESULT_TEXT_LIMIT: usize = 48 * 1024;

/// What a tool needs from the running turn.
pub trait ToolEnv {
    fn cwd(&self) -> &Path;
    /// Whether a tool may touch `path` (a resolved path): inside the session's folders, or
    /// approved through a `sandbox_boundary` interaction during this turn.
    fn may_touch(&self, path: &Path) -> bool;
    /// Whether `path` (a resolved path) is the host's private data, which this session may not
    /// touch at all (a principal's session: [`crate::host::sandbox::Confinement`]).
    fn hides(&self, _path: &Path) -> bool {
        false
    }
    /// What the session's processes are kept from; they are started through it.
    fn confinement(&self) -> crate::host::sandbox::Confinement {
        crate::host::sandbox::Confinement::default()
    }
    fn cancel(&self) -> &CancelToken;
    /// The running call's own token, when it can be cancelled alone (`turn.tool.cancel`): a
    /// tool that honours it stops as for its turn's cancel, and the turn goes on.
    fn call_cancel(&self) -> Option<&CancelToken> {
        None
    }
    /// Streams a chunk of command output (`tool_output_delta`).
    fn output(&mut self, stream: &str, chunk: &str);
    /// Runs `service` in the editor when the client registered it and `path` is inside the
    /// session's roots; `None` means "do it locally".
    fn client_call(
        &mut self,
        service: &str,
        path: &Path,
        input: Value,
    ) -> Option<Result<Value, String>>;
    /// Whether the client registered `service` (e.g. `terminal`).
    fn has_client_service(&self, service: &str) -> bool;
    /// One delegated call, waiting at most `timeout`. A `cleanup` call still runs after the
    /// turn was stopped (to kill and release what the editor holds).
    fn call_client(
        &mut self,
        service: &str,
        input: Value,
        timeout: std::time::Duration,
        cleanup: bool,
    ) -> Result<Value, CallError>;
    /// Keeps `data` as a session artifact (a command's whole output); its id, or `None` when
    /// it could not be stored (the tool result then says only what it has).
    fn store_artifact(&mut self, _name: &str, _data: &[u8]) -> Option<String> {
        None
    }
    /// A file tool wrote `path` (recorded per turn so a rewind can undo it).
    fn file_changed(
        &mut self,
        _path: &Path,
        _before: crate::host::changes::Before,
        _after: &str,
        _via_editor: bool,
    ) {
    }
}

#[derive(Debug)]
pub enum CallError {
    Cancelled,
    Timeout,
    /// The editor answered with an error (its message), or the service is not registered.
    Client(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Cancelled => f.write_str("cancelled"),
            CallError::Timeout => f.write_str("timed out"),
            CallError::Client(m) => f.write_str(m),
        }
    }
}

pub struct ToolOutcome {
    pub status: ToolStatus,
    pub result: ToolResultContent,
    pub truncated: bool,
}

impl ToolOutcome {
    pub fn completed(text: String, truncated: bool) -> ToolOutcome {
        ToolOutcome {
            status: ToolStatus::Completed,
            result: ToolResultContent::Text { text },
            truncated,
        }
    }
    pub fn failed(text: String) -> ToolOutcome {
        ToolOutcome {
            status: ToolStatus::Failed,
            result: ToolResultContent::Text { text },
            truncated: false,
        }
    }
}

/// How a call is shown and gated, decided before it runs.
pub struct ToolPlan {
    pub title: String,
    pub activity_kind: &'static str,
    pub locations: Vec<Location>,
    /// The permission review kind in `ask` mode; `None` for read-only tools.
    pub review: Option<Review>,
    /// Paths the call reads or writes, resolved: checked against the session's roots.
    pub touches: Vec<(PathBuf, &'static str)>,
}

/// A tool: how the model sees it, how a call is shown and gated, and how it runs. Adding a
/// tool is one new file with a type that implements this, listed in [`TOOLS`].
pub trait Tool: Sync {
    fn name(&self) -> &'static str;
    /// The description and JSON-Schema parameters of its OpenAI function spec.
    fn spec(&self) -> (&'static str, Value);
    /// How a call is shown and gated, decided before it runs; `Err` is told to the model.
    fn plan(&self, args: &Value, cwd: &Path) -> Result<ToolPlan, String>;
    fn run(&self, env: &mut dyn ToolEnv, args: &Value) -> ToolOutcome;
}

/// Every built-in tool, in the order the model sees them.
pub const TOOLS: &[&dyn Tool] = &[
    &files::ReadFile,
    &files::WriteFile,
    &files::EditFile,
    &search::ListDirectory,
    &search::FindFiles,
    &search::SearchText,
    &shell::RunCommand,
    &turn_tools::UpdatePlan,
    &turn_tools::AskUser,
    &turn_tools::Remember,
    &turn_tools::ReadArtifact,
    &turn_tools::GoalComplete,
];

pub fn find(name: &str) -> Option<&'static dyn Tool> {
    TOOLS.iter().copied().find(|t| t.name() == name)
}

pub fn text_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

fn path_arg(args: &Value) -> &str {
    text_arg(args, "path").unwrap_or(".")
}

pub fn plan(name: &str, args: &Value, cwd: &Path) -> Result<ToolPlan, String> {
    match find(name) {
        Some(tool) => tool.plan(args, cwd),
        None => Err(format!("there is no tool named {name:?}")),
    }
}

/// Whether built-in tool `name` runs a command (the one kind a client can cancel alone: it
/// waits on the call's own token as on its turn's).
pub fn runs_a_command(name: &str) -> bool {
    name == shell::RunCommand.name()
}

/// Runs a built-in tool (`update_plan`, `ask_user` and `remember` are handled by the turn
/// itself).
pub fn execute(env: &mut dyn ToolEnv, name: &str, args: &Value) -> ToolOutcome {
    match find(name) {
        Some(tool) => tool.run(env, args),
        None => ToolOutcome::failed(format!("there is no tool named {name:?}")),
    }
}

/// OpenAI function specs for every tool.
pub fn specs() -> Vec<Value> {
    TOOLS
        .iter()
        .map(|t| {
            let (description, parameters) = t.spec();
            json!({"type": "function", "function": {"name": t.name(), "description": description, "parameters": parameters}})
        })
        .collect()
}
