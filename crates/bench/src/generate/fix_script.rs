//! `fix-script`: a short script that reads numbers from a file has one bug (level 1: a
//! Python script that crashes; level 2: a Python script with a logic bug; level 3: a
//! bash script with a logic bug). The tests run the script on its own file and on
//! numbers it has never seen, so printing the answer does not pass.

use super::draw::{py_ints, Ctx, Spec};
use super::vocab::WORDS;
use super::CodeFamily;

/// The family.
pub(crate) const FAMILY: CodeFamily = CodeFamily {
    name: "fix-script",
    summary: "fix the one bug of a short Python or bash script that reads numbers from a file",
    levels: [
        "a Python script that crashes (misspelt name, missing colon or parenthesis)",
        "a Python script that prints a wrong number (off-by-one, wrong operator, wrong start or index)",
        "a bash script that prints a wrong answer (wrong argument, pipe into a subshell, flipped test, missing $)",
    ],
    build,
};

/// What the script computes (split by position like the words).
pub(crate) const PROGRAMS: &[&str] = &["total", "count_even", "count_big", "sum_big"];
/// Bugs that make the Python script crash.
pub(crate) const CRASH_BUGS: &[&str] = &["name-typo", "bad-call", "missing-colon", "missing-paren"];
/// Bugs that make the Python script print a wrong number.
pub(crate) const LOGIC_BUGS: &[&str] = &["skip-last", "wrong-init", "wrong-operator", "constant-index"];
/// Bugs of the bash script.
pub(crate) const BASH_BUGS: &[&str] = &["wrong-argument", "missing-dollar", "pipe-subshell", "flipped-test"];
/// Names of the accumulator.
pub(crate) const ACC_NAMES: &[&str] = &["tally", "result", "acc", "running", "amount", "counter", "answer", "outcome"];
/// Names of the list of numbers.
pub(crate) const LIST_NAMES: &[&str] =
    &["numbers", "values", "items", "data", "entries", "readings", "samples", "series"];
/// Names of the function.
pub(crate) const FN_NAMES: &[&str] =
    &["compute", "summarize", "crunch", "evaluate", "measure", "process", "aggregate", "calculate"];

/// One drawn script: what it computes and the names it uses.
struct Program {
    kind: String,
    limit: i64,
    acc: String,
    xs: String,
    func: String,
}

impl Program {
    fn describe(&self) -> String {
        let t = self.limit;
        match self.kind.as_str() {
            "total" => "the sum of the numbers".into(),
            "count_even" => "how many of the numbers are even".into(),
            "count_big" => format!("how many of the numbers are greater than {t}"),
            _ => format!("the sum of the numbers that are greater than {t}"),
        }
    }

    /// The right output for `xs`.
    fn correct(&self, xs: &[i64]) -> i64 {
        let t = self.limit;
        match self.kind.as_str() {
            "total" => xs.iter().sum(),
            "count_even" => xs.iter().filter(|x| *x % 2 == 0).count() as i64,
            "count_big" => xs.iter().filter(|x| **x > t).count() as i64,
            _ => xs.iter().filter(|x| **x > t).sum(),
        }
    }

    /// What the buggy script prints for `xs` (`None`: a crash or no number).
    fn buggy(&self, bug: &str, xs: &[i64]) -> Option<i64> {
        let t = self.limit;
        let n = xs.len() as i64;
        match bug {
            "skip-last" => Some(self.correct(&xs[..xs.len().saturating_sub(1)])),
            "wrong-init" => Some(self.correct(xs) + 1),
            "wrong-operator" | "flipped-test" => Some(match self.kind.as_str() {
                "total" => -xs.iter().sum::<i64>(),
                "count_even" => xs.iter().filter(|x| *x % 2 != 0).count() as i64,
                "count_big" => xs.iter().filter(|x| **x < t).count() as i64,
                _ => xs.iter().filter(|x| **x < t).sum(),
            }),
            "constant-index" => {
                let first = xs.first().copied().unwrap_or(0);
                Some(match self.kind.as_str() {
                    "total" => n * first,
                    "count_even" if first % 2 == 0 => n,
                    "count_big" if first > t => n,
                    "sum_big" if first > t => n * first,
                    _ => 0,
                })
            }
            "wrong-argument" | "pipe-subshell" => Some(0),
            _ => None,
        }
    }

    /// The loop body of the Python script (inside the `for`, 8 spaces deep).
    fn python_body(&self, bug: &str) -> String {
        let (acc, t) = (&self.acc, self.limit);
        let at = if bug == "constant-index" { format!("{}[0]", self.xs) } else { format!("{}[i]", self.xs) };
        let flip = bug == "wrong-operator";
        let inner = "\n            ";
        match self.kind.as_str() {
            "total" => format!("{acc} = {acc} {} {at}", if flip { "-" } else { "+" }),
            "count_even" => format!("if {at} % 2 == {}:{inner}{acc} = {acc} + 1", if flip { 1 } else { 0 }),
            "count_big" => format!("if {at} {} {t}:{inner}{acc} = {acc} + 1", if flip { "<" } else { ">" }),
            _ => format!("if {at} {} {t}:{inner}{acc} = {acc} + {at}", if flip { "<" } else { ">" }),
        }
    }

