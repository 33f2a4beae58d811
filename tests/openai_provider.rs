//! The real OpenAI-compatible provider code path, end to end: the host talks to a local fake
//! Chat Completions server that replays recorded streaming responses (text, tool calls split
//! across chunks, errors, 429) and records what it was sent.

#![cfg(feature = "host")]

mod support;
use serde_json::json;
use support::fake_openai::{fake_server, http, sse};
use support::host::{kinds, HostProcess, TempDir};

fn host_for(port: u16, data: &TempDir) -> HostProcess {
    HostProcess::start_env(
        data.path(),
        vec![
            (
                "MAKA_OPENAI_BASE_URL".into(),
                format!("http://127.0.0.1:{port}/v1"),
            ),
            ("MAKA_OPENAI_API_KEY".into(), "sk-test-123".into()),
            ("MAKA_MODEL".into(), "fake-model".into()),
            ("MAKA_MODEL_THINKING_LEVELS".into(), "low,high".into()),
        ],
    )
}

#[test]
fn streams_text_and_split_tool_calls_retries_429_and_feeds_results_back() {
    let ws = TempDir::new("oa-ws");
    std::fs::write(ws.path().join("notes.txt"), "the secret is 42\n").unwrap();
    let responses = vec![
        http(
            429,
            "{\"error\":{\"message\":\"slow down\"}}",
            &[("Retry-After", "0")],
        ),
        sse(&[
            json!({"choices": [{"delta": {"role": "assistant", "reasoning_content": "Need the file."}}]}),
            json!({"choices": [{"delta": {"content": "Let me "}}]}),
            json!({"choices": [{"delta": {"content": "read it."}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "call_A", "type": "function", "function": {"name": "read_", "arguments": "{\"pa"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "file", "arguments": "th\": \"notes.txt\"}"}}]}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 9}}),
        ]),
        sse(&[
            json!({"choices": [{"delta": {"content": "The secret is 42."}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 150, "completion_tokens": 6}}),
        ]),
    ];
    let (port, seen) = fake_server(responses);
    let data = TempDir::new("oa-data");
    let host = host_for(port, &data);
    let models = host.ok("models.list", json!({}));
    assert_eq!(models["connections"][0]["slug"], "openai");
    assert_eq!(models["connections"][0]["models"][0]["id"], "fake-model");
    host.create_session("s", ws.path(), "bypass");
    let rev = host.ok("session.get", json!({"sessionId": "s"}))["session"]["revision"].clone();
    host.ok(
        "session.configuration.update",
        json!({"sessionId": "s", "expectedRevision": rev, "patch": {"thinkingLevel": "high"}}),
    );
    host.start_turn("s", "t", "what is the secret?");
    let frames = host.until_terminal("s", 0);
    let k = kinds(&frames);
    let retry = frames
        .iter()
        .find(|f| f["kind"] == "turn_status" && f["providerRetry"].is_object())
        .expect("the retry is reported");
    assert!(retry["providerRetry"]["reason"]
        .as_str()
        .unwrap()
        .contains("429"));
    let thinking: String = frames
        .iter()
        .filter(|f| f["kind"] == "thinking_delta")
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    assert_eq!(thinking, "Need the file.");
    let text: String = frames
        .iter()
        .filter(|f| f["kind"] == "text_delta")
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Let me read it.The secret is 42.");
    let start = frames.iter().find(|f| f["kind"] == "tool_start").unwrap();
    // The provider's id stays internal: clients see an id the host minted.
    assert_eq!(start["toolName"], "read_file");
    let minted = start["toolCallId"].as_str().unwrap();
    assert!(minted.starts_with("tc_") && minted != "call_A", "{minted}");
    assert_eq!(start["args"], json!({"path": "notes.txt"}));
    assert!(k.contains(&"usage".to_string()));
    let usage = frames.iter().rfind(|f| f["kind"] == "usage").unwrap();
    assert_eq!(usage["context"]["usedTokens"], 156);
    assert_eq!(frames.last().unwrap()["outcome"], "completed");

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3, "429 + two model steps");
    for r in seen.iter() {
        assert_eq!(r.auth.as_deref(), Some("Bearer sk-test-123"));
        assert_eq!(r.body["model"], "fake-model");
        assert_eq!(r.body["stream"], true);
        assert_eq!(r.body["reasoning_effort"], "high");
        let tools: Vec<&str> = r.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert!(tools.contains(&"read_file") && tools.contains(&"run_command"));
    }
    let second = seen[2].body["messages"].as_array().unwrap();
    let assistant = second
        .iter()
        .find(|m| m["role"] == "assistant" && m["tool_calls"].is_array())
        .unwrap();
    assert_eq!(assistant["tool_calls"][0]["id"], "call_A");
    let tool_msg = second.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool_msg["tool_call_id"], "call_A");
    assert_eq!(tool_msg["content"], "the secret is 42\n");
    assert_eq!(second[0]["role"], "system");
}

