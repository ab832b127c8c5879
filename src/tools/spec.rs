//! Declarative tool specs, loaded from the YAML files in `tools/` at the crate root.
//!
//! A spec names a tool, describes it for the model, lists its arguments (type,
//! required or default, allowed values) and gives examples. The prompt section
//! ([`super::render_tool_section`]) and argument validation ([`super::validate_args`])
//! are generated from these specs, so adding an argument is a YAML change.
//!
//! Schema of one file (unknown fields are rejected):
//!
//! ```yaml
//! name: file                 # tool name = tag name; must equal the file stem
//! description: ...           # model-facing
//! discriminator: action      # optional: the argument that selects a sub-command
//! raw_body_arg: cmd          # optional: a body that is not a YAML mapping is this argument
//! arguments:
//!   - name: action
//!     type: string           # string | integer | number | boolean | list | object
//!     required: true         # optional, default false
//!     enum: [read, write]    # optional, strings only
//!     description: ...
//!   - name: content
//!     type: string
//!     required_for: [write]  # required when the discriminator has one of these values
//!     applies_to: [write]    # optional: the discriminator values it belongs to
//!     default: ...           # optional, filled in when absent (and applicable)
//!     description: ...
//!   - name: edits
//!     type: list
//!     items: object          # optional element type of a list
//!     fields: [...]          # optional argument specs of each object (or of an object)
//!     description: ...
//! examples:                  # 1 to 3
//!   - description: ...
//!     body: |                # the exact YAML body between the tags
//!       action: read
//!       path: /app/x.py
//! ```
//!
//! An argument *applies* to the discriminator values in `applies_to`, or when that is
//! empty to those in `required_for`, or when both are empty to all of them. Defaults
//! are filled in only where the argument applies.

use std::fmt;

use serde::Deserialize;

/// The built-in tool specs, in prompt order: (file name, YAML text).
const BUILTIN: &[(&str, &str)] = &[
    ("bash.yaml", include_str!("../../tools/bash.yaml")),
    ("file.yaml", include_str!("../../tools/file.yaml")),
    ("search.yaml", include_str!("../../tools/search.yaml")),
    ("todo.yaml", include_str!("../../tools/todo.yaml")),
    ("scratchpad.yaml", include_str!("../../tools/scratchpad.yaml")),
    ("finish.yaml", include_str!("../../tools/finish.yaml")),
];

