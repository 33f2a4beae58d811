//! A subagent's tool calls as tool calls of the delegating session: each gets its own id under
//! the delegate call, derived from the agent's `toolCallId` (so a replay shows the same ids),
//! and what the agent showed of it is kept as ACP defines it — a `content` replaces the earlier
//! one, `rawOutput` likewise, the display-only terminal (`_meta.terminal_output`) appends — so a
//! call that settles with no content of its own still shows what it printed.

use crate::acp::types::{ContentBlock, ToolCallContent, ToolCallUpdate};
use crate::host_api::wire::ToolResultContent;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// The most of one call's text kept (its tail).
const TEXT_LIMIT: usize = 48 * 1024;
/// A `rawOutput` larger than this (as JSON) is not kept; its text still is.
const RAW_LIMIT: usize = 256 * 1024;
/// The longest part of an agent's id used as it is in ours.
const ID_PART: usize = 64;
/// The most tool calls of one delegation shown; later ones are not (the log says so).
const MAX_CALLS: usize = 1000;

/// One open call of the agent.
#[derive(Default)]
struct Child {
    ours: String,
    /// Its `content` as last sent, as text (`None`: it sent none).
    content: Option<String>,
    /// What `_meta.terminal_output` streamed for it.
    terminal: String,
    raw_output: Option<Value>,
    truncated: bool,
    /// Known only from a permission request: the agent never announced or updated it.
    dialog_only: bool,
}

/// The open calls of one delegation, by the agent's `toolCallId`.
pub struct ChildCalls {
    parent: String,
    open: HashMap<String, Child>,
    /// How many ids were given out per base id (an agent that reuses a settled id gets a new
    /// one: `~2`, `~3`, …).
    used: HashMap<String, usize>,
    /// The agent's ids of settled calls: a late update of one is not a new call.
    settled: HashSet<String>,
}

/// How a call of the agent is seen.
#[derive(Clone, Copy, PartialEq)]
pub enum Seen {
    /// In a `tool_call`: a new call, even when its id was used before.
    Announced,
    /// In a `tool_call_update`.
    Updated,
    /// In a permission request.
    Dialog,
}

/// How a settled call is shown: its text and `rawOutput`.
pub struct Settled {
    pub ours: String,
    pub result: ToolResultContent,
    pub truncated: bool,
}

impl ChildCalls {
    pub fn new(parent: &str) -> ChildCalls {
        ChildCalls {
            parent: parent.to_string(),
            open: HashMap::new(),
            used: HashMap::new(),
            settled: HashSet::new(),
        }
    }

    /// Our id for the agent's open call `sub`.
    pub fn get(&self, sub: &str) -> Option<&str> {
        self.open.get(sub).map(|c| c.ours.as_str())
    }

    /// Our id for the agent's call `sub`, and whether it is new (to be announced): `<delegate
    /// call>.<its id>`, its id as it is when short and plain (letters, digits, `-_:`), else a
    /// digest of it; a call with an id already given out in this delegation gets `~2`, `~3`, ….
    /// `None`: not shown (a late update of a settled call, or past [`MAX_CALLS`]).
    pub fn open(&mut self, sub: &str, seen: Seen) -> Option<(String, bool)> {
        if let Some(c) = self.open.get_mut(sub) {
            c.dialog_only &= seen == Seen::Dialog;
            return Some((c.ours.clone(), false));
        }
        if seen == Seen::Updated && self.settled.contains(sub) {
            return None;
        }
        let count: usize = self.used.values().sum();
        if count >= MAX_CALLS {
            if count == MAX_CALLS {
                log::warn!("a subagent made over {MAX_CALLS} tool calls in one delegation; the rest are not shown");
                self.used.insert(String::new(), 1);
            }
            return None;
        }
        let plain = !sub.is_empty()
            && sub.len() <= ID_PART
            && sub
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_:".contains(c));
        let part = if plain {
            sub.to_string()
        } else {
            format!("h{}", &crate::host::codec::sha256_hex(sub.as_bytes())[..16])
        };
        let base = format!("{}.{part}", self.parent);
        let n = self.used.entry(base.clone()).or_insert(0);
        *n += 1;
        let ours = if *n == 1 { base } else { format!("{base}~{n}") };
        self.open.insert(
            sub.to_string(),
            Child {
                ours: ours.clone(),
                dialog_only: seen == Seen::Dialog,
                ..Child::default()
            },
        );
        Some((ours, true))
    }

