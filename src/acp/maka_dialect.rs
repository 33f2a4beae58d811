//! Apache Maka's dialect (`maka-acp --acp`): what a client written for Maka's own `maka --acp`
//! expects, presented over this agent's one implementation (`docs/maka-extensions.md`,
//! "Apache Maka's dialect"). The dialect is a plain value of the connection ([`Dialect`], in
//! its context, [`super::connection::Shared`]), chosen once when it opens (`--acp` on stdio;
//! `serve --acp`, or `?dialect=maka` on the request that opens a `serve` connection) and read
//! at the edge only: which rows of the method table serve it (`methods.rs`, `MAKA_METHODS`),
//! `initialize` ([`advertise`]), the config options (`config_options.rs`), the error
//! convention ([`answer_in`]) and the permission bound ([`permission_bound`]). Notifications
//! are worded on the way out, after the projection, which knows no dialect ([`told`]: Maka's
//! to a client that opted in, ours otherwise). What the dialect keeps about a connection (the
//! copies it made, its open uploads, its goals waiting for a prompt: [`Kept`]) is in that
//! context too, never in a static, so under `serve` no connection sees another's. Nothing here
//! serves a request on its own; `routes/` does.

mod routes;
pub mod shapes;
pub use routes::*;

use super::connection::Shared;
use super::initialize::ClientCapabilities;
use super::projection::Notification;
pub use super::types::Dialect;
use super::types::{to_json, AgentCapabilities};
use crate::host_api::wire::TurnOutcome;
use crate::jsonrpc::{code, Responder, ResponseError};
use serde_json::{json, Value};
use std::time::Duration;

// ---- initialize ----

/// `initialize`: Maka's clients look for `_meta["_maka/goalPlan"]`; our own `_meta.maka` stays
/// beside it (a client of ours started with `--acp` still finds it).
pub fn advertise(dialect: Dialect, caps: &mut AgentCapabilities) {
    if dialect == Dialect::Maka {
        if let Value::Object(meta) = &mut caps.meta {
            meta.insert("_maka/goalPlan".into(), json!({"version": 1}));
        }
    }
}

// ---- errors ----

/// The responder of a request on a connection in `dialect`: in Maka's, errors follow Maka's
/// convention ([`maka_error`]).
pub fn answer_in(dialect: Dialect, responder: Responder) -> Responder {
    match dialect {
        Dialect::Ours => responder,
        Dialect::Maka => responder.map_errors(maka_error),
    }
}

/// Maka answers "not found" as `-32602`: an unknown session with `data.reason:
/// "unknown_session"` (which ours carries too), a host's `not_found` with `data: {source:
/// "runtime_host", code}`. Everything else is the same convention (`-32602` naming the field,
/// `-32603` with a code in `data`).
pub fn maka_error(mut e: ResponseError) -> ResponseError {
    if e.code != code::RESOURCE_NOT_FOUND {
        return e;
    }
    e.code = code::INVALID_PARAMS;
    if let Some(Value::Object(data)) = &mut e.data {
        if !data.contains_key("reason") {
            let host_code = data.get("makaCode").cloned().unwrap_or(json!("not_found"));
            data.insert("source".into(), json!("runtime_host"));
            data.insert("code".into(), host_code);
        }
    }
    e
}

// ---- notifications (§1.3: only to clients that opt in; ours to the others) ----

/// What a notification the projection returns becomes on the way out to this client (the one
/// place it is worded): Apache Maka's `_maka/turn/status` (opt-in `_maka/turnStatus`),
/// `_maka/goal/status` and `_maka/plan/changed` (opt-in `_maka/goalPlanStatus`), else ours
/// ([`Notification::ours`]). `None`: nothing is told.
pub fn told(caps: &ClientCapabilities, n: &Notification) -> Option<(&'static str, Value)> {
    match n {
        Notification::TurnState(ended, class) if caps.maka_turn_status => {
            let status = match ended.outcome {
                TurnOutcome::Cancelled => "cancelled",
                TurnOutcome::Failed => "failed",
                _ => "completed",
            };
            let mut params = json!({"sessionId": ended.session_id, "turnId": ended.turn_id,
                "runId": "", "status": status});
            if let Some(class) = class {
                params["failureClass"] = to_json(class);
            }
            Some(("_maka/turn/status", params))
        }
        Notification::GoalUpdate(g) if caps.maka_goal_plan_status => {
            let goal = shapes::maka_goal(&g.goal);
            Some((
                "_maka/goal/status",
                json!({"sessionId": g.session_id, "goal": goal}),
            ))
        }
        Notification::PlanChanged { session_id, plan } if caps.maka_goal_plan_status => {
            Some(("_maka/plan/changed", shapes::plan_changed(session_id, plan)))
        }
        ours => ours.ours(),
    }
}

