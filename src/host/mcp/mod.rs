//! MCP servers a client passed with its session: their tools join the model's tool list as
//! `server__tool`. One server is [`server::McpServer`]: MCP JSON-RPC over stdio (through the
//! crate's one JSON-RPC core, `crate::jsonrpc`) or over streamable HTTP (JSON or SSE answers,
//! through the one SSE reader).
//!
//! Servers start in the background when the session is created or opened, so `session/new`
//! never waits for them; a turn waits (bounded) until they have all started or failed. A server
//! that fails to start or dies is reported to the user in the next turn, never dropped silently.

mod server;
mod sse_transport;

pub use server::{McpServer, McpTool};

use serde_json::Value;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The MCP servers of one session.
pub struct McpSet {
    state: Mutex<SetState>,
    ready: Condvar,
    /// How long starting (or re-listing) one server may take.
    start_timeout: Duration,
}

#[derive(Default)]
struct SetState {
    starting: usize,
    servers: Vec<Arc<Mutex<McpServer>>>,
    tools: Vec<McpTool>,
    /// Problems not yet shown to the user.
    unreported: Vec<String>,
    stopped: bool,
}

impl McpSet {
    /// Starts every server in the background; each may take `start_timeout` to start.
    /// A principal's stdio servers run with the host's private data hidden (`confinement`), or
    /// not at all.
    pub fn start(
        specs: &[Value],
        cwd: &str,
        start_timeout: Duration,
        confinement: crate::host::sandbox::Confinement,
    ) -> Arc<McpSet> {
        let set = Arc::new(McpSet {
            state: Mutex::default(),
            ready: Condvar::new(),
            start_timeout,
        });
        for spec in specs {
            let name = spec
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            set.lock().starting += 1;
            let (s, spec, cwd, confinement) = (
                Arc::clone(&set),
                spec.clone(),
                cwd.to_string(),
                confinement.clone(),
            );
            let spawned = std::thread::Builder::new()
                .name(format!("mcp-start-{name}"))
                .spawn(move || {
                    let result = McpServer::start(&spec, &cwd, start_timeout, &confinement);
                    let mut st = s.lock();
                    st.starting -= 1;
                    match result {
                        Ok((server, tools)) if !st.stopped => {
                            log::info!("MCP server {name} started with {} tool(s)", tools.len());
                            st.tools.extend(tools);
                            st.servers.push(Arc::new(Mutex::new(server)));
                        }
                        Ok((mut server, _)) => server.stop(),
                        Err(e) => {
                            log::warn!("MCP server {name}: {e}");
                            st.unreported
                                .push(format!("MCP server `{name}` is unavailable: {e}"));
                        }
                    }
                    s.ready.notify_all();
                });
            if spawned.is_err() {
                set.lock().starting -= 1;
            }
        }
        set
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits (bounded) until every server has started or failed; returns the tools and the
    /// problems to tell the user about (each reported once).
    pub fn ready(&self, timeout: Duration) -> (Vec<McpTool>, Vec<String>) {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        while st.starting > 0 && Instant::now() < deadline {
            st = match self.ready.wait_timeout(st, deadline - Instant::now()) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        if st.starting > 0 {
            let msg = format!(
                "{} MCP server(s) are still starting; this turn runs without them",
                st.starting
            );
            st.unreported.push(msg);
        }
        // Servers that died since the last turn.
        let mut dead = vec![];
        st.servers
            .retain(|s| match s.lock().ok().and_then(|g| g.dead()) {
                Some(why) => {
                    dead.push(why);
                    false
                }
                None => true,
            });
        for why in dead {
            log::warn!("{why}");
            let server = why
                .trim_start_matches("MCP server ")
                .trim_end_matches(" stopped")
                .to_string();
            st.tools.retain(|t| t.server != server);
            st.unreported
                .push(format!("{why}; its tools are no longer available"));
        }
        // Servers that announced a new tool list: read it again, without the set's lock (a
        // server takes its time to answer; other turns need the set meanwhile).
        let changed: Vec<Arc<Mutex<McpServer>>> = st
            .servers
            .iter()
            .filter(|s| s.lock().map(|g| g.take_tools_changed()).unwrap_or(false))
            .cloned()
            .collect();
        drop(st);
        let mut relisted = vec![];
        for server in changed {
            let Ok(mut g) = server.lock() else { continue };
            let name = g.name.clone();
            relisted.push((name, g.list_tools(Instant::now() + self.start_timeout)));
        }
        let mut st = self.lock();
        for (name, listed) in relisted {
            match listed {
                Ok(tools) => {
                    st.tools.retain(|t| t.server != name);
                    st.tools.extend(tools);
                }
                Err(e) => st.unreported.push(format!(
                    "MCP server `{name}` changed its tools but cannot list them: {e}"
                )),
            }
        }
        let problems = std::mem::take(&mut st.unreported);
        (st.tools.clone(), problems)
    }

    pub fn server(&self, name: &str) -> Option<Arc<Mutex<McpServer>>> {
        self.lock()
            .servers
            .iter()
            .find(|s| s.lock().map(|g| g.name == name).unwrap_or(false))
            .cloned()
    }

    pub fn tool(&self, exposed: &str) -> Option<McpTool> {
        self.lock()
            .tools
            .iter()
            .find(|t| t.exposed == exposed)
            .cloned()
    }

    /// Stops every server (and any still starting, when it finishes).
    pub fn stop(&self) {
        let servers = {
            let mut st = self.lock();
            st.stopped = true;
            st.tools.clear();
            std::mem::take(&mut st.servers)
        };
        for s in servers {
            if let Ok(mut g) = s.lock() {
                g.stop();
            }
        }
    }
}
