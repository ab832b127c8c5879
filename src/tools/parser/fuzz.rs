//! Robustness tests of the action parser: adversarial 1 MB inputs stay linear, and a
//! 100 000-case proptest checks that it never panics and returns only known tools.

use proptest::prelude::*;

use super::tests::{cmd, parse, specs};
use super::{parse_actions, MAX_ITEMS, SNIPPET_MAX};
use crate::tools::validate_args;

/// Adversarial 1 MB inputs finish quickly (no quadratic behaviour).
#[test]
fn large_inputs_are_linear() {
    const MB: usize = 1 << 20;
    let patterns = [
        "<bash>\n",
        "<bash>",
        "x <bash>",
        "<think>",
        "</think>",
        "<bash>a</bash>",
        "<python>",
        "<tool_call>{",
        "```\n",
        "cmd: a: b\n",
        "<bash>\ncmd: x\n",
        "</bash>",
        "é<",
        "<bash_output>",
        "  \n",
        "[",
        "<file>\n",
        "<",
    ];
    for pattern in patterns {
        let text = pattern.repeat(MB / pattern.len());
        let start = std::time::Instant::now();
        let out = parse(&text);
        let elapsed = start.elapsed();
        assert!(elapsed < std::time::Duration::from_secs(5), "{pattern:?} took {elapsed:?}");
        assert!(out.actions.len() + out.errors.len() <= MAX_ITEMS + 1);
    }
    // One huge valid body.
    let text = format!("<bash>\ncmd: |\n{}</bash>", "  echo hello\n".repeat(MB / 13));
    let c = cmd(&text);
    assert!(c.len() > MB / 2);
}

fn fragment() -> impl Strategy<Value = String> {
    let fixed = prop::sample::select(vec![
        "<bash>",
        "</bash>",
        "<think>",
        "</think>",
        "```",
        "```yaml\n",
        "```xml",
        "cmd:",
        "cmd: ",
        "\r\n",
        "\n",
        "|",
        "|-",
        "  ",
        "\t",
        ":",
        ": ",
        "<tool_call>{",
        "</tool_call>",
        "\"name\": \"bash\"",
        "\"arguments\": {\"cmd\": \"ls\"}}",
        "\"name\": ",
        "<file>",
        "</file>",
        "action: ",
        "read",
        "write",
        "path: /a",
        "content: |\n  x",
        "<finish>",
        "</finish>",
        "message: ",
        "<python>",
        "</python>",
        "- ",
        "'",
        "\"",
        "#",
        "<",
        ">",
        "/",
        "&a",
        "*a",
        "é",
        "🦀",
        "\u{0}",
        "\r",
        "timeout_secs: 5",
        "<bash_output>",
        "<todo>",
        "action: add",
        "id: x",
        "{",
        "}",
        "[",
        "]",
        ",",
        "<search>",
        "edits:",
        "!!binary",
        "---",
        "%YAML",
        "\u{feff}",
        "ls -la",
        "cmd: ls\n",
        "action: read\npath: /a\n",
        "message: done\n",
        "content: |\n  a: b\n",
        "edits:\n  - old_string: a\n    new_string: b\n",
        "timeout_secs: '5'\n",
        "action: complete\nid: 2\n",
        "background: yes\n",
        "action: multi_edit\n",
        "pattern: \"*.py\"\n",
        "action: grep\n",
        "\n  ",
    ]);
    prop_oneof![
        6 => fixed.prop_map(str::to_string),
        1 => prop::collection::vec(any::<char>(), 0..4)
            .prop_map(|chars| chars.into_iter().collect::<String>()),
    ]
}

/// An element shaped like an action: an opening tag, fragments, and a closing tag
/// that may be missing or broken.
fn block() -> impl Strategy<Value = String> {
    let names = prop::sample::select(vec![
        "bash",
        "file",
        "search",
        "todo",
        "scratchpad",
        "finish",
        "tool_call",
        "think",
        "python",
        "bash_output",
    ]);
    let leads = prop::sample::select(vec!["", "\n", "  ", "```yaml\n", "\r\n", "\n  "]);
    let ends = prop::sample::select(vec!["", "</>", "\n</>\n", "\n</", "\n```"]);
    (names, leads, prop::collection::vec(fragment(), 0..10), ends).prop_map(|(name, lead, parts, end)| {
        let end = end.replace("</", &format!("</{name}"));
        format!("<{name}>{lead}{}{end}", parts.concat())
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Nothing to persist: a failure prints the minimal input.
        failure_persistence: None,
        ..ProptestConfig::with_cases(100_000)
    })]
    #[test]
    fn never_panics_and_returns_known_tools(
        parts in prop::collection::vec(prop_oneof![2 => fragment(), 1 => block()], 0..12)
    ) {
        let text = parts.concat();
        let out = parse_actions(&text, specs());
        for action in &out.actions {
            let spec = specs().get(&action.tool);
            prop_assert!(spec.is_some(), "unknown tool {}", action.tool);
            // Validated arguments validate again to themselves.
            let again = serde_yaml::to_value(&action.args).unwrap();
            let revalidated = validate_args(spec.unwrap(), again);
            prop_assert_eq!(revalidated, Ok(action.args.clone()));
        }
        prop_assert!(!out.actions.is_empty() || !out.errors.is_empty());
        for error in &out.errors {
            prop_assert!(error.snippet.len() <= SNIPPET_MAX + 20);
            prop_assert!(error.message.len() < 4000, "{}", error.message);
        }
    }
}
