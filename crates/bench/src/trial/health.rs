//! Waiting for a task's healthcheck (`task/health.rs`) before its agent starts, the way
//! Harbor does: attempts in the start period do not count and come `start_interval`
//! apart; after it, `retries` consecutive failures `interval` apart make the environment
//! unhealthy. Every attempt is logged to the trial's `healthcheck.log`.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use agent_sandbox::Sandbox;

use super::super::task::Healthcheck;

/// Bytes of one attempt's output kept for its log line.
const MAX_ATTEMPT_OUTPUT: usize = 4096;

/// What one attempt of the check gave.
pub(super) struct Probe {
    /// Whether the command exited 0 within its timeout.
    pub ok: bool,
    /// Its exit, in words, and the end of its output.
    pub detail: String,
}

/// How a check ended: the attempts made, one log line each.
#[derive(Debug)]
pub(super) struct Checked {
    pub healthy: bool,
    pub lines: Vec<String>,
}

/// Runs `hc` in `sandbox` until it passes or fails for good; the attempts go to
/// `log`. The reason, for the trial's record, when it never passed.
pub(super) async fn wait_healthy(sandbox: &Sandbox, hc: &Healthcheck, log: &Path) -> Result<(), String> {
    let checked = poll(hc, || attempt(sandbox, hc)).await;
    let _ = std::fs::write(log, checked.lines.join("\n") + "\n");
    if checked.healthy {
        return Ok(());
    }
    let last = checked.lines.last().map(String::as_str).unwrap_or("no attempt");
    Err(format!(
        "the healthcheck `{}` never passed: {} consecutive failures after the start period of {} s \
         (last: {last}; every attempt is in {})",
        hc.command,
        hc.retries,
        hc.start_period.as_secs_f64(),
        log.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default()
    ))
}

/// One run of the command.
async fn attempt(sandbox: &Sandbox, hc: &Healthcheck) -> Probe {
    let out = sandbox.exec(&["bash", "-c", &hc.command], None, hc.timeout, MAX_ATTEMPT_OUTPUT).await;
    match out {
        Err(e) => Probe { ok: false, detail: format!("could not run: {e}") },
        Ok(out) => {
            let mut text = agent_sandbox::sanitize(&out.stdout);
            text.push_str(&agent_sandbox::sanitize(&out.stderr));
            let tail: String = text
                .trim()
                .replace('\n', " | ")
                .chars()
                .rev()
                .take(200)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            let exit = match out.exit_code {
                Some(code) => format!("exit {code}"),
                None => format!("no exit within {} s", hc.timeout.as_secs_f64()),
            };
            let detail = if tail.is_empty() { exit } else { format!("{exit}: {tail}") };
            Probe { ok: out.exit_code == Some(0), detail }
        }
    }
}

/// Harbor's loop over any probe: the attempts until one passes, or until `retries`
/// consecutive ones after the start period failed.
pub(super) async fn poll<F, Fut>(hc: &Healthcheck, mut probe: F) -> Checked
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Probe>,
{
    let started = Instant::now();
    let mut lines = Vec::new();
    let mut counted = 0;
    loop {
        let in_start_period = started.elapsed() < hc.start_period;
        let p = probe().await;
        let at = started.elapsed().as_secs_f64();
        let phase = if in_start_period { " (start period)" } else { "" };
        let verdict = if p.ok { "passed" } else { "failed" };
        lines.push(format!("attempt {} at {at:.1} s{phase}: {verdict}, {}", lines.len() + 1, p.detail));
        if p.ok {
            return Checked { healthy: true, lines };
        }
        let pause = if in_start_period {
            hc.start_interval
        } else {
            counted += 1;
            if counted >= hc.retries {
                return Checked { healthy: false, lines };
            }
            hc.interval
        };
        tokio::time::sleep(pause.max(Duration::from_millis(10))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn check(start_period_ms: u64, retries: u32) -> Healthcheck {
        Healthcheck {
            command: "test -f /ready".into(),
            interval: Duration::from_millis(20),
            timeout: Duration::from_secs(1),
            start_period: Duration::from_millis(start_period_ms),
            start_interval: Duration::from_millis(10),
            retries,
        }
    }

    /// A probe that passes from its `pass_from`-th call on (1-based; 0: never).
    fn probe(calls: &AtomicU32, pass_from: u32) -> impl FnMut() -> std::future::Ready<Probe> + '_ {
        move || {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            let ok = pass_from != 0 && n >= pass_from;
            std::future::ready(Probe { ok, detail: format!("exit {}", if ok { 0 } else { 1 }) })
        }
    }

    #[tokio::test]
    async fn it_waits_until_the_check_passes() {
        let calls = AtomicU32::new(0);
        let got = poll(&check(0, 5), probe(&calls, 4)).await;
        assert!(got.healthy, "{got:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert!(got.lines[3].starts_with("attempt 4 at") && got.lines[3].ends_with("passed, exit 0"), "{got:?}");
    }

    #[tokio::test]
    async fn retries_consecutive_failures_after_the_start_period_make_it_unhealthy() {
        let calls = AtomicU32::new(0);
        let got = poll(&check(0, 3), probe(&calls, 0)).await;
        assert!(!got.healthy);
        assert_eq!(calls.load(Ordering::SeqCst), 3, "{got:?}");
        assert!(got.lines.iter().all(|l| l.contains("failed, exit 1") && !l.contains("start period")), "{got:?}");
    }

    #[tokio::test]
    async fn failures_in_the_start_period_do_not_count() {
        let calls = AtomicU32::new(0);
        let started = Instant::now();
        let got = poll(&check(150, 2), probe(&calls, 0)).await;
        assert!(!got.healthy);
        // Attempts every 10 ms for 150 ms, then two counted ones.
        let in_start: Vec<&String> = got.lines.iter().filter(|l| l.contains("(start period)")).collect();
        assert!(in_start.len() >= 3, "{got:?}");
        assert_eq!(got.lines.len() - in_start.len(), 2, "{got:?}");
        assert!(started.elapsed() >= Duration::from_millis(150));
    }
}
