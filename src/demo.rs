//! `maka-acp demo`: plays a complete conversation through the real adapter and the embedded
//! host, offline, with the scripted provider, in a temporary workspace — and prints what an
//! editor would show: the streamed reply, a plan, tool calls, a permission request answered,
//! the edit's diff and a command's output.
//!
//! It is an ACP client: it spawns this same binary as the agent and talks to it over pipes.

use crate::host::tools::diff;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const PROMPT: &str =
    "Please make greeting.txt greet ACP instead of the world, and show me the result.";

fn script() -> Value {
    let plan = |edit: &str, show: &str| {
        json!({"tool": "update_plan", "args": {"entries": [
            {"content": "Read greeting.txt", "status": "completed"},
            {"content": "Replace \"world\" with \"ACP\"", "status": edit, "priority": "high"},
            {"content": "Show the result", "status": show, "priority": "low"}]}})
    };
    json!({"default": [
        [{"thinking": "The user wants a one-word change in greeting.txt. I should read it first."},
         {"text": "I'll start by reading the file."},
         {"tool": "read_file", "args": {"path": "greeting.txt"}}],
        [plan("in_progress", "pending")],
        [{"text": "Now the edit — this needs your permission."},
         {"tool": "edit_file", "args": {"path": "greeting.txt", "old_text": "Hello, world!", "new_text": "Hello, ACP!"}}],
        [plan("completed", "in_progress"), {"tool": "run_command", "args": {"command": "cat greeting.txt && wc -l greeting.txt"}}],
        [plan("completed", "completed")],
        [{"text": "Done: greeting.txt now says **Hello, ACP!** — everything else is unchanged."}]
    ]})
}

/// Colour only on a terminal; piped output stays plain text.
fn paint(s: String) -> String {
    use std::io::IsTerminal;
    static TTY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *TTY.get_or_init(|| std::io::stdout().is_terminal()) {
        return s;
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Prints a line; a closed stdout (`maka-acp demo | head`) is not an error worth a panic.
macro_rules! say {
    ($($t:tt)*) => {{ let _ = writeln!(std::io::stdout(), "{}", paint(format!($($t)*))); }};
}
macro_rules! say_part {
    ($($t:tt)*) => {{
        let mut out = std::io::stdout();
        let _ = write!(out, "{}", paint(format!($($t)*))).and_then(|_| out.flush());
    }};
}

struct Agent {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    next_id: i64,
}

impl Agent {
    fn send(&mut self, v: &Value) -> Result<(), String> {
        let mut line = v.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .map_err(|e| format!("cannot write to the agent: {e}"))
    }

    fn recv(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) => Err("the agent closed its output".into()),
            Ok(_) => serde_json::from_str(&line)
                .map_err(|e| format!("the agent wrote a non-JSON line ({e}): {line}")),
            Err(e) => Err(format!("cannot read from the agent: {e}")),
        }
    }

    /// Sends a request and handles everything until its response.
    fn call(&mut self, method: &str, params: Value, view: &mut View) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        loop {
            let msg = self.recv()?;
            match (msg.get("method").and_then(Value::as_str), msg.get("id")) {
                (Some("session/update"), None) => view.update(&msg["params"]["update"]),
                (Some("session/request_permission"), Some(req)) => {
                    let option = view.permission(&msg["params"]);
                    let req = req.clone();
                    self.send(&json!({"jsonrpc": "2.0", "id": req, "result": {"outcome": {"outcome": "selected", "optionId": option}}}))?;
                }
                (Some(other), Some(req)) => {
                    let req = req.clone();
                    self.send(&json!({"jsonrpc": "2.0", "id": req, "error": {"code": -32601, "message": format!("the demo client does not implement {other}")}}))?;
                }
                (Some(_), None) => {}
                (None, Some(got)) if got == &json!(id) => {
                    return match msg.get("error") {
                        Some(e) => Err(format!(
                            "{method} failed: {}",
                            e["message"].as_str().unwrap_or("?")
                        )),
                        None => Ok(msg["result"].clone()),
                    };
                }
                (None, _) => {}
            }
        }
    }
}

