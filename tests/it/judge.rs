//! The judge against a misbehaving OpenAI-compatible server (malformed YAML, out-of-range
//! scores, 429s, timeouts), and `agent judge-eval` end to end.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_bench::judge::{Judge, JudgeOptions, JudgedEpisode};
use agent_llm::{OpenAiBackend, OpenAiConfig};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::support;

const GOOD: &str = "The agent explored and verified.\n```yaml\nplanning: 0.8\nexploration: 0.9\nverification: 0.9\ntool_use: 0.8\nerror_recovery: 0.7\ncap: none\nscore: 0.83\n```";

/// Every request body the server saw.
type Seen = Arc<Mutex<Vec<Value>>>;

fn answer(stream: bool, text: &str) -> Response {
    if stream {
        let chunk = json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
        let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
        let body = format!("data: {chunk}\n\ndata: {end}\n\ndata: [DONE]\n\n");
        ([("content-type", "text/event-stream")], body).into_response()
    } else {
        Json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10}
        }))
        .into_response()
    }
}

/// The model name picks the misbehaviour.
async fn chat(State(seen): State<Seen>, Json(body): Json<Value>) -> Response {
    let calls = {
        let mut seen = seen.lock().unwrap();
        seen.push(body.clone());
        seen.iter().filter(|b| b["model"] == body["model"]).count()
    };
    let stream = body["stream"].as_bool().unwrap_or(false);
    match body["model"].as_str().unwrap_or("") {
        "good" => answer(stream, GOOD),
        "malformed" => answer(stream, "I think the agent did quite well overall, maybe 8/10."),
        "out-of-range" => answer(stream, "```yaml\nplanning: 0.5\nscore: 1.7\n```"),
        "rate-limited" => (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "0")], "slow down").into_response(),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            answer(stream, GOOD)
        }
        // Malformed first; a correct block once corrected.
        "fixes-on-retry" if calls == 1 => answer(stream, "Score: high."),
        "fixes-on-retry" => answer(stream, GOOD),
        _ => (StatusCode::NOT_FOUND, "unknown model").into_response(),
    }
}

async fn serve() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new().route("/v1/chat/completions", post(chat)).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), seen)
}

fn episode() -> JudgedEpisode {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/judge-eval/trajectories/perfect-agent.jsonl");
    JudgedEpisode::from_trajectory_file(&dir).unwrap()
}

fn judge(url: &str, model: &str) -> Judge {
    let mut cfg = OpenAiConfig::new(url, model);
    cfg.stream = false;
    cfg.retry.max_retries = 1;
    cfg.retry.initial_backoff = Duration::from_millis(10);
    cfg.retry.max_backoff = Duration::from_millis(20);
    let opts = JudgeOptions {
        backoff: Duration::from_millis(10),
        request_timeout: Duration::from_millis(800),
        ..JudgeOptions::default()
    };
    Judge::new(Arc::new(OpenAiBackend::new(cfg).unwrap()), opts).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_answer_is_scored_and_cached() {
    let (url, seen) = serve().await;
    let j = judge(&url, "good");
    let ep = episode();
    let v = j.judge(&ep, 0).await.unwrap();
    assert_eq!(v.score, 0.83);
    assert_eq!(v.components["verification"], 0.9);
    // The prompt carries the rubric, the task and the real transcript.
    let prompt = seen.lock().unwrap()[0]["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(prompt.contains("## Rubric") && prompt.contains("wordfreq") && prompt.contains("Tool [bash"), "{prompt}");
    // The same episode and sample are not asked twice.
    j.judge(&ep, 0).await.unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1);
    j.judge(&ep, 1).await.unwrap();
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_answer_gets_a_correction_and_then_counts() {
    let (url, seen) = serve().await;
    let v = judge(&url, "fixes-on-retry").judge(&episode(), 0).await.unwrap();
    assert_eq!(v.score, 0.83);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    let messages = seen[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "prompt, the bad answer, the correction");
    assert!(messages[2]["content"].as_str().unwrap().contains("could not be read"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failure_is_recorded_with_its_reason() {
    let (url, _) = serve().await;
    let ep = episode();
    for (model, reason) in [
        ("malformed", "no YAML block"),
        ("out-of-range", "scores must be numbers from 0.0 to 1.0"),
        ("rate-limited", "429"),
        ("slow", "no answer within"),
    ] {
        let failure = judge(&url, model).judge(&ep, 0).await.unwrap_err();
        assert_eq!(failure.attempts.len(), 3, "{model}: {failure:?}");
        assert!(failure.reason.contains(reason), "{model}: {}", failure.reason);
    }
}

#[test]
fn judge_eval_ranks_judges_and_reports_failures() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (url, _) = rt.block_on(serve());
    let out_dir = tempfile::tempdir().unwrap();
    // Installed and run from elsewhere: the suite is the one the binary carries.
    let home = tempfile::tempdir().unwrap();
    let out = support::installed(home.path())
        .args(["judge-eval", "--attempts", "1", "--tries", "2", "--timeout-secs", "5"])
        .args(["--judge", &format!("openai:{url}#malformed"), "--judge", &format!("openai:{url}#good")])
        .arg("--output")
        .arg(out_dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    // The good judge gives 0.83 everywhere: in range for some cases, capped to 0.09/0.30
    // by the episode's facts for the no-action and parse-error cases. The malformed one
    // fails every judgement, and ranks last.
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[1].ends_with("#good") && lines[2].ends_with("#malformed"), "{stdout}");
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.path().join("results.json")).unwrap()).unwrap();
    let malformed =
        results.as_array().unwrap().iter().find(|r| r["judge"].as_str().unwrap().ends_with("#malformed")).unwrap();
    assert_eq!(malformed["failures"], malformed["cases"].as_array().unwrap().len());
    assert_eq!(malformed["pass_rate"], 0.0);
    let good = &results[0];
    let capped = good["cases"].as_array().unwrap().iter().find(|c| c["case"] == "no-action-prose").unwrap();
    assert_eq!(capped["scores"][0], 0.09);
    let html = std::fs::read_to_string(out_dir.path().join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("perfect-agent"));
    assert!(out_dir.path().join("report.md").is_file());
}

#[test]
fn judge_eval_runs_the_suite_against_a_served_local_model() {
    // The built-in model through `agent serve` (llama.cpp), one judgement per case with
    // short answers: a 135M model is a poor judge, and the report says so as it is.
    let (mut server, url) = support::start_server("smollm2-135m", "smollm2");
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(support::agent_bin())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["judge-eval", "--attempts", "1", "--tries", "1", "--max-tokens", "160", "--timeout-secs", "600"])
        .args(["--judge", &format!("openai:{url}#smollm2")])
        .arg("--output")
        .arg(out_dir.path())
        .output()
        .unwrap();
    unsafe {
        // SAFETY: plain kill(2) on our own child's pid.
        libc::kill(server.id() as i32, libc::SIGTERM);
    }
    server.wait().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.path().join("results.json")).unwrap()).unwrap();
    let cases = results[0]["cases"].as_array().unwrap();
    assert!(cases.len() >= 10);
    // Every case got its one judgement: a score or a recorded failure with its reason.
    for c in cases {
        let scored = c["scores"][0].is_number();
        let failed = c["failures"].as_array().unwrap().len() == 1;
        assert!(scored ^ failed, "{c}");
    }
    let md = std::fs::read_to_string(out_dir.path().join("report.md")).unwrap();
    assert!(md.contains("smollm2") && md.contains("| perfect-agent |"), "{md}");
}
