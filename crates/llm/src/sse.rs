//! An incremental Server-Sent-Events decoder.
//!
//! Bytes are fed in whatever pieces the network delivers (a chunk may end anywhere,
//! even inside a UTF-8 sequence or between the `\r` and `\n` of a CRLF); complete
//! events come out. Lines end with `\n`, `\r\n` or `\r`; `data:` lines of one event are
//! joined with `\n`; `event:` sets the event name; lines starting with `:` are
//! comments; `id:` and `retry:` are accepted and ignored. Text is decoded per complete
//! line, so split UTF-8 sequences are reassembled; invalid bytes become U+FFFD.

/// One decoded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` name, if the event had one.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// The incremental decoder; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a leading `\n` of the next one belongs to it.
    pending_cr: bool,
    /// Data lines of the event being built, each followed by `\n`.
    data: String,
    /// Whether the event being built has at least one `data` field.
    has_data: bool,
    /// The `event:` name of the event being built.
    event: Option<String>,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes and returns the events they complete, in order.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        let mut rest = bytes;
        if self.pending_cr && !bytes.is_empty() {
            self.pending_cr = false;
            if bytes[0] == b'\n' {
                rest = &bytes[1..];
            }
        }
        while let Some(pos) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&rest[..pos]);
            let terminator = rest[pos];
            rest = &rest[pos + 1..];
            if terminator == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.pending_cr = true,
                }
            }
            let line = std::mem::take(&mut self.line);
            if let Some(event) = self.process_line(&line) {
                events.push(event);
            }
        }
        self.line.extend_from_slice(rest);
        events
    }

    /// Ends the stream: a final line without terminator is processed and an event
    /// whose closing blank line never came is returned (servers that close the
    /// connection right after the last `data:` line are common).
    pub(crate) fn finish(&mut self) -> Option<SseEvent> {
        self.pending_cr = false;
        let line = std::mem::take(&mut self.line);
        let mut event = None;
        if !line.is_empty() {
            event = self.process_line(&line);
        }
        event.or_else(|| self.dispatch())
    }

    /// Handles one complete line; returns an event when the line is blank.
    fn process_line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.find(':') {
            Some(i) => {
                let value = &text[i + 1..];
                (&text[..i], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&text[..], ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            // `id`, `retry` and unknown fields carry nothing we use.
            _ => {}
        }
        None
    }

    /// Completes the event being built; an event without data is dropped (as the
    /// SSE specification says).
    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !self.has_data {
            self.data.clear();
            return None;
        }
        self.has_data = false;
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        Some(SseEvent { event, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> SseEvent {
        SseEvent { event: None, data: data.to_string() }
    }

    fn decode_in_pieces(input: &[u8], sizes: &[usize]) -> Vec<SseEvent> {
        let mut dec = SseDecoder::new();
        let mut out = Vec::new();
        let mut rest = input;
        let mut i = 0;
        while !rest.is_empty() {
            let n = sizes[i % sizes.len()].clamp(1, rest.len());
            out.extend(dec.feed(&rest[..n]));
            rest = &rest[n..];
            i += 1;
        }
        out.extend(dec.finish());
        out
    }

    #[test]
    fn single_event() {
        let mut dec = SseDecoder::new();
        assert_eq!(dec.feed(b"data: hello\n\n"), vec![ev("hello")]);
        assert_eq!(dec.finish(), None);
    }

    #[test]
    fn multi_line_data_and_event_name() {
        let mut dec = SseDecoder::new();
        let out = dec.feed(b"event: update\ndata: a\ndata:b\ndata:  c\n\n");
        assert_eq!(out, vec![SseEvent { event: Some("update".into()), data: "a\nb\n c".into() }]);
        // The name does not leak into the next event.
        assert_eq!(dec.feed(b"data: x\n\n"), vec![ev("x")]);
    }

    #[test]
    fn comments_ids_and_empty_events_are_ignored() {
        let mut dec = SseDecoder::new();
        let out = dec.feed(b": keep-alive\n\nid: 7\nretry: 100\n\nevent: ping\n\ndata: z\n\n");
        assert_eq!(out, vec![ev("z")]);
    }

    #[test]
    fn field_without_colon_and_empty_data() {
        let mut dec = SseDecoder::new();
        assert_eq!(dec.feed(b"data\n\n"), vec![ev("")]);
        assert_eq!(dec.feed(b"data:\ndata:\n\n"), vec![ev("\n")]);
    }

    #[test]
    fn crlf_and_cr_line_endings() {
        let mut dec = SseDecoder::new();
        assert_eq!(dec.feed(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n"), vec![ev("a"), ev("b"), ev("c")]);
    }

    #[test]
    fn crlf_split_across_chunks() {
        let mut dec = SseDecoder::new();
        assert!(dec.feed(b"data: a\r").is_empty());
        // The `\n` completes the CRLF, it is not a blank line.
        assert!(dec.feed(b"\n").is_empty());
        assert!(dec.feed(b"data: b\r").is_empty());
        assert_eq!(dec.feed(b"\n\r\n"), vec![ev("a\nb")]);
    }

    #[test]
    fn lone_cr_at_chunk_end_then_blank_line() {
        let mut dec = SseDecoder::new();
        assert!(dec.feed(b"data: a\r").is_empty());
        assert_eq!(dec.feed(b"\r"), vec![ev("a")]);
    }

    #[test]
    fn utf8_split_inside_a_character() {
        let input = "data: héllo wörld – 你好 🦀\n\n".as_bytes();
        for split in 0..input.len() {
            let mut dec = SseDecoder::new();
            let mut out = dec.feed(&input[..split]);
            out.extend(dec.feed(&input[split..]));
            assert_eq!(out, vec![ev("héllo wörld – 你好 🦀")], "split at {split}");
        }
    }

    #[test]
    fn every_chunking_gives_the_same_events() {
        let input = "event: e\r\ndata: {\"a\": \"ü\"}\r\n\r\n: c\ndata: 2\rdata: 3\n\ndata: [DONE]\n\n";
        let expected =
            vec![SseEvent { event: Some("e".into()), data: "{\"a\": \"ü\"}".into() }, ev("2\n3"), ev("[DONE]")];
        for sizes in [&[1usize][..], &[2], &[3], &[5, 1], &[7, 2, 1], &[1000]] {
            assert_eq!(decode_in_pieces(input.as_bytes(), sizes), expected, "sizes {sizes:?}");
        }
    }

    #[test]
    fn finish_flushes_an_unterminated_event() {
        let mut dec = SseDecoder::new();
        assert!(dec.feed(b"data: last").is_empty());
        assert_eq!(dec.finish(), Some(ev("last")));
        let mut dec = SseDecoder::new();
        assert!(dec.feed(b"data: last\n").is_empty());
        assert_eq!(dec.finish(), Some(ev("last")));
        assert_eq!(dec.finish(), None);
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let mut dec = SseDecoder::new();
        assert_eq!(dec.feed(b"data: a\xffb\n\n"), vec![ev("a\u{fffd}b")]);
    }

    #[test]
    fn empty_feeds_are_harmless() {
        let mut dec = SseDecoder::new();
        assert!(dec.feed(b"").is_empty());
        assert!(dec.feed(b"data: a\r").is_empty());
        assert!(dec.feed(b"").is_empty());
        assert!(dec.feed(b"\n").is_empty());
        assert_eq!(dec.feed(b"\n"), vec![ev("a")]);
    }
}
