//! DelTA coefficients over one estimation scope (`docs/method.md` §4, steps 1-5).

use std::ops::Range;

use serde::Serialize;

use crate::sums;
use crate::vectors::{check, each, InMemory, Vectors};
use crate::{DeltaSettings, Error, Response, Result};
use deltarl_schemas::number::show;

/// Denominator clamp of the weighted centroids (reference value).
const EPS: f64 = 1e-8;
/// Variance floor of the margin scales (reference value).
const VAR_FLOOR: f64 = 1e-8;

/// Which side of the discriminator a response's tokens are on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Pos,
    Neg,
    /// Zero advantage (or excluded): no centroid, coefficient `lam_min`.
    None,
}

pub(crate) fn side(r: &Response<'_>) -> Side {
    if !r.kept {
        Side::None
    } else if r.advantage > 0.0 {
        Side::Pos
    } else if r.advantage < 0.0 {
        Side::Neg
    } else {
        Side::None
    }
}

/// The statistics of one scope, for diagnostics.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DeltaStats {
    /// Initial (advantage-weighted) centroids.
    pub mu_pos_init: Vec<f64>,
    pub mu_neg_init: Vec<f64>,
    /// Final (refined) centroids the coefficients were measured against.
    pub mu_pos: Vec<f64>,
    pub mu_neg: Vec<f64>,
    /// Margin scales of the last pass.
    pub gamma_pos: f64,
    pub gamma_neg: f64,
    /// Self-normalisation scalar `g`.
    pub norm: f64,
    pub tokens_pos: usize,
    pub tokens_neg: usize,
    pub tokens_zero: usize,
}

