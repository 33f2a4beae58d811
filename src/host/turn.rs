//! One thread per active turn: model steps, tool calls (gated by the permission mode, the
//! session's roots and the user's answers), and finally one `turn_terminal` frame — always the
//! last frame of its run, after every delta, tool and usage frame it caused.

use super::models::{self, Finish, ModelEvent, ModelRequest};
use super::session::{ActiveStream, CancelToken, InteractionSlot, SessionCell};
use super::tools::{self, fs as tool_fs, ToolEnv, ToolOutcome};
use super::{random_id, Host};
use crate::host_api::wire::{
    now_ms, BoundaryPath, CollaborationMode, ContextUsage, FileDiff, FrameBody, Interaction,
    InteractionAnswer, InteractionOutcome, InteractionRequest, Location, MessageContent,
    PermissionMode, PlanEntry, Question, TokenUsage, ToolResultContent, TranscriptBody,
    TurnOutcome, TurnStatus,
};
use crossbeam_channel::{bounded, select};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub const DEFAULT_MAX_STEPS: usize = 50;

/// Model steps per turn when `turn.start` does not say: `MAKA_MAX_STEPS`, else 50.
pub fn default_max_steps() -> usize {
    static STEPS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *STEPS.get_or_init(|| {
        std::env::var("MAKA_MAX_STEPS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|n| (1..=500).contains(n))
            .unwrap_or(DEFAULT_MAX_STEPS)
    })
}
/// Tool arguments carried inline in frames; longer ones are cut and flagged.
const ARGS_INLINE_LIMIT: usize = 16 * 1024;
/// Client-call inputs larger than this (serialized) travel by reference.
const CALL_INPUT_INLINE: usize = 256 * 1024;
/// Text deltas are cut into frames of at most this many bytes.
const DELTA_FRAME_BYTES: usize = 64 * 1024;
/// How long a delegated editor call may take before the tool fails.
const CLIENT_CALL_TIMEOUT: Duration = Duration::from_secs(300);

pub struct TurnSpec {
    pub turn_id: String,
    pub run_id: String,
    pub prompt_text: String,
    pub max_steps: usize,
    pub cancel: CancelToken,
}

struct Terminal {
    outcome: TurnOutcome,
    reason: String,
    failure_class: Option<String>,
    failure_message: Option<String>,
    failure_details: Option<Value>,
}

impl Terminal {
    fn completed(reason: &str) -> Terminal {
        Terminal {
            outcome: TurnOutcome::Completed,
            reason: reason.into(),
            failure_class: None,
            failure_message: None,
            failure_details: None,
        }
    }
    fn cancelled() -> Terminal {
        Terminal {
            outcome: TurnOutcome::Cancelled,
            reason: "user_stop".into(),
            failure_class: None,
            failure_message: None,
            failure_details: None,
        }
    }
    fn failed(class: &str, message: impl Into<String>) -> Terminal {
        Terminal {
            outcome: TurnOutcome::Failed,
            reason: "error".into(),
            failure_class: Some(class.into()),
            failure_message: Some(tool_fs::cut_words(&message.into(), 400)),
            failure_details: None,
        }
    }
    fn with_details(mut self, details: Option<Value>) -> Terminal {
        self.failure_details = details;
        self
    }
}

struct Turn {
    host: Arc<Host>,
    cell: Arc<SessionCell>,
    spec: TurnSpec,
    cwd: PathBuf,
    roots: Vec<PathBuf>,
    current_tool: Option<String>,
    /// The current tool passed its gate and started (`tool_running` was emitted).
    current_ran: bool,
    out_seq: u64,
    /// Tools of the session's MCP servers, as of the turn's start.
    mcp_tools: Vec<super::mcp::McpTool>,
}

/// Runs an admitted turn to its terminal frame (on the caller's thread).
pub fn run(host: Arc<Host>, cell: Arc<SessionCell>, spec: TurnSpec) {
    let (cwd, roots) = {
        let st = cell.lock();
        let cwd = tool_fs::resolve(Path::new("/"), st.session.workspace.path());
        let mut roots = vec![cwd.clone()];
        roots.extend(
            st.session
                .additional_directories
                .iter()
                .map(|d| tool_fs::resolve(Path::new("/"), d)),
        );
        (cwd, roots)
    };
    let mut turn = Turn {
        host,
        cell,
        spec,
        cwd,
        roots,
        current_tool: None,
        current_ran: false,
        out_seq: 0,
        mcp_tools: vec![],
    };
    let command = super::commands::parse(&turn.spec.prompt_text)
        .map(|(name, rest)| (name.to_string(), rest.to_string()));
    let terminal = match command {
        Some((name, rest)) => turn
            .command(&name, &rest)
            .unwrap_or_else(|| turn.agent_loop()),
        None => turn.agent_loop(),
    };
    turn.finish(terminal);
}

impl Turn {
    fn agent_loop(&mut self) -> Terminal {
        // The session's MCP servers: wait (bounded) for them, and say which are missing.
        let mcp = self.cell.lock().mcp.clone();
        if let Some(set) = mcp {
            let (tools, problems) = set.ready(super::mcp::start_timeout());
            self.mcp_tools = tools;
            if !problems.is_empty() {
                // Told to the person, kept out of the model's context (a trailing assistant
                // message after the prompt would make some servers continue it).
                self.notice(format!("⚠ {}\n\n", problems.join("\n⚠ ")));
            }
        }
        for step in 0..self.spec.max_steps {
            if self.spec.cancel.is_cancelled() {
                return Terminal::cancelled();
            }
            match self.model_step(step) {
                Ok(StepResult::Done(t)) => return t,
                Ok(StepResult::Continue) => {}
                Err(t) => return t,
            }
        }
        Terminal::completed("step_limit")
    }

    fn model_step(&mut self, step: usize) -> Result<StepResult, Terminal> {
        let (configuration, mut messages) = {
            let st = self.cell.lock();
            (
                st.session.configuration.clone(),
                build_messages(&self.cwd, st.transcript_items()),
            )
        };
        if configuration.collaboration_mode == CollaborationMode::Plan {
            if let Some(system) = messages.first_mut() {
                let text = system["content"].as_str().unwrap_or_default();
                system["content"] = json!(format!("{text} {PLAN_MODE_NOTE}"));
            }
        }
        let providers = self.host.providers();
        let (conn, model) = providers
            .resolve(&configuration.model_target)
            .map_err(|e| Terminal::failed("capability_unavailable", e.message))?;
        let context_window = model.context_window;
        let request = ModelRequest {
            model: model.id.clone(),
            messages,
            tools: tools::specs()
                .into_iter()
                .chain(self.mcp_tools.iter().map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.exposed,
                        "description": format!("[MCP server {}] {}", t.server, t.description),
                        "parameters": t.input_schema,
                    }})
                }))
                .collect(),
            thinking_level: configuration.thinking_level.clone(),
            turn_prompt: self.spec.prompt_text.clone(),
            step,
        };
        let rx = models::start_step(conn, request, self.spec.cancel.clone());
        let text_id = format!("m_{}_{step}", self.spec.run_id);
        let thinking_id = format!("th_{}_{step}", self.spec.run_id);
        let (mut text, mut thinking) = (String::new(), String::new());
        // (provider's id, name, arguments)
        let mut calls: Vec<(String, String, String)> = Vec::new();
        let idle = models::idle_timeout();
        let finish = loop {
            let event = select! {
                recv(rx) -> ev => ev.ok(),
                recv(self.spec.cancel.receiver()) -> _ => {
                    self.persist_assistant(&text_id, &text, &thinking);
                    return Err(Terminal::cancelled());
                }
                default(idle) => {
                    // Silent (or keep-alives only): the call is abandoned, the turn fails.
                    self.persist_assistant(&text_id, &text, &thinking);
                    return Err(Terminal::failed("provider_timeout", idle_message(idle)));
                }
            };
            let Some(event) = event else {
                self.persist_assistant(&text_id, &text, &thinking);
                if self.spec.cancel.is_cancelled() {
                    return Err(Terminal::cancelled());
                }
                return Err(Terminal::failed(
                    "provider_error",
                    "the model stream ended without finishing",
                ));
            };
            match event {
                ModelEvent::Text(t) => self.delta(true, &text_id, &mut text, t),
                ModelEvent::Thinking(t) => self.delta(false, &thinking_id, &mut thinking, t),
                ModelEvent::ToolCall {
                    id,
                    name,
                    arguments,
                } => calls.push((id, name, arguments)),
                ModelEvent::Usage { input, output } => self.usage(input, output, context_window),
                ModelEvent::Retry {
                    attempt,
                    delay_ms,
                    reason,
                } => {
                    let mut st = self.cell.lock();
                    let body = FrameBody::TurnStatus {
                        turn_id: self.spec.turn_id.clone(),
                        run_id: self.spec.run_id.clone(),
                        status: TurnStatus::Running,
                        provider_retry: Some(
                            json!({"attempt": attempt, "delayMs": delay_ms, "reason": reason}),
                        ),
                    };
                    self.cell.emit(&mut st, body);
                }
                ModelEvent::Progress => {}
                ModelEvent::Finish(f) => break f,
                ModelEvent::Error {
                    class,
                    message,
                    details,
                } => {
                    self.persist_assistant(&text_id, &text, &thinking);
                    return Err(Terminal::failed(&class, message).with_details(details));
                }
            }
        };
        self.persist_assistant(&text_id, &text, &thinking);
        match finish {
            Finish::Length => {
                return Ok(StepResult::Done(Terminal {
                    outcome: TurnOutcome::MaxTokens,
                    reason: "max_tokens".into(),
                    failure_class: None,
                    failure_message: None,
                    failure_details: None,
                }))
            }
            Finish::Refusal => {
                return Ok(StepResult::Done(Terminal {
                    outcome: TurnOutcome::Refused,
                    reason: "refusal".into(),
                    failure_class: None,
                    failure_message: None,
                    failure_details: None,
                }))
            }
            Finish::Stop | Finish::ToolCalls if calls.is_empty() => {
                return Ok(StepResult::Done(Terminal::completed("end_turn")))
            }
            _ => {}
        }
        // Providers repeat their ids (`call_0` every step, or none at all): clients need ids
        // unique within the session, so the host mints them and keeps the provider's id only
        // for the model's own history.
        let run = self.spec.run_id.trim_start_matches("r_").to_string();
        for (n, (provider_id, name, arguments)) in calls.into_iter().enumerate() {
            if self.spec.cancel.is_cancelled() {
                return Err(Terminal::cancelled());
            }
            let id = format!("tc_{run}_{step}_{n}");
            self.tool_call(&id, &provider_id, &name, &arguments);
        }
        if self.spec.cancel.is_cancelled() {
            return Err(Terminal::cancelled());
        }
        Ok(StepResult::Continue)
    }

    fn delta(&self, is_text: bool, message_id: &str, acc: &mut String, t: String) {
        // A provider may send one huge chunk: frames stay bounded.
        if t.len() > DELTA_FRAME_BYTES {
            let mut rest = t.as_str();
            while !rest.is_empty() {
                let mut end = rest.len().min(DELTA_FRAME_BYTES);
                while !rest.is_char_boundary(end) {
                    end -= 1;
                }
                self.delta(is_text, message_id, acc, rest[..end].to_string());
                rest = &rest[end..];
            }
            return;
        }
        let mut st = self.cell.make_room(self.cell.lock());
        let start_offset = acc.len() as u64;
        acc.push_str(&t);
        if let Some(active) = st.active.as_mut() {
            match active
                .streams
                .iter_mut()
                .find(|s| s.message_id == message_id)
            {
                Some(s) => s.text.push_str(&t),
                None => active.streams.push(ActiveStream {
                    kind: if is_text { "text" } else { "thinking" },
                    message_id: message_id.to_string(),
                    text: t.clone(),
                }),
            }
        }
        let (turn_id, message_id) = (self.spec.turn_id.clone(), message_id.to_string());
        let body = if is_text {
            FrameBody::TextDelta {
                turn_id,
                message_id,
                start_offset,
                text: t,
                complete: false,
            }
        } else {
            FrameBody::ThinkingDelta {
                turn_id,
                message_id,
                start_offset,
                text: t,
                complete: false,
            }
        };
        self.cell.emit(&mut st, body);
    }

    fn usage(&self, input: u64, output: u64, window: u64) {
        let mut st = self.cell.lock();
        st.usage_totals.input_tokens += input;
        st.usage_totals.output_tokens += output;
        let body = FrameBody::Usage {
            turn_id: Some(self.spec.turn_id.clone()),
            delta: TokenUsage {
                input_tokens: input,
                output_tokens: output,
                reasoning_tokens: 0,
            },
            totals: st.usage_totals.clone(),
            context: Some(ContextUsage {
                used_tokens: input + output,
                window_tokens: window,
            }),
        };
        self.cell.emit(&mut st, body);
    }

    /// Closes the streamed messages and makes them durable.
    fn persist_assistant(&self, message_id: &str, text: &str, thinking: &str) {
        let mut st = self.cell.lock();
        for (is_text, id, acc) in [
            (false, format!("th_{}", &message_id[2..]), thinking),
            (true, message_id.to_string(), text),
        ] {
            if !acc.is_empty() {
                self.close_stream(&mut st, is_text, id, acc.len());
            }
        }
        if let Some(a) = st.active.as_mut() {
            a.streams.clear();
        }
        if text.is_empty() && thinking.is_empty() {
            return;
        }
        let body = TranscriptBody::Assistant {
            message_id: message_id.to_string(),
            text: (!text.is_empty()).then(|| text.to_string()),
            thinking: (!thinking.is_empty()).then(|| thinking.to_string()),
        };
        self.append(&mut st, vec![body]);
    }

    /// The last frame of a streamed message: `complete`, no text, offset = its whole length.
    fn close_stream(
        &self,
        st: &mut super::session::SessionState,
        is_text: bool,
        message_id: String,
        len: usize,
    ) {
        let (turn_id, start_offset) = (self.spec.turn_id.clone(), len as u64);
        let body = if is_text {
            FrameBody::TextDelta {
                turn_id,
                message_id,
                start_offset,
                text: String::new(),
                complete: true,
            }
        } else {
            FrameBody::ThinkingDelta {
                turn_id,
                message_id,
                start_offset,
                text: String::new(),
                complete: true,
            }
        };
        self.cell.emit(st, body);
    }

    fn append(&self, st: &mut super::session::SessionState, bodies: Vec<TranscriptBody>) {
        let items = bodies
            .into_iter()
            .map(|b| (self.spec.turn_id.clone(), b))
            .collect();
        match st.append_transcript(items) {
            Ok(through) => {
                self.cell.emit(
                    st,
                    FrameBody::TranscriptAdvanced {
                        through_message_seq: through,
                    },
                );
            }
            Err(e) => log::error!("session {}: {e}", self.cell.id),
        }
    }

    fn tool_call(&mut self, id: &str, provider_id: &str, name: &str, arguments: &str) {
        let args: Value = match serde_json::from_str(arguments) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) | Err(_) if arguments.trim().is_empty() => json!({}),
            Ok(other) => json!({ "_raw": other }),
            Err(e) => json!({ "_unparsable": arguments, "_error": e.to_string() }),
        };
        let plan = match tools::plan(name, &args, &self.cwd) {
            Err(e) => match self.mcp_tools.iter().find(|t| t.exposed == name) {
                // MCP tools are gated like built-in tools that act: explore refuses, ask asks.
                Some(t) => Ok(tools::ToolPlan {
                    title: format!("{}: {}", t.server, t.name),
                    activity_kind: "tool",
                    locations: vec![],
                    review: Some("tool"),
                    touches: vec![],
                }),
                None => Err(e),
            },
            ok => ok,
        };
        let (title, kind, locations) = match &plan {
            Ok(p) => (p.title.clone(), p.activity_kind, p.locations.clone()),
            Err(_) => (name.to_string(), "tool", vec![]),
        };
        self.start_tool(id, provider_id, name, &title, kind, &args, &locations);
        self.current_tool = Some(id.to_string());
        self.current_ran = false;
        let started = std::time::Instant::now();
        let outcome = match plan {
            Err(msg) => ToolOutcome::failed(msg),
            Ok(_) if args.get("_unparsable").is_some() => ToolOutcome::failed(format!(
                "the arguments are not valid JSON: {}",
                args["_error"]
            )),
            Ok(plan) => self.gate_and_run(id, name, &args, plan),
        };
        self.current_tool = None;
        let ran = std::mem::take(&mut self.current_ran);
        self.finish_tool(id, outcome, ran, started.elapsed().as_millis() as u64);
    }

    #[allow(clippy::too_many_arguments)]
    fn start_tool(
        &self,
        id: &str,
        provider_id: &str,
        name: &str,
        title: &str,
        kind: &str,
        args: &Value,
        locations: &[Location],
    ) {
        let (inline, truncated) = bounded_args(args);
        let mut st = self.cell.lock();
        if let Some(a) = st.active.as_mut() {
            a.tools.push(crate::host_api::ops::ActiveTool {
                tool_call_id: id.into(),
                tool_name: name.into(),
                title: title.into(),
                activity_kind: kind.into(),
                args: inline.clone(),
                locations: locations.to_vec(),
                output_tail: String::new(),
            });
        }
        let body = FrameBody::ToolStart {
            turn_id: self.spec.turn_id.clone(),
            tool_call_id: id.into(),
            tool_name: name.into(),
            title: title.into(),
            activity_kind: kind.into(),
            args: inline.clone(),
            args_truncated: truncated,
            locations: locations.to_vec(),
        };
        self.cell.emit(&mut st, body);
        let item = TranscriptBody::ToolCall {
            tool_call_id: id.into(),
            tool_name: name.into(),
            title: title.into(),
            activity_kind: kind.into(),
            args: args.clone(),
            locations: locations.to_vec(),
            provider_call_id: (!provider_id.is_empty() && provider_id != id)
                .then(|| provider_id.to_string()),
        };
        self.append(&mut st, vec![item]);
    }

    /// The current tool passed its gate: clients show it `in_progress` from here.
    fn mark_running(&mut self) {
        let Some(id) = self.current_tool.clone() else {
            return;
        };
        self.current_ran = true;
        let mut st = self.cell.lock();
        let body = FrameBody::ToolRunning {
            turn_id: self.spec.turn_id.clone(),
            tool_call_id: id,
        };
        self.cell.emit(&mut st, body);
    }

    fn finish_tool(&self, id: &str, outcome: ToolOutcome, ran: bool, duration_ms: u64) {
        let mut st = self.cell.lock();
        if let Some(a) = st.active.as_mut() {
            a.tools.retain(|t| t.tool_call_id != id);
        }
        let body = FrameBody::ToolResult {
            turn_id: self.spec.turn_id.clone(),
            tool_call_id: id.into(),
            status: outcome.status.into(),
            result: outcome.result.clone(),
            truncated: outcome.truncated,
            duration_ms: Some(duration_ms),
        };
        self.cell.emit(&mut st, body);
        let item = TranscriptBody::ToolResult {
            tool_call_id: id.into(),
            status: outcome.status.into(),
            result: outcome.result,
            truncated: outcome.truncated,
            ran,
        };
        self.append(&mut st, vec![item]);
    }

    fn gate_and_run(
        &mut self,
        id: &str,
        name: &str,
        args: &Value,
        plan: tools::ToolPlan,
    ) -> ToolOutcome {
        let mode = self.cell.lock().session.configuration.permission_mode;
        if mode == PermissionMode::Explore && plan.review.is_some() {
            return ToolOutcome::failed(format!(
                "Refused: the session is in explore (read-only) mode, so {name} is not allowed. Ask the user to switch modes."
            ));
        }
        if plan.review.is_some() {
            let collaboration = self.cell.lock().session.configuration.collaboration_mode;
            if collaboration == CollaborationMode::Plan {
                if let Some(refused) = self.approve_plan(id, name, &plan.title) {
                    return refused;
                }
            }
        }
        // Paths outside the session's roots need an explicit approval, in every mode.
        let outside: Vec<BoundaryPath> = plan
            .touches
            .iter()
            .filter(|(p, _)| !self.roots.iter().any(|r| p.starts_with(r)) && !self.approved(p))
            .map(|(p, access)| BoundaryPath {
                path: p.display().to_string(),
                access: (*access).into(),
            })
            .collect();
        if !outside.is_empty() {
            let listed: Vec<&str> = outside.iter().map(|b| b.path.as_str()).collect();
            let request = InteractionRequest::SandboxBoundary {
                tool_call_id: id.into(),
                justification: format!(
                    "{} needs access outside the session's folders: {}",
                    plan.title,
                    listed.join(", ")
                ),
                paths: outside.clone(),
            };
            match self.interact(request) {
                Some(InteractionAnswer::SandboxBoundary { decision }) if decision == "allow" => {
                    if let Some(a) = self.cell.lock().active.as_mut() {
                        a.approved_paths
                            .extend(outside.iter().map(|b| b.path.clone()));
                    }
                }
                _ => {
                    return ToolOutcome::failed(format!(
                        "Access outside the session's folders was denied: {}",
                        listed.join(", ")
                    ))
                }
            }
        }
        if let (PermissionMode::Ask, Some(review)) = (mode, plan.review) {
            let remembered = self
                .cell
                .lock()
                .active
                .as_ref()
                .is_some_and(|a| a.remembered.contains(review));
            if !remembered {
                let diff = self.preview(name, args);
                let request = InteractionRequest::Permission {
                    tool_call_id: id.into(),
                    tool_name: name.into(),
                    title: plan.title.clone(),
                    review: review.into(),
                    args: Some(bounded_args(args).0),
                    locations: plan.locations.clone(),
                    diff,
                    remember_for_turn_allowed: true,
                };
                match self.interact(request) {
                    Some(InteractionAnswer::Permission {
                        decision,
                        remember_for_turn,
                    }) if decision == "allow" => {
                        if remember_for_turn {
                            if let Some(a) = self.cell.lock().active.as_mut() {
                                a.remembered.insert(review.to_string());
                            }
                        }
                    }
                    Some(_) => return ToolOutcome::failed("The user denied this action.".into()),
                    None if self.spec.cancel.is_cancelled() => {
                        return ToolOutcome {
                            status: "cancelled",
                            ..ToolOutcome::failed("The turn was stopped before this ran.".into())
                        }
                    }
                    None => {
                        return ToolOutcome::failed(
                            "No permission was given for this action.".into(),
                        )
                    }
                }
            }
        }
        self.mark_running();
        match name {
            "update_plan" => self.update_plan(args),
            "ask_user" => self.ask_user(id, args),
            _ if self.mcp_tools.iter().any(|t| t.exposed == name) => self.call_mcp(name, args),
            _ => {
                let outcome = tools::execute(self, name, args);
                if self.spec.cancel.is_cancelled() && outcome.status != "completed" {
                    return ToolOutcome {
                        status: "cancelled",
                        ..outcome
                    };
                }
                outcome
            }
        }
    }

    /// Plan mode: the first write or command needs the user's approval of the latest plan;
    /// approving it switches the session to `agent` (clients see the configuration change).
    /// Returns the refusal, or `None` when the plan is approved.
    fn approve_plan(&mut self, id: &str, name: &str, title: &str) -> Option<ToolOutcome> {
        let latest = self
            .cell
            .lock()
            .transcript_items()
            .iter()
            .rev()
            .find_map(|i| match &i.body {
                TranscriptBody::Plan { entries } => Some(entries.clone()),
                _ => None,
            });
        let Some(entries) = latest else {
            return Some(ToolOutcome::failed(format!(
                "Refused: plan mode is on, so {name} must wait. First propose a plan with update_plan; the user approves it before anything is written or run."
            )));
        };
        let request = InteractionRequest::Permission {
            tool_call_id: id.into(),
            tool_name: name.into(),
            title: format!("Approve the plan and start with: {title}"),
            review: "plan".into(),
            args: Some(json!({"plan": entries})),
            locations: vec![],
            diff: None,
            remember_for_turn_allowed: false,
        };
        match self.interact(request) {
            Some(InteractionAnswer::Permission { decision, .. }) if decision == "allow" => {
                let patch = crate::host_api::wire::ConfigurationPatch {
                    collaboration_mode: Some(CollaborationMode::Agent),
                    ..Default::default()
                };
                self.configure(&patch).err().map(ToolOutcome::failed)
            }
            None if self.spec.cancel.is_cancelled() => Some(ToolOutcome {
                status: "cancelled",
                ..ToolOutcome::failed("The turn was stopped before this ran.".into())
            }),
            _ => Some(ToolOutcome::failed(
                "The user did not approve the plan. Stay in plan mode: revise it with update_plan or ask what to change.".into(),
            )),
        }
    }

    /// Changes the session's configuration as the agent (no CAS: the agent owns its turn).
    fn configure(&self, patch: &crate::host_api::wire::ConfigurationPatch) -> Result<(), String> {
        let mut st = self.cell.lock();
        super::ops::commit_configuration(&self.host, &self.cell, &mut st, patch)
            .map_err(|e| e.message)
    }

    /// Tells the person something that is not part of the model's conversation: streamed like
    /// agent text, stored as a notice (replayed, never sent to the model).
    fn notice(&self, text: String) {
        let id = random_id("n");
        let mut acc = String::new();
        self.delta(true, &id, &mut acc, text);
        let mut st = self.cell.lock();
        self.close_stream(&mut st, true, id.clone(), acc.len());
        if let Some(a) = st.active.as_mut() {
            a.streams.retain(|s| s.message_id != id);
        }
        self.append(
            &mut st,
            vec![TranscriptBody::Notice {
                message_id: id,
                text: acc,
            }],
        );
    }

    /// Answers with agent text, streamed and made durable like a model reply.
    fn say(&self, text: String) {
        let id = format!("m_{}_cmd", self.spec.run_id);
        let mut acc = String::new();
        self.delta(true, &id, &mut acc, text);
        self.persist_assistant(&id, &acc, "");
    }

    /// Runs a slash command. `None`: the command set things up and the model takes the turn.
    fn command(&mut self, name: &str, rest: &str) -> Option<Terminal> {
        use crate::host_api::wire::ConfigurationPatch;
        let configuration = self.cell.lock().session.configuration.clone();
        let text = match name {
            "help" => super::commands::help_text(),
            "mode" if rest.is_empty() => format!(
                "Mode: {}. Available: ask (asks before writes and commands), bypass (no questions), explore (read-only).",
                mode_name(configuration.permission_mode)
            ),
            "mode" => match serde_json::from_value::<PermissionMode>(json!(rest)) {
                Ok(m) => {
                    let patch = ConfigurationPatch {
                        permission_mode: Some(m),
                        ..Default::default()
                    };
                    match self.configure(&patch) {
                        Ok(()) => format!("Mode set to {}.", mode_name(m)),
                        Err(e) => format!("Could not change the mode: {e}"),
                    }
                }
                Err(_) => format!("Unknown mode {rest:?}. Use ask, bypass or explore."),
            },
            "model" => self.model_command(rest, &configuration.model_target),
            "plan" if rest == "off" => {
                let patch = ConfigurationPatch {
                    collaboration_mode: Some(CollaborationMode::Agent),
                    ..Default::default()
                };
                match self.configure(&patch) {
                    Ok(()) => "Plan mode is off: the agent works directly.".into(),
                    Err(e) => format!("Could not leave plan mode: {e}"),
                }
            }
            "plan" => {
                let patch = ConfigurationPatch {
                    collaboration_mode: Some(CollaborationMode::Plan),
                    ..Default::default()
                };
                if let Err(e) = self.configure(&patch) {
                    self.say(format!("Could not enter plan mode: {e}"));
                    return Some(Terminal::completed("end_turn"));
                }
                if !rest.is_empty() && rest != "on" {
                    return None; // the model plans the task in plan mode
                }
                "Plan mode is on: the agent proposes a plan and waits for your approval before writing or running anything.".into()
            }
            "title" if rest.is_empty() => "Usage: /title <new title>".into(),
            "title" => {
                let mut st = self.cell.lock();
                match super::ops::commit_name(&self.host, &self.cell, &mut st, rest) {
                    Ok(()) => format!("Renamed to “{rest}”."),
                    Err(e) => format!("Could not rename the session: {}", e.message),
                }
            }
            "compact" => return Some(self.compact()),
            _ => format!(
                "Unknown command /{name}.\n\n{}",
                super::commands::help_text()
            ),
        };
        self.say(text);
        Some(Terminal::completed("end_turn"))
    }

    fn model_command(&self, rest: &str, current: &crate::host_api::wire::ModelTarget) -> String {
        use crate::host_api::wire::{ConfigurationPatch, ModelTarget};
        let providers = self.host.providers();
        let name_of = |t: &ModelTarget| match t {
            ModelTarget::Default => "default".to_string(),
            ModelTarget::Explicit {
                connection_slug,
                model,
            } => format!("{connection_slug}/{model}"),
        };
        if rest.is_empty() {
            let mut out = format!("Model: {}. Available:\n- default", name_of(current));
            for c in &providers.connections {
                for m in &c.models {
                    out.push_str(&format!("\n- {}/{} ({})", c.slug, m.id, m.label));
                }
            }
            return out;
        }
        let target = if rest == "default" {
            Some(ModelTarget::Default)
        } else {
            providers.connections.iter().find_map(|c| {
                c.models
                    .iter()
                    .find(|m| rest == format!("{}/{}", c.slug, m.id) || rest == m.id)
                    .map(|m| ModelTarget::Explicit {
                        connection_slug: c.slug.clone(),
                        model: m.id.clone(),
                    })
            })
        };
        let Some(target) = target else {
            return format!("There is no model {rest:?}. Send /model to see the list.");
        };
        let patch = ConfigurationPatch {
            model_target: Some(target.clone()),
            ..Default::default()
        };
        match self.configure(&patch) {
            Ok(()) => format!("Model set to {}.", name_of(&target)),
            Err(e) => format!("Could not change the model: {e}"),
        }
    }

    /// `/compact`: the model summarises the conversation so far; the summary replaces it in the
    /// context of later turns (the transcript keeps everything for replay).
    fn compact(&mut self) -> Terminal {
        let (configuration, mut messages) = {
            let st = self.cell.lock();
            (
                st.session.configuration.clone(),
                build_messages(&self.cwd, st.transcript_items()),
            )
        };
        // The system prompt and this turn's own "/compact" do not count.
        if messages.len() <= 3 {
            self.say("Nothing to compact yet.".into());
            return Terminal::completed("end_turn");
        }
        messages.pop();
        let before = estimate_tokens(&messages);
        let compacted = messages.len() - 1;
        messages.push(json!({"role": "user", "content": COMPACT_REQUEST}));
        let providers = self.host.providers();
        let (conn, model) = match providers.resolve(&configuration.model_target) {
            Ok(x) => x,
            Err(e) => return Terminal::failed("capability_unavailable", e.message),
        };
        let window = model.context_window;
        let request = ModelRequest {
            model: model.id.clone(),
            messages,
            tools: vec![],
            thinking_level: configuration.thinking_level.clone(),
            turn_prompt: self.spec.prompt_text.clone(),
            step: 0,
        };
        let rx = models::start_step(conn, request, self.spec.cancel.clone());
        let mut summary = String::new();
        loop {
            let idle = models::idle_timeout();
            let event = select! {
                recv(rx) -> ev => ev.ok(),
                recv(self.spec.cancel.receiver()) -> _ => return Terminal::cancelled(),
                default(idle) => return Terminal::failed("provider_timeout", idle_message(idle)),
            };
            match event {
                Some(ModelEvent::Text(t)) => summary.push_str(&t),
                Some(ModelEvent::Usage { input, output }) => self.usage(input, output, window),
                Some(ModelEvent::Finish(_)) => break,
                Some(ModelEvent::Error {
                    class,
                    message,
                    details,
                }) => return Terminal::failed(&class, message).with_details(details),
                Some(_) => {}
                None if self.spec.cancel.is_cancelled() => return Terminal::cancelled(),
                None => {
                    return Terminal::failed(
                        "provider_error",
                        "the model stream ended without finishing",
                    )
                }
            }
        }
        let summary = summary.trim().to_string();
        if summary.is_empty() {
            self.say("The model returned an empty summary; nothing was compacted.".into());
            return Terminal::completed("end_turn");
        }
        let after = {
            let mut st = self.cell.lock();
            self.append(
                &mut st,
                vec![TranscriptBody::Summary {
                    text: summary.clone(),
                }],
            );
            let after = estimate_tokens(&build_messages(&self.cwd, st.transcript_items()));
            let body = FrameBody::Usage {
                turn_id: Some(self.spec.turn_id.clone()),
                delta: TokenUsage::default(),
                totals: st.usage_totals.clone(),
                context: Some(ContextUsage {
                    used_tokens: after,
                    window_tokens: window,
                }),
            };
            self.cell.emit(&mut st, body);
            after
        };
        self.say(format!(
            "Compacted {compacted} earlier messages into a summary (context ≈{before} → ≈{after} tokens).\n\n{summary}"
        ));
        Terminal::completed("end_turn")
    }

    /// Calls an MCP tool on a helper thread, so a stop does not wait for the server.
    fn call_mcp(&self, exposed: &str, args: &Value) -> ToolOutcome {
        let Some(tool) = self
            .mcp_tools
            .iter()
            .find(|t| t.exposed == exposed)
            .cloned()
        else {
            return ToolOutcome::failed(format!("there is no MCP tool named {exposed:?}"));
        };
        let server = self
            .cell
            .lock()
            .mcp
            .clone()
            .and_then(|set| set.server(&tool.server));
        let Some(server) = server else {
            return ToolOutcome::failed(format!(
                "MCP server `{}` is no longer running",
                tool.server
            ));
        };
        let (tx, rx) = bounded(1);
        let (name, args) = (tool.name.clone(), args.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("mcp-call-{name}"))
            .spawn(move || {
                let r = match server.lock() {
                    Ok(mut s) => s.call_tool(&name, args),
                    Err(_) => Err("the server is unusable".to_string()),
                };
                let _ = tx.send(r);
            });
        if let Err(e) = spawned {
            return ToolOutcome::failed(format!("cannot call the MCP tool: {e}"));
        }
        select! {
            recv(rx) -> r => match r {
                Ok(Ok((text, false))) => ToolOutcome::completed(text, false),
                Ok(Ok((text, true))) => ToolOutcome::failed(text),
                Ok(Err(e)) => ToolOutcome::failed(format!("MCP server `{}`: {e}", tool.server)),
                Err(_) => ToolOutcome::failed(format!("MCP server `{}` dropped the call", tool.server)),
            },
            recv(self.spec.cancel.receiver()) -> _ => ToolOutcome { status: "cancelled", ..ToolOutcome::failed("The turn was stopped while the MCP tool ran.".into()) },
        }
    }

    fn approved(&self, p: &Path) -> bool {
        self.cell
            .lock()
            .active
            .as_ref()
            .is_some_and(|a| a.approved_paths.iter().any(|ok| p.starts_with(ok)))
    }

    /// What an edit or write would change, for the permission dialog.
    /// The old side is read the way the tool will read it — through the editor when it offers
    /// files, so the person approves a change to their unsaved buffer, not to the disk.
    fn preview(&mut self, name: &str, args: &Value) -> Option<FileDiff> {
        let path = tool_fs::resolve(&self.cwd, args.get("path")?.as_str()?);
        let old = tool_fs::current_text(self, &path);
        let new = match name {
            "write_file" => args.get("content")?.as_str()?.to_string(),
            "edit_file" => {
                let (o, n) = (
                    args.get("old_text")?.as_str()?,
                    args.get("new_text")?.as_str()?,
                );
                let current = old.as_deref()?;
                if o.is_empty() || !current.contains(o) {
                    return None;
                }
                if args
                    .get("replace_all")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
                {
                    current.replace(o, n)
                } else {
                    current.replacen(o, n, 1)
                }
            }
            _ => return None,
        };
        Some(tool_fs::file_diff(&self.cwd, &path, old.as_deref(), &new))
    }

    fn update_plan(&self, args: &Value) -> ToolOutcome {
        let entries: Vec<PlanEntry> = args
            .get("entries")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let content = e.get("content").and_then(Value::as_str)?.to_string();
                let status = match e.get("status").and_then(Value::as_str) {
                    Some(s @ ("pending" | "in_progress" | "completed")) => s.to_string(),
                    _ => "pending".into(),
                };
                let priority = match e.get("priority").and_then(Value::as_str) {
                    Some(p @ ("high" | "medium" | "low")) => p.to_string(),
                    _ => "medium".into(),
                };
                Some(PlanEntry {
                    content,
                    status,
                    priority,
                })
            })
            .collect();
        if entries.is_empty() {
            return ToolOutcome::failed("update_plan needs `entries`: [{content, status}]".into());
        }
        let mut st = self.cell.lock();
        let body = FrameBody::PlanUpdate {
            turn_id: self.spec.turn_id.clone(),
            entries: entries.clone(),
        };
        self.cell.emit(&mut st, body);
        self.append(
            &mut st,
            vec![TranscriptBody::Plan {
                entries: entries.clone(),
            }],
        );
        ToolOutcome::completed(format!("Plan updated ({} steps).", entries.len()), false)
    }

    fn ask_user(&mut self, id: &str, args: &Value) -> ToolOutcome {
        let questions: Vec<Question> =
            match args.get("questions").cloned().map(serde_json::from_value) {
                Some(Ok(q)) => q,
                _ => {
                    return ToolOutcome::failed(
                        "ask_user needs `questions`: [{question, options: [{label}]}]".into(),
                    )
                }
            };
        if questions.is_empty() || questions.len() > 3 {
            return ToolOutcome::failed("ask_user takes one to three questions".into());
        }
        let request = InteractionRequest::Question {
            tool_call_id: id.into(),
            questions: questions.clone(),
        };
        let answers = match self.interact(request) {
            Some(InteractionAnswer::Question {
                unsupported: true, ..
            }) => return unshown_questions(&questions),
            Some(InteractionAnswer::Question { answers, .. }) => answers,
            _ => vec![None; questions.len()],
        };
        let lines: Vec<String> = questions
            .iter()
            .enumerate()
            .map(|(i, q)| match answers.get(i).cloned().flatten() {
                Some(a) => format!("{} → {a}", q.question),
                None => format!("{} → (no answer)", q.question),
            })
            .collect();
        ToolOutcome {
            status: "completed",
            truncated: false,
            result: ToolResultContent::Json {
                value: json!({"answers": answers, "summary": lines.join("\n")}),
            },
        }
    }

    /// Asks the user through an interaction and waits. `None` = closed without an answer.
    fn interact(&mut self, request: InteractionRequest) -> Option<InteractionAnswer> {
        let (tx, rx) = bounded(1);
        let interaction_id = random_id("i");
        {
            let mut st = self.cell.lock();
            if st.pending_interaction_count() >= super::session::MAX_PENDING_INTERACTIONS {
                log::warn!(
                    "session {}: too many pending interactions; denying",
                    self.cell.id
                );
                return None;
            }
            let interaction = Interaction {
                interaction_id: interaction_id.clone(),
                session_id: self.cell.id.clone(),
                turn_id: self.spec.turn_id.clone(),
                status: "pending".into(),
                request,
                outcome: None,
            };
            st.interactions.insert(
                interaction_id.clone(),
                InteractionSlot {
                    interaction: interaction.clone(),
                    answer_tx: Some(tx),
                },
            );
            self.append(
                &mut st,
                vec![TranscriptBody::Interaction {
                    interaction: interaction.clone(),
                }],
            );
            self.set_status(&mut st, TurnStatus::WaitingForUser);
            self.cell
                .emit(&mut st, FrameBody::InteractionRequest { interaction });
        }
        let outcome = select! {
            recv(rx) -> o => o.ok(),
            recv(self.spec.cancel.receiver()) -> _ => None,
        };
        let mut st = self.cell.lock();
        let answer = match outcome {
            Some(InteractionOutcome::Answer { answer }) => Some(answer),
            _ => {
                self.close_interaction(&mut st, &interaction_id, "turn_stopped");
                None
            }
        };
        self.set_status(&mut st, TurnStatus::Running);
        answer
    }

    fn close_interaction(&self, st: &mut super::session::SessionState, id: &str, reason: &str) {
        let Some(slot) = st.interactions.get_mut(id) else {
            return;
        };
        if slot.answer_tx.take().is_none() {
            return;
        }
        let outcome = InteractionOutcome::Closure {
            reason: reason.into(),
        };
        slot.interaction.status = "closed".into();
        slot.interaction.outcome = Some(outcome.clone());
        let interaction = slot.interaction.clone();
        self.append(st, vec![TranscriptBody::Interaction { interaction }]);
        self.cell.emit(
            st,
            FrameBody::InteractionClosed {
                interaction_id: id.into(),
                status: "closed".into(),
                outcome,
            },
        );
    }

    fn set_status(&self, st: &mut super::session::SessionState, status: TurnStatus) {
        if let Some(rec) = st.turns.get_mut(&self.spec.turn_id) {
            rec.snapshot.status = status;
        }
        st.session.status = if status == TurnStatus::WaitingForUser {
            crate::host_api::wire::SessionStatus::WaitingForUser
        } else {
            crate::host_api::wire::SessionStatus::Running
        };
        let body = FrameBody::TurnStatus {
            turn_id: self.spec.turn_id.clone(),
            run_id: self.spec.run_id.clone(),
            status,
            provider_retry: None,
        };
        self.cell.emit(st, body);
    }

    fn finish(&self, t: Terminal) {
        let mut st = self.cell.lock();
        let reason = if t.outcome == TurnOutcome::Cancelled {
            "turn_stopped"
        } else {
            "turn_terminal"
        };
        let pending: Vec<String> = st
            .interactions
            .iter()
            .filter(|(_, s)| s.answer_tx.is_some() && s.interaction.turn_id == self.spec.turn_id)
            .map(|(id, _)| id.clone())
            .collect();
        for id in pending {
            self.close_interaction(&mut st, &id, reason);
        }
        for (_, call) in st.client_calls.drain() {
            let _ = call.tx.send(Err("the turn ended".into()));
        }
        let status = match t.outcome {
            TurnOutcome::Completed => TurnStatus::Completed,
            TurnOutcome::Cancelled => TurnStatus::Cancelled,
            TurnOutcome::Failed => TurnStatus::Failed,
            TurnOutcome::MaxTokens => TurnStatus::MaxTokens,
            TurnOutcome::Refused => TurnStatus::Refused,
        };
        self.append(
            &mut st,
            vec![TranscriptBody::TurnState {
                run_id: self.spec.run_id.clone(),
                status,
                origin: None,
                reason: Some(t.reason.clone()),
                failure_class: t.failure_class.clone(),
                failure_message: t.failure_message.clone(),
                resumed_from_run_id: None,
            }],
        );
        if let Some(rec) = st.turns.get_mut(&self.spec.turn_id) {
            rec.snapshot.status = status;
            rec.snapshot.reason = Some(t.reason.clone());
            rec.snapshot.failure_class = t.failure_class.clone();
            rec.snapshot.failure_message = t.failure_message.clone();
            rec.snapshot.failure_details = t.failure_details.clone();
            rec.snapshot.ended_at = Some(now_ms());
        }
        st.active = None;
        st.session.status = crate::host_api::wire::SessionStatus::Idle;
        st.session.active_turn_id = None;
        st.session.last_used_at = now_ms();
        if let Err(e) = self.host.store.save_session(&st.session) {
            log::error!(
                "session {}: cannot save the session record: {e}",
                self.cell.id
            );
        }
        let body = FrameBody::TurnTerminal {
            turn_id: self.spec.turn_id.clone(),
            run_id: self.spec.run_id.clone(),
            outcome: t.outcome,
            reason: t.reason,
            failure_class: t.failure_class,
            failure_message: t.failure_message,
            failure_details: t.failure_details,
        };
        self.cell.emit(&mut st, body);
        drop(st);
        self.host.turn_finished();
    }
}

