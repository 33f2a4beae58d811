//! Every process the host starts dies with it. Commands and MCP servers run in process groups
//! of their own; the host registers each group here. Two guards, because a host killed with
//! SIGKILL cleans nothing up itself:
//!
//! - a reaper process (this binary, re-executed with [`REAPER_ARG`]) reads the registrations
//!   from a pipe; when the pipe closes — the host exited or was killed — it kills every group
//!   still registered, then exits. A parent-death signal alone would not do: it reaches only
//!   the direct child (`sh`), not what `sh -c` started, and it fires when the spawning
//!   *thread* ends;
//! - each group is also recorded under `<data dir>/process-groups/` (leader pid and start
//!   time), so a host starting on a data dir reaps what a predecessor left behind if its reaper
//!   died too.
//!
//! What leaves its command's group (`setsid`, a double fork) is found because the host is a
//! child subreaper: an orphaned descendant becomes the host's child, not init's. At each
//! command's end (and a child peer's) [`adopt_orphans`] registers the group of each one still
//! running, so it dies with the host like the rest, and reaps each one that has exited; when the
//! host exits, [`end_children`] kills whatever is still its child.
//!
//! Telling an adopted process from one the host started itself, without a registry and without
//! taking the exit status another thread's `Child::wait` is waiting for: every process the host
//! starts leads a group of its own in the host's session (`process_group(0)`: commands, MCP
//! servers, subagents, their terminals, the reaper), and a group leader can never call
//! `setsid`. So a child of the host that is in another group than its own (and not the host's),
//! or that leads a session, was adopted. (One that made its own group in the host's session —
//! shell job control, `set -m` — looks like the host's own: it is killed at the host's exit, but
//! neither registered nor reaped before.)

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The hidden first argument that makes this binary a reaper.
pub const REAPER_ARG: &str = "__maka-reaper";

struct Reaper {
    pipe: Mutex<Option<ChildStdin>>,
    records: PathBuf,
    /// The reaper process: a child of the host that is not ended with the others.
    pid: u32,
    _child: Mutex<Child>,
    /// Groups of adopted processes registered so far (each once).
    adopted: Mutex<BTreeSet<u32>>,
}

static REAPER: OnceLock<Reaper> = OnceLock::new();

/// Starts the reaper for this host and reaps groups a crashed predecessor recorded; makes the
/// host a child subreaper (see the module's comment).
pub fn start(data_dir: &Path) {
    become_subreaper();
    keep_memory_private();
    let records = data_dir.join("process-groups");
    reap_recorded(&records);
    if let Err(e) = crate::host::store::create_private_dir_all(&records) {
        log::warn!("cannot record process groups in {}: {e}", records.display());
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            log::warn!("no reaper (cannot find this program: {e}); commands may outlive a crash");
            return;
        }
    };
    let spawned = Command::new(exe)
        .arg(REAPER_ARG)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        // Its own group: a signal to the host's group does not take the reaper with it.
        .process_group(0)
        .spawn();
    match spawned {
        Ok(mut child) => {
            let pipe = child.stdin.take();
            let _ = REAPER.set(Reaper {
                pipe: Mutex::new(pipe),
                records,
                pid: child.id(),
                _child: Mutex::new(child),
                adopted: Mutex::default(),
            });
        }
        Err(e) => log::warn!("no reaper ({e}); commands may outlive a crash"),
    }
}

use std::os::unix::process::CommandExt;

/// A process group (its leader's pid) the host started: killed if the host dies.
pub fn track(pgid: u32) {
    let Some(r) = REAPER.get() else { return };
    if let Some(start) = start_time(pgid) {
        let _ = crate::host::store::create_private(&r.records.join(pgid.to_string()))
            .and_then(|mut f| f.write_all(start.to_string().as_bytes()));
    }
    let mut pipe = r.pipe.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = pipe.as_mut() {
        if writeln!(p, "+{pgid}").is_err() {
            log::warn!("the reaper is gone; process group {pgid} is not guarded");
        }
    }
}

