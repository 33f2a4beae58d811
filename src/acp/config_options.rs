//! Session configuration as ACP sees it: the `configOptions` set, the legacy `modes` state, and
//! the reverse mapping from `session/set_config_option` / `session/set_mode` to one host
//! configuration patch. Pure functions over plain data: the host's [`Configuration`] and its
//! model catalog (`models.list`).
//!
//! The set, in order: `mode` (permission mode), `model`, `thought_level` (only when the
//! selected model declares levels), and plan-first — a boolean `plan_first` for clients that
//! accept boolean options, else a select `collaboration_mode` (`agent` / `plan`).
//!
//! Shown as the connection's [`View`] says (`Shared::config_view`): in Apache Maka's dialect
//! with its ids, categories and order ([`maka_options`]); either dialect's ids are read in both.
//! It uses only the adapter's leaf modules, so the projection, which shows these options,
//! reaches neither the connection nor the dialect's other modules through it.

use super::params::Params;
use super::types::{
    ConfigOption, ConfigOptionKind, Dialect, SelectGroup, SelectOption, SelectOptions, SessionMode,
    SessionModeState,
};
use crate::host_api::ops::ModelCatalog;
use crate::host_api::wire::{
    CollaborationMode, Configuration, ConfigurationPatch, ModelTarget, OrchestrationMode,
    PermissionMode, Session,
};
use crate::jsonrpc::ResponseError;
use serde_json::Value;

/// The permission modes, as both config-option values and legacy session modes.
const MODES: [(PermissionMode, &str, &str, &str); 3] = [
    (
        PermissionMode::Ask,
        "ask",
        "Ask",
        "Reads freely; asks before editing files or running commands",
    ),
    (
        PermissionMode::Bypass,
        "bypass",
        "Bypass",
        "Edits files and runs commands without asking",
    ),
    (
        PermissionMode::Explore,
        "explore",
        "Explore",
        "Read-only: no edits, no commands",
    ),
];

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CatalogModel {
    pub id: String,
    pub label: String,
    pub thinking_levels: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CatalogConnection {
    pub slug: String,
    pub label: String,
    pub models: Vec<CatalogModel>,
}

/// The host's `models.list`, as far as the options need it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Catalog {
    pub connections: Vec<CatalogConnection>,
    /// The session's folder declares subagents: the `orchestration_mode` option is offered.
    pub subagents: bool,
}

impl Catalog {
    pub fn from_models_list(list: &ModelCatalog) -> Catalog {
        let connections = list
            .connections
            .iter()
            .map(|c| CatalogConnection {
                slug: c.slug.clone(),
                label: c.label.clone(),
                models: c
                    .models
                    .iter()
                    .map(|m| CatalogModel {
                        id: m.id.clone(),
                        label: if m.label.is_empty() { &m.id } else { &m.label }.clone(),
                        thinking_levels: m.thinking_levels.clone(),
                    })
                    .collect(),
            })
            .collect();
        Catalog {
            connections,
            subagents: false,
        }
    }

    /// The model a target means: the first model of the first connection for `default`.
    fn resolve(&self, target: &ModelTarget) -> Option<&CatalogModel> {
        match target {
            ModelTarget::Default => self.connections.first()?.models.first(),
            ModelTarget::Explicit {
                connection_slug,
                model,
            } => self
                .connections
                .iter()
                .find(|c| &c.slug == connection_slug)?
                .models
                .iter()
                .find(|m| &m.id == model),
        }
    }
}

/// A session's configuration and the revision it was read at (the CAS token).
#[derive(Clone, Debug, PartialEq)]
pub struct SessionConfig {
    pub revision: u64,
    pub configuration: Configuration,
}

impl SessionConfig {
    /// From a host session record (`session.create`, `session.get`, `session.open`).
    pub fn from_session(record: &Session) -> SessionConfig {
        SessionConfig {
            revision: record.revision,
            configuration: record.configuration.clone(),
        }
    }
}

