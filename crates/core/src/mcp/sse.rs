//! Server-sent events read from a byte stream that arrives in arbitrary chunks: bytes
//! are kept until a line is whole, and an event's data is decoded as UTF-8 only once
//! the event is complete, so that a character, a line or an event split between two
//! chunks comes out intact.

/// The UTF-8 byte order mark, which a stream may start with (the SSE spec drops it).
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Splits a byte stream into events and returns each event's `data`.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes not yet part of a whole line.
    pending: Vec<u8>,
    /// The current event's data lines, joined with `\n` (raw bytes: decoded at its end).
    data: Vec<u8>,
    /// Whether the current event has a `data` field (an empty one counts).
    has_data: bool,
    /// Whether the start of the stream (and a possible byte order mark) is behind us.
    started: bool,
}

impl SseDecoder {
    /// Adds a chunk; the data of every event it completes (events without data, such
    /// as comments and keep-alives, give none).
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(chunk);
        if !self.started {
            // Too short to tell whether a byte order mark starts the stream yet.
            if self.pending.len() < BOM.len() && BOM.starts_with(&self.pending) {
                return Vec::new();
            }
            if self.pending.starts_with(BOM) {
                self.pending.drain(..BOM.len());
            }
            self.started = true;
        }
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.pending[start..].iter().position(|&b| b == b'\n' || b == b'\r') {
            let end = start + offset;
            // A line may end in CR LF; a CR at the end of the chunk waits for the next
            // byte, so that its LF is not taken for a second (blank) line.
            let next = match self.pending[end] {
                b'\r' if end + 1 == self.pending.len() => break,
                b'\r' if self.pending[end + 1] == b'\n' => end + 2,
                _ => end + 1,
            };
            let line = self.pending[start..end].to_vec();
            start = next;
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.pending.drain(..start);
        events
    }

    /// The data of an event the stream ended in without its blank line (servers that
    /// close the stream right after the last event).
    pub fn finish(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.pending);
        let rest = rest.strip_suffix(b"\r").unwrap_or(&rest[..]);
        if !rest.is_empty() {
            let _ = self.line(rest);
        }
        self.dispatch()
    }

    /// How many bytes wait for the end of their event (to bound a stream that never
    /// ends one).
    pub fn buffered(&self) -> usize {
        self.pending.len() + self.data.len()
    }

    /// Takes one line (without its end); a blank line ends the event.
    fn line(&mut self, line: &[u8]) -> Option<String> {
        if line.is_empty() {
            return self.dispatch();
        }
        // `:` starts a comment; `field: value` drops one space after the colon.
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => return None,
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        // `event`, `id` and `retry` do not matter to MCP: every message is data.
        if field == b"data" {
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        None
    }

    fn dispatch(&mut self) -> Option<String> {
        let data = std::mem::take(&mut self.data);
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        // A whole event: only bytes that are not UTF-8 at all are replaced.
        Some(String::from_utf8(data).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `chunks` one by one and collects every event, the end of stream included.
    fn decode(chunks: &[&[u8]]) -> Vec<String> {
        let mut d = SseDecoder::default();
        let mut out: Vec<String> = chunks.iter().flat_map(|c| d.feed(c)).collect();
        out.extend(d.finish());
        out
    }

    #[test]
    fn a_multibyte_character_split_between_chunks_is_decoded_whole() {
        let event = "data: {\"text\":\"café 🦀\"}\n\n".as_bytes();
        // "é" is C3 A9: cut between its two bytes.
        let e = event.iter().position(|&b| b == 0xC3).unwrap_or(0) + 1;
        // The crab is four bytes: cut after its second.
        let crab = event.iter().position(|&b| b == 0xF0).unwrap_or(0) + 2;
        assert_eq!(decode(&[&event[..e], &event[e..crab], &event[crab..]]), vec!["{\"text\":\"café 🦀\"}"]);
        // Byte by byte, the hardest split of all.
        let bytes: Vec<&[u8]> = event.chunks(1).collect();
        assert_eq!(decode(&bytes), vec!["{\"text\":\"café 🦀\"}"]);
    }

    #[test]
    fn an_event_split_mid_line_and_mid_field_name_comes_out_once() {
        let chunks: [&[u8]; 4] =
            [b"event: message\nda", b"ta: {\"jsonrpc\":\"2.0\",", b"\"id\":1}\n", b"\ndata: {\"id\":2}\n\n"];
        assert_eq!(decode(&chunks), vec!["{\"jsonrpc\":\"2.0\",\"id\":1}", "{\"id\":2}"]);
    }

    #[test]
    fn crlf_and_cr_line_ends_work_even_when_split() {
        // The CR of "\r\n\r\n" ends one chunk and its LF starts the next: still one event.
        let chunks: [&[u8]; 3] = [b"data: {\"a\":1}\r", b"\n\r", b"\n: keep-alive\r\rdata: x\r\r"];
        assert_eq!(decode(&chunks), vec!["{\"a\":1}", "x"]);
    }

    #[test]
    fn data_lines_are_joined_with_newlines_and_comments_are_skipped() {
        let stream = b"\xEF\xBB\xBF: comment\ndata: {\"a\":\ndata:  1}\nid: 7\n\n: ping\n\ndata\n\n";
        // One space after the colon is dropped, a second one is kept; a bare `data` is
        // an empty data line.
        assert_eq!(decode(&[stream]), vec!["{\"a\":\n 1}", ""]);
    }

    #[test]
    fn the_last_event_counts_when_the_stream_ends_without_a_blank_line() {
        assert_eq!(decode(&[b"data: {\"id\":3}"]), vec!["{\"id\":3}"]);
        assert_eq!(decode(&[b"data: {\"id\":3}\r"]), vec!["{\"id\":3}"]);
        let mut d = SseDecoder::default();
        assert!(d.feed(b"data: 1234").is_empty());
        assert_eq!(d.buffered(), 10);
    }
}
