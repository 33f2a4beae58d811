//! Serving running delegations until each has its outcome: their answers and messages as they
//! come, a piece of an answer batched with the pieces queued behind it, a cancel told to each
//! agent and then enforced.

use super::*;

/// How long cancelled agents get, together, to answer `cancelled` before they are stopped.
const CANCEL_GRACE: Duration = Duration::from_millis(800);
/// At most this many queued pieces of a subagent's answer are shown as one output delta.
const BATCH_PIECES: usize = 256;

impl Turn {
    /// Serves the jobs until each has its outcome — their answers, updates and requests, as they
    /// come — or the turn is stopped (each agent is told, then stopped). Agents are stopped at
    /// the end.
    pub(super) fn run_jobs(&mut self, jobs: &mut [Job]) {
        let cancel = self.spec.cancel.receiver().clone();
        loop {
            let open: Vec<usize> = (0..jobs.len())
                .filter(|&i| jobs[i].outcome.is_none())
                .collect();
            if open.is_empty() {
                break;
            }
            // (job, 0 = its answer, 1 = its messages) per select index.
            let mut which = vec![];
            let mut sel = crossbeam_channel::Select::new();
            for &i in &open {
                sel.recv(jobs[i].prompt.receiver());
                which.push((i, 0));
                if jobs[i].incoming_open {
                    sel.recv(&jobs[i].agent.incoming);
                    which.push((i, 1));
                }
            }
            let cancel_index = sel.recv(&cancel);
            let op = sel.select();
            let index = op.index();
            if index == cancel_index {
                let _ = op.recv(&cancel);
                drop(sel);
                for &i in &open {
                    let job = &mut jobs[i];
                    job.agent
                        .notify("session/cancel", json!({"sessionId": job.agent.session_id}));
                }
                // A well-behaved agent answers `cancelled` promptly; all are stopped after at
                // most CANCEL_GRACE in all, whatever they do.
                let deadline = std::time::Instant::now() + CANCEL_GRACE;
                for &i in &open {
                    let _ = jobs[i].prompt.receiver().recv_deadline(deadline);
                    let name = jobs[i].agent.name.clone();
                    self.settle_calls(&mut jobs[i].calls, "the delegation was cancelled");
                    jobs[i].outcome = Some(cancelled(&name));
                }
                break;
            }
            let (i, kind) = which[index];
            if kind == 0 {
                let answer = op.recv(jobs[i].prompt.receiver());
                drop(sel);
                self.answered(&mut jobs[i], answer);
            } else {
                let message = op.recv(&jobs[i].agent.incoming);
                drop(sel);
                let job = &mut jobs[i];
                match message {
                    Ok(m) => self.agent_message(job, m),
                    // Its output closed: its answer (an error) comes next.
                    Err(_) => job.incoming_open = false,
                }
            }
        }
        for job in jobs.iter_mut() {
            job.agent.stop();
            job.terminals = Default::default(); // kills what it left running
        }
    }

    /// An update or request of a job's agent.
    ///
    /// A piece of its answer takes the pieces already queued behind it along (up to
    /// [`DELTA_FRAME_BYTES`] or [`BATCH_PIECES`]), shown as one output delta: a fast agent
    /// costs this turn a frame per batch of what is queued rather than per piece, and nothing
    /// waits for pieces not yet sent. The first message that is not such a piece is handled
    /// next, so the order stays the agent's.
    pub(super) fn agent_message(&mut self, job: &mut Job, message: Incoming) {
        let previous = self.delegating.replace(job.id.clone());
        let name = job.agent.name.clone();
        let mut next = Some(message);
        while let Some(message) = next.take() {
            if let Some(first) = answer_piece(&message) {
                let first = first.to_string();
                next = self.show_answer(job, first);
                continue;
            }
            match message {
                Incoming::Notification(n) if n.method == "session/update" => {
                    self.subagent_update(&job.id, &name, &n.params, &mut job.calls, &job.terminals)
                }
                Incoming::Notification(_) => {}
                Incoming::Request(r, responder) => self.serve_subagent(
                    &name,
                    r,
                    responder,
                    &mut job.calls,
                    &mut job.terminals,
                    &mut job.allowed,
                ),
            }
        }
        self.delegating = previous;
    }

