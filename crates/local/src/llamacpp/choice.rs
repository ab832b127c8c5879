//! How a served request picks each token from llama.cpp's logits: greedy at temperature
//! 0, else llama.cpp's own chain (repeat penalty, top-k, top-p, temperature, a seeded
//! draw), with the sampled token's log-probability and the most likely alternatives
//! taken from the raw distribution.

use tokio::sync::mpsc::UnboundedSender;

use super::rollouts::TokenChooser;
use crate::constraint::Constraint;
use crate::rng::SplitMix64;
use agent_llm::{SamplingDefaults, SamplingParams};

/// Tokens the repeat penalty looks back over (llama.cpp's default `repeat_last_n`).
const PENALTY_LAST_N: usize = 64;

/// One token as chosen: its id, its log-probability, and the alternatives asked for
/// (id, log-probability, most likely first).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Chosen {
    pub id: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// The sampler of one request; every choice also goes to `events`, in order.
pub(super) struct ServeChooser {
    temperature: f32,
    top_k: usize,
    top_p: f32,
    repeat_penalty: Option<f32>,
    rng: SplitMix64,
    /// How many alternatives to report; `None` reports no log-probabilities at all.
    top_n: Option<usize>,
    recent: Vec<u32>,
    events: UnboundedSender<Chosen>,
    /// The request's grammar: tokens it refuses are never drawn.
    constraint: Option<Constraint>,
}

impl ServeChooser {
    /// The request's sampling, then the model's defaults, then llama.cpp's (top-k 40,
    /// top-p 0.95, temperature 0.8), as the chat engine does.
    pub(super) fn new(
        s: &SamplingParams,
        defaults: &SamplingDefaults,
        top_n: Option<usize>,
        seed: u64,
        events: UnboundedSender<Chosen>,
        constraint: Option<Constraint>,
    ) -> Self {
        ServeChooser {
            temperature: s.temperature.or(defaults.temperature).unwrap_or(0.8),
            top_k: s.top_k.or(defaults.top_k).map(|k| k as usize).unwrap_or(40),
            top_p: s.top_p.or(defaults.top_p).unwrap_or(0.95),
            repeat_penalty: defaults.repeat_penalty.filter(|p| *p != 1.0 && *p > 0.0),
            rng: SplitMix64::new(s.seed.unwrap_or(seed)),
            top_n,
            recent: Vec::new(),
            events,
            constraint,
        }
    }

    /// A uniform draw in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.temperature <= 0.0 {
            return argmax(logits);
        }
        let mut candidates: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
        if let Some(penalty) = self.repeat_penalty {
            for &id in &self.recent {
                if let Some(c) = candidates.get_mut(id as usize) {
                    c.1 = if c.1 > 0.0 { c.1 / penalty } else { c.1 * penalty };
                }
            }
        }
        if self.top_k > 0 && self.top_k < candidates.len() {
            candidates.select_nth_unstable_by(self.top_k - 1, |a, b| b.1.total_cmp(&a.1));
            candidates.truncate(self.top_k);
        }
        candidates.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let max = candidates.first().map_or(0.0, |c| c.1);
        if self.top_p < 1.0 {
            let weights: Vec<f64> = candidates.iter().map(|c| f64::from(c.1 - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let mut acc = 0.0;
            let mut keep = candidates.len();
            for (i, w) in weights.iter().enumerate() {
                acc += w / total;
                if acc >= f64::from(self.top_p) {
                    keep = i + 1;
                    break;
                }
            }
            candidates.truncate(keep.max(1));
        }
        let t = f64::from(self.temperature);
        let weights: Vec<f64> = candidates.iter().map(|c| (f64::from(c.1 - max) / t).exp()).collect();
        let mut u = self.uniform() * weights.iter().sum::<f64>();
        for (c, w) in candidates.iter().zip(&weights) {
            if u < *w {
                return c.0;
            }
            u -= w;
        }
        candidates.last().map_or(0, |c| c.0)
    }
}

