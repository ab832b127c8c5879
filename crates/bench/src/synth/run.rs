//! A synth run: the plan kept in `synth.json`, one process per output folder (a lock),
//! workers claiming items from the queue, each ending recorded at once, and the index
//! rebuilt from the ended items after each (so it never holds a task twice, whatever
//! was killed when).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::stream::FuturesUnordered;
use futures_util::{Future, StreamExt};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::index::{write_jsonl, IndexEntry};
use super::queue::{DoneRecord, Item, Outcome, Queue, Role};
use super::similar::Fingerprint;
use super::{Dirs, SynthError, SynthOptions, SynthPlan};
use crate::agents::ModelSource;
use crate::task::discover;
use crate::validate::{ValidateOptions, Validator};
use agent_core::config::Config;
use agent_sandbox::{remove_run_settled, Engine};

/// The models of the roles (a spec named by several roles is loaded once).
pub struct Models {
    pub idea: ModelSource,
    pub builder: ModelSource,
    pub reviewer: ModelSource,
    pub solver: ModelSource,
}

/// What every worker shares.
pub struct SynthCtx {
    pub docker: Engine,
    pub config: Config,
    pub plan: SynthPlan,
    pub dirs: Dirs,
    /// Labels the run's containers.
    pub run_id: String,
    pub models: Models,
    pub validator: Validator,
    /// The seed tasks, for the near-duplicate check.
    pub seeds: Vec<Fingerprint>,
    /// The tasks accepted so far; accepting holds the lock.
    pub accepted: tokio::sync::Mutex<Vec<Fingerprint>>,
}

/// What a role's work produced.
pub struct RoleOutput {
    pub outcome: Outcome,
    pub children: Vec<Item>,
    /// Tokens the role's models used.
    pub tokens: u64,
}

impl RoleOutput {
    /// The work could not be done.
    pub fn failed(reason: String) -> Self {
        RoleOutput { outcome: Outcome::Failed { reason }, children: vec![], tokens: 0 }
    }

    /// A finished task for the index.
    pub fn indexed(entry: IndexEntry, tokens: u64) -> Self {
        RoleOutput {
            outcome: Outcome::Done { result: serde_json::json!({ "index": entry }) },
            children: vec![],
            tokens,
        }
    }
}

/// An item that ended without a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RejectedRow {
    pub id: String,
    pub role: Role,
    /// `rejected` (judged and refused) or `failed` (could not be done).
    pub status: String,
    pub reason: String,
    pub tokens: u64,
}

/// What a run made.
#[derive(Debug, Clone, Default)]
pub struct SynthSummary {
    pub accepted: Vec<IndexEntry>,
    pub rejected: Vec<RejectedRow>,
    /// Items ended, by role.
    pub ended: BTreeMap<String, usize>,
    pub tokens: u64,
    pub secs: f64,
}

