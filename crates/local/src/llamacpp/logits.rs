//! The logits llama.cpp computes for a text, position by position: the reference the
//! trainer's own forward pass of the same GGUF model is checked against.

use std::num::NonZeroU32;
use std::path::Path;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use super::adapter::Swap;
use super::engine::llama_backend;
use super::{llama_error, load_error};
use agent_llm::LlmError;

/// llama.cpp's tokens of `text` (special tokens parsed, no BOS added) and the logits it
/// computes at each of them (row i: the distribution of token i + 1), on `threads` CPU
/// threads, with the LoRA adapter GGUF `adapter` applied when given.
pub fn reference_logits(
    path: &Path,
    adapter: Option<&Path>,
    text: &str,
    threads: u32,
) -> Result<(Vec<u32>, Vec<Vec<f32>>), LlmError> {
    let backend = llama_backend()?;
    let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default())
        .map_err(|e| load_error(path, format!("llama.cpp could not load it: {e}")))?;
    let tokens = model.vocab().tokenize(text.as_bytes(), false, true);
    let n = tokens.len();
    let n_ctx = u32::try_from(n.max(16)).unwrap_or(u32::MAX);
    let threads = i32::try_from(threads.max(1)).unwrap_or(1);
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(n_ctx))
        .with_n_batch(n_ctx)
        .with_n_ubatch(n_ctx)
        .with_n_threads(threads)
        .with_n_threads_batch(threads);
    let mut ctx = model.new_context(backend, params).map_err(|e| llama_error("create a context", e))?;
    let mut lora = Swap::none();
    if let Some(adapter) = adapter {
        lora.set(&model, &mut ctx, adapter)?;
    }
    let mut batch = LlamaBatch::new(n.max(1), 1);
    for (i, t) in tokens.iter().enumerate() {
        batch.add(*t, i as i32, &[0], true).map_err(|e| llama_error("fill a batch", e))?;
    }
    ctx.decode(&mut batch).map_err(|e| llama_error("evaluate the text", e))?;
    let rows = (0..n).map(|i| ctx.get_logits_ith(i as i32).to_vec()).collect();
    // The context goes before the adapter it applies.
    drop(ctx);
    drop(lora);
    Ok((tokens.iter().map(|t: &LlamaToken| t.0 as u32).collect(), rows))
}
