//! Who may use the server: a bearer token on every request (checked by the HTTP server in
//! constant time, `crate::http::gate`), from `--token-file` (which must be private to its owner)
//! or generated at start and written to a file only its owner can read; and no browser page of another site (`Origin`), nor a page
//! that reached a loopback server through a rebound DNS name (`Host`).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

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

fn read_token_file(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let shown = path.display();
    // Opened without waiting (a FIFO would block the start until a writer came), then checked
    // on what was opened: a regular file, private.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot read --token-file {shown}: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read --token-file {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!(
            "--token-file {shown} is not a regular file (a FIFO, a socket, a device or a folder); put the token in a plain file, private to you (chmod 600)"
        ));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "--token-file {shown} can be read by others (mode {mode:o}); make it private with chmod 600 {shown}"
        ));
    }
    // A token is a line: a file far larger than one is not a token file.
    let mut text = String::new();
    (&mut file)
        .take(64 * 1024)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read --token-file {shown}: {e}"))?;
    let token = text.trim().to_string();
    if token.len() < 16 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "--token-file {shown} must hold one token of at least 16 printable characters"
        ));
    }
    crate::secrets::register(&token);
    Ok(token)
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
