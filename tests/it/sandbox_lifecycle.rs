//! Container creation, limits, removal and the clean-up of crashed runs.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_are_labelled_limited_and_removed() {
    let sb = support::sandbox_with(333, false).await;
    let docker = support::docker().await;
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
