//! Running a program with some of the machine's folders read-only or hidden from it, whatever
//! tool it uses: explore mode for subagents that write with their own tools (not through
//! `fs/*`), and every process a principal's session starts (issue 56: its commands, its MCP
//! servers, its subagents and their terminals), from which the host's private paths — its data
//! dir, its config, `serve`'s tokens file — are hidden ([`Confinement`]).
//!
//! How, in the child between fork and exec:
//! 1. a new user and mount namespace (no privilege needed where the kernel allows unprivileged
//!    user namespaces), its user and group mapped to themselves, mounts made private (nothing
//!    reaches the host's);
//! 2. each read-only folder bind-mounted onto itself and made read-only with its submounts
//!    (`mount_setattr`, Linux 5.12); each hidden folder (the host's data dir: its token, its
//!    rules, its sessions) covered by an empty tmpfs, each hidden file by `/dev/null`;
//! 3. a second user, mount and PID namespace: mounts handed to a namespace owned by another user
//!    namespace are locked, so the agent — even as root in its namespace — can neither unmount
//!    them nor make them writable again;
//! 4. a fork: the grandchild is the first process of the new PID namespace, mounts a `/proc`
//!    of its own (the host's processes are not even listed; their `/proc/<pid>/root`, which
//!    would lead back to the writable folders, is refused across user namespaces anyway),
//!    enters the working directory again (the one it inherited is the writable view below the
//!    new mounts) and, as the namespace's init, starts the agent in a child of its own and
//!    reaps what it orphans; the processes in between close every descriptor and wait,
//!    exiting as the agent does. When it exits, the kernel ends whatever it left running.
//!
//! Where this cannot be set up (no user namespaces, a container that masks `/proc`, a kernel
//! older than 5.12) the program is not started, and the caller says why.
//!
//! What it is not: a sandbox against a program set on attacking the machine. It keeps the
//! given folders as they are; the program runs as the same user, keeps the network and
//! whatever sockets its user can reach, and writes its own state (`~/.codex`, …) and anywhere
//! else its user may.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// What the agent may not change: folders it sees read-only, folders (and files) hidden from it.
#[derive(Debug, Clone)]
pub struct Folders {
    pub read_only: Vec<PathBuf>,
    pub hidden: Vec<PathBuf>,
    /// Its working directory (inside a read-only folder).
    pub cwd: PathBuf,
}

/// Everything the child needs, prepared before the fork (no allocation after it).
struct Plan {
    read_only: Vec<CString>,
    hidden: Vec<CString>,
    /// Files covered by `/dev/null`.
    hidden_files: Vec<CString>,
    cwd: CString,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("a folder name holds a NUL byte"))
}

impl Plan {
    fn new(f: &Folders) -> io::Result<Plan> {
        let real = |p: &PathBuf| std::fs::canonicalize(p).and_then(|r| c_path(&r));
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Ok(Plan {
            read_only: f.read_only.iter().map(real).collect::<io::Result<_>>()?,
            // A hidden path that does not exist has nothing to hide.
            hidden: f
                .hidden
                .iter()
                .filter(|p| p.is_dir())
                .map(real)
                .collect::<io::Result<_>>()?,
            hidden_files: f
                .hidden
                .iter()
                .filter(|p| p.exists() && !p.is_dir())
                .map(real)
                .collect::<io::Result<_>>()?,
            cwd: real(&f.cwd)?,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        })
    }
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_uint = 0x8000;

fn check(r: libc::c_int) -> Result<(), i32> {
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EPERM)
}

/// Writes `data` to a `/proc/self` file (async-signal-safe: open, write, close).
fn write_proc(file: &std::ffi::CStr, data: &[u8]) -> Result<(), i32> {
    // SAFETY: a valid C path; the buffer outlives the call.
    unsafe {
        let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(errno());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let e = errno();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(e);
        }
    }
    Ok(())
}

