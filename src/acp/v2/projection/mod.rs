//! What a v2 client is shown of a session: each host frame becomes ACP v2 updates here, beside
//! (never through) v1's projection in `acp/projection/`. Pure, like v1's: frames in, updates
//! and effects out; the session's reader performs the effects.
//!
//! v2 reports the turn as state: `state_update` `running` when foreground work starts,
//! `requires_action` while a dialog blocks it, `idle` (with its stop reason) when it ends —
//! for every turn, prompted here or not. Messages and tool calls are upserts by id: a user
//! message for every turn (v2 echoes the client's own prompt too), agent text as chunks of
//! its message, a tool call as `tool_call_update`s of one id, a command's output as the
//! display terminal `term_<toolCallId>`'s chunks.

pub mod config;
mod dialog;
#[cfg(test)]
mod tests;

use super::types::{
    self as t, ContentBlock, IdleStopReason, SessionUpdate, StateUpdate, ToolCallContent,
    ToolCallStatus, ToolCallUpdate,
};
use crate::acp::projection::{answer, content};
use crate::acp::types::{PromptResponse, StopReason};
use crate::host_api::wire::{
    FrameBody, Goal, Interaction, ToolResultContent, ToolStatus, TurnOutcome, TurnStatus,
};
use crate::jsonrpc::ResponseError;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::time::Instant;

pub use dialog::dialog;

/// The plan tool's calls are not shown as calls: the plan is shown as the plan.
const PLAN_TOOL: &str = "update_plan";
/// The one plan a session has, by id.
const PLAN_ID: &str = "plan";

/// What the reader is told of the pending prompt when a frame is applied.
#[derive(Clone, Copy, Debug, Default)]
pub struct TurnView<'a> {
    /// The turn this connection's pending prompt waits for.
    pub prompt_turn: Option<&'a str>,
    /// The client cancelled it (or closed the session): its end is `cancelled`.
    pub cancelled_by_client: bool,
    /// The blocks the pending prompt was sent with (echoed when its turn starts).
    pub echo: Option<&'a [Value]>,
    /// The client withdrew the pending prompt before its turn's start was applied (it was
    /// answered `-32800`: not inserted): its start is not shown, and its turn is stopped.
    pub withdrawn: bool,
}

/// What a live frame makes the session's reader do, in order.
pub enum Effect {
    /// Show these updates (sent by the session, under its view lock).
    Show(Vec<SessionUpdate>),
    /// Answer the pending prompt of `turn_id`: its user message (`message_id`) is inserted.
    Accepted { turn_id: String, message_id: String },
    /// Put this interaction to the person so (a thread of its own sends it and answers the
    /// host).
    Ask(Box<Interaction>, crate::acp::projection::dialog::Dialog),
    /// The host closed this dialog: withdraw it from the client.
    Withdraw(String),
    /// `turn_id` is over (its idle state was shown): the prompt slot frees, the queue goes on.
    Ended {
        turn_id: String,
        result: Result<PromptResponse, ResponseError>,
    },
    /// Stop this turn: its prompt was withdrawn before it was inserted.
    StopTurn(String),
    /// The stream's window ends here (`session_removed`: the session is gone).
    WindowEnd { session_removed: bool },
    /// The host could not emit a frame of this kind: catch up from its durable state.
    Resync(String),
}

/// The session's foreground state as last shown.
#[derive(Clone, Debug, Default, PartialEq)]
enum Foreground {
    #[default]
    Idle,
    Running,
    /// Dialogs waiting (by interaction id).
    RequiresAction(HashSet<String>),
}

/// One tool call shown.
#[derive(Default)]
struct Tool {
    /// Its final status was shown.
    settled: bool,
    /// Not shown (the plan tool).
    hidden: bool,
    /// A command: shown with its display terminal.
    command: bool,
    /// Output of its terminal was streamed (a result need not carry it again).
    streamed: bool,
    /// It was shown cancellable: its settling takes the control away.
    cancellable: bool,
}

