//! `.dockerignore` as the Docker client applies it before sending a context: patterns
//! relative to the context root, `**` across folders, `!` re-including, the last
//! matching pattern deciding, and a pattern that matches a folder excluding all of it.
//! The engine does not filter an uploaded context itself, so the harness must.

use glob::{MatchOptions, Pattern};

/// The parsed patterns of one `.dockerignore`.
#[derive(Debug, Default)]
pub struct DockerIgnore {
    patterns: Vec<(Pattern, bool)>,
}

const OPTIONS: MatchOptions =
    MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: false };

impl DockerIgnore {
    /// Reads `dir/.dockerignore`; no file means nothing is excluded.
    pub fn load(dir: &std::path::Path) -> DockerIgnore {
        // Read beneath the context: a `.dockerignore` linked out of it is not read.
        crate::confined::read_confined(dir, std::path::Path::new(".dockerignore"), 1 << 20, "the build context")
            .ok()
            .flatten()
            .map(|t| Self::parse(&String::from_utf8_lossy(&t)))
            .unwrap_or_default()
    }

    /// Parses the file's text; a pattern that is not a valid glob is skipped (Docker
    /// fails the build on it; skipping keeps more of the context, never less).
    pub fn parse(text: &str) -> DockerIgnore {
        let mut patterns = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (negated, body) = match line.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, line),
            };
            let cleaned = clean(body);
            if cleaned.is_empty() {
                continue;
            }
            if let Ok(p) = Pattern::new(&cleaned) {
                patterns.push((p, negated));
            }
        }
        DockerIgnore { patterns }
    }

    /// Whether `rel` (a `/`-separated path relative to the context root) is left out.
    pub fn excludes(&self, rel: &str) -> bool {
        let mut excluded = false;
        for (pattern, negated) in &self.patterns {
            if matches_or_parent(pattern, rel) {
                excluded = !negated;
            }
        }
        excluded
    }
}

/// The pattern matches the path or one of the folders above it.
fn matches_or_parent(pattern: &Pattern, rel: &str) -> bool {
    if pattern.matches_with(rel, OPTIONS) {
        return true;
    }
    let mut at = rel.len();
    while let Some(slash) = rel[..at].rfind('/') {
        if pattern.matches_with(&rel[..slash], OPTIONS) {
            return true;
        }
        at = slash;
    }
    false
}

/// Go's `filepath.Clean` as Docker applies it to patterns: no leading `/` or `./`,
/// no `.` components, `..` folded.
fn clean(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_folders_and_exceptions_as_docker_reads_them() {
        let ig =
            DockerIgnore::parse("# comment\n\n*.log\n/build\n./tmp/\n**/secret.txt\n*\n!app\n!keep.txt\napp/cache\n");
        assert!(ig.excludes("x.log"));
        assert!(ig.excludes("build/out/a.o"), "a folder excludes what is inside it");
        assert!(ig.excludes("tmp/a"));
        assert!(ig.excludes("deep/er/secret.txt"));
        assert!(ig.excludes("other.txt"), "`*` excludes the rest");
        assert!(!ig.excludes("keep.txt"), "`!` brings a file back");
        assert!(!ig.excludes("app/src/main.py"));
        assert!(ig.excludes("app/cache/blob"), "the last matching pattern decides");
    }

    #[test]
    fn star_does_not_cross_folders() {
        let ig = DockerIgnore::parse("*.md\n");
        assert!(ig.excludes("README.md"));
        assert!(!ig.excludes("docs/guide.md"));
        assert!(!DockerIgnore::parse("").excludes("anything"));
    }
}
