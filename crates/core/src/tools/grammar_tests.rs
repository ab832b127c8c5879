use agent_test_support::grammar_accepts as accepts;

use super::*;

fn text_grammar() -> String {
    let specs = ToolSpecs::builtin().unwrap();
    reply_grammar(ToolFormat::Text, &[], &specs).unwrap()
}

#[test]
fn text_calls_of_real_tools_are_allowed_and_prose_is_free() {
    let g = text_grammar();
    assert!(accepts(&g, "Just an answer with a <bash> tag in the middle of a line."));
    assert!(accepts(&g, "<bash>\ncmd: ls -la /app\n</bash>"));
    assert!(accepts(
        &g,
        "First I look.\n<bash>\ncmd: |\n  cd /app\n\n  make test\ntimeout_secs: 60\n</bash>\nThen I wait."
    ));
    assert!(accepts(&g, "<finish>\nmessage: done\n</finish>"));
}

#[test]
fn a_text_call_with_unknown_arguments_or_no_close_cannot_be_sampled() {
    let g = text_grammar();
    assert!(!accepts(&g, "<bash>\ncommand: ls\n</bash>"), "an argument bash does not have");
    assert!(!accepts(&g, "<bash>\ncmd: ls\n"), "never closed");
    assert!(!accepts(&g, "<bash>\ncmd: ls\n</file>"), "closed by another tool's tag");
}

#[test]
fn the_native_grammar_offers_the_requests_tools() {
    let specs = ToolSpecs::builtin().unwrap();
    let tools = specs.definitions();
    let g = reply_grammar(ToolFormat::Native, &tools, &specs).unwrap();
    assert!(accepts(&g, "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>"));
    assert!(!accepts(&g, "<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"1\"}}\n</tool_call>"));
}

#[test]
fn a_discriminated_tool_needs_what_its_action_requires() {
    let specs = ToolSpecs::builtin().unwrap();
    let g = reply_grammar(ToolFormat::Native, &specs.definitions(), &specs).unwrap();
    let call = |args: &str| format!("<tool_call>\n{{\"name\": \"todo\", \"arguments\": {args}}}\n</tool_call>");
    assert!(accepts(&g, &call("{\"action\": \"add\", \"text\": \"write tests\"}")));
    assert!(!accepts(&g, &call("{\"action\": \"add\", \"id\": 0}")), "`add` needs its text");
    let file = |args: &str| format!("<tool_call>\n{{\"name\": \"file\", \"arguments\": {args}}}\n</tool_call>");
    assert!(accepts(&g, &file("{\"action\": \"read\", \"path\": \"/app/a.py\"}")));
    assert!(!accepts(&g, &file("{\"action\": \"write\", \"path\": \"/app/a.py\"}")), "`write` needs its content");
}

#[test]
fn plan_mode_keeps_the_grammar_to_the_offered_actions() {
    let specs = ToolSpecs::builtin().unwrap();
    let mut tools = specs.definitions();
    for t in &mut tools {
        if t.name == "file" {
            t.parameters["properties"]["action"]["enum"] = serde_json::json!(["read", "metadata"]);
        }
    }
    let g = reply_grammar(ToolFormat::Native, &tools, &specs).unwrap();
    let write = "<tool_call>\n{\"name\": \"file\", \"arguments\": {\"action\": \"write\", \"path\": \"a\", \"content\": \"x\"}}\n</tool_call>";
    assert!(!accepts(&g, write));
    let read =
        "<tool_call>\n{\"name\": \"file\", \"arguments\": {\"action\": \"read\", \"path\": \"a\"}}\n</tool_call>";
    assert!(accepts(&g, read));
}
