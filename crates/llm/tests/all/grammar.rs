//! The grammars checked by llguidance itself over a one-byte-per-token vocabulary: what
//! they accept and refuse, byte by byte, as a sampler would see it.

use agent_llm::grammar::{json_value, native_calls, CallChoice, Calls, Openers};
use agent_llm::ToolDefinition;
use agent_test_support::grammar_accepts as accepts;
use serde_json::json;

fn tools() -> Vec<ToolDefinition> {
    vec![
        ToolDefinition {
            name: "bash".into(),
            description: "Run a command.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "cmd": {"type": "string"},
                    "timeout_secs": {"type": "integer"}
                },
                "required": ["cmd"]
            }),
        },
        ToolDefinition {
            name: "finish".into(),
            description: "End.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"message": {"type": "string"}},
                "required": ["message"]
            }),
        },
    ]
}

const CALL: &str = "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls -la\"}}\n</tool_call>";

#[test]
fn free_text_and_well_formed_calls_are_allowed() {
    let g = native_calls(&tools(), &CallChoice::Optional, Openers::Tagged, Calls::Many).unwrap();
    assert!(accepts(&g, ""));
    assert!(accepts(&g, "Just an answer, with {braces} and <tags>."));
    assert!(accepts(&g, CALL));
    assert!(accepts(&g, &format!("I will list the files.\n{CALL}")));
    assert!(accepts(&g, &format!("{CALL}\n{CALL}")));
    // After a call, only more calls: text there would be written before the result.
    assert!(!accepts(&g, &format!("{CALL}\nand then I wait.")));
    assert!(accepts(&g, &format!("{CALL}\n")));
    let finish =
        "<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"message\": \"done \\\"ok\\\"\\n\"}}\n</tool_call>";
    assert!(accepts(&g, finish));
    let both =
        "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"make\", \"timeout_secs\": 60}}\n</tool_call>";
    assert!(accepts(&g, both));
}

#[test]
fn a_call_that_would_not_parse_cannot_be_sampled() {
    let g = native_calls(&tools(), &CallChoice::Optional, Openers::Tagged, Calls::Many).unwrap();
    let refused = [
        // A tool that was not offered.
        "<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"1\"}}\n</tool_call>",
        // An argument the tool does not declare, a missing required one, a wrong type.
        "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"bash\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\", \"timeout_secs\": \"60\"}}\n</tool_call>",
        // Python's triple-quoted strings and single quotes are not JSON.
        "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"\"\"ls\"\"\"}}\n</tool_call>",
        "<tool_call>\n{'name': 'bash', 'arguments': {'cmd': 'ls'}}\n</tool_call>",
        // A call that never closes.
        "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}",
        "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls",
    ];
    for text in refused {
        assert!(!accepts(&g, text), "accepted: {text}");
    }
}

#[test]
fn required_and_named_choices_demand_a_call() {
    let required = native_calls(&tools(), &CallChoice::Required, Openers::Tagged, Calls::Many).unwrap();
    assert!(!accepts(&required, "No call at all."));
    assert!(accepts(&required, &format!("{CALL}\n{CALL}")));
    assert!(!accepts(&required, &format!("Thinking first.\n{CALL}")), "the call comes first");
    let named = native_calls(&tools(), &CallChoice::Named("finish".into()), Openers::Tagged, Calls::Many).unwrap();
    assert!(!accepts(&named, CALL), "a call of another tool than the named one");
    assert!(accepts(&named, "<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"message\": \"ok\"}}\n</tool_call>"));
    assert_eq!(native_calls(&tools(), &CallChoice::Named("nope".into()), Openers::Tagged, Calls::Many), None);
    assert_eq!(native_calls(&[], &CallChoice::Optional, Openers::Tagged, Calls::Many), None);
}

#[test]
fn json_value_follows_its_schema() {
    let schema = json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]});
    let g = json_value(&schema);
    assert!(accepts(&g, "{\"answer\": 42}"));
    assert!(!accepts(&g, "{\"answer\": \"42\"}"));
    assert!(!accepts(&g, "{\"answer\": 42, \"extra\": 1}"));
    assert!(!accepts(&g, "Sure! {\"answer\": 42}"));
}

