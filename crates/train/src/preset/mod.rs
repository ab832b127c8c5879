//! Training presets: one YAML file holds everything `agent train` needs (model, hardware, GRPO, optimiser, rollout,
//! reward, checkpoints); the shipped ones are compiled into the binary.

mod defaults;
mod schema;
#[cfg(test)]
mod tests;
mod validate;

use std::path::{Path, PathBuf};

pub use schema::*;

/// A shipped preset: its name and its YAML, embedded so that the binary works from any directory.
macro_rules! builtin {
    ($name:literal) => {
        ($name, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../presets/", $name, ".yaml")))
    };
}

/// The shipped presets (every file in `presets/`; a test checks the two agree).
const BUILTIN: &[(&str, &str)] = &[
    builtin!("cpu-tiny"),
    builtin!("cpu-qwen2.5-coder-0.5b-lora"),
    builtin!("qwen3-8b-lora-1xh200"),
    builtin!("qwen3-8b-lora-8xh100"),
    builtin!("qwen3-8b-lora-4x8xh100"),
    builtin!("qwen3-8b-full-1xh200"),
    builtin!("qwen3-8b-full-8xh100"),
    builtin!("qwen3-8b-full-4x8xh100"),
    builtin!("qwen3-32b-lora-1xh200"),
    builtin!("qwen3-32b-lora-8xh100"),
    builtin!("qwen3-32b-lora-4x8xh100"),
    builtin!("qwen3-32b-full-8xh100"),
    builtin!("qwen3-32b-full-4x8xh100"),
];

/// `sft.file` naming the oracle's demonstrations instead of a file (see `crate::warm_start`).
pub const ORACLE_DEMOS: &str = "oracle";

/// The model spec that asks for the built-in tiny model instead of weights on disk.
pub const TINY_TOY: &str = "tiny:toy";

/// Errors loading or checking a preset; each names the file and, where there is one, the field.
#[derive(Debug, thiserror::Error)]
pub enum PresetError {
    /// The preset file could not be read.
    #[error("cannot read the preset file {path}: {source}. Check the path, or give a built-in name ({known})")]
    Read {
        path: PathBuf,
        known: String,
        #[source]
        source: std::io::Error,
    },
    /// The YAML does not match the preset format (unknown field, wrong type, missing field, bad syntax).
    #[error("the preset {file} is not valid: {reason}. Fix that field; presets/cpu-tiny.yaml is a complete example")]
    Parse { file: String, reason: String, line: Option<usize>, column: Option<usize> },
    /// The name is neither a built-in preset nor a path.
    #[error(
        "there is no built-in preset named `{name}`; the built-in presets are: {known}. \
         To use a file, give a path ending in .yaml"
    )]
    Unknown { name: String, known: String },
    /// A field parsed but its value is out of range or contradicts another field.
    #[error("the preset {file} has a bad value for `{field}`: {reason}")]
    Invalid { file: String, field: String, reason: String },
}

/// Where a preset came from; relative paths inside it resolve against this.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Origin {
    /// Shipped with the binary; relative paths are relative to the crate root.
    #[default]
    Builtin,
    /// Read from this YAML file; relative paths are relative to its directory.
    File(PathBuf),
}

impl Preset {
    /// Names of the built-in presets.
    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(name, _)| *name).collect()
    }

    /// A built-in preset by name, parsed and validated.
    pub fn builtin(name: &str) -> Result<Preset, PresetError> {
        let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name) else {
            return Err(PresetError::Unknown { name: name.to_string(), known: known_names() });
        };
        Preset::parse(text, Origin::Builtin, &format!("presets/{name}.yaml (built in)"))
    }

    /// A preset file, parsed and validated.
    pub fn load(path: &Path) -> Result<Preset, PresetError> {
        let text = std::fs::read_to_string(path).map_err(|source| PresetError::Read {
            path: path.to_path_buf(),
            known: known_names(),
            source,
        })?;
        Preset::parse(&text, Origin::File(path.to_path_buf()), &path.display().to_string())
    }

    /// A path (contains `/` or ends in `.yaml`) is read from disk; anything else is a built-in name.
    pub fn find(name_or_path: &str) -> Result<Preset, PresetError> {
        if name_or_path.contains('/') || name_or_path.ends_with(".yaml") {
            Preset::load(Path::new(name_or_path))
        } else {
            Preset::builtin(name_or_path)
        }
    }

    /// Parses and validates YAML text; `file` names it in errors.
    pub fn parse(text: &str, origin: Origin, file: &str) -> Result<Preset, PresetError> {
        let mut preset: Preset = serde_yaml::from_str(text).map_err(|e| PresetError::Parse {
            file: file.to_string(),
            reason: e.to_string(),
            line: e.location().map(|l| l.line()),
            column: e.location().map(|l| l.column()),
        })?;
        preset.origin = origin;
        preset.validate()?;
        Ok(preset)
    }

    /// Where this preset came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// How errors name this preset's file.
    pub fn file_label(&self) -> String {
        match &self.origin {
            Origin::Builtin => format!("presets/{}.yaml (built in)", self.name),
            Origin::File(path) => path.display().to_string(),
        }
    }

    /// A path from the preset: absolute as is; relative to the YAML's directory, or for
    /// a built-in preset, under the files the binary carries (`assets/…`, unpacked into
    /// the cache) and else relative to the current directory.
    pub fn resolve_path(&self, p: &str) -> Result<PathBuf, PresetError> {
        let path = Path::new(p);
        if path.is_absolute() {
            return Ok(path.to_path_buf());
        }
        match &self.origin {
            Origin::Builtin => match path.strip_prefix("assets") {
                Ok(rest) => Ok(agent_core::assets::assets_root()
                    .map_err(|e| PresetError::Invalid {
                        file: self.file_label(),
                        field: "(built-in files)".into(),
                        reason: e.to_string(),
                    })?
                    .join(rest)),
                Err(_) => Ok(path.to_path_buf()),
            },
            Origin::File(file) => Ok(file.parent().unwrap_or(Path::new("")).join(path)),
        }
    }

    /// Processes in the run: GPUs per node × nodes (one on CPU).
    pub fn world_size(&self) -> usize {
        self.hardware.gpus_per_node * self.hardware.nodes
    }

    /// The ZeRO stage in effect: `optim.zero`, or 2 for full updates on more than one
    /// GPU and 0 otherwise.
    pub fn zero_stage(&self) -> u8 {
        match self.optim.zero {
            Some(z) => z,
            None if self.mode.full && self.world_size() > 1 => 2,
            None => 0,
        }
    }

    /// The fraction of each GPU reserved for the rollout engine: `rollout.gpu_memory_fraction`,
    /// or 0 for engine `openai` (it runs elsewhere) and [`DEFAULT_ROLLOUT_MEMORY_FRACTION`] otherwise.
    pub fn rollout_memory_fraction(&self) -> f64 {
        match (self.rollout.gpu_memory_fraction, self.rollout.engine) {
            (Some(f), _) => f,
            (None, RolloutEngine::Openai) => 0.0,
            (None, _) => DEFAULT_ROLLOUT_MEMORY_FRACTION,
        }
    }
}

/// `rollout.gpu_memory_fraction` when a preset leaves it out (engines other than `openai`).
pub const DEFAULT_ROLLOUT_MEMORY_FRACTION: f64 = 0.25;

fn known_names() -> String {
    Preset::builtin_names().join(", ")
}
