//! `archive`: get files out of an archive (level 1: extract a .tar.gz into a folder;
//! level 2: extract one member of a nested .tar.gz to a new name and nothing else;
//! level 3: extract a .zip without `unzip` and name the file that holds a word). The
//! Dockerfile builds the archive from staged files and removes them.

use super::draw::{answer_exists_test, lines, phrase, py, py_dict, py_list, Ctx, Spec};
use super::vocab::{EXTS, WORDS};
use super::CodeFamily;

/// The family.
pub(crate) const FAMILY: CodeFamily = CodeFamily {
    name: "archive",
    summary: "extract files from a .tar.gz or .zip archive",
    levels: [
        "extract a whole .tar.gz into a new folder",
        "extract one member of a nested .tar.gz under a new name, and nothing else",
        "extract a .zip with no `unzip` installed, then name the file that contains a word",
    ],
    build,
};

/// Where the Dockerfile stages the files it archives.
const STAGE: &str = "_stage";

fn build(ctx: &mut Ctx) -> Spec {
    match ctx.level {
        1 => whole_tar(ctx),
        2 => one_member(ctx),
        _ => zip_and_find(ctx),
    }
}

/// A few lines of filler words.
fn contents(ctx: &mut Ctx, filler: &[String]) -> Vec<String> {
    let n = ctx.rng.range(2, 5) as usize;
    (0..n)
        .map(|_| {
            let len = ctx.rng.range(3, 6) as usize;
            phrase(&mut ctx.rng, filler, len).join(" ")
        })
        .collect()
}

/// The tests that a folder holds `files` (name → contents).
fn extracted_tests(out: &str, files: &[(String, String)]) -> String {
    format!(
        "OUT = Path(\"/app/{out}\")\nFILES = {files}\n\n\n\
         def test_folder_exists():\n    assert OUT.is_dir(), f\"{{OUT}} is not a folder\"\n\n\n\
         def test_every_file_is_extracted():\n    missing = [n for n in FILES if not (OUT / n).is_file()]\n    \
         assert not missing, f\"missing in {{OUT}}: {{missing}}\"\n\n\n\
         def test_contents_are_intact():\n    for name, text in FILES.items():\n        \
         assert (OUT / name).read_text() == text, name\n",
        files = py_dict(files),
    )
}

fn whole_tar(ctx: &mut Ctx) -> Spec {
    let arch = ctx.word("archive", WORDS);
    let out = ctx.word("folder", WORDS);
    let names = ctx.some_words("file", WORDS, 3, 5);
    let exts = ctx.words("extension", EXTS, 2);
    let filler = ctx.filler(WORDS, 8);
    let mut members = Vec::new();
    for n in &names {
        let text = lines(&contents(ctx, &filler));
        members.push((format!("{n}.{}", ctx.rng.pick(&exts)), text));
    }
    let example = members[0].0.clone();
    Spec {
        instruction: format!(
            "The archive /app/{arch}.tar.gz holds a few files. Extract all of them into a new folder /app/{out} (so \
             that, for example, /app/{out}/{example} exists)."
        ),
        category: "file-operations".into(),
        files: members.iter().map(|(n, t)| (format!("{STAGE}/{n}"), t.clone())).collect(),
        run: vec![format!("cd /app/{STAGE} && tar -czf /app/{arch}.tar.gz * && cd /app && rm -rf /app/{STAGE}")],
        packages: Vec::new(),
        solution: format!("mkdir -p /app/{out}\ntar -xzf /app/{arch}.tar.gz -C /app/{out}\n"),
        tests: extracted_tests(&out, &members),
    }
}

