//! Docker Compose's variable interpolation, applied to every string value of a compose
//! file (mapping keys are left as written, as Compose leaves them): `$NAME`, `${NAME}`,
//! `${NAME:-default}` (unset or empty), `${NAME-default}` (unset), `${NAME:?message}` and
//! `${NAME?message}` (an error), `${NAME:+alt}` and `${NAME+alt}`, and `$$` for a literal
//! `$`. A default, an alternative or a message may hold references of its own; it is
//! read only when it is used. Unset names without a default read as empty.

use std::collections::BTreeMap;

use serde_yaml::Value;

/// Why a template could not be interpolated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InterpolateError {
    /// `${NAME:?message}` or `${NAME?message}` with the variable unset (or empty).
    #[error(
        "the variable `{name}` must be set{}{}; a compose file sees the harness's variables and the task's `[environment.env]`, nothing from the host",
        if *.non_empty { " and not empty" } else { "" },
        if .message.is_empty() { String::new() } else { format!(" ({})", .message) }
    )]
    Required { name: String, non_empty: bool, message: String },
    /// `${` without its closing `}`.
    #[error("`{text}` has no closing `}}`")]
    Unterminated { text: String },
    /// A `$` that neither starts a reference nor is doubled.
    #[error("`{text}` is not a variable reference (`$NAME`, `${{NAME}}`, `${{NAME:-default}}`, …); write `$$` for a literal `$`")]
    Invalid { text: String },
}

/// An [`InterpolateError`] in one value of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    /// Where the value is (`services.db.environment`).
    pub field: String,
    /// The value as written.
    pub template: String,
    /// What is wrong with it.
    pub error: InterpolateError,
}

/// Interpolates every string of `doc` in place; `unset` gets `(name, field)` for each
/// plain reference to a variable that is not set (it reads as empty).
pub(crate) fn interpolate_doc(
    doc: &mut Value,
    vars: &BTreeMap<String, String>,
    unset: &mut Vec<(String, String)>,
) -> Result<(), FieldError> {
    walk(doc, "", vars, unset)
}

fn walk(
    v: &mut Value,
    field: &str,
    vars: &BTreeMap<String, String>,
    unset: &mut Vec<(String, String)>,
) -> Result<(), FieldError> {
    match v {
        Value::String(s) if s.contains('$') => {
            let mut names = Vec::new();
            let out = interpolate(s, vars, &mut names).map_err(|error| FieldError {
                field: field.to_string(),
                template: s.clone(),
                error,
            })?;
            unset.extend(names.into_iter().map(|n| (n, field.to_string())));
            *s = out;
        }
        Value::Sequence(items) => {
            for item in items {
                walk(item, field, vars, unset)?;
            }
        }
        Value::Mapping(m) => {
            for (k, item) in m.iter_mut() {
                let key = match k {
                    Value::String(s) => s.clone(),
                    other => serde_yaml::to_string(other).unwrap_or_default().trim().to_string(),
                };
                let path = if field.is_empty() { key } else { format!("{field}.{key}") };
                walk(item, &path, vars, unset)?;
            }
        }
        Value::Tagged(t) => walk(&mut t.value, field, vars, unset)?,
        _ => {}
    }
    Ok(())
}

/// `template` with its references replaced; `unset` gets the names of plain references
/// to variables that are not set.
pub(crate) fn interpolate(
    template: &str,
    vars: &BTreeMap<String, String>,
    unset: &mut Vec<String>,
) -> Result<String, InterpolateError> {
    let bytes = template.as_bytes();
    let mut out = String::with_capacity(template.len());
    let mut i = 0;
    while let Some(off) = template[i..].find('$') {
        let at = i + off;
        out.push_str(&template[i..at]);
        match bytes.get(at + 1) {
            Some(b'$') => {
                out.push('$');
                i = at + 2;
            }
            Some(b'{') => {
                let end = closing_brace(template, at + 2)
                    .ok_or_else(|| InterpolateError::Unterminated { text: template[at..].to_string() })?;
                out.push_str(&braced(&template[at + 2..end], vars, unset)?);
                i = end + 1;
            }
            Some(c) if is_name_start(*c) => {
                let name = &template[at + 1..at + 1 + name_len(&template[at + 1..])];
                out.push_str(&plain(name, vars, unset));
                i = at + 1 + name.len();
            }
            _ => {
                let text: String = template[at..].chars().take(8).collect();
                return Err(InterpolateError::Invalid { text });
            }
        }
    }
    out.push_str(&template[i..]);
    Ok(out)
}