fn model_value(target: &ModelTarget) -> String {
    match target {
        ModelTarget::Default => "default".into(),
        ModelTarget::Explicit {
            connection_slug,
            model,
        } => format!("{connection_slug}/{model}"),
    }
}

pub fn mode_id(m: PermissionMode) -> &'static str {
    MODES
        .iter()
        .find(|x| x.0 == m)
        .map(|x| x.1)
        .unwrap_or("ask")
}

fn choice(value: &str, name: &str, description: Option<&str>) -> SelectOption {
    SelectOption {
        value: value.into(),
        name: name.into(),
        description: description.map(String::from),
    }
}

fn select(
    id: &str,
    name: &str,
    description: Option<&str>,
    current: &str,
    options: SelectOptions,
) -> ConfigOption {
    ConfigOption {
        id: id.into(),
        name: name.into(),
        description: description.map(String::from),
        // The ids that are also ACP's reserved categories are used as the category.
        category: matches!(id, "mode" | "model" | "thought_level").then(|| id.into()),
        kind: ConfigOptionKind::Select {
            current_value: current.into(),
            options,
        },
    }
}

/// Who the options are shown to: whether the client takes boolean options, and in whose
/// dialect (`--acp`: Apache Maka's ids and categories).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct View {
    pub boolean: bool,
    pub dialect: Dialect,
}

/// The complete, ordered `configOptions` set, as `view` shows it.
pub fn options(c: &Configuration, catalog: &Catalog, view: View) -> Vec<ConfigOption> {
    match view.dialect {
        Dialect::Ours => our_options(c, catalog, view.boolean),
        Dialect::Maka => maka_options(our_options(c, &maka_catalog(catalog), false)),
    }
}

/// Maka offers `orchestration_mode` always.
fn maka_catalog(catalog: &Catalog) -> Catalog {
    Catalog {
        subagents: true,
        ..catalog.clone()
    }
}

fn our_options(c: &Configuration, catalog: &Catalog, boolean_options: bool) -> Vec<ConfigOption> {
    let modes = MODES
        .iter()
        .map(|(_, id, name, d)| choice(id, name, Some(d)))
        .collect();
    let mut out = vec![select(
        "mode",
        "Mode",
        Some("What the agent may do without asking"),
        mode_id(c.permission_mode),
        SelectOptions::Flat(modes),
    )];

    let models = model_choices(catalog);
    out.push(select(
        "model",
        "Model",
        None,
        &model_value(&c.model_target),
        models,
    ));

    let levels = catalog
        .resolve(&c.model_target)
        .map(|m| m.thinking_levels.as_slice())
        .unwrap_or_default();
    if !levels.is_empty() {
        let mut choices = vec![choice(
            "default",
            "Default",
            Some("The model's own default"),
        )];
        choices.extend(levels.iter().map(|l| choice(l, l, None)));
        out.push(select(
            "thought_level",
            "Thinking",
            Some("How hard the model thinks before answering"),
            c.thinking_level.as_deref().unwrap_or("default"),
            SelectOptions::Flat(choices),
        ));
    }
    let plan = c.collaboration_mode == CollaborationMode::Plan;
    if boolean_options {
        out.push(ConfigOption {
            id: "plan_first".into(),
            name: "Plan first".into(),
            description: Some(
                "Propose a plan and wait for approval before writing or running anything".into(),
            ),
            category: None,
            kind: ConfigOptionKind::Boolean {
                current_value: plan,
            },
        });
    } else {
        out.push(select(
            "collaboration_mode",
            "Plan first",
            Some("In plan, the agent proposes a plan and waits for approval before writing or running anything"),
            if plan { "plan" } else { "agent" },
            SelectOptions::Flat(vec![
                choice("agent", "Agent", Some("Work directly")),
                choice("plan", "Plan first", Some("Propose a plan, then wait for approval")),
            ]),
        ));
    }
    if catalog.subagents {
        out.push(orchestration(c));
    }
    out
}

