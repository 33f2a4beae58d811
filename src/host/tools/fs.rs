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
/// Largest file `edit_file` and `search_text` touch, and `read_file` reads whole.
pub(super) const EDIT_LIMIT: u64 = 8 * 1024 * 1024;
/// How far into a file `read_file` reads when given offset/limit (lines further in are out of
/// reach): the bound on what one read holds in memory.
pub(super) const PART_READ_LIMIT: u64 = 64 * 1024 * 1024;
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
/// The one resolver: every tool, the boundary and the kept rules' reading of a command
/// (`permissions::outside_reads`) see a path through it.
pub fn resolve(cwd: &Path, p: impl AsRef<Path>) -> PathBuf {
    let p = p.as_ref();
    let joined = if p.is_absolute() {
        p.to_path_buf()
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

/// The flags of every open of a file a tool or the host reads or writes: never through a
/// symbolic link in the last component, never blocking (a FIFO opens at once instead of
/// waiting for a writer, and is then refused by [`regular_only`]), never taking a terminal.
const OPEN_FLAGS: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;

/// What a file that is not a regular file is, for the message that refuses it.
fn kind_of(t: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// The one check of what was opened (`fstat` on the descriptor, so nothing swapped in after
/// a path check gets through): tools and the host read and write regular files only. A FIFO
/// would block the turn, a device (`/dev/zero`) would never end.
pub fn regular_only(file: &fs::File) -> Result<fs::Metadata, String> {
    let meta = file
        .metadata()
        .map_err(|e| format!("it cannot be examined ({e})"))?;
    if meta.is_file() {
        Ok(meta)
    } else {
        Err(format!(
            "it is {}, not a regular file; only regular files are read or written",
            kind_of(meta.file_type())
        ))
    }
}

/// Reads at most `max` bytes of `file`, whatever its size says (a file may grow while it is
/// read): the bytes, and whether that was all of it.
pub fn read_at_most(file: &mut fs::File, max: u64) -> Result<(Vec<u8>, bool), String> {
    use std::io::Read;
    let mut buf = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| format!("it cannot be read ({e})"))?;
    let whole = buf.len() as u64 <= max;
    if !whole {
        buf.truncate(max as usize);
    }
    Ok((buf, whole))
}

/// Opens `path` for a tool: never through a symbolic link in the last component (a link
/// swapped in after the boundary check fails to open), never blocking, a regular file only
/// ([`regular_only`]), and the file actually opened is checked against what the tool may
/// touch (a folder swapped for a link is caught too). A write opens an existing file without
/// truncating it first, and creates a new one exclusively, so a refused open changes nothing.
pub fn open_checked(env: &dyn ToolEnv, path: &Path, write: bool) -> Result<fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    if env.hides(path) {
        return Err(crate::host::sandbox::Confinement::refusal(path));
    }
    let mut options = fs::OpenOptions::new();
    options.custom_flags(OPEN_FLAGS);
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
        // A socket, or a FIFO opened for writing with nobody reading it.
        Some(libc::ENXIO) => format!(
            "{} is {}, not a regular file; only regular files are read or written",
            path.display(),
            fs::symlink_metadata(path).map_or("not a regular file", |m| kind_of(m.file_type()))
        ),
        _ => e.to_string(),
    })?;
    let meta = match regular_only(&file) {
        Ok(meta) => meta,
        Err(why) => return Err(format!("{}: {why}", path.display())),
    };
    // A file with other names (hard links) may be one outside the session's folders: writing
    // through it would change that file (a rewind leaves such files alone the same way).
    if write && std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        return Err(format!(
            "{} has {} names (hard links), which may lie outside the session's folders; it was not written",
            path.display(),
            std::os::unix::fs::MetadataExt::nlink(&meta)
        ));
    }
    let real = opened_path(&file).unwrap_or_else(|| path.to_path_buf());
    if env.hides(&real) {
        drop(file);
        if created {
            let _ = fs::remove_file(path);
        }
        return Err(crate::host::sandbox::Confinement::refusal(&real));
    }
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
    use std::os::unix::fs::OpenOptionsExt;
    let real = resolve(Path::new("/"), path);
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
    let mut file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(OPEN_FLAGS)
        .open(&real)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("it cannot be opened ({e})")),
    };
    regular_only(&file)?;
    match opened_path(&file) {
        Some(opened) if !inside(&opened) => {
            return Err(format!(
                "it leads outside the session's folders (to {})",
                opened.display()
            ))
        }
        _ => {}
    }
    // Callers ask one byte more than they keep, to know a file was longer.
    let (buf, _) = read_at_most(&mut file, max)?;
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
    let now = resolve(Path::new("/"), path);
    if now == path {
        Ok(())
    } else {
        Err(now)
    }
}

