//! What the model sees of the skills: their names and descriptions in the system prompt,
//! within a budget (the rest by name only), and one skill's body with the paths of its
//! files in the sandbox when it calls the `skill` tool.

use super::{Skill, Skills};

/// The characters of the system prompt the skill listing may take by default.
pub const DEFAULT_PROMPT_BUDGET: usize = 4000;
/// The longest description in the listing (the `skill` tool's answer has it all).
const LISTED_DESCRIPTION_CHARS: usize = 300;

const INTRO: &str = "# Skills\n\nSkills are instructions, scripts and references for particular tasks. When a task \
matches a skill's description, call the `skill` tool with its name first to read its instructions, and follow \
them; run its scripts with bash, in the sandbox.\n";

/// The system prompt's skill section: each skill as `- name: description` while the
/// budget lasts, then the others by name (as many as fit); `None` without skills.
pub fn skills_section(skills: &Skills, budget: usize) -> Option<String> {
    if skills.is_empty() {
        return None;
    }
    let lines: Vec<String> =
        skills.skills.iter().map(|s| format!("\n- {}: {}", s.name, short(&s.description))).collect();
    let total = INTRO.len() + lines.iter().map(String::len).sum::<usize>();
    // When not all fit, a quarter of the budget is kept for the names of the rest.
    let for_lines = if total <= budget { budget } else { budget / 4 * 3 };
    let mut out = String::from(INTRO);
    let mut rest: Vec<&str> = Vec::new();
    for (s, line) in skills.skills.iter().zip(&lines) {
        if rest.is_empty() && out.len() + line.len() <= for_lines {
            out.push_str(line);
        } else {
            rest.push(&s.name);
        }
    }
    if !rest.is_empty() {
        const HEAD: &str = "\n\nMore skills (load one by name to see what it is for): ";
        // Room for " and 9999 more".
        const TAIL: usize = 16;
        let mut names = String::new();
        let mut shown = 0;
        for name in &rest {
            let sep = if shown == 0 { "" } else { ", " };
            if out.len() + HEAD.len() + names.len() + sep.len() + name.len() + TAIL > budget {
                break;
            }
            names.push_str(sep);
            names.push_str(name);
            shown += 1;
        }
        out.push_str(HEAD);
        out.push_str(&names);
        if shown < rest.len() {
            let sep = if shown == 0 { "" } else { " and " };
            out.push_str(&format!("{sep}{} more", rest.len() - shown));
        }
    }
    Some(out)
}

fn short(description: &str) -> String {
    match description.char_indices().nth(LISTED_DESCRIPTION_CHARS) {
        Some((cut, _)) => format!("{}…", &description[..cut]),
        None => description.to_string(),
    }
}

/// The `skill` tool's answer for `name`: the body, where the skill's files are in the
/// sandbox and how to run them; an error names the skills there are.
pub fn load_skill(skills: &Skills, name: &str) -> Result<String, String> {
    let name = name.trim();
    let Some(skill) = skills.get(name) else {
        let known: Vec<&str> = skills.skills.iter().map(|s| s.name.as_str()).collect();
        return Err(format!(
            "there is no skill `{}`; the skills are: {}",
            super::clean_line(name, 80),
            known.join(", ")
        ));
    };
    Ok(render(skill))
}

fn render(skill: &Skill) -> String {
    let mut out = format!("skill `{}` ({} skill, {})\n", skill.name, skill.source.name(), skill.shown_path);
    match &skill.sandbox_dir {
        Some(dir) => {
            out.push_str(&format!(
                "Its folder in the sandbox is {dir}: run its scripts from there with bash (e.g. `bash {dir}/SCRIPT` or \
                 `python3 {dir}/SCRIPT`); where its instructions name a path relative to the skill, it is below {dir}.\n"
            ));
            if !skill.files.is_empty() {
                out.push_str("Its files:\n");
                for f in &skill.files {
                    out.push_str(&format!("  {dir}/{f}\n"));
                }
            }
        }
        None if skill.files.is_empty() => {}
        None => out.push_str(&format!(
            "Its {} other file(s) are not reachable in this sandbox: use its instructions only.\n",
            skill.files.len()
        )),
    }
    out.push('\n');
    out.push_str(&skill.body);
    out
}
