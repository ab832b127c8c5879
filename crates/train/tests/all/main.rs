//! agent-train's integration tests: the rollout engines (mistral.rs, llama.cpp with a live
//! adapter) against the trainer's own model, on real tiny and built-in models.
// Test helpers outside `#[test]` functions may panic too (clippy.toml allows it only there).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod engine;
mod gguf;
