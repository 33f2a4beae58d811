//! The dispatcher: reads each request with its row of the method table (`methods.rs`, the
//! connection's dialect choosing Maka's rows or ours) and runs
//! the job where the row says — `initialize` here, host calls on the worker pool (answering
//! through their [`Responder`], so `session/cancel` is never stuck behind them), a turn
//! registered here, in order with every other message, then started on a worker.

use super::auth;
use super::connection::Shared;
use super::errors::MakaCode;
use super::host_link::{Connected, HostLink, LocalHost};
use super::initialize::{self, Offer};
use super::methods::{self, Job};
use super::out::Version;
use super::principal::Principal;
use super::session::AcpSession;
use super::turns;
use super::workers::Workers;
use crate::host_api::ops::{self, CapabilityInput, SessionRef, TurnRef};
use crate::jsonrpc::{
    code, incoming::IncomingRequests, lock, Connection, Incoming, Notification, RequestId,
    Responder, ResponseError,
};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where the Runtime Host is, from the command line and environment.
#[derive(Clone, Debug, Default)]
pub struct AdapterConfig {
    /// An existing host; `None` starts the embedded one on first use.
    pub host_url: Option<String>,
    pub host_token: Option<String>,
    /// Authorities to trust for an `https://` host (`MAKA_HOST_CA`).
    pub host_tls: crate::host_api::client::HostTls,
    pub data_dir: Option<PathBuf>,
    /// `--log-level`, passed on to the embedded host.
    pub log_level: Option<String>,
    pub tunables: crate::tunables::Tunables,
    /// `--acp`: Apache Maka's names and shapes on this connection.
    pub dialect: super::Dialect,
    /// Paths the embedded host is told to hide from principals' sessions (`host --private`):
    /// `serve`'s tokens file.
    pub private: Vec<PathBuf>,
}

/// How long the requests read before stdin closed may take to be answered.
const EOF_GRACE: Duration = Duration::from_secs(10);

/// The dispatcher of one connection: its context, and what only the dispatcher touches.
struct Agent {
    shared: Arc<Shared>,
    /// `initialize` succeeded: later methods may run (the capabilities are in `shared`).
    initialized: bool,
    /// A request other than `initialize` was read since it succeeded (v2 allows a repeated
    /// `initialize` only before any).
    other_request_seen: bool,
    workers: Workers,
    /// Its requests in flight (v2 holds a prompt's cancel: [`super::session::HELD_CANCELS`]).
    incoming: Arc<IncomingRequests>,
}

/// What a method needs: its connection's context.
#[derive(Clone)]
pub struct Ctx {
    pub shared: Arc<Shared>,
}

impl Ctx {
    pub fn host(&self) -> Result<Connected, ResponseError> {
        self.shared.link.get()
    }

    pub fn session(&self, id: &str) -> Option<Arc<AcpSession>> {
        lock(&self.shared.sessions).get(id).cloned()
    }

    /// What this client can show beyond ACP's baseline (the view's choices); command output
    /// through Zed's display-only `_meta.terminal_*` convention only for a client that asks for
    /// it and has no real terminals.
    pub fn shows(&self) -> super::projection::Shows {
        let caps = self.shared.caps();
        super::projection::Shows {
            display_terminal: !caps.terminal && caps.terminal_output_meta,
            notices: caps.notices,
            compaction: caps.compaction,
            plan: caps.plan,
            subagents: caps.subagents,
            terminal_output_delta: caps.terminal_output_delta,
            answer_usage: caps.end_turn_usage,
            config_view: self.shared.config_view(),
            forms: caps.elicitation_form,
        }
    }

    /// Tells the host what it may delegate to this client for `session_id` (files, terminals).
    pub fn register_services(
        &self,
        conn: &Connected,
        session_id: &str,
    ) -> Result<(), ResponseError> {
        if self.shared.v1().is_none() {
            return Ok(()); // v2 has no client files or terminals: the host runs its own
        }
        let services = super::client_call::services(&self.shared.caps());
        if services.is_empty() {
            return Ok(());
        }
        let input = CapabilityInput {
            session_id: session_id.into(),
            services,
        };
        conn.request::<ops::CapabilityReplace>(&input).map(|_| ())
    }
}

