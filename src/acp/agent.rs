//! The dispatcher: every ACP method this agent serves, in one table ([`Agent::handle_request`]).
//!
//! Quick methods are answered inline. Methods that talk to the Runtime Host run on a worker
//! thread each and answer through their [`Responder`], so `session/cancel` is never stuck
//! behind them. A prompt's responder is handed to the session's reader thread, which answers
//! after the turn's last update.

use super::auth;
use super::client_call;
use super::config_options::{self, Catalog, SessionConfig};
use super::errors::{self, from_client};
use super::host_link::{Connected, HostLink};
use super::initialize::{self, InitializeParams};
use super::interaction;
use super::params::Params;
use super::prompt;
use super::session::{AcpSession, PendingPrompt, Shared};
use crate::host_api::random_hex;
use crate::host_api::wire::Interaction;
use crate::jsonrpc::{code, Connection, Incoming, Notification, Request, Responder, ResponseError};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the Runtime Host is, from the command line and environment.
#[derive(Clone, Debug, Default)]
pub struct AdapterConfig {
    /// An existing host; `None` starts the embedded one on first use.
    pub host_url: Option<String>,
    pub host_token: Option<String>,
    pub data_dir: Option<PathBuf>,
}

type Sessions = Arc<Mutex<HashMap<String, Arc<AcpSession>>>>;

struct Agent {
    conn_outbox: crate::jsonrpc::Outbox,
    calls: Arc<crate::jsonrpc::ClientCalls>,
    link: Arc<HostLink>,
    /// Set by `initialize`; before it, the client is assumed to support nothing.
    client: Option<InitializeParams>,
    sessions: Sessions,
}

/// What a worker thread needs.
#[derive(Clone)]
struct Ctx {
    shared: Arc<Shared>,
    sessions: Sessions,
}

impl Ctx {
    fn host(&self) -> Result<Connected, ResponseError> {
        self.shared.link.get()
    }

    /// Calls a host operation; a transport failure forgets the host (the next call restarts it).
    fn op(&self, conn: &Connected, key: &str, input: Value) -> Result<Value, ResponseError> {
        conn.client
            .op(key, &input)
            .map_err(|e| self.host_error(conn, &e))
    }

    /// A host client error as the client sees it; a transport failure forgets the host.
    fn host_error(
        &self,
        conn: &Connected,
        e: &crate::host_api::client::ClientError,
    ) -> ResponseError {
        if matches!(e, crate::host_api::client::ClientError::Transport(_)) {
            self.shared.link.lost(&conn.epoch);
        }
        from_client(e)
    }

    fn session(&self, id: &str) -> Option<Arc<AcpSession>> {
        lock(&self.sessions).get(id).cloned()
    }

    /// Command output through Zed's display-only `_meta.terminal_*` convention: only for a
    /// client that asks for it and has no real terminals.
    fn display_terminal(&self) -> bool {
        !self.shared.caps.terminal && self.shared.caps.terminal_output_meta
    }
}

