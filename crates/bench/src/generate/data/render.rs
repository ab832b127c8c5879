//! Drawing one instance of a data family: its parameters from the split's pools, then
//! every template rendered with them (minijinja, with functions that draw from the
//! instance's own random stream, so the same arguments give the same bytes).

use std::sync::{Arc, Mutex};

use minijinja::value::Value;
use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior};
use serde_json::{Map, Value as Json};

use super::format::{Count, FamilyFile, LevelDef, ParamDef};
use crate::generate::draw::{py, Ctx, Spec};
use crate::generate::rng::Rng;
use crate::generate::vocab::{EXTS, WORDS};
use crate::generate::GenerateError;

/// The largest instance (all input files together), so a runaway loop in a template
/// cannot fill the disk.
const MAX_INPUT_BYTES: usize = 4 << 20;

/// A family read from a family file.
#[derive(Debug)]
pub(crate) struct DataFamily {
    file: FamilyFile,
}

impl DataFamily {
    pub(crate) fn new(file: FamilyFile) -> DataFamily {
        DataFamily { file }
    }

    /// Every template parses (undefined names show when an instance is drawn).
    pub(crate) fn check_templates(&self) -> Result<(), String> {
        let state = Arc::new(Mutex::new(Ctx::new(Rng::new(0), crate::generate::Split::Train, 1)));
        let env = environment(&state);
        let check =
            |what: String, src: &str| env.template_from_str(src).map(|_| ()).map_err(|e| format!("{what}: {e}"));
        for p in &self.file.params {
            if let Some(v) = &p.value {
                check(format!("params.{}", p.name), v)?;
            }
        }
        for (i, l) in self.file.level.iter().enumerate() {
            let n = i + 1;
            for p in &l.params {
                if let Some(v) = &p.value {
                    check(format!("level {n}: params.{}", p.name), v)?;
                }
            }
            for (k, s) in l.instructions.iter().enumerate() {
                check(format!("level {n}: instructions[{k}]"), s)?;
            }
            for (k, f) in l.files.iter().enumerate() {
                check(format!("level {n}: files[{k}].path"), &f.path)?;
                check(format!("level {n}: files[{k}].text"), &f.text)?;
            }
            for (k, r) in l.run.iter().enumerate() {
                check(format!("level {n}: run[{k}]"), r)?;
            }
            check(format!("level {n}: solution"), &l.solution)?;
            check(format!("level {n}: tests"), &l.tests)?;
        }
        Ok(())
    }

    /// One instance at `ctx.level`, drawn from `ctx`'s stream; errors name the level and
    /// the template.
    pub(crate) fn build(&self, ctx: &mut Ctx, origin: &str) -> Result<Spec, GenerateError> {
        let bad = |reason: String| GenerateError::Family { origin: origin.to_string(), reason };
        let n = usize::from(ctx.level);
        let level = self.file.level.get(n.saturating_sub(1)).ok_or_else(|| bad(format!("no level {n}")))?;
        let at = |e: String| bad(format!("level {n}: {e}"));
        let mut vars = Map::new();
        vars.insert("level".into(), Json::from(n));
        vars.insert("split".into(), Json::from(ctx.split.as_str()));
        for p in self.file.params.iter().chain(&level.params) {
            let v = self.draw(ctx, p, &vars).map_err(|e| at(format!("params.{}: {e}", p.name)))?;
            vars.insert(p.name.clone(), v);
        }
        let phrasing = ctx.rng.below(level.instructions.len());
        let placeholder = Ctx::new(Rng::new(0), ctx.split, ctx.level);
        let state = Arc::new(Mutex::new(std::mem::replace(ctx, placeholder)));
        let spec = self.render(level, phrasing, &vars, &state).map_err(at);
        let inner = Arc::try_unwrap(state).map_err(|_| at("a template function outlived the draw".into()))?;
        *ctx = inner.into_inner().map_err(|_| at("a template function failed mid-draw".into()))?;
        spec
    }

