//! Every shipped preset: its memory plan fits the hardware it names, and its code path runs
//! one step on the CPU with a tiny model read, as the GPU presets read theirs, from a
//! Hugging Face cache (`hf:ORG/NAME`, no hub: `HF_HUB_OFFLINE=1`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use agent_train::metrics::MetricsLog;
use serde_yaml::Value;

use crate::support;

fn presets_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("presets")
}

/// Every shipped preset's name and parsed YAML, by name.
fn shipped() -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(presets_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            out.insert(name, serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap());
        }
    }
    out
}

#[test]
fn every_shipped_preset_passes_its_dry_run_and_fits() {
    let presets = shipped();
    assert!(presets.len() >= 8, "{:?}", presets.keys().collect::<Vec<_>>());
    for name in presets.keys().filter(|n| n.starts_with("qwen3-")) {
        let o = Command::new(support::agent_bin()).args(["train", "--preset", name, "--dry-run"]).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{name} does not fit its hardware by its plan:\n{text}");
        assert!(text.contains("fits"), "{name}:\n{text}");
    }
}

/// A tiny Qwen3 laid out as `huggingface_hub` caches `tiny-org/tiny-qwen3` at `main`.
fn tiny_hub(root: &Path) {
    let repo = root.join("models--tiny-org--tiny-qwen3");
    let snapshot = repo.join("snapshots/0123456789abcdef0123456789abcdef01234567");
    // The GPU presets' prompts (their tool schemas) take about 4,300 of the tiny tokenizer's tokens.
    let cfg = agent_local::tiny_qwen3::TinyQwen3Config {
        max_position_embeddings: 8192,
        ..agent_local::tiny_qwen3::TinyQwen3Config::default()
    };
    agent_local::tiny_qwen3::write_tiny_qwen3(&snapshot, &cfg).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "0123456789abcdef0123456789abcdef01234567").unwrap();
}

/// What decides which code runs in a step: adapters or full weights, the optimiser's
/// sharding, one rank or several, the KL reference, the rollout engine, recomputation.
fn code_path(p: &Value) -> (String, usize) {
    let lora = !p["mode"]["lora"].is_null();
    let world = p["hardware"]["gpus_per_node"].as_u64().unwrap_or(1) * p["hardware"]["nodes"].as_u64().unwrap_or(1);
    let key = format!(
        "{} zero {} {} kl {} engine {} recompute {}",
        if lora { "lora" } else { "full" },
        p["optim"]["zero"].as_u64().map_or("default".into(), |z| z.to_string()),
        if world > 1 { "several ranks" } else { "one rank" },
        p["grpo"]["kl_coef"].as_f64().unwrap_or(0.0) > 0.0,
        p["rollout"]["engine"].as_str().unwrap_or("candle"),
        p["recompute"].as_bool().unwrap_or(false),
    );
    (key, if world > 1 { 2 } else { 1 })
}

/// The preset shrunk to one short step on the CPU: the same mode, optimiser, engine and
/// recomputation; f32; a tiny model from the Hugging Face cache; `ranks` processes.
fn one_cpu_step(mut p: Value, ranks: usize) -> Value {
    let set = |v: &mut Value, path: &[&str], x: Value| {
        let mut at = v;
        for k in &path[..path.len() - 1] {
            at = &mut at[*k];
        }
        at[path[path.len() - 1]] = x;
    };
    p["model"] = serde_yaml::from_str("path: hf:tiny-org/tiny-qwen3").unwrap();
    p["hardware"] = serde_yaml::from_str(&format!("{{device: cpu, gpus_per_node: {ranks}, nodes: 1}}")).unwrap();
    // candle's CPU matrix products have no bf16 (its mixed precision is tested in the crate's unit tests).
    p["dtype"] = Value::from("f32");
    for (k, v) in [
        ("steps", 1),
        ("tasks_per_step", 2),
        ("group_size", 2),
        ("minibatches", 1),
        ("max_turns", 1),
        ("max_new_tokens", 8),
        ("max_seq_len", 8192),
    ] {
        set(&mut p, &["grpo", k], Value::from(v));
    }
    // Random weights earn no reward: every group must still train.
    set(&mut p, &["grpo", "dynamic_sampling"], Value::from(false));
    // Eight tokens cut every reply: trained on, with reward 0.
    set(&mut p, &["grpo", "truncated"], Value::from("zero"));
    set(&mut p, &["rollout", "concurrency"], Value::from(4));
    p["eval"] = serde_yaml::from_str("{rollouts: 0, temperature: 1.0}").unwrap();
    p["checkpoint"] = serde_yaml::from_str("{every: 1, keep: 1}").unwrap();
    if let Value::Mapping(m) = &mut p {
        m.remove("sft");
    }
    p
}

#[tokio::test(flavor = "multi_thread")]
async fn every_gpu_presets_code_path_runs_a_step_on_the_cpu_from_a_hugging_face_cache() {
    support::docker().await;
    let dir = tempfile::tempdir().unwrap();
    let hub = dir.path().join("hub");
    tiny_hub(&hub);
    let tasks = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/train/toy-files");
    let mut paths: BTreeMap<String, (usize, Vec<String>, Value)> = BTreeMap::new();
    for (name, p) in shipped().into_iter().filter(|(n, _)| n.starts_with("qwen3-")) {
        assert!(p["model"]["path"].as_str().unwrap().starts_with("hf:"), "{name} names its model by hf:");
        let (key, ranks) = code_path(&p);
        paths.entry(key).or_insert_with(|| (ranks, Vec::new(), p.clone())).1.push(name);
    }
    for (key, (ranks, names, p)) in &paths {
        let file = dir.path().join(format!("{}.yaml", names[0]));
        std::fs::write(&file, serde_yaml::to_string(&one_cpu_step(p.clone(), *ranks)).unwrap()).unwrap();
        let out = dir.path().join(format!("run-{}", names[0]));
        let mut cmd = Command::new(support::agent_bin());
        cmd.args(["train", "--no-progress", "--preset"])
            .arg(&file)
            .arg("--tasks")
            .arg(&tasks)
            .arg("--out")
            .arg(&out)
            .env("HF_HUB_CACHE", &hub)
            .env("HF_HUB_OFFLINE", "1");
        if *ranks > 1 {
            cmd.args(["--nproc-per-node", &ranks.to_string()]);
        }
        let o = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{key} ({names:?}) failed:\n{stderr}");
        let metrics = MetricsLog::read(&out.join("metrics.jsonl")).unwrap();
        assert_eq!(metrics.len(), 1, "{key}: {stderr}");
        assert!(metrics[0].rollouts > 0 && metrics[0].tokens > 0, "{key}: {:?}", metrics[0]);
        assert_eq!(metrics[0].crashed, 0, "{key}: {:?}\n{stderr}", metrics[0]);
        assert!(metrics[0].update_tokens > 0, "{key}: the update trained on nothing: {:?}\n{stderr}", metrics[0]);
        eprintln!("{key}: one step ran for {names:?}");
    }
    assert!(paths.len() >= 3, "{:?}", paths.keys().collect::<Vec<_>>());
}

#[test]
fn a_missing_hugging_face_model_says_how_to_get_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(support::agent_bin())
        .args(["train", "--preset", "qwen3-8b-lora-1xh200", "--out"])
        .arg(dir.path().join("run"))
        .env("HF_HUB_CACHE", dir.path().join("empty-hub"))
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(stderr.contains("Qwen/Qwen3-8B") && stderr.contains("hf download Qwen/Qwen3-8B"), "{stderr}");
}
