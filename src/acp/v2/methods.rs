//! Every method a v2 connection serves, one line each, routed to the same operations as v1's
//! table (`acp/methods.rs`); a name not here is `-32601` on v2 (v1's `session/load`,
//! `session/set_mode`, `fs/*`…), as a v2 name is on v1. Notifications are v1's table
//! (`session/cancel` means the same in both).

use crate::acp::methods::{answer, answer_str, local, m, turn, work, Job, Method};
use crate::acp::{configure, initialize, lifecycle, read, turns};

/// The v2 methods served.
#[rustfmt::skip]
pub static V2_METHODS: &[Method] = &[
    m("initialize",                 |v| Ok(Job::Initialize(initialize::offer(v)?))),
    m("auth/login",                 |v| answer_str(v, read::method_id, configure::authenticate)),
    local("auth/logout",            |v| answer(v, read::nothing, |c, ()| configure::logout(c))),
    m("session/new",                |v| work(v, read::new_session, lifecycle::new)),
    m("session/list",               |v| answer(v, read::list_sessions, lifecycle::list)),
    m("session/fork",               |v| work(v, read::fork_session, lifecycle::fork)),
    m("session/resume",             |v| work(v, super::lifecycle::read_resume, lifecycle::open)),
    m("session/close",              |v| answer_str(v, read::session_id, super::lifecycle::close)),
    m("session/delete",             |v| answer_str(v, read::session_id, lifecycle::delete)),
    m("session/prompt",             |v| turn(v, read::prompt, turns::register)),
    m("session/set_config_option",  |v| work(v, read::config_option, configure::set_config_option)),
    m("tool_call/cancel",           |v| answer(v, super::lifecycle::read_tool_call, super::lifecycle::cancel_call)),
    m("terminal/cancel",            |v| answer(v, super::lifecycle::read_terminal, super::lifecycle::cancel_call)),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acp::methods::find;
    use crate::acp::out::Version;
    use crate::acp::Dialect;

    /// Each name once; v1-only methods are unknown on v2 and v2's own on v1; every name is a
    /// method of the v2 schema.
    #[test]
    fn the_v2_table_serves_only_v2_methods() {
        let mut names: Vec<&str> = V2_METHODS.iter().map(|m| m.name).collect();
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a method is listed twice");
        for v1_only in [
            "session/load",
            "session/set_mode",
            "authenticate",
            "_maka/plan/query",
        ] {
            assert!(
                find(v1_only, true, Dialect::Ours, Some(Version::V2)).is_none(),
                "{v1_only}"
            );
        }
        assert!(find("session/prompt", true, Dialect::Ours, Some(Version::V2)).is_some());
        let schema: serde_json::Value = serde_json::from_str(include_str!(
            "../../../tests/schema/v2/schema.unstable.json"
        ))
        .unwrap();
        let defs = schema["$defs"].as_object().unwrap();
        for name in names {
            assert!(
                defs.values()
                    .any(|d| d["x-method"] == name && d["x-side"] == "agent"),
                "{name} is not a v2 method an agent serves"
            );
        }
    }
}
