//! The agents a trial can run: ours (through the same `Op`/`Event` session as every
//! front end), the oracle (the task's reference solution) and nop (does nothing).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::results::FailureMode;
use super::solution::Solution;
use super::task::BenchTask;
use agent_core::config::Config;
use agent_core::episode::{build_episode, ContainerSource, EpisodeRequest};
use agent_core::hooks::Hooks;
use agent_core::tools::ToolFormat;
use agent_llm::{resolve_model, ModelBackend, ModelSpec, ResolveOptions};
use agent_protocol::{EndReason, Event, Op, TokenUsage};
use agent_sandbox::{shell_quote, Sandbox, Shell};

/// Which agent runs the trials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    /// Our agent, with `--model`.
    Agent,
    /// The task's reference solution.
    Oracle,
    /// Does nothing: a baseline that must resolve nothing.
    Nop,
}

/// Where the agent's model comes from.
#[derive(Clone)]
pub enum ModelSource {
    /// One model shared by every trial (local and remote models).
    Shared(Arc<dyn ModelBackend>),
    /// A fresh model per trial (scripted replies restart for each trial).
    PerTrial(ModelSpec, Box<ResolveOptions>),
}

impl ModelSource {
    /// The model for one episode: the shared one, or a fresh one resolved now.
    pub async fn get(&self) -> Result<Arc<dyn ModelBackend>, String> {
        match self {
            ModelSource::Shared(m) => Ok(m.clone()),
            ModelSource::PerTrial(spec, opts) => {
                resolve_model(spec, opts).await.map_err(|e| format!("the model could not be loaded: {e}"))
            }
        }
    }
}

/// How the agent phase ended.
#[derive(Debug, Clone, Default)]
pub struct AgentOutcome {
    /// The failure mode and its reason, when the phase failed.
    pub failure: Option<(FailureMode, String)>,
    pub duration: Duration,
    pub usage: TokenUsage,
    pub turns: u32,
    /// Turns whose reply had a parse error.
    pub parse_error_turns: u32,
    /// Calls that repeated an identical earlier call (from the trajectory).
    pub repeated_calls: u32,
    /// Turns whose reply wrote letters nothing the model was shown had (from the trajectory).
    pub foreign_letter_turns: u32,
    /// The action format used (`native`/`text`; none for the oracle).
    pub tool_format: Option<ToolFormat>,
    /// Why the episode ended (ours) or the solution's exit status (oracle), in words.
    pub ended: String,
    /// Why our agent's episode ended, typed (none for the oracle, nop or a failed start).
    pub end_reason: Option<EndReason>,
}

/// Runs the agent on a started environment; logs go into `trial_dir`. When the task's
/// tests run in the agent's shell session (`run_tests_in_same_shell`), that session is
/// handed back as the agent left it. `settings` are the config and the hooks of our
/// agent's episode.
pub async fn run_agent(
    kind: AgentKind,
    model: Option<&ModelSource>,
    (config, hooks): (&Config, &Hooks),
    task: &BenchTask,
    sandbox: &Sandbox,
    trial_dir: &Path,
    ids: (&str, &str),
) -> (AgentOutcome, Option<Shell>) {
    let started = Instant::now();
    let (mut out, shell) = match kind {
        AgentKind::Nop => (AgentOutcome { ended: "nop: did nothing".into(), ..Default::default() }, None),
        AgentKind::Oracle => oracle(task, sandbox, trial_dir).await,
        AgentKind::Agent => match model {
            Some(m) => ours(m, config, hooks, task, sandbox, trial_dir, ids).await,
            None => (failed(FailureMode::AgentError, "no model given for --agent agent".into()), None),
        },
    };
    out.duration = started.elapsed();
    (out, shell.filter(|_| task.run_tests_in_same_shell))
}

fn failed(mode: FailureMode, reason: String) -> AgentOutcome {
    AgentOutcome { failure: Some((mode, reason.clone())), ended: reason, ..Default::default() }
}

