//! Tests of the generator as a whole: determinism, the split, the TB1 layout, and the
//! reference solution against the task's own tests (run on the host with `/app` moved
//! into a temporary folder, when bash and python3 are there).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use super::*;
use crate::task::BenchTask;

fn opts(families: &[&str], levels: &[u8], split: Split, seed: u64, count: usize) -> GenerateOptions {
    GenerateOptions {
        families: families.iter().map(|f| f.to_string()).collect(),
        family_dirs: Vec::new(),
        levels: levels.to_vec(),
        split,
        seed,
        count,
    }
}

/// Every file under `dir`: relative path → bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(p.strip_prefix(root).unwrap().display().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn the_same_seed_writes_byte_identical_folders() {
    let o = opts(&[], &[1, 2, 3], Split::Train, 42, 30);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_tasks(a.path(), &generate(&o).unwrap(), o.split, o.seed).unwrap();
    write_tasks(b.path(), &generate(&o).unwrap(), o.split, o.seed).unwrap();
    let (ta, tb) = (tree(a.path()), tree(b.path()));
    assert!(ta.len() > 30 * 6, "{}", ta.len());
    assert_eq!(ta, tb);
    assert!(ta.contains_key("manifest.json"));
}

#[test]
fn other_seeds_and_indexes_give_other_instances() {
    for f in &families() {
        for level in 1..=MAX_LEVEL {
            let mut seen = BTreeSet::new();
            for seed in 0..20 {
                for index in 0..3 {
                    let t = instance(f, level, Split::Train, seed, index).unwrap();
                    assert!(seen.insert(t.files.clone()), "{} repeats an instance", t.name);
                }
            }
        }
    }
}

#[test]
fn train_and_heldout_share_no_parameter() {
    for f in &families() {
        let mut values: BTreeMap<Split, BTreeSet<String>> = BTreeMap::new();
        for split in [Split::Train, Split::Heldout] {
            for level in 1..=MAX_LEVEL {
                for seed in 0..150 {
                    let t = instance(f, level, split, seed, (seed % 7) as u32).unwrap();
                    assert!(!t.params.is_empty(), "{}", t.name);
                    values.entry(split).or_default().extend(t.params.values().flatten().cloned());
                }
            }
        }
        let (train, held) = (&values[&Split::Train], &values[&Split::Heldout]);
        let shared: Vec<&String> = train.intersection(held).collect();
        assert!(shared.is_empty(), "{}: both splits use {shared:?}", f.name);
        // The pools are not degenerate: each split sees a real variety.
        assert!(train.len() >= 20 && held.len() >= 20, "{}: {} / {}", f.name, train.len(), held.len());
    }
}

#[test]
fn family_word_lists_are_clean() {
    use super::vocab::tests::check_list;
    let lists: &[(&str, &[&str])] = &[
        ("json NUM_FIELDS", json_edit::NUM_FIELDS),
        ("json TEXT_FIELDS", json_edit::TEXT_FIELDS),
        ("json SECTIONS", json_edit::SECTIONS),
        ("json CATEGORY_KEYS", json_edit::CATEGORY_KEYS),
        ("json AMOUNT_KEYS", json_edit::AMOUNT_KEYS),
        ("csv NAME_COLUMNS", csv_column::NAME_COLUMNS),
        ("csv CATEGORY_COLUMNS", csv_column::CATEGORY_COLUMNS),
        ("csv NUMBER_COLUMNS", csv_column::NUMBER_COLUMNS),
        ("fix PROGRAMS", fix_script::PROGRAMS),
        ("fix ACC_NAMES", fix_script::ACC_NAMES),
        ("fix LIST_NAMES", fix_script::LIST_NAMES),
        ("fix FN_NAMES", fix_script::FN_NAMES),
        ("pipeline STATUSES", pipeline::STATUSES),
    ];
    for (name, list) in lists {
        check_list(name, list);
        assert!(list.len() >= 4, "{name} is too short to halve");
    }
    for kinds in [fix_script::CRASH_BUGS, fix_script::LOGIC_BUGS, fix_script::BASH_BUGS] {
        assert_eq!(kinds.len(), 4, "two bug kinds per split and level");
    }
}

