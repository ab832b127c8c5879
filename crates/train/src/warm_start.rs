//! The warm start into the policy's own LoRA adapter (`sft.into: adapter`): the base stays
//! as it is (a GGUF base keeps serving rollouts with the adapter on top) and GRPO goes on
//! training the same adapter. The demonstrations are a transcript file, or `oracle`: each
//! training task's reference solution carried out through the real loop as the model's
//! own tool calls (see `rollout::scripted`), kept when it resolves its task.

use std::path::Path;
use std::sync::Arc;

use super::error::TrainError;
use super::model::{lora_gguf::save_adapter_folder, peft, LoraSettings, Qwen3};
use super::preset::{Preset, SftInto};
use super::rollout::{oracle_replies, RolloutPlan, RolloutRunner, ScriptedSampler};
use super::setup::{train_on, transcript_samples};
use super::update::Sample;

pub use super::preset::ORACLE_DEMOS;

/// Trains the adapter on the demonstrations once per run; a later start loads
/// `out/sft-adapter`.
pub async fn warm_start_adapter(
    preset: &Preset,
    policy: &Qwen3,
    settings: &LoraSettings,
    base: &Path,
    out: &Path,
    runner: &RolloutRunner,
    log: &(dyn Fn(String) + Sync),
) -> Result<(), TrainError> {
    let Some(sft) = preset.sft.as_ref().filter(|s| s.into == SftInto::Adapter) else { return Ok(()) };
    let dir = out.join("sft-adapter");
    if dir.join("adapter_model.safetensors").is_file() {
        log(format!("warm start: the adapter from {}", dir.display()));
        return peft::load_adapter_into(policy, &dir);
    }
    let samples = if sft.file == ORACLE_DEMOS {
        oracle_samples(runner, &out.join("oracle-demos"), log).await?
    } else {
        transcript_samples(preset, sft, base)?
    };
    train_on(preset, sft, policy, &samples, base, log)?;
    let tmp = out.join(".tmp-sft-adapter");
    let _ = std::fs::remove_dir_all(&tmp);
    save_adapter_folder(policy, settings, base, &tmp)?;
    std::fs::rename(&tmp, &dir).map_err(|e| TrainError::io("rename", &tmp, e))
}

/// One oracle rollout per training task; the token samples of those that resolved.
async fn oracle_samples(
    runner: &RolloutRunner,
    dir: &Path,
    log: &(dyn Fn(String) + Sync),
) -> Result<Vec<Sample>, TrainError> {
    let scripted = Arc::new(ScriptedSampler::new(runner.tokenizer.clone()));
    let demo = runner.with_sampler(scripted.clone());
    let jobs: Vec<(RolloutPlan, Vec<String>)> = runner
        .tasks
        .iter()
        .enumerate()
        .filter_map(|(i, entry)| oracle_replies(entry).map(|r| (RolloutPlan { task: i, member: 0, seed: 0 }, r)))
        .collect();
    let tried = jobs.len();
    let rollouts = demo.run_scripted(&scripted, jobs, dir).await;
    let mut samples = Vec::new();
    for r in rollouts.iter().filter(|r| r.resolved) {
        for seg in &r.recording.segments {
            samples.push(Sample {
                tokens: seg.tokens.clone(),
                mask: seg.mask.clone(),
                advantage: 0.0,
                sampler_logp: None,
            });
        }
    }
    let resolved = rollouts.iter().filter(|r| r.resolved).count();
    let tokens: usize = samples.iter().map(|s| s.tokens.len()).sum();
    log(format!(
        "warm start: the oracle's solutions as tool calls resolved {resolved} of {tried} training tasks ({tokens} tokens \
         of demonstrations)"
    ));
    if samples.is_empty() {
        return Err(TrainError::Other(format!(
            "no oracle demonstration resolved its task (of {} tasks; their logs are in {})",
            runner.tasks.len(),
            dir.display()
        )));
    }
    Ok(samples)
}
