//! Word lists shared by the families. Each list is split in two by position (even
//! positions train, odd held-out; see [`super::draw::Ctx::pool`]), so a list needs
//! enough words for both halves. Words are lowercase letters only (safe in shell, regex,
//! Python and file names), and none is a substring of another, so that a `grep` for one
//! never matches a line that holds only others.

/// Nouns for file names, contents, keywords and category values.
pub(crate) const WORDS: &[&str] = &[
    "apple", "river", "stone", "cloud", "maple", "tiger", "piano", "rocket", "forest", "garden", "silver", "copper",
    "marble", "canyon", "desert", "island", "meadow", "harbor", "valley", "glacier", "comet", "planet", "falcon",
    "badger", "otter", "walrus", "lizard", "parrot", "salmon", "turtle", "beetle", "spider", "cactus", "orchid",
    "tulip", "violet", "pepper", "ginger", "walnut", "almond", "cherry", "lemon", "mango", "peach", "olive", "carrot",
    "potato", "tomato", "garlic", "bread", "cheese", "honey", "candle", "lantern", "mirror", "window", "ladder",
    "hammer", "wrench", "shovel", "bucket", "basket", "bottle", "kettle", "teapot", "saucer", "blanket", "pillow",
    "jacket", "helmet", "glove", "scarf", "ribbon", "pencil", "crayon", "eraser", "folder", "ticket", "wallet",
    "compass", "anchor", "castle", "bridge", "tunnel", "tower", "temple", "museum", "market", "school", "studio",
    "engine", "signal", "sensor", "magnet", "crystal", "prism", "quartz", "granite", "pebble", "thunder", "breeze",
    "frost", "ember", "meteor", "nebula", "zephyr", "willow", "cedar", "birch", "aspen", "poplar", "juniper",
    "saffron", "nutmeg", "cumin", "basil", "thyme", "sorrel", "kiwi", "papaya", "guava", "lychee", "quince", "fig",
    "banjo", "cello", "violin", "flute", "oboe", "tuba", "drum", "harp", "sitar",
];

/// File extensions (without the dot). Not `txt`, `log`, `csv` or `json`: templates use
/// those as fixed text, and a parameter must not be template text of the other split.
pub(crate) const EXTS: &[&str] =
    &["md", "dat", "cfg", "bak", "tmp", "ini", "lst", "rst", "doc", "xml", "yml", "tsv", "srt", "cnf", "out", "tab"];

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Checks a list: safe characters, no duplicates, no word inside another.
    pub(crate) fn check_list(name: &str, list: &[&str]) {
        for (i, a) in list.iter().enumerate() {
            assert!(
                !a.is_empty() && a.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{name}: `{a}` is not lowercase letters"
            );
            for b in &list[i + 1..] {
                assert!(!a.contains(b) && !b.contains(a), "{name}: `{a}` and `{b}` overlap");
            }
        }
    }

    #[test]
    fn shared_lists_are_clean() {
        check_list("WORDS", WORDS);
        check_list("EXTS", EXTS);
        assert!(WORDS.len() >= 100);
    }
}
