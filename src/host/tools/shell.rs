//! `run_command`: `sh -c` in the session's cwd, in its own process group so that a stop or a
//! timeout kills everything it started. Output is streamed as it arrives and its tail kept for
//! the result.

use super::{CallError, ToolEnv, ToolOutcome, RESULT_TEXT_LIMIT};
use crate::host_api::keep_tail;
use crate::host_api::wire::ToolResultContent;
use crate::host_api::wire::ToolStatus;
use crossbeam_channel::{bounded, select};
use serde_json::{json, Value};
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
pub const MAX_TIMEOUT_MS: u64 = 30 * 60_000;
/// Largest `tool_output_delta` chunk.
const CHUNK: usize = 8 * 1024;

enum Chunk {
    Data(&'static str, String),
    Closed,
}

/// `run_command`: a shell command, in the editor's terminal when it offers one.
pub struct RunCommand;

impl super::Tool for RunCommand {
    fn name(&self) -> &'static str {
        "run_command"
    }

    fn spec(&self) -> (&'static str, serde_json::Value) {
        (
            "Run a shell command (sh -c) in the working directory. Output is streamed; the command is killed after timeout_ms (default 120000).",
            serde_json::json!({"type": "object", "properties": {"command": {"type": "string"}, "timeout_ms": {"type": "integer"}}, "required": ["command"]}),
        )
    }

    fn plan(
        &self,
        args: &serde_json::Value,
        _: &std::path::Path,
    ) -> Result<super::ToolPlan, String> {
        let Some(command) = super::text_arg(args, "command").filter(|c| !c.trim().is_empty())
        else {
            return Err("run_command needs `command`".into());
        };
        Ok(super::ToolPlan {
            title: command.to_string(),
            activity_kind: "command",
            locations: vec![],
            review: Some(crate::host_api::wire::Review::Command),
            touches: vec![],
        })
    }

    fn run(&self, env: &mut dyn ToolEnv, args: &serde_json::Value) -> ToolOutcome {
        let command = super::text_arg(args, "command").unwrap_or_default();
        let timeout = args
            .get("timeout_ms")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(DEFAULT_TIMEOUT_MS)
            .clamp(1, MAX_TIMEOUT_MS);
        run_command(env, command, timeout)
    }
}

