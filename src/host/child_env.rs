//! The one environment builder: every process the host starts — commands, MCP servers,
//! subagents and their terminals — gets its environment here, never the host's whole one.
//! A child sees an allow-list of the host's variables (what programs need to find their
//! tools, home, locale, terminal and proxy), the names the person adds with `MAKA_CHILD_ENV`,
//! and what its own declaration names (an MCP server's or subagent's `env`, a terminal's).
//! The host's token and the model provider's keys are on no list, so no child inherits them.

use std::process::Command;
use std::sync::OnceLock;

/// Inherited by every child when the host has them.
const INHERITED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "SSH_AUTH_SOCK",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "GOCACHE",
    "GOMODCACHE",
    "JAVA_HOME",
    "NVM_DIR",
    "NODE_PATH",
    "PYENV_ROOT",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PKG_CONFIG_PATH",
    "CC",
    "CXX",
];

/// Prefixes inherited likewise (locale and XDG directories).
const INHERITED_PREFIXES: &[&str] = &["LC_", "XDG_"];

/// Never inherited, whatever `MAKA_CHILD_ENV` says: the host's own secrets and the provider's
/// keys (a declaration may still name a value of its own for them).
const NEVER: &[&str] = &[
    "MAKA_HOST_TOKEN",
    "MAKA_HOST_URL",
    "MAKA_OPENAI_API_KEY",
    "OPENAI_API_KEY",
    "MAKA_SCRIPT",
];

/// `MAKA_CHILD_ENV`: more names to inherit, comma-separated; `NAME*` is a prefix.
fn extra() -> &'static [String] {
    static EXTRA: OnceLock<Vec<String>> = OnceLock::new();
    EXTRA.get_or_init(|| {
        std::env::var("MAKA_CHILD_ENV")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .filter(|s| {
                // A bare `*` would hand every secret of the editor's environment to every
                // command: name what commands need instead.
                let everything = s.trim_end_matches('*').is_empty();
                if everything {
                    log::warn!("MAKA_CHILD_ENV: `{s}` would pass every variable; ignored (name the variables, or prefixes like `JAVA_*`)");
                }
                !everything
            })
            .collect()
    })
}

/// Whether a child inherits the host's variable `name`.
pub fn inherited(name: &str) -> bool {
    if NEVER.contains(&name) {
        return false;
    }
    let listed = |pattern: &str| match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    };
    INHERITED.contains(&name)
        || INHERITED_PREFIXES.iter().any(|p| name.starts_with(p))
        || extra().iter().any(|p| listed(p))
}

/// Gives `cmd` its environment: the inherited part of the host's, then `declared`.
pub fn apply<K: AsRef<str>, V: AsRef<str>>(
    cmd: &mut Command,
    declared: impl IntoIterator<Item = (K, V)>,
) {
    cmd.env_clear();
    for (k, v) in std::env::vars_os() {
        if k == "PATH" {
            cmd.env(k, absolute_entries(&v));
        } else if k.to_str().is_some_and(inherited) {
            cmd.env(k, v);
        }
    }
    for (k, v) in declared {
        cmd.env(k.as_ref(), v.as_ref());
    }
}

/// The inherited `PATH` without empty or relative entries: with `:` at its end or a `.` in
/// it, `ls` would be the workspace's own `./ls`, and a kept rule for `ls` would run it.
fn absolute_entries(path: &std::ffi::OsStr) -> std::ffi::OsString {
    let kept: Vec<std::path::PathBuf> = std::env::split_paths(path)
        .filter(|p| p.is_absolute())
        .collect();
    std::env::join_paths(kept).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One line a case: (the host's PATH, what a child gets).
    #[test]
    fn a_childs_path_has_only_absolute_entries() {
        for (host, child) in [
            ("/usr/bin:/bin", "/usr/bin:/bin"),
            ("/usr/bin:", "/usr/bin"),
            (":/usr/bin", "/usr/bin"),
            ("/usr/bin::/bin", "/usr/bin:/bin"),
            (".:/usr/bin", "/usr/bin"),
            ("/usr/bin:node_modules/.bin:bin", "/usr/bin"),
            ("", ""),
        ] {
            assert_eq!(absolute_entries(host.as_ref()), child, "{host:?}");
        }
    }

    #[test]
    fn secrets_are_never_inherited_and_tools_are() {
        for secret in NEVER {
            assert!(!inherited(secret), "{secret}");
        }
        for other in [
            "AWS_SECRET_ACCESS_KEY",
            "GITHUB_TOKEN",
            "ANTHROPIC_API_KEY",
            "LD_PRELOAD",
        ] {
            assert!(!inherited(other), "{other} is not on the list");
        }
        for tool in ["PATH", "HOME", "LC_ALL", "XDG_CONFIG_HOME", "CARGO_HOME"] {
            assert!(inherited(tool), "{tool}");
        }
        let mut cmd = Command::new("env");
        apply(&mut cmd, [("MAKA_HOST_TOKEN", "its own value")]);
        let envs: Vec<_> = cmd.get_envs().collect();
        assert!(envs
            .iter()
            .any(|(k, v)| *k == "MAKA_HOST_TOKEN" && v.is_some_and(|v| v == "its own value")));
    }
}
