//! What a model step streams: text and thinking deltas (bounded frames, in-flight text kept
//! for `session.open`), usage, and the assistant message once it is complete.

use super::*;

impl Turn {
    pub(super) fn delta(&self, is_text: bool, message_id: &str, acc: &mut String, t: String) {
        // A provider may send one huge chunk: frames stay bounded.
        if t.len() > DELTA_FRAME_BYTES {
            let mut rest = t.as_str();
            while !rest.is_empty() {
                let mut end = rest.len().min(DELTA_FRAME_BYTES);
                while !rest.is_char_boundary(end) {
                    end -= 1;
                }
                self.delta(is_text, message_id, acc, rest[..end].to_string());
                rest = &rest[end..];
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

    pub(super) fn usage(&self, input: u64, output: u64, window: u64) {
        let mut st = self.cell.lock();
        st.usage_totals.input_tokens += input;
        st.usage_totals.output_tokens += output;
        let body = FrameBody::Usage {
            turn_id: Some(self.spec.turn_id.clone()),
            delta: TokenUsage {
                input_tokens: input,
                output_tokens: output,
                reasoning_tokens: 0,
            },
            totals: st.usage_totals.clone(),
            context: Some(ContextUsage {
                used_tokens: input + output,
                window_tokens: window,
            }),
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
        let items = bodies
            .into_iter()
            .map(|b| (self.spec.turn_id.clone(), b))
            .collect();
        match st.append_transcript(items) {
            Ok(through) => {
                self.cell.emit(
                    st,
                    FrameBody::TranscriptAdvanced {
                        through_message_seq: through,
                    },
                );
            }
            Err(e) => log::error!("session {}: {e}", self.cell.id),
        }
    }
}