/// Per-session v2 view: what was shown, so that a catch-up shows only what is new.
#[derive(Default)]
pub struct Projector {
    /// Bytes of text shown per message id (agent text and thoughts).
    shown: HashMap<String, u64>,
    /// User messages shown (by message id).
    echoed: HashSet<String>,
    tools: HashMap<String, Tool>,
    /// Tool calls in start order, to settle the open ones when a turn ends.
    order: Vec<String>,
    foreground: Foreground,
    /// Frames are a replay or a catch-up (from the transcript and a snapshot): they show
    /// content, not state — the state is the snapshot's ([`Projector::reconcile`]).
    replaying: bool,
    /// The plan last shown (revision, status, entries).
    plan: Option<(u64, String, Vec<crate::host_api::wire::PlanEntry>)>,
    /// The goal revision last shown.
    goal_shown: Option<u64>,
    /// Notices shown (by message id).
    notices: HashSet<String>,
    /// The session's configuration as the client was told it (v1's echo, whose updates
    /// [`config::from_echo`] words for v2).
    pub config: crate::acp::projection::config::ConfigEcho,
}

/// The id of the user message a turn inserts (the same live and on replay).
pub fn user_message_id(turn_id: &str) -> String {
    format!("u_{turn_id}")
}

/// The display terminal a command's call shows its output in.
pub fn terminal_id(tool_call_id: &str) -> String {
    format!("term_{tool_call_id}")
}

impl Projector {
    /// The view of session `_session_id`; `shows` says how its configuration is shown.
    pub fn new(_session_id: &str, shows: crate::acp::projection::Shows) -> Projector {
        Projector {
            config: crate::acp::projection::config::ConfigEcho::new(shows.config_view),
            ..Projector::default()
        }
    }

    /// Everything a live frame does, in order: its updates first, then what the reader
    /// performs. Every kind of frame has its arm.
    pub fn apply(&mut self, body: FrameBody, now: Instant, turn: TurnView<'_>) -> Vec<Effect> {
        use FrameBody as F;
        match body {
            F::TurnStarted { ref turn_id, .. }
                if turn.withdrawn && turn.prompt_turn == Some(turn_id.as_str()) =>
            {
                // Never shown as inserted; its state is told (it runs until the stop lands).
                vec![
                    Effect::Show(self.running()),
                    Effect::StopTurn(turn_id.clone()),
                ]
            }
            F::TurnStarted { ref turn_id, .. } if turn.prompt_turn == Some(turn_id.as_str()) => {
                let turn_id = turn_id.clone();
                let message_id = user_message_id(&turn_id);
                // The client's own prompt, as it sent it (the host's copy is text, cut).
                let mut shown = match turn.echo {
                    Some(blocks) if !blocks.is_empty() => self.echo(&message_id, blocks.to_vec()),
                    _ => vec![],
                };
                shown.extend(self.frame(&body, now));
                vec![
                    Effect::Show(shown),
                    Effect::Accepted {
                        message_id: user_message_id(&turn_id),
                        turn_id,
                    },
                ]
            }
            F::InteractionRequest { interaction } => {
                let (waits, asked) = self.dialog(&interaction);
                vec![
                    Effect::Show(waits),
                    Effect::Ask(Box::new(interaction), asked),
                ]
            }
            F::InteractionClosed { interaction_id, .. } => {
                let resumed = self.dialog_closed(&interaction_id);
                vec![Effect::Show(resumed), Effect::Withdraw(interaction_id)]
            }
            F::ClientCallCancelled { invocation_id } => vec![Effect::Withdraw(invocation_id)],
            F::ClientCall { invocation_id, .. } => {
                // A v2 connection registers no client services, so the host never asks it
                // for one; a host that does anyway is left to time the call out.
                log::warn!("a client call ({invocation_id}) for a v2 connection: not served");
                vec![]
            }
            F::TurnTerminal {
                turn_id,
                outcome,
                reason,
                failure_class,
                failure_message,
                failure_details,
                ..
            } => {
                let failure = answer::Failure {
                    class: failure_class,
                    message: failure_message.as_deref(),
                    details: failure_details.as_ref(),
                };
                let result = answer::terminal_result(&turn_id, outcome, &reason, failure);
                self.turn_ended(turn_id, outcome, result, turn)
            }
            F::StreamEnd { reason, .. } => vec![Effect::WindowEnd {
                session_removed: reason == crate::host_api::wire::StreamEndReason::SessionRemoved,
            }],
            F::FrameOmitted { omitted_kind, .. } => vec![Effect::Resync(omitted_kind)],
            F::ConfigurationChanged {
                revision,
                configuration,
            } => vec![Effect::Show(config::from_echo(
                &self.config.changed(revision, &configuration),
            ))],
            F::SessionUpdated { revision, .. } => {
                self.config.saw_revision(revision);
                vec![Effect::Show(self.frame(&body, now))]
            }
            F::TurnStarted { .. }
            | F::UserMessage { .. }
            | F::TurnStatus { .. }
            | F::TextDelta { .. }
            | F::ThinkingDelta { .. }
            | F::ToolStart { .. }
            | F::ToolRunning { .. }
            | F::ToolOutputDelta { .. }
            | F::ToolResult { .. }
            | F::PlanUpdate { .. }
            | F::PlanState { .. }
            | F::Usage { .. }
            | F::Notice { .. }
            | F::Compaction { .. }
            | F::GoalUpdated { .. } => vec![Effect::Show(self.frame(&body, now))],
            F::TranscriptAdvanced { .. }
            | F::SessionRemoved {}
            | F::Heartbeat { .. }
            | F::Unknown => vec![],
        }
    }

