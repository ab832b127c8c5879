//! A container-free stand-in for the toy file tasks, for tuning `cpu-tiny` quickly: the
//! same warm start, sampler, advantages and update as `agent train`, with the reward read
//! off the reply's text (`echo WORD > FILE`) instead of running the task's tests.
//! Run with `AGENT_SIM_PRESET=cpu-tiny cargo test --lib toy_sim -- --ignored --nocapture`.

use std::path::PathBuf;

use candle_core::Device;

use super::dist::SingleRank;
use super::model::Qwen3;
use super::optim::AdamW;
use super::preset::Preset;
use super::rollout::{GenerateRequest, Recording, Rollout, RolloutPlan, RolloutStatus, Sampler, Segment};
use super::run::train_mode;
use super::setup;
use super::step::{build_samples, mix_seed, step_plans};
use super::update::{grpo_update, Reference};
use agent_llm::ChatTemplate;
use agent_llm::{ChatMessage, Role};

const WORDS: [&str; 4] = ["apple", "river", "stone", "cloud"];
const FILES: [&str; 2] = ["note", "data"];

struct Reply {
    text: String,
    prompt: Vec<u32>,
    ids: Vec<u32>,
    logp: Vec<f32>,
    complete: bool,
    right: bool,
    reward: f64,
}

fn roll(
    sampler: &Sampler,
    tok: &tokenizers::Tokenizer,
    system: &str,
    task: usize,
    seed: u64,
    p: &Preset,
    im_end: u32,
) -> Reply {
    let (file, word) = (FILES[task / 4], WORDS[task % 4]);
    let messages = [
        ChatMessage::new(Role::System, system),
        ChatMessage::new(Role::User, format!("Create /app/{file}.txt containing the word {word}.")),
    ];
    let text = ChatTemplate::qwen3().unwrap().render(&messages, &[], true).unwrap();
    let prompt = tok.encode(text, false).unwrap().get_ids().to_vec();
    let (tx, rx) = tokio::sync::oneshot::channel();
    sampler
        .submit(GenerateRequest {
            session: seed,
            prompt: prompt.clone(),
            max_new_tokens: p.grpo.max_new_tokens,
            temperature: p.grpo.temperature,
            top_p: p.grpo.top_p,
            seed,
            stop: vec![im_end],
            cancel: Default::default(),
            grammar: None,
            reply: tx,
        })
        .unwrap();
    let g = rx.blocking_recv().unwrap().unwrap();
    sampler.close(seed);
    let reply = tok.decode(&g.ids, false).unwrap();
    let complete = g.stopped && reply.contains("<finish>");
    // What the task's two tests would see: the file exists; it holds the word.
    let cmd = reply.lines().find_map(|l| l.trim().strip_prefix("cmd: ")).unwrap_or("");
    let target = [format!("{file}.txt"), format!("/app/{file}.txt")];
    let (exists, holds) = match cmd.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["echo", w, ">", f] if target.contains(&f.to_string()) => (true, *w == word),
        ["touch", f] if target.contains(&f.to_string()) => (true, false),
        _ => (false, false),
    };
    let reward = if complete { (f64::from(u8::from(exists)) + f64::from(u8::from(holds))) / 2.0 } else { 0.0 };
    Reply { text: reply, prompt, ids: g.ids, logp: g.logp, complete, right: complete && holds, reward }
}

impl Reply {
    /// The rollout `agent train` would have recorded for this reply.
    fn into_rollout(self, plan: RolloutPlan) -> Rollout {
        let mut tokens = self.prompt;
        let mut mask = vec![0u8; tokens.len()];
        tokens.extend(&self.ids);
        mask.extend(std::iter::repeat_n(1u8, self.ids.len()));
        let mut recording = Recording::default();
        recording.segments = vec![Segment { tokens, mask, sampler_logp: self.logp }];
        recording.truncated = !self.complete;
        Rollout {
            task: plan.task,
            member: plan.member,
            tests_score: self.reward,
            judge_score: None,
            judge_secs: 0.0,
            reward: self.reward,
            resolved: self.right,
            status: if self.complete { RolloutStatus::Complete } else { RolloutStatus::Truncated },
            reason: String::new(),
            recording,
            engine: None,
        }
    }
}

