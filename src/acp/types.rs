//! The ACP v1 types this agent writes, as plain serde structs (the field names are the
//! schema's, `../shared/acp/schema-v1/schema.json`), and the one reply it reads back typed (a
//! permission answer). Only what this agent sends is here; the integration tests validate every
//! line against the official schema as a cross-check.
//!
//! `_meta` stays free-form `Value`: it is ACP's extension point, and what goes in it is an
//! agreement with particular clients (Zed's `terminal_*`, this agent's `maka`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The value of `params.update` in a `session/update` notification.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "sessionUpdate", rename_all = "snake_case")]
pub enum SessionUpdate {
    UserMessageChunk(Chunk),
    AgentMessageChunk(Chunk),
    AgentThoughtChunk(Chunk),
    ToolCall(ToolCall),
    ToolCallUpdate(ToolCallUpdate),
    Plan {
        entries: Vec<PlanEntry>,
    },
    /// The session's plan by id (unstable; only to clients that advertise
    /// `clientCapabilities.plan`), with its revision and approval status in `_meta.maka`.
    PlanUpdate {
        plan: PlanItems,
    },
    #[serde(rename_all = "camelCase")]
    PlanRemoved {
        plan_id: String,
    },
    #[serde(rename_all = "camelCase")]
    AvailableCommandsUpdate {
        available_commands: Vec<AvailableCommand>,
    },
    #[serde(rename_all = "camelCase")]
    CurrentModeUpdate {
        current_mode_id: String,
    },
    #[serde(rename_all = "camelCase")]
    ConfigOptionUpdate {
        config_options: Vec<ConfigOption>,
    },
    #[serde(rename_all = "camelCase")]
    SessionInfoUpdate {
        /// Omitted when unknown (never null: some pickers crash on null titles).
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        updated_at: Option<String>,
        /// The goal extension's snapshot (`{"goal": …}`), where other agents put it.
        #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
        meta: Option<Value>,
    },
    /// Live information for the person, not session history (only to clients that advertise
    /// `clientCapabilities.session.notices`).
    Notice {
        severity: NoticeSeverity,
        title: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    /// A context compaction's state (only to clients that advertise
    /// `clientCapabilities.session.compaction`; the status values are the host's).
    #[serde(rename_all = "camelCase")]
    CompactionUpdate {
        compaction_id: String,
        status: crate::host_api::wire::CompactionStatus,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A piece of a compaction's summary (to the same clients).
    #[serde(rename_all = "camelCase")]
    CompactionSummaryChunk {
        compaction_id: String,
        content: ContentBlock,
    },
    UsageUpdate {
        used: u64,
        size: u64,
        /// The session's cost so far (with prices configured).
        #[serde(skip_serializing_if = "Option::is_none")]
        cost: Option<crate::host_api::wire::Cost>,
    },
    /// A delegation's child session, announced on (and patched through) its parent session
    /// (unstable; only to clients that advertise `clientCapabilities.subagents`).
    SubagentUpdate(Subagent),
    /// A message between a parent session and a child: the task sent, the answer returned
    /// (to the same clients).
    SessionMessage(SessionMessage),
    /// A piece of such a message, as it streams.
    #[serde(rename_all = "camelCase")]
    SessionMessageChunk {
        message_id: String,
        content: ContentBlock,
    },
    /// Not a kind of its own: `update` belongs to the child session `session_id`, and the
    /// `session/update` carrying it names that session ([`crate::acp::session::Shared::update`]).
    #[serde(skip)]
    InChild {
        session_id: String,
        update: Box<SessionUpdate>,
    },
}

/// `subagent_update`: the child's id, its title and role, its work state.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Subagent {
    pub session_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<ChildState>,
}

/// A child's work state: `running`, `requires_action`, or `idle` with its `stopReason` (and,
/// for `error`, the failure as a JSON-RPC error object).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildState {
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ChildError>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChildError {
    pub code: i32,
    pub message: String,
}

/// `session_message`: who sent it to whom, and (when known whole) its content.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionMessage {
    pub message_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recipient_session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ContentBlock>>,
}