    /// A turn's end: its open calls settled, the session `idle` with the stop reason (the
    /// client's cancel wins), then the prompt slot freed.
    fn turn_ended(
        &mut self,
        turn_id: String,
        outcome: TurnOutcome,
        result: Result<PromptResponse, ResponseError>,
        turn: TurnView<'_>,
    ) -> Vec<Effect> {
        let cancelled = turn.cancelled_by_client && turn.prompt_turn == Some(turn_id.as_str())
            || (outcome == TurnOutcome::Cancelled && turn.prompt_turn.is_none());
        let mut out = self.end_unfinished(crate::acp::projection::TOOL_UNFINISHED, cancelled);
        out.extend(self.idle(idle_reason(&result, cancelled)));
        vec![Effect::Show(out), Effect::Ended { turn_id, result }]
    }

    /// The updates a frame shows (live, replayed, or caught up: what was shown already is not
    /// shown again).
    pub fn frame(&mut self, body: &FrameBody, _now: Instant) -> Vec<SessionUpdate> {
        use FrameBody as F;
        match body {
            F::TurnStarted {
                turn_id, content, ..
            } => {
                // Work the agent starts itself (a goal's turn) has no user message in v2.
                let mut out = match content.as_ref().filter(|c| !c.text.is_empty()) {
                    Some(c) => self.user_message(&user_message_id(turn_id), &c.text),
                    None => vec![],
                };
                out.extend(self.running());
                out
            }
            F::UserMessage {
                message_id,
                content,
                ..
            } => self.user_message(message_id, &content.text),
            F::TurnStatus {
                status: TurnStatus::Running,
                ..
            } if self.foreground == Foreground::Idle => self.running(),
            F::TurnStatus { .. } => vec![],
            F::TextDelta {
                message_id,
                start_offset,
                text,
                ..
            } => self.chunk(message_id, *start_offset, text, false),
            F::ThinkingDelta {
                message_id,
                start_offset,
                text,
                ..
            } => self.chunk(message_id, *start_offset, text, true),
            F::ToolStart { .. } => self.tool_start(body),
            F::ToolRunning {
                tool_call_id,
                cancellable,
                ..
            } => self.tool_running(tool_call_id, *cancellable),
            F::ToolOutputDelta {
                tool_call_id,
                chunk,
                ..
            } => self.tool_output(tool_call_id, chunk),
            F::ToolResult { .. } => self.tool_result(body),
            // The plan is shown from `plan_state` (the host's plan by revision).
            F::PlanUpdate { .. } => vec![],
            F::PlanState {
                revision,
                status,
                entries,
            } => self.plan_state(*revision, status, entries),
            F::Usage {
                context: Some(c),
                cost,
                ..
            } => vec![SessionUpdate::UsageUpdate(t::UsageUpdate {
                used: c.used_tokens,
                size: c.window_tokens,
                cost: cost.as_ref().map(cost_of),
            })],
            F::Usage { .. } => vec![],
            F::SessionUpdated {
                name, last_used_at, ..
            } => vec![SessionUpdate::SessionInfoUpdate(t::SessionInfoUpdate {
                title: name.clone(),
                updated_at: Some(content::iso8601(*last_used_at)),
                meta: None,
            })],
            F::Notice { notice, .. } => self.notice(notice),
            // A completed compaction's summary is what the person reads: its fallback text.
            F::Compaction { compaction, .. } => match &compaction.fallback {
                Some(f)
                    if compaction.status == crate::host_api::wire::CompactionStatus::Completed =>
                {
                    self.chunk(&f.message_id, 0, &f.text, false)
                }
                _ => vec![],
            },
            F::GoalUpdated { goal } => self.goal(goal),
            F::InteractionRequest { .. }
            | F::InteractionClosed { .. }
            | F::ConfigurationChanged { .. }
            | F::TranscriptAdvanced { .. }
            | F::ClientCall { .. }
            | F::ClientCallCancelled { .. }
            | F::TurnTerminal { .. }
            | F::SessionRemoved {}
            | F::FrameOmitted { .. }
            | F::Heartbeat { .. }
            | F::StreamEnd { .. }
            | F::Unknown => vec![],
        }
    }

