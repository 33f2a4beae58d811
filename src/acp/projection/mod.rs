//! Host frame → what the client sees: the one place this mapping lives. [`Projector::apply`]
//! says, for every kind of frame, what a live frame does, as the messages that go out — the
//! updates it shows, the notifications it sends (a turn's end, a goal's update, a plan's
//! change: each in no client's dialect; the connection words them on the way out,
//! `maka_dialect::told`), the configuration it announces ([`config`]: the echo rule), the prompt's
//! answer with its stop reason ([`answer`]), the dialogs and editor calls it starts, what it
//! withdraws, a catch-up — exhaustively: a new kind of frame does not compile until it is
//! decided here. The session's bookkeeping reads what a frame says through [`facts`].
//! [`Projector::frame`] is its updates part, which `session/load` replay uses too: replay
//! first turns each durable transcript item into the frame it was live ([`replay_frames`]), so
//! a replayed turn shows what was streamed (modulo chunk boundaries). Pure: no I/O, no clocks
//! (the caller passes `now` for output throttling).

pub mod answer;
pub mod config;
pub(crate) mod content;
pub mod dialog;
mod editor;
mod replay;
mod subagents;
#[cfg(test)]
mod tests;

pub use content::{diff, iso8601};
pub use editor::EditorCall;
pub use replay::{replay_frames, snapshot_frames};

