//! The tunables this program reads from its environment, read once at start
//! ([`Tunables::from_env`], called by `cli`) and passed down to whoever needs them. Nothing else
//! reads these variables. (The provider settings — endpoint, model, key — are `config.rs`'s:
//! they are re-read on purpose when a sign-in elsewhere changes the config file.)

use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tunables {
    /// Adapter: how long one event-stream window may stay silent before the host is asked
    /// whether it lives (`MAKA_HOST_STREAM_TIMEOUT_MS`, ≥ 100; 90 s). The host ends every
    /// window within 60 s, so this only fires on a stalled stream.
    pub host_stream_timeout: Duration,
    /// Host: model steps per turn (`MAKA_MAX_STEPS`, 1–500; 50).
    pub max_steps: usize,
    /// Host: how long a model step may send nothing at all before the turn fails
    /// (`MAKA_PROVIDER_IDLE_TIMEOUT_MS`, ≥ 100; 180 s).
    pub provider_idle_timeout: Duration,
    /// Host: how long starting one MCP server may take, and how long a turn waits for a
    /// session's servers (`MAKA_MCP_START_TIMEOUT_MS`, 100–600000; 30 s).
    pub mcp_start_timeout: Duration,
    /// Host: fsync transcript appends and session records (`MAKA_HOST_FSYNC`, `0` = off; on).
    pub fsync: bool,
    /// Host: a turn compacts the conversation before it by itself when a step's input reaches
    /// this share of the model's context window (`MAKA_COMPACT_AT_PERCENT`, 10–100, `0` =
    /// never; 80).
    pub compact_at_percent: u8,
    /// Adapter: how long a `session/request_permission` may stay unanswered before it is
    /// withdrawn and the tool denied as "no answer" (`MAKA_PERMISSION_TIMEOUT_MS`, `0` = never,
    /// else ≥ 100). Unset: the dialect's default (`maka_dialect::permission_bound`).
    pub permission_timeout_ms: Option<u64>,
    /// `maka-acp serve`: how long a connection may have no event stream and send nothing
    /// before it is closed, its running turns cancelled (`MAKA_SERVE_IDLE_TIMEOUT_MS`, ≥ 100;
    /// 120 s).
    pub serve_idle_timeout: Duration,
    /// `maka-acp serve`: how long one request body (from the end of its head) or one WebSocket
    /// frame (from its first byte) may take to arrive whole (`MAKA_SERVE_BODY_DEADLINE_MS`,
    /// ≥ 100; 60 s).
    pub serve_body_deadline: Duration,
    /// `maka-acp serve`: the keepalive interval advertised at `initialize` and kept on every
    /// stream (an SSE comment, a WebSocket ping) (`MAKA_SERVE_KEEPALIVE_MS`, ≥ 10; 15 s).
    pub serve_keepalive: Duration,
}

impl Default for Tunables {
    fn default() -> Tunables {
        Tunables {
            host_stream_timeout: Duration::from_secs(90),
            max_steps: 50,
            provider_idle_timeout: Duration::from_secs(180),
            mcp_start_timeout: Duration::from_secs(30),
            fsync: true,
            compact_at_percent: 80,
            permission_timeout_ms: None,
            serve_idle_timeout: Duration::from_secs(120),
            serve_body_deadline: Duration::from_secs(60),
            serve_keepalive: Duration::from_secs(15),
        }
    }
}

impl Tunables {
    pub fn from_env() -> Tunables {
        Tunables::from_vars(|k| std::env::var(k).ok())
    }

