//! Other ACP agents as subagents: which ones a session may use, and trusting them.
//!
//! Declared per workspace in `<workspace>/.maka/agents.json` and per user under the config
//! file's `agents` key, in the shape editors use for agent servers:
//! `{"agents": {"NAME": {"command": "…", "args": […], "env": {…}, "description": "…"}}}`.
//! A workspace entry wins over a user entry of the same name. Running a command a workspace
//! declared is a trust decision: its first use asks the person (the answer is kept per
//! workspace, agent and command in `<data dir>/trusted-agents.json`).

pub mod client;
pub mod terminals;

use serde_json::Value;
use std::path::{Path, PathBuf};

/// A regular file's identity: where it really is and which version it is (device, inode,
/// size, modification time). Empty for anything else.
fn file_identity(p: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(p).ok()?;
    let m = std::fs::metadata(&real).ok().filter(|m| m.is_file())?;
    Some(format!(
        "{}:{}:{}:{}:{}.{}",
        real.display(),
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec()
    ))
}

/// The largest `agents.json` read.
const MAX_FILE: u64 = 256 * 1024;

#[derive(Clone, Debug, PartialEq)]
pub struct AgentSpec {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub description: String,
    /// `workspace` or `user`.
    pub source: &'static str,
}

impl AgentSpec {
    /// The command line as shown to the person.
    pub fn command_line(&self) -> String {
        std::iter::once(self.command.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The declaration as the trust dialog shows it: the command and its arguments (quoted
    /// where a shell would need it, so a re-split list reads differently), then every
    /// variable it sets.
    pub fn declaration(&self) -> String {
        let quote = |w: &str| {
            let plain = !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c));
            if plain {
                w.to_string()
            } else {
                format!("'{}'", w.replace('\'', "'\\''"))
            }
        };
        let mut out = std::iter::once(self.command.as_str())
            .chain(self.args.iter().map(String::as_str))
            .map(quote)
            .collect::<Vec<_>>()
            .join(" ");
        if !self.env.is_empty() {
            let env: Vec<String> = self
                .env
                .iter()
                .map(|(k, v)| format!("{k}={}", quote(v)))
                .collect();
            out.push_str(&format!(" (environment: {})", env.join(" ")));
        }
        out
    }

    /// What trusting it covers: the exact declaration (command, each argument, environment)
    /// and the identity of the files it runs (the resolved program and any argument naming a
    /// file), so an edited script or a re-split argument list asks again.
    fn trust_key(&self, workspace: &str) -> String {
        let identities: Vec<String> = std::iter::once(self.program(workspace))
            .chain(self.args.iter().map(|a| {
                let p = Path::new(a);
                Some(if p.is_absolute() {
                    p.to_path_buf()
                } else {
                    Path::new(workspace).join(p)
                })
            }))
            .map(|p| p.and_then(|p| file_identity(&p)).unwrap_or_default())
            .collect();
        serde_json::json!([
            workspace,
            self.name,
            self.command,
            self.args,
            self.env,
            identities
        ])
        .to_string()
    }

    /// The program `command` names, as it will be found when the agent starts in
    /// `workspace`: a path (a relative one from the workspace), or the first match on the
    /// `PATH` it will run with (its declaration's, else the host's; relative entries from the
    /// workspace). `None` when there is no such file.
    pub fn program(&self, workspace: &str) -> Option<PathBuf> {
        let from_workspace = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                Path::new(workspace).join(p)
            }
        };
        if self.command.contains('/') {
            return Some(from_workspace(Path::new(&self.command))).filter(|p| p.is_file());
        }
        let path = self
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var("PATH").ok())?;
        std::env::split_paths(&path)
            .map(|d| from_workspace(&d).join(&self.command))
            .find(|p| p.is_file())
    }
}

fn parse(map: &Value, source: &'static str, problems: &mut Vec<String>) -> Vec<AgentSpec> {
    let Some(agents) = map.get("agents").and_then(Value::as_object) else {
        return vec![];
    };
    let mut out = vec![];
    for (name, spec) in agents {
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        let Some(command) = spec.get("command").and_then(Value::as_str) else {
            problems.push(format!("agent {name:?} ({source}) has no `command`"));
            continue;
        };
        if !valid_name {
            problems.push(format!(
                "agent {name:?} ({source}): names are letters, digits, - and _ (at most 64)"
            ));
            continue;
        }
        out.push(AgentSpec {
            name: name.clone(),
            command: command.to_string(),
            args: crate::host_api::string_list(spec.get("args")),
            env: spec
                .get("env")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect(),
            description: spec
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            source,
        });
    }
    out
}

/// A JSON file the host reads, only from inside `root` (a workspace's `.maka/agents.json`,
/// a session directory's `subagents.json`): never through a link leading out, never a FIFO.
fn read_json(path: &Path, root: &Path) -> Option<Value> {
    let buf = match crate::host::tools::fs::read_host_input(path, &[root.to_path_buf()], MAX_FILE) {
        Ok(b) => b?,
        Err(why) => {
            log::warn!("{} skipped: {why}", path.display());
            return None;
        }
    };
    match serde_json::from_slice(&buf) {
        Ok(v) => Some(v),
        Err(e) => {
            log::warn!("{}: not JSON ({e}); no agents from it", path.display());
            None
        }
    }
}