    /// The part of a message's text not shown yet, as a chunk of that message (`thought`: of
    /// the agent's thinking).
    fn chunk(
        &mut self,
        message_id: &str,
        start: u64,
        text: &str,
        thought: bool,
    ) -> Vec<SessionUpdate> {
        let Some(text) = content::unseen(&mut self.shown, message_id, start, text) else {
            return vec![];
        };
        let chunk = t::ContentChunk {
            message_id: message_id.to_string(),
            content: text_block(text),
        };
        vec![if thought {
            SessionUpdate::AgentThoughtChunk(chunk)
        } else {
            SessionUpdate::AgentMessageChunk(chunk)
        }]
    }

    /// A notice, once (v2 shows notices to every client).
    fn notice(&mut self, notice: &crate::host_api::wire::Notice) -> Vec<SessionUpdate> {
        use crate::host_api::wire::NoticeSeverity as S;
        const REMEMBERED: usize = 4096;
        if self.notices.len() >= REMEMBERED {
            self.notices.clear();
        }
        if !self.notices.insert(notice.message_id.clone()) || notice.title.is_empty() {
            return vec![];
        }
        vec![SessionUpdate::Notice(t::Notice {
            severity: match notice.severity {
                S::Info => t::NoticeSeverity::Info,
                S::Warning => t::NoticeSeverity::Warning,
                S::Error => t::NoticeSeverity::Error,
            },
            title: notice.title.clone(),
            description: notice.description.clone(),
        })]
    }

    /// A user message of the host's text, once per message id.
    fn user_message(&mut self, message_id: &str, text: &str) -> Vec<SessionUpdate> {
        let block = serde_json::to_value(text_block(text)).unwrap_or(Value::Null);
        self.echo(message_id, vec![block])
    }

    /// A user message of these blocks, once per message id.
    fn echo(&mut self, message_id: &str, content: Vec<Value>) -> Vec<SessionUpdate> {
        if !self.echoed.insert(message_id.to_string()) {
            return vec![];
        }
        vec![SessionUpdate::UserMessage(t::UserMessage {
            message_id: message_id.to_string(),
            content: Some(content),
        })]
    }

    /// The session's goal, as v1 shows it (`session_info_update._meta.goal`), once per revision.
    pub fn goal(&mut self, goal: &Goal) -> Vec<SessionUpdate> {
        if self.goal_shown.is_some_and(|r| goal.revision <= r) {
            return vec![];
        }
        self.goal_shown = Some(goal.revision);
        let update = SessionUpdate::SessionInfoUpdate(t::SessionInfoUpdate {
            title: None,
            updated_at: None,
            meta: Some(json!({"goal": crate::acp::projection::goal_snapshot(goal)})),
        });
        vec![update]
    }

    // ---- state ---------------------------------------------------------------------------

    fn show_state(&mut self, next: Foreground, state: StateUpdate) -> Vec<SessionUpdate> {
        let same = matches!(
            (&self.foreground, &next),
            (Foreground::Idle, Foreground::Idle)
                | (Foreground::Running, Foreground::Running)
                | (Foreground::RequiresAction(_), Foreground::RequiresAction(_))
        );
        self.foreground = next;
        if same {
            return vec![];
        }
        vec![SessionUpdate::StateUpdate(state)]
    }

    fn running(&mut self) -> Vec<SessionUpdate> {
        if self.replaying || self.foreground != Foreground::Idle {
            return vec![]; // running already, or waiting for the person
        }
        self.show_state(Foreground::Running, StateUpdate::Running)
    }

