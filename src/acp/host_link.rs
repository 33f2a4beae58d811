//! The adapter's link to its Runtime Host: an external one (`--host-url`) or the embedded one,
//! started lazily as a child process of this binary on the first session method (never for
//! `initialize`), on a random loopback port with a random token passed in its environment.
//!
//! The child's stdin is a pipe held by this process: if the adapter dies — even by SIGKILL —
//! the pipe closes and the host shuts itself down, so no host is ever orphaned. A host that
//! stops answering is forgotten ([`HostLink::lost`]) and the next call starts a new one.

use super::agent::AdapterConfig;
use crate::host_api::client::{HostApi, HostClient};
#[cfg(feature = "host")]
use crate::host_api::random_hex;
use crate::jsonrpc::{lock, ResponseError};
#[cfg(feature = "host")]
use std::io::BufRead;
use std::process::Child;
#[cfg(feature = "host")]
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[cfg(feature = "host")]
enum Spawned {
    /// Another host holds the data dir (it exited with `EXIT_DATA_DIR_BUSY`).
    Busy,
    Failed(ResponseError),
}

/// The host serving `data_dir`, from its discovery file, with an attach connection held.
#[cfg(feature = "host")]
fn discover(data_dir: &std::path::Path, stream_timeout: Duration) -> Option<Live> {
    use std::io::{Read, Write};
    let info = crate::host::owner::read_discovery(data_dir)?;
    let (port, token, ip) = (info.port, info.token.as_str(), info.listen.as_str());
    let authority = if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    };
    let client: Arc<dyn HostApi> = Arc::new(HostClient::new(
        &format!("http://{authority}"),
        token,
        stream_timeout,
    ));
    let hello = client.hello().ok()?;
    let epoch = hello.host_epoch;
    let mut attach = std::net::TcpStream::connect(&authority).ok()?;
    attach.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!(
        "GET /v1/attach HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    attach.write_all(request.as_bytes()).ok()?;
    let mut head = [0u8; 12];
    attach.read_exact(&mut head).ok()?;
    if &head[..] != b"HTTP/1.1 200" {
        return None;
    }
    log::info!(
        "using the Runtime Host that already serves {} (epoch {epoch})",
        data_dir.display()
    );
    Some(Live {
        connected: Connected { client, epoch },
        child: None,
        _attach: Some(attach),
    })
}

/// How long the embedded host may take to print its ready line.
#[cfg(feature = "host")]
const READY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct Connected {
    pub client: Arc<dyn HostApi>,
    pub epoch: String,
}

struct Live {
    connected: Connected,
    child: Option<Child>,
    /// Held open while we use a host another adapter started (it lives while any adapter
    /// holds one).
    _attach: Option<std::net::TcpStream>,
}

pub struct HostLink {
    config: AdapterConfig,
    live: Mutex<Option<Live>>,
    /// One thread starts (or connects to) the host at a time, without holding `live` across
    /// the process start and the HTTP calls; the others wait here.
    starting: Mutex<bool>,
    started: Condvar,
}

fn unavailable(msg: impl Into<String>) -> ResponseError {
    super::errors::MakaCode::HostUnavailable.error(msg)
}

impl HostLink {
    pub fn new(config: AdapterConfig) -> HostLink {
        HostLink {
            config,
            live: Mutex::new(None),
            starting: Mutex::new(false),
            started: Condvar::new(),
        }
    }

