//! Unit tests of the action parser: tags, bodies, native calls and error messages.

use std::sync::OnceLock;

use serde_json::{json, Value as Json};

use super::body::{dedent, is_block_indicator, is_fence};
use super::fence::{next_fence_line, read_fence_line, Closers};
use super::scanner::read_tag;
use super::{parse_actions, parse_native_call, truncate_to, ParseOutcome, MAX_ITEMS, SNIPPET_MAX};
use crate::tools::{Action, ToolSpec, ToolSpecs};

pub(super) fn specs() -> &'static ToolSpecs {
    static SPECS: OnceLock<ToolSpecs> = OnceLock::new();
    SPECS.get_or_init(|| ToolSpecs::builtin().expect("builtin specs load"))
}

pub(super) fn parse(text: &str) -> ParseOutcome {
    parse_actions(text, specs())
}

/// Parses a reply that must hold exactly the given actions and no errors.
fn actions(text: &str) -> Vec<Action> {
    let out = parse(text);
    assert!(out.errors.is_empty(), "unexpected errors for {text:?}: {:#?}", out.errors);
    out.actions
}

fn one(text: &str) -> Action {
    let mut all = actions(text);
    assert_eq!(all.len(), 1, "{text:?} → {all:#?}");
    all.remove(0)
}

pub(super) fn cmd(text: &str) -> String {
    let action = one(text);
    assert_eq!(action.tool, "bash");
    action.args["cmd"].as_str().unwrap().to_string()
}

#[test]
fn simple_bash() {
    let action = one("<bash>\ncmd: ls -la /app\ntimeout_secs: 60\n</bash>");
    assert_eq!(Json::Object(action.args), json!({"cmd": "ls -la /app", "timeout_secs": 60, "background": false}));
}

#[test]
fn several_actions_in_order_with_prose() {
    let text = "I'll look first.\n<bash>\ncmd: ls\n</bash>\nThen read:\n<file>\naction: read\npath: /app/a.py\n</file>\n<todo>\naction: view\n</todo>\n<finish>\nmessage: done\n</finish>\n";
    let all = actions(text);
    let tools: Vec<&str> = all.iter().map(|a| a.tool.as_str()).collect();
    assert_eq!(tools, ["bash", "file", "todo", "finish"]);
    assert_eq!(all[1].args["path"], "/app/a.py");
    assert_eq!(all[1].args["limit"], 2000);
}

#[test]
fn inline_tags() {
    let all = actions("<bash>cmd: ls</bash><finish>message: ok</finish>");
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].args["cmd"], "ls");
    assert_eq!(all[1].args["message"], "ok");
    assert_eq!(cmd("Run this: <bash>pwd</bash> please"), "pwd");
}

#[test]
fn crlf() {
    let action = one("<file>\r\naction: write\r\npath: /a\r\ncontent: |\r\n  x\r\n  y\r\n</file>\r\n");
    assert_eq!(action.args["content"], "x\ny\n");
}

#[test]
fn code_fences() {
    assert_eq!(cmd("```xml\n<bash>\ncmd: ls\n</bash>\n```"), "ls");
    assert_eq!(cmd("<bash>\n```yaml\ncmd: ls\n```\n</bash>"), "ls");
    assert_eq!(cmd("<bash>\n```\nls -la\n```\n</bash>"), "ls -la");
    // Fence around the tags and the closing tag missing.
    assert_eq!(cmd("```xml\n<bash>\ncmd: ls\n```"), "ls");
    assert_eq!(cmd("```\n<bash>\ncmd: ls\n```\n"), "ls");
    // A fence inside a block scalar is content.
    let action = one("<file>\naction: write\npath: /r.md\ncontent: |\n  # T\n  ```\n  code\n  ```\n</file>");
    assert_eq!(action.args["content"], "# T\n```\ncode\n```\n");
}

#[test]
fn missing_final_closing_tag() {
    assert_eq!(cmd("<bash>\ncmd: ls /tmp\n"), "ls /tmp");
    let action = one("Done.\n<finish>\nmessage: all tests pass");
    assert_eq!(action.args["message"], "all tests pass");
    // The body of an unclosed tag stops at the next tool tag line.
    let all = actions("<bash>\ncmd: ls\n<finish>\nmessage: done\n</finish>");
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].args["cmd"], "ls");
    // Or at the same tag opened again before the close.
    let all = actions("<bash>\ncmd: ls\n<bash>\ncmd: pwd\n</bash>");
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].args["cmd"], "pwd");
}

#[test]
fn mistyped_closing_tag() {
    assert_eq!(cmd("<bash>\ncmd: ls\n</bash\n"), "ls");
    assert_eq!(cmd("<bash>\nls -la\n</ bash>"), "ls -la");
    let all = actions("<bash>\ncmd: ls\n</bash\n<finish>\nmessage: ok\n</finish>");
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].args["cmd"], "ls");
}