    fn idle(&mut self, reason: IdleStopReason) -> Vec<SessionUpdate> {
        if self.foreground == Foreground::Idle {
            return vec![];
        }
        self.foreground = Foreground::Idle;
        vec![SessionUpdate::StateUpdate(StateUpdate::Idle(reason))]
    }

    /// Frames from the transcript or a snapshot (a `session/resume` replay, a reader's
    /// catch-up): their content, not their state — a replayed turn's start says nothing of
    /// whether it runs now ([`Projector::reconcile`] says that), and a running command's
    /// output comes as its terminal's whole tail, replacing what the client has.
    pub fn replayed(&mut self, body: &FrameBody, now: Instant) -> Vec<SessionUpdate> {
        self.replaying = true;
        let out = self.frame(body, now);
        self.replaying = false;
        out
    }

    /// The session's state as a snapshot says it (`running`: a turn runs; `pending`: the
    /// dialogs waiting for the person), after a resume or a catch-up: the foreground is set to
    /// it, and told — always after a resume (`told`: v2's resume MUST send the current state;
    /// `idle` without a stop reason there), else only when it changed (a turn that ended in a
    /// gap, a dialog closed in it).
    pub fn reconcile(
        &mut self,
        running: bool,
        pending: &[Interaction],
        told: bool,
    ) -> Vec<SessionUpdate> {
        // Only the dialogs a v2 client is asked (a question it has no form for is not).
        let pending: Vec<String> = pending
            .iter()
            .filter(|i| {
                !matches!(
                    dialog(&i.session_id, &i.request),
                    crate::acp::projection::dialog::Dialog::Unshown(_)
                )
            })
            .map(|i| i.interaction_id.clone())
            .collect();
        let next = match (running, pending.as_slice()) {
            (false, _) => Foreground::Idle,
            (true, []) => Foreground::Running,
            (true, ids) => Foreground::RequiresAction(ids.iter().cloned().collect()),
        };
        let changed = std::mem::discriminant(&next) != std::mem::discriminant(&self.foreground);
        let state = match &next {
            Foreground::Idle => StateUpdate::IdleSnapshot,
            Foreground::Running => StateUpdate::Running,
            Foreground::RequiresAction(_) => StateUpdate::RequiresAction,
        };
        self.foreground = next;
        if told || changed {
            vec![SessionUpdate::StateUpdate(state)]
        } else {
            vec![]
        }
    }

    /// The pending prompt's turn stopped without its terminal frame (`result`: how): idle.
    pub fn stopped(
        &mut self,
        result: &Result<PromptResponse, ResponseError>,
        cancelled: bool,
    ) -> Vec<SessionUpdate> {
        let reason = idle_reason(result, cancelled);
        self.idle(reason)
    }

    /// A dialog is put to the person: the foreground waits for it.
    pub fn dialog(
        &mut self,
        interaction: &Interaction,
    ) -> (Vec<SessionUpdate>, crate::acp::projection::dialog::Dialog) {
        let asked = dialog(&interaction.session_id, &interaction.request);
        if matches!(asked, crate::acp::projection::dialog::Dialog::Unshown(_)) {
            // Not put to the person (answered at once): nothing for them to act on.
            return (vec![], asked);
        }
        let mut waiting = match std::mem::take(&mut self.foreground) {
            Foreground::RequiresAction(w) => w,
            _ => HashSet::new(),
        };
        let first = waiting.is_empty();
        waiting.insert(interaction.interaction_id.clone());
        self.foreground = Foreground::RequiresAction(waiting);
        let shown = if first {
            vec![SessionUpdate::StateUpdate(StateUpdate::RequiresAction)]
        } else {
            vec![]
        };
        (shown, asked)
    }

    /// A dialog was answered or closed: running again once none waits.
    fn dialog_closed(&mut self, interaction_id: &str) -> Vec<SessionUpdate> {
        let Foreground::RequiresAction(waiting) = &mut self.foreground else {
            return vec![];
        };
        waiting.remove(interaction_id);
        if !waiting.is_empty() {
            return vec![];
        }
        self.foreground = Foreground::Running;
        vec![SessionUpdate::StateUpdate(StateUpdate::Running)]
    }

    // ---- tool calls --------------------------------------------------------------------------