/// Tells the host what it may delegate to this client for `session_id` (files, terminals).
fn register_services(ctx: &Ctx, conn: &Connected, session_id: &str) -> Result<(), ResponseError> {
    let services = client_call::services(&ctx.shared.caps);
    if services.is_empty() {
        return Ok(());
    }
    ctx.op(
        conn,
        "client.capability.replace",
        json!({"sessionId": session_id, "services": services}),
    )
    .map(|_| ())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The methods of [`Agent::handle_request`] other than `initialize`.
const KNOWN_METHODS: [&str; 12] = [
    "authenticate",
    "logout",
    "session/new",
    "session/load",
    "session/resume",
    "session/list",
    "session/close",
    "session/delete",
    "session/set_config_option",
    "session/set_mode",
    "session/prompt",
    "session/cancel",
];

/// Serves one ACP connection until the client closes stdin.
pub fn serve(conn: Connection, config: AdapterConfig) {
    let mut agent = Agent {
        conn_outbox: conn.outbox.clone(),
        calls: Arc::clone(&conn.client_calls),
        link: Arc::new(HostLink::new(config)),
        client: None,
        sessions: Arc::default(),
    };
    while let Ok(incoming) = conn.inbox.recv() {
        match incoming {
            Incoming::Request(request, responder) => agent.handle_request(request, responder),
            Incoming::Notification(n) => agent.handle_notification(n),
        }
    }
    log::debug!("client closed the connection; shutting down");
    let ctx = agent.ctx();
    let sessions: Vec<Arc<AcpSession>> = lock(&agent.sessions).values().cloned().collect();
    for s in &sessions {
        let running = {
            let mut st = s.lock();
            st.closed = true;
            st.prompt
                .as_ref()
                .filter(|p| p.started)
                .map(|p| p.turn_id.clone())
        };
        // Editor terminals first: the client may still read stdout after closing stdin.
        client_call::release_all(s, &ctx.shared);
        // An external host outlives us: it must stop waiting for this editor (its calls
        // fail at once), stop the turn nobody can follow, and stop this client's MCP servers.
        if let Some(conn) = agent.link.current() {
            let id = json!(s.id);
            let mut ops = vec![(
                "client.capability.replace",
                json!({"sessionId": id, "services": []}),
            )];
            if let Some(turn) = running {
                ops.push(("turn.stop", json!({"sessionId": id, "turnId": turn})));
            }
            ops.push(("session.release", json!({"sessionId": id})));
            for (op, input) in ops {
                if let Err(e) = conn.client.op(op, &input) {
                    log::warn!("{op} for {} at exit: {e}", s.id);
                }
            }
        }
    }
    agent.link.shutdown();
    conn.finish();
}

impl Agent {
    fn ctx(&self) -> Ctx {
        Ctx {
            shared: Arc::new(Shared {
                outbox: self.conn_outbox.clone(),
                calls: Arc::clone(&self.calls),
                link: Arc::clone(&self.link),
                caps: self
                    .client
                    .as_ref()
                    .map(|c| c.capabilities.clone())
                    .unwrap_or_default(),
            }),
            sessions: Arc::clone(&self.sessions),
        }
    }

    /// Every ACP method, in one place.
    fn handle_request(&mut self, request: Request, responder: Responder) {
        let Request { method, params, .. } = request;
        if self.client.is_none()
            && method != "initialize"
            && KNOWN_METHODS.contains(&method.as_str())
        {
            // Capabilities decide what every later method may do; without a successful
            // `initialize` there are none to go by.
            return responder.respond(Err(ResponseError::new(
                code::INVALID_REQUEST,
                format!("{method} needs a successful `initialize` first; send `initialize` and check its answer"),
            )));
        }
        let work: fn(&Ctx, Value, Responder) = match method.as_str() {
            "initialize" => return responder.respond(self.initialize(&params)),
            "authenticate" => |c, p, r| r.respond(authenticate(c, &p)),
            "logout" => |c, _, r| r.respond(logout(c)),
            "session/new" => session_new,
            "session/load" => |c, p, r| session_open(c, &p, r, true),
            "session/resume" => |c, p, r| session_open(c, &p, r, false),
            "session/list" => |c, p, r| r.respond(session_list(c, &p)),
            "session/close" => |c, p, r| r.respond(session_close(c, &p)),
            "session/delete" => |c, p, r| r.respond(session_delete(c, &p)),
            "session/set_config_option" => set_config_option,
            "session/set_mode" => set_mode,
            "session/prompt" => {
                // Registered here, in order with every other message, so a session/cancel
                // that follows the prompt always finds it.
                let ctx = self.ctx();
                let Some((session, turn_id, content)) = register_prompt(&ctx, &params, responder)
                else {
                    return;
                };
                let spawned = std::thread::Builder::new()
                    .name("acp-session/prompt".into())
                    .spawn(move || start_prompt(&ctx, &session, &turn_id, content));
                if let Err(e) = spawned {
                    log::error!("cannot start a worker for session/prompt: {e}");
                }
                return;
            }
            // Unknown methods, `_` extensions we do not implement, and methods whose
            // capability we do not advertise.
            _ => return responder.respond(Err(ResponseError::method_not_found(&method))),
        };
        let ctx = self.ctx();
        let spawned = std::thread::Builder::new()
            .name(format!("acp-{method}"))
            .spawn(move || work(&ctx, params, responder));
        if let Err(e) = spawned {
            // The responder moved into the failed closure and answers -32603 when dropped.
            log::error!("cannot start a worker for {method}: {e}");
        }
    }

    fn handle_notification(&mut self, n: Notification) {
        match n.method.as_str() {
            "session/cancel" => {
                let Some(id) = n.params.get("sessionId").and_then(Value::as_str) else {
                    log::warn!("session/cancel without a sessionId");
                    return;
                };
                let ctx = self.ctx();
                match ctx.session(id) {
                    Some(s) => s.cancel(&ctx.shared),
                    None => log::debug!("session/cancel for unknown session {id}"),
                }
            }
            // Unknown notifications (including `_…` extensions) are ignored, as ACP asks.
            other => log::debug!("ignoring notification {other}"),
        }
    }

    fn initialize(&mut self, params: &Value) -> Result<Value, ResponseError> {
        let params = initialize::parse(params)?;
        if let Some(info) = &params.client_info {
            log::info!("client {} {} connected", info.name, info.version);
        }
        let ready = auth::provider_configured(&self.link);
        let result = initialize::result(&params, auth::methods(&params.capabilities, ready));
        self.client = Some(params);
        Ok(result)
    }
}

fn absolute(p: &Params, field: &str) -> Result<String, ResponseError> {
    let v = p.required_str(field)?;
    if !Path::new(v).is_absolute() {
        return Err(ResponseError::invalid_params(format_args!(
            "`{field}` must be an absolute path, got {v:?}"
        )));
    }
    Ok(v.to_string())
}

fn directories(p: &Params) -> Result<Vec<String>, ResponseError> {
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

fn mcp_servers(p: &Params) -> Result<Vec<Value>, ResponseError> {
    // Required by the schema; tolerated when absent (some clients omit an empty list).
    Ok(p.optional_array("mcpServers")?.cloned().unwrap_or_default())
}

fn session_new(ctx: &Ctx, params: Value, responder: Responder) {
    match create_session(ctx, &params) {
        Ok((result, session)) => {
            responder.respond(Ok(result));
            send_commands(ctx, &session);
        }
        Err(e) => responder.respond(Err(e)),
    }
}

fn create_session(ctx: &Ctx, params: &Value) -> Result<(Value, Arc<AcpSession>), ResponseError> {
    let p = Params::of(params)?;
    let cwd = absolute(&p, "cwd")?;
    let dirs = directories(&p)?;
    let mcp = mcp_servers(&p)?;
    auth::refuse_early(&ctx.shared.link)?;
    let conn = ctx.host()?;
    let models = auth::check_host(&ctx.shared.link, &conn)?;
    let id = format!("sess_{}", random_hex(12));
    let record = ctx.op(
        &conn,
        "session.create",
        json!({
            "sessionId": id,
            "workspace": {"kind": "host_path", "path": cwd},
            "additionalDirectories": dirs,
            "mcpServers": mcp,
        }),
    )?;
    register_services(ctx, &conn, &id)?;
    let session = AcpSession::new(&id, &cwd, ctx.display_terminal());
    let mut result = attach_config(ctx, &session, &record, &models);
    result["sessionId"] = json!(id);
    lock(&ctx.sessions).insert(id, Arc::clone(&session));
    Ok((result, session))
}

/// Records the model catalog (`models.list`) and the session's configuration, and returns the
/// `configOptions` + `modes` part of a new/load/resume result.
fn attach_config(ctx: &Ctx, session: &AcpSession, record: &Value, models: &Value) -> Value {
    session.lock().catalog = Catalog::from_models_list(models);
    let config = SessionConfig::from_session(record);
    let modes = config
        .as_ref()
        .map(|c| config_options::modes(&c.configuration));
    let options = session.record_config(config, ctx.shared.caps.boolean_config_options);
    if options.is_null() {
        log::warn!("session {}: the host sent no configuration", session.id);
        return json!({});
    }
    json!({"configOptions": options, "modes": modes})
}

/// `available_commands_update` (after the new/load/resume response): the host's commands.
fn send_commands(ctx: &Ctx, session: &AcpSession) {
    let listed = ctx
        .host()
        .and_then(|conn| ctx.op(&conn, "skills.list", json!({"sessionId": session.id})));
    let skills = match listed {
        Ok(v) => v,
        Err(e) => {
            log::warn!("skills.list for {}: {}", session.id, e.message);
            return;
        }
    };
    let commands: Vec<Value> = skills["skills"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let mut c = json!({"name": s["name"].as_str()?, "description": s["description"].as_str().unwrap_or_default()});
            if let Some(h) = s["inputHint"].as_str() {
                c["input"] = json!({"hint": h});
            }
            Some(c)
        })
        .collect();
    ctx.shared.update(
        &session.id,
        json!({"sessionUpdate": "available_commands_update", "availableCommands": commands}),
    );
}

/// `session/load` (`replay`) and `session/resume`.
fn session_open(ctx: &Ctx, params: &Value, responder: Responder, replay: bool) {
    match open_inner(ctx, params, &responder, replay) {
        Ok((session, result, after)) => {
            let id = session.id.clone();
            // Loading again replaces this connection's previous view of the session.
            if let Some(old) = lock(&ctx.sessions).insert(id, Arc::clone(&session)) {
                old.lock().closed = true;
            }
            responder.respond(Ok(result));
            // Only after the response: the commands, then live frames and dialogs of a turn
            // already running.
            send_commands(ctx, &session);
            after(&session);
        }
        Err(e) => responder.respond(Err(e)),
    }
}

type AfterResponse = Box<dyn FnOnce(&Arc<AcpSession>) + Send>;

fn open_inner(
    ctx: &Ctx,
    params: &Value,
    responder: &Responder,
    replay: bool,
) -> Result<(Arc<AcpSession>, Value, AfterResponse), ResponseError> {
    let p = Params::of(params)?;
    let id = p.required_str("sessionId")?.to_string();
    let cwd = absolute(&p, "cwd")?;
    directories(&p)?;
    // load requires the list; resume may omit it (then what runs keeps running).
    let mcp = p.optional_array("mcpServers")?.cloned();
    if let Some(existing) = ctx.session(&id) {
        if existing.lock().prompt.is_some() {
            return Err(ResponseError::new(
                code::INTERNAL_ERROR,
                format!(
                    "Session {id} has a prompt running; cancel it before loading the session again"
                ),
            )
            .with_data(json!({"makaCode": "session_busy"})));
        }
    }
    let conn = ctx.host()?;
    let got = ctx.op(&conn, "session.get", json!({"sessionId": id}))?;
    let record = &got["session"];
    if record.is_null() {
        return Err(errors::unknown_session(&id));
    }
    let path = record["workspace"]["path"].as_str().unwrap_or_default();
    if path != cwd {
        return Err(ResponseError::invalid_params(format_args!(
            "`cwd` ({cwd}) is not this session's working directory ({path})"
        )));
    }
    let mut open_input = json!({"sessionId": id});
    if let Some(servers) = mcp {
        open_input["mcpServers"] = Value::Array(servers);
    }
    let open = ctx.op(&conn, "session.open", open_input)?;
    register_services(ctx, &conn, &id)?;
    let session = AcpSession::new(&id, &cwd, ctx.display_terminal());
    let models = ctx.op(&conn, "models.list", json!({}))?;
    let result = attach_config(ctx, &session, record, &models);
    let active_turn = open["activeTurn"]["turnId"].as_str().map(String::from);
    session.set_position(
        open["seq"].as_u64().unwrap_or(0),
        &conn.epoch,
        active_turn.clone(),
    );
    // Replayed (load) or not wanted (resume): a later catch-up starts after this point.
    session.lock().through = open["transcript"]["throughMessageSeq"]
        .as_u64()
        .unwrap_or(0);
    if replay {
        let through = open["transcript"]["throughMessageSeq"]
            .as_u64()
            .unwrap_or(0);
        // A `$/cancel_request` for this load has already been answered; stop working.
        let cancel = responder.cancel_flag();
        let done = session
            .replay_transcript(&ctx.shared, &conn.client, 0, through, &|| {
                cancel.is_cancelled()
            })
            .map_err(|e| ctx.host_error(&conn, &e))?;
        if !done {
            return Err(ResponseError::cancelled());
        }
        // Tools of an interrupted past turn never got a result: show them settled.
        if active_turn.is_none() {
            for u in session
                .lock()
                .projector
                .close_open_tools("This tool did not finish (the turn was interrupted).")
            {
                ctx.shared.update(&id, u);
            }
        }
    }
    session.show_in_flight(&ctx.shared, &open);
    let pending: Vec<Interaction> =
        serde_json::from_value(open["pendingInteractions"].clone()).unwrap_or_default();
    let (shared, c2) = (Arc::clone(&ctx.shared), conn.clone());
    let after: AfterResponse = Box::new(move |s: &Arc<AcpSession>| {
        if active_turn.is_some() {
            s.ensure_reader(&shared, &c2, None);
        }
        for i in pending {
            interaction::spawn(Arc::clone(s), Arc::clone(&shared), c2.clone(), i);
        }
    });
    Ok((session, result, after))
}

fn session_list(ctx: &Ctx, params: &Value) -> Result<Value, ResponseError> {
    let p = Params::of(params)?;
    let cwd = match p.optional_str("cwd")? {
        Some(c) if !Path::new(c).is_absolute() => {
            return Err(ResponseError::invalid_params(
                "`cwd` must be an absolute path",
            ))
        }
        other => other,
    };
    let cursor = p.optional_str("cursor")?;
    let conn = ctx.host()?;
    // Sessions never prompted have nothing to resume: not listed (pickers would fill up with
    // empty entries). They can still be loaded by id.
    let mut input = json!({"cursor": cursor, "limit": 50, "filter": {"nonEmpty": true}});
    if let Some(c) = cwd {
        input["filter"]["cwd"] = json!(c);
    }
    let page = ctx.op(&conn, "session.list", input).map_err(|mut e| {
        if e.code == code::INVALID_PARAMS && cursor.is_some() {
            e.message = "Invalid params: `cursor` is not a cursor this agent issued".into();
        }
        e
    })?;
    let sessions: Vec<Value> = page["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let mut info = json!({
                "sessionId": s["id"],
                "cwd": s["workspace"]["path"],
                "updatedAt": super::projection::iso8601(s["lastUsedAt"].as_u64().unwrap_or(0)),
            });
            // An unknown title is omitted, never null (CodeCompanion's picker crashes on null).
            if let Some(title) = s["name"].as_str() {
                info["title"] = json!(title);
            }
            if s["additionalDirectories"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
            {
                info["additionalDirectories"] = s["additionalDirectories"].clone();
            }
            info
        })
        .collect();
    let mut result = json!({"sessions": sessions});
    if let Some(next) = page["nextCursor"].as_str() {
        result["nextCursor"] = json!(next);
    }
    Ok(result)
}

