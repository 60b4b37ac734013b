//! The Qwen3 decoder: embeddings, blocks, final norm, LM head.

use tch::{nn, nn::Module, Device, Tensor};

use crate::attention::{Attention, PackedAttention, Step};
use crate::mlp::{Mlp, PackedMlp};
use crate::norm::RmsNorm;
use crate::packed::PackedMatrix;
use crate::rope::Rope;
use crate::slots::{KvCache, SlotCache};
use crate::{Family, Qwen3Config, Result};

/// Vocabulary entries a block of [`Qwen3::logits_into`]'s head covers at another precision
/// than f32 (2,048 x 512 rows of f32: 4 MB, about a core's L2).
const HEAD_BLOCK: i64 = 2048;

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

    /// x: [B, T, hidden] -> [B, T, hidden] (pre-norm residual block); with `cache`, this
    /// pass's keys and values too.
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        cache: Option<&mut Option<(Tensor, Tensor)>>,
    ) -> Tensor {
        let h = x + self
            .self_attn
            .forward(&self.input_layernorm.forward(x), rope, cache);
        &h + self.mlp.forward(&self.post_attention_layernorm.forward(&h))
    }

    /// [`Block::forward`] for a prompt [1, P, hidden] and continuations of it
    /// [B, R, hidden] (see [`Attention::forward_shared`]).
    pub(crate) fn forward_shared(
        &self,
        xp: &Tensor,
        xr: &Tensor,
        rope: [&(Tensor, Tensor); 2],
        mask: &Tensor,
    ) -> (Tensor, Tensor) {
        let (ap, ar) = self.self_attn.forward_shared(
            &self.input_layernorm.forward(xp),
            &self.input_layernorm.forward(xr),
            rope[0],
            rope[1],
            mask,
        );
        let mlp = |x: &Tensor, a: Tensor| {
            let h = x + a;
            &h + self.mlp.forward(&self.post_attention_layernorm.forward(&h))
        };
        (mlp(xp, ap), mlp(xr, ar))
    }

    /// [`Block::forward`] for one decoding step of rows at their own positions, through
    /// the block's packed projections when there are some.
    pub(crate) fn forward_step(
        &self,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        cache: &mut (Tensor, Tensor),
        step: &Step,
        packed: Option<&PackedBlock>,
    ) -> Tensor {
        let h = x + self.self_attn.forward_step(
            &self.input_layernorm.forward(x),
            rope,
            cache,
            step,
            packed.map(|p| &p.attn),
        );
        let normed = self.post_attention_layernorm.forward(&h);
        &h + self.mlp.forward_packed(&normed, packed.map(|p| &p.mlp))
    }
}

/// A block's projections packed for decoding.
#[derive(Debug)]
pub(crate) struct PackedBlock {
    attn: PackedAttention,
    mlp: PackedMlp,
}

/// A model's decoding weights packed once for a generation session: the blocks'
/// projections and the LM head, those that pack (see [`crate::packed`]).
#[derive(Debug)]
pub struct Packed {
    layers: Vec<PackedBlock>,
    head: Option<PackedMatrix>,
}

