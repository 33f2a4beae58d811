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
//! | `{"echo": "system"}` | the same for the system message (what the host composed: instructions, memory) |
//! | `{"usage": {"input": 10, "output": 5, "cached": 0}}` | token usage |
//! | `{"fail": "provider_error", "message": "…"}` | the call fails |
//! | `{"finish": "max_tokens" \| "refusal"}` | the call ends that way |
//!
//! A turn whose rule has run out of responses gets a final "Done." so it always ends.

use super::{send, Finish, ModelEvent, ModelRequest};
use crate::host::session::CancelToken;
use crate::host_api::wire::FailureClass;
use crossbeam_channel::Sender;
use serde::Deserialize;
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
    rules: Vec<Rule>,
    default: Vec<Vec<Step>>,
    pub thinking_levels: Vec<String>,
    models: Vec<super::ModelInfo>,
}

/// The script as written (module docs); read once, when the provider is set up.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ScriptFile {
    #[serde(default)]
    rules: Vec<Rule>,
    /// `null` as absent, as for a rule's `responses`.
    #[serde(default)]
    default: Option<Vec<Vec<Step>>>,
    #[serde(default)]
    thinking_levels: Vec<String>,
    #[serde(default)]
    models: Vec<ScriptModel>,
}

#[derive(Deserialize)]
struct Rule {
    when: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    responses: Vec<Vec<Step>>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Vec<Step>>, D::Error> {
    Ok(Option::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ScriptModel {
    id: String,
    label: Option<String>,
    #[serde(default)]
    thinking_levels: Vec<String>,
    context_window: Option<u64>,
}

/// One step of a response: the first of its keys in the module docs' order is what it does.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Step {
    text: Option<String>,
    echo: Option<Value>,
    thinking: Option<String>,
    repeat: Option<Repeat>,
    tool: Option<String>,
    args: Option<Value>,
    id: Option<String>,
    delay_ms: Option<u64>,
    usage: Option<Usage>,
    fail: Option<FailureClass>,
    message: Option<String>,
    finish: Option<String>,
    /// Keys no step has: a step with none of the above is refused, naming them.
    #[serde(flatten)]
    unknown: serde_json::Map<String, Value>,
}

#[derive(Debug, Deserialize)]
struct Repeat {
    #[serde(default = "Repeat::x")]
    text: String,
    #[serde(default = "Repeat::once")]
    times: u64,
}

impl Repeat {
    fn x() -> String {
        "x".into()
    }
    fn once() -> u64 {
        1
    }
}

#[derive(Debug, Default, Deserialize)]
struct Usage {
    #[serde(default)]
    input: u64,
    #[serde(default)]
    output: u64,
    #[serde(default)]
    cached: u64,
}

impl Script {
    /// `src` is inline JSON (starting with `{`) or a file path.
    pub fn load(src: &str) -> Result<Script, String> {
        let text = if src.trim_start().starts_with('{') {
            src.to_string()
        } else {
            std::fs::read_to_string(src).map_err(|e| format!("cannot read {src}: {e}"))?
        };
        let file: ScriptFile = serde_json::from_str(&text).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => {
                format!("not a script (its format: src/host/models/scripted.rs): {e}")
            }
            _ => format!("not valid JSON: {e}"),
        })?;
        let models = file
            .models
            .into_iter()
            .map(|m| super::ModelInfo {
                label: m.label.unwrap_or_else(|| m.id.clone()),
                id: m.id,
                thinking_levels: m.thinking_levels,
                context_window: m.context_window.unwrap_or(128_000),
            })
            .collect();
        Ok(Script {
            models,
            rules: file.rules,
            default: file.default.unwrap_or_default(),
            thinking_levels: file.thinking_levels,
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

    fn response_for(&self, prompt: &str, step: usize) -> Option<&Vec<Step>> {
        let list = self
            .rules
            .iter()
            .find(|r| r.when == "*" || prompt.contains(r.when.as_str()))
            .map(|r| &r.responses)
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
            let ok = if let Some(text) = &step.text {
                output_chars += text.len() as u64;
                words(text).all(|w| send(tx, ModelEvent::Text(w.to_string())))
            } else if let Some(echo) = &step.echo {
                // What the person said (or the host composed), as the model was sent it: proves
                // what is in its context.
                let role = echo.as_str().unwrap_or("user");
                let said: Vec<&str> = req
                    .messages
                    .iter()
                    .filter(|m| m["role"] == role)
                    .map(|m| m["content"].as_str().unwrap_or_default())
                    .collect();
                send(tx, ModelEvent::Text(format!("heard: {}", said.join(" | "))))
            } else if let Some(text) = &step.thinking {
                words(text).all(|w| send(tx, ModelEvent::Thinking(w.to_string())))
            } else if let Some(r) = &step.repeat {
                output_chars += r.text.len() as u64 * r.times;
                (0..r.times).all(|_| send(tx, ModelEvent::Text(r.text.clone())))
            } else if let Some(name) = &step.tool {
                finish = Finish::ToolCalls;
                let id = step
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("call_{}_{i}", req.step));
                let args = step
                    .args
                    .clone()
                    .unwrap_or(Value::Object(Default::default()));
                send(
                    tx,
                    ModelEvent::ToolCall {
                        id,
                        name: name.clone(),
                        arguments: args.to_string(),
                    },
                )
            } else if let Some(ms) = step.delay_ms {
                cancel.sleep(Duration::from_millis(ms))
            } else if let Some(u) = &step.usage {
                usage_sent = true;
                send(
                    tx,
                    ModelEvent::Usage {
                        input: u.input,
                        output: u.output,
                        cached: u.cached,
                    },
                )
            } else if let Some(class) = step.fail {
                let message = step.message.as_deref().unwrap_or("scripted failure");
                let _ = send(
                    tx,
                    ModelEvent::Error {
                        class,
                        message: message.to_string(),
                        details: None,
                    },
                );
                return;
            } else if let Some(f) = &step.finish {
                finish = match f.as_str() {
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
                            "the script has a step this provider does not understand: {}",
                            Value::Object(step.unknown.clone())
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
    fn echo_streams_the_messages_of_the_role_asked_for() {
        let s = Script::load(r#"{"rules":[{"when":"sys","responses":[[{"echo":"system"}]]}],"default":[[{"echo":"user"}]]}"#).unwrap();
        let heard = |prompt: &str| {
            let req = ModelRequest {
                model: "script".into(),
                messages: vec![
                    serde_json::json!({"role": "system", "content": "be brief"}),
                    serde_json::json!({"role": "user", "content": prompt}),
                ],
                tools: vec![],
                thinking_level: None,
                turn_prompt: prompt.into(),
                step: 0,
            };
            let (tx, rx) = crossbeam_channel::unbounded();
            s.play(&req, &CancelToken::default(), &tx);
            drop(tx);
            rx.iter().find_map(|e| match e {
                ModelEvent::Text(t) => Some(t),
                _ => None,
            })
        };
        assert_eq!(heard("sys").as_deref(), Some("heard: be brief"));
        assert_eq!(heard("hi").as_deref(), Some("heard: hi"));
    }

    #[test]
    fn rules_pick_responses_by_prompt_and_step() {
        let s = Script::load(r#"{"rules":[{"when":"edit","responses":[[{"text":"a"}],[{"text":"b"}]]}],"default":[[{"text":"d"}]]}"#).unwrap();
        let text = |prompt, step| s.response_for(prompt, step).unwrap()[0].text.clone();
        assert_eq!(text("please edit", 1).as_deref(), Some("b"));
        assert_eq!(text("hi", 0).as_deref(), Some("d"));
        assert!(s.response_for("hi", 1).is_none());
        let no_when = Script::load(r#"{"rules":[{"responses":[]}]}"#)
            .err()
            .unwrap();
        assert!(no_when.contains("missing field `when`"), "{no_when}");
        let bad_delay = r#"{"default":[[{"delayMs":"soon"}]]}"#;
        let e = Script::load(bad_delay).err().unwrap();
        assert!(
            e.starts_with("not a script") && e.contains("expected u64"),
            "{e}"
        );
        assert!(Script::load("{not json")
            .err()
            .unwrap()
            .starts_with("not valid JSON"));
        let nulls = Script::load(r#"{"rules":[{"when":"x","responses":null}],"default":null}"#);
        assert!(nulls.is_ok_and(|s| s.response_for("x", 0).is_none()));
        // An unknown step is named by its keys when it is played.
        let odd = Script::load(r#"{"default":[[{"sing":"la"}]]}"#).unwrap();
        assert_eq!(
            odd.default[0][0].unknown.get("sing"),
            Some(&Value::from("la"))
        );
    }
}
