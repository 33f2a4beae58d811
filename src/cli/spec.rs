//! The one definition of the command line: `--help`, the man page and the shell completions are
//! all made from these tables (`generate.rs`), and a test checks that the parser accepts exactly
//! the options listed here.

/// What an option's value is, for help text and completion.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Url,
    Dir,
    File,
    Addr,
    /// A whole number.
    Number,
    /// Any text (a header's name).
    Text,
    Choice(&'static [&'static str]),
}

#[derive(Debug)]
pub struct Opt {
    pub long: &'static str,
    pub short: Option<char>,
    /// The value's name and kind; `None` for a flag.
    pub value: Option<(&'static str, Kind)>,
    pub help: &'static str,
    /// The environment variable that sets it when the option is absent.
    pub env: Option<&'static str>,
    pub default: Option<&'static str>,
}

#[derive(Debug)]
pub struct Subcommand {
    pub name: &'static str,
    pub summary: &'static str,
    pub options: &'static [Opt],
    /// The words it takes (one of them), if any.
    pub operands: &'static [&'static str],
    /// Needs the embedded host (cargo feature `host`).
    pub needs_host: bool,
}

pub const LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

pub const ABOUT: &str = "an Agent Client Protocol (ACP v1) agent over a Runtime Host";

pub const DESCRIPTION: &str = "maka-acp speaks the Agent Client Protocol on stdin and stdout, so that an ACP client (an editor such as Zed, a JetBrains IDE, Neovim with CodeCompanion or avante.nvim, Emacs with agent-shell, or a tool like acpx) can create, drive, cancel, list, load, resume and close agent sessions. The sessions live in a Runtime Host, reached over HTTP: by default the embedded one, started on the first session and stopped with the adapter; or a shared host given with --host-url. Logs go to stderr; stdout carries only protocol messages.";

const LOG_LEVEL: Opt = Opt {
    long: "log-level",
    short: None,
    value: Some(("LEVEL", Kind::Choice(LEVELS))),
    help: "how much to log to stderr",
    env: Some("RUST_LOG"),
    default: Some("warn"),
};

/// `maka-acp [OPTIONS]`: the ACP agent on stdio.
pub const AGENT_OPTIONS: &[Opt] = &[
    Opt {
        long: "host-url",
        short: None,
        value: Some(("URL", Kind::Url)),
        help: "use this Runtime Host instead of starting the embedded one (its token comes from MAKA_HOST_TOKEN)",
        env: Some("MAKA_HOST_URL"),
        default: None,
    },
    Opt {
        long: "data-dir",
        short: None,
        value: Some(("DIR", Kind::Dir)),
        help: "where the embedded host keeps sessions",
        env: Some("MAKA_DATA_DIR"),
        default: Some("$XDG_DATA_HOME/maka-acp"),
    },
    LOG_LEVEL,
    Opt {
        long: "acp",
        short: None,
        value: None,
        help: "speak Apache Maka's `maka --acp` dialect on this connection (its config ids, `_maka/` names and shapes, error codes), so maka-acp can stand in where `maka --acp` is configured (docs/maka-extensions.md)",
        env: None,
        default: None,
    },
    Opt {
        long: "help",
        short: Some('h'),
        value: None,
        help: "print this help",
        env: None,
        default: None,
    },
    Opt {
        long: "version",
        short: Some('V'),
        value: None,
        help: "print the version",
        env: None,
        default: None,
    },
];

