//! `maka-acp serve`: ACP over Streamable HTTP and WebSocket on one endpoint (`/acp`),
//! wire-compatible with the official TypeScript SDK's transports (2.4.0,
//! `experimental/server`). Each connection is one ACP connection to the same agent core the
//! stdio transport drives; all of them share one Runtime Host (the embedded one, started once,
//! or `--host-url`). Each speaks the dialect the request that opened it chose
//! ([`Server::dialect_of`]: `/acp?dialect=maka`, else the server's, `serve --acp`: Maka's).
//!
//! Threads per role, no async runtime: the accept loop and one thread per socket (the one
//! bounded HTTP/1.1 server, `crate::http`: its exchanges one after another, an event stream,
//! or a WebSocket's reader; a WebSocket also has a writer), one agent per connection (its
//! dispatcher, reader and writer threads, and its workers and session threads as on stdio), a
//! reaper closing idle connections.

mod auth;
mod conn;
mod peek;
mod route;
mod routes;
mod stream;
mod ws;

use crate::acp::host_link::{HostLink, Started};
use crate::acp::initialize::ClientCapabilities;
use crate::acp::types::AuthMethod;
use crate::acp::{AdapterConfig, Dialect, LocalHost};
use crate::http::{KeySet, Keys, Principal};
use crate::jsonrpc::{lock, ResponseError};
pub use auth::TokensRules;
use conn::AcpConn;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// ACP connections served at once.
pub const MAX_CONNECTIONS: usize = 512;
/// Open sockets (HTTP exchanges, event streams, WebSockets) at once.
const MAX_SOCKETS: usize = 4 * MAX_CONNECTIONS;
/// Closed connections remembered, so that a late request learns why (404 with the reason).
const TOMBSTONES: usize = 1024;

pub struct ServeOptions {
    pub listen: SocketAddr,
    pub token_file: Option<PathBuf>,
    /// `--tokens-file`: one principal a line, re-read on SIGHUP (exclusive with `token_file`).
    pub tokens_file: Option<PathBuf>,
    /// The caps of a principal whose line sets none (`--principal-connections`,
    /// `--principal-sessions`, `--principal-requests`), and `--principal-header`.
    pub principals: auth::TokensRules,
    /// `--resource-metadata`: the URL a 401's `WWW-Authenticate` points to (RFC 9728).
    pub resource_metadata: Option<String>,
    pub tls_proxied: bool,
    pub config: AdapterConfig,
    /// How long a connection may have no stream and send nothing before it is closed (its
    /// turns cancelled; its sessions stay in the host).
    pub idle_timeout: Duration,
    /// `--route-peers` (nginx's upstream servers, in its order) and `--route-self`.
    pub route: Option<(Vec<String>, String)>,
    /// How long one request body (from the end of its head) or one WebSocket frame (from its
    /// first byte) may take to arrive whole (`MAKA_SERVE_BODY_DEADLINE_MS`).
    pub body_deadline: Duration,
}

/// The process's connections.
pub struct Registry {
    conns: Mutex<HashMap<String, Arc<AcpConn>>>,
    tombstones: Mutex<VecDeque<Tombstone>>,
    /// What each principal holds (by name), against its caps.
    usage: Mutex<HashMap<Option<String>, Usage>>,
    /// Each named principal as its connections' agents see it (its share of open sessions,
    /// counted across them), while one of them lives.
    agents: Mutex<HashMap<String, std::sync::Weak<crate::acp::Principal>>>,
}

/// A closed connection, remembered so that its own client's late request learns why.
struct Tombstone {
    id: String,
    why: String,
    principal: Option<Arc<Principal>>,
}

/// Whether a connection opened by `owner` is the requesting principal `who`'s (by name: a
/// principal a proxy names comes back under the same name). A connection with no principal
/// (only in unit tests) is anyone's.
pub fn owned_by(owner: Option<&Principal>, who: Option<&Principal>) -> bool {
    match (owner, who) {
        (Some(a), Some(b)) => a.name == b.name,
        (None, _) => true,
        (Some(_), None) => false,
    }
}

/// What one principal holds now.
#[derive(Default)]
struct Usage {
    /// ACP connections open (or opening).
    connections: usize,
    /// Requests being handled.
    requests: usize,
}

