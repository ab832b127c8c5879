//! Argument specs: the type of an argument value and the spec of one argument.
//!
//! An argument *applies* to the discriminator values in `applies_to`, or when that is
//! empty to those in `required_for`, or when both are empty to all of them.

use std::fmt;

use serde::Deserialize;

/// The type of an argument value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgType {
    /// Text. Numbers and booleans are accepted and turned into text.
    String,
    /// A whole number (`"60"` and `60.0` are accepted).
    Integer,
    /// Any number.
    Number,
    /// `true`/`false` (`"yes"`/`"no"`, `"on"`/`"off"`, `1`/`0` are accepted).
    Boolean,
    /// A YAML sequence.
    List,
    /// A YAML mapping.
    Object,
}

impl ArgType {
    /// The name used in specs and in the prompt.
    pub fn as_str(self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::Integer => "integer",
            ArgType::Number => "number",
            ArgType::Boolean => "boolean",
            ArgType::List => "list",
            ArgType::Object => "object",
        }
    }

    /// Whether a JSON value has exactly this type (no coercion).
    pub fn matches(self, value: &serde_json::Value) -> bool {
        use serde_json::Value as J;
        match (self, value) {
            (ArgType::String, J::String(_)) => true,
            (ArgType::Integer, J::Number(n)) => n.is_i64() || n.is_u64(),
            (ArgType::Number, J::Number(_)) => true,
            (ArgType::Boolean, J::Bool(_)) => true,
            (ArgType::List, J::Array(_)) => true,
            (ArgType::Object, J::Object(_)) => true,
            _ => false,
        }
    }
}

impl fmt::Display for ArgType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One argument of a tool (or one field of an object argument).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgSpec {
    /// The argument's name (a YAML key in the body).
    pub name: String,
    /// The value's type.
    #[serde(rename = "type")]
    pub ty: ArgType,
    /// Required whatever the discriminator says.
    #[serde(default)]
    pub required: bool,
    /// Model-facing description.
    pub description: String,
    /// Value filled in when the argument is absent (and applies).
    #[serde(default)]
    pub default: Option<serde_json::Value>,
    /// Allowed values (string arguments only); empty means any.
    #[serde(default, rename = "enum")]
    pub enum_values: Vec<String>,
    /// Discriminator values for which the argument is required.
    #[serde(default)]
    pub required_for: Vec<String>,
    /// Discriminator values the argument belongs to (see the module docs).
    #[serde(default)]
    pub applies_to: Vec<String>,
    /// Element type of a list argument.
    #[serde(default)]
    pub items: Option<ArgType>,
    /// Fields of an object argument, or of each object in a list argument.
    #[serde(default)]
    pub fields: Vec<ArgSpec>,
    /// A shell command (string arguments): a list of strings is read as an argv when its
    /// first element is one word (`["python3", "-c", "print(1)"]`, quoted and joined),
    /// else as lines of a script (`["cd /app", "make"]`, joined with line breaks).
    #[serde(default)]
    pub shell_command: bool,
}

impl ArgSpec {
    /// Whether the argument belongs to the given discriminator value (see the module
    /// docs). Without a discriminator value, only arguments that apply to all do.
    pub fn applies(&self, discriminator_value: Option<&str>) -> bool {
        let list = if !self.applies_to.is_empty() { &self.applies_to } else { &self.required_for };
        list.is_empty() || discriminator_value.is_some_and(|d| list.iter().any(|v| v == d))
    }

    /// Whether the argument is required given the discriminator value.
    pub fn is_required(&self, discriminator_value: Option<&str>) -> bool {
        self.required || discriminator_value.is_some_and(|d| self.required_for.iter().any(|v| v == d))
    }

    /// The type as shown to the model, e.g. `list of object`.
    pub fn type_label(&self) -> String {
        match (self.ty, self.items) {
            (ArgType::List, Some(item)) => format!("list of {item}"),
            (ty, _) => ty.to_string(),
        }
    }
}
