//! Robustness tests of the action parser: adversarial 1 MB inputs stay linear, a
//! 100 000-case proptest checks that it never panics and returns only known tools, and
//! property tests of fenced tool blocks.

use proptest::prelude::*;

use super::tests::{cmd, fenced, parse, specs};
use super::{parse_actions, MAX_ITEMS, SNIPPET_MAX};
use crate::tools::validate_args;

/// The parse time of `text(size)` grows linearly: four times the input takes well under
/// sixteen times as long (a quadratic parser's ratio). Compared with itself on the same
/// machine, not with a wall-clock limit, so a loaded machine does not fail it: the two
/// sizes are timed in turn, three times each, and the fastest of each compared.
fn assert_linear(what: &str, text: impl Fn(usize) -> String) {
    const MB: usize = 1 << 20;
    let time = |input: &str| {
        let start = std::time::Instant::now();
        let out = parse(input);
        assert!(out.actions.len() + out.errors.len() <= MAX_ITEMS + 1);
        start.elapsed()
    };
    let (small_text, large_text) = (text(MB / 4), text(MB));
    let (mut small, mut large) = (std::time::Duration::MAX, std::time::Duration::MAX);
    for _ in 0..3 {
        small = small.min(time(&small_text));
        large = large.min(time(&large_text));
    }
    let bound = small * 10 + std::time::Duration::from_millis(100);
    assert!(large <= bound, "{what}: 1 MB took {large:?}, 256 KB {small:?} (not linear)");
}

/// Adversarial 1 MB inputs stay linear (no quadratic behaviour).
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
        "```bash\ncmd: x\n",
        "```bash\n",
        "```bash\nls\n",
        "~~~\n",
        "```bash\n  cmd: a\nb\n</think>\n",
        "```bash\n# c\n",
        "```bash\ncmd: x\n<bash>\n",
        "```bash\ncmd: x\n```\n",
        "```bash\ncmd: x\n````\n```\n",
        "`",
        "\n```",
    ];
    for pattern in patterns {
        assert_linear(&format!("{pattern:?}"), |size| pattern.repeat(size / pattern.len()));
    }
    // Unclosed tool blocks with ever shorter fences, then many lines that close none.
    assert_linear("shrinking fences", |size| {
        let mut text = String::new();
        for run in (3..1200usize.min(size / 1000)).rev() {
            text.push_str(&"`".repeat(run));
            text.push_str("bash\ncmd: x\n<bash>\n");
        }
        text.push_str(&"```x\n".repeat(size.saturating_sub(text.len()) / 5));
        text
    });
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
        "```bash\n",
        "```file\n",
        "~~~finish\n",
        "```\n",
        "\n```\n",
        "````\n",
        "   ```bash\n",
        "```Bash\n",
        "```python\n",
        "~~~",
        "# ",
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

/// An element shaped like a fenced code block: an opening fence with a language,
/// fragments, and a closing fence that may be missing, shorter or indented.
fn fence_block() -> impl Strategy<Value = String> {
    let langs = prop::sample::select(vec!["bash", "file", "finish", "todo", "search", "BASH", "", "python", "yaml"]);
    let opens = prop::sample::select(vec!["```", "````", "~~~", "  ```", "    ```", "``"]);
    let ends = prop::sample::select(vec!["", "\n```", "\n````\n", "\n~~~\n", "\n  ```", "```"]);
    (opens, langs, prop::collection::vec(fragment(), 0..10), ends)
        .prop_map(|(open, lang, parts, end)| format!("{open}{lang}\n{}{end}", parts.concat()))
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Nothing to persist: a failure prints the minimal input.
        failure_persistence: None,
        ..ProptestConfig::with_cases(100_000)
    })]
    #[test]
    fn never_panics_and_returns_known_tools(
        parts in prop::collection::vec(prop_oneof![4 => fragment(), 2 => block(), 1 => fence_block()], 0..12)
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

/// One line of text with no tag, fence or line break in it.
fn plain_line() -> impl Strategy<Value = String> {
    prop_oneof![
        "[^<`~\n\r]{0,30}",
        prop::sample::select(vec!["cmd: ls", "message: done", "action: write", "path: a.txt", "  - x", "# c", ""])
            .prop_map(str::to_string),
    ]
}

/// A value for a one-line argument.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[^\n\r]{0,20}",
        prop::sample::select(vec!["ls -la", "echo a: b", "'quoted'", "60", "true", "[ -f x ]", "*.py", "é🦀", "|"])
            .prop_map(str::to_string),
    ]
}

