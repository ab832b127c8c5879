//! A LoRA adapter set on a live llama.cpp context and replaced in place: the rollout
//! engine swaps the trainer's new adapter in after every update without reloading the
//! base model, and frees the old one (llama.cpp would otherwise keep every adapter ever
//! loaded until the model goes, ~35 MB each for the 0.5B at rank 16).
//!
//! `llama-cpp-2` 0.1.160 loads adapters only through `&mut LlamaModel` (impossible while a
//! context borrows the model) and never frees them, so loading and freeing go through the
//! raw calls here; setting goes through the safe `LlamaContext::lora_adapter_set`.

use std::ffi::CString;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::path::Path;
use std::ptr::NonNull;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::{LlamaLoraAdapter, LlamaModel};
use llama_cpp_sys_2 as sys;

use agent_llm::LlmError;

/// The llama.cpp adapter's file name in an adapter folder (beside PEFT's files).
pub const LORA_GGUF_FILE: &str = "adapter-model.gguf";

/// An adapter loaded for one model; freed when dropped.
pub(super) struct LiveAdapter<'m> {
    raw: NonNull<sys::llama_adapter_lora>,
    /// The model must outlive the adapter: llama.cpp keeps it in the model's list and
    /// freeing the model frees it too (a second free here would be a double free).
    model: PhantomData<&'m LlamaModel>,
}

impl<'m> LiveAdapter<'m> {
    /// Loads a llama.cpp LoRA GGUF file for `model`.
    pub(super) fn load(model: &'m LlamaModel, path: &Path) -> Result<Self, LlmError> {
        let bad = |why: String| LlmError::Other(format!("cannot load the LoRA adapter {}: {why}", path.display()));
        let text = path.to_str().ok_or_else(|| bad("its path is not UTF-8".into()))?;
        let cpath = CString::new(text).map_err(|_| bad("its path holds a NUL byte".into()))?;
        // SAFETY: `LlamaModel` is `#[repr(transparent)]` over `Ptr<llama_model>`, which is
        // `#[repr(transparent)]` over `NonNull<llama_model>` (llama-cpp-2 =0.1.160, pinned),
        // so a valid `&LlamaModel` is a valid pointer to a `NonNull<llama_model>` that
        // points at the live model. Reading it copies the pointer and touches nothing else.
        let model_ptr = unsafe { *(model as *const LlamaModel).cast::<NonNull<sys::llama_model>>() };
        // SAFETY: `model_ptr` is the live model (borrowed for 'm) and `cpath` a NUL-terminated
        // string alive for the call. llama.cpp only adds the adapter to the model's adapter
        // set, which no other thread touches: the model and its context live on the
        // calling worker thread, and Rust never reads the model's memory itself.
        let raw = unsafe { sys::llama_adapter_lora_init(model_ptr.as_ptr(), cpath.as_ptr()) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            bad("llama.cpp refused it (not a LoRA GGUF for this model's architecture and shapes; the log says why)"
                .into())
        })?;
        Ok(LiveAdapter { raw, model: PhantomData })
    }

    /// Makes this the only adapter `ctx` applies, at scale 1 (the file's `alpha / r` is
    /// applied by llama.cpp on top).
    pub(super) fn apply(&self, ctx: &mut LlamaContext<'m>) -> Result<(), LlmError> {
        // SAFETY: `LlamaLoraAdapter` is `#[repr(transparent)]` over `Ptr<llama_adapter_lora>`,
        // itself `#[repr(transparent)]` over `NonNull<llama_adapter_lora>`, so the two have
        // the same layout and `raw` is a valid value of it. It has no `Drop` in the pinned
        // version; `ManuallyDrop` keeps it so if one is added: this struct owns the adapter.
        let mut handle: ManuallyDrop<LlamaLoraAdapter> = unsafe { std::mem::transmute(self.raw) };
        ctx.lora_adapter_set(&mut handle, 1.0)
            .map_err(|e| LlmError::Other(format!("llama.cpp cannot set the LoRA adapter: {e}")))
    }
}

impl Drop for LiveAdapter<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `llama_adapter_lora_init`, is freed only here, and the
        // model it belongs to is still alive (the `'m` borrow). llama.cpp removes it from
        // the model's set; a context that still had it set must have been given another
        // adapter set first (`apply` of the next adapter) or be gone — callers replace
        // before they drop, see `Swap`.
        unsafe { sys::llama_adapter_lora_free(self.raw.as_ptr()) }
    }
}

/// The adapter a context applies now, replaced without a gap.
pub(super) struct Swap<'m> {
    current: Option<LiveAdapter<'m>>,
}

impl<'m> Swap<'m> {
    /// No adapter yet.
    pub(super) fn none() -> Self {
        Swap { current: None }
    }

    /// Loads `path`, sets it on `ctx`, then frees the adapter it replaces.
    pub(super) fn set(
        &mut self,
        model: &'m LlamaModel,
        ctx: &mut LlamaContext<'m>,
        path: &Path,
    ) -> Result<(), LlmError> {
        let next = LiveAdapter::load(model, path)?;
        next.apply(ctx)?;
        // Dropped only now: the context no longer refers to it.
        self.current = Some(next);
        Ok(())
    }

    /// Takes the adapter off `ctx` and frees it.
    pub(super) fn clear(&mut self, ctx: &mut LlamaContext<'m>) -> Result<(), LlmError> {
        if let Some(current) = self.current.take() {
            // SAFETY: as in `LiveAdapter::apply`; the handle is only used to name the adapter
            // to remove.
            let mut handle: ManuallyDrop<LlamaLoraAdapter> = unsafe { std::mem::transmute(current.raw) };
            ctx.lora_adapter_remove(&mut handle)
                .map_err(|e| LlmError::Other(format!("llama.cpp cannot remove the LoRA adapter: {e}")))?;
            drop(current);
        }
        Ok(())
    }
}
