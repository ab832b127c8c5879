//! What a run records: one `result.json` per trial directory (written last, so its
//! presence marks a finished trial for `--resume`), the run's `run.json` manifest and
//! the aggregate `results.json`; every file is written atomically.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::agents::AgentKind;
use super::error::BenchError;
use super::pytest::TestResult;
use super::verify::VerifiedBy;
use agent_core::tools::ToolFormat;
use agent_protocol::TokenUsage;

/// Why a trial did not end normally (`unset`: it did; the tests decide).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    #[default]
    Unset,
    AgentTimeout,
    TestTimeout,
    ParseError,
    EnvBuildFailed,
    AgentError,
    /// The conversation outgrew the model's context window (Terminal-Bench's name).
    ContextLengthExceeded,
    /// The Docker engine running the trial stopped answering; the trial is retried on
    /// another engine (`--retries`) and recorded this way only when no retry is left.
    SandboxLost,
    /// The task's healthcheck (Harbor's `[environment.healthcheck]`, or a step's) never
    /// passed, so the agent did not start.
    EnvUnhealthy,
}

impl FailureMode {
    /// The name used in files and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureMode::Unset => "unset",
            FailureMode::AgentTimeout => "agent_timeout",
            FailureMode::TestTimeout => "test_timeout",
            FailureMode::ParseError => "parse_error",
            FailureMode::EnvBuildFailed => "env_build_failed",
            FailureMode::AgentError => "agent_error",
            FailureMode::ContextLengthExceeded => "context_length_exceeded",
            FailureMode::SandboxLost => "sandbox_lost",
            FailureMode::EnvUnhealthy => "env_unhealthy",
        }
    }
}

/// Seconds spent in each phase of a trial.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Timings {
    /// Image build (shared by the task's trials; counted on each).
    pub env_build_secs: f64,
    pub env_start_secs: f64,
    pub agent_secs: f64,
    /// Test package installation of the fallback verifier.
    pub test_setup_secs: f64,
    pub tests_secs: f64,
    pub teardown_secs: f64,
    pub total_secs: f64,
}

/// One trial's record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrialRecord {
    pub task: String,
    pub attempt: u32,
    pub resolved: bool,
    pub failure_mode: FailureMode,
    /// What went wrong, readable; empty for a normal trial.
    #[serde(default)]
    pub reason: String,
    pub verified_by: Option<VerifiedBy>,
    /// Why the verification mode was chosen, and with what.
    #[serde(default)]
    pub verify_note: Option<String>,
    #[serde(default)]
    pub tests: Vec<TestResult>,
    /// Weighted share of passed tests (`test_weights.json`), or the TB2 reward.
    #[serde(default)]
    pub score: f64,
    #[serde(default)]
    pub difficulty: Option<String>,
    #[serde(default)]
    pub category: Option<String>,
    #[serde(default)]
    pub usage: TokenUsage,
    #[serde(default)]
    pub turns: u32,
    /// Turns whose reply had a parse error (a malformed call, or no call at all).
    #[serde(default)]
    pub parse_error_turns: u32,
    /// Tool calls that repeated an identical earlier call with nothing changed in between
    /// (the trajectory's `repeated_calls`; 0 for the oracle, nop and older results).
    #[serde(default)]
    pub repeated_calls: u32,
    /// Turns whose reply wrote letters nothing the model was shown had (the trajectory's
    /// `foreign_letters`: the mark of a damaged model); 0 for the oracle and nop.
    #[serde(default)]
    pub foreign_letter_turns: u32,
    /// The action format the agent used (`native` or `text`; absent for the oracle and
    /// nop; results written before it was typed have `""` there).
    #[serde(default, deserialize_with = "empty_as_none", skip_serializing_if = "Option::is_none")]
    pub tool_format: Option<ToolFormat>,
    /// How the agent phase ended, in words.
    #[serde(default)]
    pub agent_ended: String,
    /// Why our agent's episode ended (absent for the oracle, nop or a failed start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_end_reason: Option<agent_protocol::EndReason>,
    pub timings: Timings,
    pub started_at_unix_ms: u128,
    /// Images of the task stood in for by local ones: task image → stand-in (what it is);
    /// present (empty) when none was.
    #[serde(default)]
    pub standins: BTreeMap<String, String>,
    /// Where the harness did not do what the task asks (ignored compose keys, no MCP, an
    /// unverified digest, …); present (empty) when there is nothing to say.
    #[serde(default)]
    pub notices: Vec<String>,
    /// The Docker engine that ran it (`local` unless `[[sandbox.engines]]` names others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// Engines an earlier try of this trial was lost on, in order (then retried).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_on: Vec<String>,
    /// A multi-step task's steps that ran, in order, each with its own reward (`score` is
    /// the task's, formed from them); absent for a single-step task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepRecord>>,
}

/// One step of a multi-step trial.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StepRecord {
    /// The step's name (`[[steps]] name`); its logs are in the trial's `steps/NAME/`.
    pub name: String,
    /// What the step's tests wrote: `reward.txt`, else `reward.json`'s `reward` (or the
    /// mean of its named rewards); absent when they wrote none or did not run.
    #[serde(default)]
    pub reward: Option<f64>,
    /// The named rewards behind `reward` (`reward.txt` counts as `reward`), which a step's
    /// `min_reward` is checked against.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rewards: BTreeMap<String, f64>,
    /// Why the step did not end normally (`unset`: it did; its tests decide).
    #[serde(default)]
    pub failure_mode: FailureMode,
    /// What went wrong in this step, readable; empty for a normal step.
    #[serde(default)]
    pub reason: String,
    /// How the agent's part of the step ended, in words.
    #[serde(default)]
    pub agent_ended: String,
    /// Seconds the agent's part of the step took.
    #[serde(default)]
    pub agent_secs: f64,
    /// Seconds the step's tests took (clearing `/tests` and copying them in included).
    #[serde(default)]
    pub tests_secs: f64,
}

