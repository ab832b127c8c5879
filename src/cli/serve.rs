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
    /// A name clients may reach the server by, beyond localhost and the `--host`
    /// address (repeatable): requests whose `Host` header names anything else get a 403,
    /// so that a web page whose name was rebound to this address cannot use the API.
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    /// Requests in flight at once; more get a 429 with `Retry-After` instead of a queue.
    #[arg(long, default_value_t = agent::serve::DEFAULT_MAX_REQUESTS,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_connections: u32,
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
    let adapter = args.local.lora.as_deref().map(adapter_label);
    let model_id = args.model_id.clone().unwrap_or_else(|| match &adapter {
        Some(label) => format!("{}+{label}", public_name(&backend.name())),
        None => public_name(&backend.name()),
    });
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    let addr = listener.local_addr().context("cannot read the bound address")?;
    println!("listening on http://{addr}/v1 (model {model_id})");
    let options = agent::serve::ServeOptions {
        model_id,
        aliases: vec![spec_text, backend.name()],
        base: adapter.as_ref().map(|_| public_name(&backend.name())),
        adapter,
        api_key,
        listen_host: args.host.clone(),
        allowed_hosts: args.allowed_hosts.clone(),
        max_requests: args.max_connections as usize,
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

/// A model's name as `/v1/models` shows it: a file-system path (`scripted:/home/u/s.yaml`,
/// `/models/x.gguf`) reduced to its last part, so that a key-less server does not tell
/// every client how its disk is laid out; hub names (`Qwen/Qwen3-8B`) stay as they are.
fn public_name(name: &str) -> String {
    let (scheme, rest) = match name.split_once(':') {
        Some((s, r)) if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') => (Some(s), r),
        _ => (None, name),
    };
    let is_path = rest.starts_with('/') || rest.starts_with("./") || rest.starts_with("../") || rest.starts_with('~');
    if !is_path {
        return name.to_string();
    }
    let last = rest.trim_end_matches('/').rsplit('/').next().filter(|l| !l.is_empty()).unwrap_or("model");
    match scheme {
        Some(s) => format!("{s}:{last}"),
        None => last.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::public_name;

    #[test]
    fn paths_become_their_last_part_and_hub_names_stay() {
        assert_eq!(public_name("scripted:/home/u/work/s.yaml"), "scripted:s.yaml");
        assert_eq!(public_name("/models/qwen.gguf"), "qwen.gguf");
        assert_eq!(public_name("./m/tiny/"), "tiny");
        assert_eq!(public_name("Qwen/Qwen3-8B"), "Qwen/Qwen3-8B");
        assert_eq!(public_name("smollm2-135m"), "smollm2-135m");
    }
}
