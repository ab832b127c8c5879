//! Local inference through mistral.rs: a GGUF file or a safetensors directory, on CUDA
//! when built with the `cuda` feature and a GPU is present, else on the CPU.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mistralrs::{
    GgufModelBuilder, IsqType, Model, RequestBuilder, Response, TextMessageRole, TextModelBuilder, TokenSource,
};
use tokio_util::sync::CancellationToken;

use agent_llm::{
    estimate_tokens, CallStats, ChatRequest, ChatResponse, FinishReason, LlmError, LocalModelOptions, ModelBackend,
    Role, ToolCall,
};
use agent_protocol::TokenUsage;

/// A model running in this process through mistral.rs.
pub struct MistralRsBackend {
    model: Model,
    name: String,
    thinking: Option<bool>,
    /// The model's chat template declares tools.
    native_tools: bool,
    last_stats: Mutex<Option<CallStats>>,
    /// Ids of token-in requests, one per request.
    next_request: AtomicUsize,
    /// The longest sequence the model takes, as mistral.rs reads it from the model.
    max_sequence: Option<u64>,
}

fn load_error(path: &Path, e: impl std::fmt::Display) -> LlmError {
    LlmError::Other(format!("cannot load the model at {}: {}", path.display(), one_line(&e.to_string())))
}

fn one_line(s: &str) -> String {
    s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ")
}

