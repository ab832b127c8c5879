//! agent-sandbox's integration tests, against the real Docker engine.
// Test helpers outside `#[test]` functions may panic too (clippy.toml allows it only there).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agent_test_support as support;

mod egress;
mod pool;
mod shell;
mod workspace;
