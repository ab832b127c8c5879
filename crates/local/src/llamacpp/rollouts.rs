//! Token-in/token-out generation for training rollouts on llama.cpp: the quantised base
//! stays loaded, the trainer's LoRA adapter is set on it after every update, and many
//! rollouts decode together.
//!
//! One worker thread owns the model and a context with one KV sequence per slot in a
//! unified cache. A rollout keeps its slot between turns (its next prompt extends the
//! last one, so only the new tokens are computed), and a new rollout whose prompt starts
//! like another slot's cached tokens (the shared system prompt and task) gets those cells
//! copied from that slot instead of computed again. Every running rollout advances one
//! token per `llama_decode`. The caller picks each token from the logits
//! ([`TokenChooser`]), so the sampled ids and their log-probabilities are the caller's own,
//! exactly.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::thread;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use tokio::sync::oneshot;

use super::adapter::Swap;
use super::engine::llama_backend;
use super::prompt::{tokenize_prompt, Prompter};
use super::vocabulary::{PromptText, Vocabulary};
use super::{llama_error, load_error};
use agent_llm::LlmError;

/// Picks the next token from one position's logits.
pub trait TokenChooser: Send {
    /// The chosen id and its log-probability under the policy the caller trains.
    fn choose(&mut self, logits: &[f32]) -> (u32, f32);
}

/// One generation: a whole prompt (the slot's cached prefix is reused), and how to end.
pub struct TokenRequest {
    /// The rollout this turn belongs to: its slot and KV cells are kept for the next turn.
    pub session: u64,
    pub prompt: Vec<u32>,
    pub max_new_tokens: usize,
    /// Ids that end generation (included in the output).
    pub stop: Vec<u32>,
    /// Polled between tokens; a set flag ends generation.
    pub cancel: Arc<AtomicBool>,
    pub chooser: Box<dyn TokenChooser>,
    pub reply: oneshot::Sender<Result<TokenReply, LlmError>>,
}

/// What a request generated.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenReply {
    pub ids: Vec<u32>,
    pub logp: Vec<f32>,
    /// A stop id ended it (otherwise the length limit, the context or a cancel).
    pub stopped: bool,
    /// Prompt tokens computed, not reused from this slot's or another slot's cells.
    pub computed_prompt_tokens: usize,
}

/// How the rollout engine is sized.
#[derive(Debug, Clone)]
pub struct RolloutEngineOptions {
    /// Rollouts decoded together (KV sequences).
    pub sequences: u32,
    /// The most tokens (prompt and reply) one rollout may hold; 0 takes the model's
    /// training context, at most 16,384.
    pub context_per_sequence: u32,
    /// CPU threads; 0 uses every core.
    pub threads: u32,
}

enum Job {
    Generate(Box<TokenRequest>),
    Close(u64),
    /// Sets the adapter (`None`: the base alone) once nothing is running; every cached
    /// cell is dropped, since it was computed by the previous policy.
    Adapter {
        path: Option<PathBuf>,
        reply: oneshot::Sender<Result<(), LlmError>>,
    },
    /// The prompt tokens of a chat (rendered by the model's template) or a raw text.
    Prepare {
        prompt: PromptText,
        reply: oneshot::Sender<Result<Vec<u32>, LlmError>>,
    },
    /// The vocabulary's pieces, for turning sampled ids into text away from the worker.
    Vocab {
        reply: oneshot::Sender<Result<Arc<Vocabulary>, LlmError>>,
    },
}

/// A llama.cpp model serving rollouts (see the module docs).
pub struct LlamaRollouts {
    jobs: std_mpsc::Sender<Job>,
    context_per_sequence: u32,
    sequences: u32,
}

