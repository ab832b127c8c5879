//! Checks of the trainable Qwen3 on a tiny random model written by the test.

use std::path::Path;

use candle_core::{DType, Device, Tensor};

use super::*;
use crate::backward::backward;

/// Writes a random tiny Qwen3 (no tokenizer) into `dir`.
pub(crate) fn write_random_qwen3(dir: &Path, vocab: usize, tied: bool, seed: u64) {
    write_random_qwen3_layers(dir, vocab, tied, seed, 2)
}

/// [`write_random_qwen3`] with `layers` decoder layers.
pub(crate) fn write_random_qwen3_layers(dir: &Path, vocab: usize, tied: bool, seed: u64, layers: usize) {
    use rand::{Rng, SeedableRng};
    let (h, nh, nkv, hd, inter) = (16usize, 4usize, 2usize, 4usize, 24usize);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut tensors = std::collections::HashMap::new();
    let mut rand = |shape: &[usize], scale: f32| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0f32..1.0) * scale).collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    };
    tensors.insert("model.embed_tokens.weight".to_string(), rand(&[vocab, h], 0.5));
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        let mut put = |name: &str, shape: &[usize], scale: f32, offset: f32| {
            let t = (rand(shape, scale) + f64::from(offset)).unwrap();
            tensors.insert(format!("{p}.{name}"), t);
        };
        put("input_layernorm.weight", &[h], 0.1, 1.0);
        put("post_attention_layernorm.weight", &[h], 0.1, 1.0);
        put("self_attn.q_norm.weight", &[hd], 0.1, 1.0);
        put("self_attn.k_norm.weight", &[hd], 0.1, 1.0);
        put("self_attn.q_proj.weight", &[nh * hd, h], 0.3, 0.0);
        put("self_attn.k_proj.weight", &[nkv * hd, h], 0.3, 0.0);
        put("self_attn.v_proj.weight", &[nkv * hd, h], 0.3, 0.0);
        put("self_attn.o_proj.weight", &[h, nh * hd], 0.3, 0.0);
        put("mlp.gate_proj.weight", &[inter, h], 0.3, 0.0);
        put("mlp.up_proj.weight", &[inter, h], 0.3, 0.0);
        put("mlp.down_proj.weight", &[h, inter], 0.3, 0.0);
    }
    tensors.insert("model.norm.weight".to_string(), (rand(&[h], 0.1) + 1.0).unwrap());
    if !tied {
        tensors.insert("lm_head.weight".to_string(), rand(&[vocab, h], 0.5));
    }
    std::fs::create_dir_all(dir).unwrap();
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
    let cfg = serde_json::json!({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "vocab_size": vocab, "hidden_size": h, "intermediate_size": inter, "num_hidden_layers": layers,
        "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "tie_word_embeddings": tied, "max_position_embeddings": 64, "eos_token_id": 1
    });
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
}

pub(crate) fn lora(rank: usize) -> TrainMode {
    TrainMode::Lora(LoraSettings {
        rank,
        alpha: 2.0 * rank as f64,
        dropout: 0.0,
        targets: LORA_TARGETS.iter().map(|s| s.to_string()).collect(),
    })
}

fn seqs() -> Vec<(Vec<u32>, Vec<u8>)> {
    vec![(vec![3, 5, 7, 2, 9, 11, 4], vec![0, 0, 1, 1, 0, 1, 1]), (vec![8, 1, 6, 6, 2], vec![0, 1, 1, 1, 1])]
}

fn weighted_logp_loss(_model: &Qwen3, batch: &TokenBatch) -> impl Fn(&Qwen3, &Tensor) -> candle_core::Result<Tensor> {
    let batch = batch.clone();
    move |model: &Qwen3, hidden: &Tensor| {
        let (logp, _) = token_logprobs(model, hidden, &batch, 3)?;
        let n = logp.dim(0)?;
        let w: Vec<f64> = (0..n).map(|i| 0.3 + 0.1 * i as f64).collect();
        let w = Tensor::from_vec(w, n, logp.device())?.to_dtype(logp.dtype())?;
        (logp * w)?.sum_all()
    }
}

