//! Tools the model can call: declarative specs (`tools/*.yaml`), the action parser,
//! argument validation, the generated prompt section, and the executors.

mod format;
mod parser;
mod prompt;
mod spec;
mod validate;

pub use format::{no_native_call_error, untagged_json_calls, unwrap_observation, write_call, ToolFormat};
pub use parser::{parse_actions, parse_native_call, ParseOutcome, MAX_ITEMS};
pub use prompt::{render_native_tool_section, render_tool_section};
pub use spec::{ArgSpec, ArgType, SpecError, ToolExample, ToolSpec, ToolSpecs};
pub use validate::validate_args;

use serde::{Deserialize, Serialize};

/// One tool call parsed from a model reply, with validated arguments.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Action {
    /// The tool's name, e.g. `bash`.
    pub tool: String,
    /// Validated arguments as a JSON object (defaults filled in).
    pub args: serde_json::Map<String, serde_json::Value>,
}

/// A malformed action, reported back to the model as a `<parse_error>` observation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ActionParseError {
    /// The tool the model seemed to call, when known.
    pub tool: Option<String>,
    /// What is wrong, for the model.
    pub message: String,
    /// The offending text, truncated.
    pub snippet: String,
    /// A correct example of the intended tool (or of the action format).
    pub example: String,
}

impl ActionParseError {
    /// The observation text the model sees.
    pub fn to_observation(&self) -> String {
        format!(
            "<parse_error>\nerror: {}\noffending text:\n{}\na correct example:\n{}\n</parse_error>",
            self.message, self.snippet, self.example
        )
    }
}
