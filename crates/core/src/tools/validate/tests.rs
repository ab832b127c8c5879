//! Unit tests of argument validation against the built-in tool specs.

use serde_json::{json, Map, Value as Json};
use serde_yaml::Value as Yaml;

use super::coerce::to_json;
use super::suggest::{edit_distance, is_subsequence};
use super::{shorten, validate_args};
use crate::tools::ToolSpecs;

fn specs() -> ToolSpecs {
    ToolSpecs::builtin().unwrap()
}

fn check(tool: &str, yaml: &str) -> Result<Map<String, Json>, String> {
    let specs = specs();
    let value: Yaml = serde_yaml::from_str(yaml).unwrap();
    validate_args(specs.get(tool).unwrap(), value)
}

#[test]
fn bash_defaults_are_filled() {
    let args = check("bash", "cmd: ls").unwrap();
    assert_eq!(Json::Object(args), json!({"cmd": "ls", "timeout_secs": 120, "background": false}));
}

#[test]
fn gentle_coercions() {
    let args = check("bash", "cmd: 123\ntimeout_secs: '60'\nbackground: 'yes'").unwrap();
    assert_eq!(args["cmd"], "123");
    assert_eq!(args["timeout_secs"], 60);
    assert_eq!(args["background"], true);
    let args = check("bash", "cmd: true\ntimeout_secs: 30.0\nbackground: 0").unwrap();
    assert_eq!(args["cmd"], "true");
    assert_eq!(args["timeout_secs"], 30);
    assert_eq!(args["background"], false);
    let args = check("bash", "cmd: x\nbackground: \"True\"").unwrap();
    assert_eq!(args["background"], true);
    // Tags are ignored.
    let args = check("bash", "cmd: !shell ls").unwrap();
    assert_eq!(args["cmd"], "ls");
}

#[test]
fn bad_types_are_explained() {
    let err = check("bash", "cmd: ls\ntimeout_secs: soon").unwrap_err();
    assert!(err.contains("`timeout_secs` must be a whole number"), "{err}");
    assert!(err.contains("soon"), "{err}");
    let err = check("bash", "cmd: ls\ntimeout_secs: 1.5").unwrap_err();
    assert!(err.contains("whole number"), "{err}");
    let err = check("bash", "cmd: ls\nbackground: maybe").unwrap_err();
    assert!(err.contains("`background` must be true or false"), "{err}");
    let err = check("finish", "message: [a, b]").unwrap_err();
    assert!(err.contains("`message` must be a string, but it is a list"), "{err}");
    assert!(err.contains("`|` block"), "{err}");
}

#[test]
fn unknown_key_names_key_and_allowed() {
    let err = check("bash", "cmd: ls\ntimeout: 5").unwrap_err();
    assert!(err.contains("unknown argument `timeout`"), "{err}");
    assert!(err.contains("did you mean `timeout_secs`"), "{err}");
    assert!(err.contains("cmd, timeout_secs, background"), "{err}");
    let err = check("bash", "command: ls").unwrap_err();
    assert!(err.contains("did you mean `cmd`"), "{err}");
    // Both problems are reported at once.
    assert!(err.starts_with("2 problems"), "{err}");
    assert!(err.contains("missing required argument `cmd`"), "{err}");
    let err = check("file", "action: read\nfile_path: /a").unwrap_err();
    assert!(err.contains("did you mean `path`"), "{err}");
    let err = check("bash", "cmd: ls\nzzzz: 1").unwrap_err();
    assert!(!err.contains("did you mean"), "{err}");
}

#[test]
fn non_mapping_body() {
    let specs = specs();
    let err = validate_args(specs.get("file").unwrap(), Yaml::String("x".into())).unwrap_err();
    assert!(err.contains("must be YAML `name: value` lines"), "{err}");
    assert!(err.contains("action, path"), "{err}");
    let err = validate_args(specs.get("finish").unwrap(), serde_yaml::from_str("[1]").unwrap()).unwrap_err();
    assert!(err.contains("it is a list"), "{err}");
}

