//! Preparing a run: the base model folder (generated for `tiny:` presets), the
//! tokenizer, the warm start, the task list and the trial context rollouts share.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_sandbox::EnginePool;
use candle_core::{DType, Device};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use tokenizers::Tokenizer;

use super::dist::SingleRank;
use super::error::TrainError;
use super::model::{peft, Qwen3, TrainMode};
use super::optim::{AdamW, AdamWSettings};
use super::preset::{Preset, SftInto, SftSection};
use super::rollout::chat::PromptRenderer;
use super::sft::{read_transcripts, transcript_sample};
use super::update::{sft_step, Sample, UpdateSettings};
use agent_bench::synth::TaskFilter;
use agent_bench::{
    discover, AgentKind, EngineImages, EnvSettings, HostEnv, TaskEntry, TrialContext, Verifier, VerifyMode,
};
use agent_core::config::Config;
use agent_local::tiny_qwen3::{write_tiny_qwen3, TinyQwen3Config};

/// The model folder a preset names: `tiny:NAME` is generated into `out/base-model`
/// (its tokenizer learns the warm-start demonstrations' text); a built-in model's name
/// (`qwen2.5-coder-0.5b`, the GGUF the CPU chat runs) or a `.gguf` path is converted
/// into `out/base-model` once (see `model::gguf`); `hf:ORG/NAME[@REV]` is its snapshot in
/// the Hugging Face cache; anything else is a model folder.
pub fn base_model_dir(preset: &Preset, out: &Path) -> Result<PathBuf, TrainError> {
    let spec = preset.model.path.as_str();
    if let Some(gguf) = gguf_source(preset)? {
        let dir = out.join("base-model");
        super::model::gguf::materialise(&gguf, &dir)?;
        return Ok(dir);
    }
    let Some(_name) = spec.strip_prefix("tiny:") else {
        let dir = match hf_model_dir(spec)? {
            Some(dir) => dir,
            None => preset.resolve_path(spec)?,
        };
        if !dir.join("config.json").is_file() {
            return Err(TrainError::bad_file(
                &dir,
                "not a model folder (config.json + safetensors); download the model there first",
            ));
        }
        return Ok(dir);
    };
    let dir = out.join("base-model");
    if dir.join("model.safetensors").is_file() {
        return Ok(dir);
    }
    let mut cfg = TinyQwen3Config { seed: preset.seed, ..TinyQwen3Config::default() };
    if let Some(shape) = &preset.model.shape {
        cfg.hidden_size = shape.hidden_size;
        cfg.num_hidden_layers = shape.num_hidden_layers;
        cfg.num_attention_heads = shape.num_attention_heads;
        cfg.num_key_value_heads = shape.num_key_value_heads;
        cfg.head_dim = Some(shape.head_dim);
        cfg.intermediate_size = shape.intermediate_size;
    }
    if let Some(sft) = &preset.sft {
        let path = preset.resolve_path(&sft.file)?;
        // Repeated so that the demonstrations' strings win the merges.
        let mut corpus = String::new();
        for t in read_transcripts(&path)? {
            for m in t {
                corpus.push_str(&m.content);
                corpus.push('\n');
            }
        }
        cfg.extra_corpus = corpus.repeat(4);
        cfg.num_merges = 600;
    }
    let tmp = out.join(".tmp-base-model");
    let _ = std::fs::remove_dir_all(&tmp);
    write_tiny_qwen3(&tmp, &cfg).map_err(|e| TrainError::Other(format!("cannot write the tiny model: {e}")))?;
    std::fs::rename(&tmp, &dir).map_err(|e| TrainError::io("rename", &tmp, e))?;
    Ok(dir)
}

