//! Placement in an engine pool, with two names for the real local engine (two members,
//! one container each) and one member that never answers.

use std::time::Duration;

use agent_sandbox::{EnginePool, EngineSpec};

fn member(name: &str, url: &str, max: usize) -> EngineSpec {
    EngineSpec {
        url: url.into(),
        name: Some(name.into()),
        max_containers: max,
        tls_ca: None,
        tls_cert: None,
        tls_key: None,
    }
}

const LOCAL: &str = "unix:///var/run/docker.sock";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placements_fill_the_freest_engine_and_wait_when_all_are_full() {
    let pool = EnginePool::connect(&[member("a", LOCAL, 2), member("b", LOCAL, 1)]).await.unwrap();
    let first = pool.place(1).await.unwrap();
    assert_eq!(first.engine().name(), "a", "the most room (2), first on a tie");
    let second = pool.place(1).await.unwrap();
    assert_eq!(second.engine().name(), "a", "a has 1 free, b 1: the first configured");
    let third = pool.place(1).await.unwrap();
    assert_eq!(third.engine().name(), "b");
    // Full: the next placement waits until a claim is given back.
    let waiting = tokio::time::timeout(Duration::from_millis(500), pool.place(1)).await;
    assert!(waiting.is_err(), "placed beyond capacity: {waiting:?}");
    let pool2 = pool.clone();
    let next = tokio::spawn(async move { pool2.place(1).await.map(|p| p.engine().name().to_string()) });
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(third);
    let name = tokio::time::timeout(Duration::from_secs(5), next).await.unwrap().unwrap().unwrap();
    assert_eq!(name, "b", "the freed room is used at once");
    // A task with more services than an engine holds still runs, alone on the largest.
    drop((first, second));
    let big = pool.place(5).await.unwrap();
    assert_eq!(big.engine().name(), "a");
    assert_eq!(pool.placed(), vec![("a".to_string(), 3), ("b".to_string(), 2)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_does_not_answer_starts_down_and_is_passed_over() {
    let dir = tempfile::tempdir().unwrap();
    let dead = format!("unix://{}", dir.path().join("no-engine.sock").display());
    let pool = EnginePool::connect(&[member("dead", &dead, 4), member("live", LOCAL, 1)]).await.unwrap();
    let p = pool.place(1).await.unwrap();
    assert_eq!(p.engine().name(), "live");
    let status = pool.status().await;
    assert!(status[0].down.is_some() && status[0].version.is_none(), "{status:?}");
    assert!(status[1].down.is_none() && status[1].version.is_some(), "{status:?}");
    assert_eq!(status[1].in_use, 1);
    // Nothing answers at all: refused at once, naming each engine.
    let err = EnginePool::connect(&[member("dead", &dead, 1)]).await.unwrap_err().to_string();
    assert!(err.contains("dead") && err.contains("no-engine.sock"), "{err}");
    // Plain TCP off loopback is refused before anything connects.
    let err = EnginePool::connect(&[member("far", "tcp://192.0.2.7:2375", 1)]).await.unwrap_err().to_string();
    assert!(err.contains("root on its host"), "{err}");
}
