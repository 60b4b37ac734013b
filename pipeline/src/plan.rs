//! Memory arithmetic for a configuration: what one device holds in the update, the
//! features pass and the rollout, from the model's shape, the dtype and the configured
//! batch and lengths (`deltarl plan`). Worst case throughout: every response runs to
//! `max_new_tokens` and every prompt to `max_prompt_tokens`.
//!
//! Activations are counted as libtorch's autograd keeps them for our blocks (the tensors
//! each op saves for its backward, `libs/model`), per token and decoder layer, with `b`
//! bytes per compute element (2 in bf16, 4 in f32) and RMSNorm working in f32:
//!
//! | op | saved per token |
//! |---|---|
//! | input RMSNorm | its f32 input and the normalised output: `4H + bH` |
//! | q, k, v projections | their shared input: `bH` |
//! | q / k RMSNorm | `4Hq + bHq`, `4Hkv + bHkv` |
//! | rotary (multiplies by constant tables) | nothing but the tables |
//! | attention (flash kernel) | rotated q and k, v, the output, the log-sum-exp: `b(Hq + 2Hkv + Hq) + 4 heads` |
//! | post-attention RMSNorm, MLP input | `4H + bH`, `bH` |
//! | SwiGLU | gate, silu(gate), up, their product: `4bI` |
//!
//! where `H` is the hidden size, `Hq = heads x head_dim`, `Hkv = kv_heads x head_dim` and
//! `I` the MLP width. The LM head works on the response tokens only: it keeps their states
//! (`bH`) and the f32 log-softmax (`4V`), and at its peak holds two more `[tokens, V]` f32
//! buffers beside it (forward: the logits scaled by the temperature while the log-softmax
//! is formed, plus the compute-dtype logits in bf16; backward: the scattered gradient of
//! the gathered log-probs and the log-softmax's input gradient). An entropy bonus adds its
//! saved `exp` and product (`8V`). A pass of more response tokens than the head's chunk
//! (`model.head_chunk_mb`, `deltarl_teacher::ChunkedHead`) holds those `[tokens, V]`
//! buffers for one chunk only, plus the states' gradient (`bH` a token) it gathers
//! chunk by chunk.

use deltarl_model::{Dtype, Qwen3Config};
use serde::Serialize;

/// The model's shape as the arithmetic needs it.
#[derive(Clone, Debug, Serialize)]
pub struct Shape {
    pub vocab: u64,
    pub hidden: u64,
    pub intermediate: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub tied: bool,
}

impl Shape {
    pub fn new(c: &Qwen3Config) -> Self {
        Shape {
            vocab: c.vocab_size as u64,
            hidden: c.hidden_size as u64,
            intermediate: c.intermediate_size as u64,
            layers: c.num_hidden_layers as u64,
            heads: c.num_attention_heads as u64,
            kv_heads: c.num_key_value_heads as u64,
            head_dim: c.head_dim() as u64,
            tied: c.tie_word_embeddings,
        }
    }

    /// Parameters: embeddings, per layer the four projections, the MLP and three norms
    /// (two of width H, q/k of width head_dim), the final norm, and an untied head.
    pub fn parameters(&self) -> u64 {
        let h = self.hidden;
        let head = if self.tied { 0 } else { self.vocab * h };
        self.vocab * h + self.layers * self.layer_parameters() + h + head
    }

    /// Parameters of one decoder layer.
    pub fn layer_parameters(&self) -> u64 {
        let (h, i, d) = (self.hidden, self.intermediate, self.head_dim);
        let (hq, hkv) = (self.heads * d, self.kv_heads * d);
        h * hq + 2 * h * hkv + hq * h + 3 * h * i + 2 * h + 2 * d
    }

    /// Elements of the largest parameter tensor: the embeddings (or an MLP projection).
    pub fn largest_parameter(&self) -> u64 {
        (self.vocab * self.hidden).max(self.hidden * self.intermediate)
    }

    /// Bytes autograd keeps per token for one decoder layer (the table above).
    pub fn layer_activation_bytes(&self, b: u64) -> u64 {
        let (h, i, d) = (self.hidden, self.intermediate, self.head_dim);
        let (hq, hkv) = (self.heads * d, self.kv_heads * d);
        let norms = 2 * (4 * h + b * h) + (4 * hq + b * hq) + (4 * hkv + b * hkv);
        let linear_inputs = 2 * b * h;
        let attention = b * (2 * hq + 2 * hkv) + 4 * self.heads;
        norms + linear_inputs + attention + 4 * b * i
    }

    /// Key and value bytes per cached position.
    pub fn kv_bytes_per_token(&self, b: u64) -> u64 {
        2 * self.layers * self.kv_heads * self.head_dim * b
    }
}

