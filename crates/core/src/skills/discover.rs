//! Finding skills on this computer: each root's folders that hold a `SKILL.md`, read once.
//! A project is hostile input: a skill folder or `SKILL.md` that leads out of its bound (a
//! link out of the project) is refused by name, only regular files of a capped size are
//! read, and the folder's other files are listed without following links.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::parse::{parse_skill_file, MAX_SKILL_FILE_BYTES};
use super::{Skill, SkillError, SkillSource, Skills};

/// The project's skill folders, in the order a name is looked up (the first one wins).
pub const PROJECT_DIRS: [&str; 4] = [".agent/skills", ".claude/skills", ".agents/skills", ".codex/skills"];
/// The most skill folders read from one root.
const MAX_SKILLS_PER_ROOT: usize = 100;
/// The most files listed beside a `SKILL.md`, and how deep the listing goes.
const MAX_FILES_LISTED: usize = 50;
const MAX_FILE_DEPTH: usize = 4;
/// The longest file or folder name kept.
const MAX_NAME_BYTES: usize = 200;

/// A folder that holds skill folders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillRoot {
    /// The folder (`PROJECT/.claude/skills`).
    pub dir: PathBuf,
    /// How it is named to the user (`.claude/skills`, `~/.claude/skills`).
    pub shown: String,
    /// Project or user.
    pub source: SkillSource,
    /// No skill may lead out of this folder (the project root; the user's home).
    pub bound: PathBuf,
}

/// The user's skill folders: `~/.config/agent/skills` (the agent's own) and
/// `~/.claude/skills`, in that order. Links in them may lead anywhere in the home folder.
pub fn user_roots() -> Vec<SkillRoot> {
    let Some(home) = dirs::home_dir() else { return Vec::new() };
    let mut roots = Vec::new();
    if let Some(config) = dirs::config_dir() {
        let shown = match config.strip_prefix(&home) {
            Ok(rel) => format!("~/{}/agent/skills", rel.display()),
            Err(_) => format!("{}/agent/skills", config.display()),
        };
        roots.push(SkillRoot {
            dir: config.join("agent/skills"),
            shown,
            source: SkillSource::User,
            bound: home.clone(),
        });
    }
    roots.push(SkillRoot {
        dir: home.join(".claude/skills"),
        shown: "~/.claude/skills".into(),
        source: SkillSource::User,
        bound: home,
    });
    roots
}

/// The skills of the project in `project` (its [`PROJECT_DIRS`]).
pub fn discover_project(project: &Path) -> Skills {
    let roots: Vec<SkillRoot> = PROJECT_DIRS
        .iter()
        .map(|rel| SkillRoot {
            dir: project.join(rel),
            shown: rel.to_string(),
            source: SkillSource::Project,
            bound: project.to_path_buf(),
        })
        .collect();
    discover(&roots)
}

/// The skills of `roots`, in order; a name found again later is skipped with a notice.
pub fn discover(roots: &[SkillRoot]) -> Skills {
    roots.iter().fold(Skills::default(), |found, root| found.merged(read_root(root)))
}

/// The skills of one root, sorted by folder name.
fn read_root(root: &SkillRoot) -> Skills {
    let mut out = Skills::default();
    if std::fs::symlink_metadata(&root.dir).is_err() {
        return out;
    }
    let Ok(bound) = root.bound.canonicalize() else { return out };
    let real = match checked(&root.dir, &bound, &root.shown) {
        Ok(real) if real.is_dir() => real,
        Ok(_) => return out,
        Err(e) => {
            out.notices.push(format!("the skills folder {} is not used: {e}", root.shown));
            return out;
        }
    };
    let Ok(entries) = std::fs::read_dir(&real) else { return out };
    let mut names: Vec<String> = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        match entry.file_name().into_string() {
            Ok(name) if plain_name(&name) => names.push(name),
            _ => out.notices.push(format!("a folder in {} with an unprintable name is skipped", root.shown)),
        }
    }
    names.sort();
    if names.len() > MAX_SKILLS_PER_ROOT {
        out.notices.push(format!(
            "{} holds {} entries: only the first {MAX_SKILLS_PER_ROOT} are read",
            root.shown,
            names.len()
        ));
        names.truncate(MAX_SKILLS_PER_ROOT);
    }
    for folder in names {
        let shown = format!("{}/{folder}/SKILL.md", root.shown);
        match read_skill(&real.join(&folder), &folder, &bound, root, &shown) {
            Ok(Some(skill)) => out = out.merged(Skills { skills: vec![skill], notices: Vec::new() }),
            Ok(None) => {}
            Err(e) => out.notices.push(format!("the skill {shown} is not used: {e}")),
        }
    }
    out
}

