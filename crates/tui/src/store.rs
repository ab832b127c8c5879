//! Saved sessions: one JSONL file per session under the user data dir, holding the
//! user's messages and the core's events (without streaming deltas), enough to
//! rebuild the transcript and to tell a fresh model what happened.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use agent_protocol::Event;

/// Errors reading or writing saved sessions, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot write the session file {path}: {reason}")]
    Write { path: String, reason: String },
    #[error("cannot read the session file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("no saved session matches `{0}` (list them with /resume)")]
    NotFound(String),
    #[error("`{0}` matches more than one saved session; give more of the id")]
    Ambiguous(String),
    #[error("there is no user data directory to keep sessions in")]
    NoDataDir,
}

/// One line of a session file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// The first line.
    Meta { id: String, cwd: String, model: String, started_unix: u64 },
    /// A message the user sent.
    User { text: String },
    /// An event of the core.
    Event { event: Event },
}

/// A saved session as the list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionInfo {
    pub id: String,
    pub path: PathBuf,
    pub cwd: String,
    pub modified_unix: u64,
    /// The first user message, shortened.
    pub title: String,
}

/// Where sessions are kept: `<data dir>/agent/sessions`.
pub fn sessions_dir() -> Result<PathBuf, StoreError> {
    dirs::data_dir().map(|d| d.join("agent").join("sessions")).ok_or(StoreError::NoDataDir)
}

/// Where the checkpoints of session `id` are kept (blobs and manifests, see `checkpoints`).
pub fn checkpoints_dir(id: &str) -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("agent").join("checkpoints").join(id))
}

/// Whether an event is worth keeping (deltas and live output are rebuilt from the
/// final message and observation).
pub fn keep(event: &Event) -> bool {
    !matches!(
        event,
        Event::AssistantDelta { .. }
            | Event::ToolCallOutput { .. }
            | Event::TurnStarted { .. }
            | Event::ApprovalRequest { .. }
            | Event::SessionConfigured { .. }
            | Event::EpisodeEnd { .. }
            | Event::PromptProgress { .. }
            | Event::TaskComplete
            // A resumed session does not ask about an old plan again.
            | Event::PlanProposed { .. }
            | Event::TaskStarted { .. }
    )
}

/// How long ago a time was, as the session list shows it (`5 min ago`).
pub fn ago(unix: u64) -> String {
    let secs = now_unix().saturating_sub(unix);
    match secs {
        0..60 => "just now".into(),
        60..3600 => format!("{} min ago", secs / 60),
        3600..86_400 => format!("{} h ago", secs / 3600),
        _ => format!("{} days ago", secs / 86_400),
    }
}

fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A session file that records are appended to. The file is created with the first
/// user message: a session in which nothing was said is not saved.
pub struct SessionWriter {
    path: PathBuf,
    file: Option<File>,
    /// The meta line and what came before the first message.
    pending: Vec<Record>,
}

impl SessionWriter {
    /// A writer for `<dir>/<id>.jsonl` (the folder is created now, the file with the
    /// first user message).
    pub fn create(dir: &Path, id: &str, cwd: &str, model: &str) -> Result<Self, StoreError> {
        let path = dir.join(format!("{id}.jsonl"));
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::Write { path: path.display().to_string(), reason: e.to_string() })?;
        let meta = Record::Meta { id: id.into(), cwd: cwd.into(), model: model.into(), started_unix: now_unix() };
        Ok(Self { path, file: None, pending: vec![meta] })
    }

    /// Appends one record.
    pub fn append(&mut self, record: &Record) -> Result<(), StoreError> {
        let err = |e: String| StoreError::Write { path: self.path.display().to_string(), reason: e };
        let file = match &mut self.file {
            Some(f) => f,
            None if !matches!(record, Record::User { .. }) => {
                self.pending.push(record.clone());
                return Ok(());
            }
            None => {
                let f =
                    OpenOptions::new().create(true).append(true).open(&self.path).map_err(|e| err(e.to_string()))?;
                self.file.insert(f)
            }
        };
        let mut text = String::new();
        for r in self.pending.drain(..).chain(std::iter::once(record.clone())) {
            text.push_str(&serde_json::to_string(&r).map_err(|e| err(e.to_string()))?);
            text.push('\n');
        }
        file.write_all(text.as_bytes()).map_err(|e| err(e.to_string()))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads a session file; lines that do not parse (a torn last line) are skipped.
pub fn read(path: &Path) -> Result<Vec<Record>, StoreError> {
    let file =
        File::open(path).map_err(|e| StoreError::Read { path: path.display().to_string(), reason: e.to_string() })?;
    Ok(BufReader::new(file).lines().map_while(Result::ok).filter_map(|l| serde_json::from_str(&l).ok()).collect())
}

/// The saved sessions, newest first.
pub fn list(dir: &Path) -> Vec<SessionInfo> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<SessionInfo> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .filter_map(|e| {
            let path = e.path();
            let modified_unix = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let records = read(&path).ok()?;
            let (id, cwd) = match records.first() {
                Some(Record::Meta { id, cwd, .. }) => (id.clone(), cwd.clone()),
                _ => return None,
            };
            let title = records
                .iter()
                .find_map(|r| match r {
                    Record::User { text } => Some(text.lines().next().unwrap_or_default().chars().take(60).collect()),
                    _ => None,
                })
                .unwrap_or_else(|| "(no message)".to_string());
            Some(SessionInfo { id, path, cwd, modified_unix, title })
        })
        .collect();
    out.sort_by(|a, b| b.modified_unix.cmp(&a.modified_unix).then(b.id.cmp(&a.id)));
    out
}

