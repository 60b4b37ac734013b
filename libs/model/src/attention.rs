//! Grouped-query self-attention with a KV cache: Qwen3's per-head q/k RMSNorm, or Qwen2's
//! q/k/v projection biases.

use tch::{nn, nn::Module, Kind, Tensor};

use crate::norm::RmsNorm;
use crate::rope::Rope;
use crate::Family;

#[derive(Debug)]
pub struct Attention {
    q_proj: nn::Linear,
    k_proj: nn::Linear,
    v_proj: nn::Linear,
    o_proj: nn::Linear,
    /// Qwen3 only.
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

impl Attention {
    pub fn new(
        p: nn::Path,
        hidden: i64,
        heads: i64,
        kv_heads: i64,
        head_dim: i64,
        eps: f64,
        family: Family,
    ) -> Self {
        let no_bias = nn::LinearConfig {
            bias: false,
            ..Default::default()
        };
        let qkv = nn::LinearConfig {
            bias: family == Family::Qwen2,
            ..Default::default()
        };
        let qk_norm = family == Family::Qwen3;
        Attention {
            q_proj: nn::linear(&p / "q_proj", hidden, heads * head_dim, qkv),
            k_proj: nn::linear(&p / "k_proj", hidden, kv_heads * head_dim, qkv),
            v_proj: nn::linear(&p / "v_proj", hidden, kv_heads * head_dim, qkv),
            o_proj: nn::linear(&p / "o_proj", heads * head_dim, hidden, no_bias),
            q_norm: qk_norm.then(|| RmsNorm::new(&p / "q_norm", head_dim, eps)),
            k_norm: qk_norm.then(|| RmsNorm::new(&p / "k_norm", head_dim, eps)),
            heads,
            kv_heads,
            head_dim,
        }
    }

    /// x: [B, T, hidden] at positions `past..past+T`, where `past` is the cached length.
    /// Returns [B, T, hidden] and appends this step's keys and values to `cache`.
    pub fn forward(
        &self,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        cache: &mut Option<(Tensor, Tensor)>,
    ) -> Tensor {
        let (b, t) = (x.size()[0], x.size()[1]);
        let past = cache.as_ref().map_or(0, |(k, _)| k.size()[2]);

        // 1. Projections, split into heads: [B, T, heads, d].
        let q = self
            .q_proj
            .forward(x)
            .view([b, t, self.heads, self.head_dim]);
        let k = self
            .k_proj
            .forward(x)
            .view([b, t, self.kv_heads, self.head_dim]);
        let v = self
            .v_proj
            .forward(x)
            .view([b, t, self.kv_heads, self.head_dim]);

        // 2. Per-head RMSNorm on q and k (Qwen3), then heads first: [B, heads, T, d].
        let norm = |n: &Option<RmsNorm>, x: Tensor| match n {
            Some(n) => n.forward(&x),
            None => x,
        };
        let q = norm(&self.q_norm, q).transpose(1, 2);
        let k = norm(&self.k_norm, k).transpose(1, 2);
        let v = v.transpose(1, 2);

        // 3. Rotary embeddings at the absolute positions.
        let q = Rope::apply(&q, rope);
        let k = Rope::apply(&k, rope);

        // 4. Extend the cache: [B, kv_heads, past + T, d].
        let (k, v) = match cache.take() {
            Some((ck, cv)) => (Tensor::cat(&[&ck, &k], 2), Tensor::cat(&[&cv, &v], 2)),
            None => (k, v),
        };
        *cache = Some((k.shallow_clone(), v.shallow_clone()));

        // 5. Grouped-query attention: each kv head serves heads / kv_heads query heads
        //    (SDPA broadcasts the kv heads itself, so the cache is never copied).
        let gqa = self.heads != self.kv_heads;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let out = if t > 1 && past > 0 {
            // Causal mask aligned to the end: query i sees keys 0..=past+i.
            let s = past + t;
            let mask = Tensor::ones([t, s], (Kind::Bool, x.device())).tril(past);
            Tensor::scaled_dot_product_attention(&q, &k, &v, Some(mask), 0.0, false, scale, gqa)
        } else {
            Tensor::scaled_dot_product_attention::<Tensor>(&q, &k, &v, None, 0.0, t > 1, scale, gqa)
        };

        // 6. Merge heads and project back: [B, T, hidden].
        let out = out
            .transpose(1, 2)
            .contiguous()
            .view([b, t, self.heads * self.head_dim]);
        self.o_proj.forward(&out)
    }
}
