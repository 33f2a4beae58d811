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

/// The answer: version 2, who we are, and the session surface served here. No `authMethods`
/// yet: v2 requires `auth/login` and `auth/logout` with any, which come in a later step; a
/// host without a provider answers `session/new` with the error that says how to set one.
pub fn answer(shared: &Shared, params: &InitializeParams) -> Value {
    log::info!(
        "client {} {} connected (ACP v2)",
        params.name,
        params.version
    );
    let _ = shared;
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
            }),
            auth: None,
        },
        auth_methods: vec![],
    })
}
