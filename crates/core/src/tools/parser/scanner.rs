//! The tag scanner: walks a reply tag by tag and fence line by fence line, skips
//! `<think>` blocks and made-up observations, finds where each action's body ends (its
//! closing tag or fence, or the next line that opens a tool tag) and collects the
//! actions and errors in order.

use std::collections::HashMap;

use memchr::{memchr, memmem};
use serde_json::{Map, Value as Json};

use super::body::{clean_body, parse_fenced_body, parse_raw_body, parse_yaml_body, starts_with_arg};
use super::fence::{next_fence_line, read_fence_line, Closers, FenceLine};
use super::{format_example, truncate, ParseOutcome, MAX_ITEMS};
use crate::tools::{Action, ActionParseError, ToolSpec, ToolSpecs};

/// Longest tag name considered.
const MAX_TAG_NAME: usize = 40;
/// Most unknown tag names remembered for the no-action error.
const MAX_UNKNOWN: usize = 5;
/// Added to the no-action error when the reply holds code blocks.
const FENCE_HINT: &str = " A code block is not an action unless its language is a tool's name (```bash) \
    and its lines are that tool's `name: value` arguments (cmd: ls).";

/// A cached search result: the first hit at or after `from`.
struct Memo {
    from: usize,
    found: Option<usize>,
}

impl Memo {
    /// The answer for a search starting at `from`, when this memo knows it.
    fn answer(&self, from: usize) -> Option<Option<usize>> {
        if from < self.from {
            return None;
        }
        match self.found {
            None => Some(None),
            Some(found) if found >= from => Some(Some(found)),
            Some(_) => None,
        }
    }
}

/// A tag: `<name>` or `</name>`.
pub(super) struct Tag<'t> {
    closing: bool,
    name: &'t str,
    /// Index just after the `>`.
    end: usize,
}

pub(super) fn read_tag(text: &str, lt: usize) -> Option<Tag<'_>> {
    let bytes = text.as_bytes();
    let mut i = lt + 1;
    let closing = bytes.get(i) == Some(&b'/');
    if closing {
        i += 1;
    }
    let start = i;
    while i < bytes.len()
        && i - start <= MAX_TAG_NAME
        && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'-')
    {
        i += 1;
    }
    let first = *bytes.get(start)?;
    if i == start
        || i - start > MAX_TAG_NAME
        || bytes.get(i) != Some(&b'>')
        || !(first.is_ascii_alphabetic() || first == b'_')
    {
        return None;
    }
    Some(Tag {
        closing,
        // Only ASCII bytes lie in start..i, so both ends are char boundaries.
        name: &text[start..i],
        end: i + 1,
    })
}

/// The state of one parse: the reply, what was found so far, and the search caches.
pub(super) struct Scanner<'a> {
    text: &'a str,
    pub(super) specs: &'a ToolSpecs,
    pub(super) actions: Vec<Action>,
    pub(super) errors: Vec<ActionParseError>,
    /// Names of tags that are not tools, for the no-action error.
    unknown: Vec<String>,
    first_unknown_at: Option<usize>,
    think_opened: bool,
    /// End of the last element consumed (action, think block, skipped observation).
    last_end: usize,
    /// Next `</name>` per name.
    closes: HashMap<String, Memo>,
    /// Next `<name>` at the start of a line, per name.
    line_opens: HashMap<String, Memo>,
    /// Next `<`.
    next_lt: Option<Memo>,
    /// Next fence line.
    next_fence: Option<Memo>,
    /// The closing-fence index, built at the first fenced tool block.
    closers: Option<Closers>,
    /// The code fence (character, run) open outside tags that is not a tool block.
    open_fence: Option<(u8, usize)>,
    /// Whether a code fence that is not an action was seen outside tags.
    saw_fence: bool,
    stopped: bool,
}

impl<'a> Scanner<'a> {
    pub(super) fn new(text: &'a str, specs: &'a ToolSpecs) -> Self {
        Scanner {
            text,
            specs,
            actions: Vec::new(),
            errors: Vec::new(),
            unknown: Vec::new(),
            first_unknown_at: None,
            think_opened: false,
            last_end: 0,
            closes: HashMap::new(),
            line_opens: HashMap::new(),
            next_lt: None,
            next_fence: None,
            closers: None,
            open_fence: None,
            saw_fence: false,
            stopped: false,
        }
    }

