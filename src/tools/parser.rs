//! The action parser: finds tool calls in a model reply.
//!
//! An action is an XML-like tag named after a known tool whose body is YAML:
//!
//! ```text
//! <bash>
//! cmd: ls -la /app
//! </bash>
//! ```
//!
//! A reply may hold several actions; they are returned in order. The parser never
//! panics and runs in time linear in the reply's length (every search is cached so no
//! byte is scanned more than a few times). It is tolerant where the intent is
//! unambiguous:
//!
//! - CRLF line ends are read as LF.
//! - `<think>…</think>` is skipped. A `<think>` that is never closed is ignored
//!   itself (small models forget the close; dropping the rest of the reply would
//!   lose their actions). A `</think>` with no `<think>` before it ends a reasoning
//!   part that the chat template opened: everything before it is dropped.
//! - Observations the model made up (`<bash_output>…</bash_output>`,
//!   `<parse_error>…</parse_error>`) are skipped, with any tags inside them.
//! - Code fences: a fence line (```` ``` ````, ```` ```yaml ````) at the start of a body
//!   and a bare fence line at its end (no more indented than the body) are dropped;
//!   fences around the tags are ignored like any text outside tags.
//! - A missing closing tag (none later, or the same tag opens again at the start of a
//!   line before it): the body runs to the next line that starts with a tool tag, or
//!   to the end of the reply. A last line that is a mistyped closing tag (`</bash`,
//!   `</ bash>`) is dropped. An unclosed tag with an empty body followed by another tag
//!   (`<bash>` twice) is a stutter, not an error.
//! - An opening tag in the middle of prose ("I will use the <bash> tool") is not an
//!   action when it is never closed or when the same tag opens again at the start of a
//!   line before its closing tag.
//! - Blank lines around the body and indentation common to the whole body are removed
//!   before the YAML is read; YAML block scalars (`cmd: |`) keep their newlines.
//! - For a tool with a `raw_body_arg` (bash: `cmd`), a body that is not a YAML mapping
//!   of that tool's arguments is taken whole as that argument (`<bash>ls -la</bash>`).
//!   When the body starts with `cmd:` but is not valid YAML (`cmd: echo a: b`), or
//!   `cmd` is not a plain string (`cmd: [ -f x ] && echo y`), each line that starts
//!   with a known argument (`timeout_secs: 60`) is read as that argument and the text
//!   after `cmd:` (up to the next such line) is taken literally; after `cmd: |` the
//!   block is dedented. A body starting with a misnamed argument (`command: ls`,
//!   `script: …`, anything close to a real argument name) is an error, not a command.
//! - Qwen3-style native calls, `<tool_call>{"name": "bash", "arguments": {...}}
//!   </tool_call>`, map to the same actions; `arguments` may be an object or a JSON
//!   string, `parameters` is accepted for it, an OpenAI-style `{"function": {...}}`
//!   wrapper and a list of calls are unwrapped.
//!
//! Tags that are not tools (`<python>`) are not errors unless the reply holds no
//! action and no malformed action at all; then the one error names the tools that
//! exist. A known tool with invalid YAML or invalid arguments gives an
//! [`ActionParseError`] with the message, the offending text (truncated) and the
//! tool's first example. At most [`MAX_ITEMS`] actions and errors are read from one
//! reply.

use std::borrow::Cow;
use std::collections::HashMap;

use memchr::{memchr, memmem};
use serde_json::{Map, Value as Json};
use serde_yaml::Value as Yaml;

use super::validate::suggest;
use super::{validate_args, Action, ActionParseError, ToolSpec, ToolSpecs};

/// Longest snippet of offending text in an error, in bytes.
const SNIPPET_MAX: usize = 300;
/// Most actions plus errors read from one reply.
pub const MAX_ITEMS: usize = 64;
/// Longest tag name considered.
const MAX_TAG_NAME: usize = 40;
/// Most unknown tag names remembered for the no-action error.
const MAX_UNKNOWN: usize = 5;

const YAML_HINT: &str = "Write one `name: value` line per argument. Put a value in quotes \
    if it contains `: ` or ` #` or starts with a special character (`*`, `&`, `!`, `[`, \
    `{`, `|`, `>`, `%`, `@`, or a quote), or write it as a `|` block: `name: |` followed \
    by the text on the next lines, indented.";

/// The actions found in one reply, in order, and the malformed ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParseOutcome {
    /// Valid actions, in the order they appear.
    pub actions: Vec<Action>,
    /// Malformed actions (or one error saying that the reply holds no action).
    pub errors: Vec<ActionParseError>,
}

/// Finds the actions in a model reply (see the module docs for the rules).
pub fn parse_actions(text: &str, specs: &ToolSpecs) -> ParseOutcome {
    let text: Cow<'_, str> = if memchr(b'\r', text.as_bytes()).is_some() {
        Cow::Owned(text.replace("\r\n", "\n"))
    } else {
        Cow::Borrowed(text)
    };
    let mut scanner = Scanner::new(&text, specs);
    scanner.run();
    scanner.finish()
}

