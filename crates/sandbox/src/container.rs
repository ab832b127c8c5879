//! One labelled, resource-limited container per episode, removed on every exit path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::docker::Engine;
use bollard::container::NetworkingConfig;
use bollard::container::{Config, CreateContainerOptions, KillContainerOptions, RemoveContainerOptions};
use bollard::models::{EndpointSettings, HostConfig};

use super::error::{is_not_found, SandboxError};
use super::exec::{exec_capture, exec_streaming, ExecOutput, StreamedExit};
use super::mount::{engine_mounts, Mount};
use super::port::{engine_ports, PublishedPort};
use super::prune::resource_labels;
use super::workspace::WorkspaceGuard;

/// Label holding the id of the run (one `agent` invocation, bench run or train run).
pub const LABEL_RUN: &str = "agent.run";
/// Label holding the id of the episode inside the run.
pub const LABEL_EPISODE: &str = "agent.episode";
/// Label naming the process that owns the container (`host:pid:start-ticks`).
pub const LABEL_OWNER: &str = "agent.owner";

/// The first process of every sandbox: on SIGUSR1 it kills every other process in the
/// container (the last resort against fork bombs and stuck shells; `kill -1` spares only
/// the caller and PID 1, and is a single, race-free system call).
///
/// It runs under the engine's init (tini, `HostConfig.init`), which forwards the signals
/// to it and reaps every orphan, so the killed processes free the process limit at once.
/// Where the image has bash, the script never forks after it starts: it waits in `read`
/// on a pipe it holds both ends of. A forking script dies the first time a fork fails,
/// and right after a fork bomb is killed the limit may still be full, so the container
/// would stop exactly when it is being rescued. Images without bash keep a plain loop.
const INIT_SCRIPT: &str = "command -v bash >/dev/null 2>&1 && exec bash -c 'exec 3<> <(:); \
     trap \"kill -KILL -1 2>/dev/null\" USR1; trap \"exit 0\" TERM INT; \
     while :; do read -r -t 86400 -u 3 _; done'; \
     trap 'kill -KILL -1 2>/dev/null' USR1; trap 'exit 0' TERM INT; while :; do sleep 2147483 & wait $!; done";

/// Docker's default capabilities that no sandbox gets: an agent never needs them.
const DROPPED_CAPS: [&str; 6] = ["NET_RAW", "MKNOD", "SETFCAP", "AUDIT_WRITE", "SYS_CHROOT", "SETPCAP"];

/// Containers created by this process and not yet removed, for signal and panic paths.
static LIVE: Mutex<Vec<(Engine, String)>> = Mutex::new(Vec::new());

/// How to create a sandbox container.
#[derive(Debug, Clone)]
pub struct ContainerConfig {
    /// Image to run (already resolved through the image map).
    pub image: String,
    /// Run id label.
    pub run_id: String,
    /// Episode id label.
    pub episode_id: String,
    /// CPU limit in cores.
    pub cpus: f64,
    /// Memory limit in bytes.
    pub memory_bytes: i64,
    /// Maximum number of processes.
    pub pids_limit: i64,
    /// Network access.
    pub network: bool,
    /// What the network reaches (see `egress`); applies whenever `network` is on.
    pub egress: super::egress::Egress,
    /// Working directory; the image's when `None`.
    pub workdir: Option<String>,
    /// `host_path:container_path` bind mounts.
    pub binds: Vec<String>,
    /// Extra environment variables (`KEY=VALUE`).
    pub env: Vec<String>,
    /// Extra `/etc/hosts` entries (`name:ip`).
    pub extra_hosts: Vec<String>,
    /// Container name prefix (made unique with the episode id).
    pub name_prefix: String,
    /// What the container runs: the sandbox's own init (the agent's container) or the
    /// image's entrypoint (a task's service).
    pub process: ContainerProcess,
    /// A network to join at creation (instead of the default bridge), with aliases.
    pub join: Option<(String, Vec<String>)>,
    /// Volumes, host folders and tmpfs mounted beyond `binds`.
    pub mounts: Vec<Mount>,
    /// Container ports published on the host's loopback address (never elsewhere).
    pub ports: Vec<PublishedPort>,
    /// The image's entrypoint replaced (with [`ContainerProcess::Image`] only).
    pub entrypoint: Option<Vec<String>>,
    /// The user (`name`, `uid[:gid]`) of the main process and of execs; the image's when `None`.
    pub user: Option<String>,
    /// Capabilities added to the engine's default set (whether that is allowed is the
    /// caller's decision); a sandbox never runs privileged.
    pub cap_add: Vec<String>,
    /// Capabilities dropped beyond the sandbox's own list.
    pub cap_drop: Vec<String>,
    /// Size of `/dev/shm` in bytes; the engine's default when `None`.
    pub shm_size: Option<i64>,
    /// The engine's init as PID 1, for [`ContainerProcess::Image`] (a sandbox started
    /// with [`ContainerProcess::Init`] always runs under it).
    pub init: bool,
    /// The host name; the engine's (the container id) when `None`.
    pub hostname: Option<String>,
}

