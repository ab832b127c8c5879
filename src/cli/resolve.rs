//! How every front door turns a model spec into a backend: one set of resolve options
//! (the config's key variable, the local engine settings, downloads drawn on stderr, this
//! binary's engines), so that `run`, the UI, `bench`, `serve` and `judge-eval` agree.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};

use agent_llm::models::{Progress, PullProgress};
use agent_llm::{LocalModelOptions, ResolveOptions};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The resolve options of a command: `api_key_env` from the config (or a flag), `local`
/// from the local-model flags; downloads are drawn unless `quiet`.
pub fn resolve_options(api_key_env: Option<String>, local: LocalModelOptions, quiet: bool) -> ResolveOptions {
    ResolveOptions { api_key_env, local, progress: download_progress(quiet), ..agent_local::resolve_options() }
}

/// A model download drawn as a byte-count bar on stderr; nothing when `quiet` or when
/// stderr is not a terminal (a log file gets no bar frames).
pub fn download_progress(quiet: bool) -> Progress {
    if quiet || !std::io::stderr().is_terminal() {
        return Progress::hidden();
    }
    // One bar per download: created by its first update, cleared by `Finished`, so a
    // second download through the same options draws afresh.
    let bar: Arc<Mutex<Option<ProgressBar>>> = Arc::default();
    Progress::new(move |update| {
        let Ok(mut slot) = bar.lock() else { return };
        if let PullProgress::Finished = update {
            if let Some(b) = slot.take() {
                b.finish_and_clear();
            }
            return;
        }
        let b = slot.get_or_insert_with(new_bar);
        match update {
            PullProgress::Message(m) => b.set_message(m),
            PullProgress::Length(n) => b.set_length(n),
            PullProgress::Position(n) => b.set_position(n),
            PullProgress::Finished => {}
        }
    })
}

fn new_bar() -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{msg} [{wide_bar:.cyan/blue}] {bytes:>10}/{total_bytes:<10} {bytes_per_sec:>12} eta {eta:<3}",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}
