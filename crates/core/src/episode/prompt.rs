//! The system prompt: `prompts/system.md` with the generated tool section.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::tools::{render_native_tool_section, render_tool_section, ToolFormat, ToolSpecs};

/// The built-in system-prompt template.
pub(crate) const SYSTEM_TEMPLATE: &str = include_str!("../../../../prompts/system.md");
/// The compact system prompt of small models (see [`crate::config::PromptProfile`]).
pub(crate) const SMALL_SYSTEM_TEMPLATE: &str = include_str!("../../../../prompts/system-small.md");

/// Renders the system prompt for a sandbox whose shell starts in `cwd`.
/// `project_instructions` is the content of the project's `AGENTS.md`, if any; `format`
/// is the resolved action format (native or text).
pub fn system_prompt(specs: &ToolSpecs, cwd: &str, project_instructions: Option<&str>, format: ToolFormat) -> String {
    render_system_prompt(SYSTEM_TEMPLATE, specs, cwd, project_instructions, format)
}

/// Renders a system-prompt template (`{{cwd}}`, `{{date}}`, `{{tools}}` and
/// `{{project_instructions}}` are filled in; a template may leave any of them out). In
/// the native format `{{tools}}` becomes a short section on how to work with tools: the
/// tools themselves go to the model as JSON schemas.
pub fn render_system_prompt(
    template: &str,
    specs: &ToolSpecs,
    cwd: &str,
    project_instructions: Option<&str>,
    format: ToolFormat,
) -> String {
    let project = match project_instructions {
        Some(text) if !text.trim().is_empty() => {
            format!("\n# Project instructions (AGENTS.md)\n\n{}\n", text.trim())
        }
        _ => String::new(),
    };
    let tools = match format {
        _ if !template.contains("{{tools}}") => String::new(),
        ToolFormat::Native => render_native_tool_section(specs),
        ToolFormat::Auto | ToolFormat::Text => render_tool_section(specs),
    };
    template
        .replace("{{cwd}}", cwd)
        .replace("{{date}}", &today())
        .replace("{{tools}}", &tools)
        .replace("{{project_instructions}}", &project)
        .trim_end()
        .to_string()
}

/// `prompt` with its tool section for `old` replaced by the one for `new` (an MCP
/// server's tools changed): the tool section is the only part made from the specs.
pub fn swap_tool_section(prompt: &str, old: &ToolSpecs, new: &ToolSpecs, format: ToolFormat) -> String {
    let section = |s: &ToolSpecs| match format {
        ToolFormat::Native => render_native_tool_section(s),
        ToolFormat::Auto | ToolFormat::Text => render_tool_section(s),
    };
    prompt.replacen(&section(old), &section(new), 1)
}

/// Today's date (UTC) as YYYY-MM-DD.
pub(crate) fn today() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (y, m, d) = agent_llm::date::civil_date(secs);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_has_tools_and_cwd() {
        let specs = ToolSpecs::builtin().unwrap();
        let p = system_prompt(&specs, "/app", Some("Use tabs."), ToolFormat::Text);
        assert!(p.contains("/app"));
        assert!(p.contains("<bash>") && p.contains("finish"));
        assert!(p.contains("Use tabs."));
        assert!(!p.contains("{{"));
        assert_eq!(today().len(), 10);
        let native = system_prompt(&specs, "/app", Some("Use tabs."), ToolFormat::Native);
        assert!(native.contains("/app") && native.contains("Use tabs.") && native.contains("call `finish`"));
        assert!(!native.contains("<bash>"), "{native}");
    }
}