/// The skill in `path` (a folder named `folder`); `None` when it is not a folder with a
/// `SKILL.md`.
fn read_skill(
    path: &Path,
    folder: &str,
    bound: &Path,
    root: &SkillRoot,
    shown: &str,
) -> Result<Option<Skill>, SkillError> {
    let dir = checked(path, bound, &root.shown)?;
    if !dir.is_dir() {
        return Ok(None);
    }
    let file = dir.join("SKILL.md");
    if std::fs::symlink_metadata(&file).is_err() {
        return Ok(None);
    }
    let file = checked(&file, bound, &root.shown)?;
    let text = read_capped(&file)?;
    let parsed = parse_skill_file(&text, folder)?;
    Ok(Some(Skill {
        name: parsed.name,
        description: parsed.description,
        allowed_tools: parsed.allowed_tools,
        body: parsed.body,
        source: root.source,
        files: list_files(&dir),
        dir,
        shown_path: shown.to_string(),
        sandbox_dir: None,
    }))
}

/// `path` with its links resolved, when that stays inside `bound`.
fn checked(path: &Path, bound: &Path, root_shown: &str) -> Result<PathBuf, SkillError> {
    let real = path.canonicalize().map_err(|e| SkillError::Unreadable(e.to_string()))?;
    if !real.starts_with(bound) {
        let root = match root_shown.starts_with('~') {
            true => "your home folder".to_string(),
            false => "the project".to_string(),
        };
        return Err(SkillError::LeadsOut { root, target: real.display().to_string() });
    }
    Ok(real)
}

/// A regular file's text, refused when it is larger than a `SKILL.md` may be (also when
/// it grows between the check and the read).
fn read_capped(path: &Path) -> Result<String, SkillError> {
    let meta = std::fs::metadata(path).map_err(|e| SkillError::Unreadable(e.to_string()))?;
    // A FIFO or a device would hang or flood the read.
    if !meta.is_file() {
        return Err(SkillError::NotAFile);
    }
    if meta.len() > MAX_SKILL_FILE_BYTES {
        return Err(SkillError::TooLarge(meta.len()));
    }
    let file = std::fs::File::open(path).map_err(|e| SkillError::Unreadable(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_SKILL_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| SkillError::Unreadable(e.to_string()))?;
    if bytes.len() as u64 > MAX_SKILL_FILE_BYTES {
        return Err(SkillError::TooLarge(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|_| SkillError::NotText)
}

/// The regular files below `dir` but its `SKILL.md`, relative to it and sorted, links
/// not followed; capped, with `…` last when there are more.
fn list_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    walk(dir, "", 0, &mut out);
    out.sort();
    if out.len() > MAX_FILES_LISTED {
        out.truncate(MAX_FILES_LISTED);
        out.push("…".into());
    }
    out
}

fn walk(dir: &Path, rel: &str, depth: usize, out: &mut Vec<String>) {
    if depth > MAX_FILE_DEPTH || out.len() > MAX_FILES_LISTED {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.filter_map(Result::ok) {
        let Ok(name) = entry.file_name().into_string() else { continue };
        // `file_type` does not follow links: a link is neither listed nor entered.
        let Ok(kind) = entry.file_type() else { continue };
        if !plain_name(&name) || (depth == 0 && name == "SKILL.md") {
            continue;
        }
        let child = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
        if kind.is_dir() {
            walk(&entry.path(), &child, depth + 1, out);
        } else if kind.is_file() {
            out.push(child);
        }
        if out.len() > MAX_FILES_LISTED {
            return;
        }
    }
}

/// Whether a file name can be shown and used in a path as it is: not too long, no
/// control, bidi or invisible characters.
fn plain_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_BYTES && super::parse::clean_line(name, MAX_NAME_BYTES) == name
}
