//! The adapter's link to its Runtime Host: an external one (`--host-url`), or the one this
//! build can start by itself ([`LocalHost`]: the embedded host, `crate::embedded`), started
//! lazily on the first session method (never for `initialize`). A host that stops answering is
//! forgotten ([`Connected::call`]: the one rule) and the next call starts (or finds) a new one.

use super::agent::AdapterConfig;
use super::initialize::ClientCapabilities;
use super::types::AuthMethod;
use crate::host_api::client::{ClientError, EventStream, HostApi, HostClient};
use crate::host_api::ops::Operation;
use crate::jsonrpc::{lock, ResponseError};
use std::process::Child;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// What this build can do without `--host-url`: start (or find) a host of its own, and manage
/// the local provider settings that host reads. The embedded host implements it
/// (`crate::embedded`); the adapter-only build has [`NoLocalHost`].
pub trait LocalHost: Send + Sync {
    /// The data dir's running host, or a new one started as this process's child.
    fn start(&self, config: &AdapterConfig) -> Result<Started, ResponseError>;
    /// Whether the local settings configure a model provider.
    fn provider_configured(&self) -> bool;
    /// `initialize`'s ways to configure one, while none is.
    fn auth_methods(&self, caps: &ClientCapabilities) -> Vec<AuthMethod>;
    /// `-32000` naming those ways.
    fn auth_required(&self) -> ResponseError;
    /// Whether `logout` is served (it removes a stored key).
    fn can_log_out(&self) -> bool;
    /// Removes the stored key: whether there was one.
    fn log_out(&self) -> Result<bool, String>;
}

/// The adapter-only build: no host of its own, no local settings.
pub struct NoLocalHost;

impl LocalHost for NoLocalHost {
    fn start(&self, _: &AdapterConfig) -> Result<Started, ResponseError> {
        Err(unavailable(
            "this build has no embedded Runtime Host (cargo feature `host`); start one and pass --host-url with MAKA_HOST_TOKEN",
        ))
    }
    fn provider_configured(&self) -> bool {
        false
    }
    fn auth_methods(&self, _: &ClientCapabilities) -> Vec<AuthMethod> {
        vec![]
    }
    fn auth_required(&self) -> ResponseError {
        super::auth::required_elsewhere()
    }
    fn can_log_out(&self) -> bool {
        false
    }
    fn log_out(&self) -> Result<bool, String> {
        Err("this build keeps no provider settings".into())
    }
}

/// A host found or started: the connection, the child process when it is ours, and the attach
/// connection held while we use a host another adapter started (it lives while any adapter
/// holds one).
pub struct Started {
    pub connected: Connected,
    pub child: Option<Child>,
    pub attach: Option<Box<dyn Send>>,
}

/// A connected host. Its client is private: every operation goes through
/// [`Connected::call`], which keeps the one rule for a lost host.
#[derive(Clone)]
pub struct Connected {
    client: Arc<dyn HostApi>,
    pub epoch: String,
    /// The link's slot this host sits in (set when the link keeps it): what a lost host is
    /// forgotten from.
    slot: Weak<Mutex<Option<Started>>>,
}

impl Connected {
    pub fn new(client: Arc<dyn HostApi>, epoch: String) -> Connected {
        Connected {
            client,
            epoch,
            slot: Weak::new(),
        }
    }

    /// Runs host operation `O`. The one rule for a lost host: a transport failure (the host
    /// did not answer this call) forgets it — stopping it, if it is ours — unless it still
    /// answers its health check, so the next call starts (or finds) a new one. A host that is
    /// alive but slow (one call timed out, a connection reset) is kept: killing it would end
    /// every session's turn, and other adapters' sessions on it too.
    pub fn call<O: Operation>(&self, input: &O::Input) -> Result<O::Output, ClientError> {
        let out = self.client.call::<O>(input);
        if let Err(ClientError::Transport(e)) = &out {
            if self.is_alive() {
                log::warn!(
                    "{}: {e}; the Runtime Host still answers, so it is kept",
                    O::KEY
                );
            } else {
                self.forget();
            }
        }
        out
    }