impl MistralRsBackend {
    /// Loads a `.gguf` file or a directory holding `config.json` and safetensors, with
    /// no network access (no token, no hub).
    pub async fn load(path: &Path, opts: &LocalModelOptions) -> Result<Self, LlmError> {
        let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "local".into());
        let model = if path.is_file() {
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            let file = path.file_name().map(|f| f.to_string_lossy().to_string()).unwrap_or_default();
            let mut b = GgufModelBuilder::new(dir.to_string_lossy(), vec![file]).with_token_source(TokenSource::None);
            if opts.force_cpu {
                b = b.with_force_cpu();
            }
            b.build().await.map_err(|e| load_error(path, e))?
        } else if path.join("config.json").is_file() {
            let merged;
            let path = match &opts.lora {
                Some(adapter) => {
                    merged = merged_with_adapter(path, adapter)?;
                    merged.as_path()
                }
                None => path,
            };
            let mut b = TextModelBuilder::new(path.to_string_lossy()).with_token_source(TokenSource::None);
            if opts.force_cpu || !Self::gpu_available() {
                // mistral.rs would pick bf16, which is slower on CPUs and rounds the logits.
                b = b.with_dtype(mistralrs::ModelDType::F32);
            }
            if let Some(isq) = &opts.isq {
                b = b.with_isq(parse_isq(isq)?);
            }
            if opts.force_cpu {
                b = b.with_force_cpu();
            }
            b.build().await.map_err(|e| load_error(path, e))?
        } else {
            return Err(LlmError::UnknownSpec {
                spec: path.display().to_string(),
                hint: "a local model is a .gguf file or a directory with config.json and *.safetensors".into(),
            });
        };
        let max_sequence = model.max_sequence_length().ok().flatten().map(|n| n as u64);
        Ok(Self {
            model,
            max_sequence,
            name,
            thinking: opts.thinking,
            native_tools: path.is_dir() && template_declares_tools(path),
            last_stats: Mutex::new(None),
            next_request: AtomicUsize::new(0),
        })
    }

    /// The engine's raw next-token logits (f32, vocabulary-long) after `prompt`, a list of
    /// token ids fed as they are (no chat template): for checking other engines against it.
    pub async fn next_token_logits(&self, prompt: Vec<u32>) -> Result<Vec<f32>, LlmError> {
        let mut sampling = mistralrs::SamplingParams::deterministic();
        sampling.max_len = Some(1);
        let mut rx = self.send_tokens(prompt, sampling, true, None).await?;
        match rx.recv().await {
            Some(Response::Raw { logits_chunks, .. }) => {
                let last =
                    logits_chunks.last().ok_or_else(|| LlmError::Other("the engine returned no logits".into()))?;
                let last = last.to_dtype(mistralrs::DType::F32).map_err(|e| LlmError::Other(e.to_string()))?;
                let dims = last.dims().to_vec();
                let vocab = dims.last().copied().unwrap_or(0);
                let flat =
                    last.flatten_all().and_then(|t| t.to_vec1::<f32>()).map_err(|e| LlmError::Other(e.to_string()))?;
                Ok(flat[flat.len() - vocab..].to_vec())
            }
            other => Err(unexpected_response(other, "a raw-logits request")),
        }
    }

    /// Generates after `prompt` (token ids fed as they are, no chat template), choosing
    /// each token greedily from the logits `chooser` returns: the model runs in
    /// mistral.rs, while the caller decides every token and
    /// so knows the ids and their probabilities, which mistral.rs's responses do not carry.
    /// Generation ends after `max_new_tokens`, a token of `stop`, or an end-of-sequence
    /// token of the model.
    pub async fn generate_from_tokens(
        &self,
        prompt: Vec<u32>,
        max_new_tokens: usize,
        stop: &[u32],
        chooser: Arc<dyn mistralrs::CustomLogitsProcessor>,
    ) -> Result<TokenCompletion, LlmError> {
        let mut sampling = mistralrs::SamplingParams::deterministic();
        sampling.max_len = Some(max_new_tokens);
        if !stop.is_empty() {
            sampling.stop_toks = Some(mistralrs::StopTokens::Ids(stop.to_vec()));
        }
        let mut rx = self.send_tokens(prompt, sampling, false, Some(vec![chooser])).await?;
        match rx.recv().await {
            Some(Response::CompletionDone(done)) => Ok(TokenCompletion {
                completion_tokens: done.usage.completion_tokens,
                finish_reason: done.choices.first().map(|c| c.finish_reason.clone()).unwrap_or_default(),
            }),
            other => Err(unexpected_response(other, "a token-in completion")),
        }
    }

    /// Sends a request of raw token ids to the engine; its answers arrive on the receiver.
    async fn send_tokens(
        &self,
        prompt: Vec<u32>,
        sampling: mistralrs::SamplingParams,
        raw_logits: bool,
        logits_processors: Option<Vec<Arc<dyn mistralrs::CustomLogitsProcessor>>>,
    ) -> Result<tokio::sync::mpsc::Receiver<Response>, LlmError> {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let request = mistralrs::Request::Normal(Box::new(mistralrs::NormalRequest {
            messages: mistralrs::RequestMessage::CompletionTokens(prompt),
            sampling_params: sampling,
            response: tx,
            return_logprobs: false,
            is_streaming: false,
            id: self.next_request.fetch_add(1, Ordering::Relaxed),
            constraint: mistralrs::Constraint::None,
            suffix: None,
            tools: None,
            tool_choice: None,
            logits_processors,
            return_raw_logits: raw_logits,
            web_search_options: None,
            model_id: None,
            truncate_sequence: false,
        }));
        let sender = self.model.inner().get_sender(None).map_err(|e| LlmError::Other(e.to_string()))?;
        sender.send(request).await.map_err(|e| LlmError::Other(format!("the engine stopped: {e}")))?;
        Ok(rx)
    }

    /// Loads `repo` from the Hugging Face hub cache, downloading what is missing
    /// (`HF_HUB_OFFLINE=1` uses a filled cache with no network).
    pub async fn load_hub(repo: &str, revision: Option<&str>, opts: &LocalModelOptions) -> Result<Self, LlmError> {
        let mut b = TextModelBuilder::new(repo);
        if let Some(rev) = revision {
            b = b.with_hf_revision(rev);
        }
        if let Some(isq) = &opts.isq {
            b = b.with_isq(parse_isq(isq)?);
        }
        if opts.force_cpu {
            b = b.with_force_cpu();
        }
        let model = b.build().await.map_err(|e| load_error(Path::new(repo), e))?;
        let max_sequence = model.max_sequence_length().ok().flatten().map(|n| n as u64);
        Ok(Self {
            model,
            max_sequence,
            name: repo.to_string(),
            thinking: opts.thinking,
            native_tools: hub_snapshots(repo).iter().any(|dir| template_declares_tools(dir)),
            last_stats: Mutex::new(None),
            next_request: AtomicUsize::new(0),
        })
    }

    /// True when this build can use a GPU and one is present.
    pub fn gpu_available() -> bool {
        #[cfg(feature = "cuda")]
        {
            mistralrs::best_device(false).map(|d| d.is_cuda()).unwrap_or(false)
        }
        #[cfg(not(feature = "cuda"))]
        {
            false
        }
    }

    fn request(&self, request: &ChatRequest) -> RequestBuilder {
        let mut b = RequestBuilder::new();
        for m in &request.messages {
            let role = match m.role {
                Role::System => TextMessageRole::System,
                Role::User => TextMessageRole::User,
                Role::Assistant => TextMessageRole::Assistant,
                Role::Tool => TextMessageRole::Tool,
            };
            b = match (m.role, m.tool_call_id.as_deref()) {
                (Role::Tool, Some(id)) => b.add_tool_message(&m.content, id),
                // mistral.rs 0.8.1's `add_message_with_tool_call` files the calls under
                // `function`, where chat templates never look; the calls go back as the
                // Hermes-style text the model wrote instead (what Qwen templates print).
                _ if !m.tool_calls.is_empty() => {
                    let mut text = m.content.clone();
                    for c in &m.tool_calls {
                        let call = serde_json::json!({"name": c.name, "arguments": c.arguments});
                        text.push_str(&format!("\n<tool_call>\n{call}\n</tool_call>"));
                    }
                    b.add_message(role, text.trim_start())
                }
                _ => b.add_message(role, &m.content),
            };
        }
        if !request.tools.is_empty() {
            let tools = request
                .tools
                .iter()
                .map(|t| mistralrs::Tool {
                    tp: mistralrs::ToolType::Function,
                    function: mistralrs::Function {
                        description: Some(t.description.clone()),
                        name: t.name.clone(),
                        parameters: t
                            .parameters
                            .as_object()
                            .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
                    },
                })
                .collect();
            b = b.set_tools(tools).set_tool_choice(mistralrs::ToolChoice::Auto);
        }
        let s = &request.sampling;
        // The deterministic sampler resets every sampling field (the max length too), so
        // it goes first and everything else is set after it.
        if s.temperature.is_some_and(|t| t <= 0.0) {
            b = b.set_deterministic_sampler();
        } else if let Some(t) = s.temperature {
            b = b.set_sampler_temperature(f64::from(t));
        }
        if let Some(n) = s.max_tokens {
            // A client's `max_tokens: 4000000000` must not become the engine's budget: no
            // reply outgrows the model's sequence length.
            let n = self.max_sequence.map_or(u64::from(n), |m| u64::from(n).min(m));
            b = b.set_sampler_max_len(usize::try_from(n).unwrap_or(usize::MAX));
        }
        if let Some(p) = s.top_p {
            b = b.set_sampler_topp(f64::from(p));
        }
        if let Some(k) = s.top_k {
            b = b.set_sampler_topk(k as usize);
        }
        if !s.stop.is_empty() {
            b = b.set_sampler_stop_toks(mistralrs::StopTokens::Seqs(s.stop.clone()));
        }
        if let Some(t) = self.thinking {
            b = b.enable_thinking(t);
        }
        // mistral.rs compiles Lark with the same llguidance as the llama.cpp engine.
        if let Some(grammar) = &request.grammar {
            b = b.set_constraint(mistralrs::Constraint::Lark(grammar.clone()));
        }
        b
    }
}

