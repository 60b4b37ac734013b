//! Random checkpoints of a real shape: a Qwen3 config of any size with random weights and a
//! byte-level BPE tokenizer of exactly its vocabulary size (151,936 for Qwen3), for tests
//! and benchmarks at the scale of real models without downloading one.

use std::path::Path;

use tch::Device;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

use crate::{build, init_weights, save, Dtype, Error, Family, Policy, Result, Shape, Tokenizer};

/// Special tokens after the BPE vocabulary, as Qwen's: the first ends a response.
pub const SPECIAL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// A byte-level BPE tokenizer (GPT-2 / Qwen style) with exactly `vocab_size` tokens: the
/// 256 byte symbols, then merges of every pair of bytes, then of every (pair, byte), in a
/// fixed order until the size is reached, then [`SPECIAL_TOKENS`]. Returns its JSON.
pub fn byte_level_bpe(vocab_size: usize) -> Result<String> {
    let err = |m: String| Error::Tokenizer {
        path: "byte-level BPE".into(),
        message: m,
    };
    let bpe_size = vocab_size
        .checked_sub(SPECIAL_TOKENS.len())
        .filter(|&n| n >= 256)
        .ok_or_else(|| err(format!("vocab_size {vocab_size} < 256 + specials")))?;
    let mut bytes: Vec<char> = ByteLevel::alphabet().into_iter().collect();
    bytes.sort_unstable();
    let mut tokens: Vec<String> = bytes.iter().map(char::to_string).collect();
    let mut merges: Vec<(String, String)> = Vec::new();
    // Each level extends the previous level's tokens by one byte.
    let mut level: Vec<String> = tokens.clone();
    'grow: while tokens.len() < bpe_size {
        let mut next = Vec::new();
        for a in &level {
            for b in &bytes {
                if tokens.len() == bpe_size {
                    break 'grow;
                }
                let t = format!("{a}{b}");
                merges.push((a.clone(), b.to_string()));
                tokens.push(t.clone());
                next.push(t);
            }
        }
        level = next;
    }
    let vocab: Vocab = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| err(e.to_string()))?;
    let mut tok = HfTokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)));
    tok.with_decoder(Some(ByteLevel::default()));
    let specials: Vec<AddedToken> = SPECIAL_TOKENS
        .iter()
        .map(|s| AddedToken::from(*s, true))
        .collect();
    tok.add_special_tokens(&specials);
    tok.to_string(false).map_err(|e| err(e.to_string()))
}

/// Writes a Hugging Face folder with random weights (seeded) of `family` and `shape` with a
/// vocabulary of `vocab_size`, saved in `dtype`, and a byte-level BPE tokenizer of that size;
/// returns the policy.
pub fn random_checkpoint(
    family: Family,
    dir: &Path,
    vocab_size: usize,
    shape: &Shape,
    dtype: Dtype,
    seed: u64,
) -> Result<Policy> {
    // The vocabulary and the shape are checked before the folder is made, so a refused
    // shape leaves nothing behind.
    let bpe = byte_level_bpe(vocab_size)?;
    let eos = (vocab_size - SPECIAL_TOKENS.len()) as u32;
    let cfg = shape.config(family, vocab_size, 1_000_000.0, eos, None)?;
    std::fs::create_dir_all(dir).map_err(|e| Error::File {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    let tok_path = dir.join("tokenizer.json");
    deltarl_schemas::atomic_write_bytes(&tok_path, bpe.as_bytes())?;
    let mut policy = build(
        &cfg,
        Tokenizer::from_file(&tok_path)?,
        Device::Cpu,
        Dtype::F32,
    )?;
    init_weights(&mut policy, seed);
    if dtype == Dtype::Bf16 {
        policy.vs.bfloat16();
        policy.dtype = Dtype::Bf16;
    }
    save(&policy, dir)?;
    Ok(policy)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_refused_shape_or_vocabulary_leaves_no_folder() {
        let dir = tempfile::tempdir().unwrap();
        let shape = |hidden_size| Shape {
            hidden_size,
            intermediate_size: 16,
            num_hidden_layers: 1,
            num_attention_heads: 2,
            num_key_value_heads: 1,
            max_position_embeddings: 32,
            tie_word_embeddings: true,
        };
        let out = dir.path().join("m");
        let e = random_checkpoint(Family::Llama, &out, 300, &shape(0), Dtype::F32, 0);
        assert!(e.err().unwrap().to_string().contains("hidden_size = 0"));
        assert!(!out.exists());
        let e = random_checkpoint(Family::Llama, &out, 100, &shape(8), Dtype::F32, 0);
        assert!(e.err().unwrap().to_string().contains("vocab_size 100"));
        assert!(!out.exists());
        random_checkpoint(Family::Llama, &out, 300, &shape(8), Dtype::F32, 0).unwrap();
        assert!(out.join("config.json").is_file() && out.join("tokenizer.json").is_file());
    }

    #[test]
    fn the_bpe_has_exactly_the_vocabulary_and_round_trips_text() {
        let dir = tempfile::tempdir().unwrap();
        let json = byte_level_bpe(70_000).unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, json).unwrap();
        let tok = Tokenizer::from_file(&path).unwrap();
        let text = "Let x = 12; then 3x+1 = 37. \\boxed{37} ünïcødé";
        let ids = tok.encode(text).unwrap();
        assert!(ids.iter().all(|&i| i < 70_000));
        // Merges of byte pairs and triples: fewer tokens than bytes.
        assert!(ids.len() < text.len(), "{} tokens", ids.len());
        assert_eq!(tok.decode(&ids).unwrap(), text);
        assert_eq!(tok.encode("<|endoftext|>").unwrap(), vec![70_000 - 3]);
    }
}
