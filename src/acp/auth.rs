//! Authentication, ACP-style: when no model provider is configured, `initialize` offers ways to
//! configure one and `session/new` answers `-32000` until one works.
//!
//! With a host of its own ([`LocalHost`]: the embedded host), the methods it offers — `env`
//! (set the variables, then `authenticate` re-checks) and, for clients that can open a
//! terminal, `login` (`maka-acp login` writes the config file); `logout` removes the stored
//! key. An external host (and the adapter-only build, which has no host of its own) is
//! configured where it runs: no method is offered, and the error says so. Keys never pass
//! through here: only whether a provider is configured.

use super::errors::MakaCode;
use super::host_link::{Connected, HostLink};
use super::initialize::ClientCapabilities;
use super::types::AuthMethod;
use crate::host_api::ops::{Empty, ModelCatalog, ModelsList, ModelsReload};
use crate::jsonrpc::ResponseError;
use serde_json::json;

pub const ENV_METHOD: &str = "env";
pub const TERMINAL_METHOD: &str = "login";

/// For `initialize`, which never starts the embedded host: whether a provider is configured,
/// judged from the settings the embedded host will read, or asked of an external host.
pub fn provider_configured(link: &HostLink) -> bool {
    if link.is_embedded() {
        return link.local().provider_configured();
    }
    match link.get() {
        Ok(conn) => check_host(link, &conn).is_ok(),
        // Cannot tell: let session methods report the host's own errors.
        Err(_) => true,
    }
}

/// Without any provider settings, an embedded host that is not running yet need not be started
/// just to refuse the session: `-32000` at once.
pub fn refuse_early(link: &HostLink) -> Result<(), ResponseError> {
    if link.is_embedded() && link.current().is_none() && !link.local().provider_configured() {
        return Err(required(link));
    }
    Ok(())
}

/// The host's word on whether sessions can get a model (its `models.list`): `-32000` naming
/// the ways to configure one, plus what the host found wrong with the settings it has. Settings
/// written since the embedded host started (a `maka-acp login` elsewhere) are picked up.
/// Returns the host's catalog (`None` if the host could not be asked).
pub fn check_host(
    link: &HostLink,
    conn: &Connected,
) -> Result<Option<ModelCatalog>, ResponseError> {
    let Ok(mut models) = conn.call::<ModelsList>(&Empty {}) else {
        return Ok(None); // the host is unreachable: the session method will say so
    };
    if models.connections.is_empty() && link.is_embedded() && link.local().provider_configured() {
        if let Ok(fresh) = conn.call::<ModelsReload>(&Empty {}) {
            models = fresh;
        }
    }
    if !models.connections.is_empty() {
        return Ok(Some(models));
    }
    let mut e = required(link);
    if !models.problems.is_empty() {
        e.message = format!("{} Problem: {}", e.message, models.problems.join("; "));
    }
    Err(e)
}

/// The `authMethods` for `initialize`: empty when a provider is ready, and for a host this
/// agent does not configure.
pub fn methods(link: &HostLink, caps: &ClientCapabilities, ready: bool) -> Vec<AuthMethod> {
    if ready || !link.is_embedded() {
        return vec![];
    }
    link.local().auth_methods(caps)
}

/// `-32000`: for a host of our own, naming the ways to configure a provider; for another
/// host, saying it is configured where it runs.
pub fn required(link: &HostLink) -> ResponseError {
    if link.is_embedded() {
        return link.local().auth_required();
    }
    required_elsewhere()
}

/// `-32000` for a host configured where it runs.
pub fn required_elsewhere() -> ResponseError {
    MakaCode::AuthRequired.error_with(
        "Authentication required: the Runtime Host has no model provider configured. Configure one where the host runs (its environment or config file), then try again.",
        json!({"authMethods": []}),
    )
}

/// Makes a running host re-read its providers (after a login or logout).
pub fn reload_host(link: &HostLink) {
    if let Some(conn) = link.current() {
        if let Err(e) = conn.call::<ModelsReload>(&Empty {}) {
            log::warn!("models.reload: {e}");
        }
    }
}
