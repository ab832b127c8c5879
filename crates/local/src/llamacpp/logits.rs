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
    let rows = logits_of(&model, adapter, &tokens, tokens.len(), threads)?;
    Ok((tokens.iter().map(|t: &LlamaToken| t.0 as u32).collect(), rows))
}

/// [`reference_logits`] of token ids as they are (row i is the distribution of token
/// i + 1), evaluated as a generation is: `ids[..prompt]` in one batch, then each later
/// token alone (a batch of n and n batches of one sum in different orders).
pub fn reference_logits_of_ids(
    path: &Path,
    adapter: Option<&Path>,
    ids: &[u32],
    prompt: usize,
    threads: u32,
) -> Result<Vec<Vec<f32>>, LlmError> {
    let backend = llama_backend()?;
    let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default())
        .map_err(|e| load_error(path, format!("llama.cpp could not load it: {e}")))?;
    let tokens: Vec<LlamaToken> = ids.iter().map(|&i| LlamaToken(i32::try_from(i).unwrap_or(0))).collect();
    logits_of(&model, adapter, &tokens, prompt, threads)
}

/// The logits at every position of `tokens`: the first `batched` in one batch, the rest
/// one decode each.
fn logits_of(
    model: &LlamaModel,
    adapter: Option<&Path>,
    tokens: &[LlamaToken],
    batched: usize,
    threads: u32,
) -> Result<Vec<Vec<f32>>, LlmError> {
    let backend = llama_backend()?;
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
        lora.set(model, &mut ctx, adapter)?;
    }
    let batched = batched.clamp(1, n.max(1));
    let mut batch = LlamaBatch::new(n.max(1), 1);
    for (i, t) in tokens.iter().enumerate().take(batched) {
        batch.add(*t, i as i32, &[0], true).map_err(|e| llama_error("fill a batch", e))?;
    }
    ctx.decode(&mut batch).map_err(|e| llama_error("evaluate the text", e))?;
    let mut rows: Vec<Vec<f32>> = (0..batched.min(n)).map(|i| ctx.get_logits_ith(i as i32).to_vec()).collect();
    for (i, t) in tokens.iter().enumerate().skip(batched) {
        batch.clear();
        batch.add(*t, i as i32, &[0], true).map_err(|e| llama_error("fill a batch", e))?;
        ctx.decode(&mut batch).map_err(|e| llama_error("evaluate a token", e))?;
        rows.push(ctx.get_logits_ith(0).to_vec());
    }
    // The context goes before the adapter it applies.
    drop(ctx);
    drop(lora);
    Ok(rows)
}
