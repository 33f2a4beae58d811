//! The ACP v1 types this agent writes, as plain serde structs (the field names are the
//! schema's, `tests/schema/schema.json`, schema 1.20.0), and the one reply the adapter reads
//! back typed (a permission answer). The integration tests validate every line written against
//! the official schema as a cross-check.
//!
//! The same types read what other agents send the host (a delegation's `session/update`s, its
//! permission requests, its `fs/*` and `terminal/*` calls; what only the host reads is in
//! [`from_agents`]), and every `session/update` kind of the schema but `subagent_update`. They
//! read as the schema allows (`schema.json`'s `x-deserialize-default-on-error` and
//! `x-deserialize-skip-invalid-items`): unknown fields are ignored, an optional field that does
//! not read is absent, a list item that does not read is left out, an unknown tool kind is
//! `other`, an unknown content block is [`ContentBlock::Other`], an unknown update kind is
//! [`from_agents::AgentUpdate::Unknown`]; a required field missing or of the wrong type is an error.
//!
//! `_meta` stays free-form `Value`: it is ACP's extension point, and what goes in it is an
//! agreement with particular clients (Zed's `terminal_*`, this agent's `maka`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The value of `params.update` in a `session/update` notification.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "sessionUpdate", rename_all = "snake_case")]
pub enum SessionUpdate {
    UserMessageChunk(Chunk),
    AgentMessageChunk(Chunk),
    AgentThoughtChunk(Chunk),
    /// (Read as [`from_agents::AgentUpdate::ToolCall`], with the fields a new call may carry.)
    #[serde(skip_deserializing)]
    ToolCall(ToolCall),
    ToolCallUpdate(ToolCallUpdate),
    Plan {
        #[serde(deserialize_with = "valid_items")]
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
        #[serde(default, deserialize_with = "default_on_error")]
        title: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[serde(default, deserialize_with = "default_on_error")]
        updated_at: Option<String>,
        /// The goal extension's snapshot (`{"goal": …}`), where other agents put it.
        #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
        #[serde(default, deserialize_with = "default_on_error")]
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
    /// (unstable; only to clients that advertise `clientCapabilities.subagents`). Written
    /// only: read from another agent it is an [`from_agents::AgentUpdate::Unknown`].
    #[serde(skip_deserializing)]
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
    /// `session/update` carrying it names that session ([`crate::acp::connection::Shared::update`]).
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChildError {
    pub code: i32,
    pub message: String,
}

/// `session_message`: who sent it to whom, and (when known whole) its content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeSeverity {
    Info,
    Warning,
    Error,
}

/// One piece of a message (`user_message_chunk`, `agent_message_chunk`, `agent_thought_chunk`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Chunk {
    /// Optional in ACP: read as empty when another agent sends none.
    #[serde(default, deserialize_with = "default_on_error")]
    pub message_id: String,
    pub content: ContentBlock,
    /// `{"maka": {"turnId"}}` on a user message: the turn it started.
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "default_on_error")]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// Read from another agent only: a block of another type (image, audio, resource, or one
    /// newer than this schema), kept by kind only. Never written (serializing it fails).
    #[serde(other, skip_serializing)]
    Other,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    Read,
    Edit,
    /// ACP's, read from other agents (this agent writes `edit` for these).
    Delete,
    Move,
    Search,
    Execute,
    /// ACP's, read from other agents.
    Think,
    Fetch,
    SwitchMode,
    /// ACP's default: also what an unknown kind from another agent reads as.
    #[default]
    #[serde(other)]
    Other,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    /// ACP's default (a `tool_call` without a status).
    #[default]
    Pending,
    InProgress,
    Completed,
    Failed,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub tool_call_id: String,
    /// The tool's programmatic name (`write_file`, `<server>/<tool>` for an MCP tool,
    /// `delegate`; a subagent's own call: the name its agent gave it, if any).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "default_on_error")]
    pub name: Option<String>,
    pub title: String,
    #[serde(default, deserialize_with = "default_on_error")]
    pub kind: ToolKind,
    #[serde(default, deserialize_with = "default_on_error")]
    pub status: ToolCallStatus,
    #[serde(default)]
    pub raw_input: Value,
    #[serde(default, deserialize_with = "valid_items")]
    pub locations: Vec<ToolCallLocation>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(default, deserialize_with = "valid_items")]
    pub content: Vec<ToolCallContent>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "default_on_error")]
    pub meta: Option<Value>,
}

