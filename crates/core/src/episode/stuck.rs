//! Loop detection: a model that sends the same replies and gets the same results again and
//! again (a small model re-reading a file forever, or alternating between two replies) is
//! warned once, and stopped if it goes on, instead of burning the rest of its turns and
//! wall clock. The rule follows OpenHands' stuck detector: the same turn three times in a
//! row, or two turns alternating twice. Replies that repeat word for word are warned too
//! even when their results differ (a small model that rewrites the same file, or adds the
//! same todo item, again and again, each time with a slightly different result): the same
//! reply three times, or two replies alternating twice. Those stop only after twice as
//! many, so that a model polling a slow job with the same command is told, not cut off at
//! once.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// Turns after the warning that the loop may go on before the episode stops.
const TURNS_AFTER_WARNING: usize = 3;

/// Identical replies in a row (whatever came back) that earn a warning; twice as many
/// end the episode.
const SAME_REPLIES_WARN: usize = 3;

/// Replies alternating between two texts (whatever came back) that earn a warning; twice
/// as many end the episode.
const ALTERNATING_REPLIES_WARN: usize = 4;

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

/// The observation that tells the model it is looping. Small models that are told "do
/// something different" first tend to invent new work, so finishing comes first, with
/// `finish_example` (the finish call in the episode's format) to copy.
pub fn loop_warning(finish_example: Option<&str>) -> String {
    let finish = match finish_example {
        Some(example) => format!("If the task is done, call `finish` now, for example:\n{example}\n"),
        None => "If the task is done, end your work now.\n".to_string(),
    };
    format!(
        "<loop_warning>\nYour last replies repeat the same calls: this is a loop. {finish}\
         Otherwise do something different: read the last result again and change your approach.\n</loop_warning>"
    )
}

/// Remembers a fingerprint of every turn (the reply and what came back).
#[derive(Debug, Default)]
pub struct LoopDetector {
    turns: Vec<u64>,
    replies: Vec<u64>,
    warned_at: Option<usize>,
}

impl LoopDetector {
    /// Records one turn and says whether the model is looping.
    pub fn observe(&mut self, reply: &str, results: &[String]) -> LoopVerdict {
        let mut hasher = DefaultHasher::new();
        reply.trim().hash(&mut hasher);
        self.replies.push(hasher.finish());
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
        if self.same_replies() >= 2 * SAME_REPLIES_WARN || self.alternating_replies() >= 2 * ALTERNATING_REPLIES_WARN {
            return LoopVerdict::Stop;
        }
        match self.warned_at {
            None => {
                self.warned_at = Some(n);
                LoopVerdict::Warn
            }
            Some(at) if n - at >= TURNS_AFTER_WARNING && self.turns_repeat() => LoopVerdict::Stop,
            Some(_) => LoopVerdict::Fine,
        }
    }

    fn looping(&self) -> bool {
        self.turns_repeat()
            || self.same_replies() >= SAME_REPLIES_WARN
            || self.alternating_replies() >= ALTERNATING_REPLIES_WARN
    }

    /// The same turn (reply and results) three times, or two turns alternating.
    fn turns_repeat(&self) -> bool {
        let t = &self.turns;
        let n = t.len();
        let same_three = n >= 3 && t[n - 1] == t[n - 2] && t[n - 2] == t[n - 3];
        let alternating = n >= 4 && t[n - 1] == t[n - 3] && t[n - 2] == t[n - 4] && t[n - 1] != t[n - 2];
        same_three || alternating
    }

    /// How many of the last replies are the same text as the last one.
    fn same_replies(&self) -> usize {
        self.periodic_tail(1)
    }

    /// How many of the last replies alternate between two different texts (A B A B).
    fn alternating_replies(&self) -> usize {
        let r = &self.replies;
        let n = r.len();
        if n < 2 || r[n - 1] == r[n - 2] {
            return 0;
        }
        self.periodic_tail(2)
    }

    /// The length of the longest tail of replies that repeats with `period`.
    fn periodic_tail(&self, period: usize) -> usize {
        let r = &self.replies;
        let n = r.len();
        if n < period {
            return n;
        }
        period + (period..n).rev().take_while(|&i| r[i] == r[i - period]).count()
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
    fn the_same_reply_with_new_results_is_warned_then_stopped_later() {
        let mut d = LoopDetector::default();
        let verdicts: Vec<LoopVerdict> =
            (0..6).map(|i| d.observe("check the build", &results(&format!("progress {i}%")))).collect();
        use LoopVerdict::*;
        assert_eq!(verdicts, [Fine, Fine, Warn, Fine, Fine, Stop]);
    }

    #[test]
    fn two_replies_alternating_with_new_results_are_warned_then_stopped() {
        let mut d = LoopDetector::default();
        let verdicts: Vec<LoopVerdict> = (0..8)
            .map(|i| {
                let reply = if i % 2 == 0 { "write ." } else { "add the todo" };
                d.observe(reply, &results(&format!("added #{i}")))
            })
            .collect();
        use LoopVerdict::*;
        assert_eq!(verdicts, [Fine, Fine, Fine, Warn, Fine, Fine, Fine, Stop]);
        assert_eq!(d.periodic_tail(2), 8);
    }

    #[test]
    fn a_changing_reply_with_new_results_is_not_a_loop() {
        let mut d = LoopDetector::default();
        for i in 0..10 {
            let reply = format!("step {i}");
            assert_eq!(d.observe(&reply, &results(&format!("progress {i}%"))), LoopVerdict::Fine);
        }
    }

    #[test]
    fn the_warning_puts_finishing_first_with_the_example() {
        let w = loop_warning(Some("<finish>\nmessage: done\n</finish>"));
        let finish = w.find("call `finish` now").unwrap();
        assert!(finish < w.find("do something different").unwrap(), "{w}");
        assert!(w.contains("message: done") && w.starts_with("<loop_warning>") && w.ends_with("</loop_warning>"));
        assert!(!loop_warning(None).contains("finish`"));
    }
}
