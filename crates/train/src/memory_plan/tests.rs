//! Tests of the memory plan.

use super::*;
use crate::preset::{LoraSection, LORA_TARGETS};

fn qwen3_8b() -> ModelShape {
    Preset::builtin("qwen3-8b-lora-1xh200").unwrap().model.shape.unwrap()
}

fn qwen3_32b() -> ModelShape {
    Preset::builtin("qwen3-32b-lora-1xh200").unwrap().model.shape.unwrap()
}

fn plan_of(p: &Preset) -> MemoryPlan {
    MemoryPlan::for_preset(p, &p.model.shape.unwrap())
}

fn plan(name: &str) -> MemoryPlan {
    plan_of(&Preset::builtin(name).unwrap())
}

#[test]
fn qwen3_parameter_counts() {
    let n8 = qwen3_8b().parameter_count() as f64;
    assert!((n8 / 8.19e9 - 1.0).abs() < 0.01, "Qwen3-8B: {n8}");
    let n32 = qwen3_32b().parameter_count() as f64;
    assert!((n32 / 32.8e9 - 1.0).abs() < 0.01, "Qwen3-32B: {n32}");
}

#[test]
fn lora_trainable_count_by_hand() {
    let mut p = Preset::builtin("cpu-tiny").unwrap();
    let shape = ModelShape {
        hidden_size: 16,
        num_hidden_layers: 3,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 4,
        intermediate_size: 32,
        vocab_size: 100,
        tie_word_embeddings: true,
    };
    p.mode.lora = Some(LoraSection {
        rank: 4,
        alpha: 8.0,
        dropout: 0.0,
        targets: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
    });
    let plan = MemoryPlan::for_preset(&p, &shape);
    // q 16→16, v 16→8, down 32→16: r·(in+out) = 4·(32 + 24 + 48) = 416 per layer, 3 layers.
    assert_eq!(plan.trainable_params, 1248);
    // f32: grads 4 bytes, AdamW m+v 8 bytes, no master copy; one process, no shards.
    assert_eq!((plan.zero, plan.grad_bytes, plan.grad_shard_bytes), (0, 1248 * 4, 0));
    assert_eq!(plan.optimizer_bytes, 1248 * 8);
    assert_eq!(plan.weight_bytes, (shape.parameter_count() + 1248) * 4);
    // The candle sampler runs on the trainer's weights with the adapters unmerged: no copy.
    assert_eq!(plan.rollout_weight_bytes, 0);
    assert!(plan.fits && plan.check().is_ok(), "CPU without declared memory is not checked");
}

#[test]
fn replicated_bf16_full_update_accounting() {
    let plan = plan("qwen3-8b-full-1xh200");
    let n = plan.base_params;
    assert_eq!((plan.zero, plan.trainable_params), (0, n));
    assert_eq!(plan.weight_bytes, 2 * n);
    assert_eq!(plan.grad_bytes, 2 * n);
    assert_eq!(plan.grad_shard_bytes, 0);
    assert_eq!(plan.optimizer_bytes, 12 * n, "m, v and master copy in f32");
    // One GPU: no reduction buffers, the update's slices only.
    assert_eq!(plan.comm_bytes, 8 * 4 * UPDATE_SLICE as u64);
    // Full updates sample from the trainer's own weights.
    assert_eq!(plan.rollout_weight_bytes, 0);
}

#[test]
fn zero2_shards_the_optimiser_and_the_summed_gradient_only() {
    let p = Preset::builtin("qwen3-8b-full-8xh100").unwrap();
    let z2 = plan_of(&p);
    let n = z2.base_params;
    assert_eq!((z2.zero, z2.world_size), (2, 8));
    assert_eq!(z2.weight_bytes, 2 * n, "weights stay whole");
    assert_eq!(z2.grad_bytes, 2 * n, "the local gradient sums stay whole");
    assert_eq!(z2.grad_shard_bytes, 2 * n.div_ceil(8));
    assert_eq!(z2.optimizer_bytes, 12 * n.div_ceil(8));
    let mut zero1 = p.clone();
    zero1.optim.zero = Some(1);
    let z1 = plan_of(&zero1);
    assert_eq!((z1.optimizer_bytes, z1.grad_shard_bytes), (z2.optimizer_bytes, z2.grad_shard_bytes));
    assert!(z1.comm_bytes > z2.comm_bytes, "stage 1 all-reduces a whole bucket");
    let mut zero0 = p.clone();
    zero0.optim.zero = Some(0);
    let z0 = plan_of(&zero0);
    assert_eq!(z0.optimizer_bytes, 12 * n);
    // all_reduce_grads: f32 copies of the bf16 gradients, their concatenation and the sum.
    assert!(z0.comm_bytes >= 12 * n, "{}", z0.comm_bytes);
    assert!(z2.trainer_bytes + 90 * GIB < z0.trainer_bytes);
    assert!(z2.to_string().contains("ZeRO-2"), "{z2}");
}

