//! Other ACP agents as subagents: which ones a session may use, and trusting them.
//!
//! Declared per workspace in `<workspace>/.maka/agents.json` and per user under the config
//! file's `agents` key, in the shape editors use for agent servers:
//! `{"agents": {"NAME": {"command": "…", "args": […], "env": {…}, "description": "…"}}}`.
//! A workspace entry wins over a user entry of the same name. Running a command a workspace
//! declared is a trust decision: its first use asks the person (the answer is kept per
//! workspace, agent and command in `<data dir>/trusted-agents.json`).

pub mod calls;
pub mod client;
pub mod terminals;

use crate::acp::types::from_agents::read_object;
use serde::Deserialize;
use serde_json::{Map, Value};
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
    /// where a shell would need it, so a re-split list reads differently), then the name of
    /// every variable it sets — never its value (an API key, often): the dialog goes to every
    /// client following the session and into its transcript. The trust still covers the
    /// values ([`AgentSpec::trust_key`]), so a changed value asks again.
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
                .map(|(k, _)| format!("{}=…", quote(k)))
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

/// A file's (or the config's) `agents`: each agent's declaration by name, in the file's order.
/// Read leniently, as a person writes it: a value of the wrong type is absent.
#[derive(Default, Deserialize)]
struct Declarations {
    #[serde(default, deserialize_with = "crate::acp::types::default_on_error")]
    agents: Map<String, Value>,
}

/// One agent's declaration: `command` is required (its absence is reported); `args` keeps its
/// strings, `env` its string values.
#[derive(Deserialize)]
struct Declared {
    #[serde(default, deserialize_with = "crate::acp::types::default_on_error")]
    command: Option<String>,
    #[serde(default, deserialize_with = "crate::acp::types::default_on_error")]
    args: Vec<Value>,
    #[serde(default, deserialize_with = "crate::acp::types::default_on_error")]
    env: Map<String, Value>,
    #[serde(default, deserialize_with = "crate::acp::types::default_on_error")]
    description: String,
}

