//! A delegation's `session/update`s other than its answer: its tool calls shown as tool calls
//! of this session under the delegate call, their statuses, its plan as text.

use super::*;

impl Turn {
    /// One `session/update` of the agent other than a piece of its answer
    /// ([`Turn::agent_message`] shows those), shown in this session: its tool calls and its
    /// plan; any other kind is not shown.
    pub(super) fn subagent_update(
        &mut self,
        parent: &str,
        name: &str,
        update: AgentUpdate,
        calls: &mut ChildCalls,
        terminals: &subagents::terminals::Terminals,
    ) {
        match update {
            AgentUpdate::ToolCall(u) => {
                self.child_call(name, &u, Seen::Announced, calls, terminals)
            }
            AgentUpdate::Update(SessionUpdate::ToolCallUpdate(u)) => {
                self.child_call(name, &u, Seen::Updated, calls, terminals)
            }
            AgentUpdate::Update(SessionUpdate::Plan { entries }) => {
                let steps: Vec<String> = entries
                    .iter()
                    .map(|e| {
                        format!(
                            "[{}] {}",
                            to_json(&e.status).as_str().unwrap_or("?"),
                            e.content
                        )
                    })
                    .collect();
                let current = self.current_tool.replace(parent.to_string());
                self.output(
                    "stdout",
                    &format!("\n{name}'s plan:\n{}\n", steps.join("\n")),
                );
                self.current_tool = current;
            }
            AgentUpdate::Update(_) | AgentUpdate::Unknown(_) => {}
        }
    }

    /// A `tool_call` or `tool_call_update` of the agent: shown (an update of a call it never
    /// announced too, as a new call; a late one of a settled call not), what it carries kept,
    /// its status applied.
    fn child_call(
        &mut self,
        name: &str,
        u: &ToolCallUpdate,
        seen: Seen,
        calls: &mut ChildCalls,
        terminals: &subagents::terminals::Terminals,
    ) {
        let sub = u.tool_call_id.as_str();
        if self.show_child(name, calls, sub, u, seen).is_none() {
            return;
        }
        calls.absorb(sub, u, |id| terminals.text_of(id));
        if let Some(status) = u.status {
            self.sub_status(status, calls, sub);
        }
    }

    /// The agent's call `sub` as a tool call of this session, announced the first time it is
    /// seen (in a `tool_call`, an update, or a permission request).
    pub(super) fn show_child(
        &mut self,
        name: &str,
        calls: &mut ChildCalls,
        sub: &str,
        u: &ToolCallUpdate,
        seen: Seen,
    ) -> Option<String> {
        let (ours, new) = calls.open(sub, seen)?;
        if new {
            let title = agent_words(u.title.as_deref().unwrap_or("tool"), 120);
            let kind = match u.kind {
                Some(ToolKind::Read) => "read",
                Some(ToolKind::Edit | ToolKind::Delete | ToolKind::Move) => "edit",
                Some(ToolKind::Search) => "search",
                Some(ToolKind::Execute) => "command",
                _ => "tool",
            };
            let args = u.raw_input.clone().unwrap_or(json!({}));
            // Its tool's name as the agent gives it (ACP `ToolCall.name`), only shown, when
            // it is a plain name — no `/`, so it never reads as one of this session's MCP tools.
            let tool = u.name.as_deref().filter(|n| {
                (1..=64).contains(&n.len())
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
            });
            self.start_tool(
                &ours,
                "",
                "delegate",
                tool,
                &format!("{name}: {title}"),
                kind,
                &args,
                &[],
            );
        }
        Some(ours)
    }

    /// A subagent tool call's status: running, or settled with what it showed.
    pub(super) fn sub_status(&mut self, status: ToolCallStatus, calls: &mut ChildCalls, sub: &str) {
        let settled = match status {
            ToolCallStatus::Completed => ToolStatus::Completed,
            ToolCallStatus::Failed => ToolStatus::Failed,
            ToolCallStatus::InProgress => {
                let Some(ours) = calls.get(sub) else {
                    return;
                };
                let mut st = self.cell.lock();
                let body = FrameBody::ToolRunning {
                    turn_id: self.spec.turn_id.clone(),
                    tool_call_id: ours.into(),
                    cancellable: false,
                };
                self.cell.emit(&mut st, body);
                return;
            }
            _ => return,
        };
        let Some(done) = calls.settle(sub) else {
            return;
        };
        self.finish_tool(
            &done.ours,
            ToolOutcome {
                status: settled,
                result: done.result,
                truncated: done.truncated,
            },
            true,
            0,
        );
    }

    /// Tool calls the agent left open: failed, with why.
    /// (A call the agent only named in a permission request that was allowed is settled as
    /// allowed: the agent reported nothing more of it.)
    pub(super) fn settle_calls(&mut self, calls: &mut ChildCalls, why: &str) {
        for (ours, dialog_only) in calls.drain() {
            if dialog_only {
                let said = "Allowed (the agent reported nothing more of it).".to_string();
                self.finish_tool(&ours, ToolOutcome::completed(said, false), false, 0);
                continue;
            }
            self.finish_tool(&ours, ToolOutcome::failed(why.to_string()), false, 0);
        }
    }
}
