//! What tools see of the turn ([`ToolEnv`]): its folders, its cancel token, command output,
//! and calls into the editor (files through its buffers, commands in its terminals).

use super::*;
use crate::host::changes::{Before, FileChange, Fingerprint};

impl ToolEnv for Turn {
    fn cwd(&self) -> &Path {
        &self.cwd
    }

    fn may_touch(&self, path: &Path) -> bool {
        !self.confinement.hides(path)
            && (self.roots.iter().any(|r| path.starts_with(r)) || self.approved(path))
    }

    fn hides(&self, path: &Path) -> bool {
        self.confinement.hides(path)
    }

    fn confinement(&self) -> crate::host::sandbox::Confinement {
        self.confinement.clone()
    }

    fn cancel(&self) -> &CancelToken {
        &self.spec.cancel
    }

    fn call_cancel(&self) -> Option<&CancelToken> {
        self.call_cancel.as_ref()
    }

    fn output(&mut self, stream: &str, chunk: &str) {
        // Frames stay bounded, as a model's deltas do.
        if chunk.len() > DELTA_FRAME_BYTES {
            for piece in frame_pieces(chunk) {
                self.output(stream, piece);
            }
            return;
        }
        let Some(tool_call_id) = self.current_tool.clone() else {
            return;
        };
        self.out_seq += 1;
        let mut st = self.cell.make_room(self.cell.lock());
        if self.end.is_ended() {
            return;
        }
        if let Some(t) = st
            .active
            .as_mut()
            .and_then(|a| a.tools.iter_mut().find(|t| t.tool_call_id == tool_call_id))
        {
            t.output_tail.push_str(chunk);
            crate::host_api::keep_tail(&mut t.output_tail, tools::RESULT_TEXT_LIMIT);
        }
        let body = FrameBody::ToolOutputDelta {
            turn_id: self.spec.turn_id.clone(),
            tool_call_id,
            out_seq: self.out_seq,
            stream: stream.into(),
            chunk: chunk.into(),
        };
        self.cell.emit(&mut st, body);
    }

    fn client_call(
        &mut self,
        service: &str,
        path: &Path,
        input: Value,
    ) -> Option<Result<Value, String>> {
        if !self.roots.iter().any(|r| path.starts_with(r)) || !self.has_client_service(service) {
            return None;
        }
        Some(
            self.call_client(service, input, CLIENT_CALL_TIMEOUT, false)
                .map_err(|e| e.to_string()),
        )
    }

    fn has_client_service(&self, service: &str) -> bool {
        self.cell
            .lock()
            .client_services
            .iter()
            .any(|s| s == service)
    }

    fn call_client(
        &mut self,
        service: &str,
        input: Value,
        timeout: Duration,
        cleanup: bool,
    ) -> Result<Value, tools::CallError> {
        // A cleanup call ignores the stop: `never` never fires.
        let never = crossbeam_channel::never();
        let cancel = if cleanup {
            &never
        } else {
            self.spec.cancel.receiver()
        };
        call_client(
            &self.cell,
            service,
            input,
            self.current_tool.clone(),
            timeout,
            cancel,
        )
    }

    fn store_artifact(&mut self, name: &str, data: &[u8]) -> Option<String> {
        let dir = self.host.store.session_dir(&self.cell.id);
        match self.host.artifacts.store(
            &dir,
            &self.cell.id,
            name,
            "text/plain",
            "tool_output",
            data,
        ) {
            Ok(a) => Some(a.artifact_id),
            Err(e) => {
                log::warn!(
                    "session {}: cannot keep a tool's output: {}",
                    self.cell.id,
                    e.message
                );
                None
            }
        }
    }

    fn file_changed(&mut self, path: &Path, before: Before, after: &str, via_editor: bool) {
        // Undoing the turn needs the content from before its first write only.
        let first = self.changed_paths.insert(path.to_path_buf());
        let before = if first { before } else { Before::SameTurn };
        let change = FileChange {
            turn_id: self.spec.turn_id.clone(),
            path: path.display().to_string(),
            before,
            after: Fingerprint::of(after.as_bytes()),
            via_editor,
        };
        let dir = self.host.store.session_dir(&self.cell.id);
        if let Err(e) = crate::host::changes::append(&dir, &change, self.host.store.fsync()) {
            // The write happened; only its undo is lost. Said in the log, not failed.
            log::error!(
                "session {}: cannot record the change to {} for undo: {e}",
                self.cell.id,
                path.display()
            );
        }
    }
}

/// One call delegated to the client (`client_call` frame), waiting for its result at most
/// `timeout` or until `cancel` fires. Also used outside turns (a rewind restoring a file
/// through the editor).
pub fn call_client(
    cell: &SessionCell,
    service: &str,
    input: Value,
    tool_call_id: Option<String>,
    timeout: Duration,
    cancel: &crossbeam_channel::Receiver<()>,
) -> Result<Value, tools::CallError> {
    use tools::CallError;
    let (tx, rx) = bounded(1);
    let invocation_id = random_id("c");
    {
        let mut st = cell.lock();
        if !st.offers(service) {
            return Err(CallError::Client(format!(
                "the client did not register {service}"
            )));
        }
        // A large input (a big file to write) travels by reference: the frame stays small
        // and the client fetches it with `client.call.input`.
        let input_ref = input.to_string().len() > CALL_INPUT_INLINE;
        st.client_calls.insert(
            invocation_id.clone(),
            crate::host::session::PendingClientCall {
                tx,
                tool_call_id: tool_call_id.clone(),
                service: service.into(),
                input: input.clone(),
            },
        );
        let body = FrameBody::ClientCall {
            invocation_id: invocation_id.clone(),
            tool_call_id,
            service: service.into(),
            input: if input_ref { Value::Null } else { input },
            input_ref,
        };
        cell.emit(&mut st, body);
    }
    let result = select! {
        recv(rx) -> r => r.unwrap_or_else(|_| Err("the call was dropped".into())).map_err(CallError::Client),
        recv(cancel) -> _ => Err(CallError::Cancelled),
        default(timeout) => Err(CallError::Timeout),
    };
    let mut st = cell.lock();
    if st.client_calls.remove(&invocation_id).is_some() {
        cell.emit(&mut st, FrameBody::ClientCallCancelled { invocation_id });
    }
    result
}
