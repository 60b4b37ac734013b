//! DelTA coefficients over one estimation scope (`docs/method.md` §4, steps 1-5).

use std::ops::Range;

use serde::Serialize;

use crate::margins::{gamma_of, side, sigmoid, sign, Discriminator, Partial, Side};
use crate::sums;
use crate::vectors::{check, check_len, checked_sum, each, InMemory, Vectors};
use crate::{DeltaSettings, Error, Response, Result};
use deltarl_schemas::number::show;

/// Denominator clamp of the weighted centroids (reference value).
const EPS: f64 = 1e-8;
/// Variance floor of the margin scales (reference value).
const VAR_FLOOR: f64 = 1e-8;

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

fn partial(dim: usize, r: &Response<'_>, v: &[f32], weights: &[f64]) -> Partial {
    if side(r) == Side::None || dim == 0 {
        return None;
    }
    let a = f64::from(r.advantage).abs();
    let w: Vec<f64> = weights.iter().map(|w| a * w).collect();
    // Added in token order from +0, as the sums of the weights always were.
    let wsum = w.iter().fold(0.0f64, |s, &w| s + w);
    Some((wsum, sums::weighted_sum(dim, v, &w)))
}

/// The initial partial (all weights 1) from the response's vector sum `sum_t v_t`:
/// `(n |A|, |A| sum_t v_t)`, the same whether the sum was stored or formed in a pass.
fn initial_partial(r: &Response<'_>, sum: &[f64]) -> Partial {
    if side(r) == Side::None || sum.is_empty() {
        return None;
    }
    let a = f64::from(r.advantage).abs();
    Some((a * r.tokens() as f64, sum.iter().map(|x| a * x).collect()))
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

/// The state of one estimation scope between passes.
struct ScopeState {
    range: Range<usize>,
    mu_p0: Vec<f64>,
    mu_n0: Vec<f64>,
    mu_p: Vec<f64>,
    mu_n: Vec<f64>,
    /// Of (mu_p, mu_n), refreshed with them.
    disc: Discriminator,
    g_p: f64,
    g_n: f64,
}

impl ScopeState {
    fn refit(&mut self, (mu_p, mu_n): (Vec<f64>, Vec<f64>)) {
        self.disc = Discriminator::new(&mu_p, &mu_n);
        (self.mu_p, self.mu_n) = (mu_p, mu_n);
    }
}

/// What the DelTA passes leave besides the coefficients, for the summary: each response's
/// initial partial and its partial weighted by its final coefficient (the batch-wide
/// centroids before and after reweighting), and each scope's statistics.
pub(crate) struct Passes {
    pub initial: Vec<Partial>,
    pub after: Vec<Partial>,
    pub stats: Vec<DeltaStats>,
}

/// DelTA coefficients for responses in the fixed order, each range of `scopes` estimated
/// on its own (one range: the batch), reading the vectors from `src` in `refine_steps + 2`
/// passes: (2) margins and scales, (3) each refit, (4) the coefficients; a source that
/// stores no vector sums takes one more first, (1) for the initial centroids. Resident
/// memory is one `dim`-vector partial a response and a few scalars a token; every sum is
/// formed per response and added in the fixed order, so the result is the same whatever
/// order or batches the passes come in.
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

    // 1. Initial advantage-weighted centroids, from each response's `sum_t v_t`: stored
    //    beside the vectors (the features writer's), or formed in a first pass. Either way
    //    the vectors are checked in the next pass that reads them, a stored sum against
    //    the vectors it claims to sum.
    let stored: Option<Vec<Vec<f64>>> = src
        .sums()
        .map(|v| v.into_iter().map(<[f64]>::to_vec).collect());
    let initial: Vec<Partial> = match &stored {
        Some(sums) => rs
            .iter()
            .zip(sums)
            .map(|(r, sum)| initial_partial(r, sum))
            .collect(),
        None => each(src, rs, |i, v| {
            Ok(initial_partial(&rs[i], &checked_sum(dim, &rs[i], v)?))
        })?,
    };
    let mut st: Vec<ScopeState> = scopes
        .iter()
        .map(|range| {
            let (mu_p, mu_n) = centroids(dim, rs, &initial, range.clone());
            ScopeState {
                range: range.clone(),
                disc: Discriminator::new(&mu_p, &mu_n),
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
        let disc = &st[scope_of[i]].disc;
        let Some(sums) = &stored else {
            return Ok(disc.margins(dim, &rs[i], v));
        };
        // With the margins, in the same sweep, the sum to check the stored one against.
        check_len(dim, &rs[i], v)?;
        let (m, here) = match sign(&rs[i]).filter(|_| dim > 0) {
            Some(sign) => sums::sweep(dim, v, |_, row| (disc.margin(sign, row), 1.0)),
            None => (vec![0.0; rs[i].tokens()], sums::sum(dim, v)),
        };
        if here.iter().any(|x| !x.is_finite()) {
            check(dim, &rs[i], v)?;
        }
        check_sum(&rs[i], &here, &sums[i])?;
        Ok(m)
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
            let g = gamma_of(&rs[i], c.g_p, c.g_n);
            let (mw, p) = c.disc.sweep(dim, &rs[i], v, |m| sigmoid(m / g));
            Ok((p, mw.into_iter().map(|(m, _)| m).collect()))
        })?;
        let (partials, m): (Vec<Partial>, Vec<Vec<f64>>) = parts.into_iter().unzip();
        for c in &mut st {
            c.refit(centroids(dim, rs, &partials, c.range.clone()));
            (c.g_p, c.g_n) = gammas(rs, &m, c.range.clone());
        }
    }

    // 4. Coefficients from margins against the final centroids and the last pass's gamma,
    //    and in the same pass each response's partial weighted by them (before the
    //    normalisation of step 5, which scales it).
    let span = s.lam_max - s.lam_min;
    let (raw, mut after): (Vec<Vec<f64>>, Vec<Partial>) = each(src, rs, |i, v| {
        let r = &rs[i];
        let c = &st[scope_of[i]];
        Ok(match side(r) {
            Side::None => (vec![s.lam_min; r.tokens()], None),
            _ => {
                let g = gamma_of(r, c.g_p, c.g_n);
                let (mx, p) = c
                    .disc
                    .sweep(dim, r, v, |m| s.lam_min + span * sigmoid(m / g));
                (mx.into_iter().map(|(_, x)| x).collect(), p)
            }
        })
    })?
    .into_iter()
    .unzip();

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
        // The summary's "after" partials carry the normalised weights, as the coefficients
        // do (in f64: the f32 rounding of a coefficient, 2^-24 relative, is not in them).
        for p in after[c.range.clone()].iter_mut().flatten() {
            p.0 *= norm;
            p.1.iter_mut().for_each(|x| *x *= norm);
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
    Ok((
        coeffs,
        Passes {
            initial,
            after,
            stats,
        },
    ))
}

/// A stored vector sum is the sum `here` of the vectors it came with, bit for bit (else the
/// centroids would silently describe other vectors: a file whose vectors were rewritten).
fn check_sum(r: &Response<'_>, here: &[f64], stored: &[f64]) -> Result<()> {
    match here
        .iter()
        .zip(stored)
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        None if here.len() == stored.len() => Ok(()),
        at => {
            let j = at.unwrap_or(here.len().min(stored.len()));
            Err(Error::Input(format!(
                "{}: the stored vector sum ({}) is not the sum of its vectors: coordinate {j} \
                 is {} stored, {} summed",
                r.key(),
                deltarl_schemas::VECTOR_SUM,
                stored.get(j).map_or("absent".into(), |x| x.to_string()),
                here.get(j).map_or("absent".into(), |x| x.to_string())
            )))
        }
    }
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
) -> Result<(Vec<Partial>, Vec<Partial>)> {
    let parts = each(src, rs, |i, v| {
        let w: Vec<f64> = coeffs[i].iter().map(|&x| f64::from(x)).collect();
        let p0 = initial_partial(&rs[i], &checked_sum(dim, &rs[i], v)?);
        Ok((p0, partial(dim, &rs[i], v, &w)))
    })?;
    Ok(parts.into_iter().unzip())
}
