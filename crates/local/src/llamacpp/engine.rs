//! The llama.cpp worker thread: the model, its context, the KV cache and what it holds,
//! prompt evaluation with prefix reuse, sampling and the on-disk prompt cache.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::OnceLock;
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::{send_logs_to_tracing, LogOptions};
use tokio_util::sync::CancellationToken;

use super::adapter::Swap;
use super::prompt::{tokenize_prompt, Prompter};
use super::text_stream::TextStream;
use super::vocabulary::Vocabulary;
use super::{llama_error, load_error, ChatJob, Job, LlamaCppOptions, Loaded, WorkerEvent};
use crate::constraint::{Constraint, GrammarEnv};
use agent_llm::{
    CallStats, ChatMessage, ChatResponse, FinishReason, LlmError, PromptProgress, SamplingDefaults, SamplingParams,
    ToolDefinition,
};
use agent_protocol::TokenUsage;

/// llama.cpp's "pick a random seed" value (`LLAMA_DEFAULT_SEED`).
const LLAMA_DEFAULT_SEED: u32 = 0xFFFF_FFFF;

/// The only sequence the worker uses; one conversation lives in the KV cache at a time.
const SEQ: i32 = 0;

/// Tokens handed to one `llama_decode` call while evaluating a prompt. Cancellation is
/// checked between chunks, so this also bounds how long a cancel waits during a long
/// prompt (512 tokens is about two seconds on a 2-core machine for a 135M model).
const PROMPT_CHUNK: usize = 512;

/// A call must evaluate at least this many prompt tokens from an empty cache before its
/// prompt is written to the on-disk prompt cache; shorter prompts are cheaper to redo.
const DISK_CACHE_MIN_TOKENS: usize = 256;

/// The process-wide llama.cpp backend. llama.cpp may be initialised once per process, and
/// keeping it for the whole process lets several models load one after another.
pub(super) fn llama_backend() -> Result<&'static LlamaBackend, LlmError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // llama.cpp logs to stderr by default, which would tear through the terminal UI;
            // route it into tracing so `--verbose` still shows it.
            send_logs_to_tracing(LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| LlmError::Other(format!("cannot initialise llama.cpp: {e}")))
}

/// The worker thread: loads the model, then serves jobs until the backend is dropped.
pub(super) fn worker(
    path: PathBuf,
    opts: LlamaCppOptions,
    ready: std_mpsc::Sender<Result<Loaded, LlmError>>,
    jobs: std_mpsc::Receiver<Job>,
) {
    let backend = match llama_backend() {
        Ok(b) => b,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let model = match LlamaModel::load_from_file(backend, &path, &LlamaModelParams::default()) {
        Ok(m) => m,
        Err(e) => {
            // llama.cpp's own reason is a bare "null result"; say what is wrong.
            let why = match super::gguf_check::gguf_problem(&path) {
                Some(problem) => problem,
                None => format!("llama.cpp could not load it ({e}); its header and tensor table look sound, so the model's architecture may be one this llama.cpp does not support"),
            };
            let _ = ready.send(Err(load_error(&path, why)));
            return;
        }
    };
    // A model's training context can be far larger than a CPU session needs (and its KV
    // cache is allocated up front), so the default stops at 32k.
    let n_ctx = if opts.n_ctx == 0 { model.n_ctx_train().min(32_768) } else { opts.n_ctx };
    let threads = i32::try_from(opts.threads).unwrap_or(i32::MAX);
    // llama.cpp's `llama_flash_attn_type`: -1 auto, 0 disabled, 1 enabled (`llama-cpp-2`
    // does not re-export the constants).
    let flash_attention = match opts.flash_attention {
        None => -1,
        Some(false) => 0,
        Some(true) => 1,
    };
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(n_ctx))
        .with_n_batch(PROMPT_CHUNK as u32)
        .with_n_ubatch(PROMPT_CHUNK as u32)
        .with_n_threads(threads)
        .with_n_threads_batch(threads)
        .with_flash_attention_policy(flash_attention);
    let disk_cache = opts
        .prompt_cache_dir
        .as_deref()
        .map(|dir| disk_cache_file(dir, &path, opts.lora.as_deref(), opts.flash_attention));
    let mut ctx = match model.new_context(backend, params) {
        Ok(c) => c,
        Err(e) => {
            let _ = ready.send(Err(load_error(&path, format!("cannot create a context of {n_ctx} tokens: {e}"))));
            return;
        }
    };
    let mut lora = Swap::none();
    if let Some(adapter) = &opts.lora {
        if let Err(e) = lora.set(&model, &mut ctx, adapter) {
            let _ = ready.send(Err(e));
            return;
        }
    }
    let prompter = match Prompter::new(&model) {
        Ok(p) => p,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let native_tools = prompter.native_tools();
    let mut engine = Engine {
        model: &model,
        ctx,
        _lora: lora,
        prompter,
        sampling: opts.sampling,
        cached: Vec::new(),
        last_logits_index: 0,
        n_ctx,
        disk_cache,
        save_pending: false,
        grammar_env: None,
    };
    if ready.send(Ok(Loaded { n_ctx, native_tools })).is_err() {
        return;
    }
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Chat(job) => {
                let events = job.events.clone();
                let result = engine.run(&job);
                let _ = events.send(WorkerEvent::Done(Box::new(result)));
                if std::mem::take(&mut engine.save_pending) {
                    engine.save_disk_cache();
                }
            }
            Job::Detokenize { ids, reply } => {
                let _ = reply.send(Ok(engine.detokenize(&ids)));
            }
            Job::Render { request, reply } => {
                let _ = reply.send(engine.render(&request.messages, &request.tools));
            }
        }
    }
}

