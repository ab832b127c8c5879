use agent_test_support::grammar_accepts as accepts;

use super::*;

fn text_grammar() -> String {
    let specs = ToolSpecs::builtin().unwrap();
    reply_grammar(ToolFormat::Text, &[], &specs, false).unwrap()
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
    let g = reply_grammar(ToolFormat::Native, &tools, &specs, false).unwrap();
    assert!(accepts(&g, "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>"));
    assert!(!accepts(&g, "<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"1\"}}\n</tool_call>"));
}

#[test]
fn a_discriminated_tool_needs_what_its_action_requires() {
    let specs = ToolSpecs::builtin().unwrap();
    let g = reply_grammar(ToolFormat::Native, &specs.definitions(), &specs, false).unwrap();
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
    let g = reply_grammar(ToolFormat::Native, &tools, &specs, false).unwrap();
    let write = "<tool_call>\n{\"name\": \"file\", \"arguments\": {\"action\": \"write\", \"path\": \"a\", \"content\": \"x\"}}\n</tool_call>";
    assert!(!accepts(&g, write));
    let read =
        "<tool_call>\n{\"name\": \"file\", \"arguments\": {\"action\": \"read\", \"path\": \"a\"}}\n</tool_call>";
    assert!(accepts(&g, read));
}

#[test]
fn the_agents_reply_makes_one_call_and_a_headless_reply_must_make_it() {
    let specs = ToolSpecs::builtin().unwrap();
    let tools = specs.definitions();
    let call = "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>";
    let block = "```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n```";
    let interactive = reply_grammar(ToolFormat::Native, &tools, &specs, false).unwrap();
    let headless = reply_grammar(ToolFormat::Native, &tools, &specs, true).unwrap();
    for g in [&interactive, &headless] {
        assert!(accepts(g, &format!("Let me look.\n{call}")));
        assert!(accepts(g, &format!("First:\n{block}\n")));
        // The same call again (what the 1.5B wrote when text after a call was refused).
        assert!(!accepts(g, &format!("{call}\n{call}")), "one call a reply");
        assert!(!accepts(g, &format!("{block}\n{block}")), "one call a reply");
    }
    assert!(accepts(&interactive, "Done: the tests pass."), "an interactive answer is prose");
    assert!(!accepts(&headless, "Done: the tests pass."), "a headless reply must act");
    assert!(!accepts(&headless, "<parse_error>the 'cmd' field is missing</parse_error>"));
    // Where the reply cannot end, it cannot stall on blank lines either (the 1.5B wrote
    // 300 tokens of them); indented code before the call still fits.
    let blank = "\n".repeat(40);
    assert!(!accepts(&headless, &format!("All done.{blank}{call}")));
    assert!(accepts(&interactive, &format!("All done.{blank}{call}")), "an interactive reply is free text");
    let code = format!("Like this:\n```python\n{}return x\n```\n\n{call}", " ".repeat(20));
    assert!(accepts(&headless, &code));
    assert!(accepts(&headless, &format!("First:\n\n\n{block}")));
    // A block's closing fence is on a line of its own, where the loop looks for it.
    let glued = "```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}```";
    assert!(!accepts(&headless, glued));
    assert!(accepts(&headless, "```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n  ```"));
    // The text format: a call is required too, text around it stays free.
    let text = reply_grammar(ToolFormat::Text, &[], &specs, true).unwrap();
    assert!(!accepts(&text, "Just prose."));
    assert!(accepts(&text, "I look first.\n<bash>\ncmd: ls\n</bash>\n"));
}

#[test]
fn under_the_grammar_only_the_call_it_opened_is_read_and_the_prose_before_it_is_prose() {
    let specs = ToolSpecs::builtin().unwrap();
    let tools = specs.definitions();
    let headless = reply_grammar(ToolFormat::Native, &tools, &specs, true).unwrap();
    let interactive = reply_grammar(ToolFormat::Native, &tools, &specs, false).unwrap();
    let tagged = "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls /app\"}}\n</tool_call>";
    let block = "```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls /app\"}}\n```";
    let bare = "{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls /app\"}}";
    // Prose a small model writes before its call, which a whole-reply reading takes for
    // calls or broken calls: text-format tags, code blocks, attribute tags.
    let leads = [
        "",
        "<finish>\n",
        "I will call <finish> when done.\n",
        "<bash>\ncmd: rm -rf /app\n</bash>\n",
        "Run:\n```\nls -la\n```\n",
        "```bash\nls\n```\n",
        "Like <bash cmd=\"rm -rf /\" /> but safer:\n",
        "Here is the call: ```json\n",
        "  ```json\nnot json\n  ```\n",
    ];
    for lead in leads {
        for call in [tagged, block, bare] {
            let reply = format!("{lead}{call}");
            assert!(accepts(&headless, &reply), "the grammar allows {reply:?}");
            assert!(accepts(&interactive, &reply), "the grammar allows {reply:?}");
            let action = constrained_native_call(&reply, &specs).unwrap_or_else(|| panic!("no call in {reply:?}"));
            assert_eq!(action.tool, "bash", "{reply:?}");
            assert_eq!(action.args["cmd"], "ls /app", "{reply:?}");
        }
    }
    // The first opener is the call: a line-start `{` that is not one cannot be sampled.
    assert!(!accepts(&headless, &format!("Data:\n{{\"a\": 1}}\n{tagged}")));
    // A reply cut inside its call is not read here (the whole reply is, leniently).
    assert_eq!(constrained_native_call("<tool_call>\n{\"name\": \"bash\", \"argu", &specs), None);
    assert_eq!(constrained_native_call("Just prose.", &specs), None);
}