/// The workload the configuration asks of one device.
#[derive(Clone, Debug, Serialize)]
pub struct Workload {
    pub dtype: Dtype,
    /// Longest prompt and response.
    pub prompt_tokens: u64,
    pub response_tokens: u64,
    /// Rows of one update pass and of one features pass (each padded to the longest).
    pub update_rows: u64,
    pub features_rows: u64,
    pub activation_checkpointing: bool,
    /// The entropy bonus is on (its graph is kept).
    pub entropy_grad: bool,
    /// Positions the rollout's KV cache holds at once.
    pub kv_cache_tokens: u64,
    /// Rows decoded together (their last-position logits are live each step).
    pub decode_rows: u64,
    /// Most bytes of one `[tokens, V]` f32 buffer of the LM head (0 = whole passes).
    pub head_chunk_bytes: u64,
}

/// Bytes per device, by what holds them.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Plan {
    pub parameters: u64,
    /// Of which one decoder layer's, those outside the layers (embeddings, final norm,
    /// head), and the largest tensor's.
    pub layer_parameters: u64,
    pub outside_layers: u64,
    pub largest_parameter: u64,
    /// The model in the compute dtype.
    pub weights: u64,
    /// f32 master copy (bf16 only).
    pub master: u64,
    /// Gradients: in the parameters' dtype as the backward pass writes them, plus, for
    /// bf16, their f32 sum over the micro-batches (`AdamW::accumulate`).
    pub grads: u64,
    /// AdamW's two f32 moments.
    pub moments: u64,
    /// Update activations of one pass, without and with checkpointing.
    pub activations_full: u64,
    pub activations_checkpointed: u64,
    /// Forward-only features pass (no graph).
    pub features: u64,
    /// The rollout's KV cache and its per-step logits.
    pub kv_cache: u64,
    pub decode_logits: u64,
}

impl Plan {
    pub fn new(s: &Shape, w: &Workload) -> Self {
        let b = match w.dtype {
            Dtype::F32 => 4,
            Dtype::Bf16 => 2,
        };
        let p = s.parameters();
        let seq = w.prompt_tokens + w.response_tokens;
        // Update pass: rows x seq positions, of which rows x response predict a token.
        let (t, n) = (w.update_rows * seq, w.update_rows * w.response_tokens);
        let (h, v) = (s.hidden, s.vocab);
        let final_norm = (4 * h + b * h) * t;
        let logits_dtype = if b == 4 { 0 } else { b };
        let entropy = if w.entropy_grad { 8 } else { 0 };
        // Tokens the head's [tokens, V] buffers hold at once: a chunk, or the whole pass
        // (whose states' gradient then flows through autograd, not gathered by chunk).
        let chunk = deltarl_teacher::head_chunk_tokens(w.head_chunk_bytes, v as usize) as u64;
        let head_tokens = |n: u64| n.min(chunk);
        let gathered = |n: u64| if n > chunk { b * h * n } else { 0 };
        let head =
            b * h * n + gathered(n) + (4 + 2 * 4 + logits_dtype + entropy) * v * head_tokens(n);
        let layer = s.layer_activation_bytes(b) * t;
        let activations_full = s.layers * layer + final_norm + head;
        // Checkpointed: every block's input, then the larger of the head's peak and one
        // recomputed block (whose backward also holds the gradient at its output and at
        // its input).
        let inputs = s.layers * b * h * t;
        let activations_checkpointed = inputs + final_norm + head.max(layer + 2 * b * h * t);
        // Features (no graph): the final states, and the larger of one block's widest
        // moment (residual, its f32 norm, the MLP's three [T, I] buffers) and the head's
        // (the same three [tokens, V] f32 buffers as above, entropy taken after).
        let (ft, fn_) = (w.features_rows * seq, w.features_rows * w.response_tokens);
        let block = (b * (3 * h + 3 * s.intermediate) + 4 * h) * ft;
        let features_head = b * h * fn_ + (3 * 4 + logits_dtype) * v * head_tokens(fn_);
        let features = b * h * ft + block.max(features_head);
        Plan {
            parameters: p,
            layer_parameters: s.layer_parameters(),
            outside_layers: p - s.layers * s.layer_parameters(),
            largest_parameter: s.largest_parameter(),
            weights: b * p,
            master: if w.dtype == Dtype::F32 { 0 } else { 4 * p },
            grads: if w.dtype == Dtype::F32 {
                4 * p
            } else {
                (b + 4) * p
            },
            moments: 8 * p,
            activations_full,
            activations_checkpointed,
            features,
            kv_cache: s.kv_bytes_per_token(b) * w.kv_cache_tokens,
            decode_logits: (b + 3 * 4) * v * w.decode_rows,
        }
    }