    fn tool_start(&mut self, body: &FrameBody) -> Vec<SessionUpdate> {
        let FrameBody::ToolStart {
            tool_call_id,
            tool_name,
            title,
            activity_kind,
            args,
            locations,
            parent_tool_call_id,
            name,
            ..
        } = body
        else {
            return vec![];
        };
        if self.tools.contains_key(tool_call_id) {
            return vec![]; // shown already (a catch-up replays its start)
        }
        let hidden = tool_name == PLAN_TOOL && parent_tool_call_id.is_none();
        let command = activity_kind == "command";
        self.tools.insert(
            tool_call_id.clone(),
            Tool {
                hidden,
                command,
                ..Tool::default()
            },
        );
        self.order.push(tool_call_id.clone());
        if hidden {
            return vec![];
        }
        let mut out = vec![];
        let mut call = ToolCallUpdate::new(tool_call_id);
        call.name = name
            .clone()
            .or_else(|| parent_tool_call_id.is_none().then(|| tool_name.clone()));
        call.title = Some(title.clone());
        call.kind = Some(content::tool_kind(activity_kind));
        call.status = Some(ToolCallStatus::Pending);
        call.raw_input = Some(args.clone());
        let locations = content::locations(locations);
        if !locations.is_empty() {
            call.locations = Some(locations);
        }
        if let Some(parent) = parent_tool_call_id {
            call.meta = Some(json!({"maka": {"parentToolCallId": parent}}));
        }
        if command {
            let terminal = terminal_id(tool_call_id);
            out.push(SessionUpdate::TerminalUpdate(t::TerminalUpdate {
                terminal_id: terminal.clone(),
                command: Some(title.clone()),
                ..t::TerminalUpdate::default()
            }));
            call.content = Some(vec![ToolCallContent::Terminal {
                terminal_id: terminal,
            }]);
        }
        out.push(SessionUpdate::ToolCallUpdate(call));
        out
    }

    /// A call runs: `in_progress`, and — when it can be cancelled alone — `cancel` among its
    /// controls (and its terminal's, for a command).
    fn tool_running(&mut self, tool_call_id: &str, cancellable: bool) -> Vec<SessionUpdate> {
        let Some(t) = self
            .tools
            .get_mut(tool_call_id)
            .filter(|t| !t.settled && !t.hidden)
        else {
            return vec![];
        };
        t.cancellable = cancellable;
        let mut out = vec![];
        if cancellable && t.command {
            out.push(SessionUpdate::TerminalUpdate(t::TerminalUpdate {
                terminal_id: terminal_id(tool_call_id),
                capabilities: Some(t::Controls::cancel(true)),
                ..t::TerminalUpdate::default()
            }));
        }
        let mut call = ToolCallUpdate::new(tool_call_id);
        call.status = Some(ToolCallStatus::InProgress);
        if cancellable {
            call.capabilities = Some(t::Controls::cancel(true));
        }
        out.push(SessionUpdate::ToolCallUpdate(call));
        out
    }

    /// Live output: a command's bytes to its terminal; any other tool's text as content of its
    /// call (a delegation's agent speaking).
    /// Live output: a command's bytes to its terminal; any other tool's text as content of its
    /// call (a delegation's agent speaking). Replayed (a snapshot's tail of what ran so far):
    /// the whole of it, replacing what the client has — a chunk would repeat it.
    fn tool_output(&mut self, tool_call_id: &str, chunk: &str) -> Vec<SessionUpdate> {
        let replaying = self.replaying;
        let Some(t) = self.tools.get_mut(tool_call_id) else {
            return vec![];
        };
        if t.settled || t.hidden || chunk.is_empty() {
            return vec![];
        }
        if t.command {
            t.streamed = true;
            let data = crate::base64::encode(chunk.as_bytes());
            if replaying {
                return vec![SessionUpdate::TerminalUpdate(t::TerminalUpdate {
                    terminal_id: terminal_id(tool_call_id),
                    output: Some(t::TerminalOutput { data }),
                    ..t::TerminalUpdate::default()
                })];
            }
            return vec![SessionUpdate::TerminalOutputChunk(t::TerminalOutputChunk {
                terminal_id: terminal_id(tool_call_id),
                data,
            })];
        }
        let content = ToolCallContent::Content {
            content: text_block(chunk),
        };
        if replaying {
            let mut call = ToolCallUpdate::new(tool_call_id);
            call.content = Some(vec![content]);
            return vec![SessionUpdate::ToolCallUpdate(call)];
        }
        vec![SessionUpdate::ToolCallContentChunk(
            t::ToolCallContentChunk {
                tool_call_id: tool_call_id.to_string(),
                content,
            },
        )]
    }

