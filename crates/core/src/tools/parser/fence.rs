//! Markdown code fences outside tags: reading a fence line, and finding the line that
//! closes a fenced tool block in time linear in the reply (see the module docs).

use memchr::memchr;

/// Most spaces before a fence (as in CommonMark).
const MAX_FENCE_INDENT: usize = 3;

/// A fence line: up to three spaces, three or more backticks or tildes, an info string.
#[derive(Debug, Clone, Copy)]
pub(super) struct FenceLine<'t> {
    /// Start of the line.
    pub(super) start: usize,
    /// Spaces before the fence.
    pub(super) indent: usize,
    /// `` ` `` or `~`.
    pub(super) ch: u8,
    /// Length of the run of fence characters.
    pub(super) run: usize,
    /// The info string (the language), trimmed.
    pub(super) info: &'t str,
    /// Index just after the run of fence characters.
    pub(super) run_end: usize,
    /// Index just after the line's `\n` (or the end of the text).
    pub(super) line_end: usize,
}

impl FenceLine<'_> {
    /// Whether this line closes a fence opened by `ch` × `run`.
    pub(super) fn closes(&self, ch: u8, run: usize) -> bool {
        self.ch == ch && self.run >= run && self.info.is_empty()
    }
}

/// The fence line starting at `start` (which must be a line start), if it is one.
pub(super) fn read_fence_line(text: &str, start: usize) -> Option<FenceLine<'_>> {
    let bytes = text.as_bytes();
    let mut i = start;
    while i < bytes.len() && bytes[i] == b' ' && i - start < MAX_FENCE_INDENT {
        i += 1;
    }
    let indent = i - start;
    let ch = *bytes.get(i).filter(|&&c| c == b'`' || c == b'~')?;
    let run_start = i;
    while i < bytes.len() && bytes[i] == ch {
        i += 1;
    }
    let run = i - run_start;
    if run < 3 {
        return None;
    }
    let line_end = memchr(b'\n', &bytes[i..]).map_or(bytes.len(), |n| i + n + 1);
    // `run_end` and `line_end` follow ASCII bytes or end the text: char boundaries.
    let info = text[i..line_end].trim();
    if ch == b'`' && info.contains('`') {
        // Inline code (```a`b```), not a fence.
        return None;
    }
    Some(FenceLine { start, indent, ch, run, info, run_end: i, line_end })
}

/// The first fence line at a line start at or after `from`.
pub(super) fn next_fence_line(text: &str, from: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut line = if from == 0 || bytes.get(from.wrapping_sub(1)) == Some(&b'\n') {
        from
    } else {
        from + memchr(b'\n', bytes.get(from..)?)? + 1
    };
    while line < bytes.len() {
        if read_fence_line(text, line).is_some() {
            return Some(line);
        }
        line += memchr(b'\n', &bytes[line..])? + 1;
    }
    None
}

/// A line that could close a fence: a fence line with no info string.
#[derive(Debug, Clone, Copy)]
struct Closer {
    start: usize,
    indent: usize,
    run: usize,
    line_end: usize,
}

/// Every closing-fence line of the reply, per fence character, with the longest run at
/// or after each index (per most allowed indentation), so that "no closing fence" is
/// answered without scanning and a found one is reached by a walk over lines the
/// caller then consumes.
pub(super) struct Closers {
    /// Backtick closers, then tilde closers.
    lines: [Vec<Closer>; 2],
    /// `longest[c][indent][i]`: the longest run among `lines[c][i..]` indented at most
    /// `indent` spaces (one extra entry, 0, at the end).
    longest: [[Vec<usize>; MAX_FENCE_INDENT + 1]; 2],
}

impl Closers {
    pub(super) fn new(text: &str) -> Self {
        let bytes = text.as_bytes();
        let mut lines: [Vec<Closer>; 2] = [Vec::new(), Vec::new()];
        let mut line = 0;
        while line < bytes.len() {
            let next = memchr(b'\n', &bytes[line..]).map_or(bytes.len(), |n| line + n + 1);
            if let Some(fence) = read_fence_line(text, line).filter(|f| f.info.is_empty()) {
                let closer =
                    Closer { start: fence.start, indent: fence.indent, run: fence.run, line_end: fence.line_end };
                lines[usize::from(fence.ch == b'~')].push(closer);
            }
            line = next;
        }
        let longest = lines.each_ref().map(|list| {
            std::array::from_fn(|indent| {
                let mut longest = vec![0; list.len() + 1];
                for (i, closer) in list.iter().enumerate().rev() {
                    let own = if closer.indent <= indent { closer.run } else { 0 };
                    longest[i] = longest[i + 1].max(own);
                }
                longest
            })
        });
        Closers { lines, longest }
    }

    /// The first line at or after `from` that closes a fence of `ch` × `run` opened
    /// with `indent` spaces: the same character, a run at least as long, no info
    /// string, and indented no more than the opening fence. Returns its start and the
    /// index after it.
    pub(super) fn find(&self, from: usize, ch: u8, run: usize, indent: usize) -> Option<(usize, usize)> {
        let c = usize::from(ch == b'~');
        let list = &self.lines[c];
        let longest = self.longest[c].get(indent.min(MAX_FENCE_INDENT))?;
        let first = list.partition_point(|closer| closer.start < from);
        if longest.get(first).copied().unwrap_or(0) < run {
            return None;
        }
        list[first..].iter().find(|closer| closer.indent <= indent && closer.run >= run).map(|c| (c.start, c.line_end))
    }
}
