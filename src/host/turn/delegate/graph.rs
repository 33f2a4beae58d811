//! Graph mode (`delegate_graph`): tasks with dependencies, run in waves of at most
//! [`GRAPH_PARALLEL`] agents, each wave's tasks given the results they depend on.

use super::*;
use crate::acp::types::from_agents::read_object;

/// At most this many agents run at once in a graph's wave.
const GRAPH_PARALLEL: usize = 4;

impl Turn {
    /// Graph mode: tasks with dependencies, each a tool call under this one, started when its
    /// dependencies have finished (with their results appended to its task), in waves of at
    /// most [`GRAPH_PARALLEL`]. A failed task stops its dependents, saying so.
    pub(in crate::host::turn) fn delegate_graph(&mut self, id: &str, args: &Value) -> ToolOutcome {
        struct Task {
            id: String,
            agent: String,
            task: String,
            deps: Vec<String>,
            session: Option<String>,
        }
        let mut tasks: Vec<Task> = vec![];
        for t in GraphArgs::of(args).tasks {
            let t = read_object::<GraphTask>(&t).unwrap_or_default();
            let (Some(tid), Some(agent), Some(task)) = (t.id, t.call.agent, t.call.task) else {
                return ToolOutcome::failed("every task needs `id`, `agent` and `task`".into());
            };
            if tid.is_empty()
                || tid.len() > 64
                || !tid
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return ToolOutcome::failed(format!(
                    "task id {tid:?}: ids are letters, digits, - and _ (at most 64)"
                ));
            }
            if tasks.iter().any(|x| x.id == tid) {
                return ToolOutcome::failed(format!("two tasks have the id {tid:?}"));
            }
            tasks.push(Task {
                id: tid,
                agent,
                task,
                deps: t
                    .depends_on
                    .iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect(),
                session: t.call.session,
            });
        }
        if tasks.is_empty() || tasks.len() > 32 {
            return ToolOutcome::failed("delegate_graph takes 1 to 32 tasks".into());
        }
        for t in &tasks {
            if let Some(d) = t.deps.iter().find(|d| !tasks.iter().any(|x| &x.id == *d)) {
                return ToolOutcome::failed(format!(
                    "task {} depends on {d:?}, which is not a task",
                    t.id
                ));
            }
        }
        // Each task's result: Ok(answer) or Err(why).
        let mut results: HashMap<String, Result<String, String>> = HashMap::new();
        let previous = self.delegating.replace(id.to_string());
        // Each task is a tool call of its own, under the delegate_graph call.
        let show_task = |this: &Self, child: &str, t: &Task| {
            this.start_tool(
                child,
                "",
                "delegate",
                Some("delegate"),
                &format!("{}: {}", t.agent, tool_fs::cut_words(&t.task, 60)),
                "tool",
                &json!({"agent": t.agent, "task": t.task}),
                &[],
            );
        };
        while results.len() < tasks.len() {
            if self.spec.cancel.is_cancelled() {
                break;
            }
            let mut wave = vec![];
            let mut stopped = false;
            let pending: Vec<&Task> = tasks
                .iter()
                .filter(|t| !results.contains_key(&t.id))
                .collect();
            for t in pending {
                let child = format!("{id}.{}", t.id);
                if let Some(bad) = t
                    .deps
                    .iter()
                    .find(|d| matches!(results.get(*d), Some(Err(_))))
                {
                    let why = format!("not run: the task it depends on, {bad}, failed");
                    show_task(self, &child, t);
                    self.finish_tool(&child, ToolOutcome::failed(why.clone()), false, 0);
                    results.insert(t.id.clone(), Err(why));
                    stopped = true;
                    continue;
                }
                if t.deps.iter().all(|d| matches!(results.get(d), Some(Ok(_))))
                    && wave.len() < GRAPH_PARALLEL
                {
                    wave.push(t);
                }
            }
            if wave.is_empty() {
                // Nothing ready and nothing newly stopped: what is left waits on itself.
                if !stopped && results.len() < tasks.len() && !self.spec.cancel.is_cancelled() {
                    let stuck: Vec<String> = tasks
                        .iter()
                        .filter(|t| !results.contains_key(&t.id))
                        .map(|t| t.id.clone())
                        .collect();
                    for tid in stuck {
                        results.insert(tid, Err("not run: its dependencies form a cycle".into()));
                    }
                }
                continue;
            }
            let mut wanted = vec![];
            for t in wave {
                let child = format!("{id}.{}", t.id);
                let mut text = t.task.clone();
                if !t.deps.is_empty() {
                    text.push_str("\n\nResults of the tasks this one depends on:");
                    for d in &t.deps {
                        if let Some(Ok(r)) = results.get(d) {
                            // Its session handle is for the model, not for the next agent.
                            let r = r.rfind("\n\n[session ").map_or(r.as_str(), |at| &r[..at]);
                            text.push_str(&format!("\n\n[{d}]\n{r}"));
                        }
                    }
                }
                show_task(self, &child, t);
                wanted.push((
                    t.id.clone(),
                    Wanted {
                        id: child,
                        agent: t.agent.clone(),
                        task: text,
                        session: t.session.clone(),
                    },
                ));
            }
            let (tids, wanted): (Vec<String>, Vec<Wanted>) = wanted.into_iter().unzip();
            let children: Vec<String> = wanted.iter().map(|w| w.id.clone()).collect();
            let mut jobs = vec![];
            for ((tid, child), job) in tids.into_iter().zip(children).zip(self.start_jobs(wanted)) {
                match job {
                    Ok(job) => jobs.push((tid, job)),
                    Err(o) => {
                        let o = *o;
                        let why = match &o.result {
                            ToolResultContent::Text { text } => text.clone(),
                            _ => "it could not start".into(),
                        };
                        self.finish_tool(&child, o, false, 0);
                        results.insert(tid, Err(why));
                    }
                }
            }
            let (ids, mut running): (Vec<String>, Vec<Job>) = jobs.into_iter().unzip();
            self.run_jobs(&mut running);
            for (tid, job) in ids.into_iter().zip(running) {
                let outcome = job
                    .outcome
                    .unwrap_or_else(|| ToolOutcome::failed("the delegation did not finish".into()));
                let text = match &outcome.result {
                    ToolResultContent::Text { text } => text.clone(),
                    _ => String::new(),
                };
                results.insert(
                    tid,
                    if outcome.status == ToolStatus::Completed {
                        Ok(text)
                    } else {
                        Err(text)
                    },
                );
                self.finish_tool(&job.id, outcome, true, 0);
            }
        }
        self.delegating = previous;
        if self.spec.cancel.is_cancelled() {
            return ToolOutcome {
                status: ToolStatus::Cancelled,
                result: ToolResultContent::Text {
                    text: "The delegations were cancelled.".into(),
                },
                truncated: false,
            };
        }
        let mut summary = String::new();
        let mut failed = 0;
        for t in &tasks {
            match results.get(&t.id) {
                Some(Ok(r)) => {
                    summary.push_str(&format!("[{}] {} — done:\n{r}\n\n", t.id, t.agent))
                }
                Some(Err(e)) => {
                    failed += 1;
                    summary.push_str(&format!("[{}] {} — failed: {e}\n\n", t.id, t.agent));
                }
                None => {}
            }
        }
        let mut summary = summary.trim_end().to_string();
        crate::host_api::keep_tail(&mut summary, tools::RESULT_TEXT_LIMIT);
        if failed == 0 {
            ToolOutcome::completed(summary, false)
        } else {
            ToolOutcome::failed(format!(
                "{failed} of {} tasks failed.\n\n{summary}",
                tasks.len()
            ))
        }
    }
}
