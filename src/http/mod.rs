//! The one HTTP/1.1 server of this build, on `std::net`: the Runtime Host
//! (`host::server`) and `maka-acp serve` (`serve::routes`) both run on it. It accepts, admits,
//! reads one bounded request head, hands the request to the route and writes the answer. It
//! owns every byte it reads, so nothing a client declares can make it allocate: a body over the
//! limit is refused from its `Content-Length` before a byte of it is read, and that connection
//! is closed.
//!
//! Why not tiny_http: it allocates `vec![0; content_length]` to drain an unread body when a
//! request is dropped, so `Content-Length: 99999999999999` aborted the host (out of memory)
//! without a token. What the protocols need is little (loopback or a TLS proxy in front, no
//! TLS of its own): this module is that little. Request heads are tokenized by `httparse`
//! (already in the tree through ureq); what we refuse on top is one table
//! ([`refusals`]).
//!
//! One thread per connection; keep-alive for operations, `close` for event streams; heads
//! bounded in size and time, bodies in time; `Transfer-Encoding` is refused (clients send
//! `Content-Length`).
//!
//! - [`server`]: the accept loop and each connection's loop;
//! - [`gate`]: admission — the slots of sockets with and without a token;
//! - [`keys`]: who a request is — the tokens accepted, each a [`Principal`], resolved once per
//!   request;
//! - [`head`]: one request head, read within its limits and parsed;
//! - [`refusals`]: rule -> status -> reason;
//! - [`exchange`]: the body, the answer, a socket taken over for a stream.

mod exchange;
mod gate;
mod head;
mod keys;
mod refusals;
mod server;

pub use exchange::{reason, Exchange};
pub use head::Request;
#[cfg(test)]
pub use keys::Identity;
pub use keys::{token_hash, valid_name, Entry, KeySet, Keys, Limits, Principal};
pub use server::{Route, Server};