/// Why a tool spec could not be loaded; names the file and the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The file is not valid YAML or does not match the schema (serde names the
    /// field path and the line).
    #[error("tool spec {file}: {source}")]
    Yaml {
        /// The spec file, e.g. `bash.yaml`.
        file: String,
        /// The YAML or schema error.
        #[source]
        source: serde_yaml::Error,
    },
    /// The file parsed but a field has an invalid value.
    #[error("tool spec {file}: field `{field}`: {message}")]
    Invalid {
        /// The spec file, e.g. `bash.yaml`.
        file: String,
        /// The field path, e.g. `arguments[1].default`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

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

    /// Checks the spec's internal consistency; returns (field path, message).
    fn check(&self) -> Result<(), (String, String)> {
        let err = |field: &str, message: &str| Err((field.to_string(), message.to_string()));
        if !is_identifier(&self.name) {
            return err("name", "must be lowercase letters, digits and `_`, starting with a letter");
        }
        if self.name == "think" || self.name == "tool_call" || self.name.ends_with("_output") {
            return err("name", "is reserved by the action format");
        }
        if self.description.trim().is_empty() {
            return err("description", "must not be empty");
        }
        let disc_values: Option<&[String]> = match self.discriminator.as_deref() {
            None => None,
            Some(d) => {
                let Some(arg) = self.arg(d) else {
                    return Err(("discriminator".into(), format!("names `{d}`, which is not an argument")));
                };
                if arg.ty != ArgType::String || arg.enum_values.is_empty() || !arg.required {
                    return err("discriminator", "must name a required string argument with an `enum`");
                }
                Some(&arg.enum_values)
            }
        };
        check_args(&self.arguments, "arguments", disc_values)?;
        if let Some(raw) = self.raw_body_arg.as_deref() {
            match self.arg(raw) {
                Some(arg) if arg.ty == ArgType::String => {}
                _ => return Err(("raw_body_arg".into(), format!("names `{raw}`, which is not a string argument"))),
            }
        }
        if self.examples.is_empty() || self.examples.len() > 3 {
            return err("examples", "must hold 1 to 3 examples");
        }
        for (i, example) in self.examples.iter().enumerate() {
            if example.description.trim().is_empty() {
                return Err((format!("examples[{i}].description"), "must not be empty".into()));
            }
            let field = format!("examples[{i}].body");
            let value: serde_yaml::Value =
                serde_yaml::from_str(&example.body).map_err(|e| (field.clone(), format!("is not valid YAML: {e}")))?;
            super::validate_args(self, value).map_err(|e| (field.clone(), format!("is not a valid call: {e}")))?;
        }
        Ok(())
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn check_args(args: &[ArgSpec], path: &str, disc_values: Option<&[String]>) -> Result<(), (String, String)> {
    for (i, arg) in args.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let fail = |field: &str, message: String| Err((format!("{at}.{field}"), message));
        if !is_identifier(&arg.name) {
            return fail("name", format!("`{}` must be lowercase letters, digits and `_`", arg.name));
        }
        if args[..i].iter().any(|a| a.name == arg.name) {
            return fail("name", format!("`{}` appears twice", arg.name));
        }
        if arg.description.trim().is_empty() {
            return fail("description", "must not be empty".into());
        }
        if !arg.enum_values.is_empty() && arg.ty != ArgType::String {
            return fail("enum", "is allowed only on string arguments".into());
        }
        if arg.required && (arg.default.is_some() || !arg.required_for.is_empty()) {
            return fail("required", "a required argument cannot also have a default or `required_for`".into());
        }
        if let Some(default) = &arg.default {
            if !arg.ty.matches(default) {
                return fail("default", format!("is not a {}", arg.ty));
            }
            if let serde_json::Value::String(s) = default {
                if !arg.enum_values.is_empty() && !arg.enum_values.contains(s) {
                    return fail("default", format!("`{s}` is not one of the `enum` values"));
                }
            }
        }
        for (field, list) in [("required_for", &arg.required_for), ("applies_to", &arg.applies_to)] {
            if list.is_empty() {
                continue;
            }
            let Some(values) = disc_values else {
                return fail(field, "needs a `discriminator` on the tool".into());
            };
            if let Some(bad) = list.iter().find(|v| !values.contains(v)) {
                return fail(field, format!("`{bad}` is not a value of the discriminator's `enum`"));
            }
        }
        if arg.items.is_some() && arg.ty != ArgType::List {
            return fail("items", "is allowed only on list arguments".into());
        }
        if !arg.fields.is_empty() {
            let objecty = arg.ty == ArgType::Object || (arg.ty == ArgType::List && arg.items == Some(ArgType::Object));
            if !objecty {
                return fail("fields", "is allowed only on object arguments and lists of objects".into());
            }
            check_args(&arg.fields, &format!("{at}.fields"), None)?;
        }
    }
    Ok(())
}

fn object_schema(args: &[ArgSpec]) -> serde_json::Value {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for arg in args {
        properties.insert(arg.name.clone(), arg_schema(arg));
        if arg.required {
            required.push(serde_json::Value::String(arg.name.clone()));
        }
    }
    serde_json::json!({"type": "object", "properties": properties, "required": required})
}

fn arg_schema(arg: &ArgSpec) -> serde_json::Value {
    let json_type = |ty: ArgType| match ty {
        ArgType::String => "string",
        ArgType::Integer => "integer",
        ArgType::Number => "number",
        ArgType::Boolean => "boolean",
        ArgType::List => "array",
        ArgType::Object => "object",
    };
    let mut description = arg.description.trim().to_string();
    if !arg.required_for.is_empty() {
        description.push_str(&format!(" Required for: {}.", arg.required_for.join(", ")));
    }
    let mut schema = if arg.fields.is_empty() || arg.ty == ArgType::List {
        serde_json::json!({"type": json_type(arg.ty)})
    } else {
        object_schema(&arg.fields)
    };
    let obj = schema.as_object_mut().expect("schema is an object");
    obj.insert("description".into(), description.into());
    if !arg.enum_values.is_empty() {
        obj.insert("enum".into(), arg.enum_values.clone().into());
    }
    if let Some(default) = &arg.default {
        obj.insert("default".into(), default.clone());
    }
    if let Some(item) = arg.items {
        let items = if arg.fields.is_empty() {
            serde_json::json!({"type": json_type(item)})
        } else {
            object_schema(&arg.fields)
        };
        obj.insert("items".into(), items);
    }
    schema
}

/// An ordered set of tool specs with unique names.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpecs {
    specs: Vec<ToolSpec>,
}