/// Only what changed; absent fields keep their value on the client.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallUpdate {
    pub tool_call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "default_on_error")]
    pub title: Option<String>,
    /// The tool's programmatic name (ACP's `ToolCallUpdate.name`; this agent never updates
    /// it, it reads it from other agents).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "default_on_error")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "default_on_error")]
    pub kind: Option<ToolKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "default_on_error")]
    pub status: Option<ToolCallStatus>,
    /// Replaces the whole list on the client.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "valid_items_if_any")]
    pub content: Option<Vec<ToolCallContent>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "valid_items_if_any")]
    pub locations: Option<Vec<ToolCallLocation>>,
    /// (`null` reads as absent.)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    /// (`null` reads as absent.)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<Value>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "default_on_error")]
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolCallContent {
    Content {
        content: ContentBlock,
    },
    #[serde(rename_all = "camelCase")]
    Diff {
        path: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[serde(default, deserialize_with = "default_on_error")]
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallLocation {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "default_on_error")]
    pub line: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanPriority {
    High,
    Medium,
    Low,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    Pending,
    InProgress,
    Completed,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanEntry {
    pub content: String,
    pub priority: PlanPriority,
    pub status: PlanStatus,
}

/// `plan_update`'s content: a plan as structured entries (`type: "items"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "items", rename_all = "camelCase")]
pub struct PlanItems {
    pub plan_id: String,
    pub entries: Vec<PlanEntry>,
    #[serde(rename = "_meta")]
    pub meta: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AvailableCommand {
    pub name: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<CommandInput>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandInput {
    pub hint: String,
}

/// A session configuration option (`select` or `boolean`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SelectGroup {
    pub group: String,
    pub name: String,
    pub options: Vec<SelectOption>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SelectOption {
    pub value: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// The legacy mode view (`modes` in new/load/resume results).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionModeState {
    pub current_mode_id: String,
    pub available_modes: Vec<SessionMode>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionMode {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Why a prompt turn ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptResponse {
    pub stop_reason: StopReason,
    /// The turn's token usage (ACP unstable, `unstable_end_turn_token_usage`): only to a
    /// client that opted in.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "default_on_error")]
    pub usage: Option<Value>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "default_on_error")]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSetup {
    /// Only in `session/new`'s result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "valid_items_if_any")]
    pub config_options: Option<Vec<ConfigOption>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(default, deserialize_with = "default_on_error")]
    pub modes: Option<SessionModeState>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListSessionsResponse {
    pub sessions: Vec<SessionInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOptionsResponse {
    pub config_options: Vec<ConfigOption>,
}

/// `session/request_permission` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPermission {
    pub session_id: String,
    pub tool_call: ToolCallUpdate,
    /// (Read from another agent: an option that does not read — a kind newer than this
    /// schema — is left out, so it is never chosen.)
    #[serde(deserialize_with = "valid_items")]
    pub options: Vec<PermissionOption>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOption {
    pub option_id: String,
    pub name: String,
    pub kind: PermissionOptionKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct PermissionReply {
    pub outcome: PermissionOutcome,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuthMethod {
    pub id: String,
    pub name: String,
    pub description: String,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Implementation {
    pub name: String,
    pub title: String,
    pub version: String,
}

/// `_maka/turn_state`: a turn this connection did not start ended (another client's, or one
/// followed after a load).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Empty {}

// ---- Reading other agents ----

/// What only the host reads (feature `host`), from the agents it delegates to.
pub mod from_agents {
    // The adapter alone (no `host` feature) reads none of these.
    #![allow(dead_code)]
    use super::*;

    /// Reads `T` from `v` only when `v` is a JSON object. serde's derived readers also take a
    /// struct from an array, field by position, which no ACP message (nor any input of the host's)
    /// means: `rawInput: ["rm -rf ~"]` is not a command.
    pub(crate) fn read_object<'de, T: Deserialize<'de>>(
        v: &'de Value,
    ) -> Result<T, serde_json::Error> {
        if !v.is_object() {
            return Err(<serde_json::Error as serde::de::Error>::custom(format!(
                "expected an object, found {}",
                crate::jsonrpc::message::json_type(v)
            )));
        }
        T::deserialize(v)
    }

    /// `params.update` of a `session/update` another agent sends the host: the kinds it reads,
    /// typed; any other by name. A known kind that does not read (a required field missing or of
    /// the wrong type) is an error, which says what is wrong.
    #[derive(Clone, Debug, PartialEq)]
    pub enum AgentUpdate {
        /// `tool_call`, read as the update it amounts to (a new call: every field may be there,
        /// `rawOutput` included, which [`ToolCall`] has no field for); its `title` is required.
        ToolCall(ToolCallUpdate),
        /// Every other kind this crate reads ([`AgentUpdate::READ`]), typed.
        Update(SessionUpdate),
        /// A kind the host does not use (or one newer than this crate's schema): tolerated, by
        /// name.
        Unknown(String),
    }

    impl AgentUpdate {
        /// The `sessionUpdate` kinds read typed (into [`SessionUpdate`]): the ones the host
        /// uses (a delegation's answer, its tool calls, its plan). Every other kind is taken by
        /// name and not read further: a field the host would not use cannot make an update of
        /// a kind it ignores "not read" (nor use up the log's budget for ones that matter).
        pub const READ: &'static [&'static str] = &[
            "agent_message_chunk",
            "tool_call",
            "tool_call_update",
            "plan",
        ];
    }

    impl<'de> Deserialize<'de> for AgentUpdate {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AgentUpdate, D::Error> {
            use serde::de::Error;
            #[derive(Deserialize)]
            struct Kind {
                #[serde(rename = "sessionUpdate")]
                kind: String,
            }
            let v = Value::deserialize(d)?;
            let Kind { kind } = Kind::deserialize(&v).map_err(D::Error::custom)?;
            let what = |e: serde_json::Error| D::Error::custom(format!("a {kind} update: {e}"));
            match kind.as_str() {
                "tool_call" => {
                    let update = ToolCallUpdate::deserialize(&v).map_err(what)?;
                    if update.title.is_none() {
                        return Err(what(serde_json::Error::missing_field("title")));
                    }
                    Ok(AgentUpdate::ToolCall(update))
                }
                k if AgentUpdate::READ.contains(&k) => SessionUpdate::deserialize(&v)
                    .map(AgentUpdate::Update)
                    .map_err(what),
                _ => Ok(AgentUpdate::Unknown(kind)),
            }
        }
    }

    /// A `session/update` notification's params, as another agent sends them.
    #[derive(Clone, Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct SessionNotification {
        pub session_id: String,
        pub update: AgentUpdate,
    }

    /// `fs/read_text_file` params.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ReadTextFile {
        pub session_id: String,
        pub path: String,
        /// 1-based.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub line: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub limit: Option<u32>,
    }

    /// `fs/write_text_file` params.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct WriteTextFile {
        pub session_id: String,
        pub path: String,
        pub content: String,
    }

    /// `terminal/create` params.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct CreateTerminal {
        pub session_id: String,
        pub command: String,
        /// (`null` reads as none.)
        #[serde(default, deserialize_with = "null_as_default")]
        pub args: Vec<String>,
        /// (`null` reads as none.)
        #[serde(default, deserialize_with = "null_as_default")]
        pub env: Vec<EnvVariable>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cwd: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub output_byte_limit: Option<u64>,
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub struct EnvVariable {
        pub name: String,
        pub value: String,
    }

    /// The params of `terminal/output`, `terminal/wait_for_exit`, `terminal/kill` and
    /// `terminal/release`: which terminal.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct TerminalRef {
        pub session_id: String,
        pub terminal_id: String,
    }

    /// What the host reads of another agent's `initialize` answer: its protocol version and its
    /// capabilities (the rest of `InitializeResponse` is not needed).
    #[derive(Clone, Debug, Default, PartialEq, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct PeerInitialize {
        /// (One that is not a number reads as absent.)
        #[serde(default, deserialize_with = "default_on_error")]
        pub protocol_version: Option<u64>,
        #[serde(default, deserialize_with = "default_on_error")]
        pub agent_capabilities: PeerCapabilities,
    }

    /// `AgentCapabilities` as read from another agent: what it offers to reopen a session.
    #[derive(Clone, Debug, Default, PartialEq, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct PeerCapabilities {
        #[serde(default, deserialize_with = "default_on_error")]
        pub load_session: bool,
        #[serde(default, deserialize_with = "default_on_error")]
        pub session_capabilities: PeerSessionCapabilities,
    }

    /// `SessionCapabilities` as read: each present (an object) is offered.
    #[derive(Clone, Debug, Default, PartialEq, Deserialize)]
    pub struct PeerSessionCapabilities {
        #[serde(default, deserialize_with = "default_on_error")]
        pub resume: Option<Empty>,
    }
}

/// The schema's `x-deserialize-default-on-error`: an optional field whose value does not read
/// as its type is left at its default, as if it were absent. (The host reads its own lenient
/// inputs with it too.)
pub(crate) fn default_on_error<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    let v = Value::deserialize(d)?;
    Ok(serde_json::from_value(v).unwrap_or_default())
}

/// The schema's `x-deserialize-skip-invalid-items` (with default-on-error): the items that read;
/// a value that is not a list reads as none.
fn valid_items<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    Ok(valid_items_if_any(d)?.unwrap_or_default())
}