/// New namespaces (`flags` with a new user namespace), this process's user and group mapped
/// to themselves.
fn enter_namespace(plan: &Plan, flags: libc::c_int) -> Result<(), i32> {
    // SAFETY: a plain syscall in a single-threaded child.
    check(unsafe { libc::unshare(libc::CLONE_NEWUSER | flags) })?;
    match write_proc(c"/proc/self/setgroups", b"deny") {
        Err(libc::ENOENT) | Ok(()) => {}
        Err(e) => return Err(e),
    }
    write_proc(c"/proc/self/uid_map", &plan.uid_map)?;
    write_proc(c"/proc/self/gid_map", &plan.gid_map)
}

fn mount(
    source: *const libc::c_char,
    target: &std::ffi::CStr,
    fstype: *const libc::c_char,
    flags: libc::c_ulong,
    data: *const libc::c_char,
) -> Result<(), i32> {
    // SAFETY: C strings or null, as mount(2) takes them.
    check(unsafe { libc::mount(source, target.as_ptr(), fstype, flags, data.cast()) })
}

/// Run in the child between fork and exec: only async-signal-safe calls on prepared data.
/// Returns in the process that is to run the agent; the process in between never returns.
fn enter(plan: &Plan) -> Result<(), i32> {
    let null = std::ptr::null();
    enter_namespace(plan, libc::CLONE_NEWNS)?;
    mount(null, c"/", null, libc::MS_REC | libc::MS_PRIVATE, null)?;
    for dir in &plan.read_only {
        mount(dir.as_ptr(), dir, null, libc::MS_BIND | libc::MS_REC, null)?;
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        // SAFETY: a prepared path and a live struct of the size given. Where the call is
        // missing (before Linux 5.12) the submounts could not all be made read-only: refused.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                libc::AT_FDCWD,
                dir.as_ptr(),
                AT_RECURSIVE,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        };
        if r != 0 {
            return Err(errno());
        }
    }
    for dir in &plan.hidden {
        mount(
            c"tmpfs".as_ptr(),
            dir,
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"mode=0700".as_ptr(),
        )?;
    }
    for file in &plan.hidden_files {
        mount(c"/dev/null".as_ptr(), file, null, libc::MS_BIND, null)?;
    }
    // Handed to namespaces the agent owns, the mounts are locked: read-only for good.
    enter_namespace(plan, libc::CLONE_NEWNS | libc::CLONE_NEWPID)?;
    // SAFETY: fork in a single-threaded child; both sides only make syscalls.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(errno());
    }
    if pid > 0 {
        stand_by(pid, false);
    }
    // The first process of the new PID namespace: a /proc of its own, the read-only view of
    // its working directory; then it is the namespace's init (it reaps what the agent
    // orphans, and does not leave the agent as PID 1, which ignores signals it has no handler
    // for) and the agent runs in its child.
    mount(
        c"proc".as_ptr(),
        c"/proc",
        c"proc".as_ptr(),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        null,
    )?;
    // SAFETY: a prepared path; then fork as above.
    check(unsafe { libc::chdir(plan.cwd.as_ptr()) })?;
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(errno());
    }
    if pid > 0 {
        stand_by(pid, true);
    }
    Ok(())
}

/// A process between the host and the agent: holds nothing (the agent has the pipes; the
/// host's exec-error pipe must close when the agent starts), waits for `agent` (and, as the
/// namespace's init, `reap_all`, for every orphan too) and exits as the agent did.
fn stand_by(agent: libc::pid_t, reap_all: bool) -> ! {
    // SAFETY: closing descriptors and waiting for our own child; no memory involved.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            for fd in 0..4096 {
                libc::close(fd);
            }
        }
        let mut status = 0;
        loop {
            let r = libc::waitpid(if reap_all { -1 } else { agent }, &mut status, 0);
            if r == agent {
                break;
            }
            if r < 0 && errno() != libc::EINTR {
                libc::_exit(1);
            }
        }
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        };
        libc::_exit(code)
    }
}

/// Whether this machine lets an agent run this way: tried once, in a forked child, on a
/// folder of its own. `Err` says why not.
pub fn available() -> Result<(), String> {
    static ANSWER: OnceLock<Result<(), String>> = OnceLock::new();
    ANSWER.get_or_init(probe).clone()
}

