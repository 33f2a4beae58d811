//! The durable transcript: one [`TranscriptItem`] per line of `transcript.jsonl`.

use super::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
        /// Added to a running turn (`turn.message.submit`), not the prompt that started it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        steered: bool,
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
        /// A subagent's tool call: the `delegate` call it ran under (not the model's own call).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_tool_call_id: Option<String>,
        /// The tool's name as clients show it (ACP `ToolCall.name`) when it is not `toolName`:
        /// an MCP tool's `<server>/<tool>`, a subagent's own tool as its agent named it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolResult {
        tool_call_id: String,
        status: ToolStatus,
        result: ToolResultContent,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        truncated: bool,
        /// The tool passed its gate and ran (live: a `tool_running` frame before the result).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        ran: bool,
    },
    /// Something the person is told that is not part of the model's conversation (an MCP
    /// server that did not start, a provider retry): replayed as its `notice` frame, never
    /// sent to the model.
    Notice(Notice),
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
        failure_class: Option<FailureClass>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure_message: Option<String>,
        /// For a resumed run: the interrupted run it continues.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resumed_from_run_id: Option<String>,
        /// The goal the run works toward (origin `goal`, or a resume of such a run), on its
        /// `running` record: what a resume carries over.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        goal_id: Option<String>,
    },
    /// A summary replacing older context (`/compact`, or automatic compaction). The model's
    /// context is then the summary followed by the items after `throughMessageSeq` (this one
    /// excepted), or, without it, by the items after this one.
    #[serde(rename_all = "camelCase")]
    Summary {
        text: String,
        /// Empty in items written before compactions had ids (they are `c<messageSeq>`).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        compaction_id: String,
        #[serde(default)]
        trigger: CompactionTrigger,
        /// The last item the summary stands for (automatic compaction keeps the running
        /// turn's items after it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        through_message_seq: Option<u64>,
        /// What a client that shows no compactions was shown (none in items written before:
        /// their `/compact` reply is an `assistant` item of its own).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fallback: Option<Fallback>,
    },
    /// A named point to rewind to (`session.revision.create`); its `messageSeq` is where it
    /// stands. Every turn's start is also a revision (`rev_<turnId>`) without an item.
    #[serde(rename_all = "camelCase")]
    Revision {
        revision_id: String,
        label: String,
    },
    /// The person's decision on the plan proposed at `messageSeq` `revision` (empty
    /// `turnId`: `plan.control`, or the approval dialog).
    PlanDecision {
        revision: u64,
        /// `approved` or `rejected`.
        status: String,
    },
    /// What one model call used (`turnId` of the item is empty: usage stays counted when its
    /// turn is abandoned — it was spent).
    #[serde(rename_all = "camelCase")]
    Usage {
        of_turn_id: String,
        model: String,
        usage: TokenUsage,
    },
    /// A rewind (`session.revision.abandon`): these turns left the model's context and the
    /// replay. Their items stay in the file, before this marker.
    #[serde(rename_all = "camelCase")]
    Rewind {
        revision_id: String,
        abandoned_turn_ids: Vec<String>,
    },
    /// An item of a kind this build does not know (written by a newer host): kept in the file
    /// as it is, skipped by replay and by the model's context.
    #[serde(other)]
    Unknown,
}
