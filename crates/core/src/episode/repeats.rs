//! Call-level repetition: the same tool call (tool and arguments, compared canonically)
//! made again with nothing changed in between. The reply-level detector in `stuck.rs`
//! misses a small model that wraps one useless command in new prose every turn; this one
//! looks at the calls themselves. A call made a third time gets a note that names it,
//! says what it returned last time and offers `finish`; a command that failed and fails
//! again the same way is told so at once, on its second run. Notes only: nothing here
//! ends an episode, so a model polling a slow job is told, never cut off.
//!
//! "Nothing changed in between" is what makes a repeat: a call that may change the
//! sandbox (a command, a file write, an MCP tool) and is new in the window starts the
//! count over, so that running the tests after each fix is not a loop, while the same
//! edit made again is no change at all.

use std::collections::hash_map::DefaultHasher;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use serde_json::Value;

use super::trajectory::ObservationRecord;
use crate::tools::unwrap_observation;

/// Turns a call is remembered for (the current one included).
const WINDOW_TURNS: u32 = 8;

/// Identical calls, with nothing changed between them, that earn the repeat note.
const NOTE_AT: usize = 3;

/// The longest command or result line quoted in a note, in characters.
const QUOTE_CHARS: usize = 120;

/// One call remembered.
#[derive(Debug)]
struct Seen {
    turn: u32,
    /// Its place among all calls, for "since the last change".
    seq: u64,
    key: u64,
    exit_code: Option<i64>,
    /// What it returned, in one line.
    result: String,
}

/// What one turn's calls repeated.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TurnRepeats {
    /// Calls of the turn that repeat an earlier identical call.
    pub repeated: u32,
    /// The notes for the model, one per call that earned one.
    pub notes: Vec<String>,
}

/// Remembers the calls of the last [`WINDOW_TURNS`] turns.
#[derive(Debug, Default)]
pub struct CallRepeats {
    seen: VecDeque<Seen>,
    next_seq: u64,
    /// The first call that counts: the last one that may have changed something.
    counts_from: u64,
    total: u32,
}

impl CallRepeats {
    /// Records the calls that ran in `turn` and says which repeat. `finish_example` is the
    /// finish call in the episode's format, offered first (as `loop_warning` does).
    pub fn observe(&mut self, turn: u32, calls: &[ObservationRecord], finish_example: Option<&str>) -> TurnRepeats {
        self.seen.retain(|s| s.turn + WINDOW_TURNS > turn);
        let mut out = TurnRepeats::default();
        for call in calls.iter().filter(|c| c.tool != "finish") {
            let key = call_key(call);
            let seq = self.next_seq;
            self.next_seq += 1;
            let same: Vec<&Seen> = self.seen.iter().filter(|s| s.key == key).collect();
            let since_change: Vec<&&Seen> = same.iter().filter(|s| s.seq >= self.counts_from).collect();
            let count = since_change.len() + 1;
            if let Some(last) = since_change.last() {
                out.repeated += 1;
                if count >= NOTE_AT {
                    out.notes.push(repeat_note(call, count, &last.result, finish_example));
                } else if let Some(code) = failed_again(call, last.exit_code) {
                    out.notes.push(failing_again_note(call, code));
                }
            }
            if same.is_empty() && may_change(call) {
                self.counts_from = seq;
            }
            self.seen.push_back(Seen { turn, seq, key, exit_code: call.exit_code, result: one_line(call) });
        }
        self.total += out.repeated;
        out
    }

    /// Repeated calls of the whole episode.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Forgets the calls (new work begins: a new user message), keeping the total.
    pub fn forget(&mut self) {
        self.seen.clear();
        self.counts_from = self.next_seq;
    }
}

/// The exit code a command failed with twice in a row, the same way.
fn failed_again(call: &ObservationRecord, before: Option<i64>) -> Option<i64> {
    match (before, call.exit_code) {
        (Some(a), Some(b)) if call.tool == "bash" && a != 0 && a == b => Some(b),
        _ => None,
    }
}

/// Whether a call may change what the next call sees: commands, file writes and tools
/// this file does not know (MCP); reading, searching and the agent's own notes do not.
fn may_change(call: &ObservationRecord) -> bool {
    match call.tool.as_str() {
        "file" => matches!(call.args.get("action").and_then(Value::as_str), Some("write" | "edit" | "multi_edit")),
        "search" | "todo" | "scratchpad" | "skill" | "finish" => false,
        _ => true,
    }
}