    /// A parameter's value; recorded in the task's parameters unless it is a size or a
    /// value made of other parameters.
    fn draw(&self, ctx: &mut Ctx, p: &ParamDef, vars: &Map<String, Json>) -> Result<Json, String> {
        let list = |name: &str| -> Vec<&str> {
            match name {
                "words" => WORDS.to_vec(),
                "exts" => EXTS.to_vec(),
                other => self.file.lists.get(other).map(|l| l.iter().map(String::as_str).collect()).unwrap_or_default(),
            }
        };
        if let Some(l) = &p.word {
            let w = ctx.word(&p.name, &list(l));
            if w.is_empty() {
                return Err(format!("the split's half of `{l}` ran out of words"));
            }
            return Ok(Json::from(w));
        }
        if let (Some(l), Some(count)) = (&p.words, p.count) {
            let want = match count {
                Count::Exactly(k) => k,
                Count::Between([lo, hi]) => ctx.rng.range(lo, hi),
            } as usize;
            let ws = ctx.words(&p.name, &list(l), want);
            if ws.len() < want {
                return Err(format!("asked {want} words of `{l}`, its split's half has {} left", ws.len()));
            }
            return Ok(Json::from(ws));
        }
        if let Some([lo, hi]) = p.number {
            return Ok(Json::from(ctx.number(&p.name, lo, hi)));
        }
        if let Some([lo, hi]) = p.size {
            return Ok(Json::from(ctx.rng.range(lo, hi)));
        }
        if let Some(src) = &p.value {
            let state = Arc::new(Mutex::new(Ctx::new(Rng::new(0), ctx.split, ctx.level)));
            let env = environment(&state);
            return env.render_str(src, vars).map(|s| Json::from(s.trim().to_string())).map_err(|e| e.to_string());
        }
        Err("no kind".into())
    }

    fn render(
        &self,
        level: &LevelDef,
        phrasing: usize,
        vars: &Map<String, Json>,
        state: &Arc<Mutex<Ctx>>,
    ) -> Result<Spec, String> {
        let env = environment(state);
        let render = |what: &str, src: &str, vars: &Map<String, Json>| {
            env.render_str(src, vars).map_err(|e| format!("{what}: {}", describe(&e)))
        };
        let instruction = render("instructions", &level.instructions[phrasing], vars)?.trim().to_string();
        let mut files: Vec<(String, String)> = Vec::new();
        for (k, f) in level.files.iter().enumerate() {
            let items: Vec<Json> = match &f.each {
                None => vec![Json::Null],
                Some(name) => match vars.get(name) {
                    Some(Json::Array(xs)) => xs.clone(),
                    _ => return Err(format!("files[{k}].each: `{name}` is not a list parameter")),
                },
            };
            for (i, item) in items.into_iter().enumerate() {
                let mut v = vars.clone();
                if f.each.is_some() {
                    v.insert("item".into(), item);
                    v.insert("index".into(), Json::from(i));
                }
                let path = render(&format!("files[{k}].path"), &f.path, &v)?.trim().to_string();
                check_path(&path).map_err(|e| format!("files[{k}].path `{path}`: {e}"))?;
                if files.iter().any(|(p, _)| *p == path) {
                    return Err(format!("files[{k}].path: `{path}` is written twice"));
                }
                let text = render(&format!("files[{k}].text"), &f.text, &v)?;
                files.push((path, text));
            }
        }
        let total: usize = files.iter().map(|(_, t)| t.len()).sum();
        if total > MAX_INPUT_BYTES {
            return Err(format!("the input files add up to {total} bytes; at most {MAX_INPUT_BYTES}"));
        }
        let mut run = Vec::new();
        for (k, r) in level.run.iter().enumerate() {
            let line = render(&format!("run[{k}]"), r, vars)?;
            let line = line.trim();
            if line.contains('\n') {
                return Err(format!("run[{k}]: one line per command (join steps with &&)"));
            }
            if !line.is_empty() {
                run.push(line.to_string());
            }
        }
        let solution = render("solution", &level.solution, vars)?;
        let tests = render("tests", &level.tests, vars)?;
        let inputs: Vec<String> = files.iter().map(|(p, t)| format!("    {}: {},", py(p), py(t))).collect();
        let params = py_literal(&Json::Object(vars.clone()));
        let prelude = format!(
            "# The input files as they were written into /app, and the task's parameters: the\n\
             # expectations below are computed from these, never from files the agent may change.\n\
             INPUTS = {{\n{}\n}}\nPARAMS = {params}\n\n\n",
            inputs.join("\n")
        );
        Ok(Spec {
            instruction,
            category: self.file.category.clone(),
            files,
            run,
            packages: self.file.packages.clone(),
            solution,
            tests: format!("{prelude}{}", tests.trim_start()),
        })
    }
}

/// The error with its template line, when minijinja knows it.
fn describe(e: &Error) -> String {
    match e.line() {
        Some(line) => format!("{} (line {line})", e.detail().unwrap_or(&e.kind().to_string())),
        None => e.to_string(),
    }
}

/// A path under `/app`: relative, no `..`, no control characters.
fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.starts_with('/') || path.ends_with('/') {
        return Err("give a relative file path under /app".into());
    }
    if path.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err("no empty, `.` or `..` parts".into());
    }
    if path.chars().any(|c| c.is_control() || c == '\\') {
        return Err("no control characters or backslashes".into());
    }
    Ok(())
}

