//! `[update]`: the policy-gradient step (loss, aggregation, clipping, the optimizer and
//! its micro-batches); its `[update.fipo]` table is `fipo.rs`.

use serde::{Deserialize, Serialize};

use deltarl_update::Aggregation;

use super::by_algorithm::ByAlgorithm;
use super::fipo::FipoOptions;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateOptions {
    /// token-mean | seq-mean-token-mean | seq-mean-token-sum-norm (default from algorithm).
    #[serde(default)]
    pub aggregation: ByAlgorithm<Aggregation>,
    /// Lower clip range.
    pub eps_low: f64,
    /// Upper clip range (default from algorithm: 0.28 with clip-higher, else eps_low).
    #[serde(default)]
    pub eps_high: ByAlgorithm<f64>,
    /// Dual-clip constant for negative advantages (0 = off).
    pub dual_clip: f64,
    /// AdamW learning rate.
    pub lr: f64,
    /// AdamW decoupled weight decay.
    pub weight_decay: f64,
    /// Linear warm-up in optimizer steps.
    pub warmup_steps: u64,
    /// Global gradient-norm clip (0 = off).
    pub grad_clip: f64,
    /// Optimizer steps (mini-batches) per iteration.
    pub optimizer_steps: usize,
    /// Responses per forward/backward pass.
    pub micro_batch_rows: usize,
    /// And at most this many tokens (prompt + response) per pass (0 = no limit); a longer
    /// response gets a pass of its own. Micro-batching never changes the objective.
    #[serde(default)]
    pub micro_batch_tokens: usize,
    /// Recompute each decoder layer's activations during the backward pass instead of
    /// keeping them: the same gradients for about one more forward pass, with activation
    /// memory of one layer plus every layer's input (see `deltarl plan`).
    #[serde(default)]
    pub activation_checkpointing: bool,
    /// Under torchrun with several processes: shard the optimizer state (f32 master
    /// weights and AdamW moments) over them, ZeRO-1 style: each parameter's owner alone
    /// keeps and steps its state, then broadcasts the new weights. The same step bit for bit
    /// as unsharded; `deltarl plan --devices N` shows the memory per device with and
    /// without it. No effect with one process.
    #[serde(default)]
    pub shard_optimizer: bool,
    /// With `shard_optimizer`: shard the f32 gradient sums too, ZeRO-2 style. Each pass's
    /// gradients go to their parameters' owners as soon as they are complete (a layer at a
    /// time with activation checkpointing) and are freed elsewhere, so a process keeps the
    /// sums of its own share only. The same step bit for bit as `shard_optimizer` alone
    /// with at most one micro-batch a process a step; with more, the sums group the
    /// micro-batches in another order (rounding only). No effect with one process.
    /// Written to run.toml only when on, so runs from before it keep their hash.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shard_gradients: bool,
    /// k3 KL-to-base coefficient (0 = off).
    pub kl_coef: f64,
    /// Entropy bonus coefficient (0 = off).
    pub entropy_coef: f64,
    /// Old log-probs in the ratio: recompute (the features pass of the pre-update policy,
    /// the authors' choice) | rollout (the sampler's).
    #[serde(default)]
    pub old_logprobs: deltarl_update::OldLogprobs,
    /// Truncated importance sampling of the sampler/trainer mismatch: each token's
    /// policy-gradient term is weighted by min(pi_old / pi_rollout, cap) (0 = off; needs
    /// old_logprobs = recompute).
    #[serde(default)]
    pub tis_cap: f64,
    /// The policy-gradient surrogate: clip (PPO's clipped ratio: GRPO, DAPO, Dr.GRPO) |
    /// cispo (the ratio capped at `cispo_cap`, held constant, weighting the log-prob:
    /// TRL's loss_type "cispo") | sapo (a smooth gate, `sapo_temperature_*`: TRL's "sapo").
    #[serde(default, skip_serializing_if = "SurrogateKind::is_clip")]
    pub surrogate: SurrogateKind,
    /// Where the importance ratio is taken: token | sequence (GSPO: one ratio a response,
    /// the exp of its tokens' mean log-ratio; TRL's importance_sampling_level "sequence") |
    /// sequence-token (GSPO-token: that value with each token's own gradient, the carrier
    /// of per-token coefficients).
    #[serde(default, skip_serializing_if = "deltarl_update::RatioLevel::is_token")]
    pub ratio: deltarl_update::RatioLevel,
    /// CISPO's cap on the ratio (TRL's epsilon_high with loss_type "cispo"; ScaleRL's
    /// epsilon_max, 5 recommended).
    #[serde(
        default = "default_cispo_cap",
        skip_serializing_if = "is_default_cispo_cap"
    )]
    pub cispo_cap: f64,
    /// SAPO's gate temperature for tokens with a positive advantage (TRL's default 1).
    #[serde(
        default = "default_sapo_pos",
        skip_serializing_if = "is_default_sapo_pos"
    )]
    pub sapo_temperature_pos: f64,
    /// SAPO's gate temperature for the others (TRL's default 1.05).
    #[serde(
        default = "default_sapo_neg",
        skip_serializing_if = "is_default_sapo_neg"
    )]
    pub sapo_temperature_neg: f64,
    /// FIPO's Future-KL token weights (off unless `decay_rate` is set).
    #[serde(default, skip_serializing_if = "FipoOptions::is_default")]
    pub fipo: FipoOptions,
}

/// `update.surrogate`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SurrogateKind {
    #[default]
    Clip,
    Cispo,
    Sapo,
}

impl SurrogateKind {
    pub fn is_clip(&self) -> bool {
        *self == SurrogateKind::Clip
    }
}

fn default_cispo_cap() -> f64 {
    5.0
}
fn is_default_cispo_cap(x: &f64) -> bool {
    *x == default_cispo_cap()
}
fn default_sapo_pos() -> f64 {
    1.0
}
fn is_default_sapo_pos(x: &f64) -> bool {
    *x == default_sapo_pos()
}
fn default_sapo_neg() -> f64 {
    1.05
}
fn is_default_sapo_neg(x: &f64) -> bool {
    *x == default_sapo_neg()
}