    pub(super) fn run(&mut self) {
        let text = self.text;
        let mut pos = 0;
        while pos < text.len() && !self.stopped {
            let lt = cached(&mut self.next_lt, pos, |from| memchr(b'<', &text.as_bytes()[from..]).map(|i| from + i));
            let fence = cached(&mut self.next_fence, pos, |from| next_fence_line(text, from));
            pos = match (fence, lt) {
                (None, None) => break,
                (Some(fence), Some(lt)) if lt < fence => self.tag_at(lt),
                (Some(fence), _) => match read_fence_line(text, fence) {
                    Some(line) => self.handle_fence(line),
                    None => fence + 1,
                },
                (None, Some(lt)) => self.tag_at(lt),
            };
        }
    }

    /// Handles the `<` at `lt`; returns where scanning goes on.
    fn tag_at(&mut self, lt: usize) -> usize {
        match read_tag(self.text, lt) {
            Some(tag) => self.handle_tag(lt, tag),
            None => lt + 1,
        }
    }

    /// Handles a fence line outside tags; returns where scanning goes on.
    fn handle_fence(&mut self, line: FenceLine<'a>) -> usize {
        if let Some((ch, run)) = self.open_fence {
            // Inside a code block: only its closing fence matters.
            if line.closes(ch, run) {
                self.open_fence = None;
            }
            return line.run_end;
        }
        let spec = self.specs.iter().find(|spec| spec.name.eq_ignore_ascii_case(line.info));
        if let Some(end) = spec.and_then(|spec| self.fenced_tool(spec, &line)) {
            return end;
        }
        // Any other code block: its text is read as text outside tags (tags in it
        // still count), only fence lines in it are not fences.
        self.saw_fence = true;
        self.open_fence = Some((line.ch, line.run));
        line.run_end
    }

    /// A fence whose language is a tool's name: when its first line is `name:` with
    /// an argument of that tool, the block is that action (or its error). Returns the
    /// end of the block, or `None` when it is plain code.
    fn fenced_tool(&mut self, spec: &'a ToolSpec, line: &FenceLine<'a>) -> Option<usize> {
        let text = self.text;
        // The first line that is not blank or a YAML comment.
        let mut body_start = line.line_end;
        loop {
            let rest = text.get(body_start..)?;
            let first_line = rest.split('\n').next()?;
            let trimmed = first_line.trim_start();
            if !trimmed.is_empty() && !trimmed.starts_with('#') {
                if !starts_with_arg(spec, trimmed) {
                    return None;
                }
                break;
            }
            if first_line.len() == rest.len() {
                return None;
            }
            body_start += first_line.len() + 1;
        }
        let closers = self.closers.get_or_insert_with(|| Closers::new(text));
        let (body_end, end) = match closers.find(body_start, line.ch, line.run, line.indent) {
            Some(close) => close,
            // Unclosed: the body runs to the next line that opens a tool tag.
            None => {
                let stop = self.next_line_open_any(body_start).unwrap_or(text.len());
                (stop, stop)
            }
        };
        let element = &text[line.start..end];
        if self.over_limit(element) {
            return Some(text.len());
        }
        self.last_end = end;
        let body = clean_body(&text[body_start..body_end]);
        self.push_result(spec, parse_fenced_body(spec, &body), element);
        Some(end)
    }

    /// Handles the tag at `lt`; returns where scanning goes on.
    fn handle_tag(&mut self, lt: usize, tag: Tag<'a>) -> usize {
        let name = tag.name;
        if tag.closing {
            if name == "think" && !self.think_opened {
                // The chat template opened the reasoning: all so far was thinking.
                self.actions.clear();
                self.errors.clear();
                self.unknown.clear();
                self.first_unknown_at = None;
                self.open_fence = None;
                self.saw_fence = false;
                self.last_end = tag.end;
            }
            return tag.end;
        }
        if name == "think" {
            self.think_opened = true;
            return self.skip_block(name, tag.end);
        }
        if name == "tool_call" || self.specs.get(name).is_some() {
            return self.handle_block(lt, tag);
        }
        let made_up_output =
            name == "parse_error" || name.strip_suffix("_output").is_some_and(|tool| self.specs.get(tool).is_some());
        if made_up_output {
            return self.skip_block(name, tag.end);
        }
        if self.unknown.len() < MAX_UNKNOWN && !self.unknown.iter().any(|u| u == name) {
            self.unknown.push(name.to_string());
        }
        self.first_unknown_at.get_or_insert(lt);
        tag.end
    }

