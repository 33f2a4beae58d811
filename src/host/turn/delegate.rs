//! `delegate {agent, task}`: another ACP agent does a task for the model. Its text streams into
//! the delegate call's output, each of its tool calls is shown as a tool call of this session
//! under the delegate call (`parentToolCallId`), its permission requests become this session's
//! dialogs (titled with the agent's name, decided by this session's mode), its file reads and
//! writes are served here within the session's folders, and its final answer is the result
//! the model sees. A cancel reaches it (`session/cancel`), then its process group is killed.

use super::*;
use crate::host::permissions;
use crate::host::subagents::calls::{ChildCalls, Seen};
use crate::host::subagents::client::Subagent;
use crate::host::subagents::{self, AgentSpec};
use crate::host_api::wire::{
    Decision, Review, RuleScope, RuleTarget, ToolResultContent, ToolStatus,
};
use crate::jsonrpc::{code, Incoming, Request, Responder, ResponseError};
use std::collections::HashMap;

/// How long each step of starting an agent (`initialize`, `session/new`) may take; a cancel
/// ends the wait at once.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long cancelled agents get, together, to answer `cancelled` before they are stopped.
const CANCEL_GRACE: Duration = Duration::from_millis(800);

/// What the model is told of continuing an agent's conversation.
const SESSION_PARAM: &str = "continue an earlier conversation with the agent: the session its result named (e.g. \"helper#1\"); \"new\" starts a fresh one. Left out, the agent's latest session is continued unless another delegation of the same step is using it.";

/// The `delegate` function the model sees, listing the agents it may use.
pub(super) fn spec(agents: &[AgentSpec]) -> Value {
    let listed: Vec<String> = agents
        .iter()
        .map(|a| {
            if a.description.is_empty() {
                a.name.clone()
            } else {
                format!("{} ({})", a.name, a.description)
            }
        })
        .collect();
    json!({"type": "function", "function": {
        "name": "delegate",
        "description": format!(
            "Hand a self-contained task to another coding agent and get its final answer. Agents: {}.",
            listed.join("; ")
        ),
        "parameters": {"type": "object", "properties": {
            "agent": {"type": "string", "enum": agents.iter().map(|a| a.name.clone()).collect::<Vec<_>>()},
            "task": {"type": "string", "description": "everything the agent needs to know: it does not see this conversation"},
            "session": {"type": "string", "description": SESSION_PARAM}},
            "required": ["agent", "task"]}
    }})
}

/// The `delegate_graph` function (graph orchestration mode).
pub(super) fn graph_spec(agents: &[AgentSpec]) -> Value {
    json!({"type": "function", "function": {
        "name": "delegate_graph",
        "description": "Hand several tasks to other agents at once. A task starts when the tasks it depends on have finished, and receives their results; a failed task stops the tasks that depend on it. Returns every task's result.",
        "parameters": {"type": "object", "properties": {"tasks": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "string", "description": "letters, digits, - and _"},
            "agent": {"type": "string", "enum": agents.iter().map(|a| a.name.clone()).collect::<Vec<_>>()},
            "task": {"type": "string"},
            "session": {"type": "string", "description": SESSION_PARAM},
            "dependsOn": {"type": "array", "items": {"type": "string"}}},
            "required": ["id", "agent", "task"]}}},
            "required": ["tasks"]}
    }})
}

pub(super) fn graph_plan(args: &Value) -> tools::ToolPlan {
    let n = args
        .get("tasks")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    tools::ToolPlan {
        title: format!("Delegate {n} tasks"),
        activity_kind: "tool",
        locations: vec![],
        review: None,
        touches: vec![],
    }
}

/// A delegate call's `agent` and (non-empty) `task`.
fn agent_and_task(args: &Value) -> Option<(&str, &str)> {
    Some((
        tools::text_arg(args, "agent")?,
        tools::text_arg(args, "task").filter(|t| !t.trim().is_empty())?,
    ))
}

const NEEDS_AGENT_AND_TASK: &str = "delegate needs `agent` and `task`";

/// At most this many delegate calls of one model step run (swarm mode); the rest fail, saying
/// so.
const SWARM_PARALLEL: usize = 8;

/// At most this many agents run at once in a graph's wave.
const GRAPH_PARALLEL: usize = 4;

pub(super) fn plan(args: &Value) -> tools::ToolPlan {
    let agent = args.get("agent").and_then(Value::as_str).unwrap_or("?");
    let task = args.get("task").and_then(Value::as_str).unwrap_or("");
    tools::ToolPlan {
        title: format!("{agent}: {}", tool_fs::cut_words(task, 60)),
        activity_kind: "tool",
        locations: vec![],
        review: None,
        touches: vec![],
    }
}

/// One delegation in flight.
struct Job {
    /// Its tool call.
    id: String,
    agent: Subagent,
    prompt: crate::jsonrpc::PendingCall,
    answer: String,
    /// Its tool calls, shown as ours.
    calls: ChildCalls,
    /// Its output is still open (a closed one is not waited on again).
    incoming_open: bool,
    /// Commands it runs through `terminal/*` (killed when the job ends).
    terminals: subagents::terminals::Terminals,
    /// What the person just allowed in one of its permission requests, when that dialog
    /// showed it: it covers that very command's `terminal/create` or that file's write, and
    /// nothing else.
    allowed: Option<Shown>,
    /// The line its result ends with: the session handle that continues this conversation.
    session_note: String,
    outcome: Option<ToolOutcome>,
}

/// A delegate call to start: `session` is the handle of an earlier delegation's session to
/// continue, or "new".
struct Wanted {
    id: String,
    agent: String,
    task: String,
    session: Option<String>,
}

impl Wanted {
    fn of(id: &str, args: &Value) -> Option<Wanted> {
        let (agent, task) = agent_and_task(args)?;
        Some(Wanted {
            id: id.to_string(),
            agent: agent.to_string(),
            task: task.to_string(),
            session: tools::text_arg(args, "session").map(String::from),
        })
    }
}