    /// Shows `text`, a piece of the job's answer, with the pieces queued behind it; returns
    /// the first other message taken from the queue, to be handled next.
    pub(super) fn show_answer(&mut self, job: &mut Job, mut text: String) -> Option<Incoming> {
        let mut next = None;
        // Bounded in messages too (empty pieces add no bytes): a cancel and the other jobs are
        // looked at again soon whatever the agent sends.
        let mut taken = 1;
        while text.len() < DELTA_FRAME_BYTES && taken < BATCH_PIECES {
            taken += 1;
            let Ok(m) = job.agent.incoming.try_recv() else {
                break;
            };
            match answer_piece(&m) {
                Some(t) => text.push_str(t),
                None => {
                    next = Some(m);
                    break;
                }
            }
        }
        if !text.is_empty() {
            job.answer.push_str(&text);
            crate::host_api::keep_tail(&mut job.answer, tools::RESULT_TEXT_LIMIT);
            // Streams into the delegate call's content.
            let current = self.current_tool.replace(job.id.clone());
            self.output("stdout", &text);
            self.current_tool = current;
        }
        next
    }

    /// A job's agent answered its prompt (or could not): its outcome.
    pub(super) fn answered(
        &mut self,
        job: &mut Job,
        answer: Result<crate::jsonrpc::CallResult, crossbeam_channel::RecvError>,
    ) {
        let name = job.agent.name.clone();
        // Its updates before the answer are already read (one reader, in wire order) but may
        // still wait in the other channel: take them in first.
        while let Ok(m) = job.agent.incoming.try_recv() {
            self.agent_message(job, m);
        }
        let outcome = match answer {
            Ok(Ok(v)) => {
                let reason = v
                    .get("stopReason")
                    .and_then(Value::as_str)
                    .unwrap_or("end_turn");
                self.settle_calls(&mut job.calls, "the agent finished without settling it");
                match reason {
                    "end_turn" if job.answer.trim().is_empty() => ToolOutcome::completed(
                        format!("Agent {name} finished without an answer."),
                        false,
                    ),
                    "end_turn" => ToolOutcome::completed(std::mem::take(&mut job.answer), false),
                    other => ToolOutcome::failed(format!(
                        "agent {name} stopped ({other}); its answer so far:\n{}",
                        job.answer
                    )),
                }
            }
            Ok(Err(e)) if !job.agent.is_closed() => {
                self.settle_calls(&mut job.calls, "the agent failed");
                ToolOutcome::failed(format!("agent {name} failed: {}", e.message))
            }
            _ => {
                self.settle_calls(&mut job.calls, "the agent stopped");
                ToolOutcome::failed(format!(
                    "{}; its work so far:\n{}",
                    job.agent.stopped(),
                    job.answer
                ))
            }
        };
        let mut outcome = outcome;
        if let ToolResultContent::Text { text } = &mut outcome.result {
            // Its session stays open to a later delegation: the model is told which.
            text.push_str("\n\n");
            text.push_str(&job.session_note);
        }
        job.outcome = Some(outcome);
    }
}

/// The text of an `agent_message_chunk` update (a piece of the agent's answer), if it is one.
pub(super) fn answer_piece(message: &Incoming) -> Option<&str> {
    let Incoming::Notification(n) = message else {
        return None;
    };
    if n.method != "session/update" {
        return None;
    }
    let u = n.params.get("update")?;
    if u.get("sessionUpdate")?.as_str()? != "agent_message_chunk" {
        return None;
    }
    u.get("content")?.get("text")?.as_str()
}
