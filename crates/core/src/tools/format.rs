//! The two action formats: native tool calls (tools sent as JSON schemas, calls in the
//! model's own format) and the text format (XML tags with YAML bodies), and how `auto`
//! chooses between them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{Action, ActionParseError, ToolSpecs};
use agent_llm::ToolDefinition;

/// How the model is asked to write its actions (`--tool-format`, `tool_format` in the config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolFormat {
    /// Native where the model supports it (its chat template declares tools, or its API
    /// takes them), text elsewhere.
    #[default]
    Auto,
    /// Tools as JSON schemas; calls in the model's own format.
    Native,
    /// `<bash>` tags whose bodies are YAML, explained in the system prompt.
    Text,
}

impl ToolFormat {
    /// The format an episode uses with a model that does (or does not) take tools
    /// natively. Asking for `native` on a model that cannot is an error for the user.
    pub fn resolve(self, model_name: &str, native_supported: bool) -> Result<ToolFormat, String> {
        match self {
            ToolFormat::Auto if native_supported => Ok(ToolFormat::Native),
            ToolFormat::Auto | ToolFormat::Text => Ok(ToolFormat::Text),
            ToolFormat::Native if native_supported => Ok(ToolFormat::Native),
            ToolFormat::Native => Err(format!(
                "the model {model_name} has no native tool calling (its chat template declares no tools); \
                 use --tool-format text or auto"
            )),
        }
    }

    /// The name as flags and config files write it.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolFormat::Auto => "auto",
            ToolFormat::Native => "native",
            ToolFormat::Text => "text",
        }
    }
}

impl fmt::Display for ToolFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ToolFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(ToolFormat::Auto),
            "native" => Ok(ToolFormat::Native),
            "text" => Ok(ToolFormat::Text),
            other => Err(format!("unknown tool format `{other}` (known: auto, native, text)")),
        }
    }
}

impl ToolSpecs {
    /// Every tool as a native tool definition (name, description, JSON Schema).
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.iter()
            .map(|spec| ToolDefinition {
                name: spec.name.clone(),
                description: spec.description.trim().to_string(),
                parameters: spec.json_schema(),
            })
            .collect()
    }
}

/// Native calls a model wrote without their `<tool_call>` tags: a reply that is one JSON
/// call object (`{"name": TOOL, "arguments": {...}}`, or a list of them), or such an object
/// alone in a fenced code block (```` ```json ````, or no language), or a self-closing tag
/// named after a tool with its arguments as attributes (`<bash cmd="ls" />`). Small models
/// trained on the Hermes format often write these; their shape leaves no doubt about the
/// intent. An object or tag whose name is not a tool is not a call. Without a fence, an
/// object that starts a line after some text is a call too when it has exactly a call's
/// keys (`name`, `arguments`/`parameters` or the tool's own argument names): the 0.5B
/// often writes a sentence, or samples a stray token where `<tool_call>` belongs, first.
pub fn untagged_json_calls(text: &str, specs: &ToolSpecs) -> Vec<Result<Action, ActionParseError>> {
    let mut bodies: Vec<&str> = Vec::new();
    let trimmed = text.trim();
    let mut strict = false;
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        bodies.push(trimmed);
    } else if !text.contains("```") {
        bodies = line_start_objects(text);
        strict = true;
    } else {
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let Some(info) = line.trim_start().strip_prefix("```") else { continue };
            let info = info.trim();
            let start = line.as_ptr() as usize - text.as_ptr() as usize + line.len();
            let mut end = text.len();
            for inner in lines.by_ref() {
                if inner.trim() == "```" {
                    end = inner.as_ptr() as usize - text.as_ptr() as usize;
                    break;
                }
            }
            if info.is_empty() || info.eq_ignore_ascii_case("json") {
                bodies.push(text.get(start..end).unwrap_or(""));
            }
        }
    }
    let mut out = attribute_tag_calls(text, specs);
    // A body that is not one JSON value may be several, one per line (the 0.5B writes a
    // call and then `finish`, or its arguments, as JSON Lines in one block).
    // Each piece is parsed once, here.
    let pieces = bodies.into_iter().flat_map(|body| {
        let body = body.trim();
        match super::parser::lenient_json(body) {
            Ok(value) => vec![(body, Ok(value))],
            Err(json_error) => match line_start_objects(body) {
                several if several.len() > 1 => {
                    several.into_iter().map(|piece| (piece.trim(), super::parser::lenient_json(piece.trim()))).collect()
                }
                _ => vec![(body, Err(json_error))],
            },
        }
    });
    for (body, parsed) in pieces {
        let value = match parsed {
            Ok(value) => value,
            Err(json_error) => {
                // A broken call is answered with its error, not skipped: skipping it would
                // run the calls after it as if it had worked.
                if let Some(error) = broken_call_error(body, &json_error, specs) {
                    if out.len() < super::MAX_ITEMS {
                        out.push(Err(error));
                    }
                }
                continue;
            }
        };
        let calls = match value {
            serde_json::Value::Array(items) => items,
            other => vec![other],
        };
        for call in calls {
            let serde_json::Value::Object(mut call) = call else { continue };
            if strict && !has_call_keys(&call, specs) {
                continue;
            }
            let Some(serde_json::Value::String(name)) = call.remove("name") else { continue };
            if specs.get(&name).is_none() || out.len() >= super::MAX_ITEMS {
                continue;
            }
            out.push(super::parse_native_call(&name, &super::parser::call_arguments(call), specs));
        }
    }
    out
}

