//! maka-acp: an Agent Client Protocol (ACP v1) agent over a Runtime Host.
//!
//! When the agent runs on stdio, stdout belongs to the writer thread in [`jsonrpc::transport`];
//! nothing else may print to it (`clippy::print_stdout` is denied: the other commands that
//! write there — `host`'s ready line, `login`, the demo, `--help` — do it explicitly).
#![deny(clippy::print_stdout)]

pub mod acp;
pub(crate) mod base64;
pub mod cli;
#[cfg(feature = "host")]
pub(crate) mod config;
#[cfg(feature = "host")]
pub(crate) mod demo;
#[cfg(feature = "host")]
pub(crate) mod embedded;
#[cfg(feature = "host")]
pub mod host;
pub mod host_api;
#[cfg(feature = "host")]
pub(crate) mod http;
pub mod jsonrpc;
#[cfg(feature = "host")]
pub(crate) mod login;
pub mod secrets;
#[cfg(feature = "serve")]
pub(crate) mod serve;
pub(crate) mod threads;
pub mod tunables;