/// The main process of a container.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum ContainerProcess {
    /// The sandbox's init: reaps orphans and kills everything on request; commands run
    /// through exec.
    #[default]
    Init,
    /// The image's entrypoint with this command (the image's when `None`), as a task's
    /// service container runs.
    Image(Option<Vec<String>>),
}

impl ContainerConfig {
    /// Defaults for an image: 2 CPUs, 4 GiB, 1024 processes, network on.
    pub fn new(image: impl Into<String>, run_id: impl Into<String>, episode_id: impl Into<String>) -> Self {
        Self {
            image: image.into(),
            run_id: run_id.into(),
            episode_id: episode_id.into(),
            cpus: 2.0,
            memory_bytes: 4 << 30,
            pids_limit: 1024,
            network: true,
            egress: Default::default(),
            workdir: None,
            binds: Vec::new(),
            env: Vec::new(),
            extra_hosts: Vec::new(),
            name_prefix: "agent".into(),
            process: ContainerProcess::Init,
            join: None,
            mounts: Vec::new(),
            ports: Vec::new(),
            entrypoint: None,
            user: None,
            cap_add: Vec::new(),
            cap_drop: Vec::new(),
            shm_size: None,
            init: false,
            hostname: None,
        }
    }

    /// The capabilities to drop: the sandbox's list without those asked for in
    /// `cap_add`, plus `cap_drop` (names with or without `CAP_`, any case).
    fn dropped_caps(&self) -> Vec<String> {
        let norm = |c: &str| {
            let c = c.trim().to_ascii_uppercase();
            c.strip_prefix("CAP_").map(str::to_string).unwrap_or(c)
        };
        let added: Vec<String> = self.cap_add.iter().map(|c| norm(c)).collect();
        let mut drop: Vec<String> = DROPPED_CAPS
            .iter()
            .filter(|c| !added.iter().any(|a| a == *c || a == "ALL"))
            .map(|c| c.to_string())
            .collect();
        for c in self.cap_drop.iter().map(|c| norm(c)) {
            if !drop.contains(&c) {
                drop.push(c);
            }
        }
        drop
    }
}

/// A running sandbox container.
#[derive(Debug, Clone)]
pub struct Sandbox {
    engine: Engine,
    id: String,
    name: String,
    image: String,
    pids_limit: i64,
    /// The read-write host folders bound into the container (its workspaces).
    workspaces: Vec<WorkspaceBind>,
    /// The read-only control files over those workspaces; cleaned up after removal.
    guards: Arc<Vec<WorkspaceGuard>>,
    /// Whether PID 1 is the sandbox's init (which kills everything on SIGUSR1).
    own_init: bool,
    /// What the removal found and undid in the workspaces, for the user.
    removal_notices: Arc<Mutex<Vec<String>>>,
}

/// A read-write host folder bound into the container.
#[derive(Debug, Clone)]
struct WorkspaceBind {
    /// Where it is mounted in the container.
    inside: String,
    /// Its owner when that is not root: what root in the container creates there is
    /// handed back to them.
    owner: Option<(u32, u32)>,
}

