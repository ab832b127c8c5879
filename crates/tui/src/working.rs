//! The working indicator in the composer's frame: a spinner, what the agent does (reading
//! a long prompt, working, running a `!cmd`) and for how long.

use super::app::App;

/// The working indicator: a spinner, what the agent does now and for how long.
pub fn working_line(app: &App) -> Option<String> {
    if !app.busy && !app.shell_running() {
        return None;
    }
    const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
    let spin = SPINNER[(app.frame % SPINNER.len() as u64) as usize];
    let phase = match (app.busy, app.prompt_progress, app.stream) {
        (true, Some((done, total)), None) => format!("reading the prompt {}/{} tokens", group(done), group(total)),
        (true, _, _) => "working".to_string(),
        (false, _, _) => "running the command".to_string(),
    };
    let secs = app.busy_since.map(|t| t.elapsed().as_secs()).unwrap_or(0);
    let elapsed = if secs >= 1 { format!(" · {}", duration(secs)) } else { String::new() };
    Some(format!("{spin} {phase}{elapsed} · Esc to interrupt"))
}

/// `12345` as `12,345`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Seconds as `42s` or `3m 05s`.
fn duration(secs: u64) -> String {
    if secs < 60 {
        format!("{secs}s")
    } else {
        format!("{}m {:02}s", secs / 60, secs % 60)
    }
}
