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

mod arg;
mod check;
mod schema;
mod set;
mod tool;

#[cfg(test)]
mod tests;

pub use arg::{ArgSpec, ArgType};
pub use set::ToolSpecs;
pub use tool::{ToolExample, ToolSpec};

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