/// JSON objects that start a line (after spaces only), each up to the brace that closes
/// it (or the end of the text). At most `MAX_ITEMS` are taken, so a reply of many
/// unclosed `{` lines stays linear.
fn line_start_objects(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < text.len() && out.len() < super::MAX_ITEMS {
        let line_end = text[pos..].find('\n').map_or(text.len(), |n| pos + n + 1);
        let line = &text[pos..line_end];
        let start = pos + (line.len() - line.trim_start().len());
        if !text[start..].starts_with('{') {
            pos = line_end;
            continue;
        }
        let end = object_end(text, start).unwrap_or(text.len());
        out.push(&text[start..end]);
        pos = end.max(start + 1);
    }
    out
}

/// The index just after the `}` that closes the object opening at `start`, skipping
/// braces inside JSON strings; `None` when it never closes.
fn object_end(text: &str, start: usize) -> Option<usize> {
    ObjectScan::default().feed(&text[start..]).map(|n| start + n)
}

/// A JSON call object read as it streams: how deep in braces, and whether inside a string
/// (where braces do not count). The loop and the UI end a bare call object at the same
/// brace through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObjectScan {
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl ObjectScan {
    /// Reads `s`: the length read through the brace that closes the object, when it
    /// closes in `s`.
    pub fn feed(&mut self, s: &str) -> Option<usize> {
        for (i, b) in s.bytes().enumerate() {
            if self.in_string {
                match b {
                    _ if self.escaped => self.escaped = false,
                    b'\\' => self.escaped = true,
                    b'"' => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' => self.depth += 1,
                b'}' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
        }
        None
    }
}

/// Whether a call object names a tool and holds only a call's keys: `name`,
/// `arguments`/`parameters`, or that tool's argument names (as small models write them).
fn has_call_keys(call: &serde_json::Map<String, serde_json::Value>, specs: &ToolSpecs) -> bool {
    let Some(spec) = call.get("name").and_then(|n| n.as_str()).and_then(|n| specs.get(n)) else { return false };
    call.keys().all(|k| {
        matches!(k.as_str(), "name" | "arguments" | "parameters") || spec.arguments.iter().any(|a| a.name == *k)
    })
}

/// The error for a block that was meant as a call (it names a tool under `"name"`) but
/// is not valid JSON; `None` for a block that is not a call at all.
fn broken_call_error(body: &str, json_error: &str, specs: &ToolSpecs) -> Option<ActionParseError> {
    if !body.contains("\"name\"") {
        return None;
    }
    let spec = specs.iter().find(|spec| body.contains(&format!("\"{}\"", spec.name)))?;
    let hint = if body.contains("\"\"\"") {
        " JSON strings take one pair of double quotes, with line breaks written as \\n (there are no \"\"\" strings)."
    } else {
        ""
    };
    Some(ActionParseError {
        tool: Some(spec.name.clone()),
        message: format!("this call is not valid JSON ({json_error}); it did not run.{hint}"),
        snippet: body.chars().take(300).collect(),
        example: write_call(&spec.name, &example_arguments(spec), ToolFormat::Native),
        kind: crate::tools::ParseErrorKind::Malformed,
    })
}

/// A tool's first example as its arguments object (empty when it has none).
fn example_arguments(spec: &super::ToolSpec) -> serde_json::Value {
    spec.examples
        .first()
        .and_then(|e| serde_yaml::from_str::<serde_json::Value>(&e.body).ok())
        .unwrap_or_else(|| serde_json::json!({}))
}

/// Calls written as a self-closing tag named after a tool whose attributes are its
/// arguments (`<bash cmd="ls -la" timeout_secs=60 />`), the other shape small Qwen models
/// fall back to, copying the `<tools>` block of their system prompt.
fn attribute_tag_calls(text: &str, specs: &ToolSpecs) -> Vec<Result<Action, ActionParseError>> {
    let mut out = Vec::new();
    let mut rest = text;
    // Each candidate may scan to the end of the reply: bounding the candidates keeps a
    // hostile reply linear.
    let mut candidates = 0;
    while let Some(open) = rest.find('<') {
        rest = &rest[open + 1..];
        let name_len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        let name = &rest[..name_len];
        if specs.get(name).is_none() || !rest[name_len..].starts_with(char::is_whitespace) {
            continue;
        }
        candidates += 1;
        if candidates > super::MAX_ITEMS || out.len() >= super::MAX_ITEMS {
            break;
        }
        let Some(args) = attributes(&rest[name_len..]) else { continue };
        out.push(super::parse_native_call(name, &serde_json::Value::Object(args.0), specs));
        rest = &rest[name_len + args.1..];
    }
    out
}

/// Reads `key="value" key2=bare … />` and returns the arguments and the length read, or
/// `None` when the text is not exactly that (a tag that is not self-closing, a stray `<`).
fn attributes(text: &str) -> Option<(serde_json::Map<String, serde_json::Value>, usize)> {
    let mut map = serde_json::Map::new();
    let mut i = 0;
    let bytes = text.as_bytes();
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if text[i..].starts_with("/>") {
            return (!map.is_empty()).then_some((map, i + 2));
        }
        let key_len = text[i..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
        if key_len == 0 || !text[i + key_len..].starts_with('=') {
            return None;
        }
        let key = text[i..i + key_len].to_string();
        i += key_len + 1;
        let (value, len) = match bytes.get(i) {
            Some(&q @ (b'"' | b'\'')) => {
                let end = text[i + 1..].find(char::from(q))?;
                (serde_json::Value::String(unescape(&text[i + 1..i + 1 + end])), end + 2)
            }
            Some(_) => {
                let end = text[i..].find(|c: char| c.is_whitespace() || c == '/' || c == '>').unwrap_or(text.len() - i);
                let raw = &text[i..i + end];
                let value = serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_string()));
                (value, end)
            }
            None => return None,
        };
        map.insert(key, value);
        i += len;
    }
}

