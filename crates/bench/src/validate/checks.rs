//! The checks of a task that need no container: its test weights, the files its
//! instruction and its tests name, and whether a failure's output says the network
//! was missing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::pytest::TestResult;

/// How far weights may sum from 1 (they are written by hand, to a few decimals).
const WEIGHT_SUM_TOLERANCE: f64 = 1e-3;

/// Checks test weights against the tests that exist: every weight names a test, every
/// weight is ≥ 0 and they sum to 1. `tests` are the test ids pytest ran (TB1) or the
/// `test_*` functions found in the task's test files (TB2). Returns the problems, and
/// the tests that carry no weight (warnings: they count for nothing).
pub fn check_weights(weights: &BTreeMap<String, f64>, tests: &[String]) -> (Vec<String>, Vec<String>) {
    let short = short_name;
    let known: BTreeSet<String> = tests.iter().flat_map(|t| [t.clone(), short(t)]).collect();
    let mut problems = Vec::new();
    for (name, w) in weights {
        if !known.contains(name) {
            problems.push(format!("the weight of `{name}` names no test"));
        }
        if !(w.is_finite() && *w >= 0.0) {
            problems.push(format!("the weight of `{name}` is {w}; weights are ≥ 0"));
        }
    }
    let sum: f64 = weights.values().filter(|w| w.is_finite()).sum();
    if (sum - 1.0).abs() > WEIGHT_SUM_TOLERANCE {
        problems.push(format!("the weights sum to {sum:.4}, not 1"));
    }
    let unweighted = tests
        .iter()
        .filter(|t| !weights.contains_key(*t) && !weights.contains_key(&short(t)))
        .map(|t| short(t))
        .collect();
    (problems, unweighted)
}

/// A pytest test id's function name (`tests/test_x.py::test_a` → `test_a`).
pub fn short_name(test: &str) -> String {
    test.rsplit("::").next().unwrap_or(test).to_string()
}

/// The names of the pytest test functions in the `.py` files of `tests_dir`.
pub fn test_functions(tests_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for text in super::files::texts_under(tests_dir, &["py"]) {
        for line in text.lines() {
            let line = line.trim_start();
            let rest = line.strip_prefix("def ").or_else(|| line.strip_prefix("async def "));
            if let Some(name) = rest.and_then(|r| r.split('(').next()) {
                if name.starts_with("test") && name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    out.push(name.to_string());
                }
            }
        }
    }
    out
}

/// Extensions that make a word a file name when it has no slash.
const FILE_EXTS: &[&str] = &[
    "txt", "csv", "tsv", "json", "jsonl", "yaml", "yml", "toml", "ini", "conf", "cfg", "py", "sh", "c", "h", "cpp",
    "rs", "go", "js", "ts", "html", "xml", "md", "log", "db", "sqlite", "parquet", "tar", "gz", "tgz", "zip", "7z",
    "out", "dat", "bin", "pem", "crt", "key", "sql", "f90", "f", "rb", "pl", "php", "java", "env", "lock", "patch",
];

/// The file names a text mentions: absolute paths and words with a file extension,
/// reduced to their last component (`/app/out.txt` and `out.txt` are the same file).
pub fn named_files(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let words = text
        .split_whitespace()
        .filter(|w| !w.contains("://"))
        .flat_map(|w| w.split(|c: char| "`'\"(),;:<>[]{}=|*$".contains(c)));
    for raw in words {
        let word = raw.trim_end_matches(['.', '!', '?']);
        if word.is_empty() {
            continue;
        }
        // Programs and kernel files (`/bin/bash`, `/dev/null`) are how a script runs, not
        // what a task asks for.
        const SYSTEM: &[&str] =
            &["/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/", "/usr/local/bin/", "/dev/", "/proc/", "/sys/"];
        if SYSTEM.iter().any(|p| word.starts_with(p)) || word.starts_with("#!") {
            continue;
        }
        let last = word.rsplit('/').next().unwrap_or(word);
        // `/app` or `</div>` is a folder or markup, `/app/out` a file without an extension.
        let is_path = word.starts_with('/') && word.matches('/').count() >= 2 && !last.is_empty();
        let has_ext = last
            .rsplit_once('.')
            .is_some_and(|(stem, ext)| !stem.is_empty() && FILE_EXTS.contains(&ext.to_ascii_lowercase().as_str()));
        if (is_path || has_ext) && last.chars().all(|c| c.is_alphanumeric() || "._-".contains(c)) {
            out.insert(last.to_string());
        }
    }
    out
}

