//! agent-core's integration tests: the episode loop, hooks, plan mode and MCP with a real sandbox.
// Test helpers outside `#[test]` functions may panic too (clippy.toml allows it only there).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agent_test_support as support;

mod episode_loop;
mod foreign_letters;
mod hooks_plan;
mod mcp;
mod repeated_calls;
mod sandbox_files;
mod skills;