/// The read-write folders among `binds` (`host:container[:options]`), with their host path.
fn workspace_binds(binds: &[String]) -> Vec<(std::path::PathBuf, WorkspaceBind)> {
    use std::os::unix::fs::MetadataExt;
    binds
        .iter()
        .filter_map(|b| {
            let mut parts = b.split(':');
            let (host, inside) = (parts.next()?, parts.next()?);
            if parts.next().is_some_and(|opts| opts.split(',').any(|o| o == "ro")) {
                return None;
            }
            let meta = std::fs::metadata(host).ok()?;
            let owner = (meta.uid() != 0).then(|| (meta.uid(), meta.gid()));
            meta.is_dir().then(|| (host.into(), WorkspaceBind { inside: inside.to_string(), owner }))
        })
        .collect()
}

/// The shell script that strips setuid and setgid bits from the regular files below the
/// workspace `w` and hands what root made there back to its owner. It runs inside the
/// container: no host program walks a tree the sandbox writes. `-perm -4000 -o -perm
/// -2000` rather than `/6000`, which BusyBox's find lacks.
fn settle_script(w: &WorkspaceBind) -> String {
    let path = super::shell::shell_quote(&w.inside);
    let chown = match w.owner {
        Some((uid, gid)) => format!("find {path} -xdev -user 0 -exec chown -h {uid}:{gid} {{}} + 2>/dev/null; "),
        None => String::new(),
    };
    // After the chown: a chown by root may keep the bits on some kernels.
    format!(
        "{chown}find {path} -xdev -type f \\( -perm -4000 -o -perm -2000 \\) -exec chmod u-s,g-s {{}} + 2>/dev/null; true"
    )
}

