//! A local stand-in for the OpenAI **Responses** API (`POST /v1/responses`, streamed as
//! server-sent events), enough for codex to run against: it answers from the request itself,
//! so a client that retries or reopens a conversation gets consistent answers.
//!
//! - a last user message containing "run three": `exec_command` calls `echo out-1` … `out-3`
//!   (not in a login shell: the machine's profile is not the test's), one per request, until
//!   three outputs came back; then a message "ran 3; heard: …"
//! - containing "hang": the stream starts and then nothing more (held open for a minute)
//! - anything else: a message "ran N; heard: A | B | …" naming the tail of every user message
//!   in the request (so a continued conversation shows its earlier tasks)

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// Starts the server; returns its port and the request bodies it was sent.
pub fn start() -> (u16, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let log = log.clone();
            std::thread::spawn(move || serve(stream, &log));
        }
    });
    (port, seen)
}

fn serve(mut stream: TcpStream, log: &Mutex<Vec<Value>>) {
    let Ok(read) = stream.try_clone() else { return };
    let mut reader = BufReader::new(read);
    let mut len = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; len];
    let _ = reader.read_exact(&mut body);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    log.lock().unwrap().push(body.clone());
    let _ = stream.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
    );
    let mut event = |e: Value| {
        let kind = e["type"].as_str().unwrap_or("").to_string();
        let _ = stream.write_all(format!("event: {kind}\ndata: {e}\n\n").as_bytes());
        let _ = stream.flush();
    };
    event(json!({"type": "response.created", "response": {"id": "resp_1"}}));
    let items = body["input"].as_array().cloned().unwrap_or_default();
    let is_user = |i: &Value| i["type"] == "message" && i["role"] == "user";
    let text_of = |i: &Value| -> String {
        i["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["text"].as_str())
            .collect()
    };
    let last = items.iter().rposition(is_user);
    let task = last.map(|k| text_of(&items[k])).unwrap_or_default();
    let outputs = last.map_or(0, |k| {
        items[k + 1..]
            .iter()
            .filter(|i| i["type"] == "function_call_output")
            .count()
    });
    if task.contains("hang") {
        std::thread::sleep(std::time::Duration::from_secs(60));
        return;
    }
    let item = if task.contains("run three") && outputs < 3 {
        let k = outputs + 1;
        json!({"type": "function_call", "id": format!("fc_{k}"), "call_id": format!("call_{k}"),
               "name": "exec_command", "arguments": json!({"cmd": format!("echo out-{k}"), "login": false}).to_string()})
    } else {
        let heard: Vec<String> = items
            .iter()
            .filter(|i| is_user(i))
            .map(|i| {
                let t = text_of(i);
                let tail: String = t
                    .chars()
                    .rev()
                    .take(40)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                tail
            })
            .collect();
        json!({"type": "message", "role": "assistant", "id": "msg_1", "content": [
            {"type": "output_text", "text": format!("ran {outputs}; heard: {}", heard.join(" | "))}]})
    };
    event(json!({"type": "response.output_item.done", "item": item}));
    event(
        json!({"type": "response.completed", "response": {"id": "resp_1", "usage": {
        "input_tokens": 1, "input_tokens_details": null, "output_tokens": 1,
        "output_tokens_details": null, "total_tokens": 2}}}),
    );
}