#[test]
fn the_rollout_engine_gets_its_fraction() {
    let mut p = Preset::builtin("qwen3-8b-lora-8xh100").unwrap();
    p.rollout.concurrency = 20;
    p.rollout.gpu_memory_fraction = Some(0.25);
    let shape = p.model.shape.unwrap();
    let plan = plan_of(&p);
    // 20 rollouts over 8 GPUs: up to 3 on one.
    assert_eq!(plan.rollouts_in_flight_per_gpu, 3);
    assert_eq!(plan.rollout_kv_bytes, 3 * plan.kv_bytes_per_rollout);
    let projections: u64 =
        LORA_TARGETS.iter().map(|t| shape.projection_dims(t).map(|(i, o)| (i * o) as u64).unwrap()).sum::<u64>()
            * shape.num_hidden_layers as u64;
    assert!(projections > 0);
    assert_eq!(plan.rollout_weight_bytes, 0, "the sampler applies the trainer's adapters unmerged: no copy");
    assert_eq!(plan.rollout_reload_bytes, 0, "and follows the weights as they change: no reload");
    assert_eq!(plan.rollout_bytes, plan.rollout_weight_bytes + plan.rollout_kv_bytes.max(plan.rollout_reload_bytes));
    assert_eq!(plan.rollout_budget_bytes, Some(20 * GIB));
    assert_eq!(plan.trainer_budget_bytes, Some(60 * GIB));
    assert_eq!(plan.total_bytes, plan.trainer_bytes + plan.rollout_bytes);

    p.rollout.engine = RolloutEngine::Mistralrs;
    assert_eq!(plan_of(&p).rollout_weight_bytes, 2 * plan.base_params);
    p.rollout.engine = RolloutEngine::Openai;
    p.rollout.gpu_memory_fraction = None;
    let external = plan_of(&p);
    assert_eq!((external.rollout_bytes, external.rollout_fraction), (0, 0.0));
}

/// Trainer and engine fit together but not in their shares: the advice names the fractions that work.
#[test]
fn a_wrong_split_is_told_apart_from_too_little_memory() {
    let mut p = Preset::builtin("qwen3-8b-full-8xh100").unwrap();
    let fitting = plan_of(&p);
    assert!(fitting.fits, "{fitting}");
    p.rollout.gpu_memory_fraction = Some(0.9);
    let plan = plan_of(&p);
    assert!(!plan.fits && plan.total_bytes <= plan.memory_bytes.unwrap());
    let err = plan.check().unwrap_err().to_string();
    assert!(err.contains("GiB too much") && err.contains("a better rollout.gpu_memory_fraction fits"), "{err}");
    assert!(err.contains("set rollout.gpu_memory_fraction between"), "{err}");
}

