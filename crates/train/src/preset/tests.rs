//! Tests of preset loading, defaults and validation.

use super::*;

fn cpu_tiny_text() -> &'static str {
    BUILTIN[0].1
}

fn parse(text: &str) -> Result<Preset, PresetError> {
    Preset::parse(text, Origin::File(PathBuf::from("/x/p.yaml")), "/x/p.yaml")
}

#[test]
fn every_shipped_preset_parses_and_validates() {
    for name in Preset::builtin_names() {
        let p = Preset::builtin(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.name, name, "the name field matches the file name");
    }
    let on_disk: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../presets"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .map(|n| n.trim_end_matches(".yaml").to_string())
        .collect();
    assert_eq!(on_disk.len(), BUILTIN.len(), "every file in presets/ is in the BUILTIN table");
    for name in &on_disk {
        assert!(Preset::builtin_names().contains(&name.as_str()), "{name} is missing from BUILTIN");
    }
}

#[test]
fn cpu_tiny_has_the_expected_values() {
    let p = Preset::builtin("cpu-tiny").unwrap();
    assert_eq!(p.hardware.device, Device::Cpu);
    assert_eq!(p.model.path, TINY_TOY);
    let lora = p.mode.lora.as_ref().unwrap();
    assert_eq!((lora.rank, lora.alpha, lora.targets.len()), (16, 32.0, 7));
    assert_eq!((p.grpo.steps, p.grpo.tasks_per_step, p.grpo.group_size), (10, 4, 8));
    assert_eq!(p.checkpoint, CheckpointSection { every: 5, keep: 2 });
    assert_eq!(p.reward.effective_weights(), (1.0, 0.0));
    assert!(p.system_prompt.as_deref().unwrap().contains("<finish>"));
}

#[test]
fn unknown_field_is_named_with_its_location() {
    let text = cpu_tiny_text().replace("group_size: 8", "group_size: 8\n  groupsize: 9");
    let err = parse(&text).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("/x/p.yaml") && msg.contains("unknown field `groupsize`"), "{msg}");
    assert!(msg.contains("grpo") && msg.contains("line"), "{msg}");
    assert!(matches!(err, PresetError::Parse { line: Some(_), .. }));
}

#[test]
fn wrong_type_is_named_with_its_field_path() {
    let text = cpu_tiny_text().replace("micro_batch: 16", "micro_batch: many");
    let msg = parse(&text).unwrap_err().to_string();
    assert!(msg.contains("optim.micro_batch") && msg.contains("line"), "{msg}");
}

#[test]
fn bad_values_name_the_field() {
    for (from, to, field) in [
        ("group_size: 8", "group_size: 1", "grpo.group_size"),
        ("lr: 0.003", "lr: 0", "optim.lr"),
        ("clip_low: 0.2", "clip_low: 0", "grpo.clip_low"),
        ("down_proj]", "down]", "mode.lora.targets"),
        ("every: 5", "every: 0", "checkpoint.every"),
        ("device: cpu", "device: cuda", "hardware.gpu_memory_gib"),
        ("max_seq_len: 512", "max_seq_len: 64", "grpo.max_seq_len"),
        ("engine: candle", "engine: openai", "rollout.url"),
        ("group_size: 8", "group_size: 8\n  task_band: [0.9, 0.1]", "grpo.task_band"),
        ("group_size: 8", "group_size: 8\n  task_band: [0.1, 1.5]", "grpo.task_band"),
        ("dynamic_sampling: true", "dynamic_sampling: false\n  refill_rounds: 2", "grpo.refill_rounds"),
        ("eval:\n", "eval:\n  heldout_families: [\"a,b\"]\n", "eval.heldout_families"),
    ] {
        assert!(cpu_tiny_text().contains(from), "the fixture has {from}");
        let err = parse(&cpu_tiny_text().replacen(from, to, 1)).unwrap_err();
        match &err {
            PresetError::Invalid { field: f, file, .. } => {
                assert_eq!((f.as_str(), file.as_str()), (field, "/x/p.yaml"), "{err}")
            }
            other => panic!("{from} -> {to}: expected Invalid {field}, got {other}"),
        }
    }
}

