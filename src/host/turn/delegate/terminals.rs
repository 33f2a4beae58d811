//! A delegation's `terminal/create`: the command that will run, as one `sh` line with its
//! variables and folder, through the model's own gate, then started by the host's runner.

use super::*;

impl Turn {
    /// `terminal/create`, in a folder of this session, through the same gate as the model's
    /// own `run_command` (explore refuses, plan mode waits for the approved plan, kept rules
    /// decide, ask mode asks with a title the host writes). A dialog the person already
    /// answered covers it only when that dialog showed this very command.
    pub(super) fn subagent_terminal(
        &mut self,
        name: &str,
        asked: &CreateTerminal,
        terminals: &mut subagents::terminals::Terminals,
        approved: Option<Shown>,
    ) -> Result<Value, ResponseError> {
        // The argv that will be executed (`Terminals::create` runs exactly these words), as
        // the one `sh` line that runs it: what the gate judges, the dialog shows and a rule
        // keeps. A program path with a space or a tab in it is quoted, so no rule for the
        // program named by its first word covers it.
        let argv: Vec<&str> = std::iter::once(asked.command.as_str())
            .chain(asked.args.iter().map(String::as_str))
            .collect();
        let line = permissions::shell_line(&argv);
        let cwd = match &asked.cwd {
            Some(folder) => self.subagent_path(folder)?,
            None => self.cwd.clone(),
        };
        // `sh -c X` runs X: a dialog that showed X showed this command.
        let script = match (asked.command.as_str(), asked.args.as_slice()) {
            ("sh" | "bash" | "/bin/sh" | "/bin/bash", [flag, x])
                if flag == "-c" || flag == "-lc" =>
            {
                Some(x.as_str())
            }
            _ => None,
        };
        // What the gate judges and the person sees is what will run, as one `sh` line: the
        // variables the agent sets (`GIT_CONFIG_*`, `LD_PRELOAD`, `PATH` can turn an allowed
        // program into other code) and a folder other than the session's come first, so no
        // kept rule or earlier dialog covers such a command (`VAR=…` and `cd … &&` are never
        // plain words): it is always put to the person.
        // A variable's name is shown as it is: only names a shell could set.
        let bad_name = asked.env.iter().map(|e| &e.name).find(|n| !env_name(n));
        if let Some(n) = bad_name {
            return Err(ResponseError::new(
                code::INVALID_PARAMS,
                format!(
                    "{n:?} is not a variable name (letters, digits and `_`, not first a digit)"
                ),
            ));
        }
        let env: Vec<String> = asked
            .env
            .iter()
            .map(|e| format!("{}={}", e.name, permissions::shell_word(&e.value)))
            .collect();
        let mut gated = line.clone();
        if !env.is_empty() {
            gated = format!("{} {gated}", env.join(" "));
        }
        if cwd != self.cwd {
            gated = format!(
                "cd {} && {gated}",
                permissions::shell_word(&cwd.to_string_lossy())
            );
        }
        let plain = gated == line;
        let shown = plain
            && matches!(&approved, Some(Shown::Command(a))
                if same_command(a, &line) || script.is_some_and(|x| same_command(a, x)));
        let args = json!({"command": gated});
        self.subagent_gate(name, "run_command", &args, &format!("run {gated}"), shown)?;
        terminals.create(asked, &argv, &cwd, &self.confinement)
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`: a name `sh` would take as an assignment's.
pub(super) fn env_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether a dialog that showed the command `a` showed `b`: the same text, or the same words
/// as `sh` splits them (the one reading of the rules: `permissions::plain_words`).
pub(super) fn same_command(a: &str, b: &str) -> bool {
    a == b || permissions::plain_words(a).is_some_and(|w| Some(w) == permissions::plain_words(b))
}