fn sq_dist(v: &[f32], mu: &[f64]) -> f64 {
    v.iter()
        .zip(mu)
        .map(|(&x, &m)| {
            let d = f64::from(x) - m;
            d * d
        })
        .sum()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Per-token margins of one response against (mu+, mu-): positive = closer to the token's
/// own side. Tokens of side `None` get 0 (unused).
fn margins_of(dim: usize, r: &Response<'_>, v: &[f32], mu_p: &[f64], mu_n: &[f64]) -> Vec<f64> {
    let s = side(r);
    if s == Side::None || dim == 0 {
        return vec![0.0; r.tokens()];
    }
    let margin = |v: &[f32]| {
        let (dp, dn) = (sq_dist(v, mu_p), sq_dist(v, mu_n));
        match s {
            Side::Pos => dn - dp,
            _ => dp - dn,
        }
    };
    sums::per_token(dim, v, margin)
}

/// One response's share of its side's weighted centroid: `(sum w |A|, sum w |A| v)` with
/// per-token weights `w` (all 1 for the initial centroids); None for side `None`.
type Partial = Option<(f64, Vec<f64>)>;

fn partial(dim: usize, r: &Response<'_>, v: &[f32], weights: Option<&[f64]>) -> Partial {
    if side(r) == Side::None || dim == 0 {
        return None;
    }
    let a = f64::from(r.advantage).abs();
    let w: Vec<f64> = (0..r.tokens())
        .map(|t| a * weights.map_or(1.0, |w| w[t]))
        .collect();
    // Added in token order from +0, as the sums of the weights always were.
    let wsum = w.iter().fold(0.0f64, |s, &w| s + w);
    Some((wsum, sums::weighted_sum(dim, v, &w)))
}

/// Weighted centroids per side of the responses in `range`: their partials added in the
/// fixed response order, `sum / max(weight, eps)`.
fn centroids(
    dim: usize,
    rs: &[Response<'_>],
    partials: &[Partial],
    range: Range<usize>,
) -> (Vec<f64>, Vec<f64>) {
    let (mut sp, mut sn) = (vec![0.0; dim], vec![0.0; dim]);
    let (mut wp, mut wn) = (0.0, 0.0);
    for i in range {
        let Some((w, acc)) = &partials[i] else {
            continue;
        };
        let (sum, wt) = match side(&rs[i]) {
            Side::Pos => (&mut sp, &mut wp),
            Side::Neg => (&mut sn, &mut wn),
            Side::None => continue,
        };
        *wt += w;
        for (a, b) in sum.iter_mut().zip(acc) {
            *a += b;
        }
    }
    // A side with no tokens has a zero centroid (the eps clamp), as in the authors' code.
    let dp = wp.max(EPS);
    let dn = wn.max(EPS);
    (
        sp.into_iter().map(|x| x / dp).collect(),
        sn.into_iter().map(|x| x / dn).collect(),
    )
}

/// Per-side standard deviation of the margins of the responses in `range`: population
/// variance over tokens, centred on the side's mean margin, floored at 1e-8; count
/// clamped to 1.
fn gammas(rs: &[Response<'_>], m: &[Vec<f64>], range: Range<usize>) -> (f64, f64) {
    let (mut sum_p, mut sum_n, mut n_p, mut n_n) = (0.0, 0.0, 0usize, 0usize);
    for i in range.clone() {
        match side(&rs[i]) {
            Side::Pos => {
                sum_p += m[i].iter().sum::<f64>();
                n_p += m[i].len();
            }
            Side::Neg => {
                sum_n += m[i].iter().sum::<f64>();
                n_n += m[i].len();
            }
            Side::None => {}
        }
    }
    let mean_p = sum_p / n_p.max(1) as f64;
    let mean_n = sum_n / n_n.max(1) as f64;
    let (mut ss_p, mut ss_n) = (0.0, 0.0);
    for i in range {
        let mi = &m[i];
        match side(&rs[i]) {
            Side::Pos => ss_p += mi.iter().map(|x| (x - mean_p) * (x - mean_p)).sum::<f64>(),
            Side::Neg => ss_n += mi.iter().map(|x| (x - mean_n) * (x - mean_n)).sum::<f64>(),
            Side::None => {}
        }
    }
    (
        (ss_p / n_p.max(1) as f64).max(VAR_FLOOR).sqrt(),
        (ss_n / n_n.max(1) as f64).max(VAR_FLOOR).sqrt(),
    )
}

/// Soft assignments `sigmoid(m / gamma_side)` of one response's tokens (0 for side None).
fn soft_assign(r: &Response<'_>, m: &[f64], g_p: f64, g_n: f64) -> Vec<f64> {
    let g = match side(r) {
        Side::Pos => g_p,
        Side::Neg => g_n,
        Side::None => return vec![0.0; m.len()],
    };
    m.iter().map(|x| sigmoid(x / g)).collect()
}

/// The state of one estimation scope between passes.
struct ScopeState {
    range: Range<usize>,
    mu_p0: Vec<f64>,
    mu_n0: Vec<f64>,
    mu_p: Vec<f64>,
    mu_n: Vec<f64>,
    g_p: f64,
    g_n: f64,
}

/// What the DelTA passes leave besides the coefficients: each response's initial partial
/// (for the summary's batch-wide centroids) and each scope's statistics.
pub(crate) struct Passes {
    pub initial: Vec<Partial>,
    pub stats: Vec<DeltaStats>,
}

/// DelTA coefficients for responses in the fixed order, each range of `scopes` estimated
/// on its own (one range: the batch), reading the vectors from `src` in `refine_steps + 3`
/// passes: (1) initial centroids, (2) margins and scales, (3) each refit, (4) the
/// coefficients. Resident memory is one `dim`-vector partial a response and a few scalars
/// a token; every sum is formed per response and added in the fixed order, so the result
/// is the same whatever order or batches the passes come in.
///
/// Returns the normalised coefficients (0 for excluded responses) in the given order.
pub(crate) fn delta_passes(
    s: &DeltaSettings,
    dim: usize,
    rs: &[Response<'_>],
    scopes: &[Range<usize>],
    src: &mut dyn Vectors,
) -> Result<(Vec<Vec<f32>>, Passes)> {
    let scope_of = scope_index(rs.len(), scopes);

    // 1. Initial advantage-weighted centroids (the vectors are checked on the way).
    let initial = each(src, rs, |i, v| {
        check(dim, &rs[i], v)?;
        Ok(partial(dim, &rs[i], v, None))
    })?;
    let mut st: Vec<ScopeState> = scopes
        .iter()
        .map(|range| {
            let (mu_p, mu_n) = centroids(dim, rs, &initial, range.clone());
            ScopeState {
                range: range.clone(),
                mu_p0: mu_p.clone(),
                mu_n0: mu_n.clone(),
                mu_p,
                mu_n,
                g_p: 0.0,
                g_n: 0.0,
            }
        })
        .collect();

    // 2. Margins and per-side scales against the initial centroids.
    let m = each(src, rs, |i, v| {
        let c = &st[scope_of[i]];
        Ok(margins_of(dim, &rs[i], v, &c.mu_p, &c.mu_n))
    })?;
    for c in &mut st {
        (c.g_p, c.g_n) = gammas(rs, &m, c.range.clone());
    }

    // 3. Refinement, in the authors' order: each pass assigns softly with the gamma
    //    carried in (step 2's for the first pass), refits the centroids, and only then
    //    takes gamma from this pass's margins (against the centroids before the refit).
    //    With K = 1 the assignment and the final gamma are both step 2's; with K >= 2
    //    each pass assigns with the previous pass's gamma. One pass over the vectors
    //    gives a response's margins, assignments and weighted partial together.
    for _ in 0..s.refine_steps {
        let parts = each(src, rs, |i, v| {
            let c = &st[scope_of[i]];
            let m = margins_of(dim, &rs[i], v, &c.mu_p, &c.mu_n);
            let r = soft_assign(&rs[i], &m, c.g_p, c.g_n);
            Ok((partial(dim, &rs[i], v, Some(&r)), m))
        })?;
        let (partials, m): (Vec<Partial>, Vec<Vec<f64>>) = parts.into_iter().unzip();
        for c in &mut st {
            (c.mu_p, c.mu_n) = centroids(dim, rs, &partials, c.range.clone());
            (c.g_p, c.g_n) = gammas(rs, &m, c.range.clone());
        }
    }

    // 4. Coefficients from margins against the final centroids and the last pass's gamma.
    let span = s.lam_max - s.lam_min;
    let raw = each(src, rs, |i, v| {
        let r = &rs[i];
        let c = &st[scope_of[i]];
        Ok(match side(r) {
            Side::None => vec![s.lam_min; r.tokens()],
            _ => {
                let m = margins_of(dim, r, v, &c.mu_p, &c.mu_n);
                soft_assign(r, &m, c.g_p, c.g_n)
                    .into_iter()
                    .map(|x| s.lam_min + span * x)
                    .collect()
            }
        })
    })?;

    // 5. Self-normalisation per scope: the mean coefficient over its valid tokens is 1.
    //    Excluded (kept = false) responses are not valid tokens.
    let mut coeffs = Vec::with_capacity(rs.len());
    let mut stats = Vec::with_capacity(st.len());
    let mut raw = raw.into_iter();
    for c in st {
        let (mut n_valid, mut sum_c) = (0usize, 0.0f64);
        let (mut tp, mut tn, mut tz) = (0, 0, 0);
        let part: Vec<Vec<f64>> = raw.by_ref().take(c.range.len()).collect();
        for (r, x) in rs[c.range.clone()].iter().zip(&part) {
            if r.kept {
                n_valid += x.len();
                sum_c += x.iter().sum::<f64>();
            }
            match side(r) {
                Side::Pos => tp += x.len(),
                Side::Neg => tn += x.len(),
                Side::None if r.kept => tz += x.len(),
                Side::None => {}
            }
        }
        let norm = if sum_c > 0.0 {
            n_valid as f64 / sum_c
        } else {
            1.0
        };
        // A sum that overflowed (or underflowed) would scale every coefficient to 0 (or
        // infinity) and train nothing, silently; the configured bounds keep it finite.
        if !(norm.is_finite() && norm > 0.0 && sum_c.is_finite()) {
            return Err(Error::Setting(format!(
                "the self-normalisation scalar g = {} (mean coefficient {} over {n_valid} \
                 tokens) is not a positive finite number: check coeffs.lam_min = {} and \
                 coeffs.lam_max = {}",
                show(norm),
                show(sum_c / n_valid.max(1) as f64),
                show(s.lam_min),
                show(s.lam_max)
            )));
        }
        for (r, x) in rs[c.range.clone()].iter().zip(part) {
            coeffs.push(if r.kept {
                x.into_iter().map(|x| (norm * x) as f32).collect()
            } else {
                vec![0.0; r.tokens()]
            });
        }
        stats.push(DeltaStats {
            mu_pos_init: c.mu_p0,
            mu_neg_init: c.mu_n0,
            mu_pos: c.mu_p,
            mu_neg: c.mu_n,
            gamma_pos: c.g_p,
            gamma_neg: c.g_n,
            norm,
            tokens_pos: tp,
            tokens_neg: tn,
            tokens_zero: tz,
        });
    }
    Ok((coeffs, Passes { initial, stats }))
}

/// The scope of each response: `scopes` must cover `0..n` in order.
fn scope_index(n: usize, scopes: &[Range<usize>]) -> Vec<usize> {
    let mut of = vec![0; n];
    for (k, r) in scopes.iter().enumerate() {
        for i in r.clone() {
            of[i] = k;
        }
    }
    of
}

/// DelTA coefficients for the responses of one scope (already in the fixed order), their
/// vectors in memory.
///
/// Returns the normalised coefficients (0 for excluded responses) and the statistics.
pub fn delta_coefficients(
    s: &DeltaSettings,
    dim: usize,
    rs: &[Response<'_>],
) -> (Vec<Vec<f32>>, DeltaStats) {
    let whole = std::iter::once(0..rs.len()).collect::<Vec<_>>();
    match delta_passes(s, dim, rs, &whole, &mut InMemory(rs)) {
        Ok((c, mut p)) => (c, p.stats.pop().unwrap_or_default()),
        // In memory the vectors cannot go missing; unchecked vectors give the uniform
        // answer rather than a panic (`estimate` checks them first).
        Err(_) => (
            rs.iter().map(|r| vec![1.0; r.tokens()]).collect(),
            DeltaStats::default(),
        ),
    }
}

/// Batch-wide centroids (`sum w |A| v / sum w |A|` per side) of per-response partials.
pub(crate) fn batch_centroids(
    dim: usize,
    rs: &[Response<'_>],
    partials: &[Partial],
) -> (Vec<f64>, Vec<f64>) {
    centroids(dim, rs, partials, 0..rs.len())
}

/// One pass: each response's initial partial and its partial weighted by `coeffs` (the
/// effective centroids of the summary's "after" cosine), the vectors checked on the way.
pub(crate) fn summary_partials(
    dim: usize,
    rs: &[Response<'_>],
    coeffs: &[Vec<f32>],
    src: &mut dyn Vectors,
    initial: bool,
) -> Result<(Vec<Partial>, Vec<Partial>)> {
    let parts = each(src, rs, |i, v| {
        check(dim, &rs[i], v)?;
        let w: Vec<f64> = coeffs[i].iter().map(|&x| f64::from(x)).collect();
        let p0 = if initial {
            partial(dim, &rs[i], v, None)
        } else {
            None
        };
        Ok((p0, partial(dim, &rs[i], v, Some(&w))))
    })?;
    Ok(parts.into_iter().unzip())
}
