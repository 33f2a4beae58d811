//! Messages, turns, interactions (permissions, questions, sandbox boundaries).

use super::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Clone, Debug, Default, PartialEq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageContent {
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

/// Inline prompt attachment (bounded by the request body limit).
#[derive(Clone, Debug, PartialEq, Hash, Serialize, Deserialize)]
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
    /// Stored as this session artifact instead of inline (a large attachment, or a
    /// `maka-artifact://` link in the prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_id: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum TurnOutcome {
    Completed,
    Cancelled,
    Failed,
    MaxTokens,
    Refused,
}
wire_names!(TurnOutcome, "turn outcome", { Completed = "completed", Cancelled = "cancelled", Failed = "failed", MaxTokens = "max_tokens", Refused = "refused" });

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum TurnStatus {
    Running,
    WaitingForUser,
    Completed,
    Cancelled,
    Failed,
    MaxTokens,
    Refused,
}
wire_names!(TurnStatus, "turn status", { Running = "running", WaitingForUser = "waiting_for_user", Completed = "completed", Cancelled = "cancelled", Failed = "failed", MaxTokens = "max_tokens", Refused = "refused" });

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
    pub failure_class: Option<FailureClass>,
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
        review: Review,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        args: Option<Value>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        locations: Vec<Location>,
        /// A preview of the change for edits and writes (boxed: frames stay small).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<Box<FileDiff>>,
        remember_for_turn_allowed: bool,
        /// What an answer with `remember` would cover (the dialog names it): present only
        /// when a lasting rule can cover this very call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<RuleTarget>,
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
        decision: Decision,
        #[serde(default)]
        remember_for_turn: bool,
        /// Keep the decision as a rule over the request's `rule`: for this session, or for
        /// every session in this workspace (stored by the host).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remember: Option<RuleScope>,
        /// No answer could be obtained (the client's reply could not be read, or it failed
        /// the request): why, in one sentence. The decision is then `deny`, and the model is
        /// told the approval could not be obtained — not that the person refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<String>,
    },
    Question {
        answers: Vec<Option<String>>,
        /// The client cannot show questions at all: nothing was chosen, the model must ask in
        /// its reply instead.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unsupported: bool,
    },
    SandboxBoundary {
        decision: Decision,
    },
}

/// What a lasting permission rule covers: one kind of action, narrowed to a command prefix, a
/// path pattern (relative to the workspace) or one tool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RuleTarget {
    /// Commands that are `prefix` or, unless `exact`, start with it as a program's prefix
    /// (its program and subcommand: `src/host/permissions.rs` says which programs a prefix
    /// may name; for the others it is offered `exact`).
    Command {
        prefix: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        exact: bool,
    },
    /// File edits and writes: `dir/**` (anything under the folder) or one exact path.
    Files { path: String },
    /// One MCP tool, by the name the model sees.
    Tool { name: String },
    /// A workspace-declared subagent, exactly as declared (its trust dialog): never a kept
    /// permission rule; the only lasting answer is "always allow" this declaration.
    Agent { name: String },
    /// A subagent's own lasting choice, which the subagent keeps (not maka): offered when its
    /// permission request had `allow_always` / `reject_always` options, labelled with the
    /// agent's name and the option's own words.
    #[serde(rename_all = "camelCase")]
    InAgent {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        allow_always: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reject_always: Option<String>,
        /// The agent offered no `allow_once` / `reject_once`: the dialog does not either.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        no_allow_once: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        no_reject_once: bool,
    },
}

impl RuleTarget {
    /// The words the dialog and `/permissions` use ("commands starting with `cargo test`").
    pub fn describe(&self) -> String {
        match self {
            RuleTarget::Command {
                prefix,
                exact: false,
            } => format!("commands starting with `{prefix}`"),
            RuleTarget::Command {
                prefix,
                exact: true,
            } => format!("the command `{prefix}`"),
            RuleTarget::Files { path } => match path.strip_suffix("/**") {
                Some(dir) => format!("file changes under `{dir}/`"),
                None => format!("changes to `{path}`"),
            },
            RuleTarget::Tool { name } => format!("the tool `{name}`"),
            RuleTarget::Agent { name } => format!("agent `{name}` as declared"),
            RuleTarget::InAgent { name, .. } => format!("what agent `{name}` remembers"),
        }
    }
}

