//! What the host tells the person outside the conversation, one function per kind of notice:
//! the sentence, its severity, and what a client that shows no notices sees instead (today's
//! agent text or thought, or nothing). Sent and kept by [`super::session::SessionCell::notice`].

use crate::host_api::wire::{Notice, NoticeFallback, NoticeSeverity};

fn notice(
    message_id: String,
    severity: NoticeSeverity,
    title: String,
    otherwise: NoticeFallback,
    text: String,
) -> Notice {
    Notice {
        message_id,
        severity,
        title,
        description: None,
        otherwise,
        text,
    }
}

/// A model call failed and is retried: a thought for other clients, so the person does not
/// stare at nothing (ACP's baseline has no status update). `call`: which of the turn's model
/// calls, when not its first step's (attempts count from 1 in each call, so each needs its own
/// ids: a later step's number, a compaction's id).
pub fn provider_retry(
    turn_id: &str,
    call: Option<&str>,
    attempt: u64,
    delay_ms: u64,
    reason: &str,
) -> Notice {
    let why = if reason.is_empty() {
        "it failed"
    } else {
        reason
    };
    let said = format!(
        "The model provider did not answer ({why}); retrying in {} (attempt {} of 5).",
        wait_words(delay_ms),
        attempt + 1
    );
    let message_id = match call {
        None => format!("retry_{turn_id}_{attempt}"),
        Some(call) => format!("retry_{turn_id}_{call}_{attempt}"),
    };
    notice(
        message_id,
        NoticeSeverity::Warning,
        said.clone(),
        NoticeFallback::Thought,
        format!("{said}\n"),
    )
}

/// MCP servers that did not start, died or cannot list their tools (each told once): one
/// notice, agent text for other clients.
pub fn mcp_problems(message_id: String, problems: &[String]) -> Notice {
    let text = format!("⚠ {}\n\n", problems.join("\n⚠ "));
    let (title, description) = match problems {
        [one] => (sentence(one), None),
        _ => (
            format!(
                "{} problems with this session's MCP servers: their tools are missing this turn.",
                problems.len()
            ),
            Some(
                problems
                    .iter()
                    .map(|p| sentence(p))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        ),
    };
    Notice {
        description,
        ..notice(
            message_id,
            NoticeSeverity::Warning,
            title,
            NoticeFallback::Message,
            text,
        )
    }
}

/// A kept permission rule decided a call without asking (told only to clients that show
/// notices: nobody else was ever told).
pub fn rule_decided(
    message_id: String,
    allowed: bool,
    rule: &str,
    session_only: bool,
    tool_title: &str,
) -> Notice {
    let verb = if allowed { "Allowed" } else { "Refused" };
    let scope = if session_only {
        "for this session"
    } else {
        "in this workspace"
    };
    let mut n = notice(
        message_id,
        if allowed {
            NoticeSeverity::Info
        } else {
            NoticeSeverity::Warning
        },
        format!("{verb} by your rule: {rule} {scope}."),
        NoticeFallback::Nothing,
        String::new(),
    );
    n.description = Some(format!("{tool_title} (the rules: /permissions)"));
    n
}

/// A rule the person chose to keep could not be saved: agent text for other clients.
pub fn rule_not_saved(message_id: String, what: &str, why: &str) -> Notice {
    let text = format!("Could not save the rule for {what} ({why}); it was not kept.");
    notice(
        message_id,
        NoticeSeverity::Error,
        text.clone(),
        NoticeFallback::Message,
        text,
    )
}

/// A goal stopped at one of its limits (`turn_limit`, `token_limit`, `time_limit`).
pub fn goal_limit(message_id: String, reason: &str, limit: u64) -> Notice {
    let what = match reason {
        "turn_limit" => format!("{limit} turns"),
        "token_limit" => format!("{limit} tokens"),
        _ => format!("{limit} minutes"),
    };
    let mut n = notice(
        message_id,
        NoticeSeverity::Warning,
        format!("The goal stopped at its limit of {what} before it was met."),
        NoticeFallback::Nothing,
        String::new(),
    );
    n.description = Some("Resume it with /goal resume, or set a new one.".into());
    n
}

/// An instruction file skipped or cut, an agent declaration that could not be read (each told
/// once per session).
pub fn file_problem(message_id: String, problem: &str) -> Notice {
    notice(
        message_id,
        NoticeSeverity::Warning,
        sentence(problem),
        NoticeFallback::Nothing,
        String::new(),
    )
}

/// `text` as a sentence: a capital first letter and a final full stop.
fn sentence(text: &str) -> String {
    let t = text.trim();
    let mut chars = t.chars();
    let mut out: String = match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => return String::new(),
    };
    if !out.ends_with(['.', '!', '?']) {
        out.push('.');
    }
    out
}

/// A wait as a person reads it, exactly: "500 ms", "2 s", "1.5 s".
fn wait_words(ms: u64) -> String {
    match ms {
        ms if ms < 1000 => format!("{ms} ms"),
        ms if ms % 1000 == 0 => format!("{} s", ms / 1000),
        ms => format!("{:.1} s", ms as f64 / 1000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_read_as_sentences_and_fall_back_as_before() {
        let r = provider_retry("t1", None, 1, 500, "HTTP 500");
        assert_eq!(
            provider_retry("t1", Some("3"), 1, 500, "").message_id,
            "retry_t1_3_1"
        );
        assert_eq!(
            r.text,
            "The model provider did not answer (HTTP 500); retrying in 500 ms (attempt 2 of 5).\n"
        );
        assert_eq!(r.title, r.text.trim_end());
        assert_eq!(
            (r.message_id.as_str(), r.otherwise),
            ("retry_t1_1", NoticeFallback::Thought)
        );
        assert_eq!(wait_words(2000), "2 s");
        assert_eq!(wait_words(1500), "1.5 s");
        let one = mcp_problems("n1".into(), &["MCP server `x` did not start: gone".into()]);
        assert_eq!(one.title, "MCP server `x` did not start: gone.");
        assert_eq!(one.text, "⚠ MCP server `x` did not start: gone\n\n");
        let two = mcp_problems("n2".into(), &["a failed".into(), "b died.".into()]);
        assert_eq!(two.text, "⚠ a failed\n⚠ b died.\n\n");
        assert_eq!(two.description.as_deref(), Some("A failed.\nB died."));
        let rule = rule_decided(
            "n3".into(),
            true,
            "commands starting with `cargo test`",
            false,
            "Run cargo test",
        );
        assert_eq!(
            rule.title,
            "Allowed by your rule: commands starting with `cargo test` in this workspace."
        );
        assert_eq!(rule.otherwise, NoticeFallback::Nothing);
    }
}