#[test]
fn empty_body_reports_missing() {
    let err = validate_args(specs().get("finish").unwrap(), Yaml::Null).unwrap_err();
    assert!(err.contains("missing required argument `message`"), "{err}");
    let err = check("finish", "message:").unwrap_err();
    assert!(err.contains("has no value"), "{err}");
}

#[test]
fn enum_checks_and_canonicalises() {
    let err = check("file", "action: delete\npath: /a").unwrap_err();
    assert!(err.contains("`action` must be one of: read, write, edit, multi_edit, metadata; got `delete`"), "{err}");
    let args = check("file", "action: Read\npath: /a").unwrap();
    assert_eq!(args["action"], "read");
    let args = check("file", "action: multi-edit\npath: /a\nedits: []").unwrap();
    assert_eq!(args["action"], "multi_edit");
}

#[test]
fn required_for_depends_on_discriminator() {
    let err = check("file", "action: write\npath: /a").unwrap_err();
    assert!(err.contains("missing argument `content`, required when `action` is `write`"), "{err}");
    let err = check("file", "action: edit\npath: /a\nold_string: x").unwrap_err();
    assert!(err.contains("`new_string`"), "{err}");
    assert!(check("file", "action: read\npath: /a").is_ok());
    let err = check("todo", "action: complete").unwrap_err();
    assert!(err.contains("`id`"), "{err}");
    assert!(check("todo", "action: view").is_ok());
    let err = check("search", "action: glob").unwrap_err();
    assert!(err.contains("`pattern`"), "{err}");
}

#[test]
fn defaults_only_where_they_apply() {
    let args = check("file", "action: read\npath: /a").unwrap();
    assert_eq!(Json::Object(args), json!({"action": "read", "path": "/a", "offset": 1, "limit": 2000}));
    let args = check("file", "action: write\npath: /a\ncontent: hi").unwrap();
    assert_eq!(Json::Object(args), json!({"action": "write", "path": "/a", "content": "hi"}));
    let args = check("search", "action: ls").unwrap();
    assert_eq!(Json::Object(args), json!({"action": "ls", "path": "."}));
    let args = check("search", "action: grep\npattern: foo").unwrap();
    assert_eq!(Json::Object(args), json!({"action": "grep", "pattern": "foo", "path": ".", "ignore_case": false}));
}

#[test]
fn a_missing_discriminator_is_inferred_from_the_other_arguments_when_that_is_unambiguous() {
    let args = check("file", "path: /a\ncontent: hi").unwrap();
    assert_eq!(args["action"], "write");
    let args = check("file", "path: /a\nold_string: x\nnew_string: y").unwrap();
    assert_eq!(args["action"], "edit");
    // Nothing but the path: the first action, which needs nothing more.
    let args = check("file", "path: /a").unwrap();
    assert_eq!((args["action"].as_str(), args["offset"].as_i64()), (Some("read"), Some(1)));
    let args = check("todo", "text: write the tests").unwrap();
    assert_eq!(args["action"], "add");
    // `text` belongs to both `write` and `append`: no guess.
    let err = check("scratchpad", "text: notes").unwrap_err();
    assert!(err.contains("missing required argument `action`"), "{err}");
    // Arguments of two different actions: no guess.
    let err = check("file", "path: /a\ncontent: hi\nold_string: x").unwrap_err();
    assert!(err.contains("`action`"), "{err}");
}

#[test]
fn missing_discriminator() {
    let err = check("scratchpad", "text: a").unwrap_err();
    assert!(err.contains("missing required argument `action`"), "{err}");
    assert!(err.contains("one of: write, append"), "{err}");
    // An invalid discriminator is reported alone (no guesses about the rest).
    let err = check("file", "action: fly\npath: /a").unwrap_err();
    assert!(!err.contains("problems"), "{err}");
}

