//! Reading the judge's verdict: one YAML block with component scores, an optional cap
//! and the overall score; anything else is a format error the judge is asked to fix.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The rubric's components and their weights (they match `prompts/judge/v1.md`).
pub const COMPONENTS: [(&str, f64); 5] =
    [("planning", 0.15), ("exploration", 0.20), ("verification", 0.25), ("tool_use", 0.20), ("error_recovery", 0.20)];

/// Caps the judge may declare, and their ceilings.
pub const CAPS: [(&str, f64); 5] = [
    ("no_valid_action", 0.09),
    ("only_parse_errors", 0.30),
    ("tampering", 0.10),
    ("false_success", 0.15),
    ("gave_up", 0.25),
];

/// A judge's verdict on one episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The final score in [0, 1], caps applied.
    pub score: f64,
    /// The score the judge wrote, before the caps that the episode's facts impose.
    pub raw_score: f64,
    /// Component scores the judge gave.
    pub components: BTreeMap<String, f64>,
    /// The cap that bounded the score, if any (`no_valid_action`, ...).
    pub cap: Option<String>,
}

/// Why a reply is not a usable verdict; the text goes back to the judge as a correction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerdictError {
    #[error("the reply has no YAML block (```yaml ... ```) with a `score:` line")]
    NoBlock,
    #[error("the YAML block does not parse: {0}")]
    BadYaml(String),
    #[error("the YAML block has no `score`")]
    MissingScore,
    #[error("`{field}` is {value}, but scores must be numbers from 0.0 to 1.0")]
    OutOfRange { field: String, value: String },
    #[error("`cap: {0}` is not one of: none, no_valid_action, only_parse_errors, tampering, false_success, gave_up")]
    UnknownCap(String),
}

/// The last fenced block that holds a `score:` line; or, failing that, the text from the
/// last line that starts with `score:`'s block siblings (judges often forget the fence).
fn yaml_block(reply: &str) -> Option<String> {
    let mut blocks = Vec::new();
    let mut rest = reply;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let body_start = after.find('\n').map_or(after.len(), |i| i + 1);
        let Some(end) = after[body_start..].find("```") else {
            // An unclosed fence at the end of a truncated reply still holds the block.
            blocks.push(after[body_start..].to_string());
            break;
        };
        blocks.push(after[body_start..body_start + end].to_string());
        rest = &after[body_start + end + 3..];
    }
    if let Some(block) = blocks.into_iter().rev().find(|b| b.lines().any(|l| l.trim_start().starts_with("score:"))) {
        return Some(block);
    }
    // No fence: take the lines from the first component key to the `score:` line.
    let lines: Vec<&str> = reply.lines().collect();
    let score_at = lines.iter().rposition(|l| l.trim_start().starts_with("score:"))?;
    let keys: Vec<&str> = COMPONENTS.iter().map(|(k, _)| *k).chain(["cap"]).collect();
    let mut start = score_at;
    while start > 0 && keys.iter().any(|k| lines[start - 1].trim_start().starts_with(&format!("{k}:"))) {
        start -= 1;
    }
    Some(lines[start..=score_at].join("\n"))
}

fn number(field: &str, v: &serde_yaml::Value) -> Result<f64, VerdictError> {
    let out_of_range = || VerdictError::OutOfRange { field: field.to_string(), value: yaml_text(v) };
    let n = match v {
        serde_yaml::Value::Number(n) => n.as_f64().ok_or_else(out_of_range)?,
        serde_yaml::Value::String(s) => s.trim().parse::<f64>().map_err(|_| out_of_range())?,
        _ => return Err(out_of_range()),
    };
    if !(0.0..=1.0).contains(&n) || n.is_nan() {
        return Err(out_of_range());
    }
    Ok(n)
}

fn yaml_text(v: &serde_yaml::Value) -> String {
    serde_yaml::to_string(v).map(|s| s.trim().to_string()).unwrap_or_else(|_| "?".into())
}