/// A delegate call allowed to start, its session chosen.
struct Ready {
    id: String,
    spec: AgentSpec,
    task: String,
    handle: String,
    /// The agent's session to reopen.
    earlier: Option<String>,
    /// What it may not change (explore and plan mode).
    read_only: Option<subagents::sandbox::Folders>,
}

/// At most this many queued pieces of a subagent's answer are shown as one output delta.
const BATCH_PIECES: usize = 256;

impl Turn {
    pub(super) fn delegate(&mut self, id: &str, args: &Value) -> ToolOutcome {
        let Some(wanted) = Wanted::of(id, args) else {
            return ToolOutcome::failed(NEEDS_AGENT_AND_TASK.into());
        };
        let mut jobs = match self.start_jobs(vec![wanted]).pop() {
            Some(Ok(job)) => vec![job],
            Some(Err(outcome)) => return *outcome,
            None => return ToolOutcome::failed("the delegation did not start".into()),
        };
        self.run_jobs(&mut jobs);
        jobs.pop()
            .and_then(|j| j.outcome)
            .unwrap_or_else(|| ToolOutcome::failed("the delegation did not finish".into()))
    }

    /// Swarm mode: several delegate calls of one model step, run together. Each is announced
    /// and settled like any tool call; their agents work in parallel.
    pub(super) fn delegate_swarm(&mut self, calls: Vec<(String, String, Value)>) {
        // Announced first, then started together (a trust dialog may wait for the person;
        // the agents already allowed start meanwhile).
        let mut wanted = vec![];
        for (id, provider_id, args) in &calls {
            let plan = plan(args);
            self.start_tool(
                id,
                provider_id,
                "delegate",
                None,
                &plan.title,
                plan.activity_kind,
                args,
                &[],
            );
            match Wanted::of(id, args) {
                Some(_) if wanted.len() == SWARM_PARALLEL => {
                    let o = ToolOutcome::failed(format!(
                        "not started: at most {SWARM_PARALLEL} delegations of one step run at once"
                    ));
                    self.finish_tool(id, o, false, 0);
                }
                Some(w) => wanted.push(w),
                None => {
                    let o = ToolOutcome::failed(NEEDS_AGENT_AND_TASK.into());
                    self.finish_tool(id, o, false, 0);
                }
            }
        }
        let ids: Vec<String> = wanted.iter().map(|w| w.id.clone()).collect();
        let mut jobs = vec![];
        let mut started = vec![];
        for (id, job) in ids.into_iter().zip(self.start_jobs(wanted)) {
            match job {
                Ok(job) => {
                    self.current_tool = Some(id);
                    self.mark_running();
                    self.current_tool = None;
                    jobs.push(job);
                    started.push(std::time::Instant::now());
                }
                Err(o) => self.finish_tool(&id, *o, false, 0),
            }
        }
        self.run_jobs(&mut jobs);
        for (job, t0) in jobs.into_iter().zip(started) {
            let outcome = job
                .outcome
                .unwrap_or_else(|| ToolOutcome::failed("the delegation did not finish".into()));
            self.finish_tool(&job.id, outcome, true, t0.elapsed().as_millis() as u64);
        }
    }