#[test]
fn unclosed_stops_at_the_next_tool_line() {
    let all = actions("<bash>\ncmd: ls\n<finish>\nmessage: x\n</finish>\n<bash>\ncmd: pwd\n</bash>");
    let tools: Vec<&str> = all.iter().map(|a| a.tool.as_str()).collect();
    assert_eq!(tools, ["bash", "finish", "bash"]);
    assert_eq!(all[0].args["cmd"], "ls");
    // An empty unclosed tag before another tool is a stutter.
    assert_eq!(one("<bash>\n<finish>\nmessage: x\n</finish>").tool, "finish");
    // At the end of the reply an empty tag is an error.
    let out = parse("<bash>\n");
    assert!(out.errors[0].message.contains("missing required argument `cmd`"));
}

#[test]
fn yaml_alias_bombs_and_bad_aliases_are_errors() {
    let mut body = String::from("action: write\npath: /a\nx0: &a0 [x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        body.push_str(&format!("x{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
    }
    let out = parse(&format!("<file>\n{body}</file>"));
    assert!(out.actions.is_empty());
    assert_eq!(out.errors.len(), 1);
    let out = parse("<file>\naction: *nope\npath: /a\n</file>");
    assert!(out.actions.is_empty());
    assert_eq!(out.errors.len(), 1);
}

#[test]
fn stuttered_opening_tag() {
    assert_eq!(cmd("<bash>\n<bash>\ncmd: ls\n</bash>"), "ls");
}

#[test]
fn prose_mentions_are_not_actions() {
    assert_eq!(cmd("I will use the <bash> tool.\n<bash>\ncmd: ls\n</bash>"), "ls");
    let out = parse("I could use the <bash> tool later.");
    assert!(out.actions.is_empty());
    assert_eq!(out.errors.len(), 1);
    assert_eq!(out.errors[0].tool, None);
}

#[test]
fn whitespace_and_indentation() {
    assert_eq!(cmd("   <bash>   \n     cmd: ls\n     timeout_secs: 5\n   </bash>   "), "ls");
    let action = one(
        "  <file>\n    action: write\n    path: /a.py\n    content: |\n      def f():\n          return 1\n  </file>",
    );
    assert_eq!(action.args["content"], "def f():\n    return 1\n");
    // Tab indentation of the whole body.
    assert_eq!(cmd("<bash>\n\tcmd: ls\n\ttimeout_secs: 5\n</bash>"), "ls");
}

#[test]
fn block_scalars() {
    let c = cmd("<bash>\ncmd: |\n  cd /app\n  echo \"a: b\" # not a comment\n  make test\ntimeout_secs: 300\n</bash>");
    assert_eq!(c, "cd /app\necho \"a: b\" # not a comment\nmake test\n");
    let action = one("<file>\naction: edit\npath: /a\nold_string: |-\n  x = 1\nnew_string: |-\n  x = 2\n</file>");
    assert_eq!(action.args["old_string"], "x = 1");
    assert_eq!(action.args["new_string"], "x = 2");
}

#[test]
fn raw_bash_bodies() {
    assert_eq!(cmd("<bash>ls -la</bash>"), "ls -la");
    assert_eq!(cmd("<bash>\ncd /app\nmake\n</bash>"), "cd /app\nmake");
    // YAML would read these as mappings with unknown keys.
    assert_eq!(cmd("<bash>\necho a: b\n</bash>"), "echo a: b");
    assert_eq!(cmd("<bash>\npython -c 'print(1)' # run\n</bash>"), "python -c 'print(1)' # run");
    assert_eq!(cmd("<bash>\"ls -la\"</bash>"), "ls -la");
    let action = one("<bash>\ngrep -n foo: src/*.rs\n</bash>");
    assert_eq!(action.args["timeout_secs"], 120);
}

#[test]
fn misnamed_raw_argument_is_an_error() {
    let out = parse("<bash>\ncommand: ls\n</bash>");
    assert!(out.actions.is_empty());
    let e = &out.errors[0];
    assert!(e.message.contains("unknown argument `command` (did you mean `cmd`?)"), "{}", e.message);
    let out = parse("<bash>\nscript: ls -la\n</bash>");
    assert!(out.errors[0].message.contains("unknown argument `script`"));
    // Also when YAML cannot read the body.
    let out = parse("<bash>\ncommand: echo a: b\n</bash>");
    assert!(out.errors[0].message.contains("unknown argument `command`"));
    // Shell text that merely looks like a key is still a command.
    assert_eq!(cmd("<bash>\nFOO_BAR: baz\n</bash>"), "FOO_BAR: baz");
}

#[test]
fn cmd_with_colon_is_literal() {
    assert_eq!(cmd("<bash>\ncmd: echo a: b\n</bash>"), "echo a: b");
    let action = one("<bash>\ncmd: echo a: b\ntimeout_secs: 60\n</bash>");
    assert_eq!(action.args["cmd"], "echo a: b");
    assert_eq!(action.args["timeout_secs"], 60);
    let action = one("<bash>\ntimeout_secs: 9\ncmd: curl http://x:80/a: b\n</bash>");
    assert_eq!(action.args["cmd"], "curl http://x:80/a: b");
    assert_eq!(action.args["timeout_secs"], 9);
    assert_eq!(cmd("<bash>\ncmd: [ -f x ] && echo y\n</bash>"), "[ -f x ] && echo y");
    assert_eq!(cmd("<bash>\ncmd: [ -f x ]\n</bash>"), "[ -f x ]");
    assert_eq!(cmd("<bash>\ncmd: ls *.py\n</bash>"), "ls *.py");
    assert_eq!(cmd("<bash>\ncmd: *.sh\n</bash>"), "*.sh");
    assert_eq!(cmd("<bash>\ncmd: 1.10\n</bash>"), "1.10");
    assert_eq!(cmd("<bash>\ncmd: \"a\" b\n</bash>"), "\"a\" b");
}

#[test]
fn cmd_literal_multiline() {
    // A heredoc whose lines are not valid YAML.
    let text = "<bash>\ncmd: cat > f.py << 'EOF'\ndef f(x):\n    return x\nEOF\n</bash>";
    assert_eq!(cmd(text), "cat > f.py << 'EOF'\ndef f(x):\n    return x\nEOF");
    // A block with a tab inside, which YAML rejects as indentation.
    let text = "<bash>\ncmd: |\n  printf 'a\\n'\n\techo b: c\ntimeout_secs: 5\n</bash>";
    let action = one(text);
    // Mixed space/tab indentation has no common prefix to remove.
    assert_eq!(action.args["cmd"], "  printf 'a\\n'\n\techo b: c");
}

#[test]
fn bash_errors() {
    let out = parse("<bash>\ncmd: ls\ntimeout_secs: soon\n</bash>");
    assert!(out.actions.is_empty());
    assert_eq!(out.errors.len(), 1);
    let e = &out.errors[0];
    assert_eq!(e.tool.as_deref(), Some("bash"));
    assert!(e.message.contains("timeout_secs"), "{}", e.message);
    assert!(e.snippet.starts_with("<bash>"), "{}", e.snippet);
    assert_eq!(e.example, "<bash>\ncmd: ls -la /app\n</bash>");
    let out = parse("<bash>\ncmd: ls\ntimeout: 5\n</bash>");
    assert!(out.errors[0].message.contains("unknown argument `timeout`"));
    let out = parse("<bash>\n</bash>");
    assert!(out.errors[0].message.contains("missing required argument `cmd`"));
    let out = parse("<bash>\n# just a comment\n</bash>");
    assert!(out.errors[0].message.contains("missing required argument `cmd`"));
}

#[test]
fn invalid_yaml_for_a_strict_tool() {
    let out = parse("<file>\naction: write\npath: /a\ncontent: a: b\n</file>");
    assert!(out.actions.is_empty());
    let e = &out.errors[0];
    assert_eq!(e.tool.as_deref(), Some("file"));
    assert!(e.message.contains("not valid YAML"), "{}", e.message);
    assert!(e.message.contains("`|` block"), "{}", e.message);
    assert!(e.example.starts_with("<file>\naction: read"), "{}", e.example);
    let obs = e.to_observation();
    assert!(obs.starts_with("<parse_error>\nerror: the body of <file>"), "{obs}");
}

#[test]
fn invalid_args_for_a_strict_tool() {
    let out = parse("<file>\naction: edit\npath: /a\nold_string: x\n</file>");
    assert!(out.errors[0].message.contains("`new_string`"));
    let out = parse("<search>\naction: find\npattern: x\n</search>");
    assert!(out.errors[0].message.contains("one of: grep, glob, ls"));
}

#[test]
fn errors_and_actions_together() {
    let out =
        parse("<bash>\ncmd: ls\n</bash>\n<file>\naction: nope\npath: /a\n</file>\n<finish>\nmessage: x\n</finish>");
    assert_eq!(out.actions.len(), 2);
    assert_eq!(out.errors.len(), 1);
    assert_eq!(out.errors[0].tool.as_deref(), Some("file"));
}

#[test]
fn think_is_ignored() {
    let all = actions("<think>\nMaybe <bash>rm -rf /</bash>? No.\n</think>\n<bash>\ncmd: ls\n</bash>");
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].args["cmd"], "ls");
    // Unclosed <think>: only the tag is ignored.
    assert_eq!(cmd("<think>\nI should list files.\n<bash>\ncmd: ls\n</bash>"), "ls");
    // A </think> without <think>: everything before it was reasoning.
    assert_eq!(cmd("Let me try <bash>cmd: rm x</bash>\n</think>\n<bash>\ncmd: ls\n</bash>"), "ls");
    // Only thinking: no action.
    let out = parse("<think>\nhmm\n</think>");
    assert!(out.actions.is_empty());
    assert_eq!(out.errors.len(), 1);
    // A think tag inside a body is content.
    assert_eq!(cmd("<bash>\ncmd: grep -c '<think>' log.txt\n</bash>"), "grep -c '<think>' log.txt");
}

