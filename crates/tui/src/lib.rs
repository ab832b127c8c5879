//! The interactive terminal UI (ratatui + crossterm). It is a client of the core: it
//! sends [`agent_protocol::Op`]s and shows [`agent_protocol::Event`]s, nothing else.
//!
//! [`app`] holds the state and turns keys and events into effects, [`view`] draws it,
//! [`runner`] connects it to the terminal, the core and the sandbox.

pub mod app;
mod attach;
pub mod call_filter;
pub mod cell;
pub mod checkpoints;
mod commands;
pub mod composer;
pub mod custom_commands;
mod diff;
pub mod frame_time;
mod highlight;
mod markdown;
mod mcp_view;
mod plan_mode;
pub mod popup;
mod reply;
pub mod rewind;
pub mod runner;
pub mod sanitize;
mod shell_cmd;
pub mod store;
pub mod terminal;
pub mod transcript;
pub mod trust;
pub mod view;
pub mod working;
mod wrap;

#[cfg(test)]
mod snapshots;

pub use app::{App, AppConfig, Effect};
pub use runner::{run, TuiContext};

/// Errors that stop the UI.
#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    #[error("the terminal failed: {0}")]
    Terminal(std::io::Error),
}