    fn tool_result(&mut self, body: &FrameBody) -> Vec<SessionUpdate> {
        let FrameBody::ToolResult {
            tool_call_id,
            status,
            result,
            truncated,
            ..
        } = body
        else {
            return vec![];
        };
        let t = self.tools.entry(tool_call_id.clone()).or_default();
        if t.settled {
            return vec![];
        }
        t.settled = true;
        if t.hidden {
            return vec![];
        }
        let (streamed, cancellable) = (t.streamed, t.cancellable);
        let mut out = vec![];
        let mut call = ToolCallUpdate::new(tool_call_id);
        if cancellable {
            call.capabilities = Some(t::Controls::default());
        }
        call.status = Some(match status {
            ToolStatus::Completed => ToolCallStatus::Completed,
            ToolStatus::Cancelled => ToolCallStatus::Cancelled,
            _ => ToolCallStatus::Failed,
        });
        call.raw_output = Some(match result {
            ToolResultContent::Agent {
                raw_output: Some(raw),
                ..
            } => raw.clone(),
            _ => serde_json::to_value(result).unwrap_or(Value::Null),
        });
        call.content = Some(match result {
            ToolResultContent::Terminal {
                output,
                exit_code,
                signal,
                cwd,
                ..
            } => {
                let terminal = terminal_id(tool_call_id);
                out.push(SessionUpdate::TerminalUpdate(t::TerminalUpdate {
                    terminal_id: terminal.clone(),
                    cwd: cwd.starts_with('/').then(|| cwd.clone()),
                    // Replay (or output that never streamed): shown at once.
                    output: (!streamed).then(|| t::TerminalOutput {
                        data: crate::base64::encode(output.as_bytes()),
                    }),
                    exit_status: Some(t::TerminalExitStatus {
                        exit_code: exit_code.map(i64::from),
                        signal: signal.clone(),
                    }),
                    capabilities: cancellable.then(t::Controls::default),
                    ..t::TerminalUpdate::default()
                }));
                vec![ToolCallContent::Terminal {
                    terminal_id: terminal,
                }]
            }
            ToolResultContent::FileEdit { diff } => vec![diff_content(diff)],
            ToolResultContent::FileWrite { diff: Some(d), .. } => vec![diff_content(d)],
            other => content::result_content(other, *status)
                .iter()
                .filter_map(|c| match c {
                    crate::acp::types::ToolCallContent::Content { content } => match content {
                        crate::acp::types::ContentBlock::Text { text } => {
                            Some(ToolCallContent::Content {
                                content: text_block(text),
                            })
                        }
                        crate::acp::types::ContentBlock::Other => None,
                    },
                    _ => None,
                })
                .collect(),
        });
        if let Some(l) = content::result_locations(result) {
            let l: Vec<_> = l.into_iter().filter(|l| l.path.starts_with('/')).collect();
            if !l.is_empty() {
                call.locations = Some(l);
            }
        }
        if *truncated {
            call.meta = Some(json!({"maka": {"truncated": true}}));
        }
        out.push(SessionUpdate::ToolCallUpdate(call));
        out
    }

    /// Settles every tool call still open (its turn ended without their result): `failed`
    /// saying `why`, or `cancelled` when the client cancelled the turn. Forgets the turn's
    /// calls, text offsets and echoed messages: the next turn starts afresh (what a session
    /// remembers does not grow with its turns).
    pub fn end_unfinished(&mut self, why: &str, cancelled: bool) -> Vec<SessionUpdate> {
        let mut out = vec![];
        for id in std::mem::take(&mut self.order) {
            if let Some(t) = self.tools.remove(&id) {
                if !t.settled && !t.hidden {
                    let mut call = ToolCallUpdate::new(&id);
                    call.status = Some(if cancelled {
                        ToolCallStatus::Cancelled
                    } else {
                        ToolCallStatus::Failed
                    });
                    // A command keeps its terminal: what it printed stays shown.
                    let mut content = vec![];
                    if t.command {
                        content.push(ToolCallContent::Terminal {
                            terminal_id: terminal_id(&id),
                        });
                    }
                    content.push(ToolCallContent::Content {
                        content: text_block(why),
                    });
                    call.content = Some(content);
                    if t.cancellable {
                        call.capabilities = Some(t::Controls::default());
                    }
                    out.push(SessionUpdate::ToolCallUpdate(call));
                }
            }
        }
        self.tools.clear();
        self.shown.clear();
        self.echoed.clear();
        out
    }

