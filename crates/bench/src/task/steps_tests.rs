use super::*;

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A two-step task: the first step has its own tests and solution, the second uses the
/// task's; `extra` is added to `task.toml`.
fn two_steps(extra: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "task.toml",
        &format!(
            "[agent]\ntimeout_sec = 100.0\n[verifier]\ntimeout_sec = 50.0\n[verifier.env]\nA = \"task\"\nB = \"task\"\n\
             [[steps]]\nname = \"make-file\"\n[steps.agent]\ntimeout_sec = 10.0\n[steps.verifier.env]\nB = \"step\"\n\
             [[steps]]\nname = \"append\"\nmin_reward = 1.0\n{extra}"
        ),
    );
    write(d.path(), "environment/Dockerfile", "FROM x\n");
    write(d.path(), "tests/test.sh", "echo shared\n");
    write(d.path(), "tests/helper.py", "x = 1\n");
    write(d.path(), "solution/solve.sh", "echo task\n");
    write(d.path(), "steps/make-file/instruction.md", "Create /app/a.txt.\n");
    write(d.path(), "steps/make-file/tests/test.sh", "echo own\n");
    write(d.path(), "steps/make-file/solution/solve.sh", "touch /app/a.txt\n");
    write(d.path(), "steps/make-file/workdir/setup.sh", "mkdir -p /app\n");
    write(d.path(), "steps/append/instruction.md", "Append a line.\n");
    d
}

#[test]
fn a_multi_step_task_loads_each_steps_files_and_settings() {
    let d = two_steps("");
    let t = BenchTask::load(d.path()).unwrap();
    assert_eq!(t.steps.len(), 2);
    assert_eq!(t.step_reward, StepReward::Mean);
    assert_eq!(t.instruction, "Create /app/a.txt.\n", "no task-level instruction.md is needed");
    let (first, second) = (&t.steps[0], &t.steps[1]);
    assert_eq!(first.name, "make-file");
    assert_eq!((first.agent_timeout, first.test_timeout), (Duration::from_secs(10), Duration::from_secs(50)));
    assert_eq!(first.tests_dirs, [d.path().join("tests"), d.path().join("steps/make-file/tests")]);
    assert_eq!(first.test_script, d.path().join("steps/make-file/tests/test.sh"));
    assert_eq!(first.solution, Solution::Script(d.path().join("steps/make-file/solution/solve.sh")));
    assert_eq!(first.workdir, Some(d.path().join("steps/make-file/workdir")));
    assert_eq!(first.verifier_env, BTreeMap::from([("A".into(), "task".into()), ("B".into(), "step".into())]));
    assert_eq!(first.min_reward, None);
    // The second step falls back to the task's tests, solution and timeouts.
    assert_eq!(second.tests_dirs, [d.path().join("tests")]);
    assert_eq!(second.test_script, d.path().join("tests/test.sh"));
    assert_eq!(second.solution, Solution::Script(d.path().join("solution/solve.sh")));
    assert_eq!(second.agent_timeout, Duration::from_secs(100));
    assert_eq!(second.workdir, None);
    assert_eq!(second.min_reward, Some(MinReward::Reward(1.0)));
    assert!(t.notices.is_empty(), "{:?}", t.notices);
}

#[test]
fn a_step_view_is_the_task_as_that_step_runs() {
    let d = two_steps("");
    let t = BenchTask::load(d.path()).unwrap();
    let view = t.step_view(&t.steps[0]);
    assert_eq!(view.instruction, "Create /app/a.txt.\n");
    assert_eq!(view.agent_timeout, Duration::from_secs(10));
    assert_eq!(view.tests_dir, d.path().join("tests"));
    assert_eq!(view.tests_overlays, [d.path().join("steps/make-file/tests")]);
    assert_eq!(view.env.verifier["B"], "step");
    assert!(view.steps.is_empty());
    let view = t.step_view(&t.steps[1]);
    assert!(view.tests_overlays.is_empty() && view.env.verifier["B"] == "task");
}

#[test]
fn a_step_with_its_own_solution_folder_gets_no_other() {
    let d = two_steps("");
    std::fs::remove_file(d.path().join("steps/make-file/solution/solve.sh")).unwrap();
    let t = BenchTask::load(d.path()).unwrap();
    assert_eq!(t.steps[0].solution, Solution::Missing);
    std::fs::remove_dir_all(d.path().join("solution")).unwrap();
    assert_eq!(BenchTask::load(d.path()).unwrap().steps[1].solution, Solution::Missing);
}

#[test]
fn keys_this_harness_does_not_honour_are_named_once() {
    let d = two_steps("retries = 2\n[steps.agent]\nuser = \"agent\"\n");
    let t = BenchTask::load(d.path()).unwrap();
    assert_eq!(t.notices, ["multi-step: ignoring steps.append.retries, steps.append.agent.user"]);
}