pub fn run_command(env: &mut dyn ToolEnv, command: &str, timeout_ms: u64) -> ToolOutcome {
    if env.has_client_service("terminal") {
        return run_in_editor_terminal(env, command, timeout_ms);
    }
    let cwd = env.cwd().to_path_buf();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(&cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    crate::host::child_env::apply(&mut cmd, std::iter::empty::<(&str, &str)>());
    // A principal's command runs with the host's private data hidden, or not at all.
    if let Err(why) = env
        .confinement()
        .apply(&mut cmd, &format!("`{command}`"), &cwd, &[])
    {
        return ToolOutcome::failed(why);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return ToolOutcome::failed(format!("cannot start `{command}`: {e}")),
    };
    let pgid = child.id();
    super::super::reaper::track(pgid);
    let (tx, rx) = bounded::<Chunk>(64);
    let mut pipes = 0;
    if let Some(out) = child.stdout.take() {
        pipes += 1;
        spawn_pipe_reader("stdout", out, tx.clone());
    }
    if let Some(err) = child.stderr.take() {
        pipes += 1;
        spawn_pipe_reader("stderr", err, tx.clone());
    }
    drop(tx);

    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    let mut tail = String::new();
    // The whole output, bounded, kept as an artifact when the tail is not all of it.
    let mut full: Vec<u8> = Vec::new();
    let mut truncated = false;
    let mut timed_out = false;
    let mut cancelled = false;
    let cancel = env.cancel().clone();
    // The call's own cancel (`turn.tool.cancel`), or a channel that never fires.
    let call_cancel = env.call_cancel().map(|c| c.receiver().clone());
    let never = crossbeam_channel::never::<()>();
    let call_cancelled = call_cancel.as_ref().unwrap_or(&never);
    while pipes > 0 {
        let remaining = deadline.saturating_duration_since(Instant::now());
        select! {
            recv(rx) -> msg => match msg {
                Ok(Chunk::Data(stream, text)) => {
                    env.output(stream, &text);
                    if full.len() + text.len() <= FULL_OUTPUT_LIMIT {
                        full.extend_from_slice(text.as_bytes());
                    }
                    tail.push_str(&text);
                    truncated |= keep_tail(&mut tail, RESULT_TEXT_LIMIT);
                }
                Ok(Chunk::Closed) => pipes -= 1,
                Err(_) => pipes = 0,
            },
            recv(cancel.receiver()) -> _ => { cancelled = true; break; }
            recv(call_cancelled) -> _ => { cancelled = true; break; }
            default(remaining) => { timed_out = true; break; }
        }
    }
    if cancelled || timed_out {
        kill_group(pgid);
        let _ = child.kill();
    }
    // A command that closed its output may still run (`exec >/dev/null; sleep`): a cancel
    // while it is waited for stops it as one during its output would.
    let stop_now = || {
        cancel.is_cancelled()
            || matches!(
                call_cancelled.try_recv(),
                Err(crossbeam_channel::TryRecvError::Disconnected)
            )
    };
    let (status, stopped) = wait_bounded(&mut child, pgid, &stop_now);
    cancelled |= stopped;
    // Background jobs of the command stay guarded until the host exits, those that left its
    // group too (they have just become the host's children).
    if !super::super::reaper::group_alive(pgid) {
        super::super::reaper::untrack(pgid);
    }
    super::super::reaper::adopt_orphans();
    let exit_code = status.and_then(|s| s.code());
    let signal = status.and_then(|s| s.signal()).map(signal_name);
    let ok = !cancelled && !timed_out && exit_code == Some(0);
    let full_output_artifact_id = if truncated {
        env.store_artifact("command-output.txt", &full)
    } else {
        None
    };
    let result = ToolResultContent::Terminal {
        command: command.to_string(),
        cwd: cwd.display().to_string(),
        exit_code,
        signal,
        timed_out,
        output: tail,
        output_truncated: truncated,
        terminal_id: None,
        full_output_artifact_id,
    };
    outcome(cancelled, ok, truncated, result)
}

/// The most of a command's output kept whole (as an artifact) beyond the tail in its result.
const FULL_OUTPUT_LIMIT: usize = 16 * 1024 * 1024;

/// Output the editor keeps per terminal (it drops the beginning beyond this).
const EDITOR_OUTPUT_LIMIT: usize = 1024 * 1024;

/// Runs the command in the editor's terminal: create → wait for exit (bounded by the timeout,
/// abandoned on stop) → kill if needed → read the output → release, always.
fn run_in_editor_terminal(env: &mut dyn ToolEnv, command: &str, timeout_ms: u64) -> ToolOutcome {
    let cwd = env.cwd().display().to_string();
    let created = env.call_client(
        "terminal.create",
        json!({"command": "sh", "args": ["-c", command], "cwd": cwd, "outputByteLimit": EDITOR_OUTPUT_LIMIT}),
        Duration::from_secs(30),
        // Even after a stop we need the id, to release what the editor created.
        true,
    );
    let terminal_id = match created
        .as_ref()
        .ok()
        .and_then(|v| v.get("terminalId"))
        .and_then(|v| v.as_str())
    {
        Some(id) => id.to_string(),
        None => {
            let why = match created {
                Err(e) => e.to_string(),
                Ok(v) => format!("no terminalId in {v}"),
            };
            return ToolOutcome::failed(format!("the editor could not start `{command}`: {why}"));
        }
    };
    let id = json!({"terminalId": terminal_id});
    let waited = env.call_client(
        "terminal.wait_for_exit",
        id.clone(),
        Duration::from_millis(timeout_ms),
        false,
    );
    let (timed_out, cancelled) = match &waited {
        Err(CallError::Timeout) => (true, false),
        Err(CallError::Cancelled) => (false, true),
        _ => (false, env.cancel().is_cancelled()),
    };
    if waited.is_err() {
        if let Err(e) = env.call_client("terminal.kill", id.clone(), Duration::from_secs(5), true) {
            log::warn!("terminal/kill {terminal_id}: {e}");
        }
    }
    let output = env.call_client("terminal.output", id.clone(), Duration::from_secs(5), true);
    if let Err(e) = env.call_client("terminal.release", id, Duration::from_secs(5), true) {
        log::warn!("terminal/release {terminal_id}: {e}");
    }
    let out = output.as_ref().ok();
    let mut text = out
        .and_then(|o| o.get("output"))
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string();
    let mut truncated = out
        .and_then(|o| o.get("truncated"))
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let full_output_artifact_id = if text.len() > RESULT_TEXT_LIMIT {
        env.store_artifact("command-output.txt", text.as_bytes())
    } else {
        None
    };
    truncated |= keep_tail(&mut text, RESULT_TEXT_LIMIT);
    let (exit_code, signal) = exit_status(waited.as_ref().ok(), out);
    // An editor may report no status at all (both answers valid without one): the command
    // ran and ended, its status unknown — completed with its output, not a failure.
    let ok =
        waited.is_ok() && matches!((exit_code, signal.as_deref()), (Some(0), _) | (None, None));
    let result = ToolResultContent::Terminal {
        command: command.to_string(),
        cwd,
        exit_code,
        signal,
        timed_out,
        output: text,
        output_truncated: truncated,
        terminal_id: Some(terminal_id),
        full_output_artifact_id,
    };
    outcome(cancelled, ok, truncated, result)
}

/// What the editor said of a command's end: `terminal/wait_for_exit`'s answer when it names an
/// exit code or a signal, else `terminal/output`'s `exitStatus` (an editor may answer the wait
/// with `{}`, which is valid, and report the status only with the output).
fn exit_status(waited: Option<&Value>, output: Option<&Value>) -> (Option<i32>, Option<String>) {
    let read = |v: &Value| {
        let code = v.get("exitCode").and_then(Value::as_i64).map(|c| c as i32);
        let signal = v.get("signal").and_then(Value::as_str).map(String::from);
        (code.is_some() || signal.is_some()).then_some((code, signal))
    };
    waited
        .and_then(read)
        .or_else(|| output.and_then(|o| o.get("exitStatus")).and_then(read))
        .unwrap_or((None, None))
}

/// A command's outcome: `cancelled` wins, then exit code 0 is `completed`, all else `failed`.
fn outcome(cancelled: bool, ok: bool, truncated: bool, result: ToolResultContent) -> ToolOutcome {
    let status = if cancelled {
        ToolStatus::Cancelled
    } else if ok {
        ToolStatus::Completed
    } else {
        ToolStatus::Failed
    };
    ToolOutcome {
        status,
        truncated,
        result,
    }
}

fn spawn_pipe_reader(
    stream: &'static str,
    mut pipe: impl Read + Send + 'static,
    tx: crossbeam_channel::Sender<Chunk>,
) {
    let spawned = std::thread::Builder::new()
        .name(format!("cmd-{stream}"))
        .spawn(move || {
            let mut buf = vec![0u8; CHUNK];
            let mut carry: Vec<u8> = Vec::new();
            loop {
                let n = match pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                carry.extend_from_slice(&buf[..n]);
                // Keep an incomplete UTF-8 sequence for the next read.
                let valid = match std::str::from_utf8(&carry) {
                    Ok(_) => carry.len(),
                    Err(e) if e.error_len().is_none() => e.valid_up_to(),
                    Err(_) => carry.len(),
                };
                let text = String::from_utf8_lossy(&carry[..valid]).into_owned();
                carry.drain(..valid);
                if !text.is_empty() && tx.send(Chunk::Data(stream, text)).is_err() {
                    break;
                }
            }
            if !carry.is_empty() {
                let _ = tx.send(Chunk::Data(
                    stream,
                    String::from_utf8_lossy(&carry).into_owned(),
                ));
            }
            let _ = tx.send(Chunk::Closed);
        });
    if let Err(e) = spawned {
        log::error!("cannot start a pipe reader: {e}");
    }
}

/// SIGKILL to the whole process group (the shell and everything it started).
pub fn kill_group(pgid: u32) {
    super::super::reaper::kill_group(pgid);
}

/// Waits for the command (its pipes closed, or its group killed): at most 5 s, then it is
/// killed; at once when `stop` says it was cancelled meanwhile (then `true`: it was stopped).
fn wait_bounded(
    child: &mut std::process::Child,
    pgid: u32,
    stop: &dyn Fn() -> bool,
) -> (Option<std::process::ExitStatus>, bool) {
    let start = Instant::now();
    let mut stopped = false;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return (Some(s), stopped),
            Ok(None) if !stopped && stop() => {
                stopped = true;
                kill_group(pgid);
                let _ = child.kill();
            }
            Ok(None) if start.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Ok(None) => {
                let _ = child.kill();
                return (child.wait().ok(), stopped);
            }
            Err(_) => return (None, stopped),
        }
    }
}

