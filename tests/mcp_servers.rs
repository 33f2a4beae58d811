//! MCP servers from the editor become the session's tools: real servers nobody here wrote
//! (npm `@modelcontextprotocol/server-everything`, PyPI `mcp-server-time`, installed by
//! `scripts/test`), a streamable-HTTP server in this test, and a misbehaving local server.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::time::{Duration, Instant};
use support::host::TempDir;
use support::{select, AgentProcess, Reply, Spawn};

fn script() -> Value {
    json!({"rules": [
        {"when": "use real", "responses": [
            [{"tool": "everything__echo", "args": {"message": "hi from maka"}}, {"tool": "time__get_current_time", "args": {"timezone": "UTC"}}],
            [{"text": "used them"}]]},
        {"when": "use local", "responses": [
            [{"tool": "fixture__ping", "args": {}}, {"tool": "web__shout", "args": {"text": "hello"}}],
            [{"tool": "fixture__die", "args": {}}],
            [{"text": "done"}]]},
        {"when": "ping", "responses": [[{"tool": "fixture__ping", "args": {}}], [{"text": "pinged"}]]},
        {"when": "over sse", "responses": [[{"tool": "sse__echo", "args": {"message": "hi over sse"}}], [{"text": "echoed"}]]},
        {"when": "extra", "responses": [[{"tool": "fixture__extra", "args": {}}], [{"text": "used extra"}]]}
    ], "default": [[{"text": "Hello."}]]})
}

fn agent(tag: &str, extra_env: &[(&str, &str)]) -> (AgentProcess, TempDir, TempDir) {
    let data = TempDir::new(&format!("mcp-{tag}-data"));
    let ws = TempDir::new(&format!("mcp-{tag}-ws"));
    let mut env = vec![
        ("RUST_LOG".to_string(), "info".to_string()),
        ("MAKA_SCRIPT".to_string(), script().to_string()),
        (
            "MAKA_DATA_DIR".to_string(),
            data.path().display().to_string(),
        ),
        (
            "XDG_CONFIG_HOME".to_string(),
            data.path().join("cfg").display().to_string(),
        ),
    ];
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let mut a = AgentProcess::spawn_with(Spawn { args: vec![], env });
    let init = a.initialize();
    assert_eq!(
        init["agentCapabilities"]["mcpCapabilities"],
        json!({"http": true, "sse": true})
    );
    (a, data, ws)
}

fn installed(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the tests with scripts/test, which installs the MCP servers")
    })
}

fn fixture(mode: &str, name: &str, marker: &str) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mcp_fixture.py");
    json!({"name": name, "command": "python3", "args": [script, mode, marker], "env": []})
}

fn allow(r: &Value) -> Reply {
    assert_eq!(r["method"], "session/request_permission", "{r}");
    select("allow_once")
}

fn results(t: &support::Transcript, session: &str) -> Vec<Value> {
    t.updates_for(session)
        .into_iter()
        .filter(|u| u["status"] == "completed" || u["status"] == "failed")
        .cloned()
        .collect()
}

