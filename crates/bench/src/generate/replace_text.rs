//! `replace-text`: replace a word in text files (level 1: one file; level 2: the .txt
//! files of a folder, another file left alone; level 3: also delete the lines holding a
//! second word).

use super::draw::{lines, phrase, py, py_dict, Ctx, Spec};
use super::vocab::{EXTS, WORDS};
use super::CodeFamily;

/// The family.
pub(crate) const FAMILY: CodeFamily = CodeFamily {
    name: "replace-text",
    summary: "replace a word with another in text files (sed), optionally deleting lines",
    levels: [
        "one file: `sed -i s/OLD/NEW/g FILE`",
        "the .txt files of a folder; a file with another extension must stay as it is",
        "delete the lines that hold one word and replace another in the rest",
    ],
    build,
};

fn build(ctx: &mut Ctx) -> Spec {
    match ctx.level {
        1 => one_file(ctx),
        2 => folder(ctx),
        _ => delete_and_replace(ctx),
    }
}

/// `n` lines of filler; the first `with` of them (before shuffling) hold `word`.
fn text(ctx: &mut Ctx, filler: &[String], n: usize, word: &str, with: usize) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..n {
        let len = ctx.rng.range(3, 7) as usize;
        let mut words = phrase(&mut ctx.rng, filler, len);
        if i < with {
            let at = ctx.rng.below(words.len() + 1);
            words.insert(at, word.to_string());
        }
        out.push(words.join(" "));
    }
    ctx.rng.shuffle(&mut out);
    out
}

fn one_file(ctx: &mut Ctx) -> Spec {
    let file = format!("{}.txt", ctx.word("file", WORDS));
    let old = ctx.word("old-word", WORDS);
    let new = ctx.word("new-word", WORDS);
    let filler = ctx.filler(WORDS, 8);
    let n = ctx.rng.range(6, 12) as usize;
    let with = ctx.rng.range(2, 5) as usize;
    let before = lines(&text(ctx, &filler, n, &old, with));
    let after = before.replace(old.as_str(), &new);
    Spec {
        instruction: format!(
            "In the file /app/{file}, replace every occurrence of the word `{old}` with `{new}`. Change nothing else."
        ),
        category: "file-operations".into(),
        files: vec![(file.clone(), before)],
        run: vec![],
        packages: Vec::new(),
        solution: format!("sed -i 's/{old}/{new}/g' /app/{file}\n"),
        tests: format!(
            "P = Path(\"/app/{file}\")\nEXPECTED = {expected}\n\n\n\
             def test_old_word_is_gone():\n    assert {old_py} not in P.read_text()\n\n\n\
             def test_new_word_is_where_the_old_one_was():\n    assert P.read_text().count({new_py}) == {with}\n\n\n\
             def test_the_rest_is_unchanged():\n    assert P.read_text() == EXPECTED\n",
            expected = py(&after),
            old_py = py(&old),
            new_py = py(&new),
        ),
    }
}

fn folder(ctx: &mut Ctx) -> Spec {
    let dir = ctx.word("folder", WORDS);
    let names = ctx.words("file", WORDS, 3);
    let other = ctx.word("file", WORDS);
    let other_ext = ctx.word("extension", EXTS);
    let old = ctx.word("old-word", WORDS);
    let new = ctx.word("new-word", WORDS);
    let filler = ctx.filler(WORDS, 8);
    let mut files = Vec::new();
    let mut changed = Vec::new();
    for n in &names {
        let count = ctx.rng.range(4, 8) as usize;
        let with = ctx.rng.range(1, 3) as usize;
        let before = lines(&text(ctx, &filler, count, &old, with));
        changed.push((format!("{n}.txt"), before.replace(old.as_str(), &new)));
        files.push((format!("{dir}/{n}.txt"), before));
    }
    let count = ctx.rng.range(3, 6) as usize;
    let kept_text = lines(&text(ctx, &filler, count, &old, 2));
    let kept = vec![(format!("{other}.{other_ext}"), kept_text.clone())];
    files.push((format!("{dir}/{other}.{other_ext}"), kept_text));
    Spec {
        instruction: format!(
            "In every file of the folder /app/{dir} whose name ends in `.txt`, replace each occurrence of the word \
             `{old}` with `{new}`. Change nothing else; files with other endings must stay exactly as they are."
        ),
        category: "file-operations".into(),
        files,
        run: vec![],
        packages: Vec::new(),
        solution: format!("sed -i 's/{old}/{new}/g' /app/{dir}/*.txt\n"),
        tests: format!(
            "DIR = Path(\"/app/{dir}\")\nCHANGED = {changed}\nKEPT = {kept}\n\n\n\
             def test_old_word_is_gone_from_the_txt_files():\n    for name in CHANGED:\n        \
             assert {old_py} not in (DIR / name).read_text(), name\n\n\n\
             def test_txt_files_hold_the_replacement_and_nothing_else_changed():\n    for name, text in CHANGED.items():\n        \
             assert (DIR / name).read_text() == text, name\n\n\n\
             def test_other_file_is_untouched():\n    for name, text in KEPT.items():\n        \
             assert (DIR / name).read_text() == text, name\n",
            changed = py_dict(&changed),
            kept = py_dict(&kept),
            old_py = py(&old),
        ),
    }
}

fn delete_and_replace(ctx: &mut Ctx) -> Spec {
    let file = format!("{}.txt", ctx.word("file", WORDS));
    let drop = ctx.word("delete-word", WORDS);
    let old = ctx.word("old-word", WORDS);
    let new = ctx.word("new-word", WORDS);
    let filler = ctx.filler(WORDS, 8);
    let n = ctx.rng.range(8, 14) as usize;
    let dropped = ctx.rng.range(2, 4) as usize;
    let mut rows = text(ctx, &filler, n, &drop, dropped);
    // Some of the old word sits on lines that go, some on lines that stay.
    for (i, row) in rows.iter_mut().enumerate() {
        if i % 2 == 0 {
            row.push_str(&format!(" {old}"));
        }
    }
    for goes in [false, true] {
        let has = |r: &String| r.contains(drop.as_str()) == goes;
        if !rows.iter().any(|r| has(r) && r.contains(old.as_str())) {
            if let Some(r) = rows.iter_mut().find(|r| has(r)) {
                r.push_str(&format!(" {old}"));
            }
        }
    }
    let before = lines(&rows);
    let kept: Vec<String> =
        rows.iter().filter(|r| !r.contains(drop.as_str())).map(|r| r.replace(old.as_str(), &new)).collect();
    let after = lines(&kept);
    Spec {
        instruction: format!(
            "Edit the file /app/{file}: delete every line that contains the word `{drop}`, and in the lines that \
             remain replace every `{old}` with `{new}`. Keep the remaining lines in their order."
        ),
        category: "file-operations".into(),
        files: vec![(file.clone(), before)],
        run: vec![],
        packages: Vec::new(),
        solution: format!("sed -i -e '/{drop}/d' -e 's/{old}/{new}/g' /app/{file}\n"),
        tests: format!(
            "P = Path(\"/app/{file}\")\nEXPECTED = {expected}\n\n\n\
             def test_lines_with_the_word_are_deleted():\n    assert {drop_py} not in P.read_text()\n\n\n\
             def test_old_word_is_replaced():\n    text = P.read_text()\n    assert {old_py} not in text and {new_py} in text\n\n\n\
             def test_the_file_is_exactly_as_asked():\n    assert P.read_text() == EXPECTED\n",
            expected = py(&after),
            drop_py = py(&drop),
            old_py = py(&old),
            new_py = py(&new),
        ),
    }
}