/// Opens a recorded path (see [`still_itself`]) for reading, the way tools open files (no
/// link followed in its last component, never blocking, a regular file only), and checks that
/// the file the kernel opened is that very path (a folder swapped for a link between the check
/// and the open is caught).
pub fn open_verified(path: &Path) -> Result<fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(OPEN_FLAGS)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "it is now a symbolic link".to_string(),
            _ => e.to_string(),
        })?;
    regular_only(&file)?;
    match opened_path(&file) {
        Some(opened) if opened != path => Err(format!("it now leads to {}", opened.display())),
        _ => Ok(file),
    }
}

/// A recorded path's parent folder, opened and checked to be the recorded one (not a link
/// swapped in), with the path's name: every change a rewind makes goes through it
/// (`unlinkat`, `openat`, `renameat`), so it never happens elsewhere.
fn verified_parent(path: &Path) -> Result<(fs::File, std::ffi::CString), String> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
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
    Ok((dir, name))
}

/// What a rewind finds at a name in a verified folder, not following a link.
struct Target {
    mode: libc::mode_t,
    uid: libc::uid_t,
    gid: libc::gid_t,
}

/// The file at `name` in `dir`: `None` when there is none; `Err(why)` when a rewind must
/// leave it alone whatever `force` says — not a regular file, or a regular file with other
/// names (a hard link: changing it would change the file behind every name, outside the
/// workspace too).
fn replaceable_target(dir: &fs::File, name: &std::ffi::CStr) -> Result<Option<Target>, String> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: a zeroed `stat` is a valid out-buffer; the descriptor and the NUL-terminated
    // name outlive the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return match std::io::Error::last_os_error() {
            e if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            e => Err(format!("it cannot be examined ({e})")),
        };
    }
    let kind = st.st_mode & libc::S_IFMT;
    let what = match kind {
        libc::S_IFREG => None,
        libc::S_IFDIR => Some("a directory"),
        libc::S_IFIFO => Some("a FIFO (named pipe)"),
        libc::S_IFSOCK => Some("a socket"),
        libc::S_IFCHR => Some("a character device"),
        libc::S_IFBLK => Some("a block device"),
        libc::S_IFLNK => Some("a symbolic link"),
        _ => Some("not a regular file"),
    };
    if let Some(what) = what {
        return Err(format!("it is now {what}, not a regular file"));
    }
    if st.st_nlink > 1 {
        return Err(format!(
            "it has {} hard links (other names share its content, perhaps outside the session's folders)",
            st.st_nlink
        ));
    }
    Ok(Some(Target {
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
    }))
}

/// `Err(why)` when a rewind must leave a recorded path alone whatever `force` says: it is not a
/// regular file, or it is one with other names (see [`replace_verified`]). Nothing there is
/// fine (a deleted file is put back).
pub fn replaceable(path: &Path) -> Result<(), String> {
    if path.parent().is_some_and(|p| !p.exists()) {
        return Ok(());
    }
    let (dir, name) = verified_parent(path)?;
    replaceable_target(&dir, &name).map(|_| ())
}