impl LlamaRollouts {
    /// Loads the GGUF base model; blocks while llama.cpp maps it.
    pub fn start(path: &Path, opts: &RolloutEngineOptions) -> Result<Self, LlmError> {
        if !path.is_file() {
            return Err(load_error(path, "no such file"));
        }
        let mut opts = opts.clone();
        if opts.threads == 0 {
            opts.threads = thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1);
        }
        opts.sequences = opts.sequences.max(1);
        let (jobs, job_rx) = std_mpsc::channel();
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let worker_path = path.to_path_buf();
        let worker_opts = opts.clone();
        thread::Builder::new()
            .name("llama.cpp rollouts".into())
            .spawn(move || worker(&worker_path, &worker_opts, ready_tx, job_rx))
            .map_err(|e| LlmError::Other(format!("cannot start the llama.cpp rollout thread: {e}")))?;
        let context_per_sequence =
            ready_rx.recv().map_err(|_| load_error(path, "the llama.cpp rollout thread stopped while loading"))??;
        Ok(LlamaRollouts { jobs, context_per_sequence, sequences: opts.sequences })
    }

    /// Requests decoded together.
    pub fn sequences(&self) -> u32 {
        self.sequences
    }

    /// The prompt tokens of `prompt`, as this model renders and tokenizes it.
    pub async fn prepare(&self, prompt: PromptText) -> Result<Vec<u32>, LlmError> {
        let (reply, answer) = oneshot::channel();
        self.jobs.send(Job::Prepare { prompt, reply }).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }

    /// The model's vocabulary (see [`Vocabulary`]).
    pub async fn vocabulary(&self) -> Result<Arc<Vocabulary>, LlmError> {
        let (reply, answer) = oneshot::channel();
        self.jobs.send(Job::Vocab { reply }).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }

    /// The most tokens one rollout may hold.
    pub fn context_per_sequence(&self) -> u32 {
        self.context_per_sequence
    }

    /// Queues a request; the answer arrives on its `reply` channel.
    pub fn submit(&self, request: TokenRequest) -> Result<(), LlmError> {
        self.jobs.send(Job::Generate(Box::new(request))).map_err(|_| gone())
    }

    /// The rollout is over: its slot may be given to another (its cells stay for sharing).
    pub fn close(&self, session: u64) {
        let _ = self.jobs.send(Job::Close(session));
    }

    /// Serves later requests with the adapter in `path` (a llama.cpp LoRA GGUF), or the
    /// base alone; waits for the running requests to end first.
    pub async fn set_adapter(&self, path: Option<&Path>) -> Result<(), LlmError> {
        let (reply, answer) = oneshot::channel();
        self.jobs.send(Job::Adapter { path: path.map(Path::to_path_buf), reply }).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

fn gone() -> LlmError {
    LlmError::Other("the llama.cpp rollout thread has stopped (see the log for the cause)".into())
}

/// An adapter to set once nothing runs, and who waits for it.
type AdapterChange = (Option<PathBuf>, oneshot::Sender<Result<(), LlmError>>);

/// A running request.
struct Active {
    req: Box<TokenRequest>,
    out: TokenReply,
    /// Sampled but not yet in the cache: the next decode step feeds it.
    next: LlamaToken,
}

/// One KV sequence.
#[derive(Default)]
struct Slot {
    /// The rollout that owns it, until closed.
    session: Option<u64>,
    /// The tokens whose cells this sequence holds at positions `0..len`.
    tokens: Vec<LlamaToken>,
    active: Option<Active>,
    /// When it was last given a request (for choosing which idle slot to reuse).
    used: u64,
}

struct Worker<'m> {
    model: &'m LlamaModel,
    // Field order matters: the context is dropped before the adapter it applies.
    ctx: LlamaContext<'m>,
    adapter: Swap<'m>,
    slots: Vec<Slot>,
    waiting: VecDeque<Box<TokenRequest>>,
    adapter_change: Option<AdapterChange>,
    per_sequence: usize,
    clock: u64,
    /// Index, in the last prompt batch, of the entry whose logits were kept.
    last_index: i32,
    /// The chat templates, read on the first chat prompt (training renders its own).
    prompter: Option<Prompter>,
}

/// Tokens per `llama_decode` while prompts are computed.
const PROMPT_CHUNK: usize = 512;

/// The most tokens a sequence holds when the caller leaves it to the model.
const DEFAULT_CONTEXT_PER_SEQUENCE: u32 = 16_384;

