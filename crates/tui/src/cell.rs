//! Transcript cells (one user message, one assistant reply, one tool call, ...) and
//! how each one draws itself as unwrapped lines.

use std::mem;

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use serde_json::Value;

use super::call_filter::{CallFilter, CallText, Piece};
use super::diff::edit_diff;
use super::markdown::render_markdown;
use super::reply::split_reply;

/// Output lines a folded tool cell shows (its tail).
pub const FOLDED_LINES: usize = 8;

/// How a tool call stands.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolStatus {
    /// Announced, waiting for the user's approval.
    AwaitingApproval,
    Running,
    Done {
        exit_code: Option<i64>,
        duration_ms: u64,
        timed_out: bool,
    },
    Denied,
    Interrupted,
}

/// One tool call (or a `!cmd` the user ran).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCell {
    pub call_id: String,
    pub tool: String,
    pub args: Value,
    /// Live output, then the final observation.
    pub output: String,
    pub status: ToolStatus,
}

/// A transcript entry.
#[derive(Debug, Clone, PartialEq)]
pub enum CellKind {
    /// The start screen's header.
    Welcome {
        model: String,
        workspace: String,
    },
    User {
        text: String,
    },
    /// A reply: its prose, and its calls held apart (each is drawn as its tool cell).
    Assistant {
        reply: CallFilter,
        streaming: bool,
    },
    Tool(ToolCell),
    /// Informational text from the UI or the core.
    Info {
        text: String,
    },
    Error {
        text: String,
    },
}

impl CellKind {
    /// A whole assistant reply.
    pub fn assistant(text: &str) -> CellKind {
        CellKind::Assistant { reply: CallFilter::from_text(text), streaming: false }
    }
}

/// Switches that change how cells draw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenderOpts {
    /// Show tool output and thinking in full.
    pub expanded: bool,
}

fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

/// Draws a cell as unwrapped lines.
pub fn cell_lines(cell: &CellKind, opts: RenderOpts) -> Vec<Line<'static>> {
    match cell {
        CellKind::Welcome { model, workspace } => vec![
            Line::from(vec![
                Span::styled("● agent", Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)),
                Span::styled(" — a coding agent whose tools run in a sandbox", dim()),
            ]),
            Line::from(vec![Span::styled("  model      ", dim()), Span::raw(model.clone())]),
            Line::from(vec![Span::styled("  workspace  ", dim()), Span::raw(format!("{workspace} → /workspace"))]),
            Line::from(Span::styled("  /help commands · Esc interrupts · Ctrl+C twice quits", dim())),
        ],
        CellKind::User { text } => {
            let style = Style::new().fg(Color::White).add_modifier(Modifier::BOLD);
            text.lines()
                .enumerate()
                .map(|(i, l)| {
                    Line::from(vec![
                        Span::styled(if i == 0 { "› " } else { "  " }, dim()),
                        Span::styled(l.to_string(), style),
                    ])
                })
                .collect()
        }
        CellKind::Assistant { reply, streaming } => assistant_lines(reply, *streaming, opts),
        CellKind::Tool(t) => tool_lines(t, opts),
        CellKind::Info { text } => text.lines().map(|l| Line::from(Span::styled(format!("  {l}"), dim()))).collect(),
        CellKind::Error { text } => text
            .lines()
            .enumerate()
            .map(|(i, l)| {
                Line::from(Span::styled(format!("{} {l}", if i == 0 { "✗" } else { " " }), Style::new().fg(Color::Red)))
            })
            .collect(),
    }
}

