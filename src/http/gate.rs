//! Admission: who may hold a socket of the server. A socket starts in a small pool of its own
//! ([`MAX_UNAUTHENTICATED`]; when it is full the oldest is closed to make room, so a new socket
//! always gets its head read) and lives there at most [`UNAUTHENTICATED_LIFE`]; only a request
//! with a token of the server's key set ([`super::keys`], resolved once per request) moves its socket into the served
//! slots (`MAX_CONNECTIONS`), so sockets without it — however many, however slow — never take
//! a slot from a token holder.

use super::keys::Keys;
use crate::jsonrpc::lock;
use std::collections::BTreeMap;
use std::io::BufReader;
use std::net::TcpStream;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Sockets that have not shown the token yet (their first head being read, or their one
/// answer written), at once; the oldest is closed to make room for a new one.
pub const MAX_UNAUTHENTICATED: usize = 128;
/// How long a socket that has not shown the token may live, from accept to close, whatever it
/// sends: its head (within the head deadline), then one answer.
pub const UNAUTHENTICATED_LIFE: Duration = Duration::from_secs(15);

/// The answer to a request with the token when every served slot is taken (503).
#[derive(Clone)]
pub struct Busy {
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// What every connection of a running server shares: the tokens, and who holds which slot.
pub struct Gate {
    pub keys: Arc<Keys>,
    /// Sockets that have shown the token.
    pub authenticated: AtomicUsize,
    pub max_authenticated: usize,
    pub unauthenticated: Mutex<Unauthenticated>,
    pub max_unauthenticated: usize,
    pub body_deadline: Duration,
    pub busy: Busy,
}

/// The sockets that have not shown the token, oldest first: each one's descriptor and the end
/// of its life. A descriptor is here only while its [`Conn`] holds it open (a `Conn` leaves
/// this table before its socket is closed, under its lock), so shutting one down from here
/// never touches a descriptor that was reused.
#[derive(Default)]
pub struct Unauthenticated {
    pub next: u64,
    pub sockets: BTreeMap<u64, (RawFd, Instant)>,
}

/// Which slot a socket holds.
pub enum Slot {
    Unauthenticated(u64),
    Authenticated,
}

/// One accepted socket and its slot: dropped, it gives the slot back before its socket is
/// closed (`drop` runs before the fields are dropped).
pub struct Conn {
    pub gate: Arc<Gate>,
    pub slot: Slot,
    pub reader: BufReader<TcpStream>,
}

/// Why a request with the token is not served.
pub enum Admission {
    /// Every served slot is taken (503).
    Full,
    /// The socket was closed to make room while its head was read.
    Evicted,
}

impl Conn {
    /// Moves the socket into the served slots (once; a socket that holds one keeps it).
    pub fn authenticate(&mut self) -> Result<(), Admission> {
        let Slot::Unauthenticated(id) = self.slot else {
            return Ok(());
        };
        let mut pool = lock(&self.gate.unauthenticated);
        if !pool.sockets.contains_key(&id) {
            return Err(Admission::Evicted);
        }
        let taken =
            self.gate
                .authenticated
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < self.gate.max_authenticated).then_some(n + 1)
                });
        if taken.is_err() {
            return Err(Admission::Full);
        }
        pool.sockets.remove(&id);
        self.slot = Slot::Authenticated;
        Ok(())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        match self.slot {
            Slot::Unauthenticated(id) => {
                lock(&self.gate.unauthenticated).sockets.remove(&id);
            }
            Slot::Authenticated => {
                self.gate.authenticated.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl Gate {
    /// Gives a new socket a place among those without the token: the ones past their life,
    /// and the oldest while there is no room, are shut down first (their threads see the
    /// socket end and leave).
    pub fn admit(&self, fd: RawFd, now: Instant) -> u64 {
        let mut pool = lock(&self.unauthenticated);
        while let Some((&id, &(old, until))) = pool.sockets.first_key_value() {
            if until > now && pool.sockets.len() < self.max_unauthenticated {
                break;
            }
            pool.sockets.remove(&id);
            // SAFETY: `old` is open while it is in the table (see `Unauthenticated`), and the
            // lock is held; shutdown only ends the connection, the descriptor stays its owner's.
            unsafe { libc::shutdown(old, libc::SHUT_RDWR) };
        }
        let id = pool.next;
        pool.next += 1;
        pool.sockets.insert(id, (fd, now + UNAUTHENTICATED_LIFE));
        id
    }
}