enum StepResult {
    Continue,
    Done(Terminal),
}

impl ToolEnv for Turn {
    fn cwd(&self) -> &Path {
        &self.cwd
    }

    fn may_touch(&self, path: &Path) -> bool {
        self.roots.iter().any(|r| path.starts_with(r)) || self.approved(path)
    }

    fn cancel(&self) -> &CancelToken {
        &self.spec.cancel
    }

    fn output(&mut self, stream: &str, chunk: &str) {
        let Some(tool_call_id) = self.current_tool.clone() else {
            return;
        };
        self.out_seq += 1;
        let mut st = self.cell.make_room(self.cell.lock());
        if let Some(t) = st
            .active
            .as_mut()
            .and_then(|a| a.tools.iter_mut().find(|t| t.tool_call_id == tool_call_id))
        {
            t.output_tail.push_str(chunk);
            crate::host_api::keep_tail(&mut t.output_tail, tools::RESULT_TEXT_LIMIT);
        }
        let body = FrameBody::ToolOutputDelta {
            turn_id: self.spec.turn_id.clone(),
            tool_call_id,
            out_seq: self.out_seq,
            stream: stream.into(),
            chunk: chunk.into(),
        };
        self.cell.emit(&mut st, body);
    }

    fn client_call(
        &mut self,
        service: &str,
        path: &Path,
        input: Value,
    ) -> Option<Result<Value, String>> {
        if !self.roots.iter().any(|r| path.starts_with(r)) || !self.has_client_service(service) {
            return None;
        }
        Some(
            self.call_client(service, input, CLIENT_CALL_TIMEOUT, false)
                .map_err(|e| e.to_string()),
        )
    }