    /// Takes in what a `tool_call` / `tool_call_update` of open call `sub` carries.
    /// `terminal_text` gives what a terminal we served it printed.
    pub fn absorb(
        &mut self,
        sub: &str,
        u: &ToolCallUpdate,
        terminal_text: impl Fn(&str) -> Option<String>,
    ) {
        let Some(c) = self.open.get_mut(sub) else {
            return;
        };
        if let Some(content) = &u.content {
            let mut text = content
                .iter()
                .filter_map(|c| match c {
                    ToolCallContent::Content {
                        content: ContentBlock::Text { text },
                    } => Some(text.clone()),
                    ToolCallContent::Diff { path, .. } => Some(format!("Changed {path}")),
                    // A command it ran in a terminal we gave it: what it printed.
                    ToolCallContent::Terminal { terminal_id } => terminal_text(terminal_id),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n");
            c.truncated |= crate::host_api::keep_tail(&mut text, TEXT_LIMIT);
            c.content = Some(text);
        }
        if let Some(raw) = &u.raw_output {
            if raw.to_string().len() <= RAW_LIMIT {
                c.raw_output = Some(raw.clone());
            } else {
                log::info!("a subagent's rawOutput of over {RAW_LIMIT} bytes is not kept");
                c.raw_output = None;
                c.truncated = true;
            }
        }
        if let Some(data) = u.meta.as_ref().and_then(DisplayTerminal::data) {
            c.terminal.push_str(&data);
            c.truncated |= crate::host_api::keep_tail(&mut c.terminal, TEXT_LIMIT);
        }
    }

    /// Call `sub` settled: what it shows — its content; when it has none, what its display
    /// terminal printed, else the text its raw output carries — and its raw output.
    pub fn settle(&mut self, sub: &str) -> Option<Settled> {
        let c = self.open.remove(sub)?;
        self.settled.insert(sub.to_string());
        let text = match c.content.filter(|t| !t.trim().is_empty()) {
            Some(t) => t,
            None if !c.terminal.is_empty() => c.terminal,
            None => c.raw_output.as_ref().and_then(raw_text).unwrap_or_default(),
        };
        let mut text = text;
        let truncated = c.truncated | crate::host_api::keep_tail(&mut text, TEXT_LIMIT);
        Some(Settled {
            ours: c.ours,
            result: ToolResultContent::Agent {
                text,
                raw_output: c.raw_output,
            },
            truncated,
        })
    }

    /// The calls still open (all are closed now): their ids, and whether the agent only ever
    /// named them in a permission request.
    pub fn drain(&mut self) -> Vec<(String, bool)> {
        self.open
            .drain()
            .map(|(_, c)| (c.ours, c.dialog_only))
            .collect()
    }
}

/// `_meta.terminal_output` of a tool call update: what a display-only terminal printed
/// (claude-agent-acp's, the extension Zed reads).
#[derive(Deserialize)]
struct DisplayTerminal {
    terminal_output: TerminalOutput,
}

#[derive(Deserialize)]
struct TerminalOutput {
    data: String,
}

impl DisplayTerminal {
    /// The text in `meta`, when it carries some (any other `_meta` is not ours to read).
    fn data(meta: &Value) -> Option<String> {
        DisplayTerminal::deserialize(meta)
            .ok()
            .map(|d| d.terminal_output.data)
    }
}

/// The text a raw output carries: itself when it is a string, else the first of the fields
/// agents put a command's output in (codex's `formatted_output` / `aggregated_output`,
/// `output`, `stdout` with `stderr`, `text`, `content`).
fn raw_text(raw: &Value) -> Option<String> {
    if let Some(s) = raw.as_str() {
        return Some(s.to_string());
    }
    let field = |k: &str| {
        raw.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from)
    };
    for k in ["formatted_output", "aggregated_output", "output"] {
        if let Some(s) = field(k) {
            return Some(s);
        }
    }
    match (field("stdout"), field("stderr")) {
        (Some(o), Some(e)) => return Some(format!("{o}\n{e}")),
        (Some(s), None) | (None, Some(s)) => return Some(s),
        _ => {}
    }
    field("text").or_else(|| field("content"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    impl ChildCalls {
        fn open_call(&mut self, sub: &str) -> (String, bool) {
            self.open(sub, Seen::Announced).unwrap()
        }

        /// [`ChildCalls::absorb`] of `update` (the fields of a `tool_call_update` of `sub`).
        fn take_in(&mut self, sub: &str, update: &Value, f: impl Fn(&str) -> Option<String>) {
            let mut update = update.clone();
            update["toolCallId"] = json!(sub);
            self.absorb(sub, &serde_json::from_value(update).unwrap(), f)
        }
    }

    fn text(s: &Settled) -> &str {
        match &s.result {
            ToolResultContent::Agent { text, .. } => text,
            _ => "",
        }
    }

    #[test]
    fn each_call_has_its_own_stable_id_and_a_reused_id_a_new_one() {
        let mut c = ChildCalls::new("call_7");
        assert_eq!(c.open_call("a"), ("call_7.a".into(), true));
        assert_eq!(
            c.open_call("a"),
            ("call_7.a".into(), false),
            "still open: the same"
        );
        assert_eq!(c.open_call("b").0, "call_7.b");
        assert!(c.settle("a").is_some());
        assert_eq!(
            c.open_call("a").0,
            "call_7.a~2",
            "settled, then reused by the agent"
        );
        let odd = c.open_call("exec/1 with spaces").0;
        assert!(
            odd.starts_with("call_7.h") && odd.len() == "call_7.h".len() + 16,
            "{odd}"
        );
        assert_eq!(
            ChildCalls::new("call_7").open_call("exec/1 with spaces").0,
            odd,
            "a digest: stable"
        );
        let long = "x".repeat(65);
        assert!(c.open_call(&long).0.starts_with("call_7.h"));
        assert!(
            c.open_call("a.b").0.starts_with("call_7.h"),
            "a dot is not plain"
        );
        // A late update of a settled call is not a new one; a new `tool_call` with its id is.
        assert!(c.settle("b").is_some());
        assert!(c.open("b", Seen::Updated).is_none());
        assert_eq!(c.open_call("b").0, "call_7.b~2");
        let mut many = ChildCalls::new("d");
        for k in 0..MAX_CALLS {
            assert!(many.open(&k.to_string(), Seen::Announced).is_some());
        }
        assert!(many.open("one more", Seen::Announced).is_none(), "bounded");
    }

    #[test]
    fn output_shown_only_in_raw_output_or_a_display_terminal_is_kept() {
        let mut c = ChildCalls::new("d");
        let none = |_: &str| None;
        // codex: the output streams as content while running, the end carries rawOutput only.
        c.open_call("exec");
        c.take_in("exec", &json!({"content": [{"type": "content", "content": {"type": "text", "text": "streamed"}}]}), none);
        c.take_in("exec", &json!({"status": "completed", "rawOutput": {"exit_code": 0, "aggregated_output": "raw"}}), none);
        let s = c.settle("exec").unwrap();
        assert_eq!(text(&s), "streamed");
        assert!(
            matches!(&s.result, ToolResultContent::Agent { raw_output: Some(r), .. } if r["exit_code"] == 0)
        );
        // Only rawOutput.
        c.open_call("r");
        c.take_in(
            "r",
            &json!({"rawOutput": {"formatted_output": "from raw", "exit_code": 0}}),
            none,
        );
        assert_eq!(text(&c.settle("r").unwrap()), "from raw");
        c.open_call("s");
        c.take_in(
            "s",
            &json!({"rawOutput": {"stdout": "out", "stderr": "err"}}),
            none,
        );
        assert_eq!(text(&c.settle("s").unwrap()), "out\nerr");
        // The display-only terminal.
        c.open_call("t");
        for d in ["one ", "two"] {
            c.take_in(
                "t",
                &json!({"_meta": {"terminal_output": {"terminal_id": "t", "data": d}}}),
                none,
            );
        }
        assert_eq!(text(&c.settle("t").unwrap()), "one two");
        // A terminal we served.
        c.open_call("u");
        c.take_in(
            "u",
            &json!({"content": [{"type": "terminal", "terminalId": "term-1"}]}),
            |id: &str| (id == "term-1").then(|| "printed".to_string()),
        );
        assert_eq!(text(&c.settle("u").unwrap()), "printed");
        // A later content replaces the earlier one.
        c.open_call("v");
        c.take_in(
            "v",
            &json!({"content": [{"type": "content", "content": {"type": "text", "text": "old"}}]}),
            none,
        );
        c.take_in(
            "v",
            &json!({"content": [{"type": "content", "content": {"type": "text", "text": "new"}}]}),
            none,
        );
        assert_eq!(text(&c.settle("v").unwrap()), "new");
        // An oversized rawOutput is not kept; the call says it was cut.
        c.open_call("w");
        c.take_in(
            "w",
            &json!({"rawOutput": {"output": "y".repeat(RAW_LIMIT)}}),
            none,
        );
        let s = c.settle("w").unwrap();
        assert!(s.truncated);
        assert!(matches!(
            s.result,
            ToolResultContent::Agent {
                raw_output: None,
                ..
            }
        ));
    }
}