/// How long an answer is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum RuleScope {
    /// Until the session ends (or the host restarts).
    Session,
    /// For every session in this workspace, in `<data dir>/permissions.json`.
    Workspace,
}
wire_names!(RuleScope, "rule scope", { Session = "session", Workspace = "workspace" });

/// One kept decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRule {
    pub decision: Decision,
    #[serde(flatten)]
    pub target: RuleTarget,
    /// When it was made (ms since the epoch).
    #[serde(default)]
    pub created_at: u64,
}

/// What a permission is asked for: the kind of action (ask mode asks once per kind; the user
/// may allow a kind for the rest of the turn).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum Review {
    Command,
    Edit,
    Write,
    /// An MCP server's tool.
    Tool,
    /// Plan mode: approving the plan.
    Plan,
}
wire_names!(Review, "review", { Command = "command", Edit = "edit", Write = "write", Tool = "tool", Plan = "plan" });

/// Why a turn failed, as a class clients can switch on (the message says it in words).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The provider answered with an error, or a stream that broke or made no sense.
    ProviderError,
    /// The provider refused the credentials (HTTP 401/403).
    ProviderAuth,
    /// The provider sent nothing for the idle timeout.
    ProviderTimeout,
    /// The provider could not be reached, or asked to wait too long.
    ProviderUnavailable,
    /// No provider (or model) is configured for the session.
    CapabilityUnavailable,
    /// The host stopped while the turn ran.
    Crash,
    /// Anything else.
    RuntimeError,
    /// A class this build does not know (a newer host).
    #[serde(other)]
    Other,
}

/// How a tool call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum ToolStatus {
    Completed,
    Failed,
    /// The turn was stopped while it waited or ran.
    Cancelled,
}
wire_names!(ToolStatus, "tool status", { Completed = "completed", Failed = "failed", Cancelled = "cancelled" });

impl ToolStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Completed => "completed",
            ToolStatus::Failed => "failed",
            ToolStatus::Cancelled => "cancelled",
        }
    }
}

/// Why an event-stream window ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamEndReason {
    /// `waitMs` passed: open the next window.
    WindowElapsed,
    /// `untilTerminal`: the followed turn ended.
    TurnTerminal,
    /// The reader fell behind the ring: re-open from a snapshot.
    ResyncRequired,
    /// The host is shutting down.
    HostDraining,
    /// The session was removed: nothing more will come.
    SessionRemoved,
    /// A reason this build does not know (a newer host): treated like `window_elapsed`.
    #[serde(other)]
    Other,
}

/// The user's answer to a permission or a boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum Decision {
    Allow,
    Deny,
}
wire_names!(Decision, "decision", { Allow = "allow", Deny = "deny" });

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

/// An objective the host keeps running turns toward (`goal.arm`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Goal {
    pub goal_id: String,
    /// Increases with every change: a reader can tell an old state from a newer one.
    #[serde(default)]
    pub revision: u64,
    pub session_id: String,
    pub objective: String,
    /// `active`, `waiting_for_approval` (a goal turn waits on the person), `paused`, and the
    /// ends: `completed` (the model declared it met), `stopped` (a limit), `cancelled`, `failed`.
    pub status: String,
    pub limits: GoalLimits,
    pub turns_run: u32,
    /// Input + output tokens of the goal's turns.
    pub tokens_used: u64,
    pub started_at: u64,
    pub updated_at: u64,
    /// Why it paused, stopped or failed (`turn_limit`, `token_limit`, `time_limit`,
    /// `turn_stopped`, `host_restarted`, a failure message…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The model's evidence that the objective is met (`goal_complete`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
}

impl Goal {
    /// Still driving turns (or waiting to).
    pub fn is_live(&self) -> bool {
        matches!(self.status.as_str(), "active" | "waiting_for_approval")
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalLimits {
    /// Turns at most (1–100).
    pub max_turns: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_minutes: Option<u64>,
}