use crate::acp::types::{
    Chunk, ContentBlock, NoticeSeverity, SessionUpdate, ToolCall, ToolCallContent, ToolCallStatus,
    ToolCallUpdate, TurnStateNotification,
};
use crate::host_api::wire::{
    Compaction, CompactionStatus, FailureClass, FrameBody, Goal, Interaction, InteractionRequest,
    Notice, NoticeFallback, NoticeSeverity as HostSeverity, StreamEndReason, TokenUsage,
    ToolResultContent, ToolStatus, TurnOutcome,
};
use content::{
    fenced_output, locations, plan, result_content, result_locations, terminal_verdict, tool_kind,
};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Command output kept for the live view (ACP tool content replaces the whole list, so the
/// accumulated tail is re-sent each time).
pub const OUTPUT_TAIL_BYTES: usize = 64 * 1024;
/// Live output updates per tool call are sent at most this often.
pub const OUTPUT_THROTTLE: Duration = Duration::from_millis(100);

#[derive(Default)]
struct ToolState {
    /// The editor terminal the command runs in (`terminal/create`), when it does.
    client_terminal: Option<String>,
    /// Shown through the `_meta.terminal_*` display convention.
    display: bool,
    /// Some output went out through `_meta.terminal_output`.
    streamed: bool,
    command: Option<String>,
    output: String,
    truncated: bool,
    last_sent: Option<Instant>,
    dirty: bool,
    terminal: bool,
    /// Not shown as a tool call (`update_plan`: the plan is shown as the plan).
    hidden: bool,
    /// A `delegate_graph` call: its tasks are delegations.
    graph: bool,
    /// A delegation shown as a child session (to a client that shows subagents): the child's id.
    child: Option<String>,
    /// The work state that child was last shown in (`running`, `requires_action`), if any.
    child_state: Option<&'static str>,
    /// A delegation's own call, shown in its child session: (the delegation, the child).
    in_child: Option<(String, String)>,
}

/// Per-session projection state: open tool calls and which turns this connection started.
///
/// It also remembers what it has shown — text bytes per message, tool calls, echoed prompts —
/// so that feeding it the same content again (a catch-up from the transcript after the live
/// stream fell behind) shows only what is new.
#[derive(Default)]
pub struct Projector {
    /// Bytes of text shown per `messageId` (agent text, thinking, notices).
    shown: HashMap<String, u64>,
    /// Tool calls shown (`tool_call` sent) and turns whose prompt was echoed, for this turn.
    shown_tools: HashSet<String>,
    echoed: HashSet<String>,
    tools: HashMap<String, ToolState>,
    /// Tool calls in start order, to settle the open ones when a turn ends.
    order: Vec<String>,
    /// Turns started by this connection's prompts: their user message is not echoed back.
    own_turns: HashSet<String>,
    /// Notices shown live (to a client that shows notices), by message id.
    notices_shown: HashSet<String>,
    /// The goal revision last shown as `session_info_update._meta.goal`.
    goal_shown: Option<u64>,
    /// Each running turn's token usage by model, for its prompt's `_meta.quota` (at most a
    /// few turns: one runs at a time; one whose end was never seen is dropped with the rest
    /// when more pile up).
    turn_usage:
        HashMap<String, std::collections::BTreeMap<String, crate::host_api::wire::TokenUsage>>,
    /// Compactions shown completed (to a client that shows compactions).
    compactions: HashSet<String>,
    /// The plan last shown by id (revision, status, entries), to a client that shows plans so.
    plan: Option<(u64, String, Vec<crate::host_api::wire::PlanEntry>)>,
    /// What the client can show beyond ACP's baseline.
    shows: Shows,
    /// The session this view is of (a child session's id is made from it).
    session_id: String,
    /// The session's configuration as the client was told it.
    pub config: config::ConfigEcho,
}

/// What the client can show beyond ACP's baseline, as far as the view's choices go.
#[derive(Clone, Copy, Debug, Default)]
pub struct Shows {
    /// Command output through Zed's display-only `_meta.terminal_*` convention (the client set
    /// `_meta.terminal_output` and has no real terminals).
    pub display_terminal: bool,
    /// `notice` updates (`clientCapabilities.session.notices`).
    pub notices: bool,
    /// `compaction_update` and `compaction_summary_chunk` (`session.compaction`).
    pub compaction: bool,
    /// `plan_update` and `plan_removed` (`plan`, unstable) instead of the legacy `plan`.
    pub plan: bool,
    /// A delegation as a child session (`subagents`, unstable) instead of its agent's text and
    /// calls folded into the delegate call (`_meta.maka.parentToolCallId`).
    pub subagents: bool,
    /// A running command's output also as appended pieces,
    /// `tool_call_update._meta.terminal_output_delta` (JetBrains' convention: the client set
    /// `clientCapabilities._meta.terminal_output_delta`).
    pub terminal_output_delta: bool,
    /// ACP's unstable `usage` on a prompt's answer (`_meta.endTurnUsage`).
    pub answer_usage: bool,
    /// How configuration options are shown.
    pub config_view: crate::acp::config_options::View,
    /// Elicitation forms (`elicitation.form`): a question is asked in one.
    pub forms: bool,
}

impl Projector {
    /// The view of session `session_id`.
    pub fn new(session_id: &str, shows: Shows) -> Projector {
        Projector {
            shows,
            session_id: session_id.to_string(),
            config: config::ConfigEcho::new(shows.config_view),
            ..Projector::default()
        }
    }

    /// The command of `tool_call_id` runs in the editor's terminal `terminal_id`: embed it.
    pub fn attach_terminal(&mut self, tool_call_id: &str, terminal_id: &str) -> SessionUpdate {
        let t = self.tools.entry(tool_call_id.to_string()).or_default();
        t.client_terminal = Some(terminal_id.to_string());
        let update = SessionUpdate::ToolCallUpdate(
            ToolCallUpdate::new(tool_call_id, ToolCallStatus::InProgress)
                .with_content(vec![ToolCallContent::terminal(terminal_id)]),
        );
        self.placed(update)
    }

    /// A tool call's update, in the child session its call is shown in, if any (a delegation's
    /// own call, to a client that shows subagents); any other update as it is.
    fn placed(&self, update: SessionUpdate) -> SessionUpdate {
        let id = match &update {
            SessionUpdate::ToolCall(c) => &c.tool_call_id,
            SessionUpdate::ToolCallUpdate(u) => &u.tool_call_id,
            _ => return update,
        };
        match self.session_of(id) {
            Some(child) => update.in_session(Some(&child)),
            None => update,
        }
    }

    /// [`Projector::placed`], for each.
    fn place_all(&self, updates: Vec<SessionUpdate>) -> Vec<SessionUpdate> {
        if !self.shows.subagents {
            return updates;
        }
        updates.into_iter().map(|u| self.placed(u)).collect()
    }

    /// The child session tool call `tool_call_id` is shown in, when it is a delegation's own
    /// call shown so.
    fn session_of(&self, tool_call_id: &str) -> Option<String> {
        let t = self.tools.get(tool_call_id)?;
        t.in_child.as_ref().map(|(_, c)| c.clone())
    }

    /// The delegation (and its child) that tool call `tool_call_id` belongs to: the delegation
    /// itself, or one of its agent's calls.
    fn delegation_of(&self, tool_call_id: &str) -> Option<(String, String)> {
        let t = self.tools.get(tool_call_id)?;
        match (&t.child, &t.in_child) {
            (Some(c), _) => Some((tool_call_id.to_string(), c.clone())),
            (None, Some(d)) => Some(d.clone()),
            (None, None) => None,
        }
    }

    /// A dialog is put to the person: what is asked ([`dialog::dialog`]: in the child session
    /// a delegated agent's call is shown in, for one of its calls), and — when it is about a
    /// delegation — that child's state `requires_action`.
    pub fn dialog(&mut self, interaction: &Interaction) -> (Vec<SessionUpdate>, dialog::Dialog) {
        let (InteractionRequest::Permission { tool_call_id, .. }
        | InteractionRequest::SandboxBoundary { tool_call_id, .. }
        | InteractionRequest::Question { tool_call_id, .. }) = &interaction.request;
        let shown_in = self.session_of(tool_call_id);
        let updates = match self.delegation_of(tool_call_id) {
            Some((d, _)) => self.child_state(&d, "requires_action"),
            None => vec![],
        };
        let request = &interaction.request;
        let forms = self.shows.forms;
        let asked = dialog::dialog(request, &self.session_id, shown_in.as_deref(), forms);
        (updates, asked)
    }

    /// The child of delegation `delegation` is in `state` now: shown when it was not already.
    fn child_state(&mut self, delegation: &str, state: &'static str) -> Vec<SessionUpdate> {
        match self.tools.get_mut(delegation) {
            Some(d) if !d.terminal && d.child_state != Some(state) => {
                d.child_state = Some(state);
                let child = d.child.clone().unwrap_or_default();
                vec![subagents::state(&child, subagents::working(state))]
            }
            _ => vec![],
        }
    }

    /// Something of a delegation's agent happened (its text, one of its calls): its child is
    /// `running` (after a dialog, or for a graph's task that never said so).
    fn child_works(&mut self, tool_call_id: &str) -> Vec<SessionUpdate> {
        match self.delegation_of(tool_call_id) {
            Some((d, _)) => self.child_state(&d, "running"),
            None => vec![],
        }
    }

    /// A state of the session's goal, as the goal extension other agents share shows it:
    /// `session_info_update._meta.goal`, its snapshot or `null` once cleared. Each revision
    /// once (the goal's own answer and its frame may both bring it), never an older one.
    pub fn goal(&mut self, goal: &crate::host_api::wire::Goal) -> Vec<SessionUpdate> {
        if self.goal_shown.is_some_and(|r| goal.revision <= r) {
            return vec![];
        }
        self.goal_shown = Some(goal.revision);
        vec![SessionUpdate::SessionInfoUpdate {
            title: None,
            updated_at: None,
            meta: Some(json!({"goal": goal_snapshot(goal)})),
        }]
    }

    pub fn mark_own_turn(&mut self, turn_id: &str) {
        self.own_turns.insert(turn_id.to_string());
    }

    /// Everything a live frame does, in order: the updates it shows first, then what the
    /// reader performs — each effect the message as it goes out. Every kind of frame has its
    /// arm. `prompt_turn`: the turn this connection's pending prompt waits for (its user
    /// message is not echoed back; its end answers the prompt).
    pub fn apply(
        &mut self,
        body: FrameBody,
        now: Instant,
        prompt_turn: Option<&str>,
    ) -> Vec<Effect> {
        use FrameBody as F;
        match body {
            F::TurnStarted { ref turn_id, .. } if prompt_turn == Some(turn_id.as_str()) => {
                self.mark_own_turn(turn_id);
                show(self.frame(&body, now))
            }
            F::PlanState {
                revision,
                ref status,
                ref entries,
            } => {
                let plan = crate::host_api::ops::PlanView {
                    revision,
                    status: status.clone(),
                    entries: entries.clone(),
                    updated_at: None,
                };
                let session_id = self.session_id.clone();
                // A hint to query, before the plan is shown.
                let told = Effect::Notify(Notification::PlanChanged { session_id, plan });
                std::iter::once(told)
                    .chain(show(self.frame(&body, now)))
                    .collect()
            }
            F::Usage {
                turn_id: Some(ref turn_id),
                model: Some(ref model),
                ref delta,
                ..
            } => {
                self.count_usage(turn_id, model, delta);
                show(self.frame(&body, now))
            }
            F::TurnStarted { .. }
            | F::UserMessage { .. }
            | F::TurnStatus { .. }
            | F::TextDelta { .. }
            | F::ThinkingDelta { .. }
            | F::ToolStart { .. }
            | F::ToolRunning { .. }
            | F::ToolOutputDelta { .. }
            | F::PlanUpdate { .. }
            | F::Usage { .. } => show(self.frame(&body, now)),
            F::ToolResult { .. } => {
                // Throttled output first, then the result.
                let mut out = self.pending_output();
                out.extend(self.frame(&body, now));
                show(out)
            }
            // Live: a `notice` to a client that shows them; else its fallback, as on replay.
            F::Notice { notice, .. } if self.shows.notices => show(self.live_notice(notice)),
            F::Notice { .. } | F::Compaction { .. } => show(self.frame(&body, now)),
            F::InteractionRequest { interaction } => self.ask(interaction),
            F::ClientCall {
                invocation_id,
                tool_call_id,
                service,
                input,
                input_ref,
            } => vec![Effect::EditorCall(EditorCall {
                invocation_id,
                tool_call_id,
                service,
                input,
                input_ref,
            })],
            // Closed by the host (or another client) while the person still sees it.
            F::ClientCallCancelled { invocation_id } => vec![Effect::Withdraw(invocation_id)],
            F::InteractionClosed { interaction_id, .. } => vec![Effect::Withdraw(interaction_id)],
            F::ConfigurationChanged {
                revision,
                configuration,
            } => show(self.config.changed(revision, &configuration)),
            F::SessionUpdated { revision, .. } => {
                self.config.saw_revision(revision);
                show(self.frame(&body, now))
            }
            F::GoalUpdated { goal } => self.goal_updated(goal),
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
                self.turn_terminal(turn_id, outcome, reason, failure, prompt_turn)
            }
            F::StreamEnd { reason, .. } => vec![Effect::WindowEnd {
                session_removed: reason == StreamEndReason::SessionRemoved,
            }],
            // The host could not emit a frame (a bug there): catch up from durable state.
            F::FrameOmitted { omitted_kind, .. } => vec![Effect::Resync(omitted_kind)],
            // Nothing to show: the transcript's progress and the session's removal are read
            // from the session's state and the stream's end; a heartbeat only keeps it open.
            F::TranscriptAdvanced { .. }
            | F::SessionRemoved {}
            | F::Heartbeat { .. }
            | F::Unknown => vec![],
        }
    }

    /// A dialog: what the turn shows while it waits (when anything), then the question.
    fn ask(&mut self, interaction: Interaction) -> Vec<Effect> {
        let (waits, asked) = self.dialog(&interaction);
        let mut out = if waits.is_empty() {
            vec![]
        } else {
            show(waits)
        };
        out.push(Effect::Ask(interaction, asked));
        out
    }

    /// A turn's usage, by model, until its end answers the prompt with it (the last 8 turns'
    /// at most: a turn whose end this connection never sees is not kept for ever).
    fn count_usage(&mut self, turn_id: &str, model: &str, delta: &TokenUsage) {
        if !self.turn_usage.contains_key(turn_id) && self.turn_usage.len() >= 8 {
            self.turn_usage.clear();
        }
        self.turn_usage
            .entry(turn_id.to_string())
            .or_default()
            .entry(model.to_string())
            .or_default()
            .add(delta);
    }

    /// The goal's new state: shown, then told.
    fn goal_updated(&mut self, goal: Goal) -> Vec<Effect> {
        let told = Notification::GoalUpdate(GoalUpdate {
            session_id: self.session_id.clone(),
            goal: goal.clone(),
        });
        vec![Effect::Show(self.goal(&goal)), Effect::Notify(told)]
    }

    /// A turn's end: its throttled output and open tools closed first, then the prompt's
    /// answer when it is this connection's prompt, else a notification that it ended.
    fn turn_terminal(
        &mut self,
        turn_id: String,
        outcome: TurnOutcome,
        reason: String,
        failure: answer::Failure,
        prompt_turn: Option<&str>,
    ) -> Vec<Effect> {
        let mut out = self.pending_output();
        out.extend(self.close_open_tools(TOOL_UNFINISHED));
        self.turn_finished(&turn_id);
        let usage: Vec<_> = self
            .turn_usage
            .remove(&turn_id)
            .unwrap_or_default()
            .into_iter()
            .collect();
        let end = if prompt_turn == Some(turn_id.as_str()) {
            let result = answer::terminal_result(&turn_id, outcome, &reason, failure);
            let usage_to = self.shows.answer_usage;
            let result = result.map(|r| answer::with_usage(r, &usage, usage_to));
            Effect::Answer(result, outcome)
        } else {
            let ended = TurnStateNotification {
                session_id: self.session_id.clone(),
                turn_id,
                outcome,
                reason,
            };
            Effect::Notify(Notification::TurnState(ended, failure.class))
        };
        vec![Effect::Show(out), end]
    }

    /// A durable item's frame during a catch-up (the live stream fell behind): as on replay,
    /// except that a notice the client missed live is shown as the live notice it was.
    pub fn caught_up(&mut self, body: &FrameBody, now: Instant) -> Vec<SessionUpdate> {
        match body {
            FrameBody::Notice { notice, .. } if self.shows.notices => {
                self.live_notice(notice.clone())
            }
            _ => self.frame(body, now),
        }
    }

    /// A notice, once (a catch-up may bring one that was shown live).
    fn live_notice(&mut self, n: Notice) -> Vec<SessionUpdate> {
        const REMEMBERED: usize = 4096;
        if self.notices_shown.len() >= REMEMBERED {
            self.notices_shown.clear();
        }
        if !self.notices_shown.insert(n.message_id.clone()) {
            return vec![];
        }
        live_notice(n)
    }

    /// The updates (each the value of `params.update`) a frame shows.
    pub fn frame(&mut self, body: &FrameBody, now: Instant) -> Vec<SessionUpdate> {
        let updates = self.updates_of(body, now);
        self.place_all(updates)
    }

    /// A frame's updates, each still of this session ([`Projector::frame`] places them).
    fn updates_of(&mut self, body: &FrameBody, now: Instant) -> Vec<SessionUpdate> {
        match body {
            FrameBody::TurnStarted {
                turn_id,
                content: Some(content),
                ..
            } if !self.own_turns.contains(turn_id) && self.echoed.insert(turn_id.clone()) => {
                user_message(turn_id, &content.text)
            }
            // A steered message: shown once, where the turn took it in.
            FrameBody::UserMessage {
                turn_id,
                message_id,
                content,
            } if self.echoed.insert(message_id.clone()) => {
                user_chunk(turn_id, message_id, &content.text)
            }
            FrameBody::TextDelta {
                message_id,
                start_offset,
                text,
                ..
            } => match self.unseen(message_id, *start_offset, text) {
                Some(t) => vec![SessionUpdate::AgentMessageChunk(Chunk::text(message_id, t))],
                None => vec![],
            },
            FrameBody::ThinkingDelta {
                message_id,
                start_offset,
                text,
                ..
            } => match self.unseen(message_id, *start_offset, text) {
                Some(t) => vec![SessionUpdate::AgentThoughtChunk(Chunk::text(message_id, t))],
                None => vec![],
            },
            FrameBody::ToolStart { .. } => self.tool_start(body),
            // Notices are live events, not history: a client that shows them was shown this
            // one live ([`Projector::apply`]); one that does not sees its fallback, live and
            // replayed alike, once.
            FrameBody::Notice { .. } if self.shows.notices => vec![],
            FrameBody::Notice { notice: n, .. } => {
                self.fallback(&n.message_id, n.otherwise, &n.text)
            }
            FrameBody::Compaction { compaction, .. } => self.compaction(compaction),
            FrameBody::ToolRunning { tool_call_id, .. } => self.tool_running(tool_call_id),
            FrameBody::ToolOutputDelta { .. } => self.tool_output(body, now),
            FrameBody::ToolResult { .. } => self.tool_result(body),
            // A client that shows plans by id follows `plan_state`; any other the legacy plan.
            FrameBody::PlanUpdate { .. } if self.shows.plan => vec![],
            FrameBody::PlanUpdate { entries, .. } => vec![SessionUpdate::Plan {
                entries: plan(entries),
            }],
            FrameBody::PlanState { .. } if !self.shows.plan => vec![],
            FrameBody::PlanState {
                revision,
                status,
                entries,
            } => self.plan_state(*revision, status, entries),
            FrameBody::Usage {
                context: Some(c),
                cost,
                ..
            } => {
                vec![SessionUpdate::UsageUpdate {
                    used: c.used_tokens,
                    size: c.window_tokens,
                    cost: cost.clone(),
                }]
            }
            FrameBody::SessionUpdated {
                name, last_used_at, ..
            } => {
                vec![SessionUpdate::SessionInfoUpdate {
                    title: name.clone(),
                    updated_at: Some(iso8601(*last_used_at)),
                    meta: None,
                }]
            }
            // Shown otherwise ([`Projector::apply`]), or not at all: an echoed or own turn's
            // start, a retry-less status, usage without a context figure.
            FrameBody::TurnStarted { .. }
            | FrameBody::UserMessage { .. }
            | FrameBody::TurnStatus { .. }
            | FrameBody::Usage { .. }
            | FrameBody::InteractionRequest { .. }
            | FrameBody::InteractionClosed { .. }
            | FrameBody::ConfigurationChanged { .. }
            | FrameBody::TranscriptAdvanced { .. }
            | FrameBody::ClientCall { .. }
            | FrameBody::ClientCallCancelled { .. }
            | FrameBody::TurnTerminal { .. }
            | FrameBody::GoalUpdated { .. }
            | FrameBody::SessionRemoved {}
            | FrameBody::FrameOmitted { .. }
            | FrameBody::Heartbeat { .. }
            | FrameBody::StreamEnd { .. }
            | FrameBody::Unknown => vec![],
        }
    }

    /// Text in place of an update the client does not show: agent text or a thought, once
    /// (a catch-up or a replay may bring it again).
    fn fallback(
        &mut self,
        message_id: &str,
        otherwise: NoticeFallback,
        text: &str,
    ) -> Vec<SessionUpdate> {
        let unseen = match otherwise {
            NoticeFallback::Nothing => None,
            _ => self.unseen(message_id, 0, text),
        };
        match (unseen, otherwise) {
            (Some(t), NoticeFallback::Thought) => {
                vec![SessionUpdate::AgentThoughtChunk(Chunk::text(message_id, t))]
            }
            (Some(t), _) => vec![SessionUpdate::AgentMessageChunk(Chunk::text(message_id, t))],
            (None, _) => vec![],
        }
    }

    /// A compaction: its state and summary to a client that shows compactions (a completed
    /// one once: a catch-up or a replay may bring it again); to any other, the completed one's
    /// fallback text (`/compact`'s reply).
    fn compaction(&mut self, c: &Compaction) -> Vec<SessionUpdate> {
        let id = &c.compaction_id;
        if !self.shows.compaction {
            return match (&c.status, &c.fallback) {
                (CompactionStatus::Completed, Some(f)) => {
                    self.fallback(&f.message_id, f.otherwise, &f.text)
                }
                _ => vec![],
            };
        }
        if self.compactions.contains(id) {
            return vec![];
        }
        let mut out = vec![];
        if c.status == CompactionStatus::Completed {
            self.compactions.insert(id.clone());
            if let Some(summary) = c.summary.as_ref().filter(|s| !s.is_empty()) {
                out.push(SessionUpdate::CompactionSummaryChunk {
                    compaction_id: id.clone(),
                    content: ContentBlock::Text {
                        text: summary.clone(),
                    },
                });
            }
        }
        out.push(SessionUpdate::CompactionUpdate {
            compaction_id: id.clone(),
            status: c.status,
            error: c.error.clone(),
        });
        out
    }

    /// The session's plan, by id: updated when its revision or status changes (a replayed
    /// decision names only its revision: its entries are that revision's), removed when a
    /// rewind leaves none.
    fn plan_state(
        &mut self,
        revision: u64,
        status: &str,
        entries: &[crate::host_api::wire::PlanEntry],
    ) -> Vec<SessionUpdate> {
        if revision == 0 {
            return match self.plan.take() {
                Some(_) => vec![SessionUpdate::PlanRemoved {
                    plan_id: PLAN_ID.into(),
                }],
                None => vec![],
            };
        }
        let entries = match (&self.plan, entries.is_empty()) {
            (_, false) => entries.to_vec(),
            (Some((r, _, known)), true) if *r == revision => known.clone(),
            // A decision on a revision this view never saw: nothing to show it with.
            _ => return vec![],
        };
        if self
            .plan
            .as_ref()
            .is_some_and(|(r, s, e)| *r == revision && s == status && *e == entries)
        {
            return vec![]; // shown already (a catch-up replays it)
        }
        let update = SessionUpdate::PlanUpdate {
            plan: crate::acp::types::PlanItems {
                plan_id: PLAN_ID.into(),
                entries: plan(&entries),
                meta: json!({"maka": {"revision": revision, "status": status}}),
            },
        };
        self.plan = Some((revision, status.to_string(), entries));
        vec![update]
    }

    /// A tool call starts: shown once (a catch-up may replay its start).
    // Not inlined (nor the other tool arms): the per-frame match stays small, and the text
    // path through it fast (inlined, they cost 10 % of chunks/s: docs/benchmarks.md).
    #[inline(never)]
    fn tool_start(&mut self, body: &FrameBody) -> Vec<SessionUpdate> {
        let FrameBody::ToolStart {
            tool_call_id,
            tool_name,
            title,
            activity_kind,
            args,
            args_truncated,
            locations: tool_locations,
            parent_tool_call_id,
            name,
            ..
        } = body
        else {
            return vec![];
        };
        if !self.shown_tools.insert(tool_call_id.clone()) {
            return vec![]; // shown already (a catch-up replays it)
        }
        let display = self.shows.display_terminal && activity_kind == "command";
        // The plan tool (shown as the plan, not as a call) is the model's own, never a
        // delegation's call, whatever its agent named it.
        let hidden = tool_name == PLAN_TOOL && parent_tool_call_id.is_none();
        // To a client that shows subagents: a delegation (the model's `delegate` call, or a
        // task of its `delegate_graph` call) is a child session, and its agent's calls are
        // shown in that child.
        let parent = parent_tool_call_id
            .as_deref()
            .and_then(|p| self.tools.get(p));
        let in_child = parent
            .and_then(|t| t.child.clone())
            .map(|c| (parent_tool_call_id.clone().unwrap_or_default(), c));
        let delegation = self.shows.subagents
            && tool_name == "delegate"
            && (parent_tool_call_id.is_none() || parent.is_some_and(|t| t.graph))
            && subagents::names_a_task(args);
        let child = delegation.then(|| subagents::child_id(&self.session_id, tool_call_id));
        let state = ToolState {
            command: (activity_kind == "command").then(|| title.clone()),
            display,
            hidden,
            graph: tool_name == "delegate_graph" && parent_tool_call_id.is_none(),
            child: child.clone(),
            in_child: in_child.clone(),
            ..ToolState::default()
        };
        if self.tools.insert(tool_call_id.clone(), state).is_none() {
            self.order.push(tool_call_id.clone());
        }
        if hidden {
            return vec![];
        }
        // A subagent's tool call is shown under the `delegate` call that ran it (a client that
        // shows subagents sees it in the child session instead).
        let under = parent_tool_call_id
            .as_deref()
            .filter(|_| in_child.is_none());
        let mut meta = start_meta(*args_truncated, under, child.as_deref());
        let mut content = vec![];
        if let Some(c) = &child {
            // The link from the call to the session it started (ACP `SessionReference`).
            content.push(ToolCallContent::Session {
                session_id: c.clone(),
            });
        }
        if display {
            content.push(ToolCallContent::terminal(tool_call_id));
            meta.get_or_insert_with(|| json!({}))["terminal_info"] =
                json!({"terminal_id": tool_call_id});
        }
        // The host's name for clients when it has one (an MCP tool, a subagent's call); else
        // the tool's own — but a delegation's calls have no other name.
        let name = name
            .clone()
            .or_else(|| parent_tool_call_id.is_none().then(|| tool_name.clone()));
        let call = SessionUpdate::ToolCall(ToolCall {
            tool_call_id: tool_call_id.clone(),
            name,
            title: title.clone(),
            kind: tool_kind(activity_kind),
            status: ToolCallStatus::Pending,
            raw_input: args.clone(),
            locations: locations(tool_locations),
            content,
            meta,
        });
        let mut out = vec![];
        if let Some((d, _)) = &in_child {
            out.extend(self.child_state(d, "running"));
        }
        out.push(call);
        if let Some(c) = &child {
            out.extend(subagents::started(&self.session_id, c, tool_call_id, args));
        }
        out
    }

    /// A tool call passed its gate and runs (a delegation: its child is running; one of its
    /// agent's calls: the child works again, when a dialog had it wait).
    #[inline(never)]
    fn tool_running(&mut self, tool_call_id: &str) -> Vec<SessionUpdate> {
        let Some(t) = self
            .tools
            .get(tool_call_id)
            .filter(|t| !t.terminal && !t.hidden)
        else {
            return vec![];
        };
        let in_child = t.in_child.is_some();
        let update = SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            tool_call_id,
            ToolCallStatus::InProgress,
        ));
        let mut out = self.child_works(tool_call_id);
        // The child's state on the parent before its call's update, after the delegation's.
        out.insert(if in_child { out.len() } else { 0 }, update);
        out
    }

    /// Live command output: throttled, or through the display terminal.
    #[inline(never)]
    fn tool_output(&mut self, body: &FrameBody, now: Instant) -> Vec<SessionUpdate> {
        let FrameBody::ToolOutputDelta {
            tool_call_id,
            chunk,
            ..
        } = body
        else {
            return vec![];
        };
        let mut out = self.child_works(tool_call_id);
        let Some(t) = self.tools.get_mut(tool_call_id) else {
            return out;
        };
        if t.terminal || t.hidden || t.client_terminal.is_some() {
            return out;
        }
        if let Some(child) = &t.child {
            // A delegation's output is its agent's text: the child's answer, streaming.
            out.push(subagents::answer_chunk(child, tool_call_id, chunk));
            return out;
        }
        let in_progress = |meta: Option<Value>| ToolCallUpdate {
            meta,
            ..ToolCallUpdate::new(tool_call_id, ToolCallStatus::InProgress)
        };
        // Every piece, in order, to a client that appends them, at most 64 KiB each (a host
        // that is not ours may send larger chunks), beside what it is shown otherwise.
        if self.shows.terminal_output_delta {
            for piece in crate::host_api::pieces(chunk, TERMINAL_DELTA_BYTES) {
                out.push(SessionUpdate::ToolCallUpdate(in_progress(Some(json!({
                    "terminal_output_delta": {"terminal_id": tool_call_id, "data": piece}
                })))));
            }
        }
        if t.display {
            t.streamed = true;
            let meta = json!({"terminal_output": {"terminal_id": tool_call_id, "data": chunk}});
            out.push(SessionUpdate::ToolCallUpdate(in_progress(Some(meta))));
            return out;
        }
        t.output.push_str(chunk);
        t.truncated |= crate::host_api::keep_tail(&mut t.output, OUTPUT_TAIL_BYTES);
        t.dirty = true;
        if t.last_sent
            .is_some_and(|at| now.duration_since(at) < OUTPUT_THROTTLE)
        {
            return out;
        }
        t.last_sent = Some(now);
        t.dirty = false;
        let text = fenced_output(t.command.as_deref(), &t.output, t.truncated, None);
        out.push(SessionUpdate::ToolCallUpdate(
            in_progress(None).with_content(vec![ToolCallContent::text(text)]),
        ));
        out
    }

    /// A tool call settled: its content, its raw output, its locations.
    #[inline(never)]
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
        let acp_status = if *status == ToolStatus::Completed {
            ToolCallStatus::Completed
        } else {
            ToolCallStatus::Failed
        };
        // A call of a delegation's agent settles: its child works (a delegation's own result
        // says its child is idle instead).
        let mut out = match self.tools.get(tool_call_id) {
            Some(t) if t.in_child.is_some() => self.child_works(tool_call_id),
            _ => vec![],
        };
        let t = self.tools.entry(tool_call_id.clone()).or_default();
        if t.terminal {
            return out;
        }
        t.terminal = true;
        if t.hidden {
            return out;
        }
        let child = t.child.clone();
        let mut update = ToolCallUpdate {
            content: Some(result_content(result, *status)),
            raw_output: Some(match result {
                // A subagent's call: its own rawOutput, as it sent it.
                ToolResultContent::Agent {
                    raw_output: Some(raw),
                    ..
                } => raw.clone(),
                _ => serde_json::to_value(result).unwrap_or(Value::Null),
            }),
            ..ToolCallUpdate::new(tool_call_id, acp_status)
        };
        if let ToolResultContent::Terminal {
            output,
            exit_code,
            signal,
            timed_out,
            ..
        } = result
        {
            if let Some(tid) = &t.client_terminal {
                // The editor keeps showing its terminal after release.
                let verdict = terminal_verdict(*status, *exit_code, signal.as_deref(), *timed_out);
                update.content = Some(vec![
                    ToolCallContent::terminal(tid),
                    ToolCallContent::text(verdict),
                ]);
            } else if t.display {
                update.content = Some(vec![ToolCallContent::terminal(tool_call_id)]);
                let mut meta = json!({"terminal_exit": {"terminal_id": tool_call_id, "exit_code": exit_code, "signal": signal}});
                if !t.streamed {
                    // Replay (or output that never streamed): show it all at once.
                    meta["terminal_output"] = json!({"terminal_id": tool_call_id, "data": output});
                }
                update.meta = Some(meta);
            }
        }
        if let (Some(c), Some(content)) = (&child, update.content.as_mut()) {
            // A settled call's content replaces what it had: the link stays first.
            content.insert(
                0,
                ToolCallContent::Session {
                    session_id: c.clone(),
                },
            );
        }
        update.locations = result_locations(result);
        if *truncated {
            // Merged: a display terminal's `terminal_exit` is already in `_meta`.
            update.meta.get_or_insert_with(|| json!({}))["maka"]["truncated"] = json!(true);
        }
        let answer = match result {
            ToolResultContent::Text { text } | ToolResultContent::Agent { text, .. } => text,
            _ => "",
        };
        if let Some(c) = &child {
            // The child's answer as the parent got it, then the call, then the child's rest.
            out.push(subagents::answer(&self.session_id, c, tool_call_id, answer));
        }
        out.push(SessionUpdate::ToolCallUpdate(update));
        if let Some(c) = &child {
            out.push(subagents::state(c, subagents::idle(*status, answer)));
        }
        out
    }
    /// Settles every tool call still open (a turn ended without their result): `failed`.
    pub fn close_open_tools(&mut self, why: &str) -> Vec<SessionUpdate> {
        let mut out = vec![];
        for id in std::mem::take(&mut self.order) {
            if let Some(t) = self.tools.remove(&id) {
                if !t.terminal && !t.hidden {
                    let shown_in = t.in_child.as_ref().map(|(_, c)| c.as_str());
                    // Placed here: its state is gone once the turn's calls are settled.
                    out.push(
                        SessionUpdate::ToolCallUpdate(
                            ToolCallUpdate::new(id, ToolCallStatus::Failed)
                                .with_content(vec![ToolCallContent::text(why)]),
                        )
                        .in_session(shown_in),
                    );
                    if let Some(c) = &t.child {
                        out.push(subagents::state(
                            c,
                            subagents::idle(ToolStatus::Failed, why),
                        ));
                    }
                }
            }
        }
        self.tools.clear();
        out
    }

    /// Throttled output that never went out: flushed before the result or the turn's end.
    pub fn pending_output(&mut self) -> Vec<SessionUpdate> {
        let mut out = vec![];
        for id in &self.order {
            if let Some(t) = self.tools.get_mut(id) {
                if t.dirty && !t.terminal && !t.hidden {
                    t.dirty = false;
                    let text = fenced_output(t.command.as_deref(), &t.output, t.truncated, None);
                    out.push(SessionUpdate::ToolCallUpdate(
                        ToolCallUpdate::new(id, ToolCallStatus::InProgress)
                            .with_content(vec![ToolCallContent::text(text)]),
                    ));
                }
            }
        }
        self.place_all(out)
    }

    /// Call after a turn's terminal frame (once its open tools are settled with
    /// [`Projector::close_open_tools`], which drops their state): forgets the turn and what
    /// was shown of it, so the next turn's text and tool ids start afresh.
    pub fn turn_finished(&mut self, turn_id: &str) {
        self.own_turns.remove(turn_id);
        self.shown.clear();
        self.shown_tools.clear();
        self.echoed.clear();
    }

    /// The part of a text delta not shown yet ([`content::unseen`]).
    fn unseen<'t>(&mut self, message_id: &str, start: u64, text: &'t str) -> Option<&'t str> {
        content::unseen(&mut self.shown, message_id, start, text)
    }
}

