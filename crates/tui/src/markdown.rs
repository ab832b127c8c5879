//! Markdown to styled lines: headings, emphasis, inline code, lists, quotes, rules
//! and fenced code blocks (highlighted).

use pulldown_cmark::{CodeBlockKind, Event as Md, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

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
            let marks = match level {
                HeadingLevel::H1 => "# ",
                HeadingLevel::H2 => "## ",
                _ => "### ",
            };
            r.push_style(|s| s.add_modifier(Modifier::BOLD).fg(Color::LightMagenta));
            r.text(marks);
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
        Tag::Link { .. } => r.push_style(|s| s.fg(Color::Blue).add_modifier(Modifier::UNDERLINED)),
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
        TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough | TagEnd::Link => {
            r.styles.pop();
        }
        _ => {}
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
                "# Title",
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
    fn unclosed_code_block_while_streaming() {
        let out = text(&render_markdown("Here:\n\n```python\nprint(1)\n"));
        assert_eq!(out, vec!["Here:", "", "╭─ python", "│ print(1)"]);
    }
}