/// Cancels like `session/cancel`, waits (bounded) for the prompt to be answered, then drops
/// the session from this connection. Durable state is untouched.
fn close(ctx: &Ctx, session: &Arc<AcpSession>) {
    session.cancel(&ctx.shared);
    session.wait_prompt_done(Duration::from_secs(10));
    client_call::release_all(session, &ctx.shared);
    let outstanding: Vec<_> = {
        let mut st = session.lock();
        st.closed = true;
        st.outstanding.drain().map(|(_, r)| r).collect()
    };
    for r in outstanding {
        ctx.shared.calls.cancel(&r);
    }
    lock(&ctx.sessions).remove(&session.id);
    // The host stops what it ran for this client (MCP servers); durable state stays.
    if let Ok(conn) = ctx.host() {
        if let Err(e) = conn
            .client
            .op("session.release", &json!({"sessionId": session.id}))
        {
            log::debug!("session.release {}: {e}", session.id);
        }
    }
}

fn session_close(ctx: &Ctx, params: &Value) -> Result<Value, ResponseError> {
    let p = Params::of(params)?;
    let id = p.required_str("sessionId")?;
    let session = ctx.session(id).ok_or_else(|| errors::unknown_session(id))?;
    close(ctx, &session);
    Ok(json!({}))
}