/// Runs (or resumes) a synth run to the end of its queue. `plan` is the new run's
/// plan; with `opts.resume` it is read from the output folder instead.
pub async fn run_synth(
    plan: Option<SynthPlan>,
    opts: &SynthOptions,
    config: &Config,
    docker: &Engine,
    on_line: &(dyn Fn(String) + Sync),
) -> Result<SynthSummary, SynthError> {
    let started = Instant::now();
    let dirs = Dirs { root: opts.out.clone() };
    std::fs::create_dir_all(&dirs.root).map_err(|e| SynthError::io(&dirs.root, e))?;
    let _lock = lock(&dirs.root)?;
    let plan = settle_plan(&dirs, plan, opts.resume)?;
    let run_id = synth_run_id(&dirs.root);
    let left = remove_run_settled(docker, &run_id).await;
    if left.any() {
        on_line(format!("removed {} container(s) left by an interrupted invocation of this run", left.containers));
    }
    let queue = Queue::open(&dirs.root, opts.claim_timeout, opts.max_claims.max(1))?;
    let seeds = discover(&plan.seeds).map_err(|e| SynthError::Usage(format!("the seed tasks: {e}")))?;
    if opts.resume {
        let returned = queue.recover()?;
        let (pending, _) = queue.open_items()?;
        on_line(format!(
            "resuming: {} item(s) ended, {pending} to do ({} returned from the interrupted run)",
            queue.done()?.len(),
            returned.len()
        ));
    } else {
        for s in &seeds {
            let item = Item {
                id: super::slug(&s.name, 60),
                role: Role::Idea,
                parent: None,
                payload: serde_json::json!({ "seed": s.name, "seed_dir": std::path::absolute(&s.dir).unwrap_or(s.dir.clone()) }),
                claims: 0,
            };
            queue.push(&item)?;
        }
    }
    let seed_prints = seeds
        .iter()
        .filter_map(|e| e.task.as_ref().ok().map(|t| Fingerprint::of_task(&e.name, &e.dir, &t.instruction)))
        .collect();
    let accepted = index_rows(&queue.done()?)
        .iter()
        .map(|e| {
            let dir = dirs.tasks().join(&e.name);
            let instruction = std::fs::read_to_string(dir.join("instruction.md")).unwrap_or_default();
            Fingerprint::of_task(&e.name, &dir, &instruction)
        })
        .collect();
    let models = role_models(&plan, opts).await?;
    let validate = ValidateOptions { oracle_runs: plan.oracle_runs, ..opts.validate.clone() };
    let validator = Validator::new(docker.clone(), config.clone(), &run_id, &dirs.root.join("work"), validate).await;
    let ctx = Arc::new(SynthCtx {
        docker: docker.clone(),
        config: config.clone(),
        plan,
        dirs: dirs.clone(),
        run_id: run_id.clone(),
        models,
        validator,
        seeds: seed_prints,
        accepted: tokio::sync::Mutex::new(accepted),
    });

    type Work = Pin<Box<dyn Future<Output = (Item, Option<RoleOutput>, f64)> + Send>>;
    let mut running: FuturesUnordered<Work> = FuturesUnordered::new();
    let mut running_ids: Vec<String> = Vec::new();
    loop {
        for id in queue.reap(SystemTime::now())? {
            on_line(format!("{id}: its claim timed out; it goes back to the queue"));
        }
        while running.len() < opts.workers.max(1) {
            let Some(item) = queue.claim()? else { break };
            on_line(format!("→ {} {}", item.role.as_str(), item.id));
            running_ids.push(item.id.clone());
            let (ctx, timeout) = (ctx.clone(), opts.claim_timeout);
            running.push(Box::pin(async move {
                let t = Instant::now();
                let out = tokio::time::timeout(timeout, work(&ctx, &item)).await.ok();
                (item, out, t.elapsed().as_secs_f64())
            }));
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            Some((item, out, secs)) = running.next() => {
                running_ids.retain(|id| *id != item.id);
                match out {
                    None => {
                        on_line(format!("{}: ran past the claim timeout of {} s; it goes back to the queue", item.id, opts.claim_timeout.as_secs()));
                        // Its containers are this run's; they go with the run's clean-up.
                        queue.return_claim(item)?;
                    }
                    Some(out) => {
                        let line = describe(&item, &out, secs);
                        let record = DoneRecord { item, outcome: out.outcome, children: out.children, tokens: out.tokens, secs };
                        if queue.finish(&record)? {
                            on_line(line);
                        }
                        write_outputs(&dirs, &queue.done()?)?;
                    }
                }
            }
            _ = tokio::time::sleep(Duration::from_secs(5)) => {
                for id in &running_ids {
                    queue.touch(id);
                }
            }
        }
    }
    let done = queue.done()?;
    write_outputs(&dirs, &done)?;
    remove_run_settled(docker, &run_id).await;
    let mut summary = SynthSummary {
        accepted: index_rows(&done),
        rejected: rejected_rows(&done),
        secs: started.elapsed().as_secs_f64(),
        ..Default::default()
    };
    for rec in &done {
        *summary.ended.entry(rec.item.role.as_str().to_string()).or_default() += 1;
        summary.tokens += rec.tokens;
    }
    Ok(summary)
}

async fn work(ctx: &SynthCtx, item: &Item) -> RoleOutput {
    match item.role {
        Role::Idea => super::idea::run(ctx, item).await,
        Role::Build => super::build::run(ctx, item).await,
        Role::Review => super::review::run(ctx, item).await,
        Role::Calibrate => super::calibrate::run(ctx, item).await,
    }
}

fn describe(item: &Item, out: &RoleOutput, secs: f64) -> String {
    let (mark, what) = match &out.outcome {
        Outcome::Done { result } => {
            let what = match result.get("index").and_then(|e| e.get("name")) {
                Some(name) => format!("accepted as tasks/{}", name.as_str().unwrap_or_default()),
                None => match item.role {
                    Role::Idea => format!("{} idea(s)", out.children.len()),
                    Role::Build => "valid; to review".into(),
                    Role::Review => "approved; to calibrate".into(),
                    Role::Calibrate => "calibrated".into(),
                },
            };
            ("✓", what)
        }
        Outcome::Rejected { reason } => ("✗", format!("rejected: {reason}")),
        Outcome::Failed { reason } => ("✗", format!("failed: {reason}")),
    };
    format!("{mark} {} {} ({secs:.0} s, {} tokens): {what}", item.role.as_str(), item.id, out.tokens)
}

/// The index's rows: every ended item that produced a task, by id.
fn index_rows(done: &[DoneRecord]) -> Vec<IndexEntry> {
    let mut rows: Vec<IndexEntry> = done
        .iter()
        .filter_map(|r| match &r.outcome {
            Outcome::Done { result } => result.get("index").and_then(|e| serde_json::from_value(e.clone()).ok()),
            _ => None,
        })
        .collect();
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    rows
}

