//! Any OpenAI-compatible Chat Completions endpoint (OpenAI, Ollama, llama.cpp server, vLLM,
//! LM Studio, OpenRouter…), streaming with tool calls.
//!
//! 429 and 5xx answers (and failed connections) are retried with exponential backoff, honouring
//! `Retry-After`, and each retry is reported as a [`ModelEvent::Retry`].

use super::{send, Finish, ModelEvent, ModelRequest};
use crate::host::session::CancelToken;
use crossbeam_channel::Sender;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

#[derive(Clone)]
pub struct OpenAiConfig {
    pub base_url: String,
    pub api_key: Option<String>,
}

/// Attempts per step (1 + retries).
const MAX_ATTEMPTS: u32 = 5;
/// Longest SSE line accepted from a provider.
const MAX_LINE: usize = 4 * 1024 * 1024;

pub fn run(cfg: &OpenAiConfig, req: &ModelRequest, cancel: &CancelToken, tx: &Sender<ModelEvent>) {
    let url = format!("{}/chat/completions", cfg.base_url.trim_end_matches('/'));
    let mut body = json!({
        "model": req.model,
        "messages": req.messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !req.tools.is_empty() {
        body["tools"] = Value::Array(req.tools.clone());
    }
    if let Some(level) = req.thinking_level.as_deref().filter(|l| *l != "off") {
        body["reasoning_effort"] = json!(level);
    }
    let body = body.to_string();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(15)))
        // Time to the first response byte; a streaming body may then run for minutes.
        .timeout_recv_response(Some(Duration::from_secs(300)))
        .build()
        .into();

    let mut attempt = 0;
    loop {
        attempt += 1;
        if cancel.is_cancelled() {
            return;
        }
        let mut request = agent.post(&url).header("Accept", "text/event-stream");
        if let Some(key) = &cfg.api_key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        let outcome = request.content_type("application/json").send(body.as_str());
        let (retry_reason, retry_after) = match outcome {
            Ok(resp) => {
                let status = resp.status().as_u16();
                if status == 200 {
                    read_stream(resp.into_body().into_reader(), cancel, tx);
                    return;
                }
                let retry_after = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok());
                let text = resp
                    .into_body()
                    .with_config()
                    .limit(64 * 1024)
                    .read_to_string()
                    .unwrap_or_default();
                let detail = error_message(&text);
                if status == 429 || status >= 500 {
                    (format!("HTTP {status}: {detail}"), retry_after)
                } else {
                    let class = if status == 401 || status == 403 {
                        "provider_auth"
                    } else {
                        "provider_error"
                    };
                    let _ = send(
                        tx,
                        ModelEvent::Error {
                            class: class.into(),
                            message: format!("the model endpoint answered HTTP {status}: {detail}"),
                        },
                    );
                    return;
                }
            }
            Err(e) => (format!("cannot reach {url}: {e}"), None),
        };
        if attempt >= MAX_ATTEMPTS {
            let _ = send(
                tx,
                ModelEvent::Error {
                    class: "provider_unavailable".into(),
                    message: format!("gave up after {attempt} attempts; last: {retry_reason}"),
                },
            );
            return;
        }
        let delay_ms = retry_after
            .map(|s| s.min(60) * 1000)
            .unwrap_or_else(|| 500u64 << (attempt - 1).min(4));
        log::warn!(
            "model call attempt {attempt} failed ({retry_reason}); retrying in {delay_ms} ms"
        );
        if !send(
            tx,
            ModelEvent::Retry {
                attempt,
                delay_ms,
                reason: retry_reason,
            },
        ) {
            return;
        }
        if !cancel.sleep(Duration::from_millis(delay_ms)) {
            return;
        }
    }
}

fn error_message(body: &str) -> String {
    let from_json = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("error"))
            .and_then(Value::as_str)
            .map(String::from)
    });
    let mut msg = from_json.unwrap_or_else(|| body.trim().to_string());
    if msg.len() > 300 {
        let mut cut = 300;
        while !msg.is_char_boundary(cut) {
            cut -= 1;
        }
        msg.truncate(cut);
    }
    if msg.is_empty() {
        "(no details)".into()
    } else {
        msg
    }
}