/// What a tool call still open when its turn ended says.
pub const TOOL_UNFINISHED: &str = "The turn ended before this tool finished.";

/// What a live frame makes the session's reader do ([`Projector::apply`]), in order: each
/// the message as it goes out.
pub enum Effect {
    /// Show these updates (queued in order, under the session's view lock).
    Show(Vec<SessionUpdate>),
    /// Send this notification.
    Notify(Notification),
    /// Put this interaction to the person so (a thread of its own sends it and answers the
    /// host).
    Ask(Interaction, dialog::Dialog),
    /// Make this request of the editor (a thread of its own answers the host).
    EditorCall(EditorCall),
    /// The host closed this dialog or editor call: withdraw it from the editor.
    Withdraw(String),
    /// The pending prompt's turn ended: its answer (the stop reason mapped, usage attached),
    /// and the outcome (a goal Maka's dialect armed for the prompt starts after a completed
    /// one).
    Answer(answer::Answer, TurnOutcome),
    /// The stream's window ends here (`session_removed`: the session is gone).
    WindowEnd { session_removed: bool },
    /// The host could not emit a frame of this kind: catch up from its durable state.
    Resync(String),
}

/// A notification a frame sends besides its updates: what happened, in no client's dialect.
/// The connection words it on the way out (`maka_dialect::told`): ours ([`Notification::ours`])
/// or, to a client that opted in, Apache Maka's.
pub enum Notification {
    /// A turn this connection did not prompt ended (how it failed, when it did).
    TurnState(TurnStateNotification, Option<FailureClass>),
    /// The session's goal changed.
    GoalUpdate(GoalUpdate),
    /// The session's plan changed (ours shows the plan itself; Maka's clients are told to
    /// query it).
    PlanChanged {
        session_id: String,
        plan: crate::host_api::ops::PlanView,
    },
}