/// Maps one native tool call (OpenAI `tool_calls`, Qwen3 `<tool_call>`) to an action.
/// `arguments` may be a JSON object, a string holding one, or null; for a tool with a
/// `raw_body_arg`, any other string is read like a tag body.
pub fn parse_native_call(name: &str, arguments: &Json, specs: &ToolSpecs) -> Result<Action, ActionParseError> {
    let snippet = || truncate(&serde_json::json!({"name": name, "arguments": arguments}).to_string());
    let Some(spec) = specs.get(name) else {
        return Err(ActionParseError {
            tool: None,
            message: format!("unknown tool `{}`; the tools are: {}", truncate_to(name, 60), specs.names().join(", ")),
            snippet: snippet(),
            example: specs.get("bash").or_else(|| specs.iter().next()).map(native_example).unwrap_or_default(),
        });
    };
    let from_object = |object: &Json| -> Result<Map<String, Json>, String> {
        let yaml = serde_yaml::to_value(object).map_err(|e| format!("bad arguments: {e}"))?;
        validate_args(spec, yaml)
    };
    let not_object = || format!("the `arguments` of `{}` must be a JSON object of argument names to values", spec.name);
    let result = match arguments {
        Json::Null => validate_args(spec, Yaml::Null),
        Json::Object(_) => from_object(arguments),
        Json::String(s) => match serde_json::from_str::<Json>(s) {
            Ok(inner @ Json::Object(_)) => from_object(&inner),
            _ => match spec.raw_body_arg.as_deref() {
                Some(raw) => parse_raw_body(spec, raw, &clean_body(s)),
                None => Err(not_object()),
            },
        },
        _ => Err(not_object()),
    };
    result.map(|args| Action { tool: spec.name.clone(), args }).map_err(|message| ActionParseError {
        tool: Some(spec.name.clone()),
        message,
        snippet: snippet(),
        example: native_example(spec),
    })
}

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
struct Tag<'t> {
    closing: bool,
    name: &'t str,
    /// Index just after the `>`.
    end: usize,
}

fn read_tag(text: &str, lt: usize) -> Option<Tag<'_>> {
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