/// `maka-acp host [OPTIONS]`.
pub const HOST_OPTIONS: &[Opt] = &[
    Opt {
        long: "listen",
        short: None,
        value: Some(("ADDR", Kind::Addr)),
        help: "loopback address and port to bind (a remote host sits behind a TLS proxy)",
        env: None,
        default: Some("127.0.0.1:0"),
    },
    Opt {
        long: "data-dir",
        short: None,
        value: Some(("DIR", Kind::Dir)),
        help: "where sessions live",
        env: Some("MAKA_DATA_DIR"),
        default: Some("$XDG_DATA_HOME/maka-acp"),
    },
    LOG_LEVEL,
    Opt {
        long: "ignore-stdin",
        short: None,
        value: None,
        help: "keep running when stdin closes (the default is to shut down; services want this)",
        env: None,
        default: None,
    },
    Opt {
        long: "token-stdin",
        short: None,
        value: None,
        help: "read the bearer token from the first line of stdin instead of MAKA_HOST_TOKEN, so that it sits in no environment block (how the adapter starts its embedded host)",
        env: None,
        default: None,
    },
    Opt {
        long: "private",
        short: None,
        value: Some(("PATH", Kind::File)),
        help: "one more file or folder hidden from principals' sessions, besides the data dir and the config (repeatable; serve passes its tokens file)",
        env: None,
        default: None,
    },
];

/// `maka-acp serve [OPTIONS]`.
pub const SERVE_OPTIONS: &[Opt] = &[
    Opt {
        long: "listen",
        short: None,
        value: Some(("ADDR", Kind::Addr)),
        help: "address and port to serve ACP on (/acp); a non-loopback address needs --tls-proxied",
        env: None,
        default: Some("127.0.0.1:8430"),
    },
    Opt {
        long: "token-file",
        short: None,
        value: Some(("PATH", Kind::File)),
        help: "the bearer token every request must carry, from this file (mode 0600); without it a token is generated and written to DATA_DIR/serve.token",
        env: None,
        default: None,
    },
    Opt {
        long: "tokens-file",
        short: None,
        value: Some(("PATH", Kind::File)),
        help: "one principal per line instead of one token: `NAME TOKEN [connections=N] [sessions=N] [requests=N] [proxy]` (TOKEN may be sha256:HEX, its SHA-256; # starts a comment); the file must be mode 0600; re-read on SIGHUP (a removed token stops working, its connections are closed); not with --token-file",
        env: None,
        default: None,
    },
    Opt {
        long: "principal-connections",
        short: None,
        value: Some(("N", Kind::Number)),
        help: "ACP connections one principal of --tokens-file (or one user a proxy names) may hold open at once, unless its line says connections=N",
        env: None,
        default: Some("64"),
    },
    Opt {
        long: "principal-sessions",
        short: None,
        value: Some(("N", Kind::Number)),
        help: "sessions one principal may hold open at once, unless its line says sessions=N",
        env: None,
        default: Some("256"),
    },
    Opt {
        long: "principal-requests",
        short: None,
        value: Some(("N", Kind::Number)),
        help: "requests of one principal handled at once (an event stream or a WebSocket counts while open), unless its line says requests=N",
        env: None,
        default: Some("256"),
    },
    Opt {
        long: "principal-header",
        short: None,
        value: Some(("NAME", Kind::Text)),
        help: "behind an authenticating proxy (a `proxy` line of --tokens-file): the header the proxy names the user in, e.g. X-Forwarded-User; read only on requests with the proxy's token",
        env: None,
        default: None,
    },
    Opt {
        long: "resource-metadata",
        short: None,
        value: Some(("URL", Kind::Url)),
        help: "a 401 says WWW-Authenticate: Bearer resource_metadata=\"URL\" (RFC 9728: where a client learns how to get a token)",
        env: None,
        default: None,
    },
    Opt {
        long: "tls-proxied",
        short: None,
        value: None,
        help: "a TLS proxy is in front (docs/deployment.md): allows a non-loopback --listen and Host names that are not this machine's",
        env: None,
        default: None,
    },
    Opt {
        long: "route-peers",
        short: None,
        value: Some(("LIST", Kind::Addr)),
        help: "several processes behind nginx's `hash $http_acp_connection_id consistent`: every upstream server, comma-separated, as its upstream block names them; connection ids are then made so that nginx routes them back to this process",
        env: None,
        default: None,
    },
    Opt {
        long: "route-self",
        short: None,
        value: Some(("HOST:PORT", Kind::Addr)),
        help: "which of --route-peers this process is",
        env: None,
        default: Some("the --listen address"),
    },
    Opt {
        long: "host-url",
        short: None,
        value: Some(("URL", Kind::Url)),
        help: "use this Runtime Host for every connection instead of starting the embedded one (its token comes from MAKA_HOST_TOKEN)",
        env: Some("MAKA_HOST_URL"),
        default: None,
    },
    Opt {
        long: "data-dir",
        short: None,
        value: Some(("DIR", Kind::Dir)),
        help: "where the embedded host keeps sessions (and where a generated token is written)",
        env: Some("MAKA_DATA_DIR"),
        default: Some("$XDG_DATA_HOME/maka-acp"),
    },
    Opt {
        long: "acp",
        short: None,
        value: None,
        help: "every connection speaks Apache Maka's `maka --acp` dialect unless the request that opens it asks for ours (/acp?dialect=ours); without it one connection asks for Maka's with /acp?dialect=maka (docs/maka-extensions.md)",
        env: None,
        default: None,
    },
    LOG_LEVEL,
];