#[test]
fn made_up_observations_are_skipped() {
    let all = actions("<bash>\ncmd: ls\n</bash>\n<bash_output>\n<bash>cmd: rm -rf /</bash>\n</bash_output>\n<finish>\nmessage: ok\n</finish>");
    let tools: Vec<&str> = all.iter().map(|a| a.tool.as_str()).collect();
    assert_eq!(tools, ["bash", "finish"]);
}

#[test]
fn qwen_tool_call() {
    let action = one("<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>");
    assert_eq!(Json::Object(action.args), json!({"cmd": "ls", "timeout_secs": 120, "background": false}));
    // Arguments as a JSON string.
    let action = one("<tool_call>\n{\"name\": \"file\", \"arguments\": \"{\\\"action\\\": \\\"read\\\", \\\"path\\\": \\\"/a\\\"}\"}\n</tool_call>");
    assert_eq!(action.tool, "file");
    assert_eq!(action.args["path"], "/a");
    // Same result as the XML form.
    let xml = one("<bash>\ncmd: ls\n</bash>");
    let native = one("<tool_call>{\"name\":\"bash\",\"arguments\":{\"cmd\":\"ls\"}}</tool_call>");
    assert_eq!(xml, native);
    // Mixed with XML actions, in order.
    let all = actions("<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>\n<finish>\nmessage: ok\n</finish>");
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].tool, "finish");
}