    /// Graph mode: tasks with dependencies, each a tool call under this one, started when its
    /// dependencies have finished (with their results appended to its task), in waves of at
    /// most [`GRAPH_PARALLEL`]. A failed task stops its dependents, saying so.
    pub(super) fn delegate_graph(&mut self, id: &str, args: &Value) -> ToolOutcome {
        struct Task {
            id: String,
            agent: String,
            task: String,
            deps: Vec<String>,
            session: Option<String>,
        }
        let mut tasks: Vec<Task> = vec![];
        for t in args
            .get("tasks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let (Some(tid), Some(agent), Some(task)) = (
                t.get("id").and_then(Value::as_str),
                t.get("agent").and_then(Value::as_str),
                t.get("task").and_then(Value::as_str),
            ) else {
                return ToolOutcome::failed("every task needs `id`, `agent` and `task`".into());
            };
            if tid.is_empty()
                || tid.len() > 64
                || !tid
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return ToolOutcome::failed(format!(
                    "task id {tid:?}: ids are letters, digits, - and _ (at most 64)"
                ));
            }
            if tasks.iter().any(|x| x.id == tid) {
                return ToolOutcome::failed(format!("two tasks have the id {tid:?}"));
            }
            tasks.push(Task {
                id: tid.into(),
                agent: agent.into(),
                task: task.into(),
                deps: crate::host_api::string_list(t.get("dependsOn")),
                session: tools::text_arg(t, "session").map(String::from),
            });
        }
        if tasks.is_empty() || tasks.len() > 32 {
            return ToolOutcome::failed("delegate_graph takes 1 to 32 tasks".into());
        }
        for t in &tasks {
            if let Some(d) = t.deps.iter().find(|d| !tasks.iter().any(|x| &x.id == *d)) {
                return ToolOutcome::failed(format!(
                    "task {} depends on {d:?}, which is not a task",
                    t.id
                ));
            }
        }
        // Each task's result: Ok(answer) or Err(why).
        let mut results: HashMap<String, Result<String, String>> = HashMap::new();
        let previous = self.delegating.replace(id.to_string());
        // Each task is a tool call of its own, under the delegate_graph call.
        let show_task = |this: &Self, child: &str, t: &Task| {
            this.start_tool(
                child,
                "",
                "delegate",
                Some("delegate"),
                &format!("{}: {}", t.agent, tool_fs::cut_words(&t.task, 60)),
                "tool",
                &json!({"agent": t.agent, "task": t.task}),
                &[],
            );
        };
        while results.len() < tasks.len() {
            if self.spec.cancel.is_cancelled() {
                break;
            }
            let mut wave = vec![];
            let mut stopped = false;
            let pending: Vec<&Task> = tasks
                .iter()
                .filter(|t| !results.contains_key(&t.id))
                .collect();
            for t in pending {
                let child = format!("{id}.{}", t.id);
                if let Some(bad) = t
                    .deps
                    .iter()
                    .find(|d| matches!(results.get(*d), Some(Err(_))))
                {
                    let why = format!("not run: the task it depends on, {bad}, failed");
                    show_task(self, &child, t);
                    self.finish_tool(&child, ToolOutcome::failed(why.clone()), false, 0);
                    results.insert(t.id.clone(), Err(why));
                    stopped = true;
                    continue;
                }
                if t.deps.iter().all(|d| matches!(results.get(d), Some(Ok(_))))
                    && wave.len() < GRAPH_PARALLEL
                {
                    wave.push(t);
                }
            }
            if wave.is_empty() {
                // Nothing ready and nothing newly stopped: what is left waits on itself.
                if !stopped && results.len() < tasks.len() && !self.spec.cancel.is_cancelled() {
                    let stuck: Vec<String> = tasks
                        .iter()
                        .filter(|t| !results.contains_key(&t.id))
                        .map(|t| t.id.clone())
                        .collect();
                    for tid in stuck {
                        results.insert(tid, Err("not run: its dependencies form a cycle".into()));
                    }
                }
                continue;
            }
            let mut wanted = vec![];
            for t in wave {
                let child = format!("{id}.{}", t.id);
                let mut text = t.task.clone();
                if !t.deps.is_empty() {
                    text.push_str("\n\nResults of the tasks this one depends on:");
                    for d in &t.deps {
                        if let Some(Ok(r)) = results.get(d) {
                            // Its session handle is for the model, not for the next agent.
                            let r = r.rfind("\n\n[session ").map_or(r.as_str(), |at| &r[..at]);
                            text.push_str(&format!("\n\n[{d}]\n{r}"));
                        }
                    }
                }
                show_task(self, &child, t);
                wanted.push((
                    t.id.clone(),
                    Wanted {
                        id: child,
                        agent: t.agent.clone(),
                        task: text,
                        session: t.session.clone(),
                    },
                ));
            }
            let (tids, wanted): (Vec<String>, Vec<Wanted>) = wanted.into_iter().unzip();
            let children: Vec<String> = wanted.iter().map(|w| w.id.clone()).collect();
            let mut jobs = vec![];
            for ((tid, child), job) in tids.into_iter().zip(children).zip(self.start_jobs(wanted)) {
                match job {
                    Ok(job) => jobs.push((tid, job)),
                    Err(o) => {
                        let o = *o;
                        let why = match &o.result {
                            ToolResultContent::Text { text } => text.clone(),
                            _ => "it could not start".into(),
                        };
                        self.finish_tool(&child, o, false, 0);
                        results.insert(tid, Err(why));
                    }
                }
            }
            let (ids, mut running): (Vec<String>, Vec<Job>) = jobs.into_iter().unzip();
            self.run_jobs(&mut running);
            for (tid, job) in ids.into_iter().zip(running) {
                let outcome = job
                    .outcome
                    .unwrap_or_else(|| ToolOutcome::failed("the delegation did not finish".into()));
                let text = match &outcome.result {
                    ToolResultContent::Text { text } => text.clone(),
                    _ => String::new(),
                };
                results.insert(
                    tid,
                    if outcome.status == ToolStatus::Completed {
                        Ok(text)
                    } else {
                        Err(text)
                    },
                );
                self.finish_tool(&job.id, outcome, true, 0);
            }
        }
        self.delegating = previous;
        if self.spec.cancel.is_cancelled() {
            return ToolOutcome {
                status: ToolStatus::Cancelled,
                result: ToolResultContent::Text {
                    text: "The delegations were cancelled.".into(),
                },
                truncated: false,
            };
        }
        let mut summary = String::new();
        let mut failed = 0;
        for t in &tasks {
            match results.get(&t.id) {
                Some(Ok(r)) => {
                    summary.push_str(&format!("[{}] {} — done:\n{r}\n\n", t.id, t.agent))
                }
                Some(Err(e)) => {
                    failed += 1;
                    summary.push_str(&format!("[{}] {} — failed: {e}\n\n", t.id, t.agent));
                }
                None => {}
            }
        }
        let mut summary = summary.trim_end().to_string();
        crate::host_api::keep_tail(&mut summary, tools::RESULT_TEXT_LIMIT);
        if failed == 0 {
            ToolOutcome::completed(summary, false)
        } else {
            ToolOutcome::failed(format!(
                "{failed} of {} tasks failed.\n\n{summary}",
                tasks.len()
            ))
        }
    }

    /// Starts the agents of delegate calls, together: each call is readied in order (its
    /// agent found, its session chosen, trusted — which may ask the person) and its agent is
    /// started at once on a thread of its own (spawn, `initialize`, its session), so neither a
    /// slow agent nor a pending trust dialog holds up the others. Each call's job, or its
    /// failure as the call's outcome, in order.
    fn start_jobs(&mut self, wanted: Vec<Wanted>) -> Vec<Result<Job, Box<ToolOutcome>>> {
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
    fn ready(
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
        let read_only = if read_only {
            if let Err(why) = subagents::sandbox::available() {
                return Err(failed(format!(
                    "Agent {name} is not run: in this mode nothing may change, and this machine cannot keep an agent's own tools from writing in the session's folders ({why}); switch to ask mode to delegate to it."
                )));
            }
            // Read-only: the session's folders and maka's config file; hidden: the host's data dir
            // (its token, rules and sessions would let an agent act through the host).
            let mut read_only = self.roots.clone();
            read_only.extend(crate::config::config_file_path().filter(|f| f.is_file()));
            Some(subagents::sandbox::Folders {
                read_only,
                hidden: vec![self.host.data_dir.clone()],
                cwd: self.cwd.clone(),
            })
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
    fn launched(
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
            session_note,
            outcome: None,
        })
    }

    /// A workspace-declared agent not trusted yet: the person sees the whole declaration
    /// (command, arguments, environment) and allows it once, or always for this very
    /// declaration (the only lasting answer, offered by name).
    fn trust_agent(&mut self, id: &str, spec: &AgentSpec) -> Option<ToolOutcome> {
        let workspace = self.cwd.display().to_string();
        if subagents::trusted(&self.host.data_dir, &workspace, spec) {
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
                    if let Err(e) = subagents::trust(&self.host.data_dir, &workspace, spec) {
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

    /// Serves the jobs until each has its outcome — their answers, updates and requests, as they
    /// come — or the turn is stopped (each agent is told, then stopped). Agents are stopped at
    /// the end.
    fn run_jobs(&mut self, jobs: &mut [Job]) {
        let cancel = self.spec.cancel.receiver().clone();
        loop {
            let open: Vec<usize> = (0..jobs.len())
                .filter(|&i| jobs[i].outcome.is_none())
                .collect();
            if open.is_empty() {
                break;
            }
            // (job, 0 = its answer, 1 = its messages) per select index.
            let mut which = vec![];
            let mut sel = crossbeam_channel::Select::new();
            for &i in &open {
                sel.recv(jobs[i].prompt.receiver());
                which.push((i, 0));
                if jobs[i].incoming_open {
                    sel.recv(&jobs[i].agent.incoming);
                    which.push((i, 1));
                }
            }
            let cancel_index = sel.recv(&cancel);
            let op = sel.select();
            let index = op.index();
            if index == cancel_index {
                let _ = op.recv(&cancel);
                drop(sel);
                for &i in &open {
                    let job = &mut jobs[i];
                    job.agent
                        .notify("session/cancel", json!({"sessionId": job.agent.session_id}));
                }
                // A well-behaved agent answers `cancelled` promptly; all are stopped after at
                // most CANCEL_GRACE in all, whatever they do.
                let deadline = std::time::Instant::now() + CANCEL_GRACE;
                for &i in &open {
                    let _ = jobs[i].prompt.receiver().recv_deadline(deadline);
                    let name = jobs[i].agent.name.clone();
                    self.settle_calls(&mut jobs[i].calls, "the delegation was cancelled");
                    jobs[i].outcome = Some(cancelled(&name));
                }
                break;
            }
            let (i, kind) = which[index];
            if kind == 0 {
                let answer = op.recv(jobs[i].prompt.receiver());
                drop(sel);
                self.answered(&mut jobs[i], answer);
            } else {
                let message = op.recv(&jobs[i].agent.incoming);
                drop(sel);
                let job = &mut jobs[i];
                match message {
                    Ok(m) => self.agent_message(job, m),
                    // Its output closed: its answer (an error) comes next.
                    Err(_) => job.incoming_open = false,
                }
            }
        }
        for job in jobs.iter_mut() {
            job.agent.stop();
            job.terminals = Default::default(); // kills what it left running
        }
    }

    /// An update or request of a job's agent.
    ///
    /// A piece of its answer takes the pieces already queued behind it along (up to
    /// [`DELTA_FRAME_BYTES`] or [`BATCH_PIECES`]), shown as one output delta: a fast agent
    /// costs this turn a frame per batch of what is queued rather than per piece, and nothing
    /// waits for pieces not yet sent. The first message that is not such a piece is handled
    /// next, so the order stays the agent's.
    fn agent_message(&mut self, job: &mut Job, message: Incoming) {
        let previous = self.delegating.replace(job.id.clone());
        let name = job.agent.name.clone();
        let mut next = Some(message);
        while let Some(message) = next.take() {
            if let Some(first) = answer_piece(&message) {
                let first = first.to_string();
                next = self.show_answer(job, first);
                continue;
            }
            match message {
                Incoming::Notification(n) if n.method == "session/update" => {
                    self.subagent_update(&job.id, &name, &n.params, &mut job.calls, &job.terminals)
                }
                Incoming::Notification(_) => {}
                Incoming::Request(r, responder) => self.serve_subagent(
                    &name,
                    r,
                    responder,
                    &mut job.calls,
                    &mut job.terminals,
                    &mut job.allowed,
                ),
            }
        }
        self.delegating = previous;
    }

    /// Shows `text`, a piece of the job's answer, with the pieces queued behind it; returns
    /// the first other message taken from the queue, to be handled next.
    fn show_answer(&mut self, job: &mut Job, mut text: String) -> Option<Incoming> {
        let mut next = None;
        // Bounded in messages too (empty pieces add no bytes): a cancel and the other jobs are
        // looked at again soon whatever the agent sends.
        let mut taken = 1;
        while text.len() < DELTA_FRAME_BYTES && taken < BATCH_PIECES {
            taken += 1;
            let Ok(m) = job.agent.incoming.try_recv() else {
                break;
            };
            match answer_piece(&m) {
                Some(t) => text.push_str(t),
                None => {
                    next = Some(m);
                    break;
                }
            }
        }
        if !text.is_empty() {
            job.answer.push_str(&text);
            crate::host_api::keep_tail(&mut job.answer, tools::RESULT_TEXT_LIMIT);
            // Streams into the delegate call's content.
            let current = self.current_tool.replace(job.id.clone());
            self.output("stdout", &text);
            self.current_tool = current;
        }
        next
    }

    /// A job's agent answered its prompt (or could not): its outcome.
    fn answered(
        &mut self,
        job: &mut Job,
        answer: Result<crate::jsonrpc::CallResult, crossbeam_channel::RecvError>,
    ) {
        let name = job.agent.name.clone();
        // Its updates before the answer are already read (one reader, in wire order) but may
        // still wait in the other channel: take them in first.
        while let Ok(m) = job.agent.incoming.try_recv() {
            self.agent_message(job, m);
        }
        let outcome = match answer {
            Ok(Ok(v)) => {
                let reason = v
                    .get("stopReason")
                    .and_then(Value::as_str)
                    .unwrap_or("end_turn");
                self.settle_calls(&mut job.calls, "the agent finished without settling it");
                match reason {
                    "end_turn" if job.answer.trim().is_empty() => ToolOutcome::completed(
                        format!("Agent {name} finished without an answer."),
                        false,
                    ),
                    "end_turn" => ToolOutcome::completed(std::mem::take(&mut job.answer), false),
                    other => ToolOutcome::failed(format!(
                        "agent {name} stopped ({other}); its answer so far:\n{}",
                        job.answer
                    )),
                }
            }
            Ok(Err(e)) if !job.agent.is_closed() => {
                self.settle_calls(&mut job.calls, "the agent failed");
                ToolOutcome::failed(format!("agent {name} failed: {}", e.message))
            }
            _ => {
                self.settle_calls(&mut job.calls, "the agent stopped");
                ToolOutcome::failed(format!(
                    "{}; its work so far:\n{}",
                    job.agent.stopped(),
                    job.answer
                ))
            }
        };
        let mut outcome = outcome;
        if let ToolResultContent::Text { text } = &mut outcome.result {
            // Its session stays open to a later delegation: the model is told which.
            text.push_str("\n\n");
            text.push_str(&job.session_note);
        }
        job.outcome = Some(outcome);
    }

    /// One `session/update` of the agent other than a piece of its answer
    /// ([`Turn::agent_message`] shows those), shown in this session.
    fn subagent_update(
        &mut self,
        parent: &str,
        name: &str,
        params: &Value,
        calls: &mut ChildCalls,
        terminals: &subagents::terminals::Terminals,
    ) {
        let Some(u) = params.get("update") else {
            return;
        };
        let kind = u.get("sessionUpdate").and_then(Value::as_str).unwrap_or("");
        match kind {
            "tool_call" | "tool_call_update" => {
                let Some(sub) = u.get("toolCallId").and_then(Value::as_str) else {
                    return;
                };
                // An update of a call it never announced is shown too (as a new call); a late
                // one of a settled call is not.
                let seen = if kind == "tool_call" {
                    Seen::Announced
                } else {
                    Seen::Updated
                };
                if self.show_child(name, calls, sub, u, seen).is_none() {
                    return;
                }
                calls.absorb(sub, u, |id| terminals.text_of(id));
                if let Some(status) = u.get("status").and_then(Value::as_str) {
                    self.sub_status(status, calls, sub);
                }
            }
            "plan" => {
                let steps: Vec<String> = u
                    .get("entries")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|e| {
                        Some(format!(
                            "[{}] {}",
                            e.get("status")?.as_str()?,
                            e.get("content")?.as_str()?
                        ))
                    })
                    .collect();
                let current = self.current_tool.replace(parent.to_string());
                self.output(
                    "stdout",
                    &format!("\n{name}'s plan:\n{}\n", steps.join("\n")),
                );
                self.current_tool = current;
            }
            _ => {}
        }
    }

    /// The agent's call `sub` as a tool call of this session, announced the first time it is
    /// seen (in a `tool_call`, an update, or a permission request).
    fn show_child(
        &mut self,
        name: &str,
        calls: &mut ChildCalls,
        sub: &str,
        u: &Value,
        seen: Seen,
    ) -> Option<String> {
        let (ours, new) = calls.open(sub, seen)?;
        if new {
            let title = agent_words(
                u.get("title").and_then(Value::as_str).unwrap_or("tool"),
                120,
            );
            let kind = match u.get("kind").and_then(Value::as_str) {
                Some("read") => "read",
                Some("edit" | "delete" | "move") => "edit",
                Some("search") => "search",
                Some("execute") => "command",
                _ => "tool",
            };
            let args = u.get("rawInput").cloned().unwrap_or(json!({}));
            // Its tool's name as the agent gives it (ACP `ToolCall.name`), only shown, when
            // it is a plain name — no `/`, so it never reads as one of this session's MCP tools.
            let tool = u.get("name").and_then(Value::as_str).filter(|n| {
                (1..=64).contains(&n.len())
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
            });
            self.start_tool(
                &ours,
                "",
                "delegate",
                tool,
                &format!("{name}: {title}"),
                kind,
                &args,
                &[],
            );
        }
        Some(ours)
    }

    /// A subagent tool call's status: running, or settled with what it showed.
    fn sub_status(&mut self, status: &str, calls: &mut ChildCalls, sub: &str) {
        let settled = match status {
            "completed" => ToolStatus::Completed,
            "failed" => ToolStatus::Failed,
            "in_progress" => {
                let Some(ours) = calls.get(sub) else {
                    return;
                };
                let mut st = self.cell.lock();
                let body = FrameBody::ToolRunning {
                    turn_id: self.spec.turn_id.clone(),
                    tool_call_id: ours.into(),
                };
                self.cell.emit(&mut st, body);
                return;
            }
            _ => return,
        };
        let Some(done) = calls.settle(sub) else {
            return;
        };
        self.finish_tool(
            &done.ours,
            ToolOutcome {
                status: settled,
                result: done.result,
                truncated: done.truncated,
            },
            true,
            0,
        );
    }

    /// Tool calls the agent left open: failed, with why.
    /// (A call the agent only named in a permission request that was allowed is settled as
    /// allowed: the agent reported nothing more of it.)
    fn settle_calls(&mut self, calls: &mut ChildCalls, why: &str) {
        for (ours, dialog_only) in calls.drain() {
            if dialog_only {
                let said = "Allowed (the agent reported nothing more of it).".to_string();
                self.finish_tool(&ours, ToolOutcome::completed(said, false), false, 0);
                continue;
            }
            self.finish_tool(&ours, ToolOutcome::failed(why.to_string()), false, 0);
        }
    }

    /// A request of the agent: permissions go to the person (by this session's mode), files are
    /// served inside the session's folders, commands by the host's runner (not in explore
    /// mode), anything else is not offered.
    fn serve_subagent(
        &mut self,
        name: &str,
        r: Request,
        responder: Responder,
        calls: &mut ChildCalls,
        terminals: &mut subagents::terminals::Terminals,
        allowed: &mut Option<Shown>,
    ) {
        if r.method == "terminal/wait_for_exit" {
            return terminals.wait_for_exit(&r.params, responder);
        }
        let result = match r.method.as_str() {
            "session/request_permission" => {
                let (answer, covers) = self.subagent_permission(name, &r.params, calls);
                *allowed = covers;
                Ok(answer)
            }
            "fs/read_text_file" => self.subagent_read(&r.params),
            "fs/write_text_file" => {
                let approved = allowed.take();
                self.subagent_write(name, &r.params, approved)
            }
            "terminal/create" => {
                let approved = allowed.take();
                self.subagent_terminal(name, &r.params, terminals, approved)
            }
            "terminal/output" => terminals.output(&r.params),
            "terminal/kill" => terminals.kill(&r.params),
            "terminal/release" => terminals.release(&r.params),
            other => Err(ResponseError::new(
                code::METHOD_NOT_FOUND,
                format!("maka-acp does not offer {other} to subagents"),
            )),
        };
        responder.respond(result);
    }

    /// `terminal/create`, in a folder of this session, through the same gate as the model's
    /// own `run_command` (explore refuses, plan mode waits for the approved plan, kept rules
    /// decide, ask mode asks with a title the host writes). A dialog the person already
    /// answered covers it only when that dialog showed this very command.
    fn subagent_terminal(
        &mut self,
        name: &str,
        params: &Value,
        terminals: &mut subagents::terminals::Terminals,
        approved: Option<Shown>,
    ) -> Result<Value, ResponseError> {
        // The argv that will be executed (`Terminals::create` runs exactly these words), as
        // the one `sh` line that runs it: what the gate judges, the dialog shows and a rule
        // keeps. A program path with a space or a tab in it is quoted, so no rule for the
        // program named by its first word covers it.
        let program = params.get("command").and_then(Value::as_str).unwrap_or("");
        let args = crate::host_api::string_list(params.get("args"));
        let argv: Vec<&str> = std::iter::once(program)
            .chain(args.iter().map(String::as_str))
            .collect();
        let line = permissions::shell_line(&argv);
        let cwd = match params.get("cwd").and_then(Value::as_str) {
            Some(_) => {
                let p = json!({"path": params["cwd"]});
                self.subagent_path(&p)?
            }
            None => self.cwd.clone(),
        };
        // `sh -c X` runs X: a dialog that showed X showed this command.
        let script = match (
            params.get("command").and_then(Value::as_str),
            params
                .get("args")
                .and_then(Value::as_array)
                .map(Vec::as_slice),
        ) {
            (Some("sh" | "bash" | "/bin/sh" | "/bin/bash"), Some([flag, x]))
                if flag == "-c" || flag == "-lc" =>
            {
                x.as_str()
            }
            _ => None,
        };
        // What the gate judges and the person sees is what will run, as one `sh` line: the
        // variables the agent sets (`GIT_CONFIG_*`, `LD_PRELOAD`, `PATH` can turn an allowed
        // program into other code) and a folder other than the session's come first, so no
        // kept rule or earlier dialog covers such a command (`VAR=…` and `cd … &&` are never
        // plain words): it is always put to the person.
        // A variable's name is shown as it is: only names a shell could set.
        let bad_name = params
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| e.get("name").and_then(Value::as_str))
            .find(|n| !env_name(n));
        if let Some(n) = bad_name {
            return Err(ResponseError::new(
                code::INVALID_PARAMS,
                format!(
                    "{n:?} is not a variable name (letters, digits and `_`, not first a digit)"
                ),
            ));
        }
        let env: Vec<String> = params
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                Some(format!(
                    "{}={}",
                    e.get("name").and_then(Value::as_str)?,
                    permissions::shell_word(e.get("value").and_then(Value::as_str)?)
                ))
            })
            .collect();
        let mut gated = line.clone();
        if !env.is_empty() {
            gated = format!("{} {gated}", env.join(" "));
        }
        if cwd != self.cwd {
            gated = format!(
                "cd {} && {gated}",
                permissions::shell_word(&cwd.to_string_lossy())
            );
        }
        let plain = gated == line;
        let shown = plain
            && matches!(&approved, Some(Shown::Command(a))
                if same_command(a, &line) || script.is_some_and(|x| same_command(a, x)));
        let args = json!({"command": gated});
        self.subagent_gate(name, "run_command", &args, &format!("run {gated}"), shown)?;
        terminals.create(params, &argv, &cwd)
    }

    /// A subagent's action through [`Turn::pass_gate`], its dialogs naming the delegate call
    /// and titled by the host: "<agent>: <what>".
    fn subagent_gate(
        &mut self,
        name: &str,
        tool: &str,
        args: &Value,
        what: &str,
        shown: bool,
    ) -> Result<(), ResponseError> {
        let mut plan = tools::plan(tool, args, &self.cwd)
            .map_err(|e| ResponseError::new(code::INVALID_PARAMS, e))?;
        plan.title = format!("{name}: {what}");
        let id = self.delegating.clone().unwrap_or_default();
        match self.pass_gate(&id, tool, args, &plan, shown) {
            None => Ok(()),
            Some(refused) => {
                let why = match refused.result {
                    ToolResultContent::Text { text } => text,
                    _ => "the user did not allow this".to_string(),
                };
                Err(ResponseError::new(code::INVALID_REQUEST, why))
            }
        }
    }

    /// The answer for the agent, and the command the person allowed when the dialog showed
    /// one (it covers that command's `terminal/create`, nothing else).
    fn subagent_permission(
        &mut self,
        name: &str,
        params: &Value,
        calls: &mut ChildCalls,
    ) -> (Value, Option<Shown>) {
        let options = params
            .get("options")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let option_of = |kind: &str| {
            options
                .iter()
                .find(|o| o.get("kind").and_then(Value::as_str) == Some(kind))
        };
        let id_of = |kinds: &[&str]| {
            kinds
                .iter()
                .find_map(|k| option_of(k).and_then(|o| o.get("optionId").cloned()))
        };
        let label_of = |kind: &str| {
            // The agent's words, on one line and short: the dialog says whose they are.
            option_of(kind)
                .map(|o| agent_words(o.get("name").and_then(Value::as_str).unwrap_or(kind), 60))
        };
        let tool_call = params.get("toolCall").cloned().unwrap_or(Value::Null);
        let sub = tool_call
            .get("toolCallId")
            .and_then(Value::as_str)
            .unwrap_or("");
        // The dialog points at the call it is about: shown now if the agent did not announce
        // it first (as codex does for the commands it wants to run).
        let announced_now = !sub.is_empty() && calls.get(sub).is_none();
        let ours = if sub.is_empty() {
            None
        } else {
            self.show_child(name, calls, sub, &tool_call, Seen::Dialog)
        };
        let ours = ours.or_else(|| self.delegating.clone()).unwrap_or_default();
        let title = agent_words(
            tool_call
                .get("title")
                .and_then(Value::as_str)
                .unwrap_or("an action"),
            120,
        );
        // The agent writes its title; the command its dialog covers is named by the host, as
        // it is (invisible characters spelled out). One that cannot be shown whole and plain —
        // too long, or holding control or invisible characters — covers nothing: its
        // `terminal/create` is asked about again, by the host.
        let shown = Shown::of(&tool_call, &self.cwd);
        let title = match &shown {
            Some(Shown::Command(c)) if title != *c => {
                format!("{title} (runs `{}`)", spelled_out(c, MAX_SHOWN_COMMAND))
            }
            _ => title,
        };
        // Only printable ASCII reads the same to the person as to `sh` (a no-break space or
        // a Hangul filler looks like a space and is part of a word).
        let shown = shown.filter(|s| match s {
            Shown::Command(c) => {
                c.len() <= MAX_SHOWN_COMMAND
                    && c.chars().all(|ch| ch == ' ' || ch.is_ascii_graphic())
            }
            Shown::Write(..) => true,
        });
        let (mode, planning) = {
            let st = self.cell.lock();
            let c = &st.session.configuration;
            (
                c.permission_mode,
                c.collaboration_mode == CollaborationMode::Plan,
            )
        };
        // (allowed, lasting in the agent)
        let (allowed, lasting) = match mode {
            // Plan mode: nothing is done before the plan is approved (which ends plan mode).
            _ if planning => (false, false),
            PermissionMode::Bypass => (true, false),
            PermissionMode::Explore => (false, false),
            PermissionMode::Ask => {
                // The agent's own "always" choices reach the person, named as the agent's.
                let (allow_always, reject_always) =
                    (label_of("allow_always"), label_of("reject_always"));
                let (no_allow_once, no_reject_once) = (
                    option_of("allow_once").is_none(),
                    option_of("reject_once").is_none(),
                );
                let rule = (allow_always.is_some()
                    || reject_always.is_some()
                    || no_allow_once
                    || no_reject_once)
                    .then(|| RuleTarget::InAgent {
                        name: name.to_string(),
                        allow_always,
                        reject_always,
                        no_allow_once,
                        no_reject_once,
                    });
                let request = InteractionRequest::Permission {
                    tool_call_id: ours.clone(),
                    tool_name: "delegate".into(),
                    title: format!("{name}: {title}"),
                    review: Review::Tool,
                    args: tool_call.get("rawInput").cloned(),
                    locations: vec![],
                    diff: None,
                    remember_for_turn_allowed: false,
                    rule,
                };
                match self.interact(request) {
                    Some(InteractionAnswer::Permission {
                        decision, remember, ..
                    }) => (
                        decision == Decision::Allow,
                        remember == Some(RuleScope::Workspace),
                    ),
                    _ => (false, false),
                }
            }
        };
        // Only what was picked: a lasting option is never the stand-in for a missing one-off
        // (the agent would keep it); without the option, the answer is `cancelled`.
        let chosen = match (allowed, lasting) {
            (true, true) => id_of(&["allow_always"]),
            (true, false) => id_of(&["allow_once"]),
            (false, true) => id_of(&["reject_always"]),
            (false, false) => id_of(&["reject_once"]),
        };
        let answer = match &chosen {
            Some(option_id) => json!({"outcome": {"outcome": "selected", "optionId": option_id}}),
            None => json!({"outcome": {"outcome": "cancelled"}}),
        };
        if announced_now && (!allowed || chosen.is_none()) {
            // It will not run: settled now, not left open until the delegation ends.
            if calls.settle(sub).is_some() {
                self.finish_tool(
                    &ours,
                    ToolOutcome::failed(
                        match mode {
                            _ if chosen.is_none() => {
                                "Not run: the agent offered no such choice, so it was told no."
                            }
                            _ if planning => "Not allowed before the plan is approved.",
                            PermissionMode::Explore => "Not allowed in explore mode.",
                            _ => "The user did not allow it.",
                        }
                        .into(),
                    ),
                    false,
                    0,
                );
            }
        }
        (answer, shown.filter(|_| allowed && chosen.is_some()))
    }

    /// The agent's path, resolved, inside this session's folders.
    fn subagent_path(&self, params: &Value) -> Result<PathBuf, ResponseError> {
        let p = params
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| ResponseError::invalid_params("`path` is required"))?;
        if !Path::new(p).is_absolute() {
            return Err(ResponseError::invalid_params("`path` must be absolute"));
        }
        let path = tool_fs::resolve(&self.cwd, p);
        if !self.may_touch(&path) {
            return Err(ResponseError::new(
                code::INVALID_PARAMS,
                format!("{} is outside this session's folders", path.display()),
            ));
        }
        Ok(path)
    }

    fn subagent_read(&mut self, params: &Value) -> Result<Value, ResponseError> {
        let path = self.subagent_path(params)?;
        let text = tool_fs::current_text(self, &path).ok_or_else(|| {
            ResponseError::new(
                code::RESOURCE_NOT_FOUND,
                format!("{} cannot be read", path.display()),
            )
        })?;
        let line = params
            .get("line")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1) as usize;
        let limit = params
            .get("limit")
            .and_then(Value::as_u64)
            .map(|l| l as usize);
        let content: String = match (line, limit) {
            (1, None) => text,
            _ => text
                .split_inclusive('\n')
                .skip(line - 1)
                .take(limit.unwrap_or(usize::MAX))
                .collect(),
        };
        Ok(json!({ "content": content }))
    }

    /// `fs/write_text_file`, through the same gate as the model's own `write_file` (with the
    /// diff in the dialog), recorded for undo like every write.
    fn subagent_write(
        &mut self,
        name: &str,
        params: &Value,
        approved: Option<Shown>,
    ) -> Result<Value, ResponseError> {
        let path = self.subagent_path(params)?;
        let content = params
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| ResponseError::invalid_params("`content` is required"))?;
        let args = json!({"path": path.display().to_string(), "content": content});
        let shown =
            matches!(&approved, Some(Shown::Write(p, Some(t))) if *p == path && t == content);
        let what = format!("write {}", tool_fs::display(&self.cwd, &path));
        self.subagent_gate(name, "write_file", &args, &what, shown)?;
        let old = tool_fs::current_text(self, &path);
        tool_fs::store(self, &path, old.as_deref(), content)
            .map(|()| json!({}))
            .map_err(|e| ResponseError::new(code::INTERNAL_ERROR, e))
    }
}