impl Sandbox {
    /// Creates and starts a container; it is registered for clean-up until [`Sandbox::remove`].
    pub async fn start(engine: &Engine, cfg: &ContainerConfig) -> Result<Sandbox, SandboxError> {
        // To the engine a zero limit means none: the fork-bomb and memory protection
        // would be gone without a word.
        if cfg.cpus.is_nan() || cfg.cpus <= 0.0 || cfg.memory_bytes <= 0 || cfg.pids_limit <= 0 {
            return Err(SandboxError::NoLimits(format!(
                "cpus {}, memory {} bytes, pids {} (each must be positive)",
                cfg.cpus, cfg.memory_bytes, cfg.pids_limit
            )));
        }
        let short: String = cfg.episode_id.chars().filter(|c| c.is_ascii_alphanumeric()).take(12).collect();
        let name = format!("{}-{}-{}", cfg.name_prefix, short, &uuid::Uuid::new_v4().simple().to_string()[..6]);
        let labels = resource_labels(&cfg.run_id, &cfg.episode_id);
        let workspaces = workspace_binds(&cfg.binds);
        let mut guards = Vec::new();
        for (host, w) in &workspaces {
            let guard = WorkspaceGuard::plan(host, &w.inside).map_err(|source| SandboxError::Io {
                context: format!("cannot prepare the read-only control files of the workspace {}", host.display()),
                source,
            })?;
            guards.push(guard);
        }
        // The guards' binds lie below the workspaces': the engine mounts them after (over) those.
        let all_mounts: Vec<Mount> =
            cfg.mounts.iter().cloned().chain(guards.iter().flat_map(|g| g.mounts.iter().cloned())).collect();
        let (mounts, tmpfs) = engine_mounts(&all_mounts);
        let (exposed_ports, port_bindings) = engine_ports(&cfg.ports);
        let host_config = HostConfig {
            nano_cpus: Some((cfg.cpus * 1e9) as i64),
            memory: Some(cfg.memory_bytes),
            memory_swap: Some(cfg.memory_bytes),
            pids_limit: Some(cfg.pids_limit),
            security_opt: Some(vec!["no-new-privileges:true".into()]),
            // Docker's default set minus what an agent never needs.
            cap_drop: Some(cfg.dropped_caps()),
            cap_add: (!cfg.cap_add.is_empty()).then(|| cfg.cap_add.clone()),
            privileged: Some(false),
            network_mode: Some(match (&cfg.join, cfg.network) {
                (_, false) => "none".into(),
                (Some((net, _)), true) => net.clone(),
                (None, true) => "bridge".into(),
            }),
            binds: (!cfg.binds.is_empty()).then(|| cfg.binds.clone()),
            extra_hosts: (!cfg.extra_hosts.is_empty()).then(|| cfg.extra_hosts.clone()),
            mounts: (!mounts.is_empty()).then_some(mounts),
            tmpfs: (!tmpfs.is_empty()).then_some(tmpfs),
            // Without a network there is nothing to publish on (the engine refuses it).
            port_bindings: (cfg.network && !port_bindings.is_empty()).then_some(port_bindings),
            shm_size: cfg.shm_size,
            // Our init script runs under the engine's init (tini), which reaps what the
            // script kills; see `INIT_SCRIPT`.
            init: Some(match cfg.process {
                ContainerProcess::Image(_) => cfg.init,
                ContainerProcess::Init => true,
            }),
            ..Default::default()
        };
        let (entrypoint, cmd) = match &cfg.process {
            ContainerProcess::Init => (Some(vec!["/bin/sh".into(), "-c".into()]), Some(vec![INIT_SCRIPT.into()])),
            ContainerProcess::Image(cmd) => (cfg.entrypoint.clone(), cmd.clone()),
        };
        let networking_config = match (&cfg.join, cfg.network) {
            (Some((net, aliases)), true) => Some(NetworkingConfig {
                endpoints_config: HashMap::from([(
                    net.clone(),
                    EndpointSettings { aliases: Some(aliases.clone()), ..Default::default() },
                )]),
            }),
            _ => None,
        };
        let config = Config {
            image: Some(cfg.image.clone()),
            entrypoint,
            cmd,
            networking_config,
            labels: Some(labels),
            working_dir: cfg.workdir.clone(),
            env: Some(cfg.env.clone()),
            user: cfg.user.clone(),
            hostname: cfg.hostname.clone(),
            exposed_ports: (cfg.network && !exposed_ports.is_empty()).then_some(exposed_ports),
            open_stdin: Some(false),
            tty: Some(false),
            network_disabled: Some(!cfg.network),
            host_config: Some(host_config),
            ..Default::default()
        };
        let docker = engine.api();
        let created = docker
            .create_container(Some(CreateContainerOptions { name: name.clone(), platform: None }), config)
            .await
            .map_err(|e| {
                if is_not_found(&e) {
                    SandboxError::ImageMissing {
                        image: cfg.image.clone(),
                        hint: "build it first (`agent sandbox base` makes the default one) or map it in the config's [image_map]".into(),
                    }
                } else {
                    SandboxError::docker(format!("create a container from `{}`", cfg.image), e)
                }
            })?;
        register(engine, &created.id);
        let sandbox = Sandbox {
            engine: engine.clone(),
            id: created.id,
            name,
            image: cfg.image.clone(),
            pids_limit: cfg.pids_limit,
            workspaces: workspaces.into_iter().map(|(_, w)| w).collect(),
            guards: Arc::new(guards),
            own_init: cfg.process == ContainerProcess::Init,
            removal_notices: Arc::default(),
        };
        if let Err(e) = docker.start_container::<String>(&sandbox.id, None).await {
            let err = SandboxError::docker(format!("start the container from `{}`", cfg.image), e);
            sandbox.remove().await;
            return Err(err);
        }
        // Before anything runs in it: a sandbox never runs with an unfiltered network.
        if let Err(e) = super::egress::enforce(&sandbox, cfg).await {
            sandbox.remove().await;
            return Err(e);
        }
        Ok(sandbox)
    }

    /// The container id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The container name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The image it runs.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// The process limit of the container.
    pub fn pids_limit(&self) -> i64 {
        self.pids_limit
    }

    /// The engine the container runs on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine's API client, for the sandbox module's own use.
    pub(crate) fn docker(&self) -> &bollard::Docker {
        self.engine.api()
    }

