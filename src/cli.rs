//! The command line: `maka-acp` runs the ACP agent on stdio; its subcommands run the Runtime
//! Host (`host`), ACP over HTTP and WebSocket (`serve`), the demo, `login`, and `generate` (the
//! man page and completions). The parser is here; `spec.rs` defines what it accepts, for
//! `--help`, the man page and the completions.

use crate::acp::{self, AdapterConfig};
use crate::jsonrpc::Connection;
use std::ffi::OsString;
use std::path::PathBuf;

mod generate;
pub(crate) mod spec;

#[derive(Debug, PartialEq)]
pub(crate) enum Command {
    Agent {
        config: AdapterConfig,
        log_level: Option<String>,
    },
    Host(HostArgs),
    Serve {
        /// Boxed: the other variants are much smaller.
        args: Box<ServeArgs>,
        config: AdapterConfig,
        log_level: Option<String>,
    },
    Demo,
    Login,
    /// `generate man|bash|zsh|fish`.
    Generate(String),
    /// `--help`; for a subcommand (`host --help`), its name.
    Help(Option<&'static str>),
    Version,
}

#[derive(Debug, PartialEq)]
pub(crate) struct HostArgs {
    pub listen: std::net::SocketAddr,
    pub data_dir: Option<PathBuf>,
    pub log_level: Option<String>,
    pub watch_stdin: bool,
    /// `--token-stdin`: the token is the first line of stdin.
    pub token_stdin: bool,
    pub tunables: crate::tunables::Tunables,
    /// `--private` (repeatable): more paths hidden from principals' sessions.
    pub private: Vec<PathBuf>,
}

#[derive(Debug, PartialEq)]
pub(crate) struct ServeArgs {
    pub listen: std::net::SocketAddr,
    pub token_file: Option<PathBuf>,
    /// `--tokens-file`: one principal a line (exclusive with `--token-file`).
    pub tokens_file: Option<PathBuf>,
    /// `--principal-connections`, `--principal-sessions`, `--principal-requests`: a
    /// principal's caps where its line sets none.
    pub principal_connections: usize,
    pub principal_sessions: usize,
    pub principal_requests: usize,
    /// `--principal-header`: where a trusted proxy names the principal.
    pub principal_header: Option<String>,
    /// `--resource-metadata`: the URL a 401 points to.
    pub resource_metadata: Option<String>,
    pub tls_proxied: bool,
    pub route_peers: Option<Vec<String>>,
    pub route_self: Option<String>,
}

impl PartialEq for AdapterConfig {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.host_url,
            &self.host_token,
            &self.data_dir,
            &self.tunables,
            self.dialect,
        ) == (
            &other.host_url,
            &other.host_token,
            &other.data_dir,
            &other.tunables,
            other.dialect,
        )
    }
}

/// The environment the CLI reads — once, here — passed in so parsing is testable.
#[derive(Default)]
pub(crate) struct Env {
    pub host_url: Option<String>,
    pub host_token: Option<String>,
    /// `MAKA_HOST_CA`: a PEM file of authorities for an `https://` host.
    pub host_ca: Option<String>,
    pub data_dir: Option<String>,
    pub tunables: crate::tunables::Tunables,
}

impl Env {
    pub fn from_process() -> Env {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Env {
            host_url: var("MAKA_HOST_URL"),
            host_token: var("MAKA_HOST_TOKEN"),
            host_ca: var("MAKA_HOST_CA"),
            data_dir: var("MAKA_DATA_DIR"),
            tunables: crate::tunables::Tunables::from_env(),
        }
    }
}

use spec::LEVELS;

