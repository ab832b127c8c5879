//! `agent tasks synth` killed mid-run and resumed: nothing is lost and nothing ends
//! twice. The real binary, killed with SIGKILL (no clean-up of its own), then
//! `--resume`; the roles are scripted models, the tasks real containers.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;

fn count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "json")).count())
        .unwrap_or(0)
}

#[test]
fn a_killed_run_resumes_and_every_item_ends_exactly_once() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // Two seeds, two ideas each: 2 idea items, 4 builds, and the reviews of the valid ones.
    let seeds = dir.path().join("seeds");
    support::copy_tree(&support::fixture("bench/tb2-hello"), &seeds.join("hello-a"));
    support::copy_tree(&support::fixture("bench/tb2-hello"), &seeds.join("hello-b"));
    let idea = support::script(
        &dir,
        "idea.yaml",
        "- \"1. Shout the greeting into a file.\\n2. Whisper it.\"\n\
         - |\n  {\"title\": \"Shout the greeting\", \"idea\": \"Write HELLO to /app/shout.txt.\"}\n  {\"title\": \"Whisper the greeting\", \"idea\": \"Write hello to /app/whisper.txt.\"}\n",
    );
    let script = |name: &str| format!("scripted:{}", support::fixture(&format!("synth/{name}")).display());
    let synth = |extra: &[&str]| {
        let mut c = Command::new(support::agent_bin());
        c.args(["tasks", "synth", "--out"]).arg(&out).args(extra).stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    };
    let idea_model = format!("scripted:{}", idea.display());
    let mut first = synth(&[
        seeds.to_str().unwrap(),
        "--idea-model",
        &idea_model,
        "--builder-model",
        &script("builder.yaml"),
        "--reviewer-model",
        &script("reviewer.yaml"),
        "--ideas",
        "2",
        "--rounds",
        "1",
        "--oracle-runs",
        "1",
        "--workers",
        "2",
        "--quiet",
    ])
    .spawn()
    .unwrap();
    // Killed once something has ended and something else is being worked on.
    let queue = out.join("queue");
    let deadline = Instant::now() + Duration::from_secs(600);
    while !(count(&queue.join("done")) >= 3 && count(&queue.join("claimed")) >= 1) {
        assert!(first.try_wait().unwrap().is_none(), "the run ended before it could be killed");
        assert!(Instant::now() < deadline, "the run made no progress");
        std::thread::sleep(Duration::from_millis(200));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let ended_before: BTreeSet<String> = std::fs::read_dir(queue.join("done"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert!(count(&queue.join("claimed")) >= 1);

    let resumed = synth(&["--resume", "--quiet"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(stderr.contains("resuming:"), "{stderr}");

    // Every item ended once: the done records are the closure of the seeds' ideas under
    // their children, nothing is pending or claimed, and what ended before the kill was
    // not done again.
    assert_eq!((count(&queue.join("pending")), count(&queue.join("claimed"))), (0, 0));
    let mut records = Vec::new();
    for e in std::fs::read_dir(queue.join("done")).unwrap().flatten() {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
        records.push(v);
    }
    let ended: BTreeSet<String> = records.iter().map(|r| r["item"]["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ended.len(), records.len());
    let mut expected: BTreeSet<String> = ["hello-a".to_string(), "hello-b".to_string()].into();
    for r in &records {
        for c in r["children"].as_array().unwrap() {
            expected.insert(c["id"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(ended, expected);
    assert!(ended.len() >= 2 + 4, "{ended:?}");
    for name in &ended_before {
        let path = queue.join("done").join(name);
        assert!(path.is_file(), "{name} ended before the kill and is still there");
    }
    // The index holds each accepted task once, and the duplicates were refused.
    let index = std::fs::read_to_string(out.join("index.jsonl")).unwrap();
    let names: Vec<String> = index
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["name"].as_str().unwrap().to_string())
        .collect();
    let unique: BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "{index}");
    assert!(!names.is_empty(), "{stderr}");
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(stdout.contains("task(s) accepted"), "{stdout}");
    // The killed run's containers were removed by the resumed one.
    let run_id = agent_bench::synth::run::synth_run_id(&out);
    support::assert_nothing_left(&run_id);
}
