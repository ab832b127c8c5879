//! Wrapping styled lines to a column width, by display width (wide characters take two
//! columns), preferring breaks at spaces.

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthChar;

use super::sanitize;

/// Display width of a character; control characters count as zero.
fn char_width(c: char) -> usize {
    c.width().unwrap_or(0)
}

/// The width of a line's hanging indent: its leading blanks and list, quote and cell
/// markers (`● `, `• `, `- `, `│ `, `⎿ `, `12. `), so that a wrapped paragraph keeps
/// its left edge. None (0) when that would take over half the width.
fn hanging_indent(line: &Line<'_>, width: usize) -> usize {
    let chars: Vec<char> = line.spans.iter().flat_map(|s| s.content.chars()).collect();
    let mut i = 0;
    while i < chars.len() {
        let next_is_space = chars.get(i + 1) == Some(&' ');
        if chars[i] == ' ' {
            i += 1;
        } else if matches!(chars[i], '●' | '•' | '-' | '*' | '│' | '⎿' | '>' | '›') && next_is_space {
            i += 2;
        } else if chars[i].is_ascii_digit() {
            let mut j = i;
            while j < chars.len() && chars[j].is_ascii_digit() {
                j += 1;
            }
            if chars.get(j) == Some(&'.') && chars.get(j + 1) == Some(&' ') {
                i = j + 2;
            } else {
                break;
            }
        } else {
            break;
        }
    }
    if i >= chars.len() {
        return 0;
    }
    let w: usize = chars[..i].iter().map(|c| char_width(*c)).sum();
    if w * 2 > width {
        0
    } else {
        w
    }
}

/// Wraps one line into lines no wider than `width` columns (at least one line);
/// continuation lines start at the line's hanging indent.
pub fn wrap_line(line: &Line<'_>, width: usize) -> Vec<Line<'static>> {
    let width = width.max(1);
    let indent = hanging_indent(line, width);
    let lead = || vec![(' ', Style::default()); indent];
    let mut out: Vec<Vec<(char, Style)>> = Vec::new();
    let mut cur: Vec<(char, Style)> = Vec::new();
    let mut cur_w = 0usize;
    let mut last_space: Option<usize> = None;
    // Characters at the start of `cur` that are the hanging indent (never a break).
    let mut floor = 0usize;
    for span in &line.spans {
        let style = line.style.patch(span.style);
        // Control, bidi and zero-width characters are drawn escaped (`\u{1b}`): this is
        // where text from the model, tools and project files becomes screen lines.
        for c in span.content.chars().flat_map(|c| sanitize::shown(if c == '\t' { ' ' } else { c })) {
            let cw = char_width(c);
            // A space that overflows ends the line and is dropped.
            if c == ' ' && cur_w + cw > width && cur.len() > floor {
                out.push(std::mem::replace(&mut cur, lead()));
                cur_w = indent;
                floor = indent;
                last_space = None;
                continue;
            }
            if cur_w + cw > width && cur.len() > floor {
                match last_space {
                    // Break after the last space when the rest of the word fits.
                    Some(sp) if sp + 1 < cur.len() && sp >= floor => {
                        let rest = cur.split_off(sp + 1);
                        while cur.last().is_some_and(|(c, _)| *c == ' ') {
                            cur.pop();
                        }
                        out.push(std::mem::take(&mut cur));
                        cur = lead();
                        cur.extend(rest);
                    }
                    _ => out.push(std::mem::replace(&mut cur, lead())),
                }
                floor = indent;
                cur_w = cur.iter().map(|(c, _)| char_width(*c)).sum();
                last_space = cur.iter().rposition(|(c, _)| *c == ' ').filter(|p| *p >= floor);
            }
            cur.push((c, style));
            cur_w += cw;
            if c == ' ' && cur.len() > floor {
                last_space = Some(cur.len() - 1);
            }
        }
    }
    out.push(cur);
    out.into_iter().map(to_line).collect()
}

/// Wraps many lines.
pub fn wrap_lines(lines: &[Line<'_>], width: usize) -> Vec<Line<'static>> {
    lines.iter().flat_map(|l| wrap_line(l, width)).collect()
}

/// Merges runs of equally styled characters back into spans.
fn to_line(chars: Vec<(char, Style)>) -> Line<'static> {
    let mut spans: Vec<Span<'static>> = Vec::new();
    let mut text = String::new();
    let mut style: Option<Style> = None;
    for (c, s) in chars {
        if style != Some(s) {
            if let Some(prev) = style {
                spans.push(Span::styled(std::mem::take(&mut text), prev));
            }
            style = Some(s);
        }
        text.push(c);
    }
    if let Some(prev) = style {
        spans.push(Span::styled(text, prev));
    }
    Line::from(spans)
}

/// Display width of a string.
pub fn str_width(s: &str) -> usize {
    s.chars().map(char_width).sum()
}

/// Cuts a string to at most `width` columns, with `…` when something was cut.
pub fn truncate(s: &str, width: usize) -> String {
    if str_width(s) <= width {
        return s.to_string();
    }
    let mut out = String::new();
    let mut w = 0;
    for c in s.chars() {
        let cw = char_width(c);
        if w + cw + 1 > width {
            break;
        }
        out.push(c);
        w += cw;
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn breaks_at_spaces_and_keeps_styles() {
        let line = Line::from(vec![
            Span::raw("hello "),
            Span::styled("brave new", Style::new().add_modifier(ratatui::style::Modifier::BOLD)),
            Span::raw(" world"),
        ]);
        let wrapped = wrap_line(&line, 11);
        assert_eq!(texts(&wrapped), vec!["hello brave", "new world"]);
        assert_eq!(wrapped[0].spans[1].style, Style::new().add_modifier(ratatui::style::Modifier::BOLD));
    }

    #[test]
    fn long_words_are_cut_and_wide_chars_fit() {
        assert_eq!(texts(&wrap_line(&Line::from("abcdefghij"), 4)), vec!["abcd", "efgh", "ij"]);
        // Each CJK character is two columns wide: three fit in seven columns.
        let wrapped = wrap_line(&Line::from("你好世界你好"), 7);
        assert_eq!(texts(&wrapped), vec!["你好世", "界你好"]);
        for l in &wrapped {
            assert!(l.width() <= 7);
        }
        assert_eq!(texts(&wrap_line(&Line::from(""), 5)), vec![""]);
    }

    #[test]
    fn wrapped_lines_keep_their_indent() {
        let wrapped = wrap_line(&Line::from("  • one two three four five"), 14);
        assert_eq!(texts(&wrapped), vec!["  • one two", "    three four", "    five"]);
        let wrapped = wrap_line(&Line::from("● 12. alpha beta gamma"), 14);
        assert_eq!(texts(&wrapped), vec!["● 12. alpha", "      beta", "      gamma"]);
        // An indent past half the width is not kept.
        assert_eq!(texts(&wrap_line(&Line::from("        abc def"), 10)), vec!["", "abc def"]);
    }

    #[test]
    fn truncates_by_width() {
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
        assert_eq!(truncate("你好世界", 5), "你好…");
    }
}
