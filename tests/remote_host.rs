//! A remote Runtime Host behind a real TLS reverse proxy (issue 18, item 5): Debian's nginx
//! terminates TLS with a certificate from a private CA (made here with openssl) in front of
//! `maka-acp host` on loopback; adapters reach it at `https://localhost:PORT` with the token in
//! `MAKA_HOST_TOKEN` and the CA in `MAKA_HOST_CA`. The nginx site is the one
//! `docs/deployment.md` documents, with a short `proxy_read_timeout` to prove event streams
//! survive the proxy cutting them.

#![cfg(feature = "host")]

mod support;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use support::host::{HostProcess, TempDir};
use support::tls::certificates;
use support::{error_of, AgentProcess, Spawn};

fn script() -> Value {
    json!({
        "rules": [
            {"when": "pause", "responses": [
                [{"text": "Before the pause. "}, {"delayMs": 7000}, {"text": "After the pause."}]
            ]},
            {"when": "slow", "responses": [
                [{"text": "Starting. "}, {"delayMs": 30000}, {"text": "Never reached."}]
            ]},
            {"when": "shared", "responses": [
                [{"text": "One, "}, {"delayMs": 1500}, {"text": "two, "}, {"delayMs": 1500}, {"text": "three."}]
            ]}
        ],
        "default": [[{"text": "Hello through TLS."}]]
    })
}

