//! Decides what of a streamed assistant reply is drawn as Markdown. The text of a tool
//! call is held apart from the prose: the core reads the calls itself and announces each
//! one it runs, which the transcript draws as a tool cell, so the call's own text drawn
//! as Markdown would show every call twice. A call's text is drawn (raw) only when the
//! core could not read the reply's calls ([`CallFilter::reveal_calls`]).
//!
//! Calls start at `<tool_call>` (the native format, anywhere outside `<think>`), at a
//! line that starts with a tool's tag (`<bash>`, the text format), or at a fence line
//! (```` ```json ```` or a bare ```` ``` ````) whose block starts with a call object
//! naming a tool (`{"name": "bash", ...`), or at such a call object starting a line by
//! itself (the small models write it so; the object ends where its braces balance). Text that may still become an opener (`<tool`
//! at the end of a delta, a fence line not yet ended) is held back until the next delta
//! decides it or the reply ends.

use std::mem;

use agent_core::tools::ObjectScan;

/// The built-in tools, whose tags open text-format calls.
const BUILTIN_TOOLS: &[&str] = &["bash", "file", "search", "todo", "scratchpad", "finish"];
const TOOL_CALL_OPEN: &str = "<tool_call>";
const TOOL_CALL_CLOSE: &str = "</tool_call>";
const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
/// The longest tool name waited for: past it, a tag or a call object is not a call.
const MAX_NAME: usize = 64;

/// Whether `name` names a tool: a built-in one or an MCP server's (`server__tool`).
pub fn is_tool_name(name: &str) -> bool {
    BUILTIN_TOOLS.contains(&name)
        || (name.contains("__") && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// One part of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text to draw as Markdown (`<think>` blocks included, for the cell to fold).
    Text(String),
    /// A call's text as written.
    Call(CallText),
}

/// The text of one call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallText {
    /// The call from its opener on, its closer included once it came.
    pub raw: String,
    /// Whether its closer came (an unclosed call runs to the end of the reply).
    pub closed: bool,
    /// Whether it is drawn raw: the core could not read this reply's calls.
    pub shown: bool,
    /// Whether the core read it and ran it (drawn as its own tool cell).
    pub read: bool,
}

impl CallText {
    /// The tool the call names (`<bash>`, or the `"name"` of its JSON object), when it
    /// can be read from its start.
    pub fn tool(&self) -> Option<String> {
        let raw = self.raw.trim_start();
        if let Some(body) = raw.strip_prefix(TOOL_CALL_OPEN) {
            return call_object_name(body).ok();
        }
        if raw.starts_with('{') {
            return call_object_name(raw).ok();
        }
        if raw.starts_with('`') || raw.starts_with('~') {
            let body = raw.split_once('\n').map_or("", |(_, b)| b);
            return call_object_name(body).ok();
        }
        let tag = raw.strip_prefix('<')?;
        tag.split_once('>').map(|(name, _)| name.to_string())
    }
}

/// What ends the call being read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Closer {
    /// A closing tag (`</tool_call>`, `</bash>`).
    Tag(String),
    /// A fence line of `ch`, at least `len` long, with nothing else on it.
    Fence { ch: char, len: usize },
    /// The brace that balances the call object's first one.
    Object(ObjectScan),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum State {
    /// Prose.
    #[default]
    Text,
    /// Inside `<think>`: no call opens there.
    Think,
    /// Inside a call (the last piece).
    Call(Closer),
    /// After a ```` ```json ```` (or bare) fence line, until the block's start shows
    /// whether it holds a call.
    FenceProbe { line: String, ch: char, len: usize },
}

/// What a step did with the unread text.
enum Step {
    /// Read this many bytes (0 when only the state changed).
    Read(usize),
    /// Needs more text to decide.
    Wait,
}

/// What the start of a line turned out to be.
enum LineStart {
    Step(Step),
    /// Nothing special: scan it as prose.
    Plain,
}

/// The streaming filter: takes a reply's deltas and keeps it as prose and calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFilter {
    pieces: Vec<Piece>,
    /// Text not read yet (a possible opener's start).
    pending: String,
    state: State,
    /// The next text starts a line (set at the reply's start too).
    line_start: bool,
    /// An ordinary code block is open (its fence and length): a bare fence line closes it.
    fence: Option<(char, usize)>,
    /// A fence line came: the core then reads calls only in blocks, not bare objects.
    fenced: bool,
}

impl Default for CallFilter {
    fn default() -> Self {
        Self::new()
    }
}

impl CallFilter {
    /// A filter for a reply that starts streaming.
    pub fn new() -> Self {
        Self {
            pieces: Vec::new(),
            pending: String::new(),
            state: State::Text,
            line_start: true,
            fence: None,
            fenced: false,
        }
    }

