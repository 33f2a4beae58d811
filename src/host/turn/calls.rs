//! Tool calls: announced, gated (the permission mode, plan mode, the session's roots, the
//! user's answers — the decision itself is `gate::decide`), run, and settled.

use super::delegate;
use super::dialogs::unshown_questions;
use super::gate;
use super::*;
use crate::host::permissions;
use crate::host_api::wire::{Decision, PermissionRule, Review, RuleScope, RuleTarget, ToolStatus};

impl Turn {
    pub(super) fn tool_call(&mut self, id: &str, provider_id: &str, name: &str, arguments: &str) {
        let args: Value = match serde_json::from_str(arguments) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) | Err(_) if arguments.trim().is_empty() => json!({}),
            Ok(other) => json!({ "_raw": other }),
            Err(e) => json!({ "_unparsable": arguments, "_error": e.to_string() }),
        };
        let plan = match tools::plan(name, &args, &self.cwd) {
            Err(_) if name == "delegate" && !self.agents.is_empty() => Ok(delegate::plan(&args)),
            Err(_) if name == "delegate_graph" && !self.agents.is_empty() => {
                Ok(delegate::graph_plan(&args))
            }
            Err(e) => match self.mcp_tools.iter().find(|t| t.exposed == name) {
                // MCP tools are gated like built-in tools that act: explore refuses, ask asks.
                Some(t) => Ok(tools::ToolPlan {
                    title: format!("{}: {}", t.server, t.name),
                    activity_kind: "tool",
                    locations: vec![],
                    review: Some(Review::Tool),
                    touches: vec![],
                }),
                None => Err(e),
            },
            ok => ok,
        };
        let (title, kind, locations) = match &plan {
            Ok(p) => (p.title.clone(), p.activity_kind, p.locations.clone()),
            Err(_) => (name.to_string(), "tool", vec![]),
        };
        self.start_tool(id, provider_id, name, None, &title, kind, &args, &locations);
        self.current_tool = Some(id.to_string());
        self.current_ran = false;
        let started = std::time::Instant::now();
        let outcome = match plan {
            Err(msg) => ToolOutcome::failed(msg),
            Ok(_) if args.get("_unparsable").is_some() => ToolOutcome::failed(format!(
                "the arguments are not valid JSON: {}",
                args["_error"]
            )),
            Ok(plan) => self.gate_and_run(id, name, &args, plan),
        };
        self.current_tool = None;
        let ran = std::mem::take(&mut self.current_ran);
        self.finish_tool(id, outcome, ran, started.elapsed().as_millis() as u64);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_tool(
        &self,
        id: &str,
        provider_id: &str,
        name: &str,
        shown: Option<&str>,
        title: &str,
        kind: &str,
        args: &Value,
        locations: &[Location],
    ) {
        let (inline, truncated) = bounded_args(args);
        // What clients call the tool: an MCP tool by its server's names (the model's
        // `<server>__<tool>` is sanitized and cut: it cannot be read back). Not for the calls
        // of a delegation: their names are the delegating code's to give (`shown`).
        let shown = match shown {
            Some(n) => Some(n.to_string()),
            None if self.delegating.is_none() => self
                .mcp_tools
                .iter()
                .find(|t| t.exposed == name)
                .map(|t| format!("{}/{}", t.server, t.name)),
            None => None,
        };
        let mut st = self.cell.lock();
        if let Some(a) = st.active.as_mut() {
            a.tools.push(crate::host_api::ops::ActiveTool {
                tool_call_id: id.into(),
                tool_name: name.into(),
                title: title.into(),
                activity_kind: kind.into(),
                args: inline.clone(),
                locations: locations.to_vec(),
                output_tail: String::new(),
                name: shown.clone(),
                parent_tool_call_id: self.delegating.clone(),
            });
        }
        let body = FrameBody::ToolStart {
            turn_id: self.spec.turn_id.clone(),
            tool_call_id: id.into(),
            tool_name: name.into(),
            title: title.into(),
            activity_kind: kind.into(),
            args: inline.clone(),
            args_truncated: truncated,
            locations: locations.to_vec(),
            parent_tool_call_id: self.delegating.clone(),
            name: shown.clone(),
        };
        self.cell.emit(&mut st, body);
        let item = TranscriptBody::ToolCall {
            tool_call_id: id.into(),
            tool_name: name.into(),
            title: title.into(),
            activity_kind: kind.into(),
            args: args.clone(),
            locations: locations.to_vec(),
            provider_call_id: (!provider_id.is_empty() && provider_id != id)
                .then(|| provider_id.to_string()),
            parent_tool_call_id: self.delegating.clone(),
            name: shown,
        };
        self.append(&mut st, vec![item]);
    }

    /// The current tool passed its gate: clients show it `in_progress` from here.
    /// `cancellable`: it can be cancelled alone — its token is armed here, where
    /// `turn.tool.cancel` finds it, before any client can be told so.
    pub(super) fn mark_running(&mut self, cancellable: bool) {
        let Some(id) = self.current_tool.clone() else {
            return;
        };
        self.current_ran = true;
        let mut st = self.cell.lock();
        // Only while this is still the session's active turn (the watchdog may have ended it
        // and another started): the next turn's calls are not this one's to arm.
        let turn_id = &self.spec.turn_id;
        if cancellable {
            let token = CancelToken::default();
            if let Some(a) = st.active.as_mut().filter(|a| a.turn_id == *turn_id) {
                a.cancellable_call = Some((id.clone(), token.clone()));
            }
            self.call_cancel = Some(token);
        }
        let body = FrameBody::ToolRunning {
            turn_id: self.spec.turn_id.clone(),
            tool_call_id: id,
            cancellable,
        };
        self.cell.emit(&mut st, body);
    }

    /// The running call is over: it can no longer be cancelled alone. Whether it was.
    fn disarm_call_cancel(&mut self) -> bool {
        let Some(token) = self.call_cancel.take() else {
            return false;
        };
        let turn_id = &self.spec.turn_id;
        if let Some(a) = self
            .cell
            .lock()
            .active
            .as_mut()
            .filter(|a| a.turn_id == *turn_id)
        {
            a.cancellable_call = None;
        }
        token.is_cancelled()
    }

    pub(super) fn finish_tool(&self, id: &str, outcome: ToolOutcome, ran: bool, duration_ms: u64) {
        let mut st = self.cell.lock();
        // Stuck past the stop bound: the watchdog settled this call `cancelled` and ended the
        // turn; the late result is dropped.
        if self.end.is_ended() {
            return;
        }
        if let Some(a) = st.active.as_mut() {
            a.tools.retain(|t| t.tool_call_id != id);
        }
        let body = FrameBody::ToolResult {
            turn_id: self.spec.turn_id.clone(),
            tool_call_id: id.into(),
            status: outcome.status,
            result: outcome.result.clone(),
            truncated: outcome.truncated,
            duration_ms: Some(duration_ms),
        };
        self.cell.emit(&mut st, body);
        let item = TranscriptBody::ToolResult {
            tool_call_id: id.into(),
            status: outcome.status,
            result: outcome.result,
            truncated: outcome.truncated,
            ran,
        };
        self.append(&mut st, vec![item]);
    }

    /// Runs a tool once the gate ([`gate::decide`]) lets it: every question it lists is asked
    /// in order, and the first that is not answered "allow" fails the tool.
    pub(super) fn gate_and_run(
        &mut self,
        id: &str,
        name: &str,
        args: &Value,
        plan: tools::ToolPlan,
    ) -> ToolOutcome {
        if let Some(refused) = self.pass_gate(id, name, args, &plan, false) {
            return refused;
        }
        self.run_gated(id, name, args)
    }

    /// The gate of every action, the model's own tools and a subagent's writes and commands
    /// alike: the mode, plan mode, the session's folders, kept rules, and the dialogs these
    /// call for (each naming tool call `id`). `None` when the action may run, else the
    /// refusal. `shown`: the person already allowed exactly this action in a dialog.
    pub(super) fn pass_gate(
        &mut self,
        id: &str,
        name: &str,
        args: &Value,
        plan: &tools::ToolPlan,
        shown: bool,
    ) -> Option<ToolOutcome> {
        // The host's private data is no principal's: refused outright, before any dialog (the
        // principal would answer its own boundary question).
        if let Some((path, _)) = plan.touches.iter().find(|(p, _)| self.confinement.hides(p)) {
            return Some(ToolOutcome::failed(
                crate::host::sandbox::Confinement::refusal(path),
            ));
        }
        let (mode, collaboration, has_plan, approved, remembered, session_rules) = {
            let st = self.cell.lock();
            let c = &st.session.configuration;
            let active = st.active.as_ref();
            (
                c.permission_mode,
                c.collaboration_mode,
                self.latest_plan(&st).is_some(),
                active.map(|a| a.approved_paths.clone()).unwrap_or_default(),
                plan.review
                    .is_some_and(|r| active.is_some_and(|a| a.remembered.contains(&r))),
                plan.review
                    .map(|_| st.permission_rules.clone())
                    .unwrap_or_default(),
            )
        };
        // Kept rules matter only to calls that need a permission: reads never look them up.
        let mut decided = plan.review.and_then(|review| {
            let workspace_rules = self.host.permissions.for_workspace(&self.workspace_key());
            let kept: Vec<&PermissionRule> = session_rules.iter().chain(&workspace_rules).collect();
            permissions::verdict(&kept, &self.rule_call(review, name, args, plan)).cloned()
        });
        // What a person allowed for more than the exact command in front of them — a kept
        // rule, "allow for this turn" — never widens the session's folders: what the command
        // would read outside them (its words resolved as `read_file` resolves a path, the
        // links below a folder it reads recursively) gets the boundary dialog, as `read_file`'s
        // path does; a command too large to check is asked as a whole. Only the exact action
        // a person approved in a dialog (`shown`, or the permission dialog below) is exempt.
        // Bypass mode asks nothing about commands (a person chose that; any shell word can
        // read anywhere), as before.
        let mut touches = plan.touches.clone();
        let mut remembered = remembered;
        let mut unchecked = false;
        let allowed_by_rule = decided
            .as_ref()
            .is_some_and(|r| r.decision == Decision::Allow);
        let denied_by_rule = decided
            .as_ref()
            .is_some_and(|r| r.decision == Decision::Deny);
        let unasked = match mode {
            PermissionMode::Ask => remembered || allowed_by_rule,
            PermissionMode::Bypass | PermissionMode::Explore => false,
        };
        if let (true, false, false, Some(review)) = (unasked, shown, denied_by_rule, plan.review) {
            if let Some(command) = self.rule_call(review, name, args, plan).command {
                match permissions::outside_reads(command, &self.cwd, &self.roots) {
                    permissions::Reads::Outside(paths) => {
                        touches.extend(paths.into_iter().map(|p| (p, "read")));
                    }
                    permissions::Reads::Unchecked(why) => {
                        log::info!("`{command}` is asked as a whole: {why}");
                        decided = None;
                        remembered = false;
                        unchecked = true;
                    }
                }
            }
        }
        // The person is told when a kept rule, not a question, decided: a refusal (unless
        // explore mode refuses first) or an allowance where ask mode would have asked.
        let told = decided.as_ref().filter(|r| match r.decision {
            Decision::Deny => mode != PermissionMode::Explore,
            Decision::Allow => mode == PermissionMode::Ask && !remembered && !shown,
        });
        let rule_notice = told.map(|r| {
            crate::host::notices::rule_decided(
                random_id("n"),
                r.decision == Decision::Allow,
                &r.target.describe(),
                session_rules.contains(r),
                &plan.title,
            )
        });
        let facts = gate::Facts {
            mode,
            collaboration,
            review: plan.review,
            has_plan,
            touches: &touches,
            roots: &self.roots,
            approved: &approved,
            remembered: remembered
                || shown
                || decided
                    .as_ref()
                    .is_some_and(|r| r.decision == Decision::Allow),
            rejected: decided
                .filter(|r| r.decision == Decision::Deny)
                .map(|r| r.target.describe()),
            unchecked,
        };
        let checks = match gate::decide(name, &facts) {
            gate::Gate::Refuse(why) => {
                if let Some(n) = rule_notice.filter(|_| facts.rejected.is_some()) {
                    self.notice(n);
                }
                return Some(ToolOutcome::failed(why));
            }
            gate::Gate::Ask(checks) => checks,
        };
        for check in checks {
            let refused = match check {
                gate::Check::ApprovePlan => self.approve_plan(id, name, &plan.title),
                gate::Check::Boundary(outside) => self.ask_boundary(id, &plan.title, outside),
                gate::Check::Permission(review) => {
                    self.ask_permission(id, name, args, plan, review)
                }
            };
            if refused.is_some() {
                return refused;
            }
        }
        if let Some(n) = rule_notice {
            self.notice(n);
        }
        None
    }

    /// Runs a tool that passed its gate.
    fn run_gated(&mut self, id: &str, name: &str, args: &Value) -> ToolOutcome {
        // A command the host runs itself (not in the editor's terminal) can be cancelled alone.
        let cancellable = tools::runs_a_command(name) && !self.has_client_service("terminal");
        self.mark_running(cancellable);
        match name {
            "update_plan" => self.update_plan(args),
            "ask_user" => self.ask_user(id, args),
            "read_artifact" => self.read_artifact(args),
            "delegate" if !self.agents.is_empty() => self.delegate(id, args),
            "delegate_graph" if !self.agents.is_empty() => self.delegate_graph(id, args),
            "goal_complete" => {
                let evidence = tools::text_arg(args, "evidence").unwrap_or("").trim();
                if evidence.is_empty() {
                    return ToolOutcome::failed("goal_complete needs `evidence`".into());
                }
                let goal_id = self.spec.live_goal.as_deref();
                match crate::host::goals::complete(&self.host, &self.cell, goal_id, evidence) {
                    Ok(msg) => ToolOutcome::completed(msg, false),
                    Err(msg) => ToolOutcome::failed(msg),
                }
            }
            "remember" => {
                let text = tools::text_arg(args, "text").unwrap_or("");
                let scope = tools::text_arg(args, "scope").unwrap_or("workspace");
                match self.remember(scope, text, "agent") {
                    Ok(msg) => ToolOutcome::completed(msg, false),
                    Err(e) => ToolOutcome::failed(e),
                }
            }
            _ if self.mcp_tools.iter().any(|t| t.exposed == name) => self.call_mcp(name, args),
            _ => {
                let outcome = tools::execute(self, name, args);
                let call_cancelled = self.disarm_call_cancel();
                if self.spec.cancel.is_cancelled() && outcome.status != ToolStatus::Completed {
                    return ToolOutcome {
                        status: ToolStatus::Cancelled,
                        ..outcome
                    };
                }
                if call_cancelled && outcome.status != ToolStatus::Completed {
                    // The person stopped this call; the turn goes on, its model told so. (One
                    // that finished before the cancel could stop it stays what it was.)
                    log::info!("tool call {id} cancelled alone; the turn goes on");
                    return ToolOutcome {
                        status: ToolStatus::Cancelled,
                        ..outcome
                    };
                }
                outcome
            }
        }
    }

    /// The outcome of a dialog nobody answered: the turn was stopped, or no answer came.
    fn unanswered(&self, otherwise: &str) -> ToolOutcome {
        if self.spec.cancel.is_cancelled() {
            ToolOutcome {
                status: ToolStatus::Cancelled,
                ..ToolOutcome::failed("The turn was stopped before this ran.".into())
            }
        } else {
            ToolOutcome::failed(otherwise.into())
        }
    }

    /// Asks for access outside the session's folders; remembered for the turn when allowed.
    fn ask_boundary(
        &mut self,
        id: &str,
        title: &str,
        outside: Vec<BoundaryPath>,
    ) -> Option<ToolOutcome> {
        let listed: Vec<String> = outside.iter().map(|b| b.path.clone()).collect();
        let request = InteractionRequest::SandboxBoundary {
            tool_call_id: id.into(),
            justification: format!(
                "{title} needs access outside the session's folders: {}",
                listed.join(", ")
            ),
            paths: outside,
        };
        match self.interact(request) {
            Some(InteractionAnswer::SandboxBoundary {
                decision: Decision::Allow,
            }) => {
                if let Some(a) = self.cell.lock().active.as_mut() {
                    a.approved_paths.extend(listed);
                }
                None
            }
            _ => Some(ToolOutcome::failed(format!(
                "Access outside the session's folders was denied: {}",
                listed.join(", ")
            ))),
        }
    }

    /// Ask mode: asks for this action (with the diff it would make).
    fn ask_permission(
        &mut self,
        id: &str,
        name: &str,
        args: &Value,
        plan: &tools::ToolPlan,
        review: Review,
    ) -> Option<ToolOutcome> {
        let diff = self.preview(name, args);
        let rule = permissions::propose(&self.rule_call(review, name, args, plan));
        let request = InteractionRequest::Permission {
            tool_call_id: id.into(),
            tool_name: name.into(),
            title: plan.title.clone(),
            review,
            args: Some(bounded_args(args).0),
            locations: plan.locations.clone(),
            diff: diff.map(Box::new),
            remember_for_turn_allowed: true,
            rule: rule.clone(),
        };
        match self.interact(request) {
            Some(InteractionAnswer::Permission {
                failure: Some(why),
                ..
            }) => Some(ToolOutcome::failed(format!(
                "The approval could not be obtained ({why}); nothing was done. This is not the user's refusal: ask the user, or try again."
            ))),
            Some(InteractionAnswer::Permission {
                decision,
                remember_for_turn,
                remember,
                ..
            }) => {
                if let (Some(scope), Some(target)) = (remember, rule) {
                    self.keep_rule(scope, decision, target);
                }
                if decision == Decision::Deny {
                    return Some(ToolOutcome::failed("The user denied this action.".into()));
                }
                if remember_for_turn {
                    if let Some(a) = self.cell.lock().active.as_mut() {
                        a.remembered.insert(review);
                    }
                }
                None
            }
            Some(_) => Some(ToolOutcome::failed("The user denied this action.".into())),
            None => Some(self.unanswered("No permission was given for this action.")),
        }
    }

    /// The key of this session's workspace rules and agent trust: its working directory, and
    /// its owner's (`host::permissions::owned_key`): one principal's "always" never answers
    /// another's dialog.
    pub(super) fn workspace_key(&self) -> String {
        crate::host::permissions::owned_key(
            self.cell.owner.as_deref(),
            &self.cwd.display().to_string(),
        )
    }

    fn rule_call<'a>(
        &'a self,
        review: Review,
        name: &'a str,
        args: &'a Value,
        plan: &'a tools::ToolPlan,
    ) -> permissions::Call<'a> {
        permissions::Call {
            review,
            tool: name,
            command: (name == "run_command")
                .then(|| tools::text_arg(args, "command"))
                .flatten(),
            touches: &plan.touches,
            cwd: &self.cwd,
        }
    }

    /// Keeps the person's decision as a rule; a rule that cannot be saved is said, not hidden.
    fn keep_rule(&self, scope: RuleScope, decision: Decision, target: RuleTarget) {
        let rule = PermissionRule {
            decision,
            target,
            created_at: crate::host_api::wire::now_ms(),
        };
        match scope {
            RuleScope::Session => {
                let mut st = self.cell.lock();
                st.permission_rules.retain(|r| r.target != rule.target);
                st.permission_rules.push(rule);
            }
            RuleScope::Workspace => {
                let what = rule.target.describe();
                if let Err(e) = self.host.permissions.add(&self.workspace_key(), rule) {
                    log::error!("cannot save a permission rule: {e}");
                    self.notice(crate::host::notices::rule_not_saved(
                        random_id("n"),
                        &what,
                        &e.to_string(),
                    ));
                }
            }
        }
    }

    /// The latest plan proposed in the session.
    fn latest_plan(&self, st: &crate::host::session::SessionState) -> Option<Vec<PlanEntry>> {
        st.transcript_items()
            .iter()
            .rev()
            .find_map(|i| match &i.body {
                TranscriptBody::Plan { entries } => Some(entries.clone()),
                _ => None,
            })
    }

    /// Plan mode: the first write or command needs the user's approval of the latest plan;
    /// approving it switches the session to `agent` (clients see the configuration change).
    /// Returns the refusal, or `None` when the plan is approved.
    pub(super) fn approve_plan(
        &mut self,
        id: &str,
        name: &str,
        title: &str,
    ) -> Option<ToolOutcome> {
        let entries = {
            let st = self.cell.lock();
            self.latest_plan(&st)
        }
        .unwrap_or_default();
        let request = InteractionRequest::Permission {
            tool_call_id: id.into(),
            tool_name: name.into(),
            title: format!("Approve the plan and start with: {title}"),
            review: Review::Plan,
            args: Some(json!({"plan": entries})),
            locations: vec![],
            diff: None,
            remember_for_turn_allowed: false,
            rule: None,
        };
        let answer = self.interact(request);
        let decided = match &answer {
            Some(InteractionAnswer::Permission { decision, .. }) => {
                Some(if *decision == Decision::Allow {
                    "approved"
                } else {
                    "rejected"
                })
            }
            _ => None,
        };
        if let Some(status) = decided {
            // The decision is the plan's too (`plan.query`).
            let mut st = self.cell.lock();
            let revision = crate::host::ops::knowledge::plan_view(&st).revision;
            if revision > 0 {
                let body = TranscriptBody::PlanDecision {
                    revision,
                    status: status.into(),
                };
                if let Err(e) = st.append_transcript(vec![(String::new(), body)]) {
                    log::error!(
                        "session {}: cannot record the plan decision: {}",
                        self.cell.id,
                        e.message
                    );
                }
                crate::host::ops::knowledge::emit_plan_state(&self.cell, &mut st);
            }
        }
        match answer {
            Some(InteractionAnswer::Permission {
                decision: Decision::Allow,
                ..
            }) => {
                let patch = crate::host_api::wire::ConfigurationPatch {
                    collaboration_mode: Some(CollaborationMode::Agent),
                    ..Default::default()
                };
                self.configure(&patch).err().map(ToolOutcome::failed)
            }
            None if self.spec.cancel.is_cancelled() => Some(self.unanswered("")),
            _ => Some(ToolOutcome::failed(
                "The user did not approve the plan. Stay in plan mode: revise it with update_plan or ask what to change.".into(),
            )),
        }
    }

    /// Calls an MCP tool on a helper thread, so a stop does not wait for the server.
    pub(super) fn call_mcp(&self, exposed: &str, args: &Value) -> ToolOutcome {
        let Some(tool) = self
            .mcp_tools
            .iter()
            .find(|t| t.exposed == exposed)
            .cloned()
        else {
            return ToolOutcome::failed(format!("there is no MCP tool named {exposed:?}"));
        };
        let server = self
            .cell
            .lock()
            .mcp
            .clone()
            .and_then(|set| set.server(&tool.server));
        let Some(server) = server else {
            return ToolOutcome::failed(format!(
                "MCP server `{}` is no longer running",
                tool.server
            ));
        };
        let (tx, rx) = bounded(1);
        let (name, args) = (tool.name.clone(), args.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("mcp-call-{name}"))
            .spawn(move || {
                let r = match server.lock() {
                    Ok(mut s) => s.call_tool(&name, args),
                    Err(_) => Err("the server is unusable".to_string()),
                };
                let _ = tx.send(r);
            });
        if let Err(e) = spawned {
            return ToolOutcome::failed(format!("cannot call the MCP tool: {e}"));
        }
        select! {
            recv(rx) -> r => match r {
                Ok(Ok((text, false))) => ToolOutcome::completed(text, false),
                Ok(Ok((text, true))) => ToolOutcome::failed(text),
                Ok(Err(e)) => ToolOutcome::failed(format!("MCP server `{}`: {e}", tool.server)),
                Err(_) => ToolOutcome::failed(format!("MCP server `{}` dropped the call", tool.server)),
            },
            recv(self.spec.cancel.receiver()) -> _ => ToolOutcome { status: ToolStatus::Cancelled, ..ToolOutcome::failed("The turn was stopped while the MCP tool ran.".into()) },
        }
    }

    pub(super) fn approved(&self, p: &Path) -> bool {
        self.cell
            .lock()
            .active
            .as_ref()
            .is_some_and(|a| a.approved_paths.iter().any(|ok| p.starts_with(ok)))
    }

    /// What an edit or write would change, for the permission dialog.
    /// The old side is read the way the tool will read it — through the editor when it offers
    /// files, so the person approves a change to their unsaved buffer, not to the disk.
    pub(super) fn preview(&mut self, name: &str, args: &Value) -> Option<FileDiff> {
        let path = tool_fs::resolve(&self.cwd, args.get("path")?.as_str()?);
        let old = tool_fs::current_text(self, &path);
        let new = match name {
            "write_file" => args.get("content")?.as_str()?.to_string(),
            "edit_file" => {
                let (o, n) = (
                    args.get("old_text")?.as_str()?,
                    args.get("new_text")?.as_str()?,
                );
                let current = old.as_deref()?;
                if o.is_empty() || !current.contains(o) {
                    return None;
                }
                if args
                    .get("replace_all")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
                {
                    current.replace(o, n)
                } else {
                    current.replacen(o, n, 1)
                }
            }
            _ => return None,
        };
        Some(tool_fs::file_diff(&self.cwd, &path, old.as_deref(), &new))
    }

    /// Adds a memory entry for this session (`scope`: user, workspace or session), retrying a
    /// revision race a few times. Returns what to tell the model or the person.
    pub(super) fn remember(&self, scope: &str, text: &str, source: &str) -> Result<String, String> {
        use crate::host_api::ops::{MemoryChange, MemoryOutcome};
        let session = self.cell.lock().session.clone();
        for _ in 0..3 {
            let whose = crate::host::memory::Whose::session(&session);
            let revision = self.host.memory.revision(whose);
            let change = MemoryChange::Add {
                scope: scope.into(),
                session_id: Some(session.id.clone()),
                text: text.into(),
                source: Some(source.into()),
            };
            match self
                .host
                .memory
                .mutate(whose, revision, change, Some(&session))
            {
                Ok(MemoryOutcome::Committed { .. }) => {
                    return Ok(format!("Remembered ({scope}): {}", text.trim()))
                }
                Ok(MemoryOutcome::RevisionConflict { .. }) => continue,
                Err(e) => return Err(format!("Could not remember that: {}", e.message)),
            }
        }
        Err("Could not remember that: memory kept changing; try again".into())
    }

    /// A page of a session artifact, as text for the model.
    pub(super) fn read_artifact(&self, args: &Value) -> ToolOutcome {
        let Some(wanted) = tools::text_arg(args, "artifact") else {
            return ToolOutcome::failed("read_artifact needs `artifact` (an id or a name)".into());
        };
        let offset = args.get("offset").and_then(Value::as_u64).unwrap_or(0);
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .unwrap_or(32 * 1024)
            .clamp(1, tools::RESULT_TEXT_LIMIT as u64);
        let dir = self.host.store.session_dir(&self.cell.id);
        let Some(a) = self.host.artifacts.find(&dir, wanted) else {
            return ToolOutcome::failed(format!("there is no artifact {wanted:?} in this session"));
        };
        match self
            .host
            .artifacts
            .read_bytes(&dir, &a.artifact_id, offset, limit)
        {
            Ok((total, data)) => {
                let end = offset + data.len() as u64;
                let more = if end < total {
                    format!("; continue with offset {end}")
                } else {
                    "; that is the end".into()
                };
                let text = format!(
                    "[artifact {} ({}, {}), bytes {offset}–{end} of {total}{more}]\n{}",
                    a.artifact_id,
                    a.name,
                    a.mime_type,
                    String::from_utf8_lossy(&data)
                );
                ToolOutcome::completed(text, false)
            }
            Err(e) => ToolOutcome::failed(format!("cannot read artifact {wanted}: {}", e.message)),
        }
    }

    pub(super) fn update_plan(&self, args: &Value) -> ToolOutcome {
        let entries: Vec<PlanEntry> = args
            .get("entries")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let content = e.get("content").and_then(Value::as_str)?.to_string();
                let status = match e.get("status").and_then(Value::as_str) {
                    Some(s @ ("pending" | "in_progress" | "completed")) => s.to_string(),
                    _ => "pending".into(),
                };
                let priority = match e.get("priority").and_then(Value::as_str) {
                    Some(p @ ("high" | "medium" | "low")) => p.to_string(),
                    _ => "medium".into(),
                };
                Some(PlanEntry {
                    content,
                    status,
                    priority,
                })
            })
            .collect();
        if entries.is_empty() {
            return ToolOutcome::failed("update_plan needs `entries`: [{content, status}]".into());
        }
        let mut st = self.cell.lock();
        let body = FrameBody::PlanUpdate {
            turn_id: self.spec.turn_id.clone(),
            entries: entries.clone(),
        };
        self.cell.emit(&mut st, body);
        self.append(
            &mut st,
            vec![TranscriptBody::Plan {
                entries: entries.clone(),
            }],
        );
        crate::host::ops::knowledge::emit_plan_state(&self.cell, &mut st);
        ToolOutcome::completed(format!("Plan updated ({} steps).", entries.len()), false)
    }

    pub(super) fn ask_user(&mut self, id: &str, args: &Value) -> ToolOutcome {
        let questions: Vec<Question> =
            match args.get("questions").cloned().map(serde_json::from_value) {
                Some(Ok(q)) => q,
                _ => {
                    return ToolOutcome::failed(
                        "ask_user needs `questions`: [{question, options: [{label}]}]".into(),
                    )
                }
            };
        if questions.is_empty() || questions.len() > 3 {
            return ToolOutcome::failed("ask_user takes one to three questions".into());
        }
        let request = InteractionRequest::Question {
            tool_call_id: id.into(),
            questions: questions.clone(),
        };
        let answers = match self.interact(request) {
            Some(InteractionAnswer::Question {
                unsupported: true, ..
            }) => return unshown_questions(&questions),
            Some(InteractionAnswer::Question { answers, .. }) => answers,
            _ => vec![None; questions.len()],
        };
        let lines: Vec<String> = questions
            .iter()
            .enumerate()
            .map(|(i, q)| match answers.get(i).cloned().flatten() {
                Some(a) => format!("{} → {a}", q.question),
                None => format!("{} → (no answer)", q.question),
            })
            .collect();
        ToolOutcome {
            status: ToolStatus::Completed,
            truncated: false,
            result: ToolResultContent::Json {
                value: json!({"answers": answers, "summary": lines.join("\n")}),
            },
        }
    }
}

pub(super) fn bounded_args(args: &Value) -> (Value, bool) {
    let s = args.to_string();
    if s.len() <= ARGS_INLINE_LIMIT {
        return (args.clone(), false);
    }
    // Keep the shape where possible: cut long strings.
    let cut = match args {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| match v {
                    Value::String(s) if s.len() > 4096 => {
                        let mut t = s.clone();
                        tool_fs::cut(&mut t, 4096);
                        t.push_str("…[truncated]");
                        (k.clone(), Value::String(t))
                    }
                    other => (k.clone(), other.clone()),
                })
                .collect(),
        ),
        other => other.clone(),
    };
    (cut, true)
}
