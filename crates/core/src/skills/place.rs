//! Where each skill's folder is inside the sandbox: below a bind that holds it already
//! (a project's skills under `/workspace`), else bound read-only under
//! [`SANDBOX_SKILLS_DIR`] (the user's skills), so that its scripts run in the sandbox and
//! never on this computer, and the sandbox cannot change them.

use std::path::Path;

use agent_sandbox::Mount;

use super::Skills;

/// Where skills that no bind holds are mounted, one folder per skill name.
pub const SANDBOX_SKILLS_DIR: &str = "/opt/agent/skills";

/// Sets each skill's `sandbox_dir`: the path below a bind of `binds`
/// (`host:container[:options]`) that holds its folder, else, when `can_mount`, a
/// read-only mount of it under [`SANDBOX_SKILLS_DIR`] (returned, for the container to be
/// started with), else none.
pub fn place(skills: &mut Skills, binds: &[String], can_mount: bool) -> Vec<Mount> {
    let bound: Vec<(std::path::PathBuf, &str)> = binds
        .iter()
        .filter_map(|b| {
            let mut parts = b.split(':');
            let (host, inside) = (parts.next()?, parts.next()?);
            Some((Path::new(host).canonicalize().ok()?, inside))
        })
        .collect();
    let mut mounts = Vec::new();
    for skill in &mut skills.skills {
        let below = bound.iter().find_map(|(host, inside)| {
            let rel = skill.dir.strip_prefix(host).ok()?;
            let rel: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            let inside = inside.trim_end_matches('/');
            Some(if rel.is_empty() { inside.to_string() } else { format!("{inside}/{}", rel.join("/")) })
        });
        skill.sandbox_dir = match below {
            Some(dir) => Some(dir),
            None if can_mount => {
                let target = format!("{SANDBOX_SKILLS_DIR}/{}", skill.name);
                mounts.push(Mount::Bind { source: skill.dir.clone(), target: target.clone(), read_only: true });
                Some(target)
            }
            None => None,
        };
    }
    mounts
}
