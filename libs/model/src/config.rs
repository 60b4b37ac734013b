//! `config.json` of a Qwen3 checkpoint.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The subset of transformers' `Qwen3Config` the model needs. Unknown keys are kept
/// (HF configs carry many) and written back unchanged.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Qwen3Config {
    #[serde(default)]
    pub architectures: Vec<String>,
    #[serde(default = "default_model_type")]
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    /// Legacy spelling; transformers 5 writes `rope_parameters.rope_theta` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_token_id: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_token_id: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_dtype: Option<String>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

fn default_model_type() -> String {
    "qwen3".into()
}
fn default_eps() -> f64 {
    1e-6
}
/// transformers' default when a config names no theta.
const DEFAULT_THETA: f64 = 10_000.0;
fn default_max_pos() -> usize {
    40_960
}
fn default_act() -> String {
    "silu".into()
}

/// The decoder families this implementation runs, from `config.json`'s `model_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Qwen3: per-head RMSNorm on queries and keys, no projection biases.
    Qwen3,
    /// Qwen2 and Qwen2.5: biases on the query, key and value projections, no q/k norm.
    Qwen2,
    /// Llama 3 (and 2): no biases, no q/k norm, optionally llama3 rotary scaling.
    Llama,
}

impl Family {
    /// transformers' class name of the family's causal LM.
    pub fn architecture(self) -> &'static str {
        match self {
            Family::Qwen3 => "Qwen3ForCausalLM",
            Family::Qwen2 => "Qwen2ForCausalLM",
            Family::Llama => "LlamaForCausalLM",
        }
    }
}

/// Llama 3's rotary scaling (`rope_type = "llama3"`): low frequencies divided by `factor`,
/// high ones kept, the band between interpolated (transformers' `_compute_llama3_parameters`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Rope {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: f64,
}

/// Parameter dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F32,
    Bf16,
}

impl Dtype {
    pub fn kind(self) -> tch::Kind {
        match self {
            Dtype::F32 => tch::Kind::Float,
            Dtype::Bf16 => tch::Kind::BFloat16,
        }
    }

    /// The name in our configs (`model.dtype`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
        }
    }

    /// The name Hugging Face (`config.json`'s `torch_dtype`) and vLLM (`--dtype`) use.
    pub fn hf_name(self) -> &'static str {
        match self {
            Dtype::F32 => "float32",
            Dtype::Bf16 => "bfloat16",
        }
    }
}

impl Qwen3Config {
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// RoPE base, read as transformers 5 reads it (`convert_rope_params_to_dict` in its
    /// `modeling_rope_utils.py`): the rotary table's `rope_theta` first (the table being
    /// `rope_scaling` when that is a non-empty table, else `rope_parameters`), then the
    /// top-level `rope_theta`, then 10000. [`Qwen3Config::validate`] refuses a value that
    /// is not a positive number, so this never falls back past a bad one.
    pub fn rope_theta(&self) -> f64 {
        self.rope_table()
            .and_then(|(_, t)| t.get("rope_theta"))
            .and_then(serde_json::Value::as_f64)
            .or(self.rope_theta)
            .unwrap_or(DEFAULT_THETA)
    }

