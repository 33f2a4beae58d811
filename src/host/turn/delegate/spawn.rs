//! Starting a delegation's agent: the agent found, its session chosen (continued or new), its
//! folders read-only where the mode wants it, a workspace-declared agent trusted by the person,
//! then spawned, `initialize`d and given its task — each on a thread of its own.

use super::*;

/// How long each step of starting an agent (`initialize`, `session/new`) may take; a cancel
/// ends the wait at once.
const START_TIMEOUT: Duration = Duration::from_secs(30);

impl Turn {
    /// Starts the agents of delegate calls, together: each call is readied in order (its
    /// agent found, its session chosen, trusted — which may ask the person) and its agent is
    /// started at once on a thread of its own (spawn, `initialize`, its session), so neither a
    /// slow agent nor a pending trust dialog holds up the others. Each call's job, or its
    /// failure as the call's outcome, in order.
    pub(super) fn start_jobs(&mut self, wanted: Vec<Wanted>) -> Vec<Result<Job, Box<ToolOutcome>>> {
        let cancel = self.spec.cancel.receiver().clone();
        let cwd = self.cwd.display().to_string();
        let dir = self.host.store.session_dir(&self.cell.id);
        let continuity = subagents::Continuity::read(&dir);
        let mut taken = std::collections::HashSet::new();
        std::thread::scope(|scope| {
            let mut starting = vec![];
            for w in &wanted {
                let mut ready = match self.ready(w, &continuity, &mut taken) {
                    Ok(r) => r,
                    Err(o) => {
                        starting.push(Err(o));
                        continue;
                    }
                };
                let (spec, cwd, cancel) = (ready.spec.clone(), cwd.clone(), cancel.clone());
                let (earlier, task) = (ready.earlier.clone(), ready.task.clone());
                let read_only = ready.read_only.take();
                // Started and given its task here, so no other call's start or dialog holds it.
                let thread = std::thread::Builder::new()
                    .name(format!("start-{}", spec.name))
                    .spawn_scoped(scope, move || {
                        let agent = Subagent::start(
                            &spec,
                            &cwd,
                            START_TIMEOUT,
                            earlier.as_deref(),
                            &cancel,
                            read_only.as_ref(),
                        )?;
                        let prompt = agent.call(
                            "session/prompt",
                            json!({"sessionId": agent.session_id, "prompt": [{"type": "text", "text": task}]}),
                        );
                        Ok((agent, prompt))
                    });
                starting.push(Ok((ready, thread)));
            }
            starting
                .into_iter()
                .map(|s| {
                    let (ready, thread) = s?;
                    let started = match thread {
                        // (An Err from join: a panic, which only unwinds in test builds.)
                        Ok(t) => t
                            .join()
                            .unwrap_or_else(|_| Err("its start failed unexpectedly".to_string())),
                        Err(e) => Err(format!("no thread to start it: {e}")),
                    };
                    self.launched(ready, started, &dir)
                })
                .collect()
        })
    }

    /// A delegate call made ready to start: its agent found, its session chosen (the one it
    /// names, else the agent's latest unless another delegation of this step has it, else a
    /// new one), read-only folders where the session's mode wants them, and trusted.
    pub(super) fn ready(
        &mut self,
        w: &Wanted,
        continuity: &subagents::Continuity,
        taken: &mut std::collections::HashSet<String>,
    ) -> Result<Ready, Box<ToolOutcome>> {
        let name = w.agent.as_str();
        if self.spec.cancel.is_cancelled() {
            return Err(Box::new(cancelled(name)));
        }
        let failed = |why: String| Box::new(ToolOutcome::failed(why));
        let Some(spec) = self.agents.iter().find(|a| a.name == name).cloned() else {
            let names: Vec<&str> = self.agents.iter().map(|a| a.name.as_str()).collect();
            return Err(failed(format!(
                "there is no agent named {name:?}; the agents are: {}",
                names.join(", ")
            )));
        };
        let (handle, earlier) = match w.session.as_deref() {
            Some("new") => (continuity.new_handle(name, taken), None),
            Some(h) => match continuity.named(h) {
                Some((agent, _)) if agent == name && taken.contains(h) => {
                    return Err(failed(format!(
                        "session {h} is in use by another delegation of this step; leave `session` out (or give \"new\") to start another"
                    )))
                }
                Some((agent, id)) if agent == name => (h.to_string(), Some(id.to_string())),
                _ => {
                    let known = continuity.handles_of(name);
                    return Err(failed(format!(
                        "agent {name} has no session {h:?}; its sessions: {}",
                        if known.is_empty() {
                            "none yet".to_string()
                        } else {
                            known.join(", ")
                        }
                    )));
                }
            },
            None => match continuity.latest(name) {
                Some((h, id)) if !taken.contains(h) => (h.to_string(), Some(id.to_string())),
                _ => (continuity.new_handle(name, taken), None),
            },
        };
        // Explore mode, and plan mode before the plan is approved, change nothing: the agent
        // sees the session's folders read-only (its own tools do not go through our gate),
        // or, where that cannot be set up, it is not run.
        let read_only = {
            let st = self.cell.lock();
            let c = &st.session.configuration;
            c.permission_mode == PermissionMode::Explore
                || c.collaboration_mode == CollaborationMode::Plan
        };
        // A principal's agent, like its every process, runs with the host's private data
        // hidden (issue 56), or is not run.
        let confined = self.confinement.is_confined();
        let read_only = if read_only || confined {
            if let Err(why) = crate::host::sandbox::available() {
                return Err(failed(if read_only {
                    format!(
                        "Agent {name} is not run: in this mode nothing may change, and this machine cannot keep an agent's own tools from writing in the session's folders ({why}); switch to ask mode to delegate to it."
                    )
                } else {
                    crate::host::sandbox::Confinement::unavailable(&format!("Agent {name}"), &why)
                }));
            }
            // Read-only (explore, plan): the session's folders and maka's config file; hidden:
            // the host's data dir (its token, rules and sessions would let an agent act through
            // the host), and for a principal every private path of the host.
            let mut folders = crate::host::sandbox::Folders {
                read_only: vec![],
                hidden: vec![self.host.data_dir.clone()],
                cwd: self.cwd.clone(),
            };
            if read_only {
                folders.read_only = self.roots.clone();
                folders
                    .read_only
                    .extend(crate::config::config_file_path().filter(|f| f.is_file()));
            }
            folders
                .hidden
                .extend(self.confinement.hidden().iter().cloned());
            Some(folders)
        } else {
            None
        };
        if let Some(refused) = self.trust_agent(&w.id, &spec) {
            return Err(Box::new(refused));
        }
        taken.insert(handle.clone());
        Ok(Ready {
            id: w.id.clone(),
            spec,
            task: w.task.clone(),
            handle,
            earlier,
            read_only,
        })
    }

