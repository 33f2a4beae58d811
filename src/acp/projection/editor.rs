//! A call the host asks the editor to make (`client_call`), and the ACP request it becomes:
//! files through `fs/read_text_file` / `fs/write_text_file`, commands through `terminal/*`.
//! Pure: the call's thread (`client_call.rs`) sends it and returns the reply to the host.

use serde_json::{json, Value};

/// A call the host asks the editor to make (`client_call`).
pub struct EditorCall {
    pub invocation_id: String,
    pub tool_call_id: Option<String>,
    pub service: String,
    pub input: Value,
    /// The input is large and was not in the frame: fetch it with `client.call.input`.
    pub input_ref: bool,
}

impl EditorCall {
    /// The ACP request for a host service, or why there is none.
    pub fn request(&self, session_id: &str) -> Result<(&'static str, Value), String> {
        let mut params = match &self.input {
            Value::Object(m) => Value::Object(m.clone()),
            _ => return Err("the call's input is not an object".into()),
        };
        params["sessionId"] = json!(session_id);
        let method = match self.service.as_str() {
            "fs.read_text_file" => "fs/read_text_file",
            "fs.write_text_file" => "fs/write_text_file",
            "terminal.create" => {
                params["env"] = json!([]);
                "terminal/create"
            }
            "terminal.output" => "terminal/output",
            "terminal.wait_for_exit" => "terminal/wait_for_exit",
            "terminal.kill" => "terminal/kill",
            "terminal.release" => "terminal/release",
            other => return Err(format!("this adapter does not perform {other}")),
        };
        // Optional fields are omitted rather than sent as null.
        if let Value::Object(m) = &mut params {
            m.retain(|_, v| !v.is_null());
        }
        Ok((method, params))
    }
}
