//! Who may use the server: a bearer token on every request (checked by the HTTP server in
//! constant time, `crate::http::Keys`): one, from `--token-file` (which must be private to its
//! owner) or generated at start and written to a file only its owner can read; or one per
//! principal, from `--tokens-file` (re-read on SIGHUP). And no browser page of another site
//! (`Origin`), nor a page that reached a loopback server through a rebound DNS name (`Host`).

use crate::http::{valid_name, Entry, KeySet, Limits, Principal};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A token file far larger than this is not one.
const MAX_TOKEN_FILE: u64 = 64 * 1024;
/// A tokens file's size, at most.
const MAX_TOKENS_FILE: u64 = 1024 * 1024;
/// The shortest plain token a tokens file may hold.
const MIN_TOKEN_CHARS: usize = 16;

/// The token and the file it is in.
pub fn token(file: Option<&Path>, data_dir: &Path) -> Result<(String, PathBuf), String> {
    match file {
        Some(path) => read_token_file(path).map(|t| (t, path.to_path_buf())),
        None => {
            let token = crate::host_api::random_hex(32);
            let path = data_dir.join("serve.token");
            write_private(&path, &token)?;
            crate::secrets::register(&token);
            Ok((token, path))
        }
    }
}

/// The whole of a private regular file (`flag` names it in errors): opened without waiting (a
/// FIFO would block the start until a writer came), then checked on what was opened — a
/// regular file, with no group or other permission bits — and read up to `max` bytes.
fn read_private(path: &Path, flag: &str, max: u64) -> Result<String, String> {
    use std::io::Read;
    let shown = path.display();
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot read {flag} {shown}: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read {flag} {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!(
            "{flag} {shown} is not a regular file (a FIFO, a socket, a device or a folder); use a plain file, private to you (chmod 600)"
        ));
    }
    // Another user's file, however private, says who may use this server in that user's
    // words (a root service reading a file someone else wrote).
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if std::os::unix::fs::MetadataExt::uid(&meta) != me {
        return Err(format!(
            "{flag} {shown} belongs to another user (uid {}); it must be the file of the user serve runs as (uid {me})",
            std::os::unix::fs::MetadataExt::uid(&meta)
        ));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{flag} {shown} can be read by others (mode {mode:o}); make it private with chmod 600 {shown}"
        ));
    }
    if meta.len() > max {
        return Err(format!(
            "{flag} {shown} is larger than {max} bytes; it is not a token file"
        ));
    }
    let mut text = String::new();
    (&mut file)
        .take(max)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {flag} {shown}: {e}"))?;
    Ok(text)
}

fn read_token_file(path: &Path) -> Result<String, String> {
    let text = read_private(path, "--token-file", MAX_TOKEN_FILE)?;
    let token = text.trim().to_string();
    if token.len() < 16 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "--token-file {} must hold one token of at least 16 printable characters",
            path.display()
        ));
    }
    crate::secrets::register(&token);
    Ok(token)
}

/// How the principals of a tokens file are read: the caps of a line that sets none, and the
/// header a proxy names its principal in.
#[derive(Clone, Debug)]
pub struct TokensRules {
    pub defaults: Limits,
    pub principal_header: Option<String>,
}

/// `--tokens-file`: one principal a line (see [`parse_tokens`]), the file private and regular.
pub fn read_tokens_file(path: &Path, rules: &TokensRules) -> Result<KeySet, String> {
    let text = read_private(path, "--tokens-file", MAX_TOKENS_FILE)?;
    let set = parse_tokens(&text, rules)
        .map_err(|(line, why)| format!("--tokens-file {} line {line}: {why}", path.display()))?;
    Ok(set)
}

