//! ACP v2 (the draft the TS SDK 2.4.0 ships as `experimental/v2`, `schema/v2`), beside v1 on
//! the same agent: a connection whose `initialize` offers version 2 or more speaks it. Its own
//! method table ([`methods::V2_METHODS`]) routes to the same operations as v1's; its own
//! projection ([`projection`]) makes v2 updates of the same host frames; its own writer
//! ([`crate::acp::out::Out`]`<V2>`) is the only way they leave. Nothing here reaches a v1
//! connection, and nothing of v1's shapes reaches a v2 one.

pub mod diff;
pub mod initialize;
pub(crate) mod lifecycle;
pub mod methods;
pub mod projection;
pub mod types;
