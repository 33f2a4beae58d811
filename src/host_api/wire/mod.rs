//! Runtime Host protocol v1 wire types, shared by the reference host and the adapter's client.
//! `docs/runtime-host-protocol.md` is the normative description; field names here are the
//! JSON names (camelCase), unions are tagged with `kind`.

/// `TryFrom<String>` for a unit enum, by its wire names, for `#[serde(try_from = "String")]`:
/// one shared string reader and a match, where the derived reader of each unit enum costs
/// about 1.5 KB of binary (the adapter-only build has a size budget; issue 25). The names must
/// be the ones `Serialize` writes (`rename_all = "snake_case"`): a unit test reads back each.
macro_rules! wire_names {
    ($ty:ident, $what:literal, { $($variant:ident = $name:literal),+ $(,)? }) => {
        // Every variant is named here: a new one that is not fails to compile.
        const _: fn($ty) = |v| match v {
            $($ty::$variant)|+ => (),
        };
        impl TryFrom<String> for $ty {
            type Error = String;
            fn try_from(s: String) -> Result<$ty, String> {
                match s.as_str() {
                    $($name => Ok($ty::$variant),)+
                    _ => Err(format!(
                        concat!("unknown ", $what, " {:?}; expected one of: ", $($name, " "),+),
                        s
                    )),
                }
            }
        }
    };
}

mod frames;
mod tools;
mod transcript;
mod turns;

pub use frames::*;
pub use tools::*;
pub use transcript::*;
pub use turns::*;

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
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum PermissionMode {
    /// Read-only tools only; writes and commands are refused.
    Explore,
    /// Writes and commands need a `permission` interaction.
    Ask,
    /// No prompts (paths outside the roots still need a `sandbox_boundary` approval).
    Bypass,
}
wire_names!(PermissionMode, "permission mode", { Explore = "explore", Ask = "ask", Bypass = "bypass" });

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum CollaborationMode {
    Agent,
    Plan,
}
wire_names!(CollaborationMode, "collaboration mode", { Agent = "agent", Plan = "plan" });

/// How the model's delegations to subagents run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum OrchestrationMode {
    /// One delegation at a time.
    #[default]
    Default,
    /// Several `delegate` calls of one model step run in parallel.
    Swarm,
    /// A `delegate_graph` tool: tasks with dependencies, each started when its dependencies end.
    Graph,
}
wire_names!(OrchestrationMode, "orchestration mode", { Default = "default", Swarm = "swarm", Graph = "graph" });

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Configuration {
    pub model_target: ModelTarget,
    /// `null` = the model's default.
    pub thinking_level: Option<String>,
    pub permission_mode: PermissionMode,
    pub collaboration_mode: CollaborationMode,
    #[serde(default)]
    pub orchestration_mode: OrchestrationMode,
}

