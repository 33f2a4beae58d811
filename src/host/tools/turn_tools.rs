//! Tools the turn runs itself, because they talk to the user rather than the machine:
//! `update_plan` (shown as the ACP plan) and `ask_user` (a question dialog). Here: how the model
//! sees them and how a call is shown; the running is in `host/turn/calls.rs`.

use super::{Tool, ToolEnv, ToolOutcome, ToolPlan};
use serde_json::{json, Value};
use std::path::Path;

fn plan(title: String) -> ToolPlan {
    ToolPlan {
        title,
        activity_kind: "tool",
        locations: vec![],
        review: None,
        touches: vec![],
    }
}

/// Never called: the turn runs these tools before the registry would.
fn run_in_turn(name: &str) -> ToolOutcome {
    ToolOutcome::failed(format!("{name} is run by the turn itself"))
}

pub struct UpdatePlan;

impl Tool for UpdatePlan {
    fn name(&self) -> &'static str {
        "update_plan"
    }

    fn spec(&self) -> (&'static str, Value) {
        (
            "Show the user your plan as a list of steps with their status. Send the complete list each time.",
            json!({"type": "object", "properties": {"entries": {"type": "array", "items": {"type": "object", "properties": {
                "content": {"type": "string"},
                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                "priority": {"type": "string", "enum": ["high", "medium", "low"]}}, "required": ["content", "status"]}}},
                "required": ["entries"]}),
        )
    }

    fn plan(&self, _: &Value, _: &Path) -> Result<ToolPlan, String> {
        Ok(plan("Update plan".into()))
    }

    fn run(&self, _: &mut dyn ToolEnv, _: &Value) -> ToolOutcome {
        run_in_turn(self.name())
    }
}

pub struct AskUser;

impl Tool for AskUser {
    fn name(&self) -> &'static str {
        "ask_user"
    }

    fn spec(&self) -> (&'static str, Value) {
        (
            "Ask the user one to three questions, each with two or three options. Returns the chosen labels (null = skipped).",
            json!({"type": "object", "properties": {"questions": {"type": "array", "items": {"type": "object", "properties": {
                "question": {"type": "string"},
                "options": {"type": "array", "items": {"type": "object", "properties": {"label": {"type": "string"}, "description": {"type": "string"}}, "required": ["label"]}}},
                "required": ["question", "options"]}}}, "required": ["questions"]}),
        )
    }

    fn plan(&self, args: &Value, _: &Path) -> Result<ToolPlan, String> {
        let q = args
            .pointer("/questions/0/question")
            .and_then(Value::as_str)
            .unwrap_or("a question");
        Ok(plan(format!("Ask: {q}")))
    }

    fn run(&self, _: &mut dyn ToolEnv, _: &Value) -> ToolOutcome {
        run_in_turn(self.name())
    }
}

pub struct Remember;

impl Tool for Remember {
    fn name(&self) -> &'static str {
        "remember"
    }

    fn spec(&self) -> (&'static str, Value) {
        (
            "Keep a short note for later sessions (the user sees and manages it with /memory). Use it when the user asks you to remember something or states a lasting preference. scope: workspace (default: sessions in this folder), user (every session) or session.",
            json!({"type": "object", "properties": {
                "text": {"type": "string"},
                "scope": {"type": "string", "enum": ["workspace", "user", "session"]}},
                "required": ["text"]}),
        )
    }

    fn plan(&self, args: &Value, _: &Path) -> Result<ToolPlan, String> {
        let text = args.get("text").and_then(Value::as_str).unwrap_or("");
        Ok(plan(format!(
            "Remember: {}",
            super::fs::cut_words(text, 60)
        )))
    }

    fn run(&self, _: &mut dyn ToolEnv, _: &Value) -> ToolOutcome {
        run_in_turn(self.name())
    }
}

pub struct ReadArtifact;

impl Tool for ReadArtifact {
    fn name(&self) -> &'static str {
        "read_artifact"
    }

    fn spec(&self) -> (&'static str, Value) {
        (
            "Read a stored artifact of this session (a large attachment, a command's whole output) in pages. artifact: its id or name; offset and limit in bytes (limit at most 48 KiB, default 32 KiB).",
            json!({"type": "object", "properties": {
                "artifact": {"type": "string"},
                "offset": {"type": "integer", "minimum": 0},
                "limit": {"type": "integer", "minimum": 1}},
                "required": ["artifact"]}),
        )
    }

    fn plan(&self, args: &Value, _: &Path) -> Result<ToolPlan, String> {
        let id = args.get("artifact").and_then(Value::as_str).unwrap_or("?");
        Ok(ToolPlan {
            activity_kind: "read",
            ..plan(format!("Read artifact {id}"))
        })
    }

    fn run(&self, _: &mut dyn ToolEnv, _: &Value) -> ToolOutcome {
        run_in_turn(self.name())
    }
}

pub struct GoalComplete;

impl Tool for GoalComplete {
    fn name(&self) -> &'static str {
        "goal_complete"
    }

    fn spec(&self) -> (&'static str, Value) {
        (
            "Only while working toward an armed goal: declare the goal met, with the evidence (what you checked and saw). Ends the goal's run of turns.",
            json!({"type": "object", "properties": {"evidence": {"type": "string"}}, "required": ["evidence"]}),
        )
    }

    fn plan(&self, _: &Value, _: &Path) -> Result<ToolPlan, String> {
        Ok(plan("Goal met".into()))
    }

    fn run(&self, _: &mut dyn ToolEnv, _: &Value) -> ToolOutcome {
        run_in_turn(self.name())
    }
}
