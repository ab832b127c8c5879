//! The `task.toml` keys a trial does not honour, for the task's notice: anything outside
//! what `task/tb2.rs`, `task/health.rs` and `task/artifacts.rs` read (a step's keys are
//! `task/steps.rs`'s). Descriptive tables (`[task]`, `[metadata]`, `schema_version`) ask
//! nothing of a run, and a key set to an empty list or table asks for nothing either.

/// The keys a section honours, by section (`""` is the top level).
const HONOURED: &[(&str, &[&str])] = &[
    ("", &["multi_step_reward_strategy", "artifacts", "steps"]),
    ("agent", &["timeout_sec"]),
    ("verifier", &["timeout_sec", "env"]),
    ("solution", &["env"]),
    ("environment", &["network_mode", "allow_internet", "build_timeout_sec", "env", "mcp_servers", "healthcheck"]),
];

/// Top-level keys that describe the task and ask nothing of a run.
const DESCRIPTIVE: &[&str] = &["schema_version", "version", "source", "task", "metadata"];

/// The dotted names of the keys of `table` (a whole `task.toml`) that a trial ignores.
pub(super) fn unhonoured(table: &toml::Table) -> Vec<String> {
    let mut out = Vec::new();
    for (key, value) in table {
        if DESCRIPTIVE.contains(&key.as_str()) || asks_nothing(value) {
            continue;
        }
        match (value, sections(key)) {
            (toml::Value::Table(inner), Some(honoured)) => {
                for (k, v) in inner {
                    if !honoured.contains(&k.as_str()) && !asks_nothing(v) && !default_value(key, k, v) {
                        out.push(format!("{key}.{k}"));
                    }
                }
            }
            _ if top_level().contains(&key.as_str()) => {}
            _ => out.push(key.clone()),
        }
    }
    out.sort();
    out
}

fn sections(key: &str) -> Option<&'static [&'static str]> {
    HONOURED.iter().find(|(s, _)| !s.is_empty() && *s == key).map(|(_, keys)| *keys)
}

fn top_level() -> &'static [&'static str] {
    HONOURED.iter().find(|(s, _)| s.is_empty()).map(|(_, keys)| *keys).unwrap_or(&[])
}

/// An empty list or table: nothing asked.
fn asks_nothing(v: &toml::Value) -> bool {
    match v {
        toml::Value::Array(a) => a.is_empty(),
        toml::Value::Table(t) => t.is_empty(),
        _ => false,
    }
}

/// A setting written at the value this harness has anyway (Linux containers).
fn default_value(section: &str, key: &str, v: &toml::Value) -> bool {
    section == "environment" && key == "os" && v.as_str().is_some_and(|s| s.eq_ignore_ascii_case("linux"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Vec<String> {
        unhonoured(&toml::from_str(text).unwrap())
    }

    #[test]
    fn terminal_bench_2s_files_ask_nothing_unhonoured() {
        let tb2 = "schema_version = \"1.4\"\nartifacts = []\n[metadata]\nauthor_name = \"x\"\ntags = [\"a\"]\n\
                   [verifier]\ntimeout_sec = 60.0\ncollect = []\n[verifier.env]\n[agent]\ntimeout_sec = 360.0\n\
                   [environment]\nnetwork_mode = \"public\"\nbuild_timeout_sec = 600.0\nos = \"linux\"\n\
                   mcp_servers = []\n[environment.env]\n[solution.env]\n[task]\nname = \"o/t\"\n";
        assert!(keys(tb2).is_empty(), "{:?}", keys(tb2));
    }

    #[test]
    fn every_key_a_trial_ignores_is_named() {
        let got = keys(
            "future_key = 1\n[agent]\ntimeout_sec = 1.0\nuser = \"agent\"\n\
             [verifier]\nuser = \"root\"\ncollect = [{command = \"x\"}]\n\
             [environment]\ncpus = 2\nmemory_mb = 4096\nos = \"windows\"\ndocker_image = \"x\"\n\
             healthcheck = {command = \"true\"}\n[solution]\nenv = {A = \"1\"}\ntimeout_sec = 5\n",
        );
        assert_eq!(
            got,
            [
                "agent.user",
                "environment.cpus",
                "environment.docker_image",
                "environment.memory_mb",
                "environment.os",
                "future_key",
                "solution.timeout_sec",
                "verifier.collect",
                "verifier.user"
            ]
        );
    }
}
