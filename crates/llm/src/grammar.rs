//! Grammars that the local engines enforce while sampling, written in llguidance's Lark
//! dialect (both llama.cpp, through `llama-cpp-2`'s llguidance sampler, and mistral.rs take
//! it): a tool call cannot be malformed, name a tool that was not offered, or carry
//! arguments its schema refuses, while the text before a call stays free.
//!
//! The call is the Hermes format that Qwen2.5/Qwen3 and most open models are trained on,
//! `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`. Small models also write
//! the same object in a ```` ```json ```` block, or alone on a line; the agent loop reads
//! those as calls, so with [`Openers::Loose`] they open a call too and are held to the
//! same rules. Free text is matched by lazy lexemes that end at the first opener, so
//! nothing is constrained until a call opens (a lazy grammar, as llama.cpp's own tool-call
//! grammars are). JSON whitespace is the model's choice (compact or pretty-printed) but
//! bounded, so a small model cannot pad a call with newlines forever.

use serde_json::{json, Map, Value};

use agent_protocol::chat::ToolDefinition;

/// The opener of a native call.
pub const CALL_OPEN: &str = "<tool_call>";
/// The closer of a native call.
pub const CALL_CLOSE: &str = "</tool_call>";

/// Whitespace the model may put between two JSON tokens of a call.
const WS: &str = r"/[ \t\n]{1,24}/";

/// Any text without a run of more than 32 whitespace characters (deep indentation fits).
const BOUNDED_TEXT: &str = r"([^ \t\r\n]|[ \t\r\n]{1,32}[^ \t\r\n])*[ \t\r\n]{0,32}";

/// Which calls a reply may or must make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallChoice {
    /// Text, calls, or both (an interactive agent's turn; OpenAI's `tool_choice: auto`).
    Optional,
    /// Text, then at least one call: a headless agent's turn, where a reply without a
    /// call is an error (the model is kept from ending its reply before it acts).
    AfterText,
    /// At least one call (`tool_choice: required`).
    Required,
    /// At least one call, all of this tool (`tool_choice: {"function": {"name": ...}}`).
    Named(String),
}

/// What opens a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Openers {
    /// `<tool_call>` only: the Hermes format as a chat API returns it (`agent serve`,
    /// where a client's ```` ```json ```` block is text).
    Tagged,
    /// Also a ```` ```json ```` block starting a line and a `{` starting a line: how
    /// small models write calls, and what the agent loop reads as calls.
    Loose,
}

/// How many calls one reply may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Calls {
    /// One, then the reply ends: the agent loop with a small model. Kept from writing
    /// text after a call, the 1.5B wrote the same call again instead, up to four times a
    /// reply (29 calls in 8 turns on one task); one action per turn is also what
    /// SWE-agent and mini-swe-agent ask of their models.
    One,
    /// Any number in a row (parallel calls, as a chat API offers them).
    Many,
}