/// Serves one ACP connection until the client closes stdin. `local`: what this build can do
/// without `--host-url` (start the embedded host, or nothing).
/// `principal`: who the connection acts for (`serve --tokens-file`); none: the machine's user.
pub fn serve(
    conn: Connection,
    config: AdapterConfig,
    local: Arc<dyn LocalHost>,
    principal: Option<Arc<Principal>>,
) {
    let dialect = config.dialect;
    let link =
        HostLink::new(config, local).for_principal(principal.as_ref().map(|p| p.name.clone()));
    let mut agent = Agent {
        shared: Arc::new(Shared::new(
            conn.outbox.clone(),
            Arc::clone(&conn.client_calls),
            Arc::new(link),
            dialect,
            principal,
        )),
        initialized: false,
        other_request_seen: false,
        workers: Workers::new(),
        incoming: Arc::clone(&conn.incoming),
    };
    while let Ok(incoming) = conn.inbox.recv() {
        match incoming {
            Incoming::Request(request, responder) => {
                agent.handle(&request.method, &request.params, responder)
            }
            Incoming::Notification(n) => agent.handle_notification(n),
        }
    }
    log::debug!("client closed the connection; answering what it sent, then shutting down");
    agent.answer_what_was_read(&conn);
    agent.release_all();
    agent.shared.link.shutdown();
    conn.finish();
}

impl Agent {
    fn ctx(&self) -> Ctx {
        Ctx {
            shared: Arc::clone(&self.shared),
        }
    }

    /// A request: its method's row reads the params, and the job runs where the row says.
    fn handle(&mut self, method: &str, params: &Value, responder: Responder) {
        let responder = super::maka_dialect::answer_in(self.shared.dialect, responder);
        // Unknown methods, `_` extensions we do not implement, and methods this build does not
        // serve.
        let local = self.shared.can_log_out();
        if method != "initialize" {
            self.other_request_seen |= self.initialized;
        }
        let version = self.shared.version();
        // v2's ids are strings or integers, never null (the SDK's router refuses one), for
        // the `initialize` that would make the connection v2 too.
        let v2 = version == Some(Version::V2)
            || (version.is_none() && method == "initialize" && self.offers_v2(params));
        if v2 && responder.id() == Some(&RequestId::Null) {
            return responder.respond(Err(ResponseError::new(
                code::INVALID_REQUEST,
                "ACP v2 request ids are strings or integers, never null; send the request again with an id",
            )));
        }
        let Some(row) = methods::find(method, local, self.shared.dialect, version) else {
            return responder.respond(Err(ResponseError::method_not_found(method)));
        };
        let job = match (row.read)(params) {
            Ok(job) => job,
            Err(e) if self.initialized || method == "initialize" => {
                return responder.respond(Err(e))
            }
            Err(_) => return responder.respond(Err(needs_initialize(method))),
        };
        match job {
            Job::Initialize(p) => responder.respond(self.initialize(p)),
            // Capabilities decide what every later method may do; without a successful
            // `initialize` there are none to go by.
            _ if !self.initialized => responder.respond(Err(needs_initialize(method))),
            Job::Work(serve) => {
                let ctx = self.ctx();
                self.workers.run(move || serve(&ctx, responder));
            }
            Job::Turn(register) => {
                let ctx = self.ctx();
                if let Some(registered) = register(&ctx, responder) {
                    self.workers
                        .start_turn(move || turns::start(&ctx, registered));
                }
            }
        }
    }

    /// Whether an `initialize` with these params would make the connection v2.
    fn offers_v2(&self, params: &Value) -> bool {
        self.shared.dialect == super::Dialect::Ours
            && initialize::offer(params).is_ok_and(|o| Version::for_offer(o.offered) == Version::V2)
    }

    fn handle_notification(&mut self, n: Notification) {
        match methods::NOTIFICATIONS
            .iter()
            .find(|(name, _)| *name == n.method)
        {
            Some((_, act)) => act(&self.ctx(), &n.params),
            // Unknown notifications (including `_…` extensions) are ignored, as ACP asks.
            None => log::debug!("ignoring notification {}", n.method),
        }
    }

    /// `initialize`: the first success fixes the connection's version — what the client
    /// offered (2 or more: v2; Maka's dialect is v1's), v1 otherwise — and every later one is
    /// read in that version: v1 takes a repeat as before; v2 takes one only before any other
    /// request, offering v2 again (the rules of the TS SDK's `AgentProtocolRouter`).
    fn initialize(&mut self, offer: Offer) -> Result<Value, ResponseError> {
        let wanted = match self.shared.dialect {
            super::Dialect::Maka => Version::V1,
            super::Dialect::Ours => Version::for_offer(offer.offered),
        };
        match self.shared.version().unwrap_or(wanted) {
            Version::V1 => self.initialize_v1(initialize::parse(&offer.params)?),
            Version::V2 => {
                if self.initialized && (self.other_request_seen || wanted != Version::V2) {
                    return Err(ResponseError::new(
                        code::INVALID_REQUEST,
                        "initialize must not be repeated on a v2 connection after other requests or with another version; open a new connection to start over",
                    ));
                }
                let params = super::v2::initialize::parse(&offer)?;
                self.shared.negotiate(Version::V2);
                self.incoming.hold_cancels(super::session::HELD_CANCELS);
                let result = super::v2::initialize::answer(&self.shared, &params);
                self.initialized = true;
                Ok(result)
            }
        }
    }