#[test]
fn qwen_tool_call_variants() {
    // OpenAI-style wrapper, `parameters`, a list, a raw string for bash, no close.
    assert_eq!(one("<tool_call>{\"function\": {\"name\": \"bash\", \"arguments\": \"{\\\"cmd\\\": \\\"pwd\\\"}\"}}</tool_call>").args["cmd"], "pwd");
    assert_eq!(
        one("<tool_call>{\"name\": \"bash\", \"parameters\": {\"cmd\": \"pwd\"}}</tool_call>").args["cmd"],
        "pwd"
    );
    assert_eq!(actions("<tool_call>[{\"name\": \"bash\", \"arguments\": {\"cmd\": \"a\"}}, {\"name\": \"finish\", \"arguments\": {\"message\": \"b\"}}]</tool_call>").len(), 2);
    assert_eq!(one("<tool_call>{\"name\": \"bash\", \"arguments\": \"ls -la\"}</tool_call>").args["cmd"], "ls -la");
    assert_eq!(one("<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n").args["cmd"], "ls");
    assert_eq!(
        one("<tool_call>\n```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n```\n</tool_call>").args
            ["cmd"],
        "ls"
    );
    // YAML-flow leniency: single quotes.
    assert_eq!(one("<tool_call>{'name': 'bash', 'arguments': {'cmd': 'ls'}}</tool_call>").args["cmd"], "ls");
    // The arguments beside the name (small models write this).
    assert_eq!(one("<tool_call>{\"name\": \"finish\", \"message\": \"done\"}</tool_call>").args["message"], "done");
}

#[test]
fn qwen_tool_call_errors() {
    let out = parse("<tool_call>{\"name\": \"python\", \"arguments\": {\"code\": \"1\"}}</tool_call>");
    assert!(out.actions.is_empty());
    assert_eq!(out.errors.len(), 1);
    assert!(out.errors[0].message.contains("unknown tool `python`"));
    assert!(out.errors[0].message.contains("bash, file, search"));
    assert!(out.errors[0].snippet.starts_with("<tool_call>"));
    let out = parse("<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}</tool_call>");
    let e = &out.errors[0];
    assert_eq!(e.tool.as_deref(), Some("bash"));
    assert!(e.message.contains("did you mean `cmd`"), "{}", e.message);
    assert!(e.example.starts_with("<tool_call>\n{"), "{}", e.example);
    assert!(e.example.contains("\"cmd\":\"ls -la /app\""), "{}", e.example);
    let out = parse("<tool_call>{not json at all: [</tool_call>");
    assert!(out.errors[0].message.contains("not valid JSON"));
    let out = parse("<tool_call>{\"arguments\": {}}</tool_call>");
    assert!(out.errors[0].message.contains("no `name`"));
    let out = parse("<tool_call>{\"name\": \"file\", \"arguments\": 3}</tool_call>");
    assert!(out.errors[0].message.contains("JSON object"));
}

