//! `agent serve`: the local model behind an OpenAI-compatible API.

use anyhow::Context;
use clap::Args;

use agent_core::config::Config;
use agent_llm::{resolve_model, ModelSpec};

use super::signals::Signals;

/// Arguments of `agent serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Model spec (as for `agent run`).
    #[arg(long)]
    pub model: Option<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Local model settings.
    #[command(flatten)]
    pub local: super::LocalArgs,
    /// The model id clients see in `/v1/models` (default: the model's name, with the
    /// adapter's after a `+` under `--lora`). Requests may also name the spec.
    #[arg(long)]
    pub model_id: Option<String>,
    /// Requests a GGUF model on llama.cpp decodes at once, each in its own KV sequence of
    /// `--ctx` tokens (more wait for a free one).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub parallel: u32,
    /// Require `Authorization: Bearer KEY` on the API (needed to listen on an address
    /// other than loopback).
    #[arg(long, env = "AGENT_SERVE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

/// Serves until SIGINT/SIGTERM.
pub async fn run(args: ServeArgs, config: Config) -> anyhow::Result<u8> {
    let mut signals = Signals::install().context("cannot install signal handlers")?;
    let api_key = args.api_key.clone().filter(|k| !k.is_empty());
    let loopback = match args.host.as_str() {
        "localhost" => true,
        host => host.parse::<std::net::IpAddr>().map(|ip| ip.is_loopback()).unwrap_or(false),
    };
    if !loopback && api_key.is_none() {
        anyhow::bail!(
            "listening on {} would open the model to the network without a key: pass --api-key KEY (or set AGENT_SERVE_API_KEY), or listen on 127.0.0.1",
            args.host
        );
    }
    let spec_text = args.model.clone().or(config.model.clone()).unwrap_or_else(|| "default".into());
    let spec = ModelSpec::parse(&spec_text)?;
    let mut local = args.local.options();
    local.serve_parallel = Some(args.parallel);
    let resolve = super::resolve::resolve_options(config.api_key_env.clone(), local, false);
    let backend = resolve_model(&spec, &resolve).await?;
    let adapter = args.local.lora.clone();
    let model_id = args.model_id.clone().unwrap_or_else(|| match &adapter {
        Some(dir) => format!("{}+{}", backend.name(), adapter_label(dir)),
        None => backend.name(),
    });
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    let addr = listener.local_addr().context("cannot read the bound address")?;
    println!("listening on http://{addr}/v1 (model {model_id})");
    let options = agent::serve::ServeOptions {
        model_id,
        aliases: vec![spec_text, backend.name()],
        base: adapter.as_ref().map(|_| backend.name()),
        adapter,
        api_key,
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(agent::serve::serve(listener, backend, options, async move {
        let _ = rx.await;
    }));
    let sig = signals.recv().await;
    let _ = tx.send(());
    server.await.context("the server task failed")?.context("the server failed")?;
    Ok(Signals::exit_code(sig))
}

/// A short name for an adapter: its folder's name (the folder holding the adapter file
/// when the file is named).
fn adapter_label(path: &std::path::Path) -> String {
    let named = if path.is_file() { path.parent().unwrap_or(path) } else { path };
    named.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "adapter".into())
}
