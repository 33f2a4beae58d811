//! Serving running delegations until each has its outcome: their answers and messages as they
//! come, a piece of an answer batched with the pieces queued behind it, a cancel told to each
//! agent and then enforced.

use super::*;
use crate::acp::types::from_agents::read_object;

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
        let mut next = Some(FromAgent::read(&name, message, &mut job.unread));
        while let Some(message) = next.take() {
            match message {
                FromAgent::Piece(first) => next = self.show_answer(job, first),
                FromAgent::Update(u) => {
                    self.subagent_update(&job.id, &name, u, &mut job.calls, &job.terminals)
                }
                FromAgent::Nothing => {}
                FromAgent::Request(r, responder) => self.serve_subagent(
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
    pub(super) fn show_answer(&mut self, job: &mut Job, mut text: String) -> Option<FromAgent> {
        let mut next = None;
        // Bounded in messages too (empty pieces add no bytes): a cancel and the other jobs are
        // looked at again soon whatever the agent sends.
        let mut taken = 1;
        while text.len() < DELTA_FRAME_BYTES && taken < BATCH_PIECES {
            taken += 1;
            let Ok(m) = job.agent.incoming.try_recv() else {
                break;
            };
            match FromAgent::read(&job.agent.name, m, &mut job.unread) {
                FromAgent::Piece(t) => text.push_str(&t),
                other => {
                    next = Some(other);
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
                self.settle_calls(&mut job.calls, "the agent finished without settling it");
                // A missing stop reason (or one that is not a string) is the end of the turn,
                // as it always was here: a sloppy agent's answer is its answer. A reason ACP
                // does not define fails the delegation naming it: a newer schema's reason is as
                // likely a failure as a success.
                let reason = match read_object::<Answered>(&v).unwrap_or_default().stop_reason {
                    None => Ok(StopReason::EndTurn),
                    Some(given) => {
                        serde_json::from_value::<StopReason>(Value::String(given.clone()))
                            .map_err(|_| given)
                    }
                };
                match reason {
                    Ok(StopReason::EndTurn) if job.answer.trim().is_empty() => {
                        ToolOutcome::completed(
                            format!("Agent {name} finished without an answer."),
                            false,
                        )
                    }
                    Ok(StopReason::EndTurn) => {
                        ToolOutcome::completed(std::mem::take(&mut job.answer), false)
                    }
                    Ok(other) => ToolOutcome::failed(format!(
                        "agent {name} stopped ({}); its answer so far:\n{}",
                        to_json(&other).as_str().unwrap_or("?"),
                        job.answer
                    )),
                    Err(unknown) => ToolOutcome::failed(format!(
                        "agent {name} stopped ({}); its answer so far:\n{}",
                        crate::host_api::head(&unknown, 100),
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

/// The most of a parse error of an agent's message that is quoted (it may repeat the agent's
/// words).
pub(super) const MAX_ERROR: usize = 300;

/// How many updates of one delegation that do not read are logged.
const LOGGED_UNREAD: usize = 5;

/// A message of a delegation's agent, read as ACP types.
pub(super) enum FromAgent {
    /// The text of an `agent_message_chunk`: a piece of its answer.
    Piece(String),
    /// Any other `session/update` (an unknown kind included, by name).
    Update(AgentUpdate),
    Request(Request, Responder),
    /// A notification the host does not act on, or an update that does not read (logged).
    Nothing,
}

impl FromAgent {
    /// `unread` counts the updates of this agent that did not read: the first
    /// [`LOGGED_UNREAD`] are logged, so an agent that sends nothing else cannot flood the log.
    pub(super) fn read(agent: &str, message: Incoming, unread: &mut usize) -> FromAgent {
        let n = match message {
            Incoming::Request(r, responder) => return FromAgent::Request(r, responder),
            Incoming::Notification(n) if n.method == "session/update" => n,
            Incoming::Notification(_) => return FromAgent::Nothing,
        };
        match read_object::<SessionNotification>(&n.params) {
            Ok(SessionNotification {
                update:
                    AgentUpdate::Update(SessionUpdate::AgentMessageChunk(Chunk {
                        content: ContentBlock::Text { text },
                        ..
                    })),
                ..
            }) => FromAgent::Piece(text),
            Ok(n) => FromAgent::Update(n.update),
            Err(e) => {
                *unread += 1;
                if *unread <= LOGGED_UNREAD {
                    log::warn!(
                        "agent {agent}: a session/update that does not read as ACP's is skipped: {}{}",
                        crate::host_api::head(&e.to_string(), MAX_ERROR),
                        if *unread == LOGGED_UNREAD {
                            " (further ones of this delegation are not logged)"
                        } else {
                            ""
                        }
                    );
                }
                FromAgent::Nothing
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::Notification;

    fn update(u: Value) -> Incoming {
        Incoming::Notification(Notification {
            method: "session/update".into(),
            params: json!({"sessionId": "s", "update": u}),
        })
    }

    /// What each message of an agent becomes: a piece of its answer, an update shown, or
    /// nothing (tolerated or refused, never a panic).
    #[test]
    fn an_agents_messages_read_as_acp_types() {
        #[derive(Debug, PartialEq)]
        enum Is {
            Piece(&'static str),
            ToolCall,
            ToolCallUpdate,
            Plan(usize),
            Unknown(&'static str),
            Other,
            Nothing,
        }
        let rows: Vec<(&str, Incoming, Is)> = vec![
            (
                "a piece of the answer",
                update(
                    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hi"}}),
                ),
                Is::Piece("Hi"),
            ),
            (
                "an image in the answer: not text, not shown",
                update(
                    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": "", "mimeType": "image/png"}}),
                ),
                Is::Other,
            ),
            (
                "a thought: taken by name, not shown",
                update(
                    json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}}),
                ),
                Is::Unknown("agent_thought_chunk"),
            ),
            (
                "a tool call",
                update(
                    json!({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "ls", "kind": "execute"}),
                ),
                Is::ToolCall,
            ),
            (
                "an update",
                update(
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "completed"}),
                ),
                Is::ToolCallUpdate,
            ),
            (
                "a plan",
                update(
                    json!({"sessionUpdate": "plan", "entries": [{"content": "a", "priority": "low", "status": "pending"}]}),
                ),
                Is::Plan(1),
            ),
            (
                "a kind from the future",
                update(json!({"sessionUpdate": "hologram", "x": 1})),
                Is::Unknown("hologram"),
            ),
            (
                "a call without an id: refused (logged), nothing shown",
                update(json!({"sessionUpdate": "tool_call", "title": "ls"})),
                Is::Nothing,
            ),
            (
                "no update at all",
                Incoming::Notification(Notification {
                    method: "session/update".into(),
                    params: json!({"sessionId": "s"}),
                }),
                Is::Nothing,
            ),
            (
                "params that are not an object",
                Incoming::Notification(Notification {
                    method: "session/update".into(),
                    params: json!([1, 2]),
                }),
                Is::Nothing,
            ),
            (
                "another notification",
                Incoming::Notification(Notification {
                    method: "_agent/thing".into(),
                    params: json!({}),
                }),
                Is::Nothing,
            ),
        ];
        let mut unread = 0;
        for (name, message, want) in rows {
            let got = match FromAgent::read("helper", message, &mut unread) {
                FromAgent::Piece(t) => {
                    assert_eq!(Is::Piece("Hi"), want, "{name}: {t}");
                    assert_eq!(t, "Hi");
                    continue;
                }
                FromAgent::Update(AgentUpdate::ToolCall(_)) => Is::ToolCall,
                FromAgent::Update(AgentUpdate::Update(SessionUpdate::ToolCallUpdate(_))) => {
                    Is::ToolCallUpdate
                }
                FromAgent::Update(AgentUpdate::Update(SessionUpdate::Plan { entries })) => {
                    Is::Plan(entries.len())
                }
                FromAgent::Update(AgentUpdate::Unknown(k)) => {
                    match want {
                        Is::Unknown(w) => assert_eq!(k, w, "{name}"),
                        _ => panic!("{name}: taken by name ({k}), expected {want:?}"),
                    }
                    continue;
                }
                FromAgent::Update(_) => Is::Other,
                FromAgent::Request(..) => panic!("{name}: a request"),
                FromAgent::Nothing => Is::Nothing,
            };
            assert_eq!(got, want, "{name}");
        }
        assert_eq!(
            unread, 3,
            "the refused updates are counted (and only the first logged)"
        );
    }
}

/// What the host reads of an agent's answer to its prompt: the stop reason's name, if it gave
/// one as a string.
#[derive(Default, serde::Deserialize)]
struct Answered {
    #[serde(
        rename = "stopReason",
        default,
        deserialize_with = "crate::acp::types::default_on_error"
    )]
    stop_reason: Option<String>,
}