/// The snapshot folder of an `hf:ORG/NAME[@REV]` model in the Hugging Face cache (read
/// as `agent run` reads it, with no hub: a cache filled beforehand, as under
/// `HF_HUB_OFFLINE=1`); None for any other spec.
pub fn hf_model_dir(spec: &str) -> Result<Option<PathBuf>, TrainError> {
    if !spec.starts_with("hf:") {
        return Ok(None);
    }
    let agent_llm::ModelSpec::Hf { repo, revision } =
        agent_llm::ModelSpec::parse(spec).map_err(|e| TrainError::Config(format!("model.path: {e}")))?
    else {
        return Ok(None);
    };
    use agent_llm::models::hf_cache;
    let root = hf_cache::cache_root().map_err(|e| TrainError::Config(e.to_string()))?;
    let dir = hf_cache::snapshot(&root, &repo, revision.as_deref()).map_err(|e| TrainError::Config(e.to_string()))?;
    Ok(Some(dir))
}

/// The GGUF file a preset's model names, if it names one: a built-in model (which must
/// be cached: `agent model pull NAME`) or a path ending in `.gguf`.
fn gguf_source(preset: &Preset) -> Result<Option<PathBuf>, TrainError> {
    let spec = preset.model.path.as_str();
    if let Some(model) = agent_llm::models::catalog::find(spec) {
        let opts = agent_llm::models::pull::PullOptions::from_env(agent_llm::models::Progress::hidden())
            .map_err(|e| TrainError::Other(e.to_string()))?;
        let path = opts.path_of(model);
        if !path.is_file() {
            return Err(TrainError::bad_file(
                &path,
                format!("the built-in model {spec} is not cached yet: run `agent model pull {spec}` first"),
            ));
        }
        return Ok(Some(path));
    }
    if spec.ends_with(".gguf") {
        let path = preset.resolve_path(spec)?;
        if !path.is_file() {
            return Err(TrainError::bad_file(&path, "no such GGUF file"));
        }
        return Ok(Some(path));
    }
    Ok(None)
}

/// How the model folder's conversations are rendered: its own chat template (as `agent
/// run` renders them), or ChatML when it has none.
pub fn load_renderer(dir: &Path) -> Result<PromptRenderer, TrainError> {
    let template = agent_llm::ChatTemplate::from_model_dir(dir)
        .map_err(|e| TrainError::bad_file(&dir.join("tokenizer_config.json"), e.to_string()))?;
    Ok(PromptRenderer::new(template))
}

/// Loads `dir/tokenizer.json`.
pub fn load_tokenizer(dir: &Path) -> Result<Tokenizer, TrainError> {
    let path = dir.join("tokenizer.json");
    Tokenizer::from_file(&path).map_err(|e| TrainError::bad_file(&path, format!("cannot load the tokenizer: {e}")))
}

/// The id of a special token, which must exist.
pub fn token_id(tokenizer: &Tokenizer, token: &str, dir: &Path) -> Result<u32, TrainError> {
    tokenizer.token_to_id(token).ok_or_else(|| {
        TrainError::bad_file(&dir.join("tokenizer.json"), format!("no `{token}` token (not a Qwen tokenizer?)"))
    })
}

/// The compute device (GPU `ordinal` on CUDA: the process's local rank) and dtype a preset asks for.
pub fn device_and_dtype(preset: &Preset, ordinal: usize) -> Result<(Device, DType), TrainError> {
    use super::preset::{Device as PDevice, Dtype};
    let device = match preset.hardware.device {
        PDevice::Cpu => Device::Cpu,
        PDevice::Cuda => Device::new_cuda(ordinal).map_err(|e| {
            TrainError::Config(format!(
                "the preset asks for CUDA but GPU {ordinal} is not usable ({e}); build with --features cuda, and \
                 start at most as many processes per node as it has GPUs"
            ))
        })?,
    };
    let dtype = match preset.dtype {
        Dtype::F32 => DType::F32,
        Dtype::Bf16 => DType::BF16,
    };
    Ok((device, dtype))
}

