//! Regression tests for what real editors showed (CodeCompanion, avante, agent-shell, the Rust
//! SDK, an independent client on the OpenAI path). Each drives the real binaries over pipes;
//! every line the agent writes is validated against the ACP v1 schema.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use support::fake_openai::{fake_server, sse};
use support::host::{HostProcess, TempDir};
use support::{error_of, select, AgentProcess, Reply, Spawn};

fn script() -> Value {
    json!({
        "rules": [
            {"when": "two steps", "responses": [
                [{"text": "Looking."}, {"tool": "read_file", "args": {"path": "a.txt"}}, {"tool": "list_directory", "args": {}}],
                [{"tool": "read_file", "args": {"path": "a.txt"}}],
                [{"text": "Done."}]
            ]},
            {"when": "overwrite", "responses": [
                [{"tool": "write_file", "args": {"path": "a.txt", "content": "replaced\n"}}],
                [{"text": "ok"}]
            ]},
            {"when": "new file", "responses": [
                [{"tool": "write_file", "args": {"path": "sub/dir/new.txt", "content": "fresh\n"}}],
                [{"text": "ok"}]
            ]},
            {"when": "sleepy", "responses": [
                [{"tool": "run_command", "args": {"command": "sleep 30"}}],
                [{"text": "ok"}]
            ]},
            {"when": "lots of output", "responses": [
                [{"tool": "run_command", "args": {"command": "head -c 100000 /dev/zero | tr '\\0' x"}}],
                [{"text": "ok"}]
            ]}
        ],
        "default": [[{"text": "Hello."}]]
    })
}

struct Setup {
    agent: AgentProcess,
    ws: TempDir,
    data: TempDir,
}

fn setup(tag: &str, caps: Value) -> Setup {
    let data = TempDir::new(&format!("ed-{tag}-data"));
    let ws = TempDir::new(&format!("ed-{tag}-ws"));
    std::fs::write(ws.path().join("a.txt"), "hello world\n").unwrap();
    let mut agent = AgentProcess::scripted(&script(), data.path());
    agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": caps}),
    );
    Setup { agent, ws, data }
}

fn tool_call_ids(updates: &[&Value]) -> Vec<String> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .map(|u| u["toolCallId"].as_str().unwrap().to_string())
        .collect()
}

/// (item 1) The scripted provider repeats `call_0_0` every turn (and OpenAI-compatible servers send
/// `call_0` or nothing): clients need ids unique within the session, live and replayed.
#[test]
fn tool_call_ids_are_unique_within_a_session_live_and_replayed() {
    let mut s = setup("ids", json!({}));
    let id = s.agent.new_session(s.ws.path());
    let mut live = vec![];
    for _ in 0..2 {
        let t = s.agent.prompt(&id, "two steps", |r| panic!("{r}"));
        assert_eq!(t.response["result"]["stopReason"], "end_turn");
        live.extend(tool_call_ids(&t.updates_for(&id)));
    }
    assert_eq!(live.len(), 6, "three tool calls per turn");
    let unique: HashSet<&String> = live.iter().collect();
    assert_eq!(unique.len(), live.len(), "ids repeat: {live:?}");

    let mut other = AgentProcess::scripted(&script(), s.data.path());
    other.initialize();
    let (resp, replay) = other.call(
        "session/load",
        json!({"sessionId": id, "cwd": s.ws.path(), "mcpServers": []}),
    );
    assert!(resp.get("result").is_some(), "{resp}");
    let replayed: Vec<&Value> = replay.iter().map(|l| &l["params"]["update"]).collect();
    assert_eq!(tool_call_ids(&replayed), live, "replay shows the same ids");
}