    /// From a lookup (the environment, or a test's map). Values out of range keep the default.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Tunables {
        let d = Tunables::default();
        let number = |k: &str| var(k).and_then(|v| v.trim().parse::<u64>().ok());
        let millis = |k: &str, ok: std::ops::RangeInclusive<u64>, default: Duration| {
            number(k)
                .filter(|ms| ok.contains(ms))
                .map_or(default, Duration::from_millis)
        };
        Tunables {
            host_stream_timeout: millis(
                "MAKA_HOST_STREAM_TIMEOUT_MS",
                100..=u64::MAX,
                d.host_stream_timeout,
            ),
            max_steps: number("MAKA_MAX_STEPS")
                .filter(|n| (1..=500).contains(n))
                .map_or(d.max_steps, |n| n as usize),
            provider_idle_timeout: millis(
                "MAKA_PROVIDER_IDLE_TIMEOUT_MS",
                100..=u64::MAX,
                d.provider_idle_timeout,
            ),
            mcp_start_timeout: millis(
                "MAKA_MCP_START_TIMEOUT_MS",
                100..=600_000,
                d.mcp_start_timeout,
            ),
            fsync: var("MAKA_HOST_FSYNC").is_none_or(|v| v != "0"),
            compact_at_percent: number("MAKA_COMPACT_AT_PERCENT")
                .filter(|p| *p == 0 || (10..=100).contains(p))
                .map_or(d.compact_at_percent, |p| p as u8),
            permission_timeout_ms: number("MAKA_PERMISSION_TIMEOUT_MS")
                .filter(|ms| *ms == 0 || *ms >= 100),
            serve_idle_timeout: millis(
                "MAKA_SERVE_IDLE_TIMEOUT_MS",
                100..=u64::MAX,
                d.serve_idle_timeout,
            ),
            serve_body_deadline: millis(
                "MAKA_SERVE_BODY_DEADLINE_MS",
                100..=u64::MAX,
                d.serve_body_deadline,
            ),
            serve_keepalive: millis("MAKA_SERVE_KEEPALIVE_MS", 10..=u64::MAX, d.serve_keepalive),
        }
    }
}

/// The data dir when none is given: `$MAKA_DATA_DIR`, `$XDG_DATA_HOME/maka-acp`,
/// `~/.local/share/maka-acp`.
pub fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("MAKA_DATA_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".local/share")))
        .unwrap_or_else(|| {
            log::warn!("neither HOME nor XDG_DATA_HOME is set and the account has no home directory: keeping sessions under the temporary directory (set MAKA_DATA_DIR)");
            std::env::temp_dir()
        });
    base.join("maka-acp")
}

/// The user's home: `$HOME`, else the account's home directory. Some editors (avante.nvim)
/// start agents with only `PATH` and the configured variables, no `HOME`; sessions and the
/// config file must still be found where they always are.
pub fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(account_home)
}

#[cfg(feature = "host")]
fn account_home() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: getpwuid_r writes the entry into `pwd` and strings into `buf` (its length is
    // given); `result` is null or points at `pwd`. Nothing is read unless it succeeded.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            libc::getuid(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        );
        if rc != 0 || result.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        let dir = std::ffi::CStr::from_ptr(pwd.pw_dir).to_bytes();
        (!dir.is_empty()).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(dir)))
    }
}

#[cfg(not(feature = "host"))]
fn account_home() -> Option<PathBuf> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without `HOME` (avante.nvim starts agents so), the account's home is found.
    #[cfg(feature = "host")]
    #[test]
    fn the_accounts_home_is_found_without_home() {
        let home = account_home().expect("the account has a home directory");
        assert!(home.is_absolute() && home.is_dir(), "{}", home.display());
    }

    #[test]
    fn out_of_range_values_keep_the_defaults() {
        let t = Tunables::from_vars(|k| match k {
            "MAKA_MAX_STEPS" => Some("0".into()),
            "MAKA_MCP_START_TIMEOUT_MS" => Some("700000".into()),
            "MAKA_PROVIDER_IDLE_TIMEOUT_MS" => Some(" 2500 ".into()),
            "MAKA_HOST_FSYNC" => Some("0".into()),
            "MAKA_PERMISSION_TIMEOUT_MS" => Some("50".into()),
            "MAKA_SERVE_BODY_DEADLINE_MS" => Some("50".into()),
            _ => None,
        });
        assert_eq!(t.permission_timeout_ms, None, "below 100 ms and not 0");
        assert_eq!(t.max_steps, 50);
        assert_eq!(t.mcp_start_timeout, Duration::from_secs(30));
        assert_eq!(t.provider_idle_timeout, Duration::from_millis(2500));
        assert!(!t.fsync);
        assert_eq!(
            t.serve_body_deadline,
            Duration::from_secs(60),
            "below 100 ms"
        );
    }
}
