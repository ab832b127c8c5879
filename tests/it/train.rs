//! `agent train` end to end: real containers, the real tiny Qwen3, real candle updates.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agent_train::metrics::{MetricsLog, StepMetrics};

use crate::support;

pub(crate) fn train_cmd(preset: &str, out: &Path) -> Command {
    let mut c = Command::new(support::agent_bin());
    c.args(["train", "--preset", preset, "--no-progress", "--out"]).arg(out);
    c
}

pub(crate) fn resume_preset() -> String {
    support::fixture("train/resume.yaml").display().to_string()
}

pub(crate) fn eval_json(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("eval.json")).expect("eval.json")).expect("JSON")
}

/// Metrics without the wall-clock fields, which differ between any two runs.
fn comparable(m: &[StepMetrics]) -> Vec<StepMetrics> {
    m.iter().map(StepMetrics::without_clock).collect()
}

/// One uninterrupted run of the short preset, shared by the tests that need a trained adapter.
pub(crate) fn uninterrupted_run() -> &'static PathBuf {
    static RUN: OnceLock<PathBuf> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = tempfile::Builder::new().prefix("agent-train-a-").tempdir().unwrap().keep();
        let out = dir.join("run");
        let o = train_cmd(&resume_preset(), &out).output().unwrap();
        assert!(o.status.success(), "uninterrupted run failed: {}", String::from_utf8_lossy(&o.stderr));
        out
    })
}