fn worker(
    path: &Path,
    opts: &RolloutEngineOptions,
    ready: std_mpsc::Sender<Result<u32, LlmError>>,
    jobs: std_mpsc::Receiver<Job>,
) {
    let setup = || -> Result<(LlamaModel, LlamaContextParams, u32), LlmError> {
        let backend = llama_backend()?;
        let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default())
            .map_err(|e| load_error(path, format!("llama.cpp could not load it: {e}")))?;
        let per_sequence = match opts.context_per_sequence {
            0 => model.n_ctx_train().clamp(1, DEFAULT_CONTEXT_PER_SEQUENCE),
            n => n,
        };
        let n_ctx = opts.sequences.saturating_mul(per_sequence);
        let threads = i32::try_from(opts.threads).unwrap_or(i32::MAX);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(PROMPT_CHUNK as u32)
            .with_n_ubatch(PROMPT_CHUNK as u32)
            .with_n_seq_max(opts.sequences)
            // One pool of cells for every sequence: a copied prefix shares its cells.
            .with_kv_unified(true)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        Ok((model, params, per_sequence))
    };
    let (model, params, per_sequence) = match setup() {
        Ok(x) => x,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let ctx = match llama_backend().and_then(|b| {
        model.new_context(b, params).map_err(|e| load_error(path, format!("cannot create the rollout context: {e}")))
    }) {
        Ok(c) => c,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut w = Worker {
        model: &model,
        ctx,
        adapter: Swap::none(),
        slots: (0..opts.sequences).map(|_| Slot::default()).collect(),
        waiting: VecDeque::new(),
        adapter_change: None,
        per_sequence: per_sequence as usize,
        clock: 0,
        last_index: 0,
        prompter: None,
    };
    if ready.send(Ok(per_sequence)).is_err() {
        return;
    }
    loop {
        // Block for work only when nothing runs; otherwise take what has arrived and go on.
        let busy = w.running() > 0 || !w.waiting.is_empty() || w.adapter_change.is_some();
        let first = if busy {
            match jobs.try_recv() {
                Ok(job) => Some(job),
                Err(std_mpsc::TryRecvError::Empty) => None,
                Err(std_mpsc::TryRecvError::Disconnected) => return,
            }
        } else {
            match jobs.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            }
        };
        if let Some(job) = first {
            w.take(job);
            while let Ok(job) = jobs.try_recv() {
                w.take(job);
            }
        }
        if w.adapter_change.is_some() && w.running() == 0 {
            w.change_adapter();
        }
        if w.adapter_change.is_none() {
            w.admit();
        }
        w.step();
    }
}

impl<'m> Worker<'m> {
    fn running(&self) -> usize {
        self.slots.iter().filter(|s| s.active.is_some()).count()
    }

    fn take(&mut self, job: Job) {
        match job {
            Job::Generate(req) => self.waiting.push_back(req),
            // A slot still decoding for a closed rollout (its caller went away) is freed
            // when that request ends; its cells stay for sharing either way.
            Job::Close(session) => {
                for slot in self.slots.iter_mut().filter(|s| s.session == Some(session)) {
                    slot.session = None;
                }
            }
            Job::Adapter { path, reply } => {
                if let Some((_, earlier)) = self.adapter_change.replace((path, reply)) {
                    let _ = earlier.send(Err(LlmError::Other("replaced by a later adapter".into())));
                }
            }
            Job::Prepare { prompt, reply } => {
                let _ = reply.send(self.prepare(prompt));
            }
            Job::Vocab { reply } => {
                let _ = reply.send(self.vocabulary().map(Arc::new));
            }
        }
    }

    fn prompter(&mut self) -> Result<&Prompter, LlmError> {
        if self.prompter.is_none() {
            self.prompter = Some(Prompter::new(self.model)?);
        }
        self.prompter.as_ref().ok_or_else(|| LlmError::Other("the chat template could not be read".into()))
    }

    fn prepare(&mut self, prompt: PromptText) -> Result<Vec<u32>, LlmError> {
        let model = self.model;
        let text = match prompt {
            PromptText::Chat { messages, tools, prefill } => {
                let mut text = self.prompter()?.render(model, &messages, &tools)?;
                text.push_str(&prefill);
                text
            }
            PromptText::Text(text) => text,
        };
        Ok(tokenize_prompt(model, &text).iter().map(|t| t.0.max(0) as u32).collect())
    }

