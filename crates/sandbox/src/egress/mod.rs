//! The egress policy of every container with a network: the host, its LANs and
//! link-local addresses (cloud metadata) are out of reach; `allowlist` narrows the rest
//! to named hosts.
//!
//! The rules live in the container's own network namespace, written by a short-lived
//! helper container that joins that namespace with `NET_ADMIN` before the sandbox runs
//! anything; the sandbox itself never has `NET_ADMIN`, so it cannot undo them. The
//! helper is the base image (it has `iptables`), so no registry is needed. When the
//! rules cannot be written the container is removed and the start fails: a sandbox
//! never runs unfiltered.

mod rules;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use bollard::container::{Config, CreateContainerOptions, LogsOptions, RemoveContainerOptions, WaitContainerOptions};
use bollard::models::HostConfig;
use futures_util::StreamExt;

pub use rules::{parse_allow, AllowEntry, Cidr, TAG};
use rules::{parse_host, parse_resolvers, Allowed, HostNet, Inputs, SECTION};

use super::container::{ContainerConfig, Sandbox};
use super::docker::Engine;
use super::error::{describe_bollard, SandboxError};
use super::image::{image_exists, BASE_IMAGE};
use super::prune::resource_labels;

/// What a container with a network may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Egress {
    /// Only `allow` (with DNS, loopback and the container's own networks) when true;
    /// the public internet too when false.
    pub only_allowed: bool,
    /// Reachable even where the policy refuses: `host`, `host:port`, an address,
    /// `[v6]:port` or a block (`10.1.0.0/16`). Names are resolved on this computer when
    /// the container starts.
    pub allow: Vec<String>,
}

/// The policy of each filtered container, for the networks it joins later.
static POLICIES: Mutex<Vec<(String, Egress, String, String)>> = Mutex::new(Vec::new());

/// What each engine's host reported (its addresses barely change during a run).
static HOSTS: Mutex<Option<HashMap<String, HostNet>>> = Mutex::new(None);

/// The image the helpers run.
pub const HELPER_IMAGE: &str = BASE_IMAGE;

/// Writes the container's firewall; on failure the caller removes the container.
/// Containers without a network need none.
pub(crate) async fn enforce(sandbox: &Sandbox, cfg: &ContainerConfig) -> Result<(), SandboxError> {
    if !cfg.network {
        return Ok(());
    }
    // Every allow entry is checked before anything runs, so a typo fails the start.
    for entry in &cfg.egress.allow {
        parse_allow(entry).map_err(|why| egress_err(format!("`{entry}` in sandbox.allow_hosts: {why}")))?;
    }
    apply(sandbox, &cfg.egress, &cfg.run_id, &cfg.episode_id).await?;
    if let Ok(mut p) = POLICIES.lock() {
        // Bounded: a long run forgets the oldest (long gone, or tightened on reapply).
        if p.len() >= 4096 {
            p.remove(0);
        }
        p.push((sandbox.id().to_string(), cfg.egress.clone(), cfg.run_id.clone(), cfg.episode_id.clone()));
    }
    Ok(())
}

/// Rewrites the firewall after the container joined another network (whose subnet
/// its services live on), with the policy it started with.
pub(crate) async fn reapply(sandbox: &Sandbox) -> Result<(), SandboxError> {
    let known = POLICIES.lock().ok().and_then(|p| p.iter().find(|(id, ..)| id == sandbox.id()).cloned());
    let (egress, run, episode) = match known {
        Some((_, e, r, ep)) => (e, r, ep),
        // Forgotten (or never filtered): the tightest policy rather than a wider one.
        None => (Egress { only_allowed: true, allow: Vec::new() }, String::new(), String::new()),
    };
    apply(sandbox, &egress, &run, &episode).await
}

