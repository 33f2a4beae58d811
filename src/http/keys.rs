//! Who a request is: the set of bearer tokens a server accepts, each standing for one
//! principal. A request's token is hashed once (SHA-256) and compared in constant time against
//! every entry's hash, whichever matches; only the hashes are kept. The set is swappable
//! ([`Keys::replace`]: `maka-acp serve` re-reads its tokens file on SIGHUP), and a request is
//! resolved against the set current when its head was read.
//!
//! An entry marked `proxy` is a trusted authenticating proxy's own token: a request carrying it
//! is the principal named by the proxy's header (`--principal-header`), never a request with
//! any other token — a client cannot name itself.

use crate::jsonrpc::lock;
use std::sync::{Arc, Mutex};

/// A principal's caps (`None`: no cap of its own; the server's limits still hold).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// ACP connections open at once.
    pub connections: Option<usize>,
    /// Sessions open at once (enforced where sessions are opened, in the ACP layer).
    pub sessions: Option<usize>,
    /// Requests being handled at once.
    pub requests: Option<usize>,
}

/// Who a request is.
#[derive(Debug, PartialEq, Eq)]
pub struct Principal {
    /// `None`: the machine's user (the one token of `--token-file`, a generated token or the
    /// host's token).
    pub name: Option<String>,
    pub limits: Limits,
    /// The SHA-256 (hex) of the token entry it came through: a principal whose entry left the
    /// set is no longer anyone.
    pub key: String,
}

impl Principal {
    /// Its name as said in messages.
    pub fn shown(&self) -> &str {
        self.name.as_deref().unwrap_or("the machine's user")
    }
}

/// One accepted token.
#[derive(Debug)]
pub struct Entry {
    /// The token's SHA-256, hex.
    pub hash: String,
    /// Who it is (for a proxy's entry: the proxy itself, never a request's principal).
    pub principal: Arc<Principal>,
    /// The token of a trusted authenticating proxy: the principal is the one its header names.
    pub proxy: bool,
}

/// The tokens a server accepts.
#[derive(Debug)]
pub struct KeySet {
    pub entries: Vec<Entry>,
    /// The header a proxy names its principal in (`--principal-header`).
    pub principal_header: Option<String>,
    /// The caps of a principal a proxy names.
    pub proxied_limits: Limits,
}

/// Who a request turned out to be.
#[derive(Debug, PartialEq, Eq)]
pub enum Identity {
    Principal(Arc<Principal>),
    /// No token, or one that is not in the set.
    Unknown,
    /// The proxy's token, without a usable principal in its header.
    ProxyWithoutPrincipal,
}

/// Whether `name` may name a principal: `[A-Za-z0-9._@-]{1,64}`.
pub fn valid_name(name: &str) -> bool {
    // The host's rule for `Maka-Principal`: one rule, so every name accepted here reaches it.
    crate::host_api::wire::valid_principal(name)
}

/// The SHA-256 of `token`, hex (how entries are kept and compared).
pub fn token_hash(token: &str) -> String {
    crate::host::codec::sha256_hex(token.as_bytes())
}

impl KeySet {
    /// One token, for the machine's user.
    pub fn single(token: &str) -> KeySet {
        let hash = token_hash(token);
        KeySet {
            entries: vec![Entry {
                principal: Arc::new(Principal {
                    name: None,
                    limits: Limits::default(),
                    key: hash.clone(),
                }),
                hash,
                proxy: false,
            }],
            principal_header: None,
            proxied_limits: Limits::default(),
        }
    }

    /// Who a request with this `Authorization` header is; `header` reads the request's other
    /// headers (the proxy's principal header).
    pub fn resolve<'a>(
        &self,
        authorization: Option<&str>,
        header: impl Fn(&str) -> Option<&'a str>,
    ) -> Identity {
        let Some(given) = bearer(authorization) else {
            return Identity::Unknown;
        };
        let hash = token_hash(given);
        let Some(entry) = self.matching(&hash) else {
            return Identity::Unknown;
        };
        if !entry.proxy {
            return Identity::Principal(Arc::clone(&entry.principal));
        }
        let named = self
            .principal_header
            .as_deref()
            .and_then(header)
            .map(str::trim)
            .filter(|n| valid_name(n));
        match named {
            Some(name) => Identity::Principal(Arc::new(Principal {
                name: Some(name.to_string()),
                limits: self.proxied_limits,
                key: entry.hash.clone(),
            })),
            None => Identity::ProxyWithoutPrincipal,
        }
    }

    /// The entry whose hash is `hash`: every entry is compared, in constant time, whichever
    /// matches (the time says nothing of which one did or of how near a wrong token came).
    fn matching(&self, hash: &str) -> Option<&Entry> {
        use subtle::ConstantTimeEq;
        let mut found = None;
        for entry in &self.entries {
            let equal: bool = entry.hash.as_bytes().ct_eq(hash.as_bytes()).into();
            if equal && found.is_none() {
                found = Some(entry);
            }
        }
        found
    }

    /// Whether `principal` is still someone in this set: its entry is here, and (unless a
    /// proxy named it) still under its name.
    pub fn holds(&self, principal: &Principal) -> bool {
        self.entries
            .iter()
            .any(|e| e.hash == principal.key && (e.proxy || e.principal.name == principal.name))
    }
}

