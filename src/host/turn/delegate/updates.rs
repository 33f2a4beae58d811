//! A delegation's `session/update`s other than its answer: its tool calls shown as tool calls
//! of this session under the delegate call, their statuses, its plan as text.

use super::*;

impl Turn {
    /// One `session/update` of the agent other than a piece of its answer
    /// ([`Turn::agent_message`] shows those), shown in this session.
    pub(super) fn subagent_update(
        &mut self,
        parent: &str,
        name: &str,
        params: &Value,
        calls: &mut ChildCalls,
        terminals: &subagents::terminals::Terminals,
    ) {
        let Some(u) = params.get("update") else {
            return;
        };
        let kind = u.get("sessionUpdate").and_then(Value::as_str).unwrap_or("");
        match kind {
            "tool_call" | "tool_call_update" => {
                let Some(sub) = u.get("toolCallId").and_then(Value::as_str) else {
                    return;
                };
                // An update of a call it never announced is shown too (as a new call); a late
                // one of a settled call is not.
                let seen = if kind == "tool_call" {
                    Seen::Announced
                } else {
                    Seen::Updated
                };
                if self.show_child(name, calls, sub, u, seen).is_none() {
                    return;
                }
                calls.absorb(sub, u, |id| terminals.text_of(id));
                if let Some(status) = u.get("status").and_then(Value::as_str) {
                    self.sub_status(status, calls, sub);
                }
            }
            "plan" => {
                let steps: Vec<String> = u
                    .get("entries")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|e| {
                        Some(format!(
                            "[{}] {}",
                            e.get("status")?.as_str()?,
                            e.get("content")?.as_str()?
                        ))
                    })
                    .collect();
                let current = self.current_tool.replace(parent.to_string());
                self.output(
                    "stdout",
                    &format!("\n{name}'s plan:\n{}\n", steps.join("\n")),
                );
                self.current_tool = current;
            }
            _ => {}
        }
    }

    /// The agent's call `sub` as a tool call of this session, announced the first time it is
    /// seen (in a `tool_call`, an update, or a permission request).
    pub(super) fn show_child(
        &mut self,
        name: &str,
        calls: &mut ChildCalls,
        sub: &str,
        u: &Value,
        seen: Seen,
    ) -> Option<String> {
        let (ours, new) = calls.open(sub, seen)?;
        if new {
            let title = agent_words(
                u.get("title").and_then(Value::as_str).unwrap_or("tool"),
                120,
            );
            let kind = match u.get("kind").and_then(Value::as_str) {
                Some("read") => "read",
                Some("edit" | "delete" | "move") => "edit",
                Some("search") => "search",
                Some("execute") => "command",
                _ => "tool",
            };
            let args = u.get("rawInput").cloned().unwrap_or(json!({}));
            // Its tool's name as the agent gives it (ACP `ToolCall.name`), only shown, when
            // it is a plain name — no `/`, so it never reads as one of this session's MCP tools.
            let tool = u.get("name").and_then(Value::as_str).filter(|n| {
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
    pub(super) fn sub_status(&mut self, status: &str, calls: &mut ChildCalls, sub: &str) {
        let settled = match status {
            "completed" => ToolStatus::Completed,
            "failed" => ToolStatus::Failed,
            "in_progress" => {
                let Some(ours) = calls.get(sub) else {
                    return;
                };
                let mut st = self.cell.lock();
                let body = FrameBody::ToolRunning {
                    turn_id: self.spec.turn_id.clone(),
                    tool_call_id: ours.into(),
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
