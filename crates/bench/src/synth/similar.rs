//! Near-duplicate tasks: the Jaccard similarity of word 3-grams of the instructions and
//! of the test files, averaged. A copy of a seed under another name scores near 1; two
//! tasks on the same skill with other files and checks score well below 0.5.

use std::collections::BTreeSet;
use std::path::Path;

/// What is compared of a task.
#[derive(Debug, Clone, Default)]
pub struct Fingerprint {
    pub name: String,
    instruction: BTreeSet<String>,
    tests: BTreeSet<String>,
}

impl Fingerprint {
    /// The task in `dir` (either layout): its instruction and every file under `tests/`.
    pub fn of_task(name: &str, dir: &Path, instruction: &str) -> Self {
        let mut tests = String::new();
        for t in crate::validate::files::texts_under(&dir.join("tests"), &[]) {
            tests.push_str(&t);
            tests.push('\n');
        }
        Self { name: name.to_string(), instruction: shingles(instruction), tests: shingles(&tests) }
    }

    /// The similarity (0–1) of two tasks.
    pub fn similarity(&self, other: &Fingerprint) -> f64 {
        (jaccard(&self.instruction, &other.instruction) + jaccard(&self.tests, &other.tests)) / 2.0
    }
}

fn shingles(text: &str) -> BTreeSet<String> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase())
        .collect();
    if words.len() < 3 {
        return words.into_iter().collect();
    }
    words.windows(3).map(|w| w.join(" ")).collect()
}

fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let inter = a.intersection(b).count();
    inter as f64 / (a.len() + b.len() - inter) as f64
}

/// The most similar of `known` to `task`, with its similarity.
pub fn nearest<'a>(task: &Fingerprint, known: &'a [Fingerprint]) -> Option<(&'a Fingerprint, f64)> {
    known.iter().map(|k| (k, task.similarity(k))).max_by(|a, b| a.1.total_cmp(&b.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(dir: &Path, instruction: &str, test: &str) -> Fingerprint {
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::write(dir.join("tests/test_outputs.py"), test).unwrap();
        Fingerprint::of_task("t", dir, instruction)
    }

    #[test]
    fn a_renamed_copy_is_near_and_another_task_is_far() {
        let d = tempfile::tempdir().unwrap();
        let test = "def test_hello():\n    assert open('/app/hello.txt').read().strip() == 'Hello, world!'\n";
        let a = task(&d.path().join("a"), "Create a file called hello.txt in /app with the text Hello, world!", test);
        let b = task(&d.path().join("b"), "Create a file called hello.txt in /app with the text Hello, world!", test);
        let c = task(
            &d.path().join("c"),
            "Count the lines of every CSV file under /data and write the totals to /app/counts.json as an object.",
            "import json\ndef test_counts():\n    assert json.load(open('/app/counts.json')) == {'a.csv': 3}\n",
        );
        assert!((a.similarity(&b) - 1.0).abs() < 1e-9, "{}", a.similarity(&b));
        assert!(a.similarity(&c) < 0.2, "{}", a.similarity(&c));
        let known = [c.clone(), b.clone()];
        assert!((nearest(&a, &known).unwrap().1 - 1.0).abs() < 1e-9);
    }
}
