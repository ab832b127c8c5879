//! Procedurally generated terminal tasks (`agent tasks generate`): small TB1 tasks of
//! several families, each verified by its own pytest file in its own container, drawn
//! from a seed, for training and for a held-out evaluation.
//!
//! **Determinism.** A task is a pure function of (family, level, split, seed, index):
//! the same arguments write byte-identical folders (`rng.rs` is a fixed SplitMix64, not a
//! library whose stream may change).
//!
//! **Levels.** Every family has levels 1 to [`MAX_LEVEL`]. Level 1 is one command with
//! every path and word named in the instruction: it is meant for the smallest models
//! (Qwen2.5-Coder-0.5B resolved none of ten hand-written tasks of this size untrained,
//! the 1.5B two). Level 2 adds a step or a twist (several files, a filter, spaces in
//! names, a logic bug); level 3 takes a few commands (grouping, a zip without `unzip`, a
//! bash bug). Calibrate on the held-out split: the target is 20–60% resolved untrained.
//!
//! **The split.** Every parameter of an instance (file and field names, keywords,
//! category values, bug kinds, program kinds, thresholds and new values) is drawn from
//! its split's own pool: word lists are halved by position (`draw::Ctx::pool`: even
//! positions train, odd held-out) and parameter numbers by parity (even train, odd
//! held-out). So no train task shares a parameter with a held-out task of its family,
//! and no seed of one split yields an instance of the other. The bulk of a file (filler
//! words, data values) also comes from the split's half of the word lists; sizes and
//! counts use the same ranges in both splits, since they set the difficulty.

mod archive;
mod count_lines;
mod csv_column;
mod data;
mod draw;
mod fix_script;
mod json_edit;
mod pipeline;
mod rename_files;
mod replace_text;
mod rng;
mod tb1;
mod vocab;
mod write;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use write::{write_tasks, Manifest, ManifestEntry, GENERATOR, MANIFEST};

use draw::{Ctx, Spec};
use rng::{fnv1a, mix, Rng};

/// The highest level of every family.
pub const MAX_LEVEL: u8 = 3;

/// Which side of the train/held-out split a task is drawn for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Tasks to train on.
    Train,
    /// Tasks to evaluate on: no parameter in common with any train task.
    Heldout,
}

impl Split {
    /// Its name in task names and manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Heldout => "heldout",
        }
    }
}

/// How a family builds an instance.
#[derive(Debug, Clone)]
enum Builder {
    /// Written in Rust (the first eight families).
    Code(fn(&mut Ctx) -> Spec),
    /// Read from a family file (`docs/tasks.md`, "Task families as data").
    Data(Arc<data::DataFamily>),
}

/// A kind of task.
#[derive(Debug, Clone)]
pub struct Family {
    /// Its name (`--family NAME`).
    pub name: String,
    /// One line: what its tasks ask.
    pub summary: String,
    /// What each level adds, from level 1.
    pub levels: Vec<String>,
    /// Where it was defined: `built in`, or the family file it was read from.
    pub origin: String,
    build: Builder,
}

/// A family written in Rust.
#[derive(Debug)]
pub(crate) struct CodeFamily {
    pub(crate) name: &'static str,
    pub(crate) summary: &'static str,
    pub(crate) levels: [&'static str; MAX_LEVEL as usize],
    pub(crate) build: fn(&mut Ctx) -> Spec,
}

impl CodeFamily {
    fn family(&self) -> Family {
        Family {
            name: self.name.to_string(),
            summary: self.summary.to_string(),
            levels: self.levels.iter().map(|l| l.to_string()).collect(),
            origin: BUILT_IN.to_string(),
            build: Builder::Code(self.build),
        }
    }
}

/// The origin of the families that ship with the binary.
pub const BUILT_IN: &str = "built in";

/// The families written in Rust, in the order mixed sets cycle through them.
const CODE_FAMILIES: &[CodeFamily] = &[
    count_lines::FAMILY,
    rename_files::FAMILY,
    replace_text::FAMILY,
    json_edit::FAMILY,
    csv_column::FAMILY,
    fix_script::FAMILY,
    archive::FAMILY,
    pipeline::FAMILY,
];

/// The built-in families: the Rust ones, then the family files that ship with the
/// binary (`crates/bench/families/`), in the order mixed sets cycle through them.
pub fn builtin_families() -> Result<Vec<Family>, GenerateError> {
    let mut out: Vec<Family> = CODE_FAMILIES.iter().map(CodeFamily::family).collect();
    for (file, text) in data::BUILT_IN {
        out.push(data::parse(text, &format!("{BUILT_IN} ({file})"))?);
    }
    Ok(out)
}

/// Every built-in family (see [`builtin_families`]; a test holds that every built-in
/// family file loads, so none is left out here).
pub fn families() -> Vec<Family> {
    builtin_families().unwrap_or_else(|_| CODE_FAMILIES.iter().map(CodeFamily::family).collect())
}

/// The built-in families and those of the family files in `dirs` (`*.toml`, sorted by
/// file name, after the built-in ones); a name used twice is refused.
pub fn catalog(dirs: &[PathBuf]) -> Result<Vec<Family>, GenerateError> {
    let mut out = builtin_families()?;
    for dir in dirs {
        for fam in data::load_dir(dir)? {
            if let Some(first) = out.iter().find(|f| f.name == fam.name) {
                return Err(GenerateError::Family {
                    origin: fam.origin.clone(),
                    reason: format!("the name `{}` is taken by the family of {}; rename one", fam.name, first.origin),
                });
            }
            out.push(fam);
        }
    }
    Ok(out)
}

/// The family called `name` among `all`.
pub fn family<'a>(all: &'a [Family], name: &str) -> Result<&'a Family, GenerateError> {
    all.iter().find(|f| f.name == name).ok_or_else(|| GenerateError::UnknownFamily {
        name: name.to_string(),
        known: all.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", "),
    })
}