/// The text of an `agent_message_chunk` update (a piece of the agent's answer), if it is one.
fn answer_piece(message: &Incoming) -> Option<&str> {
    let Incoming::Notification(n) = message else {
        return None;
    };
    if n.method != "session/update" {
        return None;
    }
    let u = n.params.get("update")?;
    if u.get("sessionUpdate")?.as_str()? != "agent_message_chunk" {
        return None;
    }
    u.get("content")?.get("text")?.as_str()
}

/// A delegation's outcome when the turn was cancelled.
fn cancelled(name: &str) -> ToolOutcome {
    ToolOutcome {
        status: ToolStatus::Cancelled,
        result: ToolResultContent::Text {
            text: format!("The delegation to {name} was cancelled."),
        },
        truncated: false,
    }
}

/// The longest command a subagent's dialog can cover (longer ones are asked about again).
const MAX_SHOWN_COMMAND: usize = 500;

/// Characters a person cannot see in a dialog: controls, and the zero-width and direction
/// marks that can make text read otherwise than it runs.
fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{061c}' | '\u{feff}')
        // Spaces that are not the space `sh` splits on, and fillers that look like one.
        || (c.is_whitespace() && c != ' ')
        || matches!(c, '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}')
}

/// An agent's words for a title or label: on one line, nothing invisible, at most `max`
/// characters (cut at a word).
fn agent_words(s: &str, max: usize) -> String {
    let plain: String = s
        .chars()
        .map(|c| if invisible(c) { ' ' } else { c })
        .collect();
    tool_fs::cut_words(plain.trim(), max)
}

