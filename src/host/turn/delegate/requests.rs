//! What a delegation's agent asks of the host: each request routed to the part that serves it,
//! and the one gate its actions pass (the model's own, its dialogs titled by the host).

use super::*;

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
        if r.method == "terminal/wait_for_exit" {
            return terminals.wait_for_exit(&r.params, responder);
        }
        let result = match r.method.as_str() {
            "session/request_permission" => {
                let (answer, covers) = self.subagent_permission(name, &r.params, calls);
                *allowed = covers;
                Ok(answer)
            }
            "fs/read_text_file" => self.subagent_read(&r.params),
            "fs/write_text_file" => {
                let approved = allowed.take();
                self.subagent_write(name, &r.params, approved)
            }
            "terminal/create" => {
                let approved = allowed.take();
                self.subagent_terminal(name, &r.params, terminals, approved)
            }
            "terminal/output" => terminals.output(&r.params),
            "terminal/kill" => terminals.kill(&r.params),
            "terminal/release" => terminals.release(&r.params),
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
