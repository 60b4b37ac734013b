//! Random checkpoints of a real shape: a Qwen3 config of any size with random weights and a
//! byte-level BPE tokenizer of exactly its vocabulary size (151,936 for Qwen3), for tests
//! and benchmarks at the scale of real models without downloading one.

use std::path::Path;

use tch::Device;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

use crate::{
    build, init_weights, save, Dtype, Error, Family, Policy, Qwen3Config, Result, Tokenizer,
};

/// Special tokens after the BPE vocabulary, as Qwen's: the first ends a response.
pub const SPECIAL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// The shape of a random checkpoint.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
}

impl Shape {
    /// The Qwen3 config of this shape (`head_dim = hidden / heads`), validated.
    pub fn config(&self, rope_theta: f64, eos: u32, pad: Option<u32>) -> Result<Qwen3Config> {
        self.config_of(Family::Qwen3, rope_theta, eos, pad)
    }

    /// The config of this shape in `family` (Qwen2 / Qwen2.5: no `head_dim` key, as
    /// transformers writes it), validated.
    pub fn config_of(
        &self,
        family: Family,
        rope_theta: f64,
        eos: u32,
        pad: Option<u32>,
    ) -> Result<Qwen3Config> {
        let model_type = match family {
            Family::Qwen3 => "qwen3",
            Family::Qwen2 => "qwen2",
            Family::Llama => "llama",
        };
        let mut v = serde_json::json!({
            "architectures": [family.architecture()],
            "model_type": model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.hidden_size / self.num_attention_heads.max(1),
            "rms_norm_eps": 1e-6,
            "rope_theta": rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": false,
            "hidden_act": "silu",
            "bos_token_id": eos,
            "eos_token_id": eos,
            "torch_dtype": "float32",
        });
        if let Some(m) = v.as_object_mut() {
            if let Some(pad) = pad {
                m.insert("pad_token_id".into(), pad.into());
            }
            if family == Family::Qwen2 {
                m.remove("head_dim");
                m.remove("attention_bias");
            }
        }
        let cfg: Qwen3Config =
            serde_json::from_value(v).map_err(|e| Error::Config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }
}

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

/// Writes a Hugging Face folder with random weights (seeded) of `shape`, saved in `dtype`,
/// and a byte-level BPE tokenizer of its vocabulary size; returns the policy (Qwen3).
pub fn random_checkpoint(dir: &Path, shape: &Shape, dtype: Dtype, seed: u64) -> Result<Policy> {
    random_checkpoint_of(Family::Qwen3, dir, shape, dtype, seed)
}

/// [`random_checkpoint`] of a given family.
pub fn random_checkpoint_of(
    family: Family,
    dir: &Path,
    shape: &Shape,
    dtype: Dtype,
    seed: u64,
) -> Result<Policy> {
    std::fs::create_dir_all(dir).map_err(|e| Error::File {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    let tok_path = dir.join("tokenizer.json");
    deltarl_schemas::atomic_write_bytes(&tok_path, byte_level_bpe(shape.vocab_size)?.as_bytes())?;
    let eos = (shape.vocab_size - SPECIAL_TOKENS.len()) as u32;
    let cfg = shape.config_of(family, 1_000_000.0, eos, None)?;
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
