//! What a container mounts beyond the sandbox's own binds: volumes, host folders the
//! caller allowed, and tmpfs; turned into the engine's mount list.

use std::collections::HashMap;
use std::path::PathBuf;

use bollard::models::{Mount as EngineMount, MountTypeEnum};

/// One mount of a container.
#[derive(Debug, Clone, PartialEq)]
pub enum Mount {
    /// A volume: a named one created beforehand (see [`crate::Volume`]), or an anonymous
    /// one (`name: None`) that the engine creates and removes with the container.
    Volume { name: Option<String>, target: String, read_only: bool },
    /// A host file or folder (absolute). The sandbox mounts what it is given: which host
    /// paths are allowed is the caller's decision. The engine has no `nosuid` for binds
    /// (its bind options are propagation and recursion only): setuid files in read-write
    /// binds are stripped instead (`Sandbox::restore_ownership`), and `no-new-privileges`
    /// keeps them inert inside the container.
    Bind { source: PathBuf, target: String, read_only: bool },
    /// A tmpfs with the engine's mount options (`size=100m,mode=755`; may be empty).
    Tmpfs { target: String, options: String },
}

impl Mount {
    /// The path inside the container.
    pub fn target(&self) -> &str {
        match self {
            Mount::Volume { target, .. } | Mount::Bind { target, .. } | Mount::Tmpfs { target, .. } => target,
        }
    }
}

/// The engine's mount list (volumes and binds) and tmpfs map for `mounts`.
pub(crate) fn engine_mounts(mounts: &[Mount]) -> (Vec<EngineMount>, HashMap<String, String>) {
    let mut list = Vec::new();
    let mut tmpfs = HashMap::new();
    for m in mounts {
        match m {
            Mount::Volume { name, target, read_only } => list.push(EngineMount {
                target: Some(target.clone()),
                source: name.clone(),
                typ: Some(MountTypeEnum::VOLUME),
                read_only: Some(*read_only),
                ..Default::default()
            }),
            Mount::Bind { source, target, read_only } => list.push(EngineMount {
                target: Some(target.clone()),
                source: Some(source.display().to_string()),
                typ: Some(MountTypeEnum::BIND),
                read_only: Some(*read_only),
                ..Default::default()
            }),
            // The tmpfs map takes the options as written (`size=…,mode=…`), which the
            // typed tmpfs mount would make us re-parse.
            Mount::Tmpfs { target, options } => {
                tmpfs.insert(target.clone(), options.clone());
            }
        }
    }
    (list, tmpfs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volumes_and_binds_are_mounts_and_tmpfs_keeps_its_options() {
        let (list, tmpfs) = engine_mounts(&[
            Mount::Volume { name: Some("v1".into()), target: "/data".into(), read_only: false },
            Mount::Volume { name: None, target: "/cache".into(), read_only: false },
            Mount::Bind { source: "/t/env/conf".into(), target: "/conf".into(), read_only: true },
            Mount::Tmpfs { target: "/root".into(), options: "size=100M,mode=755".into() },
        ]);
        assert_eq!(list.len(), 3);
        assert_eq!(list[0].typ, Some(MountTypeEnum::VOLUME));
        assert_eq!(list[0].source.as_deref(), Some("v1"));
        assert_eq!(list[1].source, None);
        assert_eq!(list[2].typ, Some(MountTypeEnum::BIND));
        assert_eq!(list[2].read_only, Some(true));
        assert_eq!(tmpfs.get("/root").map(String::as_str), Some("size=100M,mode=755"));
    }
}