fn session_delete(ctx: &Ctx, params: &Value) -> Result<Value, ResponseError> {
    let p = Params::of(params)?;
    let id = p.required_str("sessionId")?;
    if let Some(session) = ctx.session(id) {
        close(ctx, &session);
    }
    let conn = ctx.host()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    for _ in 0..3 {
        let got = ctx.op(&conn, "session.get", json!({"sessionId": id}))?;
        let record = &got["session"];
        if record.is_null() {
            return Ok(json!({})); // unknown or already deleted: success, silently
        }
        if let Some(turn) = record["activeTurnId"].as_str() {
            // Another client's turn (ours was cancelled by close): stop it, then retry.
            ctx.op(&conn, "turn.stop", json!({"sessionId": id, "turnId": turn}))?;
            while Instant::now() < deadline {
                let s = ctx.op(&conn, "session.get", json!({"sessionId": id}))?;
                if s["session"]["activeTurnId"].is_null() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        }
        match ctx.op(
            &conn,
            "session.remove",
            json!({"sessionId": id, "expectedRevision": record["revision"]}),
        ) {
            Ok(r) if r["kind"] == "removed" => return Ok(json!({})),
            Ok(_) => continue, // revision conflict: re-read and retry
            Err(e) if e.code == code::RESOURCE_NOT_FOUND => return Ok(json!({})),
            Err(e) => return Err(e),
        }
    }
    Err(ResponseError::new(
        code::INTERNAL_ERROR,
        format!("Session {id} kept changing while being deleted; try again"),
    )
    .with_data(json!({"makaCode": "operation_conflict", "retryable": true})))
}

/// Validates a prompt and makes it the session's pending prompt (on the dispatcher thread).
/// Answers the request itself and returns None when the prompt cannot run.
fn register_prompt(
    ctx: &Ctx,
    params: &Value,
    responder: Responder,
) -> Option<(Arc<AcpSession>, String, Value)> {
    let parsed = Params::of(params).and_then(|p| {
        Ok((
            p.required_str("sessionId")?.to_string(),
            p.required_array("prompt")?,
        ))
    });
    let (id, blocks) = match parsed {
        Ok(x) => x,
        Err(e) => {
            responder.respond(Err(e));
            return None;
        }
    };
    let Some(session) = ctx.session(&id) else {
        responder.respond(Err(errors::unknown_session(&id)));
        return None;
    };
    let content = match prompt::to_message(blocks)
        .and_then(|c| serde_json::to_value(&c).map_err(ResponseError::internal))
    {
        Ok(c) => c,
        Err(e) => {
            responder.respond(Err(e));
            return None;
        }
    };
    let turn_id = format!("t_{}", random_hex(8));
    let mut st = session.lock();
    if st.prompt.is_some() {
        drop(st);
        responder.respond(Err(ResponseError::new(
            code::INTERNAL_ERROR,
            format!("Session {id} is already running a prompt; wait for it or send session/cancel"),
        )
        .with_data(json!({"makaCode": "session_busy", "retryable": true}))));
        return None;
    }
    st.projector.mark_own_turn(&turn_id);
    st.prompt = Some(PendingPrompt {
        responder,
        turn_id: turn_id.clone(),
        started: false,
        cancel_requested: false,
    });
    drop(st);
    Some((session, turn_id, content))
}

/// Starts the registered prompt's turn on the host (on a worker thread); the session's reader
/// answers the prompt when the turn ends.
fn start_prompt(ctx: &Ctx, session: &Arc<AcpSession>, turn_id: &str, content: Value) {
    let id = session.id.clone();
    // The responder lives in the session; `fail` answers through it.
    let fail = |e: ResponseError| session.fail_prompt(e);
    let conn = match ctx.host() {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    if !session.positioned_for(&conn.epoch) {
        // First prompt on this host epoch (or after a host restart): take a snapshot barrier.
        match ctx.op(&conn, "session.open", json!({"sessionId": id})) {
            Ok(open) => {
                session.observe_snapshot(&ctx.shared, &open);
                session.set_position(open["seq"].as_u64().unwrap_or(0), &conn.epoch, None);
                let through = open["transcript"]["throughMessageSeq"].as_u64();
                let mut st = session.lock();
                st.through = st.through.max(through.unwrap_or(0));
            }
            Err(e) => return fail(e),
        }
        // A new host epoch has forgotten what this client can do.
        if let Err(e) = register_services(ctx, &conn, &id) {
            return fail(e);
        }
    }
    // Followed before it runs: a turn nobody can follow is never started.
    let stream = match session.open_stream(&conn) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    if let Err(e) = ctx.op(
        &conn,
        "turn.start",
        json!({"sessionId": id, "turnId": turn_id, "content": content}),
    ) {
        return fail(e);
    }
    let stop_now = {
        let mut st = session.lock();
        match st.prompt.as_mut() {
            Some(pp) => {
                pp.started = true;
                pp.cancel_requested
            }
            None => false,
        }
    };
    if stop_now {
        // session/cancel arrived while turn.start was in flight.
        session.stop_turn(&ctx.shared, turn_id);
    }
    session.ensure_reader(&ctx.shared, &conn, stream);
}

fn authenticate(ctx: &Ctx, params: &Value) -> Result<Value, ResponseError> {
    let p = Params::of(params)?;
    let method = p.required_str("methodId")?;
    match method {
        auth::ENV_METHOD => {}
        auth::TERMINAL_METHOD => {
            return Err(ResponseError::invalid_params(
                "`login` is a terminal method; the client runs `maka-acp login` itself",
            ))
        }
        other => {
            return Err(ResponseError::invalid_params(format_args!(
                "`methodId` {other:?} is not an authentication method of this agent"
            )))
        }
    }
    // check_host re-reads the settings when they changed since the host started (a login in
    // another terminal).
    let conn = ctx.host()?;
    auth::check_host(&ctx.shared.link, &conn).map(|_| json!({}))
}

fn logout(ctx: &Ctx) -> Result<Value, ResponseError> {
    match crate::config::remove_api_key() {
        Ok(removed) => log::info!(
            "logout: {}",
            if removed {
                "the stored key was removed"
            } else {
                "no stored key"
            }
        ),
        Err(e) => {
            return Err(ResponseError::internal(format_args!(
                "cannot update the config file: {e}"
            )))
        }
    }
    auth::reload_host(&ctx.shared.link);
    Ok(json!({}))
}

fn attached(ctx: &Ctx, p: &Params) -> Result<Arc<AcpSession>, ResponseError> {
    let id = p.required_str("sessionId")?;
    ctx.session(id).ok_or_else(|| errors::unknown_session(id))
}

/// What a configuration change did, for the response and the notifications after it.
struct Changed {
    options: Value,
    old_mode: crate::host_api::wire::PermissionMode,
    new_mode: crate::host_api::wire::PermissionMode,
}

/// Validates (`make_patch`, before any host call), writes under revision CAS with bounded
/// retries, and records the result. The caller holds the session's config guard.
fn change_config(
    ctx: &Ctx,
    session: &AcpSession,
    make_patch: impl FnOnce(
        &crate::host_api::wire::Configuration,
        &Catalog,
    ) -> Result<crate::host_api::wire::ConfigurationPatch, ResponseError>,
) -> Result<Changed, ResponseError> {
    let (known, catalog) = {
        let st = session.lock();
        (st.config.clone(), st.catalog.clone())
    };
    let known = known.ok_or_else(|| {
        ResponseError::internal("the session's configuration is unknown; load the session again")
    })?;
    let patch = make_patch(&known.configuration, &catalog)?;
    let patch = serde_json::to_value(&patch).map_err(ResponseError::internal)?;
    let conn = ctx.host()?;
    let id = &session.id;
    let boolean = ctx.shared.caps.boolean_config_options;
    let committed = config_options::with_cas_retry(
        known.revision,
        |revision| {
            let r = ctx.op(
                &conn,
                "session.configuration.update",
                json!({"sessionId": id, "expectedRevision": revision, "patch": patch}),
            )?;
            if r["kind"] == "committed" {
                return Ok(config_options::CasStep::Committed(r["session"].clone()));
            }
            log::info!("session {id}: configuration revision conflict at {revision}; re-reading");
            Ok(config_options::CasStep::Conflict)
        },
        || {
            let got = ctx.op(&conn, "session.get", json!({"sessionId": id}))?;
            let fresh = SessionConfig::from_session(&got["session"])
                .ok_or_else(|| errors::unknown_session(id))?;
            let revision = fresh.revision;
            // Whatever the other writer changed shows in this change's response.
            session.record_config(Some(fresh), boolean);
            Ok(revision)
        },
        || {
            ResponseError::new(
                code::INTERNAL_ERROR,
                format!(
                    "Session {id}'s configuration kept changing ({} conflicting writes); try again",
                    config_options::CAS_RETRIES + 1
                ),
            )
            .with_data(json!({"makaCode": "revision_conflict", "retryable": true}))
        },
    )?;
    let fresh = SessionConfig::from_session(&committed);
    let new_mode = fresh
        .as_ref()
        .map(|c| c.configuration.permission_mode)
        .unwrap_or(known.configuration.permission_mode);
    let options = session.record_config(fresh, boolean);
    Ok(Changed {
        options,
        old_mode: known.configuration.permission_mode,
        new_mode,
    })
}

fn set_config_option(ctx: &Ctx, params: Value, responder: Responder) {
    let session = match Params::of(&params).and_then(|p| attached(ctx, &p)) {
        Ok(s) => s,
        Err(e) => return responder.respond(Err(e)),
    };
    let _guard = session.config_guard();
    let boolean = ctx.shared.caps.boolean_config_options;
    let changed = change_config(ctx, &session, |c, catalog| {
        let p = Params::of(&params)?;
        config_options::patch_for(&p, c, catalog, boolean)
    });
    match changed {
        Ok(ch) => {
            responder.respond(Ok(json!({"configOptions": ch.options})));
            // Keep the legacy mode view in sync.
            if ch.old_mode != ch.new_mode {
                ctx.shared.update(
                    &session.id,
                    json!({"sessionUpdate": "current_mode_update", "currentModeId": config_options::mode_id(ch.new_mode)}),
                );
            }
        }
        Err(e) => responder.respond(Err(e)),
    }
}

fn set_mode(ctx: &Ctx, params: Value, responder: Responder) {
    let parsed = Params::of(&params).and_then(|p| {
        let mode = p.required_str("modeId")?.to_string();
        config_options::mode_patch(&mode)?;
        Ok((attached(ctx, &p)?, mode))
    });
    let (session, mode) = match parsed {
        Ok(x) => x,
        Err(e) => return responder.respond(Err(e)),
    };
    let _guard = session.config_guard();
    match change_config(ctx, &session, |_, _| config_options::mode_patch(&mode)) {
        Ok(ch) => {
            responder.respond(Ok(json!({})));
            // Keep the config-option view in sync.
            ctx.shared.update(
                &session.id,
                json!({"sessionUpdate": "config_option_update", "configOptions": ch.options}),
            );
        }
        Err(e) => responder.respond(Err(e)),
    }
}
