//! `csv-column`: aggregate a column of a CSV file (level 1: its sum; level 2: the sum
//! over the rows of one category; level 3: a per-category summary file).

use super::draw::{answer_exists_test, py, py_list, Ctx, Spec};
use super::vocab::WORDS;
use super::CodeFamily;

/// The family.
pub(crate) const FAMILY: CodeFamily = CodeFamily {
    name: "csv-column",
    summary: "sum a column of a CSV file, over all rows, over one category, or per category",
    levels: [
        "the sum of one column (another number column beside it)",
        "the sum over the rows whose category column has one value",
        "write a summary CSV: one row per category with its total, sorted",
    ],
    build,
};

/// Columns that name the row.
pub(crate) const NAME_COLUMNS: &[&str] = &["name", "item", "product", "city", "player", "station", "store", "client"];
/// Category columns.
pub(crate) const CATEGORY_COLUMNS: &[&str] =
    &["region", "team", "group", "category", "shift", "branch", "section", "department"];
/// Number columns.
pub(crate) const NUMBER_COLUMNS: &[&str] =
    &["amount", "sales", "points", "units", "hours", "visits", "orders", "miles", "minutes", "tickets"];

/// A drawn table: header, rows (as cells) and the column indexes that matter.
struct Table {
    file: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    cat: usize,
    num: usize,
    cats: Vec<String>,
}

impl Table {
    fn text(&self) -> String {
        let mut out = vec![self.header.join(",")];
        out.extend(self.rows.iter().map(|r| r.join(",")));
        super::draw::lines(&out)
    }

    fn sum_where(&self, cat: Option<&str>) -> i64 {
        self.rows
            .iter()
            .filter(|r| cat.is_none_or(|c| r[self.cat] == c))
            .map(|r| r[self.num].parse::<i64>().unwrap_or(0))
            .sum()
    }
}

fn table(ctx: &mut Ctx, min_rows: i64, max_rows: i64) -> Table {
    let file = format!("{}.csv", ctx.word("file", WORDS));
    let name_col = ctx.word("column", NAME_COLUMNS);
    let cat_col = ctx.word("column", CATEGORY_COLUMNS);
    let nums = ctx.words("column", NUMBER_COLUMNS, 2);
    let cats = ctx.words("category", WORDS, 3);
    let n = ctx.rng.range(min_rows, max_rows) as usize;
    let names = ctx.filler(WORDS, n);
    // The name column comes first; the others in a drawn order.
    let mut rest = vec![(cat_col, 0usize), (nums[0].clone(), 1), (nums[1].clone(), 2)];
    ctx.rng.shuffle(&mut rest);
    let mut header = vec![name_col];
    header.extend(rest.iter().map(|(c, _)| c.clone()));
    let at = |role: usize| rest.iter().position(|(_, r)| *r == role).map_or(1, |p| p + 1);
    let (cat, num, other) = (at(0), at(1), at(2));
    let mut rows = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mut row = vec![String::new(); 4];
        row[0] = name.clone();
        // Every category occurs at least once.
        row[cat] = if i < cats.len() { cats[i].clone() } else { ctx.rng.pick(&cats).clone() };
        row[num] = ctx.rng.range(1, 99).to_string();
        row[other] = ctx.rng.range(1, 99).to_string();
        rows.push(row);
    }
    ctx.rng.shuffle(&mut rows);
    Table { file, header, rows, cat, num, cats }
}

fn csv_intro(t: &Table) -> String {
    format!(
        "The file /app/{} is a CSV file: a header line with the column names, then one row per line, with the \
         values separated by commas.",
        t.file
    )
}

/// The start of a Python solution that reads the rows and prints into `out`.
fn python(file: &str, out: &str) -> String {
    format!("python3 - > {out} <<'EOF'\nimport csv\nrows = list(csv.DictReader(open(\"/app/{file}\")))\n")
}

fn number_tests(expected: i64) -> String {
    format!(
        "{}\n\ndef test_answer_is_the_sum():\n    text = Path(\"/app/answer.txt\").read_text().strip()\n    \
         assert text == \"{expected}\", f\"expected {expected}, got {{text!r}}\"\n",
        answer_exists_test("/app/answer.txt")
    )
}

fn build(ctx: &mut Ctx) -> Spec {
    let level = ctx.level;
    let t = if level == 1 { table(ctx, 6, 10) } else { table(ctx, 10, 16) };
    let (file, num, catc) = (t.file.clone(), t.header[t.num].clone(), t.header[t.cat].clone());
    let files = vec![(file.clone(), t.text())];
    match level {
        1 => Spec {
            instruction: format!(
                "{}\nWrite the sum of the `{num}` column to the file /app/answer.txt (only the number).",
                csv_intro(&t)
            ),
            category: "data-processing".into(),
            files,
            run: vec![],
            packages: Vec::new(),
            solution: format!("{}print(sum(int(r[\"{num}\"]) for r in rows))\nEOF\n", python(&file, "/app/answer.txt")),
            tests: number_tests(t.sum_where(None)),
        },
        2 => {
            let cat = t.cats[0].clone();
            Spec {
                instruction: format!(
                    "{}\nAdd up the `{num}` values of the rows whose `{catc}` is `{cat}`, and write that sum to the \
                     file /app/answer.txt (only the number).",
                    csv_intro(&t)
                ),
                category: "data-processing".into(),
                files,
                run: vec![],
                packages: Vec::new(),
                solution: format!(
                    "{}print(sum(int(r[\"{num}\"]) for r in rows if r[\"{catc}\"] == \"{cat}\"))\nEOF\n",
                    python(&file, "/app/answer.txt")
                ),
                tests: number_tests(t.sum_where(Some(&cat))),
            }
        }
        _ => {
            let mut cats = t.cats.clone();
            cats.sort();
            let expected: Vec<String> = cats.iter().map(|c| format!("{c},{}", t.sum_where(Some(c)))).collect();
            Spec {
                instruction: format!(
                    "{}\nWrite a new CSV file /app/summary.csv with the header line `{catc},total` and then one line \
                     per distinct `{catc}` value: the value, a comma, and the sum of the `{num}` column over its \
                     rows. Sort those lines alphabetically by the `{catc}` value.",
                    csv_intro(&t)
                ),
                category: "data-processing".into(),
                files,
                run: vec![],
                packages: Vec::new(),
                solution: format!(
                    "{}totals = {{}}\nfor r in rows:\n    totals[r[\"{catc}\"]] = totals.get(r[\"{catc}\"], 0) + \
                     int(r[\"{num}\"])\nprint(\"{catc},total\")\nfor k in sorted(totals):\n    print(f\"{{k}},{{totals[k]}}\")\nEOF\n",
                    python(&file, "/app/summary.csv")
                ),
                tests: format!(
                    "EXPECTED = {rows}\n\n\ndef lines():\n    text = Path(\"/app/summary.csv\").read_text()\n    \
                     return [l.replace(\" \", \"\") for l in text.splitlines() if l.strip()]\n\n\n\
                     {exists}\n\ndef test_header():\n    assert lines()[0] == {header}\n\n\n\
                     def test_every_total_is_right():\n    assert sorted(lines()[1:]) == sorted(EXPECTED)\n\n\n\
                     def test_sorted_by_category():\n    assert lines()[1:] == EXPECTED\n",
                    rows = py_list(&expected),
                    exists = answer_exists_test("/app/summary.csv"),
                    header = py(&format!("{catc},total")),
                ),
            }
        }
    }
}