#[test]
fn multi_edit_items_are_validated() {
    let yaml = "action: multi_edit\npath: /a\nedits:\n  - old_string: a\n    new_string: b\n  - old_string: c\n    new_string: d\n    replace_all: true\n";
    let args = check("file", yaml).unwrap();
    assert_eq!(
        args["edits"],
        json!([
            {"old_string": "a", "new_string": "b", "replace_all": false},
            {"old_string": "c", "new_string": "d", "replace_all": true}
        ])
    );
    let yaml = "action: multi_edit\npath: /a\nedits:\n  - old_string: a\n  - old: c\n    new_string: d\n";
    let err = check("file", yaml).unwrap_err();
    assert!(err.contains("missing required argument `edits[0].new_string`"), "{err}");
    assert!(err.contains("unknown argument `edits[1].old`"), "{err}");
    let err = check("file", "action: multi_edit\npath: /a\nedits: [x]").unwrap_err();
    assert!(err.contains("`edits[0]` must be a mapping"), "{err}");
    let err = check("file", "action: multi_edit\npath: /a\nedits: x").unwrap_err();
    assert!(err.contains("`edits` must be a list"), "{err}");
}

#[test]
fn block_scalars_keep_newlines() {
    let args = check("file", "action: write\npath: /a\ncontent: |\n  line 1\n    line 2\n").unwrap();
    assert_eq!(args["content"], "line 1\n  line 2\n");
}

#[test]
fn untyped_values_convert() {
    assert_eq!(
        to_json(serde_yaml::from_str("{1: [a, 2.5, ~]}").unwrap(), "x").unwrap(),
        json!({"1": ["a", 2.5, null]})
    );
    assert!(to_json(serde_yaml::from_str(".nan").unwrap(), "x").is_err());
    assert!(to_json(serde_yaml::from_str("{[1]: 2}").unwrap(), "x").is_err());
}

#[test]
fn messages_stay_short() {
    let keys: String = (0..50).map(|i| format!("k{i}: 1\n")).collect();
    let err = check("finish", &keys).unwrap_err();
    assert!(err.starts_with("51 problems"), "{err}");
    assert!(err.ends_with("… and 43 more"), "{err}");
    let long_key = format!("{}: 1", "x".repeat(1000));
    let err = check("finish", &format!("message: a\n{long_key}")).unwrap_err();
    assert!(err.len() < 300, "{}", err.len());
}

#[test]
fn helpers() {
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("", "ab"), 2);
    assert!(is_subsequence("cmd", "command"));
    assert!(!is_subsequence("cmd", "mcd"));
    assert_eq!(shorten(&"é".repeat(100)).chars().count(), 31);
}

#[test]
fn a_list_for_a_shell_command_is_an_argv_or_the_lines_of_a_script() {
    let args = check("bash", "cmd: [python3, -c, \"print('a b')\"]").unwrap();
    assert_eq!(args["cmd"], "python3 -c 'print('\\''a b'\\'')'");
    let args = check("bash", "cmd:\n  - cd /app\n  - make test").unwrap();
    assert_eq!(args["cmd"], "cd /app\nmake test");
    let err = check("bash", "cmd: [ls, {a: 1}]").unwrap_err();
    assert!(err.contains("`cmd` must be a string"), "{err}");
    // The call written again inside its own command: the command inside.
    let args =
        check("bash", r#"cmd: '{"cmd":"chmod +x process_data.sh", "timeout_secs": 60, "background": false}'"#).unwrap();
    assert_eq!(args["cmd"], "chmod +x process_data.sh");
    for plain in ["{ ls; pwd; }", "{\"not\": \"a command key\"}", "echo '{\"cmd\": 1}'"] {
        let yaml = format!("cmd: '{}'", plain.replace('\'', "''"));
        assert_eq!(check("bash", &yaml).unwrap()["cmd"], plain, "{plain}");
    }
    // Other string arguments still refuse lists.
    let err = check("finish", "message: [a, b]").unwrap_err();
    assert!(err.contains("must be a string, but it is a list"), "{err}");
}