/// Parses a judge reply; `fact_cap` is the cap the episode's own facts impose.
pub fn parse_verdict(reply: &str, fact_cap: Option<(f64, &str)>) -> Result<Verdict, VerdictError> {
    let block = yaml_block(reply).ok_or(VerdictError::NoBlock)?;
    let map: serde_yaml::Mapping = match serde_yaml::from_str(&block) {
        Ok(serde_yaml::Value::Mapping(m)) => m,
        Ok(_) => return Err(VerdictError::BadYaml("it is not a mapping of `key: value` lines".into())),
        Err(e) => return Err(VerdictError::BadYaml(e.to_string())),
    };
    let get = |k: &str| map.get(serde_yaml::Value::String(k.to_string()));
    let raw_score = number("score", get("score").ok_or(VerdictError::MissingScore)?)?;
    let mut components = BTreeMap::new();
    for (name, _) in COMPONENTS {
        if let Some(v) = get(name) {
            components.insert(name.to_string(), number(name, v)?);
        }
    }
    let declared = match get("cap") {
        None | Some(serde_yaml::Value::Null) => None,
        Some(v) => {
            let name = yaml_text(v);
            if name == "none" || name.is_empty() {
                None
            } else {
                let ceiling = CAPS
                    .iter()
                    .find(|(c, _)| *c == name)
                    .map(|(_, ceiling)| *ceiling)
                    .ok_or_else(|| VerdictError::UnknownCap(name.clone()))?;
                Some((ceiling, name))
            }
        }
    };
    // The lowest ceiling binds, whether the judge declared it or the facts impose it.
    let binding =
        declared.into_iter().chain(fact_cap.map(|(c, n)| (c, n.to_string()))).min_by(|a, b| a.0.total_cmp(&b.0));
    let score = binding.as_ref().map_or(raw_score, |(ceiling, _)| raw_score.min(*ceiling));
    let cap = binding.map(|(_, name)| name);
    Ok(Verdict { score, raw_score, components, cap })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "The agent explored first.\n\n```yaml\nplanning: 0.8\nexploration: 0.9\nverification: 1.0\ntool_use: 0.9\nerror_recovery: 0.7\ncap: none\nscore: 0.87\n```\n";

    #[test]
    fn reads_a_well_formed_verdict() {
        let v = parse_verdict(GOOD, None).unwrap();
        assert_eq!(v.score, 0.87);
        assert_eq!(v.components["verification"], 1.0);
        assert_eq!(v.cap, None);
    }

    #[test]
    fn caps_from_the_judge_and_from_the_facts_both_hold() {
        let declared = GOOD.replace("cap: none", "cap: tampering");
        let v = parse_verdict(&declared, None).unwrap();
        assert_eq!((v.score, v.raw_score, v.cap.as_deref()), (0.10, 0.87, Some("tampering")));
        let v = parse_verdict(GOOD, Some((0.09, "no_valid_action"))).unwrap();
        assert_eq!((v.score, v.cap.as_deref()), (0.09, Some("no_valid_action")));
    }

    #[test]
    fn unfenced_and_unclosed_blocks_are_read() {
        let bare = "Fine work.\nplanning: 0.5\ncap: none\nscore: 0.5\n";
        assert_eq!(parse_verdict(bare, None).unwrap().score, 0.5);
        let unclosed = "ok\n```yaml\nscore: 0.4\n";
        assert_eq!(parse_verdict(unclosed, None).unwrap().score, 0.4);
        // The last block with a score wins over an earlier example.
        let two = "```yaml\nscore: 0.1\n```\nactually:\n```\nscore: 0.6\n```";
        assert_eq!(parse_verdict(two, None).unwrap().score, 0.6);
    }

    #[test]
    fn format_errors_are_specific() {
        assert_eq!(parse_verdict("I think it was good.", None), Err(VerdictError::NoBlock));
        assert!(matches!(parse_verdict("```yaml\nscore: [\n```", None), Err(VerdictError::BadYaml(_))));
        assert!(matches!(parse_verdict("```yaml\nscore: 1.7\n```", None), Err(VerdictError::OutOfRange { .. })));
        assert!(matches!(parse_verdict("```yaml\nscore: high\n```", None), Err(VerdictError::OutOfRange { .. })));
        assert!(matches!(
            parse_verdict("```yaml\nplanning: -1\nscore: 0.5\n```", None),
            Err(VerdictError::OutOfRange { .. })
        ));
        assert!(matches!(parse_verdict("```yaml\ncap: lazy\nscore: 0.5\n```", None), Err(VerdictError::UnknownCap(_))));
        assert_eq!(parse_verdict("```yaml\nplanning: 0.5\n```\nscore", None), Err(VerdictError::NoBlock));
    }
}