#[test]
fn real_servers_from_npm_and_pypi_become_tools() {
    let (mut a, _d, ws) = agent("real", &[]);
    let servers = json!([
        {"name": "everything", "command": installed("MAKA_TEST_MCP_EVERYTHING"), "args": ["stdio"], "env": []},
        {"name": "time", "command": installed("MAKA_TEST_MCP_TIME"), "args": [], "env": [{"name": "TZ", "value": "UTC"}]}
    ]);
    let r = a.call_ok(
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": servers}),
    );
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let t = a.prompt(&sid, "use real servers", allow);
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
    // Each call named by its server's names (ACP `ToolCall.name`), not the model's
    // `server__tool`, live and when `session/load` replays it.
    let calls = |updates: Vec<&Value>| -> Vec<(String, Value)> {
        updates
            .into_iter()
            .filter(|u| u["sessionUpdate"] == "tool_call")
            .map(|u| (u["title"].as_str().unwrap().to_string(), u["name"].clone()))
            .collect()
    };
    let expected = vec![
        ("everything: echo".to_string(), json!("everything/echo")),
        (
            "time: get_current_time".to_string(),
            json!("time/get_current_time"),
        ),
    ];
    assert_eq!(calls(t.updates_for(&sid)), expected);
    a.call_ok("session/close", json!({"sessionId": sid}));
    let (loaded, replayed) = a.call(
        "session/load",
        json!({"sessionId": sid, "cwd": ws.path(), "mcpServers": []}),
    );
    assert!(loaded.get("result").is_some(), "{loaded}");
    let replayed: Vec<&Value> = replayed
        .iter()
        .filter(|l| l["method"] == "session/update")
        .map(|l| &l["params"]["update"])
        .collect();
    assert_eq!(calls(replayed), expected);
    let done = results(&t, &sid);
    assert_eq!(done.len(), 2, "{done:#?}");
    assert!(done.iter().all(|u| u["status"] == "completed"), "{done:#?}");
    let texts: Vec<&str> = done
        .iter()
        .map(|u| u["content"][0]["content"]["text"].as_str().unwrap())
        .collect();
    assert!(texts[0].contains("Echo: hi from maka"), "{texts:?}");
    assert!(texts[1].contains("UTC"), "{texts:?}");
}

/// A streamable-HTTP MCP server: JSON answers, an `Mcp-Session-Id`, and an SSE answer for calls.
fn http_server() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut len, mut session, mut token) = (0usize, None, None);
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("mcp-session-id:") {
                    session = Some(line[15..].trim().to_string());
                }
                if lower.starts_with("x-token:") {
                    token = Some(line[8..].trim().to_string());
                }
            }
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let method = msg["method"].as_str().unwrap_or("").to_string();
            log.lock()
                .unwrap()
                .push(format!("{method} session={session:?} token={token:?}"));
            let reply = |status: &str, ctype: &str, body: String, extra: &str| {
                format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}", body.len())
            };
            let out = match method.as_str() {
                "initialize" => reply("200 OK", "application/json", json!({"jsonrpc": "2.0", "id": msg["id"], "result": {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "web", "version": "1"}}}).to_string(), "Mcp-Session-Id: sess-42\r\n"),
                "tools/list" => reply("200 OK", "application/json", json!({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": [{"name": "shout", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]}}).to_string(), ""),
                "tools/call" => {
                    let text = msg["params"]["arguments"]["text"].as_str().unwrap_or("").to_uppercase();
                    let data = json!({"jsonrpc": "2.0", "id": msg["id"], "result": {"content": [{"type": "text", "text": text}]}});
                    reply("200 OK", "text/event-stream", format!("event: message\ndata: {data}\n\n"), "")
                }
                _ => reply("202 Accepted", "application/json", String::new(), ""),
            };
            let _ = stream.write_all(out.as_bytes());
        }
    });
    (port, seen)
}