    fn vocabulary(&mut self) -> Result<Vocabulary, LlmError> {
        let native_tools = self.prompter()?.native_tools();
        Ok(Vocabulary::of(self.model, native_tools))
    }

    fn change_adapter(&mut self) {
        let Some((path, reply)) = self.adapter_change.take() else { return };
        let model = self.model;
        let result = match &path {
            Some(p) => self.adapter.set(model, &mut self.ctx, p),
            None => self.adapter.clear(&mut self.ctx),
        };
        // Every cell was computed by the previous policy.
        self.ctx.clear_kv_cache();
        for slot in &mut self.slots {
            slot.tokens.clear();
        }
        let _ = reply.send(result);
    }

    /// Gives waiting requests to free slots and computes their prompts. A rollout's next
    /// turn is never held behind a new rollout that waits for a slot.
    fn admit(&mut self) {
        let mut still = VecDeque::new();
        while let Some(req) = self.waiting.pop_front() {
            match self.free_slot(&req) {
                Some(s) => self.start(s, req),
                None => still.push_back(req),
            }
        }
        self.waiting = still;
    }

    /// The slot for `req`: its own rollout's, else the unowned idle slot whose cells it can
    /// reuse most of (the one idle longest among equals), else the idle slot of another
    /// rollout between turns, longest idle first (that rollout's next turn computes its
    /// prompt again). `None` only while every slot is decoding.
    fn free_slot(&self, req: &TokenRequest) -> Option<usize> {
        let prompt = to_tokens(&req.prompt);
        if let Some(i) = self.slots.iter().position(|s| s.active.is_none() && s.session == Some(req.session)) {
            return Some(i);
        }
        let unowned = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.active.is_none() && s.session.is_none())
            .max_by_key(|(_, s)| (common(&s.tokens, &prompt), u64::MAX - s.used))
            .map(|(i, _)| i);
        unowned.or_else(|| {
            self.slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.active.is_none())
                .min_by_key(|(_, s)| s.used)
                .map(|(i, _)| i)
        })
    }

    /// Starts `req` on slot `s`: reuse, copy or compute its prompt, then sample its first token.
    fn start(&mut self, s: usize, req: Box<TokenRequest>) {
        let prompt = to_tokens(&req.prompt);
        if prompt.is_empty() || prompt.len() >= self.per_sequence {
            let _ = req.reply.send(Err(LlmError::ContextOverflow {
                prompt_tokens: prompt.len() as u64,
                context: self.per_sequence as u64,
            }));
            return;
        }
        self.clock += 1;
        self.slots[s].used = self.clock;
        self.slots[s].session = Some(req.session);
        // At least the prompt's last token is computed: its logits give the first sample.
        let limit = prompt.len() - 1;
        let own = common(&self.slots[s].tokens, &prompt).min(limit);
        let donor = (0..self.slots.len())
            .filter(|&j| j != s)
            .map(|j| (j, common(&self.slots[j].tokens, &prompt).min(limit)))
            .max_by_key(|&(_, n)| n)
            .filter(|&(_, n)| n > own);
        let seq = s as i32;
        let kept = match donor {
            Some((j, n)) => {
                let copied = matches!(self.ctx.clear_kv_cache_seq(Some(s as u32), None, None), Ok(true))
                    && self.ctx.kv_cache_seq_cp(j as i32, seq, Some(0), u32::try_from(n).ok()).is_ok();
                if copied {
                    self.slots[s].tokens = prompt[..n].to_vec();
                    n
                } else {
                    self.forget(s);
                    0
                }
            }
            None => {
                if matches!(self.ctx.clear_kv_cache_seq(Some(s as u32), u32::try_from(own).ok(), None), Ok(true)) {
                    self.slots[s].tokens.truncate(own);
                    own
                } else {
                    self.forget(s);
                    0
                }
            }
        };
        if let Err(e) = self.compute_prompt(s, &prompt[kept..]) {
            self.forget(s);
            let _ = req.reply.send(Err(e));
            return;
        }
        let mut out = TokenReply {
            ids: Vec::new(),
            logp: Vec::new(),
            stopped: false,
            computed_prompt_tokens: prompt.len() - kept,
        };
        let mut req = req;
        let (id, logp) = req.chooser.choose(self.ctx.get_logits_ith(self.last_index));
        out.ids.push(id);
        out.logp.push(logp);
        let active = Active { req, out, next: LlamaToken(id as i32) };
        self.settle(s, active);
    }

    /// Ends the request if its last token ends it, else keeps it running.
    fn settle(&mut self, s: usize, mut a: Active) {
        let last = a.out.ids.last().copied().unwrap_or(0);
        let stopped = a.req.stop.contains(&last);
        let full = a.out.ids.len() >= a.req.max_new_tokens || self.slots[s].tokens.len() + 1 >= self.per_sequence;
        if stopped || full || a.req.cancel.load(Ordering::Relaxed) || a.req.reply.is_closed() {
            a.out.stopped = stopped;
            let _ = a.req.reply.send(Ok(a.out));
            self.slots[s].active = None;
        } else {
            self.slots[s].active = Some(a);
        }
    }

    /// Drops a slot's cells.
    fn forget(&mut self, s: usize) {
        let _ = self.ctx.clear_kv_cache_seq(Some(s as u32), None, None);
        self.slots[s].tokens.clear();
    }

    /// Computes `rest` after the slot's cached tokens; the logits of its last token are
    /// left at `self.last_index`.
    fn compute_prompt(&mut self, s: usize, rest: &[LlamaToken]) -> Result<(), LlmError> {
        let mut batch = LlamaBatch::new(PROMPT_CHUNK, 1);
        for (c, chunk) in rest.chunks(PROMPT_CHUNK).enumerate() {
            batch.clear();
            let start = self.slots[s].tokens.len();
            let last_chunk = (c + 1) * PROMPT_CHUNK >= rest.len();
            for (i, t) in chunk.iter().enumerate() {
                let pos = i32::try_from(start + i).map_err(|e| llama_error("place a token", e))?;
                let wants_logits = last_chunk && i + 1 == chunk.len();
                batch.add(*t, pos, &[s as i32], wants_logits).map_err(|e| llama_error("fill a batch", e))?;
            }
            self.ctx.decode(&mut batch).map_err(|e| llama_error("compute a rollout's prompt", e))?;
            self.slots[s].tokens.extend_from_slice(chunk);
            self.last_index = batch.n_tokens() - 1;
        }
        Ok(())
    }

    /// Feeds every running request's last token in one decode and samples the next.
    fn step(&mut self) {
        let running: Vec<usize> = (0..self.slots.len()).filter(|&s| self.slots[s].active.is_some()).collect();
        if running.is_empty() {
            return;
        }
        let mut batch = LlamaBatch::new(running.len(), 1);
        for &s in &running {
            let Some(a) = &self.slots[s].active else { continue };
            let pos = self.slots[s].tokens.len() as i32;
            if let Err(e) = batch.add(a.next, pos, &[s as i32], true) {
                self.fail(&running, llama_error("fill a batch", e));
                return;
            }
        }
        if let Err(e) = self.ctx.decode(&mut batch) {
            self.fail(&running, llama_error("decode the rollouts' next tokens", e));
            return;
        }
        for (i, &s) in running.iter().enumerate() {
            let Some(mut a) = self.slots[s].active.take() else { continue };
            self.slots[s].tokens.push(a.next);
            let (id, logp) = a.req.chooser.choose(self.ctx.get_logits_ith(i as i32));
            a.out.ids.push(id);
            a.out.logp.push(logp);
            a.next = LlamaToken(id as i32);
            self.settle(s, a);
        }
    }

    /// Ends the given running requests with `err`; their cells are dropped.
    fn fail(&mut self, slots: &[usize], err: LlmError) {
        for &s in slots {
            if let Some(a) = self.slots[s].active.take() {
                let _ = a.req.reply.send(Err(LlmError::Other(err.to_string())));
            }
            self.forget(s);
        }
    }
}

fn to_tokens(ids: &[u32]) -> Vec<LlamaToken> {
    ids.iter().map(|&t| LlamaToken(i32::try_from(t).unwrap_or(0))).collect()
}

/// Length of the common prefix.
fn common(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
