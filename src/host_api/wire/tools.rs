//! Tool calls: locations, diffs, results, and how they ended.

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
        /// The whole output (when `output` is only its tail), stored as a session artifact.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        full_output_artifact_id: Option<String>,
    },
    Json {
        value: Value,
    },
    /// One tool call of a subagent: what it showed (its content, else what its raw output or
    /// display terminal carried) as text, and its `rawOutput` exactly as the agent sent it.
    #[serde(rename_all = "camelCase")]
    Agent {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        raw_output: Option<Value>,
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
    /// Input tokens served from the provider's cache (part of `inputTokens`).
    #[serde(default)]
    pub cached_tokens: u64,
}

impl TokenUsage {
    pub fn new(input: u64, output: u64, cached: u64) -> TokenUsage {
        TokenUsage {
            input_tokens: input,
            output_tokens: output,
            reasoning_tokens: 0,
            cached_tokens: cached,
        }
    }

    /// Saturating: the counts come from a provider or a host, not from this process.
    pub fn add(&mut self, other: &TokenUsage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
    }
}

/// An amount of money (ACP's `Cost`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub amount: f64,
    pub currency: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextUsage {
    pub used_tokens: u64,
    pub window_tokens: u64,
}