pub const GENERATE_TARGETS: &[&str] = &["man", "bash", "zsh", "fish"];

pub const SUBCOMMANDS: &[Subcommand] = &[
    Subcommand {
        name: "host",
        summary: "run the reference Runtime Host (HTTP on loopback; token from MAKA_HOST_TOKEN)",
        options: HOST_OPTIONS,
        operands: &[],
        needs_host: true,
    },
    Subcommand {
        name: "serve",
        summary: "serve ACP over Streamable HTTP and WebSocket (the official SDK's transports) on /acp, every connection on one Runtime Host",
        options: SERVE_OPTIONS,
        operands: &[],
        needs_host: true,
    },
    Subcommand {
        name: "demo",
        summary: "play a scripted conversation through the adapter and the embedded host, offline",
        options: &[],
        operands: &[],
        needs_host: true,
    },
    Subcommand {
        name: "login",
        summary: "choose a model provider and save it (with its key) to the config file",
        options: &[],
        operands: &[],
        needs_host: true,
    },
    Subcommand {
        name: "generate",
        summary: "print the man page or a shell completion script",
        options: &[],
        operands: GENERATE_TARGETS,
        needs_host: false,
    },
];

/// Environment variables, for the man page and `--help`.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    ("MAKA_HOST_URL", "the Runtime Host to use (as --host-url)"),
    ("MAKA_HOST_TOKEN", "the host's bearer token: required with a host URL and by `maka-acp host`; never read from the command line"),
    ("MAKA_HOST_CA", "a PEM file (or PEM text) of the certificate authorities to trust for an https:// host URL, instead of the bundled roots (a TLS proxy with a private CA)"),
    ("MAKA_DATA_DIR", "where the embedded host keeps sessions (as --data-dir)"),
    ("MAKA_OPENAI_BASE_URL", "an OpenAI-compatible Chat Completions endpoint (OPENAI_BASE_URL too)"),
    ("MAKA_OPENAI_API_KEY", "the endpoint's key (OPENAI_API_KEY too); never logged"),
    ("MAKA_MODEL", "the model name; required with an endpoint"),
    ("MAKA_SCRIPT", "the offline scripted provider: inline JSON or a file"),
    ("MAKA_CONFIG", "the config file `maka-acp login` writes (default $XDG_CONFIG_HOME/maka-acp/config.json)"),
    ("MAKA_SERVE_IDLE_TIMEOUT_MS", "`maka-acp serve`: how long a connection may have no event stream and send nothing before it is closed and its turns cancelled (default 120000)"),
    ("MAKA_SERVE_KEEPALIVE_MS", "`maka-acp serve`: the keepalive interval, advertised at initialize: an idle event stream gets a comment, a WebSocket a ping, at least this often (default 15000)"),
    ("MAKA_SERVE_BODY_DEADLINE_MS", "`maka-acp serve`: how long one request body (from the end of its head) or one WebSocket frame (from its first byte) may take to arrive whole (default 60000)"),
    ("RUST_LOG", "log level or env_logger filters (as --log-level)"),
];