fn eval(
    sampler: &Sampler,
    tok: &tokenizers::Tokenizer,
    system: &str,
    p: &Preset,
    im_end: u32,
    n: usize,
    salt: u64,
) -> (f64, f64) {
    let mut right = 0;
    let mut complete = 0;
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    for i in 0..n {
        let r = roll(sampler, tok, system, i % 8, mix_seed(&[salt, i as u64, 99]), p, im_end);
        if std::env::var("AGENT_SIM_SHOW").is_ok() {
            let cmd = r.text.lines().find(|l| l.contains("cmd:")).unwrap_or("<none>").to_string();
            *seen.entry(format!("task {} ({}): {cmd}", i % 8, r.right)).or_default() += 1;
        }
        right += r.right as usize;
        complete += r.complete as usize;
    }
    for (k, v) in &seen {
        eprintln!("  {v:4} {k}");
    }
    (right as f64 / n as f64, complete as f64 / n as f64)
}

#[test]
#[ignore = "a tuning tool, not a check: run it by hand"]
fn toy_sim() {
    let Ok(path) = std::env::var("AGENT_SIM_PRESET") else { return };
    let p = Preset::find(&path).unwrap();
    let out = PathBuf::from(std::env::var("AGENT_SIM_OUT").unwrap_or_else(|_| "/tmp/toy-sim".into()));
    let n_eval: usize = std::env::var("AGENT_SIM_EVAL").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let steps: usize = std::env::var("AGENT_SIM_STEPS").ok().and_then(|v| v.parse().ok()).unwrap_or(p.grpo.steps);
    std::fs::create_dir_all(&out).unwrap();
    let device = Device::Cpu;
    let dtype = candle_core::DType::F32;
    let log = |s: String| {
        if s.contains("/300 ") && !s.contains(" 300/") {
            return;
        }
        eprintln!("{s}")
    };
    let base = setup::base_model_dir(&p, &out).unwrap();
    let start = setup::warm_start(&p, &base, &out, &device, dtype, &log).unwrap();
    let tok = setup::load_tokenizer(&start).unwrap();
    let im_end = setup::token_id(&tok, "<|im_end|>", &start).unwrap();
    let system = p.system_prompt.clone().unwrap_or_default();
    let system = system.trim_end();
    let mode = train_mode(&p);
    let policy = Qwen3::load(&start, &mode, dtype, &device, p.seed).unwrap();
    let mut opt = AdamW::new(policy.trainable(), setup::adam_settings(&p)).unwrap();
    let sampler = Sampler::start(policy.merged().unwrap()).unwrap();
    let (r0, c0) = eval(&sampler, &tok, system, &p, im_end, n_eval, 1);
    eprintln!("before: right {:.1}% complete {:.1}%", r0 * 100.0, c0 * 100.0);
    let update = setup::update_settings(&p, im_end);
    for step in 1..=steps as u64 {
        // The tasks, groups, seeds and samples exactly as `agent train` draws and builds them.
        let rollouts: Vec<Rollout> = step_plans(&p, 8, step)
            .into_iter()
            .map(|plan| roll(&sampler, &tok, system, plan.task, plan.seed, &p, im_end).into_rollout(plan))
            .collect();
        let (samples, m) = build_samples(&p, &rollouts, false);
        let reference = if p.grpo.kl_coef > 0.0 { Reference::AdaptersOff } else { Reference::None };
        let stats = if samples.is_empty() {
            Default::default()
        } else {
            grpo_update(&policy, reference, &mut opt, &samples, &SingleRank, &update, mix_seed(&[p.seed, step, 7]))
                .unwrap()
        };
        sampler.set_policy(policy.merged().unwrap());
        eprintln!(
            "step {step}: pass {:.0}% kept {} loss {:.4} kl {:.4} ent {:.3} clip {:.3} gnorm {:.3}",
            m.pass_rate * 100.0,
            m.groups_kept,
            stats.loss,
            stats.kl,
            stats.entropy,
            stats.clip_frac,
            stats.grad_norm
        );
        if step % 10 == 0 || step == steps as u64 {
            let (r, c) = eval(&sampler, &tok, system, &p, im_end, n_eval, 2 + step);
            eprintln!("  eval after step {step}: right {:.1}% complete {:.1}%", r * 100.0, c * 100.0);
        }
    }
}
