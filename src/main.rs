//! The `agent` binary: argument parsing and the edge where errors become messages.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(if args.verbose { "agent=debug" } else { "warn" }));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agent: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(cli::dispatch(args)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("agent: {}", one_line(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line.
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
    }
    parts.join(": ").replace('\n', " ")
}
