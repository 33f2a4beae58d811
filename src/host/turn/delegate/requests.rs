//! What a delegation's agent asks of the host: each request routed to the part that serves it,
//! and the one gate its actions pass (the model's own, its dialogs titled by the host).

use super::*;
use crate::acp::types::from_agents::read_object;

impl Turn {
    /// A request of the agent: permissions go to the person (by this session's mode), files are
    /// served inside the session's folders, commands by the host's runner (not in explore
    /// mode), anything else is not offered.
    pub(super) fn serve_subagent(
        &mut self,
        name: &str,
        r: Request,
        responder: Responder,
        calls: &mut ChildCalls,
        terminals: &mut subagents::terminals::Terminals,
        allowed: &mut Option<Shown>,
    ) {
        let Request { method, params, .. } = r;
        if method == "terminal/wait_for_exit" {
            return match read::<TerminalRef>(&method, params) {
                Ok(t) => terminals.wait_for_exit(&t, responder),
                Err(e) => responder.respond(Err(e)),
            };
        }
        let result = match method.as_str() {
            "session/request_permission" => {
                // A new dialog: what an earlier one allowed covers nothing any more.
                *allowed = None;
                read::<RequestPermission>(&method, params).map(|asked| {
                    let (answer, covers) = self.subagent_permission(name, &asked, calls);
                    *allowed = covers;
                    to_json(&answer)
                })
            }
            "fs/read_text_file" => read(&method, params).and_then(|r| self.subagent_read(&r)),
            "fs/write_text_file" => {
                let approved = allowed.take();
                read(&method, params).and_then(|w| self.subagent_write(name, &w, approved))
            }
            "terminal/create" => {
                let approved = allowed.take();
                read(&method, params)
                    .and_then(|c| self.subagent_terminal(name, &c, terminals, approved))
            }
            "terminal/output" => read(&method, params).and_then(|t| terminals.output(&t)),
            "terminal/kill" => read(&method, params).and_then(|t| terminals.kill(&t)),
            "terminal/release" => read(&method, params).and_then(|t| terminals.release(&t)),
            other => Err(ResponseError::new(
                code::METHOD_NOT_FOUND,
                format!("maka-acp does not offer {other} to subagents"),
            )),
        };
        responder.respond(result);
    }

    /// A subagent's action through [`Turn::pass_gate`], its dialogs naming the delegate call
    /// and titled by the host: "<agent>: <what>".
    pub(super) fn subagent_gate(
        &mut self,
        name: &str,
        tool: &str,
        args: &Value,
        what: &str,
        shown: bool,
    ) -> Result<(), ResponseError> {
        let mut plan = tools::plan(tool, args, &self.cwd)
            .map_err(|e| ResponseError::new(code::INVALID_PARAMS, e))?;
        plan.title = format!("{name}: {what}");
        let id = self.delegating.clone().unwrap_or_default();
        match self.pass_gate(&id, tool, args, &plan, shown) {
            None => Ok(()),
            Some(refused) => {
                let why = match refused.result {
                    ToolResultContent::Text { text } => text,
                    _ => "the user did not allow this".to_string(),
                };
                Err(ResponseError::new(code::INVALID_REQUEST, why))
            }
        }
    }
}

/// A request's params as the ACP type they are, else the error the agent is answered with
/// (what does not read, and why).
fn read<T: serde::de::DeserializeOwned>(method: &str, params: Value) -> Result<T, ResponseError> {
    read_object(&params).map_err(|e| {
        let why = e.to_string();
        ResponseError::invalid_params(format!(
            "{method}: {}",
            crate::host_api::head(&why, MAX_ERROR)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request whose params do not read as ACP's is answered "invalid params", naming the
    /// method and what is wrong (and never runs).
    #[test]
    fn params_that_do_not_read_are_refused_saying_why() {
        let rows: Vec<(&str, Value, &str)> = vec![
            (
                "terminal/create",
                json!({"sessionId": "s"}),
                "missing field `command`",
            ),
            (
                "terminal/create",
                json!({"sessionId": "s", "command": "ls", "args": ["-l", 5]}),
                "invalid type: integer `5`",
            ),
            (
                "terminal/create",
                json!({"sessionId": "s", "command": "ls", "env": [{"name": "A"}]}),
                "missing field `value`",
            ),
            (
                "fs/write_text_file",
                json!({"sessionId": "s", "path": "/a"}),
                "missing field `content`",
            ),
            (
                "fs/read_text_file",
                json!({"sessionId": "s", "path": 3}),
                "invalid type: integer `3`",
            ),
            (
                "terminal/output",
                json!(null),
                "expected an object, found null",
            ),
            (
                "session/request_permission",
                json!({"sessionId": "s", "options": []}),
                "missing field `toolCall`",
            ),
        ];
        for (method, params, why) in rows {
            let e = match method {
                "terminal/create" => read::<CreateTerminal>(method, params).map(drop),
                "fs/write_text_file" => read::<WriteTextFile>(method, params).map(drop),
                "fs/read_text_file" => read::<ReadTextFile>(method, params).map(drop),
                "terminal/output" => read::<TerminalRef>(method, params).map(drop),
                _ => read::<RequestPermission>(method, params).map(drop),
            }
            .unwrap_err();
            assert_eq!(e.code, code::INVALID_PARAMS, "{method}");
            assert!(
                e.message
                    .starts_with(&format!("Invalid params: {method}: "))
                    && e.message.contains(why),
                "{method}: {}",
                e.message
            );
        }
        // A long value the agent sent is not quoted whole.
        let long = "x".repeat(10_000);
        let e = read::<ReadTextFile>(
            "fs/read_text_file",
            json!({"sessionId": "s", "path": "/a", "line": long}),
        )
        .unwrap_err();
        assert!(e.message.contains("xxxx"), "{}", e.message);
        assert!(e.message.len() < 400, "{}", e.message.len());
    }
}
