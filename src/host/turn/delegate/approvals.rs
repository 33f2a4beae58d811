//! A delegation's permission requests: put to the person (or decided by this session's mode),
//! its own "always" options named as its own, the answer one of the options it offered; and
//! what such a dialog showed ([`Shown`]), which alone an earlier "allow" covers.

use super::*;

impl Turn {
    /// The answer for the agent, and the command the person allowed when the dialog showed
    /// one (it covers that command's `terminal/create`, nothing else).
    pub(super) fn subagent_permission(
        &mut self,
        name: &str,
        params: &Value,
        calls: &mut ChildCalls,
    ) -> (Value, Option<Shown>) {
        let options = params
            .get("options")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let option_of = |kind: &str| {
            options
                .iter()
                .find(|o| o.get("kind").and_then(Value::as_str) == Some(kind))
        };
        let id_of = |kinds: &[&str]| {
            kinds
                .iter()
                .find_map(|k| option_of(k).and_then(|o| o.get("optionId").cloned()))
        };
        let label_of = |kind: &str| {
            // The agent's words, on one line and short: the dialog says whose they are.
            option_of(kind)
                .map(|o| agent_words(o.get("name").and_then(Value::as_str).unwrap_or(kind), 60))
        };
        let tool_call = params.get("toolCall").cloned().unwrap_or(Value::Null);
        let sub = tool_call
            .get("toolCallId")
            .and_then(Value::as_str)
            .unwrap_or("");
        // The dialog points at the call it is about: shown now if the agent did not announce
        // it first (as codex does for the commands it wants to run).
        let announced_now = !sub.is_empty() && calls.get(sub).is_none();
        let ours = if sub.is_empty() {
            None
        } else {
            self.show_child(name, calls, sub, &tool_call, Seen::Dialog)
        };
        let ours = ours.or_else(|| self.delegating.clone()).unwrap_or_default();
        let title = agent_words(
            tool_call
                .get("title")
                .and_then(Value::as_str)
                .unwrap_or("an action"),
            120,
        );
        // The agent writes its title; the command its dialog covers is named by the host, as
        // it is (invisible characters spelled out). One that cannot be shown whole and plain —
        // too long, or holding control or invisible characters — covers nothing: its
        // `terminal/create` is asked about again, by the host.
        let shown = Shown::of(&tool_call, &self.cwd);
        let title = match &shown {
            Some(Shown::Command(c)) if title != *c => {
                format!("{title} (runs `{}`)", spelled_out(c, MAX_SHOWN_COMMAND))
            }
            _ => title,
        };
        // Only printable ASCII reads the same to the person as to `sh` (a no-break space or
        // a Hangul filler looks like a space and is part of a word).
        let shown = shown.filter(|s| match s {
            Shown::Command(c) => {
                c.len() <= MAX_SHOWN_COMMAND
                    && c.chars().all(|ch| ch == ' ' || ch.is_ascii_graphic())
            }
            Shown::Write(..) => true,
        });
        let (mode, planning) = {
            let st = self.cell.lock();
            let c = &st.session.configuration;
            (
                c.permission_mode,
                c.collaboration_mode == CollaborationMode::Plan,
            )
        };
        // (allowed, lasting in the agent)
        let (allowed, lasting) = match mode {
            // Plan mode: nothing is done before the plan is approved (which ends plan mode).
            _ if planning => (false, false),
            PermissionMode::Bypass => (true, false),
            PermissionMode::Explore => (false, false),
            PermissionMode::Ask => {
                // The agent's own "always" choices reach the person, named as the agent's.
                let (allow_always, reject_always) =
                    (label_of("allow_always"), label_of("reject_always"));
                let (no_allow_once, no_reject_once) = (
                    option_of("allow_once").is_none(),
                    option_of("reject_once").is_none(),
                );
                let rule = (allow_always.is_some()
                    || reject_always.is_some()
                    || no_allow_once
                    || no_reject_once)
                    .then(|| RuleTarget::InAgent {
                        name: name.to_string(),
                        allow_always,
                        reject_always,
                        no_allow_once,
                        no_reject_once,
                    });
                let request = InteractionRequest::Permission {
                    tool_call_id: ours.clone(),
                    tool_name: "delegate".into(),
                    title: format!("{name}: {title}"),
                    review: Review::Tool,
                    args: tool_call.get("rawInput").cloned(),
                    locations: vec![],
                    diff: None,
                    remember_for_turn_allowed: false,
                    rule,
                };
                match self.interact(request) {
                    Some(InteractionAnswer::Permission {
                        decision, remember, ..
                    }) => (
                        decision == Decision::Allow,
                        remember == Some(RuleScope::Workspace),
                    ),
                    _ => (false, false),
                }
            }
        };
        // Only what was picked: a lasting option is never the stand-in for a missing one-off
        // (the agent would keep it); without the option, the answer is `cancelled`.
        let chosen = match (allowed, lasting) {
            (true, true) => id_of(&["allow_always"]),
            (true, false) => id_of(&["allow_once"]),
            (false, true) => id_of(&["reject_always"]),
            (false, false) => id_of(&["reject_once"]),
        };
        let answer = match &chosen {
            Some(option_id) => json!({"outcome": {"outcome": "selected", "optionId": option_id}}),
            None => json!({"outcome": {"outcome": "cancelled"}}),
        };
        if announced_now && (!allowed || chosen.is_none()) {
            // It will not run: settled now, not left open until the delegation ends.
            if calls.settle(sub).is_some() {
                self.finish_tool(
                    &ours,
                    ToolOutcome::failed(
                        match mode {
                            _ if chosen.is_none() => {
                                "Not run: the agent offered no such choice, so it was told no."
                            }
                            _ if planning => "Not allowed before the plan is approved.",
                            PermissionMode::Explore => "Not allowed in explore mode.",
                            _ => "The user did not allow it.",
                        }
                        .into(),
                    ),
                    false,
                    0,
                );
            }
        }
        (answer, shown.filter(|_| allowed && chosen.is_some()))
    }
}

