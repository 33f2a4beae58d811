//! Compacting the model's context into a summary: `/compact`, and by itself when a turn's
//! input nears the model's context window (`MAKA_COMPACT_AT_PERCENT` of it). One path for
//! both: `compaction` frames (in progress, then completed, failed or cancelled), the summary
//! kept as a `summary` item that `session/load` replays, its model call counted in usage.

use super::history::estimate_tokens;
use super::*;
use crate::host_api::wire::{
    Compaction, CompactionStatus, CompactionTrigger, ContextUsage, Fallback, NoticeFallback,
};

/// A summary longer than this is cut (frames and the model's next input stay bounded).
const SUMMARY_BYTES: usize = 64 * 1024;

const COMPACT_REQUEST: &str = "Summarise the conversation so far for your own later use: the user's goals, decisions made, files and commands involved, and open tasks. Reply with the summary only.";

/// What a compaction came to.
pub(super) enum Compacted {
    /// Too little to compact.
    Nothing,
    /// The model answered with nothing; the context is as it was.
    Empty,
    Done,
}

impl Turn {
    /// `/compact`: everything before this turn's prompt.
    pub(super) fn compact(&mut self) -> Terminal {
        match self.compact_context(CompactionTrigger::Manual) {
            Ok(Compacted::Nothing) => self.say("Nothing to compact yet.".into()),
            Ok(Compacted::Empty) => {
                self.say("The model returned an empty summary; nothing was compacted.".into())
            }
            Ok(Compacted::Done) => {}
            Err(t) => return t,
        }
        Terminal::completed("end_turn")
    }

    /// Before a model step: compacts what came before this turn when the step's input
    /// (`messages`) reaches the threshold of `window`. Once per turn at most, and never the
    /// running turn's own items (if they alone fill the window, the turn runs to its limit).
    /// `Err` only when the turn was stopped meanwhile; a failure is shown and the step goes on.
    pub(super) fn compact_if_full(
        &mut self,
        messages: &[Value],
        window: u64,
    ) -> Result<bool, Terminal> {
        let percent = u64::from(self.host.tunables.compact_at_percent);
        if self.compacted || percent == 0 || window == 0 {
            return Ok(false);
        }
        if estimate_tokens(messages) * 100 < window * percent {
            return Ok(false);
        }
        self.compacted = true;
        match self.compact_context(CompactionTrigger::Automatic) {
            Ok(Compacted::Done) => Ok(true),
            Ok(_) => Ok(false),
            Err(t) if t.outcome == TurnOutcome::Cancelled => Err(t),
            Err(t) => {
                log::warn!(
                    "session {}: automatic compaction failed: {}",
                    self.cell.id,
                    t.failure_message.as_deref().unwrap_or(&t.reason)
                );
                Ok(false)
            }
        }
    }

