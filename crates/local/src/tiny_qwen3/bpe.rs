//! A byte-level BPE trained in-process, serialized as a Hugging Face `tokenizers`
//! JSON in the layout of Qwen3's `tokenizer.json`.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

/// One added (special) token: its text and whether decoding may skip it.
pub(crate) struct AddedToken {
    pub content: &'static str,
    pub special: bool,
}

/// Qwen3's added tokens, in Qwen3's order. Only the first three are "special" there;
/// the tool and thinking markers stay in decoded text.
pub(crate) const ADDED_TOKENS: [AddedToken; 9] = [
    AddedToken { content: "<|endoftext|>", special: true },
    AddedToken { content: "<|im_start|>", special: true },
    AddedToken { content: "<|im_end|>", special: true },
    AddedToken { content: "<tool_call>", special: false },
    AddedToken { content: "</tool_call>", special: false },
    AddedToken { content: "<tool_response>", special: false },
    AddedToken { content: "</tool_response>", special: false },
    AddedToken { content: "<think>", special: false },
    AddedToken { content: "</think>", special: false },
];

/// GPT-2's reversible byte → printable character map used by byte-level BPE.
pub(crate) fn byte_to_char() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let code = if printable {
            u32::from(b)
        } else {
            extra += 1;
            255 + extra
        };
        map[usize::from(b)] = char::from_u32(code).unwrap_or('\u{FFFD}');
    }
    map
}

