//! The family file as written (TOML): what `docs/tasks.md` ("Task families as data")
//! documents, field by field. Unknown keys are refused, so a typo is named, not ignored.

use std::collections::BTreeMap;

use serde::Deserialize;

/// A whole family file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FamilyFile {
    /// The family's name (`--family NAME`): lowercase letters, digits and `-`.
    pub(crate) name: String,
    /// One line: what its tasks ask.
    pub(crate) summary: String,
    /// Terminal-Bench's category (`file-operations`, `data-processing`, …).
    pub(crate) category: String,
    /// Debian packages the task image installs (a compiler, `make`, `sqlite3`), in a
    /// layer before the task's files so that every task of the family shares it.
    #[serde(default)]
    pub(crate) packages: Vec<String>,
    /// The family's own word lists, halved between the splits like the built-in ones.
    #[serde(default)]
    pub(crate) lists: BTreeMap<String, Vec<String>>,
    /// Parameters every level draws, in order.
    #[serde(default)]
    pub(crate) params: Vec<ParamDef>,
    /// Levels 1 to 3, in order (`[[level]]`).
    pub(crate) level: Vec<LevelDef>,
}

/// One parameter: exactly one of `word`, `words`, `number`, `size`, `value`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ParamDef {
    /// Its name in the templates.
    pub(crate) name: String,
    /// One word of the split's half of this list (`words`, `exts`, or the family's).
    pub(crate) word: Option<String>,
    /// Several distinct words of the split's half of this list (`count` of them).
    pub(crate) words: Option<String>,
    /// How many `words`: a number, or `[lo, hi]`.
    pub(crate) count: Option<Count>,
    /// A number in `[lo, hi]`: even for train, odd for held-out.
    pub(crate) number: Option<[i64; 2]>,
    /// A number in `[lo, hi]`, the same range in both splits (a size, a count: it sets
    /// the difficulty, so it is not a parameter the splits keep apart).
    pub(crate) size: Option<[i64; 2]>,
    /// A template of the parameters drawn before it (a path, a sentence).
    pub(crate) value: Option<String>,
}

/// How many words a `words` parameter draws.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
pub(crate) enum Count {
    /// Exactly this many.
    Exactly(i64),
    /// Between the two, inclusive.
    Between([i64; 2]),
}

/// One level.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LevelDef {
    /// What the level adds (shown by `agent tasks list-families`).
    pub(crate) summary: String,
    /// Parameters drawn after the family's, for this level only.
    #[serde(default)]
    pub(crate) params: Vec<ParamDef>,
    /// Ways of asking the same thing (at least five); one is drawn per instance.
    pub(crate) instructions: Vec<String>,
    /// Files copied into `/app` before the agent starts.
    #[serde(default)]
    pub(crate) files: Vec<FileDef>,
    /// Dockerfile `RUN` commands after the copy (in `/app`).
    #[serde(default)]
    pub(crate) run: Vec<String>,
    /// The reference solution (bash, in `/app`).
    pub(crate) solution: String,
    /// The pytest functions (Python; `INPUTS`, `PARAMS` and `Path` are defined).
    pub(crate) tests: String,
}

/// One input file (or one per item of a list, with `each`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileDef {
    /// Its path under `/app` (a template).
    pub(crate) path: String,
    /// Its contents (a template).
    #[serde(default)]
    pub(crate) text: String,
    /// A list parameter: one file per item, with `item` and `index` in the templates.
    pub(crate) each: Option<String>,
}