impl SessionUpdate {
    /// This update, shown in child session `session_id` (`None`: in the session itself).
    pub fn in_session(self, session_id: Option<&str>) -> SessionUpdate {
        match session_id {
            Some(id) => SessionUpdate::InChild {
                session_id: id.to_string(),
                update: Box::new(self),
            },
            None => self,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeSeverity {
    Info,
    Warning,
    Error,
}

/// One piece of a message (`user_message_chunk`, `agent_message_chunk`, `agent_thought_chunk`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Chunk {
    pub message_id: String,
    pub content: ContentBlock,
    /// `{"maka": {"turnId"}}` on a user message: the turn it started.
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

impl Chunk {
    pub fn text(message_id: impl Into<String>, text: impl Into<String>) -> Chunk {
        Chunk {
            message_id: message_id.into(),
            content: ContentBlock::Text { text: text.into() },
            meta: None,
        }
    }
}

/// The content blocks this agent writes (it reads more: `prompt.rs`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text { text: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    Read,
    Edit,
    Search,
    Execute,
    Fetch,
    SwitchMode,
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub tool_call_id: String,
    /// The tool's programmatic name (`write_file`, `<server>/<tool>` for an MCP tool,
    /// `delegate`; a subagent's own call: the name its agent gave it, if any).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub title: String,
    pub kind: ToolKind,
    pub status: ToolCallStatus,
    pub raw_input: Value,
    pub locations: Vec<ToolCallLocation>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ToolCallContent>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// Only what changed; absent fields keep their value on the client.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallUpdate {
    pub tool_call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ToolKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ToolCallStatus>,
    /// Replaces the whole list on the client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ToolCallContent>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locations: Option<Vec<ToolCallLocation>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<Value>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

impl ToolCallUpdate {
    pub fn new(tool_call_id: impl Into<String>, status: ToolCallStatus) -> ToolCallUpdate {
        ToolCallUpdate {
            tool_call_id: tool_call_id.into(),
            status: Some(status),
            ..ToolCallUpdate::default()
        }
    }

    pub fn with_content(mut self, content: Vec<ToolCallContent>) -> ToolCallUpdate {
        self.content = Some(content);
        self
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolCallContent {
    Content {
        content: ContentBlock,
    },
    #[serde(rename_all = "camelCase")]
    Diff {
        path: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        old_text: Option<String>,
        new_text: String,
    },
    #[serde(rename_all = "camelCase")]
    Terminal {
        terminal_id: String,
    },
    /// The child session a tool call started (a delegation, to a client that shows
    /// subagents).
    #[serde(rename_all = "camelCase")]
    Session {
        session_id: String,
    },
}

impl ToolCallContent {
    pub fn text(text: impl Into<String>) -> ToolCallContent {
        ToolCallContent::Content {
            content: ContentBlock::Text { text: text.into() },
        }
    }

    pub fn terminal(id: impl Into<String>) -> ToolCallContent {
        ToolCallContent::Terminal {
            terminal_id: id.into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolCallLocation {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanPriority {
    High,
    Medium,
    Low,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    Pending,
    InProgress,
    Completed,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanEntry {
    pub content: String,
    pub priority: PlanPriority,
    pub status: PlanStatus,
}

/// `plan_update`'s content: a plan as structured entries (`type: "items"`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename = "items", rename_all = "camelCase")]
pub struct PlanItems {
    pub plan_id: String,
    pub entries: Vec<PlanEntry>,
    #[serde(rename = "_meta")]
    pub meta: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AvailableCommand {
    pub name: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<CommandInput>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CommandInput {
    pub hint: String,
}

/// A session configuration option (`select` or `boolean`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOption {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(flatten)]
    pub kind: ConfigOptionKind,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ConfigOptionKind {
    #[serde(rename_all = "camelCase")]
    Select {
        current_value: String,
        options: SelectOptions,
    },
    #[serde(rename_all = "camelCase")]
    Boolean { current_value: bool },
}

/// A select's values: flat, or grouped (by provider, when there is more than one).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SelectOptions {
    Flat(Vec<SelectOption>),
    Grouped(Vec<SelectGroup>),
}

impl SelectOptions {
    /// Every choice, groups flattened.
    pub fn choices(&self) -> Vec<&SelectOption> {
        match self {
            SelectOptions::Flat(o) => o.iter().collect(),
            SelectOptions::Grouped(g) => g.iter().flat_map(|g| g.options.iter()).collect(),
        }
    }

    /// Every value id, groups flattened.
    pub fn values(&self) -> Vec<&str> {
        self.choices()
            .into_iter()
            .map(|o| o.value.as_str())
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SelectGroup {
    pub group: String,
    pub name: String,
    pub options: Vec<SelectOption>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SelectOption {
    pub value: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// The legacy mode view (`modes` in new/load/resume results).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionModeState {
    pub current_mode_id: String,
    pub available_modes: Vec<SessionMode>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionMode {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Why a prompt turn ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptResponse {
    pub stop_reason: StopReason,
    /// The turn's token usage (ACP unstable, `unstable_end_turn_token_usage`): only to a
    /// client that opted in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

impl PromptResponse {
    pub fn new(stop_reason: StopReason) -> PromptResponse {
        PromptResponse {
            stop_reason,
            usage: None,
            meta: None,
        }
    }
}

/// The result of `session/new`, `session/load` and `session/resume`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSetup {
    /// Only in `session/new`'s result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_options: Option<Vec<ConfigOption>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modes: Option<SessionModeState>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub session_id: String,
    pub cwd: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub updated_at: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub additional_directories: Vec<String>,
    /// `{"maka": {"source": {sessionId, throughTurnId}}}` for a fork or branch.
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListSessionsResponse {
    pub sessions: Vec<SessionInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOptionsResponse {
    pub config_options: Vec<ConfigOption>,
}

/// `session/request_permission` params.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPermission {
    pub session_id: String,
    pub tool_call: ToolCallUpdate,
    pub options: Vec<PermissionOption>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOption {
    pub option_id: String,
    pub name: String,
    pub kind: PermissionOptionKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionOptionKind {
    AllowOnce,
    /// A remembered choice: for this session or, stored by the host, for the workspace.
    AllowAlways,
    RejectOnce,
    RejectAlways,
}

/// The client's answer to `session/request_permission` (`RequestPermissionResponse`): the one
/// ACP type this agent reads back. Anything else in it is ignored.
#[derive(Debug, Deserialize)]
pub struct PermissionReply {
    pub outcome: PermissionOutcome,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum PermissionOutcome {
    Selected {
        #[serde(rename = "optionId")]
        option_id: String,
    },
    Cancelled,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResponse {
    pub protocol_version: u16,
    pub agent_capabilities: AgentCapabilities,
    pub auth_methods: Vec<AuthMethod>,
    pub agent_info: Implementation,
    /// The extensions other agents share, where they advertise them (`steering`, `goal`).
    #[serde(rename = "_meta")]
    pub meta: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    pub load_session: bool,
    pub prompt_capabilities: PromptCapabilities,
    pub mcp_capabilities: McpCapabilities,
    pub session_capabilities: SessionCapabilities,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthCapabilities>,
    /// This agent's extensions (free-form by ACP's rules).
    #[serde(rename = "_meta")]
    pub meta: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptCapabilities {
    pub image: bool,
    pub audio: bool,
    pub embedded_context: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct McpCapabilities {
    pub http: bool,
    pub sse: bool,
}

/// Each present capability is an empty object (`{}`): supported.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCapabilities {
    pub list: Empty,
    /// `session/fork` (ACP unstable).
    pub fork: Empty,
    pub resume: Empty,
    pub close: Empty,
    pub delete: Empty,
    pub additional_directories: Empty,
    /// `systemPrompt` on new/load/resume/fork (stable since ACP schema 1.20.0), `append` and
    /// `override`: `{"mode": {"override": {}}}`.
    pub system_prompt: Value,
    /// `session/options` and initial `configOptions` on new/load/resume/fork (ACP unstable).
    pub options: Empty,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuthCapabilities {
    pub logout: Empty,
}

/// An authentication method: plain (`env`) or run in a terminal (`login`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuthMethod {
    pub id: String,
    pub name: String,
    pub description: String,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Implementation {
    pub name: String,
    pub title: String,
    pub version: String,
}

/// `_maka/turn_state`: a turn this connection did not start ended (another client's, or one
/// followed after a load).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnStateNotification {
    pub session_id: String,
    pub turn_id: String,
    pub outcome: crate::host_api::wire::TurnOutcome,
    pub reason: String,
}

/// `_maka/turn_state` for a turn a host crash interrupted, sent after a `session/load` or
/// `session/resume` response: `disposition` `ready` means `_maka/turn/resume` can continue it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptedTurnNotification {
    pub session_id: String,
    pub turn_id: String,
    /// Always `interrupted`.
    pub state: &'static str,
    pub disposition: &'static str,
}

/// `{}`: the result of methods that return nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Empty {}

/// A value as the JSON it serializes to (every type here serializes infallibly; `Null` is
/// never reached in practice but keeps this total).
pub fn to_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}
