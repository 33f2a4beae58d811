//! `delegate {agent, task}`: another ACP agent does a task for the model. Its text streams into
//! the delegate call's output, each of its tool calls is shown as a tool call of this session
//! under the delegate call (`parentToolCallId`), its permission requests become this session's
//! dialogs (titled with the agent's name, decided by this session's mode), its file reads and
//! writes are served here within the session's folders, and its final answer is the result
//! the model sees. A cancel reaches it (`session/cancel`), then its process group is killed.

use super::*;
use crate::host::subagents::client::Subagent;
use crate::host::subagents::{self, AgentSpec};
use crate::host_api::wire::{Decision, Review, ToolStatus};
use crate::jsonrpc::{code, Incoming, Request, Responder, ResponseError};
use std::collections::HashMap;

/// How long starting an agent (spawn, `initialize`, `session/new`) may take.
const START_TIMEOUT: Duration = Duration::from_secs(60);

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

impl Turn {
    pub(super) fn delegate(&mut self, id: &str, args: &Value) -> ToolOutcome {
        let (Some(name), Some(task)) = (
            tools::text_arg(args, "agent"),
            tools::text_arg(args, "task").filter(|t| !t.trim().is_empty()),
        ) else {
            return ToolOutcome::failed("delegate needs `agent` and `task`".into());
        };
        let Some(spec) = self.agents.iter().find(|a| a.name == name).cloned() else {
            let names: Vec<&str> = self.agents.iter().map(|a| a.name.as_str()).collect();
            return ToolOutcome::failed(format!(
                "there is no agent named {name:?}; the agents are: {}",
                names.join(", ")
            ));
        };
        if let Some(refused) = self.trust_agent(id, &spec) {
            return refused;
        }
        let cwd = self.cwd.display().to_string();
        let dir = self.host.store.session_dir(&self.cell.id);
        let earlier = subagents::earlier_session(&dir, name);
        let mut agent = match Subagent::start(&spec, &cwd, START_TIMEOUT, earlier.as_deref()) {
            Ok(a) => a,
            Err(e) => return ToolOutcome::failed(format!("agent {name} could not start: {e}")),
        };
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
        let previous = self.delegating.replace(id.to_string());
        let outcome = self.run_delegation(id, &mut agent, task);
        self.delegating = previous;
        agent.stop();
        outcome
    }

    /// First use of a workspace-declared agent: the person allows running its command.
    fn trust_agent(&mut self, id: &str, spec: &AgentSpec) -> Option<ToolOutcome> {
        let workspace = self.cwd.display().to_string();
        if subagents::trusted(&self.host.data_dir, &workspace, spec) {
            return None;
        }
        let request = InteractionRequest::Permission {
            tool_call_id: id.into(),
            tool_name: "delegate".into(),
            title: format!(
                "Run agent {} declared by this workspace: {}",
                spec.name,
                spec.command_line()
            ),
            review: Review::Command,
            args: Some(json!({"command": spec.command_line()})),
            locations: vec![],
            diff: None,
            remember_for_turn_allowed: false,
        };
        match self.interact(request) {
            Some(InteractionAnswer::Permission {
                decision: Decision::Allow,
                ..
            }) => {
                if let Err(e) = subagents::trust(&self.host.data_dir, &workspace, spec) {
                    log::warn!("cannot remember trusting agent {}: {e}", spec.name);
                }
                None
            }
            _ => Some(ToolOutcome::failed(format!(
                "The user did not allow running agent {} ({}).",
                spec.name,
                spec.command_line()
            ))),
        }
    }