#[test]
fn provider_errors_fail_the_turn_with_the_providers_message() {
    let ws = TempDir::new("oa-err-ws");
    let (port, _) = fake_server(vec![
        http(
            400,
            "{\"error\":{\"message\":\"model fake-model does not exist\"}}",
            &[],
        ),
        http(401, "{\"error\":{\"message\":\"bad key\"}}", &[]),
        sse(&[
            json!({"choices": [{"delta": {"content": "trunc"}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "length"}]}),
        ]),
        sse(&[json!({"error": {"message": "mid-stream failure"}})]),
    ]);
    let data = TempDir::new("oa-err-data");
    let host = host_for(port, &data);
    host.create_session("s", ws.path(), "bypass");
    let mut after = 0;
    for (turn, outcome, class, needle) in [
        (
            "t1",
            "failed",
            Some("provider_error"),
            Some("does not exist"),
        ),
        ("t2", "failed", Some("provider_auth"), Some("bad key")),
        ("t3", "max_tokens", None, None),
        (
            "t4",
            "failed",
            Some("provider_error"),
            Some("mid-stream failure"),
        ),
    ] {
        host.start_turn("s", turn, "hello");
        let frames = host.until_terminal("s", after);
        after = frames.last().unwrap()["seq"].as_u64().unwrap();
        let last = frames.last().unwrap();
        assert_eq!(last["outcome"], outcome, "{turn}: {last}");
        if let Some(c) = class {
            assert_eq!(last["failureClass"], c, "{turn}");
            assert!(
                last["failureMessage"]
                    .as_str()
                    .unwrap()
                    .contains(needle.unwrap()),
                "{turn}: {last}"
            );
        }
    }
}

#[test]
fn persistent_5xx_is_retried_then_reported() {
    let ws = TempDir::new("oa-5xx-ws");
    let busy = http(
        503,
        "{\"error\":{\"message\":\"overloaded\"}}",
        &[("Retry-After", "0")],
    );
    let (port, seen) = fake_server(vec![
        busy.clone(),
        busy.clone(),
        busy.clone(),
        busy.clone(),
        busy,
    ]);
    let data = TempDir::new("oa-5xx-data");
    let host = host_for(port, &data);
    host.create_session("s", ws.path(), "bypass");
    host.start_turn("s", "t", "hello");
    let frames = host.until_terminal("s", 0);
    let retries = frames
        .iter()
        .filter(|f| f["providerRetry"].is_object())
        .count();
    assert_eq!(retries, 4);
    let last = frames.last().unwrap();
    assert_eq!(last["failureClass"], "provider_unavailable");
    assert!(last["failureMessage"].as_str().unwrap().contains("503"));
    assert_eq!(seen.lock().unwrap().len(), 5);
}