/// Splits text like Qwen's split pattern ([`agent_llm::models::qwen_tokenizer::QWEN_SPLIT_REGEX`]) does (a hand-written scanner over the same
/// alternatives, in the same order), for training.
pub(crate) fn pretokenize(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let n = chars.len();
    let at = |i: usize| chars.get(i).map(|&(_, c)| c);
    let is_l = |c: char| c.is_alphabetic();
    let is_n = |c: char| c.is_numeric();
    let is_nl = |c: char| c == '\r' || c == '\n';
    let letters_from = |mut j: usize| {
        while at(j).is_some_and(is_l) {
            j += 1;
        }
        j
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < n {
        let c = chars[i].1;
        let end = contraction(&chars, i)
            .or_else(|| {
                // [^\r\n\p{L}\p{N}]?\p{L}+
                if is_l(c) {
                    Some(letters_from(i))
                } else if !is_nl(c) && !is_n(c) && at(i + 1).is_some_and(is_l) {
                    Some(letters_from(i + 1))
                } else {
                    None
                }
            })
            .or_else(|| is_n(c).then_some(i + 1))
            .or_else(|| {
                // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
                let mut j = if c == ' ' { i + 1 } else { i };
                let start = j;
                while at(j).is_some_and(|c| !c.is_whitespace() && !is_l(c) && !is_n(c)) {
                    j += 1;
                }
                (j > start).then(|| {
                    while at(j).is_some_and(is_nl) {
                        j += 1;
                    }
                    j
                })
            })
            .or_else(|| {
                // \s*[\r\n]+ | \s+(?!\S) | \s+
                let mut run_end = i;
                let mut last_nl = None;
                while let Some(c) = at(run_end).filter(|c| c.is_whitespace()) {
                    run_end += 1;
                    if is_nl(c) {
                        last_nl = Some(run_end);
                    }
                }
                if run_end == i {
                    return None;
                }
                Some(match last_nl {
                    Some(e) => e,
                    None if run_end == n || run_end - i == 1 => run_end,
                    None => run_end - 1,
                })
            })
            .unwrap_or(i + 1);
        let (from, to) = (chars[i].0, chars.get(end).map_or(text.len(), |&(p, _)| p));
        out.push(&text[from..to]);
        i = end;
    }
    out
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at position `i`: the end of the match.
fn contraction(chars: &[(usize, char)], i: usize) -> Option<usize> {
    if chars[i].1 != '\'' {
        return None;
    }
    let lower = |k: usize| chars.get(i + k).map(|&(_, c)| c.to_ascii_lowercase());
    for suffix in ["s", "t", "re", "ve", "m", "ll", "d"] {
        if suffix.chars().enumerate().all(|(k, c)| lower(k + 1) == Some(c)) {
            return Some(i + 1 + suffix.len());
        }
    }
    None
}

/// A trained byte-level BPE: token bytes by id (ids 0–255 are the single bytes), and
/// the merges in rank order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bpe {
    pub tokens: Vec<Vec<u8>>,
    pub merges: Vec<(u32, u32)>,
}

impl Bpe {
    /// Learns up to `num_merges` merges from `corpus`. Stops early when no pair occurs
    /// twice. Ties are broken by the pair's bytes, so the result is deterministic.
    pub(crate) fn train(corpus: &str, num_merges: usize) -> Bpe {
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        for piece in pretokenize(corpus) {
            *counts.entry(piece).or_default() += 1;
        }
        let mut words: Vec<(Vec<u32>, u64)> =
            counts.into_iter().map(|(w, n)| (w.bytes().map(u32::from).collect(), n)).collect();
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        let mut ids: HashMap<Vec<u8>, u32> = tokens.iter().cloned().zip(0u32..).collect();
        let mut merges = Vec::new();
        while merges.len() < num_merges {
            let mut pairs: HashMap<(u32, u32), u64> = HashMap::new();
            for (w, n) in &words {
                for p in w.windows(2) {
                    *pairs.entry((p[0], p[1])).or_default() += n;
                }
            }
            let key = |&(a, b): &(u32, u32)| (&tokens[a as usize], &tokens[b as usize]);
            let best = pairs.iter().filter(|(_, &n)| n >= 2).max_by(|x, y| {
                x.1.cmp(y.1).then_with(|| key(y.0).cmp(&key(x.0))) // higher count, then smaller bytes
            });
            let Some((&(a, b), _)) = best else { break };
            let joined = [tokens[a as usize].as_slice(), tokens[b as usize].as_slice()].concat();
            let id = *ids.entry(joined.clone()).or_insert_with(|| {
                tokens.push(joined);
                (tokens.len() - 1) as u32
            });
            for (w, _) in &mut words {
                merge_word(w, a, b, id);
            }
            merges.push((a, b));
        }
        Bpe { tokens, merges }
    }

    /// The token's text in the byte-level alphabet.
    pub(crate) fn token_text(&self, id: u32, map: &[char; 256]) -> String {
        self.tokens[id as usize].iter().map(|&b| map[usize::from(b)]).collect()
    }

    /// Number of ids the model part uses (added tokens follow).
    pub(crate) fn len(&self) -> usize {
        self.tokens.len()
    }

    /// The Hugging Face `tokenizer.json`, with [`ADDED_TOKENS`] from id `self.len()` on.
    pub(crate) fn tokenizer_json(&self) -> Value {
        let map = byte_to_char();
        let vocab: serde_json::Map<String, Value> =
            (0..self.tokens.len() as u32).map(|id| (self.token_text(id, &map), json!(id))).collect();
        let merges: Vec<Value> = self
            .merges
            .iter()
            .map(|&(a, b)| json!(format!("{} {}", self.token_text(a, &map), self.token_text(b, &map))))
            .collect();
        let added: Vec<Value> = ADDED_TOKENS
            .iter()
            .enumerate()
            .map(|(k, t)| agent_llm::models::qwen_tokenizer::added_token(self.len() + k, t.content, t.special))
            .collect();
        agent_llm::models::qwen_tokenizer::byte_level_bpe_json(vocab, merges, added)
    }
}

/// Replaces each non-overlapping `a b` in `w` (left to right) with `id`.
fn merge_word(w: &mut Vec<u32>, a: u32, b: u32, id: u32) {
    let mut out = Vec::with_capacity(w.len());
    let mut i = 0;
    while i < w.len() {
        if i + 1 < w.len() && w[i] == a && w[i + 1] == b {
            out.push(id);
            i += 2;
        } else {
            out.push(w[i]);
            i += 1;
        }
    }
    *w = out;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_is_a_bijection_like_gpt2() {
        let map = byte_to_char();
        let mut seen: Vec<char> = map.to_vec();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 256);
        assert_eq!(map[usize::from(b' ')], 'Ġ');
        assert_eq!(map[usize::from(b'\n')], 'Ċ');
        assert_eq!(map[usize::from(b'a')], 'a');
    }

    #[test]
    fn pretokenizer_follows_the_qwen_pattern() {
        assert_eq!(pretokenize("Hello world's  end"), ["Hello", " world", "'s", " ", " end"]);
        assert_eq!(pretokenize("x = 42;\n\n  y"), ["x", " =", " ", "4", "2", ";\n\n", " ", " y"]);
        assert_eq!(pretokenize("a  \n b"), ["a", "  \n", " b"]);
        assert_eq!(pretokenize("end   "), ["end", "   "]);
        assert_eq!(pretokenize("(foo)"), ["(foo", ")"]);
        assert_eq!(pretokenize("").len(), 0);
        let s = "fn main() {\n    println!(\"hi\");\n}\n";
        assert_eq!(pretokenize(s).concat(), s);
    }

    #[test]
    fn training_is_deterministic_and_merges_frequent_pairs() {
        let corpus = "the cat the hat the bat then there";
        let a = Bpe::train(corpus, 10);
        assert_eq!(a, Bpe::train(corpus, 10));
        let map = byte_to_char();
        let first = a.merges[0];
        let pair = (a.token_text(first.0, &map), a.token_text(first.1, &map));
        // `t h` and `h e` both occur 5 times; the tie goes to the smaller bytes.
        assert_eq!(pair, ("h".to_string(), "e".to_string()));
        for &(x, y) in &a.merges {
            assert!((x as usize) < a.len() && (y as usize) < a.len());
        }
        // Stops when no pair repeats.
        assert!(Bpe::train("abcdef", 100).merges.is_empty());
    }

    #[test]
    fn tokenizer_json_has_the_hf_layout() {
        let bpe = Bpe::train(include_str!("corpus.txt"), 50);
        let j = bpe.tokenizer_json();
        let vocab = j["model"]["vocab"].as_object().unwrap();
        assert_eq!(vocab.len(), bpe.len());
        assert_eq!(vocab["Ġ"], 32);
        assert_eq!(j["model"]["type"], "BPE");
        assert_eq!(j["model"]["merges"].as_array().unwrap().len(), 50);
        for m in j["model"]["merges"].as_array().unwrap() {
            let (l, r) = m.as_str().unwrap().split_once(' ').unwrap();
            assert!(vocab.contains_key(l) && vocab.contains_key(r), "{m}");
            assert!(vocab.contains_key(&format!("{l}{r}")), "{m}");
        }
        let added = j["added_tokens"].as_array().unwrap();
        assert_eq!(added.len(), ADDED_TOKENS.len());
        assert_eq!(added[2]["content"], "<|im_end|>");
        assert_eq!(added[2]["id"], bpe.len() + 2);
        assert_eq!(added[2]["special"], true);
        assert_eq!(added[7]["content"], "<think>");
        assert_eq!(
            j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"],
            agent_llm::models::qwen_tokenizer::QWEN_SPLIT_REGEX
        );
        assert_eq!(j["decoder"]["type"], "ByteLevel");
    }
}