/// Runs the preset's warm start (full-weight SFT on its demonstrations) unless its
/// output exists; returns the folder of the warm-started model.
pub fn warm_start(
    preset: &Preset,
    base: &Path,
    out: &Path,
    device: &Device,
    dtype: DType,
    log: &dyn Fn(String),
) -> Result<PathBuf, TrainError> {
    let Some(sft) = preset.sft.as_ref().filter(|s| s.into == SftInto::Weights) else {
        return Ok(base.to_path_buf());
    };
    let dir = out.join("sft-model");
    if dir.join("model.safetensors").is_file() {
        return Ok(dir);
    }
    let model = Qwen3::load(base, &TrainMode::Full, dtype, device, preset.seed)?;
    supervised_epochs(preset, sft, &model, base, log)?;
    let tmp = out.join(".tmp-sft-model");
    let _ = std::fs::remove_dir_all(&tmp);
    peft::save_full_weights(&model, base, &tmp)?;
    std::fs::rename(&tmp, &dir).map_err(|e| TrainError::io("rename", &tmp, e))?;
    Ok(dir)
}

/// The preset's demonstration transcripts as token samples.
pub(crate) fn transcript_samples(preset: &Preset, sft: &SftSection, base: &Path) -> Result<Vec<Sample>, TrainError> {
    let tokenizer = load_tokenizer(base)?;
    let renderer = load_renderer(base)?;
    let im_end = token_id(&tokenizer, "<|im_end|>", base)?;
    let path = preset.resolve_path(&sft.file)?;
    read_transcripts(&path)?.iter().map(|t| transcript_sample(t, &tokenizer, &renderer, im_end)).collect()
}

/// Trains `model`'s trainable variables on the preset's demonstrations.
fn supervised_epochs(
    preset: &Preset,
    sft: &SftSection,
    model: &Qwen3,
    base: &Path,
    log: &dyn Fn(String),
) -> Result<(), TrainError> {
    let samples = transcript_samples(preset, sft, base)?;
    train_on(preset, sft, model, &samples, base, log)
}

/// `sft.epochs` passes of supervised steps over `samples` (shuffled by the preset's seed).
pub(crate) fn train_on(
    preset: &Preset,
    sft: &SftSection,
    model: &Qwen3,
    samples: &[Sample],
    base: &Path,
    log: &dyn Fn(String),
) -> Result<(), TrainError> {
    let tokenizer = load_tokenizer(base)?;
    let im_end = token_id(&tokenizer, "<|im_end|>", base)?;
    let settings = AdamWSettings { lr: sft.lr, weight_decay: 0.0, ..adam_settings(preset) };
    let mut opt = AdamW::new(model.trainable(), settings)?;
    let update = update_settings(preset, im_end);
    let mut rng = rand::rngs::StdRng::seed_from_u64(preset.seed ^ 0x5F7);
    let tokens: usize = samples.iter().map(|s| s.tokens.len()).sum();
    for epoch in 0..sft.epochs {
        let started = std::time::Instant::now();
        let mut order: Vec<&Sample> = samples.iter().collect();
        order.shuffle(&mut rng);
        let mut losses = Vec::new();
        for (k, batch) in order.chunks(sft.batch.max(1)).enumerate() {
            let seed = preset.seed ^ ((epoch as u64) << 32) ^ k as u64;
            losses.push(sft_step(model, &mut opt, batch, &update, &SingleRank, seed)?);
        }
        let mean = losses.iter().sum::<f64>() / losses.len().max(1) as f64;
        let secs = started.elapsed().as_secs_f64();
        log(format!(
            "warm start: epoch {}/{} loss {mean:.4} ({secs:.0} s, {:.0} tokens/s)",
            epoch + 1,
            sft.epochs,
            tokens as f64 / secs.max(1e-9)
        ));
    }
    Ok(())
}

/// The optimiser of a run's trainable variables: replicated on every rank, or sharded
/// over the ranks (ZeRO, `optim.zero`).
pub fn optimizer(
    preset: &Preset,
    vars: Vec<(String, candle_core::Var)>,
    world: &dyn super::dist::Collective,
) -> Result<AdamW, TrainError> {
    AdamW::with_zero(vars, adam_settings(preset), world, preset.zero_stage())
}

/// The preset's AdamW settings (the GRPO updates; the warm start overrides lr and decay).
pub fn adam_settings(preset: &Preset) -> AdamWSettings {
    AdamWSettings {
        lr: preset.optim.lr,
        beta1: preset.optim.beta1,
        beta2: preset.optim.beta2,
        eps: preset.optim.eps,
        weight_decay: preset.optim.weight_decay,
    }
}

