//! `docs/ARCHITECTURE.md`'s crate map against the workspace: every crate has a row, and
//! each row's "depends on" column names exactly the workspace crates its manifest uses.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Each crate's normal (not dev or build) dependencies on other workspace crates.
fn workspace_arrows() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let names: BTreeSet<String> = packages.iter().map(|p| p["name"].as_str().unwrap().to_string()).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .filter(|n| names.contains(n))
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

/// The crate map's rows: the first backticked name of the first column, and the
/// backticked names of the last.
fn documented_arrows() -> BTreeMap<String, BTreeSet<String>> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/ARCHITECTURE.md")).unwrap();
    let ticked = |cell: &str| -> Vec<String> { cell.split('`').skip(1).step_by(2).map(str::to_string).collect() };
    doc.lines()
        .filter(|l| l.starts_with("| `agent"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').collect();
            let name = ticked(cells[0]).into_iter().next().unwrap();
            let deps = ticked(cells[cells.len() - 1]).into_iter().collect();
            (name, deps)
        })
        .collect()
}

#[test]
fn the_crate_map_matches_the_manifests() {
    let actual = workspace_arrows();
    let documented = documented_arrows();
    assert!(actual.len() >= 10, "{actual:?}");
    for (name, deps) in &actual {
        let Some(doc) = documented.get(name) else {
            panic!("docs/ARCHITECTURE.md has no row for the crate `{name}`");
        };
        assert_eq!(
            doc, deps,
            "the row of `{name}` in docs/ARCHITECTURE.md names other dependencies than its Cargo.toml"
        );
    }
    for name in documented.keys() {
        assert!(
            actual.contains_key(name),
            "docs/ARCHITECTURE.md has a row for `{name}`, which is not a workspace crate"
        );
    }
    // The seams: nothing below the binary reaches up, and the lean crates link no engine.
    for lean in ["agent-protocol", "agent-sandbox", "agent-llm", "agent-core", "agent-bench", "agent-tui"] {
        assert!(
            !actual[lean].contains("agent-local") && !actual[lean].contains("agent-train"),
            "{lean} depends on an engine crate"
        );
    }
    assert!(!actual["agent-llm"].contains("agent-core"), "agent-llm sits below agent-core");
}
