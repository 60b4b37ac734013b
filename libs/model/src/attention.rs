//! Grouped-query self-attention over a whole sequence (teacher-forced passes, a prompt's
//! prefill) or one decoding step against a preallocated cache: Qwen3's per-head q/k
//! RMSNorm, or Qwen2's q/k/v projection biases.

use tch::{nn, Kind, Tensor};

use crate::norm::RmsNorm;
use crate::packed::PackedMatrix;
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

/// An attention block's projections packed for decoding, those that pack (see
/// [`crate::packed`]).
#[derive(Debug)]
pub struct PackedAttention {
    q: Option<PackedMatrix>,
    k: Option<PackedMatrix>,
    v: Option<PackedMatrix>,
    o: Option<PackedMatrix>,
}

impl PackedAttention {
    /// How many of the projections are packed.
    pub fn count(&self) -> usize {
        [&self.q, &self.k, &self.v, &self.o]
            .iter()
            .filter(|m| m.is_some())
            .count()
    }
}

impl Attention {
    /// The projections that pack, packed.
    pub fn pack(&self) -> PackedAttention {
        PackedAttention {
            q: PackedMatrix::linear(&self.q_proj),
            k: PackedMatrix::linear(&self.k_proj),
            v: PackedMatrix::linear(&self.v_proj),
            o: PackedMatrix::linear(&self.o_proj),
        }
    }

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

    /// Steps 1-3 of a pass: x [B, T, hidden] -> q [B, heads, T, d], k and v
    /// [B, kv_heads, T, d], q and k rotated by `rope` (tables broadcastable to [B, 1, T, d]).
    /// With `packed`, the projections go through it.
    fn qkv(
        &self,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        packed: Option<&PackedAttention>,
    ) -> (Tensor, Tensor, Tensor) {
        let (b, t) = (x.size()[0], x.size()[1]);
        // 1. Projections, split into heads: [B, T, heads, d].
        let q = PackedMatrix::apply(&self.q_proj, packed.and_then(|p| p.q.as_ref()), x).view([
            b,
            t,
            self.heads,
            self.head_dim,
        ]);
        let k = PackedMatrix::apply(&self.k_proj, packed.and_then(|p| p.k.as_ref()), x).view([
            b,
            t,
            self.kv_heads,
            self.head_dim,
        ]);
        let v = PackedMatrix::apply(&self.v_proj, packed.and_then(|p| p.v.as_ref()), x).view([
            b,
            t,
            self.kv_heads,
            self.head_dim,
        ]);

        // 2. Per-head RMSNorm on q and k (Qwen3), then heads first: [B, heads, T, d].
        let norm = |n: &Option<RmsNorm>, x: Tensor| match n {
            Some(n) => n.forward(&x),
            None => x,
        };
        let q = norm(&self.q_norm, q).transpose(1, 2);
        let k = norm(&self.k_norm, k).transpose(1, 2);
        let v = v.transpose(1, 2);

        // 3. Rotary embeddings at the absolute positions.
        (Rope::apply(&q, rope), Rope::apply(&k, rope), v)
    }

    /// Last step of a pass: attention output [B, heads, T, d] -> [B, T, hidden].
    fn merge(&self, out: &Tensor, packed: Option<&PackedAttention>) -> Tensor {
        let (b, t) = (out.size()[0], out.size()[2]);
        let out = out
            .transpose(1, 2)
            .contiguous()
            .view([b, t, self.heads * self.head_dim]);
        PackedMatrix::apply(&self.o_proj, packed.and_then(|p| p.o.as_ref()), &out)
    }

