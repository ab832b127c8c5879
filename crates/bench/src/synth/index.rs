//! The index of a synth run's accepted tasks (`index.jsonl`, one task per line), and
//! the filter a training preset applies to it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::SynthError;
use crate::validate::{PhaseTimes, Verdict};
pub use agent_protocol::task_filter::TaskFilter;

/// The index's file name in a synth output folder.
pub const INDEX_FILE: &str = "index.jsonl";

/// What validation said of an accepted task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidationSummary {
    pub verdict: Verdict,
    pub nop_score: Option<f64>,
    pub oracle_passes: u32,
    pub oracle_runs: u32,
    #[serde(default)]
    pub warnings: Vec<String>,
    pub times: PhaseTimes,
}

/// Tokens each role spent on a task (the idea's spread over the ideas it chose).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenCost {
    pub idea: u64,
    pub build: u64,
    pub review: u64,
    pub calibrate: u64,
    pub total: u64,
}

/// One accepted task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// The build item's id.
    pub id: String,
    /// The task's folder name under `tasks/`.
    pub name: String,
    /// The seed task it varies.
    pub seed: String,
    /// The idea item it came from.
    pub parent: String,
    pub title: String,
    pub category: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub difficulty: String,
    /// Builder rounds it took.
    pub build_rounds: u32,
    pub validation: ValidationSummary,
    /// The solver's pass rate over `calibration_attempts` (absent without calibration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_rate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solver: Option<String>,
    /// Its similarity to the nearest seed or earlier task, and which.
    pub nearest: Option<(String, f64)>,
    pub tokens: TokenCost,
}

impl IndexEntry {
    /// Whether the task passes a training preset's filter.
    pub fn passes(&self, filter: &TaskFilter) -> bool {
        filter.matches(&self.difficulty, &self.category, self.pass_rate)
    }
}

/// Whether `dir` is a synth output folder (an index beside a `tasks/` folder).
pub fn is_synth_output(dir: &Path) -> bool {
    dir.join(INDEX_FILE).is_file() && dir.join("tasks").is_dir()
}

/// The index of a synth output folder.
pub fn read_index(dir: &Path) -> Result<Vec<IndexEntry>, SynthError> {
    let path = dir.join(INDEX_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| SynthError::io(&path, e))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| SynthError::Other(format!("{} line {}: not an index entry: {e}", path.display(), i + 1)))
        })
        .collect()
}

/// The folders of the indexed tasks that pass `filter`.
pub fn task_dirs(dir: &Path, filter: Option<&TaskFilter>) -> Result<Vec<PathBuf>, SynthError> {
    Ok(read_index(dir)?
        .into_iter()
        .filter(|e| filter.is_none_or(|f| e.passes(f)))
        .map(|e| dir.join("tasks").join(e.name))
        .collect())
}

/// Writes the index (and the rejections beside it) atomically.
pub fn write_jsonl<T: Serialize>(path: &Path, rows: &[T]) -> Result<(), SynthError> {
    let mut text = String::new();
    for r in rows {
        text.push_str(&serde_json::to_string(r).map_err(|e| SynthError::Other(e.to_string()))?);
        text.push('\n');
    }
    Ok(crate::results::write_atomic(path, text.as_bytes())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn entry(name: &str, difficulty: &str, category: &str, pass_rate: Option<f64>) -> IndexEntry {
        IndexEntry {
            id: name.into(),
            name: name.into(),
            seed: "s".into(),
            parent: "s".into(),
            title: name.into(),
            category: category.into(),
            tags: vec![],
            difficulty: difficulty.into(),
            build_rounds: 1,
            validation: ValidationSummary {
                verdict: Verdict::Valid,
                nop_score: Some(0.0),
                oracle_passes: 3,
                oracle_runs: 3,
                warnings: vec![],
                times: PhaseTimes::default(),
            },
            pass_rate,
            calibration_attempts: pass_rate.map(|_| 4),
            solver: None,
            nearest: None,
            tokens: TokenCost::default(),
        }
    }

    #[test]
    fn an_entry_is_filtered_by_its_fields() {
        let f = TaskFilter { difficulty: vec!["hard".into()], pass_rate: Some([0.1, 0.5]), ..Default::default() };
        assert!(entry("a", "hard", "x", Some(0.25)).passes(&f));
        assert!(!entry("b", "hard", "x", None).passes(&f));
        assert!(!entry("c", "easy", "x", Some(0.25)).passes(&f));
    }

    #[test]
    fn the_index_names_the_task_folders() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tasks")).unwrap();
        let rows = vec![entry("a", "easy", "x", None), entry("b", "hard", "x", Some(0.5))];
        write_jsonl(&dir.path().join(INDEX_FILE), &rows).unwrap();
        assert!(is_synth_output(dir.path()));
        assert_eq!(read_index(dir.path()).unwrap(), rows);
        let hard = TaskFilter { difficulty: vec!["hard".into()], ..Default::default() };
        assert_eq!(task_dirs(dir.path(), Some(&hard)).unwrap(), vec![dir.path().join("tasks/b")]);
    }
}
