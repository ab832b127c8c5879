//! Skills in the open format Claude Code and Codex share: a folder holding a `SKILL.md`
//! (YAML front matter with `name`, `description` and optionally `allowed-tools`, then a
//! Markdown body) and any scripts and reference files beside it.
//!
//! They are found in the project ([`PROJECT_DIRS`]) and the user's folders
//! ([`user_roots`]) on this computer ([`discover`]), each checked as hostile input: sizes
//! are capped, names must be plain slugs, control characters and escape sequences are
//! removed, and no link leads out of its root. The model sees each skill's name and
//! description in the system prompt, within a budget ([`listing`]); the `skill` tool hands
//! it a body on demand, with the paths the skill's files have inside the sandbox
//! ([`place`]), where its scripts run through the shell tool, never on this computer.
//! A skill is prompt text plus sandboxed scripts: it needs no trust, and its
//! `allowed-tools` grants nothing (a project file never lowers a safety setting).

mod discover;
mod listing;
mod parse;
mod place;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use discover::{discover, discover_project, user_roots, SkillRoot, PROJECT_DIRS};
pub use listing::{load_skill, skills_section, DEFAULT_PROMPT_BUDGET};
pub use parse::{clean_line, is_slug, parse_skill_file, SkillFile};
pub use place::{place, SANDBOX_SKILLS_DIR};

/// Why one `SKILL.md` is not used (the notice names the file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkillError {
    #[error("it does not start with YAML front matter between `---` lines")]
    NoFrontMatter,
    #[error("its front matter is not valid YAML: {0}")]
    Yaml(String),
    #[error("its name `{0}` is not a plain name (lowercase letters, digits, `-` and `_`, at most 64)")]
    BadName(String),
    #[error("it has no `description`")]
    NoDescription,
    #[error("it is {0} bytes, more than the {max} a SKILL.md may have", max = parse::MAX_SKILL_FILE_BYTES)]
    TooLarge(u64),
    #[error("it is not UTF-8 text")]
    NotText,
    #[error("it leads out of {root} (to {target})")]
    LeadsOut { root: String, target: String },
    #[error("it is not a regular file")]
    NotAFile,
    #[error("it cannot be read: {0}")]
    Unreadable(String),
    #[error("a skill named `{name}` was already found in {first}")]
    Duplicate { name: String, first: String },
}

/// Where a skill was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkillSource {
    /// A folder of the project (`.claude/skills/…`): untrusted input.
    Project,
    /// One of the user's own folders (`~/.claude/skills/…`).
    User,
}

impl SkillSource {
    /// `project` or `user`.
    pub fn name(self) -> &'static str {
        match self {
            SkillSource::Project => "project",
            SkillSource::User => "user",
        }
    }
}

/// One skill, as read once at start-up: what was listed is what is used.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    /// Its name (a slug), unique among the skills of a session.
    pub name: String,
    /// One line, cleaned and capped.
    pub description: String,
    /// `allowed-tools` as written (shown, never granted).
    pub allowed_tools: Vec<String>,
    /// The Markdown body after the front matter.
    pub body: String,
    /// Project or user.
    pub source: SkillSource,
    /// Its folder on this computer, canonical.
    pub dir: PathBuf,
    /// Its `SKILL.md` as the user knows it (`.claude/skills/pdf/SKILL.md`, `~/.claude/…`).
    pub shown_path: String,
    /// The other files of the folder, relative to it (`scripts/run.sh`), capped.
    pub files: Vec<String>,
    /// Its folder inside the sandbox, once placed ([`place`]); `None` when the sandbox
    /// cannot reach it.
    pub sandbox_dir: Option<String>,
}

/// The skills of a session and what was said while finding them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Skills {
    /// In listing order: the project's first, then the user's, each sorted by name.
    pub skills: Vec<Skill>,
    /// Skipped skills and other notes, for the user.
    pub notices: Vec<String>,
}

impl Skills {
    /// Whether no skill was found.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// The skill with this name.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// The project's skills only.
    pub fn project(&self) -> impl Iterator<Item = &Skill> {
        self.skills.iter().filter(|s| s.source == SkillSource::Project)
    }

    /// `self` with `other`'s skills added after its own; a name already taken is
    /// skipped with a notice (the project's skills come first, so they win).
    pub fn merged(mut self, other: Skills) -> Skills {
        self.notices.extend(other.notices);
        for skill in other.skills {
            if let Some(first) = self.get(&skill.name) {
                let err = SkillError::Duplicate { name: skill.name.clone(), first: first.shown_path.clone() };
                self.notices.push(format!("the skill {} is not used: {err}", skill.shown_path));
                continue;
            }
            self.skills.push(skill);
        }
        self
    }

    /// What `/skills` shows: each skill, where it was found and its description.
    pub fn describe(&self) -> String {
        if self.skills.is_empty() {
            let mut out = String::from(
                "no skills: add a folder with a SKILL.md to .claude/skills/ (or .agent/, .agents/, .codex/skills/) \
                 or ~/.claude/skills/",
            );
            for n in &self.notices {
                out.push_str(&format!("\n  ! {n}"));
            }
            return out;
        }
        let mut out = format!("skills ({}):", self.skills.len());
        for s in &self.skills {
            out.push_str(&format!("\n  {} · {} · {}", s.name, s.source.name(), s.shown_path));
            out.push_str(&format!("\n    {}", s.description));
            if !s.allowed_tools.is_empty() {
                out.push_str(&format!("\n    allowed-tools (not granted): {}", s.allowed_tools.join(", ")));
            }
        }
        for n in &self.notices {
            out.push_str(&format!("\n  ! {n}"));
        }
        out
    }
}