#[test]
fn mode_needs_exactly_one_of_lora_and_full() {
    let both = cpu_tiny_text().replace("mode:\n", "mode:\n  full: true\n");
    assert!(matches!(parse(&both), Err(PresetError::Invalid { ref field, .. }) if field == "mode"));
    let mut neither = Preset::builtin("cpu-tiny").unwrap();
    neither.mode.lora = None;
    assert!(matches!(neither.validate(), Err(PresetError::Invalid { ref field, .. }) if field == "mode"));
    let mut full = neither.clone();
    full.mode.full = true;
    full.validate().unwrap();
}

#[test]
fn weights_must_sum_above_zero() {
    let text = cpu_tiny_text().replace("tests_weight: 0.65", "tests_weight: 0");
    let err = parse(&text).unwrap_err();
    assert!(err.to_string().contains("reward.tests_weight"), "{err}");
    let with_judge = cpu_tiny_text().replace("judge: null", "judge: openai:x");
    let p = parse(&with_judge).unwrap();
    let (t, j) = p.reward.effective_weights();
    assert!((t - 0.65).abs() < 1e-12 && (j - 0.35).abs() < 1e-12);
}

#[test]
fn find_tells_names_from_paths() {
    assert_eq!(Preset::find("cpu-tiny").unwrap().name, "cpu-tiny");
    let err = Preset::find("cpu-huge").unwrap_err().to_string();
    assert!(err.contains("cpu-huge") && err.contains("cpu-tiny"), "{err}");
    let err = Preset::find("/nonexistent/p.yaml").unwrap_err().to_string();
    assert!(err.contains("/nonexistent/p.yaml"), "{err}");
    let err = Preset::find("nothere.yaml").unwrap_err();
    assert!(matches!(err, PresetError::Read { .. }));
}

