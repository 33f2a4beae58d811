//! The deterministic scripted provider, for tests and the offline demo.
//!
//! A script is JSON: `{"rules": [{"when": "substring of the prompt", "responses": [R, R, …]}],
//! "default": [R, …], "thinkingLevels": ["low", "high"]}`. A turn uses the first rule whose
//! `when` occurs in its prompt (`"*"` matches all); its N-th model call plays response N.
//! `"models": [{"id": "fast", "label": "Fast", "thinkingLevels": ["low"]}, …]` offers several
//! models (all play the same script); without it there is one model, `script`, with the
//! top-level `thinkingLevels`. A response is a list of steps:
//!
//! | step | effect |
//! |---|---|
//! | `{"text": "…"}` | streamed word by word |
//! | `{"thinking": "…"}` | streamed as thinking |
//! | `{"repeat": {"text": "x", "times": 1000}}` | that many text deltas (benchmarks) |
//! | `{"tool": "read_file", "args": {…}, "id"?: "…"}` | a tool call |
//! | `{"delayMs": 200}` | a pause (cancellable) |
//! | `{"echo": "user"}` | streams `heard: ` + every user message the model was sent, joined by ` \| ` |
//! | `{"usage": {"input": 10, "output": 5, "cached": 0}}` | token usage |
//! | `{"fail": "provider_error", "message": "…"}` | the call fails |
//! | `{"finish": "max_tokens" \| "refusal"}` | the call ends that way |
//!
//! A turn whose rule has run out of responses gets a final "Done." so it always ends.

use super::{send, Finish, ModelEvent, ModelRequest};
use crate::host::session::CancelToken;
use crate::host_api::wire::FailureClass;
use crossbeam_channel::Sender;
use serde_json::Value;
use std::time::Duration;

/// `MAKA_SCRIPT`: the scripted connection (`script`).
pub fn connect(
    settings: &crate::config::ProviderSettings,
) -> Option<Result<super::Connection, String>> {
    let src = settings.script.as_ref()?;
    Some(match Script::load(src) {
        Ok(script) => Ok(super::Connection {
            slug: "script".into(),
            label: "Scripted (offline)".into(),
            models: script.models(),
            provider: std::sync::Arc::new(script),
        }),
        Err(e) => Err(format!("MAKA_SCRIPT: {e}")),
    })
}

impl super::Provider for Script {
    fn stream(&self, req: &ModelRequest, cancel: &CancelToken, tx: &Sender<ModelEvent>) {
        self.play(req, cancel, tx)
    }
}

pub struct Script {
    rules: Vec<(String, Vec<Vec<Value>>)>,
    default: Vec<Vec<Value>>,
    pub thinking_levels: Vec<String>,
    models: Vec<super::ModelInfo>,
}

