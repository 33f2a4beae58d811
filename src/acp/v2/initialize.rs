//! `initialize` on a v2 connection: what the client said (`info`, `capabilities`) and what we
//! advertise — exactly the v2 surface this build serves.

use crate::acp::connection::Shared;
use crate::acp::initialize::Offer;
use crate::acp::params::{ParamResult, Params};
use crate::acp::v2::types as t;
use crate::jsonrpc::ResponseError;
use serde_json::Value;

/// A v2 client's `initialize`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InitializeParams {
    pub name: String,
    pub version: String,
    /// `capabilities.auth.terminal`: it can run a terminal sign-in (`maka-acp login`).
    pub auth_terminal: bool,
}

/// Reads it: for version 2 as its schema says (`info` with `name` and `version` required);
/// for a later version, whatever it says of itself is taken leniently (its shapes may have
/// moved), as the SDK's router does.
pub fn parse(offer: &Offer) -> ParamResult<InitializeParams> {
    let p = Params::of(&offer.params)?;
    let strict = offer.offered == 2;
    let mut out = InitializeParams::default();
    match p.optional_object("info", "info") {
        Ok(Some(info)) => {
            out.name = name(&info, "name", strict)?;
            out.version = name(&info, "version", strict)?;
        }
        Ok(None) | Err(_) if !strict => {
            out.name = "unknown".into();
            out.version = "unknown".into();
        }
        Ok(None) => {
            return Err(ResponseError::invalid_params(
                "`info` is required in a v2 `initialize`: send {\"name\": ..., \"version\": ...}",
            ))
        }
        Err(e) => return Err(e),
    }
    // Capabilities are read leniently in every v2 (an unreadable one is not advertised).
    let auth = p
        .optional_object("capabilities", "capabilities")
        .ok()
        .flatten()
        .and_then(|c| {
            c.optional_object("auth", "capabilities.auth")
                .ok()
                .flatten()
        });
    out.auth_terminal = auth.is_some_and(|a| a.marker("terminal").unwrap_or(false));
    Ok(out)
}

fn name(info: &Params, field: &str, strict: bool) -> ParamResult<String> {
    match info.get(field).and_then(Value::as_str) {
        Some(s) => Ok(s.to_string()),
        None if !strict => Ok("unknown".into()),
        None => Err(ResponseError::invalid_params(format_args!(
            "`info.{field}` must be a string in a v2 `initialize`"
        ))),
    }
}

/// The answer: version 2, who we are, and the session surface served here. `authMethods` only
/// where both `auth/login` and `auth/logout` are served (v2 makes logout part of any method):
/// with a host of this build's own, no provider configured, for the machine's user.
pub fn answer(shared: &Shared, params: &InitializeParams) -> Value {
    log::info!(
        "client {} {} connected (ACP v2)",
        params.name,
        params.version
    );
    let caps = crate::acp::initialize::ClientCapabilities {
        auth_terminal: params.auth_terminal,
        ..Default::default()
    };
    let ready = crate::acp::auth::provider_configured(&shared.link);
    let auth_methods = if shared.can_log_out() {
        crate::acp::auth::methods(&shared.link, &caps, ready)
            .iter()
            .map(t::AuthMethod::from_v1)
            .collect()
    } else {
        vec![]
    };
    crate::acp::types::to_json(&t::InitializeResponse {
        protocol_version: 2,
        info: t::Implementation {
            name: "maka-acp".into(),
            title: Some("Maka".into()),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        capabilities: t::AgentCapabilities {
            session: Some(t::SessionCapabilities {
                prompt: Some(t::PromptCapabilities {
                    image: Some(t::Empty {}),
                    audio: None,
                    embedded_context: Some(t::Empty {}),
                }),
                mcp: Some(t::McpCapabilities {
                    stdio: Some(t::Empty {}),
                    http: Some(t::Empty {}),
                }),
                delete: Some(t::Empty {}),
                additional_directories: Some(t::Empty {}),
                // Unstable in v2 (as v1 has them): a client that does not know them skips them.
                fork: Some(t::Empty {}),
                system_prompt: Some(serde_json::json!({"mode": {"override": {}}})),
            }),
            auth: None,
        },
        auth_methods,
    })
}
