//! The accept loop and each connection's loop: accept, admit ([`super::gate`]), read one
//! bounded request head ([`super::head`]), hand the request to the route, keep the connection
//! alive for the next one or close it. One thread per connection.

use super::exchange::{linger, Exchange, HEAD_TIMEOUT, LINGER_TIME};
use super::gate::{Admission, Busy, Conn, Gate, Slot, MAX_UNAUTHENTICATED, UNAUTHENTICATED_LIFE};
use super::head::{read_head, Request};
use super::keys::{Identity, KeySet, Keys};
use super::refusals::Refusal;
use std::io::{self, BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Sockets that have shown the token, served at once; a request with the token beyond them is
/// answered 503 and its socket closed.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a whole request body may take to arrive, from when the route starts reading it
/// (`maka-acp serve` takes it from `MAKA_SERVE_BODY_DEADLINE_MS`).
pub const BODY_DEADLINE: Duration = Duration::from_secs(60);
/// How long a whole request head may take: from accept for the first request, from its first
/// byte for a later one. A deadline, not a per-read timeout: a client trickling one byte at a
/// time cannot hold a slot longer than this.
const HEAD_DEADLINE: Duration = Duration::from_secs(10);
/// A client that does not read its answer for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Descriptors kept free below the open-file limit for what is not a client's socket (the
/// store's files, tool processes' pipes, the server's own threads): at least this many, or a
/// quarter of the limit.
const FD_RESERVE: usize = 64;
/// The first pause after a failed `accept`, and the longest.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(1));
/// One log line per this long while `accept` keeps failing.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(5);

/// What a server hands each request to (the routes).
pub type Route = Arc<dyn Fn(Request, &mut Exchange) + Send + Sync>;

pub struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    stopping: AtomicBool,
    keys: Arc<Keys>,
    max_connections: usize,
    max_unauthenticated: usize,
    body_deadline: Duration,
    busy: Busy,
}

