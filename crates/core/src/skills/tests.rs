//! The parser, discovery (hostile projects included), the listing and placement.

use std::path::Path;

use super::*;

const PDF: &str = "---\nname: pdf-report\ndescription: Turn a Markdown file into a PDF report. Use when asked for a PDF.\nallowed-tools: Bash(python3:*), Read\nlicense: MIT\n---\n\n# PDF reports\n\nRun `scripts/make.sh INPUT`.\n";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn project_with(skills: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (folder, text) in skills {
        write(&dir.path().join(".claude/skills").join(folder).join("SKILL.md"), text);
    }
    dir
}

#[test]
fn a_claude_skill_parses() {
    let s = parse_skill_file(PDF, "pdf-report").unwrap();
    assert_eq!(s.name, "pdf-report");
    assert!(s.description.starts_with("Turn a Markdown file"));
    assert_eq!(s.allowed_tools, vec!["Bash(python3:*)", "Read"]);
    assert!(s.body.starts_with("# PDF reports") && s.body.contains("scripts/make.sh"));
    let crlf = PDF.replace('\n', "\r\n");
    assert_eq!(parse_skill_file(&crlf, "x").unwrap().name, "pdf-report");
    let listed = "---\ndescription: d\nallowed-tools: [Read, Grep]\n---\nbody";
    let s = parse_skill_file(listed, "from-folder").unwrap();
    assert_eq!((s.name.as_str(), s.allowed_tools.len()), ("from-folder", 2));
}

#[test]
fn bad_front_matter_is_an_error_not_a_panic() {
    assert_eq!(parse_skill_file("# no front matter", "x"), Err(SkillError::NoFrontMatter));
    assert_eq!(parse_skill_file("---\nname: x\ndescription: y\n", "x"), Err(SkillError::NoFrontMatter));
    assert!(matches!(parse_skill_file("---\nname: [x\n---\n", "x"), Err(SkillError::Yaml(_))));
    assert!(matches!(parse_skill_file("---\n- a list\n---\n", "x"), Err(SkillError::Yaml(_))));
    assert_eq!(parse_skill_file("---\nname: x\n---\nbody", "x"), Err(SkillError::NoDescription));
    assert!(matches!(
        parse_skill_file("---\nname: ../../etc\ndescription: d\n---\n", "x"),
        Err(SkillError::BadName(_))
    ));
    assert!(matches!(parse_skill_file("---\nname: Big Name\ndescription: d\n---\n", "x"), Err(SkillError::BadName(_))));
    let bomb = format!(
        "---\na: &a [{}]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n---\n",
        "x,".repeat(50)
    );
    let _ = parse_skill_file(&bomb, "x");
    for text in ["", "---", "---\n", "\u{feff}---\n---", "---\n---\n", "----\n---\n"] {
        let _ = parse_skill_file(text, "x");
    }
}

#[test]
fn names_and_descriptions_lose_escapes_and_controls() {
    let text = "---\nname: tidy\ndescription: \"Tidy \\e[31mred\\e[0m up\\u202e evil\\u200b\\a\\nnext line\\e]52;c;aGk=\\a\"\n---\n";
    let s = parse_skill_file(text, "tidy").unwrap();
    assert_eq!(s.description, "Tidy red up evil next line");
    assert!(s.description.chars().all(|c| !c.is_control()));
    assert!(is_slug("a-b_1") && !is_slug("") && !is_slug("-a") && !is_slug("a/b") && !is_slug(&"a".repeat(65)));
    assert_eq!(clean_line("abcdef", 3), "abc…");
}

#[test]
fn a_project_skill_is_found_with_its_files() {
    let dir = project_with(&[("pdf-report", PDF)]);
    write(&dir.path().join(".claude/skills/pdf-report/scripts/make.sh"), "echo hi\n");
    write(&dir.path().join(".claude/skills/pdf-report/reference.md"), "ref\n");
    let found = discover_project(&dir.path().canonicalize().unwrap());
    assert!(found.notices.is_empty(), "{:?}", found.notices);
    let s = found.get("pdf-report").unwrap();
    assert_eq!(s.source, SkillSource::Project);
    assert_eq!(s.shown_path, ".claude/skills/pdf-report/SKILL.md");
    assert_eq!(s.files, vec!["reference.md", "scripts/make.sh"]);
}