fn one_member(ctx: &mut Ctx) -> Spec {
    let arch = ctx.word("archive", WORDS);
    let top = ctx.word("folder", WORDS);
    let subs = ctx.words("folder", WORDS, 2);
    let target = format!("{}.txt", ctx.word("file", WORDS));
    let filler = ctx.filler(WORDS, 8);
    let mut members: Vec<(String, String)> = Vec::new();
    for sub in &subs {
        for n in ctx.some_words("file", WORDS, 2, 3) {
            let text = lines(&contents(ctx, &filler));
            members.push((format!("{top}/{sub}/{n}.txt"), text));
        }
    }
    let pick = ctx.rng.below(members.len());
    let (member, text) = members[pick].clone();
    let others: Vec<String> = members.iter().filter(|(m, _)| *m != member).map(|(m, _)| m.clone()).collect();
    Spec {
        instruction: format!(
            "The archive /app/{arch}.tar.gz holds a folder tree. Extract only the file `{member}` from it and save \
             that file's contents as /app/{target}. Do not extract the other files of the archive."
        ),
        category: "file-operations".into(),
        files: members.iter().map(|(n, t)| (format!("{STAGE}/{n}"), t.clone())).collect(),
        run: vec![format!("cd /app/{STAGE} && tar -czf /app/{arch}.tar.gz {top} && cd /app && rm -rf /app/{STAGE}")],
        packages: Vec::new(),
        solution: format!("tar -xzf /app/{arch}.tar.gz -O {member} > /app/{target}\n"),
        tests: format!(
            "TARGET = Path(\"/app/{target}\")\nOTHERS = {others}\n\n\n\
             def test_target_file_exists():\n    assert TARGET.is_file(), f\"{{TARGET}} was not written\"\n\n\n\
             def test_target_has_the_members_contents():\n    assert TARGET.read_text() == {text}\n\n\n\
             def test_other_members_were_not_extracted():\n    found = [m for m in OTHERS if (Path(\"/app\") / m).exists() \
             or (Path(\"/app\") / Path(m).name).exists()]\n    assert not found, f\"extracted too: {{found}}\"\n",
            others = py_list(&others),
            text = py(&text),
        ),
    }
}

fn zip_and_find(ctx: &mut Ctx) -> Spec {
    let arch = ctx.word("archive", WORDS);
    let out = ctx.word("folder", WORDS);
    let kw = ctx.word("keyword", WORDS);
    let names = ctx.some_words("file", WORDS, 3, 5);
    let filler = ctx.filler(WORDS, 8);
    let holder = ctx.rng.below(names.len());
    let mut members = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let mut rows = contents(ctx, &filler);
        if i == holder {
            let at = ctx.rng.below(rows.len());
            rows[at] = format!("{} {kw}", rows[at]);
        }
        members.push((format!("{n}.txt"), lines(&rows)));
    }
    let answer = members[holder].0.clone();
    Spec {
        instruction: format!(
            "The archive /app/{arch}.zip holds several text files (there is no `unzip` program here, but python3 \
             is installed). Extract all of them into a new folder /app/{out}. Then find the one file that contains \
             the word `{kw}` and write its file name (only the name, without a folder) to /app/answer.txt."
        ),
        category: "file-operations".into(),
        files: members.iter().map(|(n, t)| (format!("{STAGE}/{n}"), t.clone())).collect(),
        run: vec![format!(
            "cd /app/{STAGE} && python3 -m zipfile -c /app/{arch}.zip * && cd /app && rm -rf /app/{STAGE}"
        )],
        packages: Vec::new(),
        solution: format!(
            "mkdir -p /app/{out}\npython3 -m zipfile -e /app/{arch}.zip /app/{out}\n\
             basename \"$(grep -l '{kw}' /app/{out}/*)\" > /app/answer.txt\n"
        ),
        tests: format!(
            "{}\n\n{exists}\n\ndef test_answer_names_the_file():\n    \
             assert Path(\"/app/answer.txt\").read_text().strip() == {answer}\n",
            extracted_tests(&out, &members).trim_end(),
            exists = answer_exists_test("/app/answer.txt"),
            answer = py(&answer),
        ),
    }
}
