//! Custom slash commands: Markdown files in the project's `.agent/commands/` and the
//! user's `~/.config/agent/commands/`, read as Claude Code reads `.claude/commands/`.
//! The file name is the command (`review.md` is `/review`, `git/commit.md` is
//! `/git:commit`); optional front matter gives `description` and `argument-hint`; the
//! body is the prompt sent, with `$ARGUMENTS` replaced by what follows the command and
//! `$1`…`$9` by its words.

use std::path::{Path, PathBuf};

use agent_core::project::ProjectFile;

/// Where a command comes from (a project's command hides a user's of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Project,
    User,
}

/// One custom command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomCommand {
    /// Without the slash (`review`, `git:commit`).
    pub name: String,
    /// The popup's line: the front matter's `description`, else the body's first line.
    pub description: String,
    /// What arguments it takes (`[file] [focus]`), for the popup.
    pub argument_hint: Option<String>,
    /// The prompt template.
    pub body: String,
    pub scope: Scope,
}

/// The user's command folder (`~/.config/agent/commands`).
pub fn user_dir() -> Option<PathBuf> {
    dirs::home_dir().map(|h| h.join(".config/agent/commands"))
}

/// The project's commands (its `.agent/commands/` files, as read and checked by
/// `agent_core::project`; none when the project is opened without its settings) and the
/// user's, sorted by name. Names taken by a built-in command are skipped (the built-in
/// wins), as are unreadable files.
pub fn load(project: &[ProjectFile], user: Option<&Path>, builtins: &[&str]) -> Vec<CustomCommand> {
    let mut out: Vec<CustomCommand> = Vec::new();
    let project: Vec<(String, String)> =
        project.iter().map(|f| (agent_core::project::command_name(&f.rel), f.text.clone())).collect();
    let mut user_found = Vec::new();
    if let Some(dir) = user {
        collect(dir, dir, &mut user_found);
    }
    for (found, scope) in [(project, Scope::Project), (user_found, Scope::User)] {
        for (name, text) in found {
            if !valid_name(&name) || builtins.contains(&name.as_str()) || out.iter().any(|c| c.name == name) {
                continue;
            }
            out.push(parse(&name, &text, scope));
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || "-_:.".contains(c))
}

/// `(name, text)` of every `.md` file under `dir`; sub-folders become `folder:` prefixes.
fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        if path.is_dir() {
            collect(root, &path, out);
            continue;
        }
        if path.extension().and_then(|x| x.to_str()) != Some("md") {
            continue;
        }
        let Ok(rel) = path.strip_prefix(root) else { continue };
        let name = rel.with_extension("").to_string_lossy().replace('/', ":");
        if let (true, Ok(text)) = (valid_name(&name), std::fs::read_to_string(&path)) {
            out.push((name, text));
        }
    }
}

/// Reads a command file: front matter (`---` lines around `key: value` pairs) and body.
pub fn parse(name: &str, text: &str, scope: Scope) -> CustomCommand {
    let (front, body) = split_front_matter(text);
    let field = |key: &str| {
        front.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().trim_matches(|c| c == '"' || c == '\'').to_string())
        })
    };
    let description = field("description").filter(|d| !d.is_empty()).unwrap_or_else(|| {
        let first = body.lines().map(|l| l.trim().trim_start_matches('#').trim()).find(|l| !l.is_empty());
        let first = first.unwrap_or("(empty command)");
        let mut d: String = first.chars().take(60).collect();
        if first.chars().count() > 60 {
            d.push('…');
        }
        d
    });
    CustomCommand {
        name: name.to_string(),
        description,
        argument_hint: field("argument-hint").filter(|h| !h.is_empty()),
        body: body.trim().to_string(),
        scope,
    }
}

fn split_front_matter(text: &str) -> (&str, &str) {
    let Some(rest) = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n")) else { return ("", text) };
    match rest.find("\n---") {
        Some(end) => {
            let after = &rest[end + 4..];
            (&rest[..end], after.split_once('\n').map(|(_, b)| b).unwrap_or(""))
        }
        None => ("", text),
    }
}