/// Which of a principal's caps.
#[derive(Clone, Copy)]
enum Cap {
    Connections,
    Requests,
}

/// A request being handled, counted against its principal's cap until dropped.
pub struct InFlight<'a> {
    registry: &'a Registry,
    principal: Option<Arc<Principal>>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(p) = &self.principal {
            self.registry.give_back(p, Cap::Requests);
        }
    }
}

impl Registry {
    /// Connection `id` as `who` (the requesting principal) may see it: another principal's,
    /// open or closed, is to it no connection at all — the same answer as an id never used;
    /// only its own closed connection tells why it closed.
    fn get(&self, id: &str, who: Option<&Principal>) -> Result<Arc<AcpConn>, String> {
        const UNKNOWN: &str = "Unknown Acp-Connection-Id";
        if let Some(c) = lock(&self.conns).get(id) {
            if !owned_by(c.principal.as_deref(), who) {
                return Err(UNKNOWN.into());
            }
            return match c.closed() {
                None => Ok(Arc::clone(c)),
                Some(why) => Err(format!("{UNKNOWN}: the connection was closed ({why})")),
            };
        }
        let why = lock(&self.tombstones)
            .iter()
            .find(|t| t.id == id && owned_by(t.principal.as_deref(), who))
            .map(|t| format!("{UNKNOWN}: the connection was closed ({})", t.why));
        Err(why.unwrap_or_else(|| UNKNOWN.into()))
    }

    /// Whether connection `id`, open or closed, is another principal's than `who`.
    fn is_anothers(&self, id: &str, who: Option<&Principal>) -> bool {
        if let Some(c) = lock(&self.conns).get(id) {
            return !owned_by(c.principal.as_deref(), who);
        }
        lock(&self.tombstones)
            .iter()
            .any(|t| t.id == id && !owned_by(t.principal.as_deref(), who))
    }

    /// Takes one of `principal`'s `cap` (`Err`: its cap, all taken). A principal without that
    /// cap is not counted.
    fn take(&self, principal: &Principal, cap: Cap) -> Result<(), usize> {
        let Some(max) = limit(principal, cap) else {
            return Ok(());
        };
        let mut usage = lock(&self.usage);
        let held = usage.entry(principal.name.clone()).or_default();
        let count = match cap {
            Cap::Connections => &mut held.connections,
            Cap::Requests => &mut held.requests,
        };
        if *count >= max {
            return Err(max);
        }
        *count += 1;
        Ok(())
    }

    /// Gives back what [`Registry::take`] took (a principal holding nothing is forgotten).
    fn give_back(&self, principal: &Principal, cap: Cap) {
        if limit(principal, cap).is_none() {
            return;
        }
        let mut usage = lock(&self.usage);
        let Some(held) = usage.get_mut(&principal.name) else {
            return;
        };
        let count = match cap {
            Cap::Connections => &mut held.connections,
            Cap::Requests => &mut held.requests,
        };
        *count = count.saturating_sub(1);
        if held.connections == 0 && held.requests == 0 {
            usage.remove(&principal.name);
        }
    }

    /// The principal a new connection's agent acts for: the one its other connections share
    /// (so its sessions are counted together), with the sessions cap as now read; none for
    /// the machine's user.
    fn agent_principal(&self, principal: &Principal) -> Option<Arc<crate::acp::Principal>> {
        let name = principal.name.as_ref()?;
        let max = principal.limits.sessions.unwrap_or(usize::MAX);
        let mut agents = lock(&self.agents);
        agents.retain(|_, p| p.strong_count() > 0);
        if let Some(p) = agents.get(name).and_then(std::sync::Weak::upgrade) {
            p.set_max_sessions(max);
            return Some(p);
        }
        let p = Arc::new(crate::acp::Principal::new(name, max));
        agents.insert(name.clone(), Arc::downgrade(&p));
        Some(p)
    }

