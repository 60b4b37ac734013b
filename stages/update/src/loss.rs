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

/// The policy-gradient surrogate of one token, given its importance ratio `rho` and
/// reweighted advantage `A`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Surrogate {
    /// PPO's clipped ratio, as GRPO, DAPO and Dr.GRPO use it:
    /// `max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high))`, with the dual clip.
    #[default]
    Clip,
    /// CISPO (MiniMax-M1; TRL's `loss_type="cispo"`): the ratio capped at `cap` and held
    /// constant weights the log-prob, `-sg(min(rho, cap)) A log pi`, so every token keeps
    /// its gradient (no token is clipped away).
    Cispo { cap: f64 },
    /// SAPO (TRL's `loss_type="sapo"`): a smooth gate in place of the hard clip,
    /// `-sigmoid(tau (rho - 1)) 4 / tau A`, `tau` by the sign of `A` (`tau_pos` for
    /// `A > 0`, else `tau_neg`).
    Sapo { tau_pos: f64, tau_neg: f64 },
}

impl Surrogate {
    pub fn is_clip(&self) -> bool {
        *self == Surrogate::Clip
    }
}

/// Where the importance ratio is taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RatioLevel {
    /// Each token's own `pi / pi_old` (PPO, GRPO, DAPO).
    #[default]
    Token,
    /// GSPO (TRL's `importance_sampling_level="sequence"`): one ratio a response,
    /// `exp(mean_t log(pi / pi_old))`, its gradient through every token's log-prob.
    Sequence,
    /// GSPO-token: the sequence ratio's value with each token's own gradient,
    /// `sg(s) pi_t / sg(pi_t)`, so per-token advantages (DelTA's) act token by token.
    SequenceToken,
}

impl RatioLevel {
    pub fn is_token(&self) -> bool {
        *self == RatioLevel::Token
    }
}

/// FIPO's token weights (Future-KL influenced policy optimization): each token's loss is
/// multiplied by `f_t = clip(exp(FutureKL_t), low, high)`, held constant, where
/// `FutureKL_t = sum_{k >= t} gamma^(k - t) log(pi_k / pi_old_k)` runs over the rest of its
/// response: how far the update is already moving what follows the token.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FutureKl {
    /// The discount per token, `2^(-1 / decay_rate)` (FIPO's `fipo_decay_rate`: the
    /// distance at which a later token counts half).
    pub gamma: f64,
    /// The weight's clip range, `[low, high]`; None = unclipped.
    pub clip: Option<(f64, f64)>,
    /// Tokens whose ratio is above this take no part in the sums (FIPO's `delta`, which is
    /// also its dual clip: ours reads `dual_clip`); None = all take part.
    pub ratio_cap: Option<f64>,
    /// A token with a negative advantage whose ratio is above this has its weight clamped
    /// to [0.8, 1] (FIPO's `fipo_safety_threshold`); None = off.
    pub safety: Option<f64>,
}

/// The weight a safety-clamped token's FIPO weight is clamped into (the reference's
/// constants).
const SAFETY_LOW: f64 = 0.8;
const SAFETY_HIGH: f64 = 1.0;

impl FutureKl {
    /// From FIPO's own arguments, 0 meaning off for each, as its code reads them:
    /// `decay_rate` (`fipo_decay_rate`, > 0), `clip_range` (`fipo_clip_range`),
    /// `clip_high_only` (`fipo_clip_high_only`: the clip's low end 1), `delta` (its ratio
    /// cap) and `safety_threshold` (`fipo_safety_threshold`).
    pub fn from_reference(
        decay_rate: f64,
        clip_range: f64,
        clip_high_only: bool,
        delta: f64,
        safety_threshold: f64,
    ) -> FutureKl {
        FutureKl {
            gamma: 2f64.powf(-1.0 / decay_rate),
            clip: (clip_range > 0.0).then(|| {
                let low = if clip_high_only {
                    1.0
                } else {
                    1.0 - clip_range
                };
                (low, 1.0 + clip_range)
            }),
            ratio_cap: (delta > 0.0).then_some(delta),
            safety: (safety_threshold > 0.0).then_some(safety_threshold),
        }
    }

    /// The weight of every token, `[N]` as the tokens are laid out (`lengths` split them
    /// into responses); computed in f64 on the host from the detached log-ratios.
    ///
    /// 1. `d_t = log rho_t`, 0 where `rho_t > ratio_cap`.
    /// 2. Backwards through each response: `F_t = d_t + gamma F_(t+1)`.
    /// 3. `f_t = clip(exp F_t, low, high)` (with a clip); safety-clamped where `A_t < 0`
    ///    and `rho_t > safety`.
    pub fn weights(
        &self,
        log_ratio: &[f64],
        ratio: &[f64],
        adv: &[f64],
        lengths: &[usize],
    ) -> Vec<f64> {
        let mut f = vec![0.0; log_ratio.len()];
        let mut start = 0;
        for &n in lengths {
            let mut future = 0.0;
            for t in (start..start + n).rev() {
                let d = match self.ratio_cap {
                    Some(cap) if ratio[t] > cap => 0.0,
                    _ => log_ratio[t],
                };
                future = d + self.gamma * future;
                let mut w = future.exp();
                if let Some((low, high)) = self.clip {
                    w = w.clamp(low, high);
                }
                if let Some(safety) = self.safety {
                    if adv[t] < 0.0 && ratio[t] > safety {
                        w = w.clamp(SAFETY_LOW, SAFETY_HIGH);
                    }
                }
                f[t] = w;
            }
            start += n;
        }
        f
    }
}

