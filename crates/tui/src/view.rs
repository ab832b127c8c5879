//! Draws the whole screen: transcript, completion popup, approval prompt or composer,
//! and the status line.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Borders, Clear, Paragraph};
use ratatui::Frame;
use serde_json::Value;
use unicode_width::UnicodeWidthChar;

use super::app::{App, ContainerState};
use super::sanitize::escape;
use super::wrap::truncate;

/// The most composer lines shown at once.
const COMPOSER_MAX_LINES: usize = 8;

/// Draws one frame.
pub fn draw(frame: &mut Frame<'_>, app: &mut App) {
    app.frame = app.frame.wrapping_add(1);
    let area = frame.area();
    let width = usize::from(area.width.saturating_sub(4)).max(1);
    let (rows, cursor) = composer_rows(app, width);
    let plan_waits = app.approval.is_none() && app.pending_plan.is_some() && !app.busy;
    let bottom = if app.approval.is_some() || plan_waits { 5 } else { rows.len().min(COMPOSER_MAX_LINES) as u16 + 2 };
    let [main, input, status] =
        Layout::vertical([Constraint::Min(1), Constraint::Length(bottom), Constraint::Length(1)]).areas(area);
    app.transcript.render(main, frame.buffer_mut());
    if app.approval.is_some() {
        draw_approval(frame, app, input);
    } else if plan_waits {
        draw_plan_prompt(frame, app, input);
    } else {
        draw_composer(frame, app, input, &rows, cursor);
        draw_popup(frame, app, main);
    }
    draw_status(frame, app, status);
}

/// The composer's text cut into rows of `width` cells, and the cursor's row and column.
fn composer_rows(app: &App, width: usize) -> (Vec<String>, (usize, usize)) {
    let (lines, (crow, ccol)) = app.composer.layout();
    let mut rows = Vec::new();
    let mut cursor = (0, 0);
    for (i, line) in lines.iter().enumerate() {
        let first = rows.len();
        let mut cur = String::new();
        let mut w = 0;
        // A pasted control or bidi character (zero width: the cursor does not move) is
        // not sent to the terminal.
        for c in line.chars().filter(|c| !super::sanitize::is_unsafe(*c)) {
            let cw = c.width().unwrap_or(0);
            if w + cw > width {
                rows.push(std::mem::take(&mut cur));
                w = 0;
            }
            cur.push(c);
            w += cw;
        }
        rows.push(cur);
        if i == crow {
            cursor = (first + ccol / width, ccol % width);
        }
    }
    (rows, cursor)
}

fn draw_composer(frame: &mut Frame<'_>, app: &App, area: Rect, rows: &[String], cursor: (usize, usize)) {
    let title = super::working::working_line(app).map(|w| format!(" {w} ")).unwrap_or_default();
    let block = Block::default()
        .borders(Borders::ALL)
        .border_type(BorderType::Rounded)
        .border_style(Style::new().fg(Color::DarkGray))
        .title(Span::styled(title, Style::new().fg(Color::Yellow)));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let visible = usize::from(inner.height).max(1);
    let top = cursor.0.saturating_sub(visible - 1);
    let lines: Vec<Line<'_>> = if app.composer.is_empty() {
        vec![Line::from(vec![
            Span::styled("› ", Style::new().fg(Color::Cyan)),
            Span::styled("Ask anything · / commands · ! shell · @ files", Style::new().fg(Color::DarkGray)),
        ])]
    } else {
        rows.iter()
            .enumerate()
            .skip(top)
            .take(visible)
            .map(|(i, r)| {
                let lead = if i == 0 { "› " } else { "  " };
                Line::from(vec![Span::styled(lead, Style::new().fg(Color::Cyan)), Span::raw(r.clone())])
            })
            .collect()
    };
    frame.render_widget(Paragraph::new(lines), inner);
    let x = inner.x + 2 + cursor.1 as u16;
    let y = inner.y + (cursor.0 - top) as u16;
    if x < inner.right() && y < inner.bottom() {
        frame.set_cursor_position((x, y));
    }
}