    /// Skips a block up to its closing tag, or only the opening tag when unclosed.
    fn skip_block(&mut self, name: &str, body_start: usize) -> usize {
        match self.find_close(name, body_start) {
            Some(close) => {
                self.last_end = close + name.len() + 3;
                self.last_end
            }
            None => body_start,
        }
    }

    /// A tool tag or `<tool_call>`: finds the body, parses it, returns the end.
    fn handle_block(&mut self, lt: usize, tag: Tag<'a>) -> usize {
        let name = tag.name;
        let body_start = tag.end;
        let at_line_start = self.is_line_start(lt, true);
        let close = self.find_close(name, body_start);
        let reopened = self.find_line_open(name, body_start);
        let (body_end, next, closed) = match close {
            Some(close) if reopened.is_none_or(|r| r > close) => (close, close + name.len() + 3, true),
            // An opening tag in prose, never closed or opened again before the close.
            _ if !at_line_start => return tag.end,
            // Missing closing tag (none later, or the same tag opens again first):
            // the body runs up to the next line that opens a tool tag.
            _ => {
                let stop = self.next_line_open_any(body_start).unwrap_or(self.text.len());
                (stop, stop, false)
            }
        };
        let mut body = &self.text[body_start..body_end];
        if !closed {
            if body.trim().is_empty() && body_end < self.text.len() {
                // `<bash>` then another tag at once: a stutter, not an action.
                return next;
            }
            body = strip_broken_close(body, name);
        }
        let text = self.text;
        if self.over_limit(&text[lt..next]) {
            return self.text.len();
        }
        self.last_end = next;
        let element = &self.text[lt..next];
        if name == "tool_call" {
            self.tool_call(body, element);
        } else if let Some(spec) = self.specs.get(name) {
            self.tool(spec, body, element);
        }
        next
    }

    /// When [`MAX_ITEMS`] actions and errors were read, records the error for
    /// `element`, stops the scan and returns true.
    fn over_limit(&mut self, element: &str) -> bool {
        if self.actions.len() + self.errors.len() < MAX_ITEMS {
            return false;
        }
        self.errors.push(ActionParseError {
            tool: None,
            message: format!(
                "too many actions in one reply (the limit is {MAX_ITEMS}); this one and all after it \
                 were ignored"
            ),
            snippet: truncate(element),
            example: format_example(self.specs),
            kind: crate::tools::ParseErrorKind::Malformed,
        });
        self.stopped = true;
        true
    }

    fn tool(&mut self, spec: &ToolSpec, body: &str, element: &str) {
        let body = clean_body(body);
        let result = match spec.raw_body_arg.as_deref() {
            Some(raw) => parse_raw_body(spec, raw, &body),
            None => parse_yaml_body(spec, &body),
        };
        self.push_result(spec, result, element);
    }

    fn push_result(&mut self, spec: &ToolSpec, result: Result<Map<String, Json>, String>, element: &str) {
        match result {
            Ok(args) => self.actions.push(Action { tool: spec.name.clone(), args }),
            Err(message) => self.errors.push(ActionParseError {
                tool: Some(spec.name.clone()),
                message,
                snippet: truncate(element),
                example: spec.example_action(),
                kind: crate::tools::ParseErrorKind::Malformed,
            }),
        }
    }