/// A reply's lines: its thinking (folded), then its prose as Markdown, with the raw text
/// of the calls the core could not read where they were written.
fn assistant_lines(reply: &CallFilter, streaming: bool, opts: RenderOpts) -> Vec<Line<'static>> {
    let mut thinking: Vec<String> = Vec::new();
    let mut body: Vec<Line<'static>> = Vec::new();
    let mut prose = String::new();
    for piece in reply.pieces() {
        match piece {
            Piece::Text(t) => prose.push_str(t),
            Piece::Call(call) if call.shown => {
                prose_lines(&mem::take(&mut prose), &mut thinking, &mut body);
                body.extend(raw_call_lines(call));
            }
            Piece::Call(_) => {}
        }
    }
    prose_lines(&prose, &mut thinking, &mut body);
    let mut out = Vec::new();
    if !thinking.is_empty() {
        let thinking = thinking.join("\n");
        let n = thinking.lines().count();
        if opts.expanded {
            out.push(Line::from(Span::styled("✻ thinking", dim().add_modifier(Modifier::ITALIC))));
            out.extend(
                thinking
                    .lines()
                    .map(|l| Line::from(Span::styled(format!("  {l}"), dim().add_modifier(Modifier::ITALIC)))),
            );
        } else {
            out.push(Line::from(Span::styled(
                format!("✻ thinking ({n} line{}, Ctrl+O to show)", if n == 1 { "" } else { "s" }),
                dim().add_modifier(Modifier::ITALIC),
            )));
        }
    }
    for (i, line) in body.into_iter().enumerate() {
        let mut spans = vec![Span::styled(if i == 0 { "● " } else { "  " }, Style::new().fg(Color::Cyan))];
        spans.extend(line.spans);
        out.push(Line::from(spans));
    }
    if streaming && out.is_empty() {
        out.push(Line::from(Span::styled("● …", dim())));
    }
    out
}

/// Adds the thinking and the Markdown lines of a stretch of prose.
fn prose_lines(prose: &str, thinking: &mut Vec<String>, body: &mut Vec<Line<'static>>) {
    if prose.is_empty() {
        return;
    }
    let parts = split_reply(prose);
    thinking.extend(parts.thinking);
    body.extend(render_markdown(&parts.prose));
}

/// A call the core could not read, as written, so that the user sees what went wrong.
fn raw_call_lines(call: &CallText) -> Vec<Line<'static>> {
    let mut lines: Vec<Line<'static>> = call
        .raw
        .trim_matches('\n')
        .lines()
        .map(|l| Line::from(vec![Span::styled("┆ ", dim()), Span::styled(l.replace('\t', "    "), dim())]))
        .collect();
    if !call.closed {
        lines.push(Line::from(Span::styled("┆ (the call was never closed)", dim().add_modifier(Modifier::ITALIC))));
    }
    lines
}

/// A one-line summary of a call's arguments.
fn summary(tool: &str, args: &Value) -> String {
    let s = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    match tool {
        "bash" | "!" => s("cmd"),
        "file" => format!("{} {}", s("action"), s("path")),
        "search" => {
            let what = ["pattern", "glob", "path"].iter().map(|k| s(k)).filter(|v| !v.is_empty()).collect::<Vec<_>>();
            format!("{} {}", s("action"), what.join(" "))
        }
        "todo" => format!("{} {}", s("action"), s("text")),
        "finish" => s("message"),
        _ => serde_json::to_string(args).unwrap_or_default(),
    }
}

/// The tool's observation without its `<TOOL_output>` wrapper.
fn unwrap_observation(tool: &str, obs: &str) -> String {
    let open = format!("<{tool}_output>");
    let close = format!("</{tool}_output>");
    let body = obs.trim();
    let body = body.strip_prefix(&open).unwrap_or(body);
    let body = body.strip_suffix(&close).unwrap_or(body);
    let body = body.trim_matches('\n');
    // The bash status trailer repeats what the cell's footer says.
    match body.rsplit_once('\n') {
        Some((rest, last)) if is_status_trailer(last) => rest.to_string(),
        None if is_status_trailer(body) => String::new(),
        _ => body.to_string(),
    }
}

fn is_status_trailer(line: &str) -> bool {
    let l = line.trim();
    l.starts_with('[')
        && l.ends_with(']')
        && ["[exit code ", "[interrupted by the user", "[timed out after", "[no exit code"]
            .iter()
            .any(|p| l.starts_with(p))
}