/// Why tasks could not be generated or written.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("unknown task family `{name}`; the families are: {known} (see `agent tasks list-families`)")]
    UnknownFamily { name: String, known: String },
    #[error("level {level} does not exist; every family has levels 1 to {MAX_LEVEL}")]
    BadLevel { level: u8 },
    #[error("nothing to generate: ask for at least one task (-n 1 or more)")]
    NoTasks,
    #[error(
        "{path}: not empty and holds no manifest.json written by `agent tasks generate`, so its files may be \
         someone's; nothing was written (choose a new or empty folder)"
    )]
    NotOurs { path: String },
    #[error("{path}: unreadable manifest ({reason}); nothing was written (remove it, or choose another folder)")]
    BadManifest { path: String, reason: String },
    #[error(
        "{path}: exists and is not a task of the folder's manifest.json; nothing was written (move it, or \
         choose another folder)"
    )]
    Clash { path: String },
    #[error("task family {origin}: {reason}")]
    Family { origin: String, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// One generated task: its identity, its parameters and its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedTask {
    /// Folder name: `FAMILY-lLEVEL-SPLIT-SEED-INDEX`.
    pub name: String,
    pub family: String,
    pub level: u8,
    pub split: Split,
    pub seed: u64,
    pub index: u32,
    /// The instance's parameters, each drawn from the split's own pool.
    pub params: BTreeMap<String, Vec<String>>,
    /// What the agent is told.
    pub instruction: String,
    /// Every file of the folder: path relative to it → contents.
    pub files: BTreeMap<String, String>,
}

/// What `agent tasks generate` was asked for.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Families to cycle through (empty: all of them).
    pub families: Vec<String>,
    /// Folders of family files to read besides the built-in families.
    pub family_dirs: Vec<PathBuf>,
    /// Levels to cycle through, once per round of families (empty: level 1).
    pub levels: Vec<u8>,
    pub split: Split,
    pub seed: u64,
    /// How many tasks.
    pub count: usize,
}

/// The seed of one instance: every part of its identity changes it.
fn instance_seed(family: &str, level: u8, split: Split, seed: u64, index: u32) -> u64 {
    let split_tag = match split {
        Split::Train => 0x0074_7261_696e,
        Split::Heldout => 0x6865_6c64,
    };
    [u64::from(level), split_tag, seed, u64::from(index)]
        .into_iter()
        .fold(fnv1a(family.as_bytes()), |h, part| mix(h ^ mix(part.wrapping_add(0x9e37_79b9))))
}

/// One instance of a family (a pure function of its arguments).
pub fn instance(
    family: &Family,
    level: u8,
    split: Split,
    seed: u64,
    index: u32,
) -> Result<GeneratedTask, GenerateError> {
    if !(1..=MAX_LEVEL).contains(&level) {
        return Err(GenerateError::BadLevel { level });
    }
    let mut ctx = Ctx::new(Rng::new(instance_seed(&family.name, level, split, seed, index)), split, level);
    let spec = match &family.build {
        Builder::Code(build) => build(&mut ctx),
        Builder::Data(data) => data.build(&mut ctx, &family.origin)?,
    };
    let name = format!("{}-l{level}-{}-{seed}-{index:04}", family.name, split.as_str());
    let id = tb1::Identity { family: &family.name, level, split, seed, index };
    let files = tb1::assemble(&id, &spec);
    Ok(GeneratedTask {
        name,
        family: family.name.clone(),
        level,
        split,
        seed,
        index,
        params: ctx.into_params(),
        instruction: spec.instruction,
        files,
    })
}

/// The tasks `opts` asks for: task `i` is of family `i mod F` and level
/// `(i div F) mod L`, so a mixed set is balanced across families and levels.
pub fn generate(opts: &GenerateOptions) -> Result<Vec<GeneratedTask>, GenerateError> {
    if opts.count == 0 {
        return Err(GenerateError::NoTasks);
    }
    let all = catalog(&opts.family_dirs)?;
    let fams: Vec<&Family> = if opts.families.is_empty() {
        all.iter().collect()
    } else {
        opts.families.iter().map(|n| family(&all, n)).collect::<Result<_, _>>()?
    };
    let levels = if opts.levels.is_empty() { vec![1] } else { opts.levels.clone() };
    if let Some(bad) = levels.iter().find(|l| !(1..=MAX_LEVEL).contains(*l)) {
        return Err(GenerateError::BadLevel { level: *bad });
    }
    (0..opts.count)
        .map(|i| {
            let family = fams[i % fams.len()];
            let level = levels[(i / fams.len()) % levels.len()];
            instance(family, level, opts.split, opts.seed, i as u32)
        })
        .collect()
}

#[cfg(test)]
mod tests;