/// The five XML entities.
fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"").replace("&apos;", "'").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

/// The error for a native-format reply that called no tool.
pub fn no_native_call_error(specs: &ToolSpecs) -> ActionParseError {
    let names = specs.names().join(", ");
    ActionParseError {
        tool: None,
        message: format!(
            "your reply called no tool. Act by calling one of the tools you were given ({names}); \
             call `finish` when the task is done and verified."
        ),
        snippet: String::new(),
        example: super::parser::default_native_example(specs),
        kind: super::ParseErrorKind::NoAction,
    }
}

/// A call of `tool` with `arguments`, written as the model should send it in `format`: a
/// `<tool_call>` in the native format, the XML/YAML action otherwise.
pub fn write_call(tool: &str, arguments: &serde_json::Value, format: ToolFormat) -> String {
    match format {
        ToolFormat::Native => {
            // Name first, as the Hermes templates show it (a JSON map would sort the keys).
            let name = serde_json::Value::from(tool);
            format!("<tool_call>\n{{\"name\": {name}, \"arguments\": {arguments}}}\n</tool_call>")
        }
        ToolFormat::Auto | ToolFormat::Text => {
            let body = serde_yaml::to_string(arguments).unwrap_or_default();
            format!("<{tool}>\n{}\n</{tool}>", body.trim_end())
        }
    }
}

