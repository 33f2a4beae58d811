//! The one redaction of known secrets.
//!
//! Secrets are registered where they are learned — a provider's API key (environment or the
//! config file `maka-acp login` writes), the host's token, the values of a declared subagent's
//! `env` — and [`redact`] replaces each with [`REDACTED`] wherever text leaves the process's
//! trust: every log line (the logger's format), a turn's failure message and details (a
//! provider's error body may echo the key), dialog titles and the transcript on disk.
//!
//! Strings shorter than [`MIN_SECRET_BYTES`] are not registered: replacing `1` or `true`
//! everywhere would mangle text and protect nothing (such a value is guessed, not leaked).

use serde_json::Value;
use std::borrow::Cow;
use std::sync::{PoisonError, RwLock};

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Shorter strings are not registered (see the module's comment).
pub const MIN_SECRET_BYTES: usize = 8;

/// The most secrets kept: a bound on what a workspace's declarations can add (each value is
/// registered once, however often it is read).
const MAX_SECRETS: usize = 1024;

/// Known secrets, longest first, so that a secret containing another is replaced whole.
static KNOWN: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Registers `secret` (trimmed, as it is used in headers and environments), and its
/// JSON-escaped form when that differs (how it appears inside a JSON line).
pub fn register(secret: &str) {
    let secret = secret.trim();
    if secret.len() < MIN_SECRET_BYTES {
        return;
    }
    let escaped = serde_json::to_string(secret)
        .ok()
        .map(|s| s[1..s.len() - 1].to_string())
        .filter(|e| e != secret);
    let mut known = KNOWN.write().unwrap_or_else(PoisonError::into_inner);
    for form in std::iter::once(secret.to_string()).chain(escaped) {
        if known.contains(&form) {
            continue;
        }
        if known.len() >= MAX_SECRETS {
            // Not logged: the message would go through the logger, which reads this list.
            return;
        }
        let at = known.partition_point(|k| k.len() >= form.len());
        known.insert(at, form);
    }
}

/// Registers a declared variable's value (a subagent's `env`) when it may be a secret: its
/// name says so (`…KEY`, `…TOKEN`, `…SECRET`, `…PASSWORD`, `…AUTH…`, `…CREDENTIAL…`), or it
/// looks like a key (16 bytes or more of one word with letters and digits, no path). Every
/// value would redact `PATH=/usr/bin:/bin` or `MODE=production` wherever they appear.
pub fn register_declared(name: &str, value: &str) {
    const NAMES: &[&str] = &[
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "AUTH",
        "CREDENTIAL",
        "PRIVATE",
        "COOKIE",
        "SESSION",
    ];
    let name = name.to_ascii_uppercase();
    let v = value.trim();
    let keyish = v.len() >= 16
        && !v.contains(['/', '\\'])
        && !v.chars().any(char::is_whitespace)
        && v.chars().any(|c| c.is_ascii_digit())
        && v.chars().any(|c| c.is_alphabetic());
    if keyish || NAMES.iter().any(|n| name.contains(n)) {
        register(value);
    }
}

/// `text` with every known secret replaced by [`REDACTED`]; borrowed when it holds none.
pub fn redact(text: &str) -> Cow<'_, str> {
    let known = KNOWN.read().unwrap_or_else(PoisonError::into_inner);
    let mut out = Cow::Borrowed(text);
    for secret in known.iter() {
        if out.contains(secret.as_str()) {
            out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
        }
    }
    out
}

/// Redacts every string in `value` (keys are names, not secrets). Returns whether any changed.
pub fn redact_json(value: &mut Value) -> bool {
    match value {
        Value::String(s) => match redact(s) {
            Cow::Owned(clean) => {
                *s = clean;
                true
            }
            Cow::Borrowed(_) => false,
        },
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, v| redact_json(v) | changed),
        Value::Object(map) => map
            .values_mut()
            .fold(false, |changed, v| redact_json(v) | changed),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A declared variable's value is a secret when its name or its shape says so; paths and
    /// words are not (they would be redacted everywhere). One row a case.
    #[test]
    fn declared_values_that_look_secret_are_registered() {
        for (name, value, secret) in [
            ("STUB_API_KEY", "declared-unit-quiet-one", true),
            ("GITHUB_TOKEN", "declared-unit-two", true),
            ("DB_PASSWORD", "declared-unit-three", true),
            ("ANYTHING", "declaredunit4x9f8e7d6c5b4a", true),
            ("PATH", "/usr/local/declared/bin:/bin", false),
            ("MODE", "declared-production", false),
            ("GREETING", "declared unit hello 12345678", false),
        ] {
            register_declared(name, value);
            let text = format!("the value is {value}.");
            assert_eq!(redact(&text) != text, secret, "{name}={value}");
        }
    }

    /// One row a case: what is registered, the text, what must come out.
    #[test]
    fn known_secrets_are_redacted_and_nothing_else() {
        register("sk-unit-test-secret-0001");
        register("sk-unit-test-secret-0001-longer");
        register("short");
        register("  tok-unit-\"quoted\"-9 \n");
        for (text, expected) in [
            (
                "Incorrect API key provided: sk-unit-test-secret-0001.",
                "Incorrect API key provided: [redacted].",
            ),
            (
                "sk-unit-test-secret-0001-longer and sk-unit-test-secret-0001",
                "[redacted] and [redacted]",
            ),
            ("short stays", "short stays"),
            ("nothing to hide", "nothing to hide"),
            (r#"{"k":"tok-unit-\"quoted\"-9"}"#, r#"{"k":"[redacted]"}"#),
            ("tok-unit-\"quoted\"-9", "[redacted]"),
        ] {
            assert_eq!(redact(text), expected, "{text}");
        }
        assert!(matches!(redact("nothing to hide"), Cow::Borrowed(_)));
        let mut v = serde_json::json!({"body": ["x sk-unit-test-secret-0001 y", 3], "n": null});
        assert!(redact_json(&mut v));
        assert_eq!(
            v,
            serde_json::json!({"body": ["x [redacted] y", 3], "n": null})
        );
        assert!(!redact_json(&mut v));
    }
}
