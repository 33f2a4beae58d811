//! One data dir, one host. The host holds an exclusive lock on `<data dir>/host.lock` for its
//! whole life and publishes how to reach it in `<data dir>/host.json` (mode 0600: it holds the
//! token). An adapter that would start a host on that data dir connects to this one instead
//! and holds an attach connection (`GET /v1/attach`); the host lives while any adapter uses it.

use crate::host_api::ops::Discovery;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::net::TcpStream;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a starting host waits for a stopping predecessor to release the data dir.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// The exit status of a host refused because another host serves its data dir.
pub const EXIT_DATA_DIR_BUSY: i32 = 75;

pub const DISCOVERY_FILE: &str = "host.json";

/// The data dir's lock, held while this value lives.
pub struct DataDirLock {
    _file: File,
}

/// Takes the data dir's lock, waiting (bounded) for a host that is stopping. `Err`: the
/// message for the person (another host serves it).
pub fn lock(data_dir: &Path) -> Result<DataDirLock, String> {
    let path = data_dir.join("host.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: flock(2) on a descriptor we own.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(DataDirLock { _file: file });
        }
        if Instant::now() >= deadline {
            let pid = read_discovery(data_dir)
                .map(|d| d.pid)
                .map(|p| format!(" (pid {p})"))
                .unwrap_or_default();
            return Err(format!(
                "another maka-acp host serves {}{pid}; adapters connect to it by themselves — stop it first to start a new one",
                data_dir.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Publishes how to reach this host (written atomically, mode 0600). In one write and without
/// an fsync: the file means something only while this host runs, and a reader takes a file it
/// cannot parse (what a crash before the data reached the disk could leave) for no host at all
/// — so an fsync would buy nothing and cost every embedded host's start a disk flush.
pub fn publish(data_dir: &Path, info: &Discovery) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(info)?;
    crate::host::store::write_atomic(data_dir, DISCOVERY_FILE, &bytes, false)
}

/// Removes the discovery file (a clean exit).
pub fn unpublish(data_dir: &Path) {
    let _ = std::fs::remove_file(data_dir.join(DISCOVERY_FILE));
}

/// What a running host published, if anything.
pub fn read_discovery(data_dir: &Path) -> Option<Discovery> {
    let bytes = std::fs::read(data_dir.join(DISCOVERY_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Adapters attached to this host (`GET /v1/attach` connections still open).
#[derive(Default)]
pub struct Attached {
    open: Mutex<Vec<(u64, TcpStream)>>,
    next: std::sync::atomic::AtomicU64,
    changed: Condvar,
}

impl Attached {
    pub fn count(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Serves one attach connection: counted until the adapter closes it (exits, or is
    /// killed: the kernel closes its socket) or the host shuts down.
    pub fn hold(&self, stream: &mut TcpStream) {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Ok(clone) = stream.try_clone() {
            self.open
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((id, clone));
        }
        let _ = stream.set_read_timeout(None);
        let mut sink = [0u8; 256];
        while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(i, _)| *i != id);
        self.changed.notify_all();
    }

    /// Waits until no adapter is attached.
    pub fn wait_unused(&self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        while !open.is_empty() {
            open = match self.changed.wait(open) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
    }

    /// Ends every attach connection (the host is shutting down).
    pub fn release_all(&self) {
        for (_, s) in self.open.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}
