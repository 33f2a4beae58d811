//! A prompt's answer, from how its turn ended: the stop reason ACP knows for each outcome,
//! the error sentence of a failed turn, and the turn's token usage as `_meta.quota` (and ACP's
//! unstable `usage`). Pure.

use crate::acp::errors::MakaCode;
use crate::acp::types::{PromptResponse, StopReason};
use crate::host_api::wire::{FailureClass, TokenUsage, TurnOutcome, TurnSnapshot, TurnStatus};
use crate::jsonrpc::ResponseError;
use serde_json::{json, Value};

/// A prompt's answer.
pub type Answer = Result<PromptResponse, ResponseError>;

/// The answer a prompt for `turn_id` gets: after the client's `session/cancel` it is
/// `cancelled`, whatever happened meanwhile (ACP); every answer names its turn
/// (`_meta.maka.turnId`).
pub fn final_answer(answer: Answer, turn_id: &str, cancelled: bool) -> Answer {
    let answer = if cancelled {
        Ok(PromptResponse::new(StopReason::Cancelled))
    } else {
        answer
    };
    answer.map(|mut r| {
        let meta = r.meta.get_or_insert_with(|| json!({}));
        meta["maka"]["turnId"] = json!(turn_id);
        r
    })
}

/// The turn's token usage on its prompt's answer: `_meta.quota` as claude-agent-acp,
/// codex-acp and gemini-cli report it (the total and each model's: `token_count`,
/// `model_usage`), and ACP's own unstable `usage` to a client that opted in. Nothing when the
/// provider reported no usage.
pub fn with_usage(
    mut r: PromptResponse,
    usage: &[(String, TokenUsage)],
    acp_usage: bool,
) -> PromptResponse {
    if usage.is_empty() {
        return r;
    }
    let count = |u: &TokenUsage| {
        json!({
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cached_input_tokens": u.cached_tokens,
            "reasoning_output_tokens": u.reasoning_tokens,
            "total_tokens": u.input_tokens.saturating_add(u.output_tokens),
        })
    };
    let mut total = TokenUsage::default();
    for (_, u) in usage {
        total.add(u);
    }
    let models: Vec<Value> = usage
        .iter()
        .map(|(model, u)| json!({"model": model, "token_count": count(u)}))
        .collect();
    let meta = r.meta.get_or_insert_with(|| json!({}));
    meta["quota"] = json!({"token_count": count(&total), "model_usage": models});
    if acp_usage {
        r.usage = Some(json!({
            "totalTokens": total.input_tokens.saturating_add(total.output_tokens),
            "inputTokens": total.input_tokens,
            "outputTokens": total.output_tokens,
            "thoughtTokens": total.reasoning_tokens,
            "cachedReadTokens": total.cached_tokens,
        }));
    }
    r
}

/// Why a turn failed, as the host said it.
pub struct Failure<'a> {
    pub class: Option<FailureClass>,
    /// One sentence for the person.
    pub message: Option<&'a str>,
    pub details: Option<&'a Value>,
}

/// The `session/prompt` result for a terminal frame.
/// (A client that cancelled gets `cancelled` instead: [`crate::acp::session::AcpSession::finish_prompt`].)
pub fn terminal_result(
    turn_id: &str,
    outcome: TurnOutcome,
    reason: &str,
    failure: Failure,
) -> Answer {
    let stop = |r| Ok(PromptResponse::new(r));
    match outcome {
        TurnOutcome::Completed if reason == "step_limit" => stop(StopReason::MaxTurnRequests),
        TurnOutcome::Completed => stop(StopReason::EndTurn),
        // Stopped by someone else (another client, a host shutdown): not this client's cancel.
        TurnOutcome::Cancelled => Ok(PromptResponse {
            stop_reason: StopReason::EndTurn,
            usage: None,
            meta: Some(json!({"maka": {"outcome": "cancelled", "reason": reason}})),
        }),
        TurnOutcome::MaxTokens => stop(StopReason::MaxTokens),
        TurnOutcome::Refused => stop(StopReason::Refusal),
        TurnOutcome::Failed => Err(turn_failed(turn_id, failure)),
    }
}