impl CustomCommand {
    /// The prompt for `args`: `$ARGUMENTS` and `$1`…`$9` filled in; a template that
    /// uses neither gets the arguments appended, so that none are lost.
    pub fn expand(&self, args: &str) -> String {
        let args = args.trim();
        let words = split_words(args);
        let mut out = String::with_capacity(self.body.len() + args.len());
        let mut used = false;
        let mut rest = self.body.as_str();
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix("ARGUMENTS") {
                out.push_str(args);
                used = true;
                rest = tail;
            } else if let Some(d) = after.chars().next().and_then(|c| c.to_digit(10)).filter(|d| *d >= 1) {
                out.push_str(words.get(d as usize - 1).map(String::as_str).unwrap_or(""));
                used = true;
                rest = &after[1..];
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        if !used && !args.is_empty() {
            out.push_str("\n\nARGUMENTS: ");
            out.push_str(args);
        }
        out
    }

    /// The popup's description: what it does, its arguments, where it comes from.
    pub fn popup_line(&self) -> String {
        let scope = match self.scope {
            Scope::Project => "project",
            Scope::User => "user",
        };
        match &self.argument_hint {
            Some(h) => format!("{} {h} ({scope})", self.description),
            None => format!("{} ({scope})", self.description),
        }
    }
}

/// Words as a shell splits them: whitespace separates, quotes group.
fn split_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in s.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                any = true;
            }
            None if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            None => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_become_commands_with_folders_as_namespaces_and_the_project_first() {
        let project = tempfile::tempdir().unwrap();
        let user = tempfile::tempdir().unwrap();
        let pdir = project.path().join(".agent/commands");
        std::fs::create_dir_all(pdir.join("git")).unwrap();
        std::fs::write(
            pdir.join("review.md"),
            "---\ndescription: Review the diff\nargument-hint: [file]\n---\nReview $1 closely.\n",
        )
        .unwrap();
        std::fs::write(pdir.join("git/commit.md"), "# Write a commit message\nfor the staged changes\n").unwrap();
        std::fs::write(pdir.join("notes.txt"), "not a command").unwrap();
        std::fs::write(user.path().join("review.md"), "the user's review").unwrap();
        std::fs::write(user.path().join("help.md"), "a built-in name").unwrap();
        std::fs::write(user.path().join("explain.md"), "Explain $ARGUMENTS").unwrap();
        let files = agent_core::project::ProjectFiles::read(project.path()).unwrap();
        assert_eq!(files.commands.len(), 2, "notes.txt is not a command");
        let cmds = load(&files.commands, Some(user.path()), &["help"]);
        let names: Vec<(&str, Scope)> = cmds.iter().map(|c| (c.name.as_str(), c.scope)).collect();
        assert_eq!(names, [("explain", Scope::User), ("git:commit", Scope::Project), ("review", Scope::Project)]);
        assert_eq!(cmds[2].description, "Review the diff");
        assert_eq!(cmds[2].argument_hint.as_deref(), Some("[file]"));
        assert_eq!(cmds[2].body, "Review $1 closely.");
        assert_eq!(cmds[1].description, "Write a commit message");
        assert_eq!(cmds[2].popup_line(), "Review the diff [file] (project)");
    }

    #[test]
    fn arguments_fill_the_template() {
        let c = parse("x", "Fix issue #$1 in $2 ($ARGUMENTS); costs $5 and $0.", Scope::User);
        assert_eq!(c.expand("42 \"src/a b.rs\""), "Fix issue #42 in src/a b.rs (42 \"src/a b.rs\"); costs  and $0.");
        // No placeholder: the arguments are appended, not lost.
        let plain = parse("y", "Summarise the project.", Scope::User);
        assert_eq!(plain.expand(""), "Summarise the project.");
        assert_eq!(plain.expand("briefly"), "Summarise the project.\n\nARGUMENTS: briefly");
    }

    #[test]
    fn front_matter_without_an_end_is_body() {
        let c = parse("z", "---\ndescription: never closed\n", Scope::Project);
        assert_eq!(c.description, "---");
        assert!(c.body.contains("never closed"));
    }
}
