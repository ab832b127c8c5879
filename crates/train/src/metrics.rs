//! Per-step training metrics, appended to a JSONL log that survives kills and resumes.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Errors of the metrics log; each names the file (and the line when reading).
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// A file operation failed.
    #[error("cannot {action} the metrics log {path}: {source}. Check that the directory exists and is writable")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A line is not a step record.
    #[error("the metrics log {path} line {line} is not a step record: {reason}. Move the file aside to start over")]
    Parse { path: PathBuf, line: usize, reason: String },
    /// A fresh run would append to the log of an earlier one.
    #[error(
        "the metrics log {path} already holds {steps} step(s) from an earlier run; resume that run from its \
         checkpoint, or move the file aside to start a new one"
    )]
    Exists { path: PathBuf, steps: usize },
    /// Steps must increase, or a resumed log would not equal an uninterrupted one.
    #[error("step {step} was logged after step {last} in {path}; steps must increase (this is a bug in the trainer)")]
    OutOfOrder { path: PathBuf, step: u64, last: u64 },
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What one GRPO step did. Non-finite values (e.g. the loss of a step whose groups were all dropped) are written
/// as `null` and read back as NaN.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StepMetrics {
    /// Step number, from 1.
    pub step: u64,
    /// Mean reward of the step's rollouts.
    #[serde(with = "nan_as_null")]
    pub reward_mean: f64,
    /// Standard deviation of those rewards.
    #[serde(with = "nan_as_null")]
    pub reward_std: f64,
    /// Fraction of rollouts that passed all tests.
    #[serde(with = "nan_as_null")]
    pub pass_rate: f64,
    /// Policy loss.
    #[serde(with = "nan_as_null")]
    pub loss: f64,
    /// KL to the reference policy.
    #[serde(with = "nan_as_null")]
    pub kl: f64,
    /// Mean entropy of the sampled tokens.
    #[serde(with = "nan_as_null")]
    pub entropy: f64,
    /// Fraction of model tokens whose ratio was clipped.
    #[serde(with = "nan_as_null")]
    pub clip_frac: f64,
    /// Gradient norm before clipping.
    #[serde(with = "nan_as_null")]
    pub grad_norm: f64,
    /// Learning rate used.
    #[serde(with = "nan_as_null")]
    pub lr: f64,
    /// Tokens in the step's transcripts.
    pub tokens: u64,
    /// Of those, tokens the model generated (the ones in the loss).
    pub model_tokens: u64,
    /// Rollouts run.
    pub rollouts: u64,
    /// Rollouts that hit a limit.
    pub truncated: u64,
    /// Rollouts that hit the wall clock.
    pub timed_out: u64,
    /// Of the truncated rollouts, those whose conversation outgrew the context window.
    #[serde(default)]
    pub context_exhausted: u64,
    /// Rollouts that failed (container or harness error).
    pub crashed: u64,
    /// Rollouts per Docker engine (`[[sandbox.engines]]`), by the engine's name.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub engines: std::collections::BTreeMap<String, u64>,
    /// Groups used in the update.
    pub groups_kept: u64,
    /// Mean |trainer − sampler| log-prob of the model tokens, when another engine
    /// (mistral.rs) sampled them: how far apart the two engines' numbers are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler_logp_diff: Option<f64>,
    /// Groups dropped by dynamic sampling.
    pub groups_dropped: u64,
    /// Extra draws of tasks made to replace groups with no signal (`grpo.refill_rounds`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refill_rounds: u64,
    /// Training tasks tried so far whose running pass rate is outside `grpo.task_band`
    /// (they wait while others are left).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tasks_outside_band: u64,
    /// Seconds spent sampling.
    #[serde(with = "nan_as_null")]
    pub rollout_secs: f64,
    /// Of the rollouts: seconds the judge worked, summed over rollouts (they run in
    /// parallel, so this can exceed `rollout_secs`).
    #[serde(default, with = "nan_as_null")]
    pub judge_secs: f64,
    /// Seconds spent on advantages (rollouts into training samples).
    #[serde(default, with = "nan_as_null")]
    pub advantage_secs: f64,
    /// Seconds spent updating.
    #[serde(with = "nan_as_null")]
    pub update_secs: f64,
    /// Of the update: scoring the samples first (old and, with a KL weight, reference log-probs).
    #[serde(default, with = "nan_as_null")]
    pub score_secs: f64,
    /// Of the update: forward and backward passes.
    #[serde(default, with = "nan_as_null")]
    pub grad_secs: f64,
    /// Of the update: gradient reduction, clipping and AdamW.
    #[serde(default, with = "nan_as_null")]
    pub optim_secs: f64,
    /// Of the update: handing the new weights to the sampler (the adapter file and its swap).
    #[serde(default, with = "nan_as_null")]
    pub sync_secs: f64,
    /// Token positions the update's forward and backward passes went through (every
    /// sample's, once per PPO epoch).
    #[serde(default)]
    pub update_tokens: u64,
    /// Of those, positions a shared prefix saved (computed once per mini-batch, not per sample).
    #[serde(default)]
    pub shared_tokens: u64,
}

