//! Family files: the built-in ones load and draw at every level, a user's folder adds
//! families, and every mistake in a file is refused with its place named.

use super::*;
use crate::generate::{catalog, family, instance, GenerateOptions, Split};

/// A small valid family; `patch` edits its text to make a broken one.
const GOOD: &str = r#"
name = "say-word"
summary = "write a word to a file"
category = "file-operations"
params = [{ name = "w", word = "words" }]

[[level]]
summary = "one"
instructions = ["Write {{ w }} to /app/a.txt.", "Put {{ w }} in /app/a.txt.", "Save {{ w }} as /app/a.txt.", "Make /app/a.txt hold {{ w }}.", "Echo {{ w }} into /app/a.txt."]
files = [{ path = "seed.txt", text = "{{ text(2) }}" }]
solution = "echo {{ w }} > /app/a.txt"
tests = "def test_a():\n    assert Path('/app/a.txt').read_text().strip() == PARAMS['w']\n"

[[level]]
summary = "two"
params = [{ name = "n", number = [2, 9] }]
instructions = ["a {{ w }} {{ n }} /app/a.txt", "b {{ w }} /app/a.txt", "c {{ w }} /app/a.txt", "d {{ w }} /app/a.txt", "e {{ w }} /app/a.txt"]
files = [{ path = "d/{{ w }}.txt", text = "{% for i in range(n) %}{{ i }}\n{% endfor %}" }]
solution = "echo {{ w }} > /app/a.txt"
tests = "def test_a():\n    assert PARAMS['n'] % 2 in (0, 1)\n"

[[level]]
summary = "three"
params = [{ name = "ws", words = "colors", count = [2, 3] }]
lists = "see below"
instructions = ["a /app/a.txt", "b /app/a.txt", "c /app/a.txt", "d /app/a.txt", "e /app/a.txt"]
files = [{ each = "ws", path = "{{ item }}-{{ index }}.txt", text = "{{ item }}" }]
solution = "true"
tests = "def test_a():\n    pass\n"
"#;

fn good() -> String {
    GOOD.replace("lists = \"see below\"\n", "").replace(
        "category = \"file-operations\"\n",
        "category = \"file-operations\"\nlists = { colors = [\"red\", \"blue\", \"green\", \"teal\", \"pink\", \"gray\"] }\n",
    )
}

