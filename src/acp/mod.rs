//! The ACP v1 agent: the dispatch table and everything a method needs.

pub mod agent;
pub mod auth;
pub mod client_call;
pub mod config_options;
pub mod errors;
pub mod host_link;
pub mod initialize;
pub mod interaction;
pub mod params;
pub mod projection;
pub mod prompt;
pub mod session;

pub use agent::{serve, AdapterConfig};