#[test]
fn native_call_api() {
    let action = parse_native_call("finish", &json!({"message": "ok"}), specs()).unwrap();
    assert_eq!(action.args["message"], "ok");
    let action = parse_native_call("bash", &json!("{\"cmd\": \"ls\"}"), specs()).unwrap();
    assert_eq!(action.args["cmd"], "ls");
    let err = parse_native_call("finish", &Json::Null, specs()).unwrap_err();
    assert!(err.message.contains("message"));
    assert!(err.snippet.contains("finish"));
}

#[test]
fn no_action_error() {
    let out = parse("I think the answer is 42.");
    assert!(out.actions.is_empty());
    assert_eq!(out.errors.len(), 1);
    let e = &out.errors[0];
    assert_eq!(e.tool, None);
    assert!(e.message.contains("no action found"), "{}", e.message);
    assert!(e.message.contains("bash, file, search, todo, scratchpad, finish"));
    assert!(e.example.contains("<bash>\ncmd: ls -la /app\n</bash>"), "{}", e.example);
    assert!(e.example.contains("<finish>"), "{}", e.example);
    assert_eq!(e.snippet, "I think the answer is 42.");
    let out = parse("");
    assert_eq!(out.errors[0].snippet, "(an empty reply)");
}

#[test]
fn unknown_tags_only_matter_without_actions() {
    let out = parse("<python>\nprint(1)\n</python>");
    assert_eq!(out.errors.len(), 1);
    let e = &out.errors[0];
    assert!(e.message.contains("<python> is not a tool"), "{}", e.message);
    assert!(e.message.contains("bash, file"), "{}", e.message);
    assert!(e.snippet.starts_with("<python>"));
    let out = parse("<python>x</python>\n<execute>y</execute>");
    assert!(out.errors[0].message.contains("<python>, <execute> are not a tool"));
    // With a valid action, unknown tags are just text.
    assert_eq!(cmd("<python>x</python>\n<bash>\ncmd: ls\n</bash>"), "ls");
    // With a malformed known tool, only its error is reported.
    let out = parse("<python>x</python>\n<bash>\ntimeout_secs: x\n</bash>");
    assert_eq!(out.errors.len(), 1);
    assert_eq!(out.errors[0].tool.as_deref(), Some("bash"));
}

#[test]
fn every_example_parses() {
    for spec in specs() {
        for example in &spec.examples {
            let text = spec.render_call(&example.body);
            let action = one(&text);
            assert_eq!(action.tool, spec.name);
            // And through the native path.
            let native = one(&native_example_for(spec, example));
            assert_eq!(native, action, "{}", spec.name);
        }
    }
}

/// The body of a tag action in a Markdown fence of the given language.
pub(super) fn fenced(lang: &str, body: &str) -> String {
    format!("```{lang}\n{}\n```", body.trim_end_matches('\n'))
}

#[test]
fn every_example_parses_fenced() {
    for spec in specs() {
        for example in &spec.examples {
            let tag = one(&spec.render_call(&example.body));
            assert_eq!(one(&fenced(&spec.name, &example.body)), tag, "{}", spec.name);
            assert_eq!(one(&fenced(&spec.name.to_uppercase(), &example.body)), tag, "{}", spec.name);
            let tilde = format!("~~~~{}\n{}~~~~\n", spec.name, example.body);
            assert_eq!(one(&tilde), tag, "{}", spec.name);
        }
    }
}

fn native_example_for(spec: &ToolSpec, example: &super::super::ToolExample) -> String {
    let arguments: Json = serde_yaml::from_str(&example.body).unwrap();
    format!("<tool_call>{}</tool_call>", json!({"name": spec.name, "arguments": arguments}))
}

#[test]
fn too_many_actions_are_capped() {
    let text = "<bash>cmd: ls</bash>\n".repeat(MAX_ITEMS + 10);
    let out = parse(&text);
    assert_eq!(out.actions.len(), MAX_ITEMS);
    assert_eq!(out.errors.len(), 1);
    assert!(out.errors[0].message.contains("too many actions"));
}

#[test]
fn snippets_are_truncated_on_char_boundaries() {
    let text = format!("<file>\naction: write\npath: x\ncontent: a: {}\n</file>", "é".repeat(400));
    let out = parse(&text);
    let snippet = &out.errors[0].snippet;
    assert!(snippet.len() < SNIPPET_MAX + 20, "{}", snippet.len());
    assert!(snippet.ends_with("[truncated]"));
    assert_eq!(truncate_to("ééé", 3), "é");
}

