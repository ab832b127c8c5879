//! The episode as the judge sees it, read back from a trajectory file (`agent run`'s
//! JSONL, through the trajectory contract's types), plus the facts that decide the hard
//! caps without asking any model.

use std::path::Path;

use agent_protocol::trajectory::{Trajectory, TurnRecord};
use agent_protocol::EndReason;

use super::{JudgeError, TrajectoryError};

/// A whole episode, in the trajectory contract's own records.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgedEpisode {
    /// The task instruction (the first user message).
    pub task: String,
    /// The turns in order.
    pub turns: Vec<TurnRecord>,
    /// Why the episode ended, when it did.
    pub end_reason: Option<EndReason>,
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
        let t = Trajectory::parse(text)?;
        let task = t.task().ok_or(TrajectoryError::NoTurns)?.to_string();
        let (end_reason, finish_message) = match t.end {
            Some(end) => (Some(end.reason), end.finish_message),
            None => (None, None),
        };
        Ok(Self { task, turns: t.turns, end_reason, finish_message })
    }

    /// The facts behind the hard caps.
    pub fn facts(&self) -> EpisodeFacts {
        EpisodeFacts {
            valid_calls: self.turns.iter().map(|t| t.observations.len()).sum(),
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
{"type":"turn","turn":2,"user":{"role":"user","content":"obs"},"assistant":"<bash cmd","finish_reason":"stop","usage":{"prompt_tokens":1,"completion_tokens":1},"model_ms":1,"actions":[],"parse_errors":[{"tool":null,"message":"unclosed tag","snippet":"<bash cmd","example":"","kind":"malformed"}],"observations":[]}
{"type":"episode_end","reason":"max_turns","turns":2,"usage":{"prompt_tokens":2,"completion_tokens":2},"finish_message":null,"duration_ms":9}
"#;

    #[test]
    fn reads_a_trajectory() {
        let ep = JudgedEpisode::from_trajectory(TRAJ).unwrap();
        assert_eq!(ep.task, "make hello.txt");
        assert_eq!(ep.turns.len(), 2);
        assert_eq!(ep.turns[0].observations[0].tool, "bash");
        assert_eq!(ep.end_reason, Some(EndReason::MaxTurns));
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
        assert!(matches!(&err, TrajectoryError::Line(e) if e.line == 1), "{err}");
        assert!(err.to_string().starts_with("line 1"), "{err}");
        let start_only = TRAJ.lines().next().unwrap();
        let err = JudgedEpisode::from_trajectory(start_only).unwrap_err();
        assert!(err.to_string().contains("no turn records"), "{err}");
    }

    #[test]
    fn a_reply_without_any_action_is_not_a_malformed_one() {
        let mut ep = JudgedEpisode::from_trajectory(TRAJ).unwrap();
        let mut turn = ep.turns[1].clone();
        turn.assistant = "I would do it.".into();
        turn.parse_errors[0].message = "no action found in your reply. Every reply must contain ...".into();
        turn.parse_errors[0].kind = agent_protocol::trajectory::ParseErrorKind::NoAction;
        assert_eq!(turn.malformed_actions(), 0);
        ep.turns = vec![turn];
        assert_eq!(ep.facts().cap().unwrap().1, "no_valid_action");
    }
}
