//! The warm start's TOML options (`[warmstart]`; `[model.tiny]` is the model's
//! [`deltarl_model::Shape`]): the application's configuration embeds them as they are, and
//! the stage hashes them as they are.

use serde::{Deserialize, Serialize};

/// The supervised warm start's schedule and data (`[warmstart]`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WarmstartOptions {
    /// Optimizer steps of the supervised warm start.
    pub steps: usize,
    /// Examples per step.
    pub batch_size: usize,
    /// Peak learning rate (linear warm-up, cosine decay).
    pub lr: f64,
    /// Warm-up steps.
    pub warmup_steps: usize,
    /// Fraction of worked solutions with one wrong step.
    pub wrong_frac: f64,
    /// Weight of digit tokens in the warm start's loss relative to the others (1 = plain
    /// token mean). Worded solutions are mostly fixed phrases the model learns at once;
    /// weighting the digits, which carry the computation, keeps the loss on them.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub digit_weight: f64,
}

fn one() -> f64 {
    1.0
}

fn is_one(x: &f64) -> bool {
    *x == 1.0
}
