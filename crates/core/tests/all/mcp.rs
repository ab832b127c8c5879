//! MCP with a real server from PyPI: the reference `mcp-server-time`, installed into a
//! test image, started inside the sandbox over stdio and called by a scripted model;
//! the same server over streamable HTTP; a server that cannot start and one that dies
//! are reported while the session goes on.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::OnceCell;

use agent_core::config::Config;
use agent_core::episode::{build_episode, ContainerSource, EpisodeRequest, ImageContainer};
use agent_core::mcp::{McpHub, McpServerConfig};
use agent_llm::ScriptedBackend;
use agent_protocol::{EndReason, Event, Op};
use agent_sandbox::{ContainerConfig, Sandbox};

use crate::support::{self, observations, TestSandbox};

/// The test image: the base image with `mcp-server-time` in `/opt/mcp`.
const MCP_IMAGE: &str = "agent-it-mcp:1";
static IMAGE_READY: OnceCell<()> = OnceCell::const_new();

/// Builds the test image once: the wheels are fetched on the host (whose pip knows the
/// host's certificates and proxy) and installed offline in the image.
async fn mcp_image() -> agent_sandbox::Engine {
    let engine = support::docker().await;
    IMAGE_READY
        .get_or_init(|| async {
            let present = Command::new("docker").args(["image", "inspect", MCP_IMAGE]).output().unwrap();
            if present.status.success() {
                return;
            }
            let ctx = tempfile::tempdir().unwrap();
            let wheels = ctx.path().join("wheels");
            let pip = Command::new("python3")
                .args(["-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", "3.11"])
                .args(["--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64"])
                .args(["--platform", "manylinux_2_28_x86_64", "--platform", "any", "-d"])
                .arg(&wheels)
                .arg("mcp-server-time")
                .output()
                .expect("python3 -m pip (the machine's CPython 3.11)");
            assert!(pip.status.success(), "pip download failed: {}", String::from_utf8_lossy(&pip.stderr));
            let dockerfile = ctx.path().join("Dockerfile");
            std::fs::write(
                &dockerfile,
                format!(
                    "FROM {}\nCOPY wheels /tmp/wheels\nRUN python3 -m venv /opt/mcp && /opt/mcp/bin/pip install -q --no-index --find-links /tmp/wheels mcp-server-time && rm -rf /tmp/wheels\n",
                    agent_sandbox::BASE_IMAGE
                ),
            )
            .unwrap();
            let d = agent_sandbox::connect().await.unwrap();
            agent_sandbox::build_task_image(
                &d,
                &Default::default(),
                ctx.path(),
                &dockerfile,
                MCP_IMAGE,
                &mut |n| eprintln!("[mcp image] {n}"),
                &mut |l| eprintln!("[mcp image] {l}"),
            )
            .await
            .expect("build the MCP test image");
        })
        .await;
    engine
}

