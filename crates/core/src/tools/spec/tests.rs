//! Unit tests of tool spec loading, checking and the built-in specs.

use super::{SpecError, ToolSpec, ToolSpecs};

const MINIMAL: &str = "name: demo\ndescription: A demo.\narguments:\n  - name: x\n    type: string\n    required: true\n    description: X.\nexamples:\n  - description: Ex\n    body: |\n      x: hi\n";

fn invalid_field(result: Result<ToolSpec, SpecError>) -> String {
    match result {
        Err(SpecError::Invalid { field, .. }) => field,
        other => panic!("expected an Invalid error, got {other:?}"),
    }
}

#[test]
fn builtin_loads_in_order() {
    let specs = ToolSpecs::builtin().unwrap();
    assert_eq!(specs.names(), ["bash", "file", "search", "todo", "scratchpad", "finish"]);
    assert_eq!(specs.len(), 6);
    assert!(!specs.is_empty());
    assert_eq!(specs.iter().count(), 6);
    assert_eq!((&specs).into_iter().count(), 6);
    let bash = specs.get("bash").unwrap();
    assert_eq!(bash.raw_body_arg.as_deref(), Some("cmd"));
    assert_eq!(bash.arg("timeout_secs").unwrap().default, Some(serde_json::json!(120)));
    assert_eq!(specs.get("file").unwrap().discriminator.as_deref(), Some("action"));
    assert!(specs.get("python").is_none());
}

#[test]
fn example_action_wraps_first_example() {
    let specs = ToolSpecs::builtin().unwrap();
    assert_eq!(specs.get("bash").unwrap().example_action(), "<bash>\ncmd: ls -la /app\n</bash>");
    assert_eq!(
        specs.get("finish").unwrap().example_action(),
        "<finish>\nmessage: Fixed the off-by-one in parse_range; all 42 tests in tests/ pass.\n</finish>"
    );
}

#[test]
fn every_builtin_has_good_descriptions_and_examples() {
    for spec in &ToolSpecs::builtin().unwrap() {
        assert!(spec.description.len() > 40, "{}", spec.name);
        assert!((1..=3).contains(&spec.examples.len()), "{}", spec.name);
        for arg in &spec.arguments {
            assert!(!arg.description.trim().is_empty());
        }
    }
}

#[test]
fn applies_and_required() {
    let specs = ToolSpecs::builtin().unwrap();
    let file = specs.get("file").unwrap();
    let offset = file.arg("offset").unwrap();
    assert!(offset.applies(Some("read")));
    assert!(!offset.applies(Some("write")));
    assert!(!offset.applies(None));
    let content = file.arg("content").unwrap();
    assert!(content.applies(Some("write")));
    assert!(content.is_required(Some("write")));
    assert!(!content.is_required(Some("read")));
    assert!(file.arg("path").unwrap().applies(None));
    assert_eq!(file.arg("edits").unwrap().type_label(), "list of object");
}

#[test]
fn json_schema_lists_required_and_enums() {
    let specs = ToolSpecs::builtin().unwrap();
    let schema = specs.get("file").unwrap().json_schema();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], serde_json::json!(["action", "path"]));
    assert_eq!(schema["properties"]["action"]["enum"][0], "read");
    assert_eq!(schema["properties"]["edits"]["type"], "array");
    assert_eq!(schema["properties"]["edits"]["items"]["required"], serde_json::json!(["old_string", "new_string"]));
    assert_eq!(schema["properties"]["limit"]["default"], 2000);
}

#[test]
fn minimal_spec_parses() {
    let spec = ToolSpec::from_yaml("demo.yaml", MINIMAL).unwrap();
    assert_eq!(spec.name, "demo");
    assert_eq!(spec.example_action(), "<demo>\nx: hi\n</demo>");
}

#[test]
fn unknown_field_is_rejected_with_file_name() {
    let yaml = MINIMAL.replace("description: A demo.", "description: A demo.\ncolor: red");
    let err = ToolSpec::from_yaml("demo.yaml", &yaml).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("demo.yaml"), "{text}");
    assert!(text.contains("color"), "{text}");
}

#[test]
fn unknown_arg_field_and_type_are_rejected() {
    let yaml = MINIMAL.replace("required: true", "required: true\n    optional: false");
    let text = ToolSpec::from_yaml("demo.yaml", &yaml).unwrap_err().to_string();
    assert!(text.contains("optional"), "{text}");
    let yaml = MINIMAL.replace("type: string", "type: text");
    let text = ToolSpec::from_yaml("demo.yaml", &yaml).unwrap_err().to_string();
    assert!(text.contains("text"), "{text}");
}

