//! The TB1 task layout.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// A task directory that cannot be used, with the file and field at fault.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("{path}: not a task directory (no such directory)")]
    NotADirectory { path: String },
    #[error("{path}: missing; a TB1 task needs task.yaml and a Dockerfile or docker-compose.yaml")]
    MissingFile { path: String },
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
    #[error("{path}: the field `{field}` is missing or empty")]
    MissingField { path: String, field: String },
}

#[derive(Debug, Deserialize)]
struct TaskYaml {
    instruction: Option<String>,
    difficulty: Option<String>,
    category: Option<String>,
    max_agent_timeout_sec: Option<f64>,
    max_test_timeout_sec: Option<f64>,
}

/// A loaded TB1 task.
#[derive(Debug, Clone)]
pub struct Task {
    /// Directory name.
    pub name: String,
    pub dir: PathBuf,
    pub instruction: String,
    pub difficulty: Option<String>,
    pub category: Option<String>,
    /// Dockerfile of the agent's container.
    pub dockerfile: PathBuf,
    /// Build context of that Dockerfile.
    pub build_context: PathBuf,
    pub agent_timeout_secs: f64,
    pub test_timeout_secs: f64,
}

impl Task {
    /// Loads a TB1 task directory.
    pub fn load(dir: &Path) -> Result<Task, TaskError> {
        if !dir.is_dir() {
            return Err(TaskError::NotADirectory { path: dir.display().to_string() });
        }
        let yaml_path = dir.join("task.yaml");
        let shown = yaml_path.display().to_string();
        let text = std::fs::read_to_string(&yaml_path).map_err(|_| TaskError::MissingFile { path: shown.clone() })?;
        let parsed: TaskYaml = serde_yaml::from_str(&text).map_err(|e| TaskError::Invalid {
            path: shown.clone(),
            reason: match e.location() {
                Some(l) => format!("line {}: {}", l.line(), e),
                None => e.to_string(),
            },
        })?;
        let instruction = parsed
            .instruction
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| TaskError::MissingField { path: shown.clone(), field: "instruction".into() })?;
        let (dockerfile, build_context) = Self::find_dockerfile(dir)?;
        let name = dir
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().to_string()))
            .unwrap_or_else(|| "task".into());
        Ok(Task {
            name,
            dir: dir.to_path_buf(),
            instruction,
            difficulty: parsed.difficulty,
            category: parsed.category,
            dockerfile,
            build_context,
            agent_timeout_secs: parsed.max_agent_timeout_sec.unwrap_or(360.0),
            test_timeout_secs: parsed.max_test_timeout_sec.unwrap_or(60.0),
        })
    }

    /// The Dockerfile of the agent's container: `Dockerfile`, or the build of the
    /// `client` service in `docker-compose.yaml`.
    fn find_dockerfile(dir: &Path) -> Result<(PathBuf, PathBuf), TaskError> {
        let compose = dir.join("docker-compose.yaml");
        if compose.is_file() {
            let shown = compose.display().to_string();
            let text = std::fs::read_to_string(&compose)
                .map_err(|e| TaskError::Invalid { path: shown.clone(), reason: e.to_string() })?;
            let doc: serde_yaml::Value = serde_yaml::from_str(&text)
                .map_err(|e| TaskError::Invalid { path: shown.clone(), reason: e.to_string() })?;
            let build = doc.get("services").and_then(|s| s.get("client")).and_then(|c| c.get("build"));
            if let Some(build) = build {
                let (context, file) = match build {
                    serde_yaml::Value::String(ctx) => (ctx.clone(), "Dockerfile".to_string()),
                    b => (
                        b.get("context").and_then(|v| v.as_str()).unwrap_or(".").to_string(),
                        b.get("dockerfile").and_then(|v| v.as_str()).unwrap_or("Dockerfile").to_string(),
                    ),
                };
                let ctx = dir.join(context);
                let df = ctx.join(file);
                if !df.is_file() {
                    return Err(TaskError::MissingFile { path: df.display().to_string() });
                }
                return Ok((df, ctx));
            }
        }
        let df = dir.join("Dockerfile");
        if df.is_file() {
            return Ok((df, dir.to_path_buf()));
        }
        Err(TaskError::MissingFile { path: df.display().to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file_and_field() {
        let d = tempfile::tempdir().unwrap();
        let e = Task::load(d.path()).unwrap_err().to_string();
        assert!(e.contains("task.yaml") && e.contains("missing"), "{e}");
        std::fs::write(d.path().join("task.yaml"), "difficulty: easy\n").unwrap();
        let e = Task::load(d.path()).unwrap_err().to_string();
        assert!(e.contains("`instruction`"), "{e}");
        std::fs::write(d.path().join("task.yaml"), "instruction: [unclosed\n").unwrap();
        let e = Task::load(d.path()).unwrap_err().to_string();
        assert!(e.contains("task.yaml") && e.contains("line"), "{e}");
        std::fs::write(d.path().join("task.yaml"), "instruction: do it\n").unwrap();
        let e = Task::load(d.path()).unwrap_err().to_string();
        assert!(e.contains("Dockerfile"), "{e}");
        std::fs::write(d.path().join("Dockerfile"), "FROM x\n").unwrap();
        let t = Task::load(d.path()).unwrap();
        assert_eq!(t.instruction, "do it");
    }
}