    fn has_client_service(&self, service: &str) -> bool {
        self.cell
            .lock()
            .client_services
            .iter()
            .any(|s| s == service)
    }

    fn call_client(
        &mut self,
        service: &str,
        input: Value,
        timeout: Duration,
        cleanup: bool,
    ) -> Result<Value, tools::CallError> {
        use tools::CallError;
        let (tx, rx) = bounded(1);
        let invocation_id = random_id("c");
        {
            let mut st = self.cell.lock();
            let registered = st
                .client_services
                .iter()
                .any(|s| s == service || service.starts_with(&format!("{s}.")));
            if !registered {
                return Err(CallError::Client(format!(
                    "the client did not register {service}"
                )));
            }
            // A large input (a big file to write) travels by reference: the frame stays small
            // and the client fetches it with `client.call.input`.
            let input_ref = input.to_string().len() > CALL_INPUT_INLINE;
            st.client_calls.insert(
                invocation_id.clone(),
                super::session::PendingClientCall {
                    tx,
                    tool_call_id: self.current_tool.clone(),
                    service: service.into(),
                    input: input.clone(),
                },
            );
            let body = FrameBody::ClientCall {
                invocation_id: invocation_id.clone(),
                tool_call_id: self.current_tool.clone(),
                service: service.into(),
                input: if input_ref { Value::Null } else { input },
                input_ref,
            };
            self.cell.emit(&mut st, body);
        }
        // A cleanup call ignores the stop: `never` never fires.
        let never = crossbeam_channel::never();
        let cancel = if cleanup {
            &never
        } else {
            self.spec.cancel.receiver()
        };
        let result = select! {
            recv(rx) -> r => r.unwrap_or_else(|_| Err("the call was dropped".into())).map_err(CallError::Client),
            recv(cancel) -> _ => Err(CallError::Cancelled),
            default(timeout) => Err(CallError::Timeout),
        };
        let mut st = self.cell.lock();
        if st.client_calls.remove(&invocation_id).is_some() {
            self.cell
                .emit(&mut st, FrameBody::ClientCallCancelled { invocation_id });
        }
        result
    }
}