/// The longest command a subagent's dialog can cover (longer ones are asked about again).
pub(super) const MAX_SHOWN_COMMAND: usize = 500;

/// Characters a person cannot see in a dialog: controls, and the zero-width and direction
/// marks that can make text read otherwise than it runs.
pub(super) fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{061c}' | '\u{feff}')
        // Spaces that are not the space `sh` splits on, and fillers that look like one.
        || (c.is_whitespace() && c != ' ')
        || matches!(c, '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}')
}

/// An agent's words for a title or label: on one line, nothing invisible, at most `max`
/// characters (cut at a word).
pub(super) fn agent_words(s: &str, max: usize) -> String {
    let plain: String = s
        .chars()
        .map(|c| if invisible(c) { ' ' } else { c })
        .collect();
    tool_fs::cut_words(plain.trim(), max)
}

/// A command as a dialog shows it: invisible characters spelled out (`\n`, `\u{202e}`), at
/// most `max` characters (then "…").
pub(super) fn spelled_out(c: &str, max: usize) -> String {
    let mut out = String::new();
    for ch in c.chars() {
        if out.chars().count() >= max {
            out.push('…');
            break;
        }
        match ch {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            ch if invisible(ch) => out.push_str(&format!("\\u{{{:x}}}", ch as u32)),
            ch => out.push(ch),
        }
    }
    out
}

/// What a subagent's permission dialog showed the person: one command, or one file (with the
/// new content when the dialog showed it as a diff: only then does it cover a write of that
/// very content).
#[derive(Debug, PartialEq)]
pub(super) enum Shown {
    Command(String),
    Write(PathBuf, Option<String>),
}

impl Shown {
    /// From the dialog's `toolCall`: its `rawInput.command` (a string or its words), else the
    /// one file it names (`rawInput.path` or its single location), resolved.
    pub(super) fn of(tool_call: &Value, cwd: &Path) -> Option<Shown> {
        if let Some(c) = tool_call.pointer("/rawInput/command") {
            return match c {
                Value::String(s) => Some(Shown::Command(s.clone())),
                Value::Array(words) => Some(Shown::Command(permissions::shell_line(
                    &words.iter().filter_map(Value::as_str).collect::<Vec<_>>(),
                ))),
                _ => None,
            };
        }
        let locations = tool_call.get("locations").and_then(Value::as_array);
        let path = match locations.map(Vec::as_slice) {
            Some([one]) => one.get("path").and_then(Value::as_str),
            _ => tool_call.pointer("/rawInput/path").and_then(Value::as_str),
        }?;
        let new_text = tool_call
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c.get("type").and_then(Value::as_str) == Some("diff"))
            .and_then(|c| c.get("newText").and_then(Value::as_str))
            .map(String::from);
        Some(Shown::Write(tool_fs::resolve(cwd, path), new_text))
    }
}