    /// The end-of-sequence token ids (a number or a list in HF configs; `validate` refuses
    /// any other type).
    pub fn eos_ids(&self) -> Vec<u32> {
        match &self.eos_token_id {
            Some(serde_json::Value::Number(n)) => {
                n.as_u64().map(|x| x as u32).into_iter().collect()
            }
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_u64())
                .map(|x| x as u32)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Refuses a field of the wrong JSON type or an impossible value, naming it: each of
    /// these used to be read as a default (or as "no end token") without a word.
    fn check_values(&self) -> Result<()> {
        let err = |m: String| Err(Error::Config(m));
        if let Some((key, t)) = self.rope_table() {
            if let Some(v) = t.get("rope_theta") {
                if !v.as_f64().is_some_and(|x| x > 0.0 && x.is_finite()) {
                    return err(format!("{key}.rope_theta = {v}: must be a positive number"));
                }
            }
        }
        if let Some(x) = self.rope_theta {
            if !(x > 0.0 && x.is_finite()) {
                return err(format!("rope_theta = {x}: must be a positive number"));
            }
        }
        if !(self.rms_norm_eps >= 0.0 && self.rms_norm_eps < 1.0) {
            return err(format!(
                "rms_norm_eps = {}: must be in [0, 1) (a small constant added to the mean square)",
                self.rms_norm_eps
            ));
        }
        for (key, value) in [
            ("eos_token_id", &self.eos_token_id),
            ("bos_token_id", &self.bos_token_id),
        ] {
            let id_ok = |v: &serde_json::Value| {
                v.as_u64()
                    .is_some_and(|id| (id as usize) < self.vocab_size.max(1))
            };
            let ok = match value {
                None | Some(serde_json::Value::Null) => true,
                Some(serde_json::Value::Array(a)) => a.iter().all(id_ok),
                Some(v) => id_ok(v),
            };
            if !ok {
                let v = value.as_ref().map_or(String::new(), ToString::to_string);
                return err(format!(
                    "{key} = {v}: must be a token id or a list of token ids below vocab_size {}",
                    self.vocab_size
                ));
            }
        }
        Ok(())
    }

    /// The decoder family of `model_type` (validated by [`Qwen3Config::validate`]).
    pub fn family(&self) -> Result<Family> {
        match self.model_type.as_str() {
            "qwen3" => Ok(Family::Qwen3),
            "qwen2" => Ok(Family::Qwen2),
            "llama" => Ok(Family::Llama),
            other => Err(Error::Config(format!(
                "model_type {other:?} is not supported (\"qwen3\", \"qwen2\" for Qwen2 / Qwen2.5, \"llama\")"
            ))),
        }
    }

    /// The rotary table (`rope_parameters` in transformers 5, `rope_scaling` before): as
    /// transformers' `rope_scaling or self.rope_parameters`, a non-empty `rope_scaling`
    /// wins.
    fn rope_table(&self) -> Option<(&'static str, &serde_json::Value)> {
        ["rope_scaling", "rope_parameters"]
            .into_iter()
            .find_map(|k| {
                self.extra
                    .get(k)
                    .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
                    .map(|v| (k, v))
            })
    }

    /// Llama 3's rotary scaling, when the config asks for it.
    pub fn llama3_rope(&self) -> Result<Option<Llama3Rope>> {
        let Some((key, t)) = self.rope_table() else {
            return Ok(None);
        };
        let kind = t
            .get("rope_type")
            .or_else(|| t.get("type"))
            .and_then(|k| k.as_str());
        if kind != Some("llama3") {
            return Ok(None);
        }
        let num = |f: &str| {
            t.get(f).and_then(serde_json::Value::as_f64).ok_or_else(|| {
                Error::Config(format!("{key}: rope_type llama3 needs a number `{f}`"))
            })
        };
        Ok(Some(Llama3Rope {
            factor: num("factor")?,
            low_freq_factor: num("low_freq_factor")?,
            high_freq_factor: num("high_freq_factor")?,
            original_max_position_embeddings: num("original_max_position_embeddings")?,
        }))
    }

    /// Checks what this implementation supports; run once at load.
    pub fn validate(&self) -> Result<()> {
        let err = |m: String| Err(Error::Config(m));
        let family = self.family()?;
        self.check_values()?;
        if let Some(a) = self.architectures.first() {
            if a != family.architecture() {
                return err(format!(
                    "architecture {a:?} is not supported for model_type {:?} ({})",
                    self.model_type,
                    family.architecture()
                ));
            }
        }
        for key in ["rope_parameters", "rope_scaling"] {
            if let Some(kind) = self
                .extra
                .get(key)
                .and_then(|p| p.get("rope_type").or_else(|| p.get("type")))
                .and_then(|t| t.as_str())
            {
                let llama3 = kind == "llama3" && family == Family::Llama;
                if kind != "default" && !llama3 {
                    return err(format!(
                        "{key}.rope_type {kind:?} is not supported (default; llama3 for Llama)"
                    ));
                }
            }
        }
        if self
            .extra
            .get("use_sliding_window")
            .and_then(|v| v.as_bool())
            == Some(true)
        {
            return err("use_sliding_window = true is not supported".into());
        }
        self.llama3_rope()?;
        if self
            .extra
            .get("mlp_bias")
            .and_then(serde_json::Value::as_bool)
            == Some(true)
        {
            return err("mlp_bias = true is not supported".into());
        }
        if self.hidden_act != "silu" {
            return err(format!(
                "hidden_act {:?} is not supported (silu)",
                self.hidden_act
            ));
        }
        // Qwen2 always has q/k/v biases (its config has no switch); Qwen3 never.
        if self.attention_bias && family != Family::Qwen2 {
            return err("attention_bias = true is not supported".into());
        }
        for (key, value) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            // A context of 0 positions holds no prompt: refused here, not at the first
            // generation.
            ("max_position_embeddings", self.max_position_embeddings),
        ] {
            if value == 0 {
                return err(format!("{key} = 0: must be positive"));
            }
        }
        if self.num_attention_heads == 0
            || self.num_key_value_heads == 0
            || !self
                .num_attention_heads
                .is_multiple_of(self.num_key_value_heads)
        {
            return err(format!(
                "num_attention_heads {} must be a multiple of num_key_value_heads {}",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if !self.head_dim().is_multiple_of(2) || self.head_dim() == 0 {
            return err(format!("head_dim {} must be even", self.head_dim()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_dtype_name_is_its_config_spelling() {
        for d in [Dtype::F32, Dtype::Bf16] {
            assert_eq!(serde_json::to_value(d).ok(), Some(d.name().into()));
        }
    }

    fn config(model_type: &str, rope: serde_json::Value) -> Qwen3Config {
        serde_json::from_value(serde_json::json!({
            "model_type": model_type, "vocab_size": 10, "hidden_size": 8,
            "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
            "num_key_value_heads": 1, "rope_parameters": rope,
        }))
        .unwrap()
    }

    #[test]
    fn rotary_settings_are_checked_by_family() {
        let llama3 = serde_json::json!({"rope_type": "llama3", "rope_theta": 500000.0,
            "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192});
        let c = config("llama", llama3.clone());
        c.validate().unwrap();
        assert_eq!(c.rope_theta(), 500000.0);
        assert_eq!(c.llama3_rope().unwrap().unwrap().factor, 8.0);
        // llama3 scaling belongs to Llama; other scalings to nobody here.
        let err = config("qwen3", llama3).validate().unwrap_err().to_string();
        assert!(err.contains("llama3"), "{err}");
        let yarn = serde_json::json!({"rope_type": "yarn", "factor": 4.0});
        let err = config("llama", yarn).validate().unwrap_err().to_string();
        assert!(err.contains("yarn"), "{err}");
        // A llama3 table without one of its numbers is named.
        let partial = serde_json::json!({"rope_type": "llama3", "factor": 8.0});
        let err = config("llama", partial).validate().unwrap_err().to_string();
        assert!(err.contains("low_freq_factor"), "{err}");
    }

    #[test]
    fn a_zero_size_is_named() {
        let rope = serde_json::json!({"rope_type": "default", "rope_theta": 1e4});
        config("qwen3", rope.clone()).validate().unwrap();
        for key in [
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "max_position_embeddings",
        ] {
            let mut v = serde_json::to_value(config("qwen3", rope.clone())).unwrap();
            v[key] = 0.into();
            let c: Qwen3Config = serde_json::from_value(v).unwrap();
            let err = c.validate().unwrap_err().to_string();
            assert!(
                err.contains(&format!("{key} = 0: must be positive")),
                "{key}: {err}"
            );
        }
    }
}
