//! `json-edit`: change a JSON file (level 1: set one top-level field; level 2: set a
//! nested field and remove another; level 3: update every object of a list that matches
//! a condition).

use serde_json::{json, Map, Value};

use super::draw::{py, Ctx, Spec};
use super::vocab::WORDS;
use super::CodeFamily;

/// The family.
pub(crate) const FAMILY: CodeFamily = CodeFamily {
    name: "json-edit",
    summary: "edit a JSON file: set a field, set a nested one and remove another, or update matching objects",
    levels: [
        "set one top-level number field",
        "set a field inside a nested object and remove a top-level field",
        "set a field on every object of a list whose category matches",
    ],
    build,
};

/// Number-valued settings.
pub(crate) const NUM_FIELDS: &[&str] = &[
    "timeout",
    "retries",
    "port",
    "workers",
    "threads",
    "verbosity",
    "limit",
    "interval",
    "capacity",
    "quota",
    "priority",
    "weight",
    "budget",
    "depth",
    "width",
    "height",
    "speed",
    "volume",
    "offset",
    "margin",
];
/// Text-valued settings.
pub(crate) const TEXT_FIELDS: &[&str] =
    &["owner", "mode", "region", "color", "theme", "label", "tier", "channel", "flavor", "variant"];
/// Names of nested sections.
pub(crate) const SECTIONS: &[&str] =
    &["server", "client", "cache", "database", "logging", "network", "storage", "auth", "metrics", "queue"];
/// Category keys of list items.
pub(crate) const CATEGORY_KEYS: &[&str] = &["kind", "group", "team", "status", "zone", "shelf", "brand", "family"];
/// Number keys of list items.
pub(crate) const AMOUNT_KEYS: &[&str] = &["stock", "price", "score", "qty", "rank", "points", "units", "level"];

fn build(ctx: &mut Ctx) -> Spec {
    match ctx.level {
        1 => top_level(ctx),
        2 => nested(ctx),
        _ => list(ctx),
    }
}

/// A flat settings object: `nums` number fields (1..99) and `texts` text fields.
fn settings(ctx: &mut Ctx, nums: &[String], texts: &[String], filler: &[String]) -> Map<String, Value> {
    let mut m = Map::new();
    let mut keys: Vec<(String, bool)> =
        nums.iter().map(|k| (k.clone(), true)).chain(texts.iter().map(|k| (k.clone(), false))).collect();
    ctx.rng.shuffle(&mut keys);
    for (k, is_num) in keys {
        let v = if is_num { json!(ctx.rng.range(1, 99)) } else { json!(ctx.rng.pick(filler)) };
        m.insert(k, v);
    }
    m
}

fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

fn solution(file: &str, body: &str) -> String {
    format!("python3 - <<'EOF'\nimport json\np = \"/app/{file}\"\nd = json.load(open(p))\n{body}\njson.dump(d, open(p, \"w\"), indent=2)\nEOF\n")
}

fn load_test(file: &str, expected: &Value) -> String {
    format!(
        "P = Path(\"/app/{file}\")\nEXPECTED = json.loads({})\n\n\ndef load():\n    return json.loads(P.read_text())\n\n\n\
         def test_file_is_still_valid_json():\n    load()\n\n\n",
        py(&serde_json::to_string(expected).unwrap_or_default())
    )
}

fn top_level(ctx: &mut Ctx) -> Spec {
    let file = format!("{}.json", ctx.word("file", WORDS));
    let nums = ctx.some_words("field", NUM_FIELDS, 2, 3);
    let texts = ctx.words("field", TEXT_FIELDS, 2);
    let filler = ctx.filler(WORDS, 6);
    let key = nums[0].clone();
    ctx.record("target", &key);
    let value = ctx.number("new-value", 100, 999);
    let before = Value::Object(settings(ctx, &nums, &texts, &filler));
    let mut after = before.clone();
    after[&key] = json!(value);
    Spec {
        instruction: format!(
            "In the JSON file /app/{file}, change the value of the field `{key}` to {value} (a number). Keep every \
             other field as it is."
        ),
        category: "file-operations".into(),
        files: vec![(file.clone(), pretty(&before))],
        run: vec![],
        packages: Vec::new(),
        solution: solution(&file, &format!("d[\"{key}\"] = {value}")),
        tests: format!(
            "{}def test_field_has_the_new_value():\n    assert load()[{k}] == {value}\n\n\n\
             def test_everything_else_is_unchanged():\n    assert load() == EXPECTED\n",
            load_test(&file, &after),
            k = py(&key),
        ),
    }
}

