//! The adapter's blocking client for the Runtime Host: `op` for every operation and `events`
//! for one window of a session's event stream. One error type separates what the host said
//! (`Host`) from not reaching it at all (`Transport`, i.e. the host is gone).

use super::wire::{Envelope, ErrorCode, Frame, HostError};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

/// Longest event-stream line accepted (frames are bounded far below this).
const MAX_FRAME_LINE: u64 = 4 * 1024 * 1024;
/// Largest operation response read (a transcript page is at most ~1 MiB plus one item).
const MAX_RESPONSE: u64 = 32 * 1024 * 1024;

#[derive(Debug)]
pub enum ClientError {
    /// The host answered with an error envelope.
    Host(HostError),
    /// The host could not be reached or broke the connection.
    Transport(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Host(e) => write!(f, "{e}"),
            ClientError::Transport(e) => write!(f, "Runtime Host unreachable: {e}"),
        }
    }
}

impl ClientError {
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Host(e) => Some(e.code),
            ClientError::Transport(_) => None,
        }
    }
}

pub struct HostClient {
    base: String,
    token: String,
    ops: ureq::Agent,
    streams: ureq::Agent,
}

/// One window of the event stream. Iterate with [`EventStream::next_frame`].
pub struct EventStream {
    reader: Box<dyn BufRead + Send>,
    line: String,
}

impl EventStream {
    /// The next line (data frame, heartbeat or stream_end), or None at EOF.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ClientError> {
        loop {
            self.line.clear();
            let n = (&mut self.reader)
                .take(MAX_FRAME_LINE)
                .read_line(&mut self.line)
                .map_err(|e| ClientError::Transport(format!("event stream broke: {e}")))?;
            if n == 0 {
                return Ok(None);
            }
            if self.line.trim().is_empty() {
                continue;
            }
            return serde_json::from_str(&self.line).map(Some).map_err(|e| {
                ClientError::Transport(format!("unreadable frame from the host: {e}"))
            });
        }
    }
}

impl HostClient {
    pub fn new(base_url: &str, token: &str) -> HostClient {
        let ops = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let streams = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(5)))
            // The host ends every window after waitMs (≤ 60 s); this bounds a dead stream.
            .timeout_global(Some(Duration::from_secs(90)))
            .build()
            .into();
        HostClient {
            base: base_url.trim_end_matches('/').to_string(),
            token: token.to_string(),
            ops,
            streams,
        }
    }

    pub fn op(&self, key: &str, input: &Value) -> Result<Value, ClientError> {
        let resp = self
            .ops
            .post(&format!("{}/v1/op/{key}", self.base))
            .header("Authorization", format!("Bearer {}", self.token))
            .content_type("application/json")
            .send(input.to_string().as_str())
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let status = resp.status().as_u16();
        let text = resp
            .into_body()
            .with_config()
            .limit(MAX_RESPONSE)
            .read_to_string()
            .map_err(|e| ClientError::Transport(format!("reading the {key} response: {e}")))?;
        let env: Envelope = serde_json::from_str(&text).map_err(|_| {
            ClientError::Transport(format!(
                "the host answered {key} with HTTP {status} and no envelope"
            ))
        })?;
        match (env.ok, env.result, env.error) {
            (true, Some(result), _) => Ok(result),
            (true, None, _) => Ok(Value::Null),
            (false, _, Some(e)) => Err(ClientError::Host(e)),
            (false, _, None) => Err(ClientError::Host(HostError::internal(format!(
                "{key} failed with HTTP {status}"
            )))),
        }
    }

    /// Opens one window of `sessionId`'s stream after `after`. `until_terminal`: the host ends
    /// the window right after the next `turn_terminal` frame (a reader following one turn).
    pub fn events(
        &self,
        session_id: &str,
        after: u64,
        epoch: &str,
        wait_ms: u64,
        until_terminal: bool,
    ) -> Result<EventStream, ClientError> {
        let until = if until_terminal {
            "&untilTerminal=1"
        } else {
            ""
        };
        let url = format!(
            "{}/v1/events?sessionId={session_id}&after={after}&epoch={epoch}&waitMs={wait_ms}{until}",
            self.base
        );
        let resp = self
            .streams
            .get(&url)
            .header("Authorization", format!("Bearer {}", self.token))
            .call()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        if resp.status().as_u16() != 200 {
            let text = resp
                .into_body()
                .with_config()
                .limit(1 << 20)
                .read_to_string()
                .unwrap_or_default();
            let env: Option<Envelope> = serde_json::from_str(&text).ok();
            let err = env
                .and_then(|e| e.error)
                .unwrap_or_else(|| HostError::internal("the event stream was refused"));
            return Err(ClientError::Host(err));
        }
        Ok(EventStream {
            reader: Box::new(BufReader::with_capacity(
                64 * 1024,
                resp.into_body().into_reader(),
            )),
            line: String::new(),
        })
    }

    pub fn hello(&self) -> Result<Value, ClientError> {
        self.op(
            "host.hello",
            &json!({"client": {"name": "maka-acp", "version": env!("CARGO_PKG_VERSION")}, "protocol": {"min": 1, "max": 1}, "features": ["client_calls"]}),
        )
    }

    /// Asks the host to drain and exit.
    pub fn shutdown(&self, drain_ms: u64) -> Result<(), ClientError> {
        self.ops
            .post(&format!("{}/v1/shutdown", self.base))
            .header("Authorization", format!("Bearer {}", self.token))
            .send(json!({"drainMs": drain_ms}).to_string().as_str())
            .map(|_| ())
            .map_err(|e| ClientError::Transport(e.to_string()))
    }
}
