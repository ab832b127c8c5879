//! "Did you mean …?" hints: the argument name a misspelt key most likely meant.

use crate::tools::ArgSpec;

/// A likely intended argument name for an unknown key.
pub(in crate::tools) fn suggest<'a>(key: &str, args: &'a [ArgSpec]) -> Option<&'a str> {
    let key_l = key.to_ascii_lowercase();
    if key_l.len() > 64 {
        return None;
    }
    let mut best: Option<(usize, &str)> = None;
    for arg in args {
        let name = arg.name.as_str();
        let score = if key_l.contains(name) || (name.contains(&key_l) && key_l.len() >= 3) {
            0
        } else if is_subsequence(name, &key_l) && name.len() >= 3 {
            1
        } else {
            let d = edit_distance(&key_l, name);
            if d > 2 || d >= name.len() {
                continue;
            }
            d + 1
        };
        if best.is_none_or(|(s, _)| score < s) {
            best = Some((score, name));
        }
    }
    best.map(|(_, name)| name)
}

pub(super) fn is_subsequence(needle: &str, haystack: &str) -> bool {
    let mut rest = haystack.chars();
    needle.chars().all(|c| rest.any(|h| h == c))
}

pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