#[test]
fn every_task_is_a_loadable_tb1_task_that_names_what_its_tests_check() {
    let dir = tempfile::tempdir().unwrap();
    let o = opts(&[], &[1, 2, 3], Split::Heldout, 3, families().len() * 3);
    let tasks = generate(&o).unwrap();
    write_tasks(dir.path(), &tasks, o.split, o.seed).unwrap();
    let found = crate::task::discover(&[dir.path().to_path_buf()]).unwrap();
    assert_eq!(found.len(), tasks.len());
    for t in &tasks {
        let loaded = BenchTask::load(&dir.path().join(&t.name)).unwrap_or_else(|e| panic!("{}: {e}", t.name));
        assert_eq!(loaded.instruction.trim(), t.instruction.trim(), "{}", t.name);
        assert!(matches!(loaded.solution, crate::solution::Solution::Script(_)), "{}", t.name);
        let docker = &t.files["Dockerfile"];
        let head = format!("FROM {}\nWORKDIR /app\n{}\n", tb1::BASE_IMAGE, tb1::PYTEST_LAYER);
        assert!(docker.contains(&head), "{docker}");
        // A family's packages are the one layer between pytest's and the files.
        let after = &docker[docker.find(&head).unwrap() + head.len()..];
        let after = if after.starts_with(tb1::PACKAGES_PREFIX) { after.split_once('\n').unwrap().1 } else { after };
        let has_files = t.files.keys().any(|k| k.starts_with("files/"));
        assert_eq!(after.starts_with("COPY files/ /app/\n"), has_files, "{docker}");
        let tests = &t.files["tests/test_outputs.py"];
        assert!(tests.matches("\ndef test_").count() >= 2, "{}: {tests}", t.name);
        // Every /app/NAME the tests read is named in the instruction (the input files
        // and parameters a family file's tests start with are data, not reads).
        let body = match tests.find("\nPARAMS = ") {
            Some(at) => tests[at + 1..].split_once('\n').map_or("", |(_, rest)| rest),
            None => tests.as_str(),
        };
        for (i, _) in body.match_indices("/app/") {
            let top: String =
                body[i + 5..].chars().take_while(|c| c.is_ascii_alphanumeric() || "._-".contains(*c)).collect();
            assert!(t.instruction.contains(&format!("/app/{top}")), "{}: /app/{top} is not in the instruction", t.name);
        }
    }
}

#[test]
fn mixed_sets_cycle_families_then_levels() {
    let n = families().len();
    let tasks = generate(&opts(&[], &[1, 3], Split::Train, 9, 2 * n + 1)).unwrap();
    assert_eq!(tasks[0].family, families()[0].name);
    assert_eq!(tasks[1].family, families()[1].name);
    assert_eq!((tasks[0].level, tasks[n].level, tasks[2 * n].level), (1, 3, 1));
    assert_eq!(tasks[0].name, format!("{}-l1-train-9-0000", families()[0].name));
    let one = generate(&opts(&["csv-column"], &[], Split::Heldout, 1, 2)).unwrap();
    assert_eq!(one[1].name, "csv-column-l1-heldout-1-0001");
}

#[test]
fn bad_requests_name_what_is_wrong() {
    let e = generate(&opts(&["nope"], &[], Split::Train, 0, 1)).unwrap_err().to_string();
    assert!(e.contains("`nope`") && e.contains("count-lines"), "{e}");
    let e = generate(&opts(&[], &[4], Split::Train, 0, 1)).unwrap_err().to_string();
    assert!(e.contains("level 4"), "{e}");
    assert!(matches!(generate(&opts(&[], &[], Split::Train, 0, 0)), Err(GenerateError::NoTasks)));
}

#[test]
fn a_folder_that_is_not_ours_is_never_touched() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    let tasks = generate(&opts(&["pipeline"], &[], Split::Train, 1, 2)).unwrap();
    let e = write_tasks(dir.path(), &tasks, Split::Train, 1).unwrap_err();
    assert!(matches!(e, GenerateError::NotOurs { .. }), "{e}");
    assert_eq!(tree(dir.path()).len(), 1);
    // A manifest of someone else's tool is not ours either.
    std::fs::write(dir.path().join(MANIFEST), "{\"generator\": \"other\"}").unwrap();
    assert!(write_tasks(dir.path(), &tasks, Split::Train, 1).is_err());
    assert_eq!(std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(), "mine");
}