impl Notification {
    /// Its method and params in our dialect (`_maka/turn_state`, `_maka/goal_update`); `None`:
    /// ours tells nothing (a plan change is shown as the plan).
    pub fn ours(&self) -> Option<(&'static str, Value)> {
        use crate::acp::types::to_json;
        match self {
            Notification::TurnState(n, _) => Some(("_maka/turn_state", to_json(n))),
            Notification::GoalUpdate(n) => Some(("_maka/goal_update", to_json(n))),
            Notification::PlanChanged { .. } => None,
        }
    }
}

/// `_maka/goal_update`'s params.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalUpdate {
    pub session_id: String,
    pub goal: Goal,
}

/// What a frame tells the session's bookkeeping (its position, its turns, its goal), read
/// before the frame is applied.
#[derive(Default)]
pub struct Facts<'a> {
    /// It carries a sequence number (the stream's own frames — its end, heartbeats, an
    /// omission — do not).
    pub sequenced: bool,
    pub turn_started: Option<&'a str>,
    pub turn_ended: Option<&'a str>,
    /// The durable transcript item it says is saved.
    pub through: Option<u64>,
    pub goal: Option<&'a Goal>,
}

/// What `body` tells the session's bookkeeping.
pub fn facts(body: &FrameBody) -> Facts<'_> {
    let mut facts = Facts {
        sequenced: true,
        ..Facts::default()
    };
    match body {
        FrameBody::StreamEnd { .. }
        | FrameBody::Heartbeat { .. }
        | FrameBody::FrameOmitted { .. } => facts.sequenced = false,
        FrameBody::TurnStarted { turn_id, .. } => facts.turn_started = Some(turn_id),
        FrameBody::TurnTerminal { turn_id, .. } => facts.turn_ended = Some(turn_id),
        FrameBody::TranscriptAdvanced {
            through_message_seq,
        } => facts.through = Some(*through_message_seq),
        FrameBody::GoalUpdated { goal } => facts.goal = Some(goal),
        _ => {}
    }
    facts
}

