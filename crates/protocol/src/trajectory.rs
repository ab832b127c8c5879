//! The trajectory contract: what an episode writes to its JSONL file, one record per line,
//! and what everything that reads it back (the judge, the ATIF export, the trainer, bench)
//! reads, as typed records. `docs/trajectory.md` documents these types and a test holds it
//! to them.
//!
//! Versions: 1 (no `schema` field) had parse errors without a `kind`; 2 adds `schema` to
//! the start record and `kind` to parse errors. A reader takes both; a record of version 1
//! reads its parse errors as [`ParseErrorKind::Malformed`].

use serde::{Deserialize, Serialize};

use crate::chat::{ChatMessage, ToolCall};
use crate::{EndReason, TokenUsage};

/// The schema version this build writes.
pub const TRAJECTORY_SCHEMA: u32 = 2;

fn schema_v1() -> u32 {
    1
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One tool call parsed from a model reply, with validated arguments.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Action {
    /// The tool's name, e.g. `bash`.
    pub tool: String,
    /// Validated arguments as a JSON object (defaults filled in).
    pub args: serde_json::Map<String, serde_json::Value>,
}

/// What kind of parse error a reply had: a reply with no action at all is not an attempt
/// at one (the judge's caps tell them apart).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ParseErrorKind {
    /// An attempted action that did not parse or validate (including a tag that names no
    /// tool).
    #[default]
    Malformed,
    /// The reply contained no action at all.
    NoAction,
}

/// A malformed action, reported back to the model as a `<parse_error>` observation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ActionParseError {
    /// The tool the model seemed to call, when known.
    pub tool: Option<String>,
    /// What is wrong, for the model.
    pub message: String,
    /// The offending text, truncated.
    pub snippet: String,
    /// A correct example of the intended tool (or of the action format).
    pub example: String,
    /// Whether the reply attempted an action at all.
    #[serde(default)]
    pub kind: ParseErrorKind,
}

impl ActionParseError {
    /// The observation text the model sees.
    pub fn to_observation(&self) -> String {
        format!(
            "<parse_error>\nerror: {}\noffending text:\n{}\na correct example:\n{}\n</parse_error>",
            self.message, self.snippet, self.example
        )
    }
}

/// First line of a trajectory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EpisodeStart {
    /// The schema version of the file ([`TRAJECTORY_SCHEMA`] when written by this build).
    #[serde(default = "schema_v1")]
    pub schema: u32,
    pub episode_id: String,
    pub run_id: String,
    pub model: String,
    pub image: String,
    pub started_at_unix_ms: u64,
    pub system_prompt: String,
}

/// One tool call of a turn and what it returned.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ObservationRecord {
    pub call_id: String,
    pub tool: String,
    pub args: serde_json::Map<String, serde_json::Value>,
    pub observation: String,
    pub exit_code: Option<i64>,
    pub timed_out: bool,
    pub duration_ms: u64,
}

/// Why a recorded reply ended.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TurnFinish {
    /// The model ended its reply.
    Stop,
    /// The reply reached its token limit.
    Length,
    /// The reply was interrupted.
    Cancelled,
    /// The backend gave another reason.
    Other,
    /// The reply repeated itself and was cut while it streamed.
    Repetition,
}

impl From<crate::chat::FinishReason> for TurnFinish {
    fn from(r: crate::chat::FinishReason) -> Self {
        use crate::chat::FinishReason;
        match r {
            FinishReason::Stop => TurnFinish::Stop,
            FinishReason::Length => TurnFinish::Length,
            FinishReason::Cancelled => TurnFinish::Cancelled,
            FinishReason::Other => TurnFinish::Other,
        }
    }
}

/// One model turn: what was asked, what came back, what ran.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TurnRecord {
    pub turn: u32,
    /// The user message that preceded this reply (instruction or observations).
    pub user: ChatMessage,
    pub assistant: String,
    pub finish_reason: TurnFinish,
    pub usage: TokenUsage,
    pub model_ms: u64,
    pub actions: Vec<Action>,
    pub parse_errors: Vec<ActionParseError>,
    pub observations: Vec<ObservationRecord>,
    /// Token ids the model sampled (when the backend supplies them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_token_ids: Option<Vec<u32>>,
    /// Prompt token ids as the backend saw them (when supplied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    /// 1 for each model-generated token of `completion_token_ids`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_mask: Option<Vec<u8>>,
    /// Native tool calls the backend returned as structured data (APIs, mistral.rs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Why `assistant` is shorter than what the model generated: the reply repeated itself
    /// and was cut after its first copy (while it streamed, or when the user interrupted it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
    /// The reply was cut and its sampled token ids left out (with the loss mask): which ids
    /// made the kept text cannot be told exactly, and a trainer must not learn the repeats.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub token_ids_dropped: bool,
    /// Calls of this turn that repeat an identical earlier call (same tool and arguments)
    /// with nothing changed in between (`episode::repeats`); absent when none did.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeated_calls: u32,
    /// Letters of the reply (text and call arguments) that nothing the model was shown had,
    /// distinct, in code-point order: `完整热榜` in an English shell session is a damaged
    /// model's mark. ASCII never counts. Absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_letters: Option<String>,
}

