//! One thread per active turn: model steps, tool calls (gated by the permission mode, the
//! session's roots and the user's answers), and finally one `turn_terminal` frame — always the
//! last frame of its run, after every delta, tool and usage frame it caused.

mod calls;
mod commands;
mod compaction;
mod delegate;
mod dialogs;
mod ending;
mod env;
mod gate;
mod history;
mod stream;

pub use env::call_client;
pub use history::build_messages;

use super::models::{self, Finish, ModelEvent, ModelRequest};
use super::session::{ActiveStream, CancelToken, InteractionSlot, SessionCell};
use super::tools::{self, fs as tool_fs, ToolEnv, ToolOutcome};
use super::{random_id, Host};
use crate::host_api::wire::{
    now_ms, BoundaryPath, CollaborationMode, ContextUsage, FailureClass, FileDiff, FrameBody,
    Interaction, InteractionAnswer, InteractionOutcome, InteractionRequest, Location,
    MessageContent, OrchestrationMode, PermissionMode, PlanEntry, Question, TokenUsage,
    ToolResultContent, TranscriptBody, TurnOutcome, TurnStatus,
};
use crossbeam_channel::{bounded, select};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Tool arguments carried inline in frames; longer ones are cut and flagged.
const ARGS_INLINE_LIMIT: usize = 16 * 1024;
/// Client-call inputs larger than this (serialized) travel by reference.
const CALL_INPUT_INLINE: usize = 256 * 1024;
/// Text deltas (and tool output) are cut into frames of at most this many bytes.
const DELTA_FRAME_BYTES: usize = 64 * 1024;
/// How long a delegated editor call may take before the tool fails.
const CLIENT_CALL_TIMEOUT: Duration = Duration::from_secs(300);

/// `text` in pieces of at most [`DELTA_FRAME_BYTES`] ([`crate::host_api::pieces`]).
fn frame_pieces(text: &str) -> impl Iterator<Item = &str> {
    crate::host_api::pieces(text, DELTA_FRAME_BYTES)
}

pub struct TurnSpec {
    pub turn_id: String,
    /// The goal it runs for (origin `goal`): its end, its dialogs and its `goal_complete`
    /// count for that goal only — never for one set after it while it was ending.
    pub goal_id: Option<String>,
    /// The goal that was live when it was admitted (a goal's turn: its own): the only one its
    /// `goal_complete` may complete. A turn admitted with no live goal completes none.
    pub live_goal: Option<String>,
    pub run_id: String,
    pub prompt_text: Arc<str>,
    pub max_steps: usize,
    pub cancel: CancelToken,
}

