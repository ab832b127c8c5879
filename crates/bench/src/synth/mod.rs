//! `agent tasks synth`: a multi-agent pipeline that makes training tasks from seed
//! tasks, every one proven by running it. Idea agents brainstorm variations of a
//! seed's skills and choose some ([`idea`]); builder agents — episodes of our own
//! agent with the draft's folder mounted — write each task and revise it until
//! [`crate::validate`] passes ([`build`]); reviewer agents read, may fix, and approve
//! or reject ([`review`]); an optional solver measures each task's pass rate
//! ([`calibrate`]). Approved tasks that are not near-duplicates ([`similar`]) land as
//! Harbor task folders with an `index.jsonl` ([`index`]).
//!
//! Work flows through a queue on disk ([`queue`]) so that a killed run resumes with
//! `--resume` and every item ends exactly once.

pub mod build;
pub mod calibrate;
pub mod episode;
pub mod idea;
pub mod index;
pub mod queue;
pub mod review;
pub mod run;
pub mod scaffold;
pub mod similar;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use index::{IndexEntry, TaskFilter};
pub use run::{run_synth, SynthSummary};

use crate::validate::ValidateOptions;
use agent_llm::ResolveOptions;

/// What went wrong with a synth run as a whole (an item's failure ends only the item).
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Model(String),
    #[error("{0}")]
    Other(String),
    #[error(transparent)]
    Bench(#[from] crate::error::BenchError),
}

impl SynthError {
    /// An I/O error at a path.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        SynthError::Io { path: path.display().to_string(), source }
    }
}

/// The model spec of each role (`default`, `scripted:FILE`, `openai:…`, `anthropic:…`, a GGUF).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoleModels {
    pub idea: String,
    pub builder: String,
    pub reviewer: String,
    /// The calibration's solver.
    pub solver: String,
}

/// The run's settings, kept in `synth.json` so that `--resume` continues the same run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SynthPlan {
    /// Seed task folders (each a task, or a folder of tasks).
    pub seeds: Vec<PathBuf>,
    pub models: RoleModels,
    /// Variations each idea agent brainstorms before it sees the criteria.
    pub brainstorm: usize,
    /// Ideas chosen per seed (each becomes a build).
    pub ideas_per_seed: usize,
    /// Builder episodes per task (each but the first sees the last validation).
    pub build_rounds: u32,
    /// Turns and seconds of one builder or reviewer episode.
    pub episode_turns: u32,
    pub episode_secs: u64,
    /// Solver attempts per approved task (0: no calibration).
    pub calibrate: u32,
    /// Reference-solution runs of each validation.
    pub oracle_runs: u32,
    /// Similarity (0–1) of instruction and tests above which a task is a near-duplicate.
    pub max_similarity: f64,
}

/// How one invocation runs (not kept: a resumed run may use other values).
#[derive(Clone)]
pub struct SynthOptions {
    pub out: PathBuf,
    pub resume: bool,
    /// Items worked on at the same time.
    pub workers: usize,
    /// A claim not renewed for this long returns to the queue (and an item's work is cut
    /// off after it).
    pub claim_timeout: Duration,
    pub max_claims: u32,
    pub resolve: ResolveOptions,
    pub validate: ValidateOptions,
}

/// Where the run's files are.
#[derive(Debug, Clone)]
pub struct Dirs {
    pub root: PathBuf,
}

impl Dirs {
    /// The run's settings.
    pub fn plan(&self) -> PathBuf {
        self.root.join("synth.json")
    }
    /// The accepted tasks' folders.
    pub fn tasks(&self) -> PathBuf {
        self.root.join("tasks")
    }
    /// One item's working folder (a draft task, a review's verdict, logs).
    pub fn work(&self, id: &str) -> PathBuf {
        self.root.join("work").join(id)
    }
    /// The accepted tasks, one JSON line each.
    pub fn index(&self) -> PathBuf {
        self.root.join(index::INDEX_FILE)
    }
    /// Every item that ended without a task, and why.
    pub fn rejected(&self) -> PathBuf {
        self.root.join("rejected.jsonl")
    }
}

/// Makes a string a folder-name part: lower-case letters, digits and single dashes.
pub fn slug(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars().flat_map(|c| c.to_lowercase()) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
        if out.len() >= max {
            break;
        }
    }
    out.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_folder_names() {
        assert_eq!(slug("Count the Words in /app/notes.txt!", 24), "count-the-words-in-app-n");
        assert_eq!(slug("  --  ", 10), "");
    }
}
