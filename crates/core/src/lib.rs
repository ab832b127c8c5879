//! The agent's core: the episode loop ([`episode`]) and the tools it runs in a sandbox
//! ([`tools`]), the configuration ([`config`]), the user's hooks ([`hooks`]), the model
//! backend trait with the HTTP and scripted backends ([`llm`]), the built-in model
//! files ([`models`]) and the project's own settings, used as far as the user trusts it
//! ([`project`]).
//!
//! Front ends talk to a running episode only through `agent_protocol`'s `Op`s and
//! `Event`s. Nothing here links an inference engine: local models are loaded by
//! `agent-local` behind the [`llm::LocalLoader`] the binary passes in.

pub mod assets;
pub mod config;
pub mod episode;
pub mod hooks;
pub mod llm;
pub mod mcp;
pub mod models;
pub mod project;
pub mod tools;