#[test]
fn a_folder_of_ours_is_replaced_and_a_stranger_inside_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let five = generate(&opts(&[], &[], Split::Train, 1, 5)).unwrap();
    write_tasks(dir.path(), &five, Split::Train, 1).unwrap();
    std::fs::write(dir.path().join("README"), "kept").unwrap();
    let two = generate(&opts(&[], &[], Split::Train, 2, 2)).unwrap();
    let m = write_tasks(dir.path(), &two, Split::Train, 2).unwrap();
    assert_eq!(m.tasks.len(), 2);
    assert_eq!(Manifest::load(dir.path()).unwrap(), m);
    let names: BTreeSet<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
    let want: BTreeSet<String> =
        two.iter().map(|t| t.name.clone()).chain(["README".to_string(), MANIFEST.to_string()]).collect();
    assert_eq!(names, want, "the old tasks go, the user's file stays");
    // A folder of the new set's name that the manifest does not list is someone's.
    let three = generate(&opts(&[], &[], Split::Train, 3, 1)).unwrap();
    std::fs::create_dir(dir.path().join(&three[0].name)).unwrap();
    let e = write_tasks(dir.path(), &three, Split::Train, 3).unwrap_err();
    assert!(matches!(e, GenerateError::Clash { .. }), "{e}");
    assert_eq!(Manifest::load(dir.path()).unwrap(), m, "nothing was written");
}

/// Runs the test file's `test_*` functions without pytest; returns (passed, failed).
const MINI_PYTEST: &str = r#"
import importlib.util, inspect, pathlib, sys, tempfile
spec = importlib.util.spec_from_file_location("t", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
ok = bad = 0
for name, f in inspect.getmembers(m, inspect.isfunction):
    if not name.startswith("test_"):
        continue
    kw = {"tmp_path": pathlib.Path(tempfile.mkdtemp())} if "tmp_path" in inspect.signature(f).parameters else {}
    try:
        f(**kw)
        ok += 1
    except Exception as e:
        bad += 1
        print("FAILED", name, repr(e)[:300])
print(ok, bad)
"#;

/// Lays the task out with `/app` at `root/app`, optionally runs its solution, then its
/// tests; returns (passed, failed, output).
fn run_on_host(task: &GeneratedTask, root: &Path, solve: bool) -> (usize, usize, String) {
    let app = root.join("app");
    std::fs::create_dir_all(&app).unwrap();
    let a = app.display().to_string();
    // "/app" ends where a path does; "/apple" is another name.
    let sub = |s: &str| {
        ["/app/", "/app\"", "/app\n", "/app "]
            .iter()
            .fold(s.to_string(), |acc, pat| acc.replace(pat, &format!("{a}{}", &pat[4..])))
    };
    for (rel, text) in &task.files {
        let path = match rel.strip_prefix("files/") {
            Some(r) => app.join(r),
            None => root.join("task").join(rel),
        };
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, if rel.starts_with("files/") { text.clone() } else { sub(text) }).unwrap();
    }
    let sh = |script: &str| {
        let o = Command::new("bash").arg("-c").arg(script).current_dir(&app).output().unwrap();
        assert!(o.status.success(), "{}: {script}\n{}", task.name, String::from_utf8_lossy(&o.stderr));
    };
    let runs =
        task.files["Dockerfile"].lines().filter(|l| *l != tb1::PYTEST_LAYER && !l.starts_with(tb1::PACKAGES_PREFIX));
    for line in runs.filter_map(|l| l.strip_prefix("RUN ")) {
        sh(&sub(line));
    }
    if solve {
        sh(&format!("bash {}", root.join("task/solution.sh").display()));
    }
    let o = Command::new("python3")
        .args(["-c", MINI_PYTEST])
        .arg(root.join("task/tests/test_outputs.py"))
        .current_dir(&app)
        .output()
        .unwrap();
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let last = out.lines().last().unwrap_or("").to_string();
    let mut nums = last.split(' ').map(|n| n.parse::<usize>().unwrap_or(usize::MAX));
    (nums.next().unwrap_or(0), nums.next().unwrap_or(usize::MAX), out)
}

/// The Debian packages the task's image installs that the host does not have (`None`
/// when it has them all): such a task is checked in Docker only.
fn packages_missing_on_host(task: &GeneratedTask) -> Option<Vec<String>> {
    let line = task.files["Dockerfile"].lines().find_map(|l| l.strip_prefix(tb1::PACKAGES_PREFIX))?;
    let wanted = line.split("&&").next().unwrap_or("").split_whitespace();
    let missing: Vec<String> = wanted
        .filter(|p| {
            !Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        })
        .map(str::to_string)
        .collect();
    (!missing.is_empty()).then_some(missing)
}

