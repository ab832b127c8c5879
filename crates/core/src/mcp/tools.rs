//! An MCP server's tools as the model sees them (`server__tool`, their JSON schema's
//! arguments) and a tool result as an observation.

use serde_json::{Map, Value};

use crate::tools::{ArgSpec, ArgType, ToolExample, ToolSpec};

/// A name the action format accepts: lowercase letters, digits and `_`.
pub fn identifier(name: &str) -> String {
    let mut out: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
    if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.insert(0, 't');
    }
    out
}

/// The spec of `tool` (an entry of `tools/list`) of server `server`, named
/// `server__tool`. Arguments keep the server's names; nested schemas are passed through
/// as objects and lists.
pub fn tool_spec(server: &str, tool: &Value) -> Option<ToolSpec> {
    let name = tool.get("name")?.as_str()?;
    let description = tool.get("description").and_then(Value::as_str).unwrap_or("").trim();
    let schema = tool.get("inputSchema").cloned().unwrap_or(Value::Null);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let empty = Map::new();
    let props = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let arguments: Vec<ArgSpec> = props.iter().map(|(k, v)| arg_spec(k, v, required.contains(&k.as_str()))).collect();
    let example_body = example_yaml(&arguments);
    let title = if description.is_empty() { format!("The `{name}` tool") } else { description.to_string() };
    Some(ToolSpec {
        name: format!("{}__{}", identifier(server), identifier(name)),
        description: format!("{title} (MCP server `{server}`)"),
        arguments,
        discriminator: None,
        raw_body_arg: None,
        examples: vec![ToolExample { description: format!("Call {name}."), body: example_body }],
    })
}

fn arg_spec(name: &str, schema: &Value, required: bool) -> ArgSpec {
    let ty = match schema.get("type").and_then(Value::as_str) {
        Some("integer") => ArgType::Integer,
        Some("number") => ArgType::Number,
        Some("boolean") => ArgType::Boolean,
        Some("array") => ArgType::List,
        Some("object") => ArgType::Object,
        _ => ArgType::String,
    };
    let enum_values = schema
        .get("enum")
        .and_then(Value::as_array)
        .map(|e| e.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let mut description = schema.get("description").and_then(Value::as_str).unwrap_or("").trim().to_string();
    if description.is_empty() {
        description = schema.get("title").and_then(Value::as_str).unwrap_or(name).to_string();
    }
    ArgSpec {
        name: name.to_string(),
        ty,
        required,
        description,
        default: schema.get("default").cloned(),
        enum_values,
        required_for: Vec::new(),
        applies_to: Vec::new(),
        items: None,
        fields: Vec::new(),
        shell_command: false,
    }
}

/// A YAML body with a placeholder for each required argument.
fn example_yaml(args: &[ArgSpec]) -> String {
    let lines: Vec<String> = args
        .iter()
        .filter(|a| a.required)
        .map(|a| {
            let value = match (a.ty, a.enum_values.first()) {
                (_, Some(first)) => first.clone(),
                (ArgType::Integer | ArgType::Number, _) => "1".into(),
                (ArgType::Boolean, _) => "true".into(),
                (ArgType::List, _) => "[]".into(),
                (ArgType::Object, _) => "{}".into(),
                (ArgType::String, _) => format!("<{}>", a.name),
            };
            format!("{}: {value}", a.name)
        })
        .collect();
    if lines.is_empty() {
        "{}".into()
    } else {
        lines.join("\n")
    }
}

/// A `tools/call` result as text for the model, and whether the tool reported an error.
pub fn result_text(result: &Value) -> (String, bool) {
    let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
    let mut parts = Vec::new();
    for item in result.get("content").and_then(Value::as_array).into_iter().flatten() {
        let field = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default();
        let data_len = |v: &Value| v.get("data").and_then(Value::as_str).map_or(0, |d| d.len() * 3 / 4);
        match field("type") {
            "text" => parts.push(field("text").to_string()),
            "image" | "audio" => parts.push(format!(
                "[{} content: {}, {} bytes, not shown to the model]",
                field("type"),
                field("mimeType"),
                data_len(item)
            )),
            "resource" => {
                let r = item.get("resource").cloned().unwrap_or(Value::Null);
                match r.get("text").and_then(Value::as_str) {
                    Some(text) => parts.push(text.to_string()),
                    None => parts.push(format!(
                        "[resource {}: binary, {} bytes]",
                        r.get("uri").and_then(Value::as_str).unwrap_or_default(),
                        r.get("blob").and_then(Value::as_str).map_or(0, |b| b.len() * 3 / 4)
                    )),
                }
            }
            "resource_link" => parts.push(format!("[resource link: {} {}]", field("uri"), field("name"))),
            other => parts.push(format!("[{other} content]")),
        }
    }
    if parts.is_empty() {
        if let Some(structured) = result.get("structuredContent") {
            parts.push(structured.to_string());
        }
    }
    (parts.join("\n"), is_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_becomes_a_namespaced_spec_with_its_schemas_arguments() {
        let tool = json!({"name": "get-Current_time", "description": "Get the time.",
            "inputSchema": {"type": "object", "required": ["timezone"], "properties": {
                "timezone": {"type": "string", "description": "IANA name"},
                "verbose": {"type": "boolean"}}}});
        let spec = tool_spec("time", &tool).unwrap();
        assert_eq!(spec.name, "time__get_current_time");
        assert!(spec.description.contains("Get the time.") && spec.description.contains("MCP server `time`"));
        assert_eq!(spec.arguments.len(), 2);
        assert!(spec.arguments.iter().any(|a| a.name == "timezone" && a.required && a.ty == ArgType::String));
        assert_eq!(spec.examples[0].body, "timezone: <timezone>");
    }

    #[test]
    fn results_become_text_with_images_as_a_note() {
        let r = json!({"content": [{"type": "text", "text": "12:00"}, {"type": "image", "mimeType": "image/png", "data": "AAAA"}],
            "isError": false});
        assert_eq!(
            result_text(&r),
            ("12:00\n[image content: image/png, 3 bytes, not shown to the model]".into(), false)
        );
        let e = json!({"content": [{"type": "text", "text": "unknown timezone"}], "isError": true});
        assert_eq!(result_text(&e), ("unknown timezone".into(), true));
        let s = json!({"content": [], "structuredContent": {"a": 1}});
        assert_eq!(result_text(&s).0, "{\"a\":1}");
    }
}
