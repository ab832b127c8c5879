//! Plan mode (as Claude Code has it): the agent researches without changing files, every
//! bash command asks the user, and the turn's answer is a plan the user accepts or
//! rejects. Natively called tools are offered read-only (the file tool can only read);
//! the text format's tool list lives in the system prompt and stays, so its cached
//! prefix survives a switch. Either way the mode is enforced here, call by call.

use serde_json::json;

use super::Session;
use crate::tools::Action;
use agent_llm::ToolDefinition;
use agent_protocol::{ApprovalMode, Event, Op};

/// Told to the model with each prompt while plan mode is on.
const PLAN_REMINDER: &str = "<plan_mode>\nPlan mode is on. Research only: read files and search (bash commands need the user's approval, one by one); do not change any file. When you know what to do, answer with the plan: the steps, the files each touches, and how you will check the result. The user will accept it or tell you what to change.\n</plan_mode>";

impl Session {
    /// Switches the approval mode.
    pub(super) fn set_mode(&mut self, mode: ApprovalMode) {
        self.cfg.approval = mode;
    }

    /// Applies mode changes that arrived while a model call or tool ran (they wait in
    /// the queue with the other ops).
    pub(super) fn apply_queued_modes(&mut self) {
        let mut latest = None;
        self.queued.retain(|op| match op {
            Op::SetApprovalMode { mode } => {
                latest = Some(*mode);
                false
            }
            _ => true,
        });
        if let Some(mode) = latest {
            self.set_mode(mode);
        }
    }

    /// The prompt, with the plan-mode reminder when the mode is on.
    pub(super) fn with_plan_reminder(&self, text: String) -> String {
        if self.cfg.approval == ApprovalMode::Plan {
            format!("{text}\n\n{PLAN_REMINDER}")
        } else {
            text
        }
    }

    /// The observation refusing a call that would change files in plan mode.
    pub(super) fn plan_refusal(&self, action: &Action) -> Option<String> {
        if self.cfg.approval != ApprovalMode::Plan || !changes_files(action) {
            return None;
        }
        Some(format!(
            "<{0}_output>\nerror: plan mode is on, so files cannot be changed and nothing was written. Put this change in your plan; the user starts the work by accepting it.\n</{0}_output>",
            action.tool
        ))
    }

    /// At the end of plan mode's work: the answer is the plan, for the user to decide on.
    pub(super) fn propose_plan(&self, answer: &str) {
        if self.cfg.approval == ApprovalMode::Plan && !answer.trim().is_empty() {
            self.emit(Event::PlanProposed { plan: answer.to_string() });
        }
    }
}

/// The tools offered natively in plan mode: the file tool reads only; bash (which asks)
/// and the rest stay.
pub(super) fn plan_tools(tools: &[ToolDefinition]) -> Vec<ToolDefinition> {
    tools
        .iter()
        .cloned()
        .map(|mut t| {
            if t.name == "file" {
                if let Some(action) = t.parameters.pointer_mut("/properties/action") {
                    action["enum"] = json!(["read", "metadata"]);
                }
                t.description.push_str(" In plan mode files are only read: `read` and `metadata`.");
            }
            t
        })
        .collect()
}

/// Whether a call writes files by itself (bash is asked about instead).
pub(super) fn changes_files(action: &Action) -> bool {
    action.tool == "file"
        && matches!(action.args.get("action").and_then(|v| v.as_str()), Some("write" | "edit" | "multi_edit"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolSpecs;

    #[test]
    fn plan_mode_offers_the_file_tool_read_only() {
        let tools = ToolSpecs::builtin().unwrap().definitions();
        let plan = plan_tools(&tools);
        let file = plan.iter().find(|t| t.name == "file").unwrap();
        assert_eq!(file.parameters["properties"]["action"]["enum"], json!(["read", "metadata"]));
        let before = tools.iter().find(|t| t.name == "file").unwrap();
        assert!(before.parameters["properties"]["action"]["enum"].as_array().unwrap().len() > 2);
        assert_eq!(plan.len(), tools.len());
    }
}
