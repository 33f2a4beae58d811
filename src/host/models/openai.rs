//! Any OpenAI-compatible Chat Completions endpoint (OpenAI, Ollama, llama.cpp server, vLLM,
//! LM Studio, OpenRouter…), streaming with tool calls.
//!
//! 429 and 5xx answers (and failed connections) are retried with exponential backoff, honouring
//! `Retry-After`, and each retry is reported as a [`ModelEvent::Retry`].

use super::{send, Finish, ModelEvent, ModelRequest};
use crate::host::session::CancelToken;
use crate::host::sse::{SseItem, SseReader};
use crate::host::tools::fs::{cut, cut_words};
use crate::host_api::wire::FailureClass;
use crossbeam_channel::Sender;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Read;
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

/// The OpenAI-compatible connection (`openai`), when an endpoint or key is configured.
pub fn connect(
    settings: &crate::config::ProviderSettings,
) -> Option<Result<super::Connection, String>> {
    if !settings.wants_openai() {
        return None;
    }
    let base_url = settings
        .base_url
        .clone()
        .unwrap_or_else(|| crate::config::OPENAI_BASE_URL.into());
    let Some(model) = &settings.model else {
        return Some(Err(
            "an OpenAI-compatible endpoint is configured but no model: set MAKA_MODEL".into(),
        ));
    };
    Some(Ok(super::Connection {
        slug: "openai".into(),
        label: format!("OpenAI-compatible ({base_url})"),
        models: vec![super::ModelInfo {
            id: model.clone(),
            label: model.clone(),
            thinking_levels: settings.thinking_levels.clone(),
            context_window: settings.context_window.unwrap_or(128_000),
        }],
        provider: std::sync::Arc::new(OpenAiConfig {
            base_url,
            api_key: settings.api_key.clone(),
        }),
    }))
}

impl super::Provider for OpenAiConfig {
    fn stream(&self, req: &ModelRequest, cancel: &CancelToken, tx: &Sender<ModelEvent>) {
        run(self, req, cancel, tx)
    }
}

/// A Chat Completions request's fields after `messages` (in the order the tree this replaced
/// wrote them); [`request_body`] writes the whole.
#[derive(serde::Serialize)]
struct RequestBody<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "<[Value]>::is_empty")]
    tools: &'a [Value],
}

#[derive(serde::Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// The request body: `{"messages":[..],` then `rest`'s fields.
///
/// The messages (the conversation, a pasted file among them) are written from the request
/// itself, not copied into a tree first, by `Value`'s own `Display`: that is serde_json's
/// serializer as serde_json itself instantiates it, compiled at opt-level 3. One instantiated
/// here is compiled in this crate, at "z" (Cargo.toml), and escapes a long text several times
/// slower: ~40 ms for 10 MiB (issue 27, docs/benchmarks.md).
fn request_body(messages: &[Value], rest: &RequestBody) -> Result<String, serde_json::Error> {
    use std::fmt::Write;
    let mut body = String::from("{\"messages\":[");
    for (i, message) in messages.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        write!(body, "{message}").map_err(serde::ser::Error::custom)?;
    }
    body.push_str("],");
    // `rest` is an object with at least `model` and `stream`: its fields follow ours.
    let rest = serde_json::to_string(rest)?;
    match rest.strip_prefix('{') {
        Some(fields) if fields != "}" => body.push_str(fields),
        _ => return Err(serde::ser::Error::custom("a request with no fields")),
    }
    Ok(body)
}

