//! The user's provider settings: environment variables first, then the config file that
//! `maka-acp login` writes. Shared by the host (which builds its providers from them) and the
//! adapter (which decides whether to ask the editor to authenticate).
//!
//! The config file is `$MAKA_CONFIG`, else `$XDG_CONFIG_HOME/maka-acp/config.json`, else
//! `~/.config/maka-acp/config.json`: a JSON object with `provider`, `baseUrl`, `apiKey`, `model`,
//! `thinkingLevels` and `contextWindow`, all optional. It is written atomically with mode 0600.

use serde_json::{Map, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The hosted OpenAI endpoint, used when a key is set without a base URL.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// Variables an editor user can set instead of logging in (named in auth methods and errors).
pub const PROVIDER_VARIABLES: &str = "MAKA_OPENAI_BASE_URL, MAKA_MODEL and MAKA_OPENAI_API_KEY";

/// `$MAKA_CONFIG`, else `$XDG_CONFIG_HOME/maka-acp/config.json`, else `~/.config/maka-acp/config.json`.
pub fn config_file_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MAKA_CONFIG").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| crate::tunables::home().map(|h| h.join(".config")))?;
    Some(base.join("maka-acp").join("config.json"))
}

/// The config file's keys; a missing file is empty, an unreadable one is logged and empty.
pub fn read_file() -> Map<String, Value> {
    let Some(path) = config_file_path() else {
        return Map::new();
    };
    read_file_at(&path)
}

fn read_file_at(path: &Path) -> Map<String, Value> {
    match std::fs::read(path) {
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(m)) => m,
            _ => {
                log::error!("{}: not a JSON object; ignoring it", path.display());
                Map::new()
            }
        },
        Err(_) => Map::new(),
    }
}

/// Replaces the config file with `values`: written to a temporary file created with mode 0600
/// in the same directory, flushed, then renamed over the old one (never world-readable, never
/// half-written).
pub fn write_file(path: &Path, values: &Map<String, Value>) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".config.json.{}.tmp",
        crate::host_api::random_hex(6)
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let result = (|| {
        let mut f = options.open(&tmp)?;
        let text = serde_json::to_string_pretty(&Value::Object(values.clone()))
            .map_err(std::io::Error::other)?;
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Removes `apiKey` from the config file. Returns whether there was one.
pub fn remove_api_key() -> std::io::Result<bool> {
    let Some(path) = config_file_path() else {
        return Ok(false);
    };
    let mut values = read_file_at(&path);
    if values.remove("apiKey").is_none() {
        return Ok(false);
    }
    write_file(&path, &values)?;
    Ok(true)
}

/// Provider settings after applying the precedence: environment, then config file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProviderSettings {
    /// `MAKA_SCRIPT`: the offline scripted provider (inline JSON or a file).
    pub script: Option<String>,
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub model: Option<String>,
    pub thinking_levels: Vec<String>,
    pub context_window: Option<u64>,
}

impl ProviderSettings {
    pub fn load() -> ProviderSettings {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        Self::resolve(var, &read_file())
    }

    /// The precedence rules, with the environment passed in (testable).
    pub fn resolve(var: impl Fn(&str) -> Option<String>, file: &Map<String, Value>) -> Self {
        let file_str = |k: &str| {
            file.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.trim().is_empty())
                .map(String::from)
        };
        let settings = ProviderSettings {
            script: var("MAKA_SCRIPT"),
            base_url: var("MAKA_OPENAI_BASE_URL")
                .or_else(|| var("OPENAI_BASE_URL"))
                .or_else(|| file_str("baseUrl")),
            api_key: var("MAKA_OPENAI_API_KEY")
                .or_else(|| var("OPENAI_API_KEY"))
                .or_else(|| file_str("apiKey")),
            model: var("MAKA_MODEL").or_else(|| file_str("model")),
            thinking_levels: var("MAKA_MODEL_THINKING_LEVELS")
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_else(|| crate::host_api::string_list(file.get("thinkingLevels"))),
            context_window: var("MAKA_MODEL_CONTEXT_WINDOW")
                .and_then(|v| v.parse().ok())
                .or_else(|| file.get("contextWindow").and_then(Value::as_u64)),
        };
        // Learned here, wherever it came from: from now on it is redacted wherever text
        // leaves the process (a provider's error body may echo it).
        if let Some(key) = &settings.api_key {
            crate::secrets::register(key);
        }
        settings
    }

    /// Whether an OpenAI-compatible endpoint is meant to be used (a URL or a key is set).
    pub fn wants_openai(&self) -> bool {
        self.base_url.is_some() || self.api_key.is_some()
    }

    /// Whether at least one provider can be built from these settings. `Err` says what is
    /// missing when something was started but is incomplete.
    pub fn is_configured(&self) -> bool {
        self.script.is_some() || (self.wants_openai() && self.model.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn environment_wins_over_the_file_and_both_are_needed_for_a_provider() {
        let file = json!({"baseUrl": "http://file/v1", "apiKey": "file-key", "model": "m1"});
        let file = file.as_object().unwrap();
        let s = ProviderSettings::resolve(env(&[("MAKA_MODEL", "m2")]), file);
        assert_eq!(s.base_url.as_deref(), Some("http://file/v1"));
        assert_eq!(s.model.as_deref(), Some("m2"));
        assert!(s.is_configured());
        let s = ProviderSettings::resolve(env(&[("OPENAI_API_KEY", "k")]), &Map::new());
        assert!(
            s.wants_openai() && !s.is_configured(),
            "a key without a model"
        );
        let s = ProviderSettings::resolve(env(&[]), &Map::new());
        assert!(!s.is_configured());
        let s = ProviderSettings::resolve(env(&[("MAKA_SCRIPT", "{}")]), &Map::new());
        assert!(s.is_configured());
    }

    #[test]
    fn writes_are_private_and_keep_other_keys() {
        let dir = std::env::temp_dir().join(format!("maka-cfg-{}", crate::host_api::random_hex(6)));
        let path = dir.join("sub").join("config.json");
        let mut m = Map::new();
        m.insert("apiKey".into(), json!("secret"));
        m.insert("model".into(), json!("m"));
        write_file(&path, &m).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let back = read_file_at(&path);
        assert_eq!(back, m);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