    pub(super) fn finish(mut self) -> ParseOutcome {
        let prose_only = self.actions.is_empty() && self.errors.is_empty() && self.unknown.is_empty();
        if self.actions.is_empty() && self.errors.is_empty() {
            let names = self.specs.names().join(", ");
            let message = if self.unknown.is_empty() {
                format!(
                    "no action found in your reply. Every reply must contain at least one \
                     action: a tag named after a tool ({names}) whose body is YAML \
                     `name: value` lines. Call finish when the task is done."
                )
            } else {
                let tags: Vec<String> = self.unknown.iter().map(|n| format!("<{n}>")).collect();
                let verb = if tags.len() == 1 { "is" } else { "are" };
                format!(
                    "no valid action found: {} {verb} not a tool. The tools are: {names}. \
                     Write each action as a tag named after the tool whose body is YAML \
                     `name: value` lines, and call finish when the task is done.",
                    tags.join(", ")
                )
            };
            let mut message = message;
            if self.saw_fence {
                message.push_str(FENCE_HINT);
            }
            let source = match self.first_unknown_at {
                Some(at) => &self.text[at..],
                None => self.text.trim(),
            };
            let snippet = if source.is_empty() { "(an empty reply)".to_string() } else { truncate(source) };
            // Tags that name no tool are an attempt at an action; a reply without any is not.
            let kind = if self.unknown.is_empty() {
                crate::tools::ParseErrorKind::NoAction
            } else {
                crate::tools::ParseErrorKind::Malformed
            };
            self.errors.push(ActionParseError {
                tool: None,
                message,
                snippet,
                example: format_example(self.specs),
                kind,
            });
        }
        ParseOutcome { actions: self.actions, errors: self.errors, prose_only }
    }

    /// Whether only spaces or tabs lie between the start of the line (or, when
    /// `after_element`, the end of the last element) and `at`.
    fn is_line_start(&self, at: usize, after_element: bool) -> bool {
        let bytes = self.text.as_bytes();
        let mut j = at;
        while j > 0 && matches!(bytes[j - 1], b' ' | b'\t') {
            j -= 1;
        }
        j == 0 || bytes[j - 1] == b'\n' || (after_element && j == self.last_end)
    }

    /// The next `</name>` at or after `from`.
    fn find_close(&mut self, name: &str, from: usize) -> Option<usize> {
        if let Some(answer) = self.closes.get(name).and_then(|m| m.answer(from)) {
            return answer;
        }
        let needle = format!("</{name}>");
        let found = memmem::find(&self.text.as_bytes()[from..], needle.as_bytes()).map(|i| from + i);
        self.closes.insert(name.to_string(), Memo { from, found });
        found
    }

    /// The next `<name>` at or after `from` that starts a line (after indentation).
    fn find_line_open(&mut self, name: &str, from: usize) -> Option<usize> {
        if let Some(answer) = self.line_opens.get(name).and_then(|m| m.answer(from)) {
            return answer;
        }
        let needle = format!("<{name}>");
        let found = memmem::find_iter(&self.text.as_bytes()[from..], needle.as_bytes())
            .map(|i| from + i)
            .find(|&at| self.is_line_start(at, false));
        self.line_opens.insert(name.to_string(), Memo { from, found });
        found
    }

    /// The next line that starts with any tool tag or `<tool_call>`.
    fn next_line_open_any(&mut self, from: usize) -> Option<usize> {
        let specs = self.specs;
        let mut best = self.find_line_open("tool_call", from);
        for spec in specs {
            if let Some(at) = self.find_line_open(&spec.name, from) {
                best = Some(best.map_or(at, |b| b.min(at)));
            }
        }
        best
    }
}

/// The next hit at or after `from` of a forward search, from `memo` when it knows it.
fn cached(memo: &mut Option<Memo>, from: usize, search: impl FnOnce(usize) -> Option<usize>) -> Option<usize> {
    if let Some(answer) = memo.as_ref().and_then(|m| m.answer(from)) {
        return answer;
    }
    let found = search(from);
    *memo = Some(Memo { from, found });
    found
}

/// Drops a last line that is a mistyped closing tag (`</bash`, `</ bash>`, `<bash/>`)
/// from the body of an unclosed tag.
fn strip_broken_close<'b>(body: &'b str, name: &str) -> &'b str {
    let trimmed = body.trim_end();
    let (head, last) = match trimmed.rfind('\n') {
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => ("", trimmed),
    };
    let last = last.trim();
    let bare: String = last.chars().filter(|c| !matches!(c, '<' | '/' | '>' | ' ' | '\t')).collect();
    if last.starts_with('<') && last.contains('/') && bare == name {
        head
    } else {
        body
    }
}
