//! Which tasks of an `agent tasks synth` index a training run takes: the index is
//! written by agent-bench and filtered by the trainer's presets, which parse without it.

use serde::{Deserialize, Serialize};

/// Which indexed tasks a training run takes (every condition that is set must hold).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskFilter {
    /// Difficulties to keep (`easy`, `medium`, `hard`); empty: all.
    #[serde(default)]
    pub difficulty: Vec<String>,
    /// Categories to keep; empty: all.
    #[serde(default)]
    pub category: Vec<String>,
    /// The solver's pass-rate band `[low, high]`, inclusive; a task without calibration
    /// is left out when a band is set.
    #[serde(default)]
    pub pass_rate: Option<[f64; 2]>,
}

impl TaskFilter {
    /// Whether a task with this difficulty, category and pass rate passes the filter.
    pub fn matches(&self, difficulty: &str, category: &str, pass_rate: Option<f64>) -> bool {
        let one_of = |wanted: &[String], v: &str| wanted.is_empty() || wanted.iter().any(|w| w.eq_ignore_ascii_case(v));
        one_of(&self.difficulty, difficulty)
            && one_of(&self.category, category)
            && match (self.pass_rate, pass_rate) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some([lo, hi]), Some(r)) => r >= lo - 1e-9 && r <= hi + 1e-9,
            }
    }

    /// What the filter keeps, in words.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.difficulty.is_empty() {
            parts.push(format!("difficulty {}", self.difficulty.join("/")));
        }
        if !self.category.is_empty() {
            parts.push(format!("category {}", self.category.join("/")));
        }
        if let Some([lo, hi]) = self.pass_rate {
            parts.push(format!("pass rate {lo:.2}–{hi:.2}"));
        }
        if parts.is_empty() {
            "every task".into()
        } else {
            parts.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_keeps_difficulty_category_and_a_pass_rate_band() {
        let f = TaskFilter {
            difficulty: vec!["hard".into(), "medium".into()],
            pass_rate: Some([0.1, 0.5]),
            ..Default::default()
        };
        assert!(f.matches("hard", "x", Some(0.25)));
        assert!(f.matches("Medium", "x", Some(0.5)));
        assert!(!f.matches("easy", "x", Some(0.25)));
        assert!(!f.matches("hard", "x", Some(0.75)));
        assert!(!f.matches("hard", "x", None), "uncalibrated tasks are out when a band is set");
        assert!(TaskFilter::default().matches("easy", "y", None));
        assert_eq!(f.describe(), "difficulty hard/medium, pass rate 0.10–0.50");
        let parsed: TaskFilter = serde_json::from_str(r#"{"category": ["games"]}"#).unwrap();
        assert!(!parsed.matches("easy", "security", None));
        assert!(serde_json::from_str::<TaskFilter>(r#"{"difficulty": [], "bogus": 1}"#).is_err());
    }
}
