//! Reference solutions: a `solution.sh` script or a TB1 `solution.yaml` list of
//! keystroke commands.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::error::TaskError;

/// One command of a keystroke solution.
#[derive(Debug, Clone, PartialEq)]
pub struct Keystroke {
    /// The text typed into the shell.
    pub command: String,
    /// Terminal-Bench waits at least this long after typing it.
    pub min_wait: Duration,
    /// Whether Terminal-Bench waits for the command to finish.
    pub block: bool,
    /// Whether Enter follows the text (otherwise the text prefixes the next command).
    pub append_enter: bool,
}

/// A task's reference solution.
#[derive(Debug, Clone, PartialEq)]
pub enum Solution {
    /// A shell script run in the agent's container.
    Script(PathBuf),
    /// Commands typed one after another.
    Keystrokes(Vec<Keystroke>),
    /// The task ships none.
    Missing,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeystroke {
    command: String,
    #[serde(default)]
    min_timeout_sec: Option<f64>,
    #[serde(default)]
    block: Option<bool>,
    #[serde(default)]
    append_enter: Option<bool>,
    #[serde(default)]
    #[allow(dead_code)]
    max_timeout_sec: Option<f64>,
}

impl Solution {
    /// Loads a keystroke solution file.
    pub fn load_keystrokes(path: &Path) -> Result<Solution, TaskError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| TaskError::Invalid { path: shown.clone(), reason: format!("cannot read: {e}") })?;
        let raw: Vec<RawKeystroke> = serde_yaml::from_str(&text).map_err(|e| TaskError::Invalid {
            path: shown.clone(),
            reason: match e.location() {
                Some(l) => format!(
                    "line {}: {e} (expected a list of {{command, min_timeout_sec, block, append_enter}})",
                    l.line()
                ),
                None => e.to_string(),
            },
        })?;
        let steps = raw
            .into_iter()
            .map(|r| Keystroke {
                command: r.command,
                min_wait: Duration::from_secs_f64(r.min_timeout_sec.unwrap_or(0.0).max(0.0)),
                block: r.block.unwrap_or(false),
                append_enter: r.append_enter.unwrap_or(true),
            })
            .collect();
        Ok(Solution::Keystrokes(steps))
    }

    /// The commands to run in order: text without Enter joins the next command.
    pub fn keystroke_commands(steps: &[Keystroke]) -> Vec<String> {
        let mut out = Vec::new();
        let mut typed = String::new();
        for s in steps {
            typed.push_str(&s.command);
            if s.append_enter {
                out.push(std::mem::take(&mut typed));
            }
        }
        if !typed.trim().is_empty() {
            out.push(typed);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_keystrokes_and_joins_text_without_enter() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("solution.yaml");
        std::fs::write(
            &p,
            "- command: ls -l\n  min_timeout_sec: 0.1\n  block: true\n  append_enter: true\n\
             - command: 'echo '\n  append_enter: false\n- command: hi\n",
        )
        .unwrap();
        let Solution::Keystrokes(steps) = Solution::load_keystrokes(&p).unwrap() else { panic!() };
        assert_eq!(steps.len(), 3);
        assert!(steps[0].block);
        assert_eq!(Solution::keystroke_commands(&steps), ["ls -l", "echo hi"]);
        std::fs::write(&p, "- cmd: x\n").unwrap();
        let e = Solution::load_keystrokes(&p).unwrap_err().to_string();
        assert!(e.contains("solution.yaml") && e.contains("line"), "{e}");
    }
}