#[test]
fn stdio_with_paging_http_with_sse_and_a_server_that_dies() {
    let (mut a, _d, ws) = agent("local", &[]);
    let (port, seen) = http_server();
    let servers = json!([
        fixture("ok", "fixture", "maka-mcp-local"),
        {"type": "http", "name": "web", "url": format!("http://127.0.0.1:{port}/mcp"), "headers": [{"name": "X-Token", "value": "t0k"}]}
    ]);
    let sid = a.call_ok(
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": servers}),
    )["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let t = a.prompt(&sid, "use local servers", allow);
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
    let done = results(&t, &sid);
    assert_eq!(done.len(), 3, "{done:#?}");
    assert_eq!(done[0]["content"][0]["content"]["text"], "pong");
    assert_eq!(
        done[1]["content"][0]["content"]["text"], "HELLO",
        "the SSE answer was read"
    );
    assert_eq!(
        done[2]["status"], "failed",
        "die (from tools/list page 2) kills the server mid-call"
    );
    let log = seen.lock().unwrap().clone();
    assert!(
        log.iter()
            .any(|l| l.starts_with("tools/call session=Some(\"sess-42\") token=Some(\"t0k\")")),
        "{log:?}"
    );
    // The next turn says the server is gone.
    let t = a.prompt(&sid, "hi", |r| panic!("{r}"));
    assert!(
        t.text().contains("MCP server fixture stopped"),
        "{}",
        t.text()
    );
}

#[test]
fn failing_servers_are_reported_never_fatal_and_never_delay_session_new() {
    // The hanging server holds the first prompt for the whole start timeout; session/new must
    // not wait for it at all. 5 s against a 4 s bound keeps the two apart even on a loaded
    // 2-core CI machine (a 1 s bound once failed there at 1.003 s).
    let (mut a, _d, ws) = agent("bad", &[("MAKA_MCP_START_TIMEOUT_MS", "5000")]);
    let servers = json!([
        fixture("crash", "crashy", "x"),
        fixture("hang", "hangy", "x"),
        fixture("garbage", "garbled", "x"),
        {"type": "acp", "name": "futuristic", "id": "x"},
        {"type": "sse", "name": "legacy", "url": "http://127.0.0.1:9/sse", "headers": []}
    ]);
    let t0 = Instant::now();
    let sid = a.call_ok(
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": servers}),
    )["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "session/new waited {:?}",
        t0.elapsed()
    );
    let t = a.prompt(&sid, "hi", |r| panic!("{r}"));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    let text = t.text();
    for name in ["crashy", "hangy", "garbled", "futuristic", "legacy"] {
        assert!(text.contains(name), "{name} is reported: {text}");
    }
    assert!(text.ends_with("Hello."), "the turn went on: {text}");
    assert!(a.stderr_contains("MCP server crashy"));
}

fn running(marker: &str) -> bool {
    let out = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.contains(marker) && !l.contains("ps -eo"))
}

fn wait_gone(marker: &str) -> bool {
    let t0 = Instant::now();
    while running(marker) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    !running(marker)
}