#[test]
fn load_resolves_paths_against_the_file() {
    let dir = std::env::temp_dir().join(format!("preset-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mine.yaml");
    std::fs::write(&file, cpu_tiny_text()).unwrap();
    let p = Preset::load(&file).unwrap();
    assert_eq!(p.resolve_path("tasks").unwrap(), dir.join("tasks"));
    assert_eq!(p.resolve_path("/abs").unwrap(), PathBuf::from("/abs"));
    // A built-in preset's files come from the binary, never from the source tree.
    let builtin = Preset::builtin("cpu-tiny").unwrap();
    let tasks = builtin.resolve_path(&builtin.tasks).unwrap();
    assert!(!tasks.starts_with(env!("CARGO_MANIFEST_DIR")), "{}", tasks.display());
    assert!(tasks.join("note-cloud/task.yaml").is_file(), "{}", tasks.display());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lora_count_by_hand() {
    let s = ModelShape {
        hidden_size: 8,
        num_hidden_layers: 2,
        num_attention_heads: 2,
        num_key_value_heads: 1,
        head_dim: 4,
        intermediate_size: 16,
        vocab_size: 10,
        tie_word_embeddings: true,
    };
    let all: Vec<String> = LORA_TARGETS.iter().map(|t| t.to_string()).collect();
    // q 8→8, k 8→4, v 8→4, o 8→8, gate 8→16, up 8→16, down 16→8: in+out sums to 16+12+12+16+24+24+24 = 128.
    assert_eq!(s.lora_parameter_count(2, &all), 2 * 128 * 2);
    assert_eq!(s.lora_parameter_count(2, &["q_proj".to_string()]), 2 * 16 * 2);
    // Per layer: q 64 + k 32 + v 32 + o 64 + gate 128 + up 128 + down 128 = 576, norms 2·8 + 2·4 = 24.
    assert_eq!(s.parameter_count(), 10 * 8 + 2 * (576 + 24) + 8);
}

#[test]
fn zero_stage_defaults_by_mode_and_world_and_refuses_stage_3() {
    let tiny = Preset::builtin("cpu-tiny").unwrap();
    assert_eq!((tiny.optim.zero, tiny.zero_stage()), (None, 0), "LoRA replicates its adapters");
    let mut full = Preset::builtin("qwen3-8b-full-8xh100").unwrap();
    full.optim.zero = None;
    assert_eq!(full.zero_stage(), 2, "full updates on several GPUs shard");
    full.hardware.gpus_per_node = 1;
    assert_eq!(full.zero_stage(), 0, "one GPU has nothing to shard over");
    // LoRA may shard too: the optimiser is the same code.
    let lora = parse(&cpu_tiny_text().replace("micro_batch: 16", "micro_batch: 16\n  zero: 2")).unwrap();
    assert_eq!(lora.zero_stage(), 2);
    // Parameter sharding is for full updates only, and needs recomputation.
    let err = parse(&cpu_tiny_text().replace("micro_batch: 16", "micro_batch: 16\n  zero: 3")).unwrap_err();
    match &err {
        PresetError::Invalid { field, reason, .. } => {
            assert_eq!(field, "optim.zero");
            assert!(reason.contains("full updates") && reason.contains("LoRA"), "{reason}");
        }
        other => panic!("expected Invalid optim.zero, got {other}"),
    }
    let err = parse(&cpu_tiny_text().replace("micro_batch: 16", "micro_batch: 16\n  zero: 4")).unwrap_err();
    assert!(err.to_string().contains("it is 4"), "{err}");
}

#[test]
fn rollout_memory_fraction_defaults_and_range() {
    let tiny = Preset::builtin("cpu-tiny").unwrap();
    assert_eq!(tiny.rollout_memory_fraction(), DEFAULT_ROLLOUT_MEMORY_FRACTION);
    let set = parse(&cpu_tiny_text().replace("concurrency: 8", "concurrency: 8\n  gpu_memory_fraction: 0.3")).unwrap();
    assert_eq!(set.rollout_memory_fraction(), 0.3);
    for bad in ["1.0", "-0.1"] {
        let text = cpu_tiny_text().replace("concurrency: 8", &format!("concurrency: 8\n  gpu_memory_fraction: {bad}"));
        assert!(
            matches!(parse(&text), Err(PresetError::Invalid { ref field, .. }) if field == "rollout.gpu_memory_fraction"),
            "{bad}"
        );
    }
    let mut external = tiny.clone();
    external.rollout.engine = RolloutEngine::Openai;
    assert_eq!(external.rollout_memory_fraction(), 0.0, "an external server takes nothing from our GPUs");
    for name in Preset::builtin_names().into_iter().filter(|n| n.starts_with("qwen3")) {
        let p = Preset::builtin(name).unwrap();
        // With ZeRO-3 the phases use the whole GPU in turn: no fraction to state.
        let fraction = p.rollout.gpu_memory_fraction.is_some() != (p.optim.zero == Some(3));
        assert!(fraction && p.optim.zero.is_some(), "{name} states its ZeRO stage and, below 3, its fraction");
    }
}

#[test]
fn a_preset_filters_a_synth_index() {
    let text = format!(
        "{}\ntask_filter:\n  difficulty: [medium, hard]\n  pass_rate: [0.1, 0.6]\n",
        cpu_tiny_text().replace("name: cpu-tiny", "name: filtered")
    );
    let p = parse(&text).unwrap();
    let f = p.task_filter.unwrap();
    assert_eq!(f.describe(), "difficulty medium/hard, pass rate 0.10–0.60");
    assert!(
        parse(&format!("{}\ntask_filter:\n  hardness: [x]\n", cpu_tiny_text())).is_err(),
        "unknown keys are refused"
    );
}
