//! The host as an ACP client of another agent: spawned in its own process group (it dies with
//! the delegation, the turn's cancel, or the host), spoken to with the crate's one JSON-RPC
//! core over its pipes (the same reader, writer and request tables as the adapter and MCP).
//! What the agent asks of us (`session/request_permission`, `fs/*`, `terminal/*`) and what it streams
//! (`session/update`) arrive on [`Subagent::incoming`], for the delegating turn to serve.

use super::AgentSpec;
use crate::host::tools::shell::kill_group;
use crate::jsonrpc::{ClientCalls, Connection, Incoming, Message, Outbox, PendingCall};
use crossbeam_channel::Receiver;
use serde_json::{json, Value};
use std::io::BufReader;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

pub struct Subagent {
    pub name: String,
    child: Child,
    connection: Option<Connection>,
    outbox: Outbox,
    calls: Arc<ClientCalls>,
    /// What the agent sends us: its requests and notifications.
    pub incoming: Receiver<Incoming>,
    /// The agent's session for this delegation.
    pub session_id: String,
    /// The last lines it wrote to stderr (for a message when it fails).
    stderr_tail: Arc<std::sync::Mutex<String>>,
    /// Disconnected once its stderr has been read to the end.
    stderr_done: Receiver<()>,
    /// The session is an earlier delegation's, continued.
    pub continued: bool,
    /// The agent offers `session/resume` or `session/load`: it can continue a conversation.
    pub can_continue: bool,
    /// The delegating turn's cancel: a handshake request stops waiting when it fires.
    cancel: Receiver<()>,
}