/// The principals of a tokens file: `NAME TOKEN [connections=N] [sessions=N] [requests=N]
/// [proxy]` a line, whitespace-separated; `#` at a line's start or after whitespace begins a
/// comment; blank lines are skipped. `TOKEN` is the token itself (16 printable characters at
/// least) or `sha256:HEX`, its SHA-256. `Err`: the line and why.
pub fn parse_tokens(text: &str, rules: &TokensRules) -> Result<KeySet, (usize, String)> {
    let mut entries: Vec<Entry> = Vec::new();
    // Where each name and hash was first seen.
    let mut lines: Vec<usize> = Vec::new();
    let mut plain: Vec<&str> = Vec::new();
    for (at, line) in text.lines().enumerate() {
        let n = at + 1;
        let fields: Vec<&str> = line
            .split_whitespace()
            .take_while(|f| !f.starts_with('#'))
            .collect();
        let [name, token, options @ ..] = fields.as_slice() else {
            if fields.is_empty() {
                continue;
            }
            return Err((
                n,
                "a line is NAME TOKEN [options]; this one has no token".into(),
            ));
        };
        if !valid_name(name) {
            return Err((
                n,
                format!(
                "'{name:.80}' is not a principal name: 1 to 64 of the letters, digits and . _ @ -"
            ),
            ));
        }
        let hash = match token.strip_prefix("sha256:") {
            Some(hex) => {
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err((n, "sha256: must be followed by the token's SHA-256 as 64 hex digits (e.g. printf %s TOKEN | sha256sum)".into()));
                }
                hex.to_ascii_lowercase()
            }
            None => {
                if token.chars().count() < MIN_TOKEN_CHARS || token.chars().any(char::is_control) {
                    return Err((n, format!("the token of {name} must have at least {MIN_TOKEN_CHARS} printable characters (or be sha256:HEX)")));
                }
                plain.push(token);
                crate::http::token_hash(token)
            }
        };
        let mut limits = rules.defaults;
        let mut proxy = false;
        let mut seen: Vec<&str> = Vec::new();
        for option in options {
            let (key, value) = option.split_once('=').unwrap_or((option, ""));
            if seen.contains(&key) {
                return Err((n, format!("{key} is given twice")));
            }
            seen.push(key);
            let count = || {
                value
                    .parse::<usize>()
                    .ok()
                    .filter(|&v| v >= 1)
                    .ok_or_else(|| {
                        (
                            n,
                            format!("{key}= takes a whole number of at least 1, not '{value:.40}'"),
                        )
                    })
            };
            match key {
                "connections" => limits.connections = Some(count()?),
                "sessions" => limits.sessions = Some(count()?),
                "requests" => limits.requests = Some(count()?),
                "proxy" if value.is_empty() && !option.contains('=') => proxy = true,
                _ => {
                    return Err((n, format!(
                        "'{option:.80}' is not an option; the options are connections=N, sessions=N, requests=N and proxy"
                    )))
                }
            }
        }
        if proxy {
            if rules.principal_header.is_none() {
                return Err((n, format!("{name} is a proxy, but no --principal-header says where the proxy names the user; add --principal-header (e.g. X-Forwarded-User)")));
            }
            if seen.len() > 1 {
                return Err((
                    n,
                    "a proxy's line takes no caps: the users it names get the --principal-* caps"
                        .into(),
                ));
            }
        }
        for (i, e) in entries.iter().enumerate() {
            if e.principal.name.as_deref() == Some(*name) {
                return Err((
                    n,
                    format!("the name {name} is already on line {}", lines[i]),
                ));
            }
            if e.hash == hash {
                return Err((n, format!("the token of {name} is already {}'s (line {}); each principal needs its own", e.principal.shown(), lines[i])));
            }
        }
        lines.push(n);
        entries.push(Entry {
            principal: Arc::new(Principal {
                name: Some(name.to_string()),
                limits,
                key: hash.clone(),
            }),
            hash,
            proxy,
        });
    }
    if entries.is_empty() {
        return Err((
            text.lines().count().max(1),
            "no principal: nobody could connect; add a line NAME TOKEN".into(),
        ));
    }
    for token in plain {
        crate::secrets::register(token);
    }
    Ok(KeySet {
        entries,
        principal_header: rules.principal_header.clone(),
        proxied_limits: rules.defaults,
    })
}

fn write_private(path: &Path, token: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        // The data dir, private as the host makes it.
        crate::host::store::create_private_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    // A file left by an earlier run may have any mode: replace it rather than write into it.
    let _ = std::fs::remove_file(path);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(format!("{token}\n").as_bytes()));
    written.map_err(|e| format!("cannot write the token file {}: {e}", path.display()))
}

/// A browser's `Origin` must be this server's own (its authority the request's `Host`); and a
/// server on loopback answers only loopback names, so that a page whose DNS name was rebound to
/// 127.0.0.1 is refused too. `Err`: why (403).
pub fn origin_ok(
    origin: Option<&str>,
    host: Option<&str>,
    tls_proxied: bool,
) -> Result<(), String> {
    let host = host.unwrap_or("");
    if !tls_proxied && !is_loopback_name(host) {
        return Err(format!(
            "Host '{host}' is not this machine; this server answers only on loopback"
        ));
    }
    let Some(origin) = origin else {
        return Ok(());
    };
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    if !authority.is_empty() && authority.eq_ignore_ascii_case(host) {
        return Ok(());
    }
    Err(format!(
        "Origin '{origin}' is not this server's; a page of another site cannot drive this agent"
    ))
}

