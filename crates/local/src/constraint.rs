//! Grammar-constrained sampling for the in-process engines: a request's Lark grammar
//! (see `agent_llm::grammar`) compiled by llguidance against the model's vocabulary, and
//! the per-token mask it gives. One [`GrammarEnv`] per loaded model (building the token
//! trie walks the whole vocabulary), one [`Constraint`] per request.
//!
//! A grammar that does not compile never fails the request: it is logged and the reply is
//! sampled free, as it was before constraints existed (an MCP server's schema that
//! llguidance cannot read must not take the agent down).

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};

/// A model's vocabulary as llguidance sees it, and the factory that compiles grammars
/// against it.
pub struct GrammarEnv {
    factory: ParserFactory,
}

impl std::fmt::Debug for GrammarEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarEnv").finish_non_exhaustive()
    }
}

impl GrammarEnv {
    /// The environment of a vocabulary: each token's bytes as text is written (`text`,
    /// empty for control tokens), as the vocabulary spells it (`display`, for control
    /// tokens: llguidance keeps them apart from text) and the ids that end generation
    /// (the first one is the primary EOS).
    pub fn new(text: &[Vec<u8>], display: &[Vec<u8>], end_of_generation: &[u32]) -> Result<Self, String> {
        let n = u32::try_from(text.len()).map_err(|_| "the vocabulary is too large".to_string())?;
        let eos = end_of_generation.first().copied().unwrap_or(n.saturating_sub(1));
        let info = TokRxInfo::new(n, eos);
        let words: Vec<Vec<u8>> = text
            .iter()
            .zip(display.iter().chain(std::iter::repeat(&Vec::new())))
            .map(|(text, display)| match (text.is_empty(), display.is_empty()) {
                (false, _) => text.clone(),
                // llguidance's mark for a special token: 0xFF, then its name.
                (true, false) => std::iter::once(0xFF).chain(display.iter().copied()).collect(),
                (true, true) => Vec::new(),
            })
            .collect();
        let trie = TokTrie::from(&info, &words).with_eos_tokens(end_of_generation);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        // llguidance writes its own warnings to stderr, which would tear through the UI.
        factory.quiet();
        Ok(GrammarEnv { factory })
    }

    /// The constraint of one request, or `None` (logged) when the grammar does not compile.
    pub fn constraint(&self, lark: &str) -> Option<Constraint> {
        let parser = self.factory.create_parser(TopLevelGrammar::from_lark(lark.to_string()));
        let matcher = Matcher::new(parser);
        if let Some(error) = matcher.get_error() {
            tracing::warn!("the reply's grammar does not compile, so this reply is sampled without it: {error}");
            return None;
        }
        Some(Constraint { matcher })
    }
}

/// One request's grammar state: which tokens may come next.
pub struct Constraint {
    matcher: Matcher,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint").finish_non_exhaustive()
    }
}

impl Constraint {
    /// Sets the logit of every token the grammar refuses here to minus infinity. When the
    /// grammar has reached a dead end (which a sound grammar never does) the logits are
    /// left alone, so the reply goes on unconstrained rather than stalling.
    fn mask(&mut self, logits: &mut [f32]) {
        let Ok(mask) = self.matcher.compute_mask_or_eos() else { return };
        if mask.is_zero() {
            return;
        }
        for (id, logit) in logits.iter_mut().enumerate() {
            if !mask.is_allowed(id as u32) {
                *logit = f32::NEG_INFINITY;
            }
        }
    }

    /// Draws one token with `sample` from what the grammar allows here (`sample` sees the
    /// masked logits and returns the token and whatever else it reports), then advances
    /// past it: the one way an engine that samples itself applies a grammar.
    pub fn draw<R>(&mut self, logits: &[f32], sample: impl FnOnce(&[f32]) -> (u32, R)) -> (u32, R) {
        let mut allowed = logits.to_vec();
        self.mask(&mut allowed);
        let drawn = sample(&allowed);
        self.accept(drawn.0);
        drawn
    }

    /// Advances the grammar past the token that was chosen.
    fn accept(&mut self, id: u32) {
        if !self.matcher.is_stopped() {
            let _ = self.matcher.consume_token(id);
        }
    }

    /// The matcher, for engines that sample inside llama.cpp's own sampler chain.
    pub fn into_matcher(self) -> Matcher {
        self.matcher
    }
}
