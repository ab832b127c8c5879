use super::*;

fn write(dir: &Path, name: &str, text: &str) {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn tb1_errors_name_the_file_and_field() {
    let d = tempfile::tempdir().unwrap();
    let e = BenchTask::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("task.yaml") && e.contains("missing"), "{e}");
    write(d.path(), "task.yaml", "difficulty: easy\n");
    let e = BenchTask::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("task.yaml") && e.contains("`instruction`"), "{e}");
    write(d.path(), "task.yaml", "instruction: do it\nmax_agent_timeout_sec: soon\n");
    let e = BenchTask::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("`max_agent_timeout_sec`"), "{e}");
    write(d.path(), "task.yaml", "instruction: do it\n");
    let e = BenchTask::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("Dockerfile"), "{e}");
    write(d.path(), "Dockerfile", "FROM x\n");
    let e = BenchTask::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("run-tests.sh"), "{e}");
    write(d.path(), "run-tests.sh", "pytest\n");
    write(d.path(), "tests/test_weights.json", "{\"test_a\": 2, \"test_b\": 1}");
    write(d.path(), "solution.yaml", "- command: echo hi\n");
    let t = BenchTask::load(d.path()).unwrap();
    assert_eq!(t.instruction, "do it");
    assert_eq!(t.agent_timeout, Duration::from_secs(360));
    assert_eq!(t.test_weights.unwrap()["test_a"], 2.0);
    assert!(matches!(t.solution, Solution::Keystrokes(ref k) if k.len() == 1));
}

#[test]
fn tb2_layout_loads() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "task.toml", "[metadata]\ndifficulty = \"hard\"\n[verifier]\ntimeout_sec = 30.0\n");
    write(d.path(), "instruction.md", "Make it so.\n");
    write(d.path(), "environment/Dockerfile", "FROM x\n");
    write(d.path(), "tests/test.sh", "echo 1 > /logs/verifier/reward.txt\n");
    write(d.path(), "solution/solve.sh", "true\n");
    let t = BenchTask::load(d.path()).unwrap();
    assert_eq!(t.layout, Layout::Tb2);
    assert_eq!(t.difficulty.as_deref(), Some("hard"));
    assert_eq!(t.test_timeout, Duration::from_secs(30));
    assert!(matches!(t.solution, Solution::Script(_)));
    write(d.path(), "task.toml", "[verifier]\ntimeout_sec = -1\n");
    let e = BenchTask::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("verifier.timeout_sec"), "{e}");
}

#[test]
fn tb2_environment_verifier_and_solution_settings() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "task.toml",
        "[environment]\nnetwork_mode = \"no-network\"\nbuild_timeout_sec = 120.0\n\
         [environment.env]\nGREETING = \"hi\"\n[[environment.mcp_servers]]\nname = \"docs\"\n\
         transport = \"sse\"\nurl = \"http://docs:8000/sse\"\n\
         [verifier.env]\nCHECK = \"1\"\n[solution.env]\nHINT = \"x\"\n",
    );
    write(d.path(), "instruction.md", "Do it.\n");
    write(d.path(), "environment/Dockerfile", "FROM x\n");
    write(d.path(), "environment/docker-compose.yaml", "services:\n  main:\n    build: .\n    restart: always\n");
    write(d.path(), "tests/test.sh", "true\n");
    let t = BenchTask::load(d.path()).unwrap();
    assert!(!t.internet);
    assert_eq!(t.build_timeout, Some(Duration::from_secs(120)));
    assert_eq!(t.env.agent["GREETING"], "hi");
    assert_eq!(t.env.verifier["CHECK"], "1");
    assert_eq!(t.env.solution["HINT"], "x");
    assert_eq!(t.mcp_servers[0].url.as_deref(), Some("http://docs:8000/sse"));
    assert_eq!(t.notices.len(), 2, "{:?}", t.notices);
    assert_eq!(t.notices[0], "compose: ignoring services.main.restart");
    assert!(t.notices[1].contains("does not support MCP"), "{:?}", t.notices);
    assert!(!t.run_tests_in_same_shell);
}

#[test]
fn a_tb2_compose_file_that_only_adds_a_sidecar_loads() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "task.toml", "[environment.env]\nGREETING = \"hello\"\n");
    write(d.path(), "instruction.md", "Do it.\n");
    write(d.path(), "environment/Dockerfile", "FROM x\n");
    write(
        d.path(),
        "environment/docker-compose.yaml",
        "services:\n  main:\n    depends_on: [web]\n    environment:\n      - MSG=${GREETING:-bye}\n  web:\n    image: y\n",
    );
    write(d.path(), "tests/test.sh", "true\n");
    let t = BenchTask::load(d.path()).unwrap();
    let main = t.environment.client().unwrap();
    assert!(matches!(&main.image, ImageSource::Build { dockerfile, .. } if dockerfile.ends_with("Dockerfile")));
    assert_eq!(main.environment, ["MSG=hello"]);
    assert_eq!(t.environment.services.len(), 2);
    // Harbor builds `main` from environment/Dockerfile, also when the file names an image.
    std::fs::remove_file(d.path().join("environment/Dockerfile")).unwrap();
    let e = BenchTask::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("environment/./Dockerfile: missing") && e.contains("Harbor builds `main`"), "{e}");
}

