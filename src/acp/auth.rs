//! Authentication, ACP-style: when no model provider is configured, `initialize` offers ways to
//! configure one and `session/new` answers `-32000` until one works.
//!
//! Two methods: `env` (set the variables, then `authenticate` re-checks) and, for clients that
//! can open a terminal (`clientCapabilities.auth.terminal`), `login`, which runs
//! `maka-acp login` and writes the config file. `logout` removes the stored key. Keys never
//! pass through here: only whether a provider is configured.

use super::host_link::HostLink;
use super::initialize::ClientCapabilities;
use crate::config::{ProviderSettings, PROVIDER_VARIABLES};
use crate::jsonrpc::{code, ResponseError};
use serde_json::{json, Value};

pub const ENV_METHOD: &str = "env";
pub const TERMINAL_METHOD: &str = "login";

/// Whether sessions can get a model: for the embedded host, the same settings it reads; for
/// an external host, its `models.list` (which it owns).
pub fn provider_ready(link: &HostLink) -> bool {
    if link.is_embedded() {
        return ProviderSettings::load().is_configured();
    }
    match link.get() {
        Ok(conn) => match conn.client.op("models.list", &json!({})) {
            Ok(list) => list["connections"]
                .as_array()
                .is_some_and(|c| !c.is_empty()),
            // Cannot tell: let session methods report the host's own errors.
            Err(_) => true,
        },
        Err(_) => true,
    }
}

/// The `authMethods` for `initialize`: empty when a provider is ready.
pub fn methods(caps: &ClientCapabilities, ready: bool) -> Value {
    if ready {
        return json!([]);
    }
    let mut methods = vec![json!({
        "id": ENV_METHOD,
        "name": "Environment variables",
        "description": format!(
            "Set {PROVIDER_VARIABLES} (any OpenAI-compatible endpoint; the key only if it needs one) in the agent's environment, or MAKA_SCRIPT for the offline scripted provider, then restart the agent"
        ),
    })];
    if caps.auth_terminal {
        methods.push(json!({
            "id": TERMINAL_METHOD,
            "name": "Log in",
            "description": "Run `maka-acp login` in a terminal: choose a provider, base URL, model and key; they are saved to the config file",
            "type": "terminal",
            "args": ["login"],
        }));
    }
    Value::Array(methods)
}

/// `-32000`, naming both ways to configure a provider.
pub fn required() -> ResponseError {
    ResponseError::new(
        code::AUTH_REQUIRED,
        format!(
            "Authentication required: no model provider is configured. Set {PROVIDER_VARIABLES} in the agent's environment, or run `maka-acp login` in a terminal to save them to the config file."
        ),
    )
    .with_data(json!({"makaCode": "auth_required", "authMethods": [ENV_METHOD, TERMINAL_METHOD]}))
}

/// Makes a running embedded host re-read its providers (after a login or logout).
pub fn reload_host(link: &HostLink) {
    if let Some(conn) = link.current() {
        if let Err(e) = conn.client.op("models.reload", &json!({})) {
            log::warn!("models.reload: {e}");
        }
    }
}
