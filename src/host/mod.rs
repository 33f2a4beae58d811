//! The reference Runtime Host (`maka-acp host`): an HTTP server on loopback with durable
//! sessions, an agent loop with real tools, and model providers. See
//! `docs/runtime-host-protocol.md`.

pub(crate) mod artifacts;
pub(crate) mod changes;
pub(crate) mod child_env;
pub(crate) mod child_peer;
pub mod codec;
pub(crate) mod commands;
pub(crate) mod goals;
pub(crate) mod mcp;
pub(crate) mod memory;
pub(crate) mod models;
pub(crate) mod notices;
pub mod ops;
pub(crate) mod owner;
pub(crate) mod permissions;
pub(crate) mod reaper;
pub(crate) mod sandbox;
pub(crate) mod server;
pub(crate) mod session;
mod sse;
pub(crate) mod store;
pub(crate) mod subagents;
pub(crate) mod table;
pub(crate) mod tools;
pub(crate) mod turn;

pub use crate::host_api::random_hex;
use crate::host_api::wire::{ErrorCode, HostError};
use models::Providers;
use serde_json::Value;
use session::SessionCell;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use store::Store;

pub struct Host {
    pub epoch: String,
    pub host_id: String,
    pub token: String,
    pub port: AtomicU16,
    /// The loopback address bound (any of 127.0.0.0/8 or ::1): accepted in `Host` headers.
    pub listen_ip: std::net::IpAddr,
    pub store: Store,
    /// Memory entries (`memory.json`).
    pub memory: memory::Memory,
    /// Permission rules kept per workspace (`permissions.json`).
    pub permissions: permissions::Rules,
    /// Sessions' stored files and uploads.
    pub artifacts: artifacts::Artifacts,
    /// Re-read by `models.reload` (after `maka-acp login` or a logout).
    providers: std::sync::RwLock<Arc<Providers>>,
    started: Instant,
    sessions: Mutex<table::SessionTable>,
    catalog_revision: AtomicU64,
    draining: AtomicBool,
    active_turns: Gauge,
    streams: Gauge,
    ops_inflight: Gauge,
    /// What each principal holds of `streams` and `ops_inflight` (its share, [`SHARE`]).
    shares: Shares,
    server: Mutex<Option<Arc<crate::http::Server>>>,
    /// Other adapters using this host (`GET /v1/attach`): it lives while any does.
    pub attached: owner::Attached,
    pub data_dir: PathBuf,
    /// What no principal's session may see (issue 56), resolved: the data dir, the config
    /// (provider keys), and the paths the host was told are private (`--private`: `serve`'s
    /// tokens file). See [`Host::confinement`].
    pub private: Vec<PathBuf>,
    /// Read once at start; see `crate::settings`.
    pub tunables: crate::tunables::Tunables,
    /// Held for the host's whole life: one data dir, one host.
    _lock: owner::DataDirLock,
}

/// A count of things in flight (turns, event streams, operations) that shutdown can wait on.
#[derive(Default)]
struct Gauge {
    n: Mutex<usize>,
    drained: Condvar,
}

/// Held while a stream (or op) occupies one of the bounded slots.
pub struct Slot<'a>(&'a Gauge);

/// One principal's share of the host's event streams and operations in flight: a quarter of
/// each, so no principal can take every slot from the others (the machine's user has none).
pub const SHARE: usize = 4;

/// What one principal holds now.
#[derive(Clone, Copy, Default)]
pub struct Held {
    streams: usize,
    ops: usize,
}

/// Which of the host's bounded slots.
#[derive(Clone, Copy)]
pub enum Bounded {
    Streams,
    Ops,
}

/// What each principal holds of the bounded slots, by name.
type Shares = Mutex<HashMap<String, Held>>;

/// A slot taken for a principal: its global slot and its share, both given back on drop.
pub struct Shared<'a> {
    _slot: Slot<'a>,
    share: Option<(&'a Shares, String, Bounded)>,
}