/// `_maka/goal/status` with a goal already in Maka's shape, to a client that opted in (a goal
/// that waits for its prompt exists only here).
pub fn goal_status(shared: &Shared, session_id: &str, goal: &Value) {
    if shared.caps().maka_goal_plan_status {
        shared.outbox.notify(
            session_id,
            "_maka/goal/status",
            &json!({"sessionId": session_id, "goal": goal}),
        );
    }
}

/// `_maka/plan/changed` for `plan`, to a client that set `_maka/goalPlanStatus` (a hint to
/// query).
pub fn plan_changed(shared: &Shared, session_id: &str, plan: &crate::host_api::ops::PlanView) {
    if shared.caps().maka_goal_plan_status {
        let params = shapes::plan_changed(session_id, plan);
        shared
            .outbox
            .notify(session_id, "_maka/plan/changed", &params);
    }
}

// ---- permissions ----

/// How long a permission request waits for the client before the tool is denied as "no
/// answer": `MAKA_PERMISSION_TIMEOUT_MS` when set (`0`: no bound), else none in our dialect
/// and [`MAKA_PERMISSION_BOUND`] in Maka's. Paseo's Maka provider drops permission requests;
/// without a bound a turn in `ask` mode would wait until cancelled (docs/configuration.md).
pub fn permission_bound(dialect: Dialect, setting_ms: Option<u64>) -> Option<Duration> {
    match (setting_ms, dialect) {
        (Some(0), _) | (None, Dialect::Ours) => None,
        (Some(ms), _) => Some(Duration::from_millis(ms)),
        (None, Dialect::Maka) => Some(MAKA_PERMISSION_BOUND),
    }
}

/// Maka's dialect's default bound: long enough for a person to read and answer a dialog.
pub const MAKA_PERMISSION_BOUND: Duration = Duration::from_secs(60);

