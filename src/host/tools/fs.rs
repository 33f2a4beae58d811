//! What the file tools share: path resolution (every link followed), opening without following
//! links, reading and writing through the editor when it offers that (and the path is inside
//! the session's roots) or the disk otherwise, diffs, directory walks, and cutting text.

use super::{diff, ToolEnv, ToolOutcome, RESULT_TEXT_LIMIT};
use crate::host_api::wire::FileDiff;
use serde_json::{json, Value};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// Largest file `read_file` returns whole; beyond it the model is told to use offset/limit.
pub(super) const READ_LIMIT: usize = 256 * 1024;
/// Largest file `edit_file` and `search_text` touch.
pub(super) const EDIT_LIMIT: u64 = 8 * 1024 * 1024;
pub(super) const LIST_LIMIT: usize = 1000;
/// The longest unified diff kept in a result or a permission dialog.
pub(super) const DIFF_LIMIT: usize = 256 * 1024;
pub(super) const FIND_LIMIT: usize = 500;
pub(super) const SEARCH_MATCH_LIMIT: usize = 200;
pub(super) const WALK_LIMIT: usize = 100_000;

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
pub(super) fn parts(p: &Path) -> impl DoubleEndedIterator<Item = std::ffi::OsString> + '_ {
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

/// Reads a small file the workspace controls and the host itself consumes (an instruction
/// file, an agent declaration): only when it resolves inside one of `roots` (links followed,
/// as [`resolve`] does: `AGENTS.md -> docs/AGENTS.md` is fine, `AGENTS.md -> ~/.ssh/id_rsa`
/// is not), opened without following a link swapped in meanwhile and without blocking (a FIFO
/// named `AGENTS.md` must not hang a prompt), a regular file whose opened path is checked again,
/// at most `max` bytes, and text (no NUL byte). `Ok(None)`: there is no such file. `Err`: why
/// it was skipped, for the log.
pub fn read_host_input(
    path: &Path,
    roots: &[PathBuf],
    max: u64,
) -> Result<Option<Vec<u8>>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let real = resolve(Path::new("/"), &path.to_string_lossy());
    let roots: Vec<PathBuf> = roots
        .iter()
        .map(|r| fs::canonicalize(r).unwrap_or_else(|_| r.clone()))
        .collect();
    let inside = |p: &Path| roots.iter().any(|r| p.starts_with(r));
    if !inside(&real) {
        if fs::symlink_metadata(path).is_err() {
            return Ok(None);
        }
        return Err(format!(
            "it leads outside the session's folders (to {})",
            real.display()
        ));
    }
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&real)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("it cannot be opened ({e})")),
    };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    match opened_path(&file) {
        Some(opened) if !inside(&opened) => {
            return Err(format!(
                "it leads outside the session's folders (to {})",
                opened.display()
            ))
        }
        _ => {}
    }
    let mut buf = Vec::new();
    file.take(max)
        .read_to_end(&mut buf)
        .map_err(|e| format!("it cannot be read ({e})"))?;
    if buf.contains(&0) {
        return Err("it is binary (it holds NUL bytes)".into());
    }
    Ok(Some(buf))
}

/// For a path recorded resolved (absolute, every link followed, as a rewind record holds it):
/// `Err(where it leads now)` when a component has become a symbolic link since — a folder the
/// agent wrote into replaced by a link to somewhere else. The rewind's boundary check: a path
/// that no longer resolves to itself is a conflict, never an action.
pub fn still_itself(path: &Path) -> Result<(), PathBuf> {
    let now = resolve(Path::new("/"), &path.to_string_lossy());
    if now == path {
        Ok(())
    } else {
        Err(now)
    }
}