async fn apply(sandbox: &Sandbox, egress: &Egress, run: &str, episode: &str) -> Result<(), SandboxError> {
    let engine = sandbox.engine();
    if !image_exists(engine, HELPER_IMAGE).await? {
        return Err(egress_err(format!(
            "the helper image `{HELPER_IMAGE}` is missing on the engine `{}`; build it with `agent sandbox base`",
            engine.name()
        )));
    }
    let host = host_net(engine, run, episode).await?;
    let mut inputs = container_inputs(sandbox).await?;
    inputs.only_allowed = egress.only_allowed;
    inputs.allowed = resolve_allowed(&egress.allow).await?;
    inputs.lans = host.lans.clone();
    for a in &host.addrs {
        if !inputs.host.contains(a) {
            inputs.host.push(*a);
        }
    }
    // Docker's embedded DNS (127.0.0.11) forwards from this namespace to the host's
    // upstreams; when the host named none that a rule can hold, DNS goes anywhere.
    if inputs.resolvers.iter().any(|r| r.is_loopback()) {
        inputs.resolvers.extend(host.resolvers.iter().copied());
        inputs.dns_anywhere = host.resolvers.is_empty();
    }
    inputs.resolvers.retain(|r| !r.is_loopback());
    let env = vec![format!("RULES4={}", rules::rules_v4(&inputs)), format!("RULES6={}", rules::rules_v6(&inputs))];
    let out =
        run_helper(engine, &format!("container:{}", sandbox.id()), &["NET_ADMIN", "NET_RAW"], env, APPLY, run, episode)
            .await?;
    match out {
        (0, _) => Ok(()),
        (3, text) => Err(egress_err(format!(
            "the helper image `{HELPER_IMAGE}` has no iptables ({}); rebuild it with `agent sandbox base --force`",
            text.trim()
        ))),
        (code, text) => Err(egress_err(format!(
            "the firewall could not be written into {} (exit {code}: {}); the engine's kernel needs netfilter \
             (nf_tables or ip_tables) inside containers",
            sandbox.name(),
            last_line(&text)
        ))),
    }
}

/// Writes the rules, IPv6 too unless IPv6 is off in the namespace (the sandbox cannot
/// turn it on: `/proc/sys` is read-only there). Exit 3: no iptables in the image.
const APPLY: &str = r#"set -u
command -v iptables-restore >/dev/null 2>&1 && command -v ip6tables-restore >/dev/null 2>&1 || { echo "iptables-restore not found"; exit 3; }
load() { printf '%s' "$2" | "$1-restore" 2>&1 || printf '%s' "$2" | "$1-legacy-restore" 2>&1; }
load iptables "$RULES4" || exit 4
if ! load ip6tables "$RULES6"; then
  [ "$(cat /proc/sys/net/ipv6/conf/all/disable_ipv6 2>/dev/null)" = 1 ] || exit 5
fi
exit 0
"#;

/// Reports the host's addresses, routes and resolvers (see [`rules::parse_host`]).
const REPORT: &str = r#"for f in /proc/net/fib_trie /proc/net/route /proc/net/if_inet6 /proc/net/ipv6_route /etc/resolv.conf; do
  cat "$f" 2>/dev/null; echo "--agent-egress-section--"
done"#;

/// The engine host's network as its own namespace shows it, asked once per engine.
async fn host_net(engine: &Engine, run: &str, episode: &str) -> Result<HostNet, SandboxError> {
    let key = engine.name().to_string();
    if let Some(net) = HOSTS.lock().ok().and_then(|h| h.as_ref().and_then(|m| m.get(&key).cloned())) {
        return Ok(net);
    }
    let (code, text) = run_helper(engine, "host", &[], Vec::new(), REPORT, run, episode).await?;
    if code != 0 || !text.contains(SECTION) {
        return Err(egress_err(format!(
            "could not read the engine host's addresses (exit {code}: {})",
            last_line(&text)
        )));
    }
    let net = parse_host(&text);
    if let Ok(mut h) = HOSTS.lock() {
        h.get_or_insert_with(HashMap::new).insert(key, net.clone());
    }
    Ok(net)
}

/// The container's networks, their gateways and its resolvers, from the engine.
async fn container_inputs(sandbox: &Sandbox) -> Result<Inputs, SandboxError> {
    let api = sandbox.engine().api();
    let info = api
        .inspect_container(sandbox.id(), None)
        .await
        .map_err(|e| SandboxError::docker(format!("inspect {}", sandbox.name()), e))?;
    let mut inputs = Inputs::default();
    let networks = info.network_settings.and_then(|s| s.networks).unwrap_or_default();
    let add_host = |inputs: &mut Inputs, a: Option<IpAddr>| {
        if let Some(a) = a.filter(|a| !inputs.host.contains(a)) {
            inputs.host.push(a);
        }
    };
    let parse = |s: &Option<String>| s.as_deref().and_then(|s| s.parse::<IpAddr>().ok());
    for (name, ep) in networks {
        add_host(&mut inputs, parse(&ep.gateway));
        add_host(&mut inputs, parse(&ep.ipv6_gateway));
        let mut subnets: Vec<Cidr> = Vec::new();
        let net_id = ep.network_id.clone().unwrap_or(name.clone());
        if let Ok(net) = api.inspect_network::<String>(&net_id, None).await {
            for c in net.ipam.and_then(|i| i.config).unwrap_or_default() {
                add_host(&mut inputs, parse(&c.gateway));
                if let Some(sub) = c.subnet.as_deref().and_then(Cidr::parse) {
                    subnets.push(sub);
                }
            }
        }
        let own = |addr: &Option<String>, len: Option<i64>| {
            Cidr::new(parse(addr)?, u8::try_from(len.unwrap_or_default()).ok()?).filter(|_| len.unwrap_or(0) > 0)
        };
        subnets.extend(own(&ep.ip_address, ep.ip_prefix_len));
        subnets.extend(own(&ep.global_ipv6_address, ep.global_ipv6_prefix_len));
        for sub in subnets {
            // Docker puts a network's gateway, an address of the host, first; an
            // internal network reports none but the bridge still holds it.
            add_host(&mut inputs, sub.first_host());
            if !inputs.own.contains(&sub) {
                inputs.own.push(sub);
            }
        }
    }
    // Read through the engine's archive API: no process of the sandbox is involved.
    let resolv = sandbox.read_file("/etc/resolv.conf").await.map(|f| f.bytes).unwrap_or_default();
    inputs.resolvers = parse_resolvers(&String::from_utf8_lossy(&resolv));
    Ok(inputs)
}

