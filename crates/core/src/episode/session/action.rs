//! One tool call: the plan-mode check, the `PreToolUse` hooks, the user's approval, the
//! run in the sandbox, and the `PostToolUse` hooks.

use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::hooks::ToolGate;
use super::{plan_mode, race, Session};
use crate::episode::swap_tool_section;
use crate::episode::trajectory::ObservationRecord;
use crate::tools::{Action, ToolFormat};
use agent_protocol::{ApprovalDecision, ApprovalMode, Event, Op};

impl Session {
    /// Runs one action (asking for approval when the mode requires it).
    pub(super) async fn run_action(
        &mut self,
        call_id: &str,
        action: &Action,
    ) -> Result<(ObservationRecord, Option<String>), String> {
        let args = serde_json::Value::Object(action.args.clone());
        self.emit(Event::ToolCallBegin { call_id: call_id.into(), tool: action.tool.clone(), args: args.clone() });
        let started = Instant::now();
        let mut record = ObservationRecord {
            call_id: call_id.into(),
            tool: action.tool.clone(),
            args: action.args.clone(),
            observation: String::new(),
            exit_code: None,
            timed_out: false,
            duration_ms: 0,
        };
        self.apply_queued_modes();
        if let Some(refusal) = self.plan_refusal(action) {
            record.observation = refusal;
            record.exit_code = Some(1);
            self.end_call(&record, started);
            return Ok((record, None));
        }
        let (hook_approval, hook_reason) = match self.pre_tool_hooks(action).await {
            ToolGate::Block(reason) => {
                record.observation = format!(
                    "<{0}_output>\nblocked by a PreToolUse hook; it did not run:\n{reason}\n</{0}_output>",
                    action.tool
                );
                record.exit_code = Some(1);
                self.end_call(&record, started);
                return Ok((record, None));
            }
            ToolGate::Run { approval, reason } => (approval, reason),
        };
        if self.flags.any() {
            record.observation =
                format!("<{0}_output>\nthe call did not run: the work was stopped\n</{0}_output>", action.tool);
            self.end_call(&record, started);
            return Ok((record, None));
        }
        let is_mcp = self.executor.mcp().is_some_and(|m| m.owns(&action.tool));
        let plan_asks = self.cfg.approval == ApprovalMode::Plan && (action.tool == "bash" || is_mcp);
        let ask = plan_asks || hook_approval.unwrap_or_else(|| self.needs_approval(action));
        if ask {
            let reason =
                if plan_asks { Some("plan mode: every command and MCP tool asks".to_string()) } else { hook_reason };
            self.emit(Event::ApprovalRequest { call_id: call_id.into(), tool: action.tool.clone(), args, reason });
            match self.wait_approval(call_id).await {
                Some(ApprovalDecision::Approve) => {}
                Some(ApprovalDecision::ApproveAlways) => {
                    self.always_approved.insert(action.tool.clone());
                }
                Some(ApprovalDecision::Deny) | None => {
                    record.observation = format!(
                        "<{0}_output>\nthe user denied this action; it did not run. Ask or try another approach.\n</{0}_output>",
                        action.tool
                    );
                    self.end_call(&record, started);
                    return Ok((record, None));
                }
            }
        }
        // The call's duration is its run's, not the user's time to approve it.
        let started = Instant::now();
        let cancel = CancellationToken::new();
        let events = self.events.clone();
        let id = call_id.to_string();
        let mut on_output = move |chunk: &str| {
            if !chunk.is_empty() {
                let _ = events.send(Event::ToolCallOutput { call_id: id.clone(), chunk: chunk.to_string() });
            }
        };
        let run = self.executor.execute(action, &cancel, &mut on_output);
        let outcome = race(run, &mut self.ops, &cancel, self.deadline, &mut self.flags, &mut self.queued).await;
        let outcome = outcome.map_err(|e| format!("the sandbox failed: {e}"))?;
        record.observation = outcome.observation;
        record.exit_code = outcome.exit_code;
        record.timed_out = outcome.timed_out;
        self.report_mcp().await;
        if let Some(feedback) = self.post_tool_hooks(action, &record.observation, record.exit_code).await {
            record.observation.push_str(&format!("\n<post_tool_hook>\n{feedback}\n</post_tool_hook>"));
        }
        self.end_call(&record, started);
        Ok((record, outcome.finish))
    }

    pub(super) fn end_call(&self, record: &ObservationRecord, started: Instant) {
        self.emit(Event::ToolCallEnd {
            call_id: record.call_id.clone(),
            tool: record.tool.clone(),
            exit_code: record.exit_code,
            observation: record.observation.clone(),
            duration_ms: started.elapsed().as_millis() as u64,
            timed_out: record.timed_out,
        });
    }

    fn needs_approval(&self, action: &Action) -> bool {
        if self.always_approved.contains(&action.tool) {
            return false;
        }
        let writes_files = plan_mode::changes_files(action);
        // An MCP tool may do anything its server does: it asks wherever bash asks.
        let is_mcp = self.executor.mcp().is_some_and(|m| m.owns(&action.tool));
        match self.cfg.approval {
            ApprovalMode::Auto => false,
            ApprovalMode::AutoEdit => action.tool == "bash" || is_mcp,
            ApprovalMode::Ask | ApprovalMode::Plan => action.tool == "bash" || is_mcp || writes_files,
        }
    }

    async fn wait_approval(&mut self, call_id: &str) -> Option<ApprovalDecision> {
        loop {
            let op = if self.flags.ops_closed { None } else { self.ops.recv().await };
            match op {
                Some(Op::Approval { call_id: id, decision }) if id == call_id => return Some(decision),
                Some(Op::Interrupt) => {
                    self.flags.interrupted = true;
                    return None;
                }
                Some(Op::Shutdown) | None => {
                    self.flags.shutdown = true;
                    self.flags.ops_closed |= op.is_none();
                    return None;
                }
                Some(other) => self.queued.push_back(other),
            }
        }
    }

    /// Tells the user about MCP servers that failed or stopped since the last look.
    pub(super) async fn report_mcp(&mut self) {
        let Some(mcp) = self.executor.mcp().cloned() else { return };
        mcp.check().await;
        // A server said its tools changed: the model's next turn sees the new list.
        if mcp.tools_changed() && mcp.refresh_tools().await {
            let (specs, notices) = mcp.respec(&self.specs);
            let format = self.cfg.tool_format;
            self.cfg.system_prompt = swap_tool_section(&self.cfg.system_prompt, &self.specs, &specs, format);
            if format == ToolFormat::Native {
                self.tools = specs.definitions();
            }
            self.specs = specs;
            for message in notices {
                self.emit(Event::Notice { message });
            }
        }
        for message in mcp.take_notices() {
            self.emit(Event::Notice { message });
        }
    }
}