impl StepMetrics {
    /// The metrics without the wall-clock fields, which differ between any two runs.
    pub fn without_clock(&self) -> StepMetrics {
        StepMetrics {
            rollout_secs: 0.0,
            judge_secs: 0.0,
            advantage_secs: 0.0,
            update_secs: 0.0,
            score_secs: 0.0,
            grad_secs: 0.0,
            optim_secs: 0.0,
            sync_secs: 0.0,
            ..self.clone()
        }
    }
}

/// JSON has no NaN: serde_json writes non-finite floats as null, so reading maps null back to NaN.
mod nan_as_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else {
            s.serialize_none()
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

/// An append-only JSONL log of [`StepMetrics`], one fsynced line per step.
#[derive(Debug)]
pub struct MetricsLog {
    path: PathBuf,
    file: File,
    last_step: Option<u64>,
}

impl MetricsLog {
    /// Opens the log for appending. A fresh run (`resume_from_step` None) refuses a log that already has steps;
    /// a resumed run first drops the lines after the checkpoint's step, so the file ends up as if never killed.
    pub fn open(path: &Path, resume_from_step: Option<u64>) -> Result<MetricsLog, MetricsError> {
        let io = |action, source| MetricsError::Io { action, path: path.to_path_buf(), source };
        let existing = match std::fs::read_to_string(path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io("read", e)),
        };
        let mut last_step = None;
        if let Some(text) = existing {
            let lines = complete_lines(path, &text)?;
            let keep_to = match resume_from_step {
                None if !lines.is_empty() => {
                    return Err(MetricsError::Exists { path: path.to_path_buf(), steps: lines.len() });
                }
                None => 0,
                Some(step) => step,
            };
            let mut kept = String::new();
            for (m, line) in lines.iter().filter(|(m, _)| m.step <= keep_to) {
                kept.push_str(line);
                kept.push('\n');
                last_step = Some(m.step);
            }
            // Also drops a cut last line, which appending would otherwise glue to the next record. Through a temp
            // file and rename: a kill here leaves the old or the new file whole.
            if kept != text {
                write_atomic(path, kept.as_bytes()).map_err(|e| io("rewrite", e))?;
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(path).map_err(|e| io("open", e))?;
        Ok(MetricsLog { path: path.to_path_buf(), file, last_step })
    }

    /// Appends one step and makes it durable before returning.
    pub fn append(&mut self, metrics: &StepMetrics) -> Result<(), MetricsError> {
        if let Some(last) = self.last_step.filter(|&last| metrics.step <= last) {
            return Err(MetricsError::OutOfOrder { path: self.path.clone(), step: metrics.step, last });
        }
        let io = |action, source| MetricsError::Io { action, path: self.path.clone(), source };
        let mut line = serde_json::to_string(metrics)
            .map_err(|e| io("serialise a step for", std::io::Error::other(e.to_string())))?;
        line.push('\n');
        // One write per line: a kill leaves at most an unterminated last line, which readers skip.
        self.file.write_all(line.as_bytes()).map_err(|e| io("append to", e))?;
        self.file.flush().map_err(|e| io("flush", e))?;
        self.file.sync_data().map_err(|e| io("sync", e))?;
        self.last_step = Some(metrics.step);
        Ok(())
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every step in a log. An unterminated last line (a write cut by a kill) is skipped; any other bad line
    /// is an error naming its number.
    pub fn read(path: &Path) -> Result<Vec<StepMetrics>, MetricsError> {
        let text = std::fs::read_to_string(path).map_err(|source| MetricsError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        })?;
        Ok(complete_lines(path, &text)?.into_iter().map(|(m, _)| m).collect())
    }
}

/// The parsed lines of a log with their text, skipping blank lines and an unterminated last line that does not parse.
fn complete_lines<'a>(path: &Path, text: &'a str) -> Result<Vec<(StepMetrics, &'a str)>, MetricsError> {
    let mut out = Vec::new();
    let terminated = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<StepMetrics>(line) {
            Ok(m) => out.push((m, *line)),
            Err(_) if i + 1 == lines.len() && !terminated => {}
            Err(e) => {
                return Err(MetricsError::Parse { path: path.to_path_buf(), line: i + 1, reason: e.to_string() });
            }
        }
    }
    Ok(out)
}

