//! Slash commands the host runs itself (`/mode`, `/model`, `/title`, `/compact`, …), and the
//! agent's own configuration changes and notices.

use super::*;

impl Turn {
    /// Changes the session's configuration as the agent (no CAS: the agent owns its turn).
    pub(super) fn configure(
        &self,
        patch: &crate::host_api::wire::ConfigurationPatch,
    ) -> Result<(), String> {
        let mut st = self.cell.lock();
        crate::host::ops::commit_configuration(&self.host, &self.cell, &mut st, patch)
            .map_err(|e| e.message)
    }

    /// Tells the person something that is not part of the model's conversation
    /// ([`crate::host::session::SessionCell::notice`]).
    pub(super) fn notice(&self, notice: crate::host_api::wire::Notice) {
        let mut st = self.cell.lock();
        self.cell.notice(&mut st, &self.spec.turn_id, notice);
    }

    /// Answers with agent text, streamed and made durable like a model reply.
    pub(super) fn say(&self, text: String) {
        let id = format!("m_{}_cmd", self.spec.run_id);
        let mut acc = String::new();
        self.delta(true, &id, &mut acc, text);
        self.persist_assistant(&id, &acc, "");
    }

    /// Runs a slash command. `None`: the command set things up and the model takes the turn.
    pub(super) fn command(&mut self, name: &str, rest: &str) -> Option<Terminal> {
        use crate::host_api::wire::ConfigurationPatch;
        let configuration = self.cell.lock().session.configuration.clone();
        let text = match name {
            "help" => crate::host::commands::help_text(),
            "mode" if rest.is_empty() => format!(
                "Mode: {}. Available: ask (asks before writes and commands), bypass (no questions), explore (read-only).",
                mode_name(configuration.permission_mode)
            ),
            "mode" => match serde_json::from_value::<PermissionMode>(json!(rest)) {
                Ok(m) => {
                    let patch = ConfigurationPatch {
                        permission_mode: Some(m),
                        ..Default::default()
                    };
                    match self.configure(&patch) {
                        Ok(()) => format!("Mode set to {}.", mode_name(m)),
                        Err(e) => format!("Could not change the mode: {e}"),
                    }
                }
                Err(_) => format!("Unknown mode {rest:?}. Use ask, bypass or explore."),
            },
            "model" => self.model_command(rest, &configuration.model_target),
            "plan" if rest == "off" => {
                let patch = ConfigurationPatch {
                    collaboration_mode: Some(CollaborationMode::Agent),
                    ..Default::default()
                };
                match self.configure(&patch) {
                    Ok(()) => "Plan mode is off: the agent works directly.".into(),
                    Err(e) => format!("Could not leave plan mode: {e}"),
                }
            }
            "plan" => {
                let patch = ConfigurationPatch {
                    collaboration_mode: Some(CollaborationMode::Plan),
                    ..Default::default()
                };
                if let Err(e) = self.configure(&patch) {
                    self.say(format!("Could not enter plan mode: {e}"));
                    return Some(Terminal::completed("end_turn"));
                }
                if !rest.is_empty() && rest != "on" {
                    return None; // the model plans the task in plan mode
                }
                "Plan mode is on: the agent proposes a plan and waits for your approval before writing or running anything.".into()
            }
            "title" if rest.is_empty() => "Usage: /title <new title>".into(),
            "title" => {
                let mut st = self.cell.lock();
                match crate::host::ops::commit_name(&self.host, &self.cell, &mut st, rest) {
                    Ok(()) => format!("Renamed to “{rest}”."),
                    Err(e) => format!("Could not rename the session: {}", e.message),
                }
            }
            "compact" => return Some(self.compact()),
            "memory" => self.memory_command(rest),
            "goal" => self.goal_command(rest),
            "agents" => {
                let workspace = self.cwd.display().to_string();
                let list = crate::host::subagents::list(
                    &self.host.data_dir,
                    &workspace,
                    self.cell.owner.as_deref(),
                );
                if list.agents.is_empty() && list.problems.is_empty() {
                    "No agents to delegate to. Declare them in .maka/agents.json in this folder, or under `agents` in the config file: {\"agents\": {\"NAME\": {\"command\": \"…\", \"args\": [], \"description\": \"…\"}}}".into()
                } else {
                    let mut text = String::from("Agents this session can delegate to:");
                    for a in &list.agents {
                        let trust = if a.trusted { "" } else { ", asks before its first run" };
                        text.push_str(&format!("\n- {} ({}{trust}): {} — `{}`", a.name, a.source, a.description, a.command));
                    }
                    for p in &list.problems {
                        text.push_str(&format!("\n⚠ {p}"));
                    }
                    text
                }
            }
            "fork" => self.fork_command(),
            "rewind" => self.rewind_command(rest),
            "permissions" => self.permissions_command(rest),
            _ => format!(
                "Unknown command /{name}.\n\n{}",
                crate::host::commands::help_text()
            ),
        };
        self.say(text);
        Some(Terminal::completed("end_turn"))
    }