    /// Counts a request of `principal` against its cap while the guard lives; `Err`: why not.
    pub fn request_begins(&self, principal: &Arc<Principal>) -> Result<InFlight<'_>, String> {
        match self.take(principal, Cap::Requests) {
            Ok(()) => Ok(InFlight {
                registry: self,
                principal: Some(Arc::clone(principal)),
            }),
            Err(max) => Err(format!(
                "Too Many Requests: {} already has {max} requests in progress, its cap (requests= in the tokens file, or --principal-requests); wait for one to finish",
                principal.shown()
            )),
        }
    }

    /// Closes the connections whose principal `keys` no longer holds (its token was withdrawn).
    fn close_withdrawn(&self, keys: &KeySet) -> usize {
        let gone: Vec<String> = lock(&self.conns)
            .values()
            .filter(|c| c.principal.as_ref().is_some_and(|p| !keys.holds(p)))
            .map(|c| c.id.clone())
            .collect();
        for id in &gone {
            self.remove(
                id,
                "its principal's token was withdrawn from the tokens file",
            );
        }
        gone.len()
    }

    fn remove(&self, id: &str, why: &str) -> Option<Arc<AcpConn>> {
        let conn = lock(&self.conns).remove(id)?;
        if let Some(p) = &conn.principal {
            self.give_back(p, Cap::Connections);
        }
        let mut t = lock(&self.tombstones);
        if t.len() >= TOMBSTONES {
            t.pop_front();
        }
        t.push_back(Tombstone {
            id: id.to_string(),
            why: why.to_string(),
            principal: conn.principal.clone(),
        });
        drop(t);
        conn.close(why);
        Some(conn)
    }
}

/// A principal's cap of this kind.
fn limit(principal: &Principal, cap: Cap) -> Option<usize> {
    match cap {
        Cap::Connections => principal.limits.connections,
        Cap::Requests => principal.limits.requests,
    }
}

/// What every exchange needs.
pub struct Server {
    pub registry: Arc<Registry>,
    pub config: AdapterConfig,
    pub local: Arc<dyn LocalHost>,
    pub tls_proxied: bool,
    /// How long a connection may show no sign of its client (see [`ServeOptions`]).
    pub idle_timeout: Duration,
    /// How long one WebSocket frame may take to arrive whole (see [`ServeOptions`]).
    pub body_deadline: Duration,
    /// The proxy's hash ring, when several processes share one address.
    ring: Option<route::Ring>,
    /// `WWW-Authenticate`'s value on a 401.
    pub challenge: String,
    /// The tokens the server accepts now (SIGHUP replaces them).
    keys: Arc<Keys>,
}

impl Server {
    /// A new connection id: 160 random bits, drawn again until the proxy's ring sends it here.
    fn new_id(&self) -> String {
        for _ in 0..10_000 {
            let id = crate::host_api::random_hex(20);
            if self.ring.as_ref().is_none_or(|r| r.is_mine(&id)) {
                return id;
            }
        }
        log::warn!("no connection id routed to this process in 10000 draws; check --route-peers");
        crate::host_api::random_hex(20)
    }

    /// The keepalive interval: an idle event stream gets a comment, a WebSocket a ping, at
    /// least this often (`MAKA_SERVE_KEEPALIVE_MS`).
    pub fn keepalive(&self) -> Duration {
        self.config.tunables.serve_keepalive
    }

    /// What a connection's `initialize` answer advertises of the transport, in
    /// `agentCapabilities._meta["acp/transport"]` (ACP v1 has no field; the resumable-transport
    /// draft's `capabilities.transport` shape): the keepalive interval, and how much is kept
    /// for a stream that resumes with a cursor (`Last-Event-ID`, or a WebSocket's
    /// `stream/resume`) and for how long a connection waits for it.
    fn advertised(&self) -> serde_json::Value {
        let keepalive = u64::try_from(self.keepalive().as_millis()).unwrap_or(u64::MAX);
        serde_json::json!({
            "resumable": {
                "retentionMessages": stream::REPLAY_WINDOW_MESSAGES,
                "retentionSeconds": self.idle_timeout.as_secs().max(1),
            },
            "keepaliveIntervalMs": keepalive,
        })
    }

    /// The dialect of the connection a request opens (the `initialize` POST, the WebSocket
    /// upgrade): `?dialect=maka` (Apache Maka's, as `--acp` on stdio) or `?dialect=ours` in
    /// its target, else the server's (`serve --acp`: Maka's). Chosen once: later requests'
    /// query strings do not change it.
    pub fn dialect_of(&self, target: &str) -> Result<Dialect, String> {
        let query = target.split_once('?').map_or("", |(_, q)| q);
        let asked = query
            .split('&')
            .filter_map(|pair| pair.strip_prefix("dialect="))
            .next_back();
        match asked {
            None => Ok(self.config.dialect),
            Some("maka") => Ok(Dialect::Maka),
            Some("ours") => Ok(Dialect::Ours),
            Some(other) => Err(format!(
                "Bad Request: dialect={other:.40} is not one; use dialect=maka (Apache Maka's, as `maka --acp`) or dialect=ours"
            )),
        }
    }