/// What mistral.rs reports of a token-in generation.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenCompletion {
    /// Tokens it generated (the stop token included).
    pub completion_tokens: usize,
    /// `stop`, `length`, ... as the engine words it.
    pub finish_reason: String,
}

/// The error for an engine answer that is not the one a request expects.
fn unexpected_response(response: Option<Response>, what: &str) -> LlmError {
    match response {
        Some(Response::InternalError(e)) | Some(Response::ValidationError(e)) => {
            LlmError::Other(format!("mistral.rs failed: {}", one_line(&e.to_string())))
        }
        Some(Response::ModelError(e, _)) | Some(Response::CompletionModelError(e, _)) => {
            LlmError::Other(format!("the model failed while generating: {}", one_line(&e)))
        }
        Some(_) => LlmError::Other(format!("mistral.rs answered {what} with something else")),
        None => LlmError::Other("the engine closed the request".into()),
    }
}

fn parse_isq(s: &str) -> Result<IsqType, LlmError> {
    mistralrs::parse_isq_value(s, None).map_err(|e| LlmError::Other(format!("unknown ISQ type `{s}`: {e}")))
}

#[async_trait]
impl ModelBackend for MistralRsBackend {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn last_call_stats(&self) -> Option<CallStats> {
        self.last_stats.lock().ok().and_then(|s| *s)
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn for<'s> FnMut(&'s str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        let builder = self.request(request);
        let started = Instant::now();
        let mut stream =
            self.model.stream_chat_request(builder).await.map_err(|e| {
                LlmError::Other(format!("mistral.rs rejected the request: {}", one_line(&e.to_string())))
            })?;
        let mut text = String::new();
        let mut tool_calls: Vec<ToolCall> = Vec::new();
        let mut usage = None;
        let mut finish = FinishReason::Other;
        let mut first_token: Option<Instant> = None;
        let mut decode_speed = None;
        // mistral.rs reports its own prompt and completion times with the final usage.
        let mut engine_times: Option<(f32, f32)> = None;
        loop {
            // Dropping the stream makes the engine cancel the sequence at its next step.
            let next = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    finish = FinishReason::Cancelled;
                    break;
                }
                next = stream.next() => next,
            };
            match next {
                Some(Response::Chunk(chunk)) => {
                    if let Some(u) = &chunk.usage {
                        usage = Some(TokenUsage {
                            prompt_tokens: u.prompt_tokens as u64,
                            completion_tokens: u.completion_tokens as u64,
                        });
                        decode_speed = Some(f64::from(u.avg_compl_tok_per_sec));
                        engine_times = Some((u.total_prompt_time_sec, u.total_completion_time_sec));
                    }
                    for choice in &chunk.choices {
                        if let Some(piece) = choice.delta.content.as_deref().filter(|p| !p.is_empty()) {
                            first_token.get_or_insert_with(Instant::now);
                            text.push_str(piece);
                            on_delta(piece);
                        }
                        for call in choice.delta.tool_calls.iter().flatten() {
                            tool_calls.push(ToolCall {
                                id: call.id.clone(),
                                name: call.function.name.clone(),
                                arguments: serde_json::from_str(&call.function.arguments)
                                    .unwrap_or_else(|_| serde_json::Value::String(call.function.arguments.clone())),
                            });
                        }
                        if let Some(reason) = &choice.finish_reason {
                            finish = match reason.as_str() {
                                "stop" => FinishReason::Stop,
                                "length" => FinishReason::Length,
                                "canceled" | "cancelled" => FinishReason::Cancelled,
                                _ => FinishReason::Other,
                            };
                        }
                    }
                    if chunk.choices.iter().any(|c| c.finish_reason.is_some()) && usage.is_some() {
                        break;
                    }
                }
                Some(Response::Done(done)) => {
                    usage = Some(TokenUsage {
                        prompt_tokens: done.usage.prompt_tokens as u64,
                        completion_tokens: done.usage.completion_tokens as u64,
                    });
                    engine_times = Some((done.usage.total_prompt_time_sec, done.usage.total_completion_time_sec));
                    break;
                }
                Some(Response::ModelError(msg, _)) | Some(Response::CompletionModelError(msg, _)) => {
                    return Err(LlmError::Other(format!("the model failed while generating: {}", one_line(&msg))))
                }
                Some(Response::InternalError(e)) | Some(Response::ValidationError(e)) => {
                    return Err(LlmError::Other(format!("mistral.rs failed: {}", one_line(&e.to_string()))))
                }
                Some(_) => {}
                None => break,
            }
        }
        drop(stream);
        let usage = usage.unwrap_or_else(|| TokenUsage {
            prompt_tokens: request.messages.iter().map(|m| estimate_tokens(&m.content)).sum(),
            completion_tokens: estimate_tokens(&text),
        });
        if decode_speed.is_none() {
            decode_speed = first_token.map(|t| usage.completion_tokens as f64 / t.elapsed().as_secs_f64().max(1e-3));
        }
        let secs = |s: f32| Duration::from_secs_f64(f64::from(s.max(0.0)));
        let stats = CallStats {
            prompt_tokens: usage.prompt_tokens,
            // mistral.rs does not say how much of the prompt its prefix cache held.
            prompt_tokens_cached: None,
            prompt_tokens_computed: None,
            completion_tokens: usage.completion_tokens,
            // Short calls may end before mistral.rs reports its times; the time to the
            // first token is then the best measure of the prompt's cost.
            prompt_eval: engine_times
                .map(|(p, _)| secs(p))
                .filter(|d| !d.is_zero())
                .or_else(|| first_token.map(|t| t.duration_since(started)))
                .unwrap_or_default(),
            time_to_first_token: first_token.map(|t| t.duration_since(started)).unwrap_or_default(),
            decode: engine_times.map(|(_, c)| secs(c)).unwrap_or_default(),
        };
        if let Ok(mut last) = self.last_stats.lock() {
            *last = Some(stats);
        }
        Ok(ChatResponse {
            text,
            finish_reason: finish,
            usage,
            completion_token_ids: None,
            prompt_token_ids: None,
            decode_tokens_per_sec: decode_speed,
            tool_calls,
        })
    }

    /// mistral.rs batches concurrent requests, and a sequence's logits then depend on its
    /// neighbours (padding, kernel shapes): servers run its requests one at a time.
    fn batch_invariant(&self) -> bool {
        false
    }

    fn native_tools(&self) -> bool {
        self.native_tools
    }

    fn enforces_grammar(&self) -> bool {
        true
    }
}