#[test]
fn file_name_must_match() {
    let err = ToolSpec::from_yaml("tools/other.yaml", MINIMAL).unwrap_err();
    assert_eq!(invalid_field(Err(err)), "name");
    // Without a .yaml name there is nothing to compare.
    assert!(ToolSpec::from_yaml("<inline>", MINIMAL).is_ok());
}

#[test]
fn inconsistent_specs_are_rejected() {
    let cases = [
        (MINIMAL.replace("x: hi", "y: hi"), "examples[0].body"),
        (MINIMAL.replace("x: hi", "x: [a"), "examples[0].body"),
        (MINIMAL.replace("required: true", "default: 3"), "arguments[0].default"),
        (MINIMAL.replace("required: true", "required_for: [a]"), "arguments[0].required_for"),
        (MINIMAL.replace("required: true", "required: true\n    enum: [a]"), "examples[0].body"),
        (MINIMAL.replace("type: string", "type: integer\n    enum: [a]"), "arguments[0].enum"),
        (MINIMAL.replace("arguments:", "discriminator: x\narguments:"), "discriminator"),
        (MINIMAL.replace("arguments:", "raw_body_arg: y\narguments:"), "raw_body_arg"),
        (MINIMAL.replace("name: x", "name: X"), "arguments[0].name"),
        (MINIMAL.replace("description: Ex", "description: ''"), "examples[0].description"),
        (MINIMAL.replace("type: string", "type: integer\n    items: string"), "arguments[0].items"),
    ];
    for (yaml, field) in cases {
        let result = ToolSpec::from_yaml("demo.yaml", &yaml);
        assert_eq!(invalid_field(result), field, "{yaml}");
    }
}

#[test]
fn reserved_and_duplicate_names_are_rejected() {
    let yaml = MINIMAL.replace("name: demo", "name: think");
    assert_eq!(invalid_field(ToolSpec::from_yaml("think.yaml", &yaml)), "name");
    let err = ToolSpecs::from_yaml_files([("demo.yaml", MINIMAL), ("demo.yml", MINIMAL)]).unwrap_err();
    assert!(err.to_string().contains("already defined"), "{err}");
    let spec = ToolSpec::from_yaml("demo.yaml", MINIMAL).unwrap();
    assert!(ToolSpecs::from_specs(vec![spec.clone(), spec.clone()]).is_none());
    assert_eq!(ToolSpecs::from_specs(vec![spec]).unwrap().names(), ["demo"]);
}

#[test]
fn bad_yaml_names_the_file() {
    let err = ToolSpec::from_yaml("demo.yaml", "name: [").unwrap_err();
    assert!(matches!(err, SpecError::Yaml { .. }));
    assert!(err.to_string().starts_with("tool spec demo.yaml:"), "{err}");
}

#[test]
fn a_narrowed_set_keeps_finish_and_names_an_unknown_tool() {
    let all = ToolSpecs::builtin().unwrap();
    assert_eq!(all.only(&["bash".into()]).unwrap().names(), vec!["bash", "finish"]);
    assert_eq!(all.only(&["finish".into(), "file".into()]).unwrap().names(), vec!["file", "finish"]);
    let e = all.only(&["bash".into(), "browser".into()]).unwrap_err();
    assert!(e.contains("`browser` is not a tool") && e.contains("scratchpad"), "{e}");
}

#[test]
fn the_compact_set_keeps_three_tools_in_under_two_thirds_of_the_text() {
    let full = ToolSpecs::builtin().unwrap();
    let compact = full.compact();
    assert_eq!(compact.names(), vec!["bash", "file", "finish"]);
    let words = |s: &ToolSpecs| {
        serde_json::to_string(&s.definitions().iter().map(|d| &d.parameters).collect::<Vec<_>>()).unwrap().len()
            + s.iter().map(|t| t.description.len()).sum::<usize>()
    };
    assert!(words(&compact) * 3 < words(&full) * 2, "{} against {}", words(&compact), words(&full));
    for spec in compact.iter() {
        assert!(!spec.description.contains('\n') && spec.examples.len() <= 1, "{spec:?}");
    }
    // The arguments stay: only their descriptions shrink.
    let file = |s: &ToolSpecs| s.get("file").unwrap().arguments.iter().map(|a| a.name.clone()).collect::<Vec<_>>();
    assert_eq!(file(&compact), file(&full));
}