/// The update settings a preset implies.
pub fn update_settings(preset: &Preset, pad: u32) -> UpdateSettings {
    UpdateSettings {
        ppo: super::grpo::PpoSettings {
            clip_low: preset.grpo.clip_low,
            clip_high: preset.grpo.clip_high,
            clip_dual: preset.grpo.clip_dual,
            kl_coef: preset.grpo.kl_coef,
        },
        epochs: preset.grpo.ppo_epochs,
        minibatches: preset.grpo.minibatches,
        micro_batch: preset.optim.micro_batch,
        grad_clip: preset.optim.grad_clip,
        recompute: preset.recompute,
        chunk: super::model::DEFAULT_CHUNK,
        importance_cap: 2.0,
        pad,
    }
}

/// What the trainer's agent loop runs with: the preset's turn and length limits and system prompt.
pub fn rollout_config(preset: &Preset, base: &Config) -> Config {
    let mut config = base.clone();
    config.episode.max_turns = preset.grpo.max_turns as u32;
    config.episode.max_reply_tokens = preset.grpo.max_new_tokens as u32;
    config.episode.context_tokens = preset.grpo.max_seq_len as u64;
    config.episode.max_parse_failures = preset.grpo.max_turns as u32;
    if preset.system_prompt.is_some() {
        config.system_prompt = preset.system_prompt.clone();
    }
    config.tool_format = preset.tool_format;
    if preset.tools.is_some() {
        config.tools = preset.tools.clone();
    }
    config
}

/// The tasks of a synth output that pass the preset's filter.
fn filtered_tasks(dir: &Path, filter: &TaskFilter) -> Result<Vec<TaskEntry>, TrainError> {
    if !agent_bench::synth::index::is_synth_output(dir) {
        return Err(TrainError::bad_file(
            dir,
            "is not an `agent tasks synth` output (index.jsonl beside tasks/), so the preset's task_filter cannot apply",
        ));
    }
    let dirs = agent_bench::synth::index::task_dirs(dir, Some(filter)).map_err(|e| TrainError::Other(e.to_string()))?;
    if dirs.is_empty() {
        return Err(TrainError::bad_file(dir, format!("has no indexed task with {}", filter.describe())));
    }
    discover(&dirs).map_err(|e| TrainError::Other(e.to_string()))
}

/// The tasks and the trial context every rollout shares (with a synth output's filter).
pub async fn trial_context(
    tasks_dir: &Path,
    config: Config,
    pool: &EnginePool,
    run_dir: &Path,
    run_id: &str,
    filter: Option<&TaskFilter>,
) -> Result<(Arc<TrialContext>, Vec<Arc<TaskEntry>>), TrainError> {
    let entries = match filter {
        None => discover(&[tasks_dir.to_path_buf()]).map_err(|e| TrainError::Other(e.to_string()))?,
        Some(f) => filtered_tasks(tasks_dir, f)?,
    };
    let mut tasks = Vec::new();
    for e in entries {
        if let Err(err) = &e.task {
            return Err(TrainError::Other(format!("the task {} cannot be loaded: {err}", e.name)));
        }
        tasks.push(Arc::new(e));
    }
    if tasks.is_empty() {
        return Err(TrainError::bad_file(tasks_dir, "holds no tasks (folders with task.yaml or task.toml)"));
    }
    // As bench builds them: the host's CA bundle (a proxy that re-signs TLS would break a
    // task image's `pip install` without it) and its host-name overrides.
    let host = HostEnv::from_host(Path::new("/etc/hosts"), None).map_err(|e| TrainError::Other(e.to_string()))?;
    let ctx = TrialContext {
        pool: pool.clone(),
        run_dir: run_dir.to_path_buf(),
        agent: AgentKind::Agent,
        model: None,
        images: Arc::new(EngineImages::new(&config.image_map, host.build_env())),
        env: EnvSettings::from_config(&config, run_id, host.extra_hosts.clone()),
        verifier: Verifier::probe(VerifyMode::Script).await,
        config,
        // Rollouts are the policy alone.
        hooks: Default::default(),
    };
    Ok((Arc::new(ctx), tasks))
}

