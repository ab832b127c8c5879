//! Markdown to styled lines: headings, emphasis, inline code, links with their
//! targets, lists, quotes, rules, tables laid out in columns and fenced code blocks
//! (highlighted).

use pulldown_cmark::{Alignment, CodeBlockKind, Event as Md, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthStr;

use super::highlight::highlight;

struct Renderer {
    lines: Vec<Line<'static>>,
    current: Vec<Span<'static>>,
    styles: Vec<Style>,
    /// One entry per open list: the next number for ordered lists.
    lists: Vec<Option<u64>>,
    quote: usize,
    code: Option<(String, String)>,
    /// A list item's bullet, written before its first text.
    pending_prefix: Option<String>,
    /// The targets of the open links, shown after their text.
    links: Vec<String>,
    /// The table being read (its cells are laid out when it ends).
    table: Option<Table>,
}

/// A table's cells as plain text, laid out in columns at its end.
#[derive(Default)]
struct Table {
    aligns: Vec<Alignment>,
    /// Header rows first.
    rows: Vec<Vec<String>>,
    head_rows: usize,
    cell: String,
}

impl Renderer {
    fn style(&self) -> Style {
        self.styles.last().copied().unwrap_or_default()
    }

    fn push_style(&mut self, f: impl FnOnce(Style) -> Style) {
        let s = f(self.style());
        self.styles.push(s);
    }

    fn indent(&self) -> String {
        let mut s = "│ ".repeat(self.quote);
        s.push_str(&"  ".repeat(self.lists.len().saturating_sub(1)));
        s
    }

    fn text(&mut self, text: &str) {
        if let Some(t) = &mut self.table {
            t.cell.push_str(text);
            return;
        }
        for (i, part) in text.split('\n').enumerate() {
            if i > 0 {
                self.flush();
            }
            if part.is_empty() {
                continue;
            }
            self.start_line();
            self.current.push(Span::styled(part.to_string(), self.style()));
        }
    }

    fn start_line(&mut self) {
        if self.current.is_empty() {
            let mut prefix = self.indent();
            if let Some(bullet) = self.pending_prefix.take() {
                prefix.push_str(&bullet);
            } else if !self.lists.is_empty() {
                prefix.push_str("  ");
            }
            if !prefix.is_empty() {
                self.current.push(Span::styled(prefix, Style::new().fg(Color::DarkGray)));
            }
        }
    }

    fn flush(&mut self) {
        if !self.current.is_empty() {
            self.lines.push(Line::from(std::mem::take(&mut self.current)));
        }
    }

    fn blank(&mut self) {
        self.flush();
        if self.lines.last().is_some_and(|l| l.width() > 0) {
            self.lines.push(Line::default());
        }
    }
}

/// Renders Markdown into unwrapped lines.
pub fn render_markdown(text: &str) -> Vec<Line<'static>> {
    let mut r = Renderer {
        lines: Vec::new(),
        current: Vec::new(),
        styles: Vec::new(),
        lists: Vec::new(),
        quote: 0,
        code: None,
        pending_prefix: None,
        links: Vec::new(),
        table: None,
    };
    let opts = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS;
    for ev in Parser::new_ext(text, opts) {
        match ev {
            Md::Start(tag) => start(&mut r, tag),
            Md::End(tag) => end(&mut r, tag),
            Md::Text(t) => match &mut r.code {
                Some((_, buf)) => buf.push_str(&t),
                None => r.text(&t),
            },
            Md::Code(t) if r.table.is_some() => r.text(&t),
            Md::Code(t) => {
                r.start_line();
                r.current.push(Span::styled(t.to_string(), Style::new().fg(Color::Cyan)));
            }
            Md::SoftBreak => r.text(" "),
            Md::HardBreak => r.flush(),
            Md::Rule => {
                r.blank();
                r.lines.push(Line::from(Span::styled("───", Style::new().fg(Color::DarkGray))));
            }
            Md::TaskListMarker(done) => {
                r.start_line();
                r.current.push(Span::raw(if done { "[x] " } else { "[ ] " }));
            }
            Md::Html(t) | Md::InlineHtml(t) => r.text(&t),
            _ => {}
        }
    }
    // A code block still streaming has no end event yet.
    if let Some((lang, code)) = r.code.take() {
        code_block(&mut r, &lang, &code);
    }
    r.flush();
    while r.lines.last().is_some_and(|l| l.width() == 0) {
        r.lines.pop();
    }
    r.lines
}