    /// The pieces of a whole reply.
    pub fn from_text(text: &str) -> Self {
        let mut f = Self::new();
        f.push(text);
        f.finish();
        f
    }

    /// Reads one delta.
    pub fn push(&mut self, delta: &str) {
        self.pending.push_str(delta);
        self.read(false);
    }

    /// The reply ended: what was held back is read as it stands (an opener's start is
    /// prose, a call without its closer stays a call).
    pub fn finish(&mut self) {
        self.read(true);
        if let State::FenceProbe { line, ch, len } = &self.state {
            let (line, fence) = (line.clone(), (*ch, *len));
            self.state = State::Text;
            self.emit(&line);
            self.fence = Some(fence);
        }
    }

    /// The reply's parts, in order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// The text drawn as Markdown so far (calls left out, held-back text not yet in).
    pub fn prose(&self) -> String {
        self.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Text(t) => Some(t.as_str()),
                Piece::Call(_) => None,
            })
            .collect()
    }

    /// The calls, in order.
    pub fn calls(&self) -> impl Iterator<Item = &CallText> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Call(c) => Some(c),
            Piece::Text(_) => None,
        })
    }

    /// The reply as received, calls and held-back text included.
    pub fn text(&self) -> String {
        let mut out: String = self
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.as_str(),
                Piece::Call(c) => c.raw.as_str(),
            })
            .collect();
        if let State::FenceProbe { line, .. } = &self.state {
            out.push_str(line);
        }
        out.push_str(&self.pending);
        out
    }

    /// Draws every call raw (the core could not read a call of this reply); whether there
    /// was any.
    pub fn reveal_calls(&mut self) -> bool {
        let mut any = false;
        for piece in &mut self.pieces {
            if let Piece::Call(c) = piece {
                c.shown = true;
                any = true;
            }
        }
        any
    }

    /// The core runs a call of `tool`: the first call naming it not yet read is its cell
    /// only (hidden again if a parse error of the same reply revealed it); whether one
    /// was found.
    pub fn hide_call_of(&mut self, tool: &str) -> bool {
        let found = self.pieces.iter_mut().find_map(|p| match p {
            Piece::Call(c) if !c.read && c.tool().as_deref() == Some(tool) => Some(c),
            _ => None,
        });
        match found {
            Some(c) => {
                c.read = true;
                c.shown = false;
                true
            }
            None => false,
        }
    }

    /// The core is done with this reply: what it did not run is drawn as written (a call
    /// object the core took for prose, a call an earlier one stopped, a broken call among
    /// good ones), so nothing the model wrote goes unseen; whether any was hidden.
    pub fn reveal_unread(&mut self) -> bool {
        let mut any = false;
        for piece in &mut self.pieces {
            if let Piece::Call(c) = piece {
                if !c.read && !c.shown {
                    c.shown = true;
                    any = true;
                }
            }
        }
        any
    }

    fn read(&mut self, eof: bool) {
        let text = mem::take(&mut self.pending);
        let mut at = 0;
        // Every step reads something or changes the state (a probe decides), so this ends.
        while at < text.len() {
            let rest = &text[at..];
            let step = match &self.state {
                State::Text => self.text_step(rest, eof),
                State::Think => self.think_step(rest, eof),
                State::Call(Closer::Tag(close)) => {
                    let close = close.clone();
                    self.tag_call_step(rest, &close, eof)
                }
                State::Call(Closer::Fence { ch, len }) => {
                    let (ch, len) = (*ch, *len);
                    self.fence_call_step(rest, ch, len, eof)
                }
                State::Call(Closer::Object(scan)) => {
                    let scan = *scan;
                    self.object_call_step(rest, scan)
                }
                State::FenceProbe { .. } => self.probe_step(rest, eof),
            };
            match step {
                Step::Read(n) => at += n,
                Step::Wait => break,
            }
        }
        self.pending = text[at..].to_string();
    }

    /// Adds prose, merged into the last piece when that is prose too.
    fn emit(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        match self.pieces.last_mut() {
            Some(Piece::Text(t)) => t.push_str(text),
            _ => self.pieces.push(Piece::Text(text.to_string())),
        }
    }

    fn open_call(&mut self, opener: &str, closer: Closer) {
        self.pieces.push(Piece::Call(CallText { raw: opener.to_string(), ..CallText::default() }));
        self.state = State::Call(closer);
        self.line_start = false;
    }

    fn call_raw(&mut self) -> Option<&mut CallText> {
        match self.pieces.last_mut() {
            Some(Piece::Call(c)) => Some(c),
            _ => None,
        }
    }

    fn close_call(&mut self) {
        if let Some(c) = self.call_raw() {
            c.closed = true;
        }
        self.state = State::Text;
    }

    fn text_step(&mut self, s: &str, eof: bool) -> Step {
        if self.line_start {
            match self.line_start_step(s, eof) {
                LineStart::Step(step) => return step,
                LineStart::Plain => {}
            }
        }
        // Openers hold no newline: one line is searched at a time, so that a long reply
        // is read in one pass.
        let line_end = s.find('\n');
        let line = &s[..line_end.unwrap_or(s.len())];
        let found = [('c', line.find(TOOL_CALL_OPEN)), ('t', line.find(THINK_OPEN)), ('\n', line_end)]
            .into_iter()
            .filter_map(|(what, at)| at.map(|at| (at, what)))
            .min();
        match found {
            Some((at, 'c')) => {
                self.emit(&s[..at]);
                self.open_call(TOOL_CALL_OPEN, Closer::Tag(TOOL_CALL_CLOSE.into()));
                Step::Read(at + TOOL_CALL_OPEN.len())
            }
            Some((at, 't')) => {
                let end = at + THINK_OPEN.len();
                self.emit(&s[..end]);
                self.state = State::Think;
                self.line_start = false;
                Step::Read(end)
            }
            Some((at, _)) => {
                self.emit(&s[..=at]);
                self.line_start = true;
                Step::Read(at + 1)
            }
            None => {
                let keep = if eof { 0 } else { partial_suffix(s, &[TOOL_CALL_OPEN, THINK_OPEN]) };
                let n = s.len() - keep;
                if n == 0 {
                    return Step::Wait;
                }
                self.emit(&s[..n]);
                self.line_start = false;
                Step::Read(n)
            }
        }
    }

    /// The start of a line: a tool's tag opens a call, a fence line opens or closes a
    /// code block (or may hold a call).
    fn line_start_step(&mut self, s: &str, eof: bool) -> LineStart {
        let indent = s.len() - s.trim_start_matches([' ', '\t']).len();
        let t = &s[indent..];
        let Some(first) = t.chars().next() else {
            return if eof { LineStart::Plain } else { LineStart::Step(Step::Wait) };
        };
        match first {
            '<' => self.tag_at_line_start(s, indent, eof),
            '`' | '~' if indent <= 3 => self.fence_at_line_start(s, indent, first, eof),
            '{' if !self.fenced => self.object_at_line_start(s, indent, eof),
            _ => LineStart::Plain,
        }
    }

    /// A call object starting a line is a call (before any fence, as the core reads it);
    /// any other `{` is prose.
    fn object_at_line_start(&mut self, s: &str, indent: usize, eof: bool) -> LineStart {
        match call_object_name(&s[indent..]) {
            Err(Probe::Wait) if !eof => LineStart::Step(Step::Wait),
            Ok(name) if is_tool_name(&name) => {
                self.emit(&s[..indent]);
                self.open_call("", Closer::Object(ObjectScan::default()));
                LineStart::Step(Step::Read(indent))
            }
            _ => LineStart::Plain,
        }
    }

    fn tag_at_line_start(&mut self, s: &str, indent: usize, eof: bool) -> LineStart {
        let rest = &s[indent + 1..];
        let name_len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if name_len == rest.len() {
            return if eof || name_len > MAX_NAME { LineStart::Plain } else { LineStart::Step(Step::Wait) };
        }
        let name = &rest[..name_len];
        if !rest[name_len..].starts_with('>') || !is_tool_name(name) {
            return LineStart::Plain;
        }
        let end = indent + 1 + name_len + 1;
        self.open_call(&s[..end], Closer::Tag(format!("</{name}>")));
        LineStart::Step(Step::Read(end))
    }

    fn fence_at_line_start(&mut self, s: &str, indent: usize, ch: char, eof: bool) -> LineStart {
        let t = &s[indent..];
        let len = t.len() - t.trim_start_matches(ch).len();
        let line_end = s.find('\n').map(|i| i + 1);
        if len < 3 {
            // "``" may still grow into a fence.
            let undecided = len == t.len() && line_end.is_none() && !eof;
            return if undecided { LineStart::Step(Step::Wait) } else { LineStart::Plain };
        }
        let Some(end) = line_end.or(eof.then_some(s.len())) else { return LineStart::Step(Step::Wait) };
        let line = &s[..end];
        let info = line[indent + len..].trim();
        if ch == '`' && info.contains('`') {
            return LineStart::Plain;
        }
        self.fenced = true;
        match self.fence {
            Some((open, open_len)) => {
                if ch != open || len < open_len || !info.is_empty() {
                    return LineStart::Plain;
                }
                self.emit(line);
                self.fence = None;
            }
            None if info.is_empty() || info.eq_ignore_ascii_case("json") => {
                self.state = State::FenceProbe { line: line.to_string(), ch, len };
            }
            None => {
                self.emit(line);
                self.fence = Some((ch, len));
            }
        }
        self.line_start = true;
        LineStart::Step(Step::Read(end))
    }

    fn think_step(&mut self, s: &str, eof: bool) -> Step {
        if let Some(at) = s.find(THINK_CLOSE) {
            let end = at + THINK_CLOSE.len();
            self.emit(&s[..end]);
            self.state = State::Text;
            self.line_start = false;
            return Step::Read(end);
        }
        let keep = if eof { 0 } else { partial_suffix(s, &[THINK_CLOSE]) };
        let n = s.len() - keep;
        if n == 0 {
            return Step::Wait;
        }
        self.emit(&s[..n]);
        Step::Read(n)
    }

    fn tag_call_step(&mut self, s: &str, close: &str, eof: bool) -> Step {
        if let Some(at) = s.find(close) {
            let end = at + close.len();
            if let Some(c) = self.call_raw() {
                c.raw.push_str(&s[..end]);
            }
            self.close_call();
            self.line_start = false;
            return Step::Read(end);
        }
        let keep = if eof { 0 } else { partial_suffix(s, &[close]) };
        let n = s.len() - keep;
        if n == 0 {
            return Step::Wait;
        }
        if let Some(c) = self.call_raw() {
            c.raw.push_str(&s[..n]);
        }
        Step::Read(n)
    }

    /// A call object is read to the brace that balances its first one; what follows on
    /// its line is prose again.
    fn object_call_step(&mut self, s: &str, mut scan: ObjectScan) -> Step {
        let end = scan.feed(s);
        let n = end.unwrap_or(s.len());
        if let Some(c) = self.call_raw() {
            c.raw.push_str(&s[..n]);
        }
        if end.is_some() {
            self.close_call();
        } else {
            self.state = State::Call(Closer::Object(scan));
        }
        Step::Read(n)
    }

    /// A fenced call is read a line at a time, to find its closing fence line.
    fn fence_call_step(&mut self, s: &str, ch: char, len: usize, eof: bool) -> Step {
        let Some(end) = s.find('\n').map(|i| i + 1).or(eof.then_some(s.len())) else { return Step::Wait };
        let line = &s[..end];
        if let Some(c) = self.call_raw() {
            c.raw.push_str(line);
        }
        let fence = line.trim();
        if fence.len() >= len && fence.chars().all(|c| c == ch) {
            self.close_call();
            self.line_start = true;
        }
        Step::Read(end)
    }

    /// The block after a json (or bare) fence line: a call when it starts with a call
    /// object naming a tool, else an ordinary code block.
    fn probe_step(&mut self, s: &str, eof: bool) -> Step {
        let State::FenceProbe { line, ch, len } = mem::take(&mut self.state) else { return Step::Read(0) };
        match call_object_name(s) {
            Err(Probe::Wait) if !eof => {
                self.state = State::FenceProbe { line, ch, len };
                Step::Wait
            }
            Ok(name) if is_tool_name(&name) => {
                self.open_call(&line, Closer::Fence { ch, len });
                Step::Read(0)
            }
            _ => {
                self.emit(&line);
                self.fence = Some((ch, len));
                self.line_start = true;
                Step::Read(0)
            }
        }
    }
}