/// [`valid_items`] for an optional list: `None` when it is absent, `null` or not a list.
fn valid_items_if_any<'de, D, T>(d: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => Some(
            items
                .into_iter()
                .filter_map(|i| serde_json::from_value(i).ok())
                .collect(),
        ),
        _ => None,
    })
}

/// The schema's `x-deserialize-default-on-null`.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A value as the JSON it serializes to (every type here serializes infallibly; `Null` is
/// never reached in practice but keeps this total).
pub fn to_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Whose names and shapes a connection speaks (chosen once per connection; presented at the
/// edge: `maka_dialect.rs`, `methods.rs`, `config_options.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dialect {
    /// maka-acp's own (`docs/maka-extensions.md`).
    #[default]
    Ours,
    /// Apache Maka's `maka --acp` (selected with `--acp`).
    Maka,
}

#[cfg(test)]
mod read_tests {
    //! What other agents send, read: one row a payload (shapes from the schema and from what
    //! codex-acp, claude-agent-acp and opencode send), the tolerated rows (unknown fields,
    //! kinds, values) and the refused ones (a clear error, never a panic).
    use super::from_agents::*;
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<AgentUpdate, String> {
        serde_json::from_value::<AgentUpdate>(v).map_err(|e| e.to_string())
    }

    fn text(t: &str) -> ContentBlock {
        ContentBlock::Text { text: t.into() }
    }

