//! The reference host's tools: what the model sees (specs), how each call is shown and gated
//! (title, kind, locations, permission review, paths touched), and how it runs.

pub mod diff;
pub mod fs;
pub mod glob;
pub mod shell;

use super::session::CancelToken;
use crate::host_api::wire::{Location, ToolResultContent};
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
    fn cancel(&self) -> &CancelToken;
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
    /// `completed`, `failed` or `cancelled`.
    pub status: &'static str,
    pub result: ToolResultContent,
    pub truncated: bool,
}

impl ToolOutcome {
    pub fn completed(text: String, truncated: bool) -> ToolOutcome {
        ToolOutcome {
            status: "completed",
            result: ToolResultContent::Text { text },
            truncated,
        }
    }
    pub fn failed(text: String) -> ToolOutcome {
        ToolOutcome {
            status: "failed",
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
    pub review: Option<&'static str>,
    /// Paths the call reads or writes, resolved: checked against the session's roots.
    pub touches: Vec<(PathBuf, &'static str)>,
}

pub fn text_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

fn path_arg(args: &Value) -> &str {
    text_arg(args, "path").unwrap_or(".")
}

pub fn plan(name: &str, args: &Value, cwd: &Path) -> Result<ToolPlan, String> {
    let p = |args: &Value| fs::resolve(cwd, path_arg(args));
    let shown = |path: &Path| fs::display(cwd, path);
    let loc = |path: &Path| {
        vec![Location {
            path: path.display().to_string(),
            line: None,
        }]
    };
    Ok(match name {
        "read_file" => {
            if text_arg(args, "path").is_none() {
                return Err("read_file needs `path`".into());
            }
            let path = p(args);
            let line = args.get("offset").and_then(Value::as_u64).map(|n| n as u32);
            ToolPlan {
                title: format!("Read {}", shown(&path)),
                activity_kind: "read",
                locations: vec![Location {
                    path: path.display().to_string(),
                    line,
                }],
                review: None,
                touches: vec![(path, "read")],
            }
        }
        "write_file" | "edit_file" => {
            if text_arg(args, "path").is_none() {
                return Err(format!("{name} needs `path`"));
            }
            let path = p(args);
            let verb = if name == "write_file" {
                "Write"
            } else {
                "Edit"
            };
            ToolPlan {
                title: format!("{verb} {}", shown(&path)),
                activity_kind: "edit",
                locations: loc(&path),
                review: Some(if name == "write_file" {
                    "write"
                } else {
                    "edit"
                }),
                touches: vec![(path, "write")],
            }
        }
        "list_directory" => {
            let path = p(args);
            ToolPlan {
                title: format!("List {}", shown(&path)),
                activity_kind: "read",
                locations: loc(&path),
                review: None,
                touches: vec![(path, "read")],
            }
        }
        "find_files" => {
            let path = p(args);
            let pattern = text_arg(args, "pattern").unwrap_or("*");
            ToolPlan {
                title: format!("Find {pattern}"),
                activity_kind: "search",
                locations: loc(&path),
                review: None,
                touches: vec![(path, "read")],
            }
        }
        "search_text" => {
            let path = p(args);
            let q = text_arg(args, "query").unwrap_or("");
            ToolPlan {
                title: format!("Search {q:?}"),
                activity_kind: "search",
                locations: loc(&path),
                review: None,
                touches: vec![(path, "read")],
            }
        }
        "run_command" => {
            let Some(command) = text_arg(args, "command").filter(|c| !c.trim().is_empty()) else {
                return Err("run_command needs `command`".into());
            };
            ToolPlan {
                title: command.to_string(),
                activity_kind: "command",
                locations: vec![],
                review: Some("command"),
                touches: vec![],
            }
        }
        "update_plan" => ToolPlan {
            title: "Update plan".into(),
            activity_kind: "tool",
            locations: vec![],
            review: None,
            touches: vec![],
        },
        "ask_user" => {
            let q = args
                .pointer("/questions/0/question")
                .and_then(Value::as_str)
                .unwrap_or("a question");
            ToolPlan {
                title: format!("Ask: {q}"),
                activity_kind: "tool",
                locations: vec![],
                review: None,
                touches: vec![],
            }
        }
        other => return Err(format!("there is no tool named {other:?}")),
    })
}

/// Runs a file or shell tool (`update_plan` and `ask_user` are handled by the turn itself).
pub fn execute(env: &mut dyn ToolEnv, name: &str, args: &Value) -> ToolOutcome {
    let cwd = env.cwd().to_path_buf();
    let path = fs::resolve(&cwd, path_arg(args));
    match name {
        "read_file" => fs::read_file(env, &path, args),
        "write_file" => fs::write_file(env, &path, args),
        "edit_file" => fs::edit_file(env, &path, args),
        "list_directory" => fs::list_directory(env, &path),
        "find_files" => fs::find_files(env, &path, args),
        "search_text" => fs::search_text(env, &path, args),
        "run_command" => {
            let command = text_arg(args, "command").unwrap_or_default();
            let timeout = args
                .get("timeout_ms")
                .and_then(Value::as_u64)
                .unwrap_or(shell::DEFAULT_TIMEOUT_MS)
                .clamp(1, shell::MAX_TIMEOUT_MS);
            shell::run_command(env, command, timeout)
        }
        other => ToolOutcome::failed(format!("there is no tool named {other:?}")),
    }
}

/// OpenAI function specs for every tool.
pub fn specs() -> Vec<Value> {
    let f = |name: &str, description: &str, parameters: Value| json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}});
    vec![
        f("read_file", "Read a text file. Paths are relative to the working directory unless absolute.",
          json!({"type": "object", "properties": {
              "path": {"type": "string"},
              "offset": {"type": "integer", "description": "first line to read (1-based)"},
              "limit": {"type": "integer", "description": "number of lines"}},
              "required": ["path"]})),
        f("write_file", "Create or overwrite a text file with the given content.",
          json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]})),
        f("edit_file", "Replace an exact piece of text in a file. `old_text` must occur exactly once unless replace_all is true.",
          json!({"type": "object", "properties": {
              "path": {"type": "string"}, "old_text": {"type": "string"}, "new_text": {"type": "string"},
              "replace_all": {"type": "boolean"}}, "required": ["path", "old_text", "new_text"]})),
        f("list_directory", "List the entries of a directory (directories end with /).",
          json!({"type": "object", "properties": {"path": {"type": "string"}}})),
        f("find_files", "Find files by glob pattern (e.g. **/*.rs; a pattern without / matches file names at any depth).",
          json!({"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}}, "required": ["pattern"]})),
        f("search_text", "Search files for literal text; returns path:line: text.",
          json!({"type": "object", "properties": {"query": {"type": "string"}, "path": {"type": "string"}, "case_sensitive": {"type": "boolean"}}, "required": ["query"]})),
        f("run_command", "Run a shell command (sh -c) in the working directory. Output is streamed; the command is killed after timeout_ms (default 120000).",
          json!({"type": "object", "properties": {"command": {"type": "string"}, "timeout_ms": {"type": "integer"}}, "required": ["command"]})),
        f("update_plan", "Show the user your plan as a list of steps with their status. Send the complete list each time.",
          json!({"type": "object", "properties": {"entries": {"type": "array", "items": {"type": "object", "properties": {
              "content": {"type": "string"},
              "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
              "priority": {"type": "string", "enum": ["high", "medium", "low"]}}, "required": ["content", "status"]}}},
              "required": ["entries"]})),
        f("ask_user", "Ask the user one to three questions, each with two or three options. Returns the chosen labels (null = skipped).",
          json!({"type": "object", "properties": {"questions": {"type": "array", "items": {"type": "object", "properties": {
              "question": {"type": "string"},
              "options": {"type": "array", "items": {"type": "object", "properties": {"label": {"type": "string"}, "description": {"type": "string"}}, "required": ["label"]}}},
              "required": ["question", "options"]}}}, "required": ["questions"]})),
    ]
}
