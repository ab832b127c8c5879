//! The mistral.rs rollout engine against the trainer's own sampler, on a generated tiny
//! Qwen3 with a non-zero LoRA adapter: the same weights and seeds give the same tokens and
//! log-probs, requests run concurrently, and a reload follows a changed policy.

use agent_local::tiny_qwen3::{write_tiny_qwen3, TinyQwen3Config};
use agent_train::model::{LoraSettings, Qwen3, TrainMode, LORA_TARGETS};
use agent_train::rollout::{GenerateRequest, Generated, MistralrsEngine, RolloutSampler, Sampler};
use candle_core::{DType, Device, Tensor};

const MAX_NEW: usize = 40;

/// Gives every LoRA B matrix random values, so the merged policy differs from the base.
fn randomise_adapters(policy: &Qwen3, seed: u64) {
    let mut n = 0;
    for (i, (name, var)) in policy.trainable().into_iter().enumerate() {
        if name.contains("lora_B") {
            let dims = var.as_tensor().dims().to_vec();
            let count: usize = dims.iter().product();
            // A cheap deterministic pattern in [-0.1, 0.1).
            let values: Vec<f32> = (0..count)
                .map(|j| {
                    let h = (j as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (seed << 32) ^ i as u64;
                    ((h >> 11) % 2000) as f32 / 10_000.0 - 0.1
                })
                .collect();
            var.set(&Tensor::from_vec(values, dims, &Device::Cpu).unwrap()).unwrap();
            n += 1;
        }
    }
    assert!(n > 0, "the policy has no adapters");
}

/// Sends every prompt at once (so mistral.rs batches them) and collects the answers in order.
async fn generate_all(sampler: &dyn RolloutSampler, prompts: &[Vec<u32>], stop: u32) -> Vec<Generated> {
    let mut replies = Vec::new();
    for (i, prompt) in prompts.iter().enumerate() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        sampler
            .submit(GenerateRequest {
                session: i as u64 + 1,
                prompt: prompt.clone(),
                max_new_tokens: MAX_NEW,
                temperature: 1.0,
                // A nucleus below 1 is left out: on this near-uniform random model the
                // nucleus's edge runs through near-ties that last-bit differences reorder.
                top_p: 1.0,
                seed: 1000 + i as u64,
                stop: vec![stop],
                cancel: Default::default(),
                grammar: None,
                reply: tx,
            })
            .unwrap();
        replies.push(rx);
    }
    let mut out = Vec::new();
    for (i, rx) in replies.into_iter().enumerate() {
        out.push(rx.await.unwrap().unwrap_or_else(|e| panic!("request {i}: {e}")));
        sampler.close(i as u64 + 1);
    }
    out
}

fn assert_same_samples(mistral: &[Generated], candle: &[Generated]) {
    for (i, (m, c)) in mistral.iter().zip(candle).enumerate() {
        assert_eq!(m.ids, c.ids, "request {i}: mistral.rs and the candle sampler drew different tokens");
        assert_eq!(m.stopped, c.stopped, "request {i}");
        let diff = m.logp.iter().zip(&c.logp).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(diff < 1e-3, "request {i}: log-probs differ by up to {diff}");
        assert!(m.ids.len() <= MAX_NEW);
    }
    let tokens: usize = mistral.iter().map(|g| g.ids.len()).sum();
    assert!(tokens >= 2 * mistral.len(), "too few tokens to compare: {tokens}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mistral_rs_rollouts_match_the_trainers_sampler_and_follow_reloads() {
    let model_dir = tempfile::tempdir().unwrap();
    write_tiny_qwen3(model_dir.path(), &TinyQwen3Config::default()).unwrap();
    let lora = LoraSettings {
        rank: 4,
        alpha: 8.0,
        dropout: 0.0,
        targets: LORA_TARGETS.iter().map(|t| t.to_string()).collect(),
    };
    let policy = Qwen3::load(model_dir.path(), &TrainMode::Lora(lora), DType::F32, &Device::Cpu, 0).unwrap();
    randomise_adapters(&policy, 1);
    let tokenizer = tokenizers::Tokenizer::from_file(model_dir.path().join("tokenizer.json")).unwrap();
    let stop = tokenizer.token_to_id("<|im_end|>").expect("<|im_end|> in the tiny vocabulary");
    let prompts: Vec<Vec<u32>> = [
        "Create /app/note.txt containing the word apple.",
        "List the files in /app.",
        "Run the tests and fix what fails.",
        "Print the date.",
        "Write hello to /tmp/x",
        "What is in README.md?",
    ]
    .iter()
    .map(|task| {
        let text = format!("<|im_start|>user\n{task}<|im_end|>\n<|im_start|>assistant\n");
        tokenizer.encode(text, false).unwrap().get_ids().to_vec()
    })
    .collect();

    let candle = Sampler::start(policy.merged().unwrap()).unwrap();
    let expected = generate_all(&candle, &prompts, stop).await;
    // mistral.rs also ends a sequence at the model's end-of-sequence tokens. Declaring a
    // token that the first reply samples in its middle as one makes mistral.rs stop there,
    // and the engine must go on as the trainer's sampler does.
    // (mistral.rs finds the token by its decoded text, so it must be its own vocabulary entry.)
    let own_entry = |t: u32| tokenizer.decode(&[t], false).ok().and_then(|s| tokenizer.token_to_id(&s)) == Some(t);
    let early = expected
        .iter()
        .flat_map(|g| g.ids[..g.ids.len().saturating_sub(1)].iter().copied())
        .find(|&t| t != stop && own_entry(t))
        .expect("a sampled token that is its own vocabulary entry");
    let config = serde_json::json!({ "eos_token_id": [stop, early] });
    std::fs::write(model_dir.path().join("generation_config.json"), config.to_string()).unwrap();

    let work = tempfile::tempdir().unwrap();
    let engine = MistralrsEngine::start(&policy, model_dir.path(), work.path(), true).await.unwrap();
    assert!(engine.off_policy() && !RolloutSampler::off_policy(&candle));
    let first = generate_all(&engine, &prompts, stop).await;
    assert_same_samples(&first, &expected);

    // A new policy: the engine writes and loads it again and samples from it.
    randomise_adapters(&policy, 2);
    engine.load_policy(&policy).await.unwrap();
    RolloutSampler::load_policy(&candle, &policy).await.unwrap();
    assert_eq!(engine.version(), 2);
    let folders: Vec<String> =
        std::fs::read_dir(work.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert_eq!(folders, vec!["policy-000002".to_string()], "old policy copies are removed");
    let second = generate_all(&engine, &prompts, stop).await;
    assert_same_samples(&second, &generate_all(&candle, &prompts, stop).await);
    assert!(first.iter().zip(&second).any(|(a, b)| a.ids != b.ids), "the reloaded policy samples as the old one did");

    drop(engine);
    assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), 0, "the engine leaves its policy copy behind");
}