    /// The Python script, with `bug` (or none: "").
    fn python(&self, bug: &str) -> String {
        let (acc, xs, func) = (&self.acc, &self.xs, &self.func);
        let typo: String = {
            let mut c: Vec<char> = acc.chars().collect();
            c.remove(c.len() / 2);
            c.into_iter().collect()
        };
        let len = if bug == "bad-call" { "lenght" } else { "len" };
        let end = if bug == "skip-last" { format!("{len}({xs}) - 1") } else { format!("{len}({xs})") };
        let colon = if bug == "missing-colon" { "" } else { ":" };
        let init = if bug == "wrong-init" { 1 } else { 0 };
        let ret = if bug == "name-typo" { typo } else { acc.clone() };
        let close = if bug == "missing-paren" { "" } else { ")" };
        format!(
            "import sys\n\n\ndef {func}(path):\n    with open(path) as f:\n        {xs} = [int(line) for line in f if \
             line.strip()]\n    {acc} = {init}\n    for i in range(0, {end}){colon}\n        {body}\n    return {ret}\n\n\n\
             print({func}(sys.argv[1]){close}\n",
            body = self.python_body(bug),
        )
    }

    /// The bash script, with `bug` (or none: "").
    fn bash(&self, bug: &str) -> String {
        let (acc, t) = (&self.acc, self.limit);
        let flip = bug == "flipped-test";
        let inner = "\n        ";
        let body = match self.kind.as_str() {
            "total" => format!("{acc}=$(( {acc} {} n ))", if flip { "-" } else { "+" }),
            "count_even" => format!(
                "if [ $(( n % 2 )) {} 0 ]; then{inner}{acc}=$(( {acc} + 1 ))\n    fi",
                if flip { "-ne" } else { "-eq" }
            ),
            "count_big" => {
                format!(
                    "if [ \"$n\" {} {t} ]; then{inner}{acc}=$(( {acc} + 1 ))\n    fi",
                    if flip { "-lt" } else { "-gt" }
                )
            }
            _ => {
                format!(
                    "if [ \"$n\" {} {t} ]; then{inner}{acc}=$(( {acc} + n ))\n    fi",
                    if flip { "-lt" } else { "-gt" }
                )
            }
        };
        let (head, tail) = match bug {
            "pipe-subshell" => ("cat \"$1\" | while read -r n; do", "done".to_string()),
            "wrong-argument" => ("while read -r n; do", "done < \"$2\"".to_string()),
            _ => ("while read -r n; do", "done < \"$1\"".to_string()),
        };
        let echo = if bug == "missing-dollar" { format!("echo \"{acc}\"") } else { format!("echo \"${acc}\"") };
        format!(
            "#!/bin/bash\n# Prints {} in the file named by the first argument (one number per line).\n{acc}=0\n{head}\n    \
             if [ -z \"$n\" ]; then\n        continue\n    fi\n    {body}\n{tail}\n{echo}\n",
            self.describe()
        )
    }
}

fn numbers(ctx: &mut Ctx) -> Vec<i64> {
    let n = ctx.rng.range(8, 12);
    (0..n).map(|_| ctx.rng.range(1, 99)).collect()
}

/// A drawn instance: the program, its bug, its file's numbers and the tests' own.
struct Drawn {
    p: Program,
    bug: String,
    script_word: String,
    data: String,
    visible: Vec<i64>,
    hidden: Vec<i64>,
}

impl Drawn {
    /// Whether the bug changes the output on `xs` (and the right answer is not the 0
    /// that a script which reads nothing prints).
    fn shows(&self, xs: &[i64]) -> bool {
        self.p.buggy(&self.bug, xs) != Some(self.p.correct(xs)) && self.p.correct(xs) != 0
    }
}

fn draw(ctx: &mut Ctx) -> Drawn {
    let bug = match ctx.level {
        1 => ctx.word("bug", CRASH_BUGS),
        2 => ctx.word("bug", LOGIC_BUGS),
        _ => ctx.word("bug", BASH_BUGS),
    };
    let kind = ctx.word("program", PROGRAMS);
    let limit = if kind.ends_with("_big") { ctx.number("threshold", 30, 70) } else { 0 };
    let p = Program {
        kind,
        limit,
        acc: ctx.word("variable", ACC_NAMES),
        xs: ctx.word("variable", LIST_NAMES),
        func: ctx.word("function", FN_NAMES),
    };
    let script_word = ctx.word("file", WORDS);
    let data = format!("{}.txt", ctx.word("file", WORDS));
    let mut d = Drawn { p, bug, script_word, data, visible: numbers(ctx), hidden: numbers(ctx) };
    // Redraw until the bug shows on both the visible file and the tests' own numbers.
    for _ in 0..500 {
        match (d.shows(&d.visible), d.shows(&d.hidden)) {
            (true, true) => break,
            (false, _) => d.visible = numbers(ctx),
            (true, false) => d.hidden = numbers(ctx),
        }
    }
    d
}