/// The grammar of a reply that may hold native calls of `tools`. `None` when no tool is
/// left to call (an empty list, or a named tool that is not in it).
pub fn native_calls(tools: &[ToolDefinition], choice: &CallChoice, openers: Openers, calls: Calls) -> Option<String> {
    let offered: Vec<&ToolDefinition> = match choice {
        CallChoice::Named(name) => tools.iter().filter(|t| &t.name == name).collect(),
        _ => tools.iter().collect(),
    };
    if offered.is_empty() {
        return None;
    }
    let mut g = String::from("%llguidance {}\n");
    // Text, then calls separated by whitespace only, then the end: text after a call
    // would be written before its result is known (small models narrate made-up
    // outputs there), and it costs decode time.
    // A required call comes first, as `tool_choice: required` means in OpenAI's API.
    let more = match calls {
        Calls::One => "ws?",
        Calls::Many => "(ws? next)* ws?",
    };
    match choice {
        CallChoice::Optional => g.push_str(&format!("start: free | first {more}\n")),
        CallChoice::AfterText => g.push_str(&format!("start: first {more}\n")),
        CallChoice::Required | CallChoice::Named(_) => g.push_str(&format!("start: next {more}\n")),
    }
    let close = lark_string(CALL_CLOSE);
    g.push_str(&format!("first: tag_lead ws? object ws? {close}"));
    if openers == Openers::Loose {
        // The closing fence on a line of its own, as the loop reads a block (a fence right
        // after the `}` left the 0.5B's calls unread).
        g.push_str(" | fence_lead ws? object fence_close | bare_lead object_rest");
    }
    g.push_str(&format!("\nnext: {} ws? object ws? {close}", lark_string(CALL_OPEN)));
    if openers == Openers::Loose {
        g.push_str(" | \"```json\" /[ \\t]*\\n/ ws? object fence_close | object");
    }
    g.push('\n');
    let tag = regex_escape(CALL_OPEN);
    // The text before a call. Where the reply cannot end without one, a model that would
    // have ended after its prose writes blank lines instead (the 1.5B: 300 tokens of them,
    // until the loop cut the reply): there runs of whitespace are bounded, so it must go on
    // to something, and the call is what the prompt has taught it comes next.
    let text = match choice {
        CallChoice::AfterText => BOUNDED_TEXT,
        _ => "(?s:.*)",
    };
    g.push_str(&format!("tag_lead[lazy]: /{text}{tag}/\n"));
    // What the free text may not contain: every opener.
    let mut banned = vec![format!("~/(?s:.*{tag}.*)/")];
    if openers == Openers::Loose {
        g.push_str(&format!("fence_lead[lazy]: /({text}\\n)?```json[ \\t]*\\n/\n"));
        g.push_str(&format!("bare_lead[lazy]: /({text}\\n)?[ \\t]{{0,8}}\\{{/\n"));
        banned.push("~/(?s:(.*\\n)?```json[ \\t]*\\n.*)/".into());
        banned.push("~/(?s:(.*\\n)?[ \\t]{0,8}\\{.*)/".into());
    }
    g.push_str(&format!("free: FREE\nFREE: /(?s:.*)/ & {}\n", banned.join(" & ")));
    if openers == Openers::Loose {
        g.push_str("fence_close: /[ \\t]{0,8}\\n([ \\t]{0,8}\\n)?[ \\t]{0,8}```/\n");
    }
    g.push_str("object: \"{\" object_rest\n");
    g.push_str("object_rest: ws? \"\\\"name\\\"\" ws? \":\" ws? named\n");
    let named: Vec<String> = (0..offered.len()).map(|i| format!("named{i}")).collect();
    g.push_str(&format!("named: {}\n", named.join(" | ")));
    for (i, tool) in offered.iter().enumerate() {
        let name = lark_string(&Value::String(tool.name.clone()).to_string());
        g.push_str(&format!(
            "named{i}: {name} ws? \",\" ws? \"\\\"arguments\\\"\" ws? \":\" ws? args{i} ws? \"}}\"\n\
             args{i}: %json {}\n",
            with_format(arguments_schema(tool))
        ));
    }
    g.push_str(&format!("ws: WS\nWS: {WS}\n"));
    Some(g)
}

/// The grammar of a reply that is one JSON value valid against `schema` (OpenAI's
/// `response_format: {"type": "json_schema"}`).
pub fn json_value(schema: &Value) -> String {
    format!("%llguidance {{}}\nstart: %json {}\n", with_format(closed(schema.clone())))
}

/// The schema of a call's arguments: the tool's own, closed to undeclared keys.
fn arguments_schema(tool: &ToolDefinition) -> Value {
    match &tool.parameters {
        Value::Object(o) if !o.is_empty() => closed(tool.parameters.clone()),
        _ => json!({ "type": "object" }),
    }
}

/// `schema` with `additionalProperties: false` on every object that lists its
/// properties and says nothing of others: the loop refuses arguments a tool does not
/// declare, so the grammar must not let the model write them.
fn closed(mut schema: Value) -> Value {
    close_objects(&mut schema, 0);
    schema
}

fn close_objects(value: &mut Value, depth: usize) {
    // Schemas come from MCP servers too; a pathological nesting is left as it is.
    if depth > 32 {
        return;
    }
    match value {
        Value::Object(map) => {
            if map.contains_key("properties") && !map.contains_key("additionalProperties") {
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
            for (_, child) in map.iter_mut() {
                close_objects(child, depth + 1);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| close_objects(v, depth + 1)),
        _ => {}
    }
}

/// Adds llguidance's formatting options: whitespace between tokens as the model likes it
/// (compact, Python's `json.dumps` style or pretty-printed) but at most 24 characters at a
/// time, and `lenient` so that keywords llguidance does not implement (an MCP server's
/// `format`, say) are ignored rather than fatal.
fn with_format(schema: Value) -> Value {
    let mut map = match schema {
        Value::Object(map) => map,
        other => {
            let mut map = Map::new();
            map.insert("allOf".into(), Value::Array(vec![other]));
            map
        }
    };
    map.insert(
        "x-guidance".into(),
        json!({
            "item_separator": ",",
            "key_separator": ":",
            "whitespace_pattern": "[ \\t\\n]{0,24}",
            "lenient": true,
        }),
    );
    Value::Object(map)
}

/// `text` as a Lark string literal.
pub fn lark_string(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

/// `text` as a literal inside a Lark `/regex/`.
pub fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for c in text.chars() {
        if "\\.+*?()|[]{}^$/-".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
