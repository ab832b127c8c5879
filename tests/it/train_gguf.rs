//! The trainer trains the model the user runs: the built-in Qwen2.5-Coder-0.5B GGUF
//! (Q4_K_M), converted once into a model folder (weights dequantised to f32, config,
//! tokenizer and chat template from the file's metadata), tokenises as llama.cpp does
//! and computes the logits llama.cpp computes, within what the quantisation allows.

use agent_train::model::{ForwardMode, Qwen3, TrainMode};
use candle_core::{DType, Device, Tensor, D};

/// A chat prompt in the model's own format, with a tool call and code in it.
const TEXT: &str = "<|im_start|>system\nYou are a coding agent.<|im_end|>\n<|im_start|>user\nCount the lines of \
                    /app/data.csv that contain \"error\".<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \
                    \"bash\", \"arguments\": {\"cmd\": \"grep -c error /app/data.csv\"}}\n</tool_call><|im_end|>\n";

#[test]
fn the_trainers_qwen2_forward_of_the_real_gguf_matches_llama_cpp() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let gguf = rt.block_on(agent_core::models::pull::ensure_builtin("qwen2.5-coder-0.5b", false)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model");
    agent_train::model::gguf::materialise(&gguf, &model_dir).unwrap();

    // The same tokens as llama.cpp, special tokens included.
    let tokenizer = tokenizers::Tokenizer::from_file(model_dir.join("tokenizer.json")).unwrap();
    let ours: Vec<u32> = tokenizer.encode(TEXT, false).unwrap().get_ids().to_vec();
    let (theirs, reference) = agent_local::llamacpp_reference_logits(&gguf, TEXT, 2).unwrap();
    assert_eq!(ours, theirs, "the converted tokenizer splits the text as llama.cpp does");
    let template = agent_core::llm::ChatTemplate::from_model_dir(&model_dir).unwrap().expect("a chat template");
    assert!(template.supports_tools(), "Qwen2.5's template renders tools");

    let cfg = agent_train::model::Qwen3Config::load(&model_dir).unwrap();
    assert!(cfg.is_qwen2() && cfg.qkv_bias() && !cfg.qk_norm());
    // This file carries its own `output.weight` (quantised apart from the embeddings).
    assert!(!cfg.tie_word_embeddings);
    let lora = agent_train::model::LoraSettings {
        rank: 8,
        alpha: 16.0,
        dropout: 0.0,
        targets: agent_train::model::LORA_TARGETS.iter().map(|s| s.to_string()).collect(),
    };
    let model = Qwen3::load(&model_dir, &TrainMode::Lora(lora), DType::F32, &Device::Cpu, 0).unwrap();
    let ids = Tensor::new(ours.as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let hidden = model.hidden(&ids, ForwardMode::default()).unwrap().squeeze(0).unwrap();
    let logits = hidden.matmul(&model.head_weight().t().unwrap()).unwrap();
    let ours_lp = candle_nn_free_log_softmax(&logits);
    let theirs_lp = candle_nn_free_log_softmax(
        &Tensor::from_vec(reference.concat(), (reference.len(), reference[0].len()), &Device::Cpu).unwrap(),
    );
    // Per position: the log-probability of the token that follows (what GRPO scores) and
    // whether the most likely next token is the same.
    let n = ours.len();
    let mut worst = 0f32;
    let mut sum = 0f32;
    let mut same_top = 0usize;
    for i in 0..n - 1 {
        let next = ours[i + 1] as usize;
        let a: Vec<f32> = ours_lp.get(i).unwrap().to_vec1().unwrap();
        let b: Vec<f32> = theirs_lp.get(i).unwrap().to_vec1().unwrap();
        let d = (a[next] - b[next]).abs();
        worst = worst.max(d);
        sum += d;
        let top = |v: &[f32]| v.iter().enumerate().max_by(|x, y| x.1.total_cmp(y.1)).map(|(k, _)| k).unwrap();
        same_top += usize::from(top(&a) == top(&b));
    }
    let mean = sum / (n - 1) as f32;
    eprintln!("{n} tokens: next-token log-prob |ours - llama.cpp| mean {mean:.4}, max {worst:.4}; same top-1 at {same_top}/{}", n - 1);
    // llama.cpp multiplies the Q4_K/Q6_K weights with activations it quantises to 8 bits
    // (Q8_K) per block; our forward uses the same weights dequantised exactly and f32
    // activations. That rounding moves each logit by a few hundredths and compounds over
    // 24 layers, so the scored log-probs agree to a mean of 0.05 and within 0.5 at worst,
    // and the argmax agrees almost everywhere; a wrong bias, norm, RoPE or tensor layout
    // moves them by whole units.
    assert!(mean < 0.05, "mean difference {mean}");
    assert!(worst < 0.5, "worst difference {worst}");
    assert!(same_top * 10 >= (n - 1) * 9, "top-1 agrees at {same_top} of {} positions", n - 1);
}

/// log-softmax over the last dimension, in f32.
fn candle_nn_free_log_softmax(x: &Tensor) -> Tensor {
    let max = x.max_keepdim(D::Minus1).unwrap();
    let shifted = x.broadcast_sub(&max).unwrap();
    let lse = shifted.exp().unwrap().sum_keepdim(D::Minus1).unwrap().log().unwrap();
    shifted.broadcast_sub(&lse).unwrap()
}