#[derive(Default)]
struct PendingToolCall {
    id: String,
    name: String,
    arguments: String,
}

/// Parses the SSE stream (`data: {json}` lines, `data: [DONE]`).
fn read_stream(body: impl Read, cancel: &CancelToken, tx: &Sender<ModelEvent>) {
    let mut reader = BufReader::new(body.take(u64::MAX));
    let mut tools: BTreeMap<u64, PendingToolCall> = BTreeMap::new();
    let mut finish: Option<Finish> = None;
    let mut line = String::new();
    loop {
        if cancel.is_cancelled() {
            return;
        }
        line.clear();
        let n = match (&mut reader).take(MAX_LINE as u64).read_line(&mut line) {
            Ok(n) => n,
            Err(e) => {
                let _ = send(
                    tx,
                    ModelEvent::Error {
                        class: "provider_error".into(),
                        message: format!("the model stream broke: {e}"),
                    },
                );
                return;
            }
        };
        if n == 0 {
            break;
        }
        let Some(data) = line.trim_end().strip_prefix("data:") else {
            continue;
        };
        let data = data.trim();
        if data == "[DONE]" {
            break;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            log::warn!("ignoring an unparsable stream chunk from the model endpoint");
            continue;
        };
        if let Some(err) = chunk.get("error") {
            let _ = send(
                tx,
                ModelEvent::Error {
                    class: "provider_error".into(),
                    message: error_message(&json!({"error": err}).to_string()),
                },
            );
            return;
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            let input = u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0);
            let output = u
                .get("completion_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            if !send(tx, ModelEvent::Usage { input, output }) {
                return;
            }
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            continue;
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        for key in ["reasoning_content", "reasoning"] {
            if let Some(t) = delta
                .get(key)
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                if !send(tx, ModelEvent::Thinking(t.to_string())) {
                    return;
                }
            }
        }
        if let Some(t) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            if !send(tx, ModelEvent::Text(t.to_string())) {
                return;
            }
        }
        for tc in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = tc.get("index").and_then(Value::as_u64).unwrap_or(0);
            let entry = tools.entry(index).or_default();
            if let Some(id) = tc.get("id").and_then(Value::as_str) {
                entry.id = id.to_string();
            }
            if let Some(name) = tc.pointer("/function/name").and_then(Value::as_str) {
                entry.name.push_str(name);
            }
            if let Some(args) = tc.pointer("/function/arguments").and_then(Value::as_str) {
                entry.arguments.push_str(args);
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            finish = Some(match reason {
                "length" => Finish::Length,
                "content_filter" => Finish::Refusal,
                "tool_calls" | "function_call" => Finish::ToolCalls,
                _ => Finish::Stop,
            });
        }
    }
    let has_tools = !tools.is_empty();
    for (i, tc) in tools {
        let id = if tc.id.is_empty() {
            format!("call_{i}")
        } else {
            tc.id
        };
        if !send(
            tx,
            ModelEvent::ToolCall {
                id,
                name: tc.name,
                arguments: tc.arguments,
            },
        ) {
            return;
        }
    }
    let finish = match finish {
        Some(Finish::Stop) | None if has_tools => Finish::ToolCalls,
        Some(f) => f,
        None => Finish::Stop,
    };
    let _ = send(tx, ModelEvent::Finish(finish));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;

    #[test]
    fn tool_calls_split_across_chunks_are_reassembled() {
        let sse = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"Let me \"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"look.\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"read_\",\"arguments\":\"{\\\"pa\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"file\",\"arguments\":\"th\\\":\\\"a\\\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4}}\n\n",
            "data: [DONE]\n\n"
        );
        let (tx, rx) = unbounded();
        read_stream(sse.as_bytes(), &CancelToken::default(), &tx);
        let events: Vec<ModelEvent> = rx.try_iter().collect();
        assert_eq!(
            events,
            vec![
                ModelEvent::Text("Let me ".into()),
                ModelEvent::Text("look.".into()),
                ModelEvent::Usage {
                    input: 9,
                    output: 4
                },
                ModelEvent::ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a\"}".into()
                },
                ModelEvent::Finish(Finish::ToolCalls),
            ]
        );
    }
}
