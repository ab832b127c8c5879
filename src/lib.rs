//! `agent`: a terminal coding agent whose tools all run inside Docker.
//!
//! The core (the episode loop in [`agent`]) talks to front ends only through the typed
//! [`protocol`]; models sit behind [`llm::ModelBackend`]; every tool runs in a
//! [`sandbox`] container.

pub mod agent;
pub mod assets;
pub mod bench;
pub mod config;
pub mod judge;
pub mod llm;
pub mod models;
pub mod protocol;
pub mod sandbox;
pub mod serve;
pub mod tools;
pub mod train;
pub mod tui;