struct Scanner<'a> {
    text: &'a str,
    specs: &'a ToolSpecs,
    actions: Vec<Action>,
    errors: Vec<ActionParseError>,
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
    fn new(text: &'a str, specs: &'a ToolSpecs) -> Self {
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

    fn run(&mut self) {
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

    fn tool_call(&mut self, body: &str, element: &str) {
        let body = clean_body(body);
        let value = match serde_json::from_str::<Json>(&body) {
            Ok(value) => value,
            // YAML flow syntax is a lenient superset (single quotes, bare words).
            Err(json_error) => match serde_yaml::from_str::<Json>(&body) {
                Ok(value) => value,
                Err(_) => {
                    self.errors.push(ActionParseError {
                        tool: None,
                        message: format!(
                            "the body of <tool_call> is not valid JSON ({json_error}); \
                             expected {{\"name\": TOOL, \"arguments\": {{...}}}}"
                        ),
                        snippet: truncate(element),
                        example: self.default_native_example(),
                    });
                    return;
                }
            },
        };
        let calls = match value {
            Json::Array(calls) => calls,
            other => vec![other],
        };
        for call in calls {
            if self.actions.len() + self.errors.len() >= MAX_ITEMS {
                break;
            }
            match self.native_call(call) {
                Ok(action) => self.actions.push(action),
                Err(mut error) => {
                    error.snippet = truncate(element);
                    self.errors.push(error);
                }
            }
        }
    }

    fn native_call(&self, call: Json) -> Result<Action, ActionParseError> {
        let shape_error = |message: &str| ActionParseError {
            tool: None,
            message: message.to_string(),
            snippet: String::new(),
            example: self.default_native_example(),
        };
        let Json::Object(mut call) = call else {
            return Err(shape_error("a tool call must be a JSON object with `name` and `arguments`"));
        };
        if !call.contains_key("name") {
            if let Some(Json::Object(function)) = call.remove("function") {
                call = function;
            }
        }
        let Some(Json::String(name)) = call.remove("name") else {
            return Err(shape_error("the tool call has no `name`; expected {\"name\": TOOL, \"arguments\": {...}}"));
        };
        let arguments = ["arguments", "parameters"].iter().find_map(|key| call.remove(*key)).unwrap_or(Json::Null);
        parse_native_call(&name, &arguments, self.specs)
    }

    fn default_native_example(&self) -> String {
        self.specs.get("bash").or_else(|| self.specs.iter().next()).map(native_example).unwrap_or_default()
    }

    fn finish(mut self) -> ParseOutcome {
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

fn parse_yaml_body(spec: &ToolSpec, body: &str) -> Result<Map<String, Json>, String> {
    match serde_yaml::from_str::<Yaml>(body) {
        Ok(value) => validate_args(spec, value),
        Err(e) => Err(format!("the body of <{}> is not valid YAML ({e}). {YAML_HINT}", spec.name)),
    }
}

/// Reads the body of a tool with a raw-body argument (see the module docs).
fn parse_raw_body(spec: &ToolSpec, raw: &str, body: &str) -> Result<Map<String, Json>, String> {
    let first_line = body.split('\n').next().unwrap_or("");
    let starts_with_arg = leading_arg(spec, first_line).is_some();
    // `command: ls`: a misspelt argument, not a shell command.
    let misnamed = leading_key(first_line).filter(|(key, _)| spec.arg(key).is_none()).filter(|(key, _)| {
        RAW_ALIASES.contains(&key.to_ascii_lowercase().as_str()) || suggest(key, &spec.arguments).is_some()
    });
    match serde_yaml::from_str::<Yaml>(body) {
        Ok(Yaml::Mapping(mapping)) => {
            let raw_value = mapping.get(raw);
            let all_known = mapping.keys().all(|k| k.as_str().is_some_and(|k| spec.arg(k).is_some()));
            if raw_value.is_none() && !all_known && !starts_with_arg && misnamed.is_none() {
                // e.g. `echo a: b`, which YAML reads as a mapping.
                return whole_body(spec, raw, body);
            }
            match raw_value {
                None | Some(Yaml::Null) | Some(Yaml::String(_)) => validate_args(spec, Yaml::Mapping(mapping)),
                // `cmd: [ -f x ] && …`, `cmd: {a,b}`, `cmd: 1.10`: keep the text.
                Some(_) => literal_args(spec, raw, body),
            }
        }
        Ok(Yaml::Null) => validate_args(spec, Yaml::Null),
        Ok(Yaml::String(s)) if is_quoted_line(body) => whole_body(spec, raw, &s),
        Ok(_) => whole_body(spec, raw, body),
        Err(_) if starts_with_arg => literal_args(spec, raw, body),
        Err(_) => match misnamed {
            Some((key, rest)) => {
                let mut mapping = serde_yaml::Mapping::new();
                mapping.insert(Yaml::String(key.into()), Yaml::String(rest.trim().into()));
                validate_args(spec, Yaml::Mapping(mapping))
            }
            None => whole_body(spec, raw, body),
        },
    }
}

/// Keys that name the raw argument under another name (`command: ls`).
const RAW_ALIASES: &[&str] = &["command", "commands", "script", "code", "shell", "bash", "run", "exec", "input"];

/// The whole body as the raw argument, other arguments at their defaults.
fn whole_body(spec: &ToolSpec, raw: &str, body: &str) -> Result<Map<String, Json>, String> {
    let mut mapping = serde_yaml::Mapping::new();
    let text = body.trim();
    if !text.is_empty() {
        mapping.insert(Yaml::String(raw.into()), Yaml::String(text.into()));
    }
    validate_args(spec, Yaml::Mapping(mapping))
}

/// Line-based reading of a body that starts with an argument line: each line that
/// starts with a known argument opens that argument; other lines continue the
/// previous one. The raw argument's text is taken literally.
fn literal_args(spec: &ToolSpec, raw: &str, body: &str) -> Result<Map<String, Json>, String> {
    let mut segments: Vec<(&str, String)> = Vec::new();
    for line in body.split('\n') {
        match leading_arg(spec, line) {
            Some((key, rest)) if !segments.iter().any(|(k, _)| *k == key) => {
                segments.push((key, rest.to_string()));
            }
            _ => match segments.last_mut() {
                Some((_, value)) => {
                    value.push('\n');
                    value.push_str(line);
                }
                None => return whole_body(spec, raw, body),
            },
        }
    }
    let mut mapping = serde_yaml::Mapping::new();
    for (key, value) in segments {
        let value = if key == raw {
            literal_value(&value)
        } else {
            serde_yaml::from_str::<Yaml>(&value).unwrap_or_else(|_| Yaml::String(value.trim().to_string()))
        };
        mapping.insert(Yaml::String(key.into()), value);
    }
    validate_args(spec, Yaml::Mapping(mapping))
}

/// The text after `cmd:`: a block (`|`, `>`, or nothing on the first line) is
/// dedented; otherwise the first line and its continuation lines are kept as written.
fn literal_value(value: &str) -> Yaml {
    let (first, rest) = value.split_once('\n').unwrap_or((value, ""));
    let first = first.trim();
    let text = if first.is_empty() || is_block_indicator(first) {
        dedent(&rest.split('\n').collect::<Vec<_>>())
    } else if rest.trim().is_empty() {
        first.to_string()
    } else {
        format!("{first}\n{rest}")
    };
    let text = text.trim_end();
    if text.trim().is_empty() {
        Yaml::Null
    } else {
        Yaml::String(text.to_string())
    }
}

fn is_block_indicator(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('|' | '>')) && chars.all(|c| c == '-' || c == '+' || c.is_ascii_digit())
}

/// `key: rest` when the line starts (column 0) with a known argument of the tool.
fn leading_arg<'s>(spec: &'s ToolSpec, line: &'s str) -> Option<(&'s str, &'s str)> {
    let (key, rest) = leading_key(line)?;
    let arg = spec.arg(key)?;
    Some((arg.name.as_str(), rest))
}

/// `key: rest` when the line starts (column 0) with a word and a colon.
fn leading_key(line: &str) -> Option<(&str, &str)> {
    let end = line.bytes().position(|b| !(b.is_ascii_alphanumeric() || b == b'_')).unwrap_or(line.len());
    let key = &line[..end];
    let rest = line[end..].strip_prefix(':')?;
    if key.is_empty() || !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    Some((key, rest))
}

/// A one-line body in matching quotes: `"ls -la"`.
fn is_quoted_line(body: &str) -> bool {
    let t = body.trim();
    !t.contains('\n')
        && t.len() >= 2
        && ((t.starts_with('"') && t.ends_with('"')) || (t.starts_with('\'') && t.ends_with('\'')))
}

/// Drops blank lines around the body, a code fence at its start and end, and the
/// indentation common to all its lines.
fn clean_body(body: &str) -> String {
    let lines: Vec<&str> = body.split('\n').collect();
    let mut lines = trim_blank(&lines);
    if lines.first().is_some_and(|l| is_fence(l)) {
        lines = trim_blank(&lines[1..]);
    }
    if let Some((last, rest)) = lines.split_last() {
        if last.trim() == "```" || last.trim() == "````" {
            let fence_indent = indent_of(last);
            let body_indent = rest.iter().filter(|l| !l.trim().is_empty()).map(|l| indent_of(l)).min().unwrap_or(0);
            if fence_indent <= body_indent {
                lines = trim_blank(rest);
            }
        }
    }
    let mut out = dedent(lines);
    if !out.is_empty() {
        // The final line break ends the last `|` block (its "clip" keeps one newline).
        out.push('\n');
    }
    out
}

fn trim_blank<'l, 's>(mut lines: &'l [&'s str]) -> &'l [&'s str] {
    while lines.first().is_some_and(|l| l.trim().is_empty()) {
        lines = &lines[1..];
    }
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines = &lines[..lines.len() - 1];
    }
    lines
}

/// A code fence line: ```` ``` ```` optionally followed by a language name.
fn is_fence(line: &str) -> bool {
    let t = line.trim();
    t.strip_prefix("```").is_some_and(|lang| {
        lang.chars().all(|c| c == '`' || c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '+' | '.'))
    })
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches([' ', '\t']).len()
}

/// Removes the leading whitespace common to all non-blank lines.
fn dedent(lines: &[&str]) -> String {
    let mut prefix: Option<&str> = None;
    for line in lines.iter().filter(|l| !l.trim().is_empty()) {
        let own = &line[..indent_of(line)];
        prefix = Some(match prefix {
            None => own,
            Some(p) => {
                let common = p.bytes().zip(own.bytes()).take_while(|(a, b)| a == b).count();
                &p[..common]
            }
        });
    }
    let cut = prefix.map_or(0, str::len);
    let mut out = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        // The prefix is ASCII whitespace, so cutting at `cut` or at the line's own
        // (shorter, blank) length stays on a char boundary.
        if line.len() >= cut && line.is_char_boundary(cut) {
            out.push_str(&line[cut..]);
        } else {
            out.push_str(line.trim_start_matches([' ', '\t']));
        }
    }
    out
}