fn tool_lines(t: &ToolCell, opts: RenderOpts) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    if t.tool == "finish" {
        let msg = summary("finish", &t.args);
        for (i, l) in render_markdown(&msg).into_iter().enumerate() {
            let mut spans = vec![Span::styled(if i == 0 { "✔ " } else { "  " }, Style::new().fg(Color::Green))];
            spans.extend(l.spans);
            out.push(Line::from(spans));
        }
        return out;
    }
    let (mark, mark_style) = match &t.status {
        ToolStatus::AwaitingApproval => ("?", Style::new().fg(Color::Yellow)),
        ToolStatus::Running => ("◌", Style::new().fg(Color::Yellow)),
        ToolStatus::Done { exit_code: Some(0), .. } => ("●", Style::new().fg(Color::Green)),
        ToolStatus::Done { .. } => ("●", Style::new().fg(Color::Red)),
        ToolStatus::Denied | ToolStatus::Interrupted => ("●", Style::new().fg(Color::DarkGray)),
    };
    let name = if t.tool == "!" { "shell".to_string() } else { t.tool.clone() };
    let mut first = true;
    let header = summary(&t.tool, &t.args);
    let header_lines: Vec<&str> = header.lines().collect();
    // A long command (a here-document) is folded like output.
    let keep = if opts.expanded || header_lines.len() <= FOLDED_LINES { header_lines.len() } else { FOLDED_LINES / 2 };
    for l in header_lines
        .iter()
        .take(keep)
        .chain((keep < header_lines.len()).then_some(&"… (Ctrl+O shows the whole command)"))
    {
        let lead = if first {
            vec![
                Span::styled(format!("{mark} "), mark_style),
                Span::styled(format!("{name} "), Style::new().add_modifier(Modifier::BOLD)),
            ]
        } else {
            vec![Span::raw("  ")]
        };
        let mut spans = lead;
        spans.push(Span::styled(l.to_string(), Style::new().fg(Color::White)));
        out.push(Line::from(spans));
        first = false;
    }
    if first {
        out.push(Line::from(vec![
            Span::styled(format!("{mark} "), mark_style),
            Span::styled(name, Style::new().add_modifier(Modifier::BOLD)),
        ]));
    }
    let gutter = Span::styled("  │ ", dim());
    if t.tool == "file" {
        if let Some(diff) = edit_diff(&t.args) {
            push_folded(&mut out, diff, opts, &gutter);
            if let ToolStatus::Done { exit_code: Some(code), .. } = t.status {
                if code != 0 {
                    push_output(&mut out, &unwrap_observation("file", &t.output), opts, &gutter);
                }
            }
            push_footer(&mut out, t);
            return out;
        }
    }
    let shown = match (&t.status, t.tool.as_str()) {
        // Live bash output is already the command's own output.
        (ToolStatus::Running, _) | (_, "!") => t.output.clone(),
        _ => unwrap_observation(&t.tool, &t.output),
    };
    push_output(&mut out, &shown, opts, &gutter);
    push_footer(&mut out, t);
    out
}

fn push_output(out: &mut Vec<Line<'static>>, text: &str, opts: RenderOpts, gutter: &Span<'static>) {
    let lines: Vec<Line<'static>> = text
        .trim_end_matches('\n')
        .lines()
        .map(|l| Line::from(Span::styled(l.replace('\t', "    "), Style::new().fg(Color::Gray))))
        .collect();
    push_folded(out, lines, opts, gutter);
}

fn push_folded(out: &mut Vec<Line<'static>>, lines: Vec<Line<'static>>, opts: RenderOpts, gutter: &Span<'static>) {
    let n = lines.len();
    let skip = if opts.expanded || n <= FOLDED_LINES + 1 { 0 } else { n - FOLDED_LINES };
    if skip > 0 {
        out.push(Line::from(vec![
            gutter.clone(),
            Span::styled(format!("… {skip} more lines (Ctrl+O to expand)"), dim()),
        ]));
    }
    for line in lines.into_iter().skip(skip) {
        let mut spans = vec![gutter.clone()];
        spans.extend(line.spans);
        out.push(Line::from(spans));
    }
}