/// Qwen3-32B full on 8×H100: with ZeRO-2 every GPU would hold the whole weights and a
/// whole local gradient (2 × 61 GiB) and the advice names ZeRO-3; the shipped preset shards
/// them (ZeRO-3, AdamW's state in host memory) and fits, each phase against the whole GPU.
#[test]
fn qwen3_32b_full_fits_8_h100_with_zero3_and_not_with_zero2() {
    let shipped = Preset::builtin("qwen3-32b-full-8xh100").unwrap();
    let mut zero2 = shipped.clone();
    zero2.optim.zero = Some(2);
    zero2.optim.offload = false;
    let plan = plan_of(&zero2);
    assert!(!plan.fits);
    assert!(plan.weight_bytes + plan.grad_bytes > plan.memory_bytes.unwrap());
    let err = plan.check().unwrap_err().to_string();
    assert!(err.contains("qwen3-32b-full-8xh100") && err.contains("GiB too much"), "{err}");
    assert!(err.contains("Set optim.zero: 3 with optim.offload: true"), "{err}");
    assert!(plan.to_string().contains("weights replicated"));

    let plan = plan_of(&shipped);
    assert_eq!(plan.zero, 3);
    assert!(plan.fits, "{plan}");
    assert!(plan.phase_exclusive && plan.grad_bytes == 0 && plan.prefix_bytes == 0);
    // 1/8 of the weights, and AdamW's 12 bytes per parameter of the shard wait in host memory.
    assert_eq!(plan.weight_bytes, plan.base_params.div_ceil(8) * 2);
    assert_eq!(plan.host_optimizer_bytes, plan.base_params.div_ceil(8) * 12);
    // The sampler holds the whole policy between updates, beside the shards.
    assert_eq!(plan.rollout_weight_bytes, plan.base_params * 2);
    let table = plan.to_string();
    assert!(
        table.contains("ZeRO-3") && table.contains("in host memory") && table.contains("the larger phase"),
        "{table}"
    );
    // Without the offload the update does not fit: the advice says so.
    let mut resident = shipped.clone();
    resident.optim.offload = false;
    let plan = plan_of(&resident);
    assert!(!plan.fits);
    assert!(plan.check().unwrap_err().to_string().contains("set optim.offload: true"));
}

#[test]
fn recompute_keeps_less() {
    let shape = qwen3_8b();
    let (with, _) = activation_bytes(&shape, Dtype::Bf16, 1, 4096, true);
    let (without, attention) = activation_bytes(&shape, Dtype::Bf16, 1, 4096, false);
    assert!(with * 10 < without, "{with} vs {without}");
    // Without recompute: per token per layer 17h + 8I + 5as 2-byte units, at bf16 that is bytes.
    let per = 17 * 4096 + 8 * 12288 + 5 * 32 * 4096;
    assert_eq!(without, 4096 * 36 * per);
    assert_eq!(attention, 4096 * 36 * 5 * 32 * 4096);
    let (f32_bytes, _) = activation_bytes(&shape, Dtype::F32, 1, 4096, false);
    assert_eq!(f32_bytes, 2 * without);
}

#[test]
fn step_figures() {
    let p = Preset::builtin("cpu-tiny").unwrap();
    let plan = MemoryPlan::for_preset(&p, &qwen3_8b());
    assert_eq!(plan.rollouts_per_step, 32);
    assert_eq!(plan.tokens_per_step, 32 * 512);
    assert_eq!(plan.rollouts_in_flight, 8);
    // 32 rollouts in micro-batches of 16, two epochs.
    assert_eq!(plan.micro_batches_per_rank, 4);
}

#[test]
fn multi_node_splits_work_per_rank() {
    let plan = plan("qwen3-8b-lora-4x8xh100");
    assert_eq!(plan.world_size, 32);
    assert_eq!(plan.rollouts_per_rank * 32, plan.rollouts_per_step);
    assert_eq!(plan.tokens_per_rank * 32, plan.tokens_per_step);
}

/// The acceptance rule: every shipped preset fits the hardware it names (a preset that does
/// not is not shipped). Prints every plan (`--nocapture`): the Memory plans
/// table in docs/train.md comes from here.
#[test]
fn every_shipped_preset_fits_its_hardware() {
    let (mut summary, mut wrong) = (Vec::new(), Vec::new());
    for name in Preset::builtin_names() {
        let preset = Preset::builtin(name).unwrap();
        let Some(shape) = preset.model.shape else { continue };
        let plan = MemoryPlan::for_preset(&preset, &shape);
        println!("{plan}");
        if !plan.fits {
            wrong.push(format!("{name} does not fit: short by {:.1} GiB", gib(plan.shortfall_bytes())));
        }
        let memory = if plan.phase_exclusive {
            let rollouts = plan.weight_bytes + plan.reference_bytes + plan.reserve_bytes + plan.rollout_bytes;
            format!("update {:.1}, rollouts {:.1} (apart)", gib(plan.trainer_bytes), gib(rollouts))
        } else {
            format!("{:.1} + {:.1} = {:.1}", gib(plan.trainer_bytes), gib(plan.rollout_bytes), gib(plan.total_bytes))
        };
        summary.push(format!(
            "| {name} | {} | {memory} of {:.0} | {:.1} |",
            plan.zero,
            gib(plan.memory_bytes.unwrap_or(0)),
            gib(plan.attention_bytes),
        ));
    }
    println!("{}", summary.join("\n"));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
