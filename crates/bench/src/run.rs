//! A bench run: tasks × attempts as trials, `-n` at a time, with a progress bar;
//! every finished trial is recorded at once so that `--resume` can continue.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use agent_sandbox::EnginePool;
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;

use super::agents::{AgentKind, ModelSource};
use super::env::EnvSettings;
use super::error::BenchError;
use super::hostenv::HostEnv;
use super::images::EngineImages;
use super::results::{self, load_manifest, load_trial, save_trial, ResultsFile, RunManifest, TrialRecord};
use super::stats::summarise;
use super::task::{discover, TaskEntry};
use super::trial::{run_trial, TrialContext};
use super::verify::{Verifier, VerifyMode};
use agent_core::config::Config;
use agent_llm::{resolve_model, ModelSpec, ResolveOptions};
use agent_sandbox::remove_run_settled;

/// What `agent bench` was asked to do.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub tasks: Vec<PathBuf>,
    pub concurrency: usize,
    pub attempts: u32,
    pub agent: AgentKind,
    pub model: Option<String>,
    pub run_id: Option<String>,
    pub output: Option<PathBuf>,
    pub resume: bool,
    pub verify: VerifyMode,
    pub host: HostEnv,
    pub resolve: ResolveOptions,
    pub progress: bool,
    /// Scales every task's agent and test timeouts (Terminal-Bench's timeout multiplier).
    pub timeout_multiplier: f64,
    /// Grant the capabilities tasks' services ask for (`cap_add`); refused otherwise.
    pub allow_cap_add: bool,
    /// Hooks for our agent's episodes (none unless `--hooks` names a settings file).
    pub hooks: agent_core::hooks::Hooks,
    /// Tries of a trial after its engine stopped answering (`--retries`), each on another
    /// engine that answers.
    pub retries: u32,
}