/// The full demonstration (acceptance 1 of the trainer's issue): the shipped preset, its
/// warm start, GRPO with rewards from the toy tasks' pytest runs in real containers, and
/// fresh evaluation rollouts before and after. The binary runs as `cargo install` leaves
/// it, from a temporary directory with an empty cache: the preset and its toy tasks come
/// from inside the binary.
#[tokio::test(flavor = "multi_thread")]
async fn cpu_tiny_preset_learns_with_real_containers() {
    support::docker().await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let started = Instant::now();
    let o = support::installed(dir.path())
        .args(["train", "--preset", "cpu-tiny", "--no-progress", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "agent train failed: {stderr}");
    eprintln!("{stderr}\ncpu-tiny took {:.0} s", started.elapsed().as_secs_f64());
    let eval = eval_json(&out);
    let (before, after) = (eval["before"].as_f64().unwrap(), eval["after"].as_f64().unwrap());
    assert!(eval["rollouts"].as_u64().unwrap() >= 64);
    assert!((0.2..=0.7).contains(&before), "the warm start should succeed on 20–70% of rollouts, got {before}");
    assert!(after >= before + 0.25, "success rate {before} → {after}: less than 25 points of improvement");
    // Every evaluation counts its turns and those with letters no input showed.
    let after_eval: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("eval-after.json")).unwrap()).unwrap();
    let counted = after_eval["rollouts"].as_u64().unwrap() - after_eval["crashed"].as_u64().unwrap();
    assert!(after_eval["turns"].as_u64().unwrap() >= counted, "{after_eval}");
    assert!(after_eval["foreign_letter_turns"].as_u64().unwrap() <= after_eval["turns"].as_u64().unwrap());
    let metrics = MetricsLog::read(&out.join("metrics.jsonl")).unwrap();
    assert!(!metrics.is_empty() && metrics.len() <= 30);
    assert!(metrics.iter().all(|m| m.rollouts > 0 && m.tokens > 0));
    let svg = std::fs::read_to_string(out.join("reward.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("<polyline"));
    assert!(out.join("adapter/adapter_model.safetensors").is_file());
    assert!(out.join("adapter/adapter_config.json").is_file());
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_training_resumes_from_its_last_checkpoint_exactly() {
    support::docker().await;
    let want = uninterrupted_run();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // 1. kill -9 once the checkpoint of step 2 exists.
    let mut child = train_cmd(&resume_preset(), &out).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(900);
    while !out.join("checkpoints/step-000002/COMPLETE").is_file() {
        assert!(Instant::now() < deadline, "no checkpoint of step 2 appeared");
        assert!(child.try_wait().unwrap().is_none(), "the run ended before it could be killed");
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // 2. resume, and die (abort) in the middle of writing the checkpoint of step 3.
    let o = train_cmd(&resume_preset(), &out)
        .arg("--resume")
        .env("AGENT_TRAIN_FAULT", "checkpoint-write:3")
        .output()
        .unwrap();
    assert!(!o.status.success(), "the injected fault did not stop the run");
    let leftovers: Vec<String> = std::fs::read_dir(out.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(leftovers.iter().any(|n| n.starts_with(".tmp-step-000003")), "no half-written checkpoint: {leftovers:?}");
    assert!(!out.join("checkpoints/step-000003").exists());
    // 3. resume to the end: it continues after step 2 (the half-written one is ignored).
    let o = train_cmd(&resume_preset(), &out).arg("--resume").output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "resumed run failed: {stderr}");
    assert!(stderr.contains("resuming after step 2"), "{stderr}");
    let got = MetricsLog::read(&out.join("metrics.jsonl")).unwrap();
    let expected = MetricsLog::read(&want.join("metrics.jsonl")).unwrap();
    assert_eq!(got.len(), 4);
    assert!(expected.iter().any(|m| m.groups_kept > 0 && m.grad_norm > 0.0), "no update happened: {expected:?}");
    assert_eq!(comparable(&got), comparable(&expected));
    assert_eq!(eval_json(&out), eval_json(want));
    assert!(!out.join("checkpoints").read_dir().unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with(".tmp")));
}

/// `agent train eval`: a trained adapter against the base on the same rollouts (same
/// tasks, same seeds), here over one held-out task of the toy set; `eval.json` pairs them
/// and every error is clustered by task.
#[tokio::test(flavor = "multi_thread")]
async fn train_eval_pairs_an_adapter_with_its_base_on_the_same_rollouts() {
    support::docker().await;
    let run = uninterrupted_run();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("eval");
    let tasks = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/train/toy-files");
    let o = Command::new(support::agent_bin())
        .args(["train", "eval", "--no-progress", "--preset", &resume_preset(), "--rollouts", "6"])
        .args(["--families", "note-river,data-stone", "--temperature", "0"])
        .arg("--adapter")
        .arg(run.join("adapter"))
        .arg("--tasks")
        .arg(&tasks)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "agent train eval failed: {stderr}");
    assert!(stdout.contains("paired:"), "{stdout}");
    let report = eval_json(&out);
    assert_eq!(report["rollouts"], 6);
    assert_eq!(report["temperature"], 0.0);
    let paired = &report["paired"]["after_vs_before"];
    assert_eq!((paired["pairs"].as_u64(), paired["tasks"].as_u64()), (Some(6), Some(2)), "{report}");
    // Without a manifest each task is its own family: only the two asked for ran.
    let families: Vec<&String> = report["families"].as_object().unwrap().keys().collect();
    assert_eq!(families, ["data-stone", "note-river"]);
    for name in ["eval-before", "eval-adapter"] {
        let e: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap()).unwrap();
        let outcomes = e["outcomes"].as_array().unwrap();
        assert_eq!(outcomes.len(), 6, "{e}");
        assert!(outcomes.iter().all(|o| o["task"] == "note-river" || o["task"] == "data-stone"), "{e}");
    }
    // Greedy sampling: the adapter's replies are the same each time a task comes round.
    let adapter: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("eval-adapter.json")).unwrap()).unwrap();
    for task in ["note-river", "data-stone"] {
        let results: Vec<bool> = adapter["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["task"] == task)
            .map(|o| o["resolved"].as_bool().unwrap())
            .collect();
        assert!(results.windows(2).all(|w| w[0] == w[1]), "{task}: {results:?} at temperature 0");
    }
}