fn run(cfg: &OpenAiConfig, req: &ModelRequest, cancel: &CancelToken, tx: &Sender<ModelEvent>) {
    let url = format!("{}/chat/completions", cfg.base_url.trim_end_matches('/'));
    let rest = RequestBody {
        model: &req.model,
        reasoning_effort: req.thinking_level.as_deref().filter(|l| *l != "off"),
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        tools: &req.tools,
    };
    let body = match request_body(&req.messages, &rest) {
        Ok(b) => b,
        Err(e) => {
            let _ = send(
                tx,
                ModelEvent::Error {
                    class: FailureClass::ProviderError,
                    message: "The request to the provider could not be written.".into(),
                    details: Some(json!({"error": e.to_string()})),
                },
            );
            return;
        }
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(15)))
        // Time to the first response byte; a streaming body may then run for minutes.
        .timeout_recv_response(Some(Duration::from_secs(300)))
        .build()
        .into();

    let mut attempt = 0;
    let mut waited_ms = 0u64;
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
        // (why, the sentence if this is the last attempt, details, the wait the provider asks)
        let (why, failure, details, retry_after) = match outcome {
            Ok(resp) => {
                let status = resp.status().as_u16();
                if status == 200 {
                    let event_stream = resp
                        .headers()
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .is_some_and(|v| v.contains("text/event-stream"));
                    let body = resp.into_body().into_reader();
                    read_stream(&cfg.base_url, event_stream, body, cancel, tx);
                    return;
                }
                let retry_after = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok());
                let content_type = resp
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let text = resp
                    .into_body()
                    .with_config()
                    .limit(64 * 1024)
                    .read_to_string()
                    .unwrap_or_default();
                let f = HttpFailure::new(&cfg.base_url, &url, status, &content_type, &text);
                log::warn!("model call attempt {attempt}: {}", f.details);
                if status != 429 && status < 500 {
                    let _ = send(tx, f.error());
                    return;
                }
                (f.short(), f.message.clone(), Some(f.details), retry_after)
            }
            Err(e) => (
                format!("cannot connect ({e})"),
                unreachable_sentence(&cfg.base_url, &e),
                Some(json!({"endpoint": url, "error": e.to_string()})),
                None,
            ),
        };
        let delay_ms = retry_after
            .map(|s| s.saturating_mul(1000))
            .unwrap_or_else(|| 500u64 << (attempt - 1).min(4));
        let over_budget = waited_ms + delay_ms > RETRY_BUDGET_MS;
        if attempt >= MAX_ATTEMPTS || over_budget {
            let tail = if over_budget && retry_after.is_some() {
                format!(
                    " (it asked to wait {} s; maka-acp waits at most {} s in all)",
                    delay_ms / 1000,
                    RETRY_BUDGET_MS / 1000
                )
            } else {
                format!(" (gave up after {attempt} attempts)")
            };
            let message = format!("{}{tail}.", failure.trim_end_matches('.'));
            let _ = send(
                tx,
                ModelEvent::Error {
                    class: FailureClass::ProviderUnavailable,
                    message,
                    details,
                },
            );
            return;
        }
        waited_ms += delay_ms;
        log::warn!("model call attempt {attempt} failed ({why}); retrying in {delay_ms} ms");
        if !send(
            tx,
            ModelEvent::Retry {
                attempt,
                delay_ms,
                reason: why,
            },
        ) {
            return;
        }
        if !cancel.sleep(Duration::from_millis(delay_ms)) {
            return;
        }
    }
}

/// The sentence for an endpoint that cannot be reached. Only a base URL the person set is
/// blamed on MAKA_OPENAI_BASE_URL; the default one (only a key was set) is named as the default.
fn unreachable_sentence(base_url: &str, e: &dyn std::fmt::Display) -> String {
    if base_url == crate::config::OPENAI_BASE_URL {
        format!(
            "The default model provider endpoint {base_url} (used because only an API key is set) cannot be reached ({e}); check the network, or set MAKA_OPENAI_BASE_URL to another endpoint."
        )
    } else {
        format!(
            "The model provider at {base_url} cannot be reached ({e}); check that it is running and that MAKA_OPENAI_BASE_URL is right."
        )
    }
}

/// The longest a model step waits in all between retries (429 / 5xx / no connection).
const RETRY_BUDGET_MS: u64 = 30_000;

/// A non-200 answer, described for a person (one sentence) and for the log (details).
struct HttpFailure {
    status: u16,
    message: String,
    details: Value,
}

