//! Every command block in README.md works as written (issue 29, item 2): each fenced block
//! carries a `<!-- readme: KIND -->` marker on the line before it, and this test runs or checks
//! every block by its kind, so a block that stops working, or a new block nobody handles, fails
//! here.
//!
//! - `ci`: commands CI runs itself: each line is in `.ci/run` (which runs them, on a clean
//!   clone).
//! - `run`: run by bash as written, with `maka-acp` on `PATH` (this build), a throwaway HOME,
//!   and the model address pointed at a local stand-in (the one substitution: `127.0.0.1:11434`
//!   and the example port 8765 become free loopback ports).
//! - `agent`: each line starts the agent; this test plays the editor (initialize, a session, a
//!   prompt). A line with an endpoint must reach the stand-in with the line's model; a line
//!   with only a key must fail its prompt naming the default endpoint it tried.
//! - `zed`: the same snippet as docs/editors.md's (which tests/editor_snippets.rs starts).
//! - `agents-json`: a subagent declaration the host reads.
//! - `help`: the text `maka-acp --help` prints.
//! - `dev`: each script exists, is executable and takes the options shown.
//! - `layout`: each path named exists.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::fake_openai::{fake_server, sse};
use support::host::TempDir;
use support::{AgentProcess, BIN, PROVIDER_VARIABLES};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[derive(Debug)]
struct Block {
    kind: String,
    /// The line of the opening fence, 1-based.
    line: usize,
    body: String,
}

/// Every fenced block of the page, with the marker before it ("" when there is none).
fn blocks(page: &str) -> Vec<Block> {
    let lines: Vec<&str> = page.lines().collect();
    let mut out = vec![];
    let mut i = 0;
    while i < lines.len() {
        if lines[i].starts_with("```") {
            let kind = i
                .checked_sub(1)
                .and_then(|p| lines[p].strip_prefix("<!-- readme: "))
                .and_then(|m| m.strip_suffix(" -->"))
                .unwrap_or("")
                .to_string();
            let start = i;
            i += 1;
            let mut body = String::new();
            while i < lines.len() && !lines[i].starts_with("```") {
                body.push_str(lines[i]);
                body.push('\n');
                i += 1;
            }
            out.push(Block {
                kind,
                line: start + 1,
                body,
            });
        }
        i += 1;
    }
    out
}

fn readme_blocks(kind: &str) -> Vec<Block> {
    let all = blocks(&read("README.md"));
    let of_kind: Vec<Block> = all.into_iter().filter(|b| b.kind == kind).collect();
    assert!(!of_kind.is_empty(), "README.md has no `{kind}` block");
    of_kind
}

/// A block's commands: comment lines dropped, trailing comments cut, continuations joined.
fn commands(body: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    let mut pending = String::new();
    for line in body.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = match line.find("  #") {
            Some(at) => line[..at].trim_end(),
            None => line,
        };
        match line.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(line);
                out.push(std::mem::take(&mut pending).trim().to_string());
            }
        }
    }
    out
}

#[test]
fn every_block_has_a_kind_this_test_handles() {
    let known = [
        "ci",
        "run",
        "agent",
        "zed",
        "agents-json",
        "help",
        "dev",
        "layout",
    ];
    for b in blocks(&read("README.md")) {
        assert!(
            known.contains(&b.kind.as_str()),
            "README.md line {}: a block without a known `<!-- readme: KIND -->` marker ({:?}); \
             add one, and handle it in tests/readme.rs",
            b.line,
            b.kind
        );
    }
}

#[test]
fn ci_blocks_are_what_ci_runs() {
    let ci = read(".ci/run");
    let ci_lines: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    for b in readme_blocks("ci") {
        for c in commands(&b.body) {
            assert!(
                ci_lines.iter().any(|l| l.contains(c.as_str())),
                "README.md line {}: `{c}` is not run by .ci/run",
                b.line
            );
        }
    }
}

/// A directory whose `maka-acp` is this build, first on `PATH`.
fn path_with_this_build(dir: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("maka-acp");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(BIN, &link).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// bash running `script` hermetically: this build on PATH, a throwaway HOME and data dir, no
/// provider from the developer's environment.
fn bash(dir: &Path, script: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.args(["-c", script])
        .current_dir(dir)
        .env("PATH", path_with_this_build(dir))
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("home/.config"))
        .env("XDG_DATA_HOME", dir.join("home/.local/share"))
        .env("MAKA_CONFIG", dir.join("no-config.json"))
        .env_remove("MAKA_HOST_URL")
        .env_remove("MAKA_HOST_TOKEN")
        .env_remove("MAKA_DATA_DIR");
    for k in PROVIDER_VARIABLES {
        cmd.env_remove(k);
    }
    cmd
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn model_of(text: &str) -> String {
    let at = text.find("MAKA_MODEL=").expect("a MAKA_MODEL in the block") + "MAKA_MODEL=".len();
    text[at..]
        .split(|c: char| c.is_whitespace())
        .next()
        .unwrap()
        .to_string()
}

fn stand_in_reply() -> String {
    sse(&[
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "From the "}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": "README."}, "finish_reason": "stop"}]}),
    ])
}