    /// Runs `argv` in the container (see [`exec_capture`]).
    pub async fn exec(
        &self,
        argv: &[&str],
        workdir: Option<&str>,
        timeout: std::time::Duration,
        max_bytes: usize,
    ) -> Result<ExecOutput, SandboxError> {
        exec_capture(&self.engine, &self.id, argv, workdir, timeout, max_bytes).await
    }

    /// Runs the shell command `cmd`, streaming its output, until it ends, `cancel` fires or
    /// `timeout` passes (see [`exec_streaming`]).
    pub async fn exec_streaming(
        &self,
        cmd: &str,
        workdir: Option<&str>,
        timeout: std::time::Duration,
        cancel: &tokio_util::sync::CancellationToken,
        on_output: &mut (dyn FnMut(&[u8]) + Send),
    ) -> Result<StreamedExit, SandboxError> {
        exec_streaming(&self.engine, &self.id, cmd, workdir, timeout, cancel, on_output).await
    }

    /// What could not be guarded in the workspaces (a control file that is a link), for the user.
    pub fn notices(&self) -> Vec<String> {
        self.guards.iter().flat_map(|g| g.notices.iter().cloned()).collect()
    }

    /// What [`Sandbox::remove`] found in the workspaces and left for the user to check.
    pub fn removal_notices(&self) -> Vec<String> {
        self.removal_notices.lock().map(|n| n.clone()).unwrap_or_default()
    }

    /// Settles the bind-mounted host folders after the sandbox wrote them: strips the
    /// setuid and setgid bits of every regular file there (the container runs as root and
    /// keeps CHOWN, FOWNER and FSETID: a file it leaves could be setuid-root on the host),
    /// and hands what root created or took over back to the folder's owner, so that a
    /// user who is not root can edit and delete what the agent wrote. The sandbox keeps
    /// running as root (package installs and the like work); this runs after every tool
    /// call and `!cmd`, and once more when the sandbox is removed.
    pub async fn restore_ownership(&self) {
        for w in &self.workspaces {
            let script = settle_script(w);
            let res = exec_capture(
                &self.engine,
                &self.id,
                &["sh", "-c", &script],
                None,
                std::time::Duration::from_secs(60),
                0,
            )
            .await;
            if let Err(e) = res {
                tracing::warn!("cannot settle the files of {}: {e}", w.inside);
            }
        }
    }

    /// Kills every process in the container except PID 1 (see `INIT_SCRIPT`).
    pub async fn kill_all_processes(&self) -> Result<(), SandboxError> {
        self.docker()
            .kill_container(&self.id, Some(KillContainerOptions { signal: "USR1" }))
            .await
            .map_err(|e| SandboxError::docker("signal the sandbox's init process", e))
    }

    /// Starts the container again if it stopped (its init died); true when it had to.
    /// The file system survives a stop, so the episode can go on.
    pub async fn revive(&self) -> Result<bool, SandboxError> {
        let info = self
            .docker()
            .inspect_container(&self.id, None)
            .await
            .map_err(|e| SandboxError::docker("inspect the sandbox container", e))?;
        if info.state.and_then(|s| s.running).unwrap_or(false) {
            return Ok(false);
        }
        tracing::warn!("the sandbox container {} had stopped; starting it again", self.name);
        self.docker()
            .start_container::<String>(&self.id, None)
            .await
            .map_err(|e| SandboxError::docker("start the stopped sandbox container again", e))?;
        Ok(true)
    }

    /// The container's address on its network (`None` without a network).
    pub async fn ip_address(&self) -> Option<String> {
        let info = self.docker().inspect_container(&self.id, None).await.ok()?;
        let networks = info.network_settings?.networks?;
        networks.values().filter_map(|n| n.ip_address.clone()).find(|ip| !ip.is_empty())
    }

    /// How many processes run in the container now (from the engine's statistics).
    pub async fn process_count(&self) -> Option<u64> {
        use futures_util::StreamExt;
        let opts = bollard::container::StatsOptions { stream: false, one_shot: true };
        let mut stats = self.docker().stats(&self.id, Some(opts));
        match tokio::time::timeout(std::time::Duration::from_secs(5), stats.next()).await {
            Ok(Some(Ok(s))) => s.pids_stats.current,
            _ => None,
        }
    }

