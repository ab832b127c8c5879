//! A second Docker engine for the engine-pool tests: Debian's `docker.io` in a container
//! with nearly every capability, built from the base image, its API on mutual TLS (certificates made here by
//! `openssl`) published to a loopback port, and `docker` CLI access to it for checks.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The image of the second engine (built once, kept).
const IMAGE: &str = "agent-test-dind:bookworm";

/// A running second engine; removed with its storage when dropped.
pub struct Dind {
    pub name: String,
    pub port: u16,
    certs: tempfile::TempDir,
}

fn sh(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{cmd:?} failed: {text}");
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// Builds the engine image when missing: the base image plus Debian's Docker engine.
fn ensure_image() {
    static BUILT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if *built {
        return;
    }
    let present = Command::new("docker").args(["image", "inspect", IMAGE]).output().unwrap().status.success();
    if !present {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("Dockerfile"),
            "FROM agent-base:bookworm\nRUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
             --no-install-recommends docker.io iptables ca-certificates && rm -rf /var/lib/apt/lists/*\n",
        )
        .unwrap();
        sh(Command::new("docker").args(["build", "-q", "-t", IMAGE]).arg(dir.path()));
    }
    *built = true;
}

/// Certificates of a private CA: the engine's (for 127.0.0.1) and this client's.
fn make_certs(dir: &Path) {
    let run = |args: &str| sh(Command::new("sh").arg("-c").arg(format!("set -e; cd '{}'; {args}", dir.display())));
    run("openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 2 -subj /CN=agent-test-ca 2>/dev/null");
    run("openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj /CN=localhost 2>/dev/null");
    run("printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth\\n' > server.ext");
    run("openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server.pem -days 2 -extfile server.ext 2>/dev/null");
    run("openssl req -newkey rsa:2048 -nodes -keyout key.pem -out client.csr -subj /CN=agent-test-client 2>/dev/null");
    run("printf 'extendedKeyUsage=clientAuth\\n' > client.ext");
    run("openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out cert.pem -days 2 -extfile client.ext 2>/dev/null");
    run("chmod 644 *.pem");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Dind {
    /// Starts a second engine and waits until it answers over TLS.
    pub fn start(tag: &str) -> Dind {
        ensure_image();
        let certs = tempfile::tempdir().unwrap();
        make_certs(certs.path());
        let name = format!("agent-test-dind-{tag}-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
        let port = free_port();
        // Not `--privileged`: this host's engine lacks CAP_SYS_RESOURCE, which that asks
        // for. Every other capability, no seccomp/AppArmor filter, the cgroup hierarchies
        // made writable (the inner engine makes its containers' cgroups there), and vfs
        // storage (the outer engine's fuse-overlayfs cannot carry overlay mounts).
        // A restart after a kill finds the killed daemons' pid files.
        let dockerd = "for d in /sys/fs/cgroup/*/; do mount -o remount,bind,rw \"$d\" 2>/dev/null || true; done; \
             rm -f /var/run/docker.pid /var/run/docker/containerd/containerd.pid; \
             exec dockerd --host=tcp://0.0.0.0:2376 --host=unix:///var/run/docker.sock --tlsverify \
             --tlscacert=/certs/ca.pem --tlscert=/certs/server.pem --tlskey=/certs/server-key.pem --storage-driver=vfs";
        sh(Command::new("docker")
            .args(["run", "-d", "--name", &name, "--label", "agent-test-dind=1"])
            .args(["--cap-add=ALL", "--cap-drop=SYS_RESOURCE", "--security-opt", "seccomp=unconfined"])
            .args(["--security-opt", "apparmor=unconfined", "--security-opt", "systempaths=unconfined"])
            .args(["-p", &format!("127.0.0.1:{port}:2376")])
            .arg("-v")
            .arg(format!("{}:/certs:ro", certs.path().display()))
            .args(["-v", "/var/lib/docker", IMAGE, "sh", "-c", dockerd]));
        let dind = Dind { name, port, certs };
        dind.wait_up();
        dind
    }

    fn cert(&self, file: &str) -> PathBuf {
        self.certs.path().join(file)
    }

    /// The `[[sandbox.engines]]` entry of this engine.
    pub fn engine_toml(&self, name: &str, max_containers: usize) -> String {
        format!(
            "[[sandbox.engines]]\nname = \"{name}\"\nurl = \"tcp://127.0.0.1:{}\"\nmax_containers = {max_containers}\n\
             tls_ca = \"{}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
            self.port,
            self.cert("ca.pem").display(),
            self.cert("cert.pem").display(),
            self.cert("key.pem").display()
        )
    }

    /// `docker` against this engine (over its TLS API, as the agent reaches it).
    pub fn docker(&self) -> Command {
        let mut c = Command::new("docker");
        c.args(["-H", &format!("tcp://127.0.0.1:{}", self.port), "--tlsverify"])
            .arg(format!("--tlscacert={}", self.cert("ca.pem").display()))
            .arg(format!("--tlscert={}", self.cert("cert.pem").display()))
            .arg(format!("--tlskey={}", self.cert("key.pem").display()));
        c
    }

    /// Names of the containers of ours (any state) on this engine.
    pub fn our_containers(&self) -> Vec<String> {
        let out = sh(self.docker().args(["ps", "-a", "--filter", "label=agent.owner", "--format", "{{.Names}}"]));
        out.lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
    }

    /// Names of the running containers of ours on this engine (empty when it is down).
    pub fn running(&self) -> Vec<String> {
        let o = self.docker().args(["ps", "--filter", "label=agent.owner", "--format", "{{.Names}}"]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
    }

    fn wait_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if self.docker().arg("version").output().unwrap().status.success() {
                return;
            }
            let logs = Command::new("docker").args(["logs", "--tail", "20", &self.name]).output().unwrap();
            assert!(
                Instant::now() < deadline,
                "the second engine did not answer within 90 s: {}",
                String::from_utf8_lossy(&logs.stderr)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Kills the engine at once (its containers die with it, unremoved).
    pub fn kill(&self) {
        sh(Command::new("docker").args(["kill", &self.name]));
    }

    /// Starts the killed engine again, with the storage it had.
    pub fn restart(&self) {
        sh(Command::new("docker").args(["start", &self.name]));
        self.wait_up();
    }
}

impl Drop for Dind {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", "-v", &self.name]).output();
    }
}
