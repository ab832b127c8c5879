//! Local GGUF inference on the CPU through llama.cpp (the `llama-cpp-2` crate).
//!
//! mistral.rs decodes the built-in SmolLM2 GGUF several times slower than llama.cpp on
//! small CPUs, so GGUF files on the CPU run here while mistral.rs keeps safetensors models
//! and GPUs.
//!
//! llama.cpp calls block and its context is not `Sync`, so one worker thread owns the
//! model, the context and the KV cache, and serves requests one at a time from a queue:
//! the queue is the lock around the context. Each request streams its text back through a
//! tokio channel. The worker remembers which tokens sit in the KV cache, so a request that
//! extends the previous conversation (the normal agent loop: same system prompt and
//! history, new observation at the end) only evaluates the new suffix.

use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::Mutex;
use std::thread;

use async_trait::async_trait;
use tokio::sync::mpsc as tokio_mpsc;
use tokio_util::sync::CancellationToken;

use agent_llm::{
    CallStats, ChatMessage, ChatRequest, ChatResponse, LlmError, ModelBackend, PromptProgress, SamplingParams,
    ToolDefinition,
};

mod adapter;
mod choice;
mod engine;
mod gguf_check;
mod logits;
mod prompt;
mod rollouts;
mod server;
mod text_stream;
mod vocabulary;

pub use adapter::LORA_GGUF_FILE;
pub use logits::{reference_logits, reference_logits_of_ids};
pub use rollouts::{LlamaRollouts, RolloutEngineOptions, TokenChooser, TokenReply, TokenRequest};
pub use server::{LlamaServer, LlamaServerOptions};
pub use vocabulary::{PromptText, Vocabulary};

/// How a llama.cpp model is loaded; the default takes the model's own context (at most
/// 32,768), every core, llama.cpp's flash-attention choice and no prompt cache.
#[derive(Debug, Clone, Default)]
pub struct LlamaCppOptions {
    /// Context window in tokens; 0 takes the model's training context, at most 32,768.
    pub n_ctx: u32,
    /// CPU threads for decoding and prompt evaluation; 0 uses every available core.
    pub threads: u32,
    /// Flash attention: `None` lets llama.cpp decide (on for the CPU). On the CPU it
    /// speeds up prompts and short contexts, but slows decoding past ~2,000 tokens of
    /// context (measured on SmolLM2-135M, 2 cores: 22-27 vs 34-36 tokens/s at 4,000).
    pub flash_attention: Option<bool>,
    /// A directory for the prompt cache: the first long prompt of a session (the system
    /// prompt and the first instruction) is saved there with its KV cache, and the next
    /// session that starts with the same tokens loads it instead of evaluating them again.
    pub prompt_cache_dir: Option<PathBuf>,
    /// Sampling where a request sets none.
    pub sampling: agent_llm::SamplingDefaults,
    /// A LoRA adapter in llama.cpp's GGUF format, applied over the model (what `agent
    /// train` writes as `adapter-model.gguf`).
    pub lora: Option<PathBuf>,
}

/// A GGUF model running on the CPU through llama.cpp.
pub struct LlamaCppBackend {
    name: String,
    n_ctx: u32,
    native_tools: bool,
    jobs: std_mpsc::Sender<Job>,
    last_stats: Mutex<Option<CallStats>>,
    /// How far the call in flight is through its prompt (`None` once it generates).
    progress: Mutex<Option<PromptProgress>>,
}

impl std::fmt::Debug for LlamaCppBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaCppBackend").field("name", &self.name).field("n_ctx", &self.n_ctx).finish()
    }
}

/// Work for the worker thread, which owns the model.
enum Job {
    /// Generate a reply (boxed: it is much larger than the other jobs).
    Chat(Box<ChatJob>),
    /// The text of token ids (special tokens printed), for checking trajectories.
    Detokenize { ids: Vec<u32>, reply: tokio::sync::oneshot::Sender<Result<String, LlmError>> },
    /// The prompt a chat request renders to, for checking trajectories.
    Render { request: ChatRequest, reply: tokio::sync::oneshot::Sender<Result<String, LlmError>> },
}

/// One chat request on its way to the worker.
struct ChatJob {
    messages: Vec<ChatMessage>,
    tools: Vec<ToolDefinition>,
    sampling: SamplingParams,
    /// The grammar the reply must match (`ChatRequest::grammar`).
    grammar: Option<String>,
    cancel: CancellationToken,
    events: tokio_mpsc::UnboundedSender<WorkerEvent>,
}

/// What the worker sends back while it serves a job.
enum WorkerEvent {
    /// Prompt tokens in the KV cache so far (the reused prefix included), of the total.
    PromptProgress(PromptProgress),
    Delta(String),
    /// Boxed: a response is far larger than a text piece.
    Done(Box<Result<(ChatResponse, CallStats), LlmError>>),
}

/// What the worker reports once the model is loaded.
struct Loaded {
    n_ctx: u32,
    /// The GGUF's own chat template renders tools (Qwen2.5/Qwen3, Llama 3.x, ...).
    native_tools: bool,
}

