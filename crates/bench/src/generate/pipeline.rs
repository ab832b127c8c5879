//! `pipeline`: answer a question with a sort/uniq/head pipeline (level 1: the distinct
//! words, sorted; level 2: the most frequent word; level 3: the top three users of one
//! status in a log, with their counts).

use super::draw::{answer_exists_test, lines, py, py_list, Ctx, Spec};
use super::vocab::WORDS;
use super::CodeFamily;

/// The family.
pub(crate) const FAMILY: CodeFamily = CodeFamily {
    name: "pipeline",
    summary: "answer a question about a word list or a log with sort, uniq, head and awk",
    levels: [
        "the distinct words of a file, sorted (`sort -u`)",
        "the most frequent word of a file (`sort | uniq -c | sort -rn | head -n 1`)",
        "the three users with the most log lines of one status, with counts (awk, sort, uniq, head)",
    ],
    build,
};

/// Statuses of log lines.
pub(crate) const STATUSES: &[&str] = &["ok", "denied", "failed", "timeout", "retry", "skipped", "queued", "blocked"];
/// Actions of log lines (bulk, not parameters).
const ACTIONS: &[&str] = &["get", "put", "post", "delete", "list", "copy", "move", "read", "write", "sync"];

fn build(ctx: &mut Ctx) -> Spec {
    match ctx.level {
        1 => distinct(ctx),
        2 => most_frequent(ctx),
        _ => top_users(ctx),
    }
}

/// `counts[i]` copies of `words[i]`, shuffled, one per line.
fn word_lines(ctx: &mut Ctx, words: &[String], counts: &[usize]) -> Vec<String> {
    let mut out: Vec<String> = words.iter().zip(counts).flat_map(|(w, c)| vec![w.clone(); *c]).collect();
    ctx.rng.shuffle(&mut out);
    out
}

fn distinct(ctx: &mut Ctx) -> Spec {
    let file = format!("{}.txt", ctx.word("file", WORDS));
    let words = ctx.some_words("word", WORDS, 5, 8);
    let counts: Vec<usize> = words.iter().map(|_| ctx.rng.range(1, 5) as usize).collect();
    let text = lines(&word_lines(ctx, &words, &counts));
    let mut expected = words.clone();
    expected.sort();
    Spec {
        instruction: format!(
            "The file /app/{file} has one word per line, and some words repeat. Write each distinct word once to \
             /app/answer.txt, one per line, sorted alphabetically."
        ),
        category: "data-processing".into(),
        files: vec![(file.clone(), text)],
        run: vec![],
        packages: Vec::new(),
        solution: format!("LC_ALL=C sort -u /app/{file} > /app/answer.txt\n"),
        tests: format!(
            "EXPECTED = {list}\n\n\ndef got():\n    return [l.strip() for l in Path(\"/app/answer.txt\").read_text().splitlines() \
             if l.strip()]\n\n\n{exists}\n\ndef test_every_word_is_there_once():\n    assert sorted(got()) == EXPECTED\n\n\n\
             def test_sorted_alphabetically():\n    assert got() == EXPECTED\n",
            list = py_list(&expected),
            exists = answer_exists_test("/app/answer.txt"),
        ),
    }
}

fn most_frequent(ctx: &mut Ctx) -> Spec {
    let file = format!("{}.txt", ctx.word("file", WORDS));
    let words = ctx.some_words("word", WORDS, 5, 8);
    let mut counts: Vec<usize> = words.iter().map(|_| ctx.rng.range(1, 6) as usize).collect();
    // One word wins outright.
    let top = ctx.rng.below(words.len());
    counts[top] = counts.iter().max().copied().unwrap_or(1) + 1;
    let text = lines(&word_lines(ctx, &words, &counts));
    let winner = &words[top];
    Spec {
        instruction: format!(
            "The file /app/{file} has one word per line. Find the word that occurs most often and write only that \
             word to /app/answer.txt."
        ),
        category: "data-processing".into(),
        files: vec![(file.clone(), text)],
        run: vec![],
        packages: Vec::new(),
        solution: format!("sort /app/{file} | uniq -c | sort -rn | head -n 1 | awk '{{print $2}}' > /app/answer.txt\n"),
        tests: format!(
            "{}\n\ndef test_answer_is_the_most_frequent_word():\n    \
             assert Path(\"/app/answer.txt\").read_text().strip() == {w}\n",
            answer_exists_test("/app/answer.txt"),
            w = py(winner),
        ),
    }
}

fn top_users(ctx: &mut Ctx) -> Spec {
    let file = format!("{}.log", ctx.word("file", WORDS));
    let statuses = ctx.words("status", STATUSES, 3);
    let users = ctx.some_filler(WORDS, 6, 8);
    let actions = ctx.filler(ACTIONS, 3);
    let status = &statuses[0];
    // Distinct counts of the status for every user, so the top three are unambiguous.
    let mut counts: Vec<usize> = (1..=9).collect();
    ctx.rng.shuffle(&mut counts);
    let mut rows = Vec::new();
    let mut ranked: Vec<(usize, String)> = Vec::new();
    for (user, n) in users.iter().zip(&counts) {
        ranked.push((*n, user.clone()));
        for _ in 0..*n {
            rows.push(format!("{user} {} {status}", ctx.rng.pick(&actions)));
        }
        for _ in 0..ctx.rng.range(1, 4) {
            rows.push(format!("{user} {} {}", ctx.rng.pick(&actions), ctx.rng.pick(&statuses[1..])));
        }
    }
    ctx.rng.shuffle(&mut rows);
    ranked.sort_by_key(|r| std::cmp::Reverse(r.0));
    let expected: Vec<String> = ranked.iter().take(3).map(|(n, u)| format!("{n} {u}")).collect();
    Spec {
        instruction: format!(
            "Each line of the log /app/{file} is `USER ACTION STATUS`. Find the three users with the most lines \
             whose STATUS is `{status}`. Write them to /app/answer.txt, the user with the most such lines first, one \
             per line as `COUNT USER` (for example `4 NAME`)."
        ),
        category: "data-processing".into(),
        files: vec![(file.clone(), lines(&rows))],
        run: vec![],
        packages: Vec::new(),
        solution: format!(
            "awk '$3 == \"{status}\" {{print $1}}' /app/{file} | sort | uniq -c | sort -rn | head -n 3 | \
             awk '{{print $1, $2}}' > /app/answer.txt\n"
        ),
        tests: format!(
            "EXPECTED = {list}\n\n\ndef got():\n    return [\" \".join(l.split()) for l in \
             Path(\"/app/answer.txt\").read_text().splitlines() if l.strip()]\n\n\n{exists}\n\n\
             def test_three_lines():\n    assert len(got()) == 3, got()\n\n\n\
             def test_top_three_with_counts_in_order():\n    assert got() == EXPECTED\n",
            list = py_list(&expected),
            exists = answer_exists_test("/app/answer.txt"),
        ),
    }
}