/// What a closed SSH session or terminal sends: the run stops, removing its rollout
/// containers, with the exit code of the signal.
#[tokio::test(flavor = "multi_thread")]
async fn sighup_stops_training_and_leaves_no_container() {
    support::docker().await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut child = train_cmd(&resume_preset(), &out).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(900);
    while support::containers_of_pid(pid).is_empty() {
        assert!(Instant::now() < deadline, "no rollout container appeared");
        assert!(child.try_wait().unwrap().is_none(), "the run ended before it could be signalled");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(Command::new("kill").args(["-HUP", &pid.to_string()]).status().unwrap().success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGHUP));
    assert_eq!(support::containers_of_pid(pid), Vec::<String>::new(), "rollout containers left behind");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trained_adapter_gives_the_same_logits_through_mistral_rs() {
    use agent_train::model::{peft, ForwardMode, Qwen3, TrainMode};
    use candle_core::{DType, Device, Tensor};
    support::docker().await;
    let run = uninterrupted_run();
    let base = run.join("sft-model");
    let adapter = run.join("adapter");
    let settings = peft::read_adapter_settings(&adapter).unwrap();
    let model = Qwen3::load(&base, &TrainMode::Lora(settings), DType::F32, &Device::Cpu, 0).unwrap();
    peft::load_adapter_into(&model, &adapter).unwrap();
    let b_norm: f32 = model
        .trainable()
        .iter()
        .filter(|(n, _)| n.contains("lora_B"))
        .map(|(_, v)| v.as_tensor().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap())
        .sum();
    assert!(b_norm > 0.0, "the adapter was not trained");
    let tokenizer = tokenizers::Tokenizer::from_file(base.join("tokenizer.json")).unwrap();
    let text = "<|im_start|>user\nCreate /app/note.txt containing the word apple.<|im_end|>\n<|im_start|>assistant\n";
    let ids = tokenizer.encode(text, false).unwrap().get_ids().to_vec();
    let input = Tensor::new(ids.as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let hidden = model.hidden(&input, ForwardMode::default()).unwrap();
    let last = hidden.narrow(1, ids.len() - 1, 1).unwrap().squeeze(0).unwrap();
    let ours = last.matmul(&model.head_weight().t().unwrap()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();

    let opts = agent_llm::LocalModelOptions { force_cpu: true, lora: Some(adapter.clone()), ..Default::default() };
    let engine = agent_local::MistralRsBackend::load(&base, &opts).await.unwrap();
    let theirs = engine.next_token_logits(ids.clone()).await.unwrap();
    assert_eq!(ours.len(), theirs.len());
    let diff = ours.iter().zip(&theirs).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(diff < 1e-3, "trainer and mistral.rs logits differ by up to {diff}");

    // And `agent run --lora` loads the same thing and runs an episode in a container.
    let o = Command::new(support::agent_bin())
        .args(["run", "--engine", "mistral.rs", "--image", "agent-base:bookworm", "--model"])
        .arg(&base)
        .arg("--lora")
        .arg(&adapter)
        .args(["--max-turns", "1", "Create /app/note.txt containing the word apple."])
        .output()
        .unwrap();
    let code = o.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 1, "agent run --lora failed ({code}): {}", String::from_utf8_lossy(&o.stderr));
}

/// `rollout.engine: mistralrs`: rollouts in real containers sampled by mistral.rs, the
/// policy reloaded after each update, and the sampler's log-probs (which feed the
/// importance weights) agreeing with the trainer's.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_sampled_by_mistral_rs_trains_with_importance_weights() {
    support::docker().await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let preset = support::fixture("train/mistralrs.yaml");
    let o = train_cmd(&preset.display().to_string(), &out).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "agent train failed: {stderr}");
    assert!(stderr.contains("sampled by mistral.rs"), "{stderr}");
    let metrics = MetricsLog::read(&out.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.len(), 2);
    for m in &metrics {
        assert!(m.rollouts == 8 && m.crashed == 0 && m.model_tokens > 0, "{m:?}");
        let diff = m.sampler_logp_diff.unwrap_or_else(|| panic!("step {} has no sampler log-probs: {m:?}", m.step));
        assert!(diff < 1e-3, "step {}: trainer and mistral.rs log-probs differ by {diff} on average", m.step);
    }
    let eval = eval_json(&out);
    assert_eq!(eval["rollouts"].as_u64(), Some(8));
    assert!(out.join("adapter/adapter_model.safetensors").is_file());
    let left: Vec<_> = std::fs::read_dir(out.join("rollout-engine")).unwrap().collect();
    assert!(left.is_empty(), "the engine's policy copies were left behind: {left:?}");
}

