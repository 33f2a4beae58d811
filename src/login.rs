//! `maka-acp login`: an interactive, plain-terminal flow (editors run it for ACP's terminal
//! auth method) that saves a model provider to the config file with mode 0600.
//!
//! Plain line-based stdin/stdout, so it works in any terminal, under tmux, and in a pty. The key
//! is read with echo off when stdin is a terminal (`stty -echo`), and never printed.

use crate::config;
use serde_json::{json, Value};
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

const DEFAULT_OPENAI_MODEL: &str = "gpt-4o-mini";
const DEFAULT_LOCAL_URL: &str = "http://127.0.0.1:11434/v1";

/// Runs the flow on the process's terminal; returns the exit code.
pub fn main() -> i32 {
    let Some(path) = config::config_file_path() else {
        eprintln!("maka-acp login: cannot find a config location: set MAKA_CONFIG or HOME");
        return 1;
    };
    let stdin = std::io::stdin();
    let tty = stdin.is_terminal();
    let echo = |on: bool| {
        if tty {
            let _ = std::process::Command::new("stty")
                .arg(if on { "echo" } else { "-echo" })
                .stdin(std::process::Stdio::inherit())
                .status();
        }
    };
    let mut input = stdin.lock();
    let mut out = std::io::stdout().lock();
    match run(&mut input, &mut out, &path, &echo) {
        Ok(()) => 0,
        Err(e) => {
            echo(true);
            let _ = writeln!(out);
            eprintln!("maka-acp login: {e}");
            1
        }
    }
}

/// The flow, over any input and output (tested).
pub fn run(
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    path: &Path,
    echo: &dyn Fn(bool),
) -> Result<(), String> {
    let w = |out: &mut dyn Write, s: &str| -> Result<(), String> {
        out.write_all(s.as_bytes())
            .and_then(|_| out.flush())
            .map_err(|e| format!("cannot write to the terminal: {e}"))
    };
    let mut ask = |out: &mut dyn Write, prompt: &str| -> Result<String, String> {
        w(out, prompt)?;
        let mut line = String::new();
        match input.read_line(&mut line) {
            Ok(0) => Err("cancelled (end of input); nothing was saved".into()),
            Ok(_) => Ok(line.trim().to_string()),
            Err(e) => Err(format!("cannot read the answer: {e}")),
        }
    };
    w(
        out,
        &format!(
            "maka-acp login: choose the model provider Maka uses.\n\
             Settings are saved to {} (readable only by you).\n\n\
             \x20 1) OpenAI (api.openai.com) — needs an API key\n\
             \x20 2) Another OpenAI-compatible endpoint (Ollama, vLLM, LM Studio, OpenRouter, …)\n\n",
            path.display()
        ),
    )?;
    let openai = loop {
        match ask(out, "Provider [1]: ")?.as_str() {
            "" | "1" => break true,
            "2" => break false,
            other => w(out, &format!("Please answer 1 or 2 (got {other:?}).\n"))?,
        }
    };
    let base_url = if openai {
        None
    } else {
        loop {
            let v = ask(out, &format!("Base URL [{DEFAULT_LOCAL_URL}]: "))?;
            let v = if v.is_empty() {
                DEFAULT_LOCAL_URL.to_string()
            } else {
                v
            };
            if v.starts_with("http://") || v.starts_with("https://") {
                break Some(v.trim_end_matches('/').to_string());
            }
            w(out, "The base URL must start with http:// or https://.\n")?;
        }
    };
    let model = loop {
        let prompt = if openai {
            format!("Model [{DEFAULT_OPENAI_MODEL}]: ")
        } else {
            "Model (as the endpoint names it): ".to_string()
        };
        match ask(out, &prompt)? {
            v if !v.is_empty() => break v,
            _ if openai => break DEFAULT_OPENAI_MODEL.to_string(),
            _ => w(out, "A model name is needed.\n")?,
        }
    };
    let key = loop {
        let prompt = if openai {
            "API key (typing is hidden): "
        } else {
            "API key, if the endpoint needs one (typing is hidden; empty for none): "
        };
        echo(false);
        let answer = ask(out, prompt);
        echo(true);
        w(out, "\n")?;
        let v = answer?;
        if v.is_empty() && openai {
            w(out, "OpenAI needs an API key.\n")?;
            continue;
        }
        break (!v.is_empty()).then_some(v);
    };
    save(path, openai, &model, base_url, key)?;
    w(
        out,
        &format!(
            "Saved: model {model} via {}. Restart or re-connect the agent to use it.\n",
            if openai {
                "OpenAI"
            } else {
                "the OpenAI-compatible endpoint"
            }
        ),
    )
}

/// Writes the answers into the settings file, keeping its other keys (thinking levels, context
/// window).
fn save(
    path: &Path,
    openai: bool,
    model: &str,
    base_url: Option<String>,
    key: Option<String>,
) -> Result<(), String> {
    let mut values = match std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
    {
        Some(Value::Object(existing)) => existing,
        _ => serde_json::Map::new(),
    };
    values.insert(
        "provider".into(),
        json!(if openai {
            "openai"
        } else {
            "openai-compatible"
        }),
    );
    values.insert("model".into(), json!(model));
    match base_url {
        Some(u) => values.insert("baseUrl".into(), json!(u)),
        None => values.remove("baseUrl"),
    };
    match key {
        Some(k) => values.insert("apiKey".into(), json!(k)),
        None => values.remove("apiKey"),
    };
    config::write_file(path, &values).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn re_asks_bad_answers_and_cancels_on_eof_without_writing() {
        let dir =
            std::env::temp_dir().join(format!("maka-login-{}", crate::host_api::random_hex(6)));
        let path = dir.join("config.json");
        let mut out = Vec::new();
        let mut input: &[u8] = b"3\n2\nftp://x\nhttp://127.0.0.1:9/v1/\n\nllama3\n";
        let e = run(&mut input, &mut out, &path, &|_| {}).unwrap_err();
        assert!(e.contains("cancelled"), "{e}");
        assert!(
            !path.exists(),
            "nothing is saved when the flow is cut short"
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Please answer 1 or 2"), "{text}");
        assert!(text.contains("must start with http"), "{text}");
        assert!(text.contains("A model name is needed"), "{text}");
        let mut input: &[u8] = b"2\nhttp://127.0.0.1:9/v1/\nllama3\n\n";
        run(&mut input, &mut Vec::new(), &path, &|_| {}).unwrap();
        let saved: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            saved,
            json!({"provider": "openai-compatible", "baseUrl": "http://127.0.0.1:9/v1", "model": "llama3"})
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
