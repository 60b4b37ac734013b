//! The Qwen3 decoder: embeddings, blocks, final norm, LM head.

use tch::{nn, nn::Module, Device, Tensor};

use crate::attention::Attention;
use crate::mlp::Mlp;
use crate::norm::RmsNorm;
use crate::rope::Rope;
use crate::{Family, Qwen3Config, Result};

#[derive(Debug)]
pub(crate) struct Block {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl Block {
    fn new(p: nn::Path, c: &Qwen3Config, family: Family) -> Self {
        let (h, eps) = (c.hidden_size as i64, c.rms_norm_eps);
        Block {
            input_layernorm: RmsNorm::new(&p / "input_layernorm", h, eps),
            self_attn: Attention::new(
                &p / "self_attn",
                h,
                c.num_attention_heads as i64,
                c.num_key_value_heads as i64,
                c.head_dim() as i64,
                eps,
                family,
            ),
            post_attention_layernorm: RmsNorm::new(&p / "post_attention_layernorm", h, eps),
            mlp: Mlp::new(&p / "mlp", h, c.intermediate_size as i64),
        }
    }

    /// x: [B, T, hidden] -> [B, T, hidden] (pre-norm residual block).
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        cache: &mut Option<(Tensor, Tensor)>,
    ) -> Tensor {
        let h = x + self
            .self_attn
            .forward(&self.input_layernorm.forward(x), rope, cache);
        &h + self.mlp.forward(&self.post_attention_layernorm.forward(&h))
    }
}

/// Per-layer keys and values of the sequences being decoded.
#[derive(Debug, Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
}

impl KvCache {
    pub fn new(layers: usize) -> Self {
        KvCache {
            layers: (0..layers).map(|_| None).collect(),
        }
    }

    /// Number of cached positions.
    pub fn len(&self) -> i64 {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map_or(0, |(k, _)| k.size()[2])
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps (and repeats) the rows named by `index` (a 1-d int64 tensor): used to fan a
    /// prefilled prompt out to its G samples and to drop finished rows.
    pub fn select(&mut self, index: &Tensor) {
        for l in self.layers.iter_mut().flatten() {
            *l = (l.0.index_select(0, index), l.1.index_select(0, index));
        }
    }
}

/// Qwen3ForCausalLM.
#[derive(Debug)]
pub struct Qwen3 {
    pub(crate) embed_tokens: nn::Embedding,
    pub(crate) layers: Vec<Block>,
    pub(crate) norm: RmsNorm,
    /// None when the embeddings are tied.
    lm_head: Option<nn::Linear>,
    pub(crate) rope: Rope,
    pub config: Qwen3Config,
}

impl Qwen3 {
    /// Builds the model's variables under `root` with transformers' names, for the
    /// config's family (Qwen3, or Qwen2 / Qwen2.5).
    pub fn new(root: &nn::Path, c: &Qwen3Config, device: Device) -> Result<Self> {
        let family = c.family()?;
        let m = root / "model";
        let embed_tokens = nn::embedding(
            &m / "embed_tokens",
            c.vocab_size as i64,
            c.hidden_size as i64,
            Default::default(),
        );
        let layers = (0..c.num_hidden_layers)
            .map(|i| Block::new(&m / "layers" / i, c, family))
            .collect();
        let norm = RmsNorm::new(&m / "norm", c.hidden_size as i64, c.rms_norm_eps);
        let lm_head = (!c.tie_word_embeddings).then(|| {
            nn::linear(
                root / "lm_head",
                c.hidden_size as i64,
                c.vocab_size as i64,
                nn::LinearConfig {
                    bias: false,
                    ..Default::default()
                },
            )
        });
        let rope = Rope::new(
            c.head_dim() as i64,
            c.max_position_embeddings as i64,
            c.rope_theta(),
            c.llama3_rope()?.as_ref(),
            device,
        );
        Ok(Qwen3 {
            embed_tokens,
            layers,
            norm,
            lm_head,
            rope,
            config: c.clone(),
        })
    }

    /// Context length (positions with rotary tables).
    pub fn max_positions(&self) -> i64 {
        self.rope.max_positions()
    }

    /// ids: [B, T] int64 -> final normed hidden states [B, T, hidden], the states that
    /// feed the LM head. With a cache, positions continue after the cached ones.
    pub fn hidden(&self, ids: &Tensor, cache: Option<&mut KvCache>) -> Tensor {
        let mut scratch;
        let cache = match cache {
            Some(c) => c,
            None => {
                scratch = KvCache::new(self.layers.len());
                &mut scratch
            }
        };
        if cache.layers.len() != self.layers.len() {
            *cache = KvCache::new(self.layers.len());
        }
        // 1. Token embeddings: [B, T, hidden].
        let mut x = self.embed_tokens.forward(ids);
        // 2. Rotary tables of this pass's positions, shared by every layer: [T, d].
        let table = self.rope.at(cache.len(), ids.size()[1], x.kind());
        // 3. Decoder blocks.
        for (block, kv) in self.layers.iter().zip(cache.layers.iter_mut()) {
            x = block.forward(&x, &table, kv);
        }
        // 4. Final RMSNorm.
        self.norm.forward(&x)
    }

    /// hidden: [..., hidden] -> logits [..., vocab].
    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        match &self.lm_head {
            Some(head) => head.forward(hidden),
            None => hidden.matmul(&self.embed_tokens.ws.tr()),
        }
    }

    /// The LM-head weight [vocab, hidden] (the embedding matrix when tied).
    pub fn lm_head_weight(&self) -> &Tensor {
        match &self.lm_head {
            Some(head) => &head.ws,
            None => &self.embed_tokens.ws,
        }
    }

    /// ids: [B, T] -> logits [B, T, vocab].
    pub fn forward(&self, ids: &Tensor) -> Tensor {
        self.logits(&self.hidden(ids, None))
    }
}
