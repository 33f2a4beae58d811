//! Every ACP request and notification this agent serves, as one typed enum ([`Request`]),
//! read from `method` + `params` on the dispatcher thread before any work starts. Reading is
//! lenient where ACP is (unknown fields ignored, `null` = absent) and exact where it matters:
//! a present field of the wrong type is `-32602` naming the field ([`Params`]).

use super::initialize::{self, InitializeParams};
use super::params::{ParamResult, Params};
use crate::jsonrpc::ResponseError;
use serde_json::Value;
use std::path::Path;

/// A request, typed.
pub enum Request {
    Initialize(InitializeParams),
    Authenticate {
        method_id: String,
    },
    Logout,
    NewSession(NewSession),
    /// `session/fork` (ACP unstable).
    ForkSession(ForkSession),
    /// `session/load` (`replay`: true) and `session/resume`.
    OpenSession {
        open: OpenSession,
        replay: bool,
    },
    ListSessions(ListSessions),
    CloseSession {
        session_id: String,
    },
    DeleteSession {
        session_id: String,
    },
    /// Validated against the session's current options by the worker (they are not known
    /// here), so the params travel as they came.
    SetConfigOption {
        session_id: String,
        params: Value,
        /// `session/set_model` (earlier unstable ACP, still called by some clients): the
        /// `model` option, answered as that method was.
        as_set_model: bool,
    },
    SetMode {
        session_id: String,
        mode_id: String,
    },
    Prompt(Prompt),
    /// `_maka/turn/resume`: continues an interrupted run, registered and answered like a
    /// prompt.
    ResumeTurn {
        session_id: String,
    },
    /// `_maka/plan/start`: a turn carrying out the approved plan, registered and answered like
    /// a prompt.
    PlanTurn {
        session_id: String,
    },
    /// A `_maka/` query (`acp/maka.rs`).
    Maka(super::maka::MakaRequest),
}

pub struct NewSession {
    pub cwd: String,
    pub additional_directories: Vec<String>,
    /// ACP `McpServer` objects, passed to the host as they are.
    pub mcp_servers: Vec<Value>,
}

pub struct ForkSession {
    pub session_id: String,
    pub cwd: String,
    pub additional_directories: Vec<String>,
    pub mcp_servers: Vec<Value>,
}

pub struct OpenSession {
    pub session_id: String,
    pub cwd: String,
    /// `session/load` requires the list; `session/resume` may omit it (then what runs keeps
    /// running).
    pub mcp_servers: Option<Vec<Value>>,
}

pub struct ListSessions {
    pub cwd: Option<String>,
    pub cursor: Option<String>,
}

pub struct Prompt {
    pub session_id: String,
    pub blocks: Vec<Value>,
}

/// Why a request cannot be read.
pub enum Unreadable {
    /// Not a method of this agent (including `_` extensions it does not implement).
    UnknownMethod,
    InvalidParams(ResponseError),
}