    /// Opens a connection of `principal` (its agent started, speaking `dialect`) and
    /// registers it.
    fn open(
        &self,
        websocket: bool,
        dialect: Dialect,
        principal: Option<Arc<Principal>>,
    ) -> Result<(Arc<AcpConn>, crossbeam_channel::Receiver<Arc<str>>), Refusal> {
        if lock(&self.registry.conns).len() >= MAX_CONNECTIONS {
            return Err(Refusal::Busy(format!(
                "this server already serves {MAX_CONNECTIONS} ACP connections; close one (DELETE /acp) or try again later"
            )));
        }
        if let Some(p) = &principal {
            if let Err(max) = self.registry.take(p, Cap::Connections) {
                return Err(Refusal::AtCap(format!(
                    "Too Many Requests: {} already has {max} ACP connections open, its cap (connections= in the tokens file, or --principal-connections); close one (DELETE /acp) first",
                    p.shown()
                )));
            }
        }
        let opened = self.start(websocket, dialect, principal.clone());
        if let Err(Refusal::Withdrawn(_)) = &opened {
            // `remove` gave the connection back already.
            return opened;
        }
        if opened.is_err() {
            if let Some(p) = &principal {
                self.registry.give_back(p, Cap::Connections);
            }
        }
        opened
    }

    fn start(
        &self,
        websocket: bool,
        dialect: Dialect,
        principal: Option<Arc<Principal>>,
    ) -> Result<(Arc<AcpConn>, crossbeam_channel::Receiver<Arc<str>>), Refusal> {
        let registry = Arc::downgrade(&self.registry);
        let config = AdapterConfig {
            dialect,
            ..self.config.clone()
        };
        let agent = principal
            .as_deref()
            .and_then(|p| self.registry.agent_principal(p));
        let (conn, initial) = AcpConn::start(
            self.new_id(),
            config,
            Arc::clone(&self.local),
            conn::Profile {
                websocket,
                advertised: self.advertised(),
            },
            agent,
            principal,
            move |id, why| {
                if let Some(r) = registry.upgrade() {
                    r.remove(id, why);
                }
            },
        )
        .map_err(|e| Refusal::Busy(format!("cannot start the connection's threads: {e}")))?;
        lock(&self.registry.conns).insert(conn.id.clone(), Arc::clone(&conn));
        // A token withdrawn (SIGHUP) after this request was admitted: the reload's sweep of
        // the connections ran before this one was among them, so it is closed here (the
        // reload replaces the keys before it sweeps, and this reads them after the insert).
        if let Some(p) = &conn.principal {
            if !self.keys.current().holds(p) {
                let why = "its principal's token was withdrawn from the tokens file";
                self.registry.remove(&conn.id, why);
                return Err(Refusal::Withdrawn(format!("Unauthorized: {why}")));
            }
        }
        Ok((conn, initial))
    }
}

/// Why a connection was not opened.
pub enum Refusal {
    /// The server is full, or could not start it (503).
    Busy(String),
    /// Its principal holds all the connections its cap allows (429).
    AtCap(String),
    /// Its principal's token was withdrawn while the request was read (401).
    Withdrawn(String),
}

/// The one Runtime Host of this process: the embedded host started once (on the first session
/// method of any connection) and shared by every connection, each of which sees it as an
/// external host it must not stop.
struct SharedHost {
    link: HostLink,
    local: Arc<dyn LocalHost>,
}

