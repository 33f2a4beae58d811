//! Every Runtime Host operation, one definition each: its key, its input and its output.
//!
//! The reference host decodes `Input` and encodes `Output` (`host::ops::dispatch`); the
//! adapter encodes `Input` and decodes `Output` (`HostApi::call::<Op>`). A field renamed
//! here is renamed on both sides, and the compiler finds every reader. Expected races
//! (revision conflicts, parked resumes) are outputs, not errors. `docs/runtime-host-protocol.md`
//! §5 is the prose for each.

use super::wire::{
    ConfigurationPatch, Interaction, InteractionAnswer, MessageContent, Session, TranscriptItem,
    TurnSnapshot, Workspace,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One host operation: `POST /v1/op/{KEY}` with `Input`, answered with `Output`.
pub trait Operation {
    const KEY: &'static str;
    type Input: Serialize + DeserializeOwned + NamesSessions;
    type Output: Serialize + DeserializeOwned;
}

/// The existing sessions an operation's input names: the host runs it only for a caller that
/// owns each of them, and answers every other caller as for a session that does not exist
/// (the one owner gate, `host::ops::dispatch`). Every input type says which, so an operation
/// added later cannot forget to.
pub trait NamesSessions {
    fn sessions(&self) -> [Option<&str>; 2];
}

/// Inputs that name no existing session (a new session's id is not one: it is made for its
/// caller).
macro_rules! names_none {
    ($($t:ty),*) => { $( impl NamesSessions for $t {
        fn sessions(&self) -> [Option<&str>; 2] { [None, None] }
    } )* };
}

/// Inputs that name one session in `session_id`.
macro_rules! names_session_id {
    ($($t:ty),*) => { $( impl NamesSessions for $t {
        fn sessions(&self) -> [Option<&str>; 2] { [Some(&self.session_id), None] }
    } )* };
}

/// Inputs whose `session_id` is optional.
macro_rules! names_session_id_if_any {
    ($($t:ty),*) => { $( impl NamesSessions for $t {
        fn sessions(&self) -> [Option<&str>; 2] { [self.session_id.as_deref(), None] }
    } )* };
}

names_none!(Empty, HelloInput, CreateInput, ListInput);
names_session_id!(
    SessionRef,
    OpenInput,
    ConfigUpdateInput,
    MetadataUpdateInput,
    LifecycleInput,
    RemoveInput,
    PageInput,
    TurnStartInput,
    TurnRef,
    ResumeStartInput,
    AnswerInput,
    CapabilityInput,
    CallResultInput,
    CallRef,
    RevisionCreateInput,
    AbandonInput,
    SubmitInput,
    ToolCancelInput,
    PlanControlInput,
    ArtifactRef,
    GoalArmInput,
    GoalControlInput
);
names_session_id_if_any!(OptionalSessionRef, MemoryQueryInput, SubagentsQuery);

impl NamesSessions for BranchInput {
    /// The source; the target is new, made for the caller.
    fn sessions(&self) -> [Option<&str>; 2] {
        [Some(&self.source_session_id), None]
    }
}

impl NamesSessions for MemoryMutateInput {
    /// An `add` for a session (its workspace or itself) names it; `update` and `forget` name
    /// an entry, whose owner the memory store checks.
    fn sessions(&self) -> [Option<&str>; 2] {
        match &self.change {
            MemoryChange::Add { session_id, .. } => [session_id.as_deref(), None],
            MemoryChange::Update { .. } | MemoryChange::Forget { .. } => [None, None],
        }
    }
}

impl NamesSessions for IngestInput {
    fn sessions(&self) -> [Option<&str>; 2] {
        let id = match self {
            IngestInput::Begin { session_id, .. }
            | IngestInput::Part { session_id, .. }
            | IngestInput::Status { session_id, .. }
            | IngestInput::Commit { session_id, .. }
            | IngestInput::Abort { session_id, .. } => session_id,
        };
        [Some(id), None]
    }
}

impl NamesSessions for ArtifactQueryInput {
    fn sessions(&self) -> [Option<&str>; 2] {
        let id = match self {
            ArtifactQueryInput::List { session_id }
            | ArtifactQueryInput::Get { session_id, .. }
            | ArtifactQueryInput::Read { session_id, .. } => session_id,
        };
        [Some(id), None]
    }
}

macro_rules! operations {
    ($( $(#[$doc:meta])* $name:ident = $key:literal, $input:ty => $output:ty; )*) => {
        $(
            $(#[$doc])*
            pub enum $name {}
            impl Operation for $name {
                const KEY: &'static str = $key;
                type Input = $input;
                type Output = $output;
            }
        )*
        /// Every operation key, in the order of the table above.
        pub const KEYS: &[&str] = &[$($key),*];
    };
}

operations! {
    /// Protocol negotiation; the adapter's first call.
    HostHello = "host.hello", HelloInput => HelloOutput;
    /// Load and state, for `maka-acp status` and the adapter's idle check.
    HostStatus = "host.status", Empty => HostState;
    ModelsList = "models.list", Empty => ModelCatalog;
    /// Re-reads the provider settings (after a sign-in) and lists again.
    ModelsReload = "models.reload", Empty => ModelCatalog;
    SkillsList = "skills.list", OptionalSessionRef => SkillList;
    SessionCreate = "session.create", CreateInput => Session;
    SessionGet = "session.get", SessionRef => SessionLookup;
    SessionList = "session.list", ListInput => SessionPage;
    /// Attach: the snapshot a stream is followed from.
    SessionOpen = "session.open", OpenInput => OpenSnapshot;
    ConfigurationUpdate = "session.configuration.update", ConfigUpdateInput => CasOutcome;
    MetadataUpdate = "session.metadata.update", MetadataUpdateInput => CasOutcome;
    LifecycleSet = "session.lifecycle.set", LifecycleInput => Session;
    SessionRemove = "session.remove", RemoveInput => RemoveOutcome;
    /// The client detached: stop what runs for it (MCP servers). Durable state stays.
    SessionRelease = "session.release", SessionRef => Empty;
    TranscriptPage = "session.transcript.page", PageInput => Page;
    TurnStart = "turn.start", TurnStartInput => StartOutcome;
    TurnStop = "turn.stop", TurnRef => TurnSnapshot;
    TurnQuery = "turn.query", TurnRef => TurnSnapshot;
    ResumeQuery = "turn.resume.query", SessionRef => ResumeDisposition;
    ResumeStart = "turn.resume.start", ResumeStartInput => StartOutcome;
    InteractionAnswerOp = "interaction.answer", AnswerInput => Interaction;
    CapabilityReplace = "client.capability.replace", CapabilityInput => Services;
    ClientCallResult = "client.call.result", CallResultInput => Empty;
    /// The input of a pending client call (frames carry large inputs by reference).
    ClientCallInput = "client.call.input", CallRef => CallInput;
    /// The session's turns, oldest first, from its transcript.
    SessionTurns = "session.turns", SessionRef => TurnList;
    /// A new session with the source's conversation through a turn (the whole of it by default).
    BranchCreate = "session.branch.create", BranchInput => BranchOutcome;
    /// A named point to rewind to, at the end of the conversation.
    RevisionCreate = "session.revision.create", RevisionCreateInput => Revision;
    /// The points a session can rewind to: every turn's start and the named ones.
    RevisionsList = "session.revisions", SessionRef => RevisionList;
    /// Rewinds to a revision: later turns leave the conversation, their file changes are undone.
    RevisionAbandon = "session.revision.abandon", AbandonInput => AbandonOutcome;
    /// Adds a message to the running turn (steering).
    MessageSubmit = "turn.message.submit", SubmitInput => SubmitOutcome;
    /// Cancels one running tool call (a command): the call ends `cancelled`, the turn goes on.
    ToolCancel = "turn.tool.cancel", ToolCancelInput => ToolCancelOutcome;
    /// The memory entries a session's model sees (or all of them).
    MemoryQuery = "memory.query", MemoryQueryInput => MemoryView;
    /// Adds, changes or forgets an entry (revision-checked).
    MemoryMutate = "memory.mutate", MemoryMutateInput => MemoryOutcome;
    /// Tokens (and cost, with prices) per session, model and turn.
    UsageQuery = "usage.query", SessionRef => UsageReport;
    /// The session's plan: its steps and whether the person approved it.
    PlanQuery = "plan.query", SessionRef => PlanView;
    /// Approve, reject or revise the plan (revision-checked).
    PlanControl = "plan.control", PlanControlInput => PlanOutcome;
    /// A turn that carries out the approved plan.
    PlanTurnStart = "plan.turn.start", TurnRef => StartOutcome;
    /// Resumable uploads: begin, parts at offsets, status, commit (sha-256 checked), abort.
    ArtifactIngest = "artifact.ingest", IngestInput => IngestOutcome;
    /// List, one artifact's metadata, or a byte range.
    ArtifactQuery = "artifact.query", ArtifactQueryInput => ArtifactAnswer;
    ArtifactDelete = "artifact.delete", ArtifactRef => Deleted;
    /// Keeps running turns toward an objective until it is met or a limit stops it.
    GoalArm = "goal.arm", GoalArmInput => super::wire::Goal;
    GoalControl = "goal.control", GoalControlInput => super::wire::Goal;
    GoalQuery = "goal.query", SessionRef => GoalView;
    /// The agents a session may delegate to, and whether each is trusted.
    SubagentsList = "subagent.list", SubagentsQuery => SubagentList;
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentInfo {
    pub name: String,
    pub description: String,
    /// The command line it runs.
    pub command: String,
    /// `workspace` (`.maka/agents.json`) or `user` (the config file's `agents`).
    pub source: String,
    /// A workspace agent needs the person's allow on first use; user agents are trusted.
    pub trusted: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SubagentList {
    pub agents: Vec<SubagentInfo>,
    /// Declarations that could not be used, and why.
    pub problems: Vec<String>,
}

/// Whose agents: a session's (its workspace's), or a workspace's before a session exists
/// there (`session/options`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentsQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalArmInput {
    pub session_id: String,
    pub objective: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_minutes: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalControlInput {
    pub session_id: String,
    pub goal_id: String,
    /// `pause`, `resume` or `cancel`.
    pub action: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GoalView {
    pub goal: Option<super::wire::Goal>,
}

/// A stored file of a session: an upload, a large prompt attachment or a tool's full output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub artifact_id: String,
    pub session_id: String,
    pub name: String,
    pub mime_type: String,
    pub bytes: u64,
    pub sha256: String,
    pub created_at: u64,
    /// `upload`, `attachment` or `tool_output`.
    pub source: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum IngestInput {
    #[serde(rename_all = "camelCase")]
    Begin {
        session_id: String,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        total_bytes: u64,
        /// Lowercase hex of the whole file's SHA-256, checked at commit.
        sha256: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Part {
        session_id: String,
        upload_id: String,
        /// Must equal the bytes received so far (a resend of an earlier part is refused with
        /// the current count).
        offset: u64,
        data_base64: String,
    },
    #[serde(rename_all = "camelCase")]
    Status {
        session_id: String,
        upload_id: String,
    },
    #[serde(rename_all = "camelCase")]
    Commit {
        session_id: String,
        upload_id: String,
    },
    #[serde(rename_all = "camelCase")]
    Abort {
        session_id: String,
        upload_id: String,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum IngestOutcome {
    /// An upload in progress: how many bytes the host has (resume from there).
    #[serde(rename_all = "camelCase")]
    Upload {
        upload_id: String,
        received: u64,
        total_bytes: u64,
    },
    Committed {
        artifact: Artifact,
    },
    Aborted {},
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ArtifactQueryInput {
    #[serde(rename_all = "camelCase")]
    List { session_id: String },
    #[serde(rename_all = "camelCase")]
    Get {
        session_id: String,
        artifact_id: String,
    },
    #[serde(rename_all = "camelCase")]
    Read {
        session_id: String,
        artifact_id: String,
        #[serde(default)]
        offset: u64,
        /// At most 1 MiB (the default).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_bytes: Option<u64>,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ArtifactAnswer {
    List {
        artifacts: Vec<Artifact>,
    },
    Artifact {
        artifact: Option<Artifact>,
    },
    #[serde(rename_all = "camelCase")]
    Chunk {
        total_bytes: u64,
        offset: u64,
        data_base64: String,
        /// `None` at the end.
        next_offset: Option<u64>,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactRef {
    pub session_id: String,
    pub artifact_id: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Deleted {
    pub deleted: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    /// The `messageSeq` of the plan's latest version; 0 without a plan.
    pub revision: u64,
    /// `none`, `proposed`, `approved` or `rejected`.
    pub status: String,
    pub entries: Vec<super::wire::PlanEntry>,
    /// When the latest version was written (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<u64>,
}

impl PlanView {
    /// The `plan_state` frame saying the plan stands so.
    pub fn frame(&self) -> super::wire::FrameBody {
        super::wire::FrameBody::PlanState {
            revision: self.revision,
            status: self.status.clone(),
            entries: self.entries.clone(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanControlInput {
    pub session_id: String,
    pub expected_revision: u64,
    pub action: PlanAction,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PlanAction {
    /// The plan may be carried out: the session leaves plan mode, a pending approval dialog is
    /// answered "allow".
    Approve,
    /// Not this plan: a pending approval dialog is answered "deny"; plan mode stays.
    Reject,
    /// The person's own version of the steps (proposed again; the ACP plan shows it).
    Revise {
        entries: Vec<super::wire::PlanEntry>,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PlanOutcome {
    Committed { plan: PlanView },
    RevisionConflict { expected: u64, actual: u64 },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageReport {
    pub totals: super::wire::TokenUsage,
    /// With prices configured: the session's cost (models without a price count 0 and are
    /// named in `unpricedModels`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<super::wire::Cost>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unpriced_models: Vec<String>,
    pub models: Vec<ModelUsage>,
    /// Oldest first; abandoned turns (a rewind) stay: their tokens were spent.
    pub turns: Vec<TurnUsage>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelUsage {
    pub model: String,
    pub usage: super::wire::TokenUsage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnUsage {
    pub turn_id: String,
    pub usage: super::wire::TokenUsage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abandoned: bool,
}

/// Who a memory entry is for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MemoryScope {
    /// Every session of this user (this host's data dir).
    User,
    /// Sessions whose workspace is this folder.
    Workspace { path: String },
    Session {
        #[serde(rename = "sessionId")]
        session_id: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryEntry {
    pub id: String,
    pub scope: MemoryScope,
    pub text: String,
    /// `user` (a client, `/memory add`) or `agent` (the model's `remember` tool).
    pub source: String,
    pub created_at: u64,
    pub updated_at: u64,
    /// The principal whose note it is (`Maka-Principal` of its `add`, or the owner of the
    /// session it was added for); absent: the machine's user's. Only its owner sees or changes
    /// it, and only its owner's sessions are told it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryQueryInput {
    /// Only what this session's model sees (its owner's user entries, its workspace's, its
    /// own); absent: every entry the caller may see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryView {
    /// The CAS token of the whole memory (starts at 1).
    pub revision: u64,
    pub entries: Vec<MemoryEntry>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryMutateInput {
    pub expected_revision: u64,
    pub change: MemoryChange,
}

/// A change to memory. `add`'s scope names `user`, `workspace` or `session`; the last two are
/// the given session's.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MemoryChange {
    #[serde(rename_all = "camelCase")]
    Add {
        scope: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
    },
    Update {
        id: String,
        text: String,
    },
    Forget {
        id: String,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MemoryOutcome {
    Committed {
        revision: u64,
        /// The entry added or changed (absent for `forget`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        entry: Option<MemoryEntry>,
    },
    RevisionConflict {
        expected: u64,
        actual: u64,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BranchInput {
    pub source_session_id: String,
    pub target_session_id: String,
    /// The last turn to copy; absent: every finished turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through_turn_id: Option<String>,
    /// The source's `revision` the caller saw; a rewind or any other change since is a
    /// `source_revision_conflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_source_revision: Option<u64>,
    /// Defaults to the source's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<Workspace>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_directories: Option<Vec<String>>,
    #[serde(default)]
    pub mcp_servers: Vec<Value>,
    /// Defaults to the source's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<super::wire::SystemPrompt>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BranchOutcome {
    Committed { session: Box<Session> },
    SourceRevisionConflict { expected: u64, actual: u64 },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionCreateInput {
    pub session_id: String,
    pub label: String,
}

/// A point in a session's conversation to rewind to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    pub revision_id: String,
    /// `turn_start` (made by the host as each turn starts) or `named`.
    pub kind: String,
    /// The turn's prompt (first line) or the name given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub created_at: u64,
    /// For `turn_start`: the turn that starts here (abandoning the revision undoes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// Turns after this point (the ones abandoning it would undo).
    pub turns_after: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionList {
    /// Oldest first.
    pub revisions: Vec<Revision>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AbandonInput {
    pub session_id: String,
    pub revision_id: String,
    /// Undo the file changes of the abandoned turns (default true).
    #[serde(default = "yes")]
    pub restore_files: bool,
    /// Restore files changed outside the agent since, too (default false: reported and left).
    #[serde(default)]
    pub force: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AbandonOutcome {
    /// Oldest first; empty when nothing came after the revision.
    pub abandoned_turn_ids: Vec<String>,
    /// Files put back as they were before those turns (absolute paths).
    pub restored: Vec<FileRestore>,
    /// Files left alone, and why.
    pub conflicts: Vec<FileConflict>,
    pub session: Box<Session>,
    /// The session's plan after the rewind (`plan.query`'s view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanView>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileRestore {
    pub path: String,
    /// `written` (the earlier content), `deleted` (the turns created it).
    pub action: String,
    /// Through the editor (`fs/write_text_file`) rather than the disk.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub via_editor: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileConflict {
    pub path: String,
    /// `changed_since` (edited outside the agent after its last change), `cannot_restore`
    /// (the earlier content was not kept: too large or unreadable), `failed` (the write failed).
    pub reason: String,
    pub message: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubmitInput {
    pub session_id: String,
    /// Idempotency: the same id again is the same message.
    pub message_id: String,
    pub content: MessageContent,
}

/// `turn.tool.cancel`: the call to cancel.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCancelInput {
    pub session_id: String,
    pub tool_call_id: String,
}

/// What `turn.tool.cancel` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ToolCancelOutcome {
    /// It was running and cancellable: it ends `cancelled`, the turn goes on.
    Cancelled,
    /// It runs, but cannot be cancelled alone (only its turn can be stopped).
    NotCancellable,
    /// No call with this id runs in the session (never started, or settled already).
    Unknown,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubmitOutcome {
    /// Always `steering`: queued for the running turn's next model step.
    pub disposition: String,
    pub turn_id: String,
}

/// What a running host publishes in its data dir (`host.json`, mode 0600) so that other
/// adapters for the same data dir use it instead of starting a second host.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Discovery {
    pub pid: u32,
    pub port: u16,
    /// The loopback address it listens on.
    pub listen: String,
    pub token: String,
    pub host_epoch: String,
    pub protocol: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnList {
    pub turns: Vec<TurnSummary>,
    /// The client's system prompt the session's turns run with, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<super::wire::SystemPrompt>,
}

/// One turn as a history lists it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSummary {
    pub turn_id: String,
    /// When its first transcript item was written (ms since the epoch).
    pub started_at: u64,
    /// The first line of its prompt (plain text, at most 80 characters); absent for a resumed
    /// run, which has no prompt of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `prompt` or `resume`.
    pub origin: String,
    pub status: super::wire::TurnStatus,
    /// Files the agent's tools wrote or edited in this turn (absolute paths, first change
    /// first).
    #[serde(default)]
    pub files_changed: Vec<String>,
}

/// The line an embedded host prints on stdout once it serves (`maka-acp host`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename = "ready", rename_all = "camelCase")]
pub struct Ready {
    pub port: u16,
    pub host_epoch: String,
    pub pid: u32,
    pub protocol: u32,
}

/// `{}` — an operation that takes or returns nothing. Reads any object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Empty {}

// ---- host -------------------------------------------------------------------------------------

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HelloInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<ProtocolRange>,
    #[serde(default)]
    pub features: Vec<String>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct ProtocolRange {
    pub min: u32,
    pub max: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HelloOutput {
    pub host_epoch: String,
    pub protocol: u32,
    pub host_id: String,
    /// `ready` or `draining`.
    pub state: String,
    #[serde(default)]
    pub features: Vec<String>,
    /// Free-form: the host's limits, for people reading them.
    #[serde(default)]
    pub limits: Value,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostState {
    pub state: String,
    pub host_epoch: String,
    pub active_turns: u64,
    pub open_sessions: u64,
    pub attached_clients: u64,
    pub uptime_ms: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelCatalog {
    /// The model a session without an explicit choice uses: the first model of the first
    /// connection.
    #[serde(default)]
    pub default_target: Option<DefaultTarget>,
    #[serde(default)]
    pub connections: Vec<ModelConnection>,
    /// Why a configured provider could not be used (one sentence each).
    #[serde(default)]
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DefaultTarget {
    pub connection_slug: String,
    pub model: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelConnection {
    pub slug: String,
    #[serde(default)]
    pub label: String,
    #[serde(default = "yes")]
    pub ready: bool,
    #[serde(default)]
    pub models: Vec<ModelEntry>,
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelEntry {
    pub id: String,
    #[serde(default)]
    pub label: String,
    #[serde(default)]
    pub thinking_levels: Vec<String>,
    #[serde(default)]
    pub context_window: Option<u64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SkillList {
    pub skills: Vec<Skill>,
}

/// A slash command the host runs (ACP `available_commands`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Skill {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_hint: Option<String>,
}

// ---- sessions ---------------------------------------------------------------------------------

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRef {
    pub session_id: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OptionalSessionRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateInput {
    pub session_id: String,
    pub workspace: Workspace,
    #[serde(default)]
    pub additional_directories: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<ConfigurationPatch>,
    /// ACP `McpServer` objects, as the client sent them.
    #[serde(default)]
    pub mcp_servers: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<super::wire::SystemPrompt>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionLookup {
    /// `null` for an unknown (or removed) session: not an error.
    pub session: Option<Session>,
    /// Transcript lines that could not be read and were moved aside.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transcript_quarantine: Vec<Value>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default)]
    pub include_archived: bool,
    /// Only sessions with at least one turn (a conversation to resume).
    #[serde(default)]
    pub non_empty: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListInput {
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub filter: ListFilter,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename = "page", rename_all = "camelCase")]
pub struct SessionPage {
    /// Changes whenever any session is created, changed or removed.
    pub revision: u64,
    pub sessions: Vec<Session>,
    pub next_cursor: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenInput {
    pub session_id: String,
    /// MCP servers to (re)connect for this attachment; absent = keep what runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<Value>>,
    /// Replaces the session's stored system prompt; absent = keep it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<super::wire::SystemPrompt>,
}

/// What a client needs to follow a session from `seq`: the durable position and everything in
/// flight that the transcript does not have yet.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenSnapshot {
    pub host_epoch: String,
    pub seq: u64,
    pub session: Session,
    pub active_turn: Option<TurnSnapshot>,
    #[serde(default)]
    pub active_streams: Vec<ActiveStreamView>,
    #[serde(default)]
    pub active_tools: Vec<ActiveTool>,
    #[serde(default)]
    pub pending_interactions: Vec<Interaction>,
    #[serde(default)]
    pub pending_client_calls: Vec<PendingClientCall>,
    #[serde(default)]
    pub usage: Value,
    pub transcript: TranscriptPosition,
    /// The session's goal, if one was ever armed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<super::wire::Goal>,
}

/// Text streamed in the running turn that is not durable yet.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveStreamView {
    /// `text` or `thinking`.
    pub kind: String,
    pub turn_id: String,
    pub message_id: String,
    pub text: String,
}

/// A tool call of the running turn without a result yet.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveTool {
    pub tool_call_id: String,
    pub tool_name: String,
    pub title: String,
    pub activity_kind: String,
    #[serde(default)]
    pub args: Value,
    #[serde(default)]
    pub locations: Vec<super::wire::Location>,
    /// The last 64 KiB of its output so far.
    #[serde(default)]
    pub output_tail: String,
    /// As `tool_start`'s `name` and `parentToolCallId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_call_id: Option<String>,
}

/// A call into the editor waiting for an answer; its input is read with `client.call.input`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingClientCall {
    pub invocation_id: String,
    pub tool_call_id: Option<String>,
    pub service: String,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptPosition {
    pub through_message_seq: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigUpdateInput {
    pub session_id: String,
    pub expected_revision: u64,
    pub patch: ConfigurationPatch,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetadataPatch {
    /// Absent: unchanged; `null`: cleared.
    #[serde(
        default,
        deserialize_with = "some_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub name: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
}

fn some_or_null<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetadataUpdateInput {
    pub session_id: String,
    pub expected_revision: u64,
    pub patch: MetadataPatch,
}

/// The result of a revision-checked update.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CasOutcome {
    Committed { session: Box<Session> },
    RevisionConflict { expected: u64, actual: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    Active,
    Archived,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleInput {
    pub session_id: String,
    pub state: Lifecycle,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoveInput {
    pub session_id: String,
    pub expected_revision: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RemoveOutcome {
    Removed,
    RevisionConflict { expected: u64, actual: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Newer,
    Older,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PageInput {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through_message_seq: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename = "page", rename_all = "camelCase")]
pub struct Page {
    pub through_message_seq: u64,
    pub items: Vec<TranscriptItem>,
    pub next_cursor: Option<String>,
}

// ---- turns ------------------------------------------------------------------------------------

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnStartInput {
    pub session_id: String,
    pub turn_id: String,
    pub content: MessageContent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<usize>,
    /// While a turn runs, wait in the session's queue instead of `session_busy`: answered
    /// `queued`, started when the turns before it have ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queue: bool,
}

// One per turn start: the size difference costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StartOutcome {
    Started {
        turn: TurnSnapshot,
    },
    /// A resume that must not run (`reason` says why).
    Parked {
        reason: String,
    },
    /// `turn.start` with `queue`: a turn runs, so this one waits in the session's queue at
    /// `position` (1: next) and starts when the turns before it have ended.
    #[serde(rename_all = "camelCase")]
    Queued {
        turn_id: String,
        position: usize,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnRef {
    pub session_id: String,
    pub turn_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "disposition", rename_all = "snake_case")]
pub enum ResumeDisposition {
    #[serde(rename_all = "camelCase")]
    Ready {
        source_run_id: String,
        source_turn_id: String,
        source_high_water: u64,
    },
    Parked {
        reason: String,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeStartInput {
    pub session_id: String,
    pub turn_id: String,
    pub source_run_id: String,
    pub source_high_water: u64,
}

// ---- interactions and client calls ------------------------------------------------------------

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnswerInput {
    pub session_id: String,
    pub interaction_id: String,
    pub answer: InteractionAnswer,
}

/// What a host may delegate to the attached client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientService {
    #[serde(rename = "fs.read_text_file")]
    ReadTextFile,
    #[serde(rename = "fs.write_text_file")]
    WriteTextFile,
    #[serde(rename = "terminal")]
    Terminal,
}

impl ClientService {
    pub const fn as_str(self) -> &'static str {
        match self {
            ClientService::ReadTextFile => "fs.read_text_file",
            ClientService::WriteTextFile => "fs.write_text_file",
            ClientService::Terminal => "terminal",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityInput {
    pub session_id: String,
    pub services: Vec<ClientService>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Services {
    pub services: Vec<ClientService>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallResultInput {
    pub session_id: String,
    pub invocation_id: String,
    pub outcome: CallOutcome,
}

/// The client's answer: `ok` with its result, or its error (a JSON-RPC error object, or the
/// message some clients send as a bare string).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CallOutcome {
    pub ok: bool,
    #[serde(default)]
    pub result: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRef {
    pub session_id: String,
    pub invocation_id: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CallInput {
    pub service: String,
    pub input: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_outcomes_keep_their_wire_shape() {
        let mut keys = KEYS.to_vec();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), KEYS.len());
        let conflict = serde_json::to_value(CasOutcome::RevisionConflict {
            expected: 3,
            actual: 4,
        })
        .unwrap();
        assert_eq!(
            conflict,
            serde_json::json!({"kind": "revision_conflict", "expected": 3, "actual": 4})
        );
        let ready: ResumeDisposition = serde_json::from_value(serde_json::json!(
            {"disposition": "ready", "sourceRunId": "r", "sourceTurnId": "t", "sourceHighWater": 9}
        ))
        .unwrap();
        assert!(matches!(
            ready,
            ResumeDisposition::Ready {
                source_high_water: 9,
                ..
            }
        ));
    }
}