impl HttpFailure {
    fn new(base: &str, url: &str, status: u16, content_type: &str, body: &str) -> HttpFailure {
        let reason = crate::http::reason(status);
        // The provider's own words when it gave them as JSON; an HTML page never reaches the
        // person (it is in the details and the log).
        let said = provider_said(body)
            .map(|m| format!(": \"{}\"", cut_words(&m, 200)))
            .unwrap_or_default();
        let advice = match status {
            401 | 403 => "check the API key (MAKA_OPENAI_API_KEY, or run `maka-acp login`)",
            404 => "check the base URL and the model name (MAKA_OPENAI_BASE_URL, MAKA_MODEL)",
            429 => "it is rate-limiting; wait a moment and try again",
            s if s >= 500 => "the provider failed; try again later",
            _ => "it refused the request; the log has its full answer",
        };
        let mut excerpt = body.to_string();
        cut(&mut excerpt, 2048);
        HttpFailure {
            status,
            message: format!(
                "The model provider at {base} answered HTTP {status} {reason}{said}; {advice}."
            )
            .replace("  ", " "),
            details: json!({"httpStatus": status, "endpoint": url, "contentType": content_type, "body": excerpt}),
        }
    }

    fn short(&self) -> String {
        format!("HTTP {} {}", self.status, crate::http::reason(self.status))
            .trim_end()
            .to_string()
    }

    fn error(self) -> ModelEvent {
        let class = if self.status == 401 || self.status == 403 {
            FailureClass::ProviderAuth
        } else {
            FailureClass::ProviderError
        };
        ModelEvent::Error {
            class,
            message: self.message,
            details: Some(self.details),
        }
    }
}

/// The error message in a provider's JSON answer (`{"error": {"message": …}}` and variants).
fn provider_said(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    let m = v
        .pointer("/error/message")
        .or_else(|| v.get("message"))
        .or_else(|| v.get("error"))
        .and_then(Value::as_str)?;
    let line = m.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(line.to_string())
}

#[derive(Default)]
struct PendingToolCall {
    id: String,
    name: String,
    arguments: String,
}

fn finish_of(reason: &str) -> Finish {
    match reason {
        "length" => Finish::Length,
        "content_filter" => Finish::Refusal,
        "tool_calls" | "function_call" => Finish::ToolCalls,
        _ => Finish::Stop,
    }
}

/// A stream chunk as most are — text or reasoning deltas and a finish reason — read straight
/// into these fields, without a tree. A chunk that has any other field the reader uses
/// (`error`, `usage`, `tool_calls`, even as `null`), or that this cannot read (a field of
/// another type), is read as a `Value` tree, as every chunk was before. (Unlike the tree, serde
/// reads an array where an object is expected by position, and skips unknown fields unchecked;
/// no provider sends either.)
#[derive(serde::Deserialize)]
struct DeltaChunk {
    #[serde(default)]
    choices: Option<Vec<DeltaChoice>>,
    #[serde(default, deserialize_with = "present")]
    error: bool,
    #[serde(default, deserialize_with = "present")]
    usage: bool,
}

#[derive(serde::Deserialize)]
struct DeltaChoice {
    #[serde(default)]
    delta: Option<DeltaFields>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Default, serde::Deserialize)]
struct DeltaFields {
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default, deserialize_with = "present")]
    tool_calls: bool,
}

impl DeltaChunk {
    fn needs_tree(&self) -> bool {
        self.error
            || self.usage
            || self
                .choices
                .iter()
                .flatten()
                .any(|c| c.delta.as_ref().is_some_and(|d| d.tool_calls))
    }

    /// The chunk's events in the tree path's order (reasoning, then text; empty strings are
    /// none), and its finish reason.
    fn into_events(self) -> ([Option<ModelEvent>; 3], Option<Finish>) {
        let Some(choice) = self.choices.and_then(|c| c.into_iter().next()) else {
            return (Default::default(), None);
        };
        let d = choice.delta.unwrap_or_default();
        let some = |t: Option<String>| t.filter(|t| !t.is_empty());
        let events = [
            some(d.reasoning_content).map(ModelEvent::Thinking),
            some(d.reasoning).map(ModelEvent::Thinking),
            some(d.content).map(ModelEvent::Text),
        ];
        (events, choice.finish_reason.as_deref().map(finish_of))
    }
}