impl LocalHost for SharedHost {
    /// A connection asks when it has no host: at its first session method, or after it found
    /// its host gone (a call failed and the health check too). That forgot only the
    /// connection's copy: the shared host is checked here, and one that does not answer is
    /// forgotten (stopped) in the shared link too, so the next start replaces it for everyone.
    fn start(&self, _: &AdapterConfig) -> Result<Started, ResponseError> {
        let mut connected = self.link.get()?;
        if !connected.is_alive() {
            log::warn!("the shared Runtime Host does not answer; starting another");
            connected.forget();
            connected = self.link.get()?;
        }
        Ok(Started {
            connected,
            child: None,
            attach: None,
        })
    }
    fn provider_configured(&self) -> bool {
        self.local.provider_configured()
    }
    fn auth_methods(&self, caps: &ClientCapabilities) -> Vec<AuthMethod> {
        self.local.auth_methods(caps)
    }
    fn auth_required(&self) -> ResponseError {
        self.local.auth_required()
    }
    fn can_log_out(&self) -> bool {
        self.local.can_log_out()
    }
    fn log_out(&self) -> Result<bool, String> {
        self.local.log_out()
    }
}

/// Runs the server until the process is stopped; the exit code.
pub fn run(mut options: ServeOptions) -> i32 {
    if !options.listen.ip().is_loopback() && !options.tls_proxied {
        eprintln!("maka-acp serve: --listen {} is not a loopback address; serve plain HTTP only to this machine, or put a TLS proxy in front and say so with --tls-proxied (docs/deployment.md)", options.listen);
        return 2;
    }
    let data_dir = options
        .config
        .data_dir
        .clone()
        .unwrap_or_else(crate::tunables::default_data_dir);
    // Before any thread starts (they inherit the mask): SIGHUP is taken by one thread of
    // ours (`watch_sighup`), never by its default action, which ends the process.
    let hangups = block_sighup();
    let (keys, shown) = match keys_of(&options, &data_dir) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("maka-acp serve: {e}");
            return 2;
        }
    };
    let keys = Arc::new(Keys::new(keys));
    // The tokens are the host's private data: hidden from every principal's session (the
    // data dir, where the one-token file lives by default, is hidden anyway).
    options.config.private.extend(
        [&options.tokens_file, &options.token_file]
            .into_iter()
            .flatten()
            .cloned(),
    );
    let busy = format!(
        "Service Unavailable: this server already holds {MAX_SOCKETS} open sockets (or as many as its open-file limit allows); close one or try again later"
    );
    let server = match crate::http::Server::bind(options.listen, String::new()) {
        Ok(s) => s
            .with_keys(Arc::clone(&keys))
            .with_max_connections(MAX_SOCKETS)
            .with_body_deadline(options.body_deadline)
            .with_busy_answer("text/plain", &busy),
        Err(e) => {
            eprintln!("maka-acp serve: cannot listen on {}: {e}", options.listen);
            return 1;
        }
    };
    let ring = match &options.route {
        Some((peers, me)) => match route::Ring::new(peers, me) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("maka-acp serve: {e}");
                return 2;
            }
        },
        None => None,
    };
    let embedded: Arc<dyn LocalHost> = Arc::new(crate::embedded::Embedded);
    let local: Arc<dyn LocalHost> = Arc::new(SharedHost {
        link: HostLink::new(options.config.clone(), Arc::clone(&embedded)),
        local: embedded,
    });
    let registry = Arc::new(Registry {
        conns: Mutex::default(),
        tombstones: Mutex::default(),
        usage: Mutex::default(),
        agents: Mutex::default(),
    });
    let challenge = match &options.resource_metadata {
        Some(url) => format!("Bearer resource_metadata=\"{url}\""),
        None => "Bearer".to_string(),
    };
    let shared = Arc::new(Server {
        registry: Arc::clone(&registry),
        config: options.config,
        local,
        tls_proxied: options.tls_proxied,
        idle_timeout: options.idle_timeout,
        body_deadline: options.body_deadline,
        ring,
        challenge,
        keys: Arc::clone(&keys),
    });
    if let Some(set) = hangups {
        let reload = Reload {
            file: options.tokens_file.clone(),
            rules: options.principals.clone(),
            keys,
            registry: Arc::downgrade(&registry),
        };
        let _ = crate::threads::spawn("serve-sighup", move || watch_sighup(set, reload));
    }
    let idle = options.idle_timeout;
    let reaper = Arc::downgrade(&registry);
    let _ = crate::threads::spawn("serve-reaper", move || reap_idle(reaper, idle));
    let addr = SocketAddr::new(options.listen.ip(), server.port());
    eprintln!("maka-acp serve: ACP on http://{addr}/acp (Streamable HTTP and WebSocket); {shown}");
    let route: crate::http::Route =
        Arc::new(move |request, exchange| routes::handle(&shared, request, exchange));
    server.serve(route);
    0
}

