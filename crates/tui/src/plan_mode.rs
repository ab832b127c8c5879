//! Approval modes in the UI, plan mode's among them: Shift+Tab cycles ask → auto-edit →
//! auto → plan; a plan that arrives waits for the user's yes (work starts in the mode
//! before plan mode) or no (plan mode stays on and the next message says what to change).

use ratatui::crossterm::event::{KeyCode, KeyEvent};

use agent_protocol::{ApprovalMode, Op};

use super::app::{App, Effect};

/// What the UI sends when the user accepts a plan.
pub const PLAN_ACCEPTED: &str = "I accept the plan. Carry it out now, step by step, and check the result.";

/// The next mode for Shift+Tab.
pub fn next_mode(mode: ApprovalMode) -> ApprovalMode {
    match mode {
        ApprovalMode::Ask => ApprovalMode::AutoEdit,
        ApprovalMode::AutoEdit => ApprovalMode::Auto,
        ApprovalMode::Auto => ApprovalMode::Plan,
        ApprovalMode::Plan => ApprovalMode::Ask,
    }
}

/// The mode the core runs in while the UI is in `mode`: the UI answers approval
/// requests itself, so the core asks about everything any mode may want to confirm;
/// plan mode's rules (no file changes, every command asks) are the core's.
pub fn core_mode(mode: ApprovalMode) -> ApprovalMode {
    if mode == ApprovalMode::Plan {
        ApprovalMode::Plan
    } else {
        ApprovalMode::Ask
    }
}

impl App {
    /// Switches the mode. Entering plan mode remembers the mode to go back to; the core
    /// hears of a change only when its own mode changes.
    pub fn set_mode(&mut self, mode: ApprovalMode) -> Vec<Effect> {
        let before = self.mode;
        if mode == ApprovalMode::Plan && before != ApprovalMode::Plan {
            self.plan_return = before;
        }
        self.mode = mode;
        if mode != ApprovalMode::Plan {
            self.pending_plan = None;
        }
        if core_mode(before) == core_mode(mode) {
            return Vec::new();
        }
        vec![Effect::Op(Op::SetApprovalMode { mode: core_mode(mode) })]
    }

    /// Plan mode's work ended with `plan`: the user is asked to accept it.
    pub(super) fn plan_proposed(&mut self, plan: String) {
        if self.mode == ApprovalMode::Plan {
            self.pending_plan = Some(plan);
        }
    }

    /// A key while a plan waits for the user's decision.
    pub(super) fn plan_key(&mut self, key: KeyEvent) -> Vec<Effect> {
        match key.code {
            KeyCode::Char('y' | 'Y') | KeyCode::Enter => {
                self.pending_plan = None;
                let back = self.plan_return;
                let mut effects = self.set_mode(back);
                self.info(format!("plan accepted: working in {} mode", back.name()));
                effects.extend(self.user_turn_shown(PLAN_ACCEPTED.to_string(), "Go ahead with the plan.".into()));
                effects
            }
            KeyCode::Char('n' | 'N') | KeyCode::Esc => {
                self.pending_plan = None;
                self.info("plan mode stays on: say what to change, and the agent revises the plan");
                Vec::new()
            }
            KeyCode::BackTab => self.set_mode(super::plan_mode::next_mode(self.mode)),
            _ => Vec::new(),
        }
    }
}
