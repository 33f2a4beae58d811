//! The ACP v1 agent: the dispatch table and everything a method needs.

pub mod agent;
pub mod initialize;
pub mod params;

pub use agent::{serve, AdapterConfig};