/// The host's sentence is the message (it says what happened and what to do); the class and
/// the details (an HTTP status, the provider's answer) go in `data`.
fn turn_failed(turn_id: &str, f: Failure) -> ResponseError {
    let class = f.class.unwrap_or(FailureClass::RuntimeError);
    let message = match f.message {
        Some(m) if !m.trim().is_empty() => sentence(m),
        _ => "The turn failed; the agent's log has the details.".to_string(),
    };
    let mut extra = json!({"failureClass": class, "turnId": turn_id});
    if let Some(d) = f.details {
        extra["details"] = d.clone();
    }
    MakaCode::TurnFailed.error_with(message, extra)
}

/// Capitalised and ending with a full stop (older hosts send lower-case fragments).
fn sentence(m: &str) -> String {
    let m = m.trim();
    let mut out: String = m
        .chars()
        .take(1)
        .flat_map(char::to_uppercase)
        .chain(m.chars().skip(1))
        .collect();
    if !out.ends_with(['.', '!', '?', '…']) {
        out.push('.');
    }
    out
}

/// The prompt result from a `turn.query` snapshot (used after a resync).
pub fn snapshot_result(snapshot: &TurnSnapshot) -> Answer {
    let outcome = match snapshot.status {
        TurnStatus::Completed => TurnOutcome::Completed,
        TurnStatus::Cancelled => TurnOutcome::Cancelled,
        TurnStatus::MaxTokens => TurnOutcome::MaxTokens,
        TurnStatus::Refused => TurnOutcome::Refused,
        _ => TurnOutcome::Failed,
    };
    terminal_result(
        &snapshot.turn_id,
        outcome,
        snapshot.reason.as_deref().unwrap_or("end_turn"),
        Failure {
            class: snapshot.failure_class,
            message: snapshot.failure_message.as_deref(),
            details: snapshot.failure_details.as_ref().filter(|d| !d.is_null()),
        },
    )
}

#[cfg(test)]
mod quota_tests {
    use super::*;

    /// A turn whose provider reported no usage has no quota; one that did has its total and
    /// each model's.
    #[test]
    fn the_quota_is_the_turns_usage_by_model() {
        let r = with_usage(PromptResponse::new(StopReason::EndTurn), &[], true);
        assert_eq!(r.meta, None);
        let r = with_usage(
            PromptResponse::new(StopReason::EndTurn),
            &[
                ("a".into(), TokenUsage::new(10, 2, 4)),
                ("b".into(), TokenUsage::new(u64::MAX, 1, 0)),
            ],
            false,
        );
        assert_eq!(r.usage, None, "ACP's usage only to a client that opted in");
        let quota = &r.meta.unwrap()["quota"];
        assert_eq!(quota["token_count"]["input_tokens"], u64::MAX, "saturates");
        assert_eq!(quota["token_count"]["output_tokens"], 3);
        assert_eq!(quota["model_usage"][0]["model"], "a");
        assert_eq!(
            quota["model_usage"][0]["token_count"]["cached_input_tokens"],
            4
        );
        assert_eq!(
            quota["model_usage"][1]["token_count"]["total_tokens"],
            u64::MAX
        );
    }

    /// Every answer names its turn; after the client's cancel it is `cancelled`, whatever the
    /// turn's end said (an error included).
    #[test]
    fn the_final_answer_names_its_turn_and_a_cancel_wins() {
        let failed = Err(MakaCode::TurnFailed.error("The turn failed."));
        let a = final_answer(failed.clone(), "t1", true).unwrap();
        assert_eq!(a.stop_reason, StopReason::Cancelled);
        assert_eq!(a.meta.unwrap()["maka"]["turnId"], "t1");
        assert!(final_answer(failed, "t1", false).is_err());
    }
}