#[test]
fn tb2_healthcheck_artifacts_and_the_keys_not_honoured() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "task.toml",
        "schema_version = \"1.4\"\nartifacts = [\"/app/out\", {source = \"/srv/db\", service = \"db\"}]\n\
         [task]\nname = \"o/t\"\n[agent]\nuser = \"agent\"\n\
         [environment]\ncpus = 2\nos = \"linux\"\n[environment.healthcheck]\ncommand = \"test -f /tmp/up\"\n",
    );
    write(d.path(), "instruction.md", "Do it.\n");
    write(d.path(), "environment/Dockerfile", "FROM x\n");
    write(d.path(), "tests/test.sh", "true\n");
    let t = BenchTask::load(d.path()).unwrap();
    assert_eq!(t.healthcheck.as_ref().map(|h| h.command.as_str()), Some("test -f /tmp/up"));
    let dests: Vec<&str> = t.artifacts.iter().map(|a| a.destination.as_str()).collect();
    assert_eq!(dests, ["out", "db"]);
    assert_eq!(t.notices.len(), 2, "{:?}", t.notices);
    assert!(t.notices[0].starts_with("artifacts[1]: ignoring service"), "{:?}", t.notices);
    assert_eq!(t.notices[1], "task.toml: ignoring agent.user, environment.cpus (not honoured by this harness)");
    write(d.path(), "task.toml", "[environment.healthcheck]\ncommand = \"\"\n");
    let e = BenchTask::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("environment.healthcheck") && e.contains("empty"), "{e}");
    write(d.path(), "task.toml", "artifacts = [\"/app/../etc\"]\n");
    let e = BenchTask::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("artifacts[0]") && e.contains(".."), "{e}");
}

#[test]
fn tb1_tests_may_run_in_the_agents_shell() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "task.yaml", "instruction: do it\nrun_tests_in_same_shell: true\n");
    write(d.path(), "Dockerfile", "FROM x\n");
    write(d.path(), "run-tests.sh", "pytest\n");
    let t = BenchTask::load(d.path()).unwrap();
    assert!(t.run_tests_in_same_shell && t.internet && t.notices.is_empty());
    write(d.path(), "task.yaml", "instruction: do it\n");
    assert!(!BenchTask::load(d.path()).unwrap().run_tests_in_same_shell);
}

/// A set of the shared tasks under `$AGENT_SHARED`; `None` (the test is skipped, with
/// a line saying so) when the variable is unset, as in a plain `cargo test`.
fn shared_tasks(set: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("AGENT_SHARED").map(|d| PathBuf::from(d).join(set)).filter(|d| d.is_dir());
    if dir.is_none() {
        eprintln!("skipped: AGENT_SHARED does not name a folder with {set}/ (scripts/test.sh sets it)");
    }
    dir
}

#[test]
fn every_shared_tb1_task_loads() {
    let Some(root) = shared_tasks("tb1-tasks") else { return };
    let entries = discover(&[root]).unwrap();
    assert_eq!(entries.len(), 15);
    for e in &entries {
        let t = e.task.as_ref().unwrap_or_else(|err| panic!("{}: {err}", e.name));
        assert!(t.environment.client().is_some());
        assert!(t.notices.is_empty(), "{}: {:?}", e.name, t.notices);
    }
    let scraper = entries.iter().find(|e| e.name == "simple-web-scraper").unwrap();
    assert_eq!(scraper.task.as_ref().unwrap().environment.services.len(), 2);
}

/// The same tasks as Harbor's `harbor task migrate` writes them: the agent's service
/// is `main` and the build contexts use Harbor's variables.
#[test]
fn every_shared_tb2_task_loads() {
    let Some(root) = shared_tasks("tb2-tasks") else { return };
    let entries = discover(std::slice::from_ref(&root)).unwrap();
    assert_eq!(entries.len(), 15);
    for e in &entries {
        let t = e.task.as_ref().unwrap_or_else(|err| panic!("{}: {err}", e.name));
        assert_eq!(t.environment.client().map(|s| s.name.as_str()), Some("main"), "{}", e.name);
        // Everything Terminal-Bench 2's files ask for is honoured or the harness's business.
        assert!(t.notices.is_empty(), "{}: {:?}", e.name, t.notices);
        assert!(t.internet && t.build_timeout == Some(Duration::from_secs(600)), "{}", e.name);
    }
    let extract = entries.iter().find(|e| e.name == "extract-safely").unwrap().task.as_ref().unwrap();
    let tmpfs = agent_sandbox::Mount::Tmpfs { target: "/root".into(), options: "size=100M,mode=755".into() };
    assert_eq!(extract.environment.client().unwrap().mounts, [tmpfs]);
    let scraper = entries.iter().find(|e| e.name == "simple-web-scraper").unwrap().task.as_ref().unwrap();
    let names: Vec<&str> = scraper.environment.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["server", "main"]);
    let main = scraper.environment.client().unwrap();
    assert_eq!(main.environment, ["TEST_DIR=/tests"]);
    assert_eq!(
        main.image,
        ImageSource::Build {
            context: root.join("simple-web-scraper/environment/."),
            dockerfile: root.join("simple-web-scraper/environment/./Dockerfile")
        }
    );
}
