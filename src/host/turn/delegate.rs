//! `delegate {agent, task}`: another ACP agent does a task for the model. Its text streams into
//! the delegate call's output, each of its tool calls is shown as a tool call of this session
//! under the delegate call (`parentToolCallId`), its permission requests become this session's
//! dialogs (titled with the agent's name, decided by this session's mode), its file reads and
//! writes are served here within the session's folders, and its final answer is the result
//! the model sees. A cancel reaches it (`session/cancel`), then its process group is killed.

use super::*;
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
            "task": {"type": "string", "description": "everything the agent needs to know: it does not see this conversation"}},
            "required": ["agent", "task"]}
    }})
}

/// The `delegate_graph` function (graph orchestration mode).
pub(super) fn graph_spec(agents: &[AgentSpec]) -> Value {
    json!({"type": "function", "function": {
        "name": "delegate_graph",
        "description": "Hand several tasks to other agents at once. A task starts when the tasks it depends on have finished, and receives their results; a failed task stops the tasks that depend on it. Returns every task's result.",
        "parameters": {"type": "object", "properties": {"tasks": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "string"},
            "agent": {"type": "string", "enum": agents.iter().map(|a| a.name.clone()).collect::<Vec<_>>()},
            "task": {"type": "string"},
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
    /// The agent's tool call id → ours.
    calls: HashMap<String, String>,
    /// Its output is still open (a closed one is not waited on again).
    incoming_open: bool,
    /// Commands it runs through `terminal/*` (killed when the job ends).
    terminals: subagents::terminals::Terminals,
    /// What the person just allowed in one of its permission requests, when that dialog
    /// showed it: it covers that very command's `terminal/create` or that file's write, and
    /// nothing else.
    allowed: Option<Shown>,
    outcome: Option<ToolOutcome>,
}

impl Turn {
    pub(super) fn delegate(&mut self, id: &str, args: &Value) -> ToolOutcome {
        let Some((name, task)) = agent_and_task(args) else {
            return ToolOutcome::failed(NEEDS_AGENT_AND_TASK.into());
        };
        let mut jobs = match self.start_job(id, name, task, true) {
            Ok(job) => vec![job],
            Err(outcome) => return *outcome,
        };
        self.run_jobs(&mut jobs);
        jobs.pop()
            .and_then(|j| j.outcome)
            .unwrap_or_else(|| ToolOutcome::failed("the delegation did not finish".into()))
    }

    /// Swarm mode: several delegate calls of one model step, run together. Each is announced
    /// and settled like any tool call; their agents work in parallel.
    pub(super) fn delegate_swarm(&mut self, calls: Vec<(String, String, Value)>) {
        let mut jobs = vec![];
        let mut started = vec![];
        for (id, provider_id, args) in &calls {
            let plan = plan(args);
            self.start_tool(
                id,
                provider_id,
                "delegate",
                &plan.title,
                plan.activity_kind,
                args,
                &[],
            );
            let Some((name, task)) = agent_and_task(args) else {
                let o = ToolOutcome::failed(NEEDS_AGENT_AND_TASK.into());
                self.finish_tool(id, o, false, 0);
                continue;
            };
            match self.start_job(id, name, task, false) {
                Ok(job) => {
                    self.current_tool = Some(id.clone());
                    self.mark_running();
                    self.current_tool = None;
                    jobs.push(job);
                    started.push(std::time::Instant::now());
                }
                Err(o) => self.finish_tool(id, *o, false, 0),
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
            if tasks.iter().any(|x| x.id == tid) {
                return ToolOutcome::failed(format!("two tasks have the id {tid:?}"));
            }
            tasks.push(Task {
                id: tid.into(),
                agent: agent.into(),
                task: task.into(),
                deps: crate::host_api::string_list(t.get("dependsOn")),
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
            let mut jobs = vec![];
            for t in wave {
                let child = format!("{id}.{}", t.id);
                let mut text = t.task.clone();
                if !t.deps.is_empty() {
                    text.push_str("\n\nResults of the tasks this one depends on:");
                    for d in &t.deps {
                        if let Some(Ok(r)) = results.get(d) {
                            text.push_str(&format!("\n\n[{d}]\n{r}"));
                        }
                    }
                }
                show_task(self, &child, t);
                match self.start_job(&child, &t.agent, &text, false) {
                    Ok(job) => jobs.push((t.id.clone(), job)),
                    Err(o) => {
                        let o = *o;
                        let why = match &o.result {
                            ToolResultContent::Text { text } => text.clone(),
                            _ => "it could not start".into(),
                        };
                        self.finish_tool(&child, o, false, 0);
                        results.insert(t.id.clone(), Err(why));
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

    /// Resolves, trusts and starts the agent of a delegate call; a failure is the call's outcome.
    /// `continued`: reopen the agent's session of an earlier delegation (one at a time only:
    /// parallel delegations to one agent must not share a session).
    fn start_job(
        &mut self,
        id: &str,
        name: &str,
        task: &str,
        continued: bool,
    ) -> Result<Job, Box<ToolOutcome>> {
        let Some(spec) = self.agents.iter().find(|a| a.name == name).cloned() else {
            let names: Vec<&str> = self.agents.iter().map(|a| a.name.as_str()).collect();
            return Err(Box::new(ToolOutcome::failed(format!(
                "there is no agent named {name:?}; the agents are: {}",
                names.join(", ")
            ))));
        };
        if let Some(refused) = self.trust_agent(id, &spec) {
            return Err(Box::new(refused));
        }
        let cwd = self.cwd.display().to_string();
        let dir = self.host.store.session_dir(&self.cell.id);
        let earlier = subagents::earlier_session(&dir, name).filter(|_| continued);
        let agent = Subagent::start(
            &spec,
            &cwd,
            START_TIMEOUT,
            earlier.as_deref(),
            self.spec.cancel.receiver(),
        )
        .map_err(|e| {
            Box::new(ToolOutcome::failed(format!(
                "agent {name} could not start: {e}"
            )))
        })?;
        // Recorded at once: a later delegation continues this conversation with the agent.
        subagents::record_session(&dir, name, &agent.session_id);
        log::info!(
            "session {}: delegating to {name} ({} session {})",
            self.cell.id,
            if agent.continued {
                "continuing its"
            } else {
                "its new"
            },
            agent.session_id
        );
        let prompt = agent.call(
            "session/prompt",
            json!({"sessionId": agent.session_id, "prompt": [{"type": "text", "text": task}]}),
        );
        Ok(Job {
            id: id.to_string(),
            agent,
            prompt,
            answer: String::new(),
            calls: HashMap::new(),
            incoming_open: true,
            terminals: Default::default(),
            allowed: None,
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
        let env: serde_json::Map<String, Value> = spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
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
                    let mut calls = std::mem::take(&mut jobs[i].calls);
                    self.settle_calls(&mut calls, "the delegation was cancelled");
                    jobs[i].outcome = Some(ToolOutcome {
                        status: ToolStatus::Cancelled,
                        result: ToolResultContent::Text {
                            text: format!("The delegation to {name} was cancelled."),
                        },
                        truncated: false,
                    });
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
    fn agent_message(&mut self, job: &mut Job, message: Incoming) {
        let previous = self.delegating.replace(job.id.clone());
        let name = job.agent.name.clone();
        match message {
            Incoming::Notification(n) if n.method == "session/update" => {
                self.subagent_update(
                    &job.id,
                    &name,
                    &n.params,
                    &mut job.answer,
                    &mut job.calls,
                    &job.terminals,
                );
            }
            Incoming::Notification(_) => {}
            Incoming::Request(r, responder) => self.serve_subagent(
                &name,
                r,
                responder,
                &job.calls,
                &mut job.terminals,
                &mut job.allowed,
            ),
        }
        self.delegating = previous;
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
                let mut calls = std::mem::take(&mut job.calls);
                self.settle_calls(&mut calls, "the agent finished without settling it");
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
                let mut calls = std::mem::take(&mut job.calls);
                self.settle_calls(&mut calls, "the agent failed");
                ToolOutcome::failed(format!("agent {name} failed: {}", e.message))
            }
            _ => {
                let mut calls = std::mem::take(&mut job.calls);
                self.settle_calls(&mut calls, "the agent stopped");
                ToolOutcome::failed(format!(
                    "{}; its work so far:\n{}",
                    job.agent.stopped(),
                    job.answer
                ))
            }
        };
        job.outcome = Some(outcome);
    }

    /// One `session/update` of the agent, shown in this session.
    fn subagent_update(
        &mut self,
        parent: &str,
        name: &str,
        params: &Value,
        answer: &mut String,
        calls: &mut HashMap<String, String>,
        terminals: &subagents::terminals::Terminals,
    ) {
        let u = params.get("update").cloned().unwrap_or(Value::Null);
        let kind = u.get("sessionUpdate").and_then(Value::as_str).unwrap_or("");
        match kind {
            "agent_message_chunk" => {
                if let Some(t) = u.pointer("/content/text").and_then(Value::as_str) {
                    answer.push_str(t);
                    crate::host_api::keep_tail(answer, tools::RESULT_TEXT_LIMIT);
                    // Streams into the delegate call's content.
                    let current = self.current_tool.replace(parent.to_string());
                    self.output("stdout", t);
                    self.current_tool = current;
                }
            }
            "tool_call" => {
                let Some(sub) = u.get("toolCallId").and_then(Value::as_str) else {
                    return;
                };
                let ours = format!("{parent}.{}", calls.len() + 1);
                calls.insert(sub.to_string(), ours.clone());
                let title = u.get("title").and_then(Value::as_str).unwrap_or("tool");
                let kind = match u.get("kind").and_then(Value::as_str) {
                    Some("read") => "read",
                    Some("edit" | "delete" | "move") => "edit",
                    Some("search") => "search",
                    Some("execute") => "command",
                    _ => "tool",
                };
                let args = u.get("rawInput").cloned().unwrap_or(json!({}));
                self.start_tool(
                    &ours,
                    "",
                    "delegate",
                    &format!("{name}: {title}"),
                    kind,
                    &args,
                    &[],
                );
                if let Some(status) = u.get("status").and_then(Value::as_str) {
                    self.sub_status(&ours, status, &u, calls, sub, terminals);
                }
            }
            "tool_call_update" => {
                let Some(sub) = u.get("toolCallId").and_then(Value::as_str) else {
                    return;
                };
                let Some(ours) = calls.get(sub).cloned() else {
                    return;
                };
                if let Some(status) = u.get("status").and_then(Value::as_str) {
                    self.sub_status(&ours, status, &u, calls, sub, terminals);
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

    /// A subagent tool call's status: running, or settled with its content as text.
    fn sub_status(
        &mut self,
        ours: &str,
        status: &str,
        u: &Value,
        calls: &mut HashMap<String, String>,
        sub: &str,
        terminals: &subagents::terminals::Terminals,
    ) {
        let settled = match status {
            "completed" => ToolStatus::Completed,
            "failed" => ToolStatus::Failed,
            "in_progress" => {
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
        let text: String = u
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| match c.get("type").and_then(Value::as_str) {
                Some("content") => c
                    .pointer("/content/text")
                    .and_then(Value::as_str)
                    .map(String::from),
                Some("diff") => Some(format!(
                    "Changed {}",
                    c.get("path").and_then(Value::as_str).unwrap_or("a file")
                )),
                // A command it ran in the terminal we gave it: what it printed.
                Some("terminal") => c
                    .get("terminalId")
                    .and_then(Value::as_str)
                    .and_then(|id| terminals.text_of(id)),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let mut text = text;
        crate::host_api::keep_tail(&mut text, tools::RESULT_TEXT_LIMIT);
        self.finish_tool(
            ours,
            ToolOutcome {
                status: settled,
                result: ToolResultContent::Text { text },
                truncated: false,
            },
            true,
            0,
        );
        calls.remove(sub);
    }

    /// Tool calls the agent left open: failed, with why.
    fn settle_calls(&mut self, calls: &mut HashMap<String, String>, why: &str) {
        for (_, ours) in calls.drain() {
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
        calls: &HashMap<String, String>,
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
        let line = std::iter::once(params.get("command").and_then(Value::as_str).unwrap_or(""))
            .chain(
                params
                    .get("args")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str),
            )
            .collect::<Vec<_>>()
            .join(" ");
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
        let env: Vec<String> = params
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                Some(format!(
                    "{}={}",
                    e.get("name").and_then(Value::as_str)?,
                    e.get("value").and_then(Value::as_str)?
                ))
            })
            .collect();
        let mut gated = line.clone();
        if !env.is_empty() {
            gated = format!("{} {gated}", env.join(" "));
        }
        if cwd != self.cwd {
            gated = format!("cd {} && {gated}", cwd.display());
        }
        let plain = gated == line;
        let shown = plain
            && matches!(&approved, Some(Shown::Command(a))
                if same_command(a, &line) || script.is_some_and(|x| same_command(a, x)));
        let args = json!({"command": gated});
        self.subagent_gate(name, "run_command", &args, &format!("run {gated}"), shown)?;
        terminals.create(params, &cwd)
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
        calls: &HashMap<String, String>,
    ) -> (Value, Option<Shown>) {
        let options = params
            .get("options")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let pick = |kinds: &[&str]| {
            kinds.iter().find_map(|k| {
                options
                    .iter()
                    .find(|o| o.get("kind").and_then(Value::as_str) == Some(k))
                    .and_then(|o| o.get("optionId").cloned())
            })
        };
        let sub = params
            .pointer("/toolCall/toolCallId")
            .and_then(Value::as_str)
            .unwrap_or("");
        let ours = calls
            .get(sub)
            .cloned()
            .or_else(|| self.delegating.clone())
            .unwrap_or_default();
        let title = params
            .pointer("/toolCall/title")
            .and_then(Value::as_str)
            .unwrap_or("an action");
        // The agent writes its title; the command its dialog covers is named by the host.
        let shown = Shown::of(params.get("toolCall").unwrap_or(&Value::Null), &self.cwd);
        let title = match &shown {
            Some(Shown::Command(c)) if !title.contains(c.as_str()) => {
                format!("{title} (runs `{c}`)")
            }
            _ => title.to_string(),
        };
        let (mode, planning) = {
            let st = self.cell.lock();
            let c = &st.session.configuration;
            (
                c.permission_mode,
                c.collaboration_mode == CollaborationMode::Plan,
            )
        };
        let allowed = match mode {
            // Plan mode: nothing is done before the plan is approved (which ends plan mode).
            _ if planning => false,
            PermissionMode::Bypass => true,
            PermissionMode::Explore => false,
            PermissionMode::Ask => {
                let request = InteractionRequest::Permission {
                    tool_call_id: ours,
                    tool_name: "delegate".into(),
                    title: format!("{name}: {title}"),
                    review: Review::Tool,
                    args: params.pointer("/toolCall/rawInput").cloned(),
                    locations: vec![],
                    diff: None,
                    remember_for_turn_allowed: false,
                    rule: None,
                };
                matches!(
                    self.interact(request),
                    Some(InteractionAnswer::Permission {
                        decision: Decision::Allow,
                        ..
                    })
                )
            }
        };
        let chosen = if allowed {
            pick(&["allow_once", "allow_always"])
        } else {
            pick(&["reject_once", "reject_always"])
        };
        let answer = match &chosen {
            Some(option_id) => json!({"outcome": {"outcome": "selected", "optionId": option_id}}),
            None => json!({"outcome": {"outcome": "cancelled"}}),
        };
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

/// Whether two command lines are the same words.
fn same_command(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
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
                Value::Array(words) => Some(Shown::Command(
                    words
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" "),
                )),
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