impl TurnRecord {
    /// Parse errors of attempted actions (a reply without any action is not one).
    pub fn malformed_actions(&self) -> usize {
        self.parse_errors.iter().filter(|e| e.kind == ParseErrorKind::Malformed).count()
    }
}

/// Last line of a trajectory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EpisodeEndRecord {
    pub reason: EndReason,
    pub turns: u32,
    pub usage: TokenUsage,
    pub finish_message: Option<String>,
    pub duration_ms: u64,
    /// The episode's repeated calls: the turns' `repeated_calls` summed; absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeated_calls: u32,
}

/// One line of the file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TrajectoryLine {
    EpisodeStart(EpisodeStart),
    /// Boxed: a turn record is several times the size of the other lines.
    Turn(Box<TurnRecord>),
    EpisodeEnd(EpisodeEndRecord),
}

/// A trajectory file read back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trajectory {
    /// The start record (absent when the file was cut before it).
    pub start: Option<EpisodeStart>,
    /// The turns in order.
    pub turns: Vec<TurnRecord>,
    /// The end record (absent for an episode that was killed).
    pub end: Option<EpisodeEndRecord>,
}

/// A line of a trajectory file that is not a record of the contract.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct TrajectoryError {
    /// The 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

impl Trajectory {
    /// Reads JSONL text; the first line that is not a record is the error.
    pub fn parse(text: &str) -> Result<Trajectory, TrajectoryError> {
        let mut out = Trajectory::default();
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let rec = serde_json::from_str::<TrajectoryLine>(line)
                .map_err(|e| TrajectoryError { line: i + 1, reason: e.to_string() })?;
            out.push(rec);
        }
        Ok(out)
    }

    /// Reads JSONL text, skipping lines that are not records (an episode killed while it
    /// wrote ends mid-line).
    pub fn parse_lenient(text: &str) -> Trajectory {
        let mut out = Trajectory::default();
        for rec in text.lines().filter_map(|l| serde_json::from_str::<TrajectoryLine>(l).ok()) {
            out.push(rec);
        }
        out
    }

    fn push(&mut self, rec: TrajectoryLine) {
        match rec {
            TrajectoryLine::EpisodeStart(s) => self.start = Some(s),
            TrajectoryLine::Turn(t) => self.turns.push(*t),
            TrajectoryLine::EpisodeEnd(e) => self.end = Some(e),
        }
    }

    /// Repeated calls of the episode, from its turns (so also for a file cut before its end).
    pub fn repeated_calls(&self) -> u32 {
        self.turns.iter().map(|t| t.repeated_calls).sum()
    }

    /// Turns whose reply had letters nothing shown to the model had (`foreign_letters`).
    pub fn foreign_letter_turns(&self) -> usize {
        self.turns.iter().filter(|t| t.foreign_letters.is_some()).count()
    }

    /// The task instruction: the first turn's user message.
    pub fn task(&self) -> Option<&str> {
        self.turns.first().map(|t| t.user.content.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::Role;

    pub(crate) fn full_turn() -> TurnRecord {
        let mut args = serde_json::Map::new();
        args.insert("cmd".into(), "ls".into());
        TurnRecord {
            turn: 1,
            user: ChatMessage::new(Role::User, "make hello.txt"),
            assistant: "<bash>cmd: ls</bash>".into(),
            finish_reason: TurnFinish::Repetition,
            usage: TokenUsage { prompt_tokens: 3, completion_tokens: 2 },
            model_ms: 5,
            actions: vec![Action { tool: "bash".into(), args: args.clone() }],
            parse_errors: vec![ActionParseError {
                tool: None,
                message: "m".into(),
                snippet: "s".into(),
                example: "e".into(),
                kind: ParseErrorKind::NoAction,
            }],
            observations: vec![ObservationRecord {
                call_id: "c1".into(),
                tool: "bash".into(),
                args,
                observation: "a\n".into(),
                exit_code: Some(0),
                timed_out: false,
                duration_ms: 3,
            }],
            completion_token_ids: Some(vec![1, 2]),
            prompt_token_ids: Some(vec![3]),
            loss_mask: Some(vec![1, 1]),
            tool_calls: vec![ToolCall { id: "c1".into(), name: "bash".into(), arguments: serde_json::json!({}) }],
            cut: Some("repeated".into()),
            token_ids_dropped: true,
            repeated_calls: 1,
            foreign_letters: Some("ąż".into()),
        }
    }

    #[test]
    fn records_round_trip_and_a_version_1_file_still_reads() {
        let start = EpisodeStart {
            schema: TRAJECTORY_SCHEMA,
            episode_id: "e".into(),
            run_id: "r".into(),
            model: "m".into(),
            image: "i".into(),
            started_at_unix_ms: 1,
            system_prompt: "s".into(),
        };
        let end = EpisodeEndRecord {
            reason: EndReason::Finished,
            turns: 1,
            usage: TokenUsage::default(),
            finish_message: Some("done".into()),
            duration_ms: 9,
            repeated_calls: 1,
        };
        let lines = [
            TrajectoryLine::EpisodeStart(start),
            TrajectoryLine::Turn(Box::new(full_turn())),
            TrajectoryLine::EpisodeEnd(end),
        ];
        let text: String = lines.iter().map(|l| serde_json::to_string(l).unwrap() + "\n").collect();
        let back = Trajectory::parse(&text).unwrap();
        assert_eq!(back.start.as_ref().unwrap().schema, 2);
        assert_eq!(back.turns, vec![full_turn()]);
        assert_eq!(back.end.as_ref().unwrap().reason, EndReason::Finished);
        assert_eq!(back.task(), Some("make hello.txt"));
        assert_eq!(back.turns[0].malformed_actions(), 0);
        assert_eq!(back.foreign_letter_turns(), 1);
        assert_eq!((back.repeated_calls(), back.end.as_ref().unwrap().repeated_calls), (1, 1));
        let plain = TurnRecord { repeated_calls: 0, ..full_turn() };
        assert!(serde_json::to_value(plain).unwrap().get("repeated_calls").is_none(), "none is not written");
        let plain = TurnRecord { foreign_letters: None, ..full_turn() };
        assert!(serde_json::to_value(plain).unwrap().get("foreign_letters").is_none(), "none is not written");

        let v1 = concat!(
            r#"{"type":"episode_start","episode_id":"e","run_id":"r","model":"m","image":"i","started_at_unix_ms":1,"system_prompt":"s"}"#,
            "\n",
            r#"{"type":"turn","turn":1,"user":{"role":"user","content":"t"},"assistant":"<bash cmd","finish_reason":"stop","usage":{"prompt_tokens":1,"completion_tokens":1},"model_ms":1,"actions":[],"parse_errors":[{"tool":null,"message":"unclosed tag","snippet":"","example":""}],"observations":[]}"#,
            "\n",
            r#"{"type":"episode_end","reason":"max_turns","turns":1,"usage":{"prompt_tokens":1,"completion_tokens":1},"finish_message":null,"duration_ms":9}"#,
        );
        let t = Trajectory::parse(v1).unwrap();
        // Files written before repeats were counted read as none.
        assert_eq!((t.repeated_calls(), t.end.as_ref().unwrap().repeated_calls), (0, 0));
        assert_eq!(t.start.unwrap().schema, 1);
        assert_eq!(t.turns[0].malformed_actions(), 1);
        assert_eq!(t.end.unwrap().reason, EndReason::MaxTurns);
    }

    #[test]
    fn a_bad_line_is_named_and_the_lenient_reader_skips_it() {
        let err = Trajectory::parse("{\"type\":\"turn\"}\n").unwrap_err();
        assert_eq!(err.line, 1);
        let t = Trajectory::parse_lenient("not json\n{\"type\":\"episode_end\",\"reason\":\"finished\",\"turns\":0,\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0},\"finish_message\":null,\"duration_ms\":1}\n{\"type\":\"tu");
        assert_eq!(t.end.unwrap().reason, EndReason::Finished);
    }

    /// The fields `docs/trajectory.md` lists under `## heading`.
    fn documented(doc: &str, heading: &str) -> std::collections::BTreeSet<String> {
        let start = doc.find(&format!("\n## {heading}\n")).unwrap_or_else(|| panic!("no section `{heading}`"));
        doc[start + heading.len() + 5..]
            .lines()
            .take_while(|l| !l.starts_with("## "))
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .map(str::to_string)
            .collect()
    }

    fn keys(v: serde_json::Value) -> std::collections::BTreeSet<String> {
        v.as_object().unwrap().keys().filter(|k| *k != "type").cloned().collect()
    }

    #[test]
    fn the_documented_schema_is_the_types() {
        let doc = include_str!("../../../docs/trajectory.md");
        let turn = full_turn();
        let start = TrajectoryLine::EpisodeStart(EpisodeStart {
            schema: TRAJECTORY_SCHEMA,
            episode_id: String::new(),
            run_id: String::new(),
            model: String::new(),
            image: String::new(),
            started_at_unix_ms: 0,
            system_prompt: String::new(),
        });
        let end = TrajectoryLine::EpisodeEnd(EpisodeEndRecord {
            reason: EndReason::Finished,
            turns: 0,
            usage: TokenUsage::default(),
            finish_message: None,
            duration_ms: 0,
            repeated_calls: 2,
        });
        let cases = [
            ("`episode_start`", serde_json::to_value(start).unwrap()),
            ("`turn`", serde_json::to_value(TrajectoryLine::Turn(Box::new(turn.clone()))).unwrap()),
            ("parse error", serde_json::to_value(&turn.parse_errors[0]).unwrap()),
            ("observation", serde_json::to_value(&turn.observations[0]).unwrap()),
            ("`episode_end`", serde_json::to_value(end).unwrap()),
        ];
        for (heading, value) in cases {
            assert_eq!(documented(doc, heading), keys(value), "docs/trajectory.md, section {heading}");
        }
        assert!(doc.contains(&format!("`schema` {TRAJECTORY_SCHEMA} (this build)")), "the documented version");
    }
}