pub(crate) fn parse(
    args: impl IntoIterator<Item = OsString>,
    mut env: Env,
) -> Result<Command, String> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    let mut host_url = env.host_url.take();
    let mut data_dir = env.data_dir.take().map(PathBuf::from);
    let mut log_level = None;
    let mut dialect = acp::Dialect::Ours;
    let mut host: Option<HostArgs> = None;
    let mut serve: Option<ServeArgs> = None;
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Value(v) if cfg!(feature = "host") && v == "demo" && host.is_none() => {
                no_more_arguments(&mut parser, "demo")?;
                return Ok(Command::Demo);
            }
            Value(v) if cfg!(feature = "host") && v == "login" && host.is_none() => {
                no_more_arguments(&mut parser, "login")?;
                return Ok(Command::Login);
            }
            Value(v) if v == "generate" && host.is_none() => {
                let target = generate_target(&mut parser)?;
                no_more_arguments(&mut parser, "generate")?;
                return Ok(Command::Generate(target));
            }
            Value(v)
                if cfg!(feature = "serve") && v == "serve" && host.is_none() && serve.is_none() =>
            {
                serve = Some(ServeArgs::new());
            }
            Value(v)
                if cfg!(feature = "host") && v == "host" && host.is_none() && serve.is_none() =>
            {
                host = Some(HostArgs::new(env.tunables.clone()));
            }
            Value(v)
                if !cfg!(feature = "serve")
                    && ["demo", "login", "host", "serve"].contains(&&*v.to_string_lossy()) =>
            {
                return Err(left_out(&v.to_string_lossy()));
            }
            // A subcommand's own options (the others below are everyone's).
            Long(name) if serve.is_some() && ServeArgs::OWN.contains(&name) => {
                let name = name.to_string();
                if let Some(s) = serve.as_mut() {
                    s.option(&name, &mut parser)?;
                }
            }
            Long(name) if host.is_some() && HostArgs::OWN.contains(&name) => {
                let name = name.to_string();
                if let Some(h) = host.as_mut() {
                    h.option(&name, &mut parser)?;
                }
            }
            Short('h') | Long("help") => {
                let sub = [(host.is_some(), "host"), (serve.is_some(), "serve")];
                return Ok(Command::Help(sub.iter().find(|s| s.0).map(|s| s.1)));
            }
            Short('V') | Long("version") => return Ok(Command::Version),
            Long("acp") if host.is_none() => dialect = acp::Dialect::Maka,
            Long("host-url") => host_url = Some(string_value(&mut parser, "--host-url")?),
            Long("data-dir") => {
                data_dir = Some(PathBuf::from(string_value(&mut parser, "--data-dir")?))
            }
            Long("log-level") => log_level = Some(log_level_value(&mut parser)?),
            Value(v) => {
                return Err(format!("unexpected argument '{}'", v.to_string_lossy()));
            }
            _ => return Err(arg.unexpected().to_string()),
        }
    }
    if let Some(mut h) = host {
        h.data_dir = data_dir;
        h.log_level = log_level;
        return Ok(Command::Host(h));
    }
    if let Some(s) = &serve {
        if s.token_file.is_some() && s.tokens_file.is_some() {
            return Err("--token-file and --tokens-file cannot be used together: --token-file is one token for the machine's user, --tokens-file one line per principal; choose one".into());
        }
        if !s.listen.ip().is_loopback() && !s.tls_proxied {
            return Err(format!(
                "--listen {} is not a loopback address: plain HTTP is served only to this machine; put a TLS proxy in front and add --tls-proxied (docs/deployment.md)",
                s.listen
            ));
        }
    }
    let config = adapter_config(env, host_url, data_dir, log_level.clone(), dialect)?;
    if let Some(args) = serve {
        return Ok(Command::Serve {
            args: Box::new(args),
            config,
            log_level,
        });
    }
    Ok(Command::Agent { config, log_level })
}

/// The adapter's configuration: the host it uses (checked: a URL needs its token, plain HTTP
/// only to this machine, a readable `MAKA_HOST_CA`), or the embedded one where this build has it.
fn adapter_config(
    env: Env,
    host_url: Option<String>,
    data_dir: Option<PathBuf>,
    log_level: Option<String>,
    dialect: acp::Dialect,
) -> Result<AdapterConfig, String> {
    if let Some(token) = &env.host_token {
        crate::secrets::register(token);
    }
    if let Some(url) = &host_url {
        validate_host_url(url)?;
        if env.host_token.is_none() {
            return Err(format!(
                "a Runtime Host URL ({url}) needs its bearer token in MAKA_HOST_TOKEN"
            ));
        }
    }
    // Read (and so checked) whenever it is set: a garbage MAKA_HOST_CA is a start-up error,
    // not a surprise at the first connection.
    let host_tls = match &env.host_ca {
        Some(path) => {
            let tls = crate::host_api::client::HostTls::from_setting(path)
                .map_err(|e| format!("MAKA_HOST_CA: {e}"))?;
            match &host_url {
                Some(url) if url.starts_with("https://") => tls,
                _ => Default::default(),
            }
        }
        None => Default::default(),
    };
    if host_url.is_none() && !cfg!(feature = "host") {
        return Err("this build has no embedded Runtime Host (cargo feature `host`): give --host-url (or MAKA_HOST_URL) and MAKA_HOST_TOKEN".into());
    }
    Ok(AdapterConfig {
        host_url,
        host_token: env.host_token,
        host_tls,
        data_dir,
        log_level,
        tunables: env.tunables,
        dialect,
        private: vec![],
    })
}

