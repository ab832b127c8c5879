//! What one model call cost: cache reuse and the timings behind throughput figures.

use std::time::Duration;

/// Figures of one finished call, for benchmarks and `--verbose` logs. Backends that run
/// the model in this process report them; HTTP backends cannot see inside the server.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CallStats {
    /// Tokens of the rendered prompt.
    pub prompt_tokens: u64,
    /// Prompt tokens whose keys and values were reused from an earlier call, when the
    /// engine tells.
    pub prompt_tokens_cached: Option<u64>,
    /// Prompt tokens this call evaluated, when the engine tells (fewer than the uncached
    /// rest of the prompt when the call was cancelled during the prompt).
    pub prompt_tokens_computed: Option<u64>,
    /// Tokens generated, the end-of-generation token included.
    pub completion_tokens: u64,
    /// Time spent evaluating the prompt.
    pub prompt_eval: Duration,
    /// From the start of the call until the first token was sampled.
    pub time_to_first_token: Duration,
    /// Time spent sampling and decoding the completion.
    pub decode: Duration,
}

impl CallStats {
    /// Prompt evaluation speed over the tokens actually evaluated (all of the prompt when
    /// the engine does not say what it reused).
    pub fn prompt_tokens_per_sec(&self) -> Option<f64> {
        per_sec(self.prompt_tokens_computed.unwrap_or(self.prompt_tokens), self.prompt_eval)
    }

    /// Decode speed, when any token was generated.
    pub fn decode_tokens_per_sec(&self) -> Option<f64> {
        per_sec(self.completion_tokens, self.decode)
    }
}

fn per_sec(tokens: u64, time: Duration) -> Option<f64> {
    (tokens > 0 && !time.is_zero()).then(|| tokens as f64 / time.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_use_what_was_computed() {
        let s = CallStats {
            prompt_tokens: 1000,
            prompt_tokens_cached: Some(900),
            prompt_tokens_computed: Some(100),
            completion_tokens: 50,
            prompt_eval: Duration::from_millis(500),
            time_to_first_token: Duration::from_millis(600),
            decode: Duration::from_secs(1),
        };
        assert_eq!(s.prompt_tokens_per_sec(), Some(200.0));
        assert_eq!(s.decode_tokens_per_sec(), Some(50.0));
        let unknown = CallStats { prompt_tokens_computed: None, ..s };
        assert_eq!(unknown.prompt_tokens_per_sec(), Some(2000.0));
        assert_eq!(CallStats::default().decode_tokens_per_sec(), None);
    }
}