/// Resolves the allowed names on this computer (the sandbox's DNS cannot widen them).
async fn resolve_allowed(allow: &[String]) -> Result<Vec<Allowed>, SandboxError> {
    let mut out = Vec::new();
    for entry in allow {
        match parse_allow(entry).map_err(|why| egress_err(format!("`{entry}` in sandbox.allow_hosts: {why}")))? {
            AllowEntry::Block { cidr, port } => out.push(Allowed { dest: cidr, port }),
            AllowEntry::Name { host, port } => {
                let addrs = tokio::net::lookup_host((host.as_str(), port.unwrap_or(443))).await.map_err(|e| {
                    egress_err(format!(
                        "`{entry}` in sandbox.allow_hosts does not resolve on this computer ({e}); \
                         fix the name or remove it"
                    ))
                })?;
                for a in addrs {
                    let allowed = Allowed { dest: Cidr::host(a.ip()), port };
                    if !out.contains(&allowed) {
                        out.push(allowed);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Runs `script` in a throw-away container of the helper image on `network_mode` with
/// only `caps`; returns its exit code and output.
async fn run_helper(
    engine: &Engine,
    network_mode: &str,
    caps: &[&str],
    env: Vec<String>,
    script: &str,
    run: &str,
    episode: &str,
) -> Result<(i64, String), SandboxError> {
    let api = engine.api();
    let name = format!("agent-egress-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let host_config = HostConfig {
        network_mode: Some(network_mode.to_string()),
        cap_drop: Some(vec!["ALL".into()]),
        cap_add: (!caps.is_empty()).then(|| caps.iter().map(|c| c.to_string()).collect()),
        security_opt: Some(vec!["no-new-privileges:true".into()]),
        privileged: Some(false),
        memory: Some(64 << 20),
        pids_limit: Some(32),
        ..Default::default()
    };
    let config = Config {
        image: Some(HELPER_IMAGE.to_string()),
        entrypoint: Some(vec!["/bin/sh".into(), "-c".into()]),
        cmd: Some(vec![script.to_string()]),
        env: Some(env),
        labels: Some(resource_labels(run, episode)),
        host_config: Some(host_config),
        ..Default::default()
    };
    let created = api
        .create_container(Some(CreateContainerOptions { name: name.clone(), platform: None }), config)
        .await
        .map_err(|e| SandboxError::docker("create the egress helper container", e))?;
    let result = async {
        api.start_container::<String>(&created.id, None)
            .await
            .map_err(|e| SandboxError::docker("start the egress helper container", e))?;
        let mut wait = api.wait_container(&created.id, None::<WaitContainerOptions<String>>);
        let code = match wait.next().await {
            Some(Ok(r)) => r.status_code,
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
            Some(Err(e)) => return Err(SandboxError::docker("wait for the egress helper container", e)),
            None => -1,
        };
        let mut text = String::new();
        let opts = LogsOptions::<String> { stdout: true, stderr: true, ..Default::default() };
        let mut logs = api.logs(&created.id, Some(opts));
        while let Some(Ok(chunk)) = logs.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
        }
        Ok((code, text))
    }
    .await;
    let opts = RemoveContainerOptions { force: true, ..Default::default() };
    if let Err(e) = api.remove_container(&created.id, Some(opts)).await {
        tracing::warn!("could not remove the egress helper {name}: {}", describe_bollard(&e));
    }
    result
}

fn last_line(text: &str) -> String {
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output").trim().to_string()
}

fn egress_err(reason: String) -> SandboxError {
    SandboxError::Egress(reason)
}
