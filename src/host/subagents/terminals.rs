//! ACP `terminal/*` served to a subagent by the host's command runner: each terminal is a
//! process in its own group whose output is kept (bounded, the tail) until it is released. A
//! delegation's terminals are killed when it ends ([`Terminals`] on drop), so nothing a
//! subagent started outlives its delegation.

use crate::acp::types::from_agents::{CreateTerminal, TerminalRef};
use crate::host::tools::shell::kill_group;
use crate::jsonrpc::{code, Responder, ResponseError};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Output kept per terminal unless the agent asks for less.
const OUTPUT_LIMIT: usize = 1024 * 1024;
/// Terminals one delegation may hold at once.
const MAX_TERMINALS: usize = 16;

#[derive(Default)]
struct Out {
    text: String,
    truncated: bool,
    /// `(exitCode, signal)` once it exited.
    exit: Option<(Option<i32>, Option<String>)>,
}

struct Term {
    pgid: u32,
    limit: usize,
    out: Mutex<Out>,
    exited: Condvar,
}

impl Term {
    fn lock(&self) -> MutexGuard<'_, Out> {
        self.out.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Default)]
pub struct Terminals {
    map: HashMap<String, Arc<Term>>,
    /// The last output of released terminals, for showing a tool call that embedded one.
    released: Vec<(String, String)>,
}

fn exit_status(exit: &(Option<i32>, Option<String>)) -> Value {
    json!({"exitCode": exit.0, "signal": exit.1})
}

fn bad(msg: impl Into<String>) -> ResponseError {
    ResponseError::new(code::INVALID_PARAMS, msg.into())
}

impl Terminals {
    fn term(&self, which: &TerminalRef) -> Result<Arc<Term>, ResponseError> {
        let id = &which.terminal_id;
        self.map.get(id).cloned().ok_or_else(|| {
            ResponseError::new(code::RESOURCE_NOT_FOUND, format!("no terminal {id}"))
        })
    }

    /// `terminal/create`: runs exactly `argv` (the program and arguments the gate judged);
    /// `cwd` must already be checked to be inside the session's folders.
    pub fn create(
        &mut self,
        asked: &CreateTerminal,
        argv: &[&str],
        cwd: &Path,
        confinement: &crate::host::sandbox::Confinement,
    ) -> Result<Value, ResponseError> {
        if self.map.len() >= MAX_TERMINALS {
            return Err(ResponseError::new(
                code::INVALID_REQUEST,
                format!("{MAX_TERMINALS} terminals are open; release some first"),
            ));
        }
        let Some((&command, args)) = argv.split_first().filter(|(c, _)| !c.is_empty()) else {
            return Err(bad("`command` is required"));
        };
        let limit = asked
            .output_byte_limit
            .map_or(OUTPUT_LIMIT, |l| (l as usize).min(OUTPUT_LIMIT));
        let mut cmd = Command::new(command);
        cmd.args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let declared = asked
            .env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_str()));
        crate::host::child_env::apply(&mut cmd, declared);
        confinement
            .apply(&mut cmd, &format!("`{command}`"), cwd, &[])
            .map_err(|why| ResponseError::new(code::INVALID_REQUEST, why))?;
        let mut child = cmd.spawn().map_err(|e| {
            ResponseError::new(
                code::INTERNAL_ERROR,
                format!("cannot start `{command}`: {e}"),
            )
        })?;
        crate::host::reaper::track(child.id());
        let term = Arc::new(Term {
            pgid: child.id(),
            limit,
            out: Mutex::default(),
            exited: Condvar::new(),
        });
        let mut readers = vec![];
        for pipe in [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let t = Arc::clone(&term);
            readers.extend(crate::threads::spawn("agent-terminal-output", move || {
                let mut pipe = pipe;
                let mut buf = [0u8; 8192];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut out = t.lock();
                    out.text.push_str(&String::from_utf8_lossy(&buf[..n]));
                    let limit = t.limit;
                    out.truncated |= crate::host_api::keep_tail(&mut out.text, limit);
                }
            }));
        }
        let t = Arc::clone(&term);
        let pgid = term.pgid;
        let watcher = crate::threads::spawn("agent-terminal-wait", move || {
            let status = child.wait().ok();
            // The output is complete once both pipes closed.
            for r in readers {
                let _ = r.join();
            }
            crate::host::reaper::untrack(t.pgid);
            crate::host::reaper::adopt_orphans();
            let mut out = t.lock();
            out.exit = Some((
                status.and_then(|s| s.code()),
                status
                    .and_then(|s| s.signal())
                    .map(|s| format!("signal {s}")),
            ));
            t.exited.notify_all();
        });
        if watcher.is_none() {
            // Nobody could tell when it exits: it does not run.
            kill_group(pgid);
            crate::host::reaper::untrack(pgid);
            return Err(ResponseError::internal(
                "cannot start a thread to watch the command; it was stopped",
            ));
        }
        let id = crate::host::random_id("term");
        self.map.insert(id.clone(), term);
        Ok(json!({ "terminalId": id }))
    }

    pub fn output(&self, which: &TerminalRef) -> Result<Value, ResponseError> {
        let t = self.term(which)?;
        let out = t.lock();
        let mut v = json!({"output": out.text, "truncated": out.truncated});
        if let Some(exit) = &out.exit {
            v["exitStatus"] = exit_status(exit);
        }
        Ok(v)
    }

    /// Answers when the command exits (on a thread of its own: the delegation goes on).
    pub fn wait_for_exit(&self, which: &TerminalRef, responder: Responder) {
        match self.term(which) {
            Err(e) => responder.respond(Err(e)),
            Ok(t) => {
                // Without the thread the responder is dropped, which answers with an error.
                let _ = crate::threads::spawn("agent-terminal-exit", move || {
                    let mut out = t.lock();
                    while out.exit.is_none() {
                        out = t.exited.wait(out).unwrap_or_else(|p| p.into_inner());
                    }
                    let status = out.exit.as_ref().map(exit_status).unwrap_or(Value::Null);
                    drop(out);
                    responder.respond(Ok(status));
                });
            }
        }
    }

    pub fn kill(&self, which: &TerminalRef) -> Result<Value, ResponseError> {
        kill_group(self.term(which)?.pgid);
        Ok(json!({}))
    }

    pub fn release(&mut self, which: &TerminalRef) -> Result<Value, ResponseError> {
        let t = self.term(which)?;
        kill_group(t.pgid);
        let id = &which.terminal_id;
        self.map.remove(id);
        self.released.push((id.clone(), t.lock().text.clone()));
        if self.released.len() > MAX_TERMINALS {
            self.released.remove(0);
        }
        Ok(json!({}))
    }

    /// What terminal `id` printed (open or recently released).
    pub fn text_of(&self, id: &str) -> Option<String> {
        match self.map.get(id) {
            Some(t) => Some(t.lock().text.clone()),
            None => self
                .released
                .iter()
                .rev()
                .find(|(r, _)| r == id)
                .map(|(_, text)| text.clone()),
        }
    }
}

impl Drop for Terminals {
    fn drop(&mut self) {
        for t in self.map.values() {
            if t.lock().exit.is_none() {
                kill_group(t.pgid);
            }
        }
    }
}