impl ToolSpecs {
    /// The built-in tools (`bash`, `file`, `search`, `todo`, `scratchpad`, `finish`),
    /// embedded from `tools/*.yaml` at compile time.
    pub fn builtin() -> Result<ToolSpecs, SpecError> {
        Self::from_yaml_files(BUILTIN.iter().copied())
    }

    /// Parses specs from (file name, YAML text) pairs, keeping their order.
    pub fn from_yaml_files<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<ToolSpecs, SpecError> {
        let mut specs: Vec<ToolSpec> = Vec::new();
        for (file, yaml) in files {
            let spec = ToolSpec::from_yaml(file, yaml)?;
            if specs.iter().any(|s| s.name == spec.name) {
                return Err(SpecError::Invalid {
                    file: file.to_string(),
                    field: "name".into(),
                    message: format!("a tool named `{}` is already defined", spec.name),
                });
            }
            specs.push(spec);
        }
        Ok(ToolSpecs { specs })
    }

    /// Builds a set from specs that are already checked; `None` when two share a name.
    pub fn from_specs(specs: Vec<ToolSpec>) -> Option<ToolSpecs> {
        let unique = specs.iter().enumerate().all(|(i, s)| specs[..i].iter().all(|t| t.name != s.name));
        unique.then_some(ToolSpecs { specs })
    }

    /// The spec of the tool with this name.
    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.specs.iter().find(|s| s.name == name)
    }

    /// The tool names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.specs.iter().map(|s| s.name.as_str()).collect()
    }

    /// The specs, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, ToolSpec> {
        self.specs.iter()
    }

    /// The number of tools.
    pub fn len(&self) -> usize {
        self.specs.len()
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }
}

impl<'a> IntoIterator for &'a ToolSpecs {
    type Item = &'a ToolSpec;
    type IntoIter = std::slice::Iter<'a, ToolSpec>;

