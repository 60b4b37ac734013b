use std::path::PathBuf;

use anyhow::{Context, Result};
use deltarl_model::synthetic::random_checkpoint;
use deltarl_model::Shape;
use deltarl_model::{Dtype, Family};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum DtypeArg {
    F32,
    Bf16,
}

/// The architecture written (`config.json`'s `model_type`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum FamilyArg {
    Qwen3,
    /// Qwen2 / Qwen2.5: q/k/v biases, no q/k norm.
    Qwen2,
    /// Llama: no biases, no q/k norm (default rotary embeddings).
    Llama,
}

/// Default shape: Qwen3's vocabulary on a small body, so the vocabulary-sized work
/// (embedding, LM head, softmax, sampling) is at real scale and the rest fits a laptop.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output folder (a Hugging Face model folder).
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 151_936)]
    vocab: usize,
    #[arg(long, default_value_t = 256)]
    hidden: usize,
    #[arg(long, default_value_t = 768)]
    intermediate: usize,
    #[arg(long, default_value_t = 4)]
    layers: usize,
    #[arg(long, default_value_t = 4)]
    heads: usize,
    #[arg(long, default_value_t = 2)]
    kv_heads: usize,
    #[arg(long, default_value_t = 4096)]
    max_positions: usize,
    /// Separate LM head instead of tied embeddings.
    #[arg(long)]
    untied: bool,
    #[arg(long, value_enum, default_value = "qwen3")]
    family: FamilyArg,
    /// The dtype of the saved weights.
    #[arg(long, value_enum, default_value = "f32")]
    dtype: DtypeArg,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let dtype = match self.dtype {
            DtypeArg::F32 => Dtype::F32,
            DtypeArg::Bf16 => Dtype::Bf16,
        };
        let shape = Shape {
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            num_hidden_layers: self.layers,
            num_attention_heads: self.heads,
            num_key_value_heads: self.kv_heads,
            max_position_embeddings: self.max_positions,
            tie_word_embeddings: !self.untied,
        };
        let family = match self.family {
            FamilyArg::Qwen3 => Family::Qwen3,
            FamilyArg::Qwen2 => Family::Qwen2,
            FamilyArg::Llama => Family::Llama,
        };
        let p = random_checkpoint(family, &self.out, self.vocab, &shape, dtype, self.seed)
            .with_context(|| {
                format!("cannot write a random checkpoint to {}", self.out.display())
            })?;
        let params: i64 = p.vs.variables().values().map(|t| t.numel() as i64).sum();
        eprintln!(
            "wrote {} ({params} parameters, vocabulary {}, {:?})",
            self.out.display(),
            self.vocab,
            dtype
        );
        Ok(())
    }
}