#[test]
fn run_blocks_work_as_written() {
    for b in readme_blocks("run") {
        let dir = TempDir::new("readme-run");
        let (model_port, _seen) = fake_server(vec![stand_in_reply(); 4]);
        let script = b
            .body
            .replace("127.0.0.1:11434", &format!("127.0.0.1:{model_port}"))
            .replace("8765", &free_port().to_string());
        let mut cmd = bash(dir.path(), &script);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pgid = child.id();
        let done = std::thread::spawn(move || child.wait_with_output());
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Whatever the block left running (it should have stopped it) goes with its group.
        // (`--` first: procps' kill reads a lone `-PGID` after a signal as "every process".)
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{pgid}")])
            .status();
        let out = done.join().unwrap().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "README.md line {}: the block failed ({}):\n{stdout}\n{stderr}",
            b.line,
            out.status
        );
        let model = model_of(&b.body);
        assert!(
            stdout.contains(&format!("\"{model}\"")),
            "README.md line {}: the host's answer names the block's model {model}: {stdout}",
            b.line
        );
    }
}

#[test]
fn agent_lines_start_an_agent_that_works() {
    for b in readme_blocks("agent") {
        for line in commands(&b.body) {
            let dir = TempDir::new("readme-agent");
            let ws = TempDir::new("readme-agent-ws");
            let (port, seen) = fake_server(vec![stand_in_reply()]);
            let script = line.replace("127.0.0.1:11434", &format!("127.0.0.1:{port}"));
            let mut cmd = bash(dir.path(), &script);
            cmd.env("MAKA_DATA_DIR", dir.path().join("data"));
            let mut agent = AgentProcess::from_command(cmd);
            agent.initialize();
            let id = agent.new_session(ws.path());
            let t = agent.prompt(&id, "hello", |r| panic!("{r}"));
            if line.contains("MAKA_OPENAI_BASE_URL=") {
                assert_eq!(
                    t.response["result"]["stopReason"], "end_turn",
                    "`{line}`: {}",
                    t.response
                );
                assert_eq!(t.text(), "From the README.", "`{line}`");
                let seen = seen.lock().unwrap();
                assert_eq!(seen[0].body["model"], model_of(&line).as_str(), "`{line}`");
            } else {
                // Only a key: the default endpoint, which this machine cannot reach. The
                // error names it as the default and does not blame a variable never set.
                let message = t.response["error"]["message"].as_str().unwrap_or_default();
                assert!(
                    message.contains("https://api.openai.com/v1") && message.contains("default"),
                    "`{line}`: {}",
                    t.response
                );
                assert!(
                    !message.contains("MAKA_OPENAI_BASE_URL is right"),
                    "`{line}`: {message}"
                );
            }
        }
    }
}

/// The snippet docs/editors.md shows for Zed (tests/editor_snippets.rs starts that one).
fn editors_page_zed() -> Value {
    let page = read("docs/editors.md");
    let at = page.find("<!-- snippet: zed -->").unwrap();
    let rest = &page[at..];
    let body = &rest[rest.find("```json\n").unwrap() + 8..];
    serde_json::from_str(&body[..body.find("```").unwrap()]).unwrap()
}

#[test]
fn the_zed_snippet_is_the_one_the_editor_tests_start() {
    for b in readme_blocks("zed") {
        let v: Value = serde_json::from_str(&b.body)
            .unwrap_or_else(|e| panic!("README.md line {}: not JSON: {e}", b.line));
        assert_eq!(v, editors_page_zed(), "README.md line {}", b.line);
    }
}

#[test]
fn the_subagent_declaration_is_one_the_host_reads() {
    for b in readme_blocks("agents-json") {
        let v: Value = serde_json::from_str(&b.body)
            .unwrap_or_else(|e| panic!("README.md line {}: not JSON: {e}", b.line));
        let agents = v["agents"].as_object().expect("an `agents` object");
        assert!(!agents.is_empty());
        for (name, a) in agents {
            assert!(a["command"].is_string(), "{name}: a command");
            assert!(
                a.as_object()
                    .unwrap()
                    .keys()
                    .all(|k| ["command", "args", "env", "description"].contains(&k.as_str())),
                "{name}: only keys docs/configuration.md describes: {a}"
            );
        }
    }
}

#[test]
fn the_command_line_block_is_what_help_prints() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for b in readme_blocks("help") {
        assert!(
            help.contains(&b.body),
            "README.md line {}: not what `maka-acp --help` prints; it prints:\n{help}",
            b.line
        );
        assert!(b.body.contains("maka-acp generate"), "generate is listed");
    }
}

#[test]
fn development_commands_exist_and_take_their_options() {
    let ci = read(".ci/run");
    for b in readme_blocks("dev") {
        for c in commands(&b.body) {
            let words: Vec<&str> = c.split_whitespace().collect();
            if words[0] == "cargo" {
                assert!(ci.contains(&c), "`{c}`: .ci/run runs it");
                continue;
            }
            let script = root().join(words[0]);
            let meta = std::fs::metadata(&script)
                .unwrap_or_else(|e| panic!("README.md line {}: {}: {e}", b.line, words[0]));
            assert!(
                std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0,
                "{} is executable",
                words[0]
            );
            let text = std::fs::read_to_string(&script).unwrap();
            for flag in words.iter().filter(|w| w.starts_with("--")) {
                assert!(text.contains(flag), "`{c}`: {} takes {flag}", words[0]);
            }
        }
    }
}

#[test]
fn every_path_in_the_layout_exists() {
    for b in readme_blocks("layout") {
        for line in b.body.lines() {
            for word in line.split_whitespace() {
                let looks_like_path = (word.starts_with("src/")
                    || word.starts_with("docs/")
                    || word.starts_with("tests/")
                    || word.starts_with("scripts/")
                    || word.starts_with("dist/"))
                    && !word.contains('(');
                if looks_like_path {
                    let path: PathBuf = root().join(word.trim_end_matches([',', ';', ':']));
                    assert!(
                        path.exists(),
                        "README.md layout names {word}, which is gone"
                    );
                }
            }
        }
    }
}