/// The model, its context and what the KV cache holds. Lives on the worker thread.
struct Engine<'m> {
    model: &'m LlamaModel,
    // Field order matters: the context is dropped before the adapter it applies.
    ctx: LlamaContext<'m>,
    /// The LoRA adapter applied to every call, if any.
    _lora: Swap<'m>,
    /// The chat templates.
    prompter: Prompter,
    /// Sampling where a request sets none.
    sampling: SamplingDefaults,
    /// The tokens whose keys and values sit in the KV cache at positions `0..len`.
    cached: Vec<LlamaToken>,
    /// Index, within the last evaluated batch, of the entry whose logits were kept.
    last_logits_index: i32,
    n_ctx: u32,
    /// The prompt-cache file of this model, when a prompt cache directory is set.
    disk_cache: Option<PathBuf>,
    /// Whether the last call's prompt should be written to the prompt cache.
    save_pending: bool,
    /// The vocabulary as llguidance sees it, built at the first constrained request.
    grammar_env: Option<GrammarEnv>,
}

/// Why the generation loop ended.
enum Ended {
    Eog,
    StopString,
    Length,
    Cancelled,
}

impl Engine<'_> {
    /// Serves one job: prompt, prefix reuse, generation with streaming.
    fn run(&mut self, job: &ChatJob) -> Result<(ChatResponse, CallStats), LlmError> {
        let started = Instant::now();
        let prompt = self.render(&job.messages, &job.tools)?;
        let prompt_tokens = self.tokenize_prompt(&prompt);
        if prompt_tokens.is_empty() {
            return Err(LlmError::Other("the rendered prompt is empty".into()));
        }
        let n_ctx = self.n_ctx as usize;
        if prompt_tokens.len() >= n_ctx {
            return Err(LlmError::ContextOverflow { prompt_tokens: prompt_tokens.len() as u64, context: n_ctx as u64 });
        }

        // Prefix reuse: keep the cached tokens this prompt starts with, evaluate the rest.
        // A fresh session has nothing cached yet, but may find its prompt on disk.
        let prompt_eval_start = Instant::now();
        let fresh = self.cached.is_empty();
        if fresh {
            self.load_disk_cache();
        }
        let reused = self.reuse_prefix(&prompt_tokens);
        let events = job.events.clone();
        let total = prompt_tokens.len() as u64;
        let mut on_progress = |done: usize| {
            let _ = events.send(WorkerEvent::PromptProgress(PromptProgress { evaluated: done as u64, total }));
        };
        let outcome = self.eval_prompt(&prompt_tokens, reused, &job.cancel, &mut on_progress);
        let prompt_eval = prompt_eval_start.elapsed();
        // Written by the worker after the reply is out, so the save never delays it.
        self.save_pending =
            fresh && matches!(outcome, Ok(true)) && prompt_tokens.len() - reused >= DISK_CACHE_MIN_TOKENS;
        let mut stats = CallStats {
            prompt_tokens: prompt_tokens.len() as u64,
            prompt_tokens_cached: Some(reused as u64),
            // What the KV cache gained, which is less than the uncached rest of the prompt
            // when a cancel stopped the evaluation between chunks.
            prompt_tokens_computed: Some(self.cached.len().saturating_sub(reused) as u64),
            prompt_eval,
            ..CallStats::default()
        };
        let prompt_ids = Some(prompt_tokens.iter().map(|t| token_id(*t)).collect::<Vec<_>>());
        match outcome {
            Ok(true) => {}
            Ok(false) => {
                // Cancelled while the prompt was evaluated: nothing was generated.
                let response = ChatResponse {
                    text: String::new(),
                    finish_reason: FinishReason::Cancelled,
                    usage: TokenUsage { prompt_tokens: prompt_tokens.len() as u64, completion_tokens: 0 },
                    completion_token_ids: Some(Vec::new()),
                    prompt_token_ids: prompt_ids,
                    decode_tokens_per_sec: None,
                    tool_calls: Vec::new(),
                };
                return Ok((response, stats));
            }
            Err(e) => return Err(e),
        }

        let constraint = job.grammar.as_deref().and_then(|g| self.constraint(g));
        let mut sampler = sampler(&job.sampling, &self.sampling, self.model.n_vocab(), constraint);
        let mut stream = TextStream::new(&job.sampling.stop);
        let mut completion: Vec<LlamaToken> = Vec::new();
        let max_tokens = job.sampling.max_tokens.map(|n| n as usize).unwrap_or(usize::MAX);
        let mut batch = LlamaBatch::new(1, 1);
        // After the prompt, the logits to sample from belong to the prompt's last token,
        // which was the last entry of the last batch llama.cpp evaluated.
        let mut logits_at = self.last_logits_index;
        let mut piece = Vec::with_capacity(16);
        // A copy of the `&'m` model reference, so the vocabulary does not borrow `self`.
        let model = self.model;
        let vocab = model.vocab();
        let decode_start = Instant::now();
        let ended = loop {
            if job.cancel.is_cancelled() || job.events.is_closed() {
                break Ended::Cancelled;
            }
            let token = sampler.sample(&self.ctx, logits_at);
            if completion.is_empty() {
                stats.time_to_first_token = started.elapsed();
            }
            completion.push(token);
            if vocab.is_eog(token) {
                break Ended::Eog;
            }
            piece.clear();
            // `special = false`: control tokens render as nothing rather than leaking
            // template markup into the reply.
            vocab.token_to_piece_into(token, &mut piece, false, None);
            let (delta, hit_stop) = stream.push(&piece);
            if !delta.is_empty() {
                let _ = job.events.send(WorkerEvent::Delta(delta));
            }
            if hit_stop {
                break Ended::StopString;
            }
            if completion.len() >= max_tokens {
                break Ended::Length;
            }
            let pos = self.cached.len();
            if pos + 1 >= n_ctx {
                break Ended::Length;
            }
            batch.clear();
            let pos_i32 = i32::try_from(pos).map_err(|e| llama_error("place a token", e))?;
            batch.add(token, pos_i32, &[SEQ], true).map_err(|e| llama_error("fill a batch", e))?;
            if let Err(e) = self.ctx.decode(&mut batch) {
                // The cache may hold part of this step; forget it rather than trust it.
                self.clear_cache();
                return Err(llama_error("decode a token", e));
            }
            self.cached.push(token);
            logits_at = 0;
        };
        stats.decode = decode_start.elapsed();
        stats.completion_tokens = completion.len() as u64;
        let tail = stream.finish(matches!(ended, Ended::StopString));
        if !tail.is_empty() {
            let _ = job.events.send(WorkerEvent::Delta(tail));
        }
        let finish_reason = match ended {
            Ended::Eog | Ended::StopString => FinishReason::Stop,
            Ended::Length => FinishReason::Length,
            Ended::Cancelled => FinishReason::Cancelled,
        };
        let response = ChatResponse {
            text: stream.into_text(),
            finish_reason,
            usage: TokenUsage { prompt_tokens: prompt_tokens.len() as u64, completion_tokens: completion.len() as u64 },
            completion_token_ids: Some(completion.iter().map(|t| token_id(*t)).collect()),
            prompt_token_ids: prompt_ids,
            decode_tokens_per_sec: stats.decode_tokens_per_sec(),
            // Native calls stay in the text, as sampled (`<tool_call>…</tool_call>`): the
            // loop parses them there, and the history re-renders to the same tokens.
            tool_calls: Vec::new(),
        };
        Ok((response, stats))
    }

    /// The constraint of a reply's grammar; the vocabulary is read for llguidance once,
    /// at the first request that has a grammar.
    fn constraint(&mut self, grammar: &str) -> Option<Constraint> {
        if self.grammar_env.is_none() {
            let started = Instant::now();
            match Vocabulary::of(self.model, self.prompter.native_tools()).grammar_env() {
                Ok(env) => self.grammar_env = Some(env),
                Err(e) => {
                    tracing::warn!(
                        "cannot read the vocabulary for constrained sampling, so replies are sampled free: {e}"
                    );
                    return None;
                }
            }
            tracing::debug!(ms = started.elapsed().as_millis() as u64, "built the grammar environment");
        }
        self.grammar_env.as_ref()?.constraint(grammar)
    }

    /// The prompt text of a conversation (chat template, tools, generation opening).
    fn render(&self, messages: &[ChatMessage], tools: &[ToolDefinition]) -> Result<String, LlmError> {
        self.prompter.render(self.model, messages, tools)
    }

    fn tokenize_prompt(&self, prompt: &str) -> Vec<LlamaToken> {
        tokenize_prompt(self.model, prompt)
    }

    /// Drops the cached tokens that `prompt` does not start with and returns how many
    /// cached tokens it keeps.
    fn reuse_prefix(&mut self, prompt: &[LlamaToken]) -> usize {
        let mut keep = self.cached.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        // Sampling needs fresh logits, so at least the prompt's last token is evaluated
        // even when the whole prompt is cached (a repeated request).
        keep = keep.min(prompt.len().saturating_sub(1));
        if keep < self.cached.len() {
            let removed =
                u32::try_from(keep).ok().map(|p0| self.ctx.clear_kv_cache_seq(Some(SEQ as u32), Some(p0), None));
            match removed {
                Some(Ok(true)) => self.cached.truncate(keep),
                // Recurrent and some hybrid models cannot drop a tail of the cache; start over.
                _ => {
                    self.clear_cache();
                    keep = 0;
                }
            }
        }
        keep
    }

    /// Fills the empty KV cache from the prompt-cache file, if there is one. Any failure
    /// (no file, another llama.cpp version, a torn file) just leaves the cache empty.
    fn load_disk_cache(&mut self) {
        let Some(file) = self.disk_cache.clone() else { return };
        if !file.is_file() {
            return;
        }
        match self.ctx.state_seq_load_file(&file, SEQ, self.n_ctx as usize) {
            Ok((tokens, bytes)) => {
                tracing::debug!(tokens = tokens.len(), bytes, file = %file.display(), "loaded the llama.cpp prompt cache");
                self.cached = tokens;
            }
            Err(e) => {
                tracing::debug!(file = %file.display(), "cannot load the llama.cpp prompt cache: {e}");
                self.clear_cache();
            }
        }
    }

    /// Writes the cached tokens (the prompt, and the reply generated after it) and their KV
    /// cache to the prompt-cache file; a later session reuses whatever prefix it shares.
    /// Written to a temporary name first, so that a session starting meanwhile never reads
    /// half a file.
    fn save_disk_cache(&mut self) {
        let Some(file) = self.disk_cache.clone() else { return };
        if let Some(dir) = file.parent() {
            if let Err(e) = std::fs::create_dir_all(dir) {
                tracing::debug!(dir = %dir.display(), "cannot create the prompt cache directory: {e}");
                return;
            }
        }
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        let saved = self.ctx.state_seq_save_file(&tmp, SEQ, &self.cached);
        match saved.map_err(|e| e.to_string()).and_then(|_| std::fs::rename(&tmp, &file).map_err(|e| e.to_string())) {
            Ok(()) => {
                tracing::debug!(tokens = self.cached.len(), file = %file.display(), "saved the llama.cpp prompt cache")
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                tracing::debug!(file = %file.display(), "cannot save the llama.cpp prompt cache: {e}");
            }
        }
    }

    /// The text of token ids, special tokens printed as their text.
    fn detokenize(&self, ids: &[u32]) -> String {
        let vocab = self.model.vocab();
        let mut bytes = Vec::new();
        let mut piece = Vec::with_capacity(16);
        for &id in ids {
            piece.clear();
            let token = LlamaToken(i32::try_from(id).unwrap_or(i32::MAX));
            vocab.token_to_piece_into(token, &mut piece, true, None);
            bytes.extend_from_slice(&piece);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn clear_cache(&mut self) {
        self.ctx.clear_kv_cache();
        self.cached.clear();
    }

    /// Evaluates `prompt[start..]` in chunks. Returns `Ok(false)` when cancelled between
    /// chunks (the evaluated part stays cached and is reused by the next call).
    fn eval_prompt(
        &mut self,
        prompt: &[LlamaToken],
        start: usize,
        cancel: &CancellationToken,
        on_progress: &mut dyn FnMut(usize),
    ) -> Result<bool, LlmError> {
        let mut batch = LlamaBatch::new(PROMPT_CHUNK, 1);
        let mut pos = start;
        on_progress(pos);
        while pos < prompt.len() {
            if cancel.is_cancelled() {
                return Ok(false);
            }
            let end = (pos + PROMPT_CHUNK).min(prompt.len());
            batch.clear();
            for (i, token) in prompt[pos..end].iter().enumerate() {
                let p = i32::try_from(pos + i).map_err(|e| llama_error("place a token", e))?;
                // Only the prompt's last token needs logits: it is what the first sample reads.
                let last = pos + i + 1 == prompt.len();
                batch.add(*token, p, &[SEQ], last).map_err(|e| llama_error("fill a batch", e))?;
            }
            if let Err(e) = self.ctx.decode(&mut batch) {
                self.clear_cache();
                return Err(llama_error("evaluate the prompt", e));
            }
            self.cached.extend_from_slice(&prompt[pos..end]);
            self.last_logits_index = batch.n_tokens() - 1;
            pos = end;
            on_progress(pos);
        }
        Ok(true)
    }
}

/// Tokens the repeat penalty looks back over (llama.cpp's default `repeat_last_n`).
const PENALTY_LAST_N: i32 = 64;

/// Builds the sampler chain: the grammar first (when the request has one), then greedy
/// for temperature 0, else a repeat penalty (when one is set), top-k, top-p, temperature
/// and a seeded draw, in llama.cpp's own order. A request's fields win, then the model's
/// defaults (a built-in model's recommended sampling), then llama.cpp's (top-k 40, top-p
/// 0.95, temperature 0.8, no penalty), which suit small local models better than the
/// OpenAI default of 1. The grammar masks the whole vocabulary before top-k, so the
/// candidates are the best of what the grammar allows.
fn sampler(
    s: &SamplingParams,
    defaults: &SamplingDefaults,
    n_vocab: i32,
    constraint: Option<Constraint>,
) -> LlamaSampler {
    let grammar = constraint.map(|c| LlamaSampler::from(c.into_matcher()));
    let temperature = s.temperature.or(defaults.temperature).unwrap_or(0.8);
    if temperature <= 0.0 {
        return match grammar {
            Some(grammar) => LlamaSampler::chain_simple([grammar, LlamaSampler::greedy()]),
            None => LlamaSampler::greedy(),
        };
    }
    let top_k = s.top_k.or(defaults.top_k).map(|k| i32::try_from(k).unwrap_or(i32::MAX)).unwrap_or(40);
    let top_p = s.top_p.or(defaults.top_p).unwrap_or(0.95);
    // llama.cpp seeds are 32-bit; fold the 64-bit seed so both halves count.
    let seed = s.seed.map(|x| (x ^ (x >> 32)) as u32).unwrap_or(LLAMA_DEFAULT_SEED);
    let mut chain = Vec::with_capacity(6);
    chain.extend(grammar);
    if let Some(penalty) = defaults.repeat_penalty.filter(|p| *p != 1.0) {
        chain.push(LlamaSampler::penalties(n_vocab, PENALTY_LAST_N, penalty, 0.0, 0.0));
    }
    chain.extend([
        LlamaSampler::top_k(top_k),
        LlamaSampler::top_p(top_p, 1),
        LlamaSampler::temp(temperature),
        LlamaSampler::dist(seed),
    ]);
    LlamaSampler::chain_simple(chain)
}

/// The prompt-cache file for a model. The name changes with anything that makes a saved
/// KV cache unusable: the model file (path, size, modification time), the flash-attention
/// setting (it changes the V-cache layout) and the llama.cpp bindings version.
fn disk_cache_file(dir: &Path, model: &Path, lora: Option<&Path>, flash_attention: Option<bool>) -> PathBuf {
    let stamp = |file: &Path| {
        let meta = std::fs::metadata(file).ok();
        let size = meta.as_ref().map_or(0, std::fs::Metadata::len);
        let mtime = meta
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        format!("{}|{size}|{mtime}", file.display())
    };
    // An adapter changes every cached key and value, so it is part of the name.
    let adapter = lora.map(stamp).unwrap_or_default();
    let key = format!("{}|{adapter}|{flash_attention:?}|llama-cpp-2 0.1.160", stamp(model));
    // FNV-1a: stable across Rust versions, unlike `DefaultHasher`.
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let stem = model.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
    dir.join(format!("{stem}-{hash:016x}.kv"))
}

fn token_id(t: LlamaToken) -> u32 {
    // Token ids are never negative; a negative one would be a llama.cpp bug, shown as 0.
    u32::try_from(t.0).unwrap_or(0)
}