/// `/compact` through the real provider: the summary request carries the conversation and no
/// tools, and the next turn's context starts from the summary instead of the old messages.
#[test]
fn compact_replaces_the_history_the_model_sees_with_its_summary() {
    let ws = TempDir::new("oa-compact-ws");
    let answer = |text: &str| {
        sse(&[
            json!({"choices": [{"delta": {"content": text}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 900, "completion_tokens": 12}}),
        ])
    };
    let (port, seen) = fake_server(vec![
        answer("Paris is the capital of France."),
        answer("User asked about the capital of France (Paris)."),
        answer("Lyon is second."),
    ]);
    let data = TempDir::new("oa-compact-data");
    let host = host_for(port, &data);
    host.create_session("s", ws.path(), "bypass");
    for (turn, text) in [
        ("t1", "what is the capital of France?"),
        ("t2", "/compact"),
        ("t3", "and the second city?"),
    ] {
        let after = host.head_seq("s");
        host.start_turn("s", turn, text);
        let frames = host.until_terminal("s", after);
        assert_eq!(frames.last().unwrap()["outcome"], "completed", "{turn}");
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    let summary_request = &seen[1].body;
    assert!(
        summary_request
            .get("tools")
            .is_none_or(|t| t.as_array().is_some_and(|a| a.is_empty())),
        "{summary_request}"
    );
    let msgs = summary_request["messages"].as_array().unwrap();
    assert!(msgs
        .iter()
        .any(|m| m["content"] == "what is the capital of France?"));
    assert!(msgs.last().unwrap()["content"]
        .as_str()
        .unwrap()
        .starts_with("Summarise the conversation"));
    let next = seen[2].body["messages"].as_array().unwrap();
    let all = serde_json::to_string(next).unwrap();
    assert!(
        !all.contains("what is the capital of France?"),
        "old turns still sent: {all}"
    );
    assert_eq!(
        next[1]["content"],
        "Summary of the earlier conversation:\nUser asked about the capital of France (Paris)."
    );
    assert_eq!(next.last().unwrap()["content"], "and the second city?");
}

/// Issue 13 (should fix): streams that end without a finish reason or `[DONE]`, garbage SSE,
/// an HTML page with 200, a stream that goes silent (or sends only keep-alives), and a
/// `Retry-After` of an hour each end the turn `failed`, naming the cause — never `end_turn`
/// with cut text, never a wait without end.
#[test]
fn misbehaving_providers_fail_the_turn_naming_the_cause() {
    use support::fake_openai::{sse_raw, sse_then_silence};
    let ws = TempDir::new("oa-bad-ws");
    let cut = "data: {\"choices\":[{\"delta\":{\"content\":\"Half an ans\"}}]}\n\n";
    let (port, _) = fake_server(vec![
        sse_raw(cut),
        sse_raw("data: {not json\n\nevent: nonsense\n\n"),
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<html><body>Welcome to nginx!</body></html>".to_string(),
        sse_then_silence(": keep-alive\n\n"),
        http(429, "{\"error\":{\"message\":\"quota\"}}", &[("Retry-After", "3600")]),
        // Garbage between good chunks, then a normal end: not a whole answer.
        sse_raw(
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {not json\n\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
        ),
        // A 5 MiB delta (one line over the 4 MiB line limit), then a normal end.
        sse_raw(&format!(
            "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\ndata: {{\"choices\":[{{\"delta\":{{\"content\":\"end\"}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n",
            "x".repeat(5 * 1024 * 1024)
        )),
    ]);
    let data = TempDir::new("oa-bad-data");
    let host = HostProcess::start_env(
        data.path(),
        vec![
            (
                "MAKA_OPENAI_BASE_URL".into(),
                format!("http://127.0.0.1:{port}/v1"),
            ),
            ("MAKA_MODEL".into(), "fake-model".into()),
            ("MAKA_PROVIDER_IDLE_TIMEOUT_MS".into(), "1500".into()),
        ],
    );
    host.create_session("s", ws.path(), "bypass");
    for (turn, class, needle) in [
        (
            "t1",
            "provider_error",
            "stopped in the middle of its answer",
        ),
        ("t2", "provider_error", "did not answer with a model stream"),
        ("t3", "provider_error", "did not answer with a model stream"),
        ("t4", "provider_timeout", "sent nothing for 1 s"),
        ("t5", "provider_unavailable", "asked to wait 3600 s"),
        ("t6", "provider_error", "not JSON"),
        ("t7", "provider_error", "over the 4 MiB line limit"),
    ] {
        let started = std::time::Instant::now();
        let after = host.head_seq("s");
        host.start_turn("s", turn, "hi");
        let frames = host.until_terminal("s", after);
        let end = frames.last().unwrap();
        assert_eq!(end["outcome"], "failed", "{turn}: {end}");
        assert_eq!(end["failureClass"], class, "{turn}: {end}");
        let msg = end["failureMessage"].as_str().unwrap();
        assert!(msg.contains(needle), "{turn}: {msg}");
        assert!(!msg.contains('<'), "{turn}: {msg}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{turn} took {:?}",
            started.elapsed()
        );
    }
}

/// (issue 45, case 7) A provider's 401 body that echoes the API key reaches neither the client
/// (its error, any line on stdout), nor the log, nor any file of the data dir — whether the key
/// came from the environment or from the config file `maka-acp login` writes. One row a source.
#[test]
fn a_key_echoed_by_the_provider_stays_out_of_sight() {
    const KEY: &str = "sk-live-echoed-0123456789abcdef";
    let config = TempDir::new("oa-echo-config");
    let config_file = config.path().join("config.json");
    std::fs::write(&config_file, json!({"apiKey": KEY}).to_string()).unwrap();
    let config_file = config_file.display().to_string();
    for (source, extra) in [
        ("environment", [("MAKA_OPENAI_API_KEY", KEY)]),
        ("config file", [("MAKA_CONFIG", config_file.as_str())]),
    ] {
        let echo = json!({"error": {"message": format!("Incorrect API key provided: {KEY}. You can find your API key at https://example.invalid."), "type": "invalid_request_error"}});
        let (port, seen) = fake_server(vec![http(401, &echo.to_string(), &[])]);
        let data = TempDir::new("oa-echo-data");
        let ws = TempDir::new("oa-echo-ws");
        let mut a = support::AgentProcess::on_fake_provider(port, data.path(), &extra);
        a.initialize();
        let s = a.new_session(ws.path());
        let t = a.prompt(&s, "hello", |r| panic!("{source}: {r}"));
        let seen_auth = seen.lock().unwrap()[0].auth.clone();
        assert_eq!(seen_auth, Some(format!("Bearer {KEY}")), "{source}");
        let message = support::error_of(&t.response)["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            message.contains("401") && message.contains("[redacted]"),
            "{source}: the provider's words, the key redacted: {}",
            t.response
        );
        assert!(
            a.stderr_contains("model call attempt"),
            "{source}: the WARN line"
        );
        a.close_stdin();
        let mut lines = t.lines.clone();
        lines.extend(a.drain());
        a.wait_exit(std::time::Duration::from_secs(10));
        for line in &lines {
            assert!(
                !line.to_string().contains(KEY),
                "{source}: on stdout: {line}"
            );
        }
        assert!(
            !a.stderr().contains(KEY),
            "{source}: in the log:\n{}",
            a.stderr()
        );
        let held = support::host::files_holding(data.path(), KEY);
        assert!(held.is_empty(), "{source}: in the data dir: {held:#?}");
    }
}