/// The call's identity: its tool and its arguments as JSON with sorted keys (the
/// arguments keep the order the model wrote them in).
fn call_key(call: &ObservationRecord) -> u64 {
    let mut hasher = DefaultHasher::new();
    call.tool.hash(&mut hasher);
    sorted(&Value::Object(call.args.clone())).to_string().hash(&mut hasher);
    hasher.finish()
}

fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k.clone(), sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// The call as the note names it: a command by its text, another tool with its arguments.
fn describe(call: &ObservationRecord) -> String {
    match call.args.get("cmd").and_then(Value::as_str) {
        Some(cmd) if call.tool == "bash" => format!("the command `{}`", clip(cmd.trim())),
        _ => format!("the call `{} {}`", call.tool, clip(&sorted(&Value::Object(call.args.clone())).to_string())),
    }
}

/// What a call returned, in one line: a command's status and its last line of output.
fn one_line(call: &ObservationRecord) -> String {
    let body = unwrap_observation(&call.tool, &call.observation);
    let lines: Vec<&str> = body.lines().map(str::trim).filter(|l| !l.is_empty() && !is_status(l)).collect();
    let output = match lines.as_slice() {
        [] => "no output".to_string(),
        [only] => format!("`{}`", clip(only)),
        [.., last] => format!("{} lines, the last `{}`", lines.len(), clip(last)),
    };
    let status = match call.exit_code {
        _ if call.timed_out => Some("timed out".to_string()),
        Some(code) if call.tool == "bash" => Some(format!("exit code {code}")),
        Some(code) if code != 0 => Some("an error".to_string()),
        _ => None,
    };
    match status {
        Some(status) => format!("{status}, {output}"),
        None => output,
    }
}

/// A command's status line (`[exit code 1, 0.1 s]`, `[timed out …]`, `[sandbox: …]`).
fn is_status(line: &str) -> bool {
    line.ends_with(']')
        && ["[exit code ", "[timed out", "[interrupted", "[no exit code", "[sandbox: "]
            .iter()
            .any(|p| line.starts_with(p))
}

/// `text` cut to [`QUOTE_CHARS`] characters on one line.
fn clip(text: &str) -> String {
    let one_line = text.replace('\n', " ⏎ ");
    match one_line.char_indices().nth(QUOTE_CHARS) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None => one_line,
    }
}

/// The note for a call made `count` times with nothing changed in between. Finishing
/// comes first, as in the loop warning: small models told to do something different
/// tend to invent new work.
fn repeat_note(call: &ObservationRecord, count: usize, last: &str, finish_example: Option<&str>) -> String {
    let finish = match finish_example {
        Some(example) => format!("If the task is done, call `finish` now, for example:\n{example}\n"),
        None => "If the task is done, end your work now.\n".to_string(),
    };
    format!(
        "<repeated_call>\nYou have now made {} {count} times with nothing changed in between; last time it returned: {last}. \
         The same call again will not tell you anything new. {finish}\
         Otherwise take a different approach: read that result again and change the command or fix its cause. \
         If you are waiting for something to finish, wait before you check again.\n</repeated_call>",
        describe(call)
    )
}

