//! File tools: read, write, edit (exact replace with a diff), list, find (glob), search (text).
//! Reads and writes go through the editor (`fs.*` client calls) when the client offers that
//! and the path is inside the session's roots; otherwise the disk is used directly.

use super::{diff, glob, text_arg, ToolEnv, ToolOutcome, RESULT_TEXT_LIMIT};
use crate::host_api::wire::{FileDiff, ToolResultContent};
use serde_json::{json, Value};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// Largest file `read_file` returns whole; beyond it the model is told to use offset/limit.
const READ_LIMIT: usize = 256 * 1024;
/// Largest file `edit_file` and `search_text` touch.
const EDIT_LIMIT: u64 = 8 * 1024 * 1024;
const LIST_LIMIT: usize = 1000;
/// The longest unified diff kept in a result or a permission dialog.
const DIFF_LIMIT: usize = 256 * 1024;
const FIND_LIMIT: usize = 500;
const SEARCH_MATCH_LIMIT: usize = 200;
const WALK_LIMIT: usize = 100_000;

/// The path a tool would really touch for `p` (relative to `cwd`): absolute, `..`-free, with
/// every symbolic link resolved — the last component too, and links whose target does not
/// exist yet (a dangling `link -> /outside/file` is `/outside/file`, which is what a write
/// would create). Bounded: after 40 links the rest is kept as written (opening it fails).
pub fn resolve(cwd: &Path, p: &str) -> PathBuf {
    let joined = if Path::new(p).is_absolute() {
        PathBuf::from(p)
    } else {
        cwd.join(p)
    };
    let mut pending: std::collections::VecDeque<std::ffi::OsString> = parts(&joined).collect();
    let mut out = PathBuf::from("/");
    let mut hops = 0;
    while let Some(c) = pending.pop_front() {
        if c == ".." {
            out.pop();
            continue;
        }
        let candidate = out.join(&c);
        // read_link fails for anything that is not a link (a file, a folder, nothing).
        match fs::read_link(&candidate) {
            Ok(target) if hops < 40 => {
                hops += 1;
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
                for t in parts(&target).rev() {
                    pending.push_front(t);
                }
            }
            _ => out = candidate,
        }
    }
    out
}

/// The names and `..` of a path, in order (root and `.` dropped).
fn parts(p: &Path) -> impl DoubleEndedIterator<Item = std::ffi::OsString> + '_ {
    p.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n.to_os_string()),
        Component::ParentDir => Some("..".into()),
        _ => None,
    })
}

/// Opens `path` for a tool: never through a symbolic link in the last component (a link
/// swapped in after the boundary check fails to open), and the file actually opened is checked
/// against what the tool may touch (a folder swapped for a link is caught too). A write opens
/// an existing file without truncating it first, and creates a new one exclusively, so a
/// refused open changes nothing.
pub fn open_checked(env: &dyn ToolEnv, path: &Path, write: bool) -> Result<fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = fs::OpenOptions::new();
    options.custom_flags(libc::O_NOFOLLOW);
    let mut created = false;
    if write {
        options.write(true);
        if fs::symlink_metadata(path).is_err() {
            options.create_new(true);
            created = true;
        }
    } else {
        options.read(true);
    }
    let file = options.open(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => format!("{} is a symbolic link; it was not followed", path.display()),
        _ => e.to_string(),
    })?;
    let real = opened_path(&file).unwrap_or_else(|| path.to_path_buf());
    if !env.may_touch(&real) {
        drop(file);
        if created {
            let _ = fs::remove_file(path);
        }
        return Err(format!(
            "{} leads outside the session's folders (to {}); nothing was changed",
            path.display(),
            real.display()
        ));
    }
    Ok(file)
}

/// The path the kernel opened (`/proc/self/fd/N`), when it can say.
fn opened_path(file: &fs::File) -> Option<PathBuf> {
    use std::os::unix::io::AsRawFd;
    fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
}

/// Reads a whole file through [`open_checked`].
fn read_checked(env: &dyn ToolEnv, path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut f = open_checked(env, path, false)?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// Replaces a file's content through [`open_checked`].
fn write_checked(env: &dyn ToolEnv, path: &Path, content: &str) -> Result<(), String> {
    use std::io::Write;
    let mut f = open_checked(env, path, true)?;
    f.set_len(0).map_err(|e| e.to_string())?;
    f.write_all(content.as_bytes()).map_err(|e| e.to_string())
}

/// How a path is shown: relative to the cwd when inside it.
pub fn display(cwd: &Path, p: &Path) -> String {
    match p.strip_prefix(cwd) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
        Ok(_) => ".".into(),
        Err(_) => p.display().to_string(),
    }
}