    fn run_delegation(&mut self, id: &str, agent: &mut Subagent, task: &str) -> ToolOutcome {
        let name = agent.name.clone();
        let prompt = agent.call(
            "session/prompt",
            json!({"sessionId": agent.session_id, "prompt": [{"type": "text", "text": task}]}),
        );
        let mut answer = String::new();
        // The agent's tool call id → ours.
        let mut calls: HashMap<String, String> = HashMap::new();
        let cancel = self.spec.cancel.receiver().clone();
        let stop_reason = loop {
            select! {
                recv(prompt.receiver()) -> r => match r {
                    Ok(Ok(v)) => break v.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn").to_string(),
                    Ok(Err(_)) | Err(_) if agent.is_closed() => {
                        self.settle_calls(&mut calls, "the agent stopped");
                        return ToolOutcome::failed(format!("{}; its work so far:\n{answer}", agent.stopped()));
                    }
                    Ok(Err(e)) => {
                        self.settle_calls(&mut calls, "the agent failed");
                        return ToolOutcome::failed(format!("agent {name} failed: {}", e.message));
                    }
                    Err(_) => return ToolOutcome::failed(agent.stopped()),
                },
                recv(agent.incoming) -> m => match m {
                    Ok(Incoming::Notification(n)) if n.method == "session/update" => {
                        self.subagent_update(id, &name, &n.params, &mut answer, &mut calls);
                    }
                    Ok(Incoming::Notification(_)) => {}
                    Ok(Incoming::Request(r, responder)) => self.serve_subagent(&name, r, responder, &calls),
                    // Its output closed: the prompt's answer (an error) comes next.
                    Err(_) => {}
                },
                recv(cancel) -> _ => {
                    agent.notify("session/cancel", json!({"sessionId": agent.session_id}));
                    // A well-behaved agent answers `cancelled` promptly; it is stopped either way.
                    let _ = prompt.receiver().recv_timeout(Duration::from_secs(5));
                    self.settle_calls(&mut calls, "the delegation was cancelled");
                    return ToolOutcome {
                        status: ToolStatus::Cancelled,
                        result: ToolResultContent::Text { text: format!("The delegation to {name} was cancelled.") },
                        truncated: false,
                    };
                }
            }
        };
        // Its updates before the answer are already read (one reader, in wire order) but may
        // still wait in the other channel: take them in before settling.
        while let Ok(m) = agent.incoming.try_recv() {
            match m {
                Incoming::Notification(n) if n.method == "session/update" => {
                    self.subagent_update(id, &name, &n.params, &mut answer, &mut calls);
                }
                Incoming::Request(r, responder) => self.serve_subagent(&name, r, responder, &calls),
                Incoming::Notification(_) => {}
            }
        }
        self.settle_calls(&mut calls, "the agent finished without settling it");
        match stop_reason.as_str() {
            "end_turn" if answer.trim().is_empty() => {
                ToolOutcome::completed(format!("Agent {name} finished without an answer."), false)
            }
            "end_turn" => ToolOutcome::completed(answer, false),
            other => ToolOutcome::failed(format!(
                "agent {name} stopped ({other}); its answer so far:\n{answer}"
            )),
        }
    }

    /// One `session/update` of the agent, shown in this session.
    fn subagent_update(
        &mut self,
        parent: &str,
        name: &str,
        params: &Value,
        answer: &mut String,
        calls: &mut HashMap<String, String>,
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
                    self.sub_status(&ours, status, &u, calls, sub);
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
                    self.sub_status(&ours, status, &u, calls, sub);
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
    /// served inside the session's folders, anything else is not offered.
    fn serve_subagent(
        &mut self,
        name: &str,
        r: Request,
        responder: Responder,
        calls: &HashMap<String, String>,
    ) {
        let result = match r.method.as_str() {
            "session/request_permission" => Ok(self.subagent_permission(name, &r.params, calls)),
            "fs/read_text_file" => self.subagent_read(&r.params),
            "fs/write_text_file" => self.subagent_write(&r.params),
            other => Err(ResponseError::new(
                code::METHOD_NOT_FOUND,
                format!("maka-acp does not offer {other} to subagents"),
            )),
        };
        responder.respond(result);
    }

    fn subagent_permission(
        &mut self,
        name: &str,
        params: &Value,
        calls: &HashMap<String, String>,
    ) -> Value {
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
        let mode = self.cell.lock().session.configuration.permission_mode;
        let allowed = match mode {
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
        match chosen {
            Some(option_id) => json!({"outcome": {"outcome": "selected", "optionId": option_id}}),
            None => json!({"outcome": {"outcome": "cancelled"}}),
        }
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

    fn subagent_write(&mut self, params: &Value) -> Result<Value, ResponseError> {
        let mode = self.cell.lock().session.configuration.permission_mode;
        if mode == PermissionMode::Explore {
            return Err(ResponseError::new(
                code::INVALID_REQUEST,
                "the session is in explore (read-only) mode",
            ));
        }
        let path = self.subagent_path(params)?;
        let content = params
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| ResponseError::invalid_params("`content` is required"))?;
        let old = tool_fs::current_text(self, &path);
        tool_fs::store(self, &path, old.as_deref(), content)
            .map(|()| json!({}))
            .map_err(|e| ResponseError::new(code::INTERNAL_ERROR, e))
    }
}
