//! The tool section of the system prompt, generated from the tool specs.

use std::fmt::Write as _;

use super::{ArgSpec, ToolSpec, ToolSpecs};

/// Renders the Markdown section that explains the action format and every tool
/// (description, arguments, examples). Examples are written unfenced, exactly as the
/// model should write them.
pub fn render_tool_section(specs: &ToolSpecs) -> String {
    let mut out = String::new();
    let first = specs.get("bash").or_else(|| specs.iter().next());
    out.push_str("## Tools\n\n");
    out.push_str(
        "You act by writing tool calls. A tool call is a tag named after the tool whose \
         body is YAML, one `name: value` line per argument:\n\n",
    );
    if let Some(spec) = first {
        out.push_str(&spec.example_action());
        out.push_str("\n\n");
    }
    out.push_str(
        "- Write one or more tool calls per reply; they run in the order written. Their \
         results come back in the next message, one block per call, tagged with the tool's \
         name plus `_output` (",
    );
    let outputs: Vec<String> = specs.iter().take(2).map(|s| format!("`<{0}_output>…</{0}_output>`", s.name)).collect();
    out.push_str(&outputs.join(", "));
    out.push_str(", …).\n");
    out.push_str(
        "- For multi-line values (scripts, file contents, text to replace) use a YAML block: \
         `name: |` followed by the text on the next lines, indented two spaces. Nothing \
         inside a `|` block needs quoting or escaping.\n",
    );
    out.push_str(
        "- Put a one-line value in quotes if it contains `: ` or ` #`, or starts with `*`, \
         `&`, `!`, `[`, `{`, `|`, `>`, `%`, `@` or a quote; or write it as a `|` block.\n",
    );
    out.push_str(
        "- A malformed call is not run: you get `<parse_error>…</parse_error>` with the \
         problem and a correct example. Fix the call and send it again.\n",
    );
    out.push_str("- Text outside tool calls is not executed; `<think>…</think>` is ignored.\n");
    if specs.get("finish").is_some() {
        out.push_str(
            "- When the task is done and you have verified the result, call `finish`; the \
             episode ends only then. Always end with `finish`.\n",
        );
    }
    for spec in specs {
        render_tool(&mut out, spec);
    }
    out
}

/// Renders the tool section for the native format: the tools themselves reach the model
/// as JSON schemas through its chat template or API, so this only says how to work with
/// them.
pub fn render_native_tool_section(specs: &ToolSpecs) -> String {
    let mut out = String::from("## Tools\n\n");
    out.push_str(
        "You act by calling the tools you are given (function calls). Each call's result \
         comes back as that tool's response.\n",
    );
    out.push_str(
        "- Call one or more tools per reply; they run in the order written. Wait for their \
         results before relying on them.\n",
    );
    if let Some(example) = specs.get("bash").and_then(native_example) {
        let _ = writeln!(
            out,
            "- A call names the tool and gives its arguments as a JSON object: for example the \
             tool bash with the arguments {example}"
        );
    }
    out.push_str(
        "- A malformed call is not run: its response is an `<parse_error>` with the problem \
         and a correct example. Fix the call and send it again.\n",
    );
    out.push_str("- Text outside tool calls is not executed; use it for brief reasoning.\n");
    if specs.get("finish").is_some() {
        out.push_str(
            "- When the task is done and you have verified the result, call `finish`; the \
             episode ends only then. Always end with `finish`.\n",
        );
    }
    out
}

/// A tool's first example as the JSON object of its arguments.
fn native_example(spec: &ToolSpec) -> Option<String> {
    let body = &spec.examples.first()?.body;
    serde_yaml::from_str::<serde_json::Value>(body).ok().map(|v| v.to_string())
}

fn render_tool(out: &mut String, spec: &ToolSpec) {
    let _ = write!(out, "\n### `{}`\n\n{}\n", spec.name, spec.description.trim());
    if !spec.arguments.is_empty() {
        out.push_str("\nArguments:\n");
        for arg in &spec.arguments {
            render_arg(out, spec, arg, "");
        }
    }
    if let Some(raw) = spec.raw_body_arg.as_deref() {
        let _ = writeln!(out, "\nA body that is not `name: value` lines is taken whole as `{raw}`.");
    }
    let label = if spec.examples.len() == 1 { "Example" } else { "Examples" };
    let _ = writeln!(out, "\n{label}:");
    for example in &spec.examples {
        let _ = write!(
            out,
            "\n{}:\n{}\n",
            example.description.trim().trim_end_matches([':', '.']),
            spec.render_call(&example.body)
        );
    }
}