fn err(text: &str) -> String {
    match parse(text, "test.toml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_built_in_family_file_loads_and_draws_every_level_in_both_splits() {
    let all = crate::generate::builtin_families().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(all.len(), 8 + BUILT_IN.len());
    for f in all.iter().skip(8) {
        assert_eq!(f.levels.len(), 3, "{}", f.name);
        for split in [Split::Train, Split::Heldout] {
            for level in 1..=3 {
                for seed in 0..5 {
                    let t = instance(f, level, split, seed, 0).unwrap_or_else(|e| panic!("{e}"));
                    let tests = &t.files["tests/test_outputs.py"];
                    assert!(tests.contains("INPUTS = {"), "{tests}");
                    assert!(t.instruction.contains("/app/"), "{}", t.instruction);
                }
            }
        }
    }
}

#[test]
fn a_good_family_draws_its_parameters_files_and_phrasings() {
    let fam = parse(&good(), "test.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(fam.levels, ["one", "two", "three"]);
    let a = instance(&fam, 1, Split::Train, 1, 0).unwrap();
    let w = &a.params["w"][0];
    assert_eq!(a.files["solution.sh"].lines().last(), Some(format!("echo {w} > /app/a.txt").as_str()));
    let tests = &a.files["tests/test_outputs.py"];
    assert!(tests.contains("INPUTS = {\n    \"seed.txt\": "), "{tests}");
    assert!(tests.contains(&format!("PARAMS = {{\"level\": 1, \"split\": \"train\", \"w\": \"{w}\"}}")), "{tests}");
    // Several phrasings are drawn over instances.
    let firsts: BTreeSet<String> =
        (0..40).map(|i| instance(&fam, 1, Split::Train, 1, i).unwrap().instruction[..3].to_string()).collect();
    assert!(firsts.len() >= 4, "{firsts:?}");
    let b = instance(&fam, 2, Split::Heldout, 1, 0).unwrap();
    let n: i64 = b.params["n"][0].parse().unwrap();
    assert_eq!(n % 2, 1, "held-out numbers are odd");
    let folder = b.files.keys().find(|k| k.starts_with("files/d/")).unwrap();
    assert_eq!(b.files[folder].lines().count() as i64, n);
    let c = instance(&fam, 3, Split::Train, 4, 0).unwrap();
    let each: Vec<&String> = c.files.keys().filter(|k| k.starts_with("files/") && k.ends_with(".txt")).collect();
    assert!((2..=3).contains(&each.len()), "{each:?}");
    for (i, w) in c.params["ws"].iter().enumerate() {
        assert_eq!(c.files[&format!("files/{w}-{i}.txt")], *w);
    }
    // The split's half of the family's own list: train draws even positions.
    assert!(c.params["ws"].iter().all(|w| ["red", "green", "pink"].contains(&w.as_str())), "{:?}", c.params);
}

/// A family's Debian packages are one layer before the task's files, the same line for
/// every task of the family (so Docker builds it once).
#[test]
fn a_familys_packages_are_installed_before_its_files() {
    let text = good().replace(
        "category = \"file-operations\"\n",
        "category = \"file-operations\"\npackages = [\"gcc\", \"make\"]\n",
    );
    let fam = parse(&text, "test.toml").unwrap_or_else(|e| panic!("{e}"));
    let layers: Vec<String> = (1..=3)
        .map(|level| {
            let t = instance(&fam, level, Split::Train, 4, 0).unwrap();
            let d = &t.files["Dockerfile"];
            let at = d.find("install -y -qq --no-install-recommends gcc make &&").unwrap_or_else(|| panic!("{d}"));
            assert!(at < d.find("COPY ").unwrap(), "{d}");
            d.lines().find(|l| l.contains("apt-get")).unwrap().to_string()
        })
        .collect();
    assert!(layers.iter().all(|l| l == &layers[0]), "{layers:?}");
    let plain = instance(&parse(&good(), "test.toml").unwrap(), 1, Split::Train, 4, 0).unwrap();
    assert!(!plain.files["Dockerfile"].contains("apt-get"));
}

#[test]
fn the_same_arguments_draw_the_same_bytes() {
    let fam = parse(&good(), "test.toml").unwrap();
    for level in 1..=3 {
        assert_eq!(
            instance(&fam, level, Split::Heldout, 7, 3).unwrap(),
            instance(&fam, level, Split::Heldout, 7, 3).unwrap()
        );
    }
}

#[test]
fn mistakes_in_a_family_file_are_refused_and_named() {
    let g = good();
    let cases: &[(String, &str)] = &[
        (g.replace("summary = \"one\"", "sumary = \"one\""), "unknown field `sumary`"),
        (g.replace("\"Echo {{ w }} into /app/a.txt.\"", ""), "level 1: 4 instructions"),
        (g.replace("name = \"say-word\"", "name = \"Say Word\""), "name `Say Word`"),
        (g.replace("word = \"words\" }]", "word = \"nouns\" }]"), "no list `nouns`"),
        (g.replace("count = [2, 3]", "count = [2, 99]"), "count"),
        (
            g.replace("{ name = \"n\", number = [2, 9] }", "{ name = \"n\", number = [2, 9], size = [1, 2] }"),
            "exactly one",
        ),
        (g.replace("{ name = \"w\", word = \"words\" }", "{ name = \"level\", word = \"words\" }"), "`level`"),
        (g.replace("{{ text(2) }}", "{% for %}"), "level 1: files[0].text"),
        (g.replace("\"blue\", \"green\", \"teal\", ", ""), "at least 4"),
        (g.replace("\"gray\"", "\"gr ay\""), "`gr ay`"),
        (
            g.replace(
                "category = \"file-operations\"\n",
                "category = \"file-operations\"\npackages = [\"gcc; curl x\"]\n",
            ),
            "`gcc; curl x` is not a Debian package name",
        ),
    ];
    for (text, want) in cases {
        let e = err(text);
        assert!(e.contains("test.toml") && e.contains(want), "want {want:?} in: {e}");
    }
    // Two levels only.
    let cut = g.find("[[level]]\nsummary = \"three\"").unwrap();
    assert!(err(&g[..cut]).contains("2 `[[level]]` tables"));
}

#[test]
fn mistakes_that_show_when_drawing_name_the_level_and_template() {
    let g = good();
    let undefined = parse(
        &g.replace(
            "echo {{ w }} > /app/a.txt\"\ntests = \"def test_a():\\n    assert Path",
            "echo {{ wx }} > /app/a.txt\"\ntests = \"def test_a():\\n    assert Path",
        ),
        "u.toml",
    )
    .unwrap();
    let e = instance(&undefined, 1, Split::Train, 0, 0).unwrap_err().to_string();
    assert!(e.contains("u.toml") && e.contains("level 1: solution"), "{e}");
    for path in ["../../etc/passwd", "/etc/passwd", "a/./b", "x\u{1b}[2J"] {
        let fam = parse(
            &g.replace("path = \"seed.txt\"", &format!("path = {}", serde_json::to_string(path).unwrap())),
            "p.toml",
        )
        .unwrap();
        let e = instance(&fam, 1, Split::Train, 0, 0).unwrap_err().to_string();
        assert!(e.contains("level 1: files[0].path"), "{path}: {e}");
    }
    let runaway = parse(
        &g.replace(
            "{{ text(2) }}",
            "{% for i in range(4500) %}{% for j in range(100) %}xxxxxxxxxx{% endfor %}{% endfor %}",
        ),
        "r.toml",
    )
    .unwrap();
    let e = instance(&runaway, 1, Split::Train, 0, 0).unwrap_err().to_string();
    assert!(e.contains("bytes"), "{e}");
}

#[test]
fn a_folder_of_family_files_adds_families_and_a_taken_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("say.toml"), good()).unwrap();
    std::fs::write(dir.path().join("notes.md"), "not a family").unwrap();
    let all = catalog(&[dir.path().to_path_buf()]).unwrap();
    let fam = family(&all, "say-word").unwrap();
    assert!(fam.origin.ends_with("say.toml"), "{}", fam.origin);
    let opts = GenerateOptions {
        families: vec!["say-word".into()],
        family_dirs: vec![dir.path().to_path_buf()],
        levels: vec![1, 2, 3],
        split: Split::Train,
        seed: 1,
        count: 3,
    };
    let tasks = crate::generate::generate(&opts).unwrap();
    assert_eq!(tasks.iter().map(|t| t.level).collect::<Vec<_>>(), [1, 2, 3]);
    std::fs::write(dir.path().join("z.toml"), good().replace("say-word", "checksum")).unwrap();
    let e = catalog(&[dir.path().to_path_buf()]).unwrap_err().to_string();
    assert!(e.contains("z.toml") && e.contains("`checksum` is taken"), "{e}");
}

#[test]
fn python_literals_of_parameters() {
    let v = serde_json::json!({"a": [1, "x'\"y"], "b": true, "c": null});
    assert_eq!(render::py_literal(&v), "{\"a\": [1, \"x'\\\"y\"], \"b\": True, \"c\": None}");
}