fn probe() -> Result<(), String> {
    let dir = std::env::temp_dir();
    let plan = Plan::new(&Folders {
        read_only: vec![dir.clone()],
        hidden: vec![],
        cwd: dir,
    })
    .map_err(|e| e.to_string())?;
    // SAFETY: the child only runs `enter` (async-signal-safe) and `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error().to_string());
    }
    if pid == 0 {
        let code = match enter(&plan) {
            Ok(()) => 0,
            Err(e) => e.clamp(1, 125),
        };
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: our own child.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        return Err(io::Error::last_os_error().to_string());
    }
    match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
        Some(0) => Ok(()),
        Some(e) => Err(format!(
            "private user, mount and PID namespaces are not available to this process: {}",
            io::Error::from_raw_os_error(e)
        )),
        None => Err("the namespace check did not finish".into()),
    }
}

/// Makes `cmd` run its program as the module's comment says.
pub fn apply(cmd: &mut Command, folders: &Folders) -> Result<(), String> {
    available()?;
    let plan =
        Plan::new(folders).map_err(|e| format!("cannot prepare the folders to hide: {e}"))?;
    // SAFETY: `enter` is async-signal-safe and uses only what `plan` prepared.
    unsafe {
        cmd.pre_exec(move || enter(&plan).map_err(io::Error::from_raw_os_error));
    }
    Ok(())
}

/// What a session's tools and processes are kept from (issue 56). A principal's session: the
/// host's private paths ([`crate::host::Host::private`]: its data dir, its config, `serve`'s
/// tokens file) — hidden from every process it starts, refused to every file tool. The machine's
/// user's sessions (no owner): nothing, as before principals.
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    /// Resolved paths (every link followed, as `tools::fs::resolve` sees a tool's path).
    hidden: Vec<PathBuf>,
}

impl Confinement {
    pub fn hiding(hidden: Vec<PathBuf>) -> Confinement {
        Confinement { hidden }
    }

    pub fn is_confined(&self) -> bool {
        !self.hidden.is_empty()
    }

    pub fn hidden(&self) -> &[PathBuf] {
        &self.hidden
    }

    /// Whether `real` (a resolved path) is, or is inside, one of the hidden paths.
    pub fn hides(&self, real: &Path) -> bool {
        self.hidden.iter().any(|h| real.starts_with(h))
    }

    /// The refusal of a file tool's `path` that [`Self::hides`].
    pub fn refusal(path: &Path) -> String {
        format!(
            "Refused: {} is the host's private data (its sessions, tokens and configuration), which no principal's session may read or change; do not retry it.",
            path.display()
        )
    }

    /// Makes `cmd` (`what`, to run in `cwd`) start with the hidden paths covered, the session's
    /// `read_only` folders read-only besides. An unconfined session's `cmd` is left as it is
    /// (unless `read_only` is given). `Err`: why it may not be started — a principal's process
    /// never runs unconfined.
    pub fn apply(
        &self,
        cmd: &mut Command,
        what: &str,
        cwd: &Path,
        read_only: &[PathBuf],
    ) -> Result<(), String> {
        if !self.is_confined() && read_only.is_empty() {
            return Ok(());
        }
        let folders = Folders {
            read_only: read_only.to_vec(),
            hidden: self.hidden.clone(),
            cwd: cwd.to_path_buf(),
        };
        apply(cmd, &folders).map_err(|why| {
            if self.is_confined() {
                Confinement::unavailable(what, &why)
            } else {
                why
            }
        })
    }

