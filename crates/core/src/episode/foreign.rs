//! Letters a reply has that nothing shown to the model had: the sign of a damaged model
//! (an adapter that writes `完整热榜` or `książ` into an English shell session). ASCII is
//! always expected; any other letter (`char::is_alphabetic`) is expected only once the
//! system prompt, a user message or an observation has shown it.

use std::collections::BTreeSet;

/// The non-ASCII letters shown to the model so far.
#[derive(Debug, Clone, Default)]
pub struct ShownLetters {
    seen: BTreeSet<char>,
}

impl ShownLetters {
    /// Adds the letters of text the model is shown.
    pub fn show(&mut self, text: &str) {
        self.seen.extend(text.chars().filter(|c| is_counted(*c)));
    }

    /// The distinct letters of `reply` that nothing shown had, in code-point order (empty
    /// when there are none).
    pub fn foreign_in(&self, reply: &str) -> String {
        let found: BTreeSet<char> = reply.chars().filter(|c| is_counted(*c) && !self.seen.contains(c)).collect();
        found.into_iter().collect()
    }
}

fn is_counted(c: char) -> bool {
    !c.is_ascii() && c.is_alphabetic()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_of_other_scripts_are_foreign_until_shown_and_symbols_never_are() {
        let mut shown = ShownLetters::default();
        shown.show("You work in /app. Résumé the log — “quoted” ✓ → 42 °C");
        assert_eq!(shown.foreign_in("ls -la /app && echo done ✓ → “ok”"), "", "ASCII and symbols");
        assert_eq!(shown.foreign_in("Résumé: é was shown"), "");
        assert_eq!(shown.foreign_in("完整热榜 ls"), "完整榜热");
        assert_eq!(shown.foreign_in("cat książ.txt"), "ąż");
        assert_eq!(shown.foreign_in("echo شؤ"), "ؤش");
        shown.show("observation: książka");
        assert_eq!(shown.foreign_in("cat książ.txt"), "", "shown by an observation");
    }
}
