//! A delegation's permission requests: put to the person (or decided by this session's mode),
//! its own "always" options named as its own, the answer one of the options it offered; and
//! what such a dialog showed ([`Shown`]), which alone an earlier "allow" covers.

use super::*;
use crate::acp::types::from_agents::read_object;

impl Turn {
    /// The answer for the agent, and the command the person allowed when the dialog showed
    /// one (it covers that command's `terminal/create`, nothing else).
    pub(super) fn subagent_permission(
        &mut self,
        name: &str,
        asked: &RequestPermission,
        calls: &mut ChildCalls,
    ) -> (PermissionReply, Option<Shown>) {
        use PermissionOptionKind::{AllowAlways, AllowOnce, RejectAlways, RejectOnce};
        let option_of = |kind: PermissionOptionKind| asked.options.iter().find(|o| o.kind == kind);
        let id_of = |kind: PermissionOptionKind| option_of(kind).map(|o| o.option_id.clone());
        let label_of = |kind: PermissionOptionKind| {
            // The agent's words, on one line and short: the dialog says whose they are.
            option_of(kind).map(|o| agent_words(&o.name, 60))
        };
        let tool_call = &asked.tool_call;
        let sub = tool_call.tool_call_id.as_str();
        // The dialog points at the call it is about: shown now if the agent did not announce
        // it first (as codex does for the commands it wants to run).
        let announced_now = !sub.is_empty() && calls.get(sub).is_none();
        let ours = if sub.is_empty() {
            None
        } else {
            self.show_child(name, calls, sub, tool_call, Seen::Dialog)
        };
        let ours = ours.or_else(|| self.delegating.clone()).unwrap_or_default();
        let title = agent_words(tool_call.title.as_deref().unwrap_or("an action"), 120);
        // The agent writes its title; the command its dialog covers is named by the host, as
        // it is (invisible characters spelled out). One that cannot be shown whole and plain —
        // too long, or holding control or invisible characters — covers nothing: its
        // `terminal/create` is asked about again, by the host.
        let shown = Shown::of(tool_call, &self.cwd);
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
                let (allow_always, reject_always) = (label_of(AllowAlways), label_of(RejectAlways));
                let (no_allow_once, no_reject_once) = (
                    option_of(AllowOnce).is_none(),
                    option_of(RejectOnce).is_none(),
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
                    args: tool_call.raw_input.clone(),
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
            (true, true) => id_of(AllowAlways),
            (true, false) => id_of(AllowOnce),
            (false, true) => id_of(RejectAlways),
            (false, false) => id_of(RejectOnce),
        };
        let answer = PermissionReply {
            outcome: match &chosen {
                Some(option_id) => PermissionOutcome::Selected {
                    option_id: option_id.clone(),
                },
                None => PermissionOutcome::Cancelled,
            },
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
    pub(super) fn of(tool_call: &ToolCallUpdate, cwd: &Path) -> Option<Shown> {
        // `rawInput` is the agent's own tool's input (free-form in ACP): only these two
        // fields are looked at, and only in an object.
        let raw = tool_call
            .raw_input
            .as_ref()
            .and_then(|r| read_object::<ShownInput>(r).ok())
            .unwrap_or_default();
        if let Some(c) = raw.command {
            return match c {
                Value::String(s) => Some(Shown::Command(s)),
                Value::Array(words) => Some(Shown::Command(permissions::shell_line(
                    &words.iter().filter_map(Value::as_str).collect::<Vec<_>>(),
                ))),
                _ => None,
            };
        }
        let path = match tool_call.locations.as_deref() {
            Some([one]) => Some(one.path.as_str()),
            _ => raw.path.as_ref().and_then(Value::as_str),
        }?;
        let new_text = tool_call.content.iter().flatten().find_map(|c| match c {
            ToolCallContent::Diff { new_text, .. } => Some(new_text.clone()),
            _ => None,
        });
        Some(Shown::Write(tool_fs::resolve(cwd, path), new_text))
    }
}

/// What [`Shown::of`] reads of a `rawInput`: `command` and `path` as they are (`null` too:
/// a command given as `null` shows nothing, so it covers nothing).
#[derive(Default, Deserialize)]
struct ShownInput {
    #[serde(default, deserialize_with = "present")]
    command: Option<Value>,
    #[serde(default)]
    path: Option<Value>,
}

/// A field that is there, whatever its value (`null` included).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}
