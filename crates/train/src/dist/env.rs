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
    /// Rank on this host (`LOCAL_RANK`, else `SLURM_LOCALID`); None when the environment does not say, until
    /// the rendezvous counts the ranks on each host ([`WorldEnv::place_on_hosts`]).
    pub local_rank: Option<usize>,
    /// Processes on this host (`LOCAL_WORLD_SIZE`, else SLURM's tasks per node); None as `local_rank`.
    pub local_world_size: Option<usize>,
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
        // Under SLURM a torchrun inside `srun` sets LOCAL_RANK; a bare `srun` task only SLURM's.
        let slurm_per_node = || {
            var("SLURM_NTASKS_PER_NODE").and_then(|v| v.split('(').next().and_then(|n| n.trim().parse::<usize>().ok()))
        };
        let (rank, world, local, local_world) = match (number("RANK")?, number("WORLD_SIZE")?) {
            (Some(r), Some(w)) => (
                r,
                w,
                number("LOCAL_RANK")?.or(number("SLURM_LOCALID")?),
                number("LOCAL_WORLD_SIZE")?.or_else(slurm_per_node),
            ),
            (None, None) => match (number("SLURM_PROCID")?, number("SLURM_NTASKS")?, var("MASTER_ADDR")) {
                (Some(r), Some(w), Some(_)) if w > 1 => (r, w, number("SLURM_LOCALID")?, slurm_per_node()),
                _ => return Ok(None),
            },
            (Some(_), None) => return Err(TrainError::Config("RANK is set but WORLD_SIZE is not: set both".into())),
            (None, Some(_)) => return Err(TrainError::Config("WORLD_SIZE is set but RANK is not: set both".into())),
        };
        if world == 0 || rank >= world {
            return Err(TrainError::Config(format!("RANK={rank} is not below WORLD_SIZE={world}")));
        }
        // The rank within the node when only the node's size is known (ranks fill nodes in order, as torchrun
        // and SLURM's block distribution place them); never the global rank, which names no GPU past node 0.
        let local_world = local_world.map(|n| n.max(1));
        let local_rank = local.or_else(|| local_world.map(|n| rank % n));
        if let (Some(l), Some(n)) = (local_rank, local_world) {
            if l >= n {
                return Err(TrainError::Config(format!(
                    "the local rank {l} is not below the {n} processes on this host (LOCAL_RANK/SLURM_LOCALID vs \
                     LOCAL_WORLD_SIZE/SLURM_NTASKS_PER_NODE)"
                )));
            }
        }
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
        let mut v = vec![("RANK", self.rank.to_string()), ("WORLD_SIZE", self.world_size.to_string())];
        if let Some(l) = self.local_rank {
            v.push(("LOCAL_RANK", l.to_string()));
        }
        if let Some(n) = self.local_world_size {
            v.push(("LOCAL_WORLD_SIZE", n.to_string()));
        }
        v.push(("MASTER_ADDR", self.master_addr.clone()));
        v.push(("MASTER_PORT", self.master_port.to_string()));
        v
    }

    /// Processes per host: as the environment says, else all of them on one host.
    pub fn procs_per_node(&self) -> usize {
        self.local_world_size.unwrap_or(self.world_size).max(1)
    }

    /// Number of hosts (processes per host divide the world evenly).
    pub fn nodes(&self) -> usize {
        self.world_size.div_ceil(self.procs_per_node())
    }

    /// Fills the local rank and size the environment left out from every rank's host name (in rank order, as the
    /// rendezvous gathers them): this rank's index among the ranks on its host, and how many there are.
    pub fn place_on_hosts(&mut self, hosts: &[String]) {
        let Some(mine) = hosts.get(self.rank) else { return };
        if self.local_rank.is_none() {
            self.local_rank = Some(hosts[..self.rank].iter().filter(|h| *h == mine).count());
        }
        if self.local_world_size.is_none() {
            self.local_world_size = Some(hosts.iter().filter(|h| *h == mine).count());
        }
    }

    /// The CUDA ordinal this rank uses, with `cuda_visible` the value of `CUDA_VISIBLE_DEVICES`: the local rank
    /// among the devices the process sees, or device 0 when it sees exactly one (SLURM's `--gpus-per-task=1`
    /// and `--gpu-bind` give each task its own, renumbered 0).
    pub fn gpu_ordinal(&self, cuda_visible: Option<&str>) -> Result<usize, TrainError> {
        let local = self.local_rank.ok_or_else(|| {
            TrainError::Config(format!(
                "rank {} does not know its place on its host: set LOCAL_RANK (torchrun sets it) or run under srun",
                self.rank
            ))
        })?;
        let visible: Option<Vec<&str>> = cuda_visible
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| v.split(',').map(str::trim).filter(|d| !d.is_empty()).collect());
        match visible {
            None => Ok(local),
            Some(devices) if devices.len() == 1 => Ok(0),
            Some(devices) if local < devices.len() => Ok(local),
            Some(devices) => Err(TrainError::Config(format!(
                "rank {} is local rank {local} but CUDA_VISIBLE_DEVICES={} shows {} GPU(s): start at most one \
                 process per visible GPU, or give each its own (srun --gpus-per-task=1)",
                self.rank,
                devices.join(","),
                devices.len()
            ))),
        }
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
        assert_eq!((w.rank, w.world_size, w.local_rank, w.nodes()), (3, 4, Some(1), 2));
        assert_eq!((w.master_addr.as_str(), w.master_port), ("node0", 29400));
        let back: Vec<(&str, String)> = w.vars();
        assert!(back.contains(&("LOCAL_RANK", "1".into())));
        let d = read(&[("RANK", "1"), ("WORLD_SIZE", "2")]).unwrap().unwrap();
        assert_eq!((d.local_rank, d.master_addr.as_str(), d.master_port), (None, "127.0.0.1", DEFAULT_MASTER_PORT));
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
        assert_eq!((w.rank, w.world_size, w.local_rank, w.local_world_size), (5, 8, Some(1), Some(4)));
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

    /// One row of the placement table: the variables a launcher sets, and the GPU each rank must get.
    fn gpu_of(vars: &[(&str, &str)], hosts: &[&str]) -> Result<usize, String> {
        let mut w = read(vars).map_err(|e| e.to_string())?.expect("a world");
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        w.place_on_hosts(&hosts);
        let visible = vars.iter().find(|(k, _)| *k == "CUDA_VISIBLE_DEVICES").map(|(_, v)| *v);
        w.gpu_ordinal(visible).map_err(|e| e.to_string())
    }

    #[test]
    fn every_launcher_maps_ranks_to_the_gpus_of_their_own_host() {
        let two_nodes = ["n0", "n0", "n0", "n0", "n1", "n1", "n1", "n1"];
        // torchrun on the second node: LOCAL_RANK names the GPU.
        let torchrun = [("RANK", "6"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "2"), ("LOCAL_WORLD_SIZE", "4")];
        assert_eq!(gpu_of(&torchrun, &two_nodes), Ok(2));
        // torchrun restricted to GPUs 4-7: the ordinal is among those it sees.
        let mut restricted = torchrun.to_vec();
        restricted.push(("CUDA_VISIBLE_DEVICES", "4,5,6,7"));
        assert_eq!(gpu_of(&restricted, &two_nodes), Ok(2));
        // srun with one task per GPU and all the node's GPUs visible: SLURM_LOCALID.
        let slurm = [
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS_PER_NODE", "4(x2)"),
            ("MASTER_ADDR", "n0"),
        ];
        assert_eq!(gpu_of(&slurm, &two_nodes), Ok(1));
        // srun --gpus-per-task=1: each task sees its own GPU as device 0, whatever SLURM_LOCALID is.
        let mut per_task = slurm.to_vec();
        per_task.push(("CUDA_VISIBLE_DEVICES", "5"));
        assert_eq!(gpu_of(&per_task, &two_nodes), Ok(0));
        // RANK/WORLD_SIZE and nothing local (a hand-written launcher): the rendezvous's host list decides,
        // so rank 6 on the second node gets GPU 2, not GPU 6.
        let bare = [("RANK", "6"), ("WORLD_SIZE", "8"), ("MASTER_ADDR", "n0")];
        assert_eq!(gpu_of(&bare, &two_nodes), Ok(2));
        // Only the node's size known: the rank within the node.
        let sized = [("RANK", "5"), ("WORLD_SIZE", "8"), ("LOCAL_WORLD_SIZE", "4")];
        assert_eq!(gpu_of(&sized, &two_nodes), Ok(1));
        // More local ranks than visible GPUs is refused by name.
        let mut crowded = torchrun.to_vec();
        crowded.push(("CUDA_VISIBLE_DEVICES", "0,1"));
        let e = gpu_of(&crowded, &two_nodes).unwrap_err();
        assert!(e.contains("CUDA_VISIBLE_DEVICES=0,1") && e.contains("local rank 2"), "{e}");
        // A world with no host list yet and nothing local cannot name a GPU.
        let mut unknown = read(&bare).unwrap().unwrap();
        assert!(unknown.gpu_ordinal(None).is_err());
        unknown.place_on_hosts(&[
            "a".into(),
            "b".into(),
            "a".into(),
            "b".into(),
            "a".into(),
            "b".into(),
            "a".into(),
            "b".into(),
        ]);
        assert_eq!((unknown.local_rank, unknown.local_world_size), (Some(3), Some(4)));
    }
}