fn stdio(command: &str, args: &[&str]) -> McpServerConfig {
    McpServerConfig {
        command: Some(command.into()),
        args: args.iter().map(|a| a.to_string()).collect(),
        env: BTreeMap::new(),
        url: None,
        headers: BTreeMap::new(),
        kind: None,
        tool_timeout_secs: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_runs_in_the_sandbox_and_a_crashed_one_is_reported() {
    let engine = mcp_image().await;
    let dir = tempfile::tempdir().unwrap();
    // Call the time tool, see the server among the sandbox's processes, kill it, call
    // it again (reported), and go on with bash.
    let script = support::script(
        &dir,
        "s.yaml",
        "- \"<time__get_current_time>\\ntimezone: Asia/Tokyo\\n</time__get_current_time>\"\n\
         - \"<bash>\\ncmd: ps -eo args | grep [m]cp-server-time\\n</bash>\"\n\
         - \"<bash>\\ncmd: pkill -f mcp-server-time; sleep 1; echo killed\\n</bash>\"\n\
         - \"<time__get_current_time>\\ntimezone: UTC\\n</time__get_current_time>\"\n\
         - \"<bash>\\ncmd: echo still-working\\n</bash>\"\n\
         - \"<finish>\\nmessage: done\\n</finish>\"\n",
    );
    let model = Arc::new(ScriptedBackend::from_file(&script).unwrap());
    let mut config = Config::default();
    config.mcp_servers.insert("time".into(), stdio("/opt/mcp/bin/mcp-server-time", &["--local-timezone", "UTC"]));
    config.mcp_servers.insert("missing".into(), stdio("/opt/mcp/bin/no-such-server", &[]));
    let mut image = ImageContainer::new(MCP_IMAGE);
    image.network = false;
    let mut request = EpisodeRequest::headless(&config, ContainerSource::Image(image), "it-mcp", "it-mcp-1");
    request.mcp_servers = config.mcp_servers.clone();
    let mut start_notices = Vec::new();
    let episode =
        build_episode(&engine, &config, model.as_ref(), request, &mut |n| start_notices.push(n)).await.unwrap();
    // The server that cannot start is named; the other one's tools are offered.
    assert!(start_notices.iter().any(|n| n.contains("MCP server `missing` failed to start")), "{start_notices:?}");
    let status = episode.mcp.as_ref().unwrap().status();
    let time = status.iter().find(|s| s.name == "time").unwrap();
    assert_eq!(time.state, "running");
    assert!(time.tools.contains(&"time__get_current_time".to_string()), "{status:?}");
    assert!(episode.specs.get("time__convert_time").is_some());
    assert!(episode.session.system_prompt.contains("time__get_current_time"), "the prompt lists the MCP tools");
    let mut running = episode.spawn(model);
    running.handle.ops.send(Op::UserTurn { text: "what time is it in Tokyo?".into() }).unwrap();
    let mut events = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(120), running.handle.events.recv()).await.unwrap() {
        events.push(ev);
    }
    let outcome = running.finish(Duration::from_secs(30)).await;
    assert!(outcome.finished(), "{outcome:?}");
    let obs = observations(&events);
    // The real server's answer: Tokyo's time, as its JSON result.
    assert!(obs[0].starts_with("<time__get_current_time_output>") && obs[0].contains("Asia/Tokyo"), "{}", obs[0]);
    assert!(obs[0].contains("is_dst") && obs[0].contains("datetime"), "{}", obs[0]);
    assert!(obs[1].contains("/opt/mcp/bin/mcp-server-time"), "the server does not run in the sandbox: {}", obs[1]);
    // The next turn noticed the stop before the call: the call says why it cannot run.
    assert!(obs[3].contains("error: the MCP server `time`") && obs[3].contains("exited with code"), "{}", obs[3]);
    assert!(obs[4].contains("still-working"), "{}", obs[4]);
    let said = support::notices(&events);
    assert!(said.iter().any(|m| m.contains("MCP server `time` stopped")), "{said:?}");
    assert!(matches!(events.last(), Some(Event::EpisodeEnd { reason: EndReason::Finished, .. })));
}

/// Starts the test image with network access.
async fn networked_sandbox(engine: &agent_sandbox::Engine) -> TestSandbox {
    let mut cfg = ContainerConfig::new(MCP_IMAGE, format!("it-{}", uuid::Uuid::new_v4().simple()), "it");
    cfg.network = true;
    cfg.name_prefix = "agent-it-mcp".into();
    TestSandbox(Sandbox::start(engine, &cfg).await.expect("start a sandbox"))
}

async fn wait_for_port(sandbox: &Sandbox, port: u16, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let probe = format!("import socket; socket.create_connection(('127.0.0.1', {port}), 1)");
    loop {
        let out = sandbox.exec(&["python3", "-c", &probe], None, Duration::from_secs(5), 4096).await.unwrap();
        if out.exit_code == Some(0) {
            return;
        }
        if Instant::now() > deadline {
            let log = sandbox.exec(&["cat", &log.display().to_string()], None, Duration::from_secs(5), 8192).await;
            panic!("the HTTP server did not start: {:?}", log.map(|l| String::from_utf8_lossy(&l.stdout).to_string()));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_server_over_streamable_http_from_the_sandboxs_localhost() {
    let engine = mcp_image().await;
    let sandbox = networked_sandbox(&engine).await;
    // The reference server's own HTTP transport, listening in the sandbox.
    let serve = "nohup /opt/mcp/bin/python -c \"from mcp_server_time.server import create_server; \
                 create_server('UTC').run('streamable-http', host='0.0.0.0', port=8765)\" > /tmp/http.log 2>&1 &";
    sandbox.exec(&["sh", "-c", serve], None, Duration::from_secs(10), 4096).await.unwrap();
    wait_for_port(&sandbox, 8765, Path::new("/tmp/http.log")).await;
    let mut servers = BTreeMap::new();
    let mut web = stdio("unused", &[]);
    web.command = None;
    web.url = Some("http://localhost:8765/mcp".into());
    servers.insert("web".to_string(), web);
    let hub = McpHub::start(&sandbox, &servers, Duration::from_secs(60)).await;
    assert_eq!(hub.take_notices(), Vec::<String>::new());
    let status = hub.status();
    assert_eq!(status[0].state, "running", "{status:?}");
    assert!(status[0].transport.starts_with("http: http://localhost:8765/mcp"));
    let args = json!({"timezone": "Europe/Paris"}).as_object().cloned().unwrap();
    let (text, failed) = hub.call("web__get_current_time", &args).await;
    assert!(!failed && text.contains("Europe/Paris") && text.contains("datetime"), "{text}");
    // A tool error comes back as an error result, and the server goes on.
    let bad = json!({"timezone": "Mars/Olympus"}).as_object().cloned().unwrap();
    let (text, failed) = hub.call("web__get_current_time", &bad).await;
    assert!(failed, "{text}");
    let (_, failed) = hub.call("web__get_current_time", &args).await;
    assert!(!failed);
}
