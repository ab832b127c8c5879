//! The egress corpus (issue 48): from inside the sandbox, the cloud metadata address,
//! the host's own services (on the bridge gateway and its other addresses) and the
//! firewall itself are out of reach; an allowlist lets through exactly what it names;
//! a cloned repository cannot widen either. The real binary, a real engine, a scripted
//! model; every probe goes to an address of this machine (the metadata address is
//! refused inside the sandbox's namespace, so nothing leaves), and each case ends in a
//! listener that received nothing or a rule whose counter moved.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::support;

/// ECONNREFUSED: what the firewall's TCP reset gives a `connect`.
const REFUSED: &str = "111";

/// A TCP listener on the host that counts the connections it accepts.
struct Listener {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Listener {
    fn on(ip: &str) -> Listener {
        let socket = TcpListener::bind((ip, 0)).unwrap_or_else(|e| panic!("bind {ip}: {e}"));
        let port = socket.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let seen = hits.clone();
        std::thread::spawn(move || {
            for conn in socket.incoming() {
                if conn.is_ok() {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        Listener { port, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// The default bridge's gateway: an address of this host that every container on the
/// bridge routes through (the engine's IPAM says, or else the `docker0` interface).
fn gateway() -> String {
    let out = Command::new("docker")
        .args(["network", "inspect", "bridge", "--format", "{{range .IPAM.Config}}{{.Gateway}}{{end}}"])
        .output()
        .unwrap();
    let gw = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !gw.is_empty() {
        return gw;
    }
    let out = Command::new("ip").args(["-o", "-4", "addr", "show", "dev", "docker0"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let addr = text.split_whitespace().skip_while(|w| *w != "inet").nth(1).expect("docker0 has no IPv4 address");
    addr.split('/').next().unwrap().to_string()
}

/// The host's other IPv4 addresses (not loopback, not the gateway).
fn other_host_addrs(gw: &str) -> Vec<String> {
    let out = Command::new("ip").args(["-o", "-4", "addr", "show"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().skip_while(|w| *w != "inet").nth(1))
        .filter_map(|a| a.split('/').next().map(str::to_string))
        .filter(|a| !a.starts_with("127.") && a != gw)
        .collect()
}

/// A shell command that connects to each `HOST:PORT` with a 5 s timeout and prints
/// `HOST:PORT=ERRNO` (0: connected; 111: refused). Written without `: ` so that it
/// stays one plain YAML value.
fn probe(targets: &[String]) -> String {
    let py = "import socket,sys;f=lambda t:(lambda s:(s.settimeout(5),s.connect_ex((t.rsplit(\":\",1)[0],int(t.rsplit(\":\",1)[1]))))[1])(socket.socket());print(\" \".join(t+\"=\"+str(f(t)) for t in sys.argv[1:]))";
    format!("python3 -c '{py}' {}", targets.join(" "))
}

/// One scripted reply running `cmd` in the sandbox.
fn bash(cmd: &str, delay_ms: u64) -> String {
    let body = format!("<bash>\\ncmd: {}\\n</bash>", cmd.replace('\\', "\\\\").replace('"', "\\\""));
    format!("- reply: \"{body}\"\n  delay_ms: {delay_ms}\n")
}

const FINISH: &str = "- \"<finish>\\nmessage: probed\\n</finish>\"\n";

/// A user config folder, a project folder and the run's output.
struct Run {
    dir: tempfile::TempDir,
    work: PathBuf,
}

impl Run {
    fn new(user_sandbox: &str, replies: &str) -> Run {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(support::docker());
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let script = support::script(&dir, "s.yaml", &format!("{replies}{FINISH}"));
        std::fs::create_dir_all(dir.path().join("config/agent")).unwrap();
        std::fs::write(
            dir.path().join("config/agent/config.toml"),
            format!("model = \"scripted:{}\"\n[sandbox]\n{user_sandbox}\n", script.display()),
        )
        .unwrap();
        Run { dir, work }
    }

    /// Runs the episode; `during` sees each finished tool call's output and the
    /// container's name while the container still lives. Returns the outputs in order
    /// and every event, after checking the exit code.
    fn go(&self, code: i32, mut during: impl FnMut(&str, &str)) -> (Vec<String>, String) {
        let mut child = Command::new(support::agent_bin())
            .current_dir(&self.work)
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env("XDG_DATA_HOME", self.dir.path().join("data"))
            .args(["run", "--json", "probe the network"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut container = String::new();
        let mut outputs = Vec::new();
        let mut all = Vec::new();
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let Ok(ev) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            all.push(ev.to_string());
            match ev["event"].as_str() {
                Some("session_configured") => container = ev["container"].as_str().unwrap_or_default().to_string(),
                Some("tool_call_end") => {
                    let out = ev["observation"].as_str().unwrap_or_default().to_string();
                    during(&out, &container);
                    outputs.push(out);
                }
                _ => {}
            }
        }
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "the run failed: {}", all.join("\n"));
        (outputs, all.join("\n"))
    }
}

/// The sandbox's OUTPUT rules with their counters, read by a helper that joins its
/// network namespace with `NET_ADMIN` (the sandbox itself cannot read them).
fn counters(container: &str) -> String {
    let out = Command::new("docker")
        .args(["run", "--rm", "--network", &format!("container:{container}"), "--cap-drop", "ALL"])
        .args(["--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW", agent_sandbox::BASE_IMAGE, "sh", "-c"])
        .arg("iptables -w -nvxL OUTPUT 2>/dev/null; iptables-legacy -w -nvxL OUTPUT 2>/dev/null; true")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The packet count of the first rule whose line names `dest`.
fn packets_to(rules: &str, dest: &str) -> u64 {
    rules
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == dest))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no rule for {dest} in:\n{rules}"))
}

fn result_of<'a>(output: &'a str, target: &str) -> &'a str {
    let key = format!("{target}=");
    output
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key.as_str()))
        .unwrap_or_else(|| panic!("no result for {target} in {output:?}"))
}

/// `curl 169.254.169.254`, a service on the host's bridge gateway, a service on the
/// host's other addresses, and a firewall flush from inside: all refused at once; the
/// metadata rule's counter shows the refusal happened in the sandbox's namespace (so no
/// packet left), and the host's listeners received nothing.
#[test]
fn the_default_network_refuses_cloud_metadata_the_host_gateway_and_host_addresses_and_cannot_be_flushed() {
    let gw = gateway();
    let on_gateway = Listener::on(&gw);
    let anywhere = Listener::on("0.0.0.0");
    let mut targets = vec![format!("{gw}:{}", on_gateway.port), "169.254.169.254:80".to_string()];
    targets.extend(other_host_addrs(&gw).into_iter().map(|a| format!("{a}:{}", anywhere.port)));
    let flush = format!(
        "iptables -F OUTPUT; iptables-legacy -F OUTPUT; ip6tables -F OUTPUT; echo flushed=$?; {}",
        probe(&targets[..1])
    );
    // The second reply comes late: the test reads the counters while the container lives.
    let run = Run::new("network = true", &format!("{}{}", bash(&probe(&targets), 0), bash(&flush, 5000)));
    let mut metadata_packets = 0;
    let (outputs, _) = run.go(0, |out, container| {
        if out.contains("169.254.169.254:80=") && metadata_packets == 0 {
            metadata_packets = packets_to(&counters(container), "169.254.0.0/16");
        }
    });
    assert_eq!(outputs.len(), 3, "two probes and the finish: {outputs:?}");
    for t in &targets {
        assert_eq!(result_of(&outputs[0], t), REFUSED, "{t} was not refused: {}", outputs[0]);
    }
    assert!(metadata_packets > 0, "the metadata rule never matched");
    assert_eq!(result_of(&outputs[1], &targets[0]), REFUSED, "after the flush attempt: {}", outputs[1]);
    assert_eq!(on_gateway.hits(), 0, "the service on the gateway was reached");
    assert_eq!(anywhere.hits(), 0, "a service on another host address was reached");
}

/// `network = "allowlist"` with exactly `GATEWAY:PORT_A`: a listener on PORT_A gets the
/// connection, one on PORT_B on the same address gets nothing; a cloned repository's
/// `.agent/config.toml` that turns the network back on and adds PORT_B is not applied
/// (the folder is not trusted), so PORT_B stays unreachable.
#[test]
fn an_allowlist_reaches_exactly_the_listed_host_port_and_an_untrusted_project_cannot_widen_it() {
    let gw = gateway();
    let (a, b) = (Listener::on(&gw), Listener::on(&gw));
    let (ta, tb) = (format!("{gw}:{}", a.port), format!("{gw}:{}", b.port));
    let run = Run::new(
        &format!("network = \"allowlist\"\nallow_hosts = [\"{ta}\"]"),
        &bash(&probe(&[ta.clone(), tb.clone(), "169.254.169.254:80".into()]), 0),
    );
    std::fs::create_dir_all(run.work.join(".agent")).unwrap();
    std::fs::write(
        run.work.join(".agent/config.toml"),
        format!("[sandbox]\nnetwork = true\nallow_hosts = [\"{ta}\", \"{tb}\"]\n"),
    )
    .unwrap();
    // Exit 3: finished without the project's settings.
    let (outputs, events) = run.go(3, |_, _| {});
    assert!(events.contains("sandbox network: on (yours: allowlist)"), "{events}");
    assert_eq!(result_of(&outputs[0], &ta), "0", "the allowed port was not reached: {}", outputs[0]);
    assert_eq!(result_of(&outputs[0], &tb), REFUSED, "{}", outputs[0]);
    assert_eq!(result_of(&outputs[0], "169.254.169.254:80"), REFUSED, "{}", outputs[0]);
    assert_eq!(a.hits(), 1, "the allowed listener");
    assert_eq!(b.hits(), 0, "the listener on the port not listed was reached");
}
