//! The one integration-test binary (each extra binary would re-link everything).

// Test helpers outside `#[test]` functions may panic too (clippy.toml allows it only there).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod architecture;
mod support;

mod bench;
mod bench_build;
mod bench_compose;
mod cli_errors;
mod cli_run;
mod episode_loop;
mod hooks_plan;
mod installed;
mod judge;
mod llamacpp;
mod llm_openai;
mod local_model;
mod mcp;
mod models;
mod real_models;
mod sandbox_files;
mod sandbox_lifecycle;
mod sandbox_shell;
mod serve;
mod train;
mod train_dist;
mod train_engine;
mod train_gguf;
mod train_presets;
mod trust;
mod tui;
