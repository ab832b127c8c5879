//! The ordered set of tool specs, and the built-in specs embedded from `tools/*.yaml`.

use super::{SpecError, ToolSpec};

/// The built-in tool specs, in prompt order: (file name, YAML text).
const BUILTIN: &[(&str, &str)] = &[
    ("bash.yaml", include_str!("../../../../../tools/bash.yaml")),
    ("file.yaml", include_str!("../../../../../tools/file.yaml")),
    ("search.yaml", include_str!("../../../../../tools/search.yaml")),
    ("todo.yaml", include_str!("../../../../../tools/todo.yaml")),
    ("scratchpad.yaml", include_str!("../../../../../tools/scratchpad.yaml")),
    ("finish.yaml", include_str!("../../../../../tools/finish.yaml")),
];

/// The `skill` tool's spec, offered only when the session has skills.
const SKILL: (&str, &str) = ("skill.yaml", include_str!("../../../../../tools/skill.yaml"));

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

    /// The set narrowed to `names` (in this set's order); `finish` always stays, since an
    /// episode must be able to end. Errors name a tool that is not in the set.
    pub fn only(&self, names: &[String]) -> Result<ToolSpecs, String> {
        if let Some(unknown) = names.iter().find(|n| self.get(n).is_none()) {
            return Err(format!("`{unknown}` is not a tool (known: {})", self.names().join(", ")));
        }
        let specs = self.specs.iter().filter(|s| s.name == "finish" || names.contains(&s.name)).cloned().collect();
        Ok(ToolSpecs { specs })
    }

    /// The tools a small model is given (bash, file, finish, and any MCP tools), each
    /// described by its first sentence, its arguments too, and with its first example
    /// only.
    pub fn compact(&self) -> ToolSpecs {
        const SMALL: [&str; 3] = ["bash", "file", "finish"];
        let builtin: Vec<String> = BUILTIN.iter().map(|(file, _)| file.trim_end_matches(".yaml").to_string()).collect();
        let specs = self
            .specs
            .iter()
            .filter(|s| SMALL.contains(&s.name.as_str()) || !builtin.contains(&s.name))
            .cloned()
            .map(|mut s| {
                s.description = first_sentence(&s.description);
                for arg in &mut s.arguments {
                    arg.description = first_sentence(&arg.description);
                }
                s.examples.truncate(1);
                s
            })
            .collect();
        ToolSpecs { specs }
    }

    /// This set with the `skill` tool added last (unless it has one already).
    pub fn with_skill_tool(&self) -> Result<ToolSpecs, SpecError> {
        if self.get("skill").is_some() {
            return Ok(self.clone());
        }
        let mut specs = self.specs.clone();
        specs.push(ToolSpec::from_yaml(SKILL.0, SKILL.1)?);
        Ok(ToolSpecs { specs })
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

/// The first sentence of a description (up to the first `. ` or the end), on one line.
fn first_sentence(text: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match text.find(". ") {
        Some(end) => text[..=end].to_string(),
        None => text,
    }
}
