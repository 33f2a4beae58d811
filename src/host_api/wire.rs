//! Runtime Host protocol v1 wire types, shared by the reference host and the adapter's client.
//! `docs/runtime-host-protocol.md` is the normative description; field names here are the
//! JSON names (camelCase), unions are tagged with `kind`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const PROTOCOL_VERSION: u32 = 1;

/// Every error a host operation can return. `docs/runtime-host-protocol.md` lists which
/// operation returns which.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidRequest,
    Unauthorized,
    NotFound,
    OperationUnavailable,
    PayloadTooLarge,
    SessionArchived,
    SessionBusy,
    OperationConflict,
    AlreadyResolved,
    IncompatibleProtocol,
    ResyncRequired,
    CapabilityUnavailable,
    CapacityExceeded,
    PersistenceFailed,
    InternalFailure,
    HostNotReady,
    HostDraining,
    /// Anything a newer host sends that this build does not know.
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    pub fn http_status(self) -> u16 {
        use ErrorCode::*;
        match self {
            InvalidRequest => 400,
            Unauthorized => 401,
            NotFound | OperationUnavailable => 404,
            PayloadTooLarge => 413,
            SessionArchived | SessionBusy | OperationConflict | AlreadyResolved
            | IncompatibleProtocol => 409,
            ResyncRequired => 410,
            CapabilityUnavailable => 422,
            CapacityExceeded => 429,
            PersistenceFailed | InternalFailure | Unknown => 500,
            HostNotReady | HostDraining => 503,
        }
    }

    pub fn retryable(self) -> bool {
        use ErrorCode::*;
        matches!(
            self,
            SessionBusy | ResyncRequired | CapacityExceeded | HostNotReady
        )
    }

    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            InvalidRequest => "invalid_request",
            Unauthorized => "unauthorized",
            NotFound => "not_found",
            OperationUnavailable => "operation_unavailable",
            PayloadTooLarge => "payload_too_large",
            SessionArchived => "session_archived",
            SessionBusy => "session_busy",
            OperationConflict => "operation_conflict",
            AlreadyResolved => "already_resolved",
            IncompatibleProtocol => "incompatible_protocol",
            ResyncRequired => "resync_required",
            CapabilityUnavailable => "capability_unavailable",
            CapacityExceeded => "capacity_exceeded",
            PersistenceFailed => "persistence_failed",
            InternalFailure => "internal_failure",
            HostNotReady => "host_not_ready",
            HostDraining => "host_draining",
            Unknown => "unknown",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostError {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default)]
    pub retryable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl HostError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> HostError {
        let mut message = message.into();
        if message.len() > 1024 {
            let mut cut = 1024;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        HostError {
            code,
            message,
            retryable: code.retryable(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> HostError {
        self.details = Some(details);
        self
    }

    pub fn invalid(message: impl Into<String>) -> HostError {
        HostError::new(ErrorCode::InvalidRequest, message)
    }

    pub fn not_found(what: impl std::fmt::Display) -> HostError {
        HostError::new(ErrorCode::NotFound, format!("{what} not found"))
    }

    pub fn internal(message: impl Into<String>) -> HostError {
        HostError::new(ErrorCode::InternalFailure, message)
    }
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

/// The response envelope: `{"ok":true,"result":…}` or `{"ok":false,"error":…}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<HostError>,
}

// ---------------------------------------------------------------------------------------------
// Sessions

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelTarget {
    Default,
    Explicit {
        #[serde(rename = "connectionSlug")]
        connection_slug: String,
        model: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// Read-only tools only; writes and commands are refused.
    Explore,
    /// Writes and commands need a `permission` interaction.
    Ask,
    /// No prompts (paths outside the roots still need a `sandbox_boundary` approval).
    Bypass,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollaborationMode {
    Agent,
    Plan,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Configuration {
    pub model_target: ModelTarget,
    /// `null` = the model's default.
    pub thinking_level: Option<String>,
    pub permission_mode: PermissionMode,
    pub collaboration_mode: CollaborationMode,
}

impl Default for Configuration {
    fn default() -> Self {
        Configuration {
            model_target: ModelTarget::Default,
            thinking_level: None,
            permission_mode: PermissionMode::Ask,
            collaboration_mode: CollaborationMode::Agent,
        }
    }
}

/// A patch of [`Configuration`]: absent fields are unchanged.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigurationPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_target: Option<ModelTarget>,
    /// `Some(None)` sets the level back to the model default.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    pub thinking_level: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collaboration_mode: Option<CollaborationMode>,
}

mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Option<String>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(inner) => inner.serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<String>>, D::Error> {
        Option::<String>::deserialize(d).map(Some)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workspace {
    HostPath { path: String },
}

impl Workspace {
    pub fn path(&self) -> &str {
        match self {
            Workspace::HostPath { path } => path,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpServerConfig {
    pub name: String,
    #[serde(flatten)]
    pub transport: Value,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Idle,
    Running,
    WaitingForUser,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub id: String,
    /// CAS token for metadata, configuration and lifecycle; starts at 1.
    pub revision: u64,
    pub workspace: Workspace,
    #[serde(default)]
    pub additional_directories: Vec<String>,
    pub name: Option<String>,
    #[serde(default)]
    pub labels: Vec<String>,
    pub is_archived: bool,
    pub created_at: u64,
    pub last_used_at: u64,
    pub configuration: Configuration,
    pub status: SessionStatus,
    pub active_turn_id: Option<String>,
    #[serde(default)]
    pub mcp_servers: Vec<Value>,
    /// Turns admitted so far: a session with none has no conversation (not listed by ACP).
    #[serde(default)]
    pub turn_count: u64,
}

// ---------------------------------------------------------------------------------------------
// Messages, turns, interactions

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageContent {
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

/// Inline prompt attachment (bounded by the request body limit).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    /// `image`, `text` or `blob`.
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Text content for `text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Base64 data for `image` and `blob`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_base64: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnOutcome {
    Completed,
    Cancelled,
    Failed,
    MaxTokens,
    Refused,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    Running,
    WaitingForUser,
    Completed,
    Cancelled,
    Failed,
    MaxTokens,
    Refused,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSnapshot {
    pub session_id: String,
    pub turn_id: String,
    pub run_id: String,
    /// `prompt` or `resume`.
    pub origin: String,
    pub status: TurnStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_details: Option<Value>,
    pub started_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuestionOption {
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    pub question: String,
    #[serde(default)]
    pub options: Vec<QuestionOption>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InteractionRequest {
    #[serde(rename_all = "camelCase")]
    Permission {
        tool_call_id: String,
        tool_name: String,
        title: String,
        /// `command`, `edit`, `write`, `tool`.
        review: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        args: Option<Value>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        locations: Vec<Location>,
        /// A preview of the change for edits and writes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<FileDiff>,
        remember_for_turn_allowed: bool,
    },
    #[serde(rename_all = "camelCase")]
    Question {
        tool_call_id: String,
        questions: Vec<Question>,
    },
    #[serde(rename_all = "camelCase")]
    SandboxBoundary {
        tool_call_id: String,
        paths: Vec<BoundaryPath>,
        justification: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundaryPath {
    pub path: String,
    /// `read` or `write`.
    pub access: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InteractionAnswer {
    #[serde(rename_all = "camelCase")]
    Permission {
        /// `allow` or `deny`.
        decision: String,
        #[serde(default)]
        remember_for_turn: bool,
    },
    Question {
        answers: Vec<Option<String>>,
        /// The client cannot show questions at all: nothing was chosen, the model must ask in
        /// its reply instead.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unsupported: bool,
    },
    SandboxBoundary {
        decision: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InteractionOutcome {
    /// The answer that resolved it.
    Answer { answer: InteractionAnswer },
    /// Closed without an answer: `turn_stopped`, `turn_terminal` or `host_restarted`.
    Closure { reason: String },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interaction {
    pub interaction_id: String,
    pub session_id: String,
    pub turn_id: String,
    /// `pending`, `answered` or `closed`.
    pub status: String,
    pub request: InteractionRequest,
    pub outcome: Option<InteractionOutcome>,
}

// ---------------------------------------------------------------------------------------------
// Tools

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Location {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileDiff {
    pub path: String,
    /// `None` for a new file.
    pub old_text: Option<String>,
    pub new_text: String,
    pub unified_diff: String,
}

/// What a tool returned, bounded for live frames (`truncated` says when text was cut).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolResultContent {
    Text {
        text: String,
    },
    FileEdit {
        #[serde(flatten)]
        diff: FileDiff,
    },
    #[serde(rename_all = "camelCase")]
    FileWrite {
        path: String,
        bytes: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<FileDiff>,
    },
    #[serde(rename_all = "camelCase")]
    Terminal {
        command: String,
        cwd: String,
        exit_code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<String>,
        timed_out: bool,
        output: String,
        output_truncated: bool,
        /// Set when the command ran in the editor's terminal (`terminal/create`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        terminal_id: Option<String>,
    },
    Json {
        value: Value,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanEntry {
    pub content: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: String,
    /// `high`, `medium` or `low`.
    pub priority: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub reasoning_tokens: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextUsage {
    pub used_tokens: u64,
    pub window_tokens: u64,
}

// ---------------------------------------------------------------------------------------------
// Event stream

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
    #[serde(rename_all = "camelCase")]
    TurnStatus {
        turn_id: String,
        run_id: String,
        status: TurnStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_retry: Option<Value>,
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
    },
    /// The tool passed its permission gate and is running now.
    #[serde(rename_all = "camelCase")]
    ToolRunning {
        turn_id: String,
        tool_call_id: String,
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
        /// `completed`, `failed` or `cancelled`.
        status: String,
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
    #[serde(rename_all = "camelCase")]
    Usage {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn_id: Option<String>,
        delta: TokenUsage,
        totals: TokenUsage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<ContextUsage>,
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
        failure_class: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure_message: Option<String>,
        /// What went wrong in detail (an HTTP status, a provider's answer): for logs and
        /// error `data`, not for the person's eyes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure_details: Option<Value>,
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
        reason: String,
        last_seq: u64,
    },
    /// A kind this build does not know (a newer host): skipped by readers.
    #[serde(other)]
    Unknown,
}

// ---------------------------------------------------------------------------------------------
// Transcript

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptItem {
    pub message_seq: u64,
    pub ts: u64,
    pub turn_id: String,
    #[serde(flatten)]
    pub body: TranscriptBody,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // plain data, written and read once per item
pub enum TranscriptBody {
    #[serde(rename_all = "camelCase")]
    User {
        message_id: String,
        content: MessageContent,
    },
    #[serde(rename_all = "camelCase")]
    Assistant {
        message_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        thinking: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCall {
        /// Minted by the host, unique within the session (what clients see).
        tool_call_id: String,
        tool_name: String,
        title: String,
        activity_kind: String,
        args: Value,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        locations: Vec<Location>,
        /// The id the model gave the call: only used to show the model its own history.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_call_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolResult {
        tool_call_id: String,
        status: String,
        result: ToolResultContent,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        truncated: bool,
        /// The tool passed its gate and ran (live: a `tool_running` frame before the result).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        ran: bool,
    },
    /// Something the person is told that is not part of the model's conversation (an MCP
    /// server that did not start): replayed as agent text, never sent to the model.
    #[serde(rename_all = "camelCase")]
    Notice {
        message_id: String,
        text: String,
    },
    Interaction {
        interaction: Interaction,
    },
    #[serde(rename_all = "camelCase")]
    Plan {
        entries: Vec<PlanEntry>,
    },
    /// Turn lifecycle: `running` when admitted, then one terminal record.
    #[serde(rename_all = "camelCase")]
    TurnState {
        run_id: String,
        status: TurnStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure_class: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure_message: Option<String>,
        /// For a resumed run: the interrupted run it continues.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resumed_from_run_id: Option<String>,
    },
    /// A summary replacing older context (`/compact`).
    Summary {
        text: String,
    },
    /// An item of a kind this build does not know (written by a newer host): kept in the file
    /// as it is, skipped by replay and by the model's context.
    #[serde(other)]
    Unknown,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// IDs are `^[A-Za-z0-9_-]{1,128}$`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frames_round_trip_and_unknown_kinds_are_tolerated() {
        let f = Frame {
            seq: Some(3),
            session_id: Some("s".into()),
            ts: 1,
            body: FrameBody::TextDelta {
                turn_id: "t".into(),
                message_id: "m".into(),
                start_offset: 0,
                text: "hi".into(),
                complete: false,
            },
        };
        let line = serde_json::to_string(&f).unwrap();
        assert_eq!(
            line,
            r#"{"seq":3,"sessionId":"s","ts":1,"kind":"text_delta","turnId":"t","messageId":"m","startOffset":0,"text":"hi"}"#
        );
        assert_eq!(serde_json::from_str::<Frame>(&line).unwrap(), f);
        let future: Frame =
            serde_json::from_value(json!({"seq": 4, "ts": 0, "kind": "hologram", "x": 1})).unwrap();
        assert_eq!(future.body, FrameBody::Unknown);
    }

    #[test]
    fn configuration_patch_distinguishes_null_from_absent() {
        let p: ConfigurationPatch = serde_json::from_value(json!({"thinkingLevel": null})).unwrap();
        assert_eq!(p.thinking_level, Some(None));
        let p: ConfigurationPatch = serde_json::from_value(json!({})).unwrap();
        assert_eq!(p.thinking_level, None);
        assert!(serde_json::from_value::<ConfigurationPatch>(json!({"bogus": 1})).is_err());
    }
}