/// The note for a command that failed again as it failed before.
fn failing_again_note(call: &ObservationRecord, code: i64) -> String {
    format!(
        "<repeated_call>\nThis exact command failed before with exit code {code}, and it failed the same way again: \
         running it again will not change that ({}). Change the command, or fix what makes it fail first.\n</repeated_call>",
        describe(call)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tool: &str, args: Value, observation: &str, exit_code: Option<i64>) -> ObservationRecord {
        ObservationRecord {
            call_id: "c".into(),
            tool: tool.into(),
            args: args.as_object().cloned().unwrap(),
            observation: format!("<{tool}_output>\n{observation}\n</{tool}_output>"),
            exit_code,
            timed_out: false,
            duration_ms: 1,
        }
    }

    fn bash(cmd: &str, output: &str, code: i64) -> ObservationRecord {
        let body = if output.is_empty() {
            format!("[exit code {code}, 0.1 s]")
        } else {
            format!("{output}\n[exit code {code}, 0.1 s]")
        };
        call("bash", serde_json::json!({"cmd": cmd, "timeout_secs": 60}), &body, Some(code))
    }

    const GREP: &str = "python3 /workspace/calc.py | grep 'Error'";

    /// The issue's episode: the same failing command three turns in a row.
    #[test]
    fn the_same_failing_command_is_told_on_its_second_run_and_noted_on_its_third() {
        let mut r = CallRepeats::default();
        assert_eq!(r.observe(1, &[bash(GREP, "", 1)], None), TurnRepeats::default());
        let second = r.observe(2, &[bash(GREP, "", 1)], None);
        assert_eq!(second.repeated, 1);
        let [note] = second.notes.as_slice() else { panic!("{second:?}") };
        assert!(note.contains("failed before with exit code 1") && note.contains("will not change that"), "{note}");
        assert!(note.contains(GREP) && !note.contains("finish"), "{note}");
        let third = r.observe(3, &[bash(GREP, "", 1)], Some("<finish>\nmessage: done\n</finish>"));
        let [note] = third.notes.as_slice() else { panic!("{third:?}") };
        assert!(note.starts_with("<repeated_call>") && note.ends_with("</repeated_call>"), "{note}");
        assert!(note.contains(&format!("the command `{GREP}` 3 times")), "{note}");
        assert!(note.contains("last time it returned: exit code 1, no output"), "{note}");
        let finish = note.find("call `finish` now").unwrap();
        assert!(note.contains("message: done") && finish < note.find("different approach").unwrap(), "{note}");
        assert_eq!(r.total(), 2);
    }

    #[test]
    fn a_succeeding_command_is_noted_only_on_its_third_run_with_its_last_line() {
        let mut r = CallRepeats::default();
        assert!(r.observe(1, &[bash("ls", "a\nb", 0)], None).notes.is_empty());
        let second = r.observe(2, &[bash("ls", "a\nb", 0)], None);
        assert_eq!((second.repeated, second.notes.len()), (1, 0));
        let third = r.observe(3, &[bash("ls", "a\nb\nc", 0)], None);
        assert!(third.notes[0].contains("last time it returned: exit code 0, 2 lines, the last `b`"), "{third:?}");
        assert!(third.notes[0].contains("end your work now"), "{third:?}");
    }

    #[test]
    fn a_command_that_fails_differently_or_now_succeeds_is_not_told() {
        let mut r = CallRepeats::default();
        r.observe(1, &[bash("make", "", 2)], None);
        let other_code = r.observe(2, &[bash("make", "", 1)], None);
        assert_eq!((other_code.repeated, other_code.notes.len()), (1, 0));
        let mut r = CallRepeats::default();
        r.observe(1, &[bash("make", "", 2)], None);
        assert!(r.observe(2, &[bash("make", "ok", 0)], None).notes.is_empty());
    }

    #[test]
    fn different_calls_get_nothing() {
        let mut r = CallRepeats::default();
        for turn in 1..=10 {
            let got = r.observe(turn, &[bash(&format!("echo {turn}"), "x", 1)], None);
            assert_eq!(got, TurnRepeats::default(), "turn {turn}");
        }
        assert_eq!(r.total(), 0);
    }

    #[test]
    fn arguments_in_another_order_are_the_same_call() {
        let mut r = CallRepeats::default();
        let read = |args: Value| call("file", args, "hello", Some(0));
        r.observe(1, &[read(serde_json::json!({"action": "read", "path": "/a"}))], None);
        r.observe(2, &[read(serde_json::json!({"path": "/a", "action": "read"}))], None);
        let third = r.observe(3, &[read(serde_json::json!({"path": "/a", "action": "read"}))], None);
        assert_eq!(third.repeated, 1);
        assert!(third.notes[0].contains(r#"the call `file {"action":"read","path":"/a"}` 3 times"#), "{third:?}");
        assert!(third.notes[0].contains("returned: `hello`"), "{third:?}");
    }

    /// Testing after each fix is the ordinary way to work, not a loop; the same edit made
    /// again changes nothing, so the tests after it count on.
    #[test]
    fn a_new_edit_between_runs_starts_the_count_over_and_a_repeated_edit_does_not() {
        let edit = |text: &str| {
            call("file", serde_json::json!({"action": "edit", "path": "/a.py", "old": "x", "new": text}), "ok", Some(0))
        };
        let mut r = CallRepeats::default();
        for (turn, fix) in (1..).step_by(2).zip(["y", "z", "w", "v"]) {
            assert_eq!(r.observe(turn, &[bash("pytest", "1 failed", 1)], None), TurnRepeats::default());
            assert_eq!(r.observe(turn + 1, &[edit(fix)], None), TurnRepeats::default());
        }
        let mut r = CallRepeats::default();
        let notes: Vec<usize> = (1..=6)
            .map(|turn| {
                let call = if turn % 2 == 1 { bash("pytest", "1 failed", 1) } else { edit("y") };
                r.observe(turn, &[call], None).notes.len()
            })
            .collect();
        // The first edit changed the file, so the second pytest is a new run; the edit made
        // again changed nothing, so the third pytest fails again as the second did, and
        // the third edit is the same edit three times.
        assert_eq!(notes, [0, 0, 0, 0, 1, 1]);
    }

    /// Reading a file between runs changes nothing; a new command might (it could be
    /// `sed -i`), unless it was run before in the window.
    #[test]
    fn reads_between_runs_do_not_hide_a_repeat_and_an_alternating_command_only_delays_it() {
        let mut r = CallRepeats::default();
        let read = call("file", serde_json::json!({"action": "read", "path": "/a"}), "x", Some(0));
        let notes: Vec<usize> = (1..=4)
            .map(|t| r.observe(t, &[if t % 2 == 1 { bash(GREP, "", 1) } else { read.clone() }], None).notes.len())
            .collect();
        assert_eq!(notes, [0, 0, 1, 0]);
        let mut r = CallRepeats::default();
        let notes: Vec<usize> = (1..=6)
            .map(|t| r.observe(t, &[if t % 2 == 1 { bash(GREP, "", 1) } else { bash("cat calc.py", "1/0", 0) }], None))
            .map(|got| got.notes.len())
            .collect();
        assert_eq!(notes, [0, 0, 0, 0, 1, 1]);
    }

    /// Polling is told every time from the third look on, never stopped (nothing here
    /// can stop an episode).
    #[test]
    fn polling_is_told_each_time_and_old_calls_leave_the_window() {
        let mut r = CallRepeats::default();
        let poll = |i: u32| bash("cat /tmp/job.log | tail -1", &format!("{i}%"), 0);
        let notes: Vec<usize> = (1..=5).map(|t| r.observe(t, &[poll(t)], None).notes.len()).collect();
        assert_eq!(notes, [0, 0, 1, 1, 1]);
        assert_eq!(r.total(), 4);
        let mut r = CallRepeats::default();
        r.observe(1, &[bash("ls", "a", 0)], None);
        r.observe(2, &[bash("ls", "a", 0)], None);
        // Turn 10's window is turns 3 to 10: both are forgotten.
        assert_eq!(r.observe(10, &[bash("ls", "a", 0)], None), TurnRepeats::default());
        r.forget();
        assert_eq!(r.observe(11, &[bash("ls", "a", 0)], None), TurnRepeats::default());
        assert_eq!(r.total(), 1);
    }

    #[test]
    fn two_identical_calls_in_one_reply_count_and_finish_is_never_a_repeat() {
        let mut r = CallRepeats::default();
        let finish = call("finish", serde_json::json!({"message": "done"}), "done", Some(0));
        let got = r.observe(1, &[bash("ls", "a", 0), bash("ls", "a", 0), bash("ls", "a", 0)], None);
        assert_eq!((got.repeated, got.notes.len()), (2, 1));
        for turn in 2..=4 {
            assert_eq!(r.observe(turn, std::slice::from_ref(&finish), None), TurnRepeats::default());
        }
    }

    #[test]
    fn one_line_results_name_the_status_and_clip_long_lines() {
        let long = "x".repeat(300);
        let line = one_line(&bash("big", &long, 0));
        assert!(line.starts_with("exit code 0, `xxx") && line.ends_with("…`") && line.chars().count() < 150, "{line}");
        let mut slow = bash("sleep 99", "", 0);
        slow.timed_out = true;
        slow.exit_code = None;
        slow.observation =
            "<bash_output>\n[timed out after 60 s: the command was killed; the shell is still usable]\n</bash_output>"
                .into();
        assert_eq!(one_line(&slow), "timed out, no output");
        assert_eq!(
            one_line(&call("search", serde_json::json!({"action": "grep"}), "error: bad", Some(1))),
            "an error, `error: bad`"
        );
        assert_eq!(clip("a\nb"), "a ⏎ b");
    }
}