/// Whether `host` (a `Host` header: name or address, then an optional `:port`) names this
/// machine; anything after a bracketed address but a port makes it not.
fn is_loopback_name(host: &str) -> bool {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((name, after)) => (name, after),
            None => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, _)) => (name, &host[name.len()..]),
            None => (host, ""),
        },
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !port_ok {
        return false;
    }
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(header: Option<&str>) -> TokensRules {
        TokensRules {
            defaults: Limits {
                connections: Some(64),
                sessions: Some(256),
                requests: Some(256),
            },
            principal_header: header.map(String::from),
        }
    }

    /// A tokens file's lines: names, plain and hashed tokens, options, comments; each bad line
    /// refused with its number and what to do.
    #[test]
    fn a_tokens_file_is_read_line_by_line_and_a_bad_line_is_named() {
        let hash = crate::http::token_hash("bob-secret-token-0123");
        let text = format!(
            "# team\n\nalice  alice-secret-token-01 connections=2 requests=5 # the lead\n\tbob sha256:{} sessions=3\ngw proxy-secret-token-0123 proxy\n",
            hash.to_ascii_uppercase()
        );
        let set = parse_tokens(&text, &rules(Some("X-Forwarded-User"))).unwrap();
        let found: Vec<(Option<&str>, Limits, bool)> = set
            .entries
            .iter()
            .map(|e| (e.principal.name.as_deref(), e.principal.limits, e.proxy))
            .collect();
        let l = |c, s, r| Limits {
            connections: Some(c),
            sessions: Some(s),
            requests: Some(r),
        };
        assert_eq!(
            found,
            vec![
                (Some("alice"), l(2, 256, 5), false),
                (Some("bob"), l(64, 3, 256), false),
                (Some("gw"), l(64, 256, 256), true),
            ]
        );
        assert_eq!(set.entries[1].hash, hash, "only the hash, lower-cased");
        let id = set.resolve(Some("Bearer bob-secret-token-0123"), |_| None);
        assert!(
            matches!(id, crate::http::Identity::Principal(p) if p.name.as_deref() == Some("bob"))
        );
        for (text, line, says) in [
            ("a short", 1, "at least 16"),
            ("alice", 1, "no token"),
            ("al/ice alice-secret-token-01", 1, "not a principal name"),
            ("alice sha256:abc", 1, "64 hex digits"),
            (
                "\nalice alice-secret-token-01 conections=2",
                2,
                "not an option",
            ),
            ("alice alice-secret-token-01 connections=0", 1, "at least 1"),
            ("alice alice-secret-token-01 requests=x", 1, "at least 1"),
            (
                "alice alice-secret-token-01 sessions=1 sessions=2",
                1,
                "twice",
            ),
            (
                "alice alice-secret-token-01\nalice other-secret-token-01",
                2,
                "already on line 1",
            ),
            (
                "alice alice-secret-token-01\nbob alice-secret-token-01",
                2,
                "already alice's",
            ),
            ("gw proxy-secret-token-0123 proxy", 1, "--principal-header"),
            ("# nobody\n", 1, "no principal"),
        ] {
            let got = parse_tokens(text, &rules(None)).map(|_| ());
            assert!(
                matches!(&got, Err((n, why)) if *n == line && why.contains(says)),
                "{text:?}: {got:?}"
            );
        }
        let got = parse_tokens(
            "gw proxy-secret-token-0123 proxy connections=3",
            &rules(Some("X-U")),
        );
        assert!(
            matches!(&got, Err((1, why)) if why.contains("no caps")),
            "{got:?}"
        );
    }

    #[test]
    fn origins_and_hosts_not_our_own_are_refused() {
        for (origin, host, proxied, ok) in [
            (None, Some("127.0.0.1:8430"), false, true),
            (None, Some("localhost:8430"), false, true),
            (None, Some("[::1]:8430"), false, true),
            (
                Some("http://127.0.0.1:8430"),
                Some("127.0.0.1:8430"),
                false,
                true,
            ),
            (
                Some("http://evil.example"),
                Some("127.0.0.1:8430"),
                false,
                false,
            ),
            (
                Some("http://127.0.0.1:9999"),
                Some("127.0.0.1:8430"),
                false,
                false,
            ),
            (Some("null"), Some("127.0.0.1:8430"), false, false),
            (None, Some("evil.example:8430"), false, false),
            (None, Some("[::1]evil.com"), false, false),
            (None, Some("[::1]:80evil"), false, false),
            (None, Some("127.0.0.1:"), false, false),
            (
                Some("http://evil.example:8430"),
                Some("evil.example:8430"),
                false,
                false,
            ),
            (None, None, false, false),
            (
                Some("https://acp.example.com"),
                Some("acp.example.com"),
                true,
                true,
            ),
            (
                Some("https://evil.example"),
                Some("acp.example.com"),
                true,
                false,
            ),
        ] {
            assert_eq!(
                origin_ok(origin, host, proxied).is_ok(),
                ok,
                "{origin:?} {host:?}"
            );
        }
    }
}