/// Files the harness and test runners own: naming them says nothing about the task.
fn harness_file(name: &str) -> bool {
    let harness = [
        "reward.txt",
        "reward.json",
        "test.sh",
        "run-tests.sh",
        "solve.sh",
        "solution.sh",
        "conftest.py",
        "test_weights.json",
        "pytest.ini",
        "setup-uv-pytest.sh",
        "run-uv-pytest.sh",
        "requirements.txt",
    ];
    harness.contains(&name)
        || name.starts_with("test_")
        || ["tests", "logs", "verifier", "tmp", "dev", "null", "bin", "usr", "etc", "proc"].contains(&name)
}

/// Where the instruction and the tests disagree on the files that matter: files the
/// instruction names that no test mentions, and files the tests check that the
/// instruction never names. Reported, never fatal: a test may check a file through
/// a glob, and an instruction may name an input it only reads.
pub fn file_mismatches(instruction: &str, tests_dir: &Path) -> Vec<String> {
    let asked: BTreeSet<String> = named_files(instruction).into_iter().filter(|f| !harness_file(f)).collect();
    let mut checked = BTreeSet::new();
    for text in super::files::texts_under(tests_dir, &[]) {
        checked.extend(named_files(&text).into_iter().filter(|f| !harness_file(f)));
    }
    let mut out = Vec::new();
    let unchecked: Vec<&String> = asked.difference(&checked).collect();
    if !unchecked.is_empty() {
        out.push(format!("the instruction names {} that no test mentions", list(&unchecked)));
    }
    let unnamed: Vec<&String> = checked.difference(&asked).collect();
    if !unnamed.is_empty() {
        out.push(format!("the tests mention {} that the instruction never names", list(&unnamed)));
    }
    out
}

fn list(names: &[&String]) -> String {
    const SHOWN: usize = 6;
    let mut s = names.iter().take(SHOWN).map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        s.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    s
}

/// What failed downloads and connections print (curl, wget, git, apt, pip, Python,
/// Go and the engine's own pulls).
const NETWORK_SIGNS: &[&str] = &[
    "could not resolve host",
    "temporary failure in name resolution",
    "name or service not known",
    "network is unreachable",
    "failed to connect to",
    "could not connect to",
    "connection timed out",
    "no route to host",
    "unable to access 'http",
    "failed to fetch http",
    "newconnectionerror",
    "max retries exceeded",
    "failed to establish a new connection",
    "nodename nor servname",
    "dial tcp",
    "tls handshake timeout",
    "could not resolve",
    "getaddrinfo",
    "unable to connect to",
];

/// The line of `text` that says a network access failed, if one does: the one with the
/// clearest sign (the signs are in order, a resolver's message before a traceback's frame).
pub fn network_failure(text: &str) -> Option<String> {
    NETWORK_SIGNS
        .iter()
        .find_map(|sign| text.lines().find(|l| l.to_ascii_lowercase().contains(sign)))
        .map(|l| l.trim().chars().take(240).collect())
}

/// The hosts a script or Dockerfile fetches from (`http(s)://HOST/…` in it), in order of
/// first mention, without the package mirrors a build may use (Debian, PyPI) and the
/// container's own loopback (a task that queries a server it started needs no internet).
pub fn fetched_hosts(text: &str) -> Vec<String> {
    const MIRRORS: &[&str] = &["deb.debian.org", "security.debian.org", "pypi.org", "files.pythonhosted.org"];
    let mut out: Vec<String> = Vec::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let mut rest = line;
        while let Some(i) = rest.find("://") {
            let scheme_ok = rest[..i].ends_with("http") || rest[..i].ends_with("https");
            let after = &rest[i + 3..];
            let host: String =
                after.chars().take_while(|c| c.is_ascii_alphanumeric() || ".-".contains(*c)).collect::<String>();
            let loopback = host.starts_with("127.") || host == "localhost" || host.ends_with(".localhost");
            if scheme_ok && host.contains('.') && !loopback && !MIRRORS.contains(&host.as_str()) && !out.contains(&host)
            {
                out.push(host);
            }
            rest = after;
        }
    }
    out
}