/// The index of the `}` closing a `${` whose body starts at `from` (nested `${…}`
/// counted, `$$` skipped).
fn closing_brace(s: &str, from: usize) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut depth = 1;
    let mut j = from;
    while j < bytes.len() {
        match bytes[j] {
            b'$' if matches!(bytes.get(j + 1), Some(b'$') | Some(b'{')) => {
                if bytes[j + 1] == b'{' {
                    depth += 1;
                }
                j += 2;
                continue;
            }
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
        j += 1;
    }
    None
}

fn is_name_start(c: u8) -> bool {
    c == b'_' || c.is_ascii_alphabetic()
}

/// The length of the variable name at the start of `s` (0 when there is none).
fn name_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    if !bytes.first().is_some_and(|c| is_name_start(*c)) {
        return 0;
    }
    bytes.iter().take_while(|c| **c == b'_' || c.is_ascii_alphanumeric()).count()
}

/// A plain reference: the value, or empty (and noted) when unset.
fn plain(name: &str, vars: &BTreeMap<String, String>, unset: &mut Vec<String>) -> String {
    match vars.get(name) {
        Some(v) => v.clone(),
        None => {
            unset.push(name.to_string());
            String::new()
        }
    }
}

/// The body of `${…}`: a name, then nothing or an operator and its word.
fn braced(body: &str, vars: &BTreeMap<String, String>, unset: &mut Vec<String>) -> Result<String, InterpolateError> {
    let invalid = || InterpolateError::Invalid { text: format!("${{{body}}}") };
    let len = name_len(body);
    if len == 0 {
        return Err(invalid());
    }
    let (name, rest) = body.split_at(len);
    if rest.is_empty() {
        return Ok(plain(name, vars, unset));
    }
    let (colon, rest) = match rest.strip_prefix(':') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let mut ops = rest.chars();
    let op = ops.next().ok_or_else(invalid)?;
    let word = ops.as_str();
    let value = vars.get(name).map(String::as_str);
    // `:` makes an empty value count as unset.
    let set = match value {
        Some(v) => !(colon && v.is_empty()),
        None => false,
    };
    let mut word_value = || interpolate(word, vars, unset);
    match op {
        '-' if set => Ok(value.unwrap_or_default().to_string()),
        '-' => word_value(),
        '+' if set => word_value(),
        '+' => Ok(String::new()),
        '?' if set => Ok(value.unwrap_or_default().to_string()),
        '?' => Err(InterpolateError::Required { name: name.to_string(), non_empty: colon, message: word_value()? }),
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compose::{Compose, ComposePaths, Dialect};
    use std::path::Path;

    fn vars() -> BTreeMap<String, String> {
        BTreeMap::from([("SET".to_string(), "value".to_string()), ("EMPTY".to_string(), String::new())])
    }

    fn run(t: &str) -> Result<String, InterpolateError> {
        interpolate(t, &vars(), &mut Vec::new())
    }

    #[test]
    fn plain_references_and_dollar_escapes() {
        assert_eq!(run("a $SET b ${SET} c").unwrap(), "a value b value c");
        assert_eq!(run("$SET-x ${SET}x $SET.x").unwrap(), "value-x valuex value.x");
        assert_eq!(run("$$SET $${SET} $$").unwrap(), "$SET ${SET} $");
        assert_eq!(run("no references").unwrap(), "no references");
        let mut unset = Vec::new();
        assert_eq!(interpolate("[$NOPE|${ALSO_NOT}|${EMPTY}]", &vars(), &mut unset).unwrap(), "[||]");
        assert_eq!(unset, ["NOPE", "ALSO_NOT"]);
    }

    #[test]
    fn defaults_and_alternatives() {
        assert_eq!(run("${SET:-d} ${EMPTY:-d} ${NOPE:-d}").unwrap(), "value d d");
        assert_eq!(run("${SET-d} [${EMPTY-d}] ${NOPE-d}").unwrap(), "value [] d");
        assert_eq!(run("${SET:+alt} [${EMPTY:+alt}] [${NOPE:+alt}]").unwrap(), "alt [] []");
        assert_eq!(run("${SET+alt} ${EMPTY+alt} [${NOPE+alt}]").unwrap(), "alt alt []");
        assert_eq!(run("${NOPE:-}|${NOPE:-a b:c-d}").unwrap(), "|a b:c-d");
        let mut unset = Vec::new();
        interpolate("${NOPE:-x}${NOPE-x}${NOPE:+x}${NOPE+x}", &vars(), &mut unset).unwrap();
        assert!(unset.is_empty(), "a default says the variable may be unset: {unset:?}");
    }

    #[test]
    fn required_variables_are_errors_naming_them() {
        assert_eq!(run("${SET:?msg} ${EMPTY?msg}").unwrap(), "value ");
        let e = run("${EMPTY:?the secret of the OAuth app}").unwrap_err();
        assert_eq!(
            e,
            InterpolateError::Required {
                name: "EMPTY".into(),
                non_empty: true,
                message: "the secret of the OAuth app".into()
            }
        );
        let text = e.to_string();
        assert!(text.contains("`EMPTY` must be set and not empty (the secret of the OAuth app)"), "{text}");
        let e = run("${NOPE?}").unwrap_err();
        assert_eq!(e, InterpolateError::Required { name: "NOPE".into(), non_empty: false, message: String::new() });
        assert!(e.to_string().starts_with("the variable `NOPE` must be set;"), "{e}");
        // The message is interpolated too.
        let e = run("${NOPE:?set it like ${SET}}").unwrap_err();
        assert!(e.to_string().contains("(set it like value)"), "{e}");
    }

    #[test]
    fn defaults_nest() {
        assert_eq!(run("${NOPE:-${SET}}").unwrap(), "value");
        assert_eq!(run("${NOPE:-${ALSO:-${SET:+x}-y}}/z").unwrap(), "x-y/z");
        assert_eq!(run("${NOPE:-pre-$SET-post}").unwrap(), "pre-value-post");
        assert_eq!(run("${NOPE:-$${literal}}").unwrap(), "${literal}");
        // A default that is not used is not read, so its errors do not count.
        assert_eq!(run("${SET:-${NOPE:?never}}").unwrap(), "value");
        assert!(matches!(run("${NOPE:-${ALSO:?needed}}"), Err(InterpolateError::Required { .. })));
    }

    #[test]
    fn malformed_templates_are_errors() {
        let unterminated = [("${SET", "${SET"), ("a ${NOPE:-${SET}", "${NOPE:-${SET}"), ("${", "${")];
        for (t, text) in unterminated {
            assert_eq!(run(t), Err(InterpolateError::Unterminated { text: text.into() }), "{t}");
        }
        for t in ["${}", "${1X}", "${A B}", "${SET:x}", "${SET:}", "$ 5", "cost: 5$", "$1"] {
            let e = run(t).unwrap_err();
            assert!(matches!(e, InterpolateError::Invalid { .. }), "{t}: {e:?}");
            assert!(e.to_string().contains("write `$$` for a literal `$`"), "{e}");
        }
    }

    #[test]
    fn a_document_is_interpolated_value_by_value() {
        let mut doc: Value = serde_yaml::from_str(
            "services:\n  db:\n    environment:\n      ${SET}: ${SET}\n    command: [a, $X]\n    n: 5\n",
        )
        .unwrap();
        let mut unset = Vec::new();
        interpolate_doc(&mut doc, &vars(), &mut unset).unwrap();
        assert_eq!(doc["services"]["db"]["environment"]["${SET}"], Value::from("value"), "keys stay as written");
        assert_eq!(doc["services"]["db"]["command"][1], Value::from(""));
        assert_eq!(doc["services"]["db"]["n"], Value::from(5));
        assert_eq!(unset, [("X".to_string(), "services.db.command".to_string())]);
        let mut doc: Value = serde_yaml::from_str("services:\n  db:\n    image: \"${NOPE:?no image}\"\n").unwrap();
        let e = interpolate_doc(&mut doc, &vars(), &mut Vec::new()).unwrap_err();
        assert_eq!(e.field, "services.db.image");
        assert_eq!(e.template, "${NOPE:?no image}");
    }

    /// A Harbor task folder holding `compose` in `environment/`, parsed with `env` as the
    /// task's `[environment.env]`.
    fn harbor(compose: &str, env: &[(&str, &str)]) -> Result<Compose, crate::error::TaskError> {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("environment");
        std::fs::create_dir_all(&dir).unwrap();
        let env: BTreeMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Compose::parse_with_env(compose, "dc.yaml", ComposePaths { dir: &dir, root: d.path() }, Dialect::Harbor, &env)
    }

    const SIDECAR: &str = r#"
services:
  main:
    build: ${CONTEXT_DIR}
    image: ${MAIN_IMAGE_NAME}
    environment:
      - TEST_DIR=${TEST_DIR}
      - API=http://auth:${AUTH_PORT:-9000}
      - PRICE=$$5
    volumes:
      - ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}
    deploy: {resources: {limits: {cpus: "${CPUS}", memory: "${MEMORY}"}}}
  auth:
    image: ${AUTH_IMAGE:-ghcr.io/example/oauth:1.2}
    command: ["sh", "-c", "echo $${CLIENT_ID} && serve --port ${AUTH_PORT:-9000}"]
    environment:
      CLIENT_ID: ${OAUTH_CLIENT_ID:-dev-client}
      CLIENT_SECRET: ${OAUTH_CLIENT_SECRET:-dev-secret}
      REALM: ${REALM-}
      DEBUG: ${DEBUG:+1}
      TEST_DIR: ${TEST_DIR:-/elsewhere}
      EXTRA: $UNDEFINED_ONE
"#;

    #[test]
    fn a_task_compose_file_is_interpolated_end_to_end() {
        let c = harbor(SIDECAR, &[("OAUTH_CLIENT_SECRET", "from-task"), ("TEST_DIR", "/task-wins-not")]).unwrap();
        let main = c.client().unwrap();
        assert_eq!(main.environment, ["TEST_DIR=/tests", "API=http://auth:9000", "PRICE=$5"]);
        assert!(main.mounts.is_empty(), "the harness's log mount is dropped: {:?}", main.mounts);
        let auth = c.sidecars().next().unwrap();
        assert_eq!(auth.image, crate::compose::ImageSource::Named("ghcr.io/example/oauth:1.2".into()));
        assert_eq!(auth.command.as_deref().unwrap(), ["sh", "-c", "echo ${CLIENT_ID} && serve --port 9000"]);
        assert_eq!(
            auth.environment,
            ["CLIENT_ID=dev-client", "CLIENT_SECRET=from-task", "REALM=", "DEBUG=", "TEST_DIR=/tests", "EXTRA="]
        );
        // Only the variable nobody sets draws a notice; the harness's own do not.
        let unset: Vec<&String> = c.notices.iter().filter(|n| n.contains("is not set")).collect();
        assert_eq!(unset.len(), 1, "{:?}", c.notices);
        assert!(unset[0].contains("`UNDEFINED_ONE`") && unset[0].contains("services.auth.environment"), "{unset:?}");
        // The task's variables feed the defaults' variables too.
        let c = harbor(SIDECAR, &[("AUTH_PORT", "7000"), ("DEBUG", "yes"), ("UNDEFINED_ONE", "x")]).unwrap();
        assert_eq!(c.client().unwrap().environment[1], "API=http://auth:7000");
        let auth = c.sidecars().next().unwrap();
        assert!(auth.environment.contains(&"DEBUG=1".to_string()), "{:?}", auth.environment);
        assert!(c.notices.iter().all(|n| !n.contains("is not set")), "{:?}", c.notices);
    }

    #[test]
    fn a_required_variable_fails_the_task_naming_it_and_the_file() {
        let text =
            "services:\n  main:\n    build: .\n    environment:\n      KEY: ${OAUTH_SECRET:?the OAuth app's secret}\n";
        let e = harbor(text, &[]).unwrap_err().to_string();
        assert!(e.starts_with("dc.yaml: "), "{e}");
        assert!(e.contains("`services.main.environment.KEY`"), "{e}");
        assert!(e.contains("`OAUTH_SECRET` must be set and not empty (the OAuth app's secret)"), "{e}");
        assert!(harbor(text, &[("OAUTH_SECRET", "s")]).is_ok());
        let e = harbor("services:\n  main:\n    build: .\n    command: echo ${OOPS\n", &[]).unwrap_err().to_string();
        assert!(e.contains("`services.main.command`") && e.contains("no closing `}`"), "{e}");
        let tb1 = "services:\n  client:\n    build: .\n    working_dir: $5\n";
        let root = Path::new("/t");
        let e = Compose::parse(tb1, "dc.yaml", ComposePaths { dir: root, root }, Dialect::Tb1).unwrap_err();
        assert!(e.to_string().contains("write `$$` for a literal `$`"), "{e}");
    }
}
