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
mod constrained;
mod dind;
mod engines;
mod harbor_conformance;
mod harbor_corpus;
mod installed;
mod judge;
mod llamacpp;
mod local_model;
mod models;
mod real_models;
mod sandbox_lifecycle;
mod security_egress;
mod security_serve;
mod security_tasks;
mod security_trust;
mod security_ui;
mod security_workspace;
mod serve;
mod serve_openai;
mod tasks_synth;
mod train;
mod train_dist;
mod train_presets;
mod trust;
mod tui;
mod tui_calls;
