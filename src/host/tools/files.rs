//! The file tools: `read_file`, `write_file`, `edit_file` (an exact replacement, shown as a
//! diff). Reads and writes go through the editor when it offers that (`fs.rs`).

use super::fs::*;
use super::{path_arg, text_arg, Tool, ToolEnv, ToolOutcome, ToolPlan};
use crate::host_api::wire::{Location, Review, ToolResultContent, ToolStatus};
use serde_json::{json, Value};
use std::path::Path;

fn location(path: &Path, line: Option<u32>) -> Vec<Location> {
    vec![Location {
        path: path.display().to_string(),
        line,
    }]
}

pub struct ReadFile;

impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        "read_file"
    }

    fn spec(&self) -> (&'static str, Value) {
        (
            "Read a text file. Paths are relative to the working directory unless absolute.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "offset": {"type": "integer", "description": "first line to read (1-based)"},
                "limit": {"type": "integer", "description": "number of lines"}},
                "required": ["path"]}),
        )
    }

    fn plan(&self, args: &Value, cwd: &Path) -> Result<ToolPlan, String> {
        if text_arg(args, "path").is_none() {
            return Err("read_file needs `path`".into());
        }
        let path = resolve(cwd, path_arg(args));
        let line = args.get("offset").and_then(Value::as_u64).map(|n| n as u32);
        Ok(ToolPlan {
            title: format!("Read {}", display(cwd, &path)),
            activity_kind: "read",
            locations: location(&path, line),
            review: None,
            touches: vec![(path, "read")],
        })
    }

    fn run(&self, env: &mut dyn ToolEnv, args: &Value) -> ToolOutcome {
        let path = resolve(env.cwd(), path_arg(args));
        read_file(env, &path, args)
    }
}

/// `write_file` and `edit_file` are shown and gated alike.
fn write_plan(name: &str, args: &Value, cwd: &Path) -> Result<ToolPlan, String> {
    if text_arg(args, "path").is_none() {
        return Err(format!("{name} needs `path`"));
    }
    let path = resolve(cwd, path_arg(args));
    let (verb, review) = if name == "write_file" {
        ("Write", Review::Write)
    } else {
        ("Edit", Review::Edit)
    };
    Ok(ToolPlan {
        title: format!("{verb} {}", display(cwd, &path)),
        activity_kind: "edit",
        locations: location(&path, None),
        review: Some(review),
        touches: vec![(path, "write")],
    })
}

pub struct WriteFile;

impl Tool for WriteFile {
    fn name(&self) -> &'static str {
        "write_file"
    }

    fn spec(&self) -> (&'static str, Value) {
        (
            "Create or overwrite a text file with the given content.",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}),
        )
    }

    fn plan(&self, args: &Value, cwd: &Path) -> Result<ToolPlan, String> {
        write_plan(self.name(), args, cwd)
    }

    fn run(&self, env: &mut dyn ToolEnv, args: &Value) -> ToolOutcome {
        let path = resolve(env.cwd(), path_arg(args));
        write_file(env, &path, args)
    }
}

pub struct EditFile;

impl Tool for EditFile {
    fn name(&self) -> &'static str {
        "edit_file"
    }

    fn spec(&self) -> (&'static str, Value) {
        (
            "Replace an exact piece of text in a file. `old_text` must occur exactly once unless replace_all is true.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"}, "old_text": {"type": "string"}, "new_text": {"type": "string"},
                "replace_all": {"type": "boolean"}}, "required": ["path", "old_text", "new_text"]}),
        )
    }

    fn plan(&self, args: &Value, cwd: &Path) -> Result<ToolPlan, String> {
        write_plan(self.name(), args, cwd)
    }

    fn run(&self, env: &mut dyn ToolEnv, args: &Value) -> ToolOutcome {
        let path = resolve(env.cwd(), path_arg(args));
        edit_file(env, &path, args)
    }
}