/// Where the oracle copies a TB1 solution script (the task's root holds its tests too,
/// so the script goes alone).
const SOLUTION_PATH: &str = "/oracle/solution.sh";
/// Where the oracle copies a TB2 task's whole `solution/` folder, as Harbor does: a
/// `solve.sh` finds its helper files beside it (`$(dirname "$0")/files/…`).
const SOLUTION_DIR: &str = "/solution";

/// A command that runs the solution script as `bash SCRIPT` does, with the task's
/// solution variables. When the tests share the shell, the script's exported variables
/// and final directory are carried back into the session: a child bash records them on
/// exit (also on `exit` or a `set -e` failure), and the session takes them over, so the
/// script's own `exit` or shell options never end or change the session itself.
fn solution_command(script: &str, env: &BTreeMap<String, String>, share_shell: bool) -> String {
    let vars = super::verify::env_prefix(env);
    if !share_shell {
        return format!("{vars}bash {script}");
    }
    let child =
        r#"__s=$1; shift; trap 'export -n SHLVL OLDPWD PWD; export -p > "$__s/env"; pwd > "$__s/cwd"' EXIT; . "$0""#;
    format!(
        "__oracle_s=$(mktemp -d)\n{vars}bash -c {} {script} \"$__oracle_s\"\n__oracle_rc=$?\n\
         [ -f \"$__oracle_s/env\" ] && . \"$__oracle_s/env\" 2>/dev/null\n\
         [ -f \"$__oracle_s/cwd\" ] && cd -- \"$(cat \"$__oracle_s/cwd\")\"\n\
         rm -rf \"$__oracle_s\"; unset __oracle_s\n(exit $__oracle_rc)",
        shell_quote(child)
    )
}

async fn oracle(task: &BenchTask, sandbox: &Sandbox, trial_dir: &Path) -> (AgentOutcome, Option<Shell>) {
    let mut log = match std::fs::File::create(trial_dir.join("agent.log")) {
        Ok(f) => f,
        Err(e) => return (failed(FailureMode::AgentError, format!("cannot write agent.log: {e}")), None),
    };
    // (command, what the log shows, wait after it)
    let commands: Vec<(String, String, Duration)> = match &task.solution {
        Solution::Missing => {
            return (failed(FailureMode::AgentError, "the task has no reference solution".into()), None)
        }
        Solution::Script(path) => {
            let bytes = match std::fs::read(path) {
                Ok(b) => b,
                Err(e) => {
                    return (failed(FailureMode::AgentError, format!("{}: cannot read: {e}", path.display())), None)
                }
            };
            let folder = path.parent().filter(|p| p.file_name().is_some_and(|n| n == "solution"));
            let copied = match (folder, path.file_name()) {
                (Some(folder), Some(name)) => sandbox
                    .copy_dir_in(folder, SOLUTION_DIR)
                    .await
                    .map(|()| format!("{SOLUTION_DIR}/{}", name.to_string_lossy())),
                _ => sandbox.write_file(SOLUTION_PATH, &bytes, None).await.map(|_| SOLUTION_PATH.to_string()),
            };
            let script = match copied {
                Ok(s) => shell_quote(&s),
                Err(e) => return (failed(FailureMode::AgentError, format!("cannot copy the solution in: {e}")), None),
            };
            let cmd = solution_command(&script, &task.env.solution, task.run_tests_in_same_shell);
            vec![(cmd, format!("bash {script}"), Duration::ZERO)]
        }
        Solution::Keystrokes(steps) => {
            let waits: Vec<Duration> = steps
                .iter()
                .filter(|s| s.append_enter)
                .map(|s| if s.block { Duration::ZERO } else { s.min_wait })
                .collect();
            Solution::keystroke_commands(steps)
                .into_iter()
                .zip(waits.into_iter().chain(std::iter::repeat(Duration::ZERO)))
                .map(|(cmd, wait)| (cmd.clone(), cmd, wait))
                .collect()
        }
    };
    let mut shell = match Shell::start(sandbox, 256 * 1024).await {
        Ok(s) => s,
        Err(e) => return (failed(FailureMode::AgentError, e.to_string()), None),
    };
    let deadline = Instant::now() + task.agent_timeout;
    let cancel = CancellationToken::new();
    let mut last_code = None;
    for (cmd, shown, wait) in commands {
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = writeln!(log, "$ {shown}");
        let result = match shell.run(&cmd, left, &cancel, &mut |_| {}).await {
            Ok(r) => r,
            Err(e) => return (failed(FailureMode::AgentError, format!("the solution's shell failed: {e}")), None),
        };
        let _ = writeln!(
            log,
            "{}\n[exit {:?} after {:.2} s]",
            result.output.trim_end(),
            result.exit_code,
            result.duration.as_secs_f64()
        );
        if result.timed_out {
            let why =
                format!("the reference solution ran past the agent timeout of {} s", task.agent_timeout.as_secs());
            return (failed(FailureMode::AgentTimeout, why), Some(shell));
        }
        last_code = result.exit_code;
        if !wait.is_zero() {
            tokio::time::sleep(wait.min(deadline.saturating_duration_since(Instant::now()))).await;
        }
    }
    (AgentOutcome { ended: format!("solution exited with {last_code:?}"), ..Default::default() }, Some(shell))
}