struct Nginx {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// nginx with the site `docs/deployment.md` shows (timeouts shortened), in front of `host`.
fn nginx(host: &HostProcess, read_timeout: &str) -> Nginx {
    let dir = TempDir::new("nginx");
    certificates(dir.path());
    let d = dir.path().display();
    let port = free_port();
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    // Workers run as root only when nginx is started by root (here, in CI); otherwise as us.
    let user = if root { "user root;" } else { "" };
    let site = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/deployment/nginx-site.conf"),
    )
    .unwrap()
    .replace("443 ssl", &format!("127.0.0.1:{port} ssl"))
    .replace("maka.example.net", "localhost")
    .replace("/etc/maka/tls/server.pem", &format!("{d}/server.pem"))
    .replace("/etc/maka/tls/server.key", &format!("{d}/server.key"))
    .replace("127.0.0.1:7300", &format!("127.0.0.1:{}", host.port))
    .replace(
        "proxy_read_timeout 1h;",
        &format!("proxy_read_timeout {read_timeout};"),
    );
    let conf = format!(
        "{user}\ndaemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\nevents {{ worker_connections 64; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n{site}\n}}\n"
    );
    std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
    let nginx = ["/usr/sbin/nginx", "nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists() || *p == "nginx")
        .unwrap();
    let child = Command::new(nginx)
        .args(["-p", &d.to_string(), "-c", &format!("{d}/nginx.conf")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nginx is needed (scripts/test installs nginx-light)");
    // Ready when it accepts connections.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "nginx did not start: {}",
            std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Nginx { child, port, dir }
}

fn adapter(proxy: &Nginx, token: &str, ca: Option<&Path>) -> AgentProcess {
    let mut env = vec![
        ("RUST_LOG".into(), "info".into()),
        ("MAKA_HOST_TOKEN".into(), token.to_string()),
    ];
    if let Some(ca) = ca {
        env.push(("MAKA_HOST_CA".into(), ca.display().to_string()));
    }
    let mut a = AgentProcess::spawn_with(Spawn {
        args: vec![
            "--host-url".into(),
            format!("https://localhost:{}", proxy.port),
        ],
        env,
    });
    a.initialize();
    a
}

fn text_of(lines: &[Value], session: &str) -> String {
    lines
        .iter()
        .filter(|l| l["params"]["sessionId"] == session)
        .filter(|l| l["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .map(|l| {
            l["params"]["update"]["content"]["text"]
                .as_str()
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn a_conversation_streams_through_nginx_with_tls_and_survives_the_proxy_cutting_streams() {
    let data = TempDir::new("remote-data");
    let ws = TempDir::new("remote-ws");
    let host = HostProcess::start_env(
        data.path(),
        vec![("MAKA_SCRIPT".into(), script().to_string())],
    );
    // A read timeout shorter than the host's 10 s heartbeat: nginx cuts an idle stream at 3 s.
    let proxy = nginx(&host, "3s");
    let ca = proxy.dir.path().join("ca.pem");

    // Without the CA the adapter refuses the proxy's certificate, and says so.
    let mut untrusting = adapter(&proxy, &host.token, None);
    let (resp, _) = untrusting.call("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    let msg = error_of(&resp)["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("cannot reach the Runtime Host") && msg.contains("set MAKA_HOST_CA"),
        "{msg}"
    );
    // A wrong token is refused by the host, through the proxy.
    let mut wrong = adapter(&proxy, "not-the-token", Some(&ca));
    let (resp, _) = wrong.call("session/new", json!({"cwd": ws.path(), "mcpServers": []}));
    assert!(resp.get("error").is_some(), "{resp}");

    // The CA as PEM text in the variable (what CodeCompanion passes for a file path) works too.
    let mut inline = AgentProcess::spawn_with(Spawn {
        args: vec![
            "--host-url".into(),
            format!("https://localhost:{}", proxy.port),
        ],
        env: vec![
            ("MAKA_HOST_TOKEN".into(), host.token.clone()),
            ("MAKA_HOST_CA".into(), std::fs::read_to_string(&ca).unwrap()),
        ],
    });
    inline.initialize();
    inline.new_session(ws.path());

    let mut a = adapter(&proxy, &host.token, Some(&ca));
    let id = a.new_session(ws.path());
    let t = a.prompt(&id, "hello", |r| panic!("{r}"));
    assert_eq!(t.response["result"]["stopReason"], "end_turn");
    assert_eq!(t.text(), "Hello through TLS.");

    // A 7 s silence inside a turn: nginx ends the event stream after 3 s; the adapter follows
    // on from the last frame it had, and nothing is lost or repeated.
    let t = a.prompt(&id, "pause", |r| panic!("{r}"));
    assert_eq!(
        t.response["result"]["stopReason"], "end_turn",
        "{}",
        t.response
    );
    assert_eq!(t.text(), "Before the pause. After the pause.");
    let log = std::fs::read_to_string(proxy.dir.path().join("error.log")).unwrap_or_default();
    assert!(
        log.contains("upstream timed out"),
        "nginx did cut a stream: {log}"
    );

    // Unbuffered: the first words arrive while the model is still in its 30 s pause — the
    // cancel sent on seeing them stops the turn (were they held back by a buffering proxy,
    // they would come only with the end of the turn).
    let prompt = a.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "slow"}]}),
    );
    loop {
        let v = a.recv();
        assert_ne!(
            v["id"], prompt,
            "the turn ended before its first words arrived: {v}"
        );
        if v["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    a.notify("session/cancel", json!({"sessionId": id}));
    let (resp, _) = a.response_to(&prompt);
    assert_eq!(resp["result"]["stopReason"], "cancelled", "{resp}");
}

#[test]
fn two_adapters_on_one_remote_session_see_the_same_stream() {
    let data = TempDir::new("remote2-data");
    let ws = TempDir::new("remote2-ws");
    let host = HostProcess::start_env(
        data.path(),
        vec![("MAKA_SCRIPT".into(), script().to_string())],
    );
    let proxy = nginx(&host, "1h");
    let ca = proxy.dir.path().join("ca.pem");
    let mut a = adapter(&proxy, &host.token, Some(&ca));
    let mut b = adapter(&proxy, &host.token, Some(&ca));
    let id = a.new_session(ws.path());

    let prompt = a.request(
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "shared"}]}),
    );
    // A has the first words; B opens the same session from its own adapter mid-turn.
    let mut a_lines = vec![];
    loop {
        let v = a.recv();
        let first = v["params"]["update"]["sessionUpdate"] == "agent_message_chunk";
        a_lines.push(v);
        if first {
            break;
        }
    }
    let (resp, mut b_lines) = b.call(
        "session/load",
        json!({"sessionId": id, "cwd": ws.path(), "mcpServers": []}),
    );
    assert!(resp.get("result").is_some(), "{resp}");
    let (done, rest) = a.response_to(&prompt);
    assert_eq!(done["result"]["stopReason"], "end_turn");
    a_lines.extend(rest);
    // B follows the running turn live until it ends.
    loop {
        let v = b.recv();
        let ended = v["method"] == "_maka/turn_state";
        b_lines.push(v);
        if ended {
            break;
        }
    }
    let a_text = text_of(&a_lines, &id);
    assert_eq!(a_text, "One, two, three.");
    assert_eq!(text_of(&b_lines, &id), a_text, "B saw what A saw");
    let turn_state = b_lines.last().unwrap();
    assert_eq!(turn_state["params"]["outcome"], "completed", "{turn_state}");
}