impl Packed {
    /// How many of the model's matrices are packed.
    pub fn matrices(&self) -> usize {
        self.layers
            .iter()
            .map(|b| b.attn.count() + b.mlp.count())
            .sum::<usize>()
            + usize::from(self.head.is_some())
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

/// The variables' path roots (transformers' names): `model.layers.{i}.…` for decoder
/// layer `i`, `model.embed_tokens`, `model.norm` and `lm_head` besides.
const MODEL: &str = "model";
const LAYERS: &str = "layers";

/// The decoder layer a variable of [`Qwen3::new`]'s belongs to (by its name in the var
/// store), or None for the embeddings, the final norm and the head.
pub fn layer_of(var: &str) -> Option<usize> {
    var.strip_prefix(MODEL)?
        .strip_prefix('.')?
        .strip_prefix(LAYERS)?
        .strip_prefix('.')?
        .split('.')
        .next()?
        .parse()
        .ok()
}

impl Qwen3 {
    /// Builds the model's variables under `root` with transformers' names, for the
    /// config's family (Qwen3, or Qwen2 / Qwen2.5).
    pub fn new(root: &nn::Path, c: &Qwen3Config, device: Device) -> Result<Self> {
        let family = c.family()?;
        let m = root / MODEL;
        let embed_tokens = nn::embedding(
            &m / "embed_tokens",
            c.vocab_size as i64,
            c.hidden_size as i64,
            Default::default(),
        );
        let layers = (0..c.num_hidden_layers)
            .map(|i| Block::new(&m / LAYERS / i, c, family))
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

    /// ids: [B, T] int64 (positions 0..T) -> final normed hidden states [B, T, hidden],
    /// the states that feed the LM head. With `cache`, the pass's keys and values go there
    /// (a prompt's prefill).
    pub fn hidden(&self, ids: &Tensor, mut cache: Option<&mut KvCache>) -> Tensor {
        if let Some(c) = cache.as_deref_mut() {
            *c = KvCache::new(self.layers.len());
        }
        // 1. Token embeddings: [B, T, hidden].
        let mut x = self.embed_tokens.forward(ids);
        // 2. Rotary tables of positions 0..T, shared by every layer: [T, d].
        let table = self.rope.at(0, ids.size()[1], x.kind());
        // 3. Decoder blocks.
        for (i, block) in self.layers.iter().enumerate() {
            let kv = cache.as_deref_mut().and_then(|c| c.layers.get_mut(i));
            x = block.forward(&x, &table, kv);
        }
        // 4. Final RMSNorm.
        self.norm.forward(&x)
    }

    /// The decoding weights packed for the CPU's matrix product (those that pack: see
    /// [`PackedMatrix::new`]), or None where none can be (not on the CPU, not f32, MKL
    /// absent, packing turned off, or every matrix too small): then decoding goes through
    /// libtorch's `linear` as a whole.
    pub fn pack(&self) -> Option<Packed> {
        if !crate::packed::available() {
            return None;
        }
        let layers = self
            .layers
            .iter()
            .map(|b| PackedBlock {
                attn: b.self_attn.pack(),
                mlp: b.mlp.pack(),
            })
            .collect();
        let head = match &self.lm_head {
            Some(head) => PackedMatrix::linear(head),
            None => PackedMatrix::new(&self.embed_tokens.ws, None),
        };
        let packed = Packed { layers, head };
        (packed.matrices() > 0).then_some(packed)
    }

    /// One decoding step of the first R rows of `cache`: ids [R, 1] int64 at each row's own
    /// position (`pos`, host) -> final normed hidden states [R, 1, hidden]. Writes the
    /// rows' keys and values at those positions. With `packed` (this model's,
    /// [`Qwen3::pack`]), the projections go through it.
    pub fn hidden_step(
        &self,
        ids: &Tensor,
        cache: &mut SlotCache,
        pos: &[i64],
        packed: Option<&Packed>,
    ) -> Tensor {
        // 1. Token embeddings: [R, 1, hidden].
        let mut x = self.embed_tokens.forward(ids);
        // 2. Where each row reads and writes, and its rotary tables: [R, 1, 1, d].
        let step = Step::new(pos, (x.kind(), x.device()));
        let table = self.rope.at_rows(&step.pos, x.kind());
        // 3. Decoder blocks.
        for (i, (block, kv)) in self.layers.iter().zip(cache.layers.iter_mut()).enumerate() {
            let p = packed.and_then(|p| p.layers.get(i));
            x = block.forward_step(&x, &table, kv, &step, p);
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

    /// hidden: [R, hidden] -> logits written into `out` ([R, vocab], contiguous, f32): a
    /// decoding step's head into a buffer kept from step to step, so no step allocates
    /// (and the kernel zeroes) a fresh [R, vocab] block. With `packed`, through its head.
    pub fn logits_into(
        &self,
        hidden: &Tensor,
        out: &Tensor,
        packed: Option<&Packed>,
    ) -> Result<()> {
        let w = self.lm_head_weight();
        if let Some(head) = packed.and_then(|p| p.head.as_ref()) {
            head.forward_into(hidden, out);
        } else if w.kind() == out.kind() {
            let _ = hidden.f_mm_out(out, &w.tr())?;
        } else {
            // Another precision (a bf16 model): the head by blocks of the vocabulary, each
            // block's product converted into its columns of `out` while it is still in
            // cache, not one [R, V] product converted after (at SmolLM2's head and 512
            // rows: 4.5 % more rollout tokens/s). A block's logits are the same dot products
            // as in one product over the whole vocabulary (measured bit-equal there, and
            // tested below).
            let vocab = w.size()[0];
            let mut first = 0;
            while first < vocab {
                let n = HEAD_BLOCK.min(vocab - first);
                let block = hidden.f_matmul(&w.narrow(0, first, n).tr())?;
                out.narrow(1, first, n).f_copy_(&block)?;
                first += n;
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use tch::Kind;

    use crate::{build, init_weights, Dtype, Qwen3Config, Tokenizer};

    /// A bf16 model's head written by blocks of the vocabulary equals one product over
    /// the whole vocabulary converted to f32, bit for bit, on a vocabulary that is not a
    /// multiple of the block (5,000 = 2 · 2,048 + 904).
    #[test]
    fn a_bf16_head_by_blocks_equals_one_product() {
        let dir = tempfile::tempdir().unwrap();
        let tok = dir.path().join("tokenizer.json");
        std::fs::write(&tok, deltarl_data::tokenizer_json()).unwrap();
        let cfg: Qwen3Config = serde_json::from_value(serde_json::json!({
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "vocab_size": 5000, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 32, "max_position_embeddings": 64, "tie_word_embeddings": false,
            "rope_theta": 10000.0, "eos_token_id": 1
        }))
        .unwrap();
        let tokenizer = Tokenizer::from_file(&tok).unwrap();
        let mut p = build(&cfg, tokenizer, tch::Device::Cpu, Dtype::Bf16).unwrap();
        init_weights(&mut p, 5);
        tch::manual_seed(5);
        let hidden =
            tch::Tensor::randn([37, 64], (Kind::Float, tch::Device::Cpu)).to_kind(Kind::BFloat16);
        let out = tch::Tensor::zeros([37, 5000], (Kind::Float, tch::Device::Cpu));
        p.model.logits_into(&hidden, &out, None).unwrap();
        let one = p.model.logits(&hidden).to_kind(Kind::Float);
        assert_eq!(p.model.lm_head_weight().kind(), Kind::BFloat16);
        assert!(out.equal(&one));
    }
}
