//! What a model step streams: text and thinking deltas (bounded frames, in-flight text kept
//! for `session.open`), usage, and the assistant message once it is complete.

use super::*;

impl Turn {
    pub(super) fn delta(&self, is_text: bool, message_id: &str, acc: &mut String, t: String) {
        // A provider may send one huge chunk: frames stay bounded.
        if t.len() > DELTA_FRAME_BYTES {
            for piece in frame_pieces(&t) {
                self.delta(is_text, message_id, acc, piece.to_string());
            }
            return;
        }
        let mut st = self.cell.make_room(self.cell.lock());
        let start_offset = acc.len() as u64;
        acc.push_str(&t);
        if let Some(active) = st.active.as_mut() {
            match active
                .streams
                .iter_mut()
                .find(|s| s.message_id == message_id)
            {
                Some(s) => s.text.push_str(&t),
                None => active.streams.push(ActiveStream {
                    kind: if is_text { "text" } else { "thinking" },
                    message_id: message_id.to_string(),
                    text: t.clone(),
                }),
            }
        }
        let (turn_id, message_id) = (self.spec.turn_id.clone(), message_id.to_string());
        let body = if is_text {
            FrameBody::TextDelta {
                turn_id,
                message_id,
                start_offset,
                text: t,
                complete: false,
            }
        } else {
            FrameBody::ThinkingDelta {
                turn_id,
                message_id,
                start_offset,
                text: t,
                complete: false,
            }
        };
        self.cell.emit(&mut st, body);
    }

    /// One model call's usage: counted (durably, as a `usage` item), and shown with the
    /// context figures and, with prices configured, the session's cost.
    pub(super) fn usage(&self, model: &str, delta: TokenUsage, window: u64) {
        let providers = self.host.providers();
        let mut st = self.cell.lock();
        st.usage_totals.add(&delta);
        st.usage_by_model
            .entry(model.to_string())
            .or_default()
            .add(&delta);
        let item = TranscriptBody::Usage {
            of_turn_id: self.spec.turn_id.clone(),
            model: model.to_string(),
            usage: delta.clone(),
        };
        if let Err(e) = st.append_transcript(vec![(String::new(), item)]) {
            log::error!(
                "session {}: cannot record usage: {}",
                self.cell.id,
                e.message
            );
        }
        let body = FrameBody::Usage {
            turn_id: Some(self.spec.turn_id.clone()),
            model: Some(model.to_string()),
            context: Some(ContextUsage {
                used_tokens: delta.input_tokens.saturating_add(delta.output_tokens),
                window_tokens: window,
            }),
            delta,
            totals: st.usage_totals.clone(),
            cost: st.cost(&providers.prices),
        };
        self.cell.emit(&mut st, body);
    }

    /// Closes the streamed messages and makes them durable.
    pub(super) fn persist_assistant(&self, message_id: &str, text: &str, thinking: &str) {
        let mut st = self.cell.lock();
        for (is_text, id, acc) in [
            (false, format!("th_{}", &message_id[2..]), thinking),
            (true, message_id.to_string(), text),
        ] {
            if !acc.is_empty() {
                self.close_stream(&mut st, is_text, id, acc.len());
            }
        }
        if let Some(a) = st.active.as_mut() {
            a.streams.clear();
        }
        if text.is_empty() && thinking.is_empty() {
            return;
        }
        let body = TranscriptBody::Assistant {
            message_id: message_id.to_string(),
            text: (!text.is_empty()).then(|| text.to_string()),
            thinking: (!thinking.is_empty()).then(|| thinking.to_string()),
        };
        self.append(&mut st, vec![body]);
    }

    /// The last frame of a streamed message: `complete`, no text, offset = its whole length.
    pub(super) fn close_stream(
        &self,
        st: &mut crate::host::session::SessionState,
        is_text: bool,
        message_id: String,
        len: usize,
    ) {
        let (turn_id, start_offset) = (self.spec.turn_id.clone(), len as u64);
        let body = if is_text {
            FrameBody::TextDelta {
                turn_id,
                message_id,
                start_offset,
                text: String::new(),
                complete: true,
            }
        } else {
            FrameBody::ThinkingDelta {
                turn_id,
                message_id,
                start_offset,
                text: String::new(),
                complete: true,
            }
        };
        self.cell.emit(st, body);
    }

    pub(super) fn append(
        &self,
        st: &mut crate::host::session::SessionState,
        bodies: Vec<TranscriptBody>,
    ) {
        // A turn its watchdog ended records nothing more (its stuck tool's late result).
        if self.end.is_ended() {
            return;
        }
        super::ending::append(&self.cell, &self.spec.turn_id, st, bodies);
    }
}