fn signal_name(sig: i32) -> String {
    match sig {
        9 => "SIGKILL".into(),
        15 => "SIGTERM".into(),
        2 => "SIGINT".into(),
        n => format!("signal {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (wait_for_exit's answer, terminal/output's answer) → (exit code, signal). One line a case.
    #[test]
    fn the_exit_status_is_what_the_editor_said_wherever_it_said_it() {
        use serde_json::json;
        let cases = [
            (json!({"exitCode": 0}), json!({}), (Some(0), None)),
            (
                json!({}),
                json!({"output": "", "exitStatus": {"exitCode": 0}}),
                (Some(0), None),
            ),
            (
                json!({"exitCode": null, "signal": null}),
                json!({"exitStatus": {"exitCode": 3}}),
                (Some(3), None),
            ),
            (
                json!({}),
                json!({"exitStatus": {"signal": "SIGKILL"}}),
                (None, Some("SIGKILL".to_string())),
            ),
            (
                json!({"exitCode": 2}),
                json!({"exitStatus": {"exitCode": 0}}),
                (Some(2), None),
            ),
            (json!({}), json!({"output": ""}), (None, None)),
        ];
        for (waited, output, want) in cases {
            assert_eq!(
                exit_status(Some(&waited), Some(&output)),
                want,
                "{waited} {output}"
            );
        }
    }
}
