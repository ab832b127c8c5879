//! The working indicator in the composer's frame: a spinner, what the agent does (reading
//! a long prompt, working, running a `!cmd`) and for how long.

use super::app::App;
use super::composer::group_thousands;

/// The working indicator: a spinner, what the agent does now and for how long.
pub fn working_line(app: &App) -> Option<String> {
    if !app.busy && !app.shell_running() {
        return None;
    }
    const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
    let spin = SPINNER[(app.frame % SPINNER.len() as u64) as usize];
    let phase = match (app.busy, app.prompt_progress, app.stream) {
        (true, Some((done, total)), None) => {
            format!("reading the prompt {}/{} tokens", group_thousands(done), group_thousands(total))
        }
        (true, _, _) => "working".to_string(),
        (false, _, _) => "running the command".to_string(),
    };
    let secs = app.busy_since.map(|t| t.elapsed().as_secs()).unwrap_or(0);
    let elapsed = if secs >= 1 { format!(" · {}", duration(secs)) } else { String::new() };
    Some(format!("{spin} {phase}{elapsed} · Esc to interrupt"))
}

/// Seconds as `42s` or `3m 05s`.
fn duration(secs: u64) -> String {
    if secs < 60 {
        format!("{secs}s")
    } else {
        format!("{}m {:02}s", secs / 60, secs % 60)
    }
}