fn option_line(o: &Opt) -> (String, String) {
    let mut left = match o.short {
        Some(c) => format!("-{c}, --{}", o.long),
        None => format!("--{}", o.long),
    };
    if let Some((name, _)) = o.value {
        left.push(' ');
        left.push_str(name);
    }
    let mut right = o.help.to_string();
    if let Some((_, Kind::Choice(c))) = o.value {
        right.push_str(&format!(": {}", c.join(", ")));
    }
    let mut notes = vec![];
    if let Some(e) = o.env {
        notes.push(format!("env: {e}"));
    }
    if let Some(d) = o.default {
        notes.push(format!("default: {d}"));
    }
    if !notes.is_empty() {
        right.push_str(&format!(" [{}]", notes.join("; ")));
    }
    (left, right)
}

/// `left` in a column of `width` after four spaces, `right` wrapped beside it (under it when
/// `left` is wider), lines at most ~100 characters.
fn row(out: &mut String, left: &str, width: usize, right: &str) {
    let indent = 4 + width;
    let mut lines: Vec<String> = vec![];
    let mut line = String::new();
    for word in right.split(' ') {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > 100 {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    if left.len() < width {
        out.push_str(&format!("    {left:<width$}{}\n", lines[0]));
    } else {
        out.push_str(&format!("    {left}\n{:indent$}{}\n", "", lines[0]));
    }
    for l in &lines[1..] {
        out.push_str(&format!("{:indent$}{l}\n", ""));
    }
}

fn options_block(out: &mut String, options: &[Opt]) {
    for o in options {
        let (left, right) = option_line(o);
        row(out, &left, 20, &right);
    }
}

/// `--help`.
pub fn usage() -> String {
    let mut out = format!("maka-acp — {ABOUT}\n\nUSAGE:\n");
    row(
        &mut out,
        "maka-acp [OPTIONS]",
        32,
        "run the ACP agent on stdin/stdout (what editors spawn)",
    );
    // Only what this build can run (the man page describes every build).
    let here = || {
        SUBCOMMANDS
            .iter()
            .filter(|s| cfg!(feature = "host") || !s.needs_host)
    };
    for s in here() {
        let mut call = format!("maka-acp {}", s.name);
        if !s.options.is_empty() {
            call.push_str(" [OPTIONS]");
        }
        if !s.operands.is_empty() {
            call.push_str(&format!(" <{}>", s.operands.join("|")));
        }
        row(&mut out, &call, 32, s.summary);
    }
    out.push_str("\nOPTIONS:\n");
    options_block(&mut out, AGENT_OPTIONS);
    for s in here().filter(|s| !s.options.is_empty()) {
        out.push_str(&format!(
            "\n{} OPTIONS (maka-acp {}):\n",
            s.name.to_uppercase(),
            s.name
        ));
        options_block(&mut out, s.options);
    }
    out.push_str("\nENVIRONMENT:\n");
    for (name, what) in ENVIRONMENT {
        row(&mut out, name, 22, what);
    }
    out.push_str("\nEvery setting: docs/configuration.md; the man page: maka-acp generate man.\n");
    out
}

/// `maka-acp SUBCOMMAND --help`: its line, its options and the variables it reads.
pub fn subcommand_usage(name: &str) -> String {
    let Some(s) = SUBCOMMANDS.iter().find(|s| s.name == name) else {
        return usage();
    };
    let mut out = format!("maka-acp {} — {}\n\nUSAGE:\n", s.name, s.summary);
    let mut call = format!("maka-acp {}", s.name);
    if !s.options.is_empty() {
        call.push_str(" [OPTIONS]");
    }
    out.push_str(&format!("    {call}\n\nOPTIONS:\n"));
    options_block(&mut out, s.options);
    row(&mut out, "-h, --help", 20, "print this help");
    out.push_str("\nENVIRONMENT:\n");
    for (name, what) in ENVIRONMENT
        .iter()
        .filter(|(n, _)| !["MAKA_HOST_URL", "MAKA_HOST_CA"].contains(n))
    {
        row(&mut out, name, 22, what);
    }
    out.push_str("\nEvery setting: docs/configuration.md; the man page: maka-acp generate man.\n");
    out
}
