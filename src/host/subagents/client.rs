//! The host as an ACP client of another agent: a [`ChildPeer`] (its own process group, dies
//! with the delegation, the turn's cancel, or the host; the crate's one JSON-RPC transport on
//! its pipes). What the agent asks of us (`session/request_permission`, `fs/*`, `terminal/*`)
//! and what it streams (`session/update`) arrive on [`Subagent::incoming`], for the delegating
//! turn to serve.

use super::AgentSpec;
use crate::acp::types::from_agents::read_object;
use crate::acp::types::from_agents::PeerInitialize;
use crate::acp::types::SessionSetup;
use crate::host::child_peer::ChildPeer;
use crate::jsonrpc::{Incoming, Message, PendingCall};
use crossbeam_channel::Receiver;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

pub struct Subagent {
    pub name: String,
    peer: ChildPeer,
    /// What the agent sends us: its requests and notifications.
    pub incoming: Receiver<Incoming>,
    /// The agent's session for this delegation.
    pub session_id: String,
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
        read_only: Option<&crate::host::sandbox::Folders>,
    ) -> Result<Subagent, String> {
        let mut cmd = Command::new(&spec.command);
        cmd.args(&spec.args).current_dir(cwd);
        if let Some(folders) = read_only {
            crate::host::sandbox::apply(&mut cmd, folders)?;
        }
        // Our own secrets are not the subagent's: the allow-list, then its declaration.
        crate::host::child_env::apply(&mut cmd, spec.env.iter().map(|(k, v)| (k, v)));
        let peer = ChildPeer::spawn(&format!("agent-{}", spec.name), cmd)
            .map_err(|e| format!("cannot start `{}`: {e}", spec.command_line()))?;
        let mut agent = Subagent {
            name: spec.name.clone(),
            incoming: peer.incoming.clone(),
            peer,
            session_id: String::new(),
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
        let init = match init.and_then(|v| {
            read_object::<PeerInitialize>(&v).map_err(|e| {
                let why = e.to_string();
                format!(
                    "its answer is not ACP's InitializeResponse ({})",
                    crate::host_api::head(&why, 300)
                )
            })
        }) {
            Ok(init) => init,
            Err(e) => {
                agent.stop();
                return Err(format!("initialize failed: {e}"));
            }
        };
        if init.protocol_version != Some(1) {
            agent.stop();
            return Err(match init.protocol_version {
                Some(v) => format!("it speaks ACP protocol version {v}, not 1"),
                None => "it names no ACP protocol version (this host speaks 1)".to_string(),
            });
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
            Ok(v) => match read_object::<SessionSetup>(&v)
                .ok()
                .and_then(|r| r.session_id)
                .as_deref()
            {
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
    fn reopen(&self, init: &PeerInitialize, id: &str, cwd: &str, timeout: Duration) -> bool {
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
        let pending = self.peer.calls.call(method, params);
        crossbeam_channel::select! {
            recv(pending.receiver()) -> answer => match answer {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) if self.peer.calls.is_closed() => Err(format!("{} ({})", self.stopped(), e.message)),
                Ok(Err(e)) => Err(e.message),
                Err(_) => Err(self.stopped()),
            },
            recv(self.cancel) -> _ => {
                self.peer.calls.forget(&pending.id);
                Err("the delegation was cancelled".into())
            }
            default(timeout) => {
                self.peer.calls.forget(&pending.id);
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
        self.peer.calls.call(method, params)
    }

    pub fn notify(&self, method: &str, params: Value) {
        self.peer
            .outbox
            .send(&Message::notification(method, params));
    }

    /// Why it is gone, with what it last said on stderr.
    pub fn stopped(&self) -> String {
        match self.peer.last_words() {
            Some(last) => format!("agent {} stopped (it said: {last})", self.name),
            None => format!("agent {} stopped", self.name),
        }
    }

    pub fn is_closed(&self) -> bool {
        self.peer.calls.is_closed()
    }

    /// Ends it: its whole process tree, then our side of the pipes.
    pub fn stop(&mut self) {
        self.peer.stop();
    }
}

/// How the agent reopens a session, by its `initialize` answer: `session/resume`, else
/// `session/load`, else not at all.
fn reopening(init: &PeerInitialize) -> Option<&'static str> {
    let caps = &init.agent_capabilities;
    if caps.session_capabilities.resume.is_some() {
        Some("session/resume")
    } else if caps.load_session {
        Some("session/load")
    } else {
        None
    }
}
