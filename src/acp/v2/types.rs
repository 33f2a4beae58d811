//! ACP v2 (draft) messages as plain data: what the agent sends, named after the schema's
//! `$defs` (`tests/schema/v2/schema.json`). Shapes identical to v1's are v1's types
//! (`ToolKind`, `ToolCallLocation`, `PermissionOption`, plan entries).

use crate::acp::types::{PermissionOption, PlanEntry, ToolCallLocation, ToolKind};
use serde::Serialize;
use serde_json::Value;

/// `{}`: a capability supported.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Empty {}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Implementation {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub version: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResponse {
    pub protocol_version: u16,
    pub info: Implementation,
    pub capabilities: AgentCapabilities,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub auth_methods: Vec<AuthMethod>,
}

/// A way to sign in: one the agent performs (`auth/login`), or a terminal program the client
/// runs (never passed to `auth/login`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AuthMethod {
    #[serde(rename_all = "camelCase")]
    Agent {
        method_id: String,
        name: String,
        description: String,
    },
    #[serde(rename_all = "camelCase")]
    Terminal {
        method_id: String,
        name: String,
        description: String,
        args: Vec<String>,
        env: Vec<Value>,
    },
}

impl AuthMethod {
    pub fn from_v1(m: &crate::acp::types::AuthMethod) -> AuthMethod {
        match m.kind.as_deref() {
            Some("terminal") => AuthMethod::Terminal {
                method_id: m.id.clone(),
                name: m.name.clone(),
                description: m.description.clone(),
                args: m.args.clone().unwrap_or_default(),
                env: vec![],
            },
            _ => AuthMethod::Agent {
                method_id: m.id.clone(),
                name: m.name.clone(),
                description: m.description.clone(),
            },
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AgentCapabilities {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionCapabilities>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<Empty>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCapabilities {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptCapabilities>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpCapabilities>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete: Option<Empty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub additional_directories: Option<Empty>,
    /// Unstable in v2: `session/fork`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fork: Option<Empty>,
    /// Unstable in v2: `systemPrompt` on new/resume/fork (`{mode: {override: {}}}`: append and
    /// override).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptCapabilities {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<Empty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audio: Option<Empty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedded_context: Option<Empty>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct McpCapabilities {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdio: Option<Empty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<Empty>,
}

/// A content block (text is the only kind the agent writes).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text { text: String },
}

/// `session/update`'s `update`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "sessionUpdate", rename_all = "snake_case")]
pub enum SessionUpdate {
    UserMessage(UserMessage),
    AgentMessageChunk(ContentChunk),
    AgentMessage(AgentMessage),
    AgentThoughtChunk(ContentChunk),
    StateUpdate(StateUpdate),
    ToolCallUpdate(ToolCallUpdate),
    ToolCallContentChunk(ToolCallContentChunk),
    TerminalUpdate(TerminalUpdate),
    TerminalOutputChunk(TerminalOutputChunk),
    PlanUpdate(PlanUpdate),
    AvailableCommandsUpdate(AvailableCommandsUpdate),
    ConfigOptionUpdate(ConfigOptionUpdate),
    SessionInfoUpdate(SessionInfoUpdate),
    UsageUpdate(UsageUpdate),
    Notice(Notice),
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UserMessage {
    pub message_id: String,
    /// The blocks as the client sent them (its own prompt), or the host's text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Value>>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentMessage {
    pub message_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ContentBlock>>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContentChunk {
    pub message_id: String,
    pub content: ContentBlock,
}

/// The session's foreground state.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum StateUpdate {
    Running,
    Idle(IdleStopReason),
    /// Idle without a stop reason: a snapshot that ends no work (after `session/resume`).
    #[serde(rename = "idle")]
    IdleSnapshot,
    RequiresAction,
}

/// Why the foreground work ended (`stopReason`, and the error for `error`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "stopReason", rename_all = "snake_case")]
pub enum IdleStopReason {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
    Error(ErrorStopReason),
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ErrorStopReason {
    pub error: Error,
}

/// A JSON-RPC error, as v2's `Error`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Error {
    pub code: i64,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
    Cancelled,
}

/// A tool call upsert: only `toolCallId` is required; what is omitted is unchanged.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallUpdate {
    pub tool_call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ToolKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ToolCallStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ToolCallContent>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locations: Option<Vec<ToolCallLocation>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<Value>,
    /// What the client may do to it now: replaces the previous value (`{}`: nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Controls>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// A tool call's or a terminal's controls (`ToolCallCapabilities`, `TerminalCapabilities`):
/// `cancel: {}` while `tool_call/cancel` (`terminal/cancel`) can stop it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Controls {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel: Option<Empty>,
}

impl Controls {
    pub fn cancel(can: bool) -> Controls {
        Controls {
            cancel: can.then_some(Empty {}),
        }
    }
}

impl ToolCallUpdate {
    pub fn new(tool_call_id: &str) -> ToolCallUpdate {
        ToolCallUpdate {
            tool_call_id: tool_call_id.to_string(),
            ..ToolCallUpdate::default()
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolCallContent {
    Content {
        content: ContentBlock,
    },
    Diff {
        changes: Vec<DiffChange>,
        #[serde(skip_serializing_if = "Option::is_none")]
        patch: Option<DiffPatch>,
    },
    #[serde(rename_all = "camelCase")]
    Terminal {
        terminal_id: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffChange {
    pub operation: DiffOperation,
    pub path: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffOperation {
    Add,
    Modify,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffPatch {
    pub format: String,
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallContentChunk {
    pub tool_call_id: String,
    pub content: ToolCallContent,
}

/// A display terminal upsert (the agent runs the command; the client shows it).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminalUpdate {
    pub terminal_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<TerminalOutput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<TerminalExitStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Controls>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TerminalOutput {
    /// Base64 of the output bytes.
    pub data: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminalExitStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminalOutputChunk {
    pub terminal_id: String,
    /// Base64 of the appended bytes.
    pub data: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanUpdate {
    pub plan: PlanUpdateContent,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PlanUpdateContent {
    Items(PlanItems),
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanItems {
    pub plan_id: String,
    pub entries: Vec<PlanEntry>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AvailableCommandsUpdate {
    pub available_commands: Vec<AvailableCommand>,
}

/// A command the session offers (`/name`), with its input hint.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AvailableCommand {
    Command {
        name: String,
        description: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        input: Option<CommandInput>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CommandInput {
    Text { hint: String },
}

impl AvailableCommand {
    pub fn from_v1(c: &crate::acp::types::AvailableCommand) -> AvailableCommand {
        AvailableCommand::Command {
            name: c.name.clone(),
            description: c.description.clone(),
            input: c.input.as_ref().map(|i| CommandInput::Text {
                hint: i.hint.clone(),
            }),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOptionUpdate {
    pub config_options: Vec<SessionConfigOption>,
}

/// A configuration option: v1's with `configId` for `id` (and no `description`, which v2's
/// option has not).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionConfigOption {
    pub config_id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(flatten)]
    pub kind: ConfigKind,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ConfigKind {
    #[serde(rename_all = "camelCase")]
    Select {
        current_value: String,
        options: Value,
    },
    #[serde(rename_all = "camelCase")]
    Boolean { current_value: bool },
}

impl SessionConfigOption {
    pub fn from_v1(o: &crate::acp::types::ConfigOption) -> SessionConfigOption {
        use crate::acp::types::ConfigOptionKind as K;
        SessionConfigOption {
            config_id: o.id.clone(),
            name: o.name.clone(),
            category: o.category.clone(),
            kind: match &o.kind {
                K::Select {
                    current_value,
                    options,
                } => ConfigKind::Select {
                    current_value: current_value.clone(),
                    options: select_options(options),
                },
                K::Boolean { current_value } => ConfigKind::Boolean {
                    current_value: *current_value,
                },
            },
        }
    }
}

/// v1's select values in v2's shape (`groupId` for a group's `group`, no descriptions).
fn select_options(options: &crate::acp::types::SelectOptions) -> Value {
    let mut v = serde_json::to_value(options).unwrap_or(Value::Null);
    if let Some(items) = v.as_array_mut() {
        for item in items {
            let Some(o) = item.as_object_mut() else {
                continue;
            };
            o.remove("description");
            if let Some(group) = o.remove("group") {
                o.insert("groupId".into(), group);
            }
            if let Some(Value::Array(inner)) = o.get_mut("options") {
                for choice in inner {
                    if let Some(c) = choice.as_object_mut() {
                        c.remove("description");
                    }
                }
            }
        }
    }
    v
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfoUpdate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UsageUpdate {
    pub used: u64,
    pub size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeSeverity {
    Info,
    Warning,
    Error,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Notice {
    pub severity: NoticeSeverity,
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `session/prompt`'s answer: the prompt's message was inserted, with this id.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptResponse {
    pub message_id: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionResponse {
    pub session_id: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub config_options: Vec<SessionConfigOption>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeSessionResponse {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub config_options: Vec<SessionConfigOption>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetSessionConfigOptionResponse {
    pub config_options: Vec<SessionConfigOption>,
}

/// `session/request_permission`'s params.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPermission {
    pub session_id: String,
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<PermissionSubject>,
    pub options: Vec<PermissionOption>,
}

/// What a permission is for.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PermissionSubject {
    #[serde(rename_all = "camelCase")]
    ToolCall { tool_call: Box<ToolCallUpdate> },
}
