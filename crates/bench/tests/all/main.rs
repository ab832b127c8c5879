//! agent-bench's integration tests, on the real Docker engine: generated tasks,
//! `agent tasks validate` on hand-made broken tasks, the synth pipeline with scripted
//! models for its roles.
// Test helpers outside `#[test]` functions may panic too (clippy.toml allows it only there).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agent_test_support as support;

mod generate;
mod synth;
mod validate;