/// The parameters of a run, kept so that `--resume` continues the same run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunManifest {
    pub run_id: String,
    pub agent: AgentKind,
    pub model: Option<String>,
    pub attempts: u32,
    pub tasks: Vec<PathBuf>,
    pub created_unix_ms: u128,
}

/// The aggregate file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResultsFile {
    pub run_id: String,
    pub agent: AgentKind,
    pub model: Option<String>,
    pub n_trials: usize,
    pub n_resolved: usize,
    pub accuracy: f64,
    pub stats: super::stats::Summary,
    /// Every stand-in the run used (task image → stand-in), gathered from the trials.
    #[serde(default)]
    pub standins: BTreeMap<String, String>,
    pub trials: Vec<TrialRecord>,
}

/// The directory of one trial.
pub fn trial_dir(run_dir: &Path, task: &str, attempt: u32) -> PathBuf {
    run_dir.join(task).join(format!("attempt-{attempt}"))
}

/// Writes `bytes` to `path` through a temporary file and a rename, so that a killed
/// run never leaves a truncated file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), BenchError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| BenchError::io(dir, e))?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(|e| BenchError::io(path, e))?;
    // Result files read like the logs beside them (a temporary file is created 0600).
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(|e| BenchError::io(path, e))?;
    tmp.persist(path).map_err(|e| BenchError::io(path, e.error))?;
    Ok(())
}

/// Writes a JSON value atomically.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), BenchError> {
    let text = serde_json::to_vec_pretty(value).map_err(|e| BenchError::io(path, e))?;
    write_atomic(path, &text)
}

/// Records a finished trial.
pub fn save_trial(run_dir: &Path, rec: &TrialRecord) -> Result<(), BenchError> {
    write_json(&trial_dir(run_dir, &rec.task, rec.attempt).join("result.json"), rec)
}

/// The finished trial of `task`/`attempt`, if its record exists and is readable.
pub fn load_trial(run_dir: &Path, task: &str, attempt: u32) -> Option<TrialRecord> {
    let path = trial_dir(run_dir, task, attempt).join("result.json");
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

/// Reads the run's manifest.
pub fn load_manifest(run_dir: &Path) -> Result<RunManifest, BenchError> {
    let path = run_dir.join("run.json");
    let text = std::fs::read_to_string(&path).map_err(|e| BenchError::Results {
        path: path.display().to_string(),
        reason: format!("cannot read the run manifest ({e}); --resume needs the directory of an earlier run"),
    })?;
    serde_json::from_str(&text).map_err(|e| BenchError::Results {
        path: path.display().to_string(),
        reason: format!("not a run manifest: {e}"),
    })
}

/// An optional value whose absence older files wrote as `""`.
fn empty_as_none<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let v = serde_json::Value::deserialize(d)?;
    match v {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) if s.is_empty() => Ok(None),
        other => serde_json::from_value(other).map(Some).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_files_are_readable_like_logs() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("results.json");
        write_atomic(&p, b"{}").unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o644);
    }

    #[test]
    fn trial_records_round_trip_and_mark_finished_trials() {
        let d = tempfile::tempdir().unwrap();
        assert!(load_trial(d.path(), "t", 0).is_none());
        let rec = TrialRecord {
            task: "t".into(),
            attempt: 0,
            resolved: false,
            failure_mode: FailureMode::TestTimeout,
            reason: "slow".into(),
            verified_by: Some(VerifiedBy::FallbackPytest),
            verify_note: None,
            tests: vec![],
            score: 0.0,
            difficulty: None,
            category: None,
            usage: TokenUsage::default(),
            turns: 0,
            parse_error_turns: 0,
            repeated_calls: 3,
            foreign_letter_turns: 0,
            tool_format: None,
            agent_ended: String::new(),
            agent_end_reason: None,
            timings: Timings::default(),
            started_at_unix_ms: 1,
            standins: Default::default(),
            notices: Vec::new(),
            engine: None,
            lost_on: Vec::new(),
            steps: None,
        };
        save_trial(d.path(), &rec).unwrap();
        assert_eq!(load_trial(d.path(), "t", 0).unwrap(), rec);
        let text = std::fs::read_to_string(d.path().join("t/attempt-0/result.json")).unwrap();
        assert!(text.contains("\"failure_mode\": \"test_timeout\"") && text.contains("\"fallback-pytest\""), "{text}");
        assert!(text.contains("\"repeated_calls\": 3"), "{text}");
        let older = text.replace("\"repeated_calls\": 3,", "");
        assert_eq!(
            serde_json::from_str::<TrialRecord>(&older).unwrap().repeated_calls,
            0,
            "a result without the count"
        );
        assert!(!text.contains("\"steps\""), "a single-step trial has no steps: {text}");
        let mut multi = rec.clone();
        multi.steps = Some(vec![
            StepRecord { name: "one".into(), reward: Some(1.0), ..Default::default() },
            StepRecord {
                name: "two".into(),
                reward: Some(0.5),
                rewards: BTreeMap::from([("a".into(), 0.0), ("b".into(), 1.0)]),
                ..Default::default()
            },
        ]);
        save_trial(d.path(), &multi).unwrap();
        assert_eq!(load_trial(d.path(), "t", 0).unwrap(), multi);
        let text = std::fs::read_to_string(d.path().join("t/attempt-0/result.json")).unwrap();
        assert!(text.contains("\"name\": \"two\"") && text.contains("\"reward\": 0.5"), "{text}");
        let e = load_manifest(d.path()).unwrap_err().to_string();
        assert!(e.contains("run.json") && e.contains("--resume"), "{e}");
    }
}