/// `ask_user` when the client cannot show questions: nothing is chosen for the person (no
/// dialog an auto-approver could answer); the model asks in its reply instead, and the tool
/// call shows the questions too.
fn unshown_questions(questions: &[Question]) -> ToolOutcome {
    let mut text = String::from(
        "This editor cannot show questions, so none was answered. Ask them in your reply and wait for the user's next message:",
    );
    for q in questions {
        let labels: Vec<&str> = q.options.iter().map(|o| o.label.as_str()).collect();
        text.push_str(&format!("\n- {} ({})", q.question, labels.join(" / ")));
    }
    ToolOutcome::completed(text, false)
}

fn bounded_args(args: &Value) -> (Value, bool) {
    let s = args.to_string();
    if s.len() <= ARGS_INLINE_LIMIT {
        return (args.clone(), false);
    }
    // Keep the shape where possible: cut long strings.
    let cut = match args {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| match v {
                    Value::String(s) if s.len() > 4096 => {
                        let mut t = s.clone();
                        tool_fs::cut(&mut t, 4096);
                        t.push_str("…[truncated]");
                        (k.clone(), Value::String(t))
                    }
                    other => (k.clone(), other.clone()),
                })
                .collect(),
        ),
        other => other.clone(),
    };
    (cut, true)
}

