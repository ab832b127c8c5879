//! The grammar a local engine enforces on a reply, in the episode's action format:
//! native calls through [`agent_llm::grammar::native_calls`], text-format tags here.
//!
//! A text-format call opens with its tool's tag at the start of a line; from there the
//! grammar holds the body to `name: value` lines of that tool's own arguments (a `|`
//! block's lines indented), and the closing tag. YAML values themselves stay free: a plain
//! scalar's quoting rules are beyond a line grammar, and the parser already reads a bad
//! one leniently or answers with an example.

use agent_llm::grammar::{lark_string, native_calls, regex_escape, CallChoice, Calls, Openers, CALL_OPEN};
use agent_llm::ToolDefinition;
use serde_json::Value;

use super::{parse_actions, untagged_json_calls, Action, ToolFormat, ToolSpecs};

/// The grammar of one reply: `tools` are the native definitions the request offers (the
/// native format), `specs` the tools the text format explains. An interactive turn may
/// hold text, a call or both; with `must_call` (a headless run, where a reply without a
/// call is an error) text may come first but a call must follow.
pub fn reply_grammar(
    format: ToolFormat,
    tools: &[ToolDefinition],
    specs: &ToolSpecs,
    must_call: bool,
) -> Option<String> {
    match format {
        // The loop reads ```json blocks and line-start objects as calls, so they are held to
        // the grammar too.
        ToolFormat::Native => {
            let choice = if must_call { CallChoice::AfterText } else { CallChoice::Optional };
            native_reply_grammar(tools, specs, &choice)
        }
        _ => text_calls(specs, must_call),
    }
}

/// The grammar of a native reply that makes the call `choice` asks for, one call a reply,
/// held to what the loop's validation accepts.
pub fn native_reply_grammar(tools: &[ToolDefinition], specs: &ToolSpecs, choice: &CallChoice) -> Option<String> {
    native_calls(&grammar_tools(tools, specs), choice, Openers::Loose, Calls::One)
}

/// The call of a native reply sampled under [`native_reply_grammar`]: the grammar opens
/// it at the reply's first opener (`<tool_call>`, a line-start ```` ```json ```` fence or a
/// line-start `{`) and nothing after it may follow, so only that part is read. The text
/// before it is prose, even where it looks like a text-format tag (`<finish>`), a code
/// block or an attribute tag, which the lenient reading of a whole reply would take for
/// calls (the compact prompt's 1.5B wrote such prose before its calls). `None` when that
/// part is not one valid call: a reply cut short (by its token limit or the loop
/// detector), where the grammar's promise does not hold and the whole reply is read.
pub fn constrained_native_call(text: &str, specs: &ToolSpecs) -> Option<Action> {
    let start = first_opener(text)?;
    let call = &text[start..];
    if call.starts_with(CALL_OPEN) {
        let parsed = parse_actions(call, specs);
        return match (parsed.actions.as_slice(), parsed.errors.is_empty()) {
            ([action], true) => Some(action.clone()),
            _ => None,
        };
    }
    match untagged_json_calls(call, specs).as_slice() {
        [Ok(action)] => Some(action.clone()),
        _ => None,
    }
}

/// Where the grammar's [`Openers::Loose`] open a call first: `<tool_call>` anywhere, a
/// ```` ```json ```` fence ending its line at a line's start, or a `{` after at most
/// eight spaces or tabs at a line's start.
fn first_opener(text: &str) -> Option<usize> {
    let tag = text.find(CALL_OPEN);
    let mut line_start = 0;
    let mut line_opener = None;
    while line_start < text.len() && tag.is_none_or(|t| line_start < t) {
        let line_end = text[line_start..].find('\n').map_or(text.len(), |n| line_start + n);
        let line = &text[line_start..line_end];
        let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
        let fence = line
            .strip_prefix("```json")
            .is_some_and(|rest| rest.trim_start_matches([' ', '\t']).is_empty() && line_end < text.len());
        if fence || (indent <= 8 && line[indent..].starts_with('{')) {
            line_opener = Some(line_start + if fence { 0 } else { indent });
            break;
        }
        line_start = line_end + 1;
    }
    match (tag, line_opener) {
        (Some(t), Some(l)) => Some(t.min(l)),
        (t, l) => t.or(l),
    }
}

/// The offered tools with the schemas the grammar holds calls to: a discriminated tool's
/// per-value variants ([`super::ToolSpec::grammar_schema`]), kept to the discriminator
/// values the request offers (plan mode offers `file` for reading only).
fn grammar_tools(tools: &[ToolDefinition], specs: &ToolSpecs) -> Vec<ToolDefinition> {
    tools
        .iter()
        .map(|tool| {
            let Some(spec) = specs.get(&tool.name).filter(|s| s.discriminator.is_some()) else {
                return tool.clone();
            };
            let mut schema = spec.grammar_schema();
            let offered = spec
                .discriminator
                .as_deref()
                .and_then(|d| tool.parameters.pointer(&format!("/properties/{d}/enum")))
                .and_then(|e| e.as_array().cloned());
            if let (Some(offered), Some(Value::Array(variants))) = (offered, schema.get_mut("anyOf")) {
                let d = spec.discriminator.clone().unwrap_or_default();
                variants.retain(|v| v.pointer(&format!("/properties/{d}/const")).is_some_and(|c| offered.contains(c)));
            }
            ToolDefinition { parameters: schema, ..tool.clone() }
        })
        .collect()
}

/// Text-format calls: free text, each call's tag opening a line (at least one with
/// `must_call`).
fn text_calls(specs: &ToolSpecs, must_call: bool) -> Option<String> {
    let mut rules = String::new();
    let mut alternatives = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        // A tool without arguments is written `<tool>\n</tool>` (or with a blank line).
        let names: Vec<String> = spec.arguments.iter().map(|a| regex_escape(&a.name)).collect();
        let name = regex_escape(&spec.name);
        let close = lark_string(&format!("</{}>", spec.name));
        let body = if names.is_empty() { "/\\n*/".to_string() } else { format!("\"\\n\" ARG{i} (ARG{i} | BLOCK)*") };
        rules.push_str(&format!("call{i}: lead{i} {body} {close}\nlead{i}[lazy]: /(?s:(.*\\n)?)<{name}>/\n"));
        if !names.is_empty() {
            rules.push_str(&format!("ARG{i}: /({}): ?[^\\n]*\\n/\n", names.join("|")));
        }
        alternatives.push(format!("call{i}"));
    }
    if alternatives.is_empty() {
        return None;
    }
    let openers: Vec<String> = specs.iter().map(|s| format!("<{}>", regex_escape(&s.name))).collect();
    Some(format!(
        "%llguidance {{}}\n\
         start: ({calls}){repeat} free\n\
         {rules}\
         BLOCK: /( +[^\\n]*)?\\n/\n\
         free: FREE\n\
         FREE: /(?s:.*)/ & ~/(?s:(.*\\n)?({openers}).*)/\n",
        calls = alternatives.join(" | "),
        repeat = if must_call { "+" } else { "*" },
        openers = openers.join("|"),
    ))
}

#[cfg(test)]
#[path = "grammar_tests.rs"]
mod tests;