impl TokenChooser for ServeChooser {
    fn choose(&mut self, logits: &[f32]) -> (u32, f32) {
        // The grammar shapes the draw; the reported log-probabilities stay the model's own.
        let id = match self.constraint.take() {
            Some(mut constraint) => {
                let (id, ()) = constraint.draw(logits, |allowed| (self.sample(allowed), ()));
                self.constraint = Some(constraint);
                id
            }
            None => self.sample(logits),
        };
        self.recent.push(id);
        if self.recent.len() > PENALTY_LAST_N {
            self.recent.remove(0);
        }
        let lse = log_sum_exp(logits);
        let logprob = logits.get(id as usize).map_or(f32::NEG_INFINITY, |l| l - lse);
        let top = match self.top_n {
            Some(n) if n > 0 => top_n(logits, n).into_iter().map(|(i, l)| (i, l - lse)).collect(),
            _ => Vec::new(),
        };
        let _ = self.events.send(Chosen { id, logprob, top });
        (id, logprob)
    }
}

/// The highest logit's index (the lowest index among equals, as llama.cpp's greedy).
fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// `ln Σ exp(l)`, computed in f64 around the maximum.
fn log_sum_exp(logits: &[f32]) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    max + sum.ln() as f32
}

/// The `n` highest logits, highest first.
fn top_n(logits: &[f32], n: usize) -> Vec<(u32, f32)> {
    let mut all: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
    let n = n.min(all.len());
    if n == 0 {
        return Vec::new();
    }
    all.select_nth_unstable_by(n - 1, |a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(n);
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chooser(temperature: f32, top_n: Option<usize>) -> (ServeChooser, tokio::sync::mpsc::UnboundedReceiver<Chosen>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let s = SamplingParams { temperature: Some(temperature), seed: Some(7), ..SamplingParams::default() };
        (ServeChooser::new(&s, &SamplingDefaults::default(), top_n, 0, tx, None), rx)
    }

    #[test]
    fn greedy_takes_the_highest_and_reports_the_raw_log_probabilities() {
        let (mut c, mut rx) = chooser(0.0, Some(2));
        let logits = [1.0f32, 3.0, 2.0, 3.0];
        let (id, lp) = c.choose(&logits);
        assert_eq!(id, 1, "the first of two equal maxima");
        let z: f64 = logits.iter().map(|&l| f64::from(l).exp()).sum();
        assert!((f64::from(lp) - (3.0 - z.ln())).abs() < 1e-6);
        let event = rx.try_recv().unwrap();
        assert_eq!(event.id, 1);
        assert_eq!(event.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 3]);
        assert!((event.top[1].1 - lp).abs() < 1e-6);
    }

    #[test]
    fn sampling_follows_the_distribution_and_the_seed() {
        let logits = [0.0f32, (3.0f32).ln(), f32::NEG_INFINITY];
        let draws = |seed| {
            let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
            let s = SamplingParams {
                temperature: Some(1.0),
                top_p: Some(1.0),
                top_k: Some(0),
                seed: Some(seed),
                ..SamplingParams::default()
            };
            let mut c = ServeChooser::new(&s, &SamplingDefaults::default(), None, 0, tx, None);
            (0..4000).map(|_| c.choose(&logits).0).collect::<Vec<_>>()
        };
        let a = draws(1);
        assert_eq!(a, draws(1), "the same seed draws the same tokens");
        assert_ne!(a, draws(2));
        assert!(!a.contains(&2), "a token of probability 0 is never drawn");
        let ones = a.iter().filter(|&&t| t == 1).count() as f64 / a.len() as f64;
        assert!((ones - 0.75).abs() < 0.03, "{ones}");
    }

    #[test]
    fn top_p_keeps_the_nucleus() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let s = SamplingParams { temperature: Some(1.0), top_p: Some(0.5), seed: Some(3), ..SamplingParams::default() };
        let mut c = ServeChooser::new(&s, &SamplingDefaults::default(), None, 0, tx, None);
        // Token 0 holds about 88% of the mass: a nucleus of 0.5 is token 0 alone.
        let logits = [4.0f32, 2.0, 1.0];
        assert!((0..200).all(|_| c.choose(&logits).0 == 0));
    }
}