#[test]
fn odd_schemas_still_compile() {
    // What MCP servers send: formats and keywords llguidance does not implement, no
    // properties at all, a bare `true`.
    let odd = vec![
        ToolDefinition {
            name: "fetch".into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {"url": {"type": "string", "format": "uri"},
                "when": {"type": "string", "format": "date-time"}}, "required": ["url"], "$schema": "http://json-schema.org/draft-07/schema#"}),
        },
        ToolDefinition { name: "ping".into(), description: String::new(), parameters: json!({}) },
        ToolDefinition { name: "any".into(), description: String::new(), parameters: json!(true) },
    ];
    let g = native_calls(&odd, &CallChoice::Optional, Openers::Tagged, Calls::Many).unwrap();
    assert!(accepts(&g, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"));
    assert!(accepts(&g, "<tool_call>\n{\"name\": \"fetch\", \"arguments\": {\"url\": \"http://x\"}}\n</tool_call>"));
}

#[test]
fn tool_names_that_look_like_grammar_are_data() {
    let tools = vec![ToolDefinition {
        name: "a\"b/c\\d".into(),
        description: String::new(),
        parameters: json!({"type": "object", "properties": {}}),
    }];
    let g = native_calls(&tools, &CallChoice::Optional, Openers::Tagged, Calls::Many).unwrap();
    assert!(accepts(&g, "<tool_call>\n{\"name\": \"a\\\"b/c\\\\d\", \"arguments\": {}}\n</tool_call>"));
}

#[test]
fn pretty_printed_json_is_a_call_too() {
    let g = native_calls(&tools(), &CallChoice::Optional, Openers::Tagged, Calls::Many).unwrap();
    let pretty = "<tool_call>\n{\n  \"name\": \"bash\",\n  \"arguments\": {\n    \"cmd\": \"ls\"\n  }\n}\n</tool_call>";
    assert!(accepts(&g, pretty));
    assert!(accepts(&g, "<tool_call>{\"name\":\"bash\",\"arguments\":{\"cmd\":\"ls\"}}</tool_call>"));
    // Whitespace is bounded: a call cannot be padded forever.
    let padded = format!(
        "<tool_call>\n{{{}\"name\": \"bash\", \"arguments\": {{\"cmd\": \"ls\"}}}}\n</tool_call>",
        " ".repeat(40)
    );
    assert!(!accepts(&g, &padded));
}

#[test]
fn loose_openers_hold_fenced_and_bare_calls_to_the_same_rules() {
    let g = native_calls(&tools(), &CallChoice::Optional, Openers::Loose, Calls::Many).unwrap();
    // What the 0.5B writes: a ```json block, pretty-printed, with keys the tool lacks.
    let fenced = "```json\n{\n  \"name\": \"bash\",\n  \"arguments\": {\n    \"cmd\": \"python calc.py\"\n  }\n}\n```";
    assert!(accepts(&g, fenced));
    assert!(accepts(&g, &format!("I will run it.\n{fenced}\n")));
    assert!(!accepts(&g, &format!("I will run it.\n{fenced}\nThis prints 3.")));
    assert!(accepts(&g, &format!("{fenced}\n\n{CALL}")), "calls one after another, in any opener");
    let extra = "```json\n{\n  \"name\": \"bash\",\n  \"arguments\": {\n    \"cmd\": \"python calc.py\"\n  },\n  \"timeout_secs\": 120\n}\n```";
    assert!(!accepts(&g, extra), "a key beside name and arguments");
    assert!(accepts(&g, "{\"name\": \"finish\", \"arguments\": {\"message\": \"ok\"}}"));
    assert!(!accepts(&g, "{\"name\": \"python\", \"arguments\": {}}"));
    assert!(!accepts(&g, "```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"\"\"ls\"\"\"}}\n```"));
    // Other code blocks and braces inside a line stay free.
    assert!(accepts(&g, "Run this:\n```bash\nls {a,b}\n```\nand see {x}."));
    assert!(accepts(&g, CALL));
    // Served replies keep a client's JSON blocks free.
    let tagged = native_calls(&tools(), &CallChoice::Optional, Openers::Tagged, Calls::Many).unwrap();
    assert!(accepts(&tagged, "```json\n{\"name\": \"python\"}\n```"));
}