/// Why a call object's name could not be read.
#[derive(Debug, PartialEq, Eq)]
enum Probe {
    /// The text so far is the start of one.
    Wait,
    /// It is not one.
    NotCall,
}

/// The tool named by the call object `s` starts with: `{`, `"name"`, `:` and a string
/// (whitespace between them). Only the start is looked at: the core reads the JSON.
fn call_object_name(s: &str) -> Result<String, Probe> {
    let s = eat(s.trim_start(), "{")?;
    let s = eat(s.trim_start(), "\"name\"")?;
    let s = eat(s.trim_start(), ":")?;
    let s = eat(s.trim_start(), "\"")?;
    match s.find(['"', '\\', '\n']) {
        Some(end) if end <= MAX_NAME && s[end..].starts_with('"') => Ok(s[..end].to_string()),
        Some(_) => Err(Probe::NotCall),
        None if s.len() > MAX_NAME => Err(Probe::NotCall),
        None => Err(Probe::Wait),
    }
}

/// `s` after `token`; `Wait` when `s` is a shorter start of it.
fn eat<'a>(s: &'a str, token: &str) -> Result<&'a str, Probe> {
    match s.strip_prefix(token) {
        Some(rest) => Ok(rest),
        None if token.starts_with(s) => Err(Probe::Wait),
        None => Err(Probe::NotCall),
    }
}

/// The length of the longest end of `s` that is a proper start of one of `markers`.
fn partial_suffix(s: &str, markers: &[&str]) -> usize {
    markers.iter().filter_map(|m| (1..m.len()).rev().find(|&k| s.ends_with(&m[..k]))).max().unwrap_or(0)
}

#[cfg(test)]
#[path = "call_filter_tests.rs"]
mod tests;