/// The test ids of a TB1 run, as pytest printed them.
pub fn test_ids(tests: &[TestResult]) -> Vec<String> {
    tests.iter().map(|t| t.name.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn weights_must_name_tests_and_sum_to_one() {
        let tests = vec!["tests/test_outputs.py::test_a".to_string(), "tests/test_outputs.py::test_b".to_string()];
        assert_eq!(check_weights(&w(&[("test_a", 0.25), ("test_b", 0.75)]), &tests), (vec![], vec![]));
        let (p, _) = check_weights(&w(&[("test_a", 0.5), ("test_b", 0.25)]), &tests);
        assert_eq!(p, vec!["the weights sum to 0.7500, not 1"]);
        let (p, unweighted) = check_weights(&w(&[("test_a", 0.5), ("test_c", 0.5)]), &tests);
        assert_eq!(p, vec!["the weight of `test_c` names no test"]);
        assert_eq!(unweighted, vec!["test_b"]);
        let (p, _) = check_weights(&w(&[("test_a", -0.5), ("test_b", 1.5)]), &tests);
        assert!(p[0].contains("≥ 0"), "{p:?}");
    }

    #[test]
    fn file_names_are_paths_and_words_with_extensions() {
        let text = "#!/bin/bash\nWrite the sum to `/app/out.txt` and read data.csv (not https://x.org/a.txt). Run ./build.sh with /usr/bin/env; see /etc/hosts > /dev/null in /app or <div>x</div>.";
        let names: Vec<String> = named_files(text).into_iter().collect();
        assert_eq!(names, vec!["build.sh", "data.csv", "hosts", "out.txt"]);
    }

    #[test]
    fn instruction_and_tests_are_compared_on_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("test_outputs.py"),
            "def test_x():\n    assert open('/app/out.txt').read()\n    open('/app/extra.json')\n",
        )
        .unwrap();
        let found = file_mismatches("Read /app/in.csv and write /app/out.txt.", dir.path());
        assert_eq!(
            found,
            vec![
                "the instruction names `in.csv` that no test mentions".to_string(),
                "the tests mention `extra.json` that the instruction never names".to_string()
            ]
        );
        assert_eq!(test_functions(dir.path()), vec!["test_x"]);
    }

    #[test]
    fn fetched_hosts_leave_the_package_mirrors_out() {
        let dockerfile = "RUN apt-get update\nRUN git clone https://github.com/openwall/john.git\n# see http://example.org/x\nRUN pip install -i https://pypi.org/simple x && curl -fsSL https://bootstrap.pypa.io/get-pip.py | python3";
        assert_eq!(fetched_hosts(dockerfile), vec!["github.com", "bootstrap.pypa.io"]);
        let local =
            "curl -s http://127.0.0.1:23456/items?page=2 > a.json\ncurl http://api.localhost/x http://example.org/y";
        assert_eq!(fetched_hosts(local), vec!["example.org"]);
    }

    #[test]
    fn network_failures_are_recognised() {
        let log = "Cloning into 'x'...\nfatal: unable to access 'https://github.com/a/b/': Could not resolve host: github.com\n";
        assert!(network_failure(log).unwrap().contains("github.com"));
        assert_eq!(network_failure("AssertionError: 3 != 4"), None);
        let traceback =
            "  for res in getaddrinfo(host, port):\nsocket.gaierror: [Errno -2] Name or service not known\n";
        assert_eq!(network_failure(traceback).unwrap(), "socket.gaierror: [Errno -2] Name or service not known");
    }
}