#[test]
fn dry_run_prints_the_memory_plans_of_the_gpu_presets() {
    let o = Command::new(support::agent_bin())
        .args(["train", "--preset", "qwen3-8b-full-8xh100", "--dry-run"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("8.19 B") && text.contains("ZeRO-2") && text.contains("optimiser"), "{text}");
    // Qwen3-32B full fits 8 H100 with parameter sharding; with ZeRO-2 it does not, and the
    // advice names what does.
    let o = Command::new(support::agent_bin())
        .args(["train", "--preset", "qwen3-32b-full-8xh100", "--dry-run"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("ZeRO-3") && text.contains("in host memory") && text.contains("fits"), "{text}");
    let o = Command::new(support::agent_bin())
        .args(["train", "--preset", "qwen3-32b-full-8xh100", "--dry-run", "--zero", "2"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "a plan that does not fit exits 1");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("does not fit") && text.contains("Set optim.zero: 3"), "{text}");
}

#[test]
fn bad_presets_are_refused_with_the_field_named() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    let text = std::fs::read_to_string(support::fixture("train/resume.yaml"))
        .unwrap()
        .replace("group_size: 4", "group_size: 1");
    std::fs::write(&bad, text).unwrap();
    let o = Command::new(support::agent_bin()).args(["train", "--dry-run", "--preset"]).arg(&bad).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("grpo.group_size"), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `agent serve --lora` serves the trained adapter under a name that says so (mistral.rs:
/// requests one at a time), and refuses other model names as OpenAI does.
#[tokio::test(flavor = "multi_thread")]
async fn agent_serve_names_and_serves_the_trained_adapter() {
    support::docker().await;
    let run = uninterrupted_run();
    let base = run.join("sft-model");
    let adapter = run.join("adapter");
    let (server, url) = support::serve(&[
        "--engine",
        "mistral.rs",
        "--model",
        base.to_str().unwrap(),
        "--lora",
        adapter.to_str().unwrap(),
    ]);
    let c = reqwest::Client::new();
    let models: serde_json::Value = c.get(format!("{url}/models")).send().await.unwrap().json().await.unwrap();
    let entry = &models["data"][0];
    assert_eq!(entry["id"], "sft-model+adapter", "{models}");
    assert_eq!(entry["parent"], "sft-model", "{models}");
    // The adapter's folder by name: `/v1/models` never shows a file-system path.
    assert_eq!(entry["adapter"], "adapter", "{models}");
    assert!(!models.to_string().contains(&run.display().to_string()), "{models}");
    let chat = |model: &str| {
        let body = serde_json::json!({"model": model, "max_tokens": 6, "temperature": 0,
            "messages": [{"role": "user", "content": "Create /app/note.txt containing the word apple."}]});
        c.post(format!("{url}/chat/completions")).json(&body).send()
    };
    // Two at once: mistral.rs takes them one after the other, each whole.
    let (a, b) = tokio::join!(chat("sft-model+adapter"), chat("sft-model+adapter"));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    let a: serde_json::Value = a.json().await.unwrap();
    let b: serde_json::Value = b.json().await.unwrap();
    assert_eq!(a["choices"][0]["message"], b["choices"][0]["message"], "greedy, alone each: the same reply");
    assert_eq!(a["model"], "sft-model+adapter");
    let refused = chat("sft-model-base").await.unwrap();
    assert_eq!(refused.status().as_u16(), 404);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_found", "{body}");
    // mistral.rs samples inside its engine: no log-probabilities, said so.
    let body = serde_json::json!({"max_tokens": 2, "logprobs": true, "messages": [{"role": "user", "content": "hi"}]});
    let r = c.post(format!("{url}/chat/completions")).json(&body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let text = r.text().await.unwrap();
    assert!(text.contains("log-probabilities"), "{text}");
    drop(server);
}