struct Terminal {
    outcome: TurnOutcome,
    reason: String,
    failure_class: Option<FailureClass>,
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
    fn failed(class: FailureClass, message: impl Into<String>) -> Terminal {
        Terminal {
            outcome: TurnOutcome::Failed,
            reason: "error".into(),
            failure_class: Some(class),
            // A provider's error body may echo its key: the message goes to the client, the
            // session's record and the transcript.
            failure_message: Some(tool_fs::cut_words(
                &crate::secrets::redact(&message.into()),
                400,
            )),
            failure_details: None,
        }
    }
    fn with_details(mut self, mut details: Option<Value>) -> Terminal {
        if let Some(d) = details.as_mut() {
            crate::secrets::redact_json(d);
        }
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
    /// The token of the running call when it can be cancelled alone (`turn.tool.cancel`).
    call_cancel: Option<CancelToken>,
    out_seq: u64,
    /// Tools of the session's MCP servers, as of the turn's start.
    mcp_tools: Vec<super::mcp::McpTool>,
    /// Files this turn's tools wrote (their earlier content is recorded once).
    changed_paths: std::collections::HashSet<PathBuf>,
    /// The system prompt, composed at the turn's start (instruction files and memory read
    /// then, the client's own as the session stores it).
    system: String,
    /// The agents this session may delegate to (declared at the turn's start).
    agents: Vec<super::subagents::AgentSpec>,
    /// While a `delegate` call runs: its id (the subagent's tool calls are shown under it).
    delegating: Option<String>,
    /// This turn compacted the context by itself already (or tried to).
    compacted: bool,
    /// Ends the turn once, by this thread or by its watchdog (see `ending`).
    end: Arc<ending::TurnEnd>,
    /// What the session's tools and processes are kept from (its owner's, issue 56).
    confinement: super::sandbox::Confinement,
}

/// Runs an admitted turn to its terminal frame (on the caller's thread).
pub fn run(host: Arc<Host>, cell: Arc<SessionCell>, spec: TurnSpec) {
    let (cwd, roots, session, tokens_at_start) = {
        let st = cell.lock();
        let cwd = tool_fs::resolve(Path::new("/"), st.session.workspace.path());
        let mut roots = vec![cwd.clone()];
        roots.extend(
            st.session
                .additional_directories
                .iter()
                .map(|d| tool_fs::resolve(Path::new("/"), d)),
        );
        let tokens = st
            .usage_totals
            .input_tokens
            .saturating_add(st.usage_totals.output_tokens);
        (cwd, roots, st.session.clone(), tokens)
    };
    // Files are read here, outside the session's lock.
    let memory = host
        .memory
        .view(super::memory::Whose::session(&session), Some(&session));
    let (context, mut problems) = super::memory::compose(&session, &memory.entries);
    let system = history::system_text(&cwd, &context, session.system_prompt.as_ref());
    let (agents, declared) = super::subagents::declared(Path::new(session.workspace.path()));
    for p in &declared {
        log::warn!("session {}: {p}", cell.id);
    }
    problems.extend(declared);
    tell_once(&cell, &spec.turn_id, problems);
    let end = Arc::new(ending::TurnEnd::new(&host, &cell, &spec, tokens_at_start));
    let confinement = host.confinement(session.owner.as_deref());
    // Dropped when this thread returns: the watchdog then has nothing to do.
    let (_running, done) = bounded::<()>(0);
    let (watched, cancel) = (Arc::clone(&end), spec.cancel.clone());
    if let Err(e) = std::thread::Builder::new()
        .name(format!("turn-{}-watch", spec.turn_id))
        .spawn(move || ending::watch(watched, cancel, done))
    {
        log::warn!(
            "session {}: cannot start the turn's watchdog ({e}); a stop waits for the turn's tools",
            cell.id
        );
    }
    let mut turn = Turn {
        end,
        host,
        cell,
        spec,
        cwd,
        roots,
        current_tool: None,
        current_ran: false,
        call_cancel: None,
        out_seq: 0,
        mcp_tools: vec![],
        changed_paths: Default::default(),
        system,
        agents,
        delegating: None,
        compacted: false,
        confinement,
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

/// Tells the person of each problem with the files a turn reads (instruction files, agent
/// declarations) once per session, not at every turn.
fn tell_once(cell: &SessionCell, turn_id: &str, problems: Vec<String>) {
    const TOLD_AT_MOST: usize = 256;
    let mut st = cell.lock();
    for p in problems {
        if st.told.len() >= TOLD_AT_MOST || !st.told.insert(p.clone()) {
            continue;
        }
        let notice = super::notices::file_problem(random_id("n"), &p);
        cell.notice(&mut st, turn_id, notice);
    }
}

impl Turn {
    pub(super) fn agent_loop(&mut self) -> Terminal {
        // The session's MCP servers: wait (bounded) for them, and say which are missing.
        let mcp = self.cell.lock().mcp.clone();
        if let Some(set) = mcp {
            let (tools, problems) = set.ready(self.host.tunables.mcp_start_timeout);
            self.mcp_tools = tools;
            if !problems.is_empty() {
                // Told to the person, kept out of the model's context (a trailing assistant
                // message after the prompt would make some servers continue it).
                self.notice(crate::host::notices::mcp_problems(
                    random_id("n"),
                    &problems,
                ));
            }
        }
        for step in 0..self.spec.max_steps {
            if self.spec.cancel.is_cancelled() {
                return Terminal::cancelled();
            }
            match self.model_step(step) {
                // A message added during the last step: the model answers it before the turn
                // ends.
                Ok(StepResult::Done(t))
                    if t.outcome == TurnOutcome::Completed && self.has_steering() => {}
                Ok(StepResult::Done(t)) => return t,
                Ok(StepResult::Continue) => {}
                Err(t) => return t,
            }
        }
        Terminal::completed("step_limit")
    }

    /// The session's configuration and the model's input for the next step.
    fn step_input(&mut self) -> (crate::host_api::wire::Configuration, Vec<Value>) {
        let (configuration, mut messages) = {
            let mut st = self.cell.lock();
            self.take_in_steering(&mut st);
            (
                st.session.configuration.clone(),
                build_messages(&self.system, st.transcript_items()),
            )
        };
        if configuration.collaboration_mode == CollaborationMode::Plan {
            if let Some(system) = messages.first_mut() {
                let text = system["content"].as_str().unwrap_or_default();
                system["content"] = json!(format!("{text} {PLAN_MODE_NOTE}"));
            }
        }
        (configuration, messages)
    }

    pub(super) fn model_step(&mut self, step: usize) -> Result<StepResult, Terminal> {
        let (mut configuration, mut messages) = self.step_input();
        let providers = self.host.providers();
        let (conn, model) = providers
            .resolve(&configuration.model_target)
            .map_err(|e| Terminal::failed(FailureClass::CapabilityUnavailable, e.message))?;
        let context_window = model.context_window;
        if self.compact_if_full(&messages, context_window)? {
            (configuration, messages) = self.step_input();
        }
        let model_id = model.id.clone();
        let request = ModelRequest {
            model: model.id.clone(),
            messages,
            tools: tools::specs()
                .into_iter()
                .chain((!self.agents.is_empty()).then(|| delegate::spec(&self.agents)))
                .chain(
                    (!self.agents.is_empty()
                        && configuration.orchestration_mode == OrchestrationMode::Graph)
                        .then(|| delegate::graph_spec(&self.agents)),
                )
                .chain(self.mcp_tools.iter().map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.exposed,
                        "description": format!("[MCP server {}] {}", t.server, t.description),
                        "parameters": t.input_schema,
                    }})
                }))
                .collect(),
            thinking_level: configuration.thinking_level.clone(),
            turn_prompt: Arc::clone(&self.spec.prompt_text),
            step,
        };
        let rx = models::start_step(conn, request, self.spec.cancel.clone());
        let text_id = format!("m_{}_{step}", self.spec.run_id);
        let thinking_id = format!("th_{}_{step}", self.spec.run_id);
        let (mut text, mut thinking) = (String::new(), String::new());
        // (provider's id, name, arguments)
        let mut calls: Vec<(String, String, String)> = Vec::new();
        let idle = self.host.tunables.provider_idle_timeout;
        let finish = loop {
            // An event already waiting is taken without `select!`, which registers with both
            // channels and reads the clock: most events of a fast stream are waiting.
            // (Cancelled: `select!` decides, as before; an event taken here is never dropped.)
            let ready = if self.spec.cancel.is_cancelled() {
                None
            } else {
                rx.try_recv().ok()
            };
            let event = match ready {
                Some(ev) => Some(ev),
                None => select! {
                    recv(rx) -> ev => ev.ok(),
                    recv(self.spec.cancel.receiver()) -> _ => {
                        self.persist_assistant(&text_id, &text, &thinking);
                        return Err(Terminal::cancelled());
                    }
                    default(idle) => {
                        // Silent (or keep-alives only): the call is abandoned, the turn fails.
                        self.persist_assistant(&text_id, &text, &thinking);
                        return Err(Terminal::failed(FailureClass::ProviderTimeout, idle_message(idle)));
                    }
                },
            };
            let Some(event) = event else {
                self.persist_assistant(&text_id, &text, &thinking);
                if self.spec.cancel.is_cancelled() {
                    return Err(Terminal::cancelled());
                }
                return Err(Terminal::failed(
                    FailureClass::ProviderError,
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
                ModelEvent::Usage {
                    input,
                    output,
                    cached,
                } => self.usage(
                    &model_id,
                    TokenUsage::new(input, output, cached),
                    context_window,
                ),
                ModelEvent::Retry {
                    attempt,
                    delay_ms,
                    reason,
                } => {
                    let call = (step > 0).then(|| step.to_string());
                    let notice = crate::host::notices::provider_retry(
                        &self.spec.turn_id,
                        call.as_deref(),
                        attempt.into(),
                        delay_ms,
                        &reason,
                    );
                    let mut st = self.cell.lock();
                    let body = FrameBody::TurnStatus {
                        turn_id: self.spec.turn_id.clone(),
                        run_id: self.spec.run_id.clone(),
                        status: TurnStatus::Running,
                        provider_retry: Some(crate::host_api::wire::ProviderRetry {
                            attempt: attempt.into(),
                            delay_ms,
                            reason,
                        }),
                    };
                    self.cell.emit(&mut st, body);
                    self.cell.notice(&mut st, &self.spec.turn_id, notice);
                }
                ModelEvent::Progress => {}
                ModelEvent::Finish(f) => break f,
                ModelEvent::Error {
                    class,
                    message,
                    details,
                } => {
                    self.persist_assistant(&text_id, &text, &thinking);
                    return Err(Terminal::failed(class, message).with_details(details));
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
        let mut calls: Vec<(String, String, String, String)> = calls
            .into_iter()
            .enumerate()
            .map(|(n, (provider_id, name, arguments))| {
                (format!("tc_{run}_{step}_{n}"), provider_id, name, arguments)
            })
            .collect();
        // Swarm: the step's delegate calls run together, before the others.
        let delegations = calls.iter().filter(|c| c.2 == "delegate").count();
        if configuration.orchestration_mode == OrchestrationMode::Swarm
            && delegations >= 2
            && !self.agents.is_empty()
        {
            let (together, rest): (Vec<_>, Vec<_>) =
                calls.into_iter().partition(|c| c.2 == "delegate");
            let together = together
                .into_iter()
                .map(|(id, provider_id, _, arguments)| {
                    let args = serde_json::from_str(&arguments).unwrap_or_else(|_| json!({}));
                    (id, provider_id, args)
                })
                .collect();
            self.delegate_swarm(together);
            calls = rest;
        }
        for (id, provider_id, name, arguments) in calls {
            if self.spec.cancel.is_cancelled() {
                return Err(Terminal::cancelled());
            }
            self.tool_call(&id, &provider_id, &name, &arguments);
        }
        if self.spec.cancel.is_cancelled() {
            return Err(Terminal::cancelled());
        }
        Ok(StepResult::Continue)
    }

    pub(super) fn set_status(&self, st: &mut super::session::SessionState, status: TurnStatus) {
        if self.end.is_ended() {
            return;
        }
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

    /// Messages added to this turn since its last step (see [`ending::take_in_steering`]).
    fn take_in_steering(&self, st: &mut crate::host::session::SessionState) {
        ending::take_in_steering(&self.cell, &self.spec.turn_id, st);
    }

    fn has_steering(&self) -> bool {
        self.cell
            .lock()
            .active
            .as_ref()
            .is_some_and(|a| !a.steering.is_empty())
    }

    /// Ends the turn (unless its watchdog ended it already).
    pub(super) fn finish(&self, t: Terminal) {
        self.end.finish(t);
    }
}

enum StepResult {
    Continue,
    Done(Terminal),
}

fn idle_message(idle: Duration) -> String {
    format!(
        "The model provider sent nothing for {} s, so the turn was stopped; try again, or raise MAKA_PROVIDER_IDLE_TIMEOUT_MS for a model that thinks silently.",
        idle.as_secs()
    )
}

const PLAN_MODE_NOTE: &str = "Plan mode is on: investigate with read-only tools, then propose your plan with update_plan and stop. Writing files and running commands waits until the user approves the plan.";

#[cfg(test)]
mod tests {
    use super::{frame_pieces, DELTA_FRAME_BYTES};

    #[test]
    fn long_text_is_cut_into_bounded_frames_at_character_boundaries_and_nothing_is_lost() {
        // "é" is two bytes: the limit falls inside one of them somewhere.
        let text = format!("a{}", "é".repeat(DELTA_FRAME_BYTES));
        let pieces: Vec<&str> = frame_pieces(&text).collect();
        assert_eq!(pieces.len(), 3);
        assert!(pieces
            .iter()
            .all(|p| !p.is_empty() && p.len() <= DELTA_FRAME_BYTES));
        assert_eq!(pieces.concat(), text);
        assert_eq!(frame_pieces("short").collect::<Vec<_>>(), ["short"]);
    }
}
