//! The episode as the judge sees it, read back from a trajectory file (`agent run`'s
//! JSONL), plus the facts that decide the hard caps without asking any model.

use std::path::Path;

use serde::Deserialize;

use super::{JudgeError, TrajectoryError};

/// One tool call and what it returned.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JudgedCall {
    /// The tool's name (`bash`, `file`, ...).
    pub tool: String,
    /// Its arguments as the agent gave them.
    #[serde(default)]
    pub args: serde_json::Value,
    /// What the agent saw.
    #[serde(default)]
    pub observation: String,
    /// Exit status of commands.
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// Whether the call hit its time limit.
    #[serde(default)]
    pub timed_out: bool,
}

/// One model turn.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JudgedTurn {
    /// The model's reply, verbatim.
    pub assistant: String,
    /// The tool calls that ran.
    #[serde(default, rename = "observations")]
    pub calls: Vec<JudgedCall>,
    /// Parse errors of the reply (malformed actions, or "no action found").
    #[serde(default)]
    pub parse_errors: Vec<serde_json::Value>,
    /// Native tool calls the model returned as structured data (API models), which are
    /// not in `assistant`.
    #[serde(default)]
    pub tool_calls: Vec<JudgedToolCall>,
}

/// A native tool call as the model made it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JudgedToolCall {
    /// The tool's name.
    pub name: String,
    /// The arguments as the model wrote them.
    #[serde(default)]
    pub arguments: serde_json::Value,
}

impl JudgedTurn {
    /// Malformed actions: attempts at a tool call that did not parse. A reply with no
    /// action at all also carries a parse error (the parser's "no action found", or the
    /// native format's "your reply called no tool"), which is not an attempt.
    pub fn malformed_actions(&self) -> usize {
        self.parse_errors
            .iter()
            .filter(|e| {
                !e["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("no action found") || m.starts_with("your reply called no tool"))
            })
            .count()
    }
}

/// A whole episode.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgedEpisode {
    /// The task instruction (the first user message).
    pub task: String,
    /// The turns in order.
    pub turns: Vec<JudgedTurn>,
    /// Why the episode ended (`finished`, `max_turns`, ...), when it did.
    pub end_reason: Option<String>,
    /// The agent's closing message when it called `finish`.
    pub finish_message: Option<String>,
}

/// Facts computed from the episode itself; the hard caps that follow from them hold
/// whatever the judge model answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpisodeFacts {
    /// Tool calls that ran.
    pub valid_calls: usize,
    /// Turns whose reply had at least one malformed action.
    pub malformed_turns: usize,
    /// Turns in all.
    pub turns: usize,
}

impl JudgedEpisode {
    /// Reads a trajectory file written by `agent run` (`--trajectory`).
    pub fn from_trajectory_file(path: &Path) -> Result<Self, JudgeError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| JudgeError::Trajectory { path: path.display().to_string(), reason: e.to_string() })?;
        Self::from_trajectory(&text)
            .map_err(|e| JudgeError::Trajectory { path: path.display().to_string(), reason: e.to_string() })
    }

    /// Parses trajectory JSONL; the error says which line is wrong.
    pub fn from_trajectory(text: &str) -> Result<Self, TrajectoryError> {
        let mut task = None;
        let mut turns = Vec::new();
        let mut end_reason = None;
        let mut finish_message = None;
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let value: serde_json::Value =
                serde_json::from_str(line).map_err(|source| TrajectoryError::NotJson { line: i + 1, source })?;
            match value["type"].as_str() {
                Some("turn") => {
                    if task.is_none() {
                        task = value["user"]["content"].as_str().map(str::to_string);
                    }
                    let turn: JudgedTurn = serde_json::from_value(value)
                        .map_err(|source| TrajectoryError::NotATurn { line: i + 1, source })?;
                    turns.push(turn);
                }
                Some("episode_end") => {
                    end_reason = value["reason"].as_str().map(str::to_string);
                    finish_message = value["finish_message"].as_str().map(str::to_string);
                }
                Some(_) => {}
                None => return Err(TrajectoryError::NoType { line: i + 1 }),
            }
        }
        let task = task.ok_or(TrajectoryError::NoTurns)?;
        Ok(Self { task, turns, end_reason, finish_message })
    }

    /// The facts behind the hard caps.
    pub fn facts(&self) -> EpisodeFacts {
        EpisodeFacts {
            valid_calls: self.turns.iter().map(|t| t.calls.len()).sum(),
            malformed_turns: self.turns.iter().filter(|t| t.malformed_actions() > 0).count(),
            turns: self.turns.len(),
        }
    }
}