impl Default for Configuration {
    fn default() -> Self {
        Configuration {
            model_target: ModelTarget::Default,
            thinking_level: None,
            permission_mode: PermissionMode::Ask,
            collaboration_mode: CollaborationMode::Agent,
            orchestration_mode: OrchestrationMode::Default,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestration_mode: Option<OrchestrationMode>,
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
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum SessionStatus {
    Idle,
    Running,
    WaitingForUser,
}
wire_names!(SessionStatus, "session status", { Idle = "idle", Running = "running", WaitingForUser = "waiting_for_user" });

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
    /// Where a branch came from (`session.branch.create`); absent for an original session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<Lineage>,
    /// Instructions the client gave for the session's system prompt (ACP `systemPrompt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<SystemPrompt>,
    /// The principal that made the session (`Maka-Principal` on its `session.create`, a
    /// `maka-acp serve --tokens-file` user); absent: the machine's user's, as every session
    /// made over stdio. Set once, never changed; a branch keeps its source's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// A client's system prompt: added to the composed instructions, or in place of the built-in
/// base prompt (the host's rules stay in both: `host::turn::history::system_text`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SystemPrompt {
    pub mode: SystemPromptMode,
    pub text: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum SystemPromptMode {
    Append,
    Override,
}
wire_names!(SystemPromptMode, "system prompt mode", { Append = "append", Override = "override" });

/// A branch's source: the session and the last turn it copied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lineage {
    pub parent_session_id: String,
    /// `None` when the source had no finished turn to copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch_of_turn_id: Option<String>,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// IDs are `^[A-Za-z0-9_-]{1,128}$`.
/// The request header naming the principal an operation or stream is for (a `maka-acp serve
/// --tokens-file` user); absent: the machine's user (docs/runtime-host-protocol.md §3).
pub const PRINCIPAL_HEADER: &str = "Maka-Principal";

/// A principal's name (`maka-acp serve --tokens-file`, `Maka-Principal`).
pub fn valid_principal(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'))
}

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

    /// Each name [`wire_names`] reads is the one `Serialize` writes, and an unknown one is an
    /// error naming the value and the names.
    #[test]
    fn hand_read_names_are_the_written_ones() {
        fn both_ways<T>(all: &[T])
        where
            T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
        {
            for v in all {
                let written = serde_json::to_value(v).unwrap();
                assert_eq!(&serde_json::from_value::<T>(written).unwrap(), v);
            }
            let e = serde_json::from_value::<T>(json!("nonsense")).unwrap_err();
            assert!(
                e.to_string().contains("\"nonsense\"; expected one of"),
                "{e}"
            );
        }
        both_ways(&[SystemPromptMode::Append, SystemPromptMode::Override]);
        both_ways(&[
            NoticeSeverity::Info,
            NoticeSeverity::Warning,
            NoticeSeverity::Error,
        ]);
        both_ways(&[
            NoticeFallback::Message,
            NoticeFallback::Thought,
            NoticeFallback::Nothing,
        ]);
        both_ways(&[
            CompactionStatus::InProgress,
            CompactionStatus::Completed,
            CompactionStatus::Failed,
            CompactionStatus::Cancelled,
        ]);
        both_ways(&[CompactionTrigger::Manual, CompactionTrigger::Automatic]);
        use PermissionMode as P;
        both_ways(&[P::Explore, P::Ask, P::Bypass]);
        both_ways(&[CollaborationMode::Agent, CollaborationMode::Plan]);
        use OrchestrationMode as O;
        both_ways(&[O::Default, O::Swarm, O::Graph]);
        use SessionStatus as S;
        both_ways(&[S::Idle, S::Running, S::WaitingForUser]);
        use TurnOutcome as T;
        both_ways(&[
            T::Completed,
            T::Cancelled,
            T::Failed,
            T::MaxTokens,
            T::Refused,
        ]);
        use TurnStatus as U;
        both_ways(&[
            U::Running,
            U::WaitingForUser,
            U::Completed,
            U::Cancelled,
            U::Failed,
            U::MaxTokens,
            U::Refused,
        ]);
        both_ways(&[RuleScope::Session, RuleScope::Workspace]);
        use Review as R;
        both_ways(&[R::Command, R::Edit, R::Write, R::Tool, R::Plan]);
        both_ways(&[
            ToolStatus::Completed,
            ToolStatus::Failed,
            ToolStatus::Cancelled,
        ]);
        both_ways(&[Decision::Allow, Decision::Deny]);
    }

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
    fn the_delta_fast_path_reads_exactly_what_the_derived_reader_reads() {
        let lines = [
            // The two kinds it takes, in the host's field order and in another.
            r#"{"seq":3,"sessionId":"s","ts":1,"kind":"text_delta","turnId":"t","messageId":"m","startOffset":0,"text":"hi"}"#,
            r#"{"text":"é \"x\"\n","kind":"thinking_delta","complete":true,"startOffset":9,"messageId":"m","turnId":"t","ts":2,"seq":null}"#,
            r#"{"seq":5,"ts":0,"kind":"text_delta","turnId":"t","messageId":"m","startOffset":1,"text":"a","future":{"x":1}}"#,
            // Not a delta though the text says so; a delta the flat struct cannot read.
            r#"{"seq":6,"ts":0,"kind":"user_message","turnId":"t","messageId":"m","content":{"text":"\"kind\":\"text_delta\""}}"#,
            r#"{"seq":7,"ts":0,"kind":"tool_running","turnId":"t","toolCallId":"c","x":{"kind":"text_delta"}}"#,
            r#"{"seq":8,"ts":0,"kind":"text_delta","turnId":"t","startOffset":0,"text":"no message id"}"#,
            r#"{"seq":9,"ts":0,"kind":"text_delta","turnId":"t","messageId":"m","startOffset":-1,"text":"x"}"#,
        ];
        for line in lines {
            let derived = serde_json::from_str::<Frame>(line).map_err(|e| e.to_string());
            let fast = Frame::parse(line.as_bytes()).map_err(|e| e.to_string());
            assert_eq!(fast, derived, "{line}");
        }
        assert!(matches!(
            Frame::parse(lines[1].as_bytes()).unwrap().body,
            FrameBody::ThinkingDelta {
                complete: true,
                start_offset: 9,
                ..
            }
        ));
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
