//! The persistent shell against a real engine.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::support;

async fn run(shell: &mut agent_sandbox::Shell, cmd: &str, secs: u64) -> agent_sandbox::CommandResult {
    shell
        .run(cmd, Duration::from_secs(secs), &CancellationToken::new(), &mut |_| {})
        .await
        .expect("the shell call failed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cd_and_exports_carry_over_between_calls() {
    let (_sb, mut sh) = support::shell().await;
    let r = run(&mut sh, "cd /tmp && export X=1", 10).await;
    assert_eq!(r.exit_code, Some(0));
    let r = run(&mut sh, "pwd; echo $X", 10).await;
    assert_eq!(r.output, "/tmp\n1\n");
    assert_eq!(sh.cwd(), "/tmp");
    let r = run(&mut sh, "false", 10).await;
    assert_eq!(r.exit_code, Some(1));
    let r = run(&mut sh, "exit 3", 10).await;
    assert!(r.notice.as_deref().unwrap_or_default().contains("shell exited"), "{r:?}");
    let r = run(&mut sh, "pwd; echo $X", 10).await;
    assert_eq!(r.output, "/tmp\n1\n", "state restored after the shell exited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_output_is_capped_with_head_tail_and_marker() {
    let (_sb, mut sh) = support::shell().await;
    let t = Instant::now();
    let r = run(&mut sh, "yes | head -c 50000000; echo; echo THE-END", 120).await;
    eprintln!("50 MB of output took {:?}", t.elapsed());
    assert_eq!(r.exit_code, Some(0));
    assert!(r.total_bytes >= 50_000_000, "{}", r.total_bytes);
    assert!(r.cut_bytes > 49_900_000);
    assert!(r.output.len() < 20_000);
    assert!(r.output.starts_with("y\ny\n"));
    assert!(r.output.contains("bytes of output cut"), "marker missing");
    assert!(r.output.trim_end().ends_with("THE-END"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_the_command_but_keeps_the_shell() {
    let (_sb, mut sh) = support::shell().await;
    run(&mut sh, "cd /var && export KEEP=yes", 10).await;
    let t = Instant::now();
    let r = sh
        .run("echo started; sleep 1000", Duration::from_secs(2), &CancellationToken::new(), &mut |_| {})
        .await
        .unwrap();
    assert!(r.timed_out);
    assert!(t.elapsed() < Duration::from_secs(15), "took {:?}", t.elapsed());
    assert!(r.output.contains("started"));
    assert!(r.notice.is_none(), "the shell itself should survive: {r:?}");
    let r = run(&mut sh, "echo $KEEP; pwd; pgrep -fc 'sleep 1000' || true", 10).await;
    assert_eq!(r.output, "yes\n/var\n0\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_stops_a_command_promptly() {
    let (_sb, mut sh) = support::shell().await;
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        c2.cancel();
    });
    let t = Instant::now();
    let r = sh.run("sleep 600", Duration::from_secs(600), &cancel, &mut |_| {}).await.unwrap();
    assert!(r.interrupted && !r.timed_out);
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(run(&mut sh, "echo ok", 10).await.output, "ok\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_busy_loop_is_recovered_by_a_shell_restart() {
    let (_sb, mut sh) = support::shell().await;
    run(&mut sh, "cd /etc", 10).await;
    let r =
        sh.run("while :; do :; done", Duration::from_secs(1), &CancellationToken::new(), &mut |_| {}).await.unwrap();
    assert!(r.timed_out);
    assert!(r.notice.is_some(), "{r:?}");
    assert_eq!(run(&mut sh, "pwd", 10).await.output, "/etc\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_bomb_is_contained_and_the_episode_goes_on() {
    let sb = support::sandbox_with(128, false).await;
    let mut sh = agent_sandbox::Shell::start(&sb, 16 * 1024).await.unwrap();
    run(&mut sh, "cd /tmp", 10).await;
    // A bomb in the foreground's function, and one started quietly in the background,
    // which returns exit 0 at once while it grows.
    for cmd in ["bomb() { bomb | bomb & }; bomb", "(bomb() { bomb | bomb & }; bomb) >/dev/null 2>&1 &"] {
        let bomb = sh.run(cmd, Duration::from_secs(5), &CancellationToken::new(), &mut |_| {}).await.unwrap();
        eprintln!("bomb: {bomb:?}");
        // The call that started the bomb is the one that failed, with the explanation;
        // the sandbox was reset, and the next command works at once in the same cwd.
        assert_eq!(bomb.exit_code, None, "{cmd}: {bomb:?}");
        let notice = bomb.notice.clone().unwrap_or_default();
        assert!(notice.contains("limit of 128"), "{cmd}: {notice}");
        let r = run(&mut sh, "echo alive; pwd; ls -d /proc/[0-9]* | wc -l", 60).await;
        eprintln!("after bomb: {r:?}");
        let lines: Vec<&str> = r.output.lines().collect();
        assert!(r.notice.is_none() && lines.len() == 3 && lines[0] == "alive", "{cmd}: not recovered: {r:?}");
        assert_eq!(lines[1], "/tmp");
        let procs: i64 = lines[2].trim().parse().unwrap_or(i64::MAX);
        assert!(procs < 20, "{cmd}: {procs} processes left");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_output_and_stdin_readers_are_harmless() {
    let (_sb, mut sh) = support::shell().await;
    let r = run(&mut sh, "cat /bin/ls", 30).await;
    assert_eq!(r.exit_code, Some(0));
    assert!(r.output.contains("ELF"));
    assert!(!r.output.contains('\0'));
    // A command that reads stdin gets EOF instead of eating the protocol.
    let r = run(&mut sh, "cat; echo after-cat", 10).await;
    assert_eq!(r.output, "after-cat\n");
    let r = run(&mut sh, "printf '\\033[31mred\\033[0m\\n'; printf 'no newline'", 10).await;
    assert_eq!(r.output, "red\nno newline");
    let r = run(&mut sh, "echo 'unterminated", 10).await;
    assert_ne!(r.exit_code, Some(0), "a syntax error fails: {r:?}");
    assert_eq!(run(&mut sh, "echo fine", 10).await.output, "fine\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_text_with_heredocs_and_quotes_runs_verbatim() {
    let (_sb, mut sh) = support::shell().await;
    let cmd = "cat > /tmp/q.txt <<'EOF'\nit's \"quoted\" $HOME `x`\n\ttab\nEOF\ncat /tmp/q.txt";
    let r = run(&mut sh, cmd, 10).await;
    assert_eq!(r.output, "it's \"quoted\" $HOME `x`\n\ttab\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_failure_text_in_ordinary_output_is_just_output() {
    let (_sb, mut sh) = support::shell().await;
    run(&mut sh, "cd /tmp && export K=v", 10).await;
    let r = run(&mut sh, "echo 'bash: fork: retry: Resource temporarily unavailable'; sleep 1; echo still-here $K", 20)
        .await;
    assert!(r.notice.is_none(), "{r:?}");
    assert!(r.output.ends_with("still-here v\n"), "{r:?}");
}