fn start(r: &mut Renderer, tag: Tag<'_>) {
    match tag {
        Tag::Paragraph => r.flush(),
        Tag::Heading { level, .. } => {
            r.blank();
            // Levels show by style, as rendered Markdown does, not by their `#` marks.
            r.push_style(|s| match level {
                HeadingLevel::H1 => s.add_modifier(Modifier::BOLD | Modifier::UNDERLINED).fg(Color::LightMagenta),
                HeadingLevel::H2 => s.add_modifier(Modifier::BOLD).fg(Color::LightMagenta),
                _ => s.add_modifier(Modifier::BOLD),
            });
        }
        Tag::Table(aligns) => {
            r.blank();
            r.table = Some(Table { aligns, ..Table::default() });
        }
        Tag::TableHead | Tag::TableRow => {
            if let Some(t) = &mut r.table {
                t.rows.push(Vec::new());
            }
        }
        Tag::TableCell => {
            if let Some(t) = &mut r.table {
                t.cell.clear();
            }
        }
        Tag::BlockQuote(_) => {
            r.flush();
            r.quote += 1;
            r.push_style(|s| s.fg(Color::Gray).add_modifier(Modifier::ITALIC));
        }
        Tag::CodeBlock(kind) => {
            r.blank();
            let lang = match kind {
                CodeBlockKind::Fenced(l) => l.to_string(),
                CodeBlockKind::Indented => String::new(),
            };
            r.code = Some((lang, String::new()));
        }
        Tag::List(first) => {
            r.flush();
            r.lists.push(first);
        }
        Tag::Item => {
            r.flush();
            let bullet = match r.lists.last_mut() {
                Some(Some(n)) => {
                    let b = format!("{n}. ");
                    *n += 1;
                    b
                }
                _ => "• ".to_string(),
            };
            r.pending_prefix = Some(bullet);
        }
        Tag::Emphasis => r.push_style(|s| s.add_modifier(Modifier::ITALIC)),
        Tag::Strong => r.push_style(|s| s.add_modifier(Modifier::BOLD)),
        Tag::Strikethrough => r.push_style(|s| s.add_modifier(Modifier::CROSSED_OUT)),
        Tag::Link { dest_url, .. } => {
            r.links.push(dest_url.to_string());
            r.push_style(|s| s.fg(Color::Blue).add_modifier(Modifier::UNDERLINED));
        }
        _ => {}
    }
}

fn end(r: &mut Renderer, tag: TagEnd) {
    match tag {
        TagEnd::Paragraph => {
            r.flush();
            if r.lists.is_empty() {
                r.blank();
            }
        }
        TagEnd::Heading(_) => {
            r.styles.pop();
            r.blank();
        }
        TagEnd::BlockQuote(_) => {
            r.styles.pop();
            r.flush();
            r.quote = r.quote.saturating_sub(1);
            r.blank();
        }
        TagEnd::CodeBlock => {
            if let Some((lang, code)) = r.code.take() {
                code_block(r, &lang, &code);
            }
            r.blank();
        }
        TagEnd::List(_) => {
            r.flush();
            r.lists.pop();
            if r.lists.is_empty() {
                r.blank();
            }
        }
        TagEnd::Item => r.flush(),
        TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => {
            r.styles.pop();
        }
        TagEnd::Link => {
            r.styles.pop();
            let url = r.links.pop().unwrap_or_default();
            // The target is shown unless the text already is it (an autolink).
            let shown_text = r.current.last().map(|s| s.content.to_string()).unwrap_or_default();
            if !url.is_empty() && !shown_text.ends_with(url.trim_start_matches("mailto:")) {
                if let Some(t) = &mut r.table {
                    t.cell.push_str(&format!(" ({url})"));
                } else {
                    r.current.push(Span::styled(format!(" ({url})"), Style::new().fg(Color::DarkGray)));
                }
            }
        }
        TagEnd::TableHead => {
            if let Some(t) = &mut r.table {
                t.head_rows = t.rows.len();
            }
        }
        TagEnd::TableCell => {
            if let Some(t) = &mut r.table {
                let cell = std::mem::take(&mut t.cell).trim().to_string();
                if let Some(row) = t.rows.last_mut() {
                    row.push(cell);
                }
            }
        }
        TagEnd::Table => {
            if let Some(t) = r.table.take() {
                table(r, &t);
            }
            r.blank();
        }
        _ => {}
    }
}

