//! The attack corpus of a downloaded task folder (issue 48): a task is hostile input,
//! and nothing a trial copies or reads from it may lead out of it. The real binary, a
//! real engine, `agent bench --agent oracle`; each case ends in a refusal naming the link
//! or field and a host marker that appears nowhere in the run's output, with the honest
//! case (a link that stays inside the task) beside it. Refusals come when the task
//! loads, before any container starts.

use std::os::unix::fs::symlink;
use std::path::Path;

use crate::bench::{bench, run_id, trial};
use crate::support;

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A marker no file holds by chance.
fn marker(tag: &str) -> String {
    format!("{tag}-{}", uuid::Uuid::new_v4().simple())
}

/// Every file under `dir` that holds `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let kind = e.file_type().unwrap();
            if kind.is_dir() {
                stack.push(p);
            } else if kind.is_file() && String::from_utf8_lossy(&std::fs::read(&p).unwrap()).contains(needle) {
                found.push(p.display().to_string());
            }
        }
    }
    found
}

/// hello-world's TB1 layout (task.yaml, docker-compose.yaml, Dockerfile, run-tests.sh,
/// solution.sh, tests/) on the base image, whose test also asserts that
/// `$TEST_DIR/secret.txt` holds `expected`.
fn tb1_hello(dir: &Path, expected: &str) {
    write(
        dir,
        "task.yaml",
        "instruction: |-\n  Create a file called hello.txt in the current directory. Write \"Hello, world!\" to it.\n\
         difficulty: easy\ncategory: file-operations\nmax_agent_timeout_sec: 60\nmax_test_timeout_sec: 30\n",
    );
    write(
        dir,
        "docker-compose.yaml",
        "services:\n  client:\n    build:\n      dockerfile: Dockerfile\n    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}\n    \
         command: [ \"sh\", \"-c\", \"sleep infinity\" ]\n    environment:\n      - TEST_DIR=${T_BENCH_TEST_DIR}\n",
    );
    write(dir, "Dockerfile", "FROM agent-base:bookworm\nWORKDIR /app\n");
    write(dir, "run-tests.sh", "#!/bin/bash\npython3 -m pytest $TEST_DIR/test_outputs.py -rA\n");
    write(dir, "solution.sh", "#!/bin/bash\necho \"Hello, world!\" > hello.txt\n");
    write(
        dir,
        "tests/test_outputs.py",
        &format!(
            "import os\nfrom pathlib import Path\n\n\
             def test_hello_file_content():\n    assert Path(\"/app/hello.txt\").read_text().strip() == \"Hello, world!\"\n\n\
             def test_secret_holds_the_host_text():\n    \
             assert Path(os.environ[\"TEST_DIR\"], \"secret.txt\").read_text() == \"{expected}\"\n"
        ),
    );
}

/// The reason a trial failed, which must name what was refused.
fn reason<'a>(r: &'a serde_json::Value, task: &str) -> &'a str {
    trial(r, task, 0)["reason"].as_str().unwrap_or_default()
}

#[test]
fn a_tb1_test_file_linked_to_a_host_file_is_refused_and_its_text_reaches_no_container() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let d = tempfile::tempdir().unwrap();
    let (home, tasks) = (d.path().join("home"), d.path().join("tasks"));
    let secret = marker("HOST-SECRET");
    write(&home, "secret.txt", &secret);
    // The attack, as reported: tests/secret.txt is a link to a file in the host's home.
    let attack = tasks.join("sec-link-out");
    tb1_hello(&attack, &secret);
    symlink(home.join("secret.txt"), attack.join("tests/secret.txt")).unwrap();
    // The honest twin: a link that stays inside the task still copies as its content.
    let inside = marker("TASK-DATA");
    let honest = tasks.join("sec-link-in");
    tb1_hello(&honest, &inside);
    write(&honest, "data/secret.txt", &inside);
    symlink("../data/secret.txt", honest.join("tests/secret.txt")).unwrap();

    let out = d.path().join("out");
    let id = run_id("sec-tb1");
    let (code, text, r) = bench(&out, &id, &["--agent", "oracle"], &[&tasks]);
    assert_eq!(code, 0, "{text}");
    let why = reason(&r, "sec-link-out");
    let named = format!(
        "tests/secret.txt is a link to {}, outside the task folder: refused",
        home.join("secret.txt").display()
    );
    assert!(why.contains(&named), "{why}\n{r:#}");
    assert_eq!(trial(&r, "sec-link-out", 0)["resolved"], false, "{r:#}");
    assert_eq!(trial(&r, "sec-link-in", 0)["resolved"], true, "the honest twin: {text}\n{r:#}");
    assert!(!text.contains(&secret), "{text}");
    assert_eq!(files_holding(&out, &secret), Vec::<String>::new(), "the host file's text reached the run's output");
    support::assert_nothing_left(&id);
    support::remove_bench_images(&["sec-link-out", "sec-link-in"]);
}