    fn update(id: &str) -> ToolCallUpdate {
        ToolCallUpdate {
            tool_call_id: id.into(),
            ..ToolCallUpdate::default()
        }
    }

    #[test]
    fn every_update_kind_the_host_reads() {
        let chunk = |id: &str, t: &str| Chunk::text(id, t);
        let rows: Vec<(&str, Value, AgentUpdate)> = vec![
            (
                "answer piece (claude: no messageId)",
                json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hi"}}),
                AgentUpdate::Update(SessionUpdate::AgentMessageChunk(chunk("", "Hi"))),
            ),
            (
                "answer piece with messageId, annotations, _meta and a field from the future",
                json!({"sessionUpdate": "agent_message_chunk", "messageId": "m1", "later": 1,
                       "content": {"type": "text", "text": "Hi", "annotations": {"priority": 1}, "_meta": {}}}),
                AgentUpdate::Update(SessionUpdate::AgentMessageChunk(chunk("m1", "Hi"))),
            ),
            (
                "an image piece: read, kept by kind only",
                json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": "AAAA", "mimeType": "image/png"}}),
                AgentUpdate::Update(SessionUpdate::AgentMessageChunk(Chunk {
                    message_id: String::new(),
                    content: ContentBlock::Other,
                    meta: None,
                })),
            ),
            (
                "thought piece: not used by the host, by name",
                json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}}),
                AgentUpdate::Unknown("agent_thought_chunk".into()),
            ),
            (
                "codex: a command announced",
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "Run ls",
                       "kind": "execute", "status": "in_progress",
                       "rawInput": {"command": ["bash", "-lc", "ls"], "cwd": "/w"},
                       "locations": [{"path": "/w"}], "content": []}),
                AgentUpdate::ToolCall(ToolCallUpdate {
                    title: Some("Run ls".into()),
                    kind: Some(ToolKind::Execute),
                    status: Some(ToolCallStatus::InProgress),
                    raw_input: Some(json!({"command": ["bash", "-lc", "ls"], "cwd": "/w"})),
                    locations: Some(vec![ToolCallLocation { path: "/w".into(), line: None }]),
                    content: Some(vec![]),
                    ..update("call_1")
                }),
            ),
            (
                "a call announced settled, with its name and rawOutput (ToolCall has no field for it)",
                json!({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Read a.rs",
                       "name": "read", "kind": "read", "status": "completed", "rawOutput": {"output": "x"}}),
                AgentUpdate::ToolCall(ToolCallUpdate {
                    title: Some("Read a.rs".into()),
                    name: Some("read".into()),
                    kind: Some(ToolKind::Read),
                    status: Some(ToolCallStatus::Completed),
                    raw_output: Some(json!({"output": "x"})),
                    ..update("t")
                }),
            ),
            (
                "ACP kinds this agent does not write (delete), and one newer than the schema",
                json!({"sessionUpdate": "tool_call", "toolCallId": "d", "title": "rm", "kind": "delete"}),
                AgentUpdate::ToolCall(ToolCallUpdate {
                    title: Some("rm".into()),
                    kind: Some(ToolKind::Delete),
                    ..update("d")
                }),
            ),
            (
                "an unknown tool kind is `other`; an unknown status, a bad name, a bad location line are absent",
                json!({"sessionUpdate": "tool_call", "toolCallId": "u", "title": "x", "kind": "browse",
                       "status": "paused", "name": 7, "locations": [{"path": "/a", "line": "one"}, {"line": 2}]}),
                AgentUpdate::ToolCall(ToolCallUpdate {
                    title: Some("x".into()),
                    kind: Some(ToolKind::Other),
                    locations: Some(vec![ToolCallLocation { path: "/a".into(), line: None }]),
                    ..update("u")
                }),
            ),
            (
                "opencode: an update with a diff, a terminal and text; an unknown content type left out",
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "e", "status": "completed",
                       "content": [
                           {"type": "diff", "path": "/w/a", "oldText": null, "newText": "b"},
                           {"type": "terminal", "terminalId": "term-1"},
                           {"type": "content", "content": {"type": "text", "text": "ok"}},
                           {"type": "hologram", "beam": 1}]}),
                AgentUpdate::Update(SessionUpdate::ToolCallUpdate(ToolCallUpdate {
                    status: Some(ToolCallStatus::Completed),
                    content: Some(vec![
                        ToolCallContent::Diff { path: "/w/a".into(), old_text: None, new_text: "b".into() },
                        ToolCallContent::terminal("term-1"),
                        ToolCallContent::Content { content: text("ok") },
                    ]),
                    ..update("e")
                })),
            ),
            (
                "codex: the end carries rawOutput only; a null rawInput is absent",
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "completed",
                       "rawInput": null, "rawOutput": {"exit_code": 0, "aggregated_output": "hi"}}),
                AgentUpdate::Update(SessionUpdate::ToolCallUpdate(ToolCallUpdate {
                    status: Some(ToolCallStatus::Completed),
                    raw_output: Some(json!({"exit_code": 0, "aggregated_output": "hi"})),
                    ..update("c")
                })),
            ),
            (
                "claude: the display terminal in _meta",
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "m",
                       "_meta": {"terminal_output": {"terminal_id": "m", "data": "out"}}}),
                AgentUpdate::Update(SessionUpdate::ToolCallUpdate(ToolCallUpdate {
                    meta: Some(json!({"terminal_output": {"terminal_id": "m", "data": "out"}})),
                    ..update("m")
                })),
            ),
            (
                "a plan; an entry that does not read (unknown status) left out",
                json!({"sessionUpdate": "plan", "entries": [
                    {"content": "look", "priority": "high", "status": "completed", "_meta": {}},
                    {"content": "fix", "priority": "medium", "status": "in_progress"},
                    {"content": "dream", "priority": "low", "status": "someday"}]}),
                AgentUpdate::Update(SessionUpdate::Plan {
                    entries: vec![
                        PlanEntry { content: "look".into(), priority: PlanPriority::High, status: PlanStatus::Completed },
                        PlanEntry { content: "fix".into(), priority: PlanPriority::Medium, status: PlanStatus::InProgress },
                    ],
                }),
            ),
            // Kinds the host does not use are taken by name, whatever their fields: one the
            // schema allows (an open enum value, a markdown plan, a bad optional field) is never
            // "an update that does not read".
            (
                "opencode: its commands",
                json!({"sessionUpdate": "available_commands_update", "availableCommands": [
                    {"name": "init", "input": {}}]}),
                AgentUpdate::Unknown("available_commands_update".into()),
            ),
            (
                "a mode change",
                json!({"sessionUpdate": "current_mode_update", "currentModeId": "plan"}),
                AgentUpdate::Unknown("current_mode_update".into()),
            ),
            (
                "usage with a cost of another shape",
                json!({"sessionUpdate": "usage_update", "used": 10, "size": 200000,
                       "cost": {"amount": "1", "currency": "USD"}}),
                AgentUpdate::Unknown("usage_update".into()),
            ),
            (
                "a notice of a severity newer than this crate",
                json!({"sessionUpdate": "notice", "severity": "_debug", "title": "x", "description": 5}),
                AgentUpdate::Unknown("notice".into()),
            ),
            (
                "a markdown plan",
                json!({"sessionUpdate": "plan_update", "plan": {"type": "markdown", "planId": "p", "markdown": "# x"}}),
                AgentUpdate::Unknown("plan_update".into()),
            ),
            (
                "a kind newer than this schema: tolerated, by name",
                json!({"sessionUpdate": "weather_report", "sky": "blue"}),
                AgentUpdate::Unknown("weather_report".into()),
            ),
            (
                "a kind this agent only writes",
                json!({"sessionUpdate": "subagent_update", "sessionId": "s", "state": {"state": "running"}}),
                AgentUpdate::Unknown("subagent_update".into()),
            ),
        ];
        for (name, payload, want) in rows {
            assert_eq!(read(payload), Ok(want), "{name}");
        }
    }

    #[test]
    fn malformed_updates_are_refused_saying_what_is_wrong() {
        let rows: Vec<(&str, Value, &str)> = vec![
            (
                "no kind",
                json!({"content": {"type": "text", "text": "x"}}),
                "missing field `sessionUpdate`",
            ),
            (
                "a kind that is not a string",
                json!({"sessionUpdate": 3}),
                "invalid type",
            ),
            (
                "not an object",
                json!("agent_message_chunk"),
                "invalid type",
            ),
            (
                "a piece without content",
                json!({"sessionUpdate": "agent_message_chunk"}),
                "a agent_message_chunk update: missing field `content`",
            ),
            (
                "a text block without text",
                json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}}),
                "missing field `text`",
            ),
            (
                "a call without an id",
                json!({"sessionUpdate": "tool_call", "title": "x"}),
                "a tool_call update: missing field `toolCallId`",
            ),
            (
                "a call without a title",
                json!({"sessionUpdate": "tool_call", "toolCallId": "x"}),
                "a tool_call update: missing field `title`",
            ),
            (
                "an id that is a number",
                json!({"sessionUpdate": "tool_call_update", "toolCallId": 7}),
                "invalid type: integer `7`, expected a string",
            ),
            (
                "a plan without entries",
                json!({"sessionUpdate": "plan"}),
                "a plan update: missing field `entries`",
            ),
        ];
        for (name, payload, why) in rows {
            match read(payload) {
                Err(e) => assert!(e.contains(why), "{name}: {e}"),
                Ok(u) => panic!("{name}: read as {u:?}"),
            }
        }
    }

    #[test]
    fn a_struct_is_read_from_an_object_only() {
        // serde's derive would read these by position.
        let array = json!([1, {"loadSession": true}]);
        assert!(from_agents::read_object::<PeerInitialize>(&array).is_err());
        let params = json!(["s", {"sessionUpdate": "plan", "entries": []}]);
        assert!(from_agents::read_object::<SessionNotification>(&params).is_err());
        let object = json!({"protocolVersion": 1});
        let read = from_agents::read_object::<PeerInitialize>(&object);
        assert_eq!(read.ok().and_then(|p| p.protocol_version), Some(1));
    }

    #[test]
    fn every_kind_of_the_schema_is_read_or_named() {
        let schema: Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/schema/schema.json"
            ))
            .unwrap(),
        )
        .unwrap();
        let kinds: Vec<&str> = schema["$defs"]["SessionUpdate"]["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["properties"]["sessionUpdate"]["const"].as_str().unwrap())
            .collect();
        assert!(kinds.len() >= 19, "{kinds:?}");
        // A kind the host does not read is taken by name, whatever else the update holds.
        for k in kinds.iter().filter(|k| !AgentUpdate::READ.contains(k)) {
            let odd = json!({"sessionUpdate": k, "entries": 5, "content": [], "_meta": 1});
            assert_eq!(read(odd), Ok(AgentUpdate::Unknown(k.to_string())), "{k}");
        }
        for k in AgentUpdate::READ {
            assert!(kinds.contains(k), "{k}: not a kind of the schema");
        }
    }

    #[test]
    fn requests_of_other_agents_read_as_the_schema_says() {
        // codex-acp's permission request (its options as it sends them); an option of a kind
        // newer than the schema is left out (never chosen).
        let asked: RequestPermission = serde_json::from_value(json!({
            "sessionId": "s",
            "toolCall": {"toolCallId": "call_9", "title": "Run rm -rf build", "kind": "execute",
                         "rawInput": {"command": ["rm", "-rf", "build"]}},
            "options": [
                {"optionId": "approved-for-session", "name": "Always", "kind": "allow_always"},
                {"optionId": "approved", "name": "Yes", "kind": "allow_once"},
                {"optionId": "maybe", "name": "Later", "kind": "ask_again_later"},
                {"optionId": "abort", "name": "No", "kind": "reject_once"}]
        }))
        .unwrap();
        let kinds: Vec<PermissionOptionKind> = asked.options.iter().map(|o| o.kind).collect();
        use PermissionOptionKind::*;
        assert_eq!(kinds, [AllowAlways, AllowOnce, RejectOnce]);
        assert_eq!(asked.tool_call.title.as_deref(), Some("Run rm -rf build"));
        // The answer goes back as ACP's RequestPermissionResponse.
        let reply = PermissionReply {
            outcome: PermissionOutcome::Selected {
                option_id: "approved".into(),
            },
        };
        assert_eq!(
            to_json(&reply),
            json!({"outcome": {"outcome": "selected", "optionId": "approved"}})
        );
        let cancelled = PermissionReply {
            outcome: PermissionOutcome::Cancelled,
        };
        assert_eq!(
            to_json(&cancelled),
            json!({"outcome": {"outcome": "cancelled"}})
        );

        let create: CreateTerminal = serde_json::from_value(json!({
            "sessionId": "s", "command": "sh", "args": ["-c", "ls"], "env": null,
            "cwd": "/w", "outputByteLimit": 100, "_meta": {}
        }))
        .unwrap();
        assert_eq!((create.args.len(), create.env.len()), (2, 0));
        let rows: Vec<(&str, Result<(), String>, Option<&str>)> = vec![
            (
                "terminal/create without a command",
                serde_json::from_value::<CreateTerminal>(json!({"sessionId": "s"}))
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Some("missing field `command`"),
            ),
            (
                "terminal/create with a variable without a value",
                serde_json::from_value::<CreateTerminal>(
                    json!({"sessionId": "s", "command": "ls", "env": [{"name": "A"}]}),
                )
                .map(drop)
                .map_err(|e| e.to_string()),
                Some("missing field `value`"),
            ),
            (
                "fs/read_text_file",
                serde_json::from_value::<ReadTextFile>(
                    json!({"sessionId": "s", "path": "/w/a", "line": 3, "limit": null}),
                )
                .map(|r| assert_eq!((r.line, r.limit), (Some(3), None)))
                .map_err(|e| e.to_string()),
                None,
            ),
            (
                "fs/read_text_file with a line that is not a number",
                serde_json::from_value::<ReadTextFile>(
                    json!({"sessionId": "s", "path": "/w/a", "line": "3"}),
                )
                .map(drop)
                .map_err(|e| e.to_string()),
                Some("invalid type: string \"3\""),
            ),
            (
                "fs/write_text_file without content",
                serde_json::from_value::<WriteTextFile>(json!({"sessionId": "s", "path": "/w/a"}))
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Some("missing field `content`"),
            ),
            (
                "terminal/output without a terminal",
                serde_json::from_value::<TerminalRef>(json!({"sessionId": "s"}))
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Some("missing field `terminalId`"),
            ),
        ];
        for (name, got, refused) in rows {
            match (got, refused) {
                (Ok(()), None) => {}
                (Err(e), Some(why)) => assert!(e.contains(why), "{name}: {e}"),
                (got, want) => panic!("{name}: {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn an_agents_initialize_answer_says_how_it_reopens_sessions() {
        let rows = [
            (
                json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true,
                    "sessionCapabilities": {"resume": {}, "list": {}}}}),
                Some(1),
                true,
                true,
            ),
            (
                json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true}}),
                Some(1),
                true,
                false,
            ),
            (json!({"protocolVersion": 1}), Some(1), false, false),
            // Values that do not read are absent: not offered.
            (
                json!({"protocolVersion": "1", "agentCapabilities": {"loadSession": "yes",
                    "sessionCapabilities": {"resume": true}}}),
                None,
                false,
                false,
            ),
            (
                json!({"protocolVersion": 2, "agentCapabilities": 5}),
                Some(2),
                false,
                false,
            ),
        ];
        for (v, version, load, resume) in rows {
            let init: PeerInitialize = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(init.protocol_version, version, "{v}");
            assert_eq!(init.agent_capabilities.load_session, load, "{v}");
            assert_eq!(
                init.agent_capabilities
                    .session_capabilities
                    .resume
                    .is_some(),
                resume,
                "{v}"
            );
        }
        let setup: SessionSetup = serde_json::from_value(
            json!({"sessionId": "abc", "modes": 3, "configOptions": [{"bad": 1}]}),
        )
        .unwrap();
        assert_eq!(setup.session_id.as_deref(), Some("abc"));
        assert_eq!((setup.modes, setup.config_options), (None, Some(vec![])));
    }
}