#[test]
fn helpers() {
    assert_eq!(dedent(&["  a", "", "    b"]), "a\n\n  b");
    assert_eq!(dedent(&["\ta", "\t\tb"]), "a\n\tb");
    assert_eq!(dedent(&[" a", "\tb"]), " a\n\tb");
    assert!(is_fence("```yaml"));
    assert!(is_fence("  ```"));
    assert!(!is_fence("```yaml and text"));
    assert!(is_block_indicator("|-"));
    assert!(is_block_indicator(">+2"));
    assert!(!is_block_indicator("|x"));
    assert!(read_tag("<bash>", 0).is_some());
    assert!(read_tag("<ba sh>", 0).is_none());
    assert!(read_tag("<", 0).is_none());
    assert!(read_tag("</", 0).is_none());
    assert!(read_tag("<1a>", 0).is_none());
}

#[test]
fn fenced_tool_blocks() {
    // As Qwen2.5-Coder writes them.
    assert_eq!(cmd("```bash\ncmd: echo \"Hello, world!\" > hello.txt\n```"), "echo \"Hello, world!\" > hello.txt");
    let action = one("I'll finish.\n```finish\nmessage: done\n```\n");
    assert_eq!(action, one("<finish>\nmessage: done\n</finish>"));
    let action = one("```file\naction: write\npath: a.txt\ncontent: |\n  hi\n```");
    assert_eq!(Json::Object(action.args.clone())["content"], "hi\n");
    assert_eq!(action, one("<file>\naction: write\npath: a.txt\ncontent: |\n  hi\n</file>"));
    // The same as the tag, with every argument.
    assert_eq!(one("```bash\ncmd: ls\ntimeout_secs: 60\n```"), one("<bash>\ncmd: ls\ntimeout_secs: 60\n</bash>"));
    // Any case, tildes, longer fences, indentation up to three spaces, blank lines.
    assert_eq!(cmd("```Bash\ncmd: ls\n```"), "ls");
    assert_eq!(cmd("~~~bash\ncmd: ls\n~~~"), "ls");
    assert_eq!(cmd("````bash\ncmd: ls\n````"), "ls");
    assert_eq!(cmd("``` bash \n\ncmd: ls\n\n```"), "ls");
    assert_eq!(cmd("1. List:\n   ```bash\n   cmd: ls\n   ```\n2. Done."), "ls");
    // YAML comments before the first argument.
    assert_eq!(cmd("```bash\n# list the files\n\ncmd: ls\n```"), "ls");
    assert_eq!(cmd("```bash\n# list\ncmd: echo a: b\n```"), "echo a: b");
    // `cmd:` with a colon in it is read literally, as in a tag.
    assert_eq!(cmd("```bash\ncmd: echo a: b\n```"), "echo a: b");
    // Unclosed at the end of the reply.
    assert_eq!(cmd("```bash\ncmd: ls /tmp\n"), "ls /tmp");
    // In reply order with tags.
    let all =
        actions("<bash>cmd: a</bash>\n```bash\ncmd: b\n```\n<todo>\naction: view\n</todo>\n```finish\nmessage: c\n```");
    let tools: Vec<&str> = all.iter().map(|a| a.tool.as_str()).collect();
    assert_eq!(tools, ["bash", "bash", "todo", "finish"]);
    assert_eq!(all[1].args["cmd"], "b");
    assert_eq!(all[3].args["message"], "c");
}

#[test]
fn fenced_tool_block_ends() {
    // Closed by a fence at least as long, of the same character, with no language:
    // here the tag is in the block, which is then not valid YAML.
    let out = parse("````finish\nmessage: a\n```\n<bash>\ncmd: ls\n</bash>\n````");
    assert!(out.actions.is_empty(), "{:#?}", out.actions);
    assert_eq!(out.errors.len(), 1);
    assert_eq!(out.errors[0].tool.as_deref(), Some("finish"));
    let all = actions("```bash\ncmd: ls\n~~~\n```\n```finish\nmessage: x\n```");
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!(all[1].tool, "finish");
    // A fence in a `content: |` block is indented more than the opening one: content.
    let action = one("```file\naction: write\npath: /r.md\ncontent: |\n  # T\n  ```\n  code\n  ```\n```");
    assert_eq!(action.args["content"], "# T\n```\ncode\n```\n");
    // A fence indented more than the opening one does not close the block.
    let action = one("```file\naction: write\npath: /r.md\ncontent: |\n  ```\n  x\n  ```\n");
    assert_eq!(action.args["content"], "```\nx\n```\n");
    // Unclosed: the block stops at the next line that opens a tool tag.
    let all = actions("```bash\ncmd: ls\n<finish>\nmessage: done\n</finish>");
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!(all[0].args["cmd"], "ls");
    assert_eq!(all[1].args["message"], "done");
}

