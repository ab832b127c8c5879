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
//! - Fenced tool blocks: outside tags (and `<think>`), a Markdown code block whose
//!   language is a tool's name (any case) and whose first line that is not blank or a
//!   `#` comment is `name:` with an argument of that tool is that action, in order with
//!   the tags:
//!
//!   ````text
//!   ```bash
//!   cmd: ls -la /app
//!   ```
//!   ````
//!
//!   Its body is read and validated like a tag body (errors name the tool and show
//!   its example) but never taken whole as the raw argument, and tags inside it are
//!   part of it. Anything else in a fence is not an action: plain code
//!   (```` ```bash ```` with `ls -la`), another language (```` ```sh ````,
//!   ```` ```yaml ````), or a first key that is not an argument (`command: ls`); such a
//!   block is text outside tags (tags in it still count), and the no-action error then
//!   says what a tool block looks like. Fences follow CommonMark: up to 3 spaces of
//!   indentation, 3 or more backticks or tildes, and a block ends at a fence line of
//!   the same character, at least as long, with no language; a tool block's closing
//!   fence must also be indented no more than its opening one (so a fence inside a
//!   `content: |` block is content). An unclosed tool block runs to the next line
//!   that starts with a tool tag, or to the end of the reply; after an unclosed other
//!   block, no fence opens a tool block.
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
//! - For a tool with a `raw_body_arg` (bash: `cmd`), a tag body that is not a YAML mapping
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

mod body;
mod fence;
mod json_repair;
mod native;
mod scanner;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;

use std::borrow::Cow;

use memchr::memchr;

use super::{Action, ActionParseError, ToolSpec, ToolSpecs};
use scanner::Scanner;

pub use json_repair::lenient_json;
pub use native::{call_arguments, default_native_example, parse_native_call, written_calls};

/// Longest snippet of offending text in an error, in bytes.
const SNIPPET_MAX: usize = 300;
/// Most actions plus errors read from one reply.
pub const MAX_ITEMS: usize = 64;

/// The actions found in one reply, in order, and the malformed ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParseOutcome {
    /// Valid actions, in the order they appear.
    pub actions: Vec<Action>,
    /// Malformed actions (or one error saying that the reply holds no action).
    pub errors: Vec<ActionParseError>,
    /// The reply attempts no action at all (no tool tag, known or not, and no tool's
    /// fenced block): prose, perhaps with code. An interactive session takes it as the
    /// assistant's answer.
    pub prose_only: bool,
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

/// An example of the action format for the no-action error: a bash call and finish.
fn format_example(specs: &ToolSpecs) -> String {
    let mut parts: Vec<String> =
        ["bash", "finish"].iter().filter_map(|name| specs.get(name)).map(ToolSpec::example_action).collect();
    if parts.is_empty() {
        parts.extend(specs.iter().next().map(ToolSpec::example_action));
    }
    parts.join("\n")
}