impl Server {
    /// Listens on `addr`; `token` is the bearer token a request must carry to be served (the
    /// machine's user's: [`Server::with_keys`] accepts a set of principals instead).
    pub fn bind(addr: SocketAddr, token: String) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let (served, unauthenticated) = socket_budget(MAX_CONNECTIONS);
        Ok(Server {
            listener,
            addr,
            stopping: AtomicBool::new(false),
            keys: Arc::new(Keys::new(KeySet::single(&token))),
            max_connections: served,
            max_unauthenticated: unauthenticated,
            body_deadline: BODY_DEADLINE,
            busy: Busy {
                content_type: "application/json",
                body: br#"{"ok":false,"error":{"code":"capacity_exceeded","message":"too many open connections","retryable":true}}"#.to_vec(),
            },
        })
    }

    /// Serves at most `max` sockets with the token at once (`maka-acp serve` holds one per
    /// event stream), fewer when the open-file limit does not leave room for them.
    #[cfg(feature = "serve")]
    pub fn with_max_connections(mut self, max: usize) -> Server {
        (self.max_connections, self.max_unauthenticated) = socket_budget(max);
        self
    }

    /// Accepts the tokens of `keys` (swappable while it serves) instead of the one token.
    #[cfg(feature = "serve")]
    pub fn with_keys(mut self, keys: Arc<Keys>) -> Server {
        self.keys = keys;
        self
    }

    /// How long a whole request body may take to arrive.
    #[cfg(feature = "serve")]
    pub fn with_body_deadline(mut self, deadline: Duration) -> Server {
        self.body_deadline = deadline;
        self
    }

    /// What a request with the token is answered (503) when every slot is taken.
    #[cfg(feature = "serve")]
    pub fn with_busy_answer(mut self, content_type: &'static str, body: &str) -> Server {
        self.busy = Busy {
            content_type,
            body: body.as_bytes().to_vec(),
        };
        self
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Accepts connections until [`Server::unblock`], handing each request to `route`.
    pub fn serve(&self, route: Route) {
        let gate = Arc::new(Gate {
            keys: Arc::clone(&self.keys),
            authenticated: AtomicUsize::new(0),
            max_authenticated: self.max_connections,
            unauthenticated: Mutex::default(),
            max_unauthenticated: self.max_unauthenticated,
            body_deadline: self.body_deadline,
            busy: self.busy.clone(),
        });
        let mut backoff = AcceptBackoff::default();
        for conn in self.listener.incoming() {
            let accepted = Instant::now();
            if self.stopping.load(Ordering::Acquire) {
                break;
            }
            let stream = match conn {
                Ok(s) => s,
                Err(e) => {
                    // Out of descriptors (EMFILE) or memory: the pending connection stays in the
                    // backlog, so retrying at once would spin; wait for sockets to close.
                    backoff.failed(&e);
                    continue;
                }
            };
            backoff.succeeded();
            let id = gate.admit(stream.as_raw_fd(), accepted);
            let conn = Conn {
                gate: Arc::clone(&gate),
                slot: Slot::Unauthenticated(id),
                reader: BufReader::with_capacity(16 * 1024, stream),
            };
            let route = Arc::clone(&route);
            let spawned = std::thread::Builder::new()
                .name("host-conn".into())
                .spawn(move || connection(conn, accepted, &*route));
            if let Err(e) = spawned {
                log::error!("cannot start a connection thread: {e}");
            }
        }
    }

    /// Stops [`Server::serve`] (wakes its `accept` with a connection of our own).
    pub fn unblock(&self) {
        self.stopping.store(true, Ordering::Release);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

/// Pauses after a failed `accept` (growing while it keeps failing) and logs it at most once
/// per [`ACCEPT_LOG_EVERY`].
#[derive(Default)]
struct AcceptBackoff {
    delay: Option<Duration>,
    logged: Option<Instant>,
    unlogged: u64,
}

impl AcceptBackoff {
    fn failed(&mut self, e: &io::Error) {
        if self.logged.is_none_or(|t| t.elapsed() >= ACCEPT_LOG_EVERY) {
            log::warn!(
                "accept failed: {e} ({} more failures since the last report); waiting before the next accept",
                self.unlogged
            );
            self.logged = Some(Instant::now());
            self.unlogged = 0;
        } else {
            self.unlogged += 1;
        }
        let delay = self.delay.unwrap_or(ACCEPT_BACKOFF.0);
        std::thread::sleep(delay);
        self.delay = Some((delay * 3 / 2).min(ACCEPT_BACKOFF.1));
    }

    fn succeeded(&mut self) {
        self.delay = None;
    }
}

/// How many sockets with the token, and how many without, fit below the open-file limit (at
/// most `wanted` and [`MAX_UNAUTHENTICATED`]): those without get an eighth of the room.
fn socket_budget(wanted: usize) -> (usize, usize) {
    let room = socket_cap();
    let unauthenticated = MAX_UNAUTHENTICATED.min(room / 8).max(1);
    let served = wanted.min(room.saturating_sub(unauthenticated)).max(1);
    (served, unauthenticated)
}

/// How many client sockets fit below the open-file limit, after raising its soft value to the
/// hard one (a server should not stop at a shell's default of 1024 when it may hold more).
fn socket_cap() -> usize {
    let limit = raise_open_file_limit();
    limit.saturating_sub(FD_RESERVE.max(limit / 4)).max(1)
}

/// Raises `RLIMIT_NOFILE`'s soft limit to its hard one (at most 2^20); the soft limit after.
fn raise_open_file_limit() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write or read only the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    let wanted = lim.rlim_max.min(1 << 20);
    if lim.rlim_cur < wanted {
        let raised = libc::rlimit {
            rlim_cur: wanted,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = wanted;
        }
    }
    usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
}

fn connection(
    mut conn: Conn,
    accepted: Instant,
    route: &(dyn Fn(Request, &mut Exchange) + Send + Sync),
) {
    let remote = match conn.reader.get_ref().peer_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    let gate = Arc::clone(&conn.gate);
    let _ = conn.reader.get_ref().set_nodelay(true);
    let _ = conn.reader.get_ref().set_write_timeout(Some(WRITE_TIMEOUT));
    let _ = conn.reader.get_ref().set_read_timeout(Some(HEAD_TIMEOUT));
    let life = accepted + UNAUTHENTICATED_LIFE;
    let mut deadline = accepted + HEAD_DEADLINE;
    loop {
        let head = read_head(&mut conn.reader, remote, deadline);
        let _ = conn.reader.get_ref().set_read_timeout(Some(HEAD_TIMEOUT));
        let mut request = match head {
            Ok(Some(r)) => r,
            Ok(None) => return, // closed between requests, or idle too long
            Err(rule) => return refuse(&mut conn, rule, life),
        };
        let identity = gate
            .keys
            .current()
            .resolve(request.header("Authorization"), |name| {
                request.single_header(name)
            });
        match identity {
            Identity::Principal(p) => request.principal = Some(p),
            Identity::Unknown => {}
            Identity::ProxyWithoutPrincipal => request.proxy_without_principal = true,
        }
        request.authenticated = request.principal.is_some();
        if request.authenticated {
            match conn.authenticate() {
                Ok(()) => {}
                Err(Admission::Evicted) => return,
                Err(Admission::Full) => return busy(&mut conn, request.content_length, life),
            }
        } else {
            answer_within_life(&conn, life);
        }
        let authenticated = request.authenticated;
        // A request without the token gets one answer: no second one on its socket.
        let close = request.close || !authenticated;
        let mut ex = Exchange::new(
            &mut conn.reader,
            request.content_length,
            authenticated,
            gate.body_deadline,
            close,
        );
        route(request, &mut ex);
        let (unread, close) = (ex.unread(), ex.close);
        if unread > 0 {
            let until = if authenticated {
                Instant::now() + LINGER_TIME
            } else {
                life
            };
            linger(&mut conn.reader, unread, until);
            return;
        }
        if close {
            return;
        }
        // Keep-alive: wait (idle) for the next request's first byte; its head has the
        // deadline from then.
        let _ = conn.reader.get_ref().set_read_timeout(Some(HEAD_TIMEOUT));
        match conn.reader.fill_buf() {
            Ok(b) if !b.is_empty() => deadline = Instant::now() + HEAD_DEADLINE,
            _ => return,
        }
    }
}

/// A socket without the token gets its one answer written within its life.
fn answer_within_life(conn: &Conn, life: Instant) {
    if matches!(conn.slot, Slot::Unauthenticated(_)) {
        let left = life.saturating_duration_since(Instant::now());
        let _ = conn
            .reader
            .get_ref()
            .set_write_timeout(Some(left.max(Duration::from_millis(100))));
    }
}

/// Answers a head that broke `rule` with the rule's status and reason, and closes.
fn refuse(conn: &mut Conn, rule: Refusal, life: Instant) {
    answer_within_life(conn, life);
    let body = format!(
        r#"{{"ok":false,"error":{{"code":"invalid_request","message":{}}}}}"#,
        serde_json::Value::String(rule.reason().into())
    );
    let deadline = conn.gate.body_deadline;
    Exchange::new(&mut conn.reader, 0, false, deadline, true).respond(
        rule.status(),
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    );
}

/// Answers a request with the token when every served slot is taken (503), and closes.
fn busy(conn: &mut Conn, declared: u64, life: Instant) {
    let gate = Arc::clone(&conn.gate);
    let mut ex = Exchange::new(&mut conn.reader, declared, false, gate.body_deadline, true);
    ex.respond(
        503,
        &[
            ("Content-Type", gate.busy.content_type),
            ("Retry-After", "1"),
        ],
        &gate.busy.body,
    );
    if ex.unread() > 0 {
        linger(&mut conn.reader, declared, life);
    }
}