/// What this build can do without `--host-url`: start the embedded host (feature `host`), or
/// nothing (the adapter-only build refuses, naming what to do).
fn local_host() -> std::sync::Arc<dyn acp::LocalHost> {
    #[cfg(feature = "host")]
    return std::sync::Arc::new(crate::embedded::Embedded);
    #[cfg(not(feature = "host"))]
    return std::sync::Arc::new(acp::NoLocalHost);
}

/// For subcommands that take no arguments.
impl ServeArgs {
    /// `serve`'s defaults: loopback, port 8430, a generated token.
    fn new() -> ServeArgs {
        ServeArgs {
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 8430)),
            token_file: None,
            tokens_file: None,
            principal_connections: 64,
            principal_sessions: 256,
            principal_requests: 256,
            principal_header: None,
            resource_metadata: None,
            tls_proxied: false,
            route_peers: None,
            route_self: None,
        }
    }
}

impl ServeArgs {
    /// The options only `serve` takes.
    const OWN: &'static [&'static str] = &[
        "listen",
        "token-file",
        "tokens-file",
        "principal-connections",
        "principal-sessions",
        "principal-requests",
        "principal-header",
        "resource-metadata",
        "route-peers",
        "route-self",
        "tls-proxied",
    ];

    /// Reads one of [`Self::OWN`].
    fn option(&mut self, name: &str, parser: &mut lexopt::Parser) -> Result<(), String> {
        match name {
            "listen" => self.listen = listen_value(parser, "127.0.0.1:8430")?,
            "token-file" => {
                self.token_file = Some(PathBuf::from(string_value(parser, "--token-file")?))
            }
            "tokens-file" => {
                self.tokens_file = Some(PathBuf::from(string_value(parser, "--tokens-file")?))
            }
            "principal-connections" => {
                self.principal_connections = count_value(parser, "--principal-connections")?
            }
            "principal-sessions" => {
                self.principal_sessions = count_value(parser, "--principal-sessions")?
            }
            "principal-requests" => {
                self.principal_requests = count_value(parser, "--principal-requests")?
            }
            "principal-header" => {
                let v = string_value(parser, "--principal-header")?;
                let token = !v.is_empty()
                    && v.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                if !token {
                    return Err(format!(
                        "--principal-header '{v}' is not a header name (e.g. X-Forwarded-User)"
                    ));
                }
                self.principal_header = Some(v);
            }
            "resource-metadata" => {
                let v = string_value(parser, "--resource-metadata")?;
                if !v.starts_with("https://") && !v.starts_with("http://")
                    || v.contains(['"', '\\'])
                    || v.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    return Err(format!(
                        "--resource-metadata '{v}' is not a URL (https://…/.well-known/oauth-protected-resource)"
                    ));
                }
                self.resource_metadata = Some(v);
            }
            "route-peers" => self.route_peers = Some(route_peers_value(parser)?),
            "route-self" => self.route_self = Some(string_value(parser, "--route-self")?),
            "tls-proxied" => self.tls_proxied = true,
            _ => return Err(format!("--{name} is not an option of serve")),
        }
        Ok(())
    }
}