/// (item 2) With `fs.readTextFile` the write replaces the editor's buffer, so the dialog's diff must
/// show the buffer, not the disk. (item 3) A failed or malformed `fs/write_text_file` reply (avante
/// answers with an error *string* as the result) is a failed tool call with the client's words.
/// (item 5) Options mean what they do: clients map options by kind (CodeCompanion's "Accept"
/// takes the last `allow_once`, auto-approvers the first), so there is one `allow_once`, and
/// what lasts is an `allow_always` / `reject_always` option named for what it covers.
#[test]
fn write_dialogs_diff_the_buffer_and_failed_editor_writes_fail_the_tool() {
    let caps = json!({"fs": {"readTextFile": true, "writeTextFile": true}});
    let mut s = setup("write", caps);
    let id = s.agent.new_session(s.ws.path());
    for (reply, needle) in [
        (
            Reply::Result(json!("Error: buffer is read-only")),
            "Error: buffer is read-only",
        ),
        (Reply::Error(-32603, "disk full"), "disk full"),
    ] {
        let mut reply = Some(reply);
        let t = s
            .agent
            .prompt(&id, "overwrite", |r| match r["method"].as_str() {
                Some("fs/read_text_file") => Reply::Result(json!({"content": "unsaved buffer\n"})),
                Some("session/request_permission") => {
                    let diff = &r["params"]["toolCall"]["content"][0];
                    assert_eq!(diff["type"], "diff");
                    assert_eq!(
                        diff["oldText"], "unsaved buffer\n",
                        "the buffer, not the disk"
                    );
                    assert_eq!(diff["newText"], "replaced\n");
                    let kinds: Vec<&str> = r["params"]["options"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|o| o["kind"].as_str().unwrap())
                        .collect();
                    assert_eq!(
                        kinds,
                        [
                            "allow_once",
                            "allow_always",
                            "allow_always",
                            "reject_once",
                            "reject_always"
                        ],
                        "one allow_once, first: what kind-mapping clients take"
                    );
                    assert_eq!(r["params"]["options"][0]["name"], "Allow once");
                    select("allow_once")
                }
                Some("fs/write_text_file") => reply.take().unwrap(),
                other => panic!("unexpected {other:?}"),
            });
        assert_eq!(t.response["result"]["stopReason"], "end_turn");
        let ups = t.updates_for(&id);
        let last = ups
            .iter()
            .rev()
            .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"].is_string())
            .unwrap();
        assert_eq!(last["status"], "failed", "{last}");
        let text = last["content"][0]["content"]["text"].as_str().unwrap();
        assert!(text.contains(needle) && !text.contains("Wrote"), "{text}");
    }
    assert_eq!(
        std::fs::read_to_string(s.ws.path().join("a.txt")).unwrap(),
        "hello world\n"
    );

    // 3. A new file in a missing folder: the folder is made, the editor's write succeeds.
    let ws = s.ws.path().to_path_buf();
    let t = s
        .agent
        .prompt(&id, "new file", |r| match r["method"].as_str() {
            Some("session/request_permission") => select("allow_once"),
            Some("fs/write_text_file") => {
                let path = r["params"]["path"].as_str().unwrap();
                assert!(std::path::Path::new(path).parent().unwrap().is_dir());
                std::fs::write(path, r["params"]["content"].as_str().unwrap()).unwrap();
                Reply::Result(Value::Null)
            }
            other => panic!("unexpected {other:?}"),
        });
    let ups = t.updates_for(&id);
    assert!(ups.iter().any(|u| u["status"] == "completed"), "{ups:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("sub/dir/new.txt")).unwrap(),
        "fresh\n"
    );
}

/// (item 6) Titles come from the prompt's plain text (avante wraps prompts in XML-like tags) and an
/// unknown title is never sent as null.
#[test]
fn titles_come_from_the_prompts_plain_text() {
    let mut s = setup("title", json!({}));
    let id = s.agent.new_session(s.ws.path());
    let t = s.agent.prompt(
        &id,
        "<task>\n<user_request>Fix the   parser</user_request>\n</task>",
        |r| panic!("{r}"),
    );
    let info = t
        .updates_for(&id)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "session_info_update")
        .unwrap()
        .clone();
    assert_eq!(info["title"], "Fix the parser");
    let listed = s.agent.call_ok("session/list", json!({}));
    assert_eq!(listed["sessions"][0]["title"], "Fix the parser");
}

/// (item 8) A display terminal's result whose output was truncated keeps `_meta.terminal_exit`.
#[test]
fn truncated_display_terminal_output_keeps_its_exit() {
    let mut s = setup("trunc", json!({"_meta": {"terminal_output": true}}));
    let id = s.agent.new_session(s.ws.path());
    s.agent.call_ok(
        "session/set_mode",
        json!({"sessionId": id, "modeId": "bypass"}),
    );
    let t = s.agent.prompt(&id, "lots of output", |r| panic!("{r}"));
    let ups = t.updates_for(&id);
    let last = ups
        .iter()
        .rev()
        .find(|u| u["status"] == "completed")
        .unwrap_or_else(|| panic!("{ups:?}"));
    assert_eq!(last["_meta"]["maka"]["truncated"], true, "{last}");
    assert_eq!(last["_meta"]["terminal_exit"]["exit_code"], 0, "{last}");
}