fn batch_of(device: &Device) -> TokenBatch {
    let s = seqs();
    let refs: Vec<(&[u32], &[u8])> = s.iter().map(|(a, b)| (a.as_slice(), b.as_slice())).collect();
    TokenBatch::new(&refs, 0, device).unwrap()
}

#[test]
fn gradients_pass_a_finite_difference_check() {
    let dir = tempfile::tempdir().unwrap();
    write_random_qwen3(dir.path(), 13, true, 1);
    for mode in [TrainMode::Full, lora(3)] {
        let model = Qwen3::load(dir.path(), &mode, DType::F64, &Device::Cpu, 7).unwrap();
        // Give B non-zero values so that LoRA gradients reach A too.
        for (name, var) in model.trainable() {
            if name.contains("lora_B") {
                let t = Tensor::randn(0.0f64, 0.2, var.as_tensor().shape(), &Device::Cpu).unwrap();
                var.set(&t).unwrap();
            }
        }
        let batch = batch_of(&Device::Cpu);
        let head = weighted_logp_loss(&model, &batch);
        let (_, grads) = backward(&model, &batch.ids, ForwardMode::default(), false, &head).unwrap();
        let vars = model.trainable();
        let mut checked = 0;
        for (k, (name, var)) in vars.iter().enumerate() {
            // A few entries of every variable.
            let g = grads[k].as_ref().unwrap_or_else(|| panic!("no gradient for {name}")).flatten_all().unwrap();
            let g = g.to_vec1::<f64>().unwrap();
            let base = var.as_tensor().flatten_all().unwrap().to_vec1::<f64>().unwrap();
            for idx in [0, base.len() / 2, base.len() - 1] {
                let eps = 1e-5;
                let at = |delta: f64| {
                    let mut v = base.clone();
                    v[idx] += delta;
                    var.set(&Tensor::from_vec(v, var.as_tensor().shape(), &Device::Cpu).unwrap()).unwrap();
                    let hidden = model.hidden(&batch.ids, ForwardMode::default()).unwrap();
                    head(&model, &hidden).unwrap().to_scalar::<f64>().unwrap()
                };
                let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
                at(0.0);
                let tol = 1e-6 + 1e-4 * numeric.abs().max(g[idx].abs());
                assert!((numeric - g[idx]).abs() < tol, "{name}[{idx}]: analytic {} vs numeric {numeric}", g[idx]);
                checked += 1;
            }
        }
        assert!(checked > 30, "checked only {checked} entries");
    }
}

#[test]
fn recomputation_gives_the_same_gradients() {
    let dir = tempfile::tempdir().unwrap();
    write_random_qwen3(dir.path(), 13, false, 2);
    for mode in [TrainMode::Full, lora(2)] {
        let model = Qwen3::load(dir.path(), &mode, DType::F64, &Device::Cpu, 3).unwrap();
        let batch = batch_of(&Device::Cpu);
        let head = weighted_logp_loss(&model, &batch);
        let (a, ga) = backward(&model, &batch.ids, ForwardMode::default(), false, &head).unwrap();
        let (b, gb) = backward(&model, &batch.ids, ForwardMode::default(), true, &head).unwrap();
        assert!((a - b).abs() < 1e-12);
        for (x, y) in ga.iter().zip(&gb) {
            match (x, y) {
                (Some(x), Some(y)) => {
                    let d = (x - y).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f64>().unwrap();
                    assert!(d < 1e-10, "difference {d}");
                }
                (None, None) => {}
                _ => panic!("one path has a gradient the other lacks"),
            }
        }
    }
}

