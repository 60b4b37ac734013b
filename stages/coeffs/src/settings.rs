//! What the estimators are and how they are set: validated once, at construction.

use serde::{Deserialize, Serialize};

use crate::{Error, KtaeSettings, Result};

/// An oracle's coefficient on its labelled tokens: finite and >= 0.
fn oracle_value(value: f64) -> Result<()> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(Error::Setting(format!(
            "oracle value {value} must be finite and >= 0"
        )))
    }
}

/// How token coefficients are estimated.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "estimator", rename_all = "kebab-case")]
pub enum Estimator {
    /// Every coefficient 1: plain DAPO / GRPO.
    Uniform,
    /// Keep the highest-entropy `keep` fraction of valid tokens (the "80/20" baseline, as
    /// TRL's `top_entropy_quantile` selects them): kept tokens get `tokens / kept`, the
    /// others 0, so the mean coefficient is 1.
    TopEntropy { keep: f64 },
    /// DelTA (`docs/method.md` §4).
    Delta(DeltaSettings),
    /// A control: coefficient `value` on the tokens `task` labels as unable to tell a
    /// correct answer from a wrong one (its connective phrases,
    /// [`deltarl_data::Task::connective_tokens`]), 1 on the others. Only built-in tasks
    /// know their tokens' roles. Not a positive control: the phrases' wording is
    /// independent of correctness.
    OracleTokens {
        task: deltarl_data::Task,
        value: f64,
    },
    /// The first-error oracle, a positive control: coefficient `value` on the tokens of a
    /// negative-advantage response that come before its first error (text it shares with
    /// a right solution, [`deltarl_data::Task::correct_prefix_tokens`]), which DAPO pushes
    /// down; 1 on every other token. Only the built-in arithmetic tasks know where a
    /// solution's first error is.
    OraclePrefix {
        task: deltarl_data::Task,
        value: f64,
    },
    /// The filler oracle of the dose-response test: coefficient `value` on the tokens of
    /// reward-blind filler ([`deltarl_data::Task::filler_tokens`]) of every
    /// response, 1 elsewhere. Only `tiny-steps-filler` and `tiny-steps-filler-80` have
    /// filler (`tiny-steps` is their dose 0, where this is DAPO).
    OracleFiller {
        task: deltarl_data::Task,
        value: f64,
    },
    /// KTAE (key-token advantage estimation, [`ktae`]): coefficients 1 and, added to each
    /// token's advantage, a score of how its token id goes with right answers in its group.
    Ktae(KtaeSettings),
}

impl Estimator {
    /// The passes an estimate makes over the token vectors ([`crate::estimate_sorted`]):
    /// DelTA `K + 2`, one more when the source stores no vector sums
    /// (`deltarl_schemas::VECTOR_SUM`); the others one (the summary's centroids).
    pub fn vector_passes(&self, sums_stored: bool) -> usize {
        match self {
            Estimator::Delta(d) => d.refine_steps as usize + 2 + usize::from(!sums_stored),
            Estimator::Uniform
            | Estimator::TopEntropy { .. }
            | Estimator::OracleTokens { .. }
            | Estimator::OraclePrefix { .. }
            | Estimator::OracleFiller { .. }
            | Estimator::Ktae(_) => 1,
        }
    }
}

/// DelTA's hyper-parameters, validated at construction.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DeltaSettings {
    /// Refinement passes (K).
    pub refine_steps: u32,
    pub lam_min: f64,
    pub lam_max: f64,
    pub scope: Scope,
}

impl Default for DeltaSettings {
    fn default() -> Self {
        DeltaSettings {
            refine_steps: 1,
            lam_min: 0.8,
            lam_max: 1.2,
            scope: Scope::Batch,
        }
    }
}

/// The set of tokens whose statistics (centroids, gamma, normalisation) are pooled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// The whole iteration batch (deterministic whatever the hardware).
    Batch,
    /// Each prompt group on its own.
    Group,
}

/// Validated estimation settings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settings {
    pub estimator: Estimator,
    /// The model's end-of-sequence token ids, which KTAE scores 0 (a model fact the stage
    /// fills in from the policy; not part of the configuration, so not serialised when
    /// empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub end_ids: Vec<u32>,
}

impl Settings {
    /// Validates the estimator's parameters once, so the hot loops never check them.
    pub fn new(estimator: Estimator) -> Result<Self> {
        match estimator {
            Estimator::Uniform => {}
            Estimator::TopEntropy { keep } => {
                if !(keep > 0.0 && keep <= 1.0) {
                    return Err(Error::Setting(format!(
                        "top-entropy keep fraction {keep} must be in (0, 1]"
                    )));
                }
            }
            Estimator::Delta(d) => {
                if !(d.lam_min.is_finite() && d.lam_max.is_finite())
                    || d.lam_min <= 0.0
                    || d.lam_min > d.lam_max
                {
                    return Err(Error::Setting(format!(
                        "need 0 < lam_min <= lam_max, got lam_min = {}, lam_max = {}",
                        d.lam_min, d.lam_max
                    )));
                }
                if d.refine_steps > 100 {
                    return Err(Error::Setting(format!(
                        "refine_steps = {} is more than 100",
                        d.refine_steps
                    )));
                }
            }
            Estimator::Ktae(k) => {
                let weight = |x: f64| x.is_finite() && x >= 0.0;
                if !(weight(k.alpha) && weight(k.beta) && k.alpha + k.beta > 0.0) {
                    return Err(Error::Setting(format!(
                        "ktae needs alpha >= 0 and beta >= 0, not both 0, got alpha = {}, \
                         beta = {}",
                        k.alpha, k.beta
                    )));
                }
                if !(k.top.is_finite() && k.top >= 0.0) {
                    return Err(Error::Setting(format!(
                        "ktae top {} must be finite and >= 0",
                        k.top
                    )));
                }
            }
            Estimator::OracleTokens { task, value } => {
                if !task.has_connectives() {
                    return Err(Error::Setting(format!(
                        "oracle-tokens needs a task whose tokens' roles are known \
                         (tiny-steps, tiny-steps-varied, tiny-steps-filler[-80]), not {}",
                        task.source()
                    )));
                }
                oracle_value(value)?;
            }
            Estimator::OraclePrefix { task, value } => {
                if !task.has_steps() {
                    return Err(Error::Setting(format!(
                        "oracle-prefix needs a task of worked solutions whose first error \
                         can be found (tiny-arith, tiny-steps, tiny-steps-varied), not {}",
                        task.source()
                    )));
                }
                oracle_value(value)?;
            }
            Estimator::OracleFiller { task, value } => {
                if !task.has_filler() {
                    return Err(Error::Setting(format!(
                        "oracle-filler needs a task with filler (tiny-steps-filler[-80], \
                         or tiny-steps at dose 0), not {}",
                        task.source()
                    )));
                }
                oracle_value(value)?;
            }
        }
        Ok(Settings {
            estimator,
            end_ids: Vec::new(),
        })
    }

    /// The same settings with the model's end-of-sequence ids (see [`Settings::end_ids`]).
    pub fn with_end_ids(self, end_ids: Vec<u32>) -> Self {
        Settings { end_ids, ..self }
    }
}