/// A command as a dialog shows it: invisible characters spelled out (`\n`, `\u{202e}`), at
/// most `max` characters (then "…").
fn spelled_out(c: &str, max: usize) -> String {
    let mut out = String::new();
    for ch in c.chars() {
        if out.chars().count() >= max {
            out.push('…');
            break;
        }
        match ch {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            ch if invisible(ch) => out.push_str(&format!("\\u{{{:x}}}", ch as u32)),
            ch => out.push(ch),
        }
    }
    out
}

/// `[A-Za-z_][A-Za-z0-9_]*`: a name `sh` would take as an assignment's.
fn env_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether a dialog that showed the command `a` showed `b`: the same text, or the same words
/// as `sh` splits them (the one reading of the rules: `permissions::plain_words`).
fn same_command(a: &str, b: &str) -> bool {
    a == b || permissions::plain_words(a).is_some_and(|w| Some(w) == permissions::plain_words(b))
}

/// What a subagent's permission dialog showed the person: one command, or one file (with the
/// new content when the dialog showed it as a diff: only then does it cover a write of that
/// very content).
#[derive(Debug, PartialEq)]
pub(super) enum Shown {
    Command(String),
    Write(PathBuf, Option<String>),
}

impl Shown {
    /// From the dialog's `toolCall`: its `rawInput.command` (a string or its words), else the
    /// one file it names (`rawInput.path` or its single location), resolved.
    fn of(tool_call: &Value, cwd: &Path) -> Option<Shown> {
        if let Some(c) = tool_call.pointer("/rawInput/command") {
            return match c {
                Value::String(s) => Some(Shown::Command(s.clone())),
                Value::Array(words) => Some(Shown::Command(permissions::shell_line(
                    &words.iter().filter_map(Value::as_str).collect::<Vec<_>>(),
                ))),
                _ => None,
            };
        }
        let locations = tool_call.get("locations").and_then(Value::as_array);
        let path = match locations.map(Vec::as_slice) {
            Some([one]) => one.get("path").and_then(Value::as_str),
            _ => tool_call.pointer("/rawInput/path").and_then(Value::as_str),
        }?;
        let new_text = tool_call
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c.get("type").and_then(Value::as_str) == Some("diff"))
            .and_then(|c| c.get("newText").and_then(Value::as_str))
            .map(String::from);
        Some(Shown::Write(tool_fs::resolve(cwd, path), new_text))
    }
}
