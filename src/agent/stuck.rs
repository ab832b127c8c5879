//! Loop detection: a model that sends the same replies and gets the same results again and
//! again (a small model re-reading a file forever, or alternating between two replies) is
//! warned once, and stopped if it goes on, instead of burning the rest of its turns and
//! wall clock. The rule follows OpenHands' stuck detector: the same turn three times in a
//! row, or two turns alternating twice.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// Turns after the warning that the loop may go on before the episode stops.
const TURNS_AFTER_WARNING: usize = 3;

/// What the loop should do after a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopVerdict {
    /// Nothing repeats.
    Fine,
    /// A loop just started: tell the model.
    Warn,
    /// The loop went on after the warning: end the episode.
    Stop,
}

/// The observation that tells the model it is looping.
pub const LOOP_WARNING: &str = "<loop_warning>\nYour last replies repeat the same calls and get the same results: \
this is a loop. Do something different. If the task is done and verified, call `finish`.\n</loop_warning>";

/// Remembers a fingerprint of every turn (the reply and what came back).
#[derive(Debug, Default)]
pub struct LoopDetector {
    turns: Vec<u64>,
    warned_at: Option<usize>,
}

impl LoopDetector {
    /// Records one turn and says whether the model is looping.
    pub fn observe(&mut self, reply: &str, results: &[String]) -> LoopVerdict {
        let mut hasher = DefaultHasher::new();
        reply.trim().hash(&mut hasher);
        for result in results {
            for line in result.lines() {
                without_duration(line).hash(&mut hasher);
            }
        }
        self.turns.push(hasher.finish());
        if !self.looping() {
            self.warned_at = None;
            return LoopVerdict::Fine;
        }
        let n = self.turns.len();
        match self.warned_at {
            None => {
                self.warned_at = Some(n);
                LoopVerdict::Warn
            }
            Some(at) if n - at >= TURNS_AFTER_WARNING => LoopVerdict::Stop,
            Some(_) => LoopVerdict::Fine,
        }
    }

    fn looping(&self) -> bool {
        let t = &self.turns;
        let n = t.len();
        let same_three = n >= 3 && t[n - 1] == t[n - 2] && t[n - 2] == t[n - 3];
        let alternating = n >= 4 && t[n - 1] == t[n - 3] && t[n - 2] == t[n - 4] && t[n - 1] != t[n - 2];
        same_three || alternating
    }
}

/// A command's status line without its duration (`[exit code 0, 0.1 s]` → `[exit code 0`):
/// the same command takes a different time on every run.
fn without_duration(line: &str) -> &str {
    match line.strip_prefix("[exit code ").and_then(|rest| rest.find(", ")) {
        Some(comma) if line.ends_with(" s]") => &line[.."[exit code ".len() + comma],
        _ => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(s: &str) -> Vec<String> {
        vec![s.to_string()]
    }

    #[test]
    fn the_same_turn_three_times_warns_then_stops() {
        let mut d = LoopDetector::default();
        assert_eq!(d.observe("a", &results("x")), LoopVerdict::Fine);
        assert_eq!(d.observe("a", &results("x")), LoopVerdict::Fine);
        assert_eq!(d.observe(" a\n", &results("x")), LoopVerdict::Warn);
        assert_eq!(d.observe("a", &results("x")), LoopVerdict::Fine);
        assert_eq!(d.observe("a", &results("x")), LoopVerdict::Fine);
        assert_eq!(d.observe("a", &results("x")), LoopVerdict::Stop);
    }

    #[test]
    fn alternating_turns_are_a_loop_and_progress_resets_it() {
        let mut d = LoopDetector::default();
        for (reply, expected) in [("a", LoopVerdict::Fine), ("b", LoopVerdict::Fine), ("a", LoopVerdict::Fine)] {
            assert_eq!(d.observe(reply, &results("r")), expected);
        }
        assert_eq!(d.observe("b", &results("r")), LoopVerdict::Warn);
        // Something new: the warning is forgotten.
        assert_eq!(d.observe("c", &results("r")), LoopVerdict::Fine);
        assert_eq!(d.observe("c", &results("r")), LoopVerdict::Fine);
        assert_eq!(d.observe("c", &results("r")), LoopVerdict::Warn);
    }

    #[test]
    fn command_durations_do_not_hide_a_loop() {
        let mut d = LoopDetector::default();
        d.observe("ls", &results("a\n[exit code 0, 0.0 s]"));
        d.observe("ls", &results("a\n[exit code 0, 0.2 s]"));
        assert_eq!(d.observe("ls", &results("a\n[exit code 0, 1.3 s]")), LoopVerdict::Warn);
        assert_eq!(without_duration("[exit code 2, 12.5 s]"), "[exit code 2");
        assert_eq!(without_duration("[exit code 2]"), "[exit code 2]");
        assert_eq!(without_duration("plain, 3 s]"), "plain, 3 s]");
    }

    #[test]
    fn the_same_reply_with_new_results_is_not_a_loop() {
        let mut d = LoopDetector::default();
        for i in 0..10 {
            assert_eq!(d.observe("check the build", &results(&format!("progress {i}%"))), LoopVerdict::Fine);
        }
    }
}
