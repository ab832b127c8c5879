//! The trajectory record: one JSON object per line (schema in docs/trajectory.md).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use serde::Serialize;

use crate::tools::{Action, ActionParseError};
use agent_llm::{ChatMessage, ToolCall};
use agent_protocol::{EndReason, TokenUsage};

/// First line of a trajectory.
#[derive(Debug, Clone, Serialize)]
pub struct EpisodeStart {
    pub episode_id: String,
    pub run_id: String,
    pub model: String,
    pub image: String,
    pub started_at_unix_ms: u128,
    pub system_prompt: String,
}

/// One tool call of a turn.
#[derive(Debug, Clone, Serialize)]
pub struct ObservationRecord {
    pub call_id: String,
    pub tool: String,
    pub args: serde_json::Map<String, serde_json::Value>,
    pub observation: String,
    pub exit_code: Option<i64>,
    pub timed_out: bool,
    pub duration_ms: u64,
}

/// One model turn: what was asked, what came back, what ran.
#[derive(Debug, Clone, Serialize)]
pub struct TurnRecord {
    pub turn: u32,
    /// The user message that preceded this reply (instruction or observations).
    pub user: ChatMessage,
    pub assistant: String,
    pub finish_reason: String,
    pub usage: TokenUsage,
    pub model_ms: u64,
    pub actions: Vec<Action>,
    pub parse_errors: Vec<ActionParseError>,
    pub observations: Vec<ObservationRecord>,
    /// Token ids the model sampled (when the backend supplies them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_token_ids: Option<Vec<u32>>,
    /// Prompt token ids as the backend saw them (when supplied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    /// 1 for each model-generated token of `completion_token_ids`.
    #[serde(skip_serializing_if = "Option::is_none")]
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
}

/// Last line of a trajectory.
#[derive(Debug, Clone, Serialize)]
pub struct EpisodeEndRecord {
    pub reason: EndReason,
    pub turns: u32,
    pub usage: TokenUsage,
    pub finish_message: Option<String>,
    pub duration_ms: u64,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Line<'a> {
    EpisodeStart(&'a EpisodeStart),
    Turn(&'a TurnRecord),
    EpisodeEnd(&'a EpisodeEndRecord),
}

/// Appends records to a JSONL file, flushing each line so a crash loses nothing written.
pub struct TrajectoryWriter {
    out: Option<BufWriter<File>>,
}

impl TrajectoryWriter {
    /// A writer to `path` (created with its parent directories), or one that drops everything.
    pub fn create(path: Option<&Path>) -> std::io::Result<Self> {
        let out = match path {
            Some(p) => {
                if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)?;
                }
                Some(BufWriter::new(File::create(p)?))
            }
            None => None,
        };
        Ok(Self { out })
    }

    /// A writer that records nothing.
    pub fn disabled() -> Self {
        Self { out: None }
    }

    fn write(&mut self, line: &Line<'_>) {
        if let Some(out) = self.out.as_mut() {
            let res = serde_json::to_writer(&mut *out, line)
                .map_err(std::io::Error::other)
                .and_then(|_| out.write_all(b"\n"))
                .and_then(|_| out.flush());
            if let Err(e) = res {
                tracing::warn!("cannot write the trajectory: {e}");
            }
        }
    }

    /// Records the start.
    pub fn start(&mut self, rec: &EpisodeStart) {
        self.write(&Line::EpisodeStart(rec));
    }

    /// Records a turn.
    pub fn turn(&mut self, rec: &TurnRecord) {
        self.write(&Line::Turn(rec));
    }

    /// Records the end.
    pub fn end(&mut self, rec: &EpisodeEndRecord) {
        self.write(&Line::EpisodeEnd(rec));
    }
}
