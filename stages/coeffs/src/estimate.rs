//! Estimation: the responses put in their fixed order, the estimator the settings name run
//! over them, and the coefficients handed back in the order given.

use deltarl_schemas::CoeffsSummary;

use crate::{baselines, delta, ktae, summary, vectors};
use crate::{Error, Estimator, InMemory, Response, Result, Scope, Settings, Vectors};

/// Per-response coefficients (in input order), the shifts of the estimators that add to
/// the advantage, and the diagnostics.
#[derive(Clone, Debug)]
pub struct Output {
    pub coeffs: Vec<Vec<f32>>,
    /// A term added to each token's advantage (`ktae`); `None` for the others.
    pub shift: Option<Vec<Vec<f32>>>,
    pub summary: CoeffsSummary,
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
/// vectors. DelTA reads `refine_steps + 2` passes (one more when `src` stores no vector
/// sums), the others one. The output is in the given order.
pub fn estimate_sorted(
    settings: &Settings,
    dim: usize,
    sorted: &[Response<'_>],
    src: &mut dyn Vectors,
) -> Result<Output> {
    validate_scalars(sorted)?;
    let mut shift = None;
    let (coeffs, stats, centroids) = match settings.estimator {
        Estimator::Uniform => {
            let c = sorted
                .iter()
                .map(|r| vec![if r.kept { 1.0 } else { 0.0 }; r.tokens()])
                .collect();
            (c, Vec::new(), None)
        }
        Estimator::TopEntropy { keep } => (baselines::top_entropy(keep, sorted), Vec::new(), None),
        Estimator::OracleTokens { value, .. } | Estimator::OracleFiller { value, .. } => (
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
            (c, passes.stats, Some((passes.initial, passes.after)))
        }
    };
    // The summary reads each token's weight relative to DAPO's: the coefficient, or with
    // a shift `(A c + shift) / A` (the coefficient where A = 0, which carries no gradient).
    let effective = shift
        .as_ref()
        .map(|s| effective_coefficients(sorted, &coeffs, s));
    let weights = effective.as_ref().unwrap_or(&coeffs);
    // The summary's centroids before and after reweighting: DelTA's passes formed their
    // partials; for the others, one pass (the only one they make) over the vectors.
    let (initial, weighted) = match centroids {
        Some(p) => p,
        None => delta::summary_partials(dim, sorted, weights, src)?,
    };
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
