//! A child process the host speaks JSON-RPC with over its stdin and stdout — an MCP server on
//! stdio, a subagent — started, wired and stopped one way: in its own process group, tracked
//! by the reaper (it dies with the host), the crate's one JSON-RPC transport on its pipes
//! (threads `<name>-reader` / `<name>-writer`), the tail of its stderr kept for the message
//! when it fails, and stopped with its whole process tree.

use crate::jsonrpc::{ClientCalls, Connection, Incoming, Outbox};
use crossbeam_channel::Receiver;
use std::io::BufReader;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most of a child's stderr kept.
const STDERR_TAIL: usize = 2048;

pub struct ChildPeer {
    child: Child,
    /// `None` once stopped.
    connection: Option<Connection>,
    pub outbox: Outbox,
    pub calls: Arc<ClientCalls>,
    /// What the child sends us: its requests and notifications.
    pub incoming: Receiver<Incoming>,
    stderr_tail: Arc<Mutex<String>>,
    /// Disconnected once its stderr has been read to the end.
    stderr_done: Receiver<()>,
}

impl ChildPeer {
    /// Starts `cmd` (its program, arguments, folder and environment already set) as the peer
    /// `name`: pipes, process group and tracking are added here.
    pub fn spawn(name: &str, mut cmd: Command) -> Result<ChildPeer, String> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().map_err(|e| e.to_string())?;
        crate::host::reaper::track(child.id());
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            end(&mut child);
            return Err("its pipes could not be opened".into());
        };
        let stderr_tail: Arc<Mutex<String>> = Arc::default();
        let (done_tx, stderr_done) = crossbeam_channel::bounded::<()>(0);
        if let Some(err) = child.stderr.take() {
            let tail = Arc::clone(&stderr_tail);
            let _ = crate::threads::spawn(format!("{name}-stderr"), move || {
                let _done = done_tx;
                use std::io::BufRead;
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                    t.push_str(&line);
                    t.push('\n');
                    crate::host_api::keep_tail(&mut t, STDERR_TAIL);
                }
            });
        }
        let connection = match Connection::from_io(name, BufReader::new(stdout), stdin) {
            Ok(c) => c,
            Err(e) => {
                end(&mut child);
                return Err(format!("the threads that talk to it could not start ({e})"));
            }
        };
        Ok(ChildPeer {
            child,
            outbox: connection.outbox.clone(),
            calls: Arc::clone(&connection.client_calls),
            incoming: connection.inbox.clone(),
            connection: Some(connection),
            stderr_tail,
            stderr_done,
        })
    }

    /// The last line it wrote to stderr (waiting briefly for words still in the pipe).
    pub fn last_words(&self) -> Option<String> {
        let _ = self.stderr_done.recv_timeout(Duration::from_millis(500));
        let tail = self.stderr_tail.lock().unwrap_or_else(|p| p.into_inner());
        tail.trim().lines().last().map(String::from)
    }

    /// Ends it: its whole process tree (its group, and what left the group with `setsid`),
    /// then our side of the pipes.
    pub fn stop(&mut self) {
        end(&mut self.child);
        if let Some(c) = self.connection.take() {
            c.finish();
        }
    }
}

impl Drop for ChildPeer {
    fn drop(&mut self) {
        if self.connection.is_some() {
            self.stop();
        }
    }
}

/// Kills a child's whole process tree (its group, and what left the group with `setsid`), reaps
/// it, and stops tracking it.
fn end(child: &mut std::process::Child) {
    crate::host::reaper::kill_tree(child.id());
    let _ = child.kill();
    let _ = child.wait();
    crate::host::reaper::untrack(child.id());
    // What it left behind earlier (re-parented to the host) dies with the host.
    crate::host::reaper::adopt_orphans();
}