/// (item 9) `session/new` is refused until `initialize` succeeds; a refused one does not count.
#[test]
fn session_methods_wait_for_a_successful_initialize() {
    let data = TempDir::new("ed-init-data");
    let ws = TempDir::new("ed-init-ws");
    let mut agent = AgentProcess::scripted(&script(), data.path());
    let (resp, _) = agent.call("initialize", json!({"protocolVersion": "one"}));
    assert_eq!(error_of(&resp)["code"], -32602);
    let (resp, _) = agent.call("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    let err = error_of(&resp);
    assert_eq!(err["code"], -32600, "{resp}");
    assert!(err["message"].as_str().unwrap().contains("initialize"));
    agent.initialize();
    agent.new_session(ws.path());
}

/// (item 7) `-32602` messages are one sentence, not "Invalid params: Invalid params: …".
#[test]
fn invalid_params_messages_have_one_prefix() {
    let mut s = setup("prefix", json!({}));
    let id = s.agent.new_session(s.ws.path());
    for (method, params) in [
        (
            "session/set_mode",
            json!({"sessionId": id, "modeId": "yolo"}),
        ),
        (
            "session/set_config_option",
            json!({"sessionId": id, "configId": "speed", "value": "x"}),
        ),
        ("authenticate", json!({"methodId": "nope"})),
    ] {
        let (resp, _) = s.agent.call(method, params);
        let msg = error_of(&resp)["message"].as_str().unwrap().to_string();
        assert_eq!(msg.matches("Invalid params").count(), 1, "{method}: {msg}");
    }
}

fn external_host(data: &TempDir) -> HostProcess {
    HostProcess::start_env(
        data.path(),
        vec![("MAKA_SCRIPT".into(), script().to_string())],
    )
}

fn adapter_for(host: &HostProcess, caps: Value) -> AgentProcess {
    let mut agent = AgentProcess::spawn_with(Spawn {
        args: vec!["--host-url".into(), host.url("")],
        env: vec![
            ("RUST_LOG".into(), "info".into()),
            ("MAKA_HOST_TOKEN".into(), host.token.clone()),
        ],
    });
    agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": caps}),
    );
    agent
}

/// (item 9) A prompt that fails while starting must wake `session/close`, which otherwise waited its
/// full 10 s.
#[test]
fn close_right_after_a_prompt_that_failed_to_start_is_prompt() {
    let data = TempDir::new("ed-close-data");
    let ws = TempDir::new("ed-close-ws");
    let host = external_host(&data);
    let mut agent = adapter_for(&host, json!({}));
    let id = agent.new_session(ws.path());
    host.ok(
        "session.lifecycle.set",
        json!({"sessionId": id, "state": "archived"}),
    );
    // The close arrives while `turn.start` is still in flight: it waits for the prompt, which
    // then fails to start.
    let started = Instant::now();
    let prompt = agent.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "hello"}]}),
    );
    let close = agent.request("session/close", json!({"sessionId": id}));
    let (resp, _) = agent.response_to(&prompt);
    // Cancelled by the close (ACP), or refused by the host if it answered first.
    assert!(
        resp["result"]["stopReason"] == "cancelled"
            || resp["error"]["data"]["makaCode"] == "session_archived",
        "{resp}"
    );
    let (resp, _) = agent.response_to(&close);
    assert!(resp.get("result").is_some(), "{resp}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "close waited {:?}",
        started.elapsed()
    );
}