#[test]
fn plain_code_fences_are_not_actions() {
    for text in [
        "```bash\nls -la\n```",
        "```bash\n\nls -la\ncmd: ls\n```",
        "```python\nprint(1)\n```",
        "```yaml\ncmd: ls\n```",
        "```sh\ncmd: ls\n```",
        "```shell\ncmd: ls\n```",
        "```\ncmd: ls\n```",
        "```bash title\ncmd: ls\n```",
        "```tool_call\ncmd: ls\n```",
        // The first key must be an argument of the tool, spelt right.
        "```bash\nfile:\n  action: write\n  path: a\n```",
        "```bash\ncommand: ls\n```",
        "```bash\nCMD: ls\n```",
        "```finish\ncmd: ls\n```",
        "```bash\n- cmd: ls\n```",
        "```bash\n# install\npip install x: y\n```",
        "```bash\n# only a comment\n```",
        "```bash\n\n",
        // Not fences: four spaces of indentation, text before the fence, two backticks.
        "    ```bash\n    cmd: ls\n    ```",
        "Run ```bash\ncmd: ls\n```",
        "``bash\ncmd: ls\n``",
        // Inside another code block.
        "````markdown\n```bash\ncmd: ls\n```\n````",
        "```text\n```bash\ncmd: ls\n```",
        "~~~\n```bash\ncmd: ls\n```\n~~~",
        // Inside <think>.
        "<think>\n```bash\ncmd: ls\n```\n</think>",
        "```bash\ncmd: ls\n```\n</think>\nNothing to do.",
    ] {
        let out = parse(text);
        assert!(out.actions.is_empty(), "{text:?} → {:#?}", out.actions);
        assert_eq!(out.errors.len(), 1, "{text:?} → {:#?}", out.errors);
        assert_eq!(out.errors[0].tool, None, "{text:?} → {:#?}", out.errors);
    }
    // After a closed code block, a tool block counts.
    assert_eq!(cmd("```python\nprint(1)\n```\n```bash\ncmd: ls\n```"), "ls");
    assert_eq!(cmd("```text\n```bash\ncmd: rm -rf /\n```\n```bash\ncmd: ls\n```"), "ls");
    assert_eq!(cmd("<think>\n```bash\ncmd: rm -rf /\n```\n</think>\n```bash\ncmd: ls\n```"), "ls");
}

#[test]
fn no_action_error_mentions_code_blocks() {
    let out = parse("Let me list the files:\n```bash\nls -la\n```");
    let e = &out.errors[0];
    assert!(e.message.starts_with("no action found"), "{}", e.message);
    assert!(e.message.contains("```bash") && e.message.contains("`name: value`"), "{}", e.message);
    assert!(e.example.contains("<bash>\ncmd: ls -la /app\n</bash>"), "{}", e.example);
    let out = parse("<python>\nprint(1)\n</python>\n```python\nprint(1)\n```");
    assert!(out.errors[0].message.contains("<python> is not a tool"), "{}", out.errors[0].message);
    assert!(out.errors[0].message.contains("```bash"), "{}", out.errors[0].message);
    // No hint without a code block.
    let out = parse("I think the answer is 42.");
    assert!(!out.errors[0].message.contains("```"), "{}", out.errors[0].message);
}

#[test]
fn fenced_tool_errors() {
    let out = parse("```file\naction: explode\n```");
    assert!(out.actions.is_empty());
    assert_eq!(out.errors.len(), 1);
    let e = &out.errors[0];
    assert_eq!(e.tool.as_deref(), Some("file"));
    assert!(e.message.contains("action"), "{}", e.message);
    assert!(e.message.contains("read"), "{}", e.message);
    assert_eq!(e.snippet, "```file\naction: explode\n```");
    assert!(e.example.starts_with("<file>\naction: read"), "{}", e.example);
    let out = parse("```file\naction: write\npath: /a\ncontent: a: b\n```");
    assert!(out.errors[0].message.contains("not valid YAML"), "{}", out.errors[0].message);
    let out = parse("```bash\ncmd: ls\ntimeout_secs: soon\n```");
    assert_eq!(out.errors[0].tool.as_deref(), Some("bash"));
    assert!(out.errors[0].message.contains("timeout_secs"), "{}", out.errors[0].message);
    let out = parse("```bash\ntimeout_secs: 5\n```");
    assert!(out.errors[0].message.contains("missing required argument `cmd`"), "{}", out.errors[0].message);
    // Errors and actions in order, whatever their form.
    let out = parse("```bash\ncmd: ls\n```\n```search\naction: find\n```\n<finish>\nmessage: x\n</finish>");
    assert_eq!(out.actions.len(), 2);
    assert_eq!(out.errors.len(), 1);
    assert_eq!(out.errors[0].tool.as_deref(), Some("search"));
}

