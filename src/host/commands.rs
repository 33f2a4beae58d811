//! Slash commands: what `skills.list` offers, and how a prompt's leading `/name` is recognised.
//! The turn runs them ([`super::turn`]); each answers as agent text, so every client shows the
//! result the same way and replay shows it again.

pub struct SlashCommand {
    pub name: &'static str,
    pub description: &'static str,
    /// Shown by clients as the placeholder after the command name.
    pub hint: Option<&'static str>,
    /// Whether the command calls the model (and so needs a provider).
    pub needs_model: bool,
}

/// In the order clients list them.
pub const COMMANDS: &[SlashCommand] = &[
    SlashCommand {
        name: "plan",
        description: "Plan first: propose a plan and wait for approval before changing anything (`/plan off` to stop)",
        hint: Some("what to plan, or off"),
        needs_model: false,
    },
    SlashCommand {
        name: "mode",
        description: "Show or set what the agent may do: ask, bypass or explore (read-only)",
        hint: Some("ask | bypass | explore"),
        needs_model: false,
    },
    SlashCommand {
        name: "model",
        description: "Show the models or switch to one",
        hint: Some("model id, or default"),
        needs_model: false,
    },
    SlashCommand {
        name: "title",
        description: "Rename this session",
        hint: Some("new title"),
        needs_model: false,
    },
    SlashCommand {
        name: "compact",
        description: "Summarise the conversation so far to free context",
        hint: None,
        needs_model: true,
    },
    SlashCommand {
        name: "agents",
        description: "List the agents this session can delegate work to",
        hint: None,
        needs_model: false,
    },
    SlashCommand {
        name: "goal",
        description: "Work toward an objective over several turns until it is met (or show, pause, resume, cancel the goal)",
        hint: Some("objective | pause | resume | cancel"),
        needs_model: false,
    },
    SlashCommand {
        name: "memory",
        description: "List what the agent remembers, add a note, or forget one",
        hint: Some("add [user|workspace|session] <text> | forget <n>"),
        needs_model: false,
    },
    SlashCommand {
        name: "fork",
        description: "Copy this conversation into a new session, to try another approach there",
        hint: None,
        needs_model: false,
    },
    SlashCommand {
        name: "rewind",
        description: "Undo the last turns (default 1): out of the conversation, and the files they changed put back",
        hint: Some("number of turns"),
        needs_model: false,
    },
    SlashCommand {
        name: "permissions",
        description: "List the permission rules kept for this session and this workspace, or revoke one",
        hint: Some("revoke <n>"),
        needs_model: false,
    },
    SlashCommand {
        name: "help",
        description: "List the commands",
        hint: None,
        needs_model: false,
    },
];

/// `skills.list`.
pub fn list() -> crate::host_api::ops::SkillList {
    crate::host_api::ops::SkillList {
        skills: COMMANDS
            .iter()
            .map(|c| crate::host_api::ops::Skill {
                name: c.name.into(),
                description: c.description.into(),
                input_hint: c.hint.map(String::from),
            })
            .collect(),
    }
}

/// A prompt that starts with `/word`: the word and the rest (trimmed). `None` for ordinary
/// prompts, including paths like `/usr/bin is…` (a command word has no further `/`).
pub fn parse(prompt: &str) -> Option<(&str, &str)> {
    let text = prompt.trim_start();
    let body = text.strip_prefix('/')?;
    let end = body.find(char::is_whitespace).unwrap_or(body.len());
    let (word, rest) = body.split_at(end);
    let valid = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    valid.then(|| (word, rest.trim()))
}

pub fn find(name: &str) -> Option<&'static SlashCommand> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// Whether starting this prompt needs a model provider. Unknown commands are answered
/// without one.
pub fn needs_model(prompt: &str) -> bool {
    match parse(prompt) {
        None => true,
        Some(("plan", rest)) => !rest.is_empty() && rest != "off" && rest != "on",
        Some((name, _)) => find(name).is_some_and(|c| c.needs_model),
    }
}

pub fn help_text() -> String {
    let mut out = String::from("Commands:\n");
    for c in COMMANDS {
        match c.hint {
            Some(h) => out.push_str(&format!("- `/{} <{h}>` — {}\n", c.name, c.description)),
            None => out.push_str(&format!("- `/{}` — {}\n", c.name, c.description)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_commands_but_not_paths() {
        assert_eq!(parse("/mode bypass"), Some(("mode", "bypass")));
        assert_eq!(parse("  /help"), Some(("help", "")));
        assert_eq!(parse("/usr/bin is missing"), None);
        assert_eq!(parse("fix /tmp"), None);
        assert_eq!(parse("/"), None);
        assert!(!needs_model("/help") && !needs_model("/nope") && !needs_model("/plan"));
        assert!(needs_model("/compact") && needs_model("/plan add a cache") && needs_model("hi"));
    }
}