fn parse(map: &Value, source: &'static str, problems: &mut Vec<String>) -> Vec<AgentSpec> {
    let agents = read_object::<Declarations>(map).unwrap_or_default().agents;
    let mut out = vec![];
    for (name, spec) in &agents {
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        let declared = read_object::<Declared>(spec).ok();
        let Some((declared, command)) = declared.and_then(|mut d| d.command.take().map(|c| (d, c)))
        else {
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
            command,
            args: declared
                .args
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            env: declared
                .env
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                // Learned here: from now on redacted wherever text leaves the host.
                .inspect(|(k, v)| crate::secrets::register_declared(k, v))
                .collect(),
            description: declared.description,
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
/// `owner`: whose trust counts (the session's owner; `None`: the machine's user).
pub fn list(
    data_dir: &Path,
    workspace: &str,
    owner: Option<&str>,
) -> crate::host_api::ops::SubagentList {
    let (agents, problems) = declared(Path::new(workspace));
    crate::host_api::ops::SubagentList {
        agents: agents
            .iter()
            .map(|a| crate::host_api::ops::SubagentInfo {
                name: a.name.clone(),
                description: a.description.clone(),
                command: a.command_line(),
                source: a.source.into(),
                trusted: trusted(data_dir, workspace, owner, a),
            })
            .collect(),
        problems,
    }
}

/// The agent sessions of a session's delegations, kept in `subagents.json` in its directory:
/// each under a handle (`<agent>#<n>`) the delegate call's result names, so the model can
/// continue that very conversation later, and each agent's latest one.
/// `{"sessions": {"helper#1": {"agent": "helper", "sessionId": "…"}}, "latest": {"helper": "helper#1"}}`
/// (an older file, `{"helper": "<session id>"}`, reads as `helper#1`).
/// The most agent sessions one session keeps (with each agent's latest always among them).
const MAX_SESSIONS: usize = 256;

/// `subagents.json` as stored: by handle (with each agent's latest), or the older file (agent
/// → its one session id). Entries that do not read are left out.
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredSessions {
    Handles {
        sessions: Map<String, Value>,
        #[serde(default, deserialize_with = "crate::acp::types::default_on_error")]
        latest: Map<String, Value>,
    },
    Old(Map<String, Value>),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredSession {
    agent: String,
    session_id: String,
}

#[derive(Debug, Default, PartialEq)]
pub struct Continuity {
    /// handle → (agent, its session id)
    sessions: std::collections::BTreeMap<String, (String, String)>,
    /// agent → handle
    latest: std::collections::BTreeMap<String, String>,
}

impl Continuity {
    pub fn read(session_dir: &Path) -> Continuity {
        Continuity::from_json(read_json(&session_dir.join("subagents.json"), session_dir))
    }

    fn from_json(v: Option<Value>) -> Continuity {
        let mut c = Continuity::default();
        match v.map(|v| StoredSessions::deserialize(&v)) {
            Some(Ok(StoredSessions::Handles { sessions, latest })) => {
                for (handle, s) in sessions {
                    if let Ok(StoredSession { agent, session_id }) = StoredSession::deserialize(&s)
                    {
                        c.sessions.insert(handle, (agent, session_id));
                    }
                }
                for (agent, h) in latest {
                    if let Some(h) = h.as_str().filter(|h| c.sessions.contains_key(*h)) {
                        c.latest.insert(agent, h.to_string());
                    }
                }
            }
            Some(Ok(StoredSessions::Old(old))) => {
                for (agent, id) in old {
                    if let Some(id) = id.as_str() {
                        let h = format!("{agent}#1");
                        c.sessions
                            .insert(h.clone(), (agent.clone(), id.to_string()));
                        c.latest.insert(agent, h);
                    }
                }
            }
            Some(Err(_)) | None => {}
        }
        c
    }

    /// The agent's latest session: its handle and session id.
    pub fn latest(&self, agent: &str) -> Option<(&str, &str)> {
        let h = self.latest.get(agent)?;
        Some((h.as_str(), self.sessions.get(h)?.1.as_str()))
    }

    /// The session a handle names: its agent and session id.
    pub fn named(&self, handle: &str) -> Option<(&str, &str)> {
        self.sessions
            .get(handle)
            .map(|(a, id)| (a.as_str(), id.as_str()))
    }

    /// The handles of an agent's sessions.
    pub fn handles_of(&self, agent: &str) -> Vec<&str> {
        self.sessions
            .iter()
            .filter(|(_, (a, _))| a == agent)
            .map(|(h, _)| h.as_str())
            .collect()
    }

    /// A handle for a new session of `agent`, none of its own nor of `taken`.
    pub fn new_handle(&self, agent: &str, taken: &std::collections::HashSet<String>) -> String {
        (1..)
            .map(|n| format!("{agent}#{n}"))
            .find(|h| !self.sessions.contains_key(h) && !taken.contains(h))
            .unwrap_or_default()
    }

    /// Records `handle` as `agent`'s session `session_id`, and as its latest. A file that
    /// cannot be read is moved aside first (never overwritten: it holds the other sessions);
    /// past [`MAX_SESSIONS`], the oldest sessions that are no agent's latest are forgotten.
    /// `fsync`: the host's setting for session files (`MAKA_HOST_FSYNC`).
    pub fn record(session_dir: &Path, handle: &str, agent: &str, session_id: &str, fsync: bool) {
        let path = session_dir.join("subagents.json");
        let stored = read_json(&path, session_dir);
        if stored.is_none() && path.exists() {
            // One kept aside at most (the latest): a file that keeps failing does not pile up.
            let aside = session_dir.join("subagents.unreadable.json");
            log::warn!(
                "{} cannot be read; moved to {} and started afresh",
                path.display(),
                aside.display()
            );
            let _ = std::fs::rename(&path, &aside);
        }
        let mut c = Continuity::from_json(stored);
        c.sessions.insert(
            handle.to_string(),
            (agent.to_string(), session_id.to_string()),
        );
        c.latest.insert(agent.to_string(), handle.to_string());
        while c.sessions.len() > MAX_SESSIONS {
            let number = |h: &str| h.rsplit('#').next().and_then(|n| n.parse::<u64>().ok());
            let oldest = c
                .sessions
                .keys()
                .filter(|h| !c.latest.values().any(|l| l == *h))
                .min_by_key(|h| number(h).unwrap_or(0))
                .cloned();
            match oldest {
                Some(h) => c.sessions.remove(&h),
                None => break,
            };
        }
        let sessions: serde_json::Map<String, Value> = c
            .sessions
            .iter()
            .map(|(h, (a, id))| (h.clone(), serde_json::json!({"agent": a, "sessionId": id})))
            .collect();
        let map = serde_json::json!({"sessions": sessions, "latest": c.latest});
        let written = serde_json::to_vec_pretty(&map)
            .map_err(std::io::Error::other)
            .and_then(|b| {
                crate::host::store::write_atomic(session_dir, "subagents.json", &b, fsync)
            });
        if let Err(e) = written {
            log::warn!("cannot record agent {agent}'s session {handle}: {e}");
        }
    }
}

fn trust_file(data_dir: &Path) -> PathBuf {
    data_dir.join("trusted-agents.json")
}

/// A trust record, as `owner`'s.
fn owned_record(owner: Option<&str>, key: &str) -> String {
    crate::host::permissions::owned_key(owner, &trust_record(key))
}

/// A trust record: a digest of the declaration's key (command, arguments, environment, the
/// files it runs), never the values themselves — a declared API key is not copied to disk.
/// An entry of an older file (the key itself) reads as its digest, and is written as one; a
/// principal's record (`@NAME:sha256:…`) is one already.
fn trust_record(key: &str) -> String {
    if key.starts_with("sha256:") || key.starts_with('@') {
        key.to_string()
    } else {
        format!("sha256:{}", crate::host::codec::sha256_hex(key.as_bytes()))
    }
}

/// The records, as digests. A file of an older version (the declarations themselves, its
/// mode 0644) is rewritten at once: its values must not stay on disk.
fn trust_records(data_dir: &Path) -> Vec<String> {
    let stored: Vec<String> = read_json(&trust_file(data_dir), data_dir)
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect();
    let records: Vec<String> = stored.iter().map(|k| trust_record(k)).collect();
    if records != stored {
        if let Err(e) = write_trust(data_dir, &records) {
            log::warn!(
                "cannot rewrite {} as digests: {e}",
                trust_file(data_dir).display()
            );
        }
    }
    records
}

fn write_trust(data_dir: &Path, records: &[String]) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(records).map_err(std::io::Error::other)?;
    crate::host::store::write_atomic(data_dir, "trusted-agents.json", &bytes, true)
}

/// Whether the person already allowed this workspace-declared agent (user agents need none):
/// `owner`'s allow (a principal's trust is its own, `permissions::owned_key`).
pub fn trusted(data_dir: &Path, workspace: &str, owner: Option<&str>, agent: &AgentSpec) -> bool {
    if agent.source != "workspace" {
        return true;
    }
    let record = owned_record(owner, &agent.trust_key(workspace));
    trust_records(data_dir).contains(&record)
}

/// Remembers the person's "allow" for this agent in this workspace (the file is the user's
/// alone: mode 0600, like everything the host writes).
pub fn trust(
    data_dir: &Path,
    workspace: &str,
    owner: Option<&str>,
    agent: &AgentSpec,
) -> std::io::Result<()> {
    let mut list = trust_records(data_dir);
    let record = owned_record(owner, &agent.trust_key(workspace));
    if !list.contains(&record) {
        list.push(record);
    }
    write_trust(data_dir, &list)
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
        assert!(!trusted(&dir, "/w", None, &a[0]));
        trust(&dir, "/w", None, &a[0]).unwrap();
        assert!(trusted(&dir, "/w", None, &a[0]));
        assert!(!trusted(&dir, "/other", None, &a[0]), "per workspace");
        assert!(!trusted(&dir, "/w", Some("bob"), &a[0]), "per owner");
        trust(&dir, "/w", Some("bob"), &a[0]).unwrap();
        assert!(trusted(&dir, "/w", Some("bob"), &a[0]));
        assert!(
            !trusted(&dir, "/w", Some("alice"), &a[0]),
            "bob's allow is not alice's"
        );
        let mut changed = a[0].clone();
        changed.args.push("--evil".into());
        assert!(!trusted(&dir, "/w", None, &changed), "per command line");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Declarations and `subagents.json` are read typed but leniently, as before: a value of
    /// the wrong type is absent (a missing `command` is reported), an entry that does not read
    /// is left out, and nothing in them makes the read fail.
    #[test]
    fn declarations_and_kept_sessions_of_odd_shapes_read_as_far_as_they_go() {
        use serde_json::json;
        /// An agent as read: its command line, environment and description.
        type Seen = (String, Vec<(String, String)>, String);
        let rows = [
            (json!({"agents": 5}), vec![], 0),
            (json!({"agents": {"a": "not an object"}}), vec![], 1),
            (json!({"agents": {"a": {"command": 7}}}), vec![], 1),
            (
                json!({"agents": {"a": {"command": "x", "args": ["-v", 3, null], "env": {"K": "v", "N": 1}, "description": 2}}}),
                vec![("x -v", vec![("K", "v")], "")],
                0,
            ),
        ];
        for (v, want, problem_count) in rows {
            let mut problems = vec![];
            let got: Vec<Seen> = parse(&v, "user", &mut problems)
                .into_iter()
                .map(|a| (a.command_line(), a.env.clone(), a.description.clone()))
                .collect();
            let want: Vec<Seen> = want
                .into_iter()
                .map(|(c, e, d)| {
                    (
                        c.to_string(),
                        e.into_iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                        d.to_string(),
                    )
                })
                .collect();
            assert_eq!(got, want, "{v}");
            assert_eq!(problems.len(), problem_count, "{v}: {problems:?}");
        }
        let kept = [
            (
                json!({"sessions": {"h#1": {"agent": "h", "sessionId": "s1"}, "h#2": {"agent": 1}},
                    "latest": {"h": "h#1", "g": "g#9"}}),
                vec![("h#1", "h", "s1")],
                Some("h#1"),
            ),
            (
                json!({"sessions": {"h#1": {"agent": "h", "sessionId": "s1"}}, "latest": 5}),
                vec![("h#1", "h", "s1")],
                None,
            ),
            (
                json!({"h": "old", "g": 5}),
                vec![("h#1", "h", "old")],
                Some("h#1"),
            ),
            (json!([1, 2]), vec![], None),
        ];
        for (v, sessions, latest) in kept {
            let c = Continuity::from_json(Some(v.clone()));
            let got: Vec<(&str, &str, &str)> = c
                .sessions
                .iter()
                .map(|(h, (a, id))| (h.as_str(), a.as_str(), id.as_str()))
                .collect();
            assert_eq!(got, sessions, "{v}");
            assert_eq!(c.latest("h").map(|(h, _)| h), latest, "{v}");
        }
    }

    /// Conversations are kept under handles: an older file reads as `<agent>#1`, new handles
    /// skip the taken ones, an unreadable file is moved aside (not overwritten), and past the
    /// cap the oldest are forgotten but never an agent's latest.
    #[test]
    fn every_conversation_is_recorded_and_none_is_lost_to_a_bad_file() {
        let dir = std::env::temp_dir().join(format!("maka-continuity-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("subagents.json"), r#"{"helper": "old-id"}"#).unwrap();
        let c = Continuity::read(&dir);
        assert_eq!(c.latest("helper"), Some(("helper#1", "old-id")));
        let taken = std::collections::HashSet::from(["helper#2".to_string()]);
        assert_eq!(c.new_handle("helper", &taken), "helper#3");
        Continuity::record(&dir, "helper#3", "helper", "third", false);
        let c = Continuity::read(&dir);
        assert_eq!(c.named("helper#1"), Some(("helper", "old-id")), "kept");
        assert_eq!(c.latest("helper"), Some(("helper#3", "third")));
        assert_eq!(c.handles_of("helper"), ["helper#1", "helper#3"]);

        std::fs::write(dir.join("subagents.json"), "{not json").unwrap();
        Continuity::record(&dir, "x#1", "x", "id", false);
        let aside: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("subagents.unreadable")
            })
            .collect();
        assert_eq!(aside.len(), 1, "the unreadable file is kept aside");

        for n in 1..=MAX_SESSIONS + 5 {
            Continuity::record(&dir, &format!("x#{n}"), "x", &format!("id{n}"), false);
        }
        Continuity::record(&dir, "y#1", "y", "why", false);
        let c = Continuity::read(&dir);
        assert_eq!(c.sessions.len(), MAX_SESSIONS);
        assert_eq!(
            c.latest("x").map(|l| l.0),
            Some(format!("x#{}", MAX_SESSIONS + 5).as_str())
        );
        assert_eq!(c.latest("y"), Some(("y#1", "why")));
        assert!(c.named("x#1").is_none(), "the oldest went first");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The trust file holds digests, not the declared environment, and only its owner reads
    /// it; a record of an older file (the declaration itself) still counts and is rewritten.
    #[test]
    fn trust_records_hold_no_secrets() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("maka-agents-secret-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut problems = vec![];
        let v = serde_json::json!({"agents": {
            "keyed": {"command": "agent", "env": {"API_KEY": "sk-very-secret-value"}},
            "old": {"command": "agent2"}
        }});
        let a = parse(&v, "workspace", &mut problems);
        let (keyed, old) = (&a[0], &a[1]);
        // An older file: the key itself.
        std::fs::write(
            dir.join("trusted-agents.json"),
            serde_json::to_vec(&[old.trust_key("/w")]).unwrap(),
        )
        .unwrap();
        assert!(
            trusted(&dir, "/w", None, old),
            "an older record still counts"
        );
        let text = std::fs::read_to_string(dir.join("trusted-agents.json")).unwrap();
        assert!(
            !text.contains("agent2"),
            "rewritten as digests when read: {text}"
        );
        trust(&dir, "/w", None, keyed).unwrap();
        assert!(trusted(&dir, "/w", None, keyed) && trusted(&dir, "/w", None, old));
        let file = dir.join("trusted-agents.json");
        let text = std::fs::read_to_string(&file).unwrap();
        for secret in ["sk-very-secret-value", "API_KEY", "agent2"] {
            assert!(!text.contains(secret), "{secret} is in {text}");
        }
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
