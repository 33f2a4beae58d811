//! A local fake OpenAI-compatible Chat Completions server: replays raw HTTP responses in
//! order (one per request, then 500s) and records what it was sent.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

pub struct Recorded {
    pub auth: Option<String>,
    pub body: Value,
}

/// Serves `responses` in order (one per request), then 500s. Each response is raw HTTP.
pub fn fake_server(responses: Vec<String>) -> (u16, Arc<Mutex<Vec<Recorded>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Arc<Mutex<Vec<Recorded>>> = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        let mut queue = responses.into_iter();
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut len = 0usize;
            let mut auth = None;
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("authorization:") {
                    auth = Some(line["authorization:".len()..].trim().to_string());
                }
            }
            let mut body = vec![0u8; len];
            let _ = reader.read_exact(&mut body);
            log.lock().unwrap().push(Recorded {
                auth,
                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            });
            let response = queue.next().unwrap_or_else(|| {
                http(500, "{\"error\":{\"message\":\"script exhausted\"}}", &[])
            });
            // A response ending in STALL is written, and then the connection is held open
            // with nothing more (a provider that went silent).
            match response.strip_suffix(STALL) {
                Some(head) => {
                    let _ = stream.write_all(head.as_bytes());
                    let _ = stream.flush();
                    held.push(stream);
                }
                None => {
                    let _ = stream.write_all(response.as_bytes());
                    let _ = stream.flush();
                }
            }
        }
    });
    (port, seen)
}

/// Append to a response to keep its connection open afterwards, sending nothing more.
pub const STALL: &str = "<<STALL>>";

/// A streaming response head and these raw body bytes, the connection then held open.
pub fn sse_then_silence(body: &str) -> String {
    format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n{body}{STALL}")
}

/// A streaming response whose body is these raw bytes (no `[DONE]` added), then closed.
pub fn sse_raw(body: &str) -> String {
    format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n{body}")
}

pub fn http(status: u16, body: &str, headers: &[(&str, &str)]) -> String {
    let mut h = String::new();
    for (k, v) in headers {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    format!("HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{h}\r\n{body}", body.len())
}

pub fn sse(chunks: &[Value]) -> String {
    let mut body = String::new();
    for c in chunks {
        body.push_str(&format!("data: {c}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n{body}")
}
