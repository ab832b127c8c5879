//! Call-level repetition in a whole episode (issue 49): a scripted model makes the same
//! call again with different prose around it, in a real sandbox; the notes reach the
//! next prompt and the trajectory counts the repeats.

use std::sync::Arc;

use agent_llm::{ChatRequest, Role, ScriptedBackend};
use agent_protocol::trajectory::Trajectory;
use agent_protocol::{EndReason, Op};

use crate::episode_loop::start_custom;

/// The command of the issue, reduced: a grep that finds nothing exits 1 with no output.
const GREP: &str = "echo 'all good' | grep 'Error'";

fn bash(prose: &str, cmd: &str) -> String {
    format!("{prose}\n<bash>\ncmd: {cmd}\n</bash>")
}

/// Runs `replies` headless to the end; the model's requests and the trajectory.
async fn run(replies: Vec<String>) -> (EndReason, Vec<ChatRequest>, Trajectory) {
    let dir = tempfile::tempdir().unwrap();
    let keep = tempfile::tempdir().unwrap();
    let path = keep.path().join("t.jsonl");
    let model = Arc::new(ScriptedBackend::new(replies));
    let traj = path.clone();
    let h = start_custom(dir, model.clone(), move |cfg| cfg.trajectory = Some(traj)).await;
    h.send(Op::UserTurn { text: "find the errors".into() });
    let (summary, _) = h.finish().await;
    let trajectory = Trajectory::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    (summary.reason, model.requests(), trajectory)
}

/// The observations the model saw before its reply number `i` (from 0).
fn seen_before(requests: &[ChatRequest], i: usize) -> String {
    let last = requests[i].messages.last().unwrap();
    assert_eq!(last.role, Role::User);
    last.content.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_failing_command_three_times_is_told_then_noted_and_counted() {
    let replies = vec![
        bash("Let me check the script for errors.", GREP),
        bash("No errors shown yet, I will run it again to be sure.", GREP),
        bash("Running the check once more.", GREP),
        "<finish>\nmessage: no errors found\n</finish>".to_string(),
    ];
    let (reason, requests, trajectory) = run(replies).await;
    assert_eq!(reason, EndReason::Finished);
    assert_eq!(requests.len(), 4);
    let first = seen_before(&requests, 1);
    assert!(first.contains("[exit code 1") && !first.contains("<repeated_call>"), "{first}");
    let second = seen_before(&requests, 2);
    assert!(second.contains("<repeated_call>\nThis exact command failed before with exit code 1"), "{second}");
    assert!(second.contains("running it again will not change that"), "{second}");
    let third = seen_before(&requests, 3);
    assert!(third.contains(&format!("You have now made the command `{GREP}` 3 times")), "{third}");
    assert!(third.contains("last time it returned: exit code 1, no output"), "{third}");
    assert!(third.contains("call `finish` now, for example:\n<finish>"), "{third}");
    // The notes come after the command's own result.
    assert!(third.find("[exit code 1").unwrap() < third.find("<repeated_call>").unwrap(), "{third}");
    let counts: Vec<u32> = trajectory.turns.iter().map(|t| t.repeated_calls).collect();
    assert_eq!(counts, [0, 1, 1, 0]);
    assert_eq!(trajectory.end.unwrap().repeated_calls, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_calls_get_no_note_and_count_nothing() {
    let replies = vec![
        bash("First look.", "echo one | grep Error"),
        bash("Second look.", "echo two | grep Error"),
        bash("Third look.", "echo three | grep Error"),
        "<finish>\nmessage: nothing found\n</finish>".to_string(),
    ];
    let (reason, requests, trajectory) = run(replies).await;
    assert_eq!(reason, EndReason::Finished);
    for (i, request) in requests.iter().enumerate() {
        assert!(request.messages.iter().all(|m| !m.content.contains("<repeated_call>")), "request {i}");
    }
    assert!(trajectory.turns.iter().all(|t| t.repeated_calls == 0));
    assert_eq!(trajectory.end.unwrap().repeated_calls, 0);
    let text = serde_json::to_string(&trajectory.turns[1]).unwrap();
    assert!(!text.contains("repeated_calls"), "a turn without repeats writes no count: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_cut_for_looping_before_its_call_is_told_so_and_is_no_parse_error() {
    let sentence = "The script reads the file and sums the numbers that are greater than the limit given. ";
    let replies = vec![
        format!("Let me explain the fix first.\n{}", sentence.repeat(30)),
        "<finish>\nmessage: explained\n</finish>".to_string(),
    ];
    let (reason, requests, trajectory) = run(replies).await;
    assert_eq!(reason, EndReason::Finished);
    let first = &trajectory.turns[0];
    assert!(first.cut.as_deref().is_some_and(|c| c.contains("repeated")), "{:?}", first.cut);
    assert!(first.parse_errors.is_empty(), "a cut is not a malformed call: {:?}", first.parse_errors);
    let told = seen_before(&requests, 1);
    assert!(told.contains("<reply_cut>") && told.contains("before it called a tool; nothing ran"), "{told}");
    assert!(!told.contains("called no tool"), "{told}");
}
