//! `agent serve` and `agent run --model openai:…` as two real processes.

use std::process::Command;

use crate::support;

#[test]
fn an_episode_runs_through_agent_serve() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(
        &dir,
        "s.yaml",
        "- \"<bash>\\ncmd: echo served > /tmp/x && cat /tmp/x\\n</bash>\"\n- \"<finish>\\nmessage: ok\\n</finish>\"\n",
    );
    let (mut server, url) = support::start_server(&format!("scripted:{}", script.display()), "served");
    let models: serde_json::Value =
        rt.block_on(async { reqwest::get(format!("{url}/models")).await.unwrap().json().await.unwrap() });
    assert_eq!(models["data"][0]["id"], "served");
    let out = Command::new(support::agent_bin())
        .args(["run", "--no-network", "--model", &format!("openai:{url}#served"), "say served"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("served\n"), "{stdout}");
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe {
        libc::kill(server.id() as i32, libc::SIGINT);
    }
    assert_eq!(server.wait().unwrap().code(), Some(130));
}

#[test]
fn bad_requests_get_a_400_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(&dir, "s.yaml", "- hi\n");
    let (mut server, url) = support::start_server(&format!("scripted:{}", script.display()), "served");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (status, body) = rt.block_on(async {
        let r = reqwest::Client::new()
            .post(format!("{url}/chat/completions"))
            .json(&serde_json::json!({"messages": [{"role": "wizard", "content": "x"}]}))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    });
    assert_eq!(status, 400);
    assert!(body.contains("messages[0].role"), "{body}");
    let _ = server.kill();
    let _ = server.wait();
}
