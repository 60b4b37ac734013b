//! The tiny model's character-level tokenizer, as the files a Hugging Face model folder
//! holds (`tokenizer.json`, `tokenizer_config.json`).

use crate::{Task, EOS, EOS_ID, PAD, PAD_ID, UNK, UNK_ID};

/// The compact task's character-level tokenizer ([`task_tokenizer_json`]).
pub fn tokenizer_json() -> String {
    task_tokenizer_json(Task::Arith)
}

/// A task's character-level tokenizer as a Hugging Face `tokenizer.json`: a BPE model with
/// one token per character and no merges, plus a `Fuse` decoder, so it loads in both
/// the `tokenizers` crate and `transformers`.
pub fn task_tokenizer_json(task: Task) -> String {
    let mut vocab = serde_json::Map::new();
    for (i, t) in [PAD, EOS, UNK].iter().enumerate() {
        vocab.insert((*t).to_string(), serde_json::json!(i));
    }
    for (i, c) in task.chars().chars().enumerate() {
        vocab.insert(c.to_string(), serde_json::json!(i + 3));
    }
    let special = |id: u32, content: &str| {
        serde_json::json!({
            "id": id, "content": content, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true
        })
    };
    let tok = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(PAD_ID, PAD), special(EOS_ID, EOS), special(UNK_ID, UNK)],
        "normalizer": null,
        "pre_tokenizer": null,
        "post_processor": null,
        "decoder": {"type": "Fuse"},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": UNK,
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": []
        }
    });
    serde_json::to_string_pretty(&tok).unwrap_or_default()
}

/// `tokenizer_config.json` for transformers (special tokens, no chat template).
pub fn tokenizer_config_json() -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS, "pad_token": PAD, "unk_token": UNK,
        "model_max_length": 256
    }))
    .unwrap_or_default()
}
