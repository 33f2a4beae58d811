//! The embedded Runtime Host, as the adapter's [`LocalHost`]: found through the data dir's
//! discovery file (another editor window started it) or started as a child of this process,
//! on a random loopback port with a random token handed over its stdin; and the local provider
//! settings it reads (`initialize`'s sign-in methods, `logout`).
//!
//! The child's stdin is a pipe held by the adapter: if the adapter dies — even by SIGKILL —
//! the pipe closes and the host shuts itself down, so no host is ever orphaned.

use crate::acp::errors::MakaCode;
use crate::acp::host_link::{Connected, LocalHost, Started};
use crate::acp::initialize::ClientCapabilities;
use crate::acp::types::AuthMethod;
use crate::acp::AdapterConfig;
use crate::config::{ProviderSettings, PROVIDER_VARIABLES};
use crate::host_api::client::{HostApi, HostClient};
use crate::host_api::random_hex;
use crate::jsonrpc::ResponseError;
use serde_json::json;
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the embedded host may take to print its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

const ENV_METHOD: &str = crate::acp::auth::ENV_METHOD;
const TERMINAL_METHOD: &str = crate::acp::auth::TERMINAL_METHOD;

/// The embedded Runtime Host (this binary's `host` subcommand).
pub struct Embedded;

enum Spawned {
    /// Another host holds the data dir (it exited with `EXIT_DATA_DIR_BUSY`).
    Busy,
    Failed(ResponseError),
}

fn unavailable(msg: impl Into<String>) -> ResponseError {
    MakaCode::HostUnavailable.error(msg)
}

