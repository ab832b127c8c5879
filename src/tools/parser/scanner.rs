//! The tag scanner: walks a reply tag by tag, skips `<think>` blocks and made-up
//! observations, finds where each action's body ends (its closing tag, or the next
//! line that opens a tool tag) and collects the actions and errors in order.

use std::collections::HashMap;

use memchr::{memchr, memmem};

use super::body::{clean_body, parse_raw_body, parse_yaml_body};
use super::{format_example, truncate, ParseOutcome, MAX_ITEMS};
use crate::tools::{Action, ActionParseError, ToolSpec, ToolSpecs};

/// Longest tag name considered.
const MAX_TAG_NAME: usize = 40;
/// Most unknown tag names remembered for the no-action error.
const MAX_UNKNOWN: usize = 5;

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
            stopped: false,
        }
    }

    pub(super) fn run(&mut self) {
        let bytes = self.text.as_bytes();
        let mut pos = 0;
        while pos < bytes.len() && !self.stopped {
            let Some(offset) = memchr(b'<', &bytes[pos..]) else {
                break;
            };
            let lt = pos + offset;
            pos = match read_tag(self.text, lt) {
                Some(tag) => self.handle_tag(lt, tag),
                None => lt + 1,
            };
        }
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
        if self.actions.len() + self.errors.len() >= MAX_ITEMS {
            self.errors.push(ActionParseError {
                tool: None,
                message: format!(
                    "too many actions in one reply (the limit is {MAX_ITEMS}); this one and \
                     all after it were ignored"
                ),
                snippet: truncate(&self.text[lt..next]),
                example: format_example(self.specs),
            });
            self.stopped = true;
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

    fn tool(&mut self, spec: &ToolSpec, body: &str, element: &str) {
        let body = clean_body(body);
        let result = match spec.raw_body_arg.as_deref() {
            Some(raw) => parse_raw_body(spec, raw, &body),
            None => parse_yaml_body(spec, &body),
        };
        match result {
            Ok(args) => self.actions.push(Action { tool: spec.name.clone(), args }),
            Err(message) => self.errors.push(ActionParseError {
                tool: Some(spec.name.clone()),
                message,
                snippet: truncate(element),
                example: spec.example_action(),
            }),
        }
    }

    pub(super) fn finish(mut self) -> ParseOutcome {
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
            let source = match self.first_unknown_at {
                Some(at) => &self.text[at..],
                None => self.text.trim(),
            };
            let snippet = if source.is_empty() { "(an empty reply)".to_string() } else { truncate(source) };
            self.errors.push(ActionParseError { tool: None, message, snippet, example: format_example(self.specs) });
        }
        ParseOutcome { actions: self.actions, errors: self.errors }
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