#[test]
fn lora_with_zero_b_equals_the_base_model_exactly() {
    let dir = tempfile::tempdir().unwrap();
    write_random_qwen3(dir.path(), 13, true, 3);
    let base = Qwen3::load(dir.path(), &TrainMode::Full, DType::F32, &Device::Cpu, 0).unwrap();
    let adapted = Qwen3::load(dir.path(), &lora(4), DType::F32, &Device::Cpu, 0).unwrap();
    let batch = batch_of(&Device::Cpu);
    let a = base.hidden(&batch.ids, ForwardMode::default()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let b =
        adapted.hidden(&batch.ids, ForwardMode::default()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(a, b);
}

#[test]
fn cached_decoding_matches_the_full_forward_and_merging_matches_adapters() {
    let dir = tempfile::tempdir().unwrap();
    write_random_qwen3(dir.path(), 13, false, 4);
    let model = Qwen3::load(dir.path(), &lora(2), DType::F32, &Device::Cpu, 5).unwrap();
    for (name, var) in model.trainable() {
        if name.contains("lora_B") {
            var.set(&Tensor::randn(0.0f32, 0.3, var.as_tensor().shape(), &Device::Cpu).unwrap()).unwrap();
        }
    }
    let ids = [3u32, 5, 7, 2, 9, 11];
    let full =
        model.hidden(&Tensor::new(&ids[..], &Device::Cpu).unwrap().unsqueeze(0).unwrap(), ForwardMode::default());
    let full = full.unwrap();
    let last = full.narrow(1, 5, 1).unwrap().reshape((1, 16)).unwrap();
    let want = last.matmul(&model.head_weight().t().unwrap()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let merged = model.merged().unwrap();
    let mut cache = KvCache::default();
    merged.forward_cached(&ids[..4], &mut cache).unwrap();
    let got = merged.forward_cached(&ids[4..], &mut cache).unwrap().to_vec1::<f32>().unwrap();
    for (a, b) in want.iter().zip(&got) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
    // Truncating the cache and replaying gives the same logits.
    cache.truncate(3).unwrap();
    let again = merged.forward_cached(&ids[3..], &mut cache).unwrap().to_vec1::<f32>().unwrap();
    for (a, b) in again.iter().zip(&got) {
        assert!((a - b).abs() < 1e-5);
    }
}

#[test]
fn batched_decoding_matches_one_sequence_at_a_time_and_ignores_its_neighbours() {
    let dir = tempfile::tempdir().unwrap();
    write_random_qwen3(dir.path(), 13, true, 6);
    let model = Qwen3::load(dir.path(), &TrainMode::Full, DType::F32, &Device::Cpu, 1).unwrap().merged().unwrap();
    let prompts: [&[u32]; 3] = [&[3, 5, 7], &[2, 9, 11, 4, 6], &[8]];
    let next = [1u32, 12, 0];
    let prefilled = || -> Vec<KvCache> {
        prompts
            .iter()
            .map(|p| {
                let mut c = KvCache::default();
                model.forward_cached(p, &mut c).unwrap();
                c
            })
            .collect()
    };
    // Alone: one token after the prefill through the single-sequence path.
    let want: Vec<Vec<f32>> = prefilled()
        .into_iter()
        .zip(next)
        .map(|(mut c, t)| model.forward_cached(&[t], &mut c).unwrap().to_vec1::<f32>().unwrap())
        .collect();
    let mut caches = prefilled();
    let got = model.decode_batch(&next, &mut caches.iter_mut().collect::<Vec<_>>(), 4).unwrap();
    for (g, w) in got.iter().zip(&want) {
        for (a, b) in g.to_vec1::<f32>().unwrap().iter().zip(w) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }
    assert!(caches.iter().zip(prompts).all(|(c, p)| c.len() == p.len() + 1));
    // The second sequence decoded alone (padded to the same row count) gives the very
    // same bits as in company.
    let mut alone = prefilled();
    let solo = model.decode_batch(&next[1..2], &mut [&mut alone[1]], 4).unwrap();
    assert_eq!(solo[0].to_vec1::<f32>().unwrap(), got[1].to_vec1::<f32>().unwrap());
    assert!(model.decode_batch(&next, &mut caches.iter_mut().collect::<Vec<_>>(), 2).is_err());
}

#[test]
// mistral.rs's merge (agent-local) is only there with the engines.
#[cfg(feature = "engines")]
fn adapters_round_trip_through_peft_files_and_merge_like_the_model() {
    let dir = tempfile::tempdir().unwrap();
    write_random_qwen3(dir.path(), 13, true, 6);
    let settings =
        LoraSettings { rank: 2, alpha: 4.0, dropout: 0.0, targets: vec!["q_proj".into(), "down_proj".into()] };
    let model = Qwen3::load(dir.path(), &TrainMode::Lora(settings.clone()), DType::F32, &Device::Cpu, 1).unwrap();
    for (name, var) in model.trainable() {
        if name.contains("lora_B") {
            var.set(&Tensor::randn(0.0f32, 0.3, var.as_tensor().shape(), &Device::Cpu).unwrap()).unwrap();
        }
    }
    let names: Vec<String> = model.trainable().into_iter().map(|(n, _)| n).collect();
    assert!(names.contains(&"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight".to_string()));
    assert!(names.contains(&"base_model.model.model.layers.1.mlp.down_proj.lora_B.weight".to_string()));
    assert_eq!(names.len(), 2 * 2 * 2);
    let adapter = dir.path().join("adapter");
    peft::save_adapter(&model, &settings, "tiny", &adapter).unwrap();
    assert_eq!(peft::read_adapter_settings(&adapter).unwrap(), settings);
    let fresh = Qwen3::load(dir.path(), &TrainMode::Lora(settings), DType::F32, &Device::Cpu, 99).unwrap();
    peft::load_adapter_into(&fresh, &adapter).unwrap();
    let batch = batch_of(&Device::Cpu);
    let a = model.hidden(&batch.ids, ForwardMode::default()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let b = fresh.hidden(&batch.ids, ForwardMode::default()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(a, b);
    let merged_dir = dir.path().join("merged");
    assert_eq!(agent_local::lora_merge::merge_adapter_dir(dir.path(), &adapter, &merged_dir).unwrap(), 4);
    let merged = Qwen3::load(&merged_dir, &TrainMode::Full, DType::F32, &Device::Cpu, 0).unwrap();
    let c = merged.hidden(&batch.ids, ForwardMode::default()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    for (x, y) in a.iter().zip(&c) {
        assert!((x - y).abs() < 1e-4, "{x} vs {y}");
    }
}

#[cfg(feature = "engines")]
#[test]
fn the_llama_cpp_adapter_file_holds_each_pair_in_the_layout_llama_cpp_checks() {
    use candle_core::quantized::gguf_file;
    let dir = tempfile::tempdir().unwrap();
    write_random_qwen3(dir.path(), 13, true, 6);
    let settings = LoraSettings { rank: 2, alpha: 4.0, dropout: 0.0, targets: vec!["k_proj".into(), "up_proj".into()] };
    let model = Qwen3::load(dir.path(), &TrainMode::Lora(settings), DType::F32, &Device::Cpu, 1).unwrap();
    let file = dir.path().join("adapter-model.gguf");
    super::lora_gguf::save_adapter_gguf(&model, 4.0, "qwen3", &file).unwrap();
    let mut reader = std::fs::File::open(&file).unwrap();
    let content = gguf_file::Content::read(&mut reader).unwrap();
    let text = |k: &str| content.metadata[k].to_string().unwrap().clone();
    assert_eq!(text("general.type"), "adapter");
    assert_eq!(text("adapter.type"), "lora");
    assert_eq!(text("general.architecture"), "qwen3");
    assert_eq!(content.metadata["adapter.lora.alpha"].to_f32().unwrap(), 4.0);
    // Two layers × two targets × (A, B).
    assert_eq!(content.tensor_infos.len(), 8);
    let (hidden, kv) = (model.cfg.hidden_size, model.cfg.num_key_value_heads * model.cfg.head_dim());
    // candle reads ggml's [ne0, ne1] back as [ne1, ne0]: A is r×in, B is out×r, as PEFT's.
    let shape = |n: &str| content.tensor_infos[n].shape.dims().to_vec();
    assert_eq!(shape("blk.0.attn_k.weight.lora_a"), vec![2, hidden]);
    assert_eq!(shape("blk.0.attn_k.weight.lora_b"), vec![kv, 2]);
    assert_eq!(shape("blk.1.ffn_up.weight.lora_b"), vec![model.cfg.intermediate_size, 2]);
    // The values are the adapter's.
    let (_, _, lin) = model.projections().into_iter().find(|(i, m, _)| *i == 1 && *m == "mlp.up_proj").unwrap();
    let a = content.tensor(&mut reader, "blk.1.ffn_up.weight.lora_a", &Device::Cpu).unwrap();
    let a = a.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let ours = lin.lora.as_ref().unwrap().a.tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(a, ours);
}