impl Drop for Shared<'_> {
    fn drop(&mut self) {
        if let Some((shares, name, kind)) = &self.share {
            let mut all = shares.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(held) = all.get_mut(name) {
                match kind {
                    Bounded::Streams => held.streams = held.streams.saturating_sub(1),
                    Bounded::Ops => held.ops = held.ops.saturating_sub(1),
                }
                if held.streams == 0 && held.ops == 0 {
                    all.remove(name);
                }
            }
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl Gauge {
    fn lock(&self) -> MutexGuard<'_, usize> {
        self.n.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self) -> usize {
        *self.lock()
    }

    /// One more, unless `max` are in flight.
    fn take(&self, max: usize) -> Option<Slot<'_>> {
        let mut n = self.lock();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Slot(self))
    }

    /// One more, without a slot (a turn runs on its own thread and ends there).
    fn add(&self) {
        *self.lock() += 1;
    }

    fn release(&self) {
        let mut n = self.lock();
        *n = n.saturating_sub(1);
        self.drained.notify_all();
    }

    /// Waits until nothing is in flight, or `deadline`.
    fn wait_drained(&self, deadline: Instant) {
        let mut n = self.lock();
        while *n > 0 {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            n = match self.drained.wait_timeout(n, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

impl Host {
    pub fn sessions_lock(&self) -> MutexGuard<'_, table::SessionTable> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cells of the sessions in use since start, taken out of the global lock (lock the
    /// cells after this returns). Sessions not read yet have no turn, stream or reader.
    pub fn cells(&self) -> Vec<Arc<SessionCell>> {
        self.sessions_lock().read_cells()
    }

    /// Every session's cell, reading the records not read yet (outside the global lock; one
    /// that cannot be read now is left out and asked again next time).
    pub fn all_cells(&self) -> Vec<Arc<SessionCell>> {
        let unread = self.sessions_lock().unread_ids();
        if !unread.is_empty() {
            let read = unread
                .into_iter()
                .filter_map(|id| {
                    let record = self.store.load_session(&id).ok()?;
                    Some((id, record))
                })
                .collect();
            self.sessions_lock().add_read(read);
        }
        self.cells()
    }

    pub fn cell(&self, id: &str) -> Result<Arc<SessionCell>, HostError> {
        self.sessions_lock()
            .get(&self.store, id)?
            .ok_or_else(|| self.unknown_session(id))
    }

    /// The answer for a session that is not there (or is another principal's).
    pub fn unknown_session(&self, id: &str) -> HostError {
        HostError::not_found(format!("session {id}"))
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// The model providers as of now (a reload swaps them; running turns keep theirs).
    pub fn providers(&self) -> Arc<Providers> {
        Arc::clone(&self.providers.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Re-reads the provider settings (environment and config file).
    pub fn reload_providers(&self) -> Arc<Providers> {
        let fresh = Arc::new(Providers::from_env());
        *self.providers.write().unwrap_or_else(|p| p.into_inner()) = Arc::clone(&fresh);
        fresh
    }

    pub fn catalog_revision(&self) -> u64 {
        self.catalog_revision.load(Ordering::Acquire)
    }

    pub fn bump_catalog(&self) {
        self.catalog_revision.fetch_add(1, Ordering::AcqRel);
    }

    /// A slot of `kind` for `principal` (none: the machine's user, who has no share of its
    /// own): `Err` says which bound is full.
    pub fn slot_for(
        &self,
        principal: Option<&str>,
        kind: Bounded,
    ) -> Result<Shared<'_>, HostError> {
        let (gauge, max, what, all_taken) = match kind {
            Bounded::Streams => (
                &self.streams,
                server::MAX_STREAMS,
                "event streams",
                format!("more than {} concurrent streams", server::MAX_STREAMS),
            ),
            Bounded::Ops => (
                &self.ops_inflight,
                server::MAX_INFLIGHT_OPS,
                "operations in flight",
                "too many requests in flight".to_string(),
            ),
        };
        let full = |m: String| HostError::new(ErrorCode::CapacityExceeded, m);
        let Some(name) = principal else {
            let slot = gauge.take(max).ok_or_else(|| full(all_taken.clone()))?;
            return Ok(Shared {
                _slot: slot,
                share: None,
            });
        };
        let share = max / SHARE;
        let mut all = self.shares.lock().unwrap_or_else(|p| p.into_inner());
        let held = all.get(name).copied().unwrap_or_default();
        let count = match kind {
            Bounded::Streams => held.streams,
            Bounded::Ops => held.ops,
        };
        if count >= share {
            return Err(full(format!(
                "{name} already holds {share} of this host's {max} {what}, its share; wait for one to end"
            )));
        }
        let slot = gauge.take(max).ok_or_else(|| full(all_taken))?;
        let held = all.entry(name.to_string()).or_default();
        match kind {
            Bounded::Streams => held.streams += 1,
            Bounded::Ops => held.ops += 1,
        }
        Ok(Shared {
            _slot: slot,
            share: Some((&self.shares, name.to_string(), kind)),
        })
    }

    pub fn turn_started(&self) {
        self.active_turns.add();
    }

    pub fn turn_finished(&self) {
        self.active_turns.release();
        if self.is_draining() {
            self.wake_all_streams();
        }
    }

    pub fn active_turns(&self) -> usize {
        self.active_turns.count()
    }

    fn wake_all_streams(&self) {
        for cell in self.cells() {
            cell.wake();
        }
    }

    pub fn status(&self) -> crate::host_api::ops::HostState {
        crate::host_api::ops::HostState {
            state: if self.is_draining() {
                "draining"
            } else {
                "ready"
            }
            .into(),
            host_epoch: self.epoch.clone(),
            active_turns: self.active_turns() as u64,
            open_sessions: self.sessions_lock().len() as u64,
            attached_clients: self.attached.count() as u64,
            uptime_ms: self.started.elapsed().as_millis() as u64,
        }
    }

    /// Stops admitting work, lets running turns finish until `drain`, stops the rest, ends the
    /// streams and stops the server. Idempotent.
    pub fn begin_shutdown(self: &Arc<Self>, drain: Duration) {
        if self.draining.swap(true, Ordering::AcqRel) {
            return;
        }
        log::info!("shutting down (drain {} ms)", drain.as_millis());
        // New adapters must not find a host that is going away.
        owner::unpublish(&self.data_dir);
        self.attached.release_all();
        let host = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("host-shutdown".into())
            .spawn(move || {
                host.wake_all_streams();
                let deadline = Instant::now() + drain;
                host.active_turns.wait_drained(deadline);
                if host.active_turns() > 0 {
                    log::warn!(
                        "stopping {} turn(s) still running after the drain period",
                        host.active_turns()
                    );
                    for cell in host.cells() {
                        if let Some(a) = &cell.lock().active {
                            a.cancel.cancel();
                        }
                    }
                    host.active_turns
                        .wait_drained(Instant::now() + Duration::from_secs(5));
                }
                host.wake_all_streams();
                // Every stream writes its stream_end line and ends (bounded: a reader that
                // does not read is not waited for long).
                host.streams
                    .wait_drained(Instant::now() + Duration::from_secs(1));
                if let Some(server) = host.server.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    server.unblock();
                }
            });
        if let Err(e) = spawned {
            log::error!("cannot start the shutdown thread: {e}");
            std::process::exit(0);
        }
    }
}

pub fn limits() -> Value {
    server::limit_values()
}

/// `prefix_` + 16 random hex digits.
pub fn random_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_hex(8))
}

pub struct HostOptions {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub watch_stdin: bool,
    /// The token is the first line of stdin (the embedded host), not `MAKA_HOST_TOKEN`.
    pub token_stdin: bool,
    pub tunables: crate::tunables::Tunables,
    /// `--private`: more paths hidden from principals' sessions ([`Host::private`]).
    pub private: Vec<PathBuf>,
}

/// A bound, ready host: serve it with [`serve`].
pub struct Bound {
    pub host: Arc<Host>,
    pub server: Arc<crate::http::Server>,
    pub port: u16,
}

/// Why a host could not start: one line for the person, and the exit status.
#[derive(Debug)]
pub struct BindError {
    pub message: String,
    /// 2: a usage error; [`owner::EXIT_DATA_DIR_BUSY`]: another host serves the data dir;
    /// 1: anything else.
    pub exit: i32,
}

impl BindError {
    fn other(message: String) -> BindError {
        BindError { message, exit: 1 }
    }
}

/// Takes the data dir (its lock first: one host per data dir), reaps what a crashed
/// predecessor left, loads the sessions, reads the provider configuration, binds the listener
/// and publishes how to reach it. Errors are one-line messages for the user.
pub fn bind(
    listen: SocketAddr,
    data_dir: &std::path::Path,
    token: String,
    tunables: crate::tunables::Tunables,
    private: &[PathBuf],
) -> Result<Bound, BindError> {
    if !listen.ip().is_loopback() {
        return Err(BindError {
            message: format!("--listen must be a loopback address (127.0.0.1, ::1), got {listen}"),
            exit: 2,
        });
    }
    crate::secrets::register(&token);
    store::create_private_dir_all(data_dir).map_err(|e| {
        BindError::other(format!("cannot use data dir {}: {e}", data_dir.display()))
    })?;
    let lock = owner::lock(data_dir).map_err(|message| BindError {
        message,
        exit: owner::EXIT_DATA_DIR_BUSY,
    })?;
    let store = Store::open(data_dir, tunables.fsync).map_err(|e| {
        BindError::other(format!("cannot use data dir {}: {e}", data_dir.display()))
    })?;
    // Only the owner (the lock above) may clean: no other host writes here now.
    store.remove_stale_temps();
    // The data dir holds transcripts, keys' echoes, the token: its user's alone, whatever an
    // older build (or a copy) left.
    let (files, folders) = store::tighten_modes(data_dir);
    if files + folders > 0 {
        log::warn!(
            "data dir {}: {files} file(s) and {folders} folder(s) were readable by other users; made private (0600 / 0700)",
            data_dir.display()
        );
    }
    let server = Arc::new(
        crate::http::Server::bind(listen, token.clone())
            .map_err(|e| BindError::other(format!("cannot listen on {listen}: {e}")))?,
    );
    let port = server.port();
    let sessions = table::SessionTable::on_disk(&store);
    let providers = Providers::from_env();
    if providers.is_empty() {
        log::warn!("{}", models::NO_PROVIDER_HELP);
    }
    let host = Arc::new(Host {
        epoch: format!("he_{}", random_hex(8)),
        host_id: format!("h_{}", random_hex(6)),
        token,
        port: AtomicU16::new(port),
        listen_ip: listen.ip(),
        memory: memory::Memory::open(data_dir, store.fsync()),
        permissions: permissions::Rules::open(data_dir, store.fsync()),
        artifacts: artifacts::Artifacts::new(store.fsync()),
        store,
        providers: std::sync::RwLock::new(Arc::new(providers)),
        started: Instant::now(),
        sessions: Mutex::new(sessions),
        catalog_revision: AtomicU64::new(1),
        draining: AtomicBool::new(false),
        active_turns: Gauge::default(),
        streams: Gauge::default(),
        ops_inflight: Gauge::default(),
        shares: Mutex::default(),
        server: Mutex::new(Some(Arc::clone(&server))),
        attached: owner::Attached::default(),
        data_dir: data_dir.to_path_buf(),
        private: private_paths(data_dir, private),
        tunables,
        _lock: lock,
    });
    let discovery = crate::host_api::ops::Discovery {
        pid: std::process::id(),
        port,
        listen: listen.ip().to_string(),
        token: host.token.clone(),
        host_epoch: host.epoch.clone(),
        protocol: crate::host_api::wire::PROTOCOL_VERSION,
    };
    if let Err(e) = owner::publish(data_dir, &discovery) {
        log::warn!(
            "cannot publish {}: {e}; other adapters will not find this host",
            owner::DISCOVERY_FILE
        );
    }
    log::info!(
        "host {} listening on {}, data dir {}, {} session(s)",
        host.epoch,
        std::net::SocketAddr::new(listen.ip(), port),
        data_dir.display(),
        host.sessions_lock().len()
    );
    Ok(Bound { host, server, port })
}

/// Serves requests until the host shuts down.
pub fn serve(bound: Bound) {
    server::serve(Arc::clone(&bound.host), bound.server);
    log::info!("host {} stopped", bound.host.epoch);
}

/// glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB), so after
/// one big prompt every later block of that size comes from a thread's arena and stays resident
/// when freed: a 10 MiB prompt left the host at 98 MiB peak RSS for 53 MiB of live heap. A
/// fixed threshold keeps large blocks mmapped, returned when freed (57 MiB); the streaming path
/// allocates only small blocks, which this does not touch.
fn return_large_frees_to_the_os() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before the host starts
    // its threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// What principals' sessions are kept from ([`Host::private`]): the data dir (sessions,
/// transcripts, the host's token and discovery file, rules, memory), the config (provider keys:
/// `maka-acp`'s own config folder, or the file `MAKA_CONFIG` names, which may sit in a folder
/// shared with other things), and `extra`. Resolved as a tool's path is (links followed), so
/// that another name for them is caught too.
fn private_paths(data_dir: &std::path::Path, extra: &[PathBuf]) -> Vec<PathBuf> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let config = crate::config::config_file_path().and_then(|file| {
        let named = std::env::var_os("MAKA_CONFIG").is_some_and(|v| !v.is_empty());
        if named {
            Some(file)
        } else {
            file.parent().map(std::path::Path::to_path_buf)
        }
    });
    let mut out: Vec<PathBuf> = Vec::new();
    for p in std::iter::once(data_dir)
        .chain(config.as_deref())
        .chain(extra.iter().map(PathBuf::as_path))
    {
        let real = tools::fs::resolve(&cwd, p);
        // `/` hides everything: a mistake, not a private path.
        if real != std::path::Path::new("/") && !out.contains(&real) {
            out.push(real);
        }
    }
    out
}

impl Host {
    /// What a session of `owner` is kept from: nothing for the machine's user (no owner), the
    /// host's private paths for a principal.
    pub fn confinement(&self, owner: Option<&str>) -> sandbox::Confinement {
        match owner {
            Some(_) => sandbox::Confinement::hiding(self.private.clone()),
            None => sandbox::Confinement::default(),
        }
    }
}

/// The shortest bearer token the host accepts: anything shorter can be guessed.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Runs the host until it is told to shut down or its stdin closes. Returns the exit code.
pub fn run(opts: HostOptions) -> i32 {
    return_large_frees_to_the_os();
    let token = if opts.token_stdin {
        token_from_stdin()
    } else {
        std::env::var("MAKA_HOST_TOKEN").ok()
    };
    let token = match token {
        Some(t) if !t.trim().is_empty() => t.trim().to_string(),
        _ if opts.token_stdin => {
            eprintln!("maka-acp host: --token-stdin, but stdin's first line holds no token");
            return 2;
        }
        _ => {
            eprintln!("maka-acp host: set MAKA_HOST_TOKEN (the bearer token clients must send)");
            return 2;
        }
    };
    if token.len() < MIN_TOKEN_BYTES {
        eprintln!(
            "maka-acp host: MAKA_HOST_TOKEN is {} bytes; use at least {MIN_TOKEN_BYTES} random ones, e.g. $(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \\n')",
            token.len()
        );
        return 2;
    }
    let bound = match bind(
        opts.listen,
        &opts.data_dir,
        token,
        opts.tunables,
        &opts.private,
    ) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("maka-acp host: {}", e.message);
            return e.exit;
        }
    };
    let ready = crate::host_api::ops::Ready {
        port: bound.port,
        host_epoch: bound.host.epoch.clone(),
        pid: std::process::id(),
        protocol: crate::host_api::wire::PROTOCOL_VERSION,
    };
    let ready = serde_json::to_string(&ready).unwrap_or_default();
    {
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{ready}").and_then(|_| out.flush()).is_err() {
            log::warn!("cannot write the ready line to stdout");
        }
    }
    // Here, not in `bind`: the reaper is this executable in another role, which only the
    // `maka-acp` binary has (a program embedding the host, such as a benchmark, has not).
    // After `bind`, because only the data dir's owner may reap what was recorded there. After
    // the ready line, so that the adapter's connecting overlaps its start; before `serve`, so
    // that no request (none can start a process before it is served) precedes it.
    reaper::start(&opts.data_dir);
    if opts.watch_stdin {
        let h = Arc::clone(&bound.host);
        let _ = std::thread::Builder::new()
            .name("host-stdin".into())
            .spawn(move || {
                let mut sink = [0u8; 1024];
                let mut stdin = std::io::stdin();
                while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
                let others = h.attached.count();
                if others > 0 {
                    log::info!("stdin closed; {others} other adapter(s) still use this host: serving until they leave");
                    h.attached.wait_unused();
                } else {
                    log::info!("stdin closed");
                }
                h.begin_shutdown(Duration::from_secs(2));
            });
    }
    let data_dir = bound.host.data_dir.clone();
    serve(bound);
    owner::unpublish(&data_dir);
    // What the host started or adopted does not outlive it (the reaper guards a crash).
    reaper::end_children();
    0
}

/// The first line of stdin, at most 4 KiB (the rest of stdin is the EOF watch's).
fn token_from_stdin() -> Option<String> {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .take(4096)
        .read_line(&mut line)
        .ok()?;
    Some(line)
}
