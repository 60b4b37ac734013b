//! `[coeffs.ktae]`: KTAE's hyper-parameters, read when `coeffs.estimator = "ktae"`.
//! Skipped at their defaults, so configurations written before KTAE keep their hashes.

use serde::{Deserialize, Serialize};

use deltarl_coeffs::KtaeSettings;

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct KtaeOptions {
    /// Weight of Fisher's exact test in a token's score (the KTAE reference's `alpha`).
    pub alpha: f64,
    /// Weight of the information gain (the reference's `beta_ig`). alpha + beta_ig > 0.
    pub beta_ig: f64,
    /// Whether the BM25-style term-frequency contrast joins Cohen's h in a score's
    /// direction (the reference's `gamma_tf`, which it reads as on when non-zero).
    pub tf: bool,
    /// The largest score added to a token's advantage: scores lie in (-top, top) (the
    /// reference's `top`; 0 = DAPO exactly).
    pub top: f64,
}

impl Default for KtaeOptions {
    fn default() -> Self {
        let k = KtaeSettings::default();
        KtaeOptions {
            alpha: k.alpha,
            beta_ig: k.beta,
            tf: k.tf,
            top: k.top,
        }
    }
}

impl KtaeOptions {
    pub fn is_default(&self) -> bool {
        *self == KtaeOptions::default()
    }

    /// The estimator's settings (validated by `deltarl_coeffs::Settings::new`).
    pub fn settings(&self) -> KtaeSettings {
        KtaeSettings {
            alpha: self.alpha,
            beta: self.beta_ig,
            tf: self.tf,
            top: self.top,
        }
    }
}
