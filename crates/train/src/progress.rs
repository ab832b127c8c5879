//! The trainer's progress bars (hidden when not asked for).

use indicatif::{ProgressBar, ProgressStyle};

pub(crate) fn progress_bar(show: bool, len: u64, what: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed})") {
        b.set_style(style.progress_chars("=> "));
    }
    b.set_prefix(what.to_string());
    b
}