/// A body of `name: value` lines for a tool, starting with one of its arguments.
fn tool_body() -> impl Strategy<Value = (String, String)> {
    let names: Vec<String> = specs().names().into_iter().map(str::to_string).collect();
    prop::sample::select(names).prop_flat_map(|name| {
        let args: Vec<String> =
            specs().get(&name).map_or_else(Vec::new, |s| s.arguments.iter().map(|a| a.name.clone()).collect());
        let lines = prop::collection::vec((prop::sample::select(args), value()), 1..4);
        (Just(name), lines).prop_map(|(name, lines)| {
            let body: String = lines.iter().map(|(key, value)| format!("{key}: {value}\n")).collect();
            (name, body)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(3_000)
    })]
    /// A body that is an action as a tag is the same action in a fence of its tool.
    #[test]
    fn fenced_body_is_the_same_action_as_the_tag((name, body) in tool_body(), upper in any::<bool>()) {
        let spec = specs().get(&name).unwrap();
        let tag = parse(&spec.render_call(&body));
        let lang = if upper { name.to_uppercase() } else { name.clone() };
        let fence = parse(&fenced(&lang, &body));
        if tag.errors.is_empty() {
            prop_assert_eq!(&fence, &tag);
        } else {
            // The same verdict, from the same tool.
            prop_assert!(fence.actions.is_empty(), "{:?}", fence);
            prop_assert_eq!(fence.errors.len(), 1);
            prop_assert_eq!(fence.errors[0].tool.as_deref(), Some(name.as_str()));
            prop_assert_eq!(&fence.errors[0].message, &tag.errors[0].message);
        }
    }

    /// A fenced block whose language is not a tool's name is never an action.
    #[test]
    fn other_languages_are_never_actions(
        lang in "[A-Za-z0-9_+.-]{0,10}",
        fence in prop::sample::select(vec!["```", "~~~", "````"]),
        lines in prop::collection::vec(plain_line(), 0..6),
        closed in any::<bool>(),
    ) {
        prop_assume!(specs().iter().all(|s| !s.name.eq_ignore_ascii_case(&lang)));
        let close = if closed { format!("\n{fence}") } else { String::new() };
        let text = format!("Here:\n{fence}{lang}\n{}{close}\nThat is all.", lines.join("\n"));
        let out = parse(&text);
        prop_assert!(out.actions.is_empty(), "{:?} → {:?}", text, out.actions);
        prop_assert_eq!(out.errors.len(), 1);
        prop_assert_eq!(out.errors[0].tool.as_deref(), None);
    }

    /// Text in a tool's fence whose first line is not `name:` is never an action.
    #[test]
    fn plain_text_in_a_tool_fence_is_never_an_action(
        name in prop::sample::select(vec!["bash", "file", "finish", "Bash"]),
        first in "[^<`~#\n\r]{1,30}",
        lines in prop::collection::vec(plain_line(), 0..6),
        closed in any::<bool>(),
    ) {
        let key_line = first.trim_start().split_once(':').is_some_and(|(key, rest)| {
            !key.is_empty()
                && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && (rest.is_empty() || rest.starts_with([' ', '\t']))
        });
        prop_assume!(!key_line && !first.trim().is_empty());
        let close = if closed { "\n```" } else { "" };
        let text = format!("```{name}\n{first}\n{}{close}", lines.join("\n"));
        let out = parse(&text);
        prop_assert!(out.actions.is_empty(), "{:?} → {:?}", text, out.actions);
        prop_assert_eq!(out.errors.len(), 1);
        prop_assert_eq!(out.errors[0].tool.as_deref(), None);
    }
}
