//! Capping and cleaning command output before a model sees it.

use std::collections::VecDeque;

/// Keeps the first and last bytes of a stream and counts what was cut in between.
#[derive(Debug, Clone)]
pub struct OutputCollector {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

impl OutputCollector {
    /// A collector that keeps at most `max_bytes` (half head, half tail).
    pub fn new(max_bytes: usize) -> Self {
        let head_cap = max_bytes / 2;
        Self { head: Vec::new(), tail: VecDeque::new(), head_cap, tail_cap: max_bytes - head_cap, total: 0 }
    }

    /// Appends a chunk of output.
    pub fn push(&mut self, mut chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if self.head.len() < self.head_cap {
            let take = (self.head_cap - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
        }
        if chunk.is_empty() {
            return;
        }
        if chunk.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&chunk[chunk.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + chunk.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(chunk);
    }

    /// Total bytes seen.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Bytes dropped between head and tail.
    pub fn cut_bytes(&self) -> u64 {
        self.total - self.head.len() as u64 - self.tail.len() as u64
    }

    /// The kept output, cleaned for a model, with a marker where bytes were cut.
    pub fn render(&self) -> String {
        let cut = self.cut_bytes();
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if cut == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return sanitize(&all);
        }
        format!(
            "{}\n[... {} bytes of output cut; {} bytes in all ...]\n{}",
            sanitize(&self.head),
            cut,
            self.total,
            sanitize(&tail)
        )
    }
}

/// Strips ANSI escapes, replaces invalid UTF-8 and control bytes, and turns carriage
/// returns into line breaks so that progress bars read as lines.
pub fn sanitize(bytes: &[u8]) -> String {
    let stripped = strip_ansi(bytes);
    let text = String::from_utf8_lossy(&stripped);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() != Some(&'\n') {
                    out.push('\n');
                }
            }
            '\n' | '\t' => out.push(c),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Removes escape sequences (CSI, OSC, DCS/SOS/PM/APC strings, two- and three-byte
/// escapes) and keeps every other byte, tabs and carriage returns included.
fn strip_ansi(bytes: &[u8]) -> Vec<u8> {
    const ESC: u8 = 0x1b;
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != ESC {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let Some(&kind) = bytes.get(i + 1) else { break };
        i += 2;
        match kind {
            b'[' => {
                // Parameters and intermediates, then one final byte in 0x40..=0x7e.
                while i < bytes.len() && !(0x40..=0x7e).contains(&bytes[i]) {
                    i += 1;
                }
                i += 1;
            }
            b']' | b'P' | b'X' | b'^' | b'_' => {
                // A string terminated by BEL or ESC \.
                while i < bytes.len() {
                    if bytes[i] == 0x07 {
                        i += 1;
                        break;
                    }
                    if bytes[i] == ESC && bytes.get(i + 1) == Some(&b'\\') {
                        i += 2;
                        break;
                    }
                    i += 1;
                }
            }
            b'(' | b')' | b'*' | b'+' | b'#' | b'%' => i += 1,
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_under_the_cap() {
        let mut c = OutputCollector::new(100);
        c.push(b"hello ");
        c.push(b"world");
        assert_eq!(c.render(), "hello world");
        assert_eq!(c.cut_bytes(), 0);
    }

    #[test]
    fn keeps_head_and_tail_and_counts_the_cut() {
        let mut c = OutputCollector::new(10);
        for _ in 0..100 {
            c.push(b"0123456789");
        }
        assert_eq!(c.total_bytes(), 1000);
        assert_eq!(c.cut_bytes(), 990);
        let r = c.render();
        assert!(r.starts_with("01234\n[... 990 bytes of output cut"), "{r}");
        assert!(r.ends_with("56789"), "{r}");
    }

    #[test]
    fn big_single_chunk_keeps_the_latest_bytes() {
        let mut c = OutputCollector::new(8);
        c.push(&[b'a'; 1000]);
        c.push(b"xyz");
        assert_eq!(c.cut_bytes(), 995);
        assert!(c.render().ends_with("axyz"), "{}", c.render());
    }

    #[test]
    fn sanitize_strips_ansi_and_bad_bytes() {
        let s = sanitize(b"\x1b[31mred\x1b[0m ok\r\nbar\rbaz\x00\xff\xfe end");
        assert!(s.starts_with("red ok\nbar\nbaz"), "{s:?}");
        assert!(s.ends_with(" end"), "{s:?}");
        assert!(!s.contains('\x1b') && !s.contains('\0'), "{s:?}");
        assert!(s.contains('\u{FFFD}'), "{s:?}");
        assert_eq!(sanitize(b"a\tb\x1b]0;title\x07c\x1b(Bd\x1b[1;2;3Xe"), "a\tbcde");
        assert_eq!(sanitize(b"trailing\x1b["), "trailing");
    }
}