    /// x: [B, T, hidden] at positions 0..T (a whole sequence, causal). Returns [B, T,
    /// hidden]; with `cache`, also this pass's keys and values, [B, kv_heads, T, d] each
    /// (a prompt's prefill, which the decoder copies into its slots).
    pub fn forward(
        &self,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        cache: Option<&mut Option<(Tensor, Tensor)>>,
    ) -> Tensor {
        let t = x.size()[1];
        // 1-3. q [B, heads, T, d], k and v [B, kv_heads, T, d].
        let (q, k, v) = self.qkv(x, rope, None);

        // 4. Grouped-query causal attention: each kv head serves heads / kv_heads query
        //    heads (SDPA broadcasts the kv heads itself).
        let gqa = self.heads != self.kv_heads;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let out = Tensor::scaled_dot_product_attention::<Tensor>(
            &q,
            &k,
            &v,
            None,
            0.0,
            t > 1,
            scale,
            gqa,
        );
        if let Some(c) = cache {
            *c = Some((k, v));
        }

        // 5. Merge heads and project back: [B, T, hidden].
        self.merge(&out, None)
    }

    /// A prompt and continuations of it in one pass, the prompt computed once (see
    /// `crate::shared`): xp [1, P, hidden] at positions 0..P, xr [B, R, hidden] (`rope_p`,
    /// `rope_r`: their tables, [P, d] and [R, d]), `mask` bool [R, P + R] saying which keys
    /// each continuation column sees. Returns [1, P, hidden] and [B, R, hidden]: what
    /// [`Attention::forward`] gives those positions of a pass over prompt + continuation.
    pub fn forward_shared(
        &self,
        xp: &Tensor,
        xr: &Tensor,
        rope_p: &(Tensor, Tensor),
        rope_r: &(Tensor, Tensor),
        mask: &Tensor,
    ) -> (Tensor, Tensor) {
        let (g, p) = (xr.size()[0], xp.size()[1]);
        let gqa = self.heads != self.kv_heads;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        // 1. The prompt alone, causal, as a one-row pass: q [1, heads, P, d], k and v
        //    [1, kv_heads, P, d].
        let (qp, kp, vp) = self.qkv(xp, rope_p, None);
        let out_p = Tensor::scaled_dot_product_attention::<Tensor>(
            &qp,
            &kp,
            &vp,
            None,
            0.0,
            p > 1,
            scale,
            gqa,
        );
        // 2. The continuations' q [B, heads, R, d] against the prompt's keys and values
        //    broadcast to every row, then their own: [B, kv_heads, P + R, d] (the prompt's
        //    gradient sums over the B rows).
        let (qr, kr, vr) = self.qkv(xr, rope_r, None);
        let with_prompt = |prompt: &Tensor, own: &Tensor| {
            Tensor::cat(&[&prompt.expand([g, -1, -1, -1], false), own], 2)
        };
        // 3. Column i sees the keys `mask[i]` says: every prompt key, and its own
        //    continuation's up to itself.
        let out_r = Tensor::scaled_dot_product_attention(
            &qr,
            &with_prompt(&kp, &kr),
            &with_prompt(&vp, &vr),
            Some(mask.shallow_clone()),
            0.0,
            false,
            scale,
            gqa,
        );
        // 4. Merge heads and project back.
        (self.merge(&out_p, None), self.merge(&out_r, None))
    }