/// The frames the host emits for a plan change (a revision is also the legacy `plan`): what
/// is shown of one made while no reader follows the session.
pub fn plan_change_frames(plan: &crate::host_api::ops::PlanView, revised: bool) -> Vec<FrameBody> {
    let mut frames = vec![];
    if revised {
        frames.push(FrameBody::PlanUpdate {
            turn_id: String::new(),
            entries: plan.entries.clone(),
        });
    }
    frames.push(plan.frame());
    frames
}

/// The notice a catch-up after a broken stream is told with (as the host's notices are: only
/// to a client that shows notices), at snapshot position `seq`.
pub fn caught_up_notice(seq: u64) -> FrameBody {
    FrameBody::Notice {
        turn_id: String::new(),
        notice: Notice {
            message_id: format!("caught_up_{seq}"),
            severity: HostSeverity::Info,
            title: "The agent's updates were interrupted; caught up from the saved session.".into(),
            description: None,
            otherwise: NoticeFallback::Nothing,
            text: String::new(),
        },
    }
}

/// The most output one `terminal_output_delta` carries.
const TERMINAL_DELTA_BYTES: usize = 64 * 1024;

/// The method that controls goals, named in every snapshot.
pub const GOAL_CONTROL_METHOD: &str = "_session/goal";

/// A goal as the goal extension shows it (claude-agent-acp's `docs/goal-extension.md`):
/// `{objective, status, iterations, lastReason, createdAt, controlMethod}` and its budget,
/// `null` once cleared. Statuses are the shared ones: a goal waiting on the person or one
/// that failed is `blocked`, one stopped by a limit `limited`, one met `complete`.
pub fn goal_snapshot(goal: &crate::host_api::wire::Goal) -> Value {
    let status = match goal.status.as_str() {
        "cancelled" => return Value::Null,
        "active" => "active",
        "paused" => "paused",
        "stopped" => "limited",
        "completed" => "complete",
        _ => "blocked",
    };
    let mut snapshot = json!({
        "objective": goal.objective,
        "status": status,
        "iterations": goal.turns_run,
        "maxIterations": goal.limits.max_turns,
        "tokensUsed": goal.tokens_used,
        "createdAt": goal.started_at,
        "controlMethod": GOAL_CONTROL_METHOD,
    });
    if let Some(reason) = &goal.reason {
        snapshot["lastReason"] = json!(reason);
    }
    if let Some(budget) = goal.limits.max_tokens {
        snapshot["tokenBudget"] = json!(budget);
    }
    snapshot
}