/// (item 9) At stdin EOF every editor terminal is released — also with an external host, which does
/// not stop with the adapter — and the turn nobody can follow is stopped.
#[test]
fn terminals_are_released_at_stdin_eof_with_an_external_host() {
    let data = TempDir::new("ed-eof-data");
    let ws = TempDir::new("ed-eof-ws");
    let host = external_host(&data);
    let mut agent = adapter_for(&host, json!({"terminal": true}));
    let id = agent.new_session(ws.path());
    agent.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "sleepy"}]}),
    );
    loop {
        let v = agent.recv();
        let (Some(method), Some(rid)) = (v["method"].as_str(), v.get("id")) else {
            continue;
        };
        let result = match method {
            "session/request_permission" => {
                json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})
            }
            "terminal/create" => json!({"terminalId": "term-1"}),
            "terminal/wait_for_exit" => break, // never answered: the command "runs"
            other => panic!("unexpected {other}"),
        };
        agent.send(&json!({"jsonrpc": "2.0", "id": rid, "result": result}));
    }
    agent.close_stdin();
    let rest = agent.drain();
    assert!(
        rest.iter()
            .any(|v| v["method"] == "terminal/release" && v["params"]["terminalId"] == "term-1"),
        "no terminal/release after EOF: {rest:?}"
    );
    // The host stopped the turn the client left behind.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = host.ok("session.get", json!({"sessionId": id}));
        if s["session"]["activeTurnId"].is_null() {
            break;
        }
        assert!(Instant::now() < deadline, "the turn kept running: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn provider_agent(port: u16, data: &TempDir) -> AgentProcess {
    provider_agent_for(port, data, json!({}))
}

/// As [`provider_agent`], for a client that advertises `capabilities`.
fn provider_agent_for(port: u16, data: &TempDir, capabilities: Value) -> AgentProcess {
    let mut agent = AgentProcess::on_fake_provider(port, data.path(), &[]);
    agent.call_ok(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": capabilities}),
    );
    agent
}

fn raw(status: u16, content_type: &str, body: &str, extra: &str) -> String {
    format!(
        "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
        body.len()
    )
}

/// (item 7) A provider failure reaches the person as one sentence (status, provider, what to do) —
/// never a raw HTML page — with the details in `data`; retries are shown while they happen.
#[test]
fn provider_failures_are_sentences_and_retries_are_shown() {
    let html = "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>";
    let mut responses: Vec<String> = (0..5)
        .map(|_| raw(502, "text/html", html, "Retry-After: 0\r\n"))
        .collect();
    responses.push(raw(
        404,
        "application/json",
        "{\"error\":{\"message\":\"The model `fake-model` does not exist\"}}",
        "",
    ));
    let (port, _) = fake_server(responses);
    let data = TempDir::new("ed-prov-data");
    let ws = TempDir::new("ed-prov-ws");
    let mut agent = provider_agent(port, &data);
    let id = agent.new_session(ws.path());
    let t = agent.prompt(&id, "hi", |r| panic!("{r}"));
    let err = error_of(&t.response);
    let msg = err["message"].as_str().unwrap();
    assert!(
        msg.contains("HTTP 502 Bad Gateway") && msg.contains("127.0.0.1") && !msg.contains('<'),
        "{msg}"
    );
    assert_eq!(
        msg.trim_end().matches(". ").count(),
        0,
        "one sentence: {msg}"
    );
    assert!(msg.ends_with('.'), "{msg}");
    assert_eq!(err["data"]["details"]["httpStatus"], 502, "{err}");
    assert!(err["data"]["details"]["body"]
        .as_str()
        .unwrap()
        .contains("nginx"));
    let retries = t
        .updates_for(&id)
        .into_iter()
        .filter(|u| {
            u["sessionUpdate"] == "agent_thought_chunk"
                && u["content"]["text"].as_str().unwrap().contains("retrying")
        })
        .count();
    assert_eq!(retries, 4, "each retry is shown");
    assert!(
        !t.updates_for(&id)
            .iter()
            .any(|u| u["sessionUpdate"] == "notice"),
        "no notice to a client that did not advertise session.notices"
    );
    // What was streamed is what a reload replays: the same retry thoughts, byte for byte.
    let thoughts = |updates: Vec<&Value>| -> Vec<Value> {
        updates
            .into_iter()
            .filter(|u| u["sessionUpdate"] == "agent_thought_chunk")
            .cloned()
            .collect()
    };
    let live = thoughts(t.updates_for(&id));
    let mut other = provider_agent(port, &data);
    let (_, replay) = other.call(
        "session/load",
        json!({"sessionId": id, "cwd": ws.path(), "mcpServers": []}),
    );
    let replayed = thoughts(replay.iter().map(|l| &l["params"]["update"]).collect());
    assert_eq!(replayed, live);
    drop(other);

    let t = agent.prompt(&id, "again", |r| panic!("{r}"));
    let msg = error_of(&t.response)["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("HTTP 404 Not Found")
            && msg.contains("does not exist")
            && msg.contains("MAKA_MODEL"),
        "{msg}"
    );
}

