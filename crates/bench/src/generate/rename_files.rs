//! `rename-files`: rename the files of a folder (level 1: change one extension; level 2:
//! spaces in names become underscores; level 3: each file takes the number on its first
//! line as its name).

use super::draw::{phrase, py_dict, py_list, Ctx, Spec};
use super::vocab::{EXTS, WORDS};
use super::CodeFamily;

/// The family.
pub(crate) const FAMILY: CodeFamily = CodeFamily {
    name: "rename-files",
    summary: "rename the files of a folder: another extension, no spaces, or a name read from the file",
    levels: [
        "change the extension of the files of one extension (a `for` loop with `mv`)",
        "replace the spaces in file names with underscores (quoting)",
        "rename each .txt file to the number on its first line (`id: N`), other files stay",
    ],
    build,
};

fn build(ctx: &mut Ctx) -> Spec {
    match ctx.level {
        1 => extension(ctx),
        2 => spaces(ctx),
        _ => by_id(ctx),
    }
}

/// What the tests check: renamed files (new name → contents), names that must be
/// gone, files that must stay as they are.
struct Outcome {
    dir: String,
    renamed: Vec<(String, String)>,
    gone: Vec<String>,
    kept: Vec<(String, String)>,
}

fn tests(o: &Outcome) -> String {
    format!(
        "DIR = Path(\"/app/{dir}\")\nRENAMED = {renamed}\nGONE = {gone}\nKEPT = {kept}\n\n\n\
         def test_renamed_files_exist_with_their_contents():\n    for name, text in RENAMED.items():\n        \
         p = DIR / name\n        assert p.is_file(), f\"{{p}} is missing\"\n        assert p.read_text() == text, \
         f\"{{p}} does not hold the contents of the file it was renamed from\"\n\n\n\
         def test_old_names_are_gone():\n    left = [n for n in GONE if (DIR / n).exists()]\n    \
         assert not left, f\"still there: {{left}}\"\n\n\n\
         def test_other_files_are_untouched():\n    for name, text in KEPT.items():\n        p = DIR / name\n        \
         assert p.is_file() and p.read_text() == text, f\"{{p}} should not have changed\"\n\n\n\
         def test_nothing_else_appeared():\n    names = sorted(p.name for p in DIR.iterdir())\n    \
         assert names == sorted(list(RENAMED) + list(KEPT)), names\n",
        dir = o.dir,
        renamed = py_dict(&o.renamed),
        gone = py_list(&o.gone),
        kept = py_dict(&o.kept),
    )
}

/// A file's contents: its own line of words.
fn contents(ctx: &mut Ctx, filler: &[String]) -> String {
    let n = ctx.rng.range(3, 7) as usize;
    format!("{}\n", phrase(&mut ctx.rng, filler, n).join(" "))
}

fn extension(ctx: &mut Ctx) -> Spec {
    let dir = ctx.word("folder", WORDS);
    let exts = ctx.words("extension", EXTS, 3);
    let (old, new, other) = (&exts[0], &exts[1], &exts[2]);
    let names = ctx.some_words("file", WORDS, 3, 5);
    let others = ctx.some_words("file", WORDS, 1, 2);
    let filler = ctx.filler(WORDS, 6);
    let mut o = Outcome { dir: dir.clone(), renamed: vec![], gone: vec![], kept: vec![] };
    let mut files = Vec::new();
    for n in &names {
        let text = contents(ctx, &filler);
        files.push((format!("{dir}/{n}.{old}"), text.clone()));
        o.renamed.push((format!("{n}.{new}"), text));
        o.gone.push(format!("{n}.{old}"));
    }
    for n in &others {
        let text = contents(ctx, &filler);
        files.push((format!("{dir}/{n}.{other}"), text.clone()));
        o.kept.push((format!("{n}.{other}"), text));
    }
    Spec {
        instruction: format!(
            "In the folder /app/{dir}, rename every file whose name ends in `.{old}` so that it ends in `.{new}` \
             instead (for example {ex}.{old} becomes {ex}.{new}). Keep the rest of each name and the contents.\n\
             Leave the other files as they are.",
            ex = names[0]
        ),
        category: "file-operations".into(),
        files,
        run: vec![],
        packages: Vec::new(),
        solution: format!("cd /app/{dir}\nfor f in *.{old}; do mv -- \"$f\" \"${{f%.{old}}}.{new}\"; done\n"),
        tests: tests(&o),
    }
}