fn show(updates: Vec<SessionUpdate>) -> Vec<Effect> {
    vec![Effect::Show(updates)]
}

/// A tool call's `_meta.maka` at its start, when it has anything to say.
fn start_meta(args_truncated: bool, parent: Option<&str>, child: Option<&str>) -> Option<Value> {
    let mut maka = serde_json::Map::new();
    if args_truncated {
        maka.insert("argsTruncated".into(), json!(true));
    }
    if let Some(parent) = parent {
        maka.insert("parentToolCallId".into(), json!(parent));
    }
    if let Some(c) = child {
        maka.insert("subagentSessionId".into(), json!(c));
    }
    (!maka.is_empty()).then(|| json!({ "maka": maka }))
}

/// The plan tool: shown as the ACP `plan`, not as a tool call.
const PLAN_TOOL: &str = "update_plan";

fn user_message(turn_id: &str, text: &str) -> Vec<SessionUpdate> {
    user_chunk(turn_id, &format!("u_{turn_id}"), text)
}

fn user_chunk(turn_id: &str, message_id: &str, text: &str) -> Vec<SessionUpdate> {
    if text.is_empty() {
        return vec![];
    }
    vec![SessionUpdate::UserMessageChunk(Chunk {
        meta: Some(json!({"maka": {"turnId": turn_id}})),
        ..Chunk::text(message_id, text)
    })]
}

/// A session has one plan, revised in place: its id.
const PLAN_ID: &str = "plan";

/// A notice as ACP shows it (`title` is empty only in items older than notices' titles).
fn live_notice(n: Notice) -> Vec<SessionUpdate> {
    let title = if n.title.is_empty() {
        n.text.trim().to_string()
    } else {
        n.title
    };
    if title.is_empty() {
        return vec![];
    }
    let severity = match n.severity {
        HostSeverity::Info => NoticeSeverity::Info,
        HostSeverity::Warning => NoticeSeverity::Warning,
        HostSeverity::Error => NoticeSeverity::Error,
    };
    vec![SessionUpdate::Notice {
        severity,
        title,
        description: n.description,
    }]
}