    fn into_iter(self) -> Self::IntoIter {
        self.specs.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "name: demo\ndescription: A demo.\narguments:\n  - name: x\n    type: string\n    required: true\n    description: X.\nexamples:\n  - description: Ex\n    body: |\n      x: hi\n";

    fn invalid_field(result: Result<ToolSpec, SpecError>) -> String {
        match result {
            Err(SpecError::Invalid { field, .. }) => field,
            other => panic!("expected an Invalid error, got {other:?}"),
        }
    }

    #[test]
    fn builtin_loads_in_order() {
        let specs = ToolSpecs::builtin().unwrap();
        assert_eq!(specs.names(), ["bash", "file", "search", "todo", "scratchpad", "finish"]);
        assert_eq!(specs.len(), 6);
        assert!(!specs.is_empty());
        assert_eq!(specs.iter().count(), 6);
        assert_eq!((&specs).into_iter().count(), 6);
        let bash = specs.get("bash").unwrap();
        assert_eq!(bash.raw_body_arg.as_deref(), Some("cmd"));
        assert_eq!(bash.arg("timeout_secs").unwrap().default, Some(serde_json::json!(120)));
        assert_eq!(specs.get("file").unwrap().discriminator.as_deref(), Some("action"));
        assert!(specs.get("python").is_none());
    }

    #[test]
    fn example_action_wraps_first_example() {
        let specs = ToolSpecs::builtin().unwrap();
        assert_eq!(specs.get("bash").unwrap().example_action(), "<bash>\ncmd: ls -la /app\n</bash>");
        assert_eq!(
            specs.get("finish").unwrap().example_action(),
            "<finish>\nmessage: Fixed the off-by-one in parse_range; all 42 tests in tests/ pass.\n</finish>"
        );
    }

    #[test]
    fn every_builtin_has_good_descriptions_and_examples() {
        for spec in &ToolSpecs::builtin().unwrap() {
            assert!(spec.description.len() > 40, "{}", spec.name);
            assert!((1..=3).contains(&spec.examples.len()), "{}", spec.name);
            for arg in &spec.arguments {
                assert!(!arg.description.trim().is_empty());
            }
        }
    }

    #[test]
    fn applies_and_required() {
        let specs = ToolSpecs::builtin().unwrap();
        let file = specs.get("file").unwrap();
        let offset = file.arg("offset").unwrap();
        assert!(offset.applies(Some("read")));
        assert!(!offset.applies(Some("write")));
        assert!(!offset.applies(None));
        let content = file.arg("content").unwrap();
        assert!(content.applies(Some("write")));
        assert!(content.is_required(Some("write")));
        assert!(!content.is_required(Some("read")));
        assert!(file.arg("path").unwrap().applies(None));
        assert_eq!(file.arg("edits").unwrap().type_label(), "list of object");
    }

    #[test]
    fn json_schema_lists_required_and_enums() {
        let specs = ToolSpecs::builtin().unwrap();
        let schema = specs.get("file").unwrap().json_schema();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], serde_json::json!(["action", "path"]));
        assert_eq!(schema["properties"]["action"]["enum"][0], "read");
        assert_eq!(schema["properties"]["edits"]["type"], "array");
        assert_eq!(schema["properties"]["edits"]["items"]["required"], serde_json::json!(["old_string", "new_string"]));
        assert_eq!(schema["properties"]["limit"]["default"], 2000);
    }

    #[test]
    fn minimal_spec_parses() {
        let spec = ToolSpec::from_yaml("demo.yaml", MINIMAL).unwrap();
        assert_eq!(spec.name, "demo");
        assert_eq!(spec.example_action(), "<demo>\nx: hi\n</demo>");
    }

    #[test]
    fn unknown_field_is_rejected_with_file_name() {
        let yaml = MINIMAL.replace("description: A demo.", "description: A demo.\ncolor: red");
        let err = ToolSpec::from_yaml("demo.yaml", &yaml).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("demo.yaml"), "{text}");
        assert!(text.contains("color"), "{text}");
    }

    #[test]
    fn unknown_arg_field_and_type_are_rejected() {
        let yaml = MINIMAL.replace("required: true", "required: true\n    optional: false");
        let text = ToolSpec::from_yaml("demo.yaml", &yaml).unwrap_err().to_string();
        assert!(text.contains("optional"), "{text}");
        let yaml = MINIMAL.replace("type: string", "type: text");
        let text = ToolSpec::from_yaml("demo.yaml", &yaml).unwrap_err().to_string();
        assert!(text.contains("text"), "{text}");
    }

    #[test]
    fn file_name_must_match() {
        let err = ToolSpec::from_yaml("tools/other.yaml", MINIMAL).unwrap_err();
        assert_eq!(invalid_field(Err(err)), "name");
        // Without a .yaml name there is nothing to compare.
        assert!(ToolSpec::from_yaml("<inline>", MINIMAL).is_ok());
    }

    #[test]
    fn inconsistent_specs_are_rejected() {
        let cases = [
            (MINIMAL.replace("x: hi", "y: hi"), "examples[0].body"),
            (MINIMAL.replace("x: hi", "x: [a"), "examples[0].body"),
            (MINIMAL.replace("required: true", "default: 3"), "arguments[0].default"),
            (MINIMAL.replace("required: true", "required_for: [a]"), "arguments[0].required_for"),
            (MINIMAL.replace("required: true", "required: true\n    enum: [a]"), "examples[0].body"),
            (MINIMAL.replace("type: string", "type: integer\n    enum: [a]"), "arguments[0].enum"),
            (MINIMAL.replace("arguments:", "discriminator: x\narguments:"), "discriminator"),
            (MINIMAL.replace("arguments:", "raw_body_arg: y\narguments:"), "raw_body_arg"),
            (MINIMAL.replace("name: x", "name: X"), "arguments[0].name"),
            (MINIMAL.replace("description: Ex", "description: ''"), "examples[0].description"),
            (MINIMAL.replace("type: string", "type: integer\n    items: string"), "arguments[0].items"),
        ];
        for (yaml, field) in cases {
            let result = ToolSpec::from_yaml("demo.yaml", &yaml);
            assert_eq!(invalid_field(result), field, "{yaml}");
        }
    }

    #[test]
    fn reserved_and_duplicate_names_are_rejected() {
        let yaml = MINIMAL.replace("name: demo", "name: think");
        assert_eq!(invalid_field(ToolSpec::from_yaml("think.yaml", &yaml)), "name");
        let err = ToolSpecs::from_yaml_files([("demo.yaml", MINIMAL), ("demo.yml", MINIMAL)]).unwrap_err();
        assert!(err.to_string().contains("already defined"), "{err}");
        let spec = ToolSpec::from_yaml("demo.yaml", MINIMAL).unwrap();
        assert!(ToolSpecs::from_specs(vec![spec.clone(), spec.clone()]).is_none());
        assert_eq!(ToolSpecs::from_specs(vec![spec]).unwrap().names(), ["demo"]);
    }

    #[test]
    fn bad_yaml_names_the_file() {
        let err = ToolSpec::from_yaml("demo.yaml", "name: [").unwrap_err();
        assert!(matches!(err, SpecError::Yaml { .. }));
        assert!(err.to_string().starts_with("tool spec demo.yaml:"), "{err}");
    }
}
