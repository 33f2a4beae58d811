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
mod reader;
pub mod requests;
pub mod session;
mod sessions;
mod settings;
mod turns;
pub mod types;
mod workers;

pub use agent::{serve, AdapterConfig};
