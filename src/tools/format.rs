//! The two action formats: native tool calls (tools sent as JSON schemas, calls in the
//! model's own format) and the text format (XML tags with YAML bodies), and how `auto`
//! chooses between them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{Action, ActionParseError, ToolSpecs};
use crate::llm::ToolDefinition;

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
/// alone in a fenced code block (```` ```json ````, or no language). Small models trained
/// on the Hermes format often drop the tags; the object's shape leaves no doubt about the
/// intent. An object whose `name` is not a tool is not a call.
pub fn untagged_json_calls(text: &str, specs: &ToolSpecs) -> Vec<Result<Action, ActionParseError>> {
    let mut bodies: Vec<&str> = Vec::new();
    let trimmed = text.trim();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        bodies.push(trimmed);
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
    let mut out = Vec::new();
    for body in bodies {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(body.trim()) else { continue };
        let calls = match value {
            serde_json::Value::Array(items) => items,
            other => vec![other],
        };
        for call in calls {
            let Some(name) = call.get("name").and_then(|n| n.as_str()) else { continue };
            if specs.get(name).is_none() || out.len() >= super::MAX_ITEMS {
                continue;
            }
            let arguments = call.get("arguments").or_else(|| call.get("parameters")).cloned();
            out.push(super::parse_native_call(name, &arguments.unwrap_or(serde_json::Value::Null), specs));
        }
    }
    out
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
        example: native_example_call(specs),
    }
}

/// A bash call (or the first tool's) in Hermes/Qwen `<tool_call>` form, for errors.
fn native_example_call(specs: &ToolSpecs) -> String {
    let Some(spec) = specs.get("bash").or_else(|| specs.iter().next()) else { return String::new() };
    let arguments = spec
        .examples
        .first()
        .and_then(|e| serde_yaml::from_str::<serde_json::Value>(&e.body).ok())
        .unwrap_or(serde_json::Value::Object(serde_json::Map::new()));
    format!("<tool_call>\n{}\n</tool_call>", serde_json::json!({"name": spec.name, "arguments": arguments}))
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
        // Not calls: other languages, other shapes, unknown names, prose, broken JSON, an
        // unclosed fence.
        for text in [
            "```python\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n```",
            r#"{"tool": "bash", "cmd": "ls"}"#,
            r#"{"name": "python", "arguments": {"code": "1"}}"#,
            "Use the bash tool with {\"cmd\": \"ls\"}.",
            "```json\n{\"name\": \"bash\", \"arguments\": \n```",
            "```\n",
            "",
        ] {
            assert!(untagged_json_calls(text, &specs).is_empty(), "{text}");
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
