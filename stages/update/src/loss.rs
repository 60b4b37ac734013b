//! The token loss of `docs/method.md` §1 and the aggregation weights.

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

/// How token losses are reduced to the mini-batch objective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Aggregation {
    /// DAPO: sum over every token of the mini-batch / number of tokens.
    TokenMean,
    /// GRPO: mean over responses of the mean over each response's tokens.
    SeqMeanTokenMean,
    /// Dr.GRPO: sum over tokens / (responses x a constant length).
    SeqMeanTokenSumNorm,
}

/// Validated loss settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LossSettings {
    pub eps_low: f64,
    pub eps_high: f64,
    /// Dual-clip constant `c` for negative advantages (None = off).
    pub dual_clip: Option<f64>,
    pub aggregation: Aggregation,
    /// The constant length of `seq-mean-token-sum-norm` (the max response length).
    pub norm_len: f64,
    /// k3 KL-to-base coefficient (0 = off).
    pub kl_coef: f64,
    /// Entropy bonus coefficient (0 = off).
    pub entropy_coef: f64,
}

/// Per-token loss and the clip indicator.
#[derive(Debug)]
pub struct TokenLoss {
    /// [N] policy-gradient loss per token.
    pub loss: Tensor,
    /// [N] 1.0 where the clipped branch was taken.
    pub clipped: Tensor,
}

/// The clipped surrogate per token. `adv` is the reweighted advantage `A * c` per token.
///
/// `rho = exp(clamp(logp - old, -20, 20))`;
/// `L = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high))`; for `A < 0` also
/// `L = min(L, -A c)` (dual clip).
pub fn token_loss(logp: &Tensor, old: &Tensor, adv: &Tensor, s: &LossSettings) -> TokenLoss {
    let ratio = (logp - old).clamp(-20.0, 20.0).exp();
    let pg1 = -adv * &ratio;
    let pg2 = -adv * ratio.clamp(1.0 - s.eps_low, 1.0 + s.eps_high);
    let clipped = pg2.gt_tensor(&pg1).to_kind(Kind::Float);
    let mut loss = pg1.maximum(&pg2);
    if let Some(c) = s.dual_clip {
        let capped = loss.minimum(&(-adv * c));
        loss = capped.where_self(&adv.lt(0.0), &loss);
    }
    TokenLoss { loss, clipped }
}

/// Per-token weights that turn a sum of token losses over micro-batches into the
/// mini-batch objective, so micro-batching never changes the result.
/// `lengths`: the response lengths of this micro-batch; `mb_tokens` / `mb_seqs`: totals of
/// the whole mini-batch.
pub fn token_weights(
    s: &LossSettings,
    lengths: &[usize],
    mb_tokens: usize,
    mb_seqs: usize,
) -> Vec<f32> {
    let mut w = Vec::with_capacity(lengths.iter().sum());
    for &n in lengths {
        let wi = match s.aggregation {
            // DAPO token-mean: every token of the mini-batch counts once.
            Aggregation::TokenMean => 1.0 / mb_tokens.max(1) as f64,
            // GRPO: each response counts once, its tokens share its weight.
            Aggregation::SeqMeanTokenMean => 1.0 / (n.max(1) * mb_seqs.max(1)) as f64,
            // Dr.GRPO: a constant length replaces the per-response length.
            Aggregation::SeqMeanTokenSumNorm => 1.0 / (s.norm_len * mb_seqs.max(1) as f64),
        };
        w.extend(std::iter::repeat_n(wi as f32, n));
    }
    w
}
