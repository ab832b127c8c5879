//! `count-lines`: count the lines that hold a word (level 1: one file; level 2: the
//! `.log` files of a folder, some lines holding the word twice), or find the files that
//! hold it (level 3: by extension, in subfolders, listed sorted).

use super::draw::{answer_exists_test, phrase, py_list, Ctx, Spec};
use super::vocab::{EXTS, WORDS};
use super::CodeFamily;

/// The family.
pub(crate) const FAMILY: CodeFamily = CodeFamily {
    name: "count-lines",
    summary: "count the lines of a file that contain a word, or find the files that contain it",
    levels: [
        "one file: `grep -c WORD FILE`",
        "the .log files of a folder, with other files beside them and lines holding the word twice",
        "list the files of one extension under a folder tree that contain the word, sorted",
    ],
    build,
};

fn build(ctx: &mut Ctx) -> Spec {
    match ctx.level {
        1 => one_file(ctx),
        2 => log_folder(ctx),
        _ => find_files(ctx),
    }
}

/// Lines of 3–6 filler words; `hits` of them hold `kw` once (or `twice` of them twice).
fn text(ctx: &mut Ctx, filler: &[String], n: usize, kw: &str, hits: usize, twice: usize) -> String {
    let mut out: Vec<String> = Vec::new();
    for i in 0..n {
        let len = ctx.rng.range(3, 6) as usize;
        let mut words = phrase(&mut ctx.rng, filler, len);
        if i < hits {
            let at = ctx.rng.below(words.len() + 1);
            words.insert(at, kw.to_string());
            if i < twice {
                words.push(kw.to_string());
            }
        }
        out.push(words.join(" "));
    }
    ctx.rng.shuffle(&mut out);
    super::draw::lines(&out)
}

fn one_file(ctx: &mut Ctx) -> Spec {
    let file = format!("{}.log", ctx.word("file", WORDS));
    let kw = ctx.word("keyword", WORDS);
    let filler = ctx.filler(WORDS, 8);
    let n = ctx.rng.range(12, 24) as usize;
    let hits = ctx.rng.range(3, 8) as usize;
    let body = text(ctx, &filler, n, &kw, hits, 0);
    Spec {
        instruction: format!(
            "Count how many lines of the file /app/{file} contain the word `{kw}`.\n\
             Write only that number to the file /app/answer.txt."
        ),
        category: "file-operations".into(),
        files: vec![(file.clone(), body)],
        run: vec![],
        packages: Vec::new(),
        solution: format!("grep -c '{kw}' /app/{file} > /app/answer.txt\n"),
        tests: count_tests(hits),
    }
}

fn count_tests(expected: usize) -> String {
    format!(
        "{}\n\ndef test_answer_is_the_line_count():\n    text = Path(\"/app/answer.txt\").read_text().strip()\n    \
         assert text == \"{expected}\", f\"expected {expected}, got {{text!r}}\"\n",
        answer_exists_test("/app/answer.txt")
    )
}

fn log_folder(ctx: &mut Ctx) -> Spec {
    let dir = ctx.word("folder", WORDS);
    let kw = ctx.word("keyword", WORDS);
    let logs = ctx.some_words("file", WORDS, 3, 4);
    let others = ctx.words("file", WORDS, 2);
    let filler = ctx.filler(WORDS, 8);
    let mut files = Vec::new();
    let mut total = 0;
    for name in &logs {
        let n = ctx.rng.range(6, 12) as usize;
        let hits = ctx.rng.range(1, 4) as usize;
        let twice = ctx.rng.range(0, 1) as usize;
        total += hits;
        files.push((format!("{dir}/{name}.log"), text(ctx, &filler, n, &kw, hits, twice)));
    }
    for name in &others {
        let n = ctx.rng.range(4, 8) as usize;
        let hits = ctx.rng.range(1, 3) as usize;
        files.push((format!("{dir}/{name}.txt"), text(ctx, &filler, n, &kw, hits, 0)));
    }
    Spec {
        instruction: format!(
            "The folder /app/{dir} holds several files. Count the lines that contain the word `{kw}` in the \
             files whose names end in `.log` (ignore the other files), added up over all those files. A line \
             that contains the word twice counts once.\n\
             Write only that total to the file /app/answer.txt."
        ),
        category: "file-operations".into(),
        files,
        run: vec![],
        packages: Vec::new(),
        solution: format!("cat /app/{dir}/*.log | grep -c '{kw}' > /app/answer.txt\n"),
        tests: count_tests(total),
    }
}

