//! Syntax highlighting of code blocks with syntect's bundled syntaxes and themes.

use std::sync::OnceLock;

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use syntect::easy::HighlightLines;
use syntect::highlighting::{FontStyle, Theme, ThemeSet};
use syntect::parsing::SyntaxSet;

struct Highlighter {
    syntaxes: SyntaxSet,
    theme: Theme,
}

/// Loading the bundled sets takes tens of milliseconds: once per process.
fn highlighter() -> &'static Highlighter {
    static H: OnceLock<Highlighter> = OnceLock::new();
    H.get_or_init(|| {
        let syntaxes = SyntaxSet::load_defaults_newlines();
        let mut themes = ThemeSet::load_defaults();
        let theme = themes.themes.remove("base16-ocean.dark").unwrap_or_default();
        Highlighter { syntaxes, theme }
    })
}

/// Highlights `code` as language `lang` (a fence tag such as `rust` or `py`); plain
/// lines when the language is unknown.
pub fn highlight(code: &str, lang: &str) -> Vec<Line<'static>> {
    let plain = || -> Vec<Line<'static>> {
        code.lines().map(|l| Line::from(Span::styled(l.to_string(), Style::new().fg(Color::Gray)))).collect()
    };
    let lang = lang.split([',', ' ']).next().unwrap_or("").trim();
    if lang.is_empty() {
        return plain();
    }
    let h = highlighter();
    let Some(syntax) = h.syntaxes.find_syntax_by_token(lang) else {
        return plain();
    };
    let mut lines = HighlightLines::new(syntax, &h.theme);
    let mut out = Vec::new();
    for line in syntect::util::LinesWithEndings::from(code) {
        let Ok(ranges) = lines.highlight_line(line, &h.syntaxes) else {
            return plain();
        };
        let spans: Vec<Span<'static>> = ranges
            .into_iter()
            .map(|(style, text)| {
                let fg = style.foreground;
                let mut s = Style::new().fg(Color::Rgb(fg.r, fg.g, fg.b));
                if style.font_style.contains(FontStyle::BOLD) {
                    s = s.add_modifier(Modifier::BOLD);
                }
                if style.font_style.contains(FontStyle::ITALIC) {
                    s = s.add_modifier(Modifier::ITALIC);
                }
                Span::styled(text.trim_end_matches(['\n', '\r']).to_string(), s)
            })
            .filter(|s| !s.content.is_empty())
            .collect();
        out.push(Line::from(spans));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_keywords_get_colour_and_text_is_kept() {
        let lines = highlight("fn main() {\n    let x = 1;\n}\n", "rust");
        assert_eq!(lines.len(), 3);
        let text: String = lines[1].spans.iter().map(|s| s.content.as_ref()).collect();
        assert_eq!(text, "    let x = 1;");
        let colours: std::collections::HashSet<_> = lines[0].spans.iter().map(|s| s.style.fg).collect();
        assert!(colours.len() > 1, "expected several colours: {:?}", lines[0]);
        let plain = highlight("a\nb", "no-such-language");
        assert_eq!(plain.len(), 2);
    }
}