impl Script {
    /// `src` is inline JSON (starting with `{`) or a file path.
    pub fn load(src: &str) -> Result<Script, String> {
        let text = if src.trim_start().starts_with('{') {
            src.to_string()
        } else {
            std::fs::read_to_string(src).map_err(|e| format!("cannot read {src}: {e}"))?
        };
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("not valid JSON: {e}"))?;
        let responses = |v: &Value| -> Result<Vec<Vec<Value>>, String> {
            match v {
                Value::Null => Ok(vec![]),
                Value::Array(list) => list
                    .iter()
                    .map(|r| {
                        r.as_array()
                            .cloned()
                            .ok_or("a response must be an array of steps".to_string())
                    })
                    .collect(),
                _ => Err("`responses` must be an array".into()),
            }
        };
        let mut rules = Vec::new();
        for r in v
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let when = r
                .get("when")
                .and_then(Value::as_str)
                .ok_or("each rule needs a `when` string")?;
            rules.push((
                when.to_string(),
                responses(r.get("responses").unwrap_or(&Value::Null))?,
            ));
        }
        let strings = crate::host_api::string_list;
        let mut models = Vec::new();
        for m in v
            .get("models")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = m
                .get("id")
                .and_then(Value::as_str)
                .ok_or("each model needs an `id` string")?;
            models.push(super::ModelInfo {
                id: id.to_string(),
                label: m.get("label").and_then(Value::as_str).unwrap_or(id).into(),
                thinking_levels: strings(m.get("thinkingLevels")),
                context_window: m
                    .get("contextWindow")
                    .and_then(Value::as_u64)
                    .unwrap_or(128_000),
            });
        }
        Ok(Script {
            models,
            rules,
            default: responses(v.get("default").unwrap_or(&Value::Null))?,
            thinking_levels: strings(v.get("thinkingLevels")),
        })
    }

    /// The models this script offers (see the module docs).
    pub fn models(&self) -> Vec<super::ModelInfo> {
        if !self.models.is_empty() {
            return self.models.clone();
        }
        vec![super::ModelInfo {
            id: "script".into(),
            label: "Scripted model".into(),
            thinking_levels: self.thinking_levels.clone(),
            context_window: 128_000,
        }]
    }

    fn response_for(&self, prompt: &str, step: usize) -> Option<&Vec<Value>> {
        let list = self
            .rules
            .iter()
            .find(|(when, _)| when == "*" || prompt.contains(when.as_str()))
            .map(|(_, r)| r)
            .unwrap_or(&self.default);
        list.get(step)
    }

    fn play(&self, req: &ModelRequest, cancel: &CancelToken, tx: &Sender<ModelEvent>) {
        let Some(steps) = self.response_for(&req.turn_prompt, req.step) else {
            let _ = send(tx, ModelEvent::Text("Done.".into()))
                && send(tx, ModelEvent::Finish(Finish::Stop));
            return;
        };
        let mut finish = Finish::Stop;
        let mut output_chars = 0u64;
        let mut usage_sent = false;
        for (i, step) in steps.iter().enumerate() {
            if cancel.is_cancelled() {
                return;
            }
            let ok = if let Some(text) = step.get("text").and_then(Value::as_str) {
                output_chars += text.len() as u64;
                words(text).all(|w| send(tx, ModelEvent::Text(w.to_string())))
            } else if step.get("echo").is_some() {
                // What the person said, as the model was sent it: proves what is in its context.
                let said: Vec<&str> = req
                    .messages
                    .iter()
                    .filter(|m| m["role"] == "user")
                    .map(|m| m["content"].as_str().unwrap_or_default())
                    .collect();
                send(tx, ModelEvent::Text(format!("heard: {}", said.join(" | "))))
            } else if let Some(text) = step.get("thinking").and_then(Value::as_str) {
                words(text).all(|w| send(tx, ModelEvent::Thinking(w.to_string())))
            } else if let Some(r) = step.get("repeat") {
                let text = r.get("text").and_then(Value::as_str).unwrap_or("x");
                let times = r.get("times").and_then(Value::as_u64).unwrap_or(1);
                output_chars += text.len() as u64 * times;
                (0..times).all(|_| send(tx, ModelEvent::Text(text.to_string())))
            } else if let Some(name) = step.get("tool").and_then(Value::as_str) {
                finish = Finish::ToolCalls;
                let id = step
                    .get("id")
                    .and_then(Value::as_str)
                    .map(String::from)
                    .unwrap_or_else(|| format!("call_{}_{i}", req.step));
                let args = step
                    .get("args")
                    .cloned()
                    .unwrap_or(Value::Object(Default::default()));
                send(
                    tx,
                    ModelEvent::ToolCall {
                        id,
                        name: name.to_string(),
                        arguments: args.to_string(),
                    },
                )
            } else if let Some(ms) = step.get("delayMs").and_then(Value::as_u64) {
                cancel.sleep(Duration::from_millis(ms))
            } else if let Some(u) = step.get("usage") {
                usage_sent = true;
                send(
                    tx,
                    ModelEvent::Usage {
                        input: u.get("input").and_then(Value::as_u64).unwrap_or(0),
                        output: u.get("output").and_then(Value::as_u64).unwrap_or(0),
                        cached: u.get("cached").and_then(Value::as_u64).unwrap_or(0),
                    },
                )
            } else if let Some(class) = step.get("fail").and_then(Value::as_str) {
                let message = step
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("scripted failure");
                let _ = send(
                    tx,
                    ModelEvent::Error {
                        // An unknown class reads as `other`.
                        class: serde_json::from_value(Value::String(class.into()))
                            .unwrap_or(FailureClass::Other),
                        message: message.to_string(),
                        details: None,
                    },
                );
                return;
            } else if let Some(f) = step.get("finish").and_then(Value::as_str) {
                finish = match f {
                    "max_tokens" | "length" => Finish::Length,
                    "refusal" => Finish::Refusal,
                    _ => Finish::Stop,
                };
                true
            } else {
                let _ = send(
                    tx,
                    ModelEvent::Error {
                        class: FailureClass::ProviderError,
                        message: format!(
                            "the script has a step this provider does not understand: {step}"
                        ),
                        details: None,
                    },
                );
                return;
            };
            if !ok {
                return;
            }
        }
        if !usage_sent {
            // Roughly 4 characters per token, so context figures move like a real model's.
            let input: u64 = req
                .messages
                .iter()
                .map(|m| m.to_string().len() as u64)
                .sum::<u64>()
                / 4;
            let _ = send(
                tx,
                ModelEvent::Usage {
                    input,
                    output: output_chars / 4 + 1,
                    cached: 0,
                },
            );
        }
        let _ = send(tx, ModelEvent::Finish(finish));
    }
}

/// Splits text into word-sized deltas that keep their trailing whitespace.
fn words(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let start_ws = rest.len() - rest.trim_start().len();
        let body = &rest[start_ws..];
        let word_end = body.find(char::is_whitespace).unwrap_or(body.len());
        let after = &body[word_end..];
        let ws_end = after.len() - after.trim_start().len();
        let cut = start_ws + word_end + ws_end;
        let (w, r) = rest.split_at(cut);
        rest = r;
        Some(w)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_cover_the_text_exactly() {
        let t = "  Hello wide\nworld é! ";
        let w: Vec<&str> = words(t).collect();
        assert_eq!(w.concat(), t);
        assert_eq!(w, vec!["  Hello ", "wide\n", "world ", "é! "]);
    }

    #[test]
    fn rules_pick_responses_by_prompt_and_step() {
        let s = Script::load(r#"{"rules":[{"when":"edit","responses":[[{"text":"a"}],[{"text":"b"}]]}],"default":[[{"text":"d"}]]}"#).unwrap();
        assert_eq!(s.response_for("please edit", 1).unwrap()[0]["text"], "b");
        assert_eq!(s.response_for("hi", 0).unwrap()[0]["text"], "d");
        assert!(s.response_for("hi", 1).is_none());
        assert!(Script::load(r#"{"rules":[{"responses":[]}]}"#).is_err());
    }
}