impl HostArgs {
    /// The options only `host` takes.
    const OWN: &'static [&'static str] = &["listen", "token-stdin", "ignore-stdin", "private"];

    /// Reads one of [`Self::OWN`].
    fn option(&mut self, name: &str, parser: &mut lexopt::Parser) -> Result<(), String> {
        match name {
            "listen" => {
                let addr = listen_value(parser, "127.0.0.1:0")?;
                if !addr.ip().is_loopback() {
                    return Err(format!("--listen must be a loopback address, got {addr}"));
                }
                self.listen = addr;
            }
            "token-stdin" => self.token_stdin = true,
            "ignore-stdin" => self.watch_stdin = false,
            "private" => self
                .private
                .push(PathBuf::from(string_value(parser, "--private")?)),
            _ => return Err(format!("--{name} is not an option of host")),
        }
        Ok(())
    }

    /// `host`'s defaults: loopback, a port the OS picks, watching stdin.
    fn new(tunables: crate::tunables::Tunables) -> HostArgs {
        HostArgs {
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: None,
            log_level: None,
            watch_stdin: true,
            token_stdin: false,
            tunables,
            private: vec![],
        }
    }
}

/// Why a subcommand this build leaves out cannot run.
fn left_out(subcommand: &str) -> String {
    let what = if subcommand == "serve" && cfg!(feature = "host") {
        "ACP over HTTP and WebSocket, which this build leaves out (cargo feature `serve`)"
    } else {
        "the embedded Runtime Host, which this build leaves out (cargo feature `host`)"
    };
    format!("`{subcommand}` needs {what}")
}

/// `generate`'s target: one of [`spec::GENERATE_TARGETS`].
fn generate_target(parser: &mut lexopt::Parser) -> Result<String, String> {
    let targets = spec::GENERATE_TARGETS.join(", ");
    let what = || format!("generate what? expected one of {targets}, e.g. maka-acp generate man");
    let target = parser
        .value()
        .map_err(|_| what())?
        .into_string()
        .map_err(|_| what())?;
    if !spec::GENERATE_TARGETS.contains(&target.as_str()) {
        return Err(format!(
            "generate what? '{target}': expected one of {targets}"
        ));
    }
    Ok(target)
}

/// `--listen IP:PORT`.
fn listen_value(
    parser: &mut lexopt::Parser,
    example: &str,
) -> Result<std::net::SocketAddr, String> {
    let v = string_value(parser, "--listen")?;
    v.parse()
        .map_err(|_| format!("invalid --listen '{v}': expected IP:PORT, e.g. {example}"))
}

/// `--route-peers HOST:PORT,HOST:PORT…`: at least two.
fn route_peers_value(parser: &mut lexopt::Parser) -> Result<Vec<String>, String> {
    let v = string_value(parser, "--route-peers")?;
    let peers: Vec<String> = v
        .split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    if peers.len() < 2 {
        return Err(format!("--route-peers '{v}': list every upstream server, comma-separated, as nginx's upstream block names them (HOST:PORT,HOST:PORT)"));
    }
    Ok(peers)
}

/// `--log-level LEVEL`, one of [`LEVELS`].
fn log_level_value(parser: &mut lexopt::Parser) -> Result<String, String> {
    let level = string_value(parser, "--log-level")?.to_ascii_lowercase();
    if !LEVELS.contains(&level.as_str()) {
        return Err(format!(
            "invalid --log-level '{level}': expected one of {}",
            LEVELS.join(", ")
        ));
    }
    Ok(level)
}

fn no_more_arguments(parser: &mut lexopt::Parser, command: &str) -> Result<(), String> {
    match parser.next().map_err(|e| e.to_string())? {
        Some(extra) => Err(format!(
            "{command} takes no arguments, got {}",
            extra.unexpected()
        )),
        None => Ok(()),
    }
}

/// A whole number of at least 1 (a cap).
fn count_value(parser: &mut lexopt::Parser, flag: &str) -> Result<usize, String> {
    let v = string_value(parser, flag)?;
    v.parse::<usize>()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| format!("invalid {flag} '{v}': expected a whole number of at least 1"))
}

fn string_value(parser: &mut lexopt::Parser, flag: &str) -> Result<String, String> {
    let v = parser.value().map_err(|e| e.to_string())?;
    v.into_string()
        .map_err(|_| format!("the value of {flag} is not valid UTF-8"))
}