#[test]
fn a_steps_healthcheck_and_artifacts_are_read() {
    let d = two_steps(
        "artifacts = [\"/app/out\", {source = \"/tmp/x\", destination = \"logs/x\"}]\n\
         [steps.healthcheck]\ncommand = \"test -f /tmp/up\"\nretries = 5\n",
    );
    let t = BenchTask::load(d.path()).unwrap();
    assert!(t.notices.is_empty(), "{:?}", t.notices);
    let step = &t.steps[1];
    let hc = step.healthcheck.as_ref().unwrap();
    assert_eq!((hc.command.as_str(), hc.retries), ("test -f /tmp/up", 5));
    let dests: Vec<&str> = step.artifacts.iter().map(|a| a.destination.as_str()).collect();
    assert_eq!(dests, ["out", "logs/x"]);
    assert!(t.steps[0].healthcheck.is_none() && t.steps[0].artifacts.is_empty());
    write(d.path(), "task.toml", "[[steps]]\nname = \"append\"\nhealthcheck = {interval_sec = 1}\n");
    let e = BenchTask::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("steps[0].healthcheck") && e.contains("command"), "{e}");
}

/// How a case breaks the task in its folder.
type Break<'a> = &'a dyn Fn(&Path);

#[test]
fn what_a_step_lacks_is_named() {
    let cases: [(&str, Break, &str); 6] = [
        ("", &|p| std::fs::remove_file(p.join("steps/append/instruction.md")).unwrap(), "steps/append/instruction.md"),
        ("", &|p| std::fs::remove_file(p.join("tests/test.sh")).unwrap(), "step `append` needs"),
        ("", &|p| write(p, "steps/append/instruction.md", "  \n"), "non-empty instruction.md"),
        ("multi_step_reward_strategy = \"max\"\n", &|_| {}, "multi_step_reward_strategy"),
        ("", &|p| write(p, "task.toml", "[[steps]]\nname = \"../up\"\n"), "steps[0].name"),
        (
            "",
            &|p| write(p, "task.toml", "[[steps]]\nname = \"append\"\n[[steps]]\nname = \"append\"\n"),
            "a second step named `append`",
        ),
    ];
    for (prefix, break_it, want) in cases {
        let d = two_steps("");
        if !prefix.is_empty() {
            let text = std::fs::read_to_string(d.path().join("task.toml")).unwrap();
            write(d.path(), "task.toml", &format!("{prefix}{text}"));
        }
        break_it(d.path());
        let e = BenchTask::load(d.path()).unwrap_err().to_string();
        assert!(e.contains(want), "{want}: {e}");
    }
    let d = two_steps("");
    let text = std::fs::read_to_string(d.path().join("task.toml")).unwrap();
    write(d.path(), "task.toml", &text.replace("min_reward = 1.0", "min_reward = \"high\""));
    let e = BenchTask::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("steps[1].min_reward"), "{e}");
}

#[test]
fn a_step_file_linked_out_of_the_task_is_refused() {
    let d = two_steps("");
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.txt", "MARKER");
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), d.path().join("steps/append/secret.txt")).unwrap();
    let e = BenchTask::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("steps/append/secret.txt is a link to") && e.contains("outside the task folder"), "{e}");
}

#[test]
fn min_reward_gates_the_reward_or_each_named_one() {
    let rewards = BTreeMap::from([("reward".to_string(), 0.5), ("style".to_string(), 1.0)]);
    assert_eq!(MinReward::Reward(0.5).missed(&rewards), None);
    assert!(MinReward::Reward(1.0).missed(&rewards).unwrap().contains("`reward` = 0.5 is below min_reward 1"));
    let named = MinReward::Named(BTreeMap::from([("style".to_string(), 1.0), ("speed".to_string(), 0.1)]));
    assert!(named.missed(&rewards).unwrap().contains("no `speed`"));
    assert_eq!(min_reward(&toml::Value::Integer(1)), Some(MinReward::Reward(1.0)));
}

#[test]
fn the_task_reward_is_the_mean_of_the_steps_that_scored_or_the_last_ones() {
    assert_eq!(StepReward::Mean.combine(&[Some(1.0), None, Some(0.0)]), Some(0.5));
    assert_eq!(StepReward::Mean.combine(&[None]), None);
    assert_eq!(StepReward::Final.combine(&[Some(1.0), Some(0.25)]), Some(0.25));
    assert_eq!(StepReward::Final.combine(&[Some(1.0), None]), None);
    assert_eq!(StepReward::Final.combine(&[]), None);
}
