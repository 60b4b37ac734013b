//! A decoder's shape: the one statement of a model's size. The tiny model's `[model.tiny]`
//! table is this type, `random-model` builds one from its flags, and [`Shape::config`]
//! writes it into a model's `config.json` form.

use serde::{Deserialize, Serialize};

use crate::{Error, Family, Qwen3Config, Result};

/// A decoder's shape, but for its vocabulary (which its tokenizer fixes). Its serde form is
/// the `[model.tiny]` table of a configuration, hashed as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU layer.
    pub intermediate_size: usize,
    /// Decoder blocks.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub num_key_value_heads: usize,
    /// Context length.
    pub max_position_embeddings: usize,
    /// The LM head shares the embedding matrix (as the small Qwen3 models do); false = a
    /// head of its own.
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub tie_word_embeddings: bool,
}

fn yes() -> bool {
    true
}

fn is_yes(b: &bool) -> bool {
    *b
}

impl Shape {
    /// The config of this shape in `family` with a vocabulary of `vocab_size`
    /// (`head_dim = hidden / heads`; Qwen2 / Qwen2.5 have no `head_dim` key, as
    /// transformers writes them), validated.
    pub fn config(
        &self,
        family: Family,
        vocab_size: usize,
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
            "vocab_size": vocab_size,
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

    /// The shape of a model's config.
    pub fn of(c: &Qwen3Config) -> Shape {
        Shape {
            hidden_size: c.hidden_size,
            intermediate_size: c.intermediate_size,
            num_hidden_layers: c.num_hidden_layers,
            num_attention_heads: c.num_attention_heads,
            num_key_value_heads: c.num_key_value_heads,
            max_position_embeddings: c.max_position_embeddings,
            tie_word_embeddings: c.tie_word_embeddings,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A shape written into a config reads back as itself, in each family.
    #[test]
    fn a_shape_survives_its_config() {
        let s = Shape {
            hidden_size: 64,
            intermediate_size: 96,
            num_hidden_layers: 3,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            max_position_embeddings: 128,
            tie_word_embeddings: false,
        };
        for family in [Family::Qwen3, Family::Qwen2, Family::Llama] {
            let c = s.config(family, 300, 1e4, 299, None).unwrap();
            assert_eq!(Shape::of(&c), s);
            assert_eq!((c.vocab_size, c.head_dim()), (300, 16));
        }
    }
}