/// Why the tool was denied, as the model (and so the person) is told.
pub fn unanswered(bound: Duration) -> String {
    format!(
        "the editor did not answer the permission request within {} s, so the action was not taken; \
         if this editor cannot answer permission requests, set `permission_mode` to `bypass` or \
         `explore`, or set MAKA_PERMISSION_TIMEOUT_MS",
        bound.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acp::config_options::{self, Catalog, CatalogConnection, CatalogModel, View};
    use crate::acp::params::Params;
    use crate::host_api::wire::{CollaborationMode, Configuration, PermissionMode};

    fn catalog() -> Catalog {
        Catalog {
            connections: vec![CatalogConnection {
                slug: "script".into(),
                label: "Scripted".into(),
                models: vec![CatalogModel {
                    id: "deep".into(),
                    label: "Deep".into(),
                    thinking_levels: vec!["low".into(), "xhigh".into()],
                }],
            }],
            subagents: false,
        }
    }

    const MAKA: View = View {
        boolean: true,
        dialect: Dialect::Maka,
    };

    /// Maka's ids, categories and order; plan-first a select even for a client of boolean
    /// options; orchestration always.
    #[test]
    fn options_in_makas_dialect_have_its_ids_and_categories() {
        let set = config_options::options(&Configuration::default(), &catalog(), MAKA);
        let v = crate::acp::types::to_json(&set);
        let shown: Vec<(&str, &str)> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o["id"].as_str().unwrap(), o["category"].as_str().unwrap()))
            .collect();
        assert_eq!(
            shown,
            [
                ("permission_mode", "_maka/permission_mode"),
                ("thinking_level", "thought_level"),
                ("collaboration_mode", "mode"),
                ("orchestration_mode", "_maka/orchestration_mode"),
            ]
        );
        assert_eq!(v[1]["options"][2]["name"], "Extra high");
        assert_eq!(v[2]["currentValue"], "agent");
        assert_eq!(v[2]["type"], "select");
    }

    /// Either spelling of an id is accepted in either dialect (one row a case).
    #[test]
    fn either_spelling_of_an_id_sets_the_same_thing() {
        let c = Configuration::default();
        for dialect in [Dialect::Ours, Dialect::Maka] {
            for boolean in [false, true] {
                let view = View { boolean, dialect };
                for (id, value, check) in [
                    ("permission_mode", "bypass", 0),
                    ("mode", "bypass", 0),
                    ("thinking_level", "low", 1),
                    ("thought_level", "low", 1),
                    ("collaboration_mode", "plan", 2),
                    ("orchestration_mode", "graph", 3),
                ] {
                    if id == "orchestration_mode" && dialect == Dialect::Ours {
                        continue; // ours: only for folders with subagents
                    }
                    let params = json!({"configId": id, "value": value});
                    let p = Params::of(&params).unwrap();
                    let patch = config_options::patch_for(&p, &c, &catalog(), view)
                        .unwrap_or_else(|e| panic!("{dialect:?} {boolean} {id}: {}", e.message));
                    match check {
                        0 => assert_eq!(patch.permission_mode, Some(PermissionMode::Bypass)),
                        1 => assert_eq!(patch.thinking_level, Some(Some("low".into()))),
                        2 => assert_eq!(patch.collaboration_mode, Some(CollaborationMode::Plan)),
                        _ => assert!(patch.orchestration_mode.is_some()),
                    }
                }
            }
        }
        let params = json!({"configId": "speed", "value": "x"});
        let e = config_options::patch_for(&Params::of(&params).unwrap(), &c, &catalog(), MAKA)
            .unwrap_err();
        assert_eq!(e.data.unwrap()["reason"], "unsupported");
        assert!(e.message.contains("`permission_mode`"), "{}", e.message);
    }

    /// The bound: the setting wins (`0` = none); unset, only Maka's dialect has one.
    #[test]
    fn permission_bound_follows_the_setting_then_the_dialect() {
        let s = Duration::from_millis;
        for (dialect, setting, want) in [
            (Dialect::Ours, None, None),
            (Dialect::Maka, None, Some(MAKA_PERMISSION_BOUND)),
            (Dialect::Ours, Some(500), Some(s(500))),
            (Dialect::Maka, Some(500), Some(s(500))),
            (Dialect::Maka, Some(0), None),
            (Dialect::Ours, Some(0), None),
        ] {
            assert_eq!(
                permission_bound(dialect, setting),
                want,
                "{dialect:?} {setting:?}"
            );
        }
    }

    /// The projection's notifications, worded on the way out: ours to a client that did not opt
    /// in (a plan change untold: the plan is shown), Maka's to one that did (§1.3).
    #[test]
    fn notifications_are_worded_for_the_client_after_the_projection() {
        use crate::acp::projection::{Effect, Projector};
        let frames = [
            json!({"kind": "turn_terminal", "turnId": "t", "runId": "r", "outcome": "failed",
                "reason": "error", "failureClass": "provider_error"}),
            json!({"kind": "goal_updated", "goal": {"goalId": "g1", "sessionId": "s",
                "revision": 2, "objective": "shine", "status": "completed", "limits": {"maxTurns": 5},
                "turnsRun": 1, "tokensUsed": 5, "startedAt": 1, "updatedAt": 9}}),
            json!({"kind": "plan_state", "revision": 3, "status": "proposed", "entries": []}),
        ];
        let told = |caps: &ClientCapabilities| -> Vec<Value> {
            let mut p = Projector::new("s", Default::default());
            let now = std::time::Instant::now();
            let mut out = vec![];
            for f in &frames {
                let body = serde_json::from_value(f.clone()).unwrap();
                for e in p.apply(body, now, None) {
                    if let Effect::Notify(n) = e {
                        out.extend(told(caps, &n).map(|(m, p)| json!({"method": m, "params": p})));
                    }
                }
            }
            out
        };
        let ours = told(&ClientCapabilities::default());
        let methods: Vec<&Value> = ours.iter().map(|n| &n["method"]).collect();
        assert_eq!(
            methods,
            ["_maka/turn_state", "_maka/goal_update"],
            "{ours:?}"
        );
        assert_eq!(ours[0]["params"]["outcome"], "failed");
        assert_eq!(ours[1]["params"]["goal"]["objective"], "shine");
        let opted_in = ClientCapabilities {
            maka_turn_status: true,
            maka_goal_plan_status: true,
            ..Default::default()
        };
        let maka = told(&opted_in);
        assert_eq!(
            maka[0],
            json!({"method": "_maka/turn/status", "params": {"failureClass": "provider_error",
                "runId": "", "sessionId": "s", "status": "failed", "turnId": "t"}})
        );
        assert_eq!(maka[1]["method"], "_maka/goal/status");
        assert_eq!(maka[1]["params"]["goal"]["condition"], "shine");
        assert_eq!(maka[1]["params"]["goal"]["status"], "achieved");
        assert_eq!(
            maka[2],
            json!({"method": "_maka/plan/changed", "params": {"sessionId": "s",
                "storeVersion": 3, "latestProposalId": "proposal-3", "activeExecutionId": null}})
        );
    }

    /// Maka's not-found convention: `-32602`, `reason: unknown_session` or the host's code.
    #[test]
    fn not_found_is_invalid_params_in_makas_dialect() {
        let e = maka_error(crate::acp::errors::unknown_session("s1"));
        assert_eq!(e.code, code::INVALID_PARAMS);
        assert_eq!(e.data.as_ref().unwrap()["reason"], "unknown_session");
        let host = ResponseError::new(code::RESOURCE_NOT_FOUND, "no such artifact")
            .with_data(json!({"makaCode": "not_found"}));
        let e = maka_error(host);
        assert_eq!(e.code, code::INVALID_PARAMS);
        assert_eq!(e.data.unwrap()["source"], "runtime_host");
        let other = maka_error(ResponseError::internal("x"));
        assert_eq!(other.code, code::INTERNAL_ERROR);
    }
}
