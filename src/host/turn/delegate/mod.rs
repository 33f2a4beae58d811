//! `delegate {agent, task}`: another ACP agent does a task for the model. Its text streams into
//! the delegate call's output, each of its tool calls is shown as a tool call of this session
//! under the delegate call (`parentToolCallId`), its permission requests become this session's
//! dialogs (titled with the agent's name, decided by this session's mode), its file reads and
//! writes are served here within the session's folders, and its final answer is the result
//! the model sees. A cancel reaches it (`session/cancel`), then its process group is killed.
//!
//! This file: the functions the model sees (`delegate`, `delegate_graph`), a delegation's
//! parts, one delegation and swarm mode. By job: [`spawn`] starts an agent, [`jobs`] serves
//! running delegations, [`updates`] shows an agent's tool calls and plan, [`requests`] routes
//! what it asks, answered by [`approvals`] (permission dialogs), [`fs`] (files) and
//! [`terminals`] (commands); [`graph`] is graph mode.

use super::*;
use crate::acp::types::from_agents::read_object;
use crate::acp::types::from_agents::{
    AgentUpdate, CreateTerminal, ReadTextFile, SessionNotification, TerminalRef, WriteTextFile,
};
use crate::acp::types::{
    to_json, Chunk, ContentBlock, PermissionOptionKind, PermissionOutcome, PermissionReply,
    RequestPermission, SessionUpdate, StopReason, ToolCallContent, ToolCallStatus, ToolCallUpdate,
    ToolKind,
};
use crate::host::permissions;
use crate::host::subagents::calls::{ChildCalls, Seen};
use crate::host::subagents::client::Subagent;
use crate::host::subagents::{self, AgentSpec};
use crate::host_api::wire::{
    Decision, Review, RuleScope, RuleTarget, ToolResultContent, ToolStatus,
};
use crate::jsonrpc::{code, Incoming, Request, Responder, ResponseError};
use serde::Deserialize;
use std::collections::HashMap;

mod approvals;
mod fs;
mod graph;
mod jobs;
mod requests;
mod spawn;
mod terminals;
mod updates;

use approvals::{agent_words, Shown};
use jobs::MAX_ERROR;

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

/// A `delegate` call's arguments as the model gives them: a value of the wrong type is
/// absent (the call then fails, saying what it needs).
#[derive(Default, Deserialize)]
struct DelegateArgs {
    #[serde(default, deserialize_with = "crate::acp::types::default_on_error")]
    agent: Option<String>,
    #[serde(default, deserialize_with = "crate::acp::types::default_on_error")]
    task: Option<String>,
    #[serde(default, deserialize_with = "crate::acp::types::default_on_error")]
    session: Option<String>,
}

impl DelegateArgs {
    fn of(args: &Value) -> DelegateArgs {
        read_object::<DelegateArgs>(args).unwrap_or_default()
    }
}

/// A `delegate_graph` call's arguments: its tasks, each read by [`GraphTask`].
#[derive(Default, Deserialize)]
struct GraphArgs {
    #[serde(default, deserialize_with = "crate::acp::types::default_on_error")]
    tasks: Vec<Value>,
}

/// One task of a graph: `id`, `agent` and `task` needed, `session` and `dependsOn` (its
/// strings) optional.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GraphTask {
    #[serde(default, deserialize_with = "crate::acp::types::default_on_error")]
    id: Option<String>,
    #[serde(flatten)]
    call: DelegateArgs,
    #[serde(default, deserialize_with = "crate::acp::types::default_on_error")]
    depends_on: Vec<Value>,
}

impl GraphArgs {
    fn of(args: &Value) -> GraphArgs {
        read_object::<GraphArgs>(args).unwrap_or_default()
    }
}

pub(super) fn graph_plan(args: &Value) -> tools::ToolPlan {
    let n = GraphArgs::of(args).tasks.len();
    tools::ToolPlan {
        title: format!("Delegate {n} tasks"),
        activity_kind: "tool",
        locations: vec![],
        review: None,
        touches: vec![],
    }
}

/// A delegate call's `agent` and (non-empty) `task`.
fn agent_and_task(args: &DelegateArgs) -> Option<(&str, &str)> {
    Some((
        args.agent.as_deref()?,
        args.task.as_deref().filter(|t| !t.trim().is_empty())?,
    ))
}

const NEEDS_AGENT_AND_TASK: &str = "delegate needs `agent` and `task`";

/// At most this many delegate calls of one model step run (swarm mode); the rest fail, saying
/// so.
const SWARM_PARALLEL: usize = 8;

pub(super) fn plan(args: &Value) -> tools::ToolPlan {
    let args = DelegateArgs::of(args);
    let agent = args.agent.as_deref().unwrap_or("?");
    let task = args.task.as_deref().unwrap_or("");
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
    /// How many of its `session/update`s did not read (only the first few are logged).
    unread: usize,
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
        let args = DelegateArgs::of(args);
        let (agent, task) = agent_and_task(&args)?;
        Some(Wanted {
            id: id.to_string(),
            agent: agent.to_string(),
            task: task.to_string(),
            session: args.session.clone(),
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
    read_only: Option<crate::host::sandbox::Folders>,
}

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
                    self.mark_running(false);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The model's arguments read typed, as leniently as before: a value of the wrong type is
    /// absent, so the call fails saying what it needs.
    #[test]
    fn the_models_delegate_arguments_read_as_far_as_they_go() {
        let rows = [
            (json!({"agent": "a", "task": "t"}), Some(("a", "t", None))),
            (
                json!({"agent": "a", "task": "t", "session": "a#2", "extra": 1}),
                Some(("a", "t", Some("a#2"))),
            ),
            (
                json!({"agent": "a", "task": "t", "session": 2}),
                Some(("a", "t", None)),
            ),
            (json!({"agent": 5, "task": "t"}), None),
            (json!({"agent": "a", "task": "   "}), None),
            (json!({"agent": "a"}), None),
            (json!("delegate a t"), None),
        ];
        for (args, want) in rows {
            let got = Wanted::of("c", &args).map(|w| (w.agent, w.task, w.session));
            let want = want.map(|(a, t, s): (&str, &str, Option<&str>)| {
                (a.to_string(), t.to_string(), s.map(String::from))
            });
            assert_eq!(got, want, "{args}");
        }
        let graph = json!({"tasks": [
            {"id": "x", "agent": "a", "task": "t", "session": "new", "dependsOn": ["y", 3]},
            "not a task",
            {"id": 1}]});
        assert_eq!(graph_plan(&graph).title, "Delegate 3 tasks");
        let tasks: Vec<GraphTask> = GraphArgs::of(&graph)
            .tasks
            .iter()
            .map(|t| GraphTask::deserialize(t).unwrap_or_default())
            .collect();
        assert_eq!(tasks[0].id.as_deref(), Some("x"));
        assert_eq!(tasks[0].call.session.as_deref(), Some("new"));
        assert_eq!(tasks[0].depends_on, [json!("y"), json!(3)]);
        assert!(tasks[1].id.is_none() && tasks[2].id.is_none());
        assert_eq!(graph_plan(&json!({"tasks": 5})).title, "Delegate 0 tasks");
    }
}
