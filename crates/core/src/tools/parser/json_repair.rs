//! Reading a tool call's JSON the way small models write it. Two mistakes have only one
//! possible meaning and are repaired: Python's `"""` strings, and raw line breaks or
//! tabs inside a string. YAML flow syntax (single quotes, bare words) is accepted as
//! the lenient superset it is. Anything else stays an error.

use serde_json::Value as Json;

/// Parses `body` as JSON, else as repaired JSON, else as YAML; the error is JSON's own
/// message for the body as written.
pub fn lenient_json(body: &str) -> Result<Json, String> {
    let json_error = match serde_json::from_str::<Json>(body) {
        Ok(value) => return Ok(value),
        Err(e) => e.to_string(),
    };
    if let Some(repaired) = repair(body) {
        if let Ok(value) = serde_json::from_str::<Json>(&repaired) {
            return Ok(value);
        }
    }
    serde_yaml::from_str::<Json>(body).map_err(|_| json_error)
}

/// The body with `"""…"""` strings rewritten as JSON strings and control characters
/// inside strings escaped; `None` when there was nothing to repair.
fn repair(body: &str) -> Option<String> {
    let mut out = String::with_capacity(body.len() + 16);
    let mut changed = false;
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = body;
    while let Some(c) = rest.chars().next() {
        if !in_string && rest.starts_with("\"\"\"") {
            let after = &rest[3..];
            let end = after.find("\"\"\"")?;
            out.push_str(&Json::String(dedent(&after[..end])).to_string());
            rest = &after[end + 3..];
            changed = true;
            continue;
        }
        rest = &rest[c.len_utf8()..];
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            } else if (c as u32) < 0x20 {
                changed = true;
                match c {
                    '\n' => out.push_str("\\n"),
                    '\t' => out.push_str("\\t"),
                    '\r' => out.push_str("\\r"),
                    other => out.push_str(&format!("\\u{:04x}", other as u32)),
                }
                continue;
            }
        } else if c == '"' {
            in_string = true;
        }
        out.push(c);
    }
    changed.then_some(out)
}

/// A triple-quoted block's text as Python's `textwrap.dedent` would give it, without
/// the line break after the opening quotes and the indentation before the closing ones.
fn dedent(text: &str) -> String {
    let text = text.strip_prefix('\n').unwrap_or(text);
    let text = match text.rfind('\n') {
        Some(i) if text[i + 1..].trim().is_empty() => &text[..i],
        _ => text,
    };
    let indent = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches([' ', '\t']).len())
        .min()
        .unwrap_or(0);
    text.lines().map(|l| l.get(indent..).unwrap_or(l.trim_start())).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn python_triple_quoted_strings_become_json_strings() {
        let body = "{\n  \"name\": \"bash\",\n  \"arguments\": {\n    \"cmd\": \"\"\"\n      cd /app\n      echo \"hi\" > x\n    \"\"\",\n    \"timeout_secs\": 5\n  }\n}";
        let value = lenient_json(body).unwrap();
        assert_eq!(value["arguments"], json!({"cmd": "cd /app\necho \"hi\" > x", "timeout_secs": 5}));
    }

    #[test]
    fn raw_line_breaks_and_tabs_inside_strings_are_escaped() {
        let body = "{\"name\": \"file\", \"arguments\": {\"content\": \"a\n\tb\", \"path\": \"/x\"}}";
        assert_eq!(lenient_json(body).unwrap()["arguments"]["content"], "a\n\tb");
    }

    #[test]
    fn other_mistakes_stay_errors_with_jsons_message() {
        let err = lenient_json("{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"").unwrap_err();
        assert!(err.contains("EOF"), "{err}");
        // An unclosed triple quote is not guessed at.
        assert!(lenient_json("{\"cmd\": \"\"\"ls }").is_err());
    }

    #[test]
    fn yaml_flow_syntax_is_still_read() {
        assert_eq!(lenient_json("{name: bash, arguments: {cmd: 'ls -l'}}").unwrap()["arguments"]["cmd"], "ls -l");
    }

    proptest! {
        /// Valid JSON is never changed, and no input panics.
        #[test]
        fn valid_json_reads_as_itself(s in ".{0,40}", n in 0i64..1000) {
            let value = json!({"name": "bash", "arguments": {"cmd": s, "n": n}});
            prop_assert_eq!(lenient_json(&value.to_string()).unwrap(), value);
        }

        #[test]
        fn never_panics(s in "[{}\"\\\\\n\t a:,\\[\\]]{0,60}") {
            let _ = lenient_json(&s);
        }
    }
}