    /// Summarises the conversation before this turn (`/compact`: before its own prompt) with
    /// the session's model, and keeps the summary in its place.
    fn compact_context(&mut self, trigger: CompactionTrigger) -> Result<Compacted, Terminal> {
        let (configuration, mut messages, through, kept) = {
            let st = self.cell.lock();
            let items = st.transcript_items();
            // This turn's items stay after the summary (its prompt, its steps so far) — from
            // the prompt it works on: a resumed run's is the interrupted turn's.
            let own = items
                .iter()
                .position(|i| i.turn_id == self.spec.turn_id)
                .unwrap_or(items.len());
            let prompt = items
                .iter()
                .rposition(|i| matches!(i.body, TranscriptBody::User { steered: false, .. }));
            let first = prompt.map_or(own, |p| p.min(own));
            let (before, kept) = match trigger {
                // Everything: the turn's own "/compact" is dropped below.
                CompactionTrigger::Manual => (build_messages(&self.system, items), vec![]),
                CompactionTrigger::Automatic => (
                    build_messages(&self.system, &items[..first]),
                    build_messages(&self.system, &items[first..]),
                ),
            };
            let through = match trigger {
                CompactionTrigger::Manual => None,
                CompactionTrigger::Automatic => first.checked_sub(1).map(|i| items[i].message_seq),
            };
            (st.session.configuration.clone(), before, through, kept)
        };
        match trigger {
            // The system prompt and this turn's own "/compact" do not count.
            CompactionTrigger::Manual if messages.len() <= 3 => return Ok(Compacted::Nothing),
            CompactionTrigger::Manual => {
                messages.pop();
            }
            CompactionTrigger::Automatic if through.is_none() || messages.len() <= 2 => {
                return Ok(Compacted::Nothing)
            }
            CompactionTrigger::Automatic => {}
        }
        let providers = self.host.providers();
        let (conn, model) = providers
            .resolve(&configuration.model_target)
            .map_err(|e| Terminal::failed(FailureClass::CapabilityUnavailable, e.message))?;
        let window = model.context_window;
        // What would be summarised (the system prompt stays as it is).
        let earlier = estimate_tokens(messages.get(1..).unwrap_or(&[]));
        if trigger == CompactionTrigger::Automatic && earlier * 10 < window {
            // Not worth a model call: what would be summarised is under a tenth of the window
            // (the running turn itself is what fills it).
            return Ok(Compacted::Nothing);
        }
        let before = estimate_tokens(&messages) + estimate_tokens(kept.get(1..).unwrap_or(&[]));
        // The system message the context keeps (the same in every region).
        let system = messages.first().cloned().unwrap_or_else(|| json!({}));
        let compacted = messages.len() - 1;
        let compaction_id = random_id("c");
        let state = |status, summary: Option<String>, error: Option<String>, fallback| Compaction {
            compaction_id: compaction_id.clone(),
            status,
            trigger,
            summary,
            error,
            fallback,
        };
        self.emit_compaction(state(CompactionStatus::InProgress, None, None, None));
        let summary = match self.summarise(&configuration, (conn, model), messages, &compaction_id)
        {
            Ok(s) => s,
            Err(t) => {
                let status = if t.outcome == TurnOutcome::Cancelled {
                    CompactionStatus::Cancelled
                } else {
                    CompactionStatus::Failed
                };
                self.emit_compaction(state(status, None, t.failure_message.clone(), None));
                return Err(t);
            }
        };
        if summary.is_empty() {
            let error = "The model returned an empty summary.".to_string();
            self.emit_compaction(state(CompactionStatus::Failed, None, Some(error), None));
            return Ok(Compacted::Empty);
        }
        let after = estimate_tokens(&[system, super::history::summary_message(&summary)])
            + estimate_tokens(kept.get(1..).unwrap_or(&[]));
        let fallback = match trigger {
            // Exactly the reply `/compact` always gave.
            CompactionTrigger::Manual => Fallback {
                message_id: format!("m_{}_cmd", self.spec.run_id),
                otherwise: NoticeFallback::Message,
                text: format!(
                    "Compacted {compacted} earlier messages into a summary (context ≈{before} → ≈{after} tokens).\n\n{summary}"
                ),
            },
            CompactionTrigger::Automatic => Fallback {
                message_id: format!("compact_{compaction_id}"),
                otherwise: NoticeFallback::Thought,
                text: format!(
                    "The conversation neared the model's context window: {compacted} earlier messages were compacted into a summary (context ≈{before} → ≈{after} tokens).\n"
                ),
            },
        };
        let mut st = self.cell.lock();
        let item = TranscriptBody::Summary {
            text: summary.clone(),
            compaction_id: compaction_id.clone(),
            trigger,
            through_message_seq: through,
            fallback: Some(fallback.clone()),
        };
        if let Err(e) = self
            .cell
            .append(&mut st, vec![(self.spec.turn_id.clone(), item)])
        {
            // Not kept: the context stays as it was, and the person is told so.
            drop(st);
            log::error!("session {}: the summary was not kept: {e}", self.cell.id);
            let said = "The summary could not be saved; the conversation was not compacted.";
            self.emit_compaction(state(
                CompactionStatus::Failed,
                None,
                Some(said.into()),
                None,
            ));
            return Err(Terminal::failed(FailureClass::RuntimeError, said));
        }
        let usage = FrameBody::Usage {
            turn_id: Some(self.spec.turn_id.clone()),
            model: None,
            delta: TokenUsage::default(),
            totals: st.usage_totals.clone(),
            context: Some(ContextUsage {
                used_tokens: after,
                window_tokens: window,
            }),
            cost: st.cost(&providers.prices),
        };
        self.cell.emit(&mut st, usage);
        drop(st);
        let done = state(
            CompactionStatus::Completed,
            Some(summary),
            None,
            Some(fallback),
        );
        self.emit_compaction(done);
        Ok(Compacted::Done)
    }