/// The architecture of the preset's model, for a dry run without `model.shape`: read
/// from the folder's config.json, or the generated tiny model's defaults.
pub fn shape_of(preset: &Preset) -> Result<super::preset::ModelShape, TrainError> {
    use super::model::Qwen3Config;
    let spec = preset.model.path.as_str();
    if spec.starts_with("tiny:") {
        let t = TinyQwen3Config::default();
        return Ok(super::preset::ModelShape {
            hidden_size: t.hidden_size,
            num_hidden_layers: t.num_hidden_layers,
            num_attention_heads: t.num_attention_heads,
            num_key_value_heads: t.num_key_value_heads,
            head_dim: t.effective_head_dim(),
            intermediate_size: t.intermediate_size,
            vocab_size: 1024,
            tie_word_embeddings: true,
        });
    }
    let dir = match hf_model_dir(spec)? {
        Some(dir) => dir,
        None => preset.resolve_path(spec)?,
    };
    let c = Qwen3Config::load(&dir)?;
    Ok(super::preset::ModelShape {
        hidden_size: c.hidden_size,
        num_hidden_layers: c.num_hidden_layers,
        num_attention_heads: c.num_attention_heads,
        num_key_value_heads: c.num_key_value_heads,
        head_dim: c.head_dim(),
        intermediate_size: c.intermediate_size,
        vocab_size: c.vocab_size,
        tie_word_embeddings: c.tie_word_embeddings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synth output with two indexed tasks (copies of a fixture) of different difficulty.
    fn synth_output(dir: &Path) {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bench/tb2-hello");
        let mut rows = String::new();
        for (name, difficulty, rate) in [("easy-one", "easy", "0.9"), ("hard-one", "hard", "0.3")] {
            let to = dir.join("tasks").join(name);
            std::fs::create_dir_all(to.join("environment")).unwrap();
            std::fs::create_dir_all(to.join("tests")).unwrap();
            std::fs::create_dir_all(to.join("solution")).unwrap();
            for f in ["task.toml", "instruction.md", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh"] {
                std::fs::copy(fixture.join(f), to.join(f)).unwrap();
            }
            rows.push_str(&format!(
                r#"{{"id":"{name}","name":"{name}","seed":"s","parent":"s","title":"t","category":"c","difficulty":"{difficulty}","build_rounds":1,"validation":{{"verdict":"valid","nop_score":0.0,"oracle_passes":3,"oracle_runs":3,"times":{{"build_secs":0,"nop_secs":0,"oracle_secs":[],"total_secs":0}}}},"pass_rate":{rate},"nearest":null,"tokens":{{"idea":0,"build":0,"review":0,"calibrate":0,"total":0}}}}"#
            ));
            rows.push('\n');
        }
        std::fs::write(dir.join("index.jsonl"), rows).unwrap();
    }

    #[test]
    fn a_preset_filter_takes_the_indexed_tasks_it_names() {
        let dir = tempfile::tempdir().unwrap();
        synth_output(dir.path());
        let names = |f: &TaskFilter| -> Vec<String> {
            filtered_tasks(dir.path(), f).unwrap().into_iter().map(|e| e.name).collect()
        };
        assert_eq!(names(&TaskFilter::default()), vec!["easy-one", "hard-one"]);
        assert_eq!(names(&TaskFilter { pass_rate: Some([0.1, 0.5]), ..Default::default() }), vec!["hard-one"]);
        let none = TaskFilter { difficulty: vec!["medium".into()], ..Default::default() };
        assert!(filtered_tasks(dir.path(), &none).unwrap_err().to_string().contains("difficulty medium"));
        // A plain folder of tasks has no index to filter.
        assert!(filtered_tasks(&dir.path().join("tasks"), &none)
            .unwrap_err()
            .to_string()
            .contains("not an `agent tasks synth` output"));
    }
}