fn op_error(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// The template environment: strict about undefined names, blocks trimmed, and the
/// drawing functions bound to `state`.
fn environment(state: &Arc<Mutex<Ctx>>) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(true);
    let with = |s: &Arc<Mutex<Ctx>>| {
        let s = Arc::clone(s);
        move |f: &mut dyn FnMut(&mut Ctx) -> Result<Value, Error>| {
            let mut ctx = s.lock().map_err(|_| op_error("the draw failed earlier"))?;
            f(&mut ctx)
        }
    };
    let draw = with(state);
    env.add_function("num", move |lo: i64, hi: i64| {
        if lo > hi {
            return Err(op_error(format!("num({lo}, {hi}): low above high")));
        }
        draw(&mut |c| Ok(Value::from(c.rng.range(lo, hi))))
    });
    let draw = with(state);
    env.add_function("nums", move |n: usize, lo: i64, hi: i64| {
        if lo > hi {
            return Err(op_error(format!("nums({n}, {lo}, {hi}): low above high")));
        }
        draw(&mut |c| Ok(Value::from((0..n).map(|_| c.rng.range(lo, hi)).collect::<Vec<i64>>())))
    });
    let draw = with(state);
    env.add_function("word", move || {
        draw(&mut |c| {
            let w = c.filler(WORDS, 1);
            w.into_iter().next().map(Value::from).ok_or_else(|| op_error("word(): the split's words ran out"))
        })
    });
    let draw = with(state);
    env.add_function("filler", move |n: usize| {
        draw(&mut |c| {
            let w = c.filler(WORDS, n);
            if w.len() < n {
                return Err(op_error(format!("filler({n}): only {} words left", w.len())));
            }
            Ok(Value::from(w))
        })
    });
    let draw = with(state);
    env.add_function("text", move |lines: usize, lo: Option<i64>, hi: Option<i64>| {
        let (lo, hi) = (lo.unwrap_or(3), hi.unwrap_or(6));
        draw(&mut |c| {
            let pool = c.bulk_words(WORDS, 8);
            if pool.is_empty() || lo < 1 || lo > hi {
                return Err(op_error("text(lines, lo, hi): no words left, or a bad range"));
            }
            let mut out = String::new();
            for _ in 0..lines {
                let k = c.rng.range(lo, hi) as usize;
                let line: Vec<&str> = (0..k).map(|_| c.rng.pick(&pool).as_str()).collect();
                out.push_str(&line.join(" "));
                out.push('\n');
            }
            Ok(Value::from(out))
        })
    });
    let draw = with(state);
    env.add_function("pick", move |list: Vec<Value>| {
        draw(&mut |c| {
            if list.is_empty() {
                return Err(op_error("pick([]): nothing to pick"));
            }
            Ok(c.rng.pick(&list).clone())
        })
    });
    let draw = with(state);
    env.add_function("sample", move |list: Vec<Value>, n: usize| {
        draw(&mut |c| {
            if n > list.len() {
                return Err(op_error(format!("sample(list, {n}): the list has {}", list.len())));
            }
            Ok(Value::from(c.rng.sample(&list, n)))
        })
    });
    let draw = with(state);
    env.add_function("shuffled", move |list: Vec<Value>| {
        draw(&mut |c| {
            let mut xs = list.clone();
            c.rng.shuffle(&mut xs);
            Ok(Value::from(xs))
        })
    });
    let draw = with(state);
    env.add_function("hexstr", move |n: usize| {
        draw(&mut |c| {
            let s: String = (0..n).map(|_| char::from(b"0123456789abcdef"[c.rng.below(16)])).collect();
            Ok(Value::from(s))
        })
    });
    env.add_filter("py", |v: Value| -> Result<String, Error> {
        let json = serde_json::to_value(&v).map_err(|e| op_error(format!("py: {e}")))?;
        Ok(py_literal(&json))
    });
    env.add_filter("shq", |s: String| format!("'{}'", s.replace('\'', r"'\''")));
    env
}

/// A Python literal of a JSON value (JSON's string escapes are Python's).
pub(crate) fn py_literal(v: &Json) -> String {
    match v {
        Json::Null => "None".into(),
        Json::Bool(b) => if *b { "True" } else { "False" }.into(),
        Json::Number(n) => n.to_string(),
        Json::String(s) => py(s),
        Json::Array(xs) => format!("[{}]", xs.iter().map(py_literal).collect::<Vec<_>>().join(", ")),
        Json::Object(m) => {
            let items: Vec<String> = m.iter().map(|(k, v)| format!("{}: {}", py(k), py_literal(v))).collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}