/// The models to choose from: the host's default first; grouped by provider only when there
/// is more than one (some clients, avante, cannot pick from groups, and one group says
/// nothing).
fn model_choices(catalog: &Catalog) -> SelectOptions {
    let default_name = match catalog.resolve(&ModelTarget::Default) {
        Some(m) => format!("Default ({})", m.label),
        None => "Default".into(),
    };
    let default_option = choice("default", &default_name, Some("The host's default model"));
    let model_options = |conn: &CatalogConnection| -> Vec<SelectOption> {
        conn.models
            .iter()
            .map(|m| choice(&format!("{}/{}", conn.slug, m.id), &m.label, None))
            .collect()
    };
    if catalog.connections.len() <= 1 {
        let mut flat = vec![default_option];
        if let Some(conn) = catalog.connections.first() {
            flat.extend(model_options(conn));
        }
        SelectOptions::Flat(flat)
    } else {
        let mut groups = vec![SelectGroup {
            group: "default".into(),
            name: "Default".into(),
            options: vec![default_option],
        }];
        for conn in &catalog.connections {
            groups.push(SelectGroup {
                group: conn.slug.clone(),
                name: if conn.label.is_empty() {
                    &conn.slug
                } else {
                    &conn.label
                }
                .clone(),
                options: model_options(conn),
            });
        }
        SelectOptions::Grouped(groups)
    }
}

/// How delegations to subagents run (only for sessions that have subagents).
fn orchestration(c: &Configuration) -> ConfigOption {
    select(
        "orchestration_mode",
        "Subagents",
        Some("How the agent runs work it delegates to other agents (.maka/agents.json)"),
        match c.orchestration_mode {
            OrchestrationMode::Default => "default",
            OrchestrationMode::Swarm => "swarm",
            OrchestrationMode::Graph => "graph",
        },
        SelectOptions::Flat(vec![
            choice("default", "One at a time", Some("One delegation at a time")),
            choice(
                "swarm",
                "Swarm",
                Some("Several delegations of one step run in parallel"),
            ),
            choice(
                "graph",
                "Graph",
                Some("Tasks with dependencies, each started when its dependencies end"),
            ),
        ]),
    )
}

/// The legacy `modes` state (the permission modes).
pub fn modes(c: &Configuration) -> SessionModeState {
    SessionModeState {
        current_mode_id: mode_id(c.permission_mode).into(),
        available_modes: MODES
            .iter()
            .map(|(_, id, name, d)| SessionMode {
                id: (*id).into(),
                name: (*name).into(),
                description: Some((*d).into()),
            })
            .collect(),
    }
}

fn invalid(msg: String) -> ResponseError {
    ResponseError::invalid_params(msg)
}