/// The tokens accepted, and how the start line names where they are.
fn keys_of(options: &ServeOptions, data_dir: &std::path::Path) -> Result<(KeySet, String), String> {
    if let Some(path) = &options.tokens_file {
        let set = auth::read_tokens_file(path, &options.principals)?;
        let shown = format!(
            "{} principals from {} (re-read on SIGHUP)",
            set.entries.len(),
            path.display()
        );
        return Ok((set, shown));
    }
    let (token, path) = auth::token(options.token_file.as_deref(), data_dir)?;
    Ok((
        KeySet::single(&token),
        format!("bearer token in {}", path.display()),
    ))
}

/// Blocks SIGHUP in this thread, and so in every thread it starts; the set to wait on (`None`:
/// it could not be blocked, and SIGHUP keeps its default action).
fn block_sighup() -> Option<libc::sigset_t> {
    // SAFETY: the set is initialized by sigemptyset before use; pthread_sigmask only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGHUP);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            log::warn!("cannot block SIGHUP: it will end the process as by default");
            return None;
        }
        Some(set)
    }
}

/// What a SIGHUP re-reads and replaces.
struct Reload {
    file: Option<PathBuf>,
    rules: auth::TokensRules,
    keys: Arc<Keys>,
    registry: std::sync::Weak<Registry>,
}

impl Reload {
    /// Re-reads the tokens file: a good one replaces the tokens (a removed one stops working
    /// at its next request, its connections are closed); a bad one is logged and the tokens
    /// stay as they were.
    fn run(&self) {
        let Some(path) = &self.file else {
            log::info!("SIGHUP ignored: there is no --tokens-file to re-read");
            return;
        };
        match auth::read_tokens_file(path, &self.rules) {
            Ok(set) => {
                let count = set.entries.len();
                self.keys.replace(set);
                let closed = match self.registry.upgrade() {
                    Some(r) => r.close_withdrawn(&self.keys.current()),
                    None => 0,
                };
                log::info!(
                    "SIGHUP: re-read the tokens file {}: {count} principals; {closed} connections of withdrawn tokens closed",
                    path.display()
                );
            }
            Err(e) => log::warn!("SIGHUP: {e}; the tokens stay as they were"),
        }
    }
}

/// Waits for SIGHUP (blocked in every thread: see [`block_sighup`]) and re-reads the tokens.
fn watch_sighup(set: libc::sigset_t, reload: Reload) {
    loop {
        let mut signal: libc::c_int = 0;
        // SAFETY: both pointers are to values we own, valid for the call.
        let waited = unsafe { libc::sigwait(&set, &mut signal) };
        if waited != 0 {
            log::warn!(
                "cannot wait for SIGHUP (error {waited}); the tokens file is no longer re-read"
            );
            return;
        }
        if signal == libc::SIGHUP {
            reload.run();
        }
    }
}

/// Closes connections that have had no stream and no request for `idle`.
fn reap_idle(registry: std::sync::Weak<Registry>, idle: Duration) {
    let tick = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        std::thread::sleep(tick);
        let Some(registry) = registry.upgrade() else {
            return;
        };
        let conns: Vec<Arc<AcpConn>> = lock(&registry.conns).values().cloned().collect();
        for c in conns.iter().filter(|c| c.idle_for(idle)) {
            let reopen = routes::reopen(Some(c.version())).0;
            let why = format!(
                "no event stream and no request for {} s; its running turns were cancelled, its sessions stay in the host ({reopen} them)",
                idle.as_secs()
            );
            registry.remove(&c.id, &why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acp::NoLocalHost;
    use crate::host_api::fake::Unreachable;

    /// A connection that found its host gone asks the shared one again: a shared host that
    /// does not answer is not handed out again but forgotten for every connection (the next
    /// start replaces it; here, with no host to start, the start fails).
    #[test]
    fn a_shared_host_that_does_not_answer_is_replaced_not_handed_out_again() {
        let shared = SharedHost {
            link: HostLink::connected(Arc::new(Unreachable { alive: false }), "e1"),
            local: Arc::new(NoLocalHost),
        };
        assert!(shared.start(&AdapterConfig::default()).is_err());
        assert!(shared.link.current().is_none());
    }
}