/// Puts `content` at a recorded path by replacing the file, never by writing through it: a
/// new file is written and synced next to it (same folder, so the rename is atomic) and
/// renamed over it, keeping its mode and owner. A name that is not a regular file, or a file
/// with other hard links, is left alone (`Err` says why), so a rewind never changes anything
/// but the name it recorded.
pub fn replace_verified(path: &Path, content: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::io::{AsRawFd, FromRawFd};
    let (dir, name) = verified_parent(path)?;
    let old = replaceable_target(&dir, &name)?;
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = std::ffi::CString::new(format!(".maka-rewind-{}-{n}.tmp", std::process::id()))
        .map_err(|e| e.to_string())?;
    let mode = old.as_ref().map_or(0o644, |t| t.mode);
    // SAFETY: a valid descriptor and a NUL-terminated name that outlive the call.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            tmp.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            libc::c_uint::from(mode),
        )
    };
    if fd < 0 {
        return Err(format!(
            "its replacement cannot be created ({})",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let mut file = unsafe { fs::File::from_raw_fd(fd) };
    let written = (|| -> Result<(), String> {
        if let Some(t) = &old {
            // The umask does not decide the mode of a file being put back; the owner is kept
            // when the host may set it (it runs as root), else the host's own.
            // SAFETY: a valid descriptor.
            unsafe {
                libc::fchmod(file.as_raw_fd(), t.mode);
                libc::fchown(file.as_raw_fd(), t.uid, t.gid);
            }
        }
        file.write_all(content).map_err(|e| e.to_string())?;
        file.sync_all().map_err(|e| e.to_string())?;
        // SAFETY: a valid descriptor and NUL-terminated names that outlive the call.
        if unsafe {
            libc::renameat(
                dir.as_raw_fd(),
                tmp.as_ptr(),
                dir.as_raw_fd(),
                name.as_ptr(),
            )
        } != 0
        {
            return Err(std::io::Error::last_os_error().to_string());
        }
        Ok(())
    })();
    if let Err(e) = written {
        // SAFETY: as above.
        unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
        return Err(e);
    }
    // The rename is durable once the folder is (best effort: some file systems refuse).
    let _ = dir.sync_all();
    Ok(())
}

/// Deletes a recorded path through its verified parent folder (`unlinkat` on a descriptor of
/// the folder that is checked to be the recorded one), so a folder swapped for a link never
/// makes the deletion happen elsewhere. A name that is not a regular file, or has other hard
/// links, is left alone (`Err` says why).
pub fn remove_verified(path: &Path) -> Result<(), String> {
    use std::os::unix::io::AsRawFd;
    let (dir, name) = verified_parent(path)?;
    if replaceable_target(&dir, &name)?.is_none() {
        return Ok(());
    }
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

/// Reads at most `max` bytes of a file through [`open_checked`]: the bytes, and whether that
/// was all of it.
pub(super) fn read_checked(
    env: &dyn ToolEnv,
    path: &Path,
    max: u64,
) -> Result<(Vec<u8>, bool), String> {
    let mut f = open_checked(env, path, false)?;
    read_at_most(&mut f, max)
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
            let (bytes, whole) = read_checked(env, path, EDIT_LIMIT)?;
            if !whole {
                return Err(format!("the file is over the {EDIT_LIMIT}-byte edit limit"));
            }
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

/// Files under `root` (relative paths, sorted), bounded by `WALK_LIMIT`; folders `hidden`
/// says are the host's private data are not entered (their names are not the session's either).
pub(super) fn walk(
    root: &Path,
    cancel: &dyn Fn() -> bool,
    hidden: &dyn Fn(&Path) -> bool,
) -> (Vec<String>, bool) {
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
                Ok(t) if t.is_dir() && !skip_dir(&name) && !hidden(&root.join(&child)) => {
                    stack.push(child)
                }
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

pub use crate::host_api::head;

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

    /// A tool environment that may touch everything (the opener's own checks are tested).
    struct Anywhere(CancelTokenForTests);
    type CancelTokenForTests = crate::host::session::CancelToken;

    impl ToolEnv for Anywhere {
        fn cwd(&self) -> &Path {
            Path::new("/")
        }
        fn may_touch(&self, _: &Path) -> bool {
            true
        }
        fn cancel(&self) -> &crate::host::session::CancelToken {
            &self.0
        }
        fn output(&mut self, _: &str, _: &str) {}
        fn client_call(&mut self, _: &str, _: &Path, _: Value) -> Option<Result<Value, String>> {
            None
        }
        fn has_client_service(&self, _: &str) -> bool {
            false
        }
        fn call_client(
            &mut self,
            _: &str,
            _: Value,
            _: std::time::Duration,
            _: bool,
        ) -> Result<Value, super::super::CallError> {
            Err(super::super::CallError::Cancelled)
        }
    }

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("maka-fs-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::canonicalize(&dir).unwrap()
    }

    fn mkfifo(p: &Path) {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }

    /// Issue 45 §4 and §5: a FIFO blocked `read_file` (and the turn) forever, a character
    /// device was read with no bound. Every kind of file that is not a regular file is refused
    /// at once, by the one opener, for reading and for writing; one row a kind.
    #[test]
    fn the_opener_refuses_at_once_whatever_is_not_a_regular_file() {
        let dir = scratch("kinds");
        fs::write(dir.join("regular"), "text\n").unwrap();
        mkfifo(&dir.join("fifo"));
        // The socket exists while it is bound.
        let _listener = std::os::unix::net::UnixListener::bind(dir.join("socket")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero")).unwrap();
        fs::create_dir(dir.join("folder")).unwrap();
        let env = Anywhere(Default::default());
        // (name, as a tool resolves it, expected refusal or None when it reads)
        let rows: &[(&str, PathBuf, Option<&str>)] = &[
            ("regular file", dir.join("regular"), None),
            ("fifo", dir.join("fifo"), Some("FIFO")),
            ("socket", dir.join("socket"), Some("socket")),
            (
                "device via a link",
                resolve(&dir, "zero"),
                Some("character device"),
            ),
            (
                "device",
                PathBuf::from("/dev/zero"),
                Some("character device"),
            ),
            ("folder", dir.join("folder"), Some("directory")),
        ];
        for (what, path, refused) in rows {
            for write in [false, true] {
                let start = std::time::Instant::now();
                let got = open_checked(&env, path, write).map(|_| ());
                assert!(
                    start.elapsed() < std::time::Duration::from_secs(2),
                    "{what} (write {write}): the open must not block"
                );
                match refused {
                    None => assert!(got.is_ok(), "{what} (write {write}): {got:?}"),
                    // A folder cannot be opened for writing at all: refused either way.
                    Some(_) if *what == "folder" && write => assert!(got.is_err(), "{what}"),
                    Some(word) => {
                        let e = got.expect_err(what);
                        assert!(
                            e.contains(word) && e.contains("regular"),
                            "{what} (write {write}): {e}"
                        );
                    }
                }
            }
            // Rewinds read through the same checks.
            assert_eq!(open_verified(path).is_ok(), refused.is_none(), "{what}");
        }
        assert_eq!(fs::read_to_string(dir.join("regular")).unwrap(), "text\n");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_are_bounded_while_reading_not_by_the_size_said() {
        let dir = scratch("bounded");
        fs::write(dir.join("f"), "0123456789").unwrap();
        let env = Anywhere(Default::default());
        let rows: &[(u64, &str, bool)] = &[
            (0, "", false),
            (4, "0123", false),
            (9, "012345678", false),
            (10, "0123456789", true),
            (u64::MAX, "0123456789", true),
        ];
        for (max, bytes, whole) in rows {
            let got = read_checked(&env, &dir.join("f"), *max).unwrap();
            assert_eq!(
                (got.0.as_slice(), got.1),
                (bytes.as_bytes(), *whole),
                "max {max}"
            );
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 45 §8: a forced rewind wrote through a hard link into a file outside the
    /// workspace. A rewind replaces a file by a rename, and leaves alone (with the reason) any
    /// name that is not a regular file or that has other links; one row a kind.
    #[test]
    fn a_rewind_replaces_files_by_rename_and_leaves_links_and_special_files_alone() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = scratch("replace");
        let outside = dir.join("outside.txt");
        fs::write(&outside, "outside\n").unwrap();
        type Make = fn(&Path, &Path);
        let rows: &[(&str, Make, Option<&str>)] = &[
            (
                "regular file",
                |p, _| fs::write(p, "agent\n").unwrap(),
                None,
            ),
            ("absent", |_, _| {}, None),
            (
                "hard link out",
                |p, out| fs::hard_link(out, p).unwrap(),
                Some("hard links"),
            ),
            ("fifo", |p, _| mkfifo(p), Some("FIFO")),
            (
                "socket",
                |p, _| {
                    // Left bound: the listener is leaked for the test's lifetime.
                    std::mem::forget(std::os::unix::net::UnixListener::bind(p).unwrap());
                },
                Some("socket"),
            ),
            (
                "link to a device",
                |p, _| std::os::unix::fs::symlink("/dev/zero", p).unwrap(),
                Some("symbolic link"),
            ),
            (
                "folder",
                |p, _| fs::create_dir(p).unwrap(),
                Some("directory"),
            ),
        ];
        for (n, (what, make, refused)) in rows.iter().enumerate() {
            let path = dir.join(format!("target-{n}"));
            make(&path, &outside);
            let inode = fs::symlink_metadata(&path).map(|m| m.ino()).ok();
            if *what == "regular file" {
                fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
            }
            let start = std::time::Instant::now();
            let replaced = replace_verified(&path, b"before\n");
            assert!(
                start.elapsed() < std::time::Duration::from_secs(2),
                "{what}"
            );
            assert_eq!(replaceable(&path).is_ok(), refused.is_none(), "{what}");
            match refused {
                None => {
                    assert!(replaced.is_ok(), "{what}: {replaced:?}");
                    assert_eq!(fs::read_to_string(&path).unwrap(), "before\n", "{what}");
                    let meta = fs::metadata(&path).unwrap();
                    assert_ne!(Some(meta.ino()), inode, "{what}: a new file, renamed in");
                    if *what == "regular file" {
                        assert_eq!(meta.mode() & 0o777, 0o640, "{what}: the mode is kept");
                    }
                    assert!(remove_verified(&path).is_ok(), "{what}");
                    assert!(!path.exists(), "{what}");
                }
                Some(word) => {
                    let e = replaced.expect_err(what);
                    assert!(e.contains(word), "{what}: {e}");
                    assert_eq!(
                        fs::symlink_metadata(&path).map(|m| m.ino()).ok(),
                        inode,
                        "{what}: left as it is"
                    );
                    assert!(
                        remove_verified(&path).is_err(),
                        "{what}: not deleted either"
                    );
                }
            }
        }
        assert_eq!(fs::read_to_string(&outside).unwrap(), "outside\n");
        let litter: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(litter.is_empty(), "no temporary file is left: {litter:?}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