/// Whether the chat template of a model folder (`tokenizer_config.json`'s
/// `chat_template`, or `chat_template.jinja`) renders tools.
fn template_declares_tools(dir: &Path) -> bool {
    let from_config = std::fs::read_to_string(dir.join("tokenizer_config.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|config| config.get("chat_template").cloned())
        .map(|t| t.to_string());
    let from_file = std::fs::read_to_string(dir.join("chat_template.jinja")).ok();
    [from_config, from_file].into_iter().flatten().any(|t| t.contains("tools"))
}

/// The snapshot folders of a Hugging Face repository in the local hub cache.
fn hub_snapshots(repo: &str) -> Vec<PathBuf> {
    agent_llm::models::hf_cache::cache_root()
        .map(|root| agent_llm::models::hf_cache::snapshots(&root, repo))
        .unwrap_or_default()
}

/// A copy of the model folder `base` with the PEFT adapter in `adapter` merged in,
/// cached under `<cache root>/merged/` by the hash of both (so a changed adapter gets a
/// new copy and an unchanged one is reused).
fn merged_with_adapter(base: &Path, adapter: &Path) -> Result<PathBuf, LlmError> {
    use sha2::{Digest, Sha256};
    let fail = |e: String| LlmError::Other(format!("cannot apply the LoRA adapter {}: {e}", adapter.display()));
    let mut hasher = Sha256::new();
    for file in
        [base.join("model.safetensors"), adapter.join("adapter_model.safetensors"), adapter.join("adapter_config.json")]
    {
        let bytes = std::fs::read(&file).map_err(|e| fail(format!("{}: {e}", file.display())))?;
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    let key = agent_llm::models::hex(&hasher.finalize())[..16].to_string();
    let root = agent_llm::models::cache_root().map_err(|e| fail(e.to_string()))?.join("merged");
    let dir = root.join(&key);
    if dir.join("COMPLETE").is_file() {
        return Ok(dir);
    }
    let tmp = root.join(format!(".tmp-{key}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    crate::lora_merge::merge_adapter_dir(base, adapter, &tmp).map_err(|e| fail(e.to_string()))?;
    std::fs::write(tmp.join("COMPLETE"), b"").map_err(|e| fail(e.to_string()))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir).map_err(|e| fail(e.to_string()))?;
    Ok(dir)
}
