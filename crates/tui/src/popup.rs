//! Completion popups: slash commands and `@path` workspace files.

use std::path::Path;

use super::custom_commands::CustomCommand;

/// A slash command and its one-line help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlashCommand {
    pub name: &'static str,
    pub help: &'static str,
}

/// Every slash command, in the order the popup lists them.
pub const SLASH_COMMANDS: &[SlashCommand] = &[
    SlashCommand { name: "help", help: "keys and commands" },
    SlashCommand { name: "clear", help: "clear the transcript and start a fresh context" },
    SlashCommand { name: "compact", help: "summarise the history to free context" },
    SlashCommand { name: "model", help: "show or switch the model: /model SPEC" },
    SlashCommand { name: "approval", help: "show or set the approval mode: ask, auto-edit, auto, plan" },
    SlashCommand { name: "mcp", help: "MCP servers: their state and tools" },
    SlashCommand { name: "skills", help: "the skills found, and from where" },
    SlashCommand { name: "resume", help: "list saved sessions, or resume one: /resume ID" },
    SlashCommand { name: "rewind", help: "go back to before a message: code, conversation or both (Esc Esc)" },
    SlashCommand { name: "todo", help: "show the agent's todo list" },
    SlashCommand { name: "cost", help: "tokens and time spent" },
    SlashCommand { name: "init", help: "write an AGENTS.md for this project" },
    SlashCommand { name: "quit", help: "quit (the sandbox is removed)" },
];

/// What the popup offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PopupKind {
    Slash,
    Files,
    /// The checkpoints to rewind to (newest first).
    Rewind,
    /// What to restore of the checkpoint with this index.
    RewindMode(usize),
}

/// An open completion popup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Popup {
    pub kind: PopupKind,
    /// (completion, description) pairs.
    pub items: Vec<(String, String)>,
    pub selected: usize,
}

impl Popup {
    /// Moves the selection.
    pub fn step(&mut self, down: bool) {
        let n = self.items.len();
        if n == 0 {
            return;
        }
        self.selected = if down { (self.selected + 1) % n } else { (self.selected + n - 1) % n };
    }

    /// The selected completion.
    pub fn current(&self) -> Option<&str> {
        self.items.get(self.selected).map(|(c, _)| c.as_str())
    }
}

/// The slash popup for the composer's text, if it is a command being typed: the
/// built-in commands, then the custom ones.
pub fn slash_popup(text: &str, custom: &[CustomCommand]) -> Option<Popup> {
    let typed = text.strip_prefix('/')?;
    if typed.contains(char::is_whitespace) {
        return None;
    }
    let items: Vec<(String, String)> = SLASH_COMMANDS
        .iter()
        .filter(|c| c.name.starts_with(typed))
        .map(|c| (format!("/{}", c.name), c.help.to_string()))
        .chain(custom.iter().filter(|c| c.name.starts_with(typed)).map(|c| (format!("/{}", c.name), c.popup_line())))
        .collect();
    (!items.is_empty()).then_some(Popup { kind: PopupKind::Slash, items, selected: 0 })
}

/// The most files the `@` completion scans in a workspace.
const MAX_FILES: usize = 20_000;
/// The most matches the popup lists.
const MAX_MATCHES: usize = 8;

/// Relative paths of the workspace's files, skipping VCS and build folders.
pub fn scan_workspace(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().to_string();
            if matches!(name.as_str(), ".git" | "target" | "node_modules" | ".venv" | "__pycache__") {
                continue;
            }
            let path = e.path();
            let Ok(rel) = path.strip_prefix(root) else { continue };
            let rel = rel.to_string_lossy().to_string();
            match e.file_type() {
                Ok(t) if t.is_dir() => {
                    out.push(format!("{rel}/"));
                    stack.push(path);
                }
                Ok(_) => out.push(rel),
                Err(_) => {}
            }
            if out.len() >= MAX_FILES {
                return out;
            }
        }
    }
    out.sort();
    out
}

/// The file popup for an `@word`: paths starting with the typed text first, then
/// paths containing it.
pub fn file_popup(word: &str, files: &[String]) -> Option<Popup> {
    let typed = word.strip_prefix('@')?;
    let mut items: Vec<(String, String)> = files
        .iter()
        .filter(|f| f.starts_with(typed))
        .chain(files.iter().filter(|f| !f.starts_with(typed) && f.contains(typed)))
        .take(MAX_MATCHES)
        .map(|f| (format!("@{f}"), String::new()))
        .collect();
    items.dedup();
    (!items.is_empty()).then_some(Popup { kind: PopupKind::Files, items, selected: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slash_filters_by_prefix() {
        let p = slash_popup("/c", &[]).unwrap();
        let names: Vec<&str> = p.items.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, vec!["/clear", "/compact", "/cost"]);
        assert!(slash_popup("/model x", &[]).is_none());
        assert!(slash_popup("hello", &[]).is_none());
        assert_eq!(slash_popup("/", &[]).unwrap().items.len(), SLASH_COMMANDS.len());
    }

    #[test]
    fn files_are_scanned_and_matched() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src/tui")).unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join("src/main.rs"), "").unwrap();
        std::fs::write(dir.path().join("src/tui/app.rs"), "").unwrap();
        std::fs::write(dir.path().join(".git/HEAD"), "").unwrap();
        let files = scan_workspace(dir.path());
        assert_eq!(files, vec!["src/", "src/main.rs", "src/tui/", "src/tui/app.rs"]);
        let p = file_popup("@src/m", &files).unwrap();
        assert_eq!(p.current(), Some("@src/main.rs"));
        let p = file_popup("@app", &files).unwrap();
        assert_eq!(p.current(), Some("@src/tui/app.rs"));
    }
}
