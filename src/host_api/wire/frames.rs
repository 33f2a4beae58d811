//! The event stream: one [`Frame`] per line.

use super::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One line of `GET /v1/events`. Data frames carry `seq`; `heartbeat` and `stream_end` do not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Frame {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default)]
    pub ts: u64,
    #[serde(flatten)]
    pub body: FrameBody,
}

impl Frame {
    /// Reads one event-stream line. Text and thinking deltas — most of any stream — are read
    /// through a plain struct: the derived reader of an internally tagged enum first copies every
    /// field into an intermediate tree, which at this crate's size-optimized profile was most of
    /// a reader's time per frame. Any other line, or a delta the plain struct cannot read, takes
    /// the derived path, so both give the same frame for every line the derived reader reads;
    /// the fast path only checks fields it does not know less strictly (it skips them unread: a
    /// lone surrogate or an out-of-range number there is not an error).
    pub fn parse(line: &[u8]) -> serde_json::Result<Frame> {
        // Is the first `"kind":"` key's value a delta's? The host writes `kind` after three
        // short fields, so this stops early. (A line whose first such key is not its
        // own kind is read by the derived reader: slower, never different.)
        const KIND: &[u8] = br#""kind":""#;
        let delta = line
            .windows(KIND.len())
            .position(|w| w == KIND)
            .is_some_and(|i| {
                let value = &line[i + KIND.len()..];
                value.starts_with(br#"text_delta""#) || value.starts_with(br#"thinking_delta""#)
            });
        if delta {
            if let Ok(DeltaLine {
                seq,
                session_id,
                ts,
                kind,
                turn_id,
                message_id,
                start_offset,
                text,
                complete,
            }) = serde_json::from_slice(line)
            {
                let body = match kind.as_str() {
                    "text_delta" => FrameBody::TextDelta {
                        turn_id,
                        message_id,
                        start_offset,
                        text,
                        complete,
                    },
                    "thinking_delta" => FrameBody::ThinkingDelta {
                        turn_id,
                        message_id,
                        start_offset,
                        text,
                        complete,
                    },
                    _ => return serde_json::from_slice(line),
                };
                return Ok(Frame {
                    seq,
                    session_id,
                    ts,
                    body,
                });
            }
        }
        serde_json::from_slice(line)
    }
}

/// A `text_delta` or `thinking_delta` line, flat (see [`Frame::parse`]).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeltaLine {
    #[serde(default)]
    seq: Option<u64>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    ts: u64,
    kind: String,
    turn_id: String,
    message_id: String,
    start_offset: u64,
    text: String,
    #[serde(default)]
    complete: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FrameBody {
    #[serde(rename_all = "camelCase")]
    TurnStarted {
        turn_id: String,
        run_id: String,
        origin: String,
        /// The prompt as shown in frames: text up to 64 KiB, attachments by name only (the
        /// whole prompt is in the transcript).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<MessageContent>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        content_truncated: bool,
    },
    /// A message added to the running turn (`turn.message.submit`), as it was taken in.
    #[serde(rename_all = "camelCase")]
    UserMessage {
        turn_id: String,
        message_id: String,
        content: MessageContent,
    },
    #[serde(rename_all = "camelCase")]
    TurnStatus {
        turn_id: String,
        run_id: String,
        status: TurnStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_retry: Option<ProviderRetry>,
    },
    #[serde(rename_all = "camelCase")]
    TextDelta {
        turn_id: String,
        message_id: String,
        start_offset: u64,
        text: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        complete: bool,
    },
    #[serde(rename_all = "camelCase")]
    ThinkingDelta {
        turn_id: String,
        message_id: String,
        start_offset: u64,
        text: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        complete: bool,
    },
    #[serde(rename_all = "camelCase")]
    ToolStart {
        turn_id: String,
        tool_call_id: String,
        tool_name: String,
        title: String,
        activity_kind: String,
        args: Value,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        args_truncated: bool,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        locations: Vec<Location>,
        /// A subagent's tool call: the `delegate` call it runs under.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_tool_call_id: Option<String>,
        /// The tool's name as clients show it (ACP `ToolCall.name`) when it is not `toolName`:
        /// an MCP tool's `<server>/<tool>`, a subagent's own tool as its agent named it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// The tool passed its permission gate and is running now.
    #[serde(rename_all = "camelCase")]
    ToolRunning {
        turn_id: String,
        tool_call_id: String,
        /// It can be cancelled alone (`turn.tool.cancel`): a command the host runs. Absent
        /// (false) from older hosts.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cancellable: bool,
    },
    #[serde(rename_all = "camelCase")]
    ToolOutputDelta {
        turn_id: String,
        tool_call_id: String,
        out_seq: u64,
        stream: String,
        chunk: String,
    },
    #[serde(rename_all = "camelCase")]
    ToolResult {
        turn_id: String,
        tool_call_id: String,
        status: ToolStatus,
        result: ToolResultContent,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        truncated: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ms: Option<u64>,
    },
    InteractionRequest {
        interaction: Interaction,
    },
    #[serde(rename_all = "camelCase")]
    InteractionClosed {
        interaction_id: String,
        status: String,
        outcome: InteractionOutcome,
    },
    #[serde(rename_all = "camelCase")]
    PlanUpdate {
        turn_id: String,
        entries: Vec<PlanEntry>,
    },
    /// The session's plan as it now stands (`plan.query`'s view), after a proposal, a
    /// revision, a decision or a rewind that changed it; `revision` 0: no plan any more.
    #[serde(rename_all = "camelCase")]
    PlanState {
        revision: u64,
        /// `proposed`, `approved`, `rejected` (`none` with revision 0).
        status: String,
        /// Empty when replayed from a decision: the entries are the revision's.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        entries: Vec<PlanEntry>,
    },
    #[serde(rename_all = "camelCase")]
    Usage {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn_id: Option<String>,
        /// The model `delta` was spent on, as the provider named it (`PromptResponse._meta.quota`
        /// splits a turn's usage by it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        delta: TokenUsage,
        totals: TokenUsage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<ContextUsage>,
        /// The session's cost so far, when prices are configured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<Cost>,
    },
    ConfigurationChanged {
        revision: u64,
        configuration: Configuration,
    },
    #[serde(rename_all = "camelCase")]
    SessionUpdated {
        revision: u64,
        name: Option<String>,
        last_used_at: u64,
        is_archived: bool,
    },
    #[serde(rename_all = "camelCase")]
    TranscriptAdvanced {
        through_message_seq: u64,
    },
    #[serde(rename_all = "camelCase")]
    ClientCall {
        invocation_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_call_id: Option<String>,
        service: String,
        /// `null` when `inputRef` (a large input: fetch it with `client.call.input`).
        input: Value,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        input_ref: bool,
    },
    #[serde(rename_all = "camelCase")]
    ClientCallCancelled {
        invocation_id: String,
    },
    #[serde(rename_all = "camelCase")]
    TurnTerminal {
        turn_id: String,
        run_id: String,
        outcome: TurnOutcome,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure_class: Option<FailureClass>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure_message: Option<String>,
        /// What went wrong in detail (an HTTP status, a provider's answer): for logs and
        /// error `data`, not for the person's eyes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure_details: Option<Value>,
    },
    /// Something the person is told that is not part of the conversation (a provider retry,
    /// an MCP server that did not start, a kept rule that decided a call, …); also a durable
    /// `notice` item of the transcript.
    #[serde(rename_all = "camelCase")]
    Notice {
        turn_id: String,
        notice: Notice,
    },
    /// The model's context is being compacted into a summary, or was (`/compact`, or by
    /// itself when a turn's input neared the model's context window). A completed one is also
    /// the `summary` item of the transcript.
    #[serde(rename_all = "camelCase")]
    Compaction {
        turn_id: String,
        compaction: Compaction,
    },
    /// The session's goal changed state (armed, a turn ran, waiting, ended).
    GoalUpdated {
        goal: Goal,
    },
    SessionRemoved {},
    /// A frame over the size limit that the host could not emit (a bug in a producer): the
    /// reader re-reads the durable state instead.
    #[serde(rename_all = "camelCase")]
    FrameOmitted {
        omitted_kind: String,
        bytes: u64,
    },
    #[serde(rename_all = "camelCase")]
    Heartbeat {
        head_seq: u64,
    },
    #[serde(rename_all = "camelCase")]
    StreamEnd {
        reason: StreamEndReason,
        last_seq: u64,
    },
    /// A kind this build does not know (a newer host): skipped by readers.
    #[serde(other)]
    Unknown,
}

/// A notice: the `notice` frame's and the `notice` transcript item's content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notice {
    /// Unique within the session: the message id of the fallback text.
    pub message_id: String,
    /// Items written before notices had a severity are warnings.
    #[serde(default)]
    pub severity: NoticeSeverity,
    /// One sentence that stands alone (empty only in items written before notices had one).
    #[serde(default)]
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// What a client that shows no notices is shown instead, live and on replay alike.
    #[serde(default)]
    pub otherwise: NoticeFallback,
    /// The fallback's text (`message` and `thought`), exactly as such clients see it.
    #[serde(default)]
    pub text: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum NoticeSeverity {
    Info,
    #[default]
    Warning,
    Error,
}
wire_names!(NoticeSeverity, "notice severity", { Info = "info", Warning = "warning", Error = "error" });

/// How a notice reaches a client that shows no notices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum NoticeFallback {
    /// As agent text (an MCP server that did not start: the person must see it).
    #[default]
    Message,
    /// As a thought (a provider retry: shown, but not part of the reply).
    Thought,
    /// Not at all (what such clients were never told: a rule that decided a call).
    Nothing,
}
wire_names!(NoticeFallback, "notice fallback", { Message = "message", Thought = "thought", Nothing = "nothing" });

/// One compaction's state: the `compaction` frame's content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Compaction {
    /// Unique within the session.
    pub compaction_id: String,
    pub status: CompactionStatus,
    pub trigger: CompactionTrigger,
    /// The summary (`completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Why it failed, one sentence (`failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What a client that shows no compactions is shown when it completed, live and on
    /// replay alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum CompactionStatus {
    InProgress,
    Completed,
    Failed,
    Cancelled,
}
wire_names!(CompactionStatus, "compaction status", {
    InProgress = "in_progress", Completed = "completed", Failed = "failed", Cancelled = "cancelled"
});

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum CompactionTrigger {
    /// `/compact`.
    #[default]
    Manual,
    /// The turn's input neared the model's context window.
    Automatic,
}
wire_names!(CompactionTrigger, "compaction trigger", { Manual = "manual", Automatic = "automatic" });

/// Text a client is shown in place of an update it does not support.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fallback {
    pub message_id: String,
    /// `message` (agent text) or `thought`.
    pub otherwise: NoticeFallback,
    pub text: String,
}

/// The model endpoint failed (429, 5xx, unreachable) and the call is retried.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderRetry {
    /// The attempt that failed (1 = the first call).
    pub attempt: u64,
    /// How long the host waits before the next one.
    pub delay_ms: u64,
    /// What went wrong, in a few words ("HTTP 503").
    pub reason: String,
}
