//! Native tool calls: OpenAI `tool_calls` and Qwen3-style `<tool_call>` JSON bodies,
//! mapped to the same actions as the tag format.

use serde_json::{Map, Value as Json};
use serde_yaml::Value as Yaml;

use super::body::{clean_body, parse_raw_body};
use super::scanner::Scanner;
use super::{truncate, truncate_to, MAX_ITEMS};
use crate::tools::{validate_args, Action, ActionParseError, ToolSpec, ToolSpecs};

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
            example: default_native_example(specs),
            kind: crate::tools::ParseErrorKind::Malformed,
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
        kind: crate::tools::ParseErrorKind::Malformed,
    })
}

impl Scanner<'_> {
    /// Reads the JSON body of a `<tool_call>` (one call or a list of calls).
    pub(super) fn tool_call(&mut self, body: &str, element: &str) {
        let body = clean_body(body);
        let value = match super::lenient_json(&body) {
            Ok(value) => value,
            Err(json_error) => {
                self.errors.push(ActionParseError {
                    tool: None,
                    message: format!(
                        "the body of <tool_call> is not valid JSON ({json_error}); \
                         expected {{\"name\": TOOL, \"arguments\": {{...}}}}"
                    ),
                    snippet: truncate(element),
                    example: self.default_native_example(),
                    kind: crate::tools::ParseErrorKind::Malformed,
                });
                return;
            }
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
            kind: crate::tools::ParseErrorKind::Malformed,
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
        parse_native_call(&name, &call_arguments(call), self.specs)
    }

    fn default_native_example(&self) -> String {
        default_native_example(self.specs)
    }
}

/// The calls in the body of a `<tool_call>` as written (one object or a list), each as
/// its tool's name and arguments, read as the loop reads them (lenient JSON, a `function`
/// wrapper, arguments beside the name) but checked against no tool set: for a server
/// answering with the client's own tools.
pub fn written_calls(body: &str) -> Result<Vec<(String, Json)>, String> {
    let value = super::lenient_json(&clean_body(body))?;
    let calls = match value {
        Json::Array(calls) => calls,
        other => vec![other],
    };
    calls
        .into_iter()
        .map(|call| {
            let Json::Object(mut call) = call else {
                return Err("a tool call must be a JSON object with `name` and `arguments`".to_string());
            };
            if !call.contains_key("name") {
                if let Some(Json::Object(function)) = call.remove("function") {
                    call = function;
                }
            }
            match call.remove("name") {
                Some(Json::String(name)) => Ok((name, call_arguments(call))),
                _ => Err("the tool call has no `name`".to_string()),
            }
        })
        .collect()
}

/// The arguments of a call object whose `name` was taken out: under `arguments` (or
/// `parameters`), else the keys written beside the name (`{"name": "finish", "message":
/// "..."}`, as small models write it).
pub fn call_arguments(mut call: Map<String, Json>) -> Json {
    match ["arguments", "parameters"].iter().find_map(|key| call.remove(*key)) {
        Some(arguments) => arguments,
        None if call.is_empty() => Json::Null,
        None => Json::Object(call),
    }
}

/// The bash example (or the first tool's) as a Qwen3-style `<tool_call>`, for errors.
pub fn default_native_example(specs: &ToolSpecs) -> String {
    specs.get("bash").or_else(|| specs.iter().next()).map(native_example).unwrap_or_default()
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