/// Opens a recorded path (see [`still_itself`]) without following a link in its last
/// component, and checks that the file the kernel opened is that very path (a folder swapped
/// for a link between the check and the open is caught). A write opens without truncating
/// (the caller truncates after the check) and creates the file if `create`.
pub fn open_verified(path: &Path, write: bool, create: bool) -> Result<fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = fs::OpenOptions::new();
    options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    if write {
        options.write(true).create(create);
    } else {
        options.read(true);
    }
    let file = options.open(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => "it is now a symbolic link".to_string(),
        _ => e.to_string(),
    })?;
    match opened_path(&file) {
        Some(opened) if opened != path => Err(format!("it now leads to {}", opened.display())),
        _ => Ok(file),
    }
}

/// Deletes a recorded path through its verified parent folder (`unlinkat` on a descriptor of
/// the folder that is checked to be the recorded one), so a folder swapped for a link never
/// makes the deletion happen elsewhere.
pub fn remove_verified(path: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err("it has no parent folder".into());
    };
    let dir = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(parent)
        .map_err(|e| format!("its folder cannot be opened ({e})"))?;
    match opened_path(&dir) {
        Some(opened) if opened != parent => {
            return Err(format!("its folder now leads to {}", opened.display()))
        }
        _ => {}
    }
    let name = std::ffi::CString::new(name.as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a valid descriptor and a NUL-terminated name that outlive the call.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    match std::io::Error::last_os_error() {
        e if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        e => Err(e.to_string()),
    }
}

/// The path the kernel opened (`/proc/self/fd/N`), when it can say.
pub(super) fn opened_path(file: &fs::File) -> Option<PathBuf> {
    use std::os::unix::io::AsRawFd;
    fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
}

/// Reads a whole file through [`open_checked`].
pub(super) fn read_checked(env: &dyn ToolEnv, path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut f = open_checked(env, path, false)?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// Replaces a file's content through [`open_checked`].
pub(super) fn write_checked(env: &dyn ToolEnv, path: &Path, content: &str) -> Result<(), String> {
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

pub(super) fn failed(text: impl Into<String>) -> ToolOutcome {
    ToolOutcome::failed(text.into())
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

pub(super) fn read_for_edit(env: &mut dyn ToolEnv, path: &Path) -> Result<String, String> {
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

/// Writes `content` to `path` (through the editor when it offers files) and records the change
/// for undo: `old` is what the tool saw there (`None`: nothing, or unreadable).
pub(crate) fn store(
    env: &mut dyn ToolEnv,
    path: &Path,
    old: Option<&str>,
    content: &str,
) -> Result<(), String> {
    let existed = path.exists();
    // A new file in a missing folder: the folder is made here (the path is inside the roots
    // when the editor is asked), so the editor's write does not fail on it.
    if let Some(parent) = path.parent().filter(|p| !p.exists()) {
        fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create the folder {}: {e}", parent.display()))?;
    }
    let via_editor = match env.client_call(
        "fs.write_text_file",
        path,
        json!({"path": path.display().to_string(), "content": content}),
    ) {
        Some(Ok(v)) if v.is_object() || v.is_null() => true,
        Some(Ok(other)) => {
            return Err(format!(
                "the editor did not confirm the write (it answered {})",
                crate::jsonrpc::message::json_type(&other)
            ))
        }
        Some(Err(e)) => return Err(e),
        None => {
            write_checked(env, path, content)?;
            false
        }
    };
    let before = crate::host::changes::Before::of(existed, old);
    env.file_changed(path, before, content, via_editor);
    Ok(())
}

/// Directories never worth walking.
pub(super) fn skip_dir(name: &str) -> bool {
    matches!(
        name,
        ".git" | "target" | "node_modules" | ".hg" | ".svn" | "__pycache__" | ".venv"
    )
}

/// Files under `root` (relative paths, sorted), bounded by `WALK_LIMIT`.
pub(super) fn walk(root: &Path, cancel: &dyn Fn() -> bool) -> (Vec<String>, bool) {
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
    let keep = head(s, max).len();
    s.truncate(keep);
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
pub fn head(s: &str, max: usize) -> &str {
    let mut i = max.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    &s[..i]
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
