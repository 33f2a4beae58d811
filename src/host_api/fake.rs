//! A scripted Runtime Host for in-process tests of the adapter (xi-rpc's `DummyPeer` idea):
//! each operation is answered by a typed closure ([`FakeHost::answer`]), event-stream windows
//! are served from a queue, and every call is recorded. No process, no socket, no timeout. An
//! operation with no answer is a host error naming it.

use super::client::{ClientError, EventStream, HostApi};
use super::ops::Operation;
use super::wire::{Envelope, Frame, HostError};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

type Handler = dyn Fn(&Value) -> Result<Value, HostError> + Send + Sync;

#[derive(Default)]
pub struct FakeHost {
    answers: HashMap<&'static str, Box<Handler>>,
    windows: Mutex<VecDeque<Vec<Frame>>>,
    /// Every operation called, with its input, in order.
    pub calls: Mutex<Vec<(String, Value)>>,
}

impl FakeHost {
    /// Answers operation `O` with `f` (its input decoded, its output encoded, as the real host
    /// and client do).
    pub fn answer<O: Operation>(
        mut self,
        f: impl Fn(O::Input) -> Result<O::Output, HostError> + Send + Sync + 'static,
    ) -> FakeHost {
        let handler = move |input: &Value| {
            let input = serde_json::from_value::<O::Input>(input.clone())
                .map_err(|e| HostError::internal(format!("{}: bad input: {e}", O::KEY)))?;
            f(input).map(|out| serde_json::to_value(out).unwrap_or(Value::Null))
        };
        self.answers.insert(O::KEY, Box::new(handler));
        self
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
        let answer = match self.answers.get(key) {
            Some(handler) => handler(&input),
            None => Err(HostError::internal(format!(
                "the fake host has no answer for {key}"
            ))),
        };
        let envelope = match answer {
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

    /// The fake keeps no owners: it cannot act for a principal.
    fn for_principal(&self, _: &str) -> Option<std::sync::Arc<dyn HostApi>> {
        None
    }

    fn attach(&self) -> Result<Box<dyn Send>, ClientError> {
        Ok(Box::new(()))
    }
}

/// A host every call to which fails as if it did not answer (a transport failure); `alive`:
/// whether it still answers its health check (slow but there) or not (gone or hung).
pub struct Unreachable {
    pub alive: bool,
}

impl HostApi for Unreachable {
    fn post(&self, _: &str, _: String) -> Result<(u16, String), ClientError> {
        Err(ClientError::Transport("connection refused".into()))
    }
    fn events(
        &self,
        _: &str,
        _: u64,
        _: &str,
        _: u64,
        _: bool,
    ) -> Result<EventStream, ClientError> {
        Err(ClientError::Transport("connection refused".into()))
    }
    fn is_alive(&self) -> bool {
        self.alive
    }
    fn shutdown(&self, _: u64) -> Result<(), ClientError> {
        Ok(())
    }
    fn for_principal(&self, _: &str) -> Option<std::sync::Arc<dyn HostApi>> {
        None
    }
    fn attach(&self) -> Result<Box<dyn Send>, ClientError> {
        Ok(Box::new(()))
    }
}