/// The run's directory and id, decided before anything starts (the CLI needs them
/// to clean up after a signal).
#[derive(Debug, Clone)]
pub struct RunSchedule {
    pub run_id: String,
    pub run_dir: PathBuf,
    pub manifest: RunManifest,
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

/// `YYYYMMDD-HHMMSS` in UTC.
fn timestamp(unix_secs: u64) -> String {
    let (y, m, d) = agent_llm::date::civil_date(unix_secs);
    let secs = unix_secs % 86_400;
    format!("{y:04}{m:02}{d:02}-{:02}{:02}{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// A new run id: the UTC time and four random hex digits (`20261206-071500-3f2a`).
pub fn fresh_run_id() -> String {
    let secs = (now_ms() / 1000) as u64;
    format!("{}-{}", timestamp(secs), &uuid::Uuid::new_v4().simple().to_string()[..4])
}

/// Decides the run id and directory; with `resume`, reads the earlier manifest.
pub fn schedule(opts: &BenchOptions) -> Result<RunSchedule, BenchError> {
    if opts.resume {
        let run_dir = match (&opts.output, &opts.run_id) {
            (Some(dir), _) => dir.clone(),
            (None, Some(id)) => PathBuf::from("runs").join(id),
            (None, None) => return Err(BenchError::Usage("--resume needs --run-id ID or --output DIR".into())),
        };
        let manifest = load_manifest(&run_dir)?;
        return Ok(RunSchedule { run_id: manifest.run_id.clone(), run_dir, manifest });
    }
    if opts.tasks.is_empty() {
        return Err(BenchError::Usage("no tasks given (pass task directories or directories of tasks)".into()));
    }
    let run_id = opts.run_id.clone().unwrap_or_else(fresh_run_id);
    if run_id.is_empty() || !run_id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(BenchError::Usage(format!("--run-id `{run_id}`: use letters, digits, '-', '_' and '.'")));
    }
    let run_dir = opts.output.clone().unwrap_or_else(|| PathBuf::from("runs").join(&run_id));
    if run_dir.join("run.json").exists() {
        return Err(BenchError::Usage(format!(
            "{} already holds a run; continue it with --resume, or choose another --run-id/--output",
            run_dir.display()
        )));
    }
    let manifest = RunManifest {
        run_id: run_id.clone(),
        agent: opts.agent,
        model: opts.model.clone(),
        attempts: opts.attempts.max(1),
        tasks: opts.tasks.clone(),
        created_unix_ms: now_ms(),
    };
    Ok(RunSchedule { run_id, run_dir, manifest })
}

/// Runs (or continues) the scheduled run; returns the aggregate results.
pub async fn run_bench(
    schedule: &RunSchedule,
    opts: &BenchOptions,
    config: &Config,
    pool: &EnginePool,
    notice: &(dyn Fn(String) + Sync),
) -> Result<ResultsFile, BenchError> {
    let m = &schedule.manifest;
    let mut entries = discover(&m.tasks)?;
    if opts.timeout_multiplier != 1.0 {
        for task in entries.iter_mut().filter_map(|e| e.task.as_mut().ok()) {
            task.agent_timeout = task.agent_timeout.mul_f64(opts.timeout_multiplier);
            task.test_timeout = task.test_timeout.mul_f64(opts.timeout_multiplier);
        }
    }
    std::fs::create_dir_all(&schedule.run_dir).map_err(|e| BenchError::io(&schedule.run_dir, e))?;
    if !opts.resume {
        results::write_json(&schedule.run_dir.join("run.json"), m)?;
    }
    // Containers and networks of an earlier, killed invocation of this run, on every
    // engine; and on an engine that answers again after it was lost, what its lost
    // trials left there (before anything new is placed on it).
    for engine in pool.engines() {
        let left = remove_run_settled(&engine, &schedule.run_id).await;
        if left.any() {
            notice(format!(
                "removed {} container(s), {} network(s) and {} volume(s) left on engine {} by an interrupted invocation of this run",
                left.containers, left.networks, left.volumes, engine.name()
            ));
        }
    }
    let run_id = schedule.run_id.clone();
    pool.on_revive(Arc::new(move |engine| {
        let run_id = run_id.clone();
        Box::pin(async move {
            let left = remove_run_settled(&engine, &run_id).await;
            tracing::info!(
                "engine {} answers again; removed {} container(s) of this run's lost trials",
                engine.name(),
                left.containers
            );
        })
    }));
    for e in &entries {
        match &e.task {
            Err(err) => notice(format!("task not loadable (its trials will fail as env_build_failed): {err}")),
            Ok(t) => t.notices.iter().for_each(|n| notice(format!("task {}: {n}", e.name))),
        }
    }
    let model = match m.agent {
        AgentKind::Agent => Some(model_source(m.model.as_deref().or(config.model.as_deref()), &opts.resolve).await?),
        _ => None,
    };
    let verifier = Verifier::probe(opts.verify).await;
    // Said only when some task's tests do use uv.
    let uses_uv = entries.iter().any(|e| e.task.as_ref().is_ok_and(Verifier::needs_uv));
    if let (Some(why), true) = (&verifier.uv_unreachable, uses_uv) {
        notice(format!("tests that need uv are verified by the fallback pytest: {why}"));
    }
    let ctx = Arc::new(TrialContext {
        pool: pool.clone(),
        run_dir: schedule.run_dir.clone(),
        agent: m.agent,
        model,
        config: config.clone(),
        images: Arc::new(EngineImages::new(&config.image_map, opts.host.build_env())),
        env: EnvSettings {
            allow_cap_add: opts.allow_cap_add,
            ..EnvSettings::from_config(config, &schedule.run_id, opts.host.extra_hosts.clone())
        },
        verifier,
        hooks: opts.hooks.clone(),
    });

    let mut done: Vec<TrialRecord> = Vec::new();
    let mut todo: Vec<(Arc<TaskEntry>, u32)> = Vec::new();
    let entries: Vec<Arc<TaskEntry>> = entries.into_iter().map(Arc::new).collect();
    for attempt in 0..m.attempts {
        for e in &entries {
            match load_trial(&schedule.run_dir, &e.name, attempt) {
                Some(rec) => done.push(rec),
                None => todo.push((e.clone(), attempt)),
            }
        }
    }
    if !done.is_empty() {
        notice(format!("resuming: {} trial(s) already finished, {} to run", done.len(), todo.len()));
    }
    let bar = progress_bar(opts.progress, (done.len() + todo.len()) as u64, done.len() as u64);
    let mut resolved = done.iter().filter(|r| r.resolved).count();
    bar.set_message(format!("{resolved} resolved"));
    // A trial whose engine stopped answering goes back to the front of the queue (another
    // engine takes it) until its retries are spent; only its last try is recorded.
    let mut queue: std::collections::VecDeque<(Arc<TaskEntry>, u32, Vec<String>)> =
        todo.into_iter().map(|(e, a)| (e, a, Vec::new())).collect();
    let mut running = FuturesUnordered::new();
    loop {
        while running.len() < opts.concurrency.max(1) {
            let Some((entry, attempt, lost_on)) = queue.pop_front() else { break };
            let ctx = ctx.clone();
            running.push(async move {
                let rec = run_trial(&ctx, &entry, attempt).await;
                (entry, lost_on, rec)
            });
        }
        let Some((entry, mut lost_on, mut rec)) = running.next().await else { break };
        if rec.failure_mode == super::results::FailureMode::SandboxLost {
            lost_on.push(rec.engine.clone().unwrap_or_else(|| "(none)".into()));
            if lost_on.len() <= opts.retries as usize {
                let line = format!("↻ {} #{}: {}; retrying", rec.task, rec.attempt, rec.reason);
                if !opts.progress {
                    tracing::info!("{line}");
                } else if bar.is_hidden() {
                    eprintln!("{line}");
                } else {
                    bar.println(line);
                }
                queue.push_front((entry, rec.attempt, lost_on));
                continue;
            }
        }
        rec.lost_on = lost_on;
        save_trial(&schedule.run_dir, &rec)?;
        resolved += rec.resolved as usize;
        let mark = if rec.resolved { "✓" } else { "✗" };
        let why = if rec.failure_mode == super::results::FailureMode::Unset {
            String::new()
        } else {
            format!(" [{}] {}", rec.failure_mode.as_str(), rec.reason.chars().take(160).collect::<String>())
        };
        let on = match (&rec.engine, pool.len()) {
            (Some(e), n) if n > 1 => format!(" on {e}"),
            _ => String::new(),
        };
        let line = format!("{mark} {} #{} ({:.1} s{on}){why}", rec.task, rec.attempt, rec.timings.total_secs);
        if !opts.progress {
            // --quiet: the summary table says it all.
        } else if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
        bar.set_message(format!("{resolved} resolved"));
        bar.inc(1);
        done.push(rec);
        write_results(&schedule.run_dir, m, &mut done)?;
    }
    bar.finish_and_clear();
    write_results(&schedule.run_dir, m, &mut done)
}

/// The model of a run's agent: one shared by every episode, or for a scripted model a
/// fresh one per episode (its replies restart). A bad spec or script stops here.
pub async fn model_source(spec: Option<&str>, resolve: &ResolveOptions) -> Result<ModelSource, BenchError> {
    let spec = ModelSpec::parse(spec.unwrap_or("default")).map_err(|e| BenchError::Model(e.to_string()))?;
    Ok(match spec {
        ModelSpec::Scripted(_) => {
            // Checked once here, so that a bad script stops the run instead of every trial.
            resolve_model(&spec, resolve).await.map_err(|e| BenchError::Model(e.to_string()))?;
            ModelSource::PerTrial(spec, Box::new(resolve.clone()))
        }
        other => {
            ModelSource::Shared(resolve_model(&other, resolve).await.map_err(|e| BenchError::Model(e.to_string()))?)
        }
    })
}

fn progress_bar(show: bool, total: u64, done: u64) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} trials, {msg} (eta {eta})",
    ) {
        bar.set_style(style);
    }
    bar.set_position(done);
    bar.enable_steady_tick(std::time::Duration::from_millis(250));
    bar
}

/// Writes `results.json` (sorted by task, then attempt).
fn write_results(run_dir: &Path, m: &RunManifest, done: &mut [TrialRecord]) -> Result<ResultsFile, BenchError> {
    done.sort_by(|a, b| a.task.cmp(&b.task).then(a.attempt.cmp(&b.attempt)));
    let stats = summarise(done);
    let file = ResultsFile {
        run_id: m.run_id.clone(),
        agent: m.agent,
        model: m.model.clone(),
        n_trials: stats.n_trials,
        n_resolved: stats.n_resolved,
        accuracy: stats.accuracy,
        stats,
        standins: done.iter().flat_map(|t| t.standins.clone()).collect(),
        trials: done.to_vec(),
    };
    results::write_json(&run_dir.join("results.json"), &file)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_timestamps() {
        assert_eq!(timestamp(0), "19700101-000000");
        assert_eq!(timestamp(1_764_684_000), "20251202-140000");
        assert_eq!(timestamp(951_782_400), "20000229-000000");
    }
}
