//! Interactions: a dialog the turn waits for (permission, sandbox boundary, question) and
//! its closing.

use super::*;

impl Turn {
    /// Asks the user through an interaction and waits. `None` = closed without an answer.
    pub(super) fn interact(&mut self, request: InteractionRequest) -> Option<InteractionAnswer> {
        let request = without_secrets(request);
        let (tx, rx) = bounded(1);
        let interaction_id = random_id("i");
        {
            let mut st = self.cell.lock();
            if st.pending_interaction_count() >= crate::host::session::MAX_PENDING_INTERACTIONS {
                log::warn!(
                    "session {}: too many pending interactions; denying",
                    self.cell.id
                );
                return None;
            }
            let interaction = Interaction {
                interaction_id: interaction_id.clone(),
                session_id: self.cell.id.clone(),
                turn_id: self.spec.turn_id.clone(),
                status: "pending".into(),
                request,
                outcome: None,
            };
            st.interactions.insert(
                interaction_id.clone(),
                InteractionSlot {
                    interaction: interaction.clone(),
                    answer_tx: Some(tx),
                },
            );
            self.append(
                &mut st,
                vec![TranscriptBody::Interaction {
                    interaction: interaction.clone(),
                }],
            );
            self.set_status(&mut st, TurnStatus::WaitingForUser);
            self.cell
                .emit(&mut st, FrameBody::InteractionRequest { interaction });
            if let Some(goal_id) = &self.spec.goal_id {
                // The goal waits for the person (who may not be here yet) instead of guessing.
                crate::host::goals::waiting(&self.host, &self.cell, &mut st, goal_id, true);
            }
        }
        let outcome = select! {
            recv(rx) -> o => o.ok(),
            recv(self.spec.cancel.receiver()) -> _ => None,
        };
        let mut st = self.cell.lock();
        let answer = match outcome {
            Some(InteractionOutcome::Answer { answer }) => Some(answer),
            _ => {
                self.close_interaction(&mut st, &interaction_id, "turn_stopped");
                None
            }
        };
        self.set_status(&mut st, TurnStatus::Running);
        if let Some(goal_id) = &self.spec.goal_id {
            crate::host::goals::waiting(&self.host, &self.cell, &mut st, goal_id, false);
        }
        answer
    }

    pub(super) fn close_interaction(
        &self,
        st: &mut crate::host::session::SessionState,
        id: &str,
        reason: &str,
    ) {
        super::ending::close_interaction(&self.cell, &self.spec.turn_id, st, id, reason);
    }
}

/// `ask_user` when the client cannot show questions: nothing is chosen for the person (no
/// dialog an auto-approver could answer); the model asks in its reply instead, and the tool
/// call shows the questions too.
pub(super) fn unshown_questions(questions: &[Question]) -> ToolOutcome {
    let mut text = String::from(
        "This editor cannot show questions, so none was answered. Ask them in your reply and wait for the user's next message:",
    );
    for q in questions {
        let labels: Vec<&str> = q.options.iter().map(|o| o.label.as_str()).collect();
        text.push_str(&format!("\n- {} ({})", q.question, labels.join(" / ")));
    }
    ToolOutcome::completed(text, false)
}

/// The request with every known secret redacted (its title, arguments, questions): a dialog is
/// shown to the person, sent to every client following the session and kept in the transcript.
fn without_secrets(request: InteractionRequest) -> InteractionRequest {
    let Ok(mut tree) = serde_json::to_value(&request) else {
        return request;
    };
    if !crate::secrets::redact_json(&mut tree) {
        return request;
    }
    serde_json::from_value(tree).unwrap_or(request)
}