impl Subagent {
    /// Spawns `spec` in `cwd` (with `read_only` folders read-only for it, when given),
    /// `initialize`s it (offering files and terminals) and opens a session there: `earlier`
    /// (an agent session of a previous delegation) again when the agent can resume or load
    /// sessions, else a new one. `timeout` bounds each request.
    pub fn start(
        spec: &AgentSpec,
        cwd: &str,
        timeout: Duration,
        earlier: Option<&str>,
        cancel: &Receiver<()>,
        read_only: Option<&super::sandbox::Folders>,
    ) -> Result<Subagent, String> {
        let mut cmd = Command::new(&spec.command);
        cmd.args(&spec.args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(folders) = read_only {
            super::sandbox::apply(&mut cmd, folders)?;
        }
        // Our own secrets are not the subagent's: the allow-list, then its declaration.
        crate::host::child_env::apply(&mut cmd, spec.env.iter().map(|(k, v)| (k, v)));
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start `{}`: {e}", spec.command_line()))?;
        crate::host::reaper::track(child.id());
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            kill_group(child.id());
            let _ = child.kill();
            let _ = child.wait();
            return Err("the agent's pipes could not be opened".into());
        };
        let stderr_tail: Arc<std::sync::Mutex<String>> = Arc::default();
        let (done_tx, stderr_done) = crossbeam_channel::bounded::<()>(0);
        if let Some(err) = child.stderr.take() {
            let tail = Arc::clone(&stderr_tail);
            let _ = crate::threads::spawn(format!("agent-{}-stderr", spec.name), move || {
                let _done = done_tx;
                use std::io::BufRead;
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                    t.push_str(&line);
                    t.push('\n');
                    crate::host_api::keep_tail(&mut t, 2048);
                }
            });
        }
        let connection = Connection::from_io(
            &format!("agent-{}", spec.name),
            BufReader::new(stdout),
            stdin,
        );
        let mut agent = Subagent {
            name: spec.name.clone(),
            child,
            outbox: connection.outbox.clone(),
            calls: Arc::clone(&connection.client_calls),
            incoming: connection.inbox.clone(),
            connection: Some(connection),
            session_id: String::new(),
            stderr_tail,
            stderr_done,
            continued: false,
            can_continue: false,
            cancel: cancel.clone(),
        };
        let init = agent.request(
            "initialize",
            json!({
                "protocolVersion": 1,
                "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true},
                "clientInfo": {"name": "maka-acp", "version": env!("CARGO_PKG_VERSION")},
            }),
            timeout,
        );
        let init = match init {
            Ok(v) => v,
            Err(e) => {
                agent.stop();
                return Err(format!("initialize failed: {e}"));
            }
        };
        if init.get("protocolVersion").and_then(Value::as_u64) != Some(1) {
            agent.stop();
            return Err(format!(
                "it speaks ACP protocol version {}, not 1",
                init.get("protocolVersion").unwrap_or(&Value::Null)
            ));
        }
        agent.can_continue = reopening(&init).is_some();
        if let Some(id) = earlier {
            if agent.reopen(&init, id, cwd, timeout) {
                agent.session_id = id.to_string();
                agent.continued = true;
                return Ok(agent);
            }
        }
        match agent.request(
            "session/new",
            json!({"cwd": cwd, "mcpServers": []}),
            timeout,
        ) {
            Ok(v) => match v.get("sessionId").and_then(Value::as_str) {
                // Kept in the session's record: bounded like every name the host keeps.
                Some(id) if id.len() > 256 => {
                    agent.stop();
                    return Err("session/new answered with a sessionId of over 256 bytes".into());
                }
                Some(id) => agent.session_id = id.to_string(),
                None => {
                    agent.stop();
                    return Err("session/new answered without a sessionId".into());
                }
            },
            Err(e) => {
                agent.stop();
                return Err(format!("session/new failed: {e}"));
            }
        }
        Ok(agent)
    }

    /// Opens session `id` again: `session/resume` when the agent offers it, else `session/load`
    /// (whose replay is not shown again: it is drained). False when neither works.
    fn reopen(&self, init: &Value, id: &str, cwd: &str, timeout: Duration) -> bool {
        let params = json!({"sessionId": id, "cwd": cwd, "mcpServers": []});
        let Some(method) = reopening(init) else {
            return false;
        };
        match self.request(method, params, timeout) {
            Ok(_) => {
                // A load's replay (and any update sent with the answer) is history already shown.
                while let Ok(m) = self.incoming.try_recv() {
                    if let Incoming::Request(_, responder) = m {
                        responder.respond(Err(crate::jsonrpc::ResponseError::new(
                            crate::jsonrpc::code::INVALID_REQUEST,
                            "not now: the session is being reopened",
                        )));
                    }
                }
                true
            }
            Err(e) => {
                log::info!(
                    "agent {}: {method} {id} failed ({e}); starting a new session",
                    self.name
                );
                false
            }
        }
    }

    /// One request, waited for at most `timeout`, or until the delegating turn is cancelled
    /// (an agent that never answers its handshake must not hold a cancel up).
    pub fn request(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, String> {
        let pending = self.calls.call(method, params);
        crossbeam_channel::select! {
            recv(pending.receiver()) -> answer => match answer {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) if self.calls.is_closed() => Err(format!("{} ({})", self.stopped(), e.message)),
                Ok(Err(e)) => Err(e.message),
                Err(_) => Err(self.stopped()),
            },
            recv(self.cancel) -> _ => {
                self.calls.forget(&pending.id);
                Err("the delegation was cancelled".into())
            }
            default(timeout) => {
                self.calls.forget(&pending.id);
                Err(format!(
                    "agent {} did not answer {method} within {} s",
                    self.name,
                    timeout.as_secs()
                ))
            }
        }
    }

    /// A request whose answer the caller waits for itself (with other things).
    pub fn call(&self, method: &str, params: Value) -> PendingCall {
        self.calls.call(method, params)
    }

    pub fn notify(&self, method: &str, params: Value) {
        self.outbox.send(&Message::notification(method, params));
    }

    /// Why it is gone, with what it last said on stderr.
    pub fn stopped(&self) -> String {
        // Its last words may still be in the pipe: read them first (briefly).
        let _ = self.stderr_done.recv_timeout(Duration::from_millis(500));
        let tail = self
            .stderr_tail
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .trim()
            .to_string();
        if tail.is_empty() {
            format!("agent {} stopped", self.name)
        } else {
            let last = tail.lines().last().unwrap_or_default();
            format!("agent {} stopped (it said: {last})", self.name)
        }
    }

    pub fn is_closed(&self) -> bool {
        self.calls.is_closed()
    }

    /// Ends it: its whole process tree (its group, and what left the group with `setsid`),
    /// then our side of the pipes.
    pub fn stop(&mut self) {
        crate::host::reaper::kill_tree(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
        crate::host::reaper::untrack(self.child.id());
        if let Some(c) = self.connection.take() {
            c.finish();
        }
    }
}

/// How the agent reopens a session, by its `initialize` answer: `session/resume`, else
/// `session/load`, else not at all.
fn reopening(init: &Value) -> Option<&'static str> {
    let caps = init.get("agentCapabilities")?;
    if caps
        .pointer("/sessionCapabilities/resume")
        .is_some_and(Value::is_object)
    {
        Some("session/resume")
    } else if caps.get("loadSession").and_then(Value::as_bool) == Some(true) {
        Some("session/load")
    } else {
        None
    }
}

impl Drop for Subagent {
    fn drop(&mut self) {
        if self.connection.is_some() {
            self.stop();
        }
    }
}
