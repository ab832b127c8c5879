//! Reading a reply's calls and answering them: every native call gets a tool message,
//! text-format observations go into the next user message.

use super::{PlannedCall, Session};
use crate::episode::stuck::loop_warning;
use crate::tools::{
    constrained_native_call, no_native_call_error, parse_actions, parse_native_call, untagged_json_calls, write_call,
    ActionParseError, ToolFormat,
};
use agent_llm::ChatMessage;
use agent_llm::ChatResponse;

impl Session {
    /// The actions of a reply in order. In the native format each gets the id of the call
    /// it answers: the backend's structured calls when it returned any, else the calls
    /// found in the text (`<tool_call>` JSON, or tags) with ids made here. Errors that
    /// belong to no call come second.
    /// The reply's calls and the errors of the ones that could not be read; the flag says
    /// that the reply attempted no call at all (see [`crate::tools::ParseOutcome::prose_only`]).
    pub(super) fn plan_calls(
        &self,
        response: &ChatResponse,
        turn: u32,
    ) -> (Vec<PlannedCall>, Vec<ActionParseError>, bool) {
        let native = self.cfg.tool_format == ToolFormat::Native;
        if native && !response.tool_calls.is_empty() {
            let planned = response
                .tool_calls
                .iter()
                .map(|c| PlannedCall {
                    call_id: Some(c.id.clone()),
                    action: parse_native_call(&c.name, &c.arguments, &self.specs),
                })
                .collect();
            return (planned, Vec::new(), false);
        }
        // Under the grammar the call is where the grammar opened it; the text before it is
        // prose, whatever it looks like.
        if native && self.cfg.constrain_calls && self.model.enforces_grammar() {
            if let Some(action) = constrained_native_call(&response.text, &self.specs) {
                let call = PlannedCall { call_id: Some(format!("call_{turn}_1")), action: Ok(action) };
                return (vec![call], Vec::new(), false);
            }
        }
        let mut parsed = parse_actions(&response.text, &self.specs);
        // A native reply without `<tool_call>` tags may still hold the call's JSON object.
        let no_call_here = parsed.actions.is_empty()
            && parsed.errors.iter().all(|e| e.tool.is_none())
            && !response.text.contains("<tool_call>");
        if native && no_call_here {
            let untagged = untagged_json_calls(&response.text, &self.specs);
            if !untagged.is_empty() {
                let planned = untagged
                    .into_iter()
                    .enumerate()
                    .map(|(i, action)| PlannedCall { call_id: Some(format!("call_{turn}_{}", i + 1)), action })
                    .collect();
                return (planned, Vec::new(), false);
            }
        }
        let prose_only = parsed.prose_only && !response.text.contains("<tool_call>");
        let planned: Vec<PlannedCall> = parsed
            .actions
            .into_iter()
            .enumerate()
            .map(|(i, action)| PlannedCall {
                call_id: native.then(|| format!("call_{turn}_{}", i + 1)),
                action: Ok(action),
            })
            .collect();
        let mut errors = std::mem::take(&mut parsed.errors);
        // A native reply with no call at all gets the native format's own explanation,
        // not the text format's (which would teach the model the wrong syntax).
        if native && no_call_here {
            errors = vec![no_native_call_error(&self.specs)];
        }
        (planned, errors, prose_only)
    }

    /// Adds a call's result: a tool message in the native format, else one part of the
    /// next user message.
    pub(super) fn push_observation(
        &mut self,
        call_id: Option<&str>,
        text: String,
        text_observations: &mut Vec<String>,
    ) {
        match call_id {
            Some(id) => {
                self.turn_results.push(text.clone());
                self.messages.push(ChatMessage::tool_result(id, text));
            }
            None => text_observations.push(text),
        }
    }

    /// The loop warning, with the finish call written in this episode's format. The
    /// example's message describes itself: small models copy an example's words.
    pub(super) fn loop_warning(&self) -> String {
        loop_warning(self.finish_example().as_deref())
    }

    /// The finish call written in this episode's format, for the notes that offer it.
    pub(super) fn finish_example(&self) -> Option<String> {
        self.specs.get("finish").map(|_| {
            let args = serde_json::json!({"message": "one line: what was done and how it was checked"});
            write_call("finish", &args, self.cfg.tool_format)
        })
    }

    /// Answers the structured calls of a reply that will not run (the reply was cut off),
    /// so the conversation stays valid for APIs that require an answer to every call.
    pub(super) fn answer_unrun_calls(&mut self, response: &ChatResponse, why: &str) {
        if self.cfg.tool_format != ToolFormat::Native {
            return;
        }
        for call in &response.tool_calls {
            self.messages.push(ChatMessage::tool_result(call.id.clone(), why));
        }
    }
}