    fn initialize_v1(
        &mut self,
        params: initialize::InitializeParams,
    ) -> Result<Value, ResponseError> {
        self.shared.negotiate(Version::V1);
        if let Some(info) = &params.client_info {
            log::info!("client {} {} connected", info.name, info.version);
        }
        let ready = auth::provider_configured(&self.shared.link);
        let methods = auth::methods(&self.shared.link, &params.capabilities, ready);
        let mut result = initialize::result(&params, methods, self.shared.can_log_out());
        super::maka_dialect::advertise(self.shared.dialect, &mut result.agent_capabilities);
        self.shared.set_caps(params.capabilities);
        self.initialized = true;
        Ok(super::types::to_json(&result))
    }

    /// Stdin closed: every request already read still gets its answer (a script that pipes
    /// requests and closes stdin reads them all). A prompt still running is cancelled as if the
    /// client had sent `session/cancel` (it answers `cancelled`); the agent's own requests to
    /// the client fail at once (nobody can answer them now).
    ///
    /// What this costs does not grow with the prompts in flight: their turns are stopped
    /// together on a few threads (nothing waits for each stop); a prompt whose turn has not
    /// started never starts (its queued start answers it); and what is still unanswered after
    /// [`EOF_GRACE`] is answered at once — prompts `cancelled` from the session table, the rest
    /// with an error.
    fn answer_what_was_read(&self, conn: &Connection) {
        let ctx = self.ctx();
        conn.client_calls.close_all();
        let sessions: Vec<Arc<AcpSession>> =
            lock(&self.shared.sessions).values().cloned().collect();
        let running = sessions
            .iter()
            .filter_map(|s| Some((s.id.clone(), s.cancel_at_exit(&ctx.shared)?)))
            .collect();
        super::session::stop_turns(&self.shared.link, running);
        if conn.incoming.wait_answered(EOF_GRACE) == 0 {
            return;
        }
        for s in &sessions {
            s.answer_cancelled_at_exit(&ctx.shared);
        }
        let left = conn.incoming.wait_answered(Duration::ZERO);
        if left > 0 {
            log::warn!(
                "{left} request(s) still unanswered {} s after stdin closed; answering them with an error",
                EOF_GRACE.as_secs()
            );
            conn.incoming.answer_all(&MakaCode::Internal.error(
                "maka-acp stopped before this request finished, because the client closed stdin",
            ));
        }
    }

    /// The client left. Editor terminals are released first (the client may still read stdout
    /// after closing stdin); an external host outlives us, so it must stop waiting for this
    /// editor (its calls fail at once), stop the turns nobody can follow, and stop this
    /// client's MCP servers. Sessions are released on a few threads at once: a thousand cost
    /// a thousand host calls, not a thousand in a row.
    fn release_all(&self) {
        let ctx = self.ctx();
        let sessions: Vec<Arc<AcpSession>> =
            lock(&self.shared.sessions).values().cloned().collect();
        let has_services = !super::client_call::services(&ctx.shared.caps()).is_empty();
        let releasers =
            crate::threads::for_each("acp-release", super::workers::WORKERS, sessions, move |s| {
                release(&ctx, &s, has_services)
            });
        for r in releasers {
            if r.join().is_err() {
                log::error!("a session's release at exit panicked");
            }
        }
    }
}

/// Releases one session at exit (see [`Agent::release_all`]); `has_services`: this client
/// registered services for its sessions, which the host must forget.
fn release(ctx: &Ctx, s: &Arc<AcpSession>, has_services: bool) {
    let running = s.close();
    super::client_call::release_all(s, &ctx.shared);
    let Some(conn) = ctx.shared.link.current() else {
        return;
    };
    let id = s.id.clone();
    if has_services {
        let detach = CapabilityInput {
            session_id: id.clone(),
            services: vec![],
        };
        if let Err(e) = conn.call::<ops::CapabilityReplace>(&detach) {
            log::warn!("client.capability.replace for {id} at exit: {e}");
        }
    }
    if let Some(turn_id) = running {
        let stop = TurnRef {
            session_id: id.clone(),
            turn_id,
            run_id: None,
        };
        if let Err(e) = conn.call::<ops::TurnStop>(&stop) {
            log::warn!("turn.stop for {id} at exit: {e}");
        }
    }
    let release = SessionRef { session_id: id };
    if let Err(e) = conn.call::<ops::SessionRelease>(&release) {
        log::warn!("session.release for {} at exit: {e}", s.id);
    }
}

fn needs_initialize(method: &str) -> ResponseError {
    ResponseError::new(
        code::INVALID_REQUEST,
        format!("{method} needs a successful `initialize` first; send `initialize` and check its answer"),
    )
}