    /// Why a principal's `what` is not started where the sandbox cannot be set up (`why`).
    pub fn unavailable(what: &str, why: &str) -> String {
        format!(
            "{what} was not started: this session belongs to a principal, and this machine cannot hide the host's private data from the processes it starts ({why}). The operator can allow unprivileged user namespaces (Linux 5.12 or later; sysctl kernel.unprivileged_userns_clone=1, or a container or AppArmor profile that permits them), or give this person a `maka-acp serve` of their own."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where namespaces work, a program started this way cannot write in the folder — by an
    /// absolute or a relative path, after trying to make it writable again, or through
    /// `/proc/<pid>/root` of a process outside — nor see the hidden folder; it writes
    /// elsewhere, and the processes it leaves behind end with it.
    #[test]
    fn a_read_only_folder_stays_read_only_for_the_program() {
        if let Err(why) = available() {
            eprintln!("skipped: {why}");
            return;
        }
        let base = std::env::temp_dir().join(format!("maka-sandbox-{}", std::process::id()));
        let (ws, other, secret) = (base.join("ws"), base.join("other"), base.join("data"));
        for d in [&ws, &other, &secret] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(secret.join("host.json"), "token").unwrap();
        let script = format!(
            "touch {ws}/a; touch rel; mount -o remount,rw {ws} 2>/dev/null; \
             umount -l {ws} 2>/dev/null; touch {ws}/b; \
             unshare -rm sh -c 'umount {ws}; touch {ws}/c' 2>/dev/null; \
             touch /proc/{host}/root{ws}/d 2>/dev/null; \
             touch /proc/{host}/cwd/e 2>/dev/null; \
             cat {secret}/host.json 2>/dev/null; \
             touch {other}/f; sleep 30 & echo done",
            ws = ws.display(),
            other = other.display(),
            secret = secret.display(),
            host = std::process::id(),
        );
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script]).current_dir(&ws);
        let folders = Folders {
            read_only: vec![ws.clone()],
            hidden: vec![secret.clone()],
            cwd: ws.clone(),
        };
        apply(&mut cmd, &folders).unwrap();
        // (`output` waits for every holder of its stdout: the `sleep` left behind ends with the
        // namespace's first process, or this waits 30 s.)
        let started = std::time::Instant::now();
        let out = cmd.output().unwrap();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "its sleep outlived it"
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
        for f in ["a", "rel", "b", "c", "d", "e"] {
            assert!(!ws.join(f).exists(), "{f} was written");
        }
        assert!(other.join("f").exists(), "elsewhere it writes");
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// A principal's process (issue 56): the hidden folder is empty and the hidden file reads
    /// empty, however it is named (a link to it too), and it cannot uncover them; the rest of
    /// the machine is as it was (it reads and writes its working directory). An unconfined
    /// command is left as it is.
    #[test]
    fn a_confined_program_sees_neither_the_hidden_folder_nor_the_hidden_file() {
        let mut plain = Command::new("true");
        Confinement::default()
            .apply(&mut plain, "`true`", Path::new("/"), &[])
            .unwrap();
        if let Err(why) = available() {
            let refused = Confinement::hiding(vec![PathBuf::from("/nonexistent")])
                .apply(&mut Command::new("true"), "`true`", Path::new("/"), &[])
                .unwrap_err();
            assert!(refused.contains("`true` was not started"), "{refused}");
            eprintln!("skipped: {why}");
            return;
        }
        let base = std::env::temp_dir().join(format!("maka-confine-{}", std::process::id()));
        let (ws, data) = (base.join("ws"), base.join("data"));
        for d in [&ws, &data] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(data.join("host.json"), "host-secret").unwrap();
        let tokens = base.join("tokens");
        std::fs::write(&tokens, "tokens-secret").unwrap();
        std::os::unix::fs::symlink(&tokens, ws.join("link")).unwrap();
        std::fs::write(ws.join("mine"), "own-file").unwrap();
        let script = format!(
            "cat {data}/host.json {tokens} link mine 2>/dev/null; \
             umount {data} 2>/dev/null; umount {tokens} 2>/dev/null; \
             cat {data}/host.json {tokens} 2>/dev/null; echo ok > written",
            data = data.display(),
            tokens = tokens.display(),
        );
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script]).current_dir(&ws);
        let confined = Confinement::hiding(vec![data.clone(), tokens.clone()]);
        assert!(confined.hides(&data.join("sessions/x")) && confined.hides(&tokens));
        assert!(!confined.hides(&ws.join("mine")));
        confined.apply(&mut cmd, "`sh`", &ws, &[]).unwrap();
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.trim(), "own-file", "{text}");
        assert!(ws.join("written").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