    /// `/permissions`: the kept rules, numbered (this session's first, then the workspace's);
    /// `/permissions revoke <n>` removes one.
    fn permissions_command(&self, rest: &str) -> String {
        let workspace = self.workspace_key();
        let session_rules = self.cell.lock().permission_rules.clone();
        let workspace_rules = self.host.permissions.for_workspace(&workspace);
        let verb = |r: &crate::host_api::wire::PermissionRule| match r.decision {
            crate::host_api::wire::Decision::Allow => "allow",
            crate::host_api::wire::Decision::Deny => "reject",
        };
        if let Some(n) = rest.strip_prefix("revoke").map(str::trim) {
            let Some(n) = n.parse::<usize>().ok().filter(|n| *n >= 1) else {
                return "Usage: /permissions revoke <n>, with n from /permissions.".into();
            };
            if n <= session_rules.len() {
                let mut st = self.cell.lock();
                // Matched by value: the list may have changed since it was read.
                let r = &session_rules[n - 1];
                st.permission_rules.retain(|k| k != r);
                return format!(
                    "Revoked: {} {} for this session.",
                    verb(r),
                    r.target.describe()
                );
            }
            let Some(r) = workspace_rules.get(n - session_rules.len() - 1) else {
                return format!("There is no rule {n}; /permissions lists them.");
            };
            return match self.host.permissions.remove(&workspace, r) {
                Ok(true) => format!(
                    "Revoked: always {} {} in this workspace.",
                    verb(r),
                    r.target.describe()
                ),
                Ok(false) => {
                    format!("Rule {n} was already gone; /permissions lists the rules now.")
                }
                Err(e) => format!("Could not revoke rule {n}: {e}"),
            };
        }
        if !rest.is_empty() {
            return "Usage: /permissions, or /permissions revoke <n>.".into();
        }
        if session_rules.is_empty() && workspace_rules.is_empty() {
            return "No permission rules are kept. Pick \"for this session\" or \"always\" in a permission dialog to keep one.".into();
        }
        let mut text = String::new();
        let mut n = 0;
        if !session_rules.is_empty() {
            text.push_str("For this session:");
            for r in &session_rules {
                n += 1;
                text.push_str(&format!("\n{n}. {} {}", verb(r), r.target.describe()));
            }
        }
        if !workspace_rules.is_empty() {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&format!("Always, in this workspace ({workspace}):"));
            for r in &workspace_rules {
                n += 1;
                text.push_str(&format!("\n{n}. {} {}", verb(r), r.target.describe()));
            }
        }
        text.push_str("\nRevoke one with /permissions revoke <n>.");
        text
    }

    /// `/goal`: shows the goal; `/goal pause|resume|cancel`; `/goal <objective>` arms one (its
    /// turns start when this one ends).
    fn goal_command(&self, rest: &str) -> String {
        use crate::host_api::ops::{GoalArmInput, GoalControlInput};
        let current = self.cell.lock().goal.clone();
        let describe = |g: &crate::host_api::wire::Goal| {
            let mut s = format!(
                "Goal: {}\nStatus: {} ({} of at most {} turns",
                g.objective, g.status, g.turns_run, g.limits.max_turns
            );
            if let Some(r) = &g.reason {
                s.push_str(&format!("; {r}"));
            }
            s.push(')');
            if let Some(e) = &g.evidence {
                s.push_str(&format!("\nEvidence: {e}"));
            }
            s
        };
        match rest {
            "" => current.as_ref().map(describe).unwrap_or_else(|| {
                "No goal. Arm one with /goal <objective>: the agent keeps working on it, turn after turn, until it is met.".into()
            }),
            "pause" | "resume" | "cancel" => {
                let Some(g) = current else {
                    return "There is no goal to change.".into();
                };
                let input = GoalControlInput {
                    session_id: self.cell.id.clone(),
                    goal_id: g.goal_id,
                    action: rest.into(),
                };
                match crate::host::goals::control(&self.host, input) {
                    Ok(g) => describe(&g),
                    Err(e) => format!("Could not {rest} the goal: {}", e.message),
                }
            }
            objective => {
                let input = GoalArmInput {
                    session_id: self.cell.id.clone(),
                    objective: objective.into(),
                    max_turns: None,
                    max_tokens: None,
                    max_minutes: None,
                };
                match crate::host::goals::arm(&self.host, input) {
                    Ok(g) => format!(
                        "Goal armed: {}\nThe agent works on it from the next turn, for at most {} turns. /goal shows progress; /goal cancel stops it.",
                        g.objective, g.limits.max_turns
                    ),
                    Err(e) => format!("Could not arm the goal: {}", e.message),
                }
            }
        }
    }

    /// `/memory`: list (numbered), `add [user|workspace|session] <text>`, `forget <n|id>`.
    fn memory_command(&self, rest: &str) -> String {
        use crate::host_api::ops::{MemoryChange, MemoryOutcome, MemoryScope};
        let session = self.cell.lock().session.clone();
        let whose = crate::host::memory::Whose::session(&session);
        let view = self.host.memory.view(whose, Some(&session));
        let (verb, arg) = rest.split_once(' ').unwrap_or((rest, ""));
        match verb {
            "" | "list" => {
                if view.entries.is_empty() {
                    return "Nothing remembered yet. Add a note with /memory add <text>.".into();
                }
                let mut text = String::from("Remembered (shown to the model at every turn):");
                for (i, e) in view.entries.iter().enumerate() {
                    let scope = match &e.scope {
                        MemoryScope::User => "user",
                        MemoryScope::Workspace { .. } => "workspace",
                        MemoryScope::Session { .. } => "session",
                    };
                    text.push_str(&format!("\n{}. [{scope}] {} ({})", i + 1, e.text, e.id));
                }
                text.push_str("\nForget one with /memory forget <number>.");
                text
            }
            "add" => {
                let (scope, text) = match arg.split_once(' ') {
                    Some((s @ ("user" | "workspace" | "session"), t)) => (s, t),
                    _ => ("workspace", arg),
                };
                if text.trim().is_empty() {
                    return "Usage: /memory add [user|workspace|session] <text>".into();
                }
                self.remember(scope, text, "user").unwrap_or_else(|e| e)
            }
            "forget" => {
                let arg = arg.trim();
                let id = match arg.parse::<usize>() {
                    Ok(n) if (1..=view.entries.len()).contains(&n) => view.entries[n - 1].id.clone(),
                    Ok(_) => return format!("There is no entry {arg}; /memory lists them."),
                    Err(_) => arg.to_string(),
                };
                let change = MemoryChange::Forget { id: id.clone() };
                match self.host.memory.mutate(whose, view.revision, change, None) {
                    Ok(MemoryOutcome::Committed { .. }) => format!("Forgot {id}."),
                    Ok(MemoryOutcome::RevisionConflict { .. }) => {
                        "Memory changed meanwhile; list it again with /memory.".into()
                    }
                    Err(e) => format!("Could not forget {arg}: {}", e.message),
                }
            }
            _ => "Usage: /memory, /memory add [user|workspace|session] <text>, /memory forget <number>".into(),
        }
    }

    /// `/fork`: a branch with every finished turn (this one is not copied).
    fn fork_command(&self) -> String {
        use crate::host_api::ops::{BranchInput, BranchOutcome};
        let input = BranchInput {
            source_session_id: self.cell.id.clone(),
            target_session_id: format!("sess_{}", crate::host::random_hex(12)),
            through_turn_id: None,
            expected_source_revision: None,
            workspace: None,
            additional_directories: None,
            mcp_servers: self.cell.lock().session.mcp_servers.clone(),
            system_prompt: None,
        };
        match crate::host::ops::history::branch(&self.host, input) {
            Ok(BranchOutcome::Committed { session }) => format!(
                "Forked this conversation ({} turn(s)) into a new session, {}. Open it from your session list to continue there; this session is unchanged.",
                session.turn_count, session.id
            ),
            Ok(BranchOutcome::SourceRevisionConflict { .. }) => {
                "The conversation changed while forking; try /fork again.".into()
            }
            Err(e) => format!("Could not fork: {}", e.message),
        }
    }

    /// `/rewind [n]`: undoes the last n turns before this one, files included.
    fn rewind_command(&self, rest: &str) -> String {
        use crate::host::ops::history::{rewind, Target};
        let n = match rest {
            "" => 1,
            r => match r.parse::<usize>() {
                Ok(n) if n >= 1 => n,
                _ => return format!("Usage: /rewind [number of turns] (got {r:?})"),
            },
        };
        let outcome = rewind(
            &self.host,
            &self.cell,
            Target::LastTurns(n),
            true,
            false,
            Some(&self.spec.turn_id),
            self.spec.cancel.receiver(),
        );
        match outcome {
            Ok(o) if o.abandoned_turn_ids.is_empty() => "There is no earlier turn to undo.".into(),
            Ok(o) => {
                let mut text = format!(
                    "Rewound {} turn(s): they are out of the conversation (kept on disk, marked abandoned).",
                    o.abandoned_turn_ids.len()
                );
                let shown = |p: &str| tool_fs::display(&self.cwd, Path::new(p));
                for r in &o.restored {
                    let verb = if r.action == "deleted" {
                        "Deleted"
                    } else {
                        "Restored"
                    };
                    text.push_str(&format!("\n- {verb} {}", shown(&r.path)));
                }
                for c in &o.conflicts {
                    text.push_str(&format!("\n- Left {}: {}", shown(&c.path), c.message));
                }
                text.push_str("\nReload the session to see the conversation as it is now.");
                text
            }
            Err(e) => format!("Could not rewind: {}", e.message),
        }
    }

    pub(super) fn model_command(
        &self,
        rest: &str,
        current: &crate::host_api::wire::ModelTarget,
    ) -> String {
        use crate::host_api::wire::{ConfigurationPatch, ModelTarget};
        let providers = self.host.providers();
        let name_of = |t: &ModelTarget| match t {
            ModelTarget::Default => "default".to_string(),
            ModelTarget::Explicit {
                connection_slug,
                model,
            } => format!("{connection_slug}/{model}"),
        };
        if rest.is_empty() {
            let mut out = format!("Model: {}. Available:\n- default", name_of(current));
            for c in &providers.connections {
                for m in &c.models {
                    out.push_str(&format!("\n- {}/{} ({})", c.slug, m.id, m.label));
                }
            }
            return out;
        }
        let target = if rest == "default" {
            Some(ModelTarget::Default)
        } else {
            providers.connections.iter().find_map(|c| {
                c.models
                    .iter()
                    .find(|m| rest == format!("{}/{}", c.slug, m.id) || rest == m.id)
                    .map(|m| ModelTarget::Explicit {
                        connection_slug: c.slug.clone(),
                        model: m.id.clone(),
                    })
            })
        };
        let Some(target) = target else {
            return format!("There is no model {rest:?}. Send /model to see the list.");
        };
        let patch = ConfigurationPatch {
            model_target: Some(target.clone()),
            ..Default::default()
        };
        match self.configure(&patch) {
            Ok(()) => format!("Model set to {}.", name_of(&target)),
            Err(e) => format!("Could not change the model: {e}"),
        }
    }
}

fn mode_name(m: PermissionMode) -> &'static str {
    match m {
        PermissionMode::Ask => "ask",
        PermissionMode::Bypass => "bypass",
        PermissionMode::Explore => "explore",
    }
}
