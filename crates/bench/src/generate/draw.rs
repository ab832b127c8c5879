//! What a family draws an instance with ([`Ctx`]: the split's pools, the recorded
//! parameters) and what it hands back ([`Spec`]: the task's parts before they become a
//! TB1 folder), plus the Python literals the tests are written with.

use std::collections::BTreeMap;

use super::rng::Rng;
use super::Split;

/// The drawing state of one instance.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) rng: Rng,
    pub(crate) split: Split,
    pub(crate) level: u8,
    params: BTreeMap<String, Vec<String>>,
    /// Every word handed out so far, so that no two roles in one instance share a word.
    used: Vec<String>,
}

impl Ctx {
    /// A fresh context.
    pub(crate) fn new(rng: Rng, split: Split, level: u8) -> Ctx {
        Ctx { rng, split, level, params: BTreeMap::new(), used: Vec::new() }
    }

    /// The split's half of a list: even positions for train, odd ones for held-out. The
    /// halves of one list never share a word; lists are written so that a word that sits
    /// in two lists of one family sits on the same side in both (the split test checks).
    pub(crate) fn pool<'a>(&self, list: &[&'a str]) -> Vec<&'a str> {
        let side = match self.split {
            Split::Train => 0,
            Split::Heldout => 1,
        };
        list.iter().enumerate().filter(|(i, _)| i % 2 == side).map(|(_, w)| *w).collect()
    }

    /// `n` distinct words of the split's half not used yet in this instance.
    fn fresh(&mut self, list: &[&str], n: usize) -> Vec<String> {
        let free: Vec<&str> = self.pool(list).into_iter().filter(|w| !self.used.iter().any(|u| u == w)).collect();
        let picked: Vec<String> = self.rng.sample(&free, n).into_iter().map(str::to_string).collect();
        self.used.extend(picked.iter().cloned());
        picked
    }

    /// One word of the split's half, recorded as the parameter `key`.
    pub(crate) fn word(&mut self, key: &str, list: &[&str]) -> String {
        self.words(key, list, 1).into_iter().next().unwrap_or_default()
    }

    /// `n` distinct words of the split's half, recorded as the parameter `key`.
    pub(crate) fn words(&mut self, key: &str, list: &[&str], n: usize) -> Vec<String> {
        let picked = self.fresh(list, n);
        self.params.entry(key.to_string()).or_default().extend(picked.iter().cloned());
        picked
    }

    /// Between `lo` and `hi` distinct words of the split's half, recorded as `key`.
    pub(crate) fn some_words(&mut self, key: &str, list: &[&str], lo: i64, hi: i64) -> Vec<String> {
        let n = self.rng.range(lo, hi) as usize;
        self.words(key, list, n)
    }

    /// `n` distinct words of the split's half not used yet, left free for later draws:
    /// the words of a file's bulk, which may repeat across files without running the
    /// pool dry.
    pub(crate) fn bulk_words(&mut self, list: &[&str], n: usize) -> Vec<String> {
        let free: Vec<&str> = self.pool(list).into_iter().filter(|w| !self.used.iter().any(|u| u == w)).collect();
        self.rng.sample(&free, n).into_iter().map(str::to_string).collect()
    }

    /// Between `lo` and `hi` filler words (see [`Ctx::filler`]).
    pub(crate) fn some_filler(&mut self, list: &[&str], lo: i64, hi: i64) -> Vec<String> {
        let n = self.rng.range(lo, hi) as usize;
        self.filler(list, n)
    }

    /// `n` distinct words of the split's half for a file's bulk (not recorded: they are
    /// data, but they are still the split's own words).
    pub(crate) fn filler(&mut self, list: &[&str], n: usize) -> Vec<String> {
        self.fresh(list, n)
    }

    /// A number in `lo..=hi` that is a parameter of the task (a threshold, a new value):
    /// even for train, odd for held-out, so the splits never share one.
    pub(crate) fn number(&mut self, key: &str, lo: i64, hi: i64) -> i64 {
        let want = match self.split {
            Split::Train => 0,
            Split::Heldout => 1,
        };
        let mut v = self.rng.range(lo, hi);
        if v.rem_euclid(2) != want {
            v = if v < hi { v + 1 } else { v - 1 };
        }
        self.params.entry(key.to_string()).or_default().push(v.to_string());
        v
    }

    /// Records a parameter that was not drawn through the helpers above.
    pub(crate) fn record(&mut self, key: &str, value: &str) {
        self.params.entry(key.to_string()).or_default().push(value.to_string());
    }

    /// The recorded parameters.
    pub(crate) fn into_params(self) -> BTreeMap<String, Vec<String>> {
        self.params
    }
}

