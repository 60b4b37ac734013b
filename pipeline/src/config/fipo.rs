//! `[update.fipo]`: FIPO's Future-KL token weights (off unless `decay_rate` is set).
//! Skipped at their defaults, so configurations written before FIPO keep their hashes.

use serde::{Deserialize, Serialize};

use deltarl_update::FutureKl;

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FipoOptions {
    /// The distance in tokens at which a later token's log-ratio counts half in a token's
    /// Future-KL (FIPO's `fipo_decay_rate`; its runs use 32). 0 = FIPO off.
    pub decay_rate: f64,
    /// The weight `exp(FutureKL)` is clipped to [1 - clip_range, 1 + clip_range] (FIPO's
    /// `fipo_clip_range`, 0.2); 0 = not clipped, as FIPO reads 0.
    pub clip_range: f64,
    /// Clip to [1, 1 + clip_range] instead: FIPO only amplifies (its
    /// `fipo_clip_high_only`, on by default).
    pub clip_high_only: bool,
    /// A token with a negative advantage and a ratio above this keeps a weight in [0.8, 1]
    /// (FIPO's `fipo_safety_threshold`, 4). 0 = off. Tokens whose ratio is above
    /// `update.dual_clip` (when set) take no part in the Future-KL sums: FIPO's `delta` is
    /// both.
    pub safety_threshold: f64,
}

impl Default for FipoOptions {
    fn default() -> Self {
        FipoOptions {
            decay_rate: 0.0,
            clip_range: 0.2,
            clip_high_only: true,
            safety_threshold: 4.0,
        }
    }
}

impl FipoOptions {
    pub fn is_default(&self) -> bool {
        *self == FipoOptions::default()
    }

    /// The loss's FIPO settings, None when off; `dual_clip` is `update.dual_clip` (0 = off).
    pub fn settings(&self, dual_clip: f64) -> Option<FutureKl> {
        (self.decay_rate > 0.0).then(|| {
            FutureKl::from_reference(
                self.decay_rate,
                self.clip_range,
                self.clip_high_only,
                dual_clip,
                self.safety_threshold,
            )
        })
    }
}