/// Truncates offending text for an error, on a char boundary.
fn truncate(text: &str) -> String {
    let text = text.trim();
    if text.len() <= SNIPPET_MAX {
        return text.to_string();
    }
    format!("{} … [truncated]", truncate_to(text, SNIPPET_MAX))
}

fn truncate_to(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A tool's first example as a Qwen3-style `<tool_call>`.
fn native_example(spec: &ToolSpec) -> String {
    let arguments = spec.examples.first().and_then(|e| serde_yaml::from_str::<Json>(&e.body).ok());
    match arguments {
        Some(arguments) => {
            format!("<tool_call>\n{}\n</tool_call>", serde_json::json!({"name": spec.name, "arguments": arguments}))
        }
        None => spec.example_action(),
    }
}

/// An example of the action format for the no-action error: a bash call and finish.
fn format_example(specs: &ToolSpecs) -> String {
    let mut parts: Vec<String> =
        ["bash", "finish"].iter().filter_map(|name| specs.get(name)).map(ToolSpec::example_action).collect();
    if parts.is_empty() {
        parts.extend(specs.iter().next().map(ToolSpec::example_action));
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;
    use std::sync::OnceLock;

    fn specs() -> &'static ToolSpecs {
        static SPECS: OnceLock<ToolSpecs> = OnceLock::new();
        SPECS.get_or_init(|| ToolSpecs::builtin().expect("builtin specs load"))
    }

    fn parse(text: &str) -> ParseOutcome {
        parse_actions(text, specs())
    }

    /// Parses a reply that must hold exactly the given actions and no errors.
    fn actions(text: &str) -> Vec<Action> {
        let out = parse(text);
        assert!(out.errors.is_empty(), "unexpected errors for {text:?}: {:#?}", out.errors);
        out.actions
    }

    fn one(text: &str) -> Action {
        let mut all = actions(text);
        assert_eq!(all.len(), 1, "{text:?} → {all:#?}");
        all.remove(0)
    }

    fn cmd(text: &str) -> String {
        let action = one(text);
        assert_eq!(action.tool, "bash");
        action.args["cmd"].as_str().unwrap().to_string()
    }

    #[test]
    fn simple_bash() {
        let action = one("<bash>\ncmd: ls -la /app\ntimeout_secs: 60\n</bash>");
        assert_eq!(Json::Object(action.args), json!({"cmd": "ls -la /app", "timeout_secs": 60, "background": false}));
    }

    #[test]
    fn several_actions_in_order_with_prose() {
        let text = "I'll look first.\n<bash>\ncmd: ls\n</bash>\nThen read:\n<file>\naction: read\npath: /app/a.py\n</file>\n<todo>\naction: view\n</todo>\n<finish>\nmessage: done\n</finish>\n";
        let all = actions(text);
        let tools: Vec<&str> = all.iter().map(|a| a.tool.as_str()).collect();
        assert_eq!(tools, ["bash", "file", "todo", "finish"]);
        assert_eq!(all[1].args["path"], "/app/a.py");
        assert_eq!(all[1].args["limit"], 2000);
    }

    #[test]
    fn inline_tags() {
        let all = actions("<bash>cmd: ls</bash><finish>message: ok</finish>");
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].args["cmd"], "ls");
        assert_eq!(all[1].args["message"], "ok");
        assert_eq!(cmd("Run this: <bash>pwd</bash> please"), "pwd");
    }

    #[test]
    fn crlf() {
        let action = one("<file>\r\naction: write\r\npath: /a\r\ncontent: |\r\n  x\r\n  y\r\n</file>\r\n");
        assert_eq!(action.args["content"], "x\ny\n");
    }

    #[test]
    fn code_fences() {
        assert_eq!(cmd("```xml\n<bash>\ncmd: ls\n</bash>\n```"), "ls");
        assert_eq!(cmd("<bash>\n```yaml\ncmd: ls\n```\n</bash>"), "ls");
        assert_eq!(cmd("<bash>\n```\nls -la\n```\n</bash>"), "ls -la");
        // Fence around the tags and the closing tag missing.
        assert_eq!(cmd("```xml\n<bash>\ncmd: ls\n```"), "ls");
        assert_eq!(cmd("```\n<bash>\ncmd: ls\n```\n"), "ls");
        // A fence inside a block scalar is content.
        let action = one("<file>\naction: write\npath: /r.md\ncontent: |\n  # T\n  ```\n  code\n  ```\n</file>");
        assert_eq!(action.args["content"], "# T\n```\ncode\n```\n");
    }

    #[test]
    fn missing_final_closing_tag() {
        assert_eq!(cmd("<bash>\ncmd: ls /tmp\n"), "ls /tmp");
        let action = one("Done.\n<finish>\nmessage: all tests pass");
        assert_eq!(action.args["message"], "all tests pass");
        // The body of an unclosed tag stops at the next tool tag line.
        let all = actions("<bash>\ncmd: ls\n<finish>\nmessage: done\n</finish>");
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].args["cmd"], "ls");
        // Or at the same tag opened again before the close.
        let all = actions("<bash>\ncmd: ls\n<bash>\ncmd: pwd\n</bash>");
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].args["cmd"], "pwd");
    }

    #[test]
    fn mistyped_closing_tag() {
        assert_eq!(cmd("<bash>\ncmd: ls\n</bash\n"), "ls");
        assert_eq!(cmd("<bash>\nls -la\n</ bash>"), "ls -la");
        let all = actions("<bash>\ncmd: ls\n</bash\n<finish>\nmessage: ok\n</finish>");
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].args["cmd"], "ls");
    }

    #[test]
    fn unclosed_stops_at_the_next_tool_line() {
        let all = actions("<bash>\ncmd: ls\n<finish>\nmessage: x\n</finish>\n<bash>\ncmd: pwd\n</bash>");
        let tools: Vec<&str> = all.iter().map(|a| a.tool.as_str()).collect();
        assert_eq!(tools, ["bash", "finish", "bash"]);
        assert_eq!(all[0].args["cmd"], "ls");
        // An empty unclosed tag before another tool is a stutter.
        assert_eq!(one("<bash>\n<finish>\nmessage: x\n</finish>").tool, "finish");
        // At the end of the reply an empty tag is an error.
        let out = parse("<bash>\n");
        assert!(out.errors[0].message.contains("missing required argument `cmd`"));
    }

    #[test]
    fn yaml_alias_bombs_and_bad_aliases_are_errors() {
        let mut body = String::from("action: write\npath: /a\nx0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            body.push_str(&format!("x{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
        }
        let out = parse(&format!("<file>\n{body}</file>"));
        assert!(out.actions.is_empty());
        assert_eq!(out.errors.len(), 1);
        let out = parse("<file>\naction: *nope\npath: /a\n</file>");
        assert!(out.actions.is_empty());
        assert_eq!(out.errors.len(), 1);
    }

    #[test]
    fn stuttered_opening_tag() {
        assert_eq!(cmd("<bash>\n<bash>\ncmd: ls\n</bash>"), "ls");
    }

    #[test]
    fn prose_mentions_are_not_actions() {
        assert_eq!(cmd("I will use the <bash> tool.\n<bash>\ncmd: ls\n</bash>"), "ls");
        let out = parse("I could use the <bash> tool later.");
        assert!(out.actions.is_empty());
        assert_eq!(out.errors.len(), 1);
        assert_eq!(out.errors[0].tool, None);
    }

    #[test]
    fn whitespace_and_indentation() {
        assert_eq!(cmd("   <bash>   \n     cmd: ls\n     timeout_secs: 5\n   </bash>   "), "ls");
        let action = one("  <file>\n    action: write\n    path: /a.py\n    content: |\n      def f():\n          return 1\n  </file>");
        assert_eq!(action.args["content"], "def f():\n    return 1\n");
        // Tab indentation of the whole body.
        assert_eq!(cmd("<bash>\n\tcmd: ls\n\ttimeout_secs: 5\n</bash>"), "ls");
    }

    #[test]
    fn block_scalars() {
        let c =
            cmd("<bash>\ncmd: |\n  cd /app\n  echo \"a: b\" # not a comment\n  make test\ntimeout_secs: 300\n</bash>");
        assert_eq!(c, "cd /app\necho \"a: b\" # not a comment\nmake test\n");
        let action = one("<file>\naction: edit\npath: /a\nold_string: |-\n  x = 1\nnew_string: |-\n  x = 2\n</file>");
        assert_eq!(action.args["old_string"], "x = 1");
        assert_eq!(action.args["new_string"], "x = 2");
    }

    #[test]
    fn raw_bash_bodies() {
        assert_eq!(cmd("<bash>ls -la</bash>"), "ls -la");
        assert_eq!(cmd("<bash>\ncd /app\nmake\n</bash>"), "cd /app\nmake");
        // YAML would read these as mappings with unknown keys.
        assert_eq!(cmd("<bash>\necho a: b\n</bash>"), "echo a: b");
        assert_eq!(cmd("<bash>\npython -c 'print(1)' # run\n</bash>"), "python -c 'print(1)' # run");
        assert_eq!(cmd("<bash>\"ls -la\"</bash>"), "ls -la");
        let action = one("<bash>\ngrep -n foo: src/*.rs\n</bash>");
        assert_eq!(action.args["timeout_secs"], 120);
    }

    #[test]
    fn misnamed_raw_argument_is_an_error() {
        let out = parse("<bash>\ncommand: ls\n</bash>");
        assert!(out.actions.is_empty());
        let e = &out.errors[0];
        assert!(e.message.contains("unknown argument `command` (did you mean `cmd`?)"), "{}", e.message);
        let out = parse("<bash>\nscript: ls -la\n</bash>");
        assert!(out.errors[0].message.contains("unknown argument `script`"));
        // Also when YAML cannot read the body.
        let out = parse("<bash>\ncommand: echo a: b\n</bash>");
        assert!(out.errors[0].message.contains("unknown argument `command`"));
        // Shell text that merely looks like a key is still a command.
        assert_eq!(cmd("<bash>\nFOO_BAR: baz\n</bash>"), "FOO_BAR: baz");
    }

    #[test]
    fn cmd_with_colon_is_literal() {
        assert_eq!(cmd("<bash>\ncmd: echo a: b\n</bash>"), "echo a: b");
        let action = one("<bash>\ncmd: echo a: b\ntimeout_secs: 60\n</bash>");
        assert_eq!(action.args["cmd"], "echo a: b");
        assert_eq!(action.args["timeout_secs"], 60);
        let action = one("<bash>\ntimeout_secs: 9\ncmd: curl http://x:80/a: b\n</bash>");
        assert_eq!(action.args["cmd"], "curl http://x:80/a: b");
        assert_eq!(action.args["timeout_secs"], 9);
        assert_eq!(cmd("<bash>\ncmd: [ -f x ] && echo y\n</bash>"), "[ -f x ] && echo y");
        assert_eq!(cmd("<bash>\ncmd: [ -f x ]\n</bash>"), "[ -f x ]");
        assert_eq!(cmd("<bash>\ncmd: ls *.py\n</bash>"), "ls *.py");
        assert_eq!(cmd("<bash>\ncmd: *.sh\n</bash>"), "*.sh");
        assert_eq!(cmd("<bash>\ncmd: 1.10\n</bash>"), "1.10");
        assert_eq!(cmd("<bash>\ncmd: \"a\" b\n</bash>"), "\"a\" b");
    }

    #[test]
    fn cmd_literal_multiline() {
        // A heredoc whose lines are not valid YAML.
        let text = "<bash>\ncmd: cat > f.py << 'EOF'\ndef f(x):\n    return x\nEOF\n</bash>";
        assert_eq!(cmd(text), "cat > f.py << 'EOF'\ndef f(x):\n    return x\nEOF");
        // A block with a tab inside, which YAML rejects as indentation.
        let text = "<bash>\ncmd: |\n  printf 'a\\n'\n\techo b: c\ntimeout_secs: 5\n</bash>";
        let action = one(text);
        // Mixed space/tab indentation has no common prefix to remove.
        assert_eq!(action.args["cmd"], "  printf 'a\\n'\n\techo b: c");
    }

    #[test]
    fn bash_errors() {
        let out = parse("<bash>\ncmd: ls\ntimeout_secs: soon\n</bash>");
        assert!(out.actions.is_empty());
        assert_eq!(out.errors.len(), 1);
        let e = &out.errors[0];
        assert_eq!(e.tool.as_deref(), Some("bash"));
        assert!(e.message.contains("timeout_secs"), "{}", e.message);
        assert!(e.snippet.starts_with("<bash>"), "{}", e.snippet);
        assert_eq!(e.example, "<bash>\ncmd: ls -la /app\n</bash>");
        let out = parse("<bash>\ncmd: ls\ntimeout: 5\n</bash>");
        assert!(out.errors[0].message.contains("unknown argument `timeout`"));
        let out = parse("<bash>\n</bash>");
        assert!(out.errors[0].message.contains("missing required argument `cmd`"));
        let out = parse("<bash>\n# just a comment\n</bash>");
        assert!(out.errors[0].message.contains("missing required argument `cmd`"));
    }

    #[test]
    fn invalid_yaml_for_a_strict_tool() {
        let out = parse("<file>\naction: write\npath: /a\ncontent: a: b\n</file>");
        assert!(out.actions.is_empty());
        let e = &out.errors[0];
        assert_eq!(e.tool.as_deref(), Some("file"));
        assert!(e.message.contains("not valid YAML"), "{}", e.message);
        assert!(e.message.contains("`|` block"), "{}", e.message);
        assert!(e.example.starts_with("<file>\naction: read"), "{}", e.example);
        let obs = e.to_observation();
        assert!(obs.starts_with("<parse_error>\nerror: the body of <file>"), "{obs}");
    }

    #[test]
    fn invalid_args_for_a_strict_tool() {
        let out = parse("<file>\naction: edit\npath: /a\nold_string: x\n</file>");
        assert!(out.errors[0].message.contains("`new_string`"));
        let out = parse("<search>\naction: find\npattern: x\n</search>");
        assert!(out.errors[0].message.contains("one of: grep, glob, ls"));
    }

    #[test]
    fn errors_and_actions_together() {
        let out =
            parse("<bash>\ncmd: ls\n</bash>\n<file>\naction: nope\npath: /a\n</file>\n<finish>\nmessage: x\n</finish>");
        assert_eq!(out.actions.len(), 2);
        assert_eq!(out.errors.len(), 1);
        assert_eq!(out.errors[0].tool.as_deref(), Some("file"));
    }

    #[test]
    fn think_is_ignored() {
        let all = actions("<think>\nMaybe <bash>rm -rf /</bash>? No.\n</think>\n<bash>\ncmd: ls\n</bash>");
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].args["cmd"], "ls");
        // Unclosed <think>: only the tag is ignored.
        assert_eq!(cmd("<think>\nI should list files.\n<bash>\ncmd: ls\n</bash>"), "ls");
        // A </think> without <think>: everything before it was reasoning.
        assert_eq!(cmd("Let me try <bash>cmd: rm x</bash>\n</think>\n<bash>\ncmd: ls\n</bash>"), "ls");
        // Only thinking: no action.
        let out = parse("<think>\nhmm\n</think>");
        assert!(out.actions.is_empty());
        assert_eq!(out.errors.len(), 1);
        // A think tag inside a body is content.
        assert_eq!(cmd("<bash>\ncmd: grep -c '<think>' log.txt\n</bash>"), "grep -c '<think>' log.txt");
    }

    #[test]
    fn made_up_observations_are_skipped() {
        let all = actions("<bash>\ncmd: ls\n</bash>\n<bash_output>\n<bash>cmd: rm -rf /</bash>\n</bash_output>\n<finish>\nmessage: ok\n</finish>");
        let tools: Vec<&str> = all.iter().map(|a| a.tool.as_str()).collect();
        assert_eq!(tools, ["bash", "finish"]);
    }

    #[test]
    fn qwen_tool_call() {
        let action = one("<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>");
        assert_eq!(Json::Object(action.args), json!({"cmd": "ls", "timeout_secs": 120, "background": false}));
        // Arguments as a JSON string.
        let action = one("<tool_call>\n{\"name\": \"file\", \"arguments\": \"{\\\"action\\\": \\\"read\\\", \\\"path\\\": \\\"/a\\\"}\"}\n</tool_call>");
        assert_eq!(action.tool, "file");
        assert_eq!(action.args["path"], "/a");
        // Same result as the XML form.
        let xml = one("<bash>\ncmd: ls\n</bash>");
        let native = one("<tool_call>{\"name\":\"bash\",\"arguments\":{\"cmd\":\"ls\"}}</tool_call>");
        assert_eq!(xml, native);
        // Mixed with XML actions, in order.
        let all = actions("<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>\n<finish>\nmessage: ok\n</finish>");
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].tool, "finish");
    }

    #[test]
    fn qwen_tool_call_variants() {
        // OpenAI-style wrapper, `parameters`, a list, a raw string for bash, no close.
        assert_eq!(one("<tool_call>{\"function\": {\"name\": \"bash\", \"arguments\": \"{\\\"cmd\\\": \\\"pwd\\\"}\"}}</tool_call>").args["cmd"], "pwd");
        assert_eq!(
            one("<tool_call>{\"name\": \"bash\", \"parameters\": {\"cmd\": \"pwd\"}}</tool_call>").args["cmd"],
            "pwd"
        );
        assert_eq!(actions("<tool_call>[{\"name\": \"bash\", \"arguments\": {\"cmd\": \"a\"}}, {\"name\": \"finish\", \"arguments\": {\"message\": \"b\"}}]</tool_call>").len(), 2);
        assert_eq!(one("<tool_call>{\"name\": \"bash\", \"arguments\": \"ls -la\"}</tool_call>").args["cmd"], "ls -la");
        assert_eq!(one("<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n").args["cmd"], "ls");
        assert_eq!(
            one("<tool_call>\n```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n```\n</tool_call>").args
                ["cmd"],
            "ls"
        );
        // YAML-flow leniency: single quotes.
        assert_eq!(one("<tool_call>{'name': 'bash', 'arguments': {'cmd': 'ls'}}</tool_call>").args["cmd"], "ls");
    }

    #[test]
    fn qwen_tool_call_errors() {
        let out = parse("<tool_call>{\"name\": \"python\", \"arguments\": {\"code\": \"1\"}}</tool_call>");
        assert!(out.actions.is_empty());
        assert_eq!(out.errors.len(), 1);
        assert!(out.errors[0].message.contains("unknown tool `python`"));
        assert!(out.errors[0].message.contains("bash, file, search"));
        assert!(out.errors[0].snippet.starts_with("<tool_call>"));
        let out = parse("<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}</tool_call>");
        let e = &out.errors[0];
        assert_eq!(e.tool.as_deref(), Some("bash"));
        assert!(e.message.contains("did you mean `cmd`"), "{}", e.message);
        assert!(e.example.starts_with("<tool_call>\n{"), "{}", e.example);
        assert!(e.example.contains("\"cmd\":\"ls -la /app\""), "{}", e.example);
        let out = parse("<tool_call>{not json at all: [</tool_call>");
        assert!(out.errors[0].message.contains("not valid JSON"));
        let out = parse("<tool_call>{\"arguments\": {}}</tool_call>");
        assert!(out.errors[0].message.contains("no `name`"));
        let out = parse("<tool_call>{\"name\": \"file\", \"arguments\": 3}</tool_call>");
        assert!(out.errors[0].message.contains("JSON object"));
    }

    #[test]
    fn native_call_api() {
        let action = parse_native_call("finish", &json!({"message": "ok"}), specs()).unwrap();
        assert_eq!(action.args["message"], "ok");
        let action = parse_native_call("bash", &json!("{\"cmd\": \"ls\"}"), specs()).unwrap();
        assert_eq!(action.args["cmd"], "ls");
        let err = parse_native_call("finish", &Json::Null, specs()).unwrap_err();
        assert!(err.message.contains("message"));
        assert!(err.snippet.contains("finish"));
    }

    #[test]
    fn no_action_error() {
        let out = parse("I think the answer is 42.");
        assert!(out.actions.is_empty());
        assert_eq!(out.errors.len(), 1);
        let e = &out.errors[0];
        assert_eq!(e.tool, None);
        assert!(e.message.contains("no action found"), "{}", e.message);
        assert!(e.message.contains("bash, file, search, todo, scratchpad, finish"));
        assert!(e.example.contains("<bash>\ncmd: ls -la /app\n</bash>"), "{}", e.example);
        assert!(e.example.contains("<finish>"), "{}", e.example);
        assert_eq!(e.snippet, "I think the answer is 42.");
        let out = parse("");
        assert_eq!(out.errors[0].snippet, "(an empty reply)");
    }

    #[test]
    fn unknown_tags_only_matter_without_actions() {
        let out = parse("<python>\nprint(1)\n</python>");
        assert_eq!(out.errors.len(), 1);
        let e = &out.errors[0];
        assert!(e.message.contains("<python> is not a tool"), "{}", e.message);
        assert!(e.message.contains("bash, file"), "{}", e.message);
        assert!(e.snippet.starts_with("<python>"));
        let out = parse("<python>x</python>\n<execute>y</execute>");
        assert!(out.errors[0].message.contains("<python>, <execute> are not a tool"));
        // With a valid action, unknown tags are just text.
        assert_eq!(cmd("<python>x</python>\n<bash>\ncmd: ls\n</bash>"), "ls");
        // With a malformed known tool, only its error is reported.
        let out = parse("<python>x</python>\n<bash>\ntimeout_secs: x\n</bash>");
        assert_eq!(out.errors.len(), 1);
        assert_eq!(out.errors[0].tool.as_deref(), Some("bash"));
    }

    #[test]
    fn every_example_parses() {
        for spec in specs() {
            for example in &spec.examples {
                let text = spec.render_call(&example.body);
                let action = one(&text);
                assert_eq!(action.tool, spec.name);
                // And through the native path.
                let native = one(&native_example_for(spec, example));
                assert_eq!(native, action, "{}", spec.name);
            }
        }
    }

    fn native_example_for(spec: &ToolSpec, example: &super::super::ToolExample) -> String {
        let arguments: Json = serde_yaml::from_str(&example.body).unwrap();
        format!("<tool_call>{}</tool_call>", json!({"name": spec.name, "arguments": arguments}))
    }

    #[test]
    fn too_many_actions_are_capped() {
        let text = "<bash>cmd: ls</bash>\n".repeat(MAX_ITEMS + 10);
        let out = parse(&text);
        assert_eq!(out.actions.len(), MAX_ITEMS);
        assert_eq!(out.errors.len(), 1);
        assert!(out.errors[0].message.contains("too many actions"));
    }

    #[test]
    fn snippets_are_truncated_on_char_boundaries() {
        let text = format!("<file>\naction: write\npath: x\ncontent: a: {}\n</file>", "é".repeat(400));
        let out = parse(&text);
        let snippet = &out.errors[0].snippet;
        assert!(snippet.len() < SNIPPET_MAX + 20, "{}", snippet.len());
        assert!(snippet.ends_with("[truncated]"));
        assert_eq!(truncate_to("ééé", 3), "é");
    }

    #[test]
    fn helpers() {
        assert_eq!(dedent(&["  a", "", "    b"]), "a\n\n  b");
        assert_eq!(dedent(&["\ta", "\t\tb"]), "a\n\tb");
        assert_eq!(dedent(&[" a", "\tb"]), " a\n\tb");
        assert!(is_fence("```yaml"));
        assert!(is_fence("  ```"));
        assert!(!is_fence("```yaml and text"));
        assert!(is_block_indicator("|-"));
        assert!(is_block_indicator(">+2"));
        assert!(!is_block_indicator("|x"));
        assert!(read_tag("<bash>", 0).is_some());
        assert!(read_tag("<ba sh>", 0).is_none());
        assert!(read_tag("<", 0).is_none());
        assert!(read_tag("</", 0).is_none());
        assert!(read_tag("<1a>", 0).is_none());
    }

    /// Adversarial 1 MB inputs finish quickly (no quadratic behaviour).
    #[test]
    fn large_inputs_are_linear() {
        const MB: usize = 1 << 20;
        let patterns = [
            "<bash>\n",
            "<bash>",
            "x <bash>",
            "<think>",
            "</think>",
            "<bash>a</bash>",
            "<python>",
            "<tool_call>{",
            "```\n",
            "cmd: a: b\n",
            "<bash>\ncmd: x\n",
            "</bash>",
            "é<",
            "<bash_output>",
            "  \n",
            "[",
            "<file>\n",
            "<",
        ];
        for pattern in patterns {
            let text = pattern.repeat(MB / pattern.len());
            let start = std::time::Instant::now();
            let out = parse(&text);
            let elapsed = start.elapsed();
            assert!(elapsed < std::time::Duration::from_secs(5), "{pattern:?} took {elapsed:?}");
            assert!(out.actions.len() + out.errors.len() <= MAX_ITEMS + 1);
        }
        // One huge valid body.
        let text = format!("<bash>\ncmd: |\n{}</bash>", "  echo hello\n".repeat(MB / 13));
        let c = cmd(&text);
        assert!(c.len() > MB / 2);
    }

    fn fragment() -> impl Strategy<Value = String> {
        let fixed = prop::sample::select(vec![
            "<bash>",
            "</bash>",
            "<think>",
            "</think>",
            "```",
            "```yaml\n",
            "```xml",
            "cmd:",
            "cmd: ",
            "\r\n",
            "\n",
            "|",
            "|-",
            "  ",
            "\t",
            ":",
            ": ",
            "<tool_call>{",
            "</tool_call>",
            "\"name\": \"bash\"",
            "\"arguments\": {\"cmd\": \"ls\"}}",
            "\"name\": ",
            "<file>",
            "</file>",
            "action: ",
            "read",
            "write",
            "path: /a",
            "content: |\n  x",
            "<finish>",
            "</finish>",
            "message: ",
            "<python>",
            "</python>",
            "- ",
            "'",
            "\"",
            "#",
            "<",
            ">",
            "/",
            "&a",
            "*a",
            "é",
            "🦀",
            "\u{0}",
            "\r",
            "timeout_secs: 5",
            "<bash_output>",
            "<todo>",
            "action: add",
            "id: x",
            "{",
            "}",
            "[",
            "]",
            ",",
            "<search>",
            "edits:",
            "!!binary",
            "---",
            "%YAML",
            "\u{feff}",
            "ls -la",
            "cmd: ls\n",
            "action: read\npath: /a\n",
            "message: done\n",
            "content: |\n  a: b\n",
            "edits:\n  - old_string: a\n    new_string: b\n",
            "timeout_secs: '5'\n",
            "action: complete\nid: 2\n",
            "background: yes\n",
            "action: multi_edit\n",
            "pattern: \"*.py\"\n",
            "action: grep\n",
            "\n  ",
        ]);
        prop_oneof![
            6 => fixed.prop_map(str::to_string),
            1 => prop::collection::vec(any::<char>(), 0..4)
                .prop_map(|chars| chars.into_iter().collect::<String>()),
        ]
    }

    /// An element shaped like an action: an opening tag, fragments, and a closing tag
    /// that may be missing or broken.
    fn block() -> impl Strategy<Value = String> {
        let names = prop::sample::select(vec![
            "bash",
            "file",
            "search",
            "todo",
            "scratchpad",
            "finish",
            "tool_call",
            "think",
            "python",
            "bash_output",
        ]);
        let leads = prop::sample::select(vec!["", "\n", "  ", "```yaml\n", "\r\n", "\n  "]);
        let ends = prop::sample::select(vec!["", "</>", "\n</>\n", "\n</", "\n```"]);
        (names, leads, prop::collection::vec(fragment(), 0..10), ends).prop_map(|(name, lead, parts, end)| {
            let end = end.replace("</", &format!("</{name}"));
            format!("<{name}>{lead}{}{end}", parts.concat())
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            // Nothing to persist: a failure prints the minimal input.
            failure_persistence: None,
            ..ProptestConfig::with_cases(100_000)
        })]
        #[test]
        fn never_panics_and_returns_known_tools(
            parts in prop::collection::vec(prop_oneof![2 => fragment(), 1 => block()], 0..12)
        ) {
            let text = parts.concat();
            let out = parse_actions(&text, specs());
            for action in &out.actions {
                let spec = specs().get(&action.tool);
                prop_assert!(spec.is_some(), "unknown tool {}", action.tool);
                // Validated arguments validate again to themselves.
                let again = serde_yaml::to_value(&action.args).unwrap();
                let revalidated = validate_args(spec.unwrap(), again);
                prop_assert_eq!(revalidated, Ok(action.args.clone()));
            }
            prop_assert!(!out.actions.is_empty() || !out.errors.is_empty());
            for error in &out.errors {
                prop_assert!(error.snippet.len() <= SNIPPET_MAX + 20);
                prop_assert!(error.message.len() < 4000, "{}", error.message);
            }
        }
    }
}