/// The group was killed or has ended: no longer guarded.
pub fn untrack(pgid: u32) {
    let Some(r) = REAPER.get() else { return };
    let _ = std::fs::remove_file(r.records.join(pgid.to_string()));
    let mut pipe = r.pipe.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = pipe.as_mut() {
        let _ = writeln!(p, "-{pgid}");
    }
}

/// SIGKILL to a whole process group.
pub fn kill_group(pgid: u32) {
    if let Ok(pgid) = i32::try_from(pgid) {
        if pgid > 1 {
            // SAFETY: kill(2) with a negative pid signals a process group; no memory involved.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

/// Kills `root`'s process group and every process descended from `root`, including those that
/// left the group with `setsid` (a new session is still a child of its parent): found by
/// parent pid in /proc, killed, and looked for again (what they forked meanwhile).
pub fn kill_tree(root: u32) {
    for _ in 0..3 {
        let tree = descendants(root);
        kill_group(root);
        for &pid in &tree {
            kill_pid(pid);
        }
        if tree.is_empty() {
            return;
        }
    }
}

/// Makes this process the one its orphaned descendants are re-parented to.
fn become_subreaper() {
    // SAFETY: prctl(2) with integer arguments only; no memory involved.
    let done = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if done != 0 {
        log::warn!(
            "cannot become a child subreaper ({}); what a command starts with `setsid` may outlive the host",
            std::io::Error::last_os_error()
        );
    }
}

/// Keeps the commands this host runs (as the same user) out of its memory and environment:
/// a process that is not dumpable has its `/proc/<pid>/environ`, `mem` and `maps` owned by
/// root and cannot be traced. A kept rule for `grep` must not read the provider key the
/// editor put in the host's environment (`grep -r -a -z KEY /proc`; such a command is
/// exact-only anyway, this is the floor under it).
pub fn keep_memory_private() {
    // SAFETY: prctl(2) with integer arguments only; no memory involved.
    let done = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if done != 0 {
        log::warn!(
            "cannot make the host non-dumpable ({}); commands can read its environment",
            std::io::Error::last_os_error()
        );
    }
}

/// What `/proc/<pid>/stat` says of a process.
struct Stat {
    pid: u32,
    zombie: bool,
    ppid: u32,
    pgid: u32,
    sid: u32,
}

/// Every process's [`Stat`], as far as they can be read.
fn processes() -> Vec<Stat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .collect()
}

fn stat(pid: u32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name's closing parenthesis (the name may hold any byte): state, parent
    // pid, process group, session.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let zombie = fields.next()? == "Z";
    let mut number = || fields.next()?.parse::<u32>().ok();
    Some(Stat {
        pid,
        zombie,
        ppid: number()?,
        pgid: number()?,
        sid: number()?,
    })
}

/// The children of this process that it adopted (see the module's comment for the rule).
fn adopted_children() -> Vec<Stat> {
    let me = std::process::id();
    // SAFETY: getpgrp(2) and getsid(2) read this process's ids; no memory involved.
    let (my_group, my_session) = unsafe { (libc::getpgrp(), libc::getsid(0)) };
    let (my_group, my_session) = (my_group as u32, my_session as u32);
    processes()
        .into_iter()
        .filter(|p| p.ppid == me)
        .filter(|p| {
            let other_group = p.pgid != p.pid && p.pgid != my_group;
            let own_session = p.sid == p.pid && p.sid != my_session;
            other_group || own_session
        })
        .collect()
}

/// Registers the group of every adopted child still running (it dies with the host however
/// the host dies) and reaps every one that has exited. Run at a command's end, when what it
/// left behind has just been re-parented to the host.
pub fn adopt_orphans() {
    let Some(r) = REAPER.get() else { return };
    for p in adopted_children() {
        if p.zombie {
            reap(p.pid);
            continue;
        }
        let new = lock(&r.adopted).insert(p.pgid);
        if new && p.pgid > 1 {
            log::info!(
                "process {} left its command's group; it is ended with the host",
                p.pid
            );
            track(p.pgid);
        }
    }
    // Registered groups that have ended are no longer guarded.
    let ended: Vec<u32> = lock(&r.adopted)
        .iter()
        .copied()
        .filter(|&g| !group_alive(g))
        .collect();
    for g in ended {
        lock(&r.adopted).remove(&g);
        untrack(g);
    }
}

/// Collects an adopted child's exit status (only an adopted one: see the module's comment).
fn reap(pid: u32) {
    let Ok(pid) = i32::try_from(pid) else { return };
    let mut status = 0;
    // SAFETY: waitpid(2) on one child, without blocking; `status` is a valid out-pointer.
    unsafe {
        libc::waitpid(pid, &mut status, libc::WNOHANG);
    }
}

/// The host is exiting: kills every child it still has but the reaper, with its group unless
/// that is the host's own — what it started and what it adopted. Nobody waits for their exit
/// statuses any more.
pub fn end_children() {
    let Some(r) = REAPER.get() else { return };
    let me = std::process::id();
    // SAFETY: getpgrp(2) reads this process's group; no memory involved.
    let my_group = unsafe { libc::getpgrp() } as u32;
    for p in processes() {
        if p.ppid != me || p.pid == r.pid || p.zombie {
            continue;
        }
        if p.pgid != my_group {
            kill_group(p.pgid);
        }
        kill_pid(p.pid);
    }
}

fn kill_pid(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        if pid > 1 {
            // SAFETY: kill(2) on one process id; no memory involved.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The processes descended from `root` (not `root` itself), by parent pid.
fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = processes().iter().map(|p| (p.pid, p.ppid)).collect();
    let mut found = vec![];
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(pid, ppid) in &parents {
            if ppid == p && !found.contains(&pid) && found.len() < 4096 {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

/// Whether any process of the group is still alive.
pub fn group_alive(pgid: u32) -> bool {
    let Ok(pgid) = i32::try_from(pgid) else {
        return false;
    };
    // SAFETY: signal 0 only checks for existence.
    pgid > 1 && unsafe { libc::kill(-pgid, 0) } == 0
}

/// The start time (clock ticks since boot) of process `pid`, from `/proc/<pid>/stat`.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Kills the groups a predecessor recorded and removes the records. A group is killed only if
/// its leader is gone (its members may live on) or is the very process recorded (same start
/// time): never a new process that reuses the pid.
fn reap_recorded(records: &Path) {
    let Ok(entries) = std::fs::read_dir(records) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Some(pgid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let recorded: Option<u64> = std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let same = match (start_time(pgid), recorded) {
            (None, _) => true,
            (Some(now), Some(then)) => now == then,
            (Some(_), None) => false,
        };
        if same && group_alive(pgid) {
            log::warn!("reaping process group {pgid}, left running by a host that stopped");
            kill_group(pgid);
        }
        let _ = std::fs::remove_file(&path);
    }
}

/// The reaper's main: registrations on stdin (`+pgid` / `-pgid`); at EOF, kill what is left.
pub fn run_reaper() -> i32 {
    let mut groups = std::collections::BTreeSet::new();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let (sign, n) = line.split_at(line.len().min(1));
        let Ok(pgid) = n.trim().parse::<u32>() else {
            continue;
        };
        match sign {
            "+" => {
                groups.insert(pgid);
            }
            "-" => {
                groups.remove(&pgid);
            }
            _ => {}
        }
    }
    for pgid in groups {
        if group_alive(pgid) {
            kill_group(pgid);
        }
    }
    0
}

#[cfg(test)]
mod dumpable_tests {
    use super::*;

    #[test]
    fn the_host_is_not_dumpable() {
        keep_memory_private();
        // SAFETY: prctl(2) with integer arguments only.
        assert_eq!(unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) }, 0);
    }
}