/// Renders updates the way a terminal client might.
#[derive(Default)]
struct View {
    /// Which kind of streamed text is being printed ("agent", "thinking").
    streaming: Option<&'static str>,
    titles: std::collections::HashMap<String, String>,
}

impl View {
    fn end_stream(&mut self) {
        if self.streaming.take().is_some() {
            say!("");
        }
    }

    fn update(&mut self, u: &Value) {
        let text = u["content"]["text"].as_str().unwrap_or_default();
        match u["sessionUpdate"].as_str().unwrap_or_default() {
            "agent_thought_chunk" => {
                if self.streaming != Some("thinking") {
                    self.end_stream();
                    say_part!("  \x1b[2m(thinking) ");
                    self.streaming = Some("thinking");
                }
                say_part!("{text}");
            }
            "agent_message_chunk" => {
                if self.streaming != Some("agent") {
                    self.end_stream();
                    say_part!("\x1b[0m\x1b[1magent ›\x1b[0m ");
                    self.streaming = Some("agent");
                }
                say_part!("{text}");
            }
            "tool_call" => {
                self.end_stream();
                let id = u["toolCallId"].as_str().unwrap_or_default().to_string();
                let title = u["title"].as_str().unwrap_or_default().to_string();
                say!(
                    "\x1b[0m  ⚙ {} [{}]",
                    title,
                    u["kind"].as_str().unwrap_or("other")
                );
                self.titles.insert(id, title);
            }
            "tool_call_update" => {
                let Some(status) = u["status"]
                    .as_str()
                    .filter(|s| *s == "completed" || *s == "failed")
                else {
                    return;
                };
                self.end_stream();
                let title = self
                    .titles
                    .get(u["toolCallId"].as_str().unwrap_or_default())
                    .cloned()
                    .unwrap_or_default();
                say!(
                    "  {} {title}: {status}",
                    if status == "completed" { "✔" } else { "✘" }
                );
                for c in u["content"].as_array().into_iter().flatten() {
                    match c["type"].as_str() {
                        Some("diff") => print_diff(c),
                        Some("content") => {
                            let t = c["content"]["text"].as_str().unwrap_or_default();
                            if t.starts_with("```") {
                                for line in t.lines().filter(|l| !l.starts_with("```")) {
                                    say!("      │ {line}");
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            "plan" => {
                self.end_stream();
                say!("  ☰ plan:");
                for e in u["entries"].as_array().into_iter().flatten() {
                    let mark = match e["status"].as_str() {
                        Some("completed") => "[x]",
                        Some("in_progress") => "[~]",
                        _ => "[ ]",
                    };
                    say!("      {mark} {}", e["content"].as_str().unwrap_or_default());
                }
            }
            "usage_update" => {}
            "session_info_update" => {
                if let Some(t) = u["title"].as_str() {
                    self.end_stream();
                    say!("  ✎ session title: {t}");
                }
            }
            _ => {}
        }
    }

    /// Shows the permission request and chooses "allow once".
    fn permission(&mut self, p: &Value) -> String {
        self.end_stream();
        say!(
            "\x1b[33m  ? permission requested: {}\x1b[0m",
            p["toolCall"]["title"].as_str().unwrap_or_default()
        );
        for c in p["toolCall"]["content"].as_array().into_iter().flatten() {
            if c["type"] == "diff" {
                print_diff(c);
            }
        }
        let options: Vec<String> = p["options"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| o["name"].as_str().unwrap_or_default().to_string())
            .collect();
        say!("    options: {}", options.join(" / "));
        let choice = p["options"]
            .as_array()
            .and_then(|o| o.iter().find(|o| o["kind"] == "allow_once"))
            .map(|o| {
                (
                    o["optionId"].as_str().unwrap_or_default().to_string(),
                    o["name"].as_str().unwrap_or_default().to_string(),
                )
            });
        match choice {
            Some((id, name)) => {
                say!("\x1b[32m    you › {name}\x1b[0m");
                id
            }
            None => "reject".into(),
        }
    }
}

fn print_diff(c: &Value) {
    let path = c["path"].as_str().unwrap_or_default();
    let old = c["oldText"].as_str().unwrap_or_default();
    let new = c["newText"].as_str().unwrap_or_default();
    let name = Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for line in diff::unified(&name, old, new).lines() {
        let colour = match line.chars().next() {
            Some('+') if !line.starts_with("+++") => "\x1b[32m",
            Some('-') if !line.starts_with("---") => "\x1b[31m",
            _ => "\x1b[2m",
        };
        say!("      {colour}{line}\x1b[0m");
    }
}

fn temp_dir(tag: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!(
        "maka-demo-{tag}-{}",
        crate::host_api::random_hex(4)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    std::fs::canonicalize(&dir).map_err(|e| e.to_string())
}

/// Runs the demo; returns the exit code.
pub fn run() -> i32 {
    match play() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("maka-acp demo: {e}");
            1
        }
    }
}

fn play() -> Result<(), String> {
    let workspace = temp_dir("workspace")?;
    let data = temp_dir("data")?;
    std::fs::write(workspace.join("greeting.txt"), "Hello, world!\n").map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .env("MAKA_SCRIPT", script().to_string())
        .env("MAKA_DATA_DIR", &data)
        .env("RUST_LOG", "error")
        .env_remove("MAKA_HOST_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the agent: {e}"))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("the agent has no pipes".into());
    };
    let mut agent = Agent {
        child,
        stdin,
        stdout: BufReader::new(stdout),
        next_id: 0,
    };
    let mut view = View::default();
    say!("\x1b[1mmaka-acp demo\x1b[0m — an ACP client talking to the real adapter, which started the embedded");
    say!(
        "Runtime Host with the offline scripted model. Workspace: {}\n",
        workspace.display()
    );

    let init = agent.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "maka-acp-demo", "version": env!("CARGO_PKG_VERSION")}}), &mut view)?;
    say!(
        "  ↔ initialize: protocol {}, agent {} {}",
        init["protocolVersion"],
        init["agentInfo"]["name"].as_str().unwrap_or("?"),
        init["agentInfo"]["version"].as_str().unwrap_or("?")
    );
    let new = agent.call(
        "session/new",
        json!({"cwd": workspace, "mcpServers": []}),
        &mut view,
    )?;
    let session = new["sessionId"].as_str().unwrap_or_default().to_string();
    say!("  ↔ session/new: {session}\n");
    say!("\x1b[1myou ›\x1b[0m {PROMPT}");
    let result = agent.call(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": PROMPT}]}),
        &mut view,
    )?;
    view.end_stream();
    say!(
        "\n  ↔ session/prompt finished: stopReason = {}",
        result["stopReason"]
    );
    let list = agent.call("session/list", json!({"cwd": workspace}), &mut view)?;
    for s in list["sessions"].as_array().into_iter().flatten() {
        say!(
            "  ↔ session/list: {} \"{}\" (updated {})",
            s["sessionId"].as_str().unwrap_or(""),
            s["title"].as_str().unwrap_or(""),
            s["updatedAt"].as_str().unwrap_or("")
        );
    }
    let after =
        std::fs::read_to_string(workspace.join("greeting.txt")).map_err(|e| e.to_string())?;
    say!("\n  greeting.txt on disk now: {:?}", after);
    drop(agent.stdin);
    let _ = agent.child.wait();
    let _ = std::fs::remove_dir_all(&workspace);
    let _ = std::fs::remove_dir_all(&data);
    say!("\nThat was ACP over stdio → maka-acp → Runtime Host → scripted model. Use a real model with");
    say!("MAKA_OPENAI_BASE_URL / MAKA_MODEL / MAKA_OPENAI_API_KEY, or save one with `maka-acp login`");
    say!("(see README.md and docs/configuration.md).");
    Ok(())
}