impl EpisodeFacts {
    /// The cap these facts impose: an agent that never even attempted an action is capped
    /// at 0.09; one whose every turn was a malformed action (it tried, but nothing or
    /// almost nothing ran) at 0.30.
    pub fn cap(&self) -> Option<(f64, &'static str)> {
        if self.valid_calls == 0 && self.malformed_turns == 0 {
            Some((0.09, "no_valid_action"))
        } else if self.turns > 0 && (self.valid_calls == 0 || self.malformed_turns == self.turns) {
            Some((0.30, "only_parse_errors"))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRAJ: &str = r#"{"type":"episode_start","episode_id":"e","run_id":"r","model":"m","image":"i","started_at_unix_ms":1,"system_prompt":"s"}
{"type":"turn","turn":1,"user":{"role":"user","content":"make hello.txt"},"assistant":"<bash>cmd: ls</bash>","finish_reason":"stop","usage":{"prompt_tokens":1,"completion_tokens":1},"model_ms":1,"actions":[],"parse_errors":[],"observations":[{"call_id":"c1","tool":"bash","args":{"cmd":"ls"},"observation":"a\n","exit_code":0,"timed_out":false,"duration_ms":3}]}
{"type":"turn","turn":2,"user":{"role":"user","content":"obs"},"assistant":"<bash cmd","finish_reason":"stop","usage":{"prompt_tokens":1,"completion_tokens":1},"model_ms":1,"actions":[],"parse_errors":[{"message":"unclosed tag"}],"observations":[]}
{"type":"episode_end","reason":"max_turns","turns":2,"usage":{"prompt_tokens":2,"completion_tokens":2},"finish_message":null,"duration_ms":9}
"#;

    #[test]
    fn reads_a_trajectory() {
        let ep = JudgedEpisode::from_trajectory(TRAJ).unwrap();
        assert_eq!(ep.task, "make hello.txt");
        assert_eq!(ep.turns.len(), 2);
        assert_eq!(ep.turns[0].calls[0].tool, "bash");
        assert_eq!(ep.end_reason.as_deref(), Some("max_turns"));
        assert_eq!(ep.facts(), EpisodeFacts { valid_calls: 1, malformed_turns: 1, turns: 2 });
        assert_eq!(ep.facts().cap(), None);
    }

    #[test]
    fn caps_follow_from_facts() {
        assert_eq!(EpisodeFacts { valid_calls: 0, malformed_turns: 0, turns: 3 }.cap().unwrap().0, 0.09);
        assert_eq!(EpisodeFacts { valid_calls: 0, malformed_turns: 1, turns: 3 }.cap().unwrap().0, 0.30);
        assert_eq!(EpisodeFacts { valid_calls: 2, malformed_turns: 3, turns: 3 }.cap().unwrap().0, 0.30);
    }

    #[test]
    fn bad_lines_are_named() {
        let err = JudgedEpisode::from_trajectory("{\"type\":\"turn\"}\nnot json\n").unwrap_err();
        assert!(matches!(err, TrajectoryError::NotATurn { line: 1, .. }), "{err}");
        assert!(err.to_string().starts_with("line 1"), "{err}");
        let err = JudgedEpisode::from_trajectory("{\"type\":\"episode_start\"}\n").unwrap_err();
        assert!(err.to_string().contains("no turn records"), "{err}");
    }

    #[test]
    fn a_reply_without_any_action_is_not_a_malformed_one() {
        let turn: JudgedTurn = serde_json::from_value(serde_json::json!({
            "assistant": "I would do it.",
            "parse_errors": [{"message": "no action found in your reply. Every reply must contain ..."}]
        }))
        .unwrap();
        assert_eq!(turn.malformed_actions(), 0);
        let ep = JudgedEpisode { task: "t".into(), turns: vec![turn], end_reason: None, finish_message: None };
        assert_eq!(ep.facts().cap().unwrap().1, "no_valid_action");
    }
}