/// A task's parts, before they become a TB1 folder.
#[derive(Debug, Clone, Default)]
pub(crate) struct Spec {
    /// What the agent is told.
    pub(crate) instruction: String,
    /// Terminal-Bench's category.
    pub(crate) category: String,
    /// Files copied into `/app` (path relative to `/app`, contents).
    pub(crate) files: Vec<(String, String)>,
    /// Dockerfile `RUN` commands after the copy (in `/app`).
    pub(crate) run: Vec<String>,
    /// Debian packages the image installs before the task's files (one layer every
    /// task of the family shares).
    pub(crate) packages: Vec<String>,
    /// The reference solution's commands.
    pub(crate) solution: String,
    /// The pytest functions.
    pub(crate) tests: String,
}

/// A Python string literal (JSON's escapes are Python's).
pub(crate) fn py(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "''".to_string())
}

/// A Python list of string literals.
pub(crate) fn py_list(xs: &[String]) -> String {
    format!("[{}]", xs.iter().map(|x| py(x)).collect::<Vec<_>>().join(", "))
}

/// A Python dict of string keys and values.
pub(crate) fn py_dict(xs: &[(String, String)]) -> String {
    let items: Vec<String> = xs.iter().map(|(k, v)| format!("{}: {}", py(k), py(v))).collect();
    format!("{{{}}}", items.join(", "))
}

/// A Python list of integers.
pub(crate) fn py_ints(xs: &[i64]) -> String {
    format!("[{}]", xs.iter().map(i64::to_string).collect::<Vec<_>>().join(", "))
}

/// Lines joined with a final newline.
pub(crate) fn lines(xs: &[String]) -> String {
    let mut s = xs.join("\n");
    s.push('\n');
    s
}

/// `n` words drawn from `pool` (repeats allowed).
pub(crate) fn phrase(rng: &mut Rng, pool: &[String], n: usize) -> Vec<String> {
    (0..n).map(|_| rng.pick(pool).clone()).collect()
}

/// The tests that every "write it to a file" task starts with.
pub(crate) fn answer_exists_test(path: &str) -> String {
    format!(
        "def test_answer_file_exists():\n    assert Path({p}).is_file(), \"{path} was not written\"\n",
        p = py(path)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_halve_a_list_and_numbers_keep_their_parity() {
        let list = ["a", "b", "c", "d", "e"];
        let train = Ctx::new(Rng::new(1), Split::Train, 1);
        let held = Ctx::new(Rng::new(1), Split::Heldout, 1);
        assert_eq!(train.pool(&list), ["a", "c", "e"]);
        assert_eq!(held.pool(&list), ["b", "d"]);
        let mut t = Ctx::new(Rng::new(3), Split::Train, 1);
        let mut h = Ctx::new(Rng::new(3), Split::Heldout, 1);
        for _ in 0..200 {
            let (a, b) = (t.number("n", 10, 11), h.number("n", 10, 11));
            assert_eq!((a, b), (10, 11));
        }
    }

    #[test]
    fn an_instance_never_reuses_a_word() {
        let mut c = Ctx::new(Rng::new(5), Split::Train, 1);
        let a = c.words("a", &["x", "q", "y", "q2", "z"], 2);
        let b = c.filler(&["x", "q", "y", "q2", "z"], 5);
        assert_eq!(a.len() + b.len(), 3, "{a:?} {b:?}");
        assert!(b.iter().all(|w| !a.contains(w)));
        assert_eq!(py("it's \"x\"\n"), "\"it's \\\"x\\\"\\n\"");
    }
}