#[test]
fn a_tb2_solution_or_test_file_linked_out_of_the_task_is_refused_naming_the_link() {
    let d = tempfile::tempdir().unwrap();
    let (home, tasks) = (d.path().join("home"), d.path().join("tasks"));
    let secret = marker("HOST-SCRIPT");
    write(&home, "solve.sh", &format!("#!/bin/bash\necho {secret} > /app/greeting.txt\n"));
    write(&home, "notes.txt", &secret);
    let solve = tasks.join("sec-solve-link");
    support::copy_tree(&support::fixture("bench/tb2-hello"), &solve);
    std::fs::remove_file(solve.join("solution/solve.sh")).unwrap();
    symlink(home.join("solve.sh"), solve.join("solution/solve.sh")).unwrap();
    let test = tasks.join("sec-test-link");
    support::copy_tree(&support::fixture("bench/tb2-hello"), &test);
    symlink(home.join("notes.txt"), test.join("tests/notes.txt")).unwrap();

    let out = d.path().join("out");
    let id = run_id("sec-tb2");
    let (code, text, r) = bench(&out, &id, &["--agent", "oracle"], &[&tasks]);
    assert_eq!(code, 0, "{text}");
    let want =
        format!("solution/solve.sh is a link to {}, outside the task folder: refused", home.join("solve.sh").display());
    assert!(reason(&r, "sec-solve-link").contains(&want), "{r:#}");
    let want =
        format!("tests/notes.txt is a link to {}, outside the task folder: refused", home.join("notes.txt").display());
    assert!(reason(&r, "sec-test-link").contains(&want), "{r:#}");
    assert_eq!(r["n_resolved"].as_u64(), Some(0), "{r:#}");
    assert!(!text.contains(&secret), "{text}");
    assert_eq!(files_holding(&out, &secret), Vec::<String>::new());
    // Refused at load: no container was started.
    support::assert_nothing_left(&id);
}

#[test]
fn a_compose_build_context_or_dockerfile_escaping_the_task_is_refused_naming_the_field() {
    let d = tempfile::tempdir().unwrap();
    let (home, tasks) = (d.path().join("home"), d.path().join("tasks"));
    let secret = marker("HOST-CONTEXT");
    write(&home, "Dockerfile", "FROM agent-base:bookworm\nCOPY . /stolen\n");
    write(&home, "id_rsa", &secret);
    // TB2: the build context climbs out of the task (`../..` from environment/ is the
    // folder holding every task, `../../..` the one holding `home/`).
    let context = tasks.join("sec-context-up");
    support::copy_tree(&support::fixture("bench/tb2-hello"), &context);
    write(
        &context,
        "environment/docker-compose.yaml",
        "services:\n  main:\n    build:\n      context: ../../..\n      dockerfile: home/Dockerfile\n",
    );
    // TB1: the Dockerfile lies outside the task.
    let dockerfile = tasks.join("sec-dockerfile-out");
    tb1_hello(&dockerfile, "x");
    let rel = "../../home/Dockerfile";
    write(
        &dockerfile,
        "docker-compose.yaml",
        &format!("services:\n  client:\n    build:\n      context: .\n      dockerfile: {rel}\n"),
    );

    let out = d.path().join("out");
    let id = run_id("sec-ctx");
    let (code, text, r) = bench(&out, &id, &["--agent", "oracle"], &[&tasks]);
    assert_eq!(code, 0, "{text}");
    let why = reason(&r, "sec-context-up");
    assert!(
        why.contains("docker-compose.yaml")
            && why.contains("`services.main.build.context`")
            && why.contains("`../../..`: it leads to"),
        "{why}"
    );
    let why = reason(&r, "sec-dockerfile-out");
    assert!(
        why.contains("docker-compose.yaml") && why.contains("`services.client.build.dockerfile`") && why.contains(rel),
        "{why}"
    );
    assert_eq!(r["n_resolved"].as_u64(), Some(0), "{r:#}");
    assert_eq!(files_holding(&out, &secret), Vec::<String>::new());
    support::assert_nothing_left(&id);
    // Nothing was built from the host folder.
    let images =
        std::process::Command::new("docker").args(["images", "-q", "agent-bench-sec-context-up-*"]).output().unwrap();
    assert!(images.stdout.is_empty(), "{}", String::from_utf8_lossy(&images.stdout));
}