fn host_has(tools: &[&str]) -> bool {
    tools.iter().all(|t| {
        Command::new("bash").args(["-c", &format!("command -v {t}")]).output().is_ok_and(|o| o.status.success())
    })
}

#[test]
fn the_solution_passes_every_test_and_doing_nothing_fails_one_on_the_host() {
    if !host_has(&["python3", "tar", "grep", "sed", "awk", "sort"]) {
        eprintln!("skipped: the host lacks python3 or a core tool");
        return;
    }
    // A few seeds by default (each task is two shell and Python runs); more with
    // GENERATE_HOST_SEEDS=N.
    let seeds: u64 = std::env::var("GENERATE_HOST_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    for split in [Split::Train, Split::Heldout] {
        for seed in 0..seeds {
            let o = opts(&[], &[1, 2, 3], split, seed, families().len() * 3);
            for t in generate(&o).unwrap() {
                if let Some(missing) = packages_missing_on_host(&t) {
                    eprintln!("{}: skipped on the host, which lacks the Debian packages {missing:?}", t.name);
                    continue;
                }
                solution_passes_and_nothing_fails(&t);
            }
        }
    }
}

/// The task's solution passes all its tests (at least two) on the host, and an untouched
/// environment fails one.
fn solution_passes_and_nothing_fails(t: &GeneratedTask) {
    let dir = tempfile::tempdir().unwrap();
    let (ok, bad, out) = run_on_host(t, dir.path(), true);
    assert!(ok >= 2 && bad == 0, "{}: the solution fails its tests:\n{out}", t.name);
    let dir = tempfile::tempdir().unwrap();
    let (_, bad, out) = run_on_host(t, dir.path(), false);
    assert!(bad >= 1, "{}: doing nothing passes every test:\n{out}", t.name);
}

/// The eight Rust families written as family files (`crates/bench/families/ports/`, to
/// replace the Rust ones): every level in both splits passes its solution and fails doing
/// nothing, like the built-in families.
#[test]
fn the_ported_family_files_pass_their_solutions_and_fail_untouched_on_the_host() {
    if !host_has(&["python3", "tar", "grep", "sed", "awk", "sort"]) {
        eprintln!("skipped: the host lacks python3 or a core tool");
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("families/ports");
    let ports = data::load_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
    let code: Vec<&str> = CODE_FAMILIES.iter().map(|f| f.name).collect();
    assert_eq!(ports.len(), code.len());
    for f in &ports {
        assert!(code.contains(&f.name.as_str()), "{} ports no Rust family", f.name);
        for split in [Split::Train, Split::Heldout] {
            for level in 1..=MAX_LEVEL {
                let t = instance(f, level, split, 5, 0).unwrap_or_else(|e| panic!("{e}"));
                solution_passes_and_nothing_fails(&t);
            }
        }
    }
}

#[test]
fn the_tasks_of_a_seed_stay_the_same_across_releases() {
    // Held-out scores are compared across releases, so a change of the generated bytes
    // must be deliberate: then bump VERSION in write.rs and pin the new hash here. The
    // Rust families and the family files are pinned apart, so adding a family file
    // leaves the Rust families' tasks as they were.
    let code: Vec<&str> = CODE_FAMILIES.iter().map(|f| f.name).collect();
    assert_eq!(
        hash_of(&generate(&opts(&code, &[1, 2, 3], Split::Heldout, 0, code.len() * 3)).unwrap()),
        "c82626b9f26e4556e0911ee0b78b2e4e5222e21488815e41d38fd14549aaa2ea"
    );
    let data: Vec<&str> = data::BUILT_IN.iter().map(|(f, _)| f.trim_end_matches(".toml")).collect();
    assert_eq!(
        hash_of(&generate(&opts(&data, &[1, 2, 3], Split::Heldout, 0, data.len() * 3)).unwrap()),
        "9846f3f69de0c1a332305deffda40118618b1133c115f9bd965ca807fa88908a"
    );
}

fn hash_of(tasks: &[GeneratedTask]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for t in tasks {
        h.update(t.name.as_bytes());
        for (path, text) in &t.files {
            h.update(path.as_bytes());
            h.update([0]);
            h.update(text.as_bytes());
            h.update([0]);
        }
    }
    format!("{:x}", h.finalize())
}
