//! Harbor's healthcheck (`[environment.healthcheck]`, and a step's `healthcheck`): a
//! shell command run in the agent's container after the environment starts (or after a
//! step's setup) and before the agent, until it exits 0. Docker's HEALTHCHECK
//! semantics as Harbor applies them: failures inside `start_period_sec` do not count and
//! are retried every `start_interval_sec`; after it, `retries` consecutive failures,
//! `interval_sec` apart, make the environment unhealthy.

use std::time::Duration;

use serde::Deserialize;

use super::super::error::TaskError;

/// A healthcheck as a trial runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Healthcheck {
    /// The shell command (bash); exit 0 means healthy.
    pub command: String,
    /// Between attempts once the start period is over (Harbor's default 5 s).
    pub interval: Duration,
    /// Longest one attempt may run (default 30 s); a longer one counts as failed.
    pub timeout: Duration,
    /// After the check begins, failures in this period do not count (default 0).
    pub start_period: Duration,
    /// Between attempts inside the start period (default 5 s).
    pub start_interval: Duration,
    /// Consecutive counted failures that make the environment unhealthy (default 3).
    pub retries: u32,
}

/// The table as written (Harbor's `HealthcheckConfig`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HealthToml {
    command: String,
    interval_sec: Option<f64>,
    timeout_sec: Option<f64>,
    start_period_sec: Option<f64>,
    start_interval_sec: Option<f64>,
    retries: Option<u32>,
}

impl Healthcheck {
    /// Reads the table at `field` (for errors) of `shown`.
    pub(super) fn parse(shown: &str, field: &str, raw: &toml::Value) -> Result<Healthcheck, TaskError> {
        let bad = |reason: String| TaskError::BadField { path: shown.into(), field: field.into(), reason };
        let t: HealthToml = raw.clone().try_into().map_err(|e: toml::de::Error| {
            bad(format!(
                "{} (expected `command` and optionally interval_sec, timeout_sec, start_period_sec, \
                 start_interval_sec, retries)",
                e.message()
            ))
        })?;
        if t.command.trim().is_empty() {
            return Err(bad("`command` is empty".into()));
        }
        let secs = |name: &str, v: Option<f64>, default: f64, zero_ok: bool| {
            let v = v.unwrap_or(default);
            if v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0)) {
                Ok(Duration::from_secs_f64(v))
            } else {
                let least = if zero_ok { "≥ 0" } else { "> 0" };
                Err(bad(format!("`{name}` must be a number of seconds {least}")))
            }
        };
        Ok(Healthcheck {
            interval: secs("interval_sec", t.interval_sec, 5.0, true)?,
            timeout: secs("timeout_sec", t.timeout_sec, 30.0, false)?,
            start_period: secs("start_period_sec", t.start_period_sec, 0.0, true)?,
            start_interval: secs("start_interval_sec", t.start_interval_sec, 5.0, true)?,
            // Harbor's check gives up at the first counted failure when retries is 0.
            retries: t.retries.unwrap_or(3).max(1),
            command: t.command,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Healthcheck, TaskError> {
        let v: toml::Value = toml::from_str(text).unwrap();
        Healthcheck::parse("task.toml", "environment.healthcheck", &v)
    }

    #[test]
    fn harbors_defaults_fill_what_is_not_written() {
        let h = parse("command = \"test -f /tmp/ready\"\n").unwrap();
        assert_eq!(h.command, "test -f /tmp/ready");
        assert_eq!(
            (h.interval, h.timeout, h.start_period, h.start_interval, h.retries),
            (Duration::from_secs(5), Duration::from_secs(30), Duration::ZERO, Duration::from_secs(5), 3)
        );
        let h = parse(
            "command = \"true\"\ninterval_sec = 0.5\ntimeout_sec = 2\nstart_period_sec = 10\n\
             start_interval_sec = 0.25\nretries = 0\n",
        )
        .unwrap();
        assert_eq!(h.interval, Duration::from_millis(500));
        assert_eq!(h.timeout, Duration::from_secs(2));
        assert_eq!(h.start_period, Duration::from_secs(10));
        assert_eq!(h.start_interval, Duration::from_millis(250));
        assert_eq!(h.retries, 1, "0 retries fails at the first counted failure, as under Harbor");
    }

    #[test]
    fn a_bad_table_names_the_field_and_what_is_wrong() {
        let e = parse("interval_sec = 1\n").unwrap_err().to_string();
        assert!(e.contains("environment.healthcheck") && e.contains("command"), "{e}");
        let e = parse("command = \" \"\n").unwrap_err().to_string();
        assert!(e.contains("`command` is empty"), "{e}");
        let e = parse("command = \"true\"\ntimeout_sec = 0\n").unwrap_err().to_string();
        assert!(e.contains("`timeout_sec` must be a number of seconds > 0"), "{e}");
        let e = parse("command = \"true\"\ninterval_sec = -1\n").unwrap_err().to_string();
        assert!(e.contains("`interval_sec`"), "{e}");
        let e = parse("command = \"true\"\ntest = [\"CMD\"]\n").unwrap_err().to_string();
        assert!(e.contains("unknown field `test`"), "{e}");
    }
}
