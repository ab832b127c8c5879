//! The agent's core: the episode loop ([`episode`]) and the tools it runs in a sandbox
//! ([`tools`]), the configuration ([`config`]), the user's hooks ([`hooks`]), MCP servers
//! ([`mcp`]) and the project's own settings, used as far as the user trusts it
//! ([`project`]). Models come from `agent-llm`.
//!
//! Front ends talk to a running episode only through `agent_protocol`'s `Op`s and
//! `Event`s. Nothing here links an inference engine or prints.

pub mod assets;
pub mod config;
pub mod episode;
pub mod hooks;
pub mod mcp;
pub mod project;
pub mod sandbox_network;
pub mod skills;
pub mod tools;