fn push_footer(out: &mut Vec<Line<'static>>, t: &ToolCell) {
    let text = match &t.status {
        ToolStatus::AwaitingApproval => "  ⎿ waiting for approval".to_string(),
        ToolStatus::Running => "  ⎿ running… (Esc to interrupt)".to_string(),
        ToolStatus::Denied => "  ⎿ denied".to_string(),
        ToolStatus::Interrupted => "  ⎿ interrupted".to_string(),
        ToolStatus::Done { exit_code, duration_ms, timed_out } => {
            let secs = *duration_ms as f64 / 1000.0;
            let code = match exit_code {
                _ if *timed_out => "timed out".to_string(),
                Some(c) => format!("exit {c}"),
                None => "no exit code".to_string(),
            };
            format!("  ⎿ {code} · {secs:.1}s")
        }
    };
    let style = match &t.status {
        ToolStatus::Done { exit_code: Some(0), timed_out: false, .. } => dim(),
        ToolStatus::Done { .. } => Style::new().fg(Color::Red),
        _ => Style::new().fg(Color::Yellow),
    };
    out.push(Line::from(Span::styled(text, style)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    fn bash(cmd: &str, output: &str, status: ToolStatus) -> CellKind {
        CellKind::Tool(ToolCell {
            call_id: "1".into(),
            tool: "bash".into(),
            args: serde_json::json!({ "cmd": cmd }),
            output: output.into(),
            status,
        })
    }

    #[test]
    fn long_commands_fold_and_status_trailers_are_dropped() {
        let cmd: String = (0..30).map(|i| format!("echo {i}\n")).collect();
        let done = ToolStatus::Done { exit_code: Some(0), duration_ms: 1200, timed_out: false };
        let cell = bash(&cmd, "<bash_output>\nhi\n[exit code 0, 1.2 s]\n</bash_output>", done);
        let lines = text(&cell_lines(&cell, RenderOpts::default()));
        assert_eq!(lines.len(), 4 + 1 + 1 + 1, "{lines:?}");
        assert!(lines[4].contains("shows the whole command"));
        assert_eq!(lines[5], "  │ hi");
        assert_eq!(lines[6], "  ⎿ exit 0 · 1.2s");
        let all = text(&cell_lines(&cell, RenderOpts { expanded: true }));
        assert!(all.iter().any(|l| l.contains("echo 29")));
    }

    #[test]
    fn thinking_is_one_line_until_expanded() {
        let cell = CellKind::assistant("<think>a\nb\nc</think>The answer.");
        let lines = text(&cell_lines(&cell, RenderOpts::default()));
        assert_eq!(lines, vec!["✻ thinking (3 lines, Ctrl+O to show)", "● The answer."]);
        let lines = text(&cell_lines(&cell, RenderOpts { expanded: true }));
        assert_eq!(lines.len(), 5);
    }

    #[test]
    fn calls_are_left_out_until_revealed_and_then_drawn_raw_where_written() {
        let mut reply = CallFilter::from_text(
            "Let me look.\n<tool_call>\n{\"name\": \"bsah\", \"arguments\": {}}\n</tool_call>\nThen this.",
        );
        let cell = CellKind::Assistant { reply: reply.clone(), streaming: false };
        assert_eq!(text(&cell_lines(&cell, RenderOpts::default())), vec!["● Let me look.", "  ", "  Then this."]);
        reply.reveal_calls();
        let cell = CellKind::Assistant { reply, streaming: false };
        let lines = cell_lines(&cell, RenderOpts::default());
        assert_eq!(
            text(&lines),
            vec![
                "● Let me look.",
                "  ┆ <tool_call>",
                "  ┆ {\"name\": \"bsah\", \"arguments\": {}}",
                "  ┆ </tool_call>",
                "  Then this.",
            ]
        );
        assert_eq!(lines[2].spans[2].style, dim(), "the raw call is dim");
    }

    #[test]
    fn a_reply_that_is_only_a_call_shows_a_placeholder_while_it_streams() {
        let mut reply = CallFilter::new();
        reply.push("<tool_call>\n{\"name\": \"bash\"");
        let cell = CellKind::Assistant { reply: reply.clone(), streaming: true };
        assert_eq!(text(&cell_lines(&cell, RenderOpts::default())), vec!["● …"]);
        reply.finish();
        reply.reveal_calls();
        let cell = CellKind::Assistant { reply, streaming: false };
        let lines = text(&cell_lines(&cell, RenderOpts::default()));
        assert_eq!(lines.last().map(String::as_str), Some("  ┆ (the call was never closed)"), "{lines:?}");
    }
}
