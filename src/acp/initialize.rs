//! `initialize`: version negotiation, what the client can do, and what we advertise.
//!
//! `agentCapabilities` lists exactly what this build implements; a capability is added here in
//! the same change that implements it.

use super::params::{ParamResult, Params};
use super::types::{
    AgentCapabilities, AuthCapabilities, AuthMethod, Empty, Implementation, InitializeResponse,
    McpCapabilities, PromptCapabilities, SessionCapabilities,
};
use serde_json::{json, Value};

/// The only ACP version this agent speaks.
pub const PROTOCOL_VERSION: u16 = 1;

/// What the client told us it supports. Omitted means unsupported.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClientCapabilities {
    pub fs_read_text_file: bool,
    pub fs_write_text_file: bool,
    pub terminal: bool,
    pub auth_terminal: bool,
    pub elicitation_form: bool,
    pub elicitation_url: bool,
    pub boolean_config_options: bool,
    /// `session.notices`: it shows ACP `notice` updates.
    pub notices: bool,
    /// `session.compaction`: it shows `compaction_update` and `compaction_summary_chunk`.
    pub compaction: bool,
    /// `plan` (unstable): it shows `plan_update` and `plan_removed`.
    pub plan: bool,
    /// `subagents` (unstable): it shows a delegation as a child session (`subagent_update`,
    /// `session_message`, the child's own updates under its id).
    pub subagents: bool,
    /// Zed's display-only terminal convention (`_meta.terminal_output: true`).
    pub terminal_output_meta: bool,
    /// JetBrains' convention (`_meta.terminal_output_delta: true`): a running command's output
    /// as appended pieces, `tool_call_update._meta.terminal_output_delta`.
    pub terminal_output_delta: bool,
    /// Apache Maka's opt-ins (`_meta["_maka/turnStatus"]`, `["_maka/goalPlanStatus"]`): its
    /// `_maka/turn/status`, `_maka/goal/status` and `_maka/plan/changed` instead of ours.
    pub maka_turn_status: bool,
    pub maka_goal_plan_status: bool,
    /// `_meta.unstable_end_turn_token_usage: true`: it reads ACP's unstable
    /// `PromptResponse.usage` (there is no capability for it; the name is the SDK feature's).
    pub end_turn_usage: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientInfo {
    pub name: String,
    pub version: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct InitializeParams {
    pub offered_version: u16,
    pub capabilities: ClientCapabilities,
    pub client_info: Option<ClientInfo>,
}

/// An `initialize` as read before the connection's version is chosen: the version offered
/// (which picks the version, and with it how the rest is read) and the params.
#[derive(Clone, Debug, PartialEq)]
pub struct Offer {
    pub offered: u16,
    pub params: Value,
}

/// Reads the offered version only (a missing or malformed one is the `-32602` naming it).
pub fn offer(params: &Value) -> ParamResult<Offer> {
    let offered = Params::of(params)?.required_u16("protocolVersion")?;
    Ok(Offer {
        offered,
        params: params.clone(),
    })
}

/// Reads a v1 client's `initialize`.
pub fn parse(params: &Value) -> ParamResult<InitializeParams> {
    let p = Params::of(params)?;
    let offered_version = p.required_u16("protocolVersion")?;
    let mut caps = ClientCapabilities::default();
    if let Some(c) = p.optional_object("clientCapabilities", "clientCapabilities")? {
        if let Some(fs) = c.optional_object("fs", "clientCapabilities.fs")? {
            caps.fs_read_text_file = fs.optional_bool("readTextFile")?.unwrap_or(false);
            caps.fs_write_text_file = fs.optional_bool("writeTextFile")?.unwrap_or(false);
        }
        caps.terminal = c.optional_bool("terminal")?.unwrap_or(false);
        if let Some(auth) = c.optional_object("auth", "clientCapabilities.auth")? {
            caps.auth_terminal = auth.optional_bool("terminal")?.unwrap_or(false);
        }
        if let Some(el) = c.optional_object("elicitation", "clientCapabilities.elicitation")? {
            caps.elicitation_form = el.marker("form")?;
            caps.elicitation_url = el.marker("url")?;
        }
        if let Some(s) = c.optional_object("session", "clientCapabilities.session")? {
            if let Some(co) =
                s.optional_object("configOptions", "clientCapabilities.session.configOptions")?
            {
                caps.boolean_config_options = co.marker("boolean")?;
            }
            caps.notices = s.marker("notices")?;
            caps.compaction = s.marker("compaction")?;
        }
        caps.plan = c.marker("plan")?;
        caps.subagents = c.marker("subagents")?;
        if let Some(meta) = c.optional_object("_meta", "clientCapabilities._meta")? {
            // A convention, not a spec field: tolerate any type, use only `true`.
            caps.terminal_output_meta = meta.get("terminal_output") == Some(&Value::Bool(true));
            caps.terminal_output_delta =
                meta.get("terminal_output_delta") == Some(&Value::Bool(true));
            caps.maka_turn_status = meta.get("_maka/turnStatus") == Some(&Value::Bool(true));
            caps.maka_goal_plan_status =
                meta.get("_maka/goalPlanStatus") == Some(&Value::Bool(true));
            caps.end_turn_usage =
                meta.get("unstable_end_turn_token_usage") == Some(&Value::Bool(true));
        }
    }
    let client_info = match p.optional_object("clientInfo", "clientInfo")? {
        None => None,
        Some(ci) => Some(ClientInfo {
            name: ci.optional_str("name")?.unwrap_or_default().to_string(),
            version: ci.optional_str("version")?.unwrap_or_default().to_string(),
        }),
    };
    Ok(InitializeParams {
        offered_version,
        capabilities: caps,
        client_info,
    })
}

/// A v1 connection answers 1 whatever the client offered (0, or 2 and more in Maka's dialect,
/// which is v1's); the client decides whether it can continue.
pub fn negotiate(_offered: u16) -> u16 {
    PROTOCOL_VERSION
}

/// `can_log_out`: a build with a host of its own keeps a stored key that `logout` removes.
pub fn agent_capabilities(can_log_out: bool) -> AgentCapabilities {
    AgentCapabilities {
        load_session: true,
        prompt_capabilities: PromptCapabilities {
            image: true,
            audio: false,
            embedded_context: true,
        },
        mcp_capabilities: McpCapabilities {
            http: true,
            sse: true,
        },
        session_capabilities: SessionCapabilities {
            list: Empty {},
            fork: Empty {},
            resume: Empty {},
            close: Empty {},
            delete: Empty {},
            additional_directories: Empty {},
            system_prompt: json!({"mode": {"override": {}}}),
            options: Empty {},
        },
        // `logout` removes the key `maka-acp login` stored: only a build with the login flow
        // has it.
        auth: can_log_out.then_some(AuthCapabilities { logout: Empty {} }),
        meta: json!({"maka": {
            "version": 1,
            "methods": super::methods::maka_methods(),
            "notifications": ["_maka/turn_state", "_maka/goal_update"],
        }}),
    }
}

/// `auth_methods`: see [`super::auth::methods`].
pub fn result(
    params: &InitializeParams,
    auth_methods: Vec<AuthMethod>,
    can_log_out: bool,
) -> InitializeResponse {
    InitializeResponse {
        protocol_version: negotiate(params.offered_version),
        agent_capabilities: agent_capabilities(can_log_out),
        auth_methods,
        agent_info: Implementation {
            name: "maka-acp".into(),
            title: "Maka".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        meta: shared_extensions(),
    }
}

/// The extensions other agents share, advertised where they advertise them: the response's
/// own `_meta` (claude-agent-acp's and codex-acp's `docs/air-extensions.md`).
pub fn shared_extensions() -> Value {
    json!({
        "steering": {"supported": true},
        "goal": {
            "version": 1,
            "controlMethod": super::projection::GOAL_CONTROL_METHOD,
            "actions": super::shared_names::GOAL_ACTIONS,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_capabilities_and_rejects_wrong_types() {
        let p = parse(&json!({
            "protocolVersion": 2,
            "clientCapabilities": {
                "fs": {"readTextFile": true, "writeTextFile": null},
                "terminal": true,
                "elicitation": {"form": {}, "url": null},
                "session": {"configOptions": {"boolean": {}}, "notices": {}, "compaction": {}},
                "plan": {}, "subagents": {},
                "_meta": {"terminal_output": true, "_maka/turnStatus": true, "_maka/goalPlanStatus": 1}
            },
            "clientInfo": {"name": "zed", "version": "1"}
        }))
        .unwrap();
        assert_eq!(negotiate(p.offered_version), 1);
        let c = &p.capabilities;
        assert!(c.fs_read_text_file && !c.fs_write_text_file && c.terminal);
        assert!(c.elicitation_form && !c.elicitation_url && c.boolean_config_options);
        assert!(
            c.maka_turn_status && !c.maka_goal_plan_status,
            "only `true` opts in"
        );
        assert!(
            c.terminal_output_meta
                && !c.auth_terminal
                && c.notices
                && c.compaction
                && c.plan
                && c.subagents
        );
        // A malformed capability marker is not advertised, and no error (ACP reads it so).
        let lenient = parse(&json!({"protocolVersion": 1, "clientCapabilities": {
            "plan": true, "subagents": [], "session": {"notices": false, "compaction": "yes"}}}))
        .unwrap();
        let c = &lenient.capabilities;
        assert!(!c.plan && !c.subagents && !c.notices && !c.compaction);
        let e = parse(&json!({"protocolVersion": 1, "clientCapabilities": {"terminal": "yes"}}))
            .unwrap_err();
        assert!(
            e.message.contains("`clientCapabilities.terminal`"),
            "{}",
            e.message
        );
    }
}