    /// One decoding step of R rows, each at its own position, against a preallocated cache
    /// whose rows 0..R are these rows (see [`crate::slots::SlotCache`]).
    ///
    /// x: [R, 1, hidden]; `rope`: each row's tables, [R, 1, 1, d]; `step` says where each
    /// row's key goes and which keys it sees. Returns [R, 1, hidden] and writes this step's
    /// key and value of row r at position `pos[r]` of cache row r. With `packed`, the
    /// projections go through it.
    pub fn forward_step(
        &self,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        cache: &mut (Tensor, Tensor),
        step: &Step,
        packed: Option<&PackedAttention>,
    ) -> Tensor {
        let r = x.size()[0];
        // 1-3. q [R, heads, 1, d], k and v [R, kv_heads, 1, d].
        let (q, k, v) = self.qkv(x, rope, packed);

        // 4. Write the new key and value in place: cache[r, :, pos[r], :] for every row
        //    (advanced indices on dims 0 and 2 take values shaped [R, kv_heads, d]).
        let at = [
            Some(step.rows.shallow_clone()),
            None,
            Some(step.pos.shallow_clone()),
        ];
        let _ = cache.0.index_put_(&at, &k.squeeze_dim(2), false);
        let _ = cache.1.index_put_(&at, &v.squeeze_dim(2), false);

        // 5. Attention of each row over its own keys 0..=pos[r]. On the CPU our kernel
        //    reads them straight from the cache ([`crate::step_attention`]); elsewhere
        //    libtorch's attention over the first `keys` positions of the rows' caches (a
        //    view, never a copy), each row masked to its own keys (the step's additive
        //    mask). Grouped query heads ride in the query-length dimension: head
        //    h = j * group + i reads kv head j, so q as [R, kv_heads, group, d] meets the
        //    cache's own kv heads with no repeat.
        let group = self.heads / self.kv_heads;
        let q = q.reshape([r, self.kv_heads, group, self.head_dim]);
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let ours = crate::step_attention::attend(&q, &cache.0, &cache.1, &step.host, scale);
        let out = ours.unwrap_or_else(|| {
            let keys = |c: &Tensor| c.narrow(0, 0, r).narrow(2, 0, step.keys);
            Tensor::scaled_dot_product_attention(
                &q,
                &keys(&cache.0),
                &keys(&cache.1),
                Some(step.mask().shallow_clone()),
                0.0,
                false,
                scale,
                false,
            )
        });

        // 6. Back to [R, heads, 1, d], merge heads and project: [R, 1, hidden].
        self.merge(&out.reshape([r, self.heads, 1, self.head_dim]), packed)
    }
}

/// Where one decoding step of R rows reads and writes the cache (shared by every layer).
#[derive(Debug)]
pub struct Step {
    /// 0..R, int64 [R].
    pub rows: Tensor,
    /// Each row's position: where its new key goes, int64 [R].
    pub pos: Tensor,
    /// The same positions on the host.
    pub host: Vec<i64>,
    /// Positions attended: max(pos) + 1.
    pub keys: i64,
    /// Added to row r's score of key j: 0 where j <= pos[r], -inf elsewhere, [R, 1, 1,
    /// keys] in the model's precision. It is what attention makes of a boolean mask itself
    /// (0 where visible, -inf where not), made once a step here instead of once per layer,
    /// and only when a layer runs libtorch's attention (our CPU kernel needs none).
    mask: std::cell::OnceCell<Tensor>,
    /// The activations' precision, the mask's.
    kind: Kind,
}

impl Step {
    /// The step of rows at host positions `pos`, for activations of `kind` on `device`.
    pub fn new(pos: &[i64], (kind, device): (Kind, tch::Device)) -> Step {
        let keys = pos.iter().copied().max().map_or(1, |m| m + 1);
        let r = pos.len() as i64;
        Step {
            rows: Tensor::arange(r, (Kind::Int64, device)),
            pos: Tensor::from_slice(pos).to_device(device),
            host: pos.to_vec(),
            keys,
            mask: std::cell::OnceCell::new(),
            kind,
        }
    }

    /// The step's additive mask (see the field), made at the first call.
    pub fn mask(&self) -> &Tensor {
        self.mask.get_or_init(|| {
            let (r, device) = (self.host.len() as i64, self.pos.device());
            // Key j is unseen by row r iff j > pos[r].
            let unseen = Tensor::arange(self.keys, (Kind::Int64, device))
                .unsqueeze(0)
                .gt_tensor(&self.pos.unsqueeze(1))
                .view([r, 1, 1, self.keys]);
            Tensor::zeros([r, 1, 1, self.keys], (self.kind, device))
                .masked_fill(&unseen, f64::NEG_INFINITY)
        })
    }
}
