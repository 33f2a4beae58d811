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
mod route;
mod routes;
mod stream;
mod ws;

use crate::acp::host_link::{HostLink, Started};
use crate::acp::initialize::ClientCapabilities;
use crate::acp::types::AuthMethod;
use crate::acp::{AdapterConfig, Dialect, LocalHost};
use crate::jsonrpc::{lock, ResponseError};
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
    tombstones: Mutex<VecDeque<(String, String)>>,
}

impl Registry {
    fn get(&self, id: &str) -> Result<Arc<AcpConn>, String> {
        if let Some(c) = lock(&self.conns).get(id) {
            return match c.closed() {
                None => Ok(Arc::clone(c)),
                Some(why) => Err(format!(
                    "Unknown Acp-Connection-Id: the connection was closed ({why})"
                )),
            };
        }
        let why = lock(&self.tombstones)
            .iter()
            .find(|(t, _)| t == id)
            .map(|(_, why)| {
                format!("Unknown Acp-Connection-Id: the connection was closed ({why})")
            });
        Err(why.unwrap_or_else(|| "Unknown Acp-Connection-Id".into()))
    }

    fn remove(&self, id: &str, why: &str) -> Option<Arc<AcpConn>> {
        let conn = lock(&self.conns).remove(id)?;
        let mut t = lock(&self.tombstones);
        if t.len() >= TOMBSTONES {
            t.pop_front();
        }
        t.push_back((id.to_string(), why.to_string()));
        drop(t);
        conn.close(why);
        Some(conn)
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

    /// Opens a connection (its agent started, speaking `dialect`) and registers it.
    fn open(
        &self,
        websocket: bool,
        dialect: Dialect,
    ) -> Result<(Arc<AcpConn>, crossbeam_channel::Receiver<Arc<str>>), String> {
        if lock(&self.registry.conns).len() >= MAX_CONNECTIONS {
            return Err(format!(
                "this server already serves {MAX_CONNECTIONS} ACP connections; close one (DELETE /acp) or try again later"
            ));
        }
        let registry = Arc::downgrade(&self.registry);
        let config = AdapterConfig {
            dialect,
            ..self.config.clone()
        };
        let (conn, initial) = AcpConn::start(
            self.new_id(),
            config,
            Arc::clone(&self.local),
            websocket,
            None,
            move |id, why| {
                if let Some(r) = registry.upgrade() {
                    r.remove(id, why);
                }
            },
        )
        .map_err(|e| format!("cannot start the connection's threads: {e}"))?;
        lock(&self.registry.conns).insert(conn.id.clone(), Arc::clone(&conn));
        Ok((conn, initial))
    }
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
pub fn run(options: ServeOptions) -> i32 {
    if !options.listen.ip().is_loopback() && !options.tls_proxied {
        eprintln!("maka-acp serve: --listen {} is not a loopback address; serve plain HTTP only to this machine, or put a TLS proxy in front and say so with --tls-proxied (docs/deployment.md)", options.listen);
        return 2;
    }
    let data_dir = options
        .config
        .data_dir
        .clone()
        .unwrap_or_else(crate::tunables::default_data_dir);
    let (token, token_path) = match auth::token(options.token_file.as_deref(), &data_dir) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("maka-acp serve: {e}");
            return 2;
        }
    };
    let busy = format!(
        "Service Unavailable: this server already holds {MAX_SOCKETS} open sockets (or as many as its open-file limit allows); close one or try again later"
    );
    let server = match crate::http::Server::bind(options.listen, token) {
        Ok(s) => s
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
    });
    let shared = Arc::new(Server {
        registry: Arc::clone(&registry),
        config: options.config,
        local,
        tls_proxied: options.tls_proxied,
        idle_timeout: options.idle_timeout,
        body_deadline: options.body_deadline,
        ring,
    });
    let idle = options.idle_timeout;
    let reaper = Arc::downgrade(&registry);
    let _ = crate::threads::spawn("serve-reaper", move || reap_idle(reaper, idle));
    let addr = SocketAddr::new(options.listen.ip(), server.port());
    eprintln!(
        "maka-acp serve: ACP on http://{addr}/acp (Streamable HTTP and WebSocket); bearer token in {}",
        token_path.display()
    );
    let route: crate::http::Route =
        Arc::new(move |request, exchange| routes::handle(&shared, request, exchange));
    server.serve(route);
    0
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
        for c in conns.iter().filter(|c| !c.websocket && c.idle_for(idle)) {
            let why = format!(
                "no event stream and no request for {} s; its running turns were cancelled, its sessions stay in the host (session/load them)",
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
