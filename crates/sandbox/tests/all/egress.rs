//! The egress firewall against a real engine: a task's services still talk to each
//! other on their network (the agent's container joins it after it started, as a
//! bench trial does), while the network's gateway (the host) and the metadata address
//! stay refused; an allow entry that is not a host stops the start.

use std::time::Duration;

use agent_sandbox::{ContainerConfig, Network, Sandbox, SandboxError, BASE_IMAGE};

use crate::support;

/// Removes what a test started, even when it fails.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in support::containers_of_run(&self.0) {
            let _ = std::process::Command::new("docker").args(["rm", "-f", &c]).output();
        }
        for n in support::networks_of_run(&self.0) {
            let _ = std::process::Command::new("docker").args(["network", "rm", &n]).output();
        }
    }
}

/// `HOST:PORT=ERRNO` for each target (0: connected; 111: refused), from inside.
async fn probe(sb: &Sandbox, targets: &[String]) -> String {
    let py = "import socket,sys\nfor t in sys.argv[1:]:\n    s=socket.socket(); s.settimeout(5)\n    \
              h,p=t.rsplit(':',1); print(t+'='+str(s.connect_ex((h,int(p)))))\n";
    let mut argv = vec!["python3", "-c", py];
    argv.extend(targets.iter().map(String::as_str));
    let out = sb.exec(&argv, None, Duration::from_secs(60), 1 << 16).await.expect("exec the probe");
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn config(run: &str) -> ContainerConfig {
    let mut cfg = ContainerConfig::new(BASE_IMAGE, run, "egress");
    cfg.name_prefix = "agent-it-egress".into();
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_on_the_task_network_stays_reachable_while_its_gateway_and_metadata_are_refused() {
    let engine = support::docker().await;
    let run = format!("it-egress-{}", uuid::Uuid::new_v4().simple());
    let _cleanup = Cleanup(run.clone());
    let net_name = format!("agent-it-egress-{}", &run[10..22]);
    let net = Network::create(&engine, &net_name, &run, "egress", false).await.expect("create the network");
    let mut svc_cfg = config(&run);
    svc_cfg.join = Some((net_name.clone(), vec!["svc".into()]));
    let svc = Sandbox::start(&engine, &svc_cfg).await.expect("start the service");
    let serve = ["sh", "-c", "nohup python3 -m http.server 8000 >/dev/null 2>&1 &"];
    svc.exec(&serve, None, Duration::from_secs(10), 1024).await.expect("start the server");
    let client = Sandbox::start(&engine, &config(&run)).await.expect("start the client");
    net.connect(&client, "client").await.expect("connect the client");
    let gw = engine_gateway(&net_name);
    // A service of the host on the gateway: without the firewall the probe would reach it.
    let host_service = std::net::TcpListener::bind((gw.as_str(), 0)).expect("bind the gateway address");
    let port = host_service.local_addr().unwrap().port();
    host_service.set_nonblocking(true).unwrap();
    // The server needs a moment to listen; a refusal from it would read like the firewall.
    let mut out = String::new();
    for _ in 0..50 {
        out = probe(&client, &["svc:8000".into()]).await;
        if out.trim() == "svc:8000=0" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(out.trim(), "svc:8000=0", "the service on the task network was not reached");
    let out = probe(&client, &[format!("{gw}:{port}"), "169.254.169.254:80".into()]).await;
    assert!(out.contains(&format!("{gw}:{port}=111")), "the task network's gateway (the host): {out}");
    assert!(out.contains("169.254.169.254:80=111"), "{out}");
    assert!(host_service.accept().is_err(), "the host's service on the gateway got a connection");
    client.remove().await;
    svc.remove().await;
    net.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_entry_that_is_not_a_host_stops_the_start_and_leaves_no_container() {
    let engine = support::docker().await;
    let run = format!("it-egress-{}", uuid::Uuid::new_v4().simple());
    let _cleanup = Cleanup(run.clone());
    let mut cfg = config(&run);
    cfg.egress.only_allowed = true;
    cfg.egress.allow = vec!["https://pypi.org/simple".into()];
    let err = Sandbox::start(&engine, &cfg).await.expect_err("the start should fail");
    assert!(matches!(err, SandboxError::Egress(_)), "{err}");
    assert!(err.to_string().contains("allow_hosts") && err.to_string().contains("https://pypi.org"), "{err}");
    assert!(support::containers_of_run(&run).is_empty(), "left: {:?}", support::containers_of_run(&run));
}

/// The network's gateway as the engine reports it.
fn engine_gateway(net: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["network", "inspect", net, "--format", "{{range .IPAM.Config}}{{.Gateway}}{{end}}"])
        .output()
        .expect("docker network inspect");
    let gw = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!gw.is_empty(), "the network {net} has no gateway");
    gw
}
