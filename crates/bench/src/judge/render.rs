//! The episode rendered compactly for the judge: every reply in full (that is what is
//! judged), long tool outputs cut in the middle with a marker saying how much is gone.

use agent_protocol::trajectory::ObservationRecord;
use agent_protocol::EndReason;

use super::episode::JudgedEpisode;

/// Limits of the rendering.
#[derive(Debug, Clone, Copy)]
pub struct RenderLimits {
    /// Characters of one tool output kept (half from the head, half from the tail).
    pub observation_chars: usize,
    /// Characters of one reply kept.
    pub reply_chars: usize,
}

impl Default for RenderLimits {
    fn default() -> Self {
        Self { observation_chars: 1200, reply_chars: 4000 }
    }
}

/// Keeps the head and tail of `text` within `max` characters, with a marker between.
pub fn cut_middle(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max / 2).collect();
    let tail: String = text.chars().skip(count - max / 2).collect();
    format!("{head}\n[... {} characters cut ...]\n{tail}", count - 2 * (max / 2))
}

fn call_line(call: &ObservationRecord) -> String {
    let args = match &call.args {
        map if !map.is_empty() => {
            let parts: Vec<String> = map
                .iter()
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => format!("{k}={}", cut_middle(s, 200)),
                    other => format!("{k}={}", cut_middle(&other.to_string(), 200)),
                })
                .collect();
            format!(" {}", parts.join(" "))
        }
        _ => String::new(),
    };
    let status = match (call.timed_out, call.exit_code) {
        (true, _) => " (timed out)".to_string(),
        (false, Some(code)) => format!(" (exit {code})"),
        (false, None) => String::new(),
    };
    format!("[{}{args}]{status}", call.tool)
}

/// The transcript section of the judge prompt.
pub fn render_transcript(episode: &JudgedEpisode, limits: RenderLimits) -> String {
    let mut out = String::new();
    for (i, turn) in episode.turns.iter().enumerate() {
        // Structured native calls (API models) are not in the reply's text; they are shown
        // as the model's own `<tool_call>` lines so both formats read alike.
        let mut reply = turn.assistant.trim().to_string();
        for call in &turn.tool_calls {
            let json = serde_json::json!({"name": call.name, "arguments": call.arguments});
            reply.push_str(&format!("\n<tool_call>{json}</tool_call>"));
        }
        out.push_str(&format!("### Turn {}\nAgent:\n{}\n", i + 1, cut_middle(reply.trim(), limits.reply_chars)));
        let malformed = turn.malformed_actions();
        if malformed > 0 {
            out.push_str(&format!("(this reply had {malformed} malformed tool call(s))\n"));
        }
        if turn.observations.is_empty() && malformed == 0 {
            out.push_str("(no tool call in this reply)\n");
        }
        for call in &turn.observations {
            out.push_str(&format!(
                "Tool {}:\n{}\n",
                call_line(call),
                cut_middle(call.observation.trim_end(), limits.observation_chars)
            ));
        }
        out.push('\n');
    }
    out
}

/// The "how it ended" section.
pub fn render_ending(episode: &JudgedEpisode) -> String {
    let reason = match episode.end_reason {
        Some(EndReason::Finished) => "the agent called `finish`",
        Some(EndReason::MaxTurns) => "the turn limit was reached",
        Some(EndReason::TokenBudget) => "the token budget ran out",
        Some(EndReason::ContextExhausted) => "the conversation outgrew the model's context window",
        Some(EndReason::WallClock) => "the time limit was reached",
        Some(EndReason::ParseFailures) => "too many replies in a row had no valid tool call",
        Some(EndReason::Interrupted) => "the user interrupted it",
        Some(EndReason::Repetition) => "repetition",
        Some(EndReason::Shutdown) => "shutdown",
        Some(EndReason::Error) => "error",
        None => "the transcript stops here (no end record)",
    };
    match &episode.finish_message {
        Some(msg) => format!("{reason}; its final message: {}", cut_middle(msg, 800)),
        None => reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_protocol::trajectory::TurnRecord;

    fn turn(assistant: &str, observations: serde_json::Value) -> TurnRecord {
        serde_json::from_value(serde_json::json!({
            "turn": 1, "user": {"role": "user", "content": "t"}, "assistant": assistant, "finish_reason": "stop",
            "usage": {"prompt_tokens": 0, "completion_tokens": 0}, "model_ms": 0, "actions": [], "parse_errors": [],
            "observations": observations,
        }))
        .unwrap()
    }

    #[test]
    fn long_text_keeps_head_and_tail() {
        let text: String = (0..5000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let cut = cut_middle(&text, 100);
        assert!(cut.starts_with(&text[..50]) && cut.ends_with(&text[4950..]));
        assert!(cut.contains("[... 4900 characters cut ...]"));
        assert_eq!(cut_middle("short", 100), "short");
        // Multi-byte characters are never split.
        assert!(cut_middle(&"é".repeat(300), 10).starts_with("ééééé\n"));
    }

    #[test]
    fn transcript_shows_calls_statuses_and_missing_actions() {
        let episode = JudgedEpisode {
            task: "t".into(),
            turns: vec![
                turn(
                    "Let me look.",
                    serde_json::json!([{
                        "call_id": "c1", "tool": "bash", "args": {"cmd": "ls /app"}, "observation": "x".repeat(5000),
                        "exit_code": 2, "timed_out": false, "duration_ms": 1,
                    }]),
                ),
                turn("I am done.", serde_json::json!([])),
            ],
            end_reason: Some(EndReason::Finished),
            finish_message: Some("done".into()),
        };
        let text = render_transcript(&episode, RenderLimits::default());
        assert!(text.contains("Tool [bash cmd=ls /app] (exit 2):"), "{text}");
        assert!(text.contains("characters cut"));
        assert!(text.contains("(no tool call in this reply)"));
        assert!(text.len() < 2500);
        assert_eq!(render_ending(&episode), "the agent called `finish`; its final message: done");
    }

    #[test]
    fn structured_native_calls_read_like_the_models_own() {
        let line = r#"{"type":"turn","turn":1,"user":{"role":"user","content":"t"},"assistant":"","finish_reason":"stop","usage":{"prompt_tokens":1,"completion_tokens":1},"model_ms":1,"actions":[],"parse_errors":[],"observations":[{"call_id":"c1","tool":"bash","args":{"cmd":"ls"},"observation":"a","exit_code":0,"timed_out":false,"duration_ms":1}],"tool_calls":[{"id":"c1","name":"bash","arguments":{"cmd":"ls"}}]}"#;
        let episode = JudgedEpisode::from_trajectory(line).unwrap();
        let text = render_transcript(&episode, RenderLimits::default());
        assert!(
            text.contains("Agent:\n<tool_call>{\"arguments\":{\"cmd\":\"ls\"},\"name\":\"bash\"}</tool_call>\n")
                || text.contains("Agent:\n<tool_call>{\"name\":\"bash\",\"arguments\":{\"cmd\":\"ls\"}}</tool_call>\n"),
            "{text}"
        );
        assert!(text.contains("Tool [bash cmd=ls] (exit 0):"), "{text}");
        assert_eq!(episode.facts().valid_calls, 1);
    }
}