/// What the model is told a tool returned.
pub fn result_for_model(status: &str, result: &ToolResultContent) -> String {
    let body = match result {
        ToolResultContent::Text { text } => text.clone(),
        ToolResultContent::FileEdit { diff } => {
            format!("Edited {}.\n{}", diff.path, diff.unified_diff)
        }
        ToolResultContent::FileWrite { path, bytes, .. } => {
            format!("Wrote {bytes} bytes to {path}.")
        }
        ToolResultContent::Terminal {
            output,
            exit_code,
            timed_out,
            output_truncated,
            ..
        } => {
            let mut s = String::new();
            if *output_truncated {
                s.push_str("[output truncated; showing the tail]\n");
            }
            s.push_str(output);
            if *timed_out {
                s.push_str("\n[timed out: the command was killed]");
            } else if let Some(c) = exit_code {
                s.push_str(&format!("\n[exit code {c}]"));
            }
            s
        }
        ToolResultContent::Json { value } => match value.get("summary").and_then(Value::as_str) {
            Some(summary) => summary.to_string(),
            None => value.to_string(),
        },
    };
    if status == "completed" {
        body
    } else {
        format!("[{status}] {body}")
    }
}

fn idle_message(idle: Duration) -> String {
    format!(
        "The model provider sent nothing for {} s, so the turn was stopped; try again, or raise MAKA_PROVIDER_IDLE_TIMEOUT_MS for a model that thinks silently.",
        idle.as_secs()
    )
}

