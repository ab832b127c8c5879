//! Container creation, limits, removal and the clean-up of crashed runs.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_are_labelled_limited_and_removed() {
    let sb = support::sandbox_with(333, false).await;
    let docker = support::inspector();
    let info = docker.inspect_container(sb.id(), None).await.unwrap();
    let labels = info.config.as_ref().and_then(|c| c.labels.clone()).unwrap();
    assert!(labels.get("agent.run").unwrap().starts_with("it-"));
    assert_eq!(labels.get("agent.episode").map(String::as_str), Some("it"));
    assert!(labels.contains_key("agent.owner"));
    let host = info.host_config.unwrap();
    assert_eq!(host.pids_limit, Some(333));
    assert_eq!(host.memory, Some(4 << 30));
    assert_eq!(host.nano_cpus, Some(2_000_000_000));
    assert!(host.security_opt.unwrap().iter().any(|s| s.starts_with("no-new-privileges")));
    assert!(host.cap_drop.unwrap().contains(&"NET_RAW".to_string()));
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    sb.remove().await;
    assert!(docker.inspect_container(sb.id(), None).await.is_err(), "container still exists");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_removes_containers_of_killed_runs() {
    support::docker().await;
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(&dir, "s.yaml", "- \"<bash>\\ncmd: sleep 300\\n</bash>\"\n");
    let mut child = Command::new(support::agent_bin())
        .args(["run", "--json", "--no-network", "--model"])
        .arg(format!("scripted:{}", script.display()))
        .arg("wait")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut container = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        let ev: serde_json::Value = serde_json::from_str(&line).unwrap();
        if ev["event"] == "session_configured" {
            container = ev["container"].as_str().map(String::from);
        }
        if ev["event"] == "tool_call_begin" {
            break;
        }
    }
    let container = container.expect("no session_configured event");
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    assert_eq!(
        support::containers_named(&container),
        vec![container.clone()],
        "the killed run's container should still be there"
    );
    let out = Command::new(support::agent_bin()).args(["sandbox", "prune"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&container));
    assert!(support::containers_named(&container).is_empty(), "prune left {container}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base_image_has_the_promised_tools() {
    let sb = support::sandbox_with(256, false).await;
    let script = "for b in bash python3 tmux ps git curl timeout; do command -v $b >/dev/null || echo missing $b; done; python3 -m pytest --version";
    let out = sb.exec(&["bash", "-c", script], None, std::time::Duration::from_secs(60), 1 << 16).await.unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.exit_code, Some(0), "{text}");
    assert!(!text.contains("missing"), "{text}");
    assert!(text.contains("pytest"), "{text}");
}

#[test]
fn sandbox_base_is_idempotent() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let out = Command::new(support::agent_bin()).args(["sandbox", "base"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to do"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A task's service container gets the agent container's hardening, limits and labels,
/// runs its image's own command, and is reachable by its alias on the episode network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_containers_are_hardened_like_the_agents_and_reachable_by_alias() {
    use agent_sandbox::{ContainerConfig, ContainerProcess, Network, Sandbox, BASE_IMAGE};
    let engine = support::docker().await;
    let run_id = format!("it-svc-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    let net = Network::create(&engine, &format!("agent-it-{run_id}"), &run_id, "svc", false).await.unwrap();
    let mut cfg = ContainerConfig::new(BASE_IMAGE, run_id.clone(), "svc");
    cfg.name_prefix = "agent-it-db".into();
    cfg.pids_limit = 77;
    cfg.process = ContainerProcess::Image(Some(vec!["sleep".into(), "300".into()]));
    cfg.join = Some((net.name().to_string(), vec!["db".into()]));
    let service = support::TestSandbox(Sandbox::start(&engine, &cfg).await.unwrap());
    let mut client_cfg = ContainerConfig::new(BASE_IMAGE, run_id.clone(), "svc");
    client_cfg.name_prefix = "agent-it-client".into();
    let client = support::TestSandbox(Sandbox::start(&engine, &client_cfg).await.unwrap());
    net.connect(&client, "client").await.unwrap();

    let info = support::inspector().inspect_container(service.id(), None).await.unwrap();
    let labels = info.config.as_ref().and_then(|c| c.labels.clone()).unwrap();
    assert_eq!(labels.get("agent.run"), Some(&run_id));
    assert!(labels.contains_key("agent.owner"));
    assert_eq!(info.config.as_ref().and_then(|c| c.cmd.clone()), Some(vec!["sleep".to_string(), "300".into()]));
    let host = info.host_config.unwrap();
    assert_eq!(host.pids_limit, Some(77));
    assert_eq!(host.memory, Some(4 << 30));
    assert_eq!(host.memory_swap, Some(4 << 30));
    assert_eq!(host.nano_cpus, Some(2_000_000_000));
    assert!(host.security_opt.unwrap().iter().any(|s| s.starts_with("no-new-privileges")));
    let dropped = host.cap_drop.unwrap();
    for cap in ["NET_RAW", "MKNOD", "SETFCAP", "AUDIT_WRITE", "SYS_CHROOT", "SETPCAP"] {
        assert!(dropped.contains(&cap.to_string()), "{cap} not dropped: {dropped:?}");
    }
    assert_eq!(host.network_mode.as_deref(), Some(net.name()));

    let out = client.exec(&["getent", "hosts", "db"], None, std::time::Duration::from_secs(20), 4096).await.unwrap();
    assert_eq!(
        out.exit_code,
        Some(0),
        "the service's alias does not resolve: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let removed = agent_sandbox::remove_run_settled(&engine, &run_id).await;
    assert_eq!((removed.containers, removed.networks, removed.volumes), (2, 1, 0));
    assert!(support::containers_named(service.name()).is_empty());
    assert_eq!(support::networks_of_run(&run_id), Vec::<String>::new());
}