impl LocalHost for Embedded {
    /// The data dir's host, or a new one: a host already serving the data dir (another editor
    /// window started it) is used — one data dir, one host — and if two adapters start at
    /// once, the one whose host lost the data dir's lock uses the winner's.
    fn start(&self, config: &AdapterConfig) -> Result<Started, ResponseError> {
        let data_dir = config
            .data_dir
            .clone()
            .unwrap_or_else(crate::tunables::default_data_dir);
        let timeout = config.tunables.host_stream_timeout;
        if let Some(found) = discover(&data_dir, timeout) {
            return Ok(found);
        }
        let deadline = Instant::now() + Duration::from_secs(8);
        loop {
            match spawn(config) {
                Err(Spawned::Busy) if Instant::now() < deadline => {
                    if let Some(found) = discover(&data_dir, timeout) {
                        return Ok(found);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(Spawned::Busy) => {
                    return Err(unavailable(format!(
                        "another Runtime Host holds {} but cannot be reached; stop it or use --data-dir",
                        data_dir.display()
                    )))
                }
                Err(Spawned::Failed(e)) => return Err(e),
                Ok(started) => return Ok(started),
            }
        }
    }

    fn provider_configured(&self) -> bool {
        ProviderSettings::load().is_configured()
    }

    fn auth_methods(&self, caps: &ClientCapabilities) -> Vec<AuthMethod> {
        let mut methods = vec![AuthMethod {
            id: ENV_METHOD.into(),
            name: "Environment variables".into(),
            description: format!(
                "Set {PROVIDER_VARIABLES} (any OpenAI-compatible endpoint; the key only if it needs one) in the agent's environment, or MAKA_SCRIPT for the offline scripted provider, then restart the agent"
            ),
            kind: None,
            args: None,
        }];
        if caps.auth_terminal {
            methods.push(AuthMethod {
                id: TERMINAL_METHOD.into(),
                name: "Log in".into(),
                description: "Run `maka-acp login` in a terminal: choose a provider, base URL, model and key; they are saved to the config file".into(),
                kind: Some("terminal".into()),
                args: Some(vec!["login".into()]),
            });
        }
        methods
    }

    fn auth_required(&self) -> ResponseError {
        MakaCode::AuthRequired.error_with(
            format!(
                "Authentication required: no model provider is configured. Set {PROVIDER_VARIABLES} in the agent's environment, or run `maka-acp login` in a terminal to save them to the config file."
            ),
            json!({"authMethods": [ENV_METHOD, TERMINAL_METHOD]}),
        )
    }

    fn can_log_out(&self) -> bool {
        true
    }

    fn log_out(&self) -> Result<bool, String> {
        crate::config::remove_api_key().map_err(|e| e.to_string())
    }
}

/// The host serving `data_dir`, from its discovery file, with an attach connection held.
fn discover(data_dir: &Path, stream_timeout: Duration) -> Option<Started> {
    let info = crate::host::owner::read_discovery(data_dir)?;
    let (port, ip) = (info.port, info.listen.as_str());
    let authority = if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    };
    crate::secrets::register(&info.token);
    let client: Arc<dyn HostApi> = Arc::new(HostClient::new(
        &format!("http://{authority}"),
        &info.token,
        stream_timeout,
    ));
    let epoch = client.hello().ok()?.host_epoch;
    let attach = client.attach().ok()?;
    log::info!(
        "using the Runtime Host that already serves {} (epoch {epoch})",
        data_dir.display()
    );
    Some(Started {
        connected: Connected::new(client, epoch),
        child: None,
        attach: Some(attach),
    })
}

fn spawn(config: &AdapterConfig) -> Result<Started, Spawned> {
    let exe = std::env::current_exe().map_err(|e| {
        Spawned::Failed(unavailable(format!(
            "cannot find this program to start the host: {e}"
        )))
    })?;
    let token = random_hex(32);
    crate::secrets::register(&token);
    let mut cmd = Command::new(exe);
    // The token goes over the stdin pipe, never into the host's environment block (which any
    // process of this user could read in /proc/<pid>/environ for the host's life).
    cmd.args(["host", "--token-stdin"]);
    if let Some(dir) = &config.data_dir {
        cmd.arg("--data-dir").arg(dir);
    }
    for p in &config.private {
        cmd.arg("--private").arg(p);
    }
    // The same log level as this process (children also inherit RUST_LOG itself).
    if let Some(level) = &config.log_level {
        cmd.arg("--log-level").arg(level);
    }
    let started_at = Instant::now();
    let mut child = cmd
        .env_remove("MAKA_HOST_URL")
        .env_remove("MAKA_HOST_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            Spawned::Failed(unavailable(format!(
                "cannot start the embedded Runtime Host: {e}"
            )))
        })?;
    let handed = child.stdin.as_mut().map(|stdin| {
        use std::io::Write;
        writeln!(stdin, "{token}").and_then(|()| stdin.flush())
    });
    if !matches!(handed, Some(Ok(()))) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(Spawned::Failed(unavailable(
            "cannot hand the embedded Runtime Host its token (its stdin is closed)",
        )));
    }
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        return Err(Spawned::Failed(unavailable(
            "the embedded Runtime Host has no stdout",
        )));
    };
    // Read the ready line on a helper thread so a silent child cannot hang us.
    let (tx, rx) = crossbeam_channel::bounded(1);
    let _ = crate::threads::spawn("host-ready", move || {
        let mut line = String::new();
        let r = std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .map(|_| line);
        let _ = tx.send(r);
    });
    let line = match rx.recv_timeout(READY_TIMEOUT) {
        Ok(Ok(line)) if !line.is_empty() => line,
        other => {
            let _ = child.kill();
            let status = child.wait().ok().and_then(|s| s.code());
            if status == Some(crate::host::owner::EXIT_DATA_DIR_BUSY) {
                return Err(Spawned::Busy);
            }
            let why = match other {
                Err(_) => format!(
                    "it printed no ready line within {} s",
                    READY_TIMEOUT.as_secs()
                ),
                _ => "it exited before it was ready (see the log above)".to_string(),
            };
            return Err(Spawned::Failed(unavailable(format!(
                "the embedded Runtime Host did not start: {why}"
            ))));
        }
    };
    let Ok(ready) = serde_json::from_str::<crate::host_api::ops::Ready>(&line) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(Spawned::Failed(unavailable(format!(
            "the embedded Runtime Host printed an unexpected ready line: {}",
            line.trim()
        ))));
    };
    let (port, epoch) = (ready.port, ready.host_epoch);
    let client: Arc<dyn HostApi> = Arc::new(HostClient::new(
        &format!("http://127.0.0.1:{port}"),
        &token,
        config.tunables.host_stream_timeout,
    ));
    log::info!(
        "started the embedded Runtime Host (pid {}, port {port}, epoch {epoch}) in {} ms",
        child.id(),
        started_at.elapsed().as_millis()
    );
    Ok(Started {
        connected: Connected::new(client, epoch),
        child: Some(child),
        attach: None,
    })
}