/// For a field whose presence is what counts: true when the key is there, whatever its value.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    <serde::de::IgnoredAny as serde::Deserialize>::deserialize(d).map(|_| true)
}

/// Parses the SSE stream (`data: {json}` lines, `data: [DONE]`).
///
/// A stream that ends without `[DONE]` or a finish reason was cut off: the step fails naming
/// that, rather than ending the turn with half an answer.
fn read_stream(
    base: &str,
    event_stream: bool,
    body: impl Read,
    cancel: &CancelToken,
    tx: &Sender<ModelEvent>,
) {
    let mut reader = SseReader::new(body, MAX_LINE);
    let mut tools: BTreeMap<u64, PendingToolCall> = BTreeMap::new();
    let mut finish: Option<Finish> = None;
    let mut done = false;
    let (mut chunks, mut garbage, mut oversized) = (0u64, 0u64, 0u64);
    let mut last_progress = std::time::Instant::now();
    let fail = |message: String, details: Value| {
        let _ = send(
            tx,
            ModelEvent::Error {
                class: FailureClass::ProviderError,
                message,
                details: Some(details),
            },
        );
    };
    loop {
        if cancel.is_cancelled() {
            return;
        }
        let data = match reader.next() {
            Ok(Some(SseItem::Data(d))) => d,
            Ok(Some(SseItem::Oversized(n))) => {
                oversized += 1;
                log::warn!("skipping a stream line of {n} bytes from the model endpoint (limit {MAX_LINE})");
                continue;
            }
            Ok(None) => break,
            Err(e) => {
                fail(
                    format!("The model provider at {base} broke off its answer ({e}); send the prompt again."),
                    json!({"error": e.to_string(), "chunks": chunks}),
                );
                return;
            }
        };
        let data = data.trim();
        if data == "[DONE]" {
            done = true;
            break;
        }
        // Most chunks are one delta of text: read those without building a tree.
        let fast = serde_json::from_str::<DeltaChunk>(data)
            .ok()
            .filter(|c| !c.needs_tree())
            .map(DeltaChunk::into_events);
        let chunk = match fast {
            Some(_) => Value::Null,
            None => match serde_json::from_str::<Value>(data) {
                Ok(v) => v,
                Err(_) => {
                    garbage += 1;
                    log::warn!("ignoring an unparsable stream chunk from the model endpoint");
                    continue;
                }
            },
        };
        chunks += 1;
        // A chunk of text or reasoning is an event the turn sees (its idle timer restarts);
        // any other (tool-call arguments, usage, a role) keeps the turn alive with Progress,
        // at most once a second. The clock is read only for those.
        let speaks = fast
            .as_ref()
            .is_some_and(|(events, _)| events.iter().any(Option::is_some));
        if !speaks && last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = std::time::Instant::now();
            if !send(tx, ModelEvent::Progress) {
                return;
            }
        }
        if let Some((events, reason)) = fast {
            for event in events.into_iter().flatten() {
                if !send(tx, event) {
                    return;
                }
            }
            if reason.is_some() {
                finish = reason;
            }
            continue;
        }
        if let Some(err) = chunk.get("error") {
            let said = provider_said(&json!({"error": err}).to_string())
                .unwrap_or_else(|| "no details".into());
            fail(
                format!(
                    "The model provider at {base} reported an error mid-answer: \"{}\".",
                    cut_words(&said, 200)
                ),
                json!({"error": err}),
            );
            return;
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            let input = u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0);
            let output = u
                .get("completion_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let cached = u
                .pointer("/prompt_tokens_details/cached_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            if !send(
                tx,
                ModelEvent::Usage {
                    input,
                    output,
                    cached,
                },
            ) {
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
            finish = Some(finish_of(reason));
        }
    }
    // Lines that could not be read mean the answer is incomplete (a delta over the line
    // limit, data that is not JSON): the turn fails saying so, never ends as if whole.
    if (garbage > 0 || oversized > 0) && (chunks > 0 || done) {
        let what = match (oversized, garbage) {
            (0, g) => format!("{g} stream line(s) that are not JSON"),
            (o, 0) => format!(
                "{o} stream line(s) over the {} MiB line limit",
                MAX_LINE >> 20
            ),
            (o, g) => format!(
                "{o} stream line(s) over the {} MiB line limit and {g} that are not JSON",
                MAX_LINE >> 20
            ),
        };
        fail(
            format!("The model provider at {base} sent {what}, so its answer is incomplete; the turn stops here (the log has the details)."),
            json!({"chunks": chunks, "unparsable": garbage, "oversized": oversized}),
        );
        return;
    }
    if !done && finish.is_none() {
        let message = if chunks == 0 && garbage == 0 && oversized == 0 && event_stream {
            // llama.cpp's Python server does this when the request fails after it answered
            // 200 (a prompt longer than its context window, say): the reason is in its log.
            format!("The model provider at {base} closed its stream before answering, which usually means it failed on this request (a prompt longer than its context window, for one); its log says why.")
        } else if chunks == 0 {
            format!("The model provider at {base} did not answer with a model stream; check that MAKA_OPENAI_BASE_URL points at an OpenAI-compatible API.")
        } else {
            format!("The model provider at {base} stopped in the middle of its answer (no finish reason); send the prompt again.")
        };
        fail(
            message,
            json!({"chunks": chunks, "unparsable": garbage, "eventStream": event_stream}),
        );
        return;
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

    /// Yields one piece per read, each after `delay` (a model slowly streaming arguments).
    struct Slow(Vec<&'static str>, Duration);

    impl Read for Slow {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Ok(0);
            }
            std::thread::sleep(self.1);
            let piece = self.0.remove(0).as_bytes();
            buf[..piece.len()].copy_from_slice(piece);
            Ok(piece.len())
        }
    }

    /// The body written in two parts is the whole request, a long text needing every kind of
    /// escape included.
    #[test]
    fn the_request_body_is_serde_jsons_own() {
        let text = "a \"quote\", a \\ slash\n\ttab \u{1} é 🦀 ".repeat(4096);
        let messages = vec![
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": [{"type": "text", "text": text}]}),
        ];
        let tools = vec![json!({"type": "function", "function": {"name": "read"}})];
        let rest = RequestBody {
            model: "m",
            reasoning_effort: Some("high"),
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            tools: &tools,
        };
        let whole = json!({
            "messages": messages, "model": "m", "reasoning_effort": "high", "stream": true,
            "stream_options": {"include_usage": true}, "tools": tools,
        });
        let body = request_body(&messages, &rest).unwrap();
        // The same document, `messages` first (as the struct with them in it wrote it).
        assert!(body.starts_with(r#"{"messages":[{"#), "{body}");
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), whole);
        let bare = RequestBody {
            reasoning_effort: None,
            tools: &[],
            ..rest
        };
        assert_eq!(
            request_body(&[], &bare).unwrap(),
            r#"{"messages":[],"model":"m","stream":true,"stream_options":{"include_usage":true}}"#
        );
    }

    #[test]
    fn slowly_streamed_tool_arguments_keep_the_turn_alive() {
        // Chunks that carry no text are no event for the turn: at least one Progress must
        // come within the 1.6 s they take, or a short idle timeout would end the turn.
        let piece = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"ls\",\"arguments\":\"\"}}]}}]}\n\n";
        let slow = Slow(
            vec![
                piece,
                piece,
                piece,
                "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
            ],
            Duration::from_millis(400),
        );
        let (tx, rx) = unbounded();
        read_stream("http://x/v1", true, slow, &CancelToken::default(), &tx);
        let events: Vec<ModelEvent> = rx.try_iter().collect();
        assert!(events.contains(&ModelEvent::Progress), "{events:?}");
        assert_eq!(events.last(), Some(&ModelEvent::Finish(Finish::ToolCalls)));
    }

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
        read_stream(
            "http://x/v1",
            true,
            sse.as_bytes(),
            &CancelToken::default(),
            &tx,
        );
        let events: Vec<ModelEvent> = rx.try_iter().collect();
        assert_eq!(
            events,
            vec![
                ModelEvent::Text("Let me ".into()),
                ModelEvent::Text("look.".into()),
                ModelEvent::Usage {
                    input: 9,
                    output: 4,
                    cached: 0
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
