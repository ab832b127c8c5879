//! Text from the model, tools, MCP servers and project files made safe to draw: control
//! characters (ESC, BEL, CR, C1 …: a terminal would act on them, e.g. OSC 52 writes the
//! clipboard) and bidi and zero-width characters (they make the text read otherwise
//! than it is) are shown escaped, as `\u{1b}`, instead of reaching the terminal.

use std::borrow::Cow;

/// Whether `c` is shown escaped: C0 and C1 controls and DEL except `\n` and `\t`,
/// bidi controls and invisible characters.
pub fn is_unsafe(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{061C}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{FEFF}'
        )
}

/// The visible form of an unsafe character: `\u{1b}`.
pub fn escaped(c: char) -> String {
    format!("\\u{{{:x}}}", u32::from(c))
}

/// The characters `c` is drawn as: itself, or its escape when it is unsafe.
pub fn shown(c: char) -> impl Iterator<Item = char> {
    let escape = is_unsafe(c).then(|| escaped(c).chars().collect::<Vec<_>>());
    let plain = escape.is_none().then_some(c);
    plain.into_iter().chain(escape.into_iter().flatten())
}

/// `text` with every unsafe character escaped (borrowed when there is none).
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe(c) {
            out.push_str(&escaped(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_are_escaped_and_plain_text_is_kept() {
        assert_eq!(escape("a\x1b]52;c;aGk=\x07b"), "a\\u{1b}]52;c;aGk=\\u{7}b");
        assert_eq!(escape("x\u{202e}gnp.exe\u{200b}\r\u{9b}"), "x\\u{202e}gnp.exe\\u{200b}\\u{d}\\u{9b}");
        assert_eq!(escape("tab\tnew\nline é 漢字 ✓"), "tab\tnew\nline é 漢字 ✓");
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
    }
}