    /// A link already connected to `client` (in-process tests with a fake host).
    #[cfg(test)]
    pub fn connected(client: Arc<dyn HostApi>, epoch: &str) -> HostLink {
        let link = HostLink::new(AdapterConfig {
            host_url: Some("http://fake".into()),
            ..AdapterConfig::default()
        });
        *link.lock() = Some(Live {
            connected: Connected {
                client,
                epoch: epoch.into(),
            },
            child: None,
            _attach: None,
        });
        link
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Live>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this adapter starts its own host (else it uses `--host-url`).
    pub fn is_embedded(&self) -> bool {
        self.config.host_url.is_none()
    }

    /// The host if one is connected now; never starts one.
    pub fn current(&self) -> Option<Connected> {
        self.lock().as_ref().map(|l| l.connected.clone())
    }

    /// The current host, starting (or restarting) it if needed.
    pub fn get(&self) -> Result<Connected, ResponseError> {
        let mut starting = lock(&self.starting);
        loop {
            if let Some(c) = self.running() {
                return Ok(c);
            }
            if !*starting {
                break;
            }
            starting = self
                .started
                .wait(starting)
                .unwrap_or_else(|p| p.into_inner());
        }
        *starting = true;
        drop(starting);
        // Whatever happens below (even a panic), the waiters are released.
        struct Done<'a>(&'a HostLink);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                *lock(&self.0.starting) = false;
                self.0.started.notify_all();
            }
        }
        let _done = Done(self);
        let result = match &self.config.host_url {
            Some(url) => self.connect_external(url),
            None => self.start_embedded(),
        };
        result.map(|started| {
            let connected = started.connected.clone();
            *self.lock() = Some(started);
            connected
        })
    }

    /// The connected host, unless it is an embedded one that has exited (then forgotten).
    fn running(&self) -> Option<Connected> {
        let mut live = self.lock();
        let l = live.as_mut()?;
        let exited = l
            .child
            .as_mut()
            .is_some_and(|c| !matches!(c.try_wait(), Ok(None)));
        if !exited {
            return Some(l.connected.clone());
        }
        log::warn!("the embedded Runtime Host exited; starting a new one");
        *live = None;
        None
    }

    fn connect_external(&self, url: &str) -> Result<Live, ResponseError> {
        let token = self.config.host_token.clone().unwrap_or_default();
        let client: Arc<dyn HostApi> = Arc::new(HostClient::with_tls(
            url,
            &token,
            self.config.tunables.host_stream_timeout,
            &self.config.host_tls,
        ));
        let hello = client.hello().map_err(|e| {
            let e = e.to_string();
            // TLS failures name what to do, not only what rustls said.
            let hint = if e.contains("UnknownIssuer") {
                "; its certificate is not signed by an authority this adapter trusts: set MAKA_HOST_CA to the PEM file of the CA that signed it"
            } else if e.contains("NotValidForName") {
                "; its certificate is not for this host name: use the name the certificate was made for in the URL"
            } else if e.contains("invalid peer certificate") {
                "; its certificate was refused: check it (and MAKA_HOST_CA)"
            } else {
                ""
            };
            let shown = crate::host_api::client::shown_url(url);
            unavailable(format!("cannot reach the Runtime Host at {shown}: {e}{hint}"))
        })?;
        let epoch = hello.host_epoch;
        log::info!(
            "connected to Runtime Host {} (epoch {epoch})",
            crate::host_api::client::shown_url(url)
        );
        Ok(Live {
            connected: Connected { client, epoch },
            child: None,
            _attach: None,
        })
    }

    /// The data dir's host, or a new one: a host already serving the data dir (another editor
    /// window started it) is used — one data dir, one host — and if two adapters start at
    /// once, the one whose host lost the data dir's lock uses the winner's.
    fn start_embedded(&self) -> Result<Live, ResponseError> {
        #[cfg(feature = "host")]
        {
            let data_dir = self
                .config
                .data_dir
                .clone()
                .unwrap_or_else(crate::settings::default_data_dir);
            if let Some(live) = discover(&data_dir, self.config.tunables.host_stream_timeout) {
                return Ok(live);
            }
            let deadline = Instant::now() + Duration::from_secs(8);
            loop {
                match self.spawn_embedded() {
                    Err(Spawned::Busy) if Instant::now() < deadline => {
                        if let Some(live) = discover(&data_dir, self.config.tunables.host_stream_timeout) {
                            return Ok(live);
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
                    Ok(live) => return Ok(live),
                }
            }
        }
        #[cfg(not(feature = "host"))]
        Err(unavailable(
            "this build has no embedded Runtime Host (cargo feature `host`); start one and pass --host-url with MAKA_HOST_TOKEN",
        ))
    }

    #[cfg(feature = "host")]
    fn spawn_embedded(&self) -> Result<Live, Spawned> {
        let exe = std::env::current_exe().map_err(|e| {
            Spawned::Failed(unavailable(format!(
                "cannot find this program to start the host: {e}"
            )))
        })?;
        let token = random_hex(32);
        let mut cmd = Command::new(exe);
        // The token goes over the stdin pipe, never into the host's environment block (which
        // any process of this user could read in /proc/<pid>/environ for the host's life).
        cmd.args(["host", "--token-stdin"]);
        if let Some(dir) = &self.config.data_dir {
            cmd.arg("--data-dir").arg(dir);
        }
        // The same log level as this process (children also inherit RUST_LOG itself).
        if let Some(level) = &self.config.log_level {
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
        let _ = std::thread::Builder::new()
            .name("host-ready".into())
            .spawn(move || {
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
            self.config.tunables.host_stream_timeout,
        ));
        log::info!(
            "started the embedded Runtime Host (pid {}, port {port}, epoch {epoch}) in {} ms",
            child.id(),
            started_at.elapsed().as_millis()
        );
        Ok(Live {
            connected: Connected { client, epoch },
            child: Some(child),
            _attach: None,
        })
    }

    /// A call to the host with `epoch` failed at the transport level: forget that host (and
    /// stop it, if it is ours) so the next call starts afresh.
    pub fn lost(&self, epoch: &str) {
        let mut live = self.lock();
        if live.as_ref().is_some_and(|l| l.connected.epoch == epoch) {
            log::warn!("lost the Runtime Host (epoch {epoch})");
            if let Some(mut l) = live.take() {
                if let Some(c) = l.child.as_mut() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
        }
    }

    /// Stops the embedded host (the client closed the connection). An external host is left
    /// running.
    pub fn shutdown(&self) {
        let Some(mut l) = self.lock().take() else {
            return;
        };
        let Some(mut child) = l.child.take() else {
            return; // an external host, or one another adapter started: dropping our attach
        };
        // Other editor windows may use the host this adapter started: then it stays (it
        // exits when the last of them leaves); closing its stdin tells it we left.
        let others = l
            .connected
            .client
            .call::<crate::host_api::ops::HostStatus>(&crate::host_api::ops::Empty {})
            .map(|s| s.attached_clients)
            .unwrap_or(0);
        if others > 0 {
            log::info!("{others} other adapter(s) use the Runtime Host; leaving it running");
            drop(child.stdin.take());
            return;
        }
        if let Err(e) = l.connected.client.shutdown(200) {
            log::debug!("shutdown request: {e}");
        }
        // Closing its stdin also tells it to go; then give it a moment before SIGKILL.
        drop(child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        log::warn!("the embedded Runtime Host did not exit in time; killing it");
        let _ = child.kill();
        let _ = child.wait();
    }
}
