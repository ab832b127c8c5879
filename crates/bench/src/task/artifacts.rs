//! Harbor's `artifacts` (in `task.toml` and in a step): container paths copied into the
//! trial's `artifacts/` folder (a step's into `steps/NAME/artifacts/`) after the run.
//! An entry is a path, or a table with `source` and `destination` (a path inside the
//! artifacts folder; default the source's last name). `exclude`, and a `service` other
//! than `main`, are not honoured here: the entry is copied from `main` whole, with a
//! notice.

use std::collections::BTreeSet;

use super::super::error::TaskError;

/// One path to copy out of the agent's container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The container path (absolute, or relative to the container's working directory).
    pub source: String,
    /// Where it goes inside the artifacts folder: plain names joined by `/`.
    pub destination: String,
}

/// The file Harbor and this harness write beside the artifacts.
pub const MANIFEST: &str = "manifest.json";

/// Reads the `artifacts` list at `field` (for errors and notices) of `shown`; notices
/// for the parts not honoured go to `notices`.
pub(super) fn parse(
    shown: &str,
    field: &str,
    raw: Option<&toml::Value>,
    notices: &mut Vec<String>,
) -> Result<Vec<Artifact>, TaskError> {
    let Some(raw) = raw else { return Ok(Vec::new()) };
    let bad = |at: String, reason: String| TaskError::BadField { path: shown.into(), field: at, reason };
    let toml::Value::Array(items) = raw else {
        return Err(bad(field.into(), "expected a list of container paths or {source, destination} tables".into()));
    };
    let mut out: Vec<Artifact> = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let (source, destination) = match item {
            toml::Value::String(s) => (s.clone(), None),
            toml::Value::Table(t) => {
                let text = |key: &str| match t.get(key) {
                    None => Ok(None),
                    Some(toml::Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(bad(format!("{at}.{key}"), "expected a string".into())),
                };
                let source = text("source")?.ok_or_else(|| bad(format!("{at}.source"), "missing".into()))?;
                let ignored: Vec<&str> = t
                    .iter()
                    .filter(|(k, v)| match k.as_str() {
                        "source" | "destination" => false,
                        "service" => v.as_str() != Some("main"),
                        "exclude" => !matches!(v, toml::Value::Array(a) if a.is_empty()),
                        _ => true,
                    })
                    .map(|(k, _)| k.as_str())
                    .collect();
                if !ignored.is_empty() {
                    notices.push(format!(
                        "{at}: ignoring {} (`{source}` is copied whole from the agent's container)",
                        ignored.join(", ")
                    ));
                }
                (source, text("destination")?.filter(|d| !d.is_empty()))
            }
            _ => return Err(bad(at, "expected a container path or a {source, destination} table".into())),
        };
        if source.trim().is_empty() || source.split('/').any(|p| p == "..") {
            return Err(bad(at, format!("`{source}` is not a container path without `..`")));
        }
        let destination = match destination {
            Some(d) => d,
            None => source.trim_end_matches('/').rsplit('/').next().unwrap_or_default().to_string(),
        };
        let plain = !destination.is_empty()
            && !destination.starts_with('/')
            && destination.split('/').all(|p| !p.is_empty() && p != "." && p != ".." && !p.contains('\\'));
        if !plain || destination == MANIFEST {
            return Err(bad(
                at,
                format!(
                    "the destination `{destination}` must be a relative path of plain names inside the artifacts \
                     folder (not `{MANIFEST}`); give `destination` for a source like `/`"
                ),
            ));
        }
        // Two entries in one place would write over each other.
        if let Some(clash) = seen.iter().find(|d: &&String| overlaps(d, &destination)) {
            return Err(bad(at, format!("the destination `{destination}` overlaps `{clash}` of an earlier entry")));
        }
        seen.insert(destination.clone());
        out.push(Artifact { source, destination });
    }
    Ok(out)
}

/// Whether one destination is the other or lies inside it.
fn overlaps(a: &str, b: &str) -> bool {
    a == b || b.starts_with(&format!("{a}/")) || a.starts_with(&format!("{b}/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_list(text: &str) -> (Result<Vec<Artifact>, TaskError>, Vec<String>) {
        let v: toml::Table = toml::from_str(text).unwrap();
        let mut notices = Vec::new();
        (parse("task.toml", "artifacts", v.get("artifacts"), &mut notices), notices)
    }

    #[test]
    fn paths_and_tables_with_their_destinations() {
        let (got, notices) = parse_list(
            "artifacts = [\"/app/out/\", \"/var/log/build.log\", \
             {source = \"/app/report.json\", destination = \"reports/final.json\"}, \
             {source = \"/data\", service = \"main\", exclude = []}]\n",
        );
        let got = got.unwrap();
        let pairs: Vec<(&str, &str)> = got.iter().map(|a| (a.source.as_str(), a.destination.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("/app/out/", "out"),
                ("/var/log/build.log", "build.log"),
                ("/app/report.json", "reports/final.json"),
                ("/data", "data")
            ]
        );
        assert!(notices.is_empty(), "{notices:?}");
        let (got, _) = parse_list("artifacts = []\n");
        assert!(got.unwrap().is_empty());
    }

    #[test]
    fn what_is_not_honoured_is_said_and_what_could_escape_is_refused() {
        let (got, notices) =
            parse_list("artifacts = [{source = \"/srv/db\", service = \"db\", exclude = [\"*.tmp\"]}]\n");
        assert_eq!(got.unwrap()[0].destination, "db");
        assert_eq!(notices.len(), 1);
        assert!(notices[0].starts_with("artifacts[0]: ignoring exclude, service"), "{notices:?}");

        for (text, want) in [
            ("artifacts = [\"/app/../etc\"]", "without `..`"),
            ("artifacts = [{source = \"/a\", destination = \"../up\"}]", "plain names"),
            ("artifacts = [{source = \"/a\", destination = \"/abs\"}]", "plain names"),
            ("artifacts = [{source = \"/a\", destination = \"manifest.json\"}]", "not `manifest.json`"),
            ("artifacts = [\"/\"]", "give `destination`"),
            ("artifacts = [\"/a/out\", \"/b/out\"]", "overlaps `out`"),
            ("artifacts = [\"/a/out\", {source = \"/b\", destination = \"out/b\"}]", "overlaps"),
            ("artifacts = [3]", "expected a container path"),
            ("artifacts = \"/app\"", "expected a list"),
        ] {
            let e = parse_list(&format!("{text}\n")).0.unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("artifacts"), "{text}: {e}");
        }
    }
}
