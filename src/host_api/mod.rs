//! The Runtime Host protocol: wire types shared by the reference host and the adapter.

pub mod wire;