fn read_file(env: &mut dyn ToolEnv, path: &Path, args: &Value) -> ToolOutcome {
    let offset = args
        .get("offset")
        .and_then(Value::as_u64)
        .filter(|n| *n > 0);
    let limit = args.get("limit").and_then(Value::as_u64).filter(|n| *n > 0);
    let shown = display(env.cwd(), path);
    let delegated = env.client_call(
        "fs.read_text_file",
        path,
        json!({"path": path.display().to_string(), "line": offset, "limit": limit}),
    );
    let mut beyond_reach = false;
    let (text, already_sliced) = match delegated {
        Some(Ok(v)) => match v.get("content").and_then(Value::as_str) {
            Some(c) => (c.to_string(), true),
            None => return failed(format!("the editor returned no content for {shown}")),
        },
        Some(Err(e)) => return failed(format!("the editor could not read {shown}: {e}")),
        None if path.is_dir() => {
            return failed(format!("{shown} is a directory; use list_directory"))
        }
        // Bounded while reading, whatever the size says: whole up to EDIT_LIMIT, in parts up
        // to PART_READ_LIMIT. FIFOs, devices and sockets are refused by the opener.
        None if offset.is_none() && limit.is_none() => match read_checked(env, path, EDIT_LIMIT) {
            Ok((bytes, true)) => (String::from_utf8_lossy(&bytes).into_owned(), false),
            Ok((_, false)) => {
                return failed(format!(
                    "{shown} is over {EDIT_LIMIT} bytes; read it in parts with offset and limit (lines)"
                ))
            }
            Err(e) => return failed(format!("cannot read {shown}: {e}")),
        },
        None => match read_checked(env, path, PART_READ_LIMIT) {
            Ok((bytes, whole)) => {
                beyond_reach = !whole;
                (String::from_utf8_lossy(&bytes).into_owned(), false)
            }
            Err(e) => return failed(format!("cannot read {shown}: {e}")),
        },
    };
    let mut text = if already_sliced || (offset.is_none() && limit.is_none()) {
        text
    } else {
        let start = offset.unwrap_or(1) as usize - 1;
        let lines = text.split_inclusive('\n').skip(start);
        match limit {
            Some(n) => lines.take(n as usize).collect(),
            None => lines.collect(),
        }
    };
    let mut truncated = false;
    if text.len() > READ_LIMIT {
        cut(&mut text, READ_LIMIT);
        text.push_str("\n[truncated: use offset and limit to read the rest]");
        truncated = true;
    }
    if beyond_reach {
        text.push_str(&format!(
            "\n[only the first {PART_READ_LIMIT} bytes of this file can be read]"
        ));
        truncated = true;
    }
    ToolOutcome {
        status: ToolStatus::Completed,
        result: ToolResultContent::Text { text },
        truncated,
    }
}

fn write_file(env: &mut dyn ToolEnv, path: &Path, args: &Value) -> ToolOutcome {
    let Some(content) = text_arg(args, "content") else {
        return failed("write_file needs `content` (a string)");
    };
    let shown = display(env.cwd(), path);
    let old = current_text(env, path);
    if let Err(e) = store(env, path, old.as_deref(), content) {
        return failed(format!("cannot write {shown}: {e}"));
    }
    let d = file_diff(env.cwd(), path, old.as_deref(), content);
    ToolOutcome {
        status: ToolStatus::Completed,
        truncated: false,
        result: ToolResultContent::FileWrite {
            path: path.display().to_string(),
            bytes: content.len() as u64,
            diff: Some(d),
        },
    }
}

fn edit_file(env: &mut dyn ToolEnv, path: &Path, args: &Value) -> ToolOutcome {
    let (Some(old_text), Some(new_text)) = (text_arg(args, "old_text"), text_arg(args, "new_text"))
    else {
        return failed("edit_file needs `old_text` and `new_text` (strings)");
    };
    let replace_all = args
        .get("replace_all")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let shown = display(env.cwd(), path);
    if old_text.is_empty() {
        return failed("`old_text` is empty; use write_file to create a file");
    }
    let current = match read_for_edit(env, path) {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot read {shown}: {e}")),
    };
    let count = current.matches(old_text).count();
    let updated = match (count, replace_all) {
        (0, _) => {
            return failed(format!(
                "`old_text` does not occur in {shown}; read the file and copy the text exactly"
            ))
        }
        (1, _) | (_, true) => current.replace(old_text, new_text),
        (n, false) => {
            return failed(format!(
                "`old_text` occurs {n} times in {shown}; include more context or set replace_all"
            ))
        }
    };
    if let Err(e) = store(env, path, Some(&current), &updated) {
        return failed(format!("cannot write {shown}: {e}"));
    }
    let d = file_diff(env.cwd(), path, Some(&current), &updated);
    ToolOutcome {
        status: ToolStatus::Completed,
        truncated: false,
        result: ToolResultContent::FileEdit { diff: d },
    }
}