fn offered(values: &[String]) -> String {
    values
        .iter()
        .map(|v| format!("`{v}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Initial values for a session's options (`configOptions: [{configId, value}]` on
/// `session/new|load|resume|fork`, unstable): each validated as `session/set_config_option`
/// validates it, against the options the ones before it leave (a model's thinking levels
/// after the model), into one patch. A bad one is the `-32602` that names it.
pub fn initial_patch(
    initial: &[Value],
    start: &Configuration,
    catalog: &Catalog,
    view: View,
) -> Result<ConfigurationPatch, ResponseError> {
    let mut current = start.clone();
    let mut all = ConfigurationPatch::default();
    for (i, item) in initial.iter().enumerate() {
        let at = |e: ResponseError| {
            ResponseError::invalid_params(format_args!("`configOptions[{i}]`: {}", e.message))
        };
        let p = Params::of(item).map_err(at)?;
        let patch = patch_for(&p, &current, catalog, view).map_err(at)?;
        apply_patch(&mut current, &mut all, patch);
    }
    Ok(all)
}

/// `patch` applied to `c`, and kept in `all`.
fn apply_patch(c: &mut Configuration, all: &mut ConfigurationPatch, patch: ConfigurationPatch) {
    if let Some(m) = patch.model_target {
        c.model_target = m.clone();
        all.model_target = Some(m);
    }
    if let Some(t) = patch.thinking_level {
        c.thinking_level = t.clone();
        all.thinking_level = Some(t);
    }
    if let Some(m) = patch.permission_mode {
        c.permission_mode = m;
        all.permission_mode = Some(m);
    }
    if let Some(m) = patch.collaboration_mode {
        c.collaboration_mode = m;
        all.collaboration_mode = Some(m);
    }
    if let Some(m) = patch.orchestration_mode {
        c.orchestration_mode = m;
        all.orchestration_mode = Some(m);
    }
}

/// `session/set_mode`'s `modeId` → patch.
pub fn mode_patch(mode: &str) -> Result<ConfigurationPatch, ResponseError> {
    let m = MODES.iter().find(|x| x.1 == mode).ok_or_else(|| {
        invalid(format!(
            "`modeId` {mode:?} is not a mode of this session; use `ask`, `bypass` or `explore`"
        ))
    })?;
    Ok(ConfigurationPatch {
        permission_mode: Some(m.0),
        ..Default::default()
    })
}

/// Validates `session/set_config_option` params against the options currently offered and
/// returns the one-field patch. Everything here is checked before any host call.
pub fn patch_for(
    p: &Params,
    c: &Configuration,
    catalog: &Catalog,
    view: View,
) -> Result<ConfigurationPatch, ResponseError> {
    // Either dialect's spelling of an id, in either dialect; checked against our set (with
    // plan-first as a select for its select spelling, and what Maka always offers).
    // Errors name the id as the client sent it (a Maka client never saw our `mode`).
    let sent = p.required_str("configId")?;
    let id = our_config_id(sent);
    let catalog = &match view.dialect {
        Dialect::Maka => maka_catalog(catalog),
        Dialect::Ours => catalog.clone(),
    };
    let boolean_options =
        view.boolean && view.dialect == Dialect::Ours && id != "collaboration_mode";
    let set = our_options(c, catalog, boolean_options);
    let Some(option) = set.iter().find(|o| o.id == id) else {
        let ids: Vec<String> = options(c, catalog, view)
            .iter()
            .map(|o| o.id.clone())
            .collect();
        return Err(invalid(format!(
            "`configId` {sent:?} is not an option of this session; it offers {}",
            offered(&ids)
        ))
        .with_data(serde_json::json!({"field": "configId", "reason": "unsupported"})));
    };
    let value = p
        .get("value")
        .ok_or_else(|| invalid("`value` is required".into()))?;
    let declared = p.optional_str("type")?;
    let (values, choices) = match &option.kind {
        ConfigOptionKind::Select { options, .. } => (options.values(), options.choices()),
        ConfigOptionKind::Boolean { .. } => (vec![], vec![]),
    };
    if matches!(option.kind, ConfigOptionKind::Boolean { .. }) {
        let (Some(b), None | Some("boolean")) = (value.as_bool(), declared) else {
            return Err(invalid(format!(
                "`{sent}` is a boolean option; send `\"type\": \"boolean\"` and a true/false `value`"
            )));
        };
        return Ok(ConfigurationPatch {
            collaboration_mode: Some(if b {
                CollaborationMode::Plan
            } else {
                CollaborationMode::Agent
            }),
            ..Default::default()
        });
    }
    let Some(v) = value.as_str().filter(|_| declared != Some("boolean")) else {
        return Err(invalid(format!(
            "`{sent}` is a select option; `value` must be one of its value ids"
        ))
        .with_data(serde_json::json!({"field": "value", "reason": "invalid_type"})));
    };
    // A model may be named by its bare id or its display name, as clients that know only the
    // model send it (`session/set_model` with `fake-model` for `openai/fake-model`), when
    // exactly one offered value has that id or name.
    let v = match choices.as_slice() {
        _ if values.contains(&v) || id != "model" => v,
        choices => {
            let named: Vec<&str> = choices
                .iter()
                .filter(|c| c.value.split_once('/').is_some_and(|(_, m)| m == v) || c.name == v)
                .map(|c| c.value.as_str())
                .collect();
            match named.as_slice() {
                [one] => one,
                [] => v,
                several => {
                    return Err(invalid(format!(
                        "{v:?} names {} models; send one of {}",
                        several.len(),
                        offered(&several.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                    )))
                }
            }
        }
    };
    if !values.contains(&v) {
        let values: Vec<String> = values.into_iter().map(String::from).collect();
        return Err(invalid(format!(
            "{v:?} is not a value of `{sent}`; it offers {}",
            offered(&values)
        ))
        .with_data(serde_json::json!({"field": "value", "reason": "unsupported"})));
    }
    value_patch(id, v)
}

/// The one-field patch that sets option `id` to `v`, a value it offers.
fn value_patch(id: &str, v: &str) -> Result<ConfigurationPatch, ResponseError> {
    let mut patch = ConfigurationPatch::default();
    match id {
        "mode" => return mode_patch(v),
        "model" => {
            patch.model_target = Some(match v.split_once('/') {
                Some((slug, model)) => ModelTarget::Explicit {
                    connection_slug: slug.into(),
                    model: model.into(),
                },
                None => ModelTarget::Default,
            })
        }
        "thought_level" => {
            patch.thinking_level = Some((v != "default").then(|| v.to_string()));
        }
        "orchestration_mode" => {
            patch.orchestration_mode = Some(match v {
                "swarm" => OrchestrationMode::Swarm,
                "graph" => OrchestrationMode::Graph,
                _ => OrchestrationMode::Default,
            })
        }
        _ => {
            patch.collaboration_mode = Some(if v == "plan" {
                CollaborationMode::Plan
            } else {
                CollaborationMode::Agent
            })
        }
    }
    Ok(patch)
}

/// One attempt of a revision-CAS write.
pub enum CasStep<T> {
    Committed(T),
    Conflict,
}

/// How many times a conflicting configuration write is re-read and retried.
pub const CAS_RETRIES: usize = 3;

/// Writes at `revision`; on a conflict re-reads the revision and retries, at most
/// [`CAS_RETRIES`] times, then gives up with `gave_up()`.
pub fn with_cas_retry<T, E>(
    mut revision: u64,
    mut write: impl FnMut(u64) -> Result<CasStep<T>, E>,
    mut reread: impl FnMut() -> Result<u64, E>,
    gave_up: impl FnOnce() -> E,
) -> Result<T, E> {
    for attempt in 0..=CAS_RETRIES {
        if attempt > 0 {
            revision = reread()?;
        }
        if let CasStep::Committed(t) = write(revision)? {
            return Ok(t);
        }
    }
    Err(gave_up())
}

// ---- Apache Maka's presentation (`--acp`, `maka_dialect.rs`) ----

/// Our id for a config id in either dialect (Maka's `permission_mode` and `thinking_level` are
/// our `mode` and `thought_level`; the rest are spelled alike).
pub fn our_config_id(id: &str) -> &str {
    match id {
        "permission_mode" => "mode",
        "thinking_level" => "thought_level",
        other => other,
    }
}

/// Our options (select plan-first, orchestration offered) as Maka presents them: its ids,
/// names and categories, in its order; no `model` option (Maka has none, and Paseo's Maka
/// provider offers its own "configured default" only when no option is in category `model`).
/// `session/set_model` and `configId: "model"` still work.
fn maka_options(ours: Vec<ConfigOption>) -> Vec<ConfigOption> {
    const ORDER: [&str; 4] = [
        "mode",
        "thought_level",
        "collaboration_mode",
        "orchestration_mode",
    ];
    let mut out: Vec<ConfigOption> = ours
        .into_iter()
        .filter_map(|mut o| {
            let (id, name, category) = match o.id.as_str() {
                "mode" => (
                    "permission_mode",
                    "Permission mode",
                    "_maka/permission_mode",
                ),
                "thought_level" => ("thinking_level", "Thinking level", "thought_level"),
                "collaboration_mode" => ("collaboration_mode", "Collaboration mode", "mode"),
                "orchestration_mode" => (
                    "orchestration_mode",
                    "Orchestration mode",
                    "_maka/orchestration_mode",
                ),
                _ => return None,
            };
            if id == "thinking_level" || id == "collaboration_mode" {
                rename_values(&mut o.kind);
            }
            o.id = id.into();
            o.name = name.into();
            o.category = Some(category.into());
            Some(o)
        })
        .collect();
    out.sort_by_key(|o| {
        ORDER
            .iter()
            .position(|x| *x == our_config_id(&o.id))
            .unwrap_or(ORDER.len())
    });
    out
}

/// Maka's display names of thinking levels and collaboration modes.
fn rename_values(kind: &mut ConfigOptionKind) {
    let ConfigOptionKind::Select {
        options: SelectOptions::Flat(choices),
        ..
    } = kind
    else {
        return;
    };
    for c in choices {
        let name = match c.value.as_str() {
            "off" => "Off",
            "minimal" => "Minimal",
            "low" => "Low",
            "medium" => "Medium",
            "high" => "High",
            "xhigh" => "Extra high",
            "max" => "Max",
            "ultra" => "Ultra",
            "agent" => "Agent",
            "plan" => "Plan",
            _ => continue,
        };
        c.name = name.into();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cas_retries_three_times_then_gives_up() {
        let mut writes = vec![];
        let r: Result<(), &str> = with_cas_retry(
            1,
            |rev| {
                writes.push(rev);
                Ok(CasStep::Conflict)
            },
            || Ok(7),
            || "gave up",
        );
        assert_eq!(r, Err("gave up"));
        assert_eq!(writes, [1, 7, 7, 7], "one write and three retries");
        let mut n = 0;
        let r: Result<u64, &str> = with_cas_retry(
            1,
            |rev| {
                n += 1;
                Ok(if n < 3 {
                    CasStep::Conflict
                } else {
                    CasStep::Committed(rev)
                })
            },
            || Ok(5),
            || "gave up",
        );
        assert_eq!(r, Ok(5));
    }

    use super::*;
    use serde_json::{json, Value};

    fn catalog() -> Catalog {
        Catalog::from_models_list(
            &serde_json::from_value(
                json!({"connections": [{"slug": "script", "label": "Scripted", "models": [
                    {"id": "deep", "label": "Deep", "thinkingLevels": ["low", "high"]},
                    {"id": "fast", "label": "Fast", "thinkingLevels": []},
                ]}]}),
            )
            .unwrap(),
        )
    }

    /// The options as the client reads them.
    fn options(c: &Configuration, catalog: &Catalog, boolean: bool) -> Value {
        let view = View {
            boolean,
            dialect: Dialect::Ours,
        };
        crate::acp::types::to_json(&super::options(c, catalog, view))
    }

    fn ids(v: &Value) -> Vec<&str> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|o| o["id"].as_str().unwrap())
            .collect()
    }

    fn set(c: &Configuration, params: Value, boolean: bool) -> Result<ConfigurationPatch, String> {
        let p = Params::of(&params).unwrap();
        let view = View {
            boolean,
            dialect: Dialect::Ours,
        };
        patch_for(&p, c, &catalog(), view).map_err(|e| e.message)
    }

    #[test]
    fn vocabulary_and_order_follow_the_model_and_the_client() {
        let mut c = Configuration::default();
        let o = options(&c, &catalog(), false);
        assert_eq!(
            ids(&o),
            ["mode", "model", "thought_level", "collaboration_mode"]
        );
        assert_eq!(
            o[1]["options"][0]["name"], "Default (Deep)",
            "one provider: flat"
        );
        assert_eq!(o[1]["options"][2]["value"], "script/fast");
        let mut two = catalog();
        two.connections.push(CatalogConnection {
            slug: "openai".into(),
            label: "OpenAI".into(),
            models: vec![],
        });
        let g = options(&c, &two, false);
        assert_eq!(g[1]["options"][0]["options"][0]["name"], "Default (Deep)");
        assert_eq!(g[1]["options"][1]["options"][1]["value"], "script/fast");
        assert_eq!(o[2]["options"][2]["value"], "high");
        c.model_target = ModelTarget::Explicit {
            connection_slug: "script".into(),
            model: "fast".into(),
        };
        let o = options(&c, &catalog(), true);
        assert_eq!(
            ids(&o),
            ["mode", "model", "plan_first"],
            "fast has no levels"
        );
        assert_eq!(o[2]["currentValue"], false);
    }

    #[test]
    fn orchestration_is_offered_only_to_sessions_with_subagents() {
        let c = Configuration::default();
        let mut cat = catalog();
        assert!(!ids(&options(&c, &cat, false)).contains(&"orchestration_mode"));
        let e = set(
            &c,
            json!({"configId": "orchestration_mode", "value": "swarm"}),
            false,
        )
        .unwrap_err();
        assert!(e.contains("`mode`"), "unknown without subagents: {e}");
        cat.subagents = true;
        let o = options(&c, &cat, false);
        assert_eq!(ids(&o).last(), Some(&"orchestration_mode"));
        assert_eq!(
            o.as_array().unwrap().last().unwrap()["currentValue"],
            "default"
        );
        let params = json!({"configId": "orchestration_mode", "value": "graph"});
        let p = Params::of(&params).unwrap();
        let patch = patch_for(&p, &c, &cat, View::default()).unwrap();
        assert_eq!(patch.orchestration_mode, Some(OrchestrationMode::Graph));
    }

    #[test]
    fn validation_rejects_unknown_ids_wrong_types_and_values_not_offered() {
        let c = Configuration::default();
        let e = set(&c, json!({"configId": "speed", "value": "x"}), false).unwrap_err();
        assert!(e.contains("`mode`, `model`"), "{e}");
        let e = set(&c, json!({"configId": "mode", "value": true}), false).unwrap_err();
        assert!(e.contains("select option"), "{e}");
        let e = set(&c, json!({"configId": "mode", "value": "yolo"}), false).unwrap_err();
        assert!(e.contains("`ask`, `bypass`, `explore`"), "{e}");
        let e = set(
            &c,
            json!({"configId": "plan_first", "type": "boolean", "value": true}),
            false,
        )
        .unwrap_err();
        assert!(e.contains("not an option"), "boolean option hidden: {e}");
        let e = set(&c, json!({"configId": "plan_first", "value": "yes"}), true).unwrap_err();
        assert!(e.contains("boolean option"), "{e}");
        let p = set(
            &c,
            json!({"configId": "plan_first", "type": "boolean", "value": true}),
            true,
        )
        .unwrap();
        assert_eq!(p.collaboration_mode, Some(CollaborationMode::Plan));
        let p = set(
            &c,
            json!({"configId": "thought_level", "value": "default"}),
            false,
        )
        .unwrap();
        assert_eq!(p.thinking_level, Some(None));
        let p = set(
            &c,
            json!({"configId": "model", "value": "script/fast"}),
            false,
        )
        .unwrap();
        assert_eq!(
            p.model_target,
            Some(ModelTarget::Explicit {
                connection_slug: "script".into(),
                model: "fast".into()
            })
        );
        assert!(mode_patch("plan").is_err());
    }
}