/// Writes `bytes` to `path` through a temp file in the same directory, fsync and rename, so that readers and
/// a crash see either the old file or the new one, never a partial one.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        // Best effort: the temp file is garbage either way, and the original error is the one to report.
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    // Makes the rename itself durable; some filesystems refuse to sync a directory, which loses nothing here.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("metrics-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn step(n: u64) -> StepMetrics {
        StepMetrics {
            step: n,
            reward_mean: n as f64 / 10.0,
            pass_rate: n as f64 / 20.0,
            tokens: 100 * n,
            rollout_secs: 1.5,
            ..Default::default()
        }
    }

    #[test]
    fn append_and_read_back() {
        let d = tmpdir("rw");
        let path = d.join("metrics.jsonl");
        let mut log = MetricsLog::open(&path, None).unwrap();
        for n in 1..=3 {
            log.append(&step(n)).unwrap();
        }
        assert_eq!(MetricsLog::read(&path).unwrap(), vec![step(1), step(2), step(3)]);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn resumed_log_equals_uninterrupted_one() {
        let d = tmpdir("resume");
        let straight = d.join("straight.jsonl");
        let mut log = MetricsLog::open(&straight, None).unwrap();
        for n in 1..=6 {
            log.append(&step(n)).unwrap();
        }
        // Killed after step 5 was logged but the last checkpoint is step 3, mid-write of step 6.
        let resumed = d.join("resumed.jsonl");
        let mut log = MetricsLog::open(&resumed, None).unwrap();
        for n in 1..=5 {
            log.append(&step(n)).unwrap();
        }
        drop(log);
        let mut f = OpenOptions::new().append(true).open(&resumed).unwrap();
        f.write_all(b"{\"step\":6,\"rew").unwrap();
        drop(f);
        let mut log = MetricsLog::open(&resumed, Some(3)).unwrap();
        assert_eq!(MetricsLog::read(&resumed).unwrap().len(), 3);
        for n in 4..=6 {
            log.append(&step(n)).unwrap();
        }
        assert_eq!(std::fs::read(&straight).unwrap(), std::fs::read(&resumed).unwrap());
        let leftovers: Vec<_> = std::fs::read_dir(&d).unwrap().filter_map(|e| e.ok()).collect();
        assert_eq!(leftovers.len(), 2, "no temp file is left behind");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn fresh_run_refuses_an_existing_log() {
        let d = tmpdir("fresh");
        let path = d.join("metrics.jsonl");
        MetricsLog::open(&path, None).unwrap().append(&step(1)).unwrap();
        let err = MetricsLog::open(&path, None).unwrap_err();
        assert!(matches!(err, MetricsError::Exists { steps: 1, .. }), "{err}");
        assert_eq!(MetricsLog::read(&path).unwrap().len(), 1, "the old log is untouched");
        // Resuming from before any step keeps nothing.
        MetricsLog::open(&path, Some(0)).unwrap();
        assert!(MetricsLog::read(&path).unwrap().is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn fresh_run_drops_a_cut_line() {
        let d = tmpdir("cut");
        let path = d.join("metrics.jsonl");
        std::fs::write(&path, "{\"step\":1,\"re").unwrap();
        MetricsLog::open(&path, None).unwrap().append(&step(1)).unwrap();
        assert_eq!(MetricsLog::read(&path).unwrap(), vec![step(1)]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn steps_must_increase() {
        let d = tmpdir("order");
        let path = d.join("metrics.jsonl");
        let mut log = MetricsLog::open(&path, None).unwrap();
        log.append(&step(2)).unwrap();
        assert!(matches!(log.append(&step(2)), Err(MetricsError::OutOfOrder { step: 2, last: 2, .. })));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_line_is_named() {
        let d = tmpdir("bad");
        let path = d.join("metrics.jsonl");
        let good = serde_json::to_string(&step(1)).unwrap();
        std::fs::write(&path, format!("{good}\nnot json\n{good}\n")).unwrap();
        let err = MetricsLog::read(&path).unwrap_err().to_string();
        assert!(err.contains("metrics.jsonl") && err.contains("line 2"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn nan_round_trips_as_null() {
        let m = StepMetrics { loss: f64::NAN, ..step(1) };
        let line = serde_json::to_string(&m).unwrap();
        assert!(line.contains("\"loss\":null"), "{line}");
        let back: StepMetrics = serde_json::from_str(&line).unwrap();
        assert!(back.loss.is_nan());
        assert_eq!(back.reward_mean, m.reward_mean);
    }

    #[test]
    fn missing_file_is_named() {
        let err = MetricsLog::read(Path::new("/nonexistent/m.jsonl")).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/m.jsonl"), "{err}");
    }
}