async fn ours(
    model: &ModelSource,
    config: &Config,
    hooks: &Hooks,
    task: &BenchTask,
    sandbox: &Sandbox,
    trial_dir: &Path,
    (run_id, episode_id): (&str, &str),
) -> (AgentOutcome, Option<Shell>) {
    let model = match model.get().await {
        Ok(m) => m,
        Err(e) => return (failed(FailureMode::AgentError, e), None),
    };
    let mut request = EpisodeRequest::headless(config, ContainerSource::Started(sandbox.clone()), run_id, episode_id);
    request.limits.wall_clock_secs = task.agent_timeout.as_secs_f64().ceil() as u64;
    request.trajectory = Some(trial_dir.join("trajectory.jsonl"));
    request.hooks = hooks.clone();
    let episode = match build_episode(sandbox.engine(), config, model.as_ref(), request, &mut |_| {}).await {
        Ok(e) => e,
        Err(e) => return (failed(FailureMode::AgentError, e.to_string()), None),
    };
    let tool_format = episode.session.tool_format;
    let mut running = episode.spawn(model);
    let driven = drive(
        &mut running.handle,
        task.instruction.clone(),
        task.agent_timeout + Duration::from_secs(30),
        &trial_dir.join("events.jsonl"),
    )
    .await;
    let (end, last_error, forced) = (driven.end, driven.last_error, driven.forced);
    let parse_error_turns = driven.parse_error_turns;
    // The trial owns the container: finishing only waits for the session, and keeps its
    // shell when the tests are to run in it.
    let shell = if task.run_tests_in_same_shell {
        running.finish_keeping_shell(Duration::from_secs(10)).await.1
    } else {
        running.finish(Duration::from_secs(10)).await;
        None
    };
    let (mut repeated_calls, mut foreign_letter_turns) = (0, 0);
    if let Ok(jsonl) = std::fs::read_to_string(trial_dir.join("trajectory.jsonl")) {
        let trajectory = agent_protocol::trajectory::Trajectory::parse_lenient(&jsonl);
        repeated_calls = trajectory.repeated_calls();
        foreign_letter_turns = u32::try_from(trajectory.foreign_letter_turns()).unwrap_or(u32::MAX);
        let atif = super::atif::to_atif(&jsonl);
        if let Ok(text) = serde_json::to_vec_pretty(&atif) {
            let _ = std::fs::write(trial_dir.join("trajectory.atif.json"), text);
        }
    }
    let Some((reason, turns, usage)) = end else {
        return (
            failed(
                FailureMode::AgentError,
                last_error.unwrap_or_else(|| "the session ended without an end event".into()),
            ),
            shell,
        );
    };
    let failure = match reason {
        EndReason::WallClock => Some((
            FailureMode::AgentTimeout,
            format!("the agent ran past the task's agent timeout of {} s", task.agent_timeout.as_secs()),
        )),
        EndReason::Shutdown if forced => {
            Some((FailureMode::AgentTimeout, "the model did not return by the agent timeout".into()))
        }
        EndReason::Error => Some((FailureMode::AgentError, last_error.unwrap_or_else(|| "the episode failed".into()))),
        EndReason::ContextExhausted => Some((
            FailureMode::ContextLengthExceeded,
            last_error.unwrap_or_else(|| EndReason::ContextExhausted.describe().into()),
        )),
        _ => None,
    };
    let outcome = AgentOutcome {
        failure,
        duration: Duration::ZERO,
        usage,
        turns,
        parse_error_turns: u32::try_from(parse_error_turns.len()).unwrap_or(u32::MAX),
        repeated_calls,
        foreign_letter_turns,
        tool_format: Some(tool_format),
        ended: reason.describe().to_string(),
        end_reason: Some(reason),
    };
    (outcome, shell)
}