impl LlamaCppBackend {
    /// Loads a `.gguf` file with a context of `n_ctx` tokens (0: the model's own) and
    /// `threads` CPU threads (0: all cores).
    ///
    /// This blocks while llama.cpp maps the file and allocates the KV cache; call it from
    /// `spawn_blocking` inside an async runtime.
    pub fn load(path: &Path, n_ctx: u32, threads: u32) -> Result<Self, LlmError> {
        Self::load_with(path, &LlamaCppOptions { n_ctx, threads, ..LlamaCppOptions::default() })
    }

    /// Loads a `.gguf` file with the given options; see [`Self::load`].
    pub fn load_with(path: &Path, opts: &LlamaCppOptions) -> Result<Self, LlmError> {
        if !path.is_file() {
            return Err(LlmError::UnknownSpec { spec: path.display().to_string(), hint: "no such GGUF file".into() });
        }
        let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "llama.cpp".into());
        let mut opts = opts.clone();
        if opts.threads == 0 {
            opts.threads = thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1);
        }
        let (jobs, job_rx) = std_mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = std_mpsc::channel::<Result<Loaded, LlmError>>();
        let worker_path = path.to_path_buf();
        thread::Builder::new()
            .name("llama.cpp".into())
            .spawn(move || engine::worker(worker_path, opts, ready_tx, job_rx))
            .map_err(|e| LlmError::Other(format!("cannot start the llama.cpp worker thread: {e}")))?;
        // The worker reports once; a closed channel means it died while loading (a panic).
        let loaded =
            ready_rx.recv().map_err(|_| load_error(path, "the llama.cpp worker stopped while loading the model"))??;
        Ok(Self {
            name,
            n_ctx: loaded.n_ctx,
            native_tools: loaded.native_tools,
            jobs,
            last_stats: Mutex::new(None),
            progress: Mutex::new(None),
        })
    }

    /// The context window in tokens.
    pub fn n_ctx(&self) -> u32 {
        self.n_ctx
    }

    /// The text of `ids` as the model's vocabulary spells them, special tokens included:
    /// a trajectory's prompt ids give back the rendered prompt, its completion ids the reply.
    pub async fn detokenize(&self, ids: Vec<u32>) -> Result<String, LlmError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.jobs.send(Job::Detokenize { ids, reply }).map_err(|_| worker_gone())?;
        answer.await.map_err(|_| worker_gone())?
    }

    /// The prompt text `request` renders to (chat template, tools, generation opening).
    pub async fn render_prompt(&self, request: &ChatRequest) -> Result<String, LlmError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.jobs.send(Job::Render { request: request.clone(), reply }).map_err(|_| worker_gone())?;
        answer.await.map_err(|_| worker_gone())?
    }
}

#[async_trait]
impl ModelBackend for LlamaCppBackend {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn context_window(&self) -> Option<u64> {
        Some(u64::from(self.n_ctx))
    }

    fn native_tools(&self) -> bool {
        self.native_tools
    }

    fn enforces_grammar(&self) -> bool {
        true
    }

    fn last_call_stats(&self) -> Option<CallStats> {
        self.last_stats.lock().ok().and_then(|s| *s)
    }

    fn prompt_progress(&self) -> Option<PromptProgress> {
        self.progress.lock().ok().and_then(|p| *p)
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn for<'s> FnMut(&'s str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        let (events, mut event_rx) = tokio_mpsc::unbounded_channel();
        let job = ChatJob {
            messages: request.messages.clone(),
            tools: request.tools.clone(),
            sampling: request.sampling.clone(),
            grammar: request.grammar.clone(),
            cancel: cancel.clone(),
            events,
        };
        self.jobs.send(Job::Chat(Box::new(job))).map_err(|_| worker_gone())?;
        // If this future is dropped, `event_rx` goes with it; the worker notices the closed
        // channel at its next token and stops as if cancelled.
        let set_progress = |p: Option<PromptProgress>| {
            if let Ok(mut slot) = self.progress.lock() {
                *slot = p;
            }
        };
        while let Some(event) = event_rx.recv().await {
            match event {
                WorkerEvent::PromptProgress(p) => set_progress(Some(p)),
                WorkerEvent::Delta(piece) => {
                    set_progress(None);
                    on_delta(&piece)
                }
                WorkerEvent::Done(result) => {
                    set_progress(None);
                    let (response, stats) = (*result)?;
                    if let Ok(mut last) = self.last_stats.lock() {
                        *last = Some(stats);
                    }
                    tracing::debug!(
                        prompt = stats.prompt_tokens,
                        cached = stats.prompt_tokens_cached.unwrap_or(0),
                        computed = stats.prompt_tokens_computed.unwrap_or(0),
                        completion = stats.completion_tokens,
                        prompt_tps = stats.prompt_tokens_per_sec(),
                        decode_tps = stats.decode_tokens_per_sec(),
                        ttft_ms = stats.time_to_first_token.as_millis() as u64,
                        "llama.cpp call finished"
                    );
                    return Ok(response);
                }
            }
        }
        Err(worker_gone())
    }
}

fn worker_gone() -> LlmError {
    LlmError::Other("the llama.cpp worker thread has stopped (see the log for the cause)".into())
}

fn load_error(path: &Path, reason: impl std::fmt::Display) -> LlmError {
    LlmError::Other(format!("cannot load the GGUF model at {}: {reason}", path.display()))
}

fn llama_error(what: &str, e: impl std::fmt::Display) -> LlmError {
    LlmError::Other(format!("llama.cpp failed to {what}: {e}"))
}
