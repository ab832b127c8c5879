//! Tools the model can call: declarative specs (`tools/*.yaml`), the action parser,
//! argument validation, the generated prompt section, and the executors.

mod format;
mod grammar;
mod parser;
mod prompt;
mod spec;
mod validate;

pub use format::{no_native_call_error, untagged_json_calls, unwrap_observation, write_call, ObjectScan, ToolFormat};
pub use grammar::{constrained_native_call, native_reply_grammar, reply_grammar};
pub use parser::{parse_actions, parse_native_call, written_calls, ParseOutcome, MAX_ITEMS};
pub use prompt::{render_native_tool_section, render_tool_section};
pub use spec::{ArgSpec, ArgType, SpecError, ToolExample, ToolSpec, ToolSpecs};
pub use validate::validate_args;

pub use agent_protocol::trajectory::{Action, ActionParseError, ParseErrorKind};
