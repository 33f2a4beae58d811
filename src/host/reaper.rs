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

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The hidden first argument that makes this binary a reaper.
pub const REAPER_ARG: &str = "__maka-reaper";

struct Reaper {
    pipe: Mutex<Option<ChildStdin>>,
    records: PathBuf,
    _child: Mutex<Child>,
}

static REAPER: OnceLock<Reaper> = OnceLock::new();

/// Starts the reaper for this host and reaps groups a crashed predecessor recorded.
pub fn start(data_dir: &Path) {
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
                _child: Mutex::new(child),
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
        for pid in &tree {
            if let Ok(pid) = i32::try_from(*pid) {
                // SAFETY: kill(2) on one process id; no memory involved.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        if tree.is_empty() {
            return;
        }
    }
}

/// The processes descended from `root` (not `root` itself), by parent pid.
fn descendants(root: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    let parents: Vec<(u32, u32)> = dir
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command name's closing parenthesis: state, then the parent pid.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
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
