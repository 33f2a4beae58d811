//! Authentication, ACP-style: when no model provider is configured, `initialize` offers ways to
//! configure one and `session/new` answers `-32000` until one works.
//!
//! With the embedded host, two methods: `env` (set the variables, then `authenticate`
//! re-checks) and, for clients that can open a terminal (`clientCapabilities.auth.terminal`),
//! `login`, which runs `maka-acp login` and writes the config file; `logout` removes the stored
//! key. An external host (and the adapter-only build, which has no embedded host, no login flow
//! and no provider settings) is configured where it runs: no method is offered, and the error
//! says so. Keys never pass through here: only whether a provider is configured.

use super::errors::MakaCode;
use super::host_link::{Connected, HostLink};
use super::initialize::ClientCapabilities;
use super::types::AuthMethod;
#[cfg(feature = "host")]
use crate::config::{ProviderSettings, PROVIDER_VARIABLES};
use crate::host_api::ops::{Empty, ModelCatalog, ModelsList, ModelsReload};
use crate::jsonrpc::ResponseError;
use serde_json::json;

pub const ENV_METHOD: &str = "env";
pub const TERMINAL_METHOD: &str = "login";

/// Whether this agent's own settings configure a provider (the embedded host reads them).
#[cfg(feature = "host")]
fn locally_configured() -> bool {
    ProviderSettings::load().is_configured()
}

#[cfg(not(feature = "host"))]
fn locally_configured() -> bool {
    false
}

/// For `initialize`, which never starts the embedded host: whether a provider is configured,
/// judged from the settings the embedded host will read, or asked of an external host.
pub fn provider_configured(link: &HostLink) -> bool {
    if link.is_embedded() {
        return locally_configured();
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
    if link.is_embedded() && link.current().is_none() && !locally_configured() {
        return Err(required(true));
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
    let Ok(mut models) = conn.client.call::<ModelsList>(&Empty {}) else {
        return Ok(None); // the host is unreachable: the session method will say so
    };
    if models.connections.is_empty() && link.is_embedded() && locally_configured() {
        if let Ok(fresh) = conn.client.call::<ModelsReload>(&Empty {}) {
            models = fresh;
        }
    }
    if !models.connections.is_empty() {
        return Ok(Some(models));
    }
    let mut e = required(link.is_embedded());
    if !models.problems.is_empty() {
        e.message = format!("{} Problem: {}", e.message, models.problems.join("; "));
    }
    Err(e)
}

/// The `authMethods` for `initialize`: empty when a provider is ready, and for a host this
/// agent does not configure.
pub fn methods(caps: &ClientCapabilities, ready: bool, embedded: bool) -> Vec<AuthMethod> {
    if ready || !embedded {
        return vec![];
    }
    local_methods(caps)
}

#[cfg(feature = "host")]
fn local_methods(caps: &ClientCapabilities) -> Vec<AuthMethod> {
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

#[cfg(not(feature = "host"))]
fn local_methods(_: &ClientCapabilities) -> Vec<AuthMethod> {
    vec![]
}

/// `-32000`: for the embedded host, naming both ways to configure a provider; for another
/// host, saying it is configured where it runs.
pub fn required(embedded: bool) -> ResponseError {
    #[cfg(feature = "host")]
    if embedded {
        return MakaCode::AuthRequired.error_with(
            format!(
                "Authentication required: no model provider is configured. Set {PROVIDER_VARIABLES} in the agent's environment, or run `maka-acp login` in a terminal to save them to the config file."
            ),
            json!({"authMethods": [ENV_METHOD, TERMINAL_METHOD]}),
        );
    }
    let _ = embedded;
    MakaCode::AuthRequired.error_with(
        "Authentication required: the Runtime Host has no model provider configured. Configure one where the host runs (its environment or config file), then try again.",
        json!({"authMethods": []}),
    )
}

/// Makes a running host re-read its providers (after a login or logout).
#[cfg(feature = "host")]
pub fn reload_host(link: &HostLink) {
    if let Some(conn) = link.current() {
        if let Err(e) = conn.client.call::<ModelsReload>(&Empty {}) {
            log::warn!("models.reload: {e}");
        }
    }
}