/// A host URL the adapter may use: `https://`, or plain `http://` only to this machine
/// (loopback), since the bearer token would cross the network in the clear.
fn validate_host_url(url: &str) -> Result<(), String> {
    let shown = crate::host_api::client::shown_url(url);
    if let Some(rest) = url.strip_prefix("http://") {
        if crate::host_api::client::is_loopback_authority(rest) {
            return Ok(());
        }
        return Err(format!(
            "{shown}: plain http is only for a Runtime Host on this machine (127.0.0.1, ::1 or localhost), because the bearer token would cross the network in the clear; use https:// (with MAKA_HOST_CA for a private CA)"
        ));
    }
    if url.starts_with("https://") {
        return if cfg!(feature = "tls") {
            Ok(())
        } else {
            Err(format!(
                "{shown}: this build has no TLS support (cargo feature `tls`)"
            ))
        };
    }
    Err(format!(
        "invalid host URL '{shown}': expected https://HOST[:PORT] (or http://127.0.0.1:PORT on this machine)"
    ))
}

fn init_logging(level: Option<&str>) {
    let mut builder = env_logger::Builder::new();
    builder.target(env_logger::Target::Stderr);
    // The embedded host gets `--log-level` from the adapter; RUST_LOG it inherits.
    match (level, std::env::var("RUST_LOG").ok()) {
        (Some(level), _) => builder.parse_filters(level),
        (None, Some(filters)) if !filters.is_empty() => builder.parse_filters(&filters),
        _ => builder.parse_filters("warn"),
    };
    builder.format(write_log_line);
    builder.init();
}

/// env_logger's own layout (`[LEVEL target] message`, later lines indented by four), with
/// every known secret redacted: the one place every log line passes.
fn write_log_line(
    buf: &mut env_logger::fmt::Formatter,
    record: &log::Record<'_>,
) -> std::io::Result<()> {
    use std::io::Write;
    let message = record.args().to_string();
    let message = crate::secrets::redact(&message);
    let level = record.level();
    let header = match record.target() {
        "" => format!("[{level:<5}] "),
        target => format!("[{level:<5} {target}] "),
    };
    writeln!(buf, "{header}{}", message.replace('\n', "\n    "))
}

/// Runs the program; returns the process exit code.
pub fn main() -> i32 {
    #[cfg(feature = "host")]
    if std::env::args_os().nth(1).as_deref() == Some(crate::host::reaper::REAPER_ARG.as_ref()) {
        return crate::host::reaper::run_reaper();
    }
    let command = match parse(std::env::args_os().skip(1), Env::from_process()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("maka-acp: {e} (see maka-acp --help)");
            return 2;
        }
    };
    match command {
        Command::Help(None) => print_stdout(&spec::usage()),
        Command::Help(Some(sub)) => print_stdout(&spec::subcommand_usage(sub)),
        Command::Generate(target) => match generate::generate(&target) {
            Some(text) => print_stdout(&text),
            None => 2,
        },
        Command::Version => print_stdout(&format!("maka-acp {}\n", env!("CARGO_PKG_VERSION"))),
        Command::Agent { config, log_level } => {
            init_logging(log_level.as_deref());
            match Connection::stdio() {
                Ok(conn) => {
                    acp::serve(conn, config, local_host(), None);
                    0
                }
                Err(e) => {
                    eprintln!("maka-acp: cannot start the threads that read and write stdio ({e}); the system is out of threads or memory");
                    1
                }
            }
        }
        Command::Host(args) => run_host(args),
        Command::Serve {
            args,
            config,
            log_level,
        } => {
            init_logging(log_level.as_deref());
            run_serve(*args, config)
        }
        Command::Demo => run_demo(),
        Command::Login => run_login(),
    }
}

#[cfg(feature = "host")]
fn run_host(args: HostArgs) -> i32 {
    init_logging(args.log_level.as_deref());
    crate::host::run(crate::host::HostOptions {
        listen: args.listen,
        data_dir: args
            .data_dir
            .unwrap_or_else(crate::tunables::default_data_dir),
        tunables: args.tunables,
        watch_stdin: args.watch_stdin,
        token_stdin: args.token_stdin,
        private: args.private,
    })
}