fn build(ctx: &mut Ctx) -> Spec {
    let level = ctx.level;
    let Drawn { p, bug, script_word, data, visible, hidden } = draw(ctx);
    let (script, run, broken, fixed) = if level < 3 {
        let s = format!("{script_word}.py");
        (s.clone(), format!("python3 /app/{s}"), p.python(&bug), p.python(""))
    } else {
        let s = format!("{script_word}.sh");
        (s.clone(), format!("bash /app/{s}"), p.bash(&bug), p.bash(""))
    };
    let (lang, symptom) = match level {
        1 => ("Python", "Running it fails with an error."),
        2 => ("Python", "It runs, but prints a wrong number."),
        _ => ("bash", "It runs, but prints a wrong answer."),
    };
    let data_text: String = visible.iter().map(|x| format!("{x}\n")).collect();
    let cmd: Vec<String> = run.split(' ').map(|w| format!("\"{w}\"")).collect();
    Spec {
        instruction: format!(
            "The {lang} script /app/{script} should print {desc} in the file named by its first argument (one whole \
             number per line), for example: `{run} /app/{data}`. It has a bug. {symptom}\n\
             Fix the bug so that the script prints the right answer for any such file. Keep the script's name and the \
             way it is called.",
            desc = p.describe(),
        ),
        category: "debugging".into(),
        files: vec![(script.clone(), broken), (data.clone(), data_text)],
        run: vec![],
        packages: Vec::new(),
        solution: format!("cat > /app/{script} <<'EOF'\n{fixed}EOF\n"),
        tests: format!(
            "CMD = [{cmd}]\nHIDDEN = {hidden_py}\n\n\ndef run(path):\n    \
             r = subprocess.run(CMD + [str(path)], capture_output=True, text=True, timeout=30)\n    \
             return r.stdout.strip()\n\n\n\
             def test_right_answer_on_its_own_file():\n    assert run(\"/app/{data}\") == \"{want_visible}\"\n\n\n\
             def test_right_answer_on_other_numbers(tmp_path):\n    p = tmp_path / \"numbers.txt\"\n    \
             p.write_text(\"\".join(f\"{{x}}\\n\" for x in HIDDEN))\n    assert run(p) == \"{want_hidden}\"\n",
            cmd = cmd.join(", "),
            hidden_py = py_ints(&hidden),
            want_visible = p.correct(&visible),
            want_hidden = p.correct(&hidden),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::rng::Rng;
    use super::super::Split;
    use super::*;

    #[test]
    fn every_drawn_bug_shows_on_both_inputs() {
        for level in 1..=3 {
            for split in [Split::Train, Split::Heldout] {
                for seed in 0..300 {
                    let d = draw(&mut Ctx::new(Rng::new(seed), split, level));
                    assert!(
                        d.shows(&d.visible) && d.shows(&d.hidden),
                        "{} {} {:?} {:?}",
                        d.p.kind,
                        d.bug,
                        d.visible,
                        d.hidden
                    );
                    let spec = build(&mut Ctx::new(Rng::new(seed), split, level));
                    let fixed = spec.solution.split("<<'EOF'\n").nth(1).unwrap().trim_end_matches("EOF\n");
                    assert_ne!(spec.files[0].1, fixed);
                    assert!(spec.tests.contains(&format!("== \"{}\"", d.p.correct(&d.hidden))), "{}", spec.tests);
                }
            }
        }
    }

    #[test]
    fn each_bug_changes_the_script_in_one_place() {
        let p =
            Program { kind: "sum_big".into(), limit: 40, acc: "tally".into(), xs: "values".into(), func: "f".into() };
        let good = p.python("");
        for bug in CRASH_BUGS.iter().chain(LOGIC_BUGS) {
            let bad = p.python(bug);
            let changed = good.lines().zip(bad.lines()).filter(|(a, b)| a != b).count();
            // constant-index may touch both uses of the element in one body.
            assert!((1..=2).contains(&changed), "{bug}:\n{bad}");
        }
        let good = p.bash("");
        for bug in BASH_BUGS {
            let bad = p.bash(bug);
            let changed = good.lines().zip(bad.lines()).filter(|(a, b)| a != b).count();
            assert!((1..=2).contains(&changed), "{bug}:\n{bad}");
        }
        assert_eq!(p.correct(&[10, 50, 60]), 110);
        assert_eq!(p.buggy("flipped-test", &[10, 50, 60]), Some(10));
        assert_eq!(p.buggy("constant-index", &[50, 1, 2]), Some(150));
    }
}
