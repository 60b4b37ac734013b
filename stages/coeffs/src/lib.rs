//! Token-coefficient estimation: DelTA (discriminative token credit assignment) and the
//! baselines that share its interface, so that an ablation changes only the coefficients.
//!
//! The math follows `docs/method.md` §4. Everything here is a pure function of (features,
//! advantages, settings); the Parquet shell is in [`shell`]. No libtorch.
//!
//! Determinism: responses are put in (`prompt_id`, `sample_idx`) order first, every sum is
//! formed per response and the per-response partials are added in that fixed order, so the
//! coefficients do not depend on row order or the rayon thread count.

mod baselines;
mod delta;
mod error;
pub mod ktae;
pub mod shell;
mod summary;
mod sums;
mod vectors;

pub use delta::{delta_coefficients, DeltaStats};
pub use error::{Error, Result};
pub use ktae::KtaeSettings;
pub use summary::{Quantiles, Summary, TokenRef};
pub use vectors::{Batch, InMemory, Vectors, Visit};

use serde::{Deserialize, Serialize};

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
    /// KTAE (key-token advantage estimation, [`ktae`]): coefficients 1 and, added to each
    /// token's advantage, a score of how its token id goes with right answers in its group.
    Ktae(KtaeSettings),
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
                         (tiny-steps, tiny-steps-varied), not {}",
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

/// One response as the estimators see it.
#[derive(Clone, Copy, Debug)]
pub struct Response<'a> {
    pub prompt_id: &'a str,
    pub sample_idx: u32,
    /// Sequence advantage `A_i`.
    pub advantage: f32,
    /// The response's reward (KTAE's right/wrong split: right when > 0).
    pub reward: f32,
    /// The response's token ids (read by `ktae` only; empty = not given).
    pub token_ids: &'a [u32],
    /// False when dynamic sampling excluded the response: it gets coefficients 0 and takes
    /// no part in the estimation.
    pub kept: bool,
    /// `tokens * dim` floats, token-major.
    pub features: &'a [f32],
    /// Per-token entropy (used by `top-entropy`).
    pub entropy: &'a [f32],
    /// Per-token probability `p` (the summary's gradient weights `(1 - p) |A|`; empty =
    /// weight `|A|` for every token).
    pub token_prob: &'a [f32],
    /// Per token, the task's label (read by the oracles only; empty = not labelled):
    /// unable to discriminate (`oracle-tokens`), or before the first error
    /// (`oracle-prefix`).
    pub shared: &'a [bool],
}

impl Response<'_> {
    /// The response's key, for messages.
    pub fn key(&self) -> deltarl_schemas::ResponseKey<'_> {
        deltarl_schemas::ResponseKey {
            prompt_id: self.prompt_id,
            sample_idx: self.sample_idx,
        }
    }
}

impl Response<'_> {
    pub fn tokens(&self) -> usize {
        self.entropy.len()
    }
}

/// Per-response coefficients (in input order), the shifts of the estimators that add to
/// the advantage, and the diagnostics.
#[derive(Clone, Debug)]
pub struct Output {
    pub coeffs: Vec<Vec<f32>>,
    /// A term added to each token's advantage (`ktae`); `None` for the others.
    pub shift: Option<Vec<Vec<f32>>>,
    pub summary: Summary,
}