#[cfg(feature = "serve")]
fn run_serve(args: ServeArgs, config: AdapterConfig) -> i32 {
    let idle_timeout = config.tunables.serve_idle_timeout;
    let body_deadline = config.tunables.serve_body_deadline;
    let route = args.route_peers.map(|peers| {
        let me = args.route_self.unwrap_or_else(|| args.listen.to_string());
        (peers, me)
    });
    crate::serve::run(crate::serve::ServeOptions {
        route,
        listen: args.listen,
        token_file: args.token_file,
        tokens_file: args.tokens_file,
        principals: crate::serve::TokensRules {
            defaults: crate::http::Limits {
                connections: Some(args.principal_connections),
                sessions: Some(args.principal_sessions),
                requests: Some(args.principal_requests),
            },
            principal_header: args.principal_header,
        },
        resource_metadata: args.resource_metadata,
        tls_proxied: args.tls_proxied,
        config,
        idle_timeout,
        body_deadline,
    })
}

// Refused while parsing in builds without it; never reached.
#[cfg(not(feature = "serve"))]
fn run_serve(_: ServeArgs, _: AdapterConfig) -> i32 {
    2
}

#[cfg(feature = "host")]
fn run_demo() -> i32 {
    crate::demo::run()
}

#[cfg(feature = "host")]
fn run_login() -> i32 {
    crate::login::main()
}

// Without the host these commands are refused while parsing (a usage error); these are never
// reached.
#[cfg(not(feature = "host"))]
fn run_login() -> i32 {
    2
}

#[cfg(not(feature = "host"))]
fn run_demo() -> i32 {
    eprintln!("maka-acp: the demo needs the embedded Runtime Host (cargo feature `host`)");
    2
}

#[cfg(not(feature = "host"))]
fn run_host(_: HostArgs) -> i32 {
    eprintln!("maka-acp: this build has no Runtime Host (cargo feature `host`); use --host-url");
    2
}