    /// One pass's activations.
    fn activations(&self, checkpointing: bool) -> u64 {
        if checkpointing {
            self.activations_checkpointed
        } else {
            self.activations_full
        }
    }

    /// What the gradient norm and the AdamW step hold beside the state, on the largest
    /// tensor, once the pass's activations are gone: the norm widens a gradient to f64
    /// and squares it (two f64 copies), the step keeps up to three f32 temporaries.
    fn step_transient(&self) -> u64 {
        16 * self.largest_parameter
    }

    /// The update's peak: the training state, and the larger of one pass's activations
    /// and the step's temporaries.
    pub fn update_peak(&self, checkpointing: bool) -> u64 {
        let transient = self.activations(checkpointing).max(self.step_transient());
        self.weights + self.master + self.grads + self.moments + transient
    }

    /// The update's peak on each of `n` devices under ZeRO-1 (`update.shard_optimizer`):
    /// weights and gradients (bf16 and f32 sums) whole, master weights and moments divided.
    pub fn update_peak_zero1(&self, n: u64, checkpointing: bool) -> u64 {
        let transient = self.activations(checkpointing).max(self.step_transient());
        self.weights + self.grads + (self.master + self.moments).div_ceil(n.max(1)) + transient
    }

    /// The update's peak on each of `n` devices under ZeRO-2 (`update.shard_gradients`):
    /// the weights whole; master weights, moments and f32 gradient sums divided; during
    /// the pass, its own gradients in the parameters' dtype only until they reach their
    /// owners (with checkpointing one layer's at a time beside the embeddings', final
    /// norm's and head's, which go last; without, all of them) and f32 copies of at most
    /// two tensors in flight (a chunked head's sum moved out of its bf16 gradient, and the
    /// one being reduced), beside the activations; after it, the step's temporaries.
    pub fn update_peak_zero2(&self, n: u64, checkpointing: bool) -> u64 {
        let b = self.weights / self.parameters.max(1);
        let pass_grads = if checkpointing {
            b * (self.layer_parameters + self.outside_layers)
        } else {
            b * self.parameters
        };
        let in_flight = 2 * 4 * self.largest_parameter;
        let pass = pass_grads + in_flight + self.activations(checkpointing);
        let sums = 4 * self.parameters;
        self.weights
            + (self.master + self.moments + sums).div_ceil(n.max(1))
            + pass.max(self.step_transient())
    }

    /// The rollout's peak: weights, the full cache and one step's logits.
    pub fn rollout_peak(&self) -> u64 {
        self.weights + self.kv_cache + self.decode_logits
    }

    /// The features pass's peak: weights and one pass.
    pub fn features_peak(&self) -> u64 {
        self.weights + self.features
    }
}

/// Bytes as "12.3 GB" (powers of 1000, as device memory is sold).
pub fn human(bytes: u64) -> String {
    let x = bytes as f64;
    match x {
        x if x >= 1e12 => format!("{:.2} TB", x / 1e12),
        x if x >= 1e9 => format!("{:.2} GB", x / 1e9),
        x if x >= 1e6 => format!("{:.1} MB", x / 1e6),
        x if x >= 1e3 => format!("{:.1} kB", x / 1e3),
        x => format!("{x} B"),
    }
}

/// Parses "141GB", "80 GiB", "512MB", "1e9" into bytes.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let x: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: not a size (e.g. 141GB, 80GiB)"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024f64.powi(2),
        "gib" => 1024f64.powi(3),
        "tib" => 1024f64.powi(4),
        u => {
            return Err(format!(
                "{s:?}: unknown unit {u:?} (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    if !(x.is_finite() && x >= 0.0) {
        return Err(format!("{s:?}: not a size"));
    }
    Ok((x * scale) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_activations_by_hand() {
        // H = Hq = 8, Hkv = 4 (1 kv head of 4), 2 heads, I = 16, bf16:
        // norms 2(32 + 16) + (32 + 16) + (16 + 8) = 168; linear inputs 32;
        // attention 2(16 + 8) + 8 = 56; MLP 4 x 2 x 16 = 128.
        let s = Shape {
            vocab: 10,
            hidden: 8,
            intermediate: 16,
            layers: 1,
            heads: 2,
            kv_heads: 1,
            head_dim: 4,
            tied: true,
        };
        assert_eq!(s.layer_activation_bytes(2), 168 + 32 + 56 + 128);
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_bytes("141GB").unwrap(), 141_000_000_000);
        assert_eq!(parse_bytes("80 GiB").unwrap(), 80 << 30);
        assert_eq!(parse_bytes("1024").unwrap(), 1024);
        assert!(parse_bytes("lots").unwrap_err().contains("not a size"));
        assert!(parse_bytes("3 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert_eq!(human(141_000_000_000), "141.00 GB");
    }
}
