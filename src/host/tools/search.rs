//! The search tools: `list_directory`, `find_files` (glob), `search_text` (literal text).

use super::fs::*;
use super::{glob, path_arg, text_arg, Tool, ToolEnv, ToolOutcome, ToolPlan};
use crate::host_api::wire::Location;
use serde_json::{json, Value};
use std::fs;
use std::path::Path;

/// The plan of a read-only tool over `path`.
fn read_plan(title: String, activity_kind: &'static str, args: &Value, cwd: &Path) -> ToolPlan {
    let path = resolve(cwd, path_arg(args));
    ToolPlan {
        title,
        activity_kind,
        locations: vec![Location {
            path: path.display().to_string(),
            line: None,
        }],
        review: None,
        touches: vec![(path, "read")],
    }
}

pub struct ListDirectory;

impl Tool for ListDirectory {
    fn name(&self) -> &'static str {
        "list_directory"
    }

    fn spec(&self) -> (&'static str, Value) {
        (
            "List the entries of a directory (directories end with /).",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        )
    }

    fn plan(&self, args: &Value, cwd: &Path) -> Result<ToolPlan, String> {
        let shown = display(cwd, &resolve(cwd, path_arg(args)));
        Ok(read_plan(format!("List {shown}"), "read", args, cwd))
    }

    fn run(&self, env: &mut dyn ToolEnv, args: &Value) -> ToolOutcome {
        let path = resolve(env.cwd(), path_arg(args));
        list_directory(env, &path)
    }
}

pub struct FindFiles;

impl Tool for FindFiles {
    fn name(&self) -> &'static str {
        "find_files"
    }

    fn spec(&self) -> (&'static str, Value) {
        (
            "Find files by glob pattern (e.g. **/*.rs; a pattern without / matches file names at any depth).",
            json!({"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}}, "required": ["pattern"]}),
        )
    }

    fn plan(&self, args: &Value, cwd: &Path) -> Result<ToolPlan, String> {
        let pattern = text_arg(args, "pattern").unwrap_or("*");
        Ok(read_plan(format!("Find {pattern}"), "search", args, cwd))
    }

    fn run(&self, env: &mut dyn ToolEnv, args: &Value) -> ToolOutcome {
        let path = resolve(env.cwd(), path_arg(args));
        find_files(env, &path, args)
    }
}

pub struct SearchText;

impl Tool for SearchText {
    fn name(&self) -> &'static str {
        "search_text"
    }

    fn spec(&self) -> (&'static str, Value) {
        (
            "Search files for literal text; returns path:line: text.",
            json!({"type": "object", "properties": {"query": {"type": "string"}, "path": {"type": "string"}, "case_sensitive": {"type": "boolean"}}, "required": ["query"]}),
        )
    }

    fn plan(&self, args: &Value, cwd: &Path) -> Result<ToolPlan, String> {
        let q = text_arg(args, "query").unwrap_or("");
        Ok(read_plan(format!("Search {q:?}"), "search", args, cwd))
    }

    fn run(&self, env: &mut dyn ToolEnv, args: &Value) -> ToolOutcome {
        let path = resolve(env.cwd(), path_arg(args));
        search_text(env, &path, args)
    }
}

fn list_directory(env: &mut dyn ToolEnv, path: &Path) -> ToolOutcome {
    if env.hides(path) {
        return failed(crate::host::sandbox::Confinement::refusal(path));
    }
    let shown = display(env.cwd(), path);
    let entries = match fs::read_dir(path) {
        Ok(e) => e,
        Err(e) => return failed(format!("cannot list {shown}: {e}")),
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| {
            let mut n = e.file_name().to_string_lossy().into_owned();
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                n.push('/');
            }
            n
        })
        .collect();
    names.sort();
    let total = names.len();
    names.truncate(LIST_LIMIT);
    let mut text = names.join("\n");
    if total > LIST_LIMIT {
        text.push_str(&format!(
            "\n[{} more entries not shown]",
            total - LIST_LIMIT
        ));
    }
    if total == 0 {
        text = format!("{shown} is empty");
    }
    ToolOutcome::completed(text, total > LIST_LIMIT)
}

fn find_files(env: &mut dyn ToolEnv, root: &Path, args: &Value) -> ToolOutcome {
    let Some(pattern) = text_arg(args, "pattern") else {
        return failed("find_files needs `pattern` (a glob such as **/*.rs)");
    };
    if env.hides(root) {
        return failed(crate::host::sandbox::Confinement::refusal(root));
    }
    let cancel = env.cancel().clone();
    let (files, capped) = walk(root, &|| cancel.is_cancelled(), &|p| env.hides(p));
    let hits: Vec<&String> = files.iter().filter(|f| glob::matches(pattern, f)).collect();
    let total = hits.len();
    let mut text = hits
        .iter()
        .take(FIND_LIMIT)
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    if total == 0 {
        text = format!("no files match {pattern}");
    } else if total > FIND_LIMIT {
        text.push_str(&format!(
            "\n[{} more matches not shown]",
            total - FIND_LIMIT
        ));
    }
    if capped {
        text.push_str(&format!("\n[stopped after {WALK_LIMIT} files]"));
    }
    ToolOutcome::completed(text, total > FIND_LIMIT || capped)
}

fn search_text(env: &mut dyn ToolEnv, root: &Path, args: &Value) -> ToolOutcome {
    let Some(query) = text_arg(args, "query").filter(|q| !q.is_empty()) else {
        return failed("search_text needs `query` (literal text)");
    };
    let case_sensitive = args
        .get("case_sensitive")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let needle = if case_sensitive {
        query.to_string()
    } else {
        query.to_lowercase()
    };
    if env.hides(root) {
        return failed(crate::host::sandbox::Confinement::refusal(root));
    }
    let cancel = env.cancel().clone();
    let (files, _) = if root.is_file() {
        (vec![String::new()], false)
    } else {
        walk(root, &|| cancel.is_cancelled(), &|p| env.hides(p))
    };
    let mut hits = Vec::new();
    'files: for rel in &files {
        let path = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(rel)
        };
        if cancel.is_cancelled() {
            break;
        }
        // The tools' one opener: regular files only (a FIFO or device swapped in is skipped,
        // never waited on), bounded while reading.
        let Ok((bytes, true)) = read_checked(env, &path, EDIT_LIMIT) else {
            continue;
        };
        if bytes.iter().take(8000).any(|&b| b == 0) {
            continue; // binary
        }
        let text = String::from_utf8_lossy(&bytes);
        for (n, line) in text.lines().enumerate() {
            let found = if case_sensitive {
                line.contains(&needle)
            } else {
                line.to_lowercase().contains(&needle)
            };
            if found {
                let mut l = line.trim().to_string();
                cut(&mut l, 200);
                hits.push(format!("{}:{}: {l}", display(env.cwd(), &path), n + 1));
                if hits.len() >= SEARCH_MATCH_LIMIT {
                    break 'files;
                }
            }
        }
    }
    let capped = hits.len() >= SEARCH_MATCH_LIMIT;
    let text = if hits.is_empty() {
        format!("no matches for {query:?}")
    } else {
        let mut t = hits.join("\n");
        if capped {
            t.push_str(&format!("\n[stopped at {SEARCH_MATCH_LIMIT} matches]"));
        }
        t
    };
    ToolOutcome::completed(text, capped)
}
