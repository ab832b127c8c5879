//! Native tool calls out of a reply's text: `<tool_call>{"name": …, "arguments": …}
//! </tool_call>` (the Hermes format of Qwen and most open models), or a reply that is
//! nothing but such a JSON object naming an offered tool (as small models and Llama 3.x
//! write them), read as the agent loop reads them, split from the prose as the text
//! streams so that clients get OpenAI's `tool_calls` instead of markup in `content`.

use agent_core::tools::written_calls;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// A part of the reply: prose, or one whole call.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    /// A call: its function's name and its arguments as a JSON string.
    Call {
        name: String,
        arguments: String,
    },
}

/// How the reply has begun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Only whitespace so far.
    Open,
    /// With `{` or `[`: it may be a bare call, so it waits for the end.
    Json,
    Prose,
}

/// Splits streamed text into [`Part`]s; text that may be the start of `<tool_call>` waits
/// for the next piece, and a reply that begins as JSON waits for its end.
#[derive(Debug)]
pub struct CallSplitter {
    buf: String,
    inside: bool,
    start: Start,
    /// The offered tools' names: a bare JSON reply is a call only when it names one.
    tools: Vec<String>,
}

impl CallSplitter {
    /// A splitter for a request offering `tools`.
    pub fn new(tools: Vec<String>) -> Self {
        CallSplitter { buf: String::new(), inside: false, start: Start::Open, tools }
    }

    /// Adds a piece of text; returns what is now certain.
    pub fn push(&mut self, text: &str) -> Vec<Part> {
        self.buf.push_str(text);
        if self.start == Start::Open {
            match opening(&self.buf) {
                None => return Vec::new(),
                Some(start) => self.start = start,
            }
        }
        if self.start == Start::Json {
            return Vec::new();
        }
        let mut out = Vec::new();
        loop {
            if self.inside {
                let Some(end) = self.buf.find(CLOSE) else { break };
                let body: String = self.buf.drain(..end + CLOSE.len()).take(end).collect();
                self.inside = false;
                out.extend(calls(&body, true));
            } else if let Some(start) = self.buf.find(OPEN) {
                let before: String = self.buf.drain(..start + OPEN.len()).take(start).collect();
                if !before.is_empty() {
                    out.push(Part::Text(before));
                }
                self.inside = true;
            } else {
                let keep = held_back(&self.buf);
                let ready: String = self.buf.drain(..self.buf.len() - keep).collect();
                if !ready.is_empty() {
                    out.push(Part::Text(ready));
                }
                break;
            }
        }
        out
    }

    /// The end of the reply: an unclosed call is read if it is whole JSON (a model may
    /// stop without the closing tag), else everything held goes out as text.
    pub fn finish(&mut self) -> Vec<Part> {
        if self.start == Start::Json {
            self.start = Start::Prose;
            if let Ok(calls) = written_calls(unfenced(&self.buf)) {
                if !calls.is_empty() && calls.iter().all(|(name, _)| self.tools.contains(name)) {
                    self.buf.clear();
                    return calls.into_iter().map(|(name, arguments)| call_part(name, arguments)).collect();
                }
            }
            let mut out = self.push("");
            out.extend(self.finish());
            return out;
        }
        let rest = std::mem::take(&mut self.buf);
        if self.inside {
            self.inside = false;
            return calls(&rest, false);
        }
        if rest.is_empty() {
            Vec::new()
        } else {
            vec![Part::Text(rest)]
        }
    }
}

/// Splits a whole reply.
pub fn split(text: &str, tools: Vec<String>) -> Vec<Part> {
    let mut s = CallSplitter::new(tools);
    let mut parts: Vec<Part> = Vec::new();
    for part in s.push(text).into_iter().chain(s.finish()) {
        match (parts.last_mut(), part) {
            (Some(Part::Text(a)), Part::Text(b)) => a.push_str(&b),
            (_, part) => parts.push(part),
        }
    }
    parts
}

/// The calls of a `<tool_call>` body; one that cannot be read stays text, as written.
fn calls(body: &str, closed: bool) -> Vec<Part> {
    match written_calls(body) {
        Ok(calls) => calls.into_iter().map(|(name, arguments)| call_part(name, arguments)).collect(),
        Err(_) => vec![Part::Text(format!("{OPEN}{body}{}", if closed { CLOSE } else { "" }))],
    }
}

