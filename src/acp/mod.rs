//! The ACP agent (v1, and v2 beside it): the dispatch tables and everything a method needs.

pub(crate) mod agent;
pub(crate) mod auth;
pub(crate) mod client_call;
pub(crate) mod config_options;
pub(crate) mod configure;
pub(crate) mod connection;
pub(crate) mod errors;
pub(crate) mod follow;
pub(crate) mod host_link;
pub(crate) mod initialize;
pub(crate) mod interaction;
pub(crate) mod lifecycle;
mod maka;
pub(crate) mod maka_dialect;
pub(crate) mod methods;
pub(crate) mod out;
pub(crate) mod params;
pub(crate) mod principal;
pub(crate) mod projection;
pub(crate) mod prompt;
pub(crate) mod read;
pub(crate) mod session;
mod shared_names;
mod turns;
pub(crate) mod types;
pub(crate) mod v2;
mod view;
mod workers;

#[cfg(test)]
mod tests;

pub use agent::{serve, AdapterConfig};
pub use host_link::{LocalHost, NoLocalHost};
pub use principal::Principal;
pub use session::HELD_CANCELS;
pub use types::Dialect;
