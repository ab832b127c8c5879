//! A render benchmark: frame time over long transcripts, and the time from a key press
//! to the finished frame while a reply streams (terminal I/O excluded: it draws to
//! ratatui's test backend).

use std::time::{Duration, Instant};

use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;

use agent_protocol::{ApprovalMode, Event};

use super::app::{App, AppConfig};
use super::cell::{cell_lines, CellKind, ToolCell, ToolStatus};
use super::view::draw;

/// Timing figures of one transcript size.
#[derive(Debug, Clone)]
pub struct FrameFigures {
    /// Logical lines in the transcript.
    pub lines: usize,
    /// The first frame (nothing wrapped yet).
    pub first: Duration,
    pub mean: Duration,
    pub p99: Duration,
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct PerfReport {
    pub width: u16,
    pub height: u16,
    pub frames: Vec<FrameFigures>,
    /// Key press to drawn frame while deltas stream in, over the largest transcript.
    pub key_mean: Duration,
    pub key_p99: Duration,
}

fn app() -> App {
    App::new(AppConfig {
        model: "bench".into(),
        workspace: "/bench".into(),
        approval: ApprovalMode::Auto,
        context_tokens: 32_768,
        files: Vec::new(),
        commands: Vec::new(),
        log_file: None,
    })
}

/// A transcript of about `lines` lines: Markdown replies with code, and tool calls.
fn filled(lines: usize) -> App {
    let mut a = app();
    a.transcript.opts.expanded = true;
    let mut total = 0;
    let mut i = 0;
    while total < lines {
        let cell = if i % 2 == 0 {
            CellKind::assistant(&format!("## Step {i}\n\nI will **check** the `config` first:\n\n- read it\n- fix it\n\n```rust\nfn step_{i}() -> u32 {{\n    {i}\n}}\n```\n"))
        } else {
            CellKind::Tool(ToolCell {
                call_id: format!("{i}"),
                tool: "bash".into(),
                args: serde_json::json!({"cmd": format!("ls -la /app/{i}")}),
                output: (0..8).map(|k| format!("-rw-r--r-- 1 root root {k:>5} file_{i}_{k}.txt\n")).collect(),
                status: ToolStatus::Done { exit_code: Some(0), duration_ms: 12, timed_out: false },
            })
        };
        total += cell_lines(&cell, a.transcript.opts).len() + 1;
        a.transcript.push(cell);
        i += 1;
    }
    a
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(idx).copied().unwrap_or_default()
}

fn mean(v: &[Duration]) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.iter().sum::<Duration>() / v.len() as u32
}

/// Runs the benchmark on a `width`×`height` screen for each transcript size.
pub fn measure(width: u16, height: u16, sizes: &[usize], frames: usize) -> Result<PerfReport, std::io::Error> {
    let mut report =
        PerfReport { width, height, frames: Vec::new(), key_mean: Duration::ZERO, key_p99: Duration::ZERO };
    let mut last_app = None;
    for &lines in sizes {
        let mut a = filled(lines);
        let mut term = Terminal::new(TestBackend::new(width, height))?;
        let t = Instant::now();
        term.draw(|f| draw(f, &mut a))?;
        let first = t.elapsed();
        // Each frame streams one more piece of the reply, as during generation.
        a.on_core(Event::TurnStarted { turn: 1 });
        let mut times = Vec::with_capacity(frames);
        for k in 0..frames {
            a.on_core(Event::AssistantDelta { turn: 1, text: format!("word{k} ") });
            let t = Instant::now();
            term.draw(|f| draw(f, &mut a))?;
            times.push(t.elapsed());
        }
        report.frames.push(FrameFigures { lines, first, mean: mean(&times), p99: percentile(times, 0.99) });
        last_app = Some((a, term));
    }
    if let Some((mut a, mut term)) = last_app {
        let mut times = Vec::with_capacity(frames);
        for k in 0..frames {
            a.on_core(Event::AssistantDelta { turn: 1, text: format!("more{k} ") });
            let t = Instant::now();
            a.on_key(KeyEvent::new(KeyCode::Char('x'), KeyModifiers::NONE));
            term.draw(|f| draw(f, &mut a))?;
            times.push(t.elapsed());
        }
        report.key_mean = mean(&times);
        report.key_p99 = percentile(times, 0.99);
    }
    Ok(report)
}

/// The report as text.
pub fn format_report(r: &PerfReport) -> String {
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    let mut out = format!("screen {}x{}\n", r.width, r.height);
    out.push_str("transcript lines | first frame | frame mean | frame p99\n");
    for f in &r.frames {
        out.push_str(&format!("{:>16} | {:>11} | {:>10} | {:>9}\n", f.lines, ms(f.first), ms(f.mean), ms(f.p99)));
    }
    out.push_str(&format!(
        "key press to frame while streaming (largest transcript): mean {}, p99 {}\n",
        ms(r.key_mean),
        ms(r.key_p99)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_time_does_not_grow_with_the_transcript() {
        let r = measure(100, 30, &[200, 10_000], 30).unwrap();
        assert_eq!(r.frames.len(), 2);
        assert!(r.frames[1].lines >= 10_000);
        let (small, large) = (r.frames[0].mean, r.frames[1].mean);
        // Generous bounds: debug builds on a loaded two-core machine.
        assert!(large < small * 5 + Duration::from_millis(5), "small {small:?}, large {large:?}");
        assert!(r.key_mean < Duration::from_millis(100), "{:?}", r.key_mean);
        assert!(format_report(&r).contains("10"));
    }
}