/// The token of `Authorization: Bearer <token>` (the scheme case-insensitive, RFC 9110).
fn bearer(header: Option<&str>) -> Option<&str> {
    let (scheme, given) = header?.split_once(' ')?;
    let given = given.trim();
    (scheme.eq_ignore_ascii_case("Bearer") && !given.is_empty()).then_some(given)
}

/// The current [`KeySet`], swappable while the server runs.
pub struct Keys {
    current: Mutex<Arc<KeySet>>,
}

impl Keys {
    pub fn new(set: KeySet) -> Keys {
        Keys {
            current: Mutex::new(Arc::new(set)),
        }
    }

    /// The set now (a request keeps the one it was resolved against).
    pub fn current(&self) -> Arc<KeySet> {
        Arc::clone(&lock(&self.current))
    }

    /// Replaces the set: the next request is resolved against `set`.
    pub fn replace(&self, set: KeySet) {
        *lock(&self.current) = Arc::new(set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, token: &str, proxy: bool) -> Entry {
        let hash = token_hash(token);
        Entry {
            principal: Arc::new(Principal {
                name: Some(name.into()),
                limits: Limits {
                    connections: Some(2),
                    ..Limits::default()
                },
                key: hash.clone(),
            }),
            hash,
            proxy,
        }
    }

    fn name_of(i: Identity) -> Result<Option<String>, Identity> {
        match i {
            Identity::Principal(p) => Ok(p.name.clone()),
            other => Err(other),
        }
    }

    #[test]
    fn only_the_exact_bearer_token_passes() {
        let set = KeySet::single("0123456789abcdef0123");
        let none = |_: &str| None;
        for (header, ok) in [
            (Some("Bearer 0123456789abcdef0123"), true),
            (Some("Bearer 0123456789abcdef012"), false),
            (Some("Bearer 0123456789abcdef01234"), false),
            (Some("bearer 0123456789abcdef0123"), true),
            (Some("BEARER 0123456789abcdef0123"), true),
            (Some("Basic 0123456789abcdef0123"), false),
            (Some("Bearer "), false),
            (None, false),
        ] {
            let got = set.resolve(header, none);
            assert_eq!(
                matches!(&got, Identity::Principal(p) if p.name.is_none()),
                ok,
                "{header:?}: {got:?}"
            );
        }
    }

    /// Each token is its own principal; a proxy's token takes the principal from its header
    /// (checked by the name rule), and that header from anyone else is not read.
    #[test]
    fn each_token_is_its_principal_and_only_the_proxy_names_one() {
        let set = KeySet {
            entries: vec![
                entry("alice", "alice-token-0123456789", false),
                entry("bob", "bob-token-0123456789ab", false),
                entry("gateway", "proxy-token-0123456789", true),
            ],
            principal_header: Some("X-Forwarded-User".into()),
            proxied_limits: Limits {
                connections: Some(9),
                ..Limits::default()
            },
        };
        let forged = |n: &str| (n == "X-Forwarded-User").then_some("carol");
        assert_eq!(
            name_of(set.resolve(Some("Bearer alice-token-0123456789"), forged)),
            Ok(Some("alice".into())),
            "a client's own header is ignored"
        );
        assert_eq!(
            name_of(set.resolve(Some("Bearer bob-token-0123456789ab"), |_| None)),
            Ok(Some("bob".into()))
        );
        assert_eq!(
            name_of(set.resolve(Some("Bearer nobody-0123456789abc"), forged)),
            Err(Identity::Unknown)
        );
        let Identity::Principal(carol) = set.resolve(Some("Bearer proxy-token-0123456789"), forged)
        else {
            panic!("the proxy names carol")
        };
        assert_eq!(carol.name.as_deref(), Some("carol"));
        assert_eq!(carol.limits.connections, Some(9), "the proxied caps");
        assert!(set.holds(&carol));
        for header in [
            None,
            Some(""),
            Some("a b"),
            Some("x/y"),
            Some(&*"a".repeat(65)),
        ] {
            assert_eq!(
                set.resolve(Some("Bearer proxy-token-0123456789"), |_| header),
                Identity::ProxyWithoutPrincipal,
                "{header:?}"
            );
        }
    }

    /// A principal whose entry left the set (or was renamed) is no longer anyone.
    #[test]
    fn a_principal_whose_entry_left_is_not_held() {
        let before = KeySet {
            entries: vec![
                entry("alice", "alice-token-0123456789", false),
                entry("bob", "bob-token-0123456789ab", false),
            ],
            principal_header: None,
            proxied_limits: Limits::default(),
        };
        let Identity::Principal(bob) =
            before.resolve(Some("Bearer bob-token-0123456789ab"), |_| None)
        else {
            panic!("bob")
        };
        let keys = Keys::new(before);
        assert!(keys.current().holds(&bob));
        keys.replace(KeySet {
            entries: vec![
                entry("alice", "alice-token-0123456789", false),
                entry("robert", "bob-token-0123456789ab", false),
            ],
            principal_header: None,
            proxied_limits: Limits::default(),
        });
        assert!(!keys.current().holds(&bob), "renamed");
        keys.replace(KeySet::single("alice-token-0123456789"));
        assert!(!keys.current().holds(&bob), "removed");
    }

    #[test]
    fn names_follow_the_rule() {
        for ok in ["alice", "a.b-c_d@example.com", "0", &"x".repeat(64)] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "a b", "a/b", "ä", "a:b", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