    /// A readied call's agent started (or not): its session recorded under the call's handle,
    /// its task sent.
    pub(super) fn launched(
        &mut self,
        ready: Ready,
        started: Result<(Subagent, crate::jsonrpc::PendingCall), String>,
        dir: &Path,
    ) -> Result<Job, Box<ToolOutcome>> {
        let name = &ready.spec.name;
        if self.spec.cancel.is_cancelled() {
            if let Ok((mut agent, _)) = started {
                agent.stop();
            }
            return Err(Box::new(cancelled(name)));
        }
        let (agent, prompt) = started.map_err(|e| {
            Box::new(ToolOutcome::failed(format!(
                "agent {name} could not start: {e}"
            )))
        })?;
        // Recorded at once: a later delegation can continue this conversation with the agent.
        let fsync = self.host.store.fsync();
        subagents::Continuity::record(dir, &ready.handle, name, &agent.session_id, fsync);
        log::info!(
            "session {}: delegating to {name} ({} session {}, {})",
            self.cell.id,
            if agent.continued {
                "continuing its"
            } else {
                "its new"
            },
            agent.session_id,
            ready.handle
        );
        let session_note = match (ready.earlier.is_some(), agent.continued) {
            _ if !agent.can_continue => format!(
                "[session {}: agent {name} cannot continue a conversation (it offers neither session/resume nor session/load): each delegation to it starts afresh]",
                ready.handle
            ),
            (true, false) => format!(
                "[session {}: a new conversation — the agent could not reopen the earlier one; give `session: \"{}\"` to continue this one]",
                ready.handle, ready.handle
            ),
            _ => format!(
                "[session {}: give `session: \"{}\"` to continue this conversation]",
                ready.handle, ready.handle
            ),
        };
        Ok(Job {
            calls: ChildCalls::new(&ready.id),
            id: ready.id,
            agent,
            prompt,
            answer: String::new(),
            incoming_open: true,
            terminals: Default::default(),
            allowed: None,
            unread: 0,
            session_note,
            outcome: None,
        })
    }

    /// A workspace-declared agent not trusted yet: the person sees the whole declaration
    /// (command, arguments, environment) and allows it once, or always for this very
    /// declaration (the only lasting answer, offered by name).
    pub(super) fn trust_agent(&mut self, id: &str, spec: &AgentSpec) -> Option<ToolOutcome> {
        let workspace = self.cwd.display().to_string();
        let owner = self.cell.owner.clone();
        let owner = owner.as_deref();
        if subagents::trusted(&self.host.data_dir, &workspace, owner, spec) {
            return None;
        }
        // The names only, as in the title: the values stay out of every dialog.
        let env: Vec<&str> = spec.env.iter().map(|(k, _)| k.as_str()).collect();
        let request = InteractionRequest::Permission {
            tool_call_id: id.into(),
            tool_name: "delegate".into(),
            title: format!(
                "Run agent {} declared by this workspace: {}",
                spec.name,
                spec.declaration()
            ),
            review: Review::Command,
            args: Some(json!({"command": spec.command, "args": spec.args, "env": env})),
            locations: vec![],
            diff: None,
            remember_for_turn_allowed: false,
            // A lasting trust covers the files it runs; one whose program cannot be found
            // cannot be identified, so it is allowed once at most.
            rule: spec.program(&workspace).map(|_| RuleTarget::Agent {
                name: spec.name.clone(),
            }),
        };
        match self.interact(request) {
            Some(InteractionAnswer::Permission {
                decision: Decision::Allow,
                remember,
                ..
            }) => {
                if remember == Some(RuleScope::Workspace) {
                    if let Err(e) = subagents::trust(&self.host.data_dir, &workspace, owner, spec) {
                        log::warn!("cannot remember trusting agent {}: {e}", spec.name);
                    }
                }
                None
            }
            _ => Some(ToolOutcome::failed(format!(
                "The user did not allow running agent {} ({}).",
                spec.name,
                spec.declaration()
            ))),
        }
    }
}