/// Checks the inputs held in memory (finite values, consistent lengths) and names the
/// offending response.
fn validate(dim: usize, responses: &[Response<'_>]) -> Result<()> {
    for r in responses {
        vectors::check(dim, r, r.features)?;
    }
    validate_scalars(responses)
}

/// Checks what stays in memory while vectors stream: finite advantages and entropies.
fn validate_scalars(responses: &[Response<'_>]) -> Result<()> {
    for r in responses {
        let at = || r.key().to_string();
        if !r.advantage.is_finite() {
            return Err(Error::Input(format!(
                "{}: advantage is {}",
                at(),
                r.advantage
            )));
        }
        if !r.reward.is_finite() {
            return Err(Error::Input(format!("{}: reward is {}", at(), r.reward)));
        }
        if let Some(i) = r.entropy.iter().position(|x| !x.is_finite()) {
            return Err(Error::Input(format!(
                "{}: entropy of token {i} is {}",
                at(),
                r.entropy[i]
            )));
        }
    }
    Ok(())
}

/// Estimates the coefficient of every response token, the vectors in memory.
///
/// Returns one vector per response, in the order given, each as long as the response.
pub fn estimate(settings: &Settings, dim: usize, responses: &[Response<'_>]) -> Result<Output> {
    validate(dim, responses)?;
    let order = fixed_order(responses)?;
    let sorted: Vec<Response<'_>> = order.iter().map(|&i| responses[i]).collect();
    let sorted_out = estimate_sorted(settings, dim, &sorted, &mut InMemory(&sorted))?;
    Ok(sorted_out.unsort(&order))
}

impl Output {
    /// From the fixed order back to the input order (`order[k]` = where the k-th sorted
    /// response was given).
    pub fn unsort(self, order: &[usize]) -> Output {
        let place = |sorted: Vec<Vec<f32>>| {
            let mut v = vec![Vec::new(); order.len()];
            for (c, &i) in sorted.into_iter().zip(order) {
                v[i] = c;
            }
            v
        };
        Output {
            coeffs: place(self.coeffs),
            shift: self.shift.map(place),
            summary: self.summary,
        }
    }
}

/// The fixed processing order, (`prompt_id`, `sample_idx`), as indices into `responses`;
/// a response given twice is an error.
pub fn fixed_order(responses: &[Response<'_>]) -> Result<Vec<usize>> {
    let mut order: Vec<usize> = (0..responses.len()).collect();
    order.sort_by(|&a, &b| {
        (responses[a].prompt_id, responses[a].sample_idx)
            .cmp(&(responses[b].prompt_id, responses[b].sample_idx))
    });
    for w in order.windows(2) {
        let (a, b) = (&responses[w[0]], &responses[w[1]]);
        if a.prompt_id == b.prompt_id && a.sample_idx == b.sample_idx {
            return Err(Error::Input(format!("duplicate response {}", a.key())));
        }
    }
    Ok(order)
}

/// Estimates the coefficients of responses already in the fixed order ([`fixed_order`])
/// whose vectors come from `src`, pass by pass (their `features` are not read): the
/// estimator holds one `dim`-vector a response and a few scalars a token, never the
/// vectors. DelTA reads `refine_steps + 4` passes (its own and one for the summary's
/// "after" cosine), the baselines one. The output is in the given order.
pub fn estimate_sorted(
    settings: &Settings,
    dim: usize,
    sorted: &[Response<'_>],
    src: &mut dyn Vectors,
) -> Result<Output> {
    validate_scalars(sorted)?;
    let mut shift = None;
    let (coeffs, stats, initial) = match settings.estimator {
        Estimator::Uniform => {
            let c = sorted
                .iter()
                .map(|r| vec![if r.kept { 1.0 } else { 0.0 }; r.tokens()])
                .collect();
            (c, Vec::new(), None)
        }
        Estimator::TopEntropy { keep } => (baselines::top_entropy(keep, sorted), Vec::new(), None),
        Estimator::OracleTokens { value, .. } => (
            baselines::oracle(value, sorted, baselines::Labelled::All)?,
            Vec::new(),
            None,
        ),
        Estimator::OraclePrefix { value, .. } => (
            baselines::oracle(value, sorted, baselines::Labelled::Negative)?,
            Vec::new(),
            None,
        ),
        Estimator::Ktae(k) => {
            let out = ktae::ktae(&k, sorted, &settings.end_ids)?;
            shift = Some(out.shifts);
            (out.coeffs, Vec::new(), None)
        }
        Estimator::Delta(d) => {
            let scopes: Vec<std::ops::Range<usize>> = match d.scope {
                Scope::Batch => std::iter::once(0..sorted.len()).collect(),
                Scope::Group => {
                    let mut bounds = vec![0];
                    for i in 1..sorted.len() {
                        if sorted[i].prompt_id != sorted[i - 1].prompt_id {
                            bounds.push(i);
                        }
                    }
                    bounds.push(sorted.len());
                    bounds.windows(2).map(|w| w[0]..w[1]).collect()
                }
            };
            let (c, passes) = delta::delta_passes(&d, dim, sorted, &scopes, src)?;
            (c, passes.stats, Some(passes.initial))
        }
    };
    // The summary reads each token's weight relative to DAPO's: the coefficient, or with
    // a shift `(A c + shift) / A` (the coefficient where A = 0, which carries no gradient).
    let effective = shift
        .as_ref()
        .map(|s| effective_coefficients(sorted, &coeffs, s));
    let weights = effective.as_ref().unwrap_or(&coeffs);
    // The summary's centroids: the initial ones (from DelTA's first pass when it ran) and
    // those weighted by the coefficients.
    let (first, weighted) = delta::summary_partials(dim, sorted, weights, src, initial.is_none())?;
    let initial = initial.unwrap_or(first);
    let before = delta::batch_centroids(dim, sorted, &initial);
    let after = delta::batch_centroids(dim, sorted, &weighted);
    let summary = summary::summarize(sorted, weights, &stats, before, after);
    Ok(Output {
        coeffs,
        shift,
        summary,
    })
}

/// Each token's advantage relative to its response's: `(A c + shift) / A`, or `c` where
/// `A = 0` (or so near 0 that the quotient leaves f32).
fn effective_coefficients(
    sorted: &[Response<'_>],
    coeffs: &[Vec<f32>],
    shift: &[Vec<f32>],
) -> Vec<Vec<f32>> {
    sorted
        .iter()
        .zip(coeffs.iter().zip(shift))
        .map(|(r, (c, s))| {
            let a = f64::from(r.advantage);
            c.iter()
                .zip(s)
                .map(|(&c, &s)| {
                    let e = ((a * f64::from(c) + f64::from(s)) / a) as f32;
                    if a == 0.0 || !e.is_finite() {
                        c
                    } else {
                        e
                    }
                })
                .collect()
        })
        .collect()
}
