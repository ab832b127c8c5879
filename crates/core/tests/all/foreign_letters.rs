//! Letters a reply has that nothing shown to the model had (issue 50's damage signal),
//! recorded per turn of a real episode: a letter counts until an observation shows it,
//! and the model's own earlier replies never show it.

use std::sync::Arc;

use agent_llm::ScriptedBackend;
use agent_protocol::trajectory::Trajectory;
use agent_protocol::{EndReason, Op};

use crate::episode_loop::start_custom;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn letters_nothing_showed_are_recorded_per_turn_until_an_observation_shows_them() {
    let dir = tempfile::tempdir().unwrap();
    let keep = tempfile::tempdir().unwrap();
    let path = keep.path().join("t.jsonl");
    let replies = vec![
        "Let me print it.\n<bash>\ncmd: echo książka\n</bash>".to_string(),
        "The word książka is there.\n<bash>\ncmd: ls\n</bash>".to_string(),
        "<finish>\nmessage: 完成, książka\n</finish>".to_string(),
    ];
    let model = Arc::new(ScriptedBackend::new(replies));
    let traj = path.clone();
    let h = start_custom(dir, model, move |cfg| cfg.trajectory = Some(traj)).await;
    h.send(Op::UserTurn { text: "print the word".into() });
    let (summary, _) = h.finish().await;
    assert_eq!(summary.reason, EndReason::Finished);
    let trajectory = Trajectory::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let letters: Vec<Option<&str>> = trajectory.turns.iter().map(|t| t.foreign_letters.as_deref()).collect();
    assert_eq!(letters, [Some("ąż"), None, Some("完成")]);
    assert_eq!(trajectory.foreign_letter_turns(), 2);
}