fn draw_popup(frame: &mut Frame<'_>, app: &App, main: Rect) {
    let Some(popup) = &app.popup else { return };
    let height = (popup.items.len() as u16 + 2).min(main.height);
    if height < 3 {
        return;
    }
    let area = Rect { x: main.x, y: main.bottom() - height, width: main.width, height };
    // Items come from project files, saved sessions and the model: drawn escaped.
    let items: Vec<(String, String)> =
        popup.items.iter().map(|(n, h)| (escape(n).into_owned(), escape(h).into_owned())).collect();
    let name_width = items.iter().map(|(n, _)| n.len()).max().unwrap_or(0) + 2;
    let lines: Vec<Line<'_>> = items
        .iter()
        .enumerate()
        .map(|(i, (name, help))| {
            let style = if i == popup.selected {
                Style::new().fg(Color::Black).bg(Color::Cyan)
            } else {
                Style::new().fg(Color::White)
            };
            Line::from(vec![
                Span::styled(format!("{name:<name_width$}"), style),
                Span::styled(help.clone(), Style::new().fg(Color::DarkGray)),
            ])
        })
        .collect();
    let block = Block::default()
        .borders(Borders::ALL)
        .border_type(BorderType::Rounded)
        .border_style(Style::new().fg(Color::DarkGray));
    frame.render_widget(Clear, area);
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_approval(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let Some(p) = &app.approval else { return };
    let what = match (p.tool.as_str(), &p.args) {
        ("bash", args) => format!("run `{}`", args.get("cmd").and_then(Value::as_str).unwrap_or_default()),
        ("file", args) => format!(
            "{} {}",
            args.get("action").and_then(Value::as_str).unwrap_or("change"),
            args.get("path").and_then(Value::as_str).unwrap_or_default()
        ),
        (tool, args) => format!("{tool} {args}"),
    };
    let inner_width = usize::from(area.width.saturating_sub(4));
    // The model wrote the command: drawn escaped, never sent to the terminal as is.
    let what = truncate(&escape(&what.replace('\n', " ⏎ ")), inner_width);
    let tool = escape(&p.tool);
    let key = |k: &'static str| Span::styled(k, Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD));
    let title = match &p.reason {
        Some(reason) => format!(" allow {tool}? ({}) ", truncate(&escape(reason), inner_width.saturating_sub(20))),
        None => format!(" allow {tool}? "),
    };
    let lines = vec![
        Line::from(Span::styled(what, Style::new().add_modifier(Modifier::BOLD))),
        Line::from(vec![
            key("y"),
            Span::raw(" yes  "),
            key("n"),
            Span::raw(" no  "),
            key("a"),
            Span::raw(format!(" always {tool}  ")),
            Span::styled("Esc interrupts", Style::new().fg(Color::DarkGray)),
        ]),
    ];
    let block = Block::default()
        .borders(Borders::ALL)
        .border_type(BorderType::Rounded)
        .border_style(Style::new().fg(Color::Yellow))
        .title(Span::styled(title, Style::new().fg(Color::Yellow)));
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

/// The question under a proposed plan (the plan itself is the answer above it).
fn draw_plan_prompt(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let key = |k: &'static str| Span::styled(k, Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD));
    let lines = vec![
        Line::from(Span::styled(
            format!("Start working on this plan in {} mode?", app.plan_return.name()),
            Style::new().add_modifier(Modifier::BOLD),
        )),
        Line::from(vec![
            key("y"),
            Span::raw(" accept and start  "),
            key("n"),
            Span::raw(" keep planning (then say what to change)"),
        ]),
    ];
    let block = Block::default()
        .borders(Borders::ALL)
        .border_type(BorderType::Rounded)
        .border_style(Style::new().fg(Color::Cyan))
        .title(Span::styled(" plan ready ", Style::new().fg(Color::Cyan)));
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

/// `12345` as `12.3k`.
fn kilo(n: u64) -> String {
    if n >= 1000 {
        format!("{:.1}k", n as f64 / 1000.0)
    } else {
        n.to_string()
    }
}

/// A model name short enough for the status line (scripts and paths by file name).
fn short_model(model: &str) -> String {
    match model.split_once(':') {
        Some((kind, rest)) if rest.contains('/') && !rest.starts_with("http") => {
            format!("{kind}:{}", rest.rsplit('/').next().unwrap_or(rest))
        }
        _ => model.to_string(),
    }
}

fn draw_status(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let s = &app.status;
    let container = match &s.container {
        ContainerState::Starting => "starting",
        ContainerState::Running(_) => "running",
        ContainerState::Restarting => "restarting",
        ContainerState::Removed => "removed",
    };
    let pct = (s.context_used * 100).checked_div(s.context_max).unwrap_or(0);
    let mut parts = vec![
        short_model(&s.model),
        app.mode.name().to_string(),
        format!("sandbox {container}"),
        format!("ctx {}/{} {pct}%", kilo(s.context_used), kilo(s.context_max)),
    ];
    if let (true, Some(tps)) = (app.busy, s.tokens_per_sec) {
        parts.push(format!("{tps:.1} tok/s"));
    }
    let text = parts.join(" · ");
    let width = usize::from(area.width);
    let mut spans = Vec::new();
    if let Some(hint) = &app.hint {
        spans.push(Span::styled(format!("{}  ", escape(hint)), Style::new().fg(Color::Yellow)));
    }
    let used: usize = spans.iter().map(|s| s.width()).sum();
    spans.push(Span::styled(truncate(&escape(&text), width.saturating_sub(used)), Style::new().fg(Color::DarkGray)));
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}
