//! The spec of one tool: its fields, loading from YAML, and the helpers that render
//! its calls and examples.

use serde::Deserialize;

use super::schema::object_schema;
use super::{ArgSpec, SpecError};

/// One example call of a tool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolExample {
    /// What the example does.
    pub description: String,
    /// The exact YAML body between the tags.
    pub body: String,
}

/// The declarative spec of one tool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// The tool's name, which is also its tag: `<bash>`.
    pub name: String,
    /// Model-facing description.
    pub description: String,
    /// The arguments, in prompt order.
    #[serde(default)]
    pub arguments: Vec<ArgSpec>,
    /// The argument that selects a sub-command (e.g. `action`), if any.
    #[serde(default)]
    pub discriminator: Option<String>,
    /// The argument that takes the whole body when the body is not a YAML mapping.
    #[serde(default)]
    pub raw_body_arg: Option<String>,
    /// One to three examples; the first is used in error messages.
    pub examples: Vec<ToolExample>,
}

impl ToolSpec {
    /// Parses and checks one spec file. `file` (e.g. `bash.yaml`) is used in errors;
    /// when it ends in `.yaml`/`.yml`, its stem must equal the tool's name.
    pub fn from_yaml(file: &str, yaml: &str) -> Result<ToolSpec, SpecError> {
        let spec: ToolSpec =
            serde_yaml::from_str(yaml).map_err(|source| SpecError::Yaml { file: file.to_string(), source })?;
        let invalid = |field: &str, message: String| SpecError::Invalid {
            file: file.to_string(),
            field: field.to_string(),
            message,
        };
        let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
        let stem = base.strip_suffix(".yaml").or_else(|| base.strip_suffix(".yml"));
        if let Some(stem) = stem {
            if stem != spec.name {
                return Err(invalid("name", format!("the tool is named `{}` but the file is `{base}`", spec.name)));
            }
        }
        spec.check().map_err(|(field, message)| invalid(&field, message))?;
        Ok(spec)
    }

    /// The argument with this name.
    pub fn arg(&self, name: &str) -> Option<&ArgSpec> {
        self.arguments.iter().find(|a| a.name == name)
    }

    /// The discriminator's argument spec, if the tool has one.
    pub fn discriminator_arg(&self) -> Option<&ArgSpec> {
        self.discriminator.as_deref().and_then(|d| self.arg(d))
    }

    /// Wraps a YAML body in this tool's tags: `<name>\nBODY\n</name>`.
    pub fn render_call(&self, body: &str) -> String {
        format!("<{name}>\n{body}\n</{name}>", name = self.name, body = body.trim_end_matches(['\n', '\r', ' ']))
    }

    /// The first example as a complete action, used in parse errors.
    pub fn example_action(&self) -> String {
        match self.examples.first() {
            Some(example) => self.render_call(&example.body),
            None => self.render_call(""),
        }
    }

    /// A JSON Schema (`{"type": "object", "properties": …, "required": […]}`) of the
    /// arguments, for backends with native tool calling (OpenAI `tools`).
    pub fn json_schema(&self) -> serde_json::Value {
        object_schema(&self.arguments)
    }

    /// The arguments' schema as the call grammar holds them: for a tool with a
    /// discriminator, one variant per value, with the arguments that apply to it and
    /// those it requires (what the loop's validation asks, which one JSON Schema object
    /// cannot say); for any other tool, [`Self::json_schema`].
    pub fn grammar_schema(&self) -> serde_json::Value {
        super::schema::discriminated_schema(self).unwrap_or_else(|| self.json_schema())
    }
}