fn spaces(ctx: &mut Ctx) -> Spec {
    let dir = ctx.word("folder", WORDS);
    let ext = ctx.word("extension", EXTS);
    let n = ctx.rng.range(3, 4) as usize;
    let filler = ctx.filler(WORDS, 6);
    let mut o = Outcome { dir: dir.clone(), renamed: vec![], gone: vec![], kept: vec![] };
    let mut files = Vec::new();
    for _ in 0..n {
        let parts = ctx.some_words("file", WORDS, 2, 3);
        let name = format!("{}.{ext}", parts.join(" "));
        let text = contents(ctx, &filler);
        files.push((format!("{dir}/{name}"), text.clone()));
        o.renamed.push((name.replace(' ', "_"), text));
        o.gone.push(name);
    }
    let plain = format!("{}.{ext}", ctx.word("file", WORDS));
    let text = contents(ctx, &filler);
    files.push((format!("{dir}/{plain}"), text.clone()));
    o.kept.push((plain, text));
    let (ex, ex_new) = (o.gone[0].clone(), o.renamed[0].0.clone());
    Spec {
        instruction: format!(
            "Some files in the folder /app/{dir} have spaces in their names. Rename them so that every space in a \
             name becomes an underscore (for example `{ex}` becomes `{ex_new}`). Keep their contents, and leave \
             the files without spaces as they are."
        ),
        category: "file-operations".into(),
        files,
        run: vec![],
        packages: Vec::new(),
        solution: format!("cd /app/{dir}\nfor f in *' '*; do mv -- \"$f\" \"${{f// /_}}\"; done\n"),
        tests: tests(&o),
    }
}

fn by_id(ctx: &mut Ctx) -> Spec {
    let dir = ctx.word("folder", WORDS);
    let names = ctx.some_words("file", WORDS, 3, 5);
    let note = ctx.word("file", WORDS);
    let other_ext = ctx.word("extension", EXTS);
    let filler = ctx.filler(WORDS, 6);
    let mut ids: Vec<i64> = Vec::new();
    while ids.len() < names.len() + 1 {
        let id = ctx.rng.range(200, 999);
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    let mut o = Outcome { dir: dir.clone(), renamed: vec![], gone: vec![], kept: vec![] };
    let mut files = Vec::new();
    for (n, id) in names.iter().zip(&ids) {
        let text = format!("id: {id}\n{}", contents(ctx, &filler));
        files.push((format!("{dir}/{n}.txt"), text.clone()));
        o.renamed.push((format!("{id}.txt"), text));
        o.gone.push(format!("{n}.txt"));
    }
    let text = format!("id: {}\n{}", ids[names.len()], contents(ctx, &filler));
    files.push((format!("{dir}/{note}.{other_ext}"), text.clone()));
    o.kept.push((format!("{note}.{other_ext}"), text));
    Spec {
        instruction: format!(
            "Each .txt file in the folder /app/{dir} starts with a line `id: NUMBER`. Rename every .txt file to \
             NUMBER.txt, using the number on its own first line (a file that starts with `id: 123` becomes \
             123.txt). Keep the contents.\n\
             Files that do not end in .txt stay as they are."
        ),
        category: "file-operations".into(),
        files,
        run: vec![],
        packages: Vec::new(),
        solution: format!(
            "cd /app/{dir}\nfor f in *.txt; do\n  id=$(head -n 1 \"$f\" | sed 's/^id: *//')\n  mv -- \"$f\" \"$id.txt\"\n\
             done\n"
        ),
        tests: tests(&o),
    }
}
