//! Progress output of headless runs: readable text, or one JSON object per event.

use std::io::Write;

use agent_protocol::{EndReason, Event};

/// Prints events to stdout.
pub struct Printer {
    json: bool,
}

fn clip(text: &str, max_lines: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= max_lines {
        return text.trim_end().to_string();
    }
    let head = max_lines / 2;
    let tail = max_lines - head;
    format!(
        "{}\n    … {} lines …\n{}",
        lines[..head].join("\n"),
        lines.len() - max_lines,
        lines[lines.len() - tail..].join("\n")
    )
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n")
}

/// The lines for the settings of an untrusted project that a run leaves out.
pub fn describe_ignored(project: &str, ignored: &[agent_protocol::IgnoredSetting], hint: &str) -> String {
    let lines: Vec<String> = ignored.iter().map(|i| format!("    - {} ({})", i.what, i.file)).collect();
    format!("● not used, because the project {project} is not trusted:\n{}\n  {hint}", lines.join("\n"))
}

impl Printer {
    /// A printer in JSON-lines or human mode.
    pub fn new(json: bool) -> Self {
        Self { json }
    }

    /// A message from the front end itself (not from the core).
    pub fn notice(&mut self, message: &str) {
        self.event(&Event::Notice { message: message.to_string() });
    }

    /// Prints one event.
    pub fn event(&mut self, ev: &Event) {
        let mut out = std::io::stdout().lock();
        if self.json {
            if let Ok(line) = serde_json::to_string(ev) {
                let _ = writeln!(out, "{line}");
            }
            let _ = out.flush();
            return;
        }
        let text = match ev {
            Event::SessionConfigured { model, image, container, .. } => {
                format!("● model {model} · image {image} · container {container}")
            }
            Event::TurnStarted { turn } => format!("\n── turn {turn} ──"),
            Event::AssistantDelta { .. } | Event::ToolCallOutput { .. } | Event::PromptProgress { .. } => return,
            Event::AssistantMessage { text, .. } => indent(&clip(text.trim(), 40)),
            Event::ParseError { message, .. } => format!("  ! parse error: {message}"),
            Event::ToolCallBegin { tool, args, .. } => {
                let shown = match (tool.as_str(), args.get("cmd").and_then(|c| c.as_str())) {
                    ("bash", Some(cmd)) => format!("$ {}", clip(cmd, 6)),
                    _ => format!("{tool} {}", serde_json::to_string(args).unwrap_or_default()),
                };
                format!("  → {}", clip(&shown, 8))
            }
            Event::ToolCallEnd { observation, duration_ms, .. } => {
                format!("{}\n    ({} ms)", indent(&clip(observation, 16)), duration_ms)
            }
            Event::ApprovalRequest { tool, .. } => format!("  ? approval needed for {tool}"),
            Event::TokenUsage { last, total, decode_tokens_per_sec, .. } => {
                let speed = decode_tokens_per_sec.map(|s| format!(", {s:.1} tokens/s decode")).unwrap_or_default();
                format!(
                    "  · tokens: {} prompt + {} generated (episode {}){speed}",
                    last.prompt_tokens,
                    last.completion_tokens,
                    total.prompt_tokens + total.completion_tokens
                )
            }
            Event::Interrupted => "  ■ interrupted".into(),
            // The plan is the assistant message just printed.
            Event::TaskComplete | Event::PlanProposed { .. } | Event::TaskStarted { .. } => return,
            Event::Notice { message } => format!("● {message}"),
            Event::ProjectSettingsIgnored { project, ignored, hint } => describe_ignored(project, ignored, hint),
            Event::Error { message, fatal } => format!("{} {message}", if *fatal { "✗ error:" } else { "! warning:" }),
            Event::EpisodeEnd { reason, turns, usage, finish_message } => {
                let head = if *reason == EndReason::Finished { "✔ finished" } else { "■ stopped" };
                let msg = finish_message.as_deref().map(|m| format!("\n    {m}")).unwrap_or_default();
                format!(
                    "\n{head}: {} after {turns} turn(s), {} tokens{msg}",
                    reason.describe(),
                    usage.prompt_tokens + usage.completion_tokens
                )
            }
        };
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }
}