fn rejected_rows(done: &[DoneRecord]) -> Vec<RejectedRow> {
    done.iter()
        .filter_map(|r| {
            let (status, reason) = match &r.outcome {
                Outcome::Rejected { reason } => ("rejected", reason),
                Outcome::Failed { reason } => ("failed", reason),
                Outcome::Done { .. } => return None,
            };
            Some(RejectedRow {
                id: r.item.id.clone(),
                role: r.item.role,
                status: status.into(),
                reason: reason.clone(),
                tokens: r.tokens,
            })
        })
        .collect()
}

fn write_outputs(dirs: &Dirs, done: &[DoneRecord]) -> Result<(), SynthError> {
    std::fs::create_dir_all(dirs.tasks()).map_err(|e| SynthError::io(&dirs.tasks(), e))?;
    write_jsonl(&dirs.index(), &index_rows(done))?;
    write_jsonl(&dirs.rejected(), &rejected_rows(done))
}

/// Holds the output folder for this process: a second `agent tasks synth` on the same
/// folder would claim the items this one is working on.
fn lock(root: &Path) -> Result<File, SynthError> {
    let path = root.join("synth.lock");
    let file = File::create(&path).map_err(|e| SynthError::io(&path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(SynthError::Usage(format!(
            "another `agent tasks synth` is working in {}; wait for it, or stop it first",
            root.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(SynthError::io(&path, e)),
    }
}

fn settle_plan(dirs: &Dirs, plan: Option<SynthPlan>, resume: bool) -> Result<SynthPlan, SynthError> {
    let path = dirs.plan();
    if resume {
        let text = std::fs::read_to_string(&path).map_err(|_| {
            SynthError::Usage(format!("{} holds no synth run to resume (no synth.json)", dirs.root.display()))
        })?;
        return serde_json::from_str(&text).map_err(|e| SynthError::Other(format!("{}: {e}", path.display())));
    }
    if path.exists() {
        return Err(SynthError::Usage(format!(
            "{} already holds a synth run; continue it with --resume, or choose another --out",
            dirs.root.display()
        )));
    }
    let plan = plan.ok_or_else(|| SynthError::Usage("no plan for a new run".into()))?;
    if plan.seeds.is_empty() {
        return Err(SynthError::Usage("no seed tasks given".into()));
    }
    let text = serde_json::to_vec_pretty(&plan).map_err(|e| SynthError::Other(e.to_string()))?;
    crate::results::write_atomic(&path, &text)?;
    Ok(plan)
}

/// The run's container label: stable for an output folder, so a resumed run removes
/// what the killed one left.
pub fn synth_run_id(root: &Path) -> String {
    let canonical = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let hash = format!("{:x}", Sha256::digest(canonical.display().to_string().as_bytes()));
    format!("synth-{}", &hash[..10])
}

async fn role_models(plan: &SynthPlan, opts: &SynthOptions) -> Result<Models, SynthError> {
    let mut loaded: BTreeMap<String, ModelSource> = BTreeMap::new();
    let m = &plan.models;
    for spec in [&m.idea, &m.builder, &m.reviewer, &m.solver] {
        if !loaded.contains_key(spec.as_str()) {
            if spec == &m.solver && plan.calibrate == 0 && ![&m.idea, &m.builder, &m.reviewer].contains(&spec) {
                continue; // no calibration: the solver is never asked
            }
            let source = crate::run::model_source(Some(spec), &opts.resolve)
                .await
                .map_err(|e| SynthError::Model(format!("the model `{spec}`: {e}")))?;
            loaded.insert(spec.clone(), source);
        }
    }
    let get = |spec: &str| loaded.get(spec).cloned();
    let idea = get(&m.idea).ok_or_else(|| SynthError::Model("the idea model did not load".into()))?;
    Ok(Models {
        builder: get(&m.builder).unwrap_or_else(|| idea.clone()),
        reviewer: get(&m.reviewer).unwrap_or_else(|| idea.clone()),
        solver: get(&m.solver).unwrap_or_else(|| idea.clone()),
        idea,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_id_is_stable_per_folder() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        assert_eq!(synth_run_id(a.path()), synth_run_id(a.path()));
        assert_ne!(synth_run_id(a.path()), synth_run_id(b.path()));
        assert!(synth_run_id(a.path()).starts_with("synth-"));
    }

    #[test]
    fn one_process_holds_an_output_folder() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock(dir.path()).unwrap();
        assert!(matches!(lock(dir.path()), Err(SynthError::Usage(m)) if m.contains("another")));
        drop(held);
        lock(dir.path()).unwrap();
    }
}