fn find_files(ctx: &mut Ctx) -> Spec {
    let dir = ctx.word("folder", WORDS);
    let subs = ctx.words("folder", WORDS, 2);
    let kw = ctx.word("keyword", WORDS);
    let exts = ctx.words("extension", EXTS, 3);
    let names = ctx.words("file", WORDS, 10);
    let filler = ctx.filler(WORDS, 8);
    let mut files = Vec::new();
    let mut expected: Vec<String> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        // The first files fix the cases that must occur: a match, a target-extension
        // file without the word, a file with the word under another extension.
        let (ext, has) = match i {
            0 | 1 => (&exts[0], true),
            2 => (&exts[0], false),
            3 => (&exts[1], true),
            _ => (ctx.rng.pick(&exts), ctx.rng.chance(1, 2)),
        };
        let folder = match ctx.rng.below(3) {
            0 => dir.clone(),
            k => format!("{dir}/{}", subs[k - 1]),
        };
        let path = format!("{folder}/{name}.{ext}");
        let n = ctx.rng.range(3, 7) as usize;
        let hits = if has { ctx.rng.range(1, 2) as usize } else { 0 };
        files.push((path.clone(), text(ctx, &filler, n, &kw, hits, 0)));
        if has && *ext == exts[0] {
            expected.push(format!("/app/{path}"));
        }
    }
    expected.sort();
    let ext = &exts[0];
    Spec {
        instruction: format!(
            "Find every file under /app/{dir} (including its subfolders) whose name ends in `.{ext}` and that \
             contains the word `{kw}`.\n\
             Write their full paths (such as /app/{dir}/NAME.{ext}), one per line, sorted alphabetically, to the \
             file /app/answer.txt."
        ),
        category: "file-operations".into(),
        files,
        run: vec![],
        packages: Vec::new(),
        solution: format!("grep -rl --include='*.{ext}' '{kw}' /app/{dir} | LC_ALL=C sort > /app/answer.txt\n"),
        tests: format!(
            "EXPECTED = {list}\n\n\ndef listed():\n    return [l.strip() for l in Path(\"/app/answer.txt\").read_text().splitlines() \
             if l.strip()]\n\n\n{exists}\n\ndef test_no_wrong_file_is_listed():\n    wrong = [p for p in listed() if p not in \
             EXPECTED]\n    assert not wrong, f\"these do not match: {{wrong}}\"\n\n\ndef test_no_matching_file_is_missing():\n    \
             missing = [p for p in EXPECTED if p not in listed()]\n    assert not missing, f\"missing: {{missing}}\"\n\n\n\
             def test_sorted_one_per_line():\n    assert listed() == EXPECTED\n",
            list = py_list(&expected),
            exists = answer_exists_test("/app/answer.txt"),
        ),
    }
}

#[cfg(test)]
pub(crate) fn expected_count(files: &[(String, String)], kw: &str, only_ext: &str) -> usize {
    files.iter().filter(|(p, _)| p.ends_with(only_ext)).map(|(_, t)| t.lines().filter(|l| l.contains(kw)).count()).sum()
}

#[cfg(test)]
mod tests {
    use super::super::rng::Rng;
    use super::super::Split;
    use super::*;

    #[test]
    fn the_expected_count_is_what_grep_would_count() {
        for seed in 0..50 {
            for level in [1, 2] {
                let mut ctx = Ctx::new(Rng::new(seed), Split::Train, level);
                let spec = build(&mut ctx);
                let params = ctx.into_params();
                let kw = &params["keyword"][0];
                let n = expected_count(&spec.files, kw, ".log");
                assert!(spec.tests.contains(&format!("text == \"{n}\"")), "{}", spec.tests);
                assert!(spec.solution.contains(kw.as_str()));
            }
        }
    }

    #[test]
    fn find_lists_exactly_the_matching_files() {
        for seed in 0..50 {
            let mut ctx = Ctx::new(Rng::new(seed), Split::Heldout, 3);
            let spec = build(&mut ctx);
            let params = ctx.into_params();
            let (kw, ext) = (&params["keyword"][0], format!(".{}", params["extension"][0]));
            let mut want: Vec<String> = spec
                .files
                .iter()
                .filter(|(p, t)| p.ends_with(&ext) && t.contains(kw.as_str()))
                .map(|(p, _)| format!("/app/{p}"))
                .collect();
            want.sort();
            assert!(want.len() >= 2);
            assert!(spec.tests.contains(&py_list(&want)), "{}", spec.tests);
        }
    }
}
