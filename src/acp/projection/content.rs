//! The pieces an update is made of: tool kinds, locations, content blocks, command output.

use crate::acp::types::{
    PlanEntry, PlanPriority, PlanStatus, ToolCallContent, ToolCallLocation, ToolKind,
};
use crate::host_api::wire::{self, FileDiff, Location, ToolResultContent, ToolStatus};
use serde_json::Value;
use std::collections::HashMap;

/// Host activity kind → ACP `ToolKind` (the plan tool is never shown as a call).
pub fn tool_kind(activity_kind: &str) -> ToolKind {
    match activity_kind {
        "read" => ToolKind::Read,
        "edit" => ToolKind::Edit,
        "search" | "explore" | "websearch" => ToolKind::Search,
        "command" | "computer" => ToolKind::Execute,
        "webfetch" | "browser" => ToolKind::Fetch,
        _ => ToolKind::Other,
    }
}

/// Absolute paths only (ACP locations are absolute); a line 0 means "no line".
pub fn locations(locations: &[Location]) -> Vec<ToolCallLocation> {
    locations
        .iter()
        .filter(|l| l.path.starts_with('/'))
        .map(|l| ToolCallLocation {
            path: l.path.clone(),
            line: l.line.filter(|n| *n > 0).map(u64::from),
        })
        .collect()
}

pub fn diff(d: &FileDiff) -> ToolCallContent {
    ToolCallContent::Diff {
        path: d.path.clone(),
        old_text: d.old_text.clone(),
        new_text: d.new_text.clone(),
    }
}

/// Command output as a console block: `$ command`, the (tail of the) output, then the verdict.
pub fn fenced_output(
    command: Option<&str>,
    output: &str,
    truncated: bool,
    exit: Option<&str>,
) -> String {
    let mut s = String::from("```console\n");
    if let Some(c) = command {
        s.push_str(&format!("$ {c}\n"));
    }
    if truncated {
        s.push_str("[… earlier output truncated]\n");
    }
    // A fence inside the output must not end ours.
    s.push_str(&output.replace("```", "ˋˋˋ"));
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s.push_str("```");
    if let Some(e) = exit {
        s.push('\n');
        s.push_str(e);
    }
    s
}

/// How a command ended, in words ("Exit code 1", "Killed by SIGTERM", …).
pub fn terminal_verdict(
    status: ToolStatus,
    exit_code: Option<i32>,
    signal: Option<&str>,
    timed_out: bool,
) -> String {
    if timed_out {
        "Timed out: the command was killed.".to_string()
    } else if status == ToolStatus::Cancelled {
        "Cancelled: the command was killed.".to_string()
    } else {
        match (exit_code, signal) {
            (Some(c), _) => format!("Exit code {c}"),
            (None, Some(s)) => format!("Killed by {s}"),
            (None, None) => "Exit status unknown: the editor did not report one.".to_string(),
        }
    }
}

/// What a tool's result shows.
pub fn result_content(result: &ToolResultContent, status: ToolStatus) -> Vec<ToolCallContent> {
    match result {
        ToolResultContent::Text { text } | ToolResultContent::Agent { text, .. } => {
            vec![ToolCallContent::text(text)]
        }
        ToolResultContent::FileEdit { diff: d } => vec![diff(d)],
        ToolResultContent::FileWrite { diff: Some(d), .. } => vec![diff(d)],
        ToolResultContent::FileWrite {
            path,
            bytes,
            diff: None,
        } => vec![ToolCallContent::text(format!(
            "Wrote {bytes} bytes to {path}"
        ))],
        ToolResultContent::Terminal {
            command,
            output,
            output_truncated,
            exit_code,
            signal,
            timed_out,
            full_output_artifact_id,
            ..
        } => {
            let verdict = terminal_verdict(status, *exit_code, signal.as_deref(), *timed_out);
            let mut text = fenced_output(Some(command), output, *output_truncated, Some(&verdict));
            if let Some(id) = full_output_artifact_id {
                // Where the whole output is (`_maka/artifact/read`).
                text.push_str(&format!("\nWhole output: maka-artifact://{id}"));
            }
            vec![ToolCallContent::text(text)]
        }
        ToolResultContent::Json { value } => {
            let text = match value.get("answers").and_then(Value::as_array) {
                Some(answers) => answers
                    .iter()
                    .map(|a| a.as_str().unwrap_or("(no answer)").to_string())
                    .collect::<Vec<_>>()
                    .join("\n"),
                None => value.to_string(),
            };
            vec![ToolCallContent::text(text)]
        }
    }
}

/// The files a result touched.
pub fn result_locations(result: &ToolResultContent) -> Option<Vec<ToolCallLocation>> {
    let path = match result {
        ToolResultContent::FileEdit { diff } => &diff.path,
        ToolResultContent::FileWrite { path, .. } => path,
        _ => return None,
    };
    Some(vec![ToolCallLocation {
        path: path.clone(),
        line: None,
    }])
}

/// The host's plan entries; unknown priorities and statuses read as the defaults.
pub fn plan(entries: &[wire::PlanEntry]) -> Vec<PlanEntry> {
    entries
        .iter()
        .map(|e| PlanEntry {
            content: e.content.clone(),
            priority: match e.priority.as_str() {
                "high" => PlanPriority::High,
                "low" => PlanPriority::Low,
                _ => PlanPriority::Medium,
            },
            status: match e.status.as_str() {
                "in_progress" => PlanStatus::InProgress,
                "completed" => PlanStatus::Completed,
                _ => PlanStatus::Pending,
            },
        })
        .collect()
}

/// Milliseconds since the epoch → `2026-11-30T02:34:47.123Z`.
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// The part of a text delta not shown yet (§6.1 of the host protocol: `startOffset` is the
/// byte length already sent for that message), or `None`; `shown` counts it. Both versions'
/// projections use it.
pub(crate) fn unseen<'t>(
    shown: &mut HashMap<String, u64>,
    message_id: &str,
    start: u64,
    text: &'t str,
) -> Option<&'t str> {
    if !shown.contains_key(message_id) {
        shown.insert(message_id.to_string(), 0);
    }
    let seen = shown.get_mut(message_id)?;
    let end = start + text.len() as u64;
    if text.is_empty() || end <= *seen {
        return None;
    }
    let mut skip = seen.saturating_sub(start) as usize;
    while !text.is_char_boundary(skip) {
        skip += 1;
    }
    *seen = end;
    Some(&text[skip..]).filter(|t| !t.is_empty())
}