#[test]
fn fences_and_tags_are_not_counted_twice() {
    // A tag inside a tool block is its content.
    let action = one("```file\naction: write\npath: a.md\ncontent: |\n  <bash>\n  cmd: ls\n  </bash>\n```");
    assert_eq!(action.args["content"], "<bash>\ncmd: ls\n</bash>\n");
    assert_eq!(cmd("```bash\ncmd: grep -c '<finish>' log\n```"), "grep -c '<finish>' log");
    // A tag in any other code block still counts, once.
    assert_eq!(cmd("```text\n<bash>\ncmd: ls\n</bash>\n```"), "ls");
    assert_eq!(cmd("```bash\n<bash>\ncmd: ls\n</bash>\n```"), "ls");
    assert_eq!(cmd("```<bash>\ncmd: ls\n</bash>"), "ls");
    // A fence inside a tag keeps its meaning there.
    assert_eq!(cmd("<bash>\n```bash\ncmd: ls\n```\n</bash>"), "ls");
    assert_eq!(one("<finish>\n```finish\nmessage: x\n```\n</finish>").args["message"], "x");
}

#[test]
fn too_many_fenced_actions_are_capped() {
    let text = "```bash\ncmd: ls\n```\n".repeat(MAX_ITEMS + 10);
    let out = parse(&text);
    assert_eq!(out.actions.len(), MAX_ITEMS);
    assert_eq!(out.errors.len(), 1);
    assert!(out.errors[0].message.contains("too many actions"));
    assert!(out.errors[0].snippet.starts_with("```bash"), "{}", out.errors[0].snippet);
}

#[test]
fn fence_helpers() {
    let line = read_fence_line("  ````Bash \nx", 0).unwrap();
    assert_eq!((line.indent, line.ch, line.run, line.info, line.run_end, line.line_end), (2, b'`', 4, "Bash", 6, 12));
    assert!(!line.closes(b'`', 3));
    assert!(read_fence_line(" ````", 0).unwrap().closes(b'`', 4));
    assert!(read_fence_line("```", 0).unwrap().closes(b'`', 3));
    assert!(!read_fence_line("````", 0).unwrap().closes(b'~', 3));
    assert!(!read_fence_line("```", 0).unwrap().closes(b'`', 4));
    assert!(read_fence_line("~~~ a`b", 0).is_some());
    assert!(read_fence_line("``` a`b", 0).is_none());
    assert!(read_fence_line("    ```", 0).is_none());
    assert!(read_fence_line("``", 0).is_none());
    assert!(read_fence_line("", 0).is_none());
    assert_eq!(next_fence_line("a\n```\n", 0), Some(2));
    assert_eq!(next_fence_line("a```\n```", 1), Some(5));
    assert_eq!(next_fence_line("```", 0), Some(0));
    assert_eq!(next_fence_line("```", 3), None);
    assert_eq!(next_fence_line("x", 5), None);
    let text = "```\n  ````\n~~~\n```x\n```\n";
    let closers = Closers::new(text);
    assert_eq!(closers.find(0, b'`', 3, 3), Some((0, 4)));
    assert_eq!(closers.find(1, b'`', 3, 3), Some((4, 11)));
    assert_eq!(closers.find(1, b'`', 3, 0), Some((20, 24)));
    assert_eq!(closers.find(1, b'`', 4, 3), Some((4, 11)));
    assert_eq!(closers.find(1, b'`', 5, 3), None);
    assert_eq!(closers.find(0, b'~', 3, 0), Some((11, 15)));
    assert_eq!(closers.find(12, b'~', 3, 0), None);
    assert_eq!(closers.find(100, b'`', 3, 9), None);
}

#[test]
fn written_calls_read_any_tool_without_a_tool_set() {
    let calls = super::written_calls("\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n").unwrap();
    assert_eq!(calls, vec![("get_weather".to_string(), serde_json::json!({"city": "Paris"}))]);
    let calls =
        super::written_calls(r#"[{"function": {"name": "a", "arguments": "{\"x\": 1}"}}, {"name": "b", "x": 2}]"#)
            .unwrap();
    assert_eq!(calls[0], ("a".to_string(), serde_json::json!("{\"x\": 1}")));
    assert_eq!(calls[1], ("b".to_string(), serde_json::json!({"x": 2})));
    assert!(super::written_calls("{\"arguments\": {}}").unwrap_err().contains("no `name`"));
    assert!(super::written_calls("not json at all").is_err());
}
