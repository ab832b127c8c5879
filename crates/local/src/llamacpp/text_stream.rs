//! Token bytes to streamed text, with stop strings.

/// Turns token bytes into streamed text: holds back incomplete UTF-8 sequences (a token
/// can end inside a multi-byte character) and any tail that could be the start of a stop
/// string, and cuts the text at the first stop string.
pub(super) struct TextStream {
    stops: Vec<String>,
    /// Bytes of an unfinished UTF-8 character.
    pending: Vec<u8>,
    /// All decoded text so far.
    text: String,
    /// How much of `text` went out as deltas.
    emitted: usize,
}

impl TextStream {
    pub(super) fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: Vec::new(),
            text: String::new(),
            emitted: 0,
        }
    }

    /// Adds a token's bytes; returns the text now safe to show and whether a stop string
    /// appeared (the text is then cut before it).
    pub(super) fn push(&mut self, bytes: &[u8]) -> (String, bool) {
        self.pending.extend_from_slice(bytes);
        let search_from = self.text.len();
        self.decode_pending();
        if let Some(cut) = self.find_stop(search_from) {
            self.text.truncate(cut);
            return (self.take_upto(self.text.len()), true);
        }
        let safe = self.text.len() - self.stop_prefix_len();
        (self.take_upto(safe), false)
    }

    /// Moves every complete character from `pending` into `text`; bytes that can never be
    /// valid UTF-8 become U+FFFD.
    fn decode_pending(&mut self) {
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    self.text.push_str(s);
                    self.pending.clear();
                    return;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // The prefix was just checked, so this conversion cannot fail.
                    self.text.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            self.text.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                        None => {
                            // An unfinished character: keep it for the next token.
                            self.pending.drain(..valid);
                            return;
                        }
                    }
                }
            }
        }
    }

    /// The byte offset of the first stop string that ends in the newly added text.
    fn find_stop(&self, search_from: usize) -> Option<usize> {
        let longest = self.stops.iter().map(String::len).max()?;
        let mut from = search_from.saturating_sub(longest.saturating_sub(1));
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        self.stops.iter().filter_map(|s| self.text[from..].find(s.as_str()).map(|i| from + i)).min()
    }

    /// Length of the longest tail of `text` that is a proper prefix of a stop string.
    fn stop_prefix_len(&self) -> usize {
        let unsent = &self.text[self.emitted..];
        unsent
            .char_indices()
            .map(|(i, _)| &unsent[i..])
            .find(|tail| self.stops.iter().any(|s| s.len() > tail.len() && s.starts_with(tail)))
            .map_or(0, str::len)
    }

    fn take_upto(&mut self, end: usize) -> String {
        if end <= self.emitted {
            return String::new();
        }
        let out = self.text[self.emitted..end].to_string();
        self.emitted = end;
        out
    }

    /// Flushes what was held back at the end of generation. After a stop string nothing is
    /// held; otherwise a held-back stop prefix was not a stop after all and goes out, and
    /// an unfinished character becomes U+FFFD.
    pub(super) fn finish(&mut self, stopped: bool) -> String {
        if !stopped && !self.pending.is_empty() {
            self.text.push(char::REPLACEMENT_CHARACTER);
            self.pending.clear();
        }
        self.take_upto(self.text.len())
    }

    pub(super) fn into_text(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&[u8]]) -> (Vec<String>, String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut s = TextStream::new(&stops);
        let mut deltas = Vec::new();
        let mut stopped = false;
        for p in pieces {
            let (d, hit) = s.push(p);
            if !d.is_empty() {
                deltas.push(d);
            }
            if hit {
                stopped = true;
                break;
            }
        }
        let tail = s.finish(stopped);
        if !tail.is_empty() {
            deltas.push(tail);
        }
        (deltas, s.into_text(), stopped)
    }

    #[test]
    fn split_utf8_is_held_until_complete() {
        let e = "é".as_bytes();
        let (deltas, text, _) = run(&[], &[b"caf", &e[..1], &e[1..], b"!"]);
        assert_eq!(text, "café!");
        assert_eq!(deltas.concat(), "café!");
        assert!(deltas.iter().all(|d| !d.contains('\u{FFFD}')));
    }

    #[test]
    fn stop_string_across_tokens_is_cut_and_never_streamed() {
        let (deltas, text, stopped) = run(&["</bash>"], &[b"ls -la</", b"ba", b"sh> more"]);
        assert!(stopped);
        assert_eq!(text, "ls -la");
        assert_eq!(deltas.concat(), "ls -la");
    }

    #[test]
    fn held_back_prefix_is_flushed_when_not_a_stop() {
        let (deltas, text, stopped) = run(&["STOP"], &[b"a ST", b"ART"]);
        assert!(!stopped);
        assert_eq!(text, "a START");
        assert_eq!(deltas.concat(), "a START");
    }

    #[test]
    fn invalid_bytes_become_replacement() {
        let (_, text, _) = run(&[], &[b"a\xFFb"]);
        assert_eq!(text, "a\u{FFFD}b");
    }
}