const PLAN_MODE_NOTE: &str = "Plan mode is on: investigate with read-only tools, then propose your plan with update_plan and stop. Writing files and running commands waits until the user approves the plan.";

const COMPACT_REQUEST: &str = "Summarise the conversation so far for your own later use: the user's goals, decisions made, files and commands involved, and open tasks. Reply with the summary only.";

fn mode_name(m: PermissionMode) -> &'static str {
    match m {
        PermissionMode::Ask => "ask",
        PermissionMode::Bypass => "bypass",
        PermissionMode::Explore => "explore",
    }
}

/// A rough token count (4 bytes per token) for context figures when the provider gives none.
fn estimate_tokens(messages: &[Value]) -> u64 {
    messages
        .iter()
        .map(|m| m.to_string().len() as u64)
        .sum::<u64>()
        / 4
}

/// The model's context: a system prompt plus the transcript as chat messages. Tool calls that
/// never got a result (a stopped turn) get a placeholder result so the history stays valid.
pub fn build_messages(cwd: &Path, items: &[crate::host_api::wire::TranscriptItem]) -> Vec<Value> {
    let mut msgs = vec![json!({
        "role": "system",
        "content": format!(
            "You are Maka, a careful coding agent. You work in {} and use the tools to read, search, edit and run things there. \
             Keep the user informed briefly; use update_plan for multi-step work; ask_user when a decision is theirs.",
            cwd.display()
        )
    })];
    let start = items
        .iter()
        .rposition(|i| matches!(i.body, TranscriptBody::Summary { .. }))
        .unwrap_or(0);
    let mut open_calls: Vec<String> = Vec::new();
    // Host id → the id the model gave the call (the model sees only its own ids).
    let mut provider_ids: std::collections::HashMap<&str, &str> = Default::default();
    let close_open = |msgs: &mut Vec<Value>, open: &mut Vec<String>| {
        for id in open.drain(..) {
            msgs.push(json!({"role": "tool", "tool_call_id": id, "content": "[no result: the turn was stopped]"}));
        }
    };
    for item in &items[start..] {
        match &item.body {
            TranscriptBody::Summary { text } => {
                msgs.push(json!({"role": "user", "content": format!("Summary of the earlier conversation:\n{text}")}));
            }
            TranscriptBody::User { content, .. } => {
                close_open(&mut msgs, &mut open_calls);
                msgs.push(json!({"role": "user", "content": user_text(content)}));
            }
            TranscriptBody::Assistant { text, .. } => {
                close_open(&mut msgs, &mut open_calls);
                msgs.push(
                    json!({"role": "assistant", "content": text.clone().unwrap_or_default()}),
                );
            }
            TranscriptBody::ToolCall {
                tool_call_id,
                tool_name,
                args,
                provider_call_id,
                ..
            } => {
                let model_id = provider_call_id.as_deref().unwrap_or(tool_call_id);
                provider_ids.insert(tool_call_id, model_id);
                let call = json!({"id": model_id, "type": "function", "function": {"name": tool_name, "arguments": args.to_string()}});
                let attach = matches!(msgs.last(), Some(m) if m["role"] == "assistant");
                if !attach {
                    msgs.push(json!({"role": "assistant", "content": Value::Null}));
                }
                if let Some(last) = msgs.last_mut() {
                    match last.get_mut("tool_calls").and_then(Value::as_array_mut) {
                        Some(list) => list.push(call),
                        None => last["tool_calls"] = json!([call]),
                    }
                }
                open_calls.push(model_id.to_string());
            }
            TranscriptBody::ToolResult {
                tool_call_id,
                status,
                result,
                ..
            } => {
                let model_id = provider_ids
                    .get(tool_call_id.as_str())
                    .copied()
                    .unwrap_or(tool_call_id);
                if let Some(i) = open_calls.iter().position(|id| id == model_id) {
                    open_calls.remove(i);
                }
                msgs.push(json!({"role": "tool", "tool_call_id": model_id, "content": result_for_model(status, result)}));
            }
            _ => {}
        }
    }
    close_open(&mut msgs, &mut open_calls);
    msgs
}

fn user_text(content: &MessageContent) -> String {
    let mut text = content.text.clone();
    for a in &content.attachments {
        match (&a.text, &a.uri) {
            (Some(t), uri) => {
                text.push_str(&format!("\n\n[{}]\n{t}", uri.as_deref().unwrap_or(&a.name)))
            }
            (None, _) => text.push_str(&format!("\n\n[attached {} {}]", a.kind, a.name)),
        }
    }
    text
}