#[test]
fn servers_stop_on_close_and_eof_and_come_back_on_load() {
    let (mut a, _d, ws) = agent("life", &[]);
    let marker = format!("maka-mcp-life-{}", std::process::id());
    let servers = json!([fixture("ok", "fixture", &marker)]);
    let sid = a.call_ok(
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": servers.clone()}),
    )["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let t = a.prompt(&sid, "ping", allow);
    assert_eq!(
        results(&t, &sid)[0]["content"][0]["content"]["text"],
        "pong"
    );
    assert!(running(&marker));
    // The ping made the server announce a changed tool list: the next turn sees the new tool.
    let t = a.prompt(&sid, "use extra", allow);
    let done = results(&t, &sid);
    assert_eq!(
        (
            done[0]["status"].as_str(),
            done[0]["content"][0]["content"]["text"].as_str()
        ),
        (Some("completed"), Some("extra")),
        "{done:#?}"
    );
    a.call_ok("session/close", json!({"sessionId": sid}));
    assert!(wait_gone(&marker), "the server stopped with session/close");
    a.call_ok(
        "session/load",
        json!({"sessionId": sid, "cwd": ws.path(), "mcpServers": servers}),
    );
    let t = a.prompt(&sid, "ping again", allow);
    assert_eq!(
        results(&t, &sid)[0]["content"][0]["content"]["text"],
        "pong",
        "load reconnected the server"
    );
    assert!(running(&marker));
    a.close_stdin();
    a.wait_exit(Duration::from_secs(10)).expect("adapter exits");
    assert!(wait_gone(&marker), "no MCP server outlives the adapter");
}

/// `mcp-server-everything sse` listening on `port` (a process group of its own, killed on drop).
struct SseServer(std::process::Child);

impl SseServer {
    fn start(port: u16) -> SseServer {
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new(installed("MAKA_TEST_MCP_EVERYTHING"))
            .arg("sse")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the SSE server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        SseServer(child)
    }
}

impl Drop for SseServer {
    fn drop(&mut self) {
        unsafe { libc_kill(-(self.0.id() as i32), 9) };
        let _ = self.0.wait();
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// MCP over HTTP+SSE with a server nobody here wrote (`server-everything` in `sse` mode): the
/// endpoint event, POSTed messages, answers on the stream — and a reconnect after the server
/// restarts.
#[test]
fn an_sse_server_from_npm_becomes_tools_and_survives_a_restart() {
    let port = free_port();
    let server = SseServer::start(port);
    let (mut a, _d, ws) = agent("sse", &[]);
    let servers = json!([{"type": "sse", "name": "sse", "url": format!("http://127.0.0.1:{port}/sse"), "headers": []}]);
    let sid = a.call_ok(
        "session/new",
        json!({"cwd": ws.path(), "mcpServers": servers}),
    )["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let echoed = |t: &support::Transcript| {
        results(t, &sid)
            .iter()
            .any(|u| u["status"] == "completed" && u.to_string().contains("Echo: hi over sse"))
    };
    let t = a.prompt(&sid, "echo over sse", allow);
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert!(echoed(&t), "{:?}", t.updates);

    // The server restarts on the same port: the stream is reopened and the session goes on.
    drop(server);
    let _server = SseServer::start(port);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let t = a.prompt(&sid, "echo over sse", allow);
        if echoed(&t) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never reconnected: {:?}",
            t.updates
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A kept permission rule covers one MCP tool, by the name the model sees (issue 18, item 3).
#[test]
fn permission_rules_cover_one_mcp_tool() {
    let (mut a, _d, ws) = agent("rules", &[]);
    let servers = json!([fixture("ok", "fixture", "maka-mcp-rules")]);
    let new = |a: &mut AgentProcess| -> String {
        let r = a.call_ok(
            "session/new",
            json!({"cwd": ws.path(), "mcpServers": servers}),
        );
        let sid = r["sessionId"].as_str().unwrap().to_string();
        a.expect_commands(&sid);
        sid
    };
    let ping = |a: &mut AgentProcess, sid: &str, answer: Option<&str>| -> (Vec<Value>, Value) {
        let mut asked = vec![];
        let t = a.prompt(sid, "ping", |r| {
            assert_eq!(r["method"], "session/request_permission", "{r}");
            let answer = answer.unwrap_or_else(|| panic!("no dialog expected: {r}"));
            asked.push(r["params"]["options"].clone());
            select(answer)
        });
        assert_eq!(asked.len(), usize::from(answer.is_some()));
        let done = results(&t, sid);
        (asked, done[0].clone())
    };
    let s1 = new(&mut a);
    let (asked, done) = ping(&mut a, &s1, Some("allow_session"));
    assert!(
        asked[0]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["name"] == "Allow the tool `fixture__ping` for this session"),
        "{asked:?}"
    );
    assert_eq!(done["status"], "completed");
    let (_, done) = ping(&mut a, &s1, None);
    assert_eq!(done["status"], "completed", "the session's rule covers it");

    let s2 = new(&mut a);
    let (_, done) = ping(&mut a, &s2, Some("reject_workspace"));
    assert_eq!(done["status"], "failed");
    let s3 = new(&mut a);
    let (_, done) = ping(&mut a, &s3, None);
    assert_eq!(
        done["status"], "failed",
        "the workspace's rejection, without a dialog"
    );
    let text = done["content"][0]["content"]["text"].as_str().unwrap();
    assert!(
        text.contains("always rejects the tool `fixture__ping`"),
        "{text}"
    );
}
