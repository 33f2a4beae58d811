//! A scripted Runtime Host for in-process tests of the adapter (xi-rpc's `DummyPeer` idea):
//! operations are answered by a closure, event-stream windows are served from a queue, and
//! every call is recorded. No process, no socket, no timeout.

use super::client::{ClientError, EventStream, HostApi};
use super::wire::{Envelope, Frame, HostError};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Mutex;

type Handler = dyn Fn(&str, &Value) -> Result<Value, HostError> + Send + Sync;

pub struct FakeHost {
    handler: Box<Handler>,
    windows: Mutex<VecDeque<Vec<Frame>>>,
    /// Every operation called, with its input, in order.
    pub calls: Mutex<Vec<(String, Value)>>,
}

impl FakeHost {
    pub fn new(
        handler: impl Fn(&str, &Value) -> Result<Value, HostError> + Send + Sync + 'static,
    ) -> FakeHost {
        FakeHost {
            handler: Box::new(handler),
            windows: Mutex::new(VecDeque::new()),
            calls: Mutex::new(Vec::new()),
        }
    }

    /// The frames of the next event-stream window a reader opens.
    pub fn window(&self, frames: Vec<Frame>) {
        crate::jsonrpc::lock(&self.windows).push_back(frames);
    }

    /// The operations called so far, by key.
    pub fn called(&self) -> Vec<String> {
        crate::jsonrpc::lock(&self.calls)
            .iter()
            .map(|(k, _)| k.clone())
            .collect()
    }
}

impl HostApi for FakeHost {
    fn post(&self, key: &str, body: String) -> Result<(u16, String), ClientError> {
        let input: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        crate::jsonrpc::lock(&self.calls).push((key.to_string(), input.clone()));
        let envelope = match (self.handler)(key, &input) {
            Ok(result) => Envelope {
                ok: true,
                result: Some(result),
                error: None,
            },
            Err(e) => Envelope {
                ok: false,
                result: None,
                error: Some(e),
            },
        };
        let status = if envelope.ok { 200 } else { 400 };
        Ok((status, serde_json::to_string(&envelope).unwrap_or_default()))
    }

    fn events(
        &self,
        _session_id: &str,
        _after: u64,
        _epoch: &str,
        _wait_ms: u64,
        _until_terminal: bool,
    ) -> Result<EventStream, ClientError> {
        let frames = crate::jsonrpc::lock(&self.windows)
            .pop_front()
            .ok_or_else(|| ClientError::Transport("no window scripted".into()))?;
        let mut text = String::new();
        for f in frames {
            text.push_str(&serde_json::to_string(&f).unwrap_or_default());
            text.push('\n');
        }
        Ok(EventStream::from_reader(Box::new(std::io::Cursor::new(
            text.into_bytes(),
        ))))
    }

    fn is_alive(&self) -> bool {
        true
    }

    fn shutdown(&self, _drain_ms: u64) -> Result<(), ClientError> {
        Ok(())
    }

    fn attach(&self) -> Result<Box<dyn Send>, ClientError> {
        Ok(Box::new(()))
    }
}
