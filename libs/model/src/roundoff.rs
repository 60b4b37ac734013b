//! How far apart two f32 evaluations of the same log-probs may lie when they sum in other
//! orders (another batch shape or cache layout, another kernel, another thread count): the
//! tolerance tests derive instead of observing. A worst-case, first-order bound, tight
//! enough for the small models tests use and far too loose for a large one (it grows with
//! depth and width, where real round-off grows with their square root).
//!
//! 1. One dot product of n f32 terms, summed in any order, lies within n·u·Σ|x_i·y_i| of
//!    the exact value (u = 2^-24); two evaluations within twice that.
//! 2. From the embedding to a logit, dot products follow one another: per layer the
//!    RMSNorms' mean squares (hidden), the q/k/v projections (hidden), the scores
//!    (head_dim), the weighted values (positions), the output projection (heads·head_dim),
//!    gate and up (hidden), down (intermediate); then the final norm and the head (hidden).
//!    To first order their relative errors add: at most 2·u·C of the hidden state, C the
//!    sum of those inner dimensions ([`logit_chain`]).
//! 3. A logit is h·W_v with h the final RMSNorm's output, so |z_v| and Σ|h_i·W_vi| are at
//!    most ‖h‖·‖W_v‖ ≤ √hidden·max|γ|·max_v‖W_v‖ = S ([`Qwen3::logit_scale`]), and every
//!    logit moves by at most 2·u·C·S.
//! 4. A log-prob z_t − logsumexp(z) moves by at most twice the largest logit change
//!    (logsumexp is 1-Lipschitz in the largest change).
//! 5. A margin of 4 for the second-order terms and the residual stream's cancellations.

use tch::Kind;

use crate::{Qwen3, Qwen3Config};

/// f32's unit round-off, 2^-24: the largest relative error of one rounding.
pub const F32_UNIT: f64 = 1.0 / 16_777_216.0;

/// The margin of step 5 over the first-order bound.
const MARGIN: f64 = 4.0;

/// C of step 2: the inner dimensions of a logit's chain of dot products, over sequences of
/// at most `positions` tokens.
pub fn logit_chain(c: &Qwen3Config, positions: usize) -> usize {
    let per_layer = 2 * c.hidden_size
        + c.hidden_size
        + c.head_dim()
        + positions
        + c.num_attention_heads * c.head_dim()
        + c.hidden_size
        + c.intermediate_size;
    c.num_hidden_layers * per_layer + 2 * c.hidden_size
}

impl Qwen3 {
    /// S of step 3: a bound on every logit's |z| and on the sum Σ|h_i·W_vi| it rounds.
    pub fn logit_scale(&self) -> f64 {
        tch::no_grad(|| {
            let gamma = self.norm.weight().abs().max().double_value(&[]);
            let rows = self
                .lm_head_weight()
                .to_kind(Kind::Double)
                .square()
                .sum_dim_intlist(1, false, Kind::Double)
                .max()
                .double_value(&[])
                .sqrt();
            (self.config.hidden_size as f64).sqrt() * gamma * rows
        })
    }

    /// The most two f32 evaluations of the final hidden state (and of vectors made from it
    /// by a few more roundings, as the features' `(1 - p) h`) may differ by, relative to
    /// its largest entry, over sequences of at most `positions` tokens (steps 1, 2 and 5).
    pub fn f32_hidden_tolerance(&self, positions: usize) -> f64 {
        MARGIN * 2.0 * F32_UNIT * logit_chain(&self.config, positions) as f64
    }

    /// The most two f32 evaluations of a logit of this model may differ by, over sequences
    /// of at most `positions` tokens (steps 1 to 3, and 5).
    pub fn f32_logit_tolerance(&self, positions: usize) -> f64 {
        self.f32_hidden_tolerance(positions) * self.logit_scale()
    }

    /// The statistical counterpart of [`Qwen3::f32_logit_tolerance`]: roundings that are
    /// independent and unbiased add like a random walk, so the chain's relative error is
    /// about √C·u rather than C·u (the usual rule of thumb for long sums). Not a bound: a
    /// test that needs one where the worst case is too loose (which greedy picks another
    /// f32 evaluation must agree on) states its premise by checking that an observed
    /// difference stays below this.
    pub fn f32_logit_statistical(&self, positions: usize) -> f64 {
        MARGIN
            * 2.0
            * F32_UNIT
            * (logit_chain(&self.config, positions) as f64).sqrt()
            * self.logit_scale()
    }

    /// The same for a log-prob (step 4: twice the logit's).
    pub fn f32_logprob_tolerance(&self, positions: usize) -> f64 {
        2.0 * self.f32_logit_tolerance(positions)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_chain_adds_each_layers_inner_dimensions() {
        let c: Qwen3Config = serde_json::from_value(serde_json::json!({
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 4, "rms_norm_eps": 1e-6, "max_position_embeddings": 32,
            "tie_word_embeddings": true,
        }))
        .unwrap();
        // Per layer: norms 2*8, q/k/v 8, scores 4, values 5, output 2*4, gate/up 8, down 16.
        assert_eq!(logit_chain(&c, 5), 2 * (16 + 8 + 4 + 5 + 8 + 8 + 16) + 16);
    }
}
