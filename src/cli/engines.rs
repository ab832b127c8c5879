//! The engine pool of a command, from the user's `[[sandbox.engines]]`, and `agent
//! sandbox engines`, which shows each engine's state.

use std::io::Write;

use anyhow::Context;

use agent_core::config::Config;
use agent_sandbox::EnginePool;

/// The pool the config names (the local engine alone when it names none).
pub async fn pool(config: &Config) -> anyhow::Result<EnginePool> {
    EnginePool::connect(&config.sandbox.engines).await.context("cannot reach the Docker engines")
}

/// `agent sandbox engines`: each engine with whether it answers, its version, the
/// containers of ours on it and its free capacity.
pub async fn list(config: &Config) -> anyhow::Result<u8> {
    let specs = if config.sandbox.engines.is_empty() {
        vec![agent_sandbox::EngineSpec::local()]
    } else {
        config.sandbox.engines.clone()
    };
    let mut rows = Vec::new();
    let mut down = 0;
    for spec in &specs {
        let name = spec.display_name();
        let engine = match config.sandbox.engines.is_empty() {
            true => agent_sandbox::connect().await,
            false => agent_sandbox::connect_engine(spec).await,
        };
        let row = match engine {
            Ok(e) => {
                let ours =
                    agent_sandbox::count_running(&e).await.map(|n| n.to_string()).unwrap_or_else(|e| e.to_string());
                let free = match ours.parse::<usize>() {
                    Ok(n) if spec.max_containers != usize::MAX => spec.max_containers.saturating_sub(n).to_string(),
                    _ => "unbounded".into(),
                };
                [name, spec.url.clone(), "up".into(), e.version().to_string(), ours, free]
            }
            Err(e) => {
                down += 1;
                [name, spec.url.clone(), format!("down: {e}"), "-".into(), "-".into(), "-".into()]
            }
        };
        rows.push(row);
    }
    let header = ["ENGINE", "URL", "STATE", "VERSION", "OURS", "FREE"].map(String::from);
    let mut widths: Vec<usize> = header.iter().map(String::len).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count().min(60));
        }
    }
    let mut out = std::io::stdout().lock();
    for r in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = r.iter().zip(&widths).map(|(c, &w)| format!("{c:<w$}")).collect();
        writeln!(out, "{}", cells.join("  ").trim_end())?;
    }
    Ok(if down == specs.len() { 1 } else { 0 })
}