/// How a driven episode ended, as its events said.
#[derive(Debug, Default)]
pub struct Driven {
    /// Why it ended, its turns and tokens (none when it sent no end event).
    pub end: Option<(EndReason, u32, TokenUsage)>,
    pub last_error: Option<String>,
    /// Turns whose reply had a parse error.
    pub parse_error_turns: std::collections::BTreeSet<u32>,
    /// Whether the backstop had to shut it down.
    pub forced: bool,
}

/// Gives a spawned episode its one instruction and follows its events to the end,
/// writing them to `events_log` as JSON lines. The session keeps its own wall clock;
/// `backstop` is for a model call that never returns (the session is then shut down).
pub async fn drive(
    handle: &mut agent_core::episode::SessionHandle,
    instruction: String,
    backstop: Duration,
    events_log: &Path,
) -> Driven {
    let mut log = std::fs::File::create(events_log).ok();
    let mut out = Driven::default();
    let _ = handle.ops.send(Op::UserTurn { text: instruction });
    let deadline = tokio::time::sleep(backstop);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            ev = handle.events.recv() => match ev {
                Some(ev) => {
                    if let (Some(f), Ok(line)) = (log.as_mut(), serde_json::to_string(&ev)) {
                        let _ = writeln!(f, "{line}");
                    }
                    match ev {
                        Event::EpisodeEnd { reason, turns, usage, .. } => out.end = Some((reason, turns, usage)),
                        Event::Error { message, .. } => out.last_error = Some(message),
                        Event::ParseError { turn, .. } => {
                            out.parse_error_turns.insert(turn);
                        }
                        _ => {}
                    }
                }
                None => break,
            },
            _ = &mut deadline, if !out.forced => {
                out.forced = true;
                let _ = handle.ops.send(Op::Shutdown);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_solution_runs_as_a_script_with_its_variables() {
        let env = BTreeMap::from([("HINT".to_string(), "a b".to_string())]);
        assert_eq!(solution_command("/oracle/solution.sh", &env, false), "HINT='a b' bash /oracle/solution.sh");
    }

    /// The shared-session form, run by a local bash as the session's `eval` would run it:
    /// the script's exports and directory reach the session, its `set -e` and `exit` do
    /// not end it, and its exit status is kept.
    #[test]
    fn a_shared_solution_leaves_its_exports_and_directory_in_the_session() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("solution.sh");
        std::fs::write(&script, "set -e\nexport ANSWER=\"forty two\"\nNOT_EXPORTED=1\ncd /tmp\nexit 3\n").unwrap();
        let env = BTreeMap::from([("HINT".to_string(), "x".to_string())]);
        let cmd = solution_command(&script.display().to_string(), &env, true);
        let session = format!(
            "eval {}\necho \"rc=$? answer=$ANSWER other=${{NOT_EXPORTED:-unset}} pwd=$PWD e=${{-//[^e]/}}\"\nfalse\necho alive",
            shell_quote(&cmd)
        );
        let Ok(out) = std::process::Command::new("bash").args(["--noprofile", "--norc", "-c", &session]).output()
        else {
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("rc=3 answer=forty two other=unset pwd=/tmp e=\n"), "{text}");
        assert!(text.contains("alive"), "{text}");
    }
}