    fn emit_compaction(&self, compaction: Compaction) {
        let mut st = self.cell.lock();
        self.cell.emit(
            &mut st,
            FrameBody::Compaction {
                turn_id: self.spec.turn_id.clone(),
                compaction,
            },
        );
    }

    /// One model call without tools: the summary of `messages`, trimmed and bounded. Its
    /// retries are told like a step's (under ids of compaction `id`).
    fn summarise(
        &mut self,
        configuration: &crate::host_api::wire::Configuration,
        (conn, model): (&models::Connection, &models::ModelInfo),
        mut messages: Vec<Value>,
        id: &str,
    ) -> Result<String, Terminal> {
        messages.push(json!({"role": "user", "content": COMPACT_REQUEST}));
        let window = model.context_window;
        let request = ModelRequest {
            model: model.id.clone(),
            messages,
            tools: vec![],
            thinking_level: configuration.thinking_level.clone(),
            turn_prompt: std::sync::Arc::clone(&self.spec.prompt_text),
            step: 0,
        };
        let rx = models::start_step(conn, request, self.spec.cancel.clone());
        let mut summary = String::new();
        loop {
            let idle = self.host.tunables.provider_idle_timeout;
            let event = select! {
                recv(rx) -> ev => ev.ok(),
                recv(self.spec.cancel.receiver()) -> _ => return Err(Terminal::cancelled()),
                default(idle) => return Err(Terminal::failed(FailureClass::ProviderTimeout, idle_message(idle))),
            };
            match event {
                Some(ModelEvent::Text(t)) => {
                    if summary.len() < SUMMARY_BYTES {
                        summary.push_str(&t);
                    }
                }
                Some(ModelEvent::Usage {
                    input,
                    output,
                    cached,
                }) => self.usage(&model.id, TokenUsage::new(input, output, cached), window),
                Some(ModelEvent::Retry {
                    attempt,
                    delay_ms,
                    reason,
                }) => {
                    let notice = crate::host::notices::provider_retry(
                        &self.spec.turn_id,
                        Some(id),
                        attempt.into(),
                        delay_ms,
                        &reason,
                    );
                    self.notice(notice);
                }
                Some(ModelEvent::Finish(_)) => break,
                Some(ModelEvent::Error {
                    class,
                    message,
                    details,
                }) => return Err(Terminal::failed(class, message).with_details(details)),
                Some(_) => {}
                None if self.spec.cancel.is_cancelled() => return Err(Terminal::cancelled()),
                None => {
                    return Err(Terminal::failed(
                        FailureClass::ProviderError,
                        "the model stream ended without finishing",
                    ))
                }
            }
        }
        let mut summary = summary.trim().to_string();
        if summary.len() > SUMMARY_BYTES {
            let mut end = SUMMARY_BYTES;
            while !summary.is_char_boundary(end) {
                end -= 1;
            }
            summary.truncate(end);
            summary.push_str("\n[the summary is cut here]");
        }
        Ok(summary)
    }
}
