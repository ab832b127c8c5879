//! The multi-line input box: editing, history, and pastes too large to show (kept
//! aside behind a placeholder and put back when the message is sent).

use unicode_width::UnicodeWidthStr;

/// Pastes with more lines than this are shown as a placeholder.
const PASTE_PLACEHOLDER_LINES: usize = 12;
/// ... or with more bytes than this.
const PASTE_PLACEHOLDER_BYTES: usize = 2000;

/// The input box's state.
#[derive(Debug, Default)]
pub struct Composer {
    text: String,
    /// Byte offset of the cursor in `text`.
    cursor: usize,
    history: Vec<String>,
    /// Position while browsing history (`None`: editing a new message).
    browsing: Option<usize>,
    /// Text being edited before history browsing started.
    draft: String,
    /// Large pastes: (placeholder, content).
    pastes: Vec<(String, String)>,
}

/// `12345` as `12,345` (the UI's counts: pasted lines, prompt tokens).
pub(crate) fn group_thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Composer {
    /// The text as shown (placeholders included).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the box is empty.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Replaces the whole text, cursor at the end.
    pub fn set_text(&mut self, text: &str) {
        self.text = text.to_string();
        self.cursor = self.text.len();
        self.browsing = None;
    }

    /// Empties the box (pastes included).
    pub fn clear(&mut self) {
        self.text.clear();
        self.cursor = 0;
        self.browsing = None;
        self.pastes.clear();
    }

    /// Inserts text at the cursor.
    pub fn insert_str(&mut self, s: &str) {
        self.text.insert_str(self.cursor, s);
        self.cursor += s.len();
    }

    /// Inserts one character at the cursor.
    pub fn insert_char(&mut self, c: char) {
        self.text.insert(self.cursor, c);
        self.cursor += c.len_utf8();
    }

    /// A paste: small ones are inserted, large ones become a placeholder.
    pub fn paste(&mut self, content: &str) {
        let content = content.replace("\r\n", "\n").replace('\r', "\n");
        let lines = content.lines().count();
        if lines > PASTE_PLACEHOLDER_LINES || content.len() > PASTE_PLACEHOLDER_BYTES {
            let placeholder = format!("[pasted {} lines #{}]", group_thousands(lines as u64), self.pastes.len() + 1);
            self.insert_str(&placeholder);
            self.pastes.push((placeholder, content));
        } else {
            self.insert_str(&content);
        }
    }

    /// Deletes the character before the cursor (a whole placeholder at once).
    pub fn backspace(&mut self) {
        if self.cursor == 0 {
            return;
        }
        let before = &self.text[..self.cursor];
        if let Some((i, (ph, _))) = self.pastes.iter().enumerate().find(|(_, (ph, _))| before.ends_with(ph.as_str())) {
            let start = self.cursor - ph.len();
            self.text.replace_range(start..self.cursor, "");
            self.cursor = start;
            self.pastes.remove(i);
            return;
        }
        if let Some(c) = before.chars().next_back() {
            self.cursor -= c.len_utf8();
            self.text.remove(self.cursor);
        }
    }

    /// Deletes the character under the cursor.
    pub fn delete(&mut self) {
        if self.cursor < self.text.len() {
            self.text.remove(self.cursor);
        }
    }

    /// Moves the cursor one character left.
    pub fn left(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
        }
    }

    /// Moves the cursor one character right.
    pub fn right(&mut self) {
        if let Some(c) = self.text[self.cursor..].chars().next() {
            self.cursor += c.len_utf8();
        }
    }

    /// Start of the current line.
    pub fn home(&mut self) {
        self.cursor = self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1);
    }

    /// End of the current line.
    pub fn end(&mut self) {
        self.cursor = self.text[self.cursor..].find('\n').map_or(self.text.len(), |i| self.cursor + i);
    }

    /// Deletes the word before the cursor.
    pub fn delete_word(&mut self) {
        let before = &self.text[..self.cursor];
        let trimmed = before.trim_end();
        let start = trimmed.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        self.text.replace_range(start..self.cursor, "");
        self.cursor = start;
    }

    /// Up: the previous line, or on the first line the previous history entry.
    pub fn up(&mut self) {
        if let Some(nl) = self.text[..self.cursor].rfind('\n') {
            let col = self.cursor - nl - 1;
            let prev_start = self.text[..nl].rfind('\n').map_or(0, |i| i + 1);
            self.cursor = prev_start + col.min(nl - prev_start);
            self.snap();
            return;
        }
        let next = match self.browsing {
            None if self.history.is_empty() => return,
            None => {
                self.draft = self.text.clone();
                self.history.len() - 1
            }
            Some(0) => return,
            Some(i) => i - 1,
        };
        self.browsing = Some(next);
        self.text = self.history[next].clone();
        self.cursor = self.text.len();
    }

    /// Down: the next line, or on the last line the next history entry.
    pub fn down(&mut self) {
        if let Some(nl) = self.text[self.cursor..].find('\n') {
            let line_start = self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1);
            let col = self.cursor - line_start;
            let next_start = self.cursor + nl + 1;
            let next_end = self.text[next_start..].find('\n').map_or(self.text.len(), |i| next_start + i);
            self.cursor = next_start + col.min(next_end - next_start);
            self.snap();
            return;
        }
        match self.browsing {
            None => {}
            Some(i) if i + 1 < self.history.len() => {
                self.browsing = Some(i + 1);
                self.text = self.history[i + 1].clone();
                self.cursor = self.text.len();
            }
            Some(_) => {
                self.browsing = None;
                self.text = std::mem::take(&mut self.draft);
                self.cursor = self.text.len();
            }
        }
    }

    /// Moves the cursor back to a character boundary.
    fn snap(&mut self) {
        while !self.text.is_char_boundary(self.cursor) {
            self.cursor -= 1;
        }
    }

    /// Takes the message for sending: placeholders are expanded, the shown text goes
    /// into the history, the box is emptied.
    pub fn submit(&mut self) -> String {
        self.submit_parts().1
    }

    /// Like [`Composer::submit`], returning the text as shown (placeholders kept) too.
    pub fn submit_parts(&mut self) -> (String, String) {
        let shown = std::mem::take(&mut self.text);
        let mut full = shown.clone();
        for (ph, content) in self.pastes.drain(..) {
            full = full.replacen(&ph, &content, 1);
        }
        if !shown.trim().is_empty() && self.history.last() != Some(&shown) {
            self.history.push(shown.clone());
        }
        self.cursor = 0;
        self.browsing = None;
        (shown, full)
    }

    /// The word under the cursor when it starts with `@` (for path completion).
    pub fn at_word(&self) -> Option<&str> {
        let before = &self.text[..self.cursor];
        let start = before.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        let word = &before[start..];
        word.starts_with('@').then_some(word)
    }

    /// Replaces the `@word` under the cursor with `replacement`.
    pub fn replace_at_word(&mut self, replacement: &str) {
        let before = &self.text[..self.cursor];
        let start = before.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        self.text.replace_range(start..self.cursor, replacement);
        self.cursor = start + replacement.len();
    }

    /// Lines of the text and the cursor's (row, column) in display cells.
    pub fn layout(&self) -> (Vec<&str>, (usize, usize)) {
        let lines: Vec<&str> = self.text.split('\n').collect();
        let before = &self.text[..self.cursor];
        let row = before.matches('\n').count();
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = UnicodeWidthStr::width(&self.text[line_start..self.cursor]);
        (lines, (row, col))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editing_and_history() {
        let mut c = Composer::default();
        c.insert_str("héllo");
        c.backspace();
        c.left();
        c.insert_char('X');
        assert_eq!(c.text(), "hélXl");
        assert_eq!(c.submit(), "hélXl");
        c.insert_str("second");
        assert_eq!(c.submit(), "second");
        c.insert_str("draft");
        c.up();
        assert_eq!(c.text(), "second");
        c.up();
        assert_eq!(c.text(), "hélXl");
        c.down();
        c.down();
        assert_eq!(c.text(), "draft");
    }

    #[test]
    fn multi_line_cursor_moves_between_lines() {
        let mut c = Composer::default();
        c.insert_str("abc\nde");
        assert_eq!(c.layout().1, (1, 2));
        c.up();
        assert_eq!(c.layout().1, (0, 2));
        c.down();
        assert_eq!(c.layout().1, (1, 2));
    }

    #[test]
    fn large_paste_is_a_placeholder_expanded_on_submit() {
        let mut c = Composer::default();
        let big: String = (0..1234).map(|i| format!("line {i}\n")).collect();
        c.insert_str("look: ");
        c.paste(&big);
        assert_eq!(c.text(), "look: [pasted 1,234 lines #1]");
        let sent = c.submit();
        assert!(sent.starts_with("look: line 0\n") && sent.contains("line 1233"));
        c.paste(&big);
        c.backspace();
        assert!(c.is_empty());
        c.paste("small\npaste");
        assert_eq!(c.text(), "small\npaste");
    }

    #[test]
    fn at_word_completion() {
        let mut c = Composer::default();
        c.insert_str("read @src/ma");
        assert_eq!(c.at_word(), Some("@src/ma"));
        c.replace_at_word("@src/main.rs ");
        assert_eq!(c.text(), "read @src/main.rs ");
        assert_eq!(c.at_word(), None);
    }
}