/// `--help` and `--version` are the only output not written by the ACP writer thread; they
/// run before (instead of) the agent.
#[allow(clippy::print_stdout)]
fn print_stdout(text: &str) -> i32 {
    print!("{text}");
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn flags_override_environment() {
        let env = Env {
            host_url: Some("http://127.0.0.1:1".into()),
            host_token: Some("t".into()),
            host_ca: None,
            data_dir: Some("/env".into()),
            tunables: Default::default(),
        };
        let cmd = parse(args(&["--data-dir", "/cli", "--log-level", "DEBUG"]), env).unwrap();
        let Command::Agent { config, log_level } = cmd else {
            panic!()
        };
        assert_eq!(config.data_dir, Some(PathBuf::from("/cli")));
        assert_eq!(config.host_url.as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(log_level.as_deref(), Some("debug"));
        assert_eq!(config.dialect, acp::Dialect::Ours);
    }

    /// `serve`'s principal flags: read with their defaults, checked (a cap is at least 1, a
    /// header a header name, a metadata URL a URL), and one token file or the other, not both.
    #[cfg(feature = "serve")]
    #[test]
    fn serves_principal_flags_are_read_and_checked() {
        let serve = |a: &[&str]| {
            parse(args(&[&["serve"], a].concat()), Env::default()).map(|c| match c {
                Command::Serve { args, .. } => args,
                other => panic!("{other:?}"),
            })
        };
        let s = serve(&["--tokens-file", "/t"]).unwrap();
        assert_eq!(
            (
                s.principal_connections,
                s.principal_sessions,
                s.principal_requests
            ),
            (64, 256, 256)
        );
        let s = serve(&[
            "--tokens-file",
            "/t",
            "--principal-connections",
            "3",
            "--principal-requests",
            "9",
            "--principal-header",
            "X-Forwarded-User",
            "--resource-metadata",
            "https://a.example/.well-known/oauth-protected-resource",
        ])
        .unwrap();
        assert_eq!((s.principal_connections, s.principal_requests), (3, 9));
        assert_eq!(s.principal_header.as_deref(), Some("X-Forwarded-User"));
        for (a, says) in [
            (
                &["--token-file", "/a", "--tokens-file", "/b"][..],
                "cannot be used together",
            ),
            (&["--principal-sessions", "0"], "at least 1"),
            (&["--principal-requests", "-1"], "at least 1"),
            (&["--principal-header", "X User"], "not a header name"),
            (&["--resource-metadata", "a\"b"], "not a URL"),
        ] {
            let e = serve(a).unwrap_err();
            assert!(e.contains(says), "{a:?}: {e}");
        }
    }

    /// `--acp` (how clients of Apache Maka's `maka --acp` start it) selects Maka's dialect and
    /// changes nothing else.
    #[test]
    fn acp_selects_makas_dialect() {
        let env = || Env {
            host_url: Some("http://127.0.0.1:1".into()),
            host_token: Some("t".into()),
            ..Env::default()
        };
        let Ok(Command::Agent { config, .. }) = parse(args(&["--acp"]), env()) else {
            panic!("--acp is accepted")
        };
        assert_eq!(config.dialect, acp::Dialect::Maka);
        assert_eq!(config.host_url.as_deref(), Some("http://127.0.0.1:1"));
        let Ok(Command::Agent { config, .. }) =
            parse(args(&["--log-level", "info", "--acp"]), env())
        else {
            panic!("--acp after other options")
        };
        assert_eq!(config.dialect, acp::Dialect::Maka);
    }

    /// The parser and the one definition (`spec.rs`) agree: every option listed parses where it
    /// is listed, and every option the parser matches is listed.
    #[test]
    fn the_parser_accepts_exactly_the_options_the_definition_lists() {
        let sample = |o: &spec::Opt| match o.value {
            Some((_, spec::Kind::Url)) => Some("http://127.0.0.1:1"),
            Some((_, spec::Kind::Dir)) => Some("/tmp"),
            Some((_, spec::Kind::File)) => Some("/nonexistent-token"),
            Some((_, spec::Kind::Addr)) => Some("127.0.0.1:0"),
            Some((_, spec::Kind::Number)) => Some("8"),
            Some((_, spec::Kind::Text)) => Some("X-Forwarded-User"),
            Some((_, spec::Kind::Choice(c))) => Some(c[0]),
            None => None,
        };
        let env = || Env {
            host_token: Some("t".into()),
            ..Env::default()
        };
        let listed: Vec<&str> = spec::AGENT_OPTIONS
            .iter()
            .chain(spec::SUBCOMMANDS.iter().flat_map(|s| s.options))
            .map(|o| o.long)
            .collect();
        for (sub, options) in std::iter::once((None, spec::AGENT_OPTIONS)).chain(
            spec::SUBCOMMANDS
                .iter()
                .filter(|s| cfg!(feature = "host") || !s.needs_host)
                .map(|s| (Some(s.name), s.options)),
        ) {
            for o in options {
                let mut a: Vec<String> = sub.map(String::from).into_iter().collect();
                a.push(format!("--{}", o.long));
                a.extend(sample(o).map(String::from));
                let strs: Vec<&str> = a.iter().map(String::as_str).collect();
                if let Err(e) = parse(args(&strs), env()) {
                    assert!(
                        !e.contains("invalid option") && !e.contains("unexpected"),
                        "{strs:?}: {e}"
                    );
                }
                if let Some(c) = o.short {
                    let short = format!("-{c}");
                    assert!(parse(args(&[short.as_str()]), env()).is_ok(), "{short}");
                }
            }
        }
        let source = include_str!("cli.rs");
        for part in source.split("Long(\"").skip(1) {
            let name = &part[..part.find('"').unwrap()];
            assert!(
                listed.contains(&name),
                "--{name} is parsed but not in spec.rs"
            );
        }
        for t in spec::GENERATE_TARGETS {
            assert_eq!(
                parse(args(&["generate", t]), Env::default()),
                Ok(Command::Generate(t.to_string()))
            );
            assert!(generate::generate(t).is_some());
        }
        assert!(parse(args(&["generate", "pdf"]), Env::default()).is_err());
        // Without a target, the error lists them.
        let e = parse(args(&["generate"]), Env::default()).unwrap_err();
        assert!(e.contains("man, bash, zsh, fish"), "{e}");
    }

    /// `maka-acp host --help` is the host's help: its options, not the agent's.
    #[cfg(feature = "host")]
    #[test]
    fn host_help_shows_the_host_options() {
        assert_eq!(
            parse(args(&["host", "--help"]), Env::default()),
            Ok(Command::Help(Some("host")))
        );
        assert_eq!(
            parse(args(&["--help"]), Env::default()),
            Ok(Command::Help(None))
        );
        let text = spec::subcommand_usage("host");
        for o in spec::HOST_OPTIONS {
            assert!(text.contains(&format!("--{}", o.long)), "{text}");
        }
        assert!(!text.contains("--host-url"), "{text}");
    }

    #[test]
    fn usage_errors_are_one_clear_line() {
        for (a, want) in [
            (vec!["--bogus"], "invalid option '--bogus'"),
            (vec!["--log-level", "loud"], "invalid --log-level 'loud'"),
            (
                vec!["--host-url"],
                "missing argument for option '--host-url'",
            ),
            (vec!["--host-url", "ftp://x"], "invalid host URL"),
            (vec!["--host-url", "http://127.0.0.1:9"], "MAKA_HOST_TOKEN"),
            (vec!["extra"], "unexpected argument 'extra'"),
        ] {
            let e = parse(args(&a), Env::default()).unwrap_err();
            assert!(e.contains(want), "{a:?}: {e}");
            assert!(!e.contains('\n'));
        }
        // MAKA_HOST_CA is read at start, for an https:// host: a bad file is named at once.
        let not_pem = std::env::temp_dir().join(format!("maka-ca-{}.pem", std::process::id()));
        std::fs::write(&not_pem, "hello").unwrap();
        for (file, want) in [
            (
                "/nonexistent/ca.pem",
                "MAKA_HOST_CA: cannot read /nonexistent/ca.pem",
            ),
            (not_pem.to_str().unwrap(), "holds no certificate"),
        ] {
            let env = Env {
                host_token: Some("t".into()),
                host_ca: Some(file.into()),
                ..Env::default()
            };
            let e = parse(args(&["--host-url", "https://h.example"]), env).unwrap_err();
            if cfg!(feature = "tls") {
                assert!(e.contains(want), "{e}");
            }
        }
        std::fs::remove_file(&not_pem).unwrap();
    }

    /// The bearer token never crosses the network in the clear, and a password in the URL is
    /// never shown. One line a case: (URL, refused).
    #[test]
    fn plain_http_is_only_for_this_machine() {
        let token = || Env {
            host_token: Some("a-token-of-16-bytes".into()),
            ..Env::default()
        };
        for (url, refused) in [
            ("http://127.0.0.1:9", false),
            ("http://127.3.4.5:9/", false),
            ("http://localhost:7300", false),
            ("http://LOCALHOST", false),
            ("http://[::1]:7300", false),
            ("https://maka.example.net", false),
            ("http://10.0.0.5:7300", true),
            ("http://192.168.1.2", true),
            ("http://maka.example.net", true),
            ("http://127.0.0.1.evil.example:80", true),
            ("http://localhost.evil.example", true),
            ("http://[::ffff:10.0.0.1]:1", true),
            ("http://user:hunter2@10.0.0.5:7300", true),
            ("http://127.0.0.1@10.0.0.5", true),
        ] {
            let r = parse(args(&["--host-url", url]), token());
            assert_eq!(r.is_err(), refused, "{url}: {r:?}");
            if let Err(e) = r {
                assert!(e.contains("https://") && e.contains("MAKA_HOST_CA"), "{e}");
                assert!(!e.contains("hunter2"), "{e}");
            }
        }
        assert_eq!(
            crate::host_api::client::shown_url("https://me:hunter2@h.example/x"),
            "https://me:***@h.example/x"
        );
        assert_eq!(
            crate::host_api::client::shown_url("https://h.example/a@b"),
            "https://h.example/a@b"
        );
    }

    /// A MAKA_HOST_CA that is not certificates is a start-up error whatever the URL.
    #[cfg(feature = "tls")]
    #[test]
    fn garbage_ca_text_is_a_start_up_error() {
        for garbage in [
            "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
            "-----BEGIN nothing",
        ] {
            for url in [None, Some("https://h.example")] {
                let env = Env {
                    host_token: Some("a-token-of-16-bytes".into()),
                    host_ca: Some(garbage.into()),
                    ..Env::default()
                };
                let mut a = vec![];
                if let Some(u) = url {
                    a = vec!["--host-url", u];
                }
                let e = parse(args(&a), env).unwrap_err();
                assert!(e.starts_with("MAKA_HOST_CA: "), "{e}");
            }
        }
    }
}