impl Request {
    /// Reads `method` with `params`.
    pub fn parse(method: &str, params: &Value) -> Result<Request, Unreadable> {
        let read = |f: fn(&Params) -> ParamResult<Request>| {
            Params::of(params)
                .and_then(|p| f(&p))
                .map_err(Unreadable::InvalidParams)
        };
        match method {
            "initialize" => initialize::parse(params)
                .map(Request::Initialize)
                .map_err(Unreadable::InvalidParams),
            "authenticate" => read(|p| {
                Ok(Request::Authenticate {
                    method_id: p.required_str("methodId")?.into(),
                })
            }),
            "logout" if cfg!(feature = "host") => read(|_| Ok(Request::Logout)),
            "session/new" => read(|p| {
                Ok(Request::NewSession(NewSession {
                    cwd: absolute(p, "cwd")?,
                    additional_directories: directories(p)?,
                    // Required by the schema; tolerated when absent (some clients omit an
                    // empty list).
                    mcp_servers: p.optional_array("mcpServers")?.cloned().unwrap_or_default(),
                }))
            }),
            "session/fork" => read(|p| {
                Ok(Request::ForkSession(ForkSession {
                    session_id: p.required_str("sessionId")?.into(),
                    cwd: absolute(p, "cwd")?,
                    additional_directories: directories(p)?,
                    mcp_servers: p.optional_array("mcpServers")?.cloned().unwrap_or_default(),
                }))
            }),
            "session/load" => read(|p| open(p, true)),
            "session/resume" => read(|p| open(p, false)),
            "session/list" => read(|p| {
                let cwd = match p.optional_str("cwd")? {
                    Some(c) if !Path::new(c).is_absolute() => {
                        return Err(ResponseError::invalid_params(
                            "`cwd` must be an absolute path",
                        ))
                    }
                    other => other.map(String::from),
                };
                Ok(Request::ListSessions(ListSessions {
                    cwd,
                    cursor: p.optional_str("cursor")?.map(String::from),
                }))
            }),
            "session/close" => read(|p| {
                Ok(Request::CloseSession {
                    session_id: p.required_str("sessionId")?.into(),
                })
            }),
            "session/delete" => read(|p| {
                Ok(Request::DeleteSession {
                    session_id: p.required_str("sessionId")?.into(),
                })
            }),
            "session/set_config_option" => {
                let session_id = Params::of(params)
                    .and_then(|p| p.required_str("sessionId").map(String::from))
                    .map_err(Unreadable::InvalidParams)?;
                Ok(Request::SetConfigOption {
                    session_id,
                    params: params.clone(),
                    as_set_model: false,
                })
            }
            "session/set_mode" => read(|p| {
                let mode_id = p.required_str("modeId")?.to_string();
                // Checked here: an unknown mode needs no session to be refused.
                super::config_options::mode_patch(&mode_id)?;
                Ok(Request::SetMode {
                    session_id: p.required_str("sessionId")?.into(),
                    mode_id,
                })
            }),
            "session/set_model" => read(|p| {
                let session_id: String = p.required_str("sessionId")?.into();
                let value = p.required_str("modelId")?;
                Ok(Request::SetConfigOption {
                    params: serde_json::json!({"sessionId": session_id, "configId": "model", "value": value}),
                    session_id,
                    as_set_model: true,
                })
            }),
            "session/prompt" => read(|p| {
                Ok(Request::Prompt(Prompt {
                    session_id: p.required_str("sessionId")?.into(),
                    blocks: p.required_array("prompt")?.clone(),
                }))
            }),
            "_maka/turn/resume" => read(|p| {
                Ok(Request::ResumeTurn {
                    session_id: p.required_str("sessionId")?.into(),
                })
            }),
            "_maka/plan/start" => read(|p| {
                Ok(Request::PlanTurn {
                    session_id: p.required_str("sessionId")?.into(),
                })
            }),
            m if m.starts_with("_maka/") => match super::maka::MakaRequest::parse(m, params) {
                Some(r) => r.map(Request::Maka).map_err(Unreadable::InvalidParams),
                None => Err(Unreadable::UnknownMethod),
            },
            _ => Err(Unreadable::UnknownMethod),
        }
    }
}

fn open(p: &Params, replay: bool) -> ParamResult<Request> {
    let session_id = p.required_str("sessionId")?.to_string();
    let cwd = absolute(p, "cwd")?;
    directories(p)?;
    Ok(Request::OpenSession {
        open: OpenSession {
            session_id,
            cwd,
            mcp_servers: p.optional_array("mcpServers")?.cloned(),
        },
        replay,
    })
}

fn absolute(p: &Params, field: &str) -> ParamResult<String> {
    let v = p.required_str(field)?;
    if !Path::new(v).is_absolute() {
        return Err(ResponseError::invalid_params(format_args!(
            "`{field}` must be an absolute path, got {v:?}"
        )));
    }
    Ok(v.to_string())
}

fn directories(p: &Params) -> ParamResult<Vec<String>> {
    let Some(list) = p.optional_array("additionalDirectories")? else {
        return Ok(vec![]);
    };
    list.iter()
        .enumerate()
        .map(|(i, d)| match d.as_str() {
            Some(s) if Path::new(s).is_absolute() => Ok(s.to_string()),
            _ => Err(ResponseError::invalid_params(format_args!(
                "`additionalDirectories[{i}]` must be an absolute path"
            ))),
        })
        .collect()
}

/// `session/cancel`'s session id (the one notification this agent acts on).
pub fn cancel_target(params: &Value) -> Option<&str> {
    params.get("sessionId").and_then(Value::as_str)
}