    /// Removes the container (forced, with its anonymous volumes). Never fails: a
    /// container that is already gone is fine, other errors are logged. With workspaces,
    /// its processes are killed and the workspaces settled first (see
    /// [`Sandbox::restore_ownership`]), and the placeholders of their control files go
    /// after (see [`Sandbox::removal_notices`]).
    pub async fn remove(&self) {
        if !self.workspaces.is_empty() {
            // Nothing may write a setuid file between the last settling and the removal.
            if self.own_init && self.kill_all_processes().await.is_ok() {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            self.restore_ownership().await;
        }
        remove_container(&self.engine, &self.id).await;
        let left: Vec<String> = self.guards.iter().flat_map(|g| g.cleanup()).collect();
        if let Ok(mut notices) = self.removal_notices.lock() {
            notices.extend(left);
        }
    }
}

async fn remove_container(docker: &Engine, id: &str) {
    let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
    match docker.api().remove_container(id, Some(opts)).await {
        Ok(()) => {}
        Err(e) if is_not_found(&e) => {}
        // Another remover (a sweep, the run's own teardown) got there first.
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, message })
            if message.contains("already in progress") => {}
        Err(e) => tracing::warn!("could not remove container {id}: {e}"),
    }
    unregister(id);
}

fn register(engine: &Engine, id: &str) {
    if let Ok(mut live) = LIVE.lock() {
        live.push((engine.clone(), id.to_string()));
    }
}

fn unregister(id: &str) {
    if let Ok(mut live) = LIVE.lock() {
        live.retain(|(_, x)| x != id);
    }
}

/// Removes every container this process created and has not removed yet (signal,
/// error and panic paths call this before exiting).
pub async fn cleanup_registered() {
    let live: Vec<(Engine, String)> = LIVE.lock().map(|l| l.clone()).unwrap_or_default();
    for (engine, id) in live {
        remove_container(&engine, &id).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_read_write_folders_are_workspaces_and_their_settling_strips_setuid_bits() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("f");
        std::fs::write(&file, "").unwrap();
        let dir = d.path().display();
        let binds = [format!("{dir}:/ro:ro"), format!("{}:/file", file.display()), format!("{dir}:/w")];
        let ws = workspace_binds(&binds);
        assert_eq!(ws.iter().map(|(_, w)| w.inside.as_str()).collect::<Vec<_>>(), ["/w"]);
        let script = settle_script(&WorkspaceBind { inside: "/w".into(), owner: Some((1000, 1000)) });
        assert!(script.contains("-exec chown -h 1000:1000"), "{script}");
        assert!(script.contains("-type f \\( -perm -4000 -o -perm -2000 \\) -exec chmod u-s,g-s"), "{script}");
        assert!(script.find("chown").unwrap() < script.find("chmod").unwrap(), "the bits go after the chown");
        assert!(!settle_script(&WorkspaceBind { inside: "/w".into(), owner: None }).contains("chown"));
    }

    #[test]
    fn added_caps_leave_the_drop_list_and_dropped_ones_join_it() {
        let mut cfg = ContainerConfig::new("img", "run", "ep");
        assert_eq!(cfg.dropped_caps(), DROPPED_CAPS.map(String::from).to_vec());
        cfg.cap_add = vec!["cap_net_raw".into(), "NET_ADMIN".into()];
        cfg.cap_drop = vec!["CHOWN".into(), "MKNOD".into()];
        let dropped = cfg.dropped_caps();
        assert!(!dropped.contains(&"NET_RAW".to_string()), "{dropped:?}");
        assert!(dropped.contains(&"CHOWN".to_string()) && dropped.contains(&"SETPCAP".to_string()));
        assert_eq!(dropped.iter().filter(|c| *c == "MKNOD").count(), 1);
        cfg.cap_add = vec!["ALL".into()];
        cfg.cap_drop.clear();
        assert!(cfg.dropped_caps().is_empty());
    }
}