#[test]
fn hostile_projects_are_refused_by_name() {
    let outside = project_with(&[("stolen", "---\nname: stolen\ndescription: from elsewhere\n---\nsecret")]);
    let dir = project_with(&[("ok", "---\ndescription: fine\n---\nbody")]);
    let skills = dir.path().join(".claude/skills");
    // A skill folder and a SKILL.md that link out of the project.
    std::os::unix::fs::symlink(outside.path().join(".claude/skills/stolen"), skills.join("linked")).unwrap();
    std::fs::create_dir_all(skills.join("file-link")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join(".claude/skills/stolen/SKILL.md"),
        skills.join("file-link/SKILL.md"),
    )
    .unwrap();
    // A huge file, a FIFO, bad front matter, a name that is a path, escape codes in a folder name.
    write(&skills.join("huge/SKILL.md"), &format!("---\ndescription: big\n---\n{}", "x".repeat(300 * 1024)));
    std::fs::create_dir_all(skills.join("fifo")).unwrap();
    let made = std::process::Command::new("mkfifo").arg(skills.join("fifo/SKILL.md")).status().unwrap();
    assert!(made.success());
    write(&skills.join("broken/SKILL.md"), "---\nname: [\n---\n");
    write(&skills.join("escape/SKILL.md"), "---\nname: ../../x\ndescription: d\n---\n");
    write(&skills.join("bad\x1b[31mname/SKILL.md"), "---\nname: fine-name\ndescription: d\n---\n");
    // A file inside a skill that links out is not listed.
    std::os::unix::fs::symlink("/etc/passwd", skills.join("ok/passwd")).unwrap();
    let found = discover_project(&dir.path().canonicalize().unwrap());
    let names: Vec<&str> = found.skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, vec!["ok"], "{:?}", found.notices);
    assert!(found.get("ok").unwrap().files.is_empty());
    let said = found.notices.join("\n");
    for (what, why) in [
        ("linked", "leads out of the project"),
        ("file-link/SKILL.md", "leads out of the project"),
        ("huge/SKILL.md", "more than the"),
        ("fifo/SKILL.md", "not a regular file"),
        ("broken/SKILL.md", "not valid YAML"),
        ("escape/SKILL.md", "not a plain name"),
        ("unprintable", "skipped"),
    ] {
        assert!(said.lines().any(|l| l.contains(what) && l.contains(why)), "{what}: {said}");
    }
    assert!(!said.contains('\x1b'));
}

#[test]
fn the_project_wins_over_the_user_and_the_first_folder_wins() {
    let project = project_with(&[("dup", "---\ndescription: the project's\n---\np")]);
    write(&project.path().join(".agents/skills/dup/SKILL.md"), "---\ndescription: later folder\n---\nq");
    let home = tempfile::tempdir().unwrap();
    write(&home.path().join(".claude/skills/dup/SKILL.md"), "---\ndescription: the user's\n---\nu");
    write(&home.path().join(".claude/skills/mine/SKILL.md"), "---\ndescription: only mine\n---\nm");
    let user = discover(&[SkillRoot {
        dir: home.path().join(".claude/skills"),
        shown: "~/.claude/skills".into(),
        source: SkillSource::User,
        bound: home.path().to_path_buf(),
    }]);
    let all = discover_project(&project.path().canonicalize().unwrap()).merged(user);
    assert_eq!(all.get("dup").unwrap().description, "the project's");
    assert_eq!(all.get("mine").unwrap().source, SkillSource::User);
    assert_eq!(all.notices.len(), 2, "{:?}", all.notices);
    assert!(all.notices.iter().any(|n| n.contains("~/.claude/skills/dup") && n.contains(".claude/skills/dup")));
    assert!(all.describe().contains("mine · user · ~/.claude/skills/mine/SKILL.md"), "{}", all.describe());
}

fn many(n: usize) -> Skills {
    let skills = (0..n)
        .map(|i| Skill {
            name: format!("skill-{i:03}"),
            description: format!("does thing number {i} {}", "well ".repeat(20)),
            allowed_tools: Vec::new(),
            body: format!("body {i}"),
            source: SkillSource::Project,
            dir: format!("/p/.claude/skills/skill-{i:03}").into(),
            shown_path: format!(".claude/skills/skill-{i:03}/SKILL.md"),
            files: vec!["run.sh".into()],
            sandbox_dir: None,
        })
        .collect();
    Skills { skills, notices: Vec::new() }
}

#[test]
fn the_listing_keeps_to_its_budget_and_names_the_rest() {
    assert_eq!(skills_section(&Skills::default(), 4000), None);
    let section = skills_section(&many(3), 4000).unwrap();
    assert!(section.contains("- skill-002: does thing number 2") && !section.contains("More skills"));
    let section = skills_section(&many(200), 4000).unwrap();
    assert!(section.len() <= 4000, "{}", section.len());
    assert!(section.contains("- skill-000: does") && section.contains("More skills"), "{section}");
    assert!(section.contains("skill-040") && section.ends_with("more"), "{section}");
}

#[test]
fn a_skill_loads_with_its_files_in_the_sandbox() {
    let mut skills = many(2);
    skills.skills[1].dir = "/nowhere/user-skill".into();
    let ws = tempfile::tempdir().unwrap();
    let ws_real = ws.path().canonicalize().unwrap();
    skills.skills[0].dir = ws_real.join(".claude/skills/skill-000");
    let mounts = place(&mut skills, &[format!("{}:/workspace", ws.path().display())], true);
    assert_eq!(skills.skills[0].sandbox_dir.as_deref(), Some("/workspace/.claude/skills/skill-000"));
    assert_eq!(skills.skills[1].sandbox_dir.as_deref(), Some("/opt/agent/skills/skill-001"));
    assert_eq!(
        mounts,
        vec![agent_sandbox::Mount::Bind {
            source: "/nowhere/user-skill".into(),
            target: "/opt/agent/skills/skill-001".into(),
            read_only: true
        }]
    );
    let out = load_skill(&skills, "skill-000").unwrap();
    assert!(out.contains("/workspace/.claude/skills/skill-000/run.sh") && out.ends_with("body 0"), "{out}");
    let err = load_skill(&skills, "nope").unwrap_err();
    assert!(err.contains("skill-000, skill-001"), "{err}");
    let mut unplaced = many(1);
    assert!(place(&mut unplaced, &[], false).is_empty());
    assert!(load_skill(&unplaced, "skill-000").unwrap().contains("not reachable in this sandbox"));
}
