//! Where the session runs the user's hooks (see [`crate::hooks`]): at its start, on each
//! prompt, around each tool call, and when the agent would stop.

use serde_json::{json, Value};

use super::Session;
use crate::hooks::{claude_tool_input, claude_tool_name, HookEvent, HookVerdict, Permission};
use crate::tools::Action;
use agent_protocol::{ApprovalMode, Event};

/// What the `PreToolUse` hooks let a call do.
pub(super) enum ToolGate {
    /// Run it; `approval` overrides the mode's answer to "does it need the user's
    /// approval?" (`allow` skips the question, `ask` forces it).
    Run { approval: Option<bool>, reason: Option<String> },
    /// Do not run it; the reason goes to the model.
    Block(String),
}

/// The `permission_mode` a hook sees, in Claude Code's words.
fn mode_name(mode: ApprovalMode) -> &'static str {
    match mode {
        ApprovalMode::Ask => "default",
        ApprovalMode::AutoEdit => "acceptEdits",
        ApprovalMode::Auto => "bypassPermissions",
        ApprovalMode::Plan => "plan",
    }
}

impl Session {
    async fn run_hooks(&mut self, event: HookEvent, names: &[&str], fields: Value) -> HookVerdict {
        if self.cfg.hooks.is_empty() {
            return HookVerdict::default();
        }
        let verdict = self.cfg.hooks.run(event, names, fields, mode_name(self.cfg.approval)).await;
        for note in &verdict.notes {
            self.emit(Event::Notice { message: note.clone() });
        }
        if let Some(reason) = &verdict.stop {
            self.emit(Event::Notice { message: format!("a {} hook stopped the work: {reason}", event.name()) });
            self.flags.interrupted = true;
        }
        verdict
    }

    /// `SessionStart`: context for the model goes before the first prompt.
    pub(super) async fn session_start_hooks(&mut self) {
        let source = if self.messages.is_empty() { "startup" } else { "resume" };
        let verdict = self.run_hooks(HookEvent::SessionStart, &[source], json!({"source": source})).await;
        // A stop at the start only stops that first piece of work.
        self.flags.interrupted = false;
        self.hook_context.extend(verdict.context);
    }

    /// `UserPromptSubmit`: the prompt as the model gets it (with the hooks' context), or
    /// why it was blocked (for the user; the prompt is dropped).
    pub(super) async fn prompt_hooks(&mut self, text: String) -> Result<String, String> {
        let verdict = self.run_hooks(HookEvent::UserPromptSubmit, &[], json!({"prompt": text})).await;
        if let Some(reason) = verdict.blocked {
            return Err(reason);
        }
        let mut context = std::mem::take(&mut self.hook_context);
        context.extend(verdict.context);
        if context.is_empty() {
            return Ok(text);
        }
        Ok(format!("{text}\n\n<hook_context>\n{}\n</hook_context>", context.join("\n\n")))
    }

    /// `PreToolUse` for one call.
    pub(super) async fn pre_tool_hooks(&mut self, action: &Action) -> ToolGate {
        let claude = claude_tool_name(&action.tool, &action.args);
        let input = claude_tool_input(&action.tool, &action.args, self.executor.shell().cwd());
        let fields = json!({"tool_name": claude, "tool_input": input});
        let verdict = self.run_hooks(HookEvent::PreToolUse, &[&claude, &action.tool], fields).await;
        if let Some(reason) = verdict.denial() {
            return ToolGate::Block(reason);
        }
        let approval = match verdict.permission {
            Some(Permission::Allow) => Some(false),
            Some(Permission::Ask) => Some(true),
            _ => None,
        };
        ToolGate::Run { approval, reason: verdict.permission_reason }
    }

    /// `PostToolUse` for one call that ran: feedback for the model, if any.
    pub(super) async fn post_tool_hooks(
        &mut self,
        action: &Action,
        observation: &str,
        exit_code: Option<i64>,
    ) -> Option<String> {
        let claude = claude_tool_name(&action.tool, &action.args);
        let input = claude_tool_input(&action.tool, &action.args, self.executor.shell().cwd());
        let fields = json!({
            "tool_name": claude,
            "tool_input": input,
            "tool_response": {"output": observation, "exit_code": exit_code},
        });
        let verdict = self.run_hooks(HookEvent::PostToolUse, &[&claude, &action.tool], fields).await;
        let mut parts: Vec<String> = verdict.blocked.into_iter().collect();
        parts.extend(verdict.context);
        (!parts.is_empty()).then(|| parts.join("\n"))
    }

    /// `Stop`: why the agent must go on, if a hook says so. `active` tells the hook
    /// that the agent already goes on because of a stop hook (so it can let it stop).
    pub(super) async fn stop_hooks(&mut self, active: bool) -> Option<String> {
        let verdict = self.run_hooks(HookEvent::Stop, &[], json!({"stop_hook_active": active})).await;
        if self.flags.interrupted {
            return None;
        }
        verdict.blocked
    }
}