fn nested(ctx: &mut Ctx) -> Spec {
    let file = format!("{}.json", ctx.word("file", WORDS));
    let sections = ctx.words("section", SECTIONS, 2);
    let top = ctx.words("field", TEXT_FIELDS, 3);
    let filler = ctx.filler(WORDS, 6);
    let mut root = settings(ctx, &[], &top, &filler);
    let mut target = (String::new(), String::new());
    for (i, sec) in sections.iter().enumerate() {
        let nums = ctx.words("field", NUM_FIELDS, 2);
        if i == 0 {
            target = (sec.clone(), nums[0].clone());
        }
        root.insert(sec.clone(), Value::Object(settings(ctx, &nums, &[], &filler)));
    }
    let (sec, key) = target;
    let del = top[0].clone();
    ctx.record("target", &format!("{sec}.{key}"));
    ctx.record("removed", &del);
    let value = ctx.number("new-value", 100, 999);
    let before = Value::Object(root);
    let mut after = before.clone();
    after[&sec][&key] = json!(value);
    if let Some(m) = after.as_object_mut() {
        m.shift_remove(&del);
    }
    Spec {
        instruction: format!(
            "In the JSON file /app/{file}, set the field `{key}` inside the `{sec}` object to {value} (a number), \
             and remove the top-level field `{del}`. Keep everything else as it is."
        ),
        category: "file-operations".into(),
        files: vec![(file.clone(), pretty(&before))],
        run: vec![],
        packages: Vec::new(),
        solution: solution(&file, &format!("d[\"{sec}\"][\"{key}\"] = {value}\ndel d[\"{del}\"]")),
        tests: format!(
            "{}def test_nested_field_has_the_new_value():\n    assert load()[{s}][{k}] == {value}\n\n\n\
             def test_field_is_removed():\n    assert {d} not in load()\n\n\n\
             def test_everything_else_is_unchanged():\n    assert load() == EXPECTED\n",
            load_test(&file, &after),
            s = py(&sec),
            k = py(&key),
            d = py(&del),
        ),
    }
}

fn list(ctx: &mut Ctx) -> Spec {
    let file = format!("{}.json", ctx.word("file", WORDS));
    let cat_key = ctx.word("field", CATEGORY_KEYS);
    let num_key = ctx.word("field", AMOUNT_KEYS);
    let cats = ctx.words("category", WORDS, 3);
    let names = ctx.some_filler(WORDS, 8, 12);
    let value = ctx.number("new-value", 100, 999);
    let mut items = Vec::new();
    for (i, name) in names.iter().enumerate() {
        // The first two items fix that some match and some do not.
        let cat = if i < 2 { &cats[i] } else { ctx.rng.pick(&cats) };
        let mut item = Map::new();
        item.insert("name".to_string(), json!(name));
        item.insert(cat_key.clone(), json!(cat));
        item.insert(num_key.clone(), json!(ctx.rng.range(1, 99)));
        items.push(Value::Object(item));
    }
    ctx.rng.shuffle(&mut items);
    let before = Value::Array(items);
    let mut after = before.clone();
    if let Some(xs) = after.as_array_mut() {
        for x in xs.iter_mut().filter(|x| x[&cat_key] == json!(cats[0])) {
            x[&num_key] = json!(value);
        }
    }
    let cat = &cats[0];
    Spec {
        instruction: format!(
            "The file /app/{file} holds a JSON list of objects. For every object whose `{cat_key}` is \"{cat}\", set \
             its `{num_key}` to {value} (a number). Leave the other objects unchanged and keep the list in its order."
        ),
        category: "file-operations".into(),
        files: vec![(file.clone(), pretty(&before))],
        run: vec![],
        packages: Vec::new(),
        solution: solution(
            &file,
            &format!("for x in d:\n    if x[\"{cat_key}\"] == \"{cat}\":\n        x[\"{num_key}\"] = {value}"),
        ),
        tests: format!(
            "{}def test_matching_objects_are_updated():\n    for x in load():\n        if x[{ck}] == {c}:\n            \
             assert x[{nk}] == {value}, x\n\n\n\
             def test_other_objects_are_unchanged():\n    got = [x for x in load() if x.get({ck}) != {c}]\n    \
             assert got == [x for x in EXPECTED if x[{ck}] != {c}]\n\n\n\
             def test_the_list_is_exactly_as_asked():\n    assert load() == EXPECTED\n",
            load_test(&file, &after),
            ck = py(&cat_key),
            nk = py(&num_key),
            c = py(cat),
        ),
    }
}