fn render_arg(out: &mut String, spec: &ToolSpec, arg: &ArgSpec, indent: &str) {
    let mut facts = vec![arg.type_label()];
    let discriminator = spec.discriminator.as_deref();
    let is_discriminator = indent.is_empty() && discriminator == Some(arg.name.as_str());
    if arg.required {
        facts.push("required".into());
    } else if !arg.required_for.is_empty() {
        facts.push(format!("required for {}", code_list(&arg.required_for, " and ")));
    }
    if !arg.enum_values.is_empty() {
        facts.push(format!("one of {}", code_list(&arg.enum_values, ", ")));
    }
    if let Some(default) = &arg.default {
        facts.push(format!("default {}", render_value(default)));
    }
    if !arg.required && arg.required_for.is_empty() && arg.default.is_none() {
        facts.push("optional".into());
    }
    if !is_discriminator && indent.is_empty() && !arg.applies_to.is_empty() {
        facts.push(format!("for {}", code_list(&arg.applies_to, " and ")));
    }
    let _ = writeln!(out, "{indent}- `{}` ({}): {}", arg.name, facts.join(", "), arg.description.trim());
    if !arg.fields.is_empty() {
        let _ = writeln!(out, "{indent}  Each item has:");
        let nested = format!("{indent}  ");
        for field in &arg.fields {
            render_arg(out, spec, field, &nested);
        }
    }
}

fn code_list(values: &[String], separator: &str) -> String {
    values.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(separator)
}

fn render_value(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => format!("`\"{s}\"`"),
        other => format!("`{other}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section() -> String {
        render_tool_section(&ToolSpecs::builtin().unwrap())
    }

    #[test]
    fn explains_the_format() {
        let text = section();
        assert!(text.starts_with("## Tools\n"));
        assert!(text.contains("<bash>\ncmd: ls -la /app\n</bash>"));
        assert!(text.contains("`<bash_output>…</bash_output>`"));
        assert!(text.contains("<parse_error>"));
        assert!(text.contains("`name: |`"));
        assert!(text.contains("in the order written"));
        assert!(text.contains("Always end with `finish`"));
    }

    #[test]
    fn lists_every_tool_with_arguments_and_examples() {
        let text = section();
        let specs = ToolSpecs::builtin().unwrap();
        for spec in &specs {
            assert!(text.contains(&format!("\n### `{}`\n", spec.name)), "{}", spec.name);
            for arg in &spec.arguments {
                assert!(text.contains(&format!("- `{}` (", arg.name)), "{}", arg.name);
            }
            for example in &spec.examples {
                assert!(text.contains(&spec.render_call(&example.body)));
            }
        }
        assert!(text.contains("- `cmd` (string, required): "));
        assert!(text.contains("- `timeout_secs` (integer, default `120`): "));
        assert!(
            text.contains("- `action` (string, required, one of `read`, `write`, `edit`, `multi_edit`, `metadata`): ")
        );
        assert!(text.contains("- `content` (string, required for `write`): "));
        assert!(text.contains("- `offset` (integer, default `1`, for `read`): "));
        assert!(text.contains("- `path` (string, default `\".\"`): "));
        assert!(text.contains("- `include` (string, optional, for `grep`): "));
        assert!(text.contains("- `id` (integer, required for `complete` and `delete`): "));
        assert!(text.contains("- `edits` (list of object, required for `multi_edit`): "));
        assert!(text.contains("  Each item has:\n  - `old_string` (string, required): "));
        assert!(text.contains("taken whole as `cmd`"));
    }

    #[test]
    fn tools_appear_in_order() {
        let text = section();
        let positions: Vec<usize> = ["bash", "file", "search", "todo", "scratchpad", "finish"]
            .iter()
            .map(|n| text.find(&format!("### `{n}`")).unwrap())
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_native_section_explains_the_work_not_the_syntax() {
        let text = render_native_tool_section(&ToolSpecs::builtin().unwrap());
        assert!(text.starts_with("## Tools\n"));
        assert!(text.contains("Always end with `finish`"));
        assert!(text.contains("the tool bash with the arguments {\"cmd\":\"ls -la /app\"}\n"), "{text}");
        assert!(!text.contains("<bash>") && !text.contains("YAML"), "{text}");
    }

    #[test]
    fn works_for_a_custom_set() {
        let yaml =
            "name: demo\ndescription: A demo.\narguments: []\nexamples:\n  - description: Ex\n    body: \"{}\"\n";
        let specs = ToolSpecs::from_yaml_files([("demo.yaml", yaml)]).unwrap();
        let text = render_tool_section(&specs);
        assert!(text.contains("### `demo`"));
        assert!(!text.contains("finish"));
    }
}
