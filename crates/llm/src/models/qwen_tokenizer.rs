//! The layout of a Qwen2/Qwen3 `tokenizer.json` (NFC, the Qwen split pattern, byte-level
//! BPE), written from a vocabulary and merges: the generated tiny model's tokenizer and a
//! GGUF's converted one must both read exactly as Qwen's own does.

use serde_json::{json, Map, Value};

/// Qwen2/Qwen3 pre-tokenizer pattern (the `Split` step of their `tokenizer.json`).
pub const QWEN_SPLIT_REGEX: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// One added (special or user-defined) token of a `tokenizer.json`.
pub fn added_token(id: usize, content: &str, special: bool) -> Value {
    json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
           "normalized": false, "special": special})
}

/// A byte-level BPE `tokenizer.json` in Qwen's layout: `vocab` maps token text (in the
/// byte-level alphabet) to ids, `merges` are `"a b"` strings, `added` from [`added_token`].
pub fn byte_level_bpe_json(vocab: Map<String, Value>, merges: Vec<Value>, added: Vec<Value>) -> Value {
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false});
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_SPLIT_REGEX}, "behavior": "Isolated", "invert": false},
            byte_level,
        ]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": merges},
    })
}