fn failed(text: impl Into<String>) -> ToolOutcome {
    ToolOutcome::failed(text.into())
}

pub fn read_file(env: &mut dyn ToolEnv, path: &Path, args: &Value) -> ToolOutcome {
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
    let (text, already_sliced) = match delegated {
        Some(Ok(v)) => match v.get("content").and_then(Value::as_str) {
            Some(c) => (c.to_string(), true),
            None => return failed(format!("the editor returned no content for {shown}")),
        },
        Some(Err(e)) => return failed(format!("the editor could not read {shown}: {e}")),
        None => match fs::metadata(path) {
            Err(e) => return failed(format!("cannot read {shown}: {e}")),
            Ok(m) if m.is_dir() => {
                return failed(format!("{shown} is a directory; use list_directory"))
            }
            Ok(m) if m.len() > EDIT_LIMIT && offset.is_none() && limit.is_none() => {
                return failed(format!(
                    "{shown} is {} bytes; read it in parts with offset and limit (lines)",
                    m.len()
                ))
            }
            Ok(_) => match read_checked(env, path) {
                Ok(bytes) => (String::from_utf8_lossy(&bytes).into_owned(), false),
                Err(e) => return failed(format!("cannot read {shown}: {e}")),
            },
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
    ToolOutcome {
        status: "completed",
        result: ToolResultContent::Text { text },
        truncated,
    }
}

pub fn write_file(env: &mut dyn ToolEnv, path: &Path, args: &Value) -> ToolOutcome {
    let Some(content) = text_arg(args, "content") else {
        return failed("write_file needs `content` (a string)");
    };
    let shown = display(env.cwd(), path);
    let old = current_text(env, path);
    if let Err(e) = store(env, path, content) {
        return failed(format!("cannot write {shown}: {e}"));
    }
    let d = file_diff(env.cwd(), path, old.as_deref(), content);
    ToolOutcome {
        status: "completed",
        truncated: false,
        result: ToolResultContent::FileWrite {
            path: path.display().to_string(),
            bytes: content.len() as u64,
            diff: Some(d),
        },
    }
}

pub fn edit_file(env: &mut dyn ToolEnv, path: &Path, args: &Value) -> ToolOutcome {
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
    if let Err(e) = store(env, path, &updated) {
        return failed(format!("cannot write {shown}: {e}"));
    }
    let d = file_diff(env.cwd(), path, Some(&current), &updated);
    ToolOutcome {
        status: "completed",
        truncated: false,
        result: ToolResultContent::FileEdit { diff: d },
    }
}

/// Builds the diff record. Whole-file texts are kept when small; big files keep only the
/// unified diff's context (bounded frames).
pub fn file_diff(cwd: &Path, path: &Path, old: Option<&str>, new: &str) -> FileDiff {
    let mut unified = diff::unified(&display(cwd, path), old.unwrap_or(""), new);
    if unified.len() > DIFF_LIMIT {
        // Frames stay bounded: the diff is cut at a line, and says so.
        let total = unified.len();
        cut(&mut unified, DIFF_LIMIT);
        if let Some(i) = unified.rfind('\n') {
            unified.truncate(i + 1);
        }
        unified.push_str(&format!(
            "[diff truncated: {} more bytes]\n",
            total - unified.len()
        ));
    }
    let small = old.map_or(0, str::len) + new.len() <= RESULT_TEXT_LIMIT;
    FileDiff {
        path: path.display().to_string(),
        old_text: if small {
            old.map(String::from)
        } else {
            old.map(|_| String::from("[large file: see unifiedDiff]"))
        },
        new_text: if small {
            new.to_string()
        } else {
            String::from("[large file: see unifiedDiff]")
        },
        unified_diff: unified,
    }
}

/// What a write to `path` replaces: the editor's buffer when it offers files, else the disk;
/// `None` for a new file. A file that does not exist on disk is not asked of the editor
/// (clients show that failed read as an error to the person).
pub fn current_text(env: &mut dyn ToolEnv, path: &Path) -> Option<String> {
    if path.exists() {
        read_for_edit(env, path).ok()
    } else {
        None
    }
}

fn read_for_edit(env: &mut dyn ToolEnv, path: &Path) -> Result<String, String> {
    match env.client_call(
        "fs.read_text_file",
        path,
        json!({"path": path.display().to_string()}),
    ) {
        Some(Ok(v)) => v
            .get("content")
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| "the editor returned no content".to_string()),
        Some(Err(e)) => Err(e),
        None => {
            let meta = fs::metadata(path).map_err(|e| e.to_string())?;
            if meta.len() > EDIT_LIMIT {
                return Err(format!(
                    "the file is {} bytes, over the {EDIT_LIMIT}-byte edit limit",
                    meta.len()
                ));
            }
            let bytes = read_checked(env, path)?;
            String::from_utf8(bytes).map_err(|_| "the file is not UTF-8 text".to_string())
        }
    }
}

fn store(env: &mut dyn ToolEnv, path: &Path, content: &str) -> Result<(), String> {
    // A new file in a missing folder: the folder is made here (the path is inside the roots
    // when the editor is asked), so the editor's write does not fail on it.
    if let Some(parent) = path.parent().filter(|p| !p.exists()) {
        fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create the folder {}: {e}", parent.display()))?;
    }
    match env.client_call(
        "fs.write_text_file",
        path,
        json!({"path": path.display().to_string(), "content": content}),
    ) {
        Some(Ok(v)) if v.is_object() || v.is_null() => Ok(()),
        Some(Ok(other)) => Err(format!(
            "the editor did not confirm the write (it answered {})",
            crate::jsonrpc::message::json_type(&other)
        )),
        Some(Err(e)) => Err(e),
        None => write_checked(env, path, content),
    }
}

pub fn list_directory(env: &mut dyn ToolEnv, path: &Path) -> ToolOutcome {
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

/// Directories never worth walking.
fn skip_dir(name: &str) -> bool {
    matches!(
        name,
        ".git" | "target" | "node_modules" | ".hg" | ".svn" | "__pycache__" | ".venv"
    )
}

/// Files under `root` (relative paths, sorted), bounded by `WALK_LIMIT`.
fn walk(root: &Path, cancel: &dyn Fn() -> bool) -> (Vec<String>, bool) {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    let mut capped = false;
    while let Some(rel) = stack.pop() {
        if cancel() {
            break;
        }
        let Ok(entries) = fs::read_dir(root.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let child = rel.join(&name);
            match e.file_type() {
                Ok(t) if t.is_dir() && !skip_dir(&name) => stack.push(child),
                Ok(t) if t.is_dir() => {}
                Ok(t) if t.is_file() => {
                    out.push(child.to_string_lossy().into_owned());
                    if out.len() >= WALK_LIMIT {
                        capped = true;
                        stack.clear();
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out.sort();
    (out, capped)
}

pub fn find_files(env: &mut dyn ToolEnv, root: &Path, args: &Value) -> ToolOutcome {
    let Some(pattern) = text_arg(args, "pattern") else {
        return failed("find_files needs `pattern` (a glob such as **/*.rs)");
    };
    let cancel = env.cancel().clone();
    let (files, capped) = walk(root, &|| cancel.is_cancelled());
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

pub fn search_text(env: &mut dyn ToolEnv, root: &Path, args: &Value) -> ToolOutcome {
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
    let cancel = env.cancel().clone();
    let (files, _) = if root.is_file() {
        (vec![String::new()], false)
    } else {
        walk(root, &|| cancel.is_cancelled())
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
        if fs::metadata(&path)
            .map(|m| m.len() > EDIT_LIMIT)
            .unwrap_or(true)
        {
            continue;
        }
        let Ok(bytes) = fs::read(&path) else { continue };
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

/// `s` cut to at most `max` bytes at a word boundary, with `…` when anything was cut: a
/// message a person reads never ends mid-word.
pub fn cut_words(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut t = s.to_string();
    cut(&mut t, max.saturating_sub(3));
    if let Some(i) = t.rfind(char::is_whitespace).filter(|&i| i > max / 2) {
        t.truncate(i);
    }
    let trimmed = t.trim_end_matches(|c: char| c.is_whitespace() || c == ',' || c == ';');
    format!("{trimmed}…")
}

/// Truncates to at most `max` bytes on a char boundary.
pub fn cut(s: &mut String, max: usize) {
    if s.len() > max {
        let mut i = max;
        while !s.is_char_boundary(i) {
            i -= 1;
        }
        s.truncate(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_normalizes_and_follows_symlinks() {
        let dir = std::env::temp_dir().join(format!("maka-resolve-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("a")).unwrap();
        let canon = fs::canonicalize(&dir).unwrap();
        assert_eq!(resolve(&canon, "a/../b/new.txt"), canon.join("b/new.txt"));
        std::os::unix::fs::symlink("/etc", dir.join("a/link")).unwrap();
        assert_eq!(
            resolve(&canon, "a/link/hosts"),
            fs::canonicalize("/etc").unwrap().join("hosts")
        );
        assert_eq!(display(&canon, &canon.join("a/x")), "a/x");
        fs::remove_dir_all(&dir).unwrap();
    }
}