/// The observation text of a tool result without its `<TOOL_output>` wrapper: in the
/// native format the chat template or the API marks a tool result itself.
pub fn unwrap_observation<'a>(tool: &str, observation: &'a str) -> &'a str {
    let open = format!("<{tool}_output>\n");
    let close = format!("\n</{tool}_output>");
    observation.strip_prefix(open.as_str()).and_then(|rest| rest.strip_suffix(close.as_str())).unwrap_or(observation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_json_call_is_an_error_in_its_place_and_the_next_still_runs() {
        let specs = ToolSpecs::builtin().unwrap();
        let reply = "```json\n{\"name\": \"file\", \"arguments\": {\"action\": \"write\", \"path\": \"/app/a\", \"content\": \"\"\"hi}}\n```\n\
                     then\n```json\n{\"name\": \"file\", \"arguments\": {\"action\": \"read\", \"path\": \"/app/a\"}}\n```\n\
                     and prose\n```json\n{\"not\": [\"a call\"\n```\n";
        let calls = untagged_json_calls(reply, &specs);
        assert_eq!(calls.len(), 2, "{calls:?}");
        let error = calls[0].as_ref().unwrap_err();
        assert_eq!(error.tool.as_deref(), Some("file"));
        assert!(
            error.message.contains("not valid JSON") && error.message.contains("no \"\"\" strings"),
            "{}",
            error.message
        );
        assert!(error.example.starts_with("<tool_call>\n{\"name\": \"file\""), "{}", error.example);
        assert_eq!(calls[1].as_ref().unwrap().args["action"], "read");
        // A closed `"""` string has one meaning and is read as the string it is.
        let reply = "```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"\"\"\n  ls\n  pwd\n\"\"\"}}\n```";
        let calls = untagged_json_calls(reply, &specs);
        assert_eq!(calls[0].as_ref().unwrap().args["cmd"], "ls\npwd");
    }

    #[test]
    fn a_written_call_parses_back_in_its_format() {
        let specs = ToolSpecs::builtin().unwrap();
        let args = serde_json::json!({"message": "done: it works"});
        let text = write_call("finish", &args, ToolFormat::Text);
        let parsed = crate::tools::parse_actions(&text, &specs);
        assert_eq!(parsed.actions.len(), 1, "{text}");
        assert_eq!(parsed.actions[0].args["message"], "done: it works");
        let native = write_call("finish", &args, ToolFormat::Native);
        assert!(native.starts_with("<tool_call>\n{") && native.ends_with("}\n</tool_call>"), "{native}");
        let parsed = crate::tools::parse_actions(&native, &specs);
        assert_eq!(parsed.actions.len(), 1, "{native}");
        assert_eq!(parsed.actions[0].args["message"], "done: it works");
    }

    #[test]
    fn auto_picks_native_only_where_supported() {
        assert_eq!(ToolFormat::Auto.resolve("m", true), Ok(ToolFormat::Native));
        assert_eq!(ToolFormat::Auto.resolve("m", false), Ok(ToolFormat::Text));
        assert_eq!(ToolFormat::Text.resolve("m", true), Ok(ToolFormat::Text));
        assert_eq!(ToolFormat::Native.resolve("m", true), Ok(ToolFormat::Native));
        let err = ToolFormat::Native.resolve("smol.gguf", false).unwrap_err();
        assert!(err.contains("smol.gguf") && err.contains("--tool-format text"), "{err}");
    }

    #[test]
    fn parses_and_prints() {
        for f in [ToolFormat::Auto, ToolFormat::Native, ToolFormat::Text] {
            assert_eq!(f.to_string().parse::<ToolFormat>(), Ok(f));
        }
        assert_eq!(" NATIVE ".parse::<ToolFormat>(), Ok(ToolFormat::Native));
        assert!("json".parse::<ToolFormat>().unwrap_err().contains("auto, native, text"));
    }

    #[test]
    fn definitions_carry_schemas() {
        let specs = ToolSpecs::builtin().unwrap();
        let defs = specs.definitions();
        assert_eq!(defs.len(), specs.names().len());
        let bash = defs.iter().find(|d| d.name == "bash").unwrap();
        assert_eq!(bash.parameters["required"], serde_json::json!(["cmd"]));
        assert!(bash.description.starts_with("Run shell commands"));
    }

    #[test]
    fn untagged_json_calls_are_read_only_in_their_exact_shape() {
        let specs = ToolSpecs::builtin().unwrap();
        let fenced = "I will write it.\n```json\n{\n  \"name\": \"file\",\n  \"arguments\": {\"action\": \"write\", \"path\": \"a.txt\", \"content\": \"hi\"}\n}\n```\nDone.";
        let calls = untagged_json_calls(fenced, &specs);
        assert_eq!(calls.len(), 1);
        let action = calls[0].as_ref().unwrap();
        assert_eq!((action.tool.as_str(), action.args["path"].as_str()), ("file", Some("a.txt")));
        let bare = r#"{"name": "bash", "arguments": {"cmd": "ls"}}"#;
        assert_eq!(untagged_json_calls(bare, &specs)[0].as_ref().unwrap().args["cmd"], "ls");
        let list =
            r#"[{"name": "bash", "arguments": {"cmd": "ls"}}, {"name": "finish", "arguments": {"message": "ok"}}]"#;
        assert_eq!(untagged_json_calls(list, &specs).len(), 2);
        // Invalid arguments of a real tool are that tool's error.
        let bad = r#"{"name": "bash", "arguments": {"timeout_secs": 3}}"#;
        assert_eq!(untagged_json_calls(bad, &specs)[0].as_ref().unwrap_err().tool.as_deref(), Some("bash"));
        // Broken JSON that names a tool is that tool's error (it does not run).
        let broken = untagged_json_calls("```json\n{\"name\": \"bash\", \"arguments\": \n```", &specs);
        assert_eq!(broken[0].as_ref().unwrap_err().tool.as_deref(), Some("bash"));
        // Not calls: other languages, other shapes, unknown names, prose, broken JSON that
        // names no tool, an unclosed fence.
        for text in [
            "```python\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n```",
            r#"{"tool": "bash", "cmd": "ls"}"#,
            r#"{"name": "python", "arguments": {"code": "1"}}"#,
            "Use the bash tool with {\"cmd\": \"ls\"}.",
            "```json\n{\"name\": \"python\", \"arguments\": \n```",
            "```\n",
            "",
        ] {
            assert!(untagged_json_calls(text, &specs).is_empty(), "{text}");
        }
    }

    /// The 0.5B's usual reply: a block of JSON Lines, a call and then `finish` (or only
    /// finish's arguments, which name no tool and are left out); a broken line that names
    /// a tool is that tool's error in its place.
    #[test]
    fn a_block_of_json_lines_is_one_call_per_line() {
        let specs = ToolSpecs::builtin().unwrap();
        let tools = |text: &str| -> Vec<String> {
            untagged_json_calls(text, &specs)
                .into_iter()
                .map(|c| match c {
                    Ok(a) => a.tool,
                    Err(e) => format!("error: {}", e.tool.unwrap_or_default()),
                })
                .collect()
        };
        let reply = "```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"awk -F, 'NR>1{s+=$2} END{print s}' /app/b.csv > /app/answer.txt\"}}\n{\"message\": \"The sum is saved.\"}\n```";
        assert_eq!(tools(reply), ["bash"]);
        let calls = untagged_json_calls(reply, &specs);
        assert_eq!(
            calls[0].as_ref().unwrap().args["cmd"],
            "awk -F, 'NR>1{s+=$2} END{print s}' /app/b.csv > /app/answer.txt"
        );
        let both = "```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n{\"name\": \"finish\", \"arguments\": {\"message\": \"ok\"}}\n```";
        assert_eq!(tools(both), ["bash", "finish"]);
        let bare = "{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n{\"name\": \"finish\", \"arguments\": {\"message\": \"ok\"}}";
        assert_eq!(tools(bare), ["bash", "finish"]);
        let broken = "```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": [\"grep -c \"harp\" f\"]}}\n{\"name\": \"finish\", \"arguments\": {\"message\": \"3\"}}\n```";
        assert_eq!(tools(broken), ["error: bash", "finish"]);
    }

    /// What the 0.5B writes: a sentence (or a stray token where `<tool_call>` belongs),
    /// then the call's object on its own line, perhaps a dangling `</tool_call>`.
    #[test]
    fn a_call_object_after_some_text_is_a_call_when_it_has_only_a_calls_keys() {
        let specs = ToolSpecs::builtin().unwrap();
        let cmd = |text: &str| -> Vec<String> {
            untagged_json_calls(text, &specs)
                .into_iter()
                .map(|c| c.unwrap().args["cmd"].as_str().unwrap_or("").to_string())
                .collect()
        };
        let call = r#"{"name": "bash", "arguments": {"cmd": "wc -l < /app/a.txt > /app/count.txt"}}"#;
        assert_eq!(cmd(&format!("I will count the lines.\n{call}")), ["wc -l < /app/a.txt > /app/count.txt"]);
        assert_eq!(cmd(&format!("ython\n  {call}\n</tool_call>")), ["wc -l < /app/a.txt > /app/count.txt"]);
        let multi = "Sure:\n{\n  \"name\": \"bash\",\n  \"arguments\": {\"cmd\": \"awk '{print $1}' f\"}\n}\nand then";
        assert_eq!(cmd(multi), ["awk '{print $1}' f"]);
        let two = format!("First:\n{call}\nThen:\n{}", r#"{"name": "finish", "message": "done"}"#);
        let calls = untagged_json_calls(&two, &specs);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].as_ref().unwrap().args["message"], "done");
        // Not calls after text: other keys beside a call's, an unknown tool, mid-line.
        for text in [
            "Here:\n{\"name\": \"bash\", \"version\": 2, \"arguments\": {\"cmd\": \"ls\"}}",
            "Here:\n{\"name\": \"python\", \"arguments\": {\"code\": \"1\"}}",
            "The file now holds {\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}.",
            "Config:\n{\"name\": \"app\", \"port\": 8080}",
        ] {
            assert!(untagged_json_calls(text, &specs).is_empty(), "{text}");
        }
        // An unclosed call that names a tool is that tool's error: it does not run.
        let broken = untagged_json_calls("Run:\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}\n", &specs);
        assert_eq!(broken[0].as_ref().unwrap_err().tool.as_deref(), Some("bash"));
        // Many unclosed objects: answered, each bounded.
        let many = "x\n".to_string() + &"{\"name\": \"bash\", \"arguments\": {\n".repeat(5_000);
        assert!(untagged_json_calls(&many, &specs).len() <= super::super::MAX_ITEMS);
    }

    #[test]
    fn self_closing_tool_tags_with_attributes_are_calls() {
        let specs = ToolSpecs::builtin().unwrap();
        let text = "<tools>\n    <bash cmd=\"echo 'Hi, &quot;you&quot;' > a.txt\" timeout_secs=60 background=false />\n</tools>";
        let calls = untagged_json_calls(text, &specs);
        assert_eq!(calls.len(), 1);
        let a = calls[0].as_ref().unwrap();
        assert_eq!(a.args["cmd"], "echo 'Hi, \"you\"' > a.txt");
        assert_eq!(a.args["timeout_secs"], 60);
        assert_eq!(a.args["background"], false);
        let two = "<bash cmd='ls'/><finish message=\"done\"/>";
        assert_eq!(untagged_json_calls(two, &specs).len(), 2);
        for text in [
            "<bash>ls</bash>",
            "<bash cmd=\"ls\">",
            "<python code=\"1\"/>",
            "a < b",
            "<bash cmd=\"unclosed",
            "<",
            "<bash ",
        ] {
            assert!(untagged_json_calls(text, &specs).is_empty(), "{text}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(3000))]
        /// Any text: no panic, and every call found names a real tool.
        #[test]
        fn untagged_calls_never_panic(parts in proptest::collection::vec(proptest::sample::select(vec![
            "<", "/>", ">", "bash", "finish", " ", "cmd", "=", "\"", "'", "{", "}", "[", "]", ":", ",",
            "\"name\"", "\"arguments\"", "```", "```json\n", "\n", "é", "60", "&quot;", "x",
        ]), 0..60)) {
            let text: String = parts.concat();
            let specs = ToolSpecs::builtin().unwrap();
            for call in untagged_json_calls(&text, &specs) {
                let tool = match call { Ok(a) => a.tool, Err(e) => e.tool.unwrap_or_default() };
                proptest::prop_assert!(specs.get(&tool).is_some(), "{}", tool);
            }
        }
    }

    #[test]
    fn observations_lose_their_wrapper_only() {
        assert_eq!(unwrap_observation("bash", "<bash_output>\nhi\nexit code: 0\n</bash_output>"), "hi\nexit code: 0");
        assert_eq!(unwrap_observation("bash", "<file_output>\nx\n</file_output>"), "<file_output>\nx\n</file_output>");
        assert_eq!(unwrap_observation("bash", "plain"), "plain");
    }

    #[test]
    fn the_no_call_error_names_the_tools_and_shows_a_call() {
        let e = no_native_call_error(&ToolSpecs::builtin().unwrap());
        assert!(e.message.contains("bash") && e.message.contains("finish"));
        assert!(e.example.starts_with("<tool_call>\n{") && e.example.contains("\"name\":\"bash\""), "{}", e.example);
    }
}