/// The session whose id starts with `prefix`.
pub fn find(dir: &Path, prefix: &str) -> Result<SessionInfo, StoreError> {
    let matches: Vec<SessionInfo> = list(dir).into_iter().filter(|s| s.id.starts_with(prefix)).collect();
    match matches.len() {
        0 => Err(StoreError::NotFound(prefix.into())),
        1 => Ok(matches.into_iter().next().ok_or_else(|| StoreError::NotFound(prefix.into()))?),
        _ if matches.iter().any(|s| s.id == prefix) => {
            matches.into_iter().find(|s| s.id == prefix).ok_or_else(|| StoreError::NotFound(prefix.into()))
        }
        _ => Err(StoreError::Ambiguous(prefix.into())),
    }
}

/// The newest session started in `cwd`.
pub fn latest_in(dir: &Path, cwd: &str) -> Option<SessionInfo> {
    list(dir).into_iter().find(|s| s.cwd == cwd)
}

/// The most characters of earlier conversation put into a resumed context.
const RESUME_CHARS: usize = 48_000;
/// The most characters kept of one observation.
const OBSERVATION_CHARS: usize = 2_000;

fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[… {} bytes cut]", &s[..end], s.len() - end)
}

/// The system-prompt section that tells a fresh model about the earlier session and
/// what the new sandbox lost.
pub fn resume_context(id: &str, records: &[Record]) -> String {
    let mut body = String::new();
    for r in records {
        match r {
            Record::User { text } => body.push_str(&format!("\n[user]\n{text}\n")),
            Record::Event { event: Event::AssistantMessage { text, .. } } => {
                body.push_str(&format!("\n[assistant]\n{text}\n"))
            }
            Record::Event { event: Event::ToolCallEnd { observation, .. } } => {
                body.push_str(&format!("\n[observation]\n{}\n", clip(observation, OBSERVATION_CHARS)))
            }
            _ => {}
        }
    }
    // Keep the most recent part when the whole does not fit.
    if body.len() > RESUME_CHARS {
        let mut start = body.len() - RESUME_CHARS;
        while !body.is_char_boundary(start) {
            start += 1;
        }
        body = format!("[… the earliest part of the conversation was cut]\n{}", &body[start..]);
    }
    format!(
        "\n\n# Resumed session\n\nThis conversation continues the earlier session {id}. The sandbox container was recreated: /workspace (the user's project directory) is as the user's disk has it, but everything else in the container was lost: installed packages, files outside /workspace, running processes, the shell's variables and working directory, your todo list and scratchpad. Check the state before relying on it. The earlier conversation, oldest first:\n{body}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_list_find_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SessionWriter::create(dir.path(), "abc123", "/proj", "scripted:x").unwrap();
        w.append(&Record::User { text: "fix the bug\nplease".into() }).unwrap();
        w.append(&Record::Event { event: Event::AssistantMessage { turn: 1, text: "On it.".into() } }).unwrap();
        let mut other = SessionWriter::create(dir.path(), "abd999", "/other", "m").unwrap();
        other.append(&Record::Event { event: Event::Notice { message: "before".into() } }).unwrap();
        // A session in which nothing was said leaves no file.
        let mut silent = SessionWriter::create(dir.path(), "fff000", "/quiet", "m").unwrap();
        silent.append(&Record::Event { event: Event::Notice { message: "hi".into() } }).unwrap();
        assert_eq!(list(dir.path()).len(), 1);
        other.append(&Record::User { text: "x".into() }).unwrap();
        let all = list(dir.path());
        assert_eq!(all.len(), 2);
        assert_eq!(read(other.path()).unwrap().len(), 3, "the meta line and the notice come first");
        let s = find(dir.path(), "abc").unwrap();
        assert_eq!((s.cwd.as_str(), s.title.as_str()), ("/proj", "fix the bug"));
        assert!(matches!(find(dir.path(), "ab"), Err(StoreError::Ambiguous(_))));
        assert!(matches!(find(dir.path(), "zz"), Err(StoreError::NotFound(_))));
        assert_eq!(latest_in(dir.path(), "/other").unwrap().id, "abd999");
        let records = read(w.path()).unwrap();
        assert_eq!(records.len(), 3);
        let ctx = resume_context("abc123", &records);
        assert!(ctx.contains("[user]\nfix the bug") && ctx.contains("[assistant]\nOn it."));
        assert!(ctx.contains("was lost"));
    }

    #[test]
    fn deltas_are_not_kept() {
        assert!(!keep(&Event::AssistantDelta { turn: 1, text: "x".into() }));
        assert!(keep(&Event::AssistantMessage { turn: 1, text: "x".into() }));
    }
}