/// Retries in two model calls of one turn (before a tool call and after it) are each shown
/// whole, under ids of their own: attempts count from 1 in every call, and the same id twice
/// would show the second retry as a cut tail of the first, or not at all.
#[test]
fn retries_in_later_steps_of_a_turn_are_shown_whole() {
    let busy = "{\"error\":{\"message\":\"busy\"}}";
    let responses = vec![
        raw(503, "application/json", busy, "Retry-After: 0\r\n"),
        sse(&[
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\": \"notes.txt\"}"}}]}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
        ]),
        raw(502, "application/json", busy, "Retry-After: 0\r\n"),
        sse(&[
            json!({"choices": [{"delta": {"content": "Read it."}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
        ]),
    ];
    let (port, _) = fake_server(responses);
    let data = TempDir::new("ed-retry2-data");
    let ws = TempDir::new("ed-retry2-ws");
    std::fs::write(ws.path().join("notes.txt"), "n\n").unwrap();
    let mut agent = provider_agent(port, &data);
    let id = agent.new_session(ws.path());
    let t = agent.prompt(&id, "read the notes", |r| panic!("{r}"));
    assert_eq!(t.text(), "Read it.");
    let thoughts = t.thoughts(&id);
    assert_eq!(thoughts.len(), 2, "{thoughts:#?}");
    assert_ne!(thoughts[0].0, thoughts[1].0);
    assert!(
        thoughts[0]
            .1
            .starts_with("The model provider did not answer (HTTP 503"),
        "{thoughts:#?}"
    );
    assert!(
        thoughts[1]
            .1
            .starts_with("The model provider did not answer (HTTP 502"),
        "{thoughts:#?}"
    );
}

/// ACP `notice` (issue 26 item 2): a client that advertises `session.notices` is told of each
/// provider retry as a warning notice — live only, as notices are — and not as a thought.
#[test]
fn provider_retries_are_notices_to_clients_that_show_notices() {
    let busy = "{\"error\":{\"message\":\"busy\"}}";
    let mut responses: Vec<String> = (0..2)
        .map(|_| raw(503, "application/json", busy, "Retry-After: 0\r\n"))
        .collect();
    responses.push(sse(&[
        json!({"choices": [{"delta": {"content": "Hello after all."}}]}),
        json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
    ]));
    let (port, _) = fake_server(responses);
    let data = TempDir::new("ed-notice-data");
    let ws = TempDir::new("ed-notice-ws");
    let mut agent = provider_agent_for(port, &data, json!({"session": {"notices": {}}}));
    let id = agent.new_session(ws.path());
    let t = agent.prompt(&id, "hi", |r| panic!("{r}"));
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
    let updates = t.updates_for(&id);
    let notices: Vec<(&str, &str)> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "notice")
        .map(|u| {
            (
                u["severity"].as_str().unwrap(),
                u["title"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(notices.len(), 2, "{updates:#?}");
    for (k, (severity, title)) in notices.iter().enumerate() {
        assert_eq!(*severity, "warning");
        assert!(
            title.contains("HTTP 503") && title.contains(&format!("attempt {} of 5", k + 2)),
            "{title}"
        );
    }
    assert!(
        !updates
            .iter()
            .any(|u| u["sessionUpdate"] == "agent_thought_chunk"),
        "retries are not thoughts for this client: {updates:#?}"
    );
    assert_eq!(t.text(), "Hello after all.");
    // Notices are live events, not history: a reload by such a client replays none of them
    // (and no thought either); a client without notices replays the retries as thoughts.
    let load = |caps: Value| -> Vec<Value> {
        let mut other = provider_agent_for(port, &data, caps);
        let (_, replay) = other.call(
            "session/load",
            json!({"sessionId": id, "cwd": ws.path(), "mcpServers": []}),
        );
        replay
            .iter()
            .map(|l| l["params"]["update"].clone())
            .filter(|u| {
                u["sessionUpdate"] == "notice" || u["sessionUpdate"] == "agent_thought_chunk"
            })
            .collect()
    };
    assert_eq!(
        load(json!({"session": {"notices": {}}})),
        Vec::<Value>::new()
    );
    let thoughts = load(json!({}));
    assert_eq!(thoughts.len(), 2, "{thoughts:#?}");
    assert!(
        thoughts
            .iter()
            .all(|u| u["sessionUpdate"] == "agent_thought_chunk"
                && u["content"]["text"].as_str().unwrap().contains("HTTP 503")),
        "{thoughts:#?}"
    );
}

/// A session whose one MCP server cannot start (its command does not exist).
fn session_with_a_broken_mcp_server(agent: &mut AgentProcess, ws: &TempDir) -> String {
    let broken =
        json!([{"name": "broken", "command": "/nonexistent/mcp-server", "args": [], "env": []}]);
    let r = agent.call_ok(
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": broken}),
    );
    let id = r["sessionId"].as_str().unwrap().to_string();
    agent.expect_commands(&id);
    id
}

/// (item 10) MCP start-up problems are told to the person but never enter the model's context (a
/// trailing assistant message made some servers continue it instead of answering).
#[test]
fn mcp_startup_warnings_stay_out_of_the_models_context() {
    let (port, seen) = fake_server(vec![
        sse(&[
            json!({"choices": [{"delta": {"content": "Hi there."}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
        ]),
        sse(&[
            json!({"choices": [{"delta": {"content": "Again."}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
        ]),
    ]);
    let data = TempDir::new("ed-mcp-data");
    let ws = TempDir::new("ed-mcp-ws");
    let mut agent = provider_agent(port, &data);
    let id = session_with_a_broken_mcp_server(&mut agent, &ws);
    let t = agent.prompt(&id, "hello", |r| panic!("{r}"));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert!(
        t.text().contains("broken") && t.text().contains("Hi there."),
        "{}",
        t.text()
    );
    agent.prompt(&id, "and again", |r| panic!("{r}"));
    let seen = seen.lock().unwrap();
    for (i, req) in seen.iter().enumerate() {
        let msgs = req.body["messages"].as_array().unwrap();
        assert_eq!(
            msgs.last().unwrap()["role"],
            "user",
            "request {i} ends with the prompt"
        );
        assert!(
            !req.body.to_string().contains("broken"),
            "request {i}: {}",
            req.body
        );
    }
    drop(seen);
    // The person sees the notice again when the session is loaded.
    let mut other = provider_agent(port, &data);
    let (_, replay) = other.call(
        "session/load",
        json!({"sessionId": id, "cwd": ws.path(), "mcpServers": []}),
    );
    let replayed: String = replay
        .iter()
        .filter(|l| l["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .map(|l| l["params"]["update"]["content"]["text"].as_str().unwrap())
        .collect();
    assert!(replayed.contains("broken"), "{replayed}");
}

/// The same MCP failure to a client that shows notices (issue 26 item 2): a warning notice
/// naming the server, no agent text, and nothing of it on a reload (notices are not history).
#[test]
fn mcp_startup_failures_are_notices_to_clients_that_show_notices() {
    let (port, _) = fake_server(vec![sse(&[
        json!({"choices": [{"delta": {"content": "Hi there."}}]}),
        json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
    ])]);
    let data = TempDir::new("ed-mcp-notice-data");
    let ws = TempDir::new("ed-mcp-notice-ws");
    let caps = json!({"session": {"notices": {}}});
    let mut agent = provider_agent_for(port, &data, caps.clone());
    let id = session_with_a_broken_mcp_server(&mut agent, &ws);
    let t = agent.prompt(&id, "hello", |r| panic!("{r}"));
    assert_eq!(t.text(), "Hi there.", "no agent text but the reply");
    let notices: Vec<&Value> = t
        .updates_for(&id)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "notice")
        .collect();
    assert_eq!(notices.len(), 1, "{notices:#?}");
    assert_eq!(notices[0]["severity"], "warning");
    let title = notices[0]["title"].as_str().unwrap();
    assert!(
        title.contains("`broken`") && title.ends_with('.'),
        "{title}"
    );
    let mut other = provider_agent_for(port, &data, caps);
    let (_, replay) = other.call(
        "session/load",
        json!({"sessionId": id, "cwd": ws.path(), "mcpServers": []}),
    );
    let shown: Vec<&Value> = replay
        .iter()
        .map(|l| &l["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "notice" || u.to_string().contains("broken"))
        .collect();
    assert!(shown.is_empty(), "{shown:#?}");
}
