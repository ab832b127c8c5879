//! One `SKILL.md`: its front matter (`name`, `description`, `allowed-tools`; other keys
//! are the format's own and ignored) and its body, made safe to show: names are plain
//! slugs, descriptions one line without control characters or escape sequences.

use serde::Deserialize;

use super::SkillError;

/// The largest `SKILL.md` read (the format asks for bodies under 500 lines; more is a
/// mistake or an attack on the context window).
pub(crate) const MAX_SKILL_FILE_BYTES: u64 = 256 * 1024;
/// The largest front matter parsed.
const MAX_FRONT_MATTER_BYTES: usize = 16 * 1024;
/// The longest description kept (the format's own limit).
const MAX_DESCRIPTION_CHARS: usize = 1024;
/// The most `allowed-tools` entries kept, and the longest one.
const MAX_ALLOWED_TOOLS: usize = 32;
const MAX_TOOL_CHARS: usize = 100;

/// A parsed `SKILL.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    pub name: String,
    pub description: String,
    pub allowed_tools: Vec<String>,
    pub body: String,
}

#[derive(Deserialize)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
    #[serde(rename = "allowed-tools", alias = "allowed_tools")]
    allowed_tools: Option<AllowedTools>,
}

/// `allowed-tools: Read, Grep` or a YAML list.
#[derive(Deserialize)]
#[serde(untagged)]
enum AllowedTools {
    One(String),
    Many(Vec<String>),
}

/// Parses the text of a `SKILL.md` whose folder is `folder` (the name when the front
/// matter has none).
pub fn parse_skill_file(text: &str, folder: &str) -> Result<SkillFile, SkillError> {
    let (yaml, body) = split_front_matter(text).ok_or(SkillError::NoFrontMatter)?;
    if yaml.len() > MAX_FRONT_MATTER_BYTES {
        return Err(SkillError::Yaml(format!("it is longer than {MAX_FRONT_MATTER_BYTES} bytes")));
    }
    let front: FrontMatter = if yaml.trim().is_empty() {
        FrontMatter { name: None, description: None, allowed_tools: None }
    } else {
        serde_yaml::from_str(yaml).map_err(|e| SkillError::Yaml(clean_line(&e.to_string(), 300)))?
    };
    let name = front.name.as_deref().map(str::trim).unwrap_or(folder).to_string();
    if !is_slug(&name) {
        return Err(SkillError::BadName(clean_line(&name, 80)));
    }
    let description = clean_line(front.description.as_deref().unwrap_or_default(), MAX_DESCRIPTION_CHARS);
    if description.is_empty() {
        return Err(SkillError::NoDescription);
    }
    let allowed_tools = match front.allowed_tools {
        None => Vec::new(),
        Some(AllowedTools::One(s)) => s.split(',').map(str::to_string).collect(),
        Some(AllowedTools::Many(list)) => list,
    };
    let allowed_tools = allowed_tools
        .iter()
        .map(|t| clean_line(t, MAX_TOOL_CHARS))
        .filter(|t| !t.is_empty())
        .take(MAX_ALLOWED_TOOLS)
        .collect();
    let body = agent_sandbox::sanitize(body.trim().as_bytes());
    Ok(SkillFile { name, description, allowed_tools, body })
}

/// The front matter and the body, when the text opens with a `---` line and a later
/// `---` line closes it (a byte-order mark and CRLF line ends are tolerated).
fn split_front_matter(text: &str) -> Option<(&str, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first_end = text.find('\n')?;
    if text[..first_end].trim_end() != "---" {
        return None;
    }
    let rest = &text[first_end + 1..];
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    None
}

/// Whether `name` is a plain skill name: 1 to 64 lowercase ASCII letters, digits, `-`
/// and `_`, starting with a letter or digit (it becomes a path inside the sandbox and a
/// word in the prompt).
pub fn is_slug(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// `text` on one line, for the prompt and the screen: escape sequences removed, control,
/// bidi and zero-width characters dropped, whitespace runs made one space, at most
/// `max_chars` characters (cut with `…`).
pub fn clean_line(text: &str, max_chars: usize) -> String {
    let plain = agent_sandbox::sanitize(text.as_bytes());
    let mut out = String::with_capacity(plain.len().min(max_chars * 4));
    let mut count = 0;
    for word in plain.split(|c: char| c.is_whitespace()).filter(|w| !w.is_empty()) {
        let word: String = word.chars().filter(|c| !hidden(*c)).collect();
        if word.is_empty() {
            continue;
        }
        if count > 0 {
            out.push(' ');
            count += 1;
        }
        for c in word.chars() {
            if count >= max_chars {
                out.push('…');
                return out;
            }
            out.push(c);
            count += 1;
        }
    }
    out
}

/// Characters a one-line text never keeps: controls (and the replacement character
/// [`agent_sandbox::sanitize`] leaves for them), bidi controls and invisible characters.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{FFFD}'
                | '\u{061C}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{FEFF}'
        )
}