    // ---- the plan ----------------------------------------------------------------------------

    fn plan_state(
        &mut self,
        revision: u64,
        status: &str,
        entries: &[crate::host_api::wire::PlanEntry],
    ) -> Vec<SessionUpdate> {
        if revision == 0 {
            // No plan any more (a rewind): an empty one (stable v2 has no removal).
            return match self.plan.take() {
                Some(_) => vec![plan_update(revision, status, &[])],
                None => vec![],
            };
        }
        let entries = match (&self.plan, entries.is_empty()) {
            (_, false) => entries.to_vec(),
            (Some((r, _, known)), true) if *r == revision => known.clone(),
            _ => return vec![],
        };
        if self
            .plan
            .as_ref()
            .is_some_and(|(r, s, e)| *r == revision && s == status && *e == entries)
        {
            return vec![];
        }
        let update = plan_update(revision, status, &entries);
        self.plan = Some((revision, status.to_string(), entries));
        vec![update]
    }
}

/// The stop reason an idle state carries for a turn's result.
fn idle_reason(result: &Result<PromptResponse, ResponseError>, cancelled: bool) -> IdleStopReason {
    if cancelled {
        return IdleStopReason::Cancelled;
    }
    match result {
        Ok(r) => match (r.stop_reason, &r.meta) {
            // Stopped by someone else (another client, a host shutdown): cancelled, and why.
            (StopReason::EndTurn, Some(meta)) if meta.pointer("/maka/outcome").is_some() => {
                IdleStopReason::Cancelled
            }
            (StopReason::EndTurn, _) => IdleStopReason::EndTurn,
            (StopReason::MaxTokens, _) => IdleStopReason::MaxTokens,
            (StopReason::MaxTurnRequests, _) => IdleStopReason::MaxTurnRequests,
            (StopReason::Refusal, _) => IdleStopReason::Refusal,
            (StopReason::Cancelled, _) => IdleStopReason::Cancelled,
        },
        Err(e) => IdleStopReason::Error(t::ErrorStopReason {
            error: t::Error {
                code: i64::from(e.code),
                message: e.message.clone(),
                data: e.data.clone(),
            },
        }),
    }
}

fn plan_update(
    revision: u64,
    status: &str,
    entries: &[crate::host_api::wire::PlanEntry],
) -> SessionUpdate {
    SessionUpdate::PlanUpdate(t::PlanUpdate {
        plan: t::PlanUpdateContent::Items(t::PlanItems {
            plan_id: PLAN_ID.into(),
            entries: content::plan(entries),
            meta: Some(json!({"maka": {"revision": revision, "status": status}})),
        }),
    })
}

fn cost_of(c: &crate::host_api::wire::Cost) -> Value {
    serde_json::to_value(c).unwrap_or(Value::Null)
}

fn text_block(text: &str) -> ContentBlock {
    ContentBlock::Text {
        text: text.to_string(),
    }
}

/// A file change as v2's structured diff: what changed, and the patch `git apply` takes.
fn diff_content(d: &crate::host_api::wire::FileDiff) -> ToolCallContent {
    super::diff::content(d)
}

/// The commands a session offers, as v2 lists them.
pub fn commands_update(commands: &[crate::acp::types::AvailableCommand]) -> SessionUpdate {
    SessionUpdate::AvailableCommandsUpdate(t::AvailableCommandsUpdate {
        available_commands: commands.iter().map(t::AvailableCommand::from_v1).collect(),
    })
}

/// One whole agent message (the interrupted-turn offer after a resume).
pub fn agent_text(message_id: &str, text: &str) -> SessionUpdate {
    SessionUpdate::AgentMessage(t::AgentMessage {
        message_id: message_id.to_string(),
        content: Some(vec![text_block(text)]),
    })
}