/// Lays a table out in columns: cells padded to their column's width and aligned as the
/// table says, ` │ ` between columns, a rule under the header.
fn table(r: &mut Renderer, t: &Table) {
    r.flush();
    let columns = t.rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; columns];
    for row in &t.rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.width());
        }
    }
    let indent = r.indent();
    let rule = Style::new().fg(Color::DarkGray);
    for (n, row) in t.rows.iter().enumerate() {
        let head = n < t.head_rows;
        let mut spans = Vec::new();
        if !indent.is_empty() {
            spans.push(Span::styled(indent.clone(), rule));
        }
        for (i, width) in widths.iter().enumerate() {
            if i > 0 {
                spans.push(Span::styled(" │ ", rule));
            }
            let cell = row.get(i).map(String::as_str).unwrap_or("");
            let pad = width.saturating_sub(cell.width());
            let (left, right) = match t.aligns.get(i) {
                Some(Alignment::Right) => (pad, 0),
                Some(Alignment::Center) => (pad / 2, pad - pad / 2),
                _ => (0, pad),
            };
            // The last column is not padded on the right: no trailing blanks.
            let right = if i + 1 == widths.len() { 0 } else { right };
            let text = format!("{}{cell}{}", " ".repeat(left), " ".repeat(right));
            let style = if head { Style::new().add_modifier(Modifier::BOLD) } else { Style::new() };
            spans.push(Span::styled(text, style));
        }
        r.lines.push(Line::from(spans));
        if head && n + 1 == t.head_rows {
            let line: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
            r.lines.push(Line::from(Span::styled(format!("{indent}{}", line.join("─┼─")), rule)));
        }
    }
}

fn code_block(r: &mut Renderer, lang: &str, code: &str) {
    r.flush();
    let indent = r.indent();
    let gutter = Style::new().fg(Color::DarkGray);
    if !lang.is_empty() {
        r.lines.push(Line::from(Span::styled(format!("{indent}╭─ {lang}"), gutter)));
    }
    for line in highlight(code, lang) {
        let mut spans = vec![Span::styled(format!("{indent}│ "), gutter)];
        spans.extend(line.spans);
        r.lines.push(Line::from(spans));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn headings_lists_and_code() {
        let md =
            "# Title\n\nSome *text* and `code`.\n\n- one\n- two\n\n1. first\n2. second\n\n```rust\nfn x() {}\n```\n";
        let out = text(&render_markdown(md));
        assert_eq!(
            out,
            vec![
                "Title",
                "",
                "Some text and code.",
                "",
                "• one",
                "• two",
                "",
                "1. first",
                "2. second",
                "",
                "╭─ rust",
                "│ fn x() {}",
            ]
        );
    }

    #[test]
    fn tables_are_laid_out_in_columns() {
        let md = "| col a | col b | n |\n|---|:-:|--:|\n| 1 | two | 3 |\n| `x` | y | 40 |\n";
        let out = text(&render_markdown(md));
        assert_eq!(out, vec!["col a │ col b │  n", "──────┼───────┼───", "1     │  two  │  3", "x     │   y   │ 40"]);
    }

    #[test]
    fn links_show_their_target_and_headings_lose_their_marks() {
        let md = "## Docs\n\nSee [the guide](https://example.com/guide) or <https://example.com>.\n";
        let out = text(&render_markdown(md));
        assert_eq!(out, vec!["Docs", "", "See the guide (https://example.com/guide) or https://example.com."]);
    }

    #[test]
    fn unclosed_code_block_while_streaming() {
        let out = text(&render_markdown("Here:\n\n```python\nprint(1)\n"));
        assert_eq!(out, vec!["Here:", "", "╭─ python", "│ print(1)"]);
    }
}
