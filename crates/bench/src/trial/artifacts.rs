//! Copying a task's `artifacts` out of the agent's container into the trial's folder
//! after the run (Harbor's `artifacts`): each entry under `artifacts/DESTINATION`, with a
//! `manifest.json` saying what came of each. The container's content is hostile: the
//! sandbox's copy-out writes only plain files and folders inside the destination, and a
//! trial keeps at most [`MAX_ARTIFACT_BYTES`].

use std::path::Path;
use std::time::Duration;

use agent_sandbox::Sandbox;
use serde::Serialize;

use super::super::task::{Artifact, ARTIFACTS_MANIFEST};

/// Bytes of artifacts one trial (or one step) keeps; what passes it is cut, with a notice.
pub(super) const MAX_ARTIFACT_BYTES: u64 = 256 << 20;

/// What came of one entry, in `manifest.json`.
#[derive(Debug, Serialize)]
struct Outcome<'a> {
    source: &'a str,
    destination: &'a str,
    /// `copied`, `cut` (the byte limit was reached in it) or `failed`.
    status: &'static str,
    files: u64,
    bytes: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    skipped: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Copies every entry of `artifacts` from `sandbox` into the folder `dir` (made when
/// there is at least one entry); the notices for the trial's record, one per entry that
/// was not copied whole.
pub(super) async fn collect(sandbox: &Sandbox, artifacts: &[Artifact], dir: &Path) -> Vec<String> {
    if artifacts.is_empty() {
        return Vec::new();
    }
    // An earlier try of the trial (on an engine that was lost) may have left some.
    let _ = std::fs::remove_dir_all(dir);
    if let Err(e) = std::fs::create_dir_all(dir) {
        return vec![format!("artifacts: {}: cannot create the folder: {e}", dir.display())];
    }
    let cwd = working_dir(sandbox, artifacts).await;
    let mut notices = Vec::new();
    let mut outcomes = Vec::new();
    let mut left = MAX_ARTIFACT_BYTES;
    for a in artifacts {
        let source = match (&cwd, a.source.starts_with('/')) {
            (Some(cwd), false) => format!("{}/{}", cwd.trim_end_matches('/'), a.source),
            _ => a.source.clone(),
        };
        let mut outcome = Outcome {
            source: &a.source,
            destination: &a.destination,
            status: "failed",
            files: 0,
            bytes: 0,
            skipped: Vec::new(),
            error: None,
        };
        let dest = dir.join(&a.destination);
        let made = match dest.parent() {
            Some(parent) => {
                std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))
            }
            None => Ok(()),
        };
        let copied = match made {
            Err(e) => Err(e),
            Ok(()) if left == 0 => {
                Err(format!("the trial's limit of {} MiB of artifacts was reached before it", MAX_ARTIFACT_BYTES >> 20))
            }
            Ok(()) => sandbox.copy_out(&source, &dest, left).await.map_err(|e| e.to_string()),
        };
        match copied {
            Ok(c) => {
                left = left.saturating_sub(c.bytes);
                if c.cut {
                    left = 0;
                    notices.push(format!(
                        "artifact `{}`: cut at the trial's limit of {} MiB of artifacts; the rest was not copied",
                        a.source,
                        MAX_ARTIFACT_BYTES >> 20
                    ));
                }
                if !c.skipped.is_empty() {
                    notices.push(format!(
                        "artifact `{}`: {} entries left out (only plain files and folders are copied): {}",
                        a.source,
                        c.skipped.len(),
                        c.skipped.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
                    ));
                }
                outcome.status = if c.cut { "cut" } else { "copied" };
                (outcome.files, outcome.bytes, outcome.skipped) = (c.files, c.bytes, c.skipped);
            }
            Err(e) => {
                notices.push(format!("artifact `{}` was not copied: {e}", a.source));
                outcome.error = Some(e);
            }
        }
        outcomes.push(outcome);
    }
    let manifest = serde_json::to_vec_pretty(&outcomes).unwrap_or_default();
    if let Err(e) = std::fs::write(dir.join(ARTIFACTS_MANIFEST), manifest) {
        notices.push(format!("artifacts: cannot write {ARTIFACTS_MANIFEST}: {e}"));
    }
    notices
}

/// The container's working directory, when an entry is relative to it.
async fn working_dir(sandbox: &Sandbox, artifacts: &[Artifact]) -> Option<String> {
    if artifacts.iter().all(|a| a.source.starts_with('/')) {
        return None;
    }
    let out = sandbox.exec(&["pwd"], None, Duration::from_secs(30), 4096).await.ok()?;
    let cwd = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Some(if cwd.is_empty() { "/".into() } else { cwd })
}
