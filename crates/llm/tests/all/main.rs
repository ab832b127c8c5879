//! agent-llm's integration tests: the OpenAI-compatible backend against real HTTP servers.
// Test helpers outside `#[test]` functions may panic too (clippy.toml allows it only there).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod grammar;
mod openai;
