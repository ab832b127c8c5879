//! Where a worker stands in its world, from the variables torchrun, SLURM and Kubernetes
//! operators (and `agent train --nproc-per-node`) set.

use crate::error::TrainError;

/// torchrun's default rendezvous port.
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// A duration in whole seconds from the environment variable `name`, else `default`.
pub fn seconds_from_env(name: &str, default: std::time::Duration) -> std::time::Duration {
    std::env::var(name).ok().and_then(|s| s.trim().parse::<u64>().ok()).map_or(default, std::time::Duration::from_secs)
}

/// A worker's place in a multi-process run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorldEnv {
    /// Global rank (`RANK`).
    pub rank: usize,
    /// Number of processes in all (`WORLD_SIZE`).
    pub world_size: usize,
    /// Rank on this host, which is also the GPU it uses (`LOCAL_RANK`).
    pub local_rank: usize,
    /// Processes on this host (`LOCAL_WORLD_SIZE`).
    pub local_world_size: usize,
    /// Host of rank 0, where the rendezvous listens (`MASTER_ADDR`).
    pub master_addr: String,
    /// Its port (`MASTER_PORT`).
    pub master_port: u16,
}

impl WorldEnv {
    /// The world the environment describes; `None` when it names none (a single process).
    pub fn from_env() -> Result<Option<WorldEnv>, TrainError> {
        WorldEnv::from_lookup(&|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// As [`WorldEnv::from_env`], reading variables through `var`.
    pub fn from_lookup(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<WorldEnv>, TrainError> {
        let number = |name: &str| -> Result<Option<usize>, TrainError> {
            var(name)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| {
                        TrainError::Config(format!("environment variable {name}={v:?} is not a non-negative integer"))
                    })
                })
                .transpose()
        };
        // torchrun and Kubernetes operators set RANK/WORLD_SIZE; under plain `srun` only
        // SLURM's own variables exist (the job script sets MASTER_ADDR).
        let (rank, world, local, local_world) = match (number("RANK")?, number("WORLD_SIZE")?) {
            (Some(r), Some(w)) => (r, w, number("LOCAL_RANK")?, number("LOCAL_WORLD_SIZE")?),
            (None, None) => match (number("SLURM_PROCID")?, number("SLURM_NTASKS")?, var("MASTER_ADDR")) {
                (Some(r), Some(w), Some(_)) if w > 1 => {
                    let per_node = var("SLURM_NTASKS_PER_NODE")
                        .and_then(|v| v.split('(').next().and_then(|n| n.trim().parse::<usize>().ok()));
                    (r, w, number("SLURM_LOCALID")?, per_node)
                }
                _ => return Ok(None),
            },
            (Some(_), None) => return Err(TrainError::Config("RANK is set but WORLD_SIZE is not: set both".into())),
            (None, Some(_)) => return Err(TrainError::Config("WORLD_SIZE is set but RANK is not: set both".into())),
        };
        if world == 0 || rank >= world {
            return Err(TrainError::Config(format!("RANK={rank} is not below WORLD_SIZE={world}")));
        }
        let local_world = local_world.unwrap_or(world).max(1);
        let local_rank = local.unwrap_or(rank % local_world);
        let master_port = match var("MASTER_PORT") {
            Some(p) => p.trim().parse::<u16>().map_err(|_| {
                TrainError::Config(format!("environment variable MASTER_PORT={p:?} is not a port number"))
            })?,
            None => DEFAULT_MASTER_PORT,
        };
        Ok(Some(WorldEnv {
            rank,
            world_size: world,
            local_rank,
            local_world_size: local_world,
            master_addr: var("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into()),
            master_port,
        }))
    }

    /// The variables that describe this place, for a worker process.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("RANK", self.rank.to_string()),
            ("WORLD_SIZE", self.world_size.to_string()),
            ("LOCAL_RANK", self.local_rank.to_string()),
            ("LOCAL_WORLD_SIZE", self.local_world_size.to_string()),
            ("MASTER_ADDR", self.master_addr.clone()),
            ("MASTER_PORT", self.master_port.to_string()),
        ]
    }

    /// Number of hosts (processes per host divide the world evenly).
    pub fn nodes(&self) -> usize {
        self.world_size.div_ceil(self.local_world_size.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(vars: &[(&str, &str)]) -> Result<Option<WorldEnv>, TrainError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        WorldEnv::from_lookup(&|n| map.get(n).cloned())
    }

    #[test]
    fn torchrun_variables_make_a_world_and_nothing_makes_none() {
        assert_eq!(read(&[]).unwrap(), None);
        let w = read(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29400"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((w.rank, w.world_size, w.local_rank, w.nodes()), (3, 4, 1, 2));
        assert_eq!((w.master_addr.as_str(), w.master_port), ("node0", 29400));
        let back: Vec<(&str, String)> = w.vars();
        assert!(back.contains(&("LOCAL_RANK", "1".into())));
        let d = read(&[("RANK", "1"), ("WORLD_SIZE", "2")]).unwrap().unwrap();
        assert_eq!((d.local_rank, d.master_addr.as_str(), d.master_port), (1, "127.0.0.1", DEFAULT_MASTER_PORT));
    }

    #[test]
    fn slurm_tasks_are_read_when_torchrun_is_absent() {
        let w = read(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS_PER_NODE", "4(x2)"),
            ("MASTER_ADDR", "n0"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((w.rank, w.world_size, w.local_rank, w.local_world_size), (5, 8, 1, 4));
        // A single srun task is not a world.
        assert_eq!(read(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1"), ("MASTER_ADDR", "n0")]).unwrap(), None);
    }

    #[test]
    fn half_set_or_wrong_variables_are_refused_by_name() {
        assert!(read(&[("RANK", "0")]).unwrap_err().to_string().contains("WORLD_SIZE"));
        assert!(read(&[("RANK", "2"), ("WORLD_SIZE", "2")]).unwrap_err().to_string().contains("below"));
        assert!(read(&[("RANK", "x"), ("WORLD_SIZE", "2")]).unwrap_err().to_string().contains("RANK=\"x\""));
        let e = read(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "99999")]).unwrap_err();
        assert!(e.to_string().contains("MASTER_PORT"));
    }
}
