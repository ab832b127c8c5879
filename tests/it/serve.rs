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

#[test]
fn an_api_key_guards_the_api_and_is_required_off_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(&dir, "s.yaml", "- hi\n");
    let spec = format!("scripted:{}", script.display());
    let o = Command::new(support::agent_bin())
        .args(["serve", "--host", "0.0.0.0", "--port", "0", "--model", &spec])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--api-key"), "{err}");
    let (mut server, url) = support::start_server_with(&spec, "served", &["--api-key", "s3cret"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let statuses = rt.block_on(async {
        let c = reqwest::Client::new();
        let plain = c.get(format!("{url}/models")).send().await.unwrap().status().as_u16();
        let wrong = c.get(format!("{url}/models")).bearer_auth("nope").send().await.unwrap().status().as_u16();
        let right = c.get(format!("{url}/models")).bearer_auth("s3cret").send().await.unwrap().status().as_u16();
        let health = c.get(url.replace("/v1", "/health")).send().await.unwrap().status().as_u16();
        (plain, wrong, right, health)
    });
    assert_eq!(statuses, (401, 401, 200, 200));
    let _ = server.kill();
    let _ = server.wait();
}

/// A prompt longer than the model's context is the client's to fix: a 400 naming both
/// sizes, not a 500; responses name the served model, and a request may name it by the
/// spec the server was started with.
#[test]
fn an_oversized_prompt_is_a_400_and_responses_name_the_served_model() {
    let (mut server, url) = support::start_server_with("smollm2-135m", "small", &["--ctx", "256"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let post = |content: String| {
        let url = url.clone();
        async move {
            let r = reqwest::Client::new()
                .post(format!("{url}/chat/completions"))
                .json(&serde_json::json!({"model": "smollm2-135m", "max_tokens": 4,
                    "messages": [{"role": "user", "content": content}]}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<serde_json::Value>().await.unwrap())
        }
    };
    let (status, body) = rt.block_on(post("word ".repeat(2000)));
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("holds 256"), "{body}");
    let (status, body) = rt.block_on(post("Say hi.".into()));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "small", "{body}");
    let _ = server.kill();
    let _ = server.wait();
}