/// Validated loss settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LossSettings {
    /// The surrogate (the clip of DAPO unless set; not recorded then, so hashes of runs
    /// made before it existed hold).
    #[serde(skip_serializing_if = "Surrogate::is_clip")]
    pub surrogate: Surrogate,
    /// Where the ratio is taken (per token unless set; not recorded then).
    #[serde(skip_serializing_if = "RatioLevel::is_token")]
    pub ratio: RatioLevel,
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
    /// FIPO's Future-KL token weights (None = off; not recorded then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub future_kl: Option<FutureKl>,
}

/// Per-token loss and the clip indicator.
#[derive(Debug)]
pub struct TokenLoss {
    /// [N] policy-gradient loss per token.
    pub loss: Tensor,
    /// [N] 1.0 where the clipped branch was taken.
    pub clipped: Tensor,
}

/// The surrogate per token. `adv` is the reweighted advantage `A * c` per token;
/// `lengths` the responses' token counts in order (they split the [N] tokens; only the
/// sequence ratio levels read them).
///
/// 1. `log rho = clamp(logp - old, -20, 20)` per token; at the sequence levels each
///    response's mean of it, `[R]`, spread back over its tokens (`Sequence`: the gradient
///    through the mean; `SequenceToken`: the mean's value, each token's own gradient).
/// 2. The surrogate of [`Surrogate`] on `rho = exp(log rho)`: `[N]`.
/// 3. With FIPO ([`FutureKl`]), each token's loss times its constant weight.
pub fn token_loss(
    logp: &Tensor,
    old: &Tensor,
    adv: &Tensor,
    lengths: &[usize],
    s: &LossSettings,
) -> TokenLoss {
    let log_ratio = (logp - old).clamp(-20.0, 20.0);
    let ratio = match s.ratio {
        RatioLevel::Token => log_ratio.exp(),
        RatioLevel::Sequence | RatioLevel::SequenceToken => {
            let device = logp.device();
            let seg: Vec<i64> = lengths
                .iter()
                .enumerate()
                .flat_map(|(i, &n)| std::iter::repeat_n(i as i64, n))
                .collect();
            let seg = Tensor::from_slice(&seg).to_device(device);
            let len: Vec<f64> = lengths.iter().map(|&n| n.max(1) as f64).collect();
            let len = Tensor::from_slice(&len)
                .to_kind(log_ratio.kind())
                .to_device(device);
            let sums = Tensor::zeros([lengths.len() as i64], (log_ratio.kind(), device))
                .index_add(0, &seg, &log_ratio);
            let mean = (sums / len).index_select(0, &seg);
            match s.ratio {
                RatioLevel::SequenceToken => mean.detach().exp() * (logp - logp.detach()).exp(),
                RatioLevel::Token | RatioLevel::Sequence => mean.exp(),
            }
        }
    };
    let tl = surrogate(logp, adv, &ratio, s);
    match &s.future_kl {
        None => tl,
        Some(fk) => {
            let host = |t: &Tensor| -> Vec<f64> {
                let t = t.detach().to_kind(Kind::Double).to_device(tch::Device::Cpu);
                let n = t.numel();
                let mut v = vec![0.0; n];
                t.copy_data(&mut v, n);
                v
            };
            let w = fk.weights(&host(&log_ratio), &host(&ratio), &host(adv), lengths);
            let w = Tensor::from_slice(&w)
                .to_kind(tl.loss.kind())
                .to_device(logp.device());
            TokenLoss {
                loss: tl.loss * w,
                clipped: tl.clipped,
            }
        }
    }
}

/// Step 2 of [`token_loss`]: the surrogate on the ratios.
fn surrogate(logp: &Tensor, adv: &Tensor, ratio: &Tensor, s: &LossSettings) -> TokenLoss {
    let ratio = ratio.shallow_clone();
    match s.surrogate {
        Surrogate::Clip => {
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
        Surrogate::Cispo { cap } => {
            let weight = ratio.clamp_max(cap).detach();
            // As TRL counts it: a positive-advantage token whose ratio passed the cap.
            let clipped = ratio.gt(cap).logical_and(&adv.gt(0.0)).to_kind(Kind::Float);
            TokenLoss {
                loss: -(weight * adv * logp),
                clipped,
            }
        }
        Surrogate::Sapo { tau_pos, tau_neg } => {
            let tau = Tensor::full_like(adv, tau_neg)
                .where_self(&adv.le(0.0), &Tensor::full_like(adv, tau_pos));
            let gate = ((&ratio - 1.0) * &tau).sigmoid() * 4.0 / &tau;
            TokenLoss {
                loss: -(gate * adv),
                clipped: Tensor::zeros_like(adv),
            }
        }
    }
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