/// How a reply that begins with `text` goes on, once that can be told: JSON (an object or
/// a list, bare or in a ```json fence, as small models write calls), or prose.
fn opening(text: &str) -> Option<Start> {
    let text = text.trim_start();
    let first = text.chars().next()?;
    if matches!(first, '{' | '[') {
        return Some(Start::Json);
    }
    if !"```".starts_with(&text[..text.len().min(3)]) {
        return Some(Start::Prose);
    }
    let (fence, rest) = text.split_once('\n')?;
    let lang = fence.trim_start_matches('`').trim();
    if !(lang.is_empty() || lang.eq_ignore_ascii_case("json")) {
        return Some(Start::Prose);
    }
    match rest.trim_start().chars().next()? {
        '{' | '[' => Some(Start::Json),
        _ => Some(Start::Prose),
    }
}

/// The reply without a ```json fence around it.
fn unfenced(text: &str) -> &str {
    let text = text.trim();
    match text.strip_prefix("```").and_then(|t| t.split_once('\n')).map(|(_, body)| body) {
        Some(body) => body.trim_end().strip_suffix("```").unwrap_or(body),
        None => text,
    }
}

fn call_part(name: String, arguments: serde_json::Value) -> Part {
    let arguments = match arguments {
        serde_json::Value::Null => "{}".into(),
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    };
    Part::Call { name, arguments }
}

/// Length of the longest tail of `text` that is a proper prefix of `<tool_call>`.
fn held_back(text: &str) -> usize {
    (1..OPEN.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && OPEN.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<String> {
        vec!["get_weather".into(), "b".into(), "f".into()]
    }

    #[test]
    fn a_reply_that_is_a_bare_call_of_an_offered_tool_is_a_call() {
        let bare = " {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
        assert_eq!(split(bare, tools()), vec![call("get_weather", "{\"city\":\"Paris\"}")]);
        let mut s = CallSplitter::new(tools());
        assert!(bare.chars().all(|c| s.push(&c.to_string()).is_empty()), "JSON waits for the end");
        assert_eq!(s.finish(), vec![call("get_weather", "{\"city\":\"Paris\"}")]);
        // JSON that names no offered tool, or is not a call, is the reply's text.
        let other = "{\"name\": \"launch\", \"arguments\": {}}";
        assert_eq!(split(other, tools()), vec![Part::Text(other.into())]);
        assert_eq!(split("[1, 2]", tools()), vec![Part::Text("[1, 2]".into())]);
    }

    #[test]
    fn a_call_in_a_json_fence_is_a_call_and_other_fences_stream() {
        let fenced = "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```";
        assert_eq!(split(fenced, tools()), vec![call("get_weather", "{\"city\":\"Oslo\"}")]);
        let mut s = CallSplitter::new(tools());
        assert!(s.push("```py").is_empty(), "undecided until the fence's line ends");
        assert_eq!(s.push("thon\nprint(1)\n"), vec![Part::Text("```python\nprint(1)\n".into())]);
        let code = "```json\n{\"a\": 1}\n```";
        assert_eq!(split(code, tools()), vec![Part::Text(code.into())]);
    }

    fn call(name: &str, arguments: &str) -> Part {
        Part::Call { name: name.into(), arguments: arguments.into() }
    }

    #[test]
    fn calls_are_split_from_prose_whatever_the_pieces() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
        let expected = vec![
            Part::Text("Let me check.\n".into()),
            call("get_weather", "{\"city\":\"Paris\"}"),
            Part::Text("\n".into()),
            call("b", "{}"),
        ];
        assert_eq!(split(text, tools()), expected);
        // One character at a time: the same parts, prose never showing a tag's start.
        let mut s = CallSplitter::new(tools());
        let mut parts: Vec<Part> = Vec::new();
        for c in text.chars() {
            for p in s.push(&c.to_string()) {
                match (parts.last_mut(), p) {
                    (Some(Part::Text(a)), Part::Text(b)) => a.push_str(&b),
                    (_, p) => parts.push(p),
                }
            }
        }
        parts.extend(s.finish());
        assert_eq!(parts, expected);
        assert!(parts.iter().all(|p| !matches!(p, Part::Text(t) if t.contains('<'))));
    }

    #[test]
    fn prose_with_angle_brackets_and_broken_calls_stay_text() {
        assert_eq!(split("if a < b then <tool", tools()), vec![Part::Text("if a < b then <tool".into())]);
        assert_eq!(
            split("<tool_call>{oops</tool_call>", tools()),
            vec![Part::Text("<tool_call>{oops</tool_call>".into())]
        );
        // Stopped before the closing tag.
        assert_eq!(
            split("<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}", tools()),
            vec![call("f", "{\"x\":1}")]
        );
    }
}