/// The agents a session in `workspace` may delegate to (workspace entries first), and the
/// problems found in their declarations.
pub fn declared(workspace: &Path) -> (Vec<AgentSpec>, Vec<String>) {
    let mut problems = vec![];
    let mut agents = read_json(&workspace.join(".maka").join("agents.json"), workspace)
        .map(|v| parse(&v, "workspace", &mut problems))
        .unwrap_or_default();
    let user = Value::Object(crate::config::read_file());
    for a in parse(&user, "user", &mut problems) {
        if !agents.iter().any(|w| w.name == a.name) {
            agents.push(a);
        }
    }
    (agents, problems)
}

/// `subagent.list`: the session's agents as clients see them.
pub fn list(data_dir: &Path, workspace: &str) -> crate::host_api::ops::SubagentList {
    let (agents, problems) = declared(Path::new(workspace));
    crate::host_api::ops::SubagentList {
        agents: agents
            .iter()
            .map(|a| crate::host_api::ops::SubagentInfo {
                name: a.name.clone(),
                description: a.description.clone(),
                command: a.command_line(),
                source: a.source.into(),
                trusted: trusted(data_dir, workspace, a),
            })
            .collect(),
        problems,
    }
}

/// The agent sessions of a session's earlier delegations (`subagents.json` in its directory):
/// agent name → its session id, so a later delegation continues the same conversation.
pub fn earlier_session(session_dir: &Path, agent: &str) -> Option<String> {
    read_json(&session_dir.join("subagents.json"), session_dir)?
        .get(agent)?
        .as_str()
        .map(String::from)
}

pub fn record_session(session_dir: &Path, agent: &str, agent_session: &str) {
    let mut map = read_json(&session_dir.join("subagents.json"), session_dir)
        .filter(Value::is_object)
        .unwrap_or_else(|| serde_json::json!({}));
    map[agent] = Value::String(agent_session.into());
    let written = serde_json::to_vec_pretty(&map)
        .map_err(std::io::Error::other)
        .and_then(|b| crate::host::store::write_atomic(session_dir, "subagents.json", &b, true));
    if let Err(e) = written {
        log::warn!("cannot record agent {agent}'s session: {e}");
    }
}

fn trust_file(data_dir: &Path) -> PathBuf {
    data_dir.join("trusted-agents.json")
}

/// Whether the person already allowed this workspace-declared agent (user agents need none).
pub fn trusted(data_dir: &Path, workspace: &str, agent: &AgentSpec) -> bool {
    if agent.source != "workspace" {
        return true;
    }
    let key = agent.trust_key(workspace);
    read_json(&trust_file(data_dir), data_dir)
        .and_then(|v| v.as_array().cloned())
        .is_some_and(|list| list.iter().any(|k| k.as_str() == Some(key.as_str())))
}

/// Remembers the person's "allow" for this agent in this workspace.
pub fn trust(data_dir: &Path, workspace: &str, agent: &AgentSpec) -> std::io::Result<()> {
    let mut list = read_json(&trust_file(data_dir), data_dir)
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    list.push(Value::String(agent.trust_key(workspace)));
    let bytes = serde_json::to_vec_pretty(&list).map_err(std::io::Error::other)?;
    crate::host::store::write_atomic(data_dir, "trusted-agents.json", &bytes, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace's `.maka/agents.json` that is a FIFO, or reached through a link leading
    /// out, declares nothing and never blocks `session/new`.
    #[test]
    fn agent_declarations_are_read_only_from_inside_and_never_block() {
        let base = std::env::temp_dir().join(format!("maka-agents-decl-{}", std::process::id()));
        let decl = r#"{"agents": {"evil": {"command": "sh"}}}"#;
        type Make = fn(&Path, &Path);
        let cases: &[(&str, Make)] = &[
            ("a FIFO", |ws, _| {
                std::fs::create_dir_all(ws.join(".maka")).unwrap();
                let p = ws.join(".maka/agents.json");
                let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
            }),
            ("a link to a folder outside", |ws, outside| {
                std::os::unix::fs::symlink(outside, ws.join(".maka")).unwrap()
            }),
            ("a link to a file outside", |ws, outside| {
                std::fs::create_dir_all(ws.join(".maka")).unwrap();
                std::os::unix::fs::symlink(
                    outside.join("agents.json"),
                    ws.join(".maka/agents.json"),
                )
                .unwrap()
            }),
        ];
        for (what, make) in cases {
            let _ = std::fs::remove_dir_all(&base);
            let (ws, outside) = (base.join("ws"), base.join("outside"));
            std::fs::create_dir_all(&ws).unwrap();
            std::fs::create_dir_all(&outside).unwrap();
            std::fs::write(outside.join("agents.json"), decl).unwrap();
            make(&ws, &outside);
            let (agents, _) = declared(&ws);
            assert!(agents.iter().all(|a| a.name != "evil"), "{what}");
        }
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn declarations_are_read_named_checked_and_workspace_wins() {
        let mut problems = vec![];
        let v = serde_json::json!({"agents": {
            "helper": {"command": "maka-acp", "args": ["--log-level", "warn"], "env": {"A": "1"}, "description": "another maka"},
            "bad name": {"command": "x"},
            "nocmd": {"args": []}
        }});
        let a = parse(&v, "workspace", &mut problems);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].command_line(), "maka-acp --log-level warn");
        assert_eq!(a[0].env, vec![("A".to_string(), "1".to_string())]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        let dir = std::env::temp_dir().join(format!("maka-agents-trust-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(!trusted(&dir, "/w", &a[0]));
        trust(&dir, "/w", &a[0]).unwrap();
        assert!(trusted(&dir, "/w", &a[0]));
        assert!(!trusted(&dir, "/other", &a[0]), "per workspace");
        let mut changed = a[0].clone();
        changed.args.push("--evil".into());
        assert!(!trusted(&dir, "/w", &changed), "per command line");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