    /// [`Connected::call`], its error as the client sees it.
    pub fn request<O: Operation>(&self, input: &O::Input) -> Result<O::Output, ResponseError> {
        self.call::<O>(input)
            .map_err(|e| super::errors::from_client(&e))
    }

    /// Opens one window of the session's stream. A broken stream is not a lost host: the
    /// reader asks [`Connected::is_alive`] before it [`Connected::forget`]s it.
    pub fn events(
        &self,
        session_id: &str,
        after: u64,
        epoch: &str,
        wait_ms: u64,
        until_terminal: bool,
    ) -> Result<EventStream, ClientError> {
        self.client
            .events(session_id, after, epoch, wait_ms, until_terminal)
    }

    pub fn is_alive(&self) -> bool {
        self.client.is_alive()
    }

    /// This host is gone: forgotten (and stopped, if it is ours) unless already replaced.
    pub fn forget(&self) {
        if let Some(slot) = self.slot.upgrade() {
            forget(&slot, &self.epoch);
        }
    }
}

/// Forgets the host in `slot` if it is still the one of `epoch`, stopping it if it is ours.
fn forget(slot: &Mutex<Option<Started>>, epoch: &str) {
    let mut live = slot.lock().unwrap_or_else(|p| p.into_inner());
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

pub struct HostLink {
    config: AdapterConfig,
    local: Arc<dyn LocalHost>,
    /// The principal every call names (`HostApi::for_principal`); none: the machine's user.
    principal: Option<String>,
    live: Arc<Mutex<Option<Started>>>,
    /// One thread starts (or connects to) the host at a time, without holding `live` across
    /// the process start and the HTTP calls; the others wait here.
    starting: Mutex<bool>,
    started: Condvar,
}

fn unavailable(msg: impl Into<String>) -> ResponseError {
    super::errors::MakaCode::HostUnavailable.error(msg)
}

impl HostLink {
    pub fn new(config: AdapterConfig, local: Arc<dyn LocalHost>) -> HostLink {
        HostLink {
            config,
            local,
            principal: None,
            live: Arc::new(Mutex::new(None)),
            starting: Mutex::new(false),
            started: Condvar::new(),
        }
    }

    /// This link, every host it connects to used as principal `name` sees it.
    pub fn for_principal(self, name: Option<String>) -> HostLink {
        HostLink {
            principal: name,
            ..self
        }
    }

    /// The tunables this adapter was started with.
    pub fn tunables(&self) -> &crate::tunables::Tunables {
        &self.config.tunables
    }

    /// A link already connected to `client` (in-process tests with a fake host).
    #[cfg(test)]
    pub fn connected(client: Arc<dyn HostApi>, epoch: &str) -> HostLink {
        let config = AdapterConfig {
            host_url: Some("http://fake".into()),
            ..AdapterConfig::default()
        };
        let link = HostLink::new(config, Arc::new(NoLocalHost));
        *link.lock() = Some(Started {
            connected: Connected {
                slot: Arc::downgrade(&link.live),
                ..Connected::new(client, epoch.into())
            },
            child: None,
            attach: None,
        });
        link
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Started>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this adapter starts its own host (else it uses `--host-url`).
    pub fn is_embedded(&self) -> bool {
        self.config.host_url.is_none()
    }

    /// What this build can do by itself.
    pub fn local(&self) -> &dyn LocalHost {
        &*self.local
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
        // Whatever happens below (an early return; a panic where panics unwind), the waiters
        // are released.
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
            None => self.local.start(&self.config),
        };
        result.and_then(|mut started| {
            if let Some(name) = &self.principal {
                // Never the machine's user's view for a principal: a client that cannot
                // name one fails the start.
                started.connected.client = started
                    .connected
                    .client
                    .for_principal(name)
                    .ok_or_else(|| {
                        unavailable("this Runtime Host client cannot act for a principal")
                    })?;
            }
            started.connected.slot = Arc::downgrade(&self.live);
            let connected = started.connected.clone();
            *self.lock() = Some(started);
            Ok(connected)
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

    fn connect_external(&self, url: &str) -> Result<Started, ResponseError> {
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
        Ok(Started {
            connected: Connected::new(client, epoch),
            child: None,
            attach: None,
        })
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
