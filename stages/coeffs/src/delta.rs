//! DelTA coefficients over one estimation scope (`docs/method.md` §4, steps 1-5).

use rayon::prelude::*;
use serde::Serialize;

use crate::{DeltaSettings, Response};

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

/// Per-token margins against (mu+, mu-): positive = closer to the token's own side.
/// Tokens of side `None` get 0 (unused).
fn margins(dim: usize, rs: &[Response<'_>], mu_p: &[f64], mu_n: &[f64]) -> Vec<Vec<f64>> {
    rs.par_iter()
        .map(|r| {
            let s = side(r);
            if s == Side::None || dim == 0 {
                return vec![0.0; r.tokens()];
            }
            r.features
                .chunks_exact(dim)
                .map(|v| {
                    let (dp, dn) = (sq_dist(v, mu_p), sq_dist(v, mu_n));
                    match s {
                        Side::Pos => dn - dp,
                        _ => dp - dn,
                    }
                })
                .collect()
        })
        .collect()
}

/// Weighted centroids per side: `sum w |A| v / max(sum w |A|, eps)` with per-token weights
/// `w` (all 1 for the initial centroids).
fn centroids(
    dim: usize,
    rs: &[Response<'_>],
    weights: Option<&[Vec<f64>]>,
) -> (Vec<f64>, Vec<f64>) {
    // Per-response partial sums in parallel; added below in the fixed response order.
    let partials: Vec<(Side, f64, Vec<f64>)> = rs
        .par_iter()
        .enumerate()
        .map(|(i, r)| {
            let s = side(r);
            let mut acc = vec![0.0f64; dim];
            let mut wsum = 0.0f64;
            if s != Side::None && dim > 0 {
                let a = f64::from(r.advantage).abs();
                for (t, v) in r.features.chunks_exact(dim).enumerate() {
                    let w = a * weights.map_or(1.0, |w| w[i][t]);
                    wsum += w;
                    for (acc_j, &x) in acc.iter_mut().zip(v) {
                        *acc_j += w * f64::from(x);
                    }
                }
            }
            (s, wsum, acc)
        })
        .collect();
    let (mut sp, mut sn) = (vec![0.0; dim], vec![0.0; dim]);
    let (mut wp, mut wn) = (0.0, 0.0);
    for (s, w, acc) in partials {
        let (sum, wt) = match s {
            Side::Pos => (&mut sp, &mut wp),
            Side::Neg => (&mut sn, &mut wn),
            Side::None => continue,
        };
        *wt += w;
        for (a, b) in sum.iter_mut().zip(acc) {
            *a += b;
        }
    }
    // A side with no tokens has a zero centroid (the eps clamp), as in the reference.
    let dp = wp.max(EPS);
    let dn = wn.max(EPS);
    (
        sp.into_iter().map(|x| x / dp).collect(),
        sn.into_iter().map(|x| x / dn).collect(),
    )
}

/// Per-side standard deviation of the margins: population variance over tokens, not
/// centred on anything but the side mean, floored at 1e-8; count clamped to 1.
fn gammas(rs: &[Response<'_>], m: &[Vec<f64>]) -> (f64, f64) {
    let side_of = |i: usize| side(&rs[i]);
    let (mut sum_p, mut sum_n, mut n_p, mut n_n) = (0.0, 0.0, 0usize, 0usize);
    for (i, mi) in m.iter().enumerate() {
        match side_of(i) {
            Side::Pos => {
                sum_p += mi.iter().sum::<f64>();
                n_p += mi.len();
            }
            Side::Neg => {
                sum_n += mi.iter().sum::<f64>();
                n_n += mi.len();
            }
            Side::None => {}
        }
    }
    let mean_p = sum_p / n_p.max(1) as f64;
    let mean_n = sum_n / n_n.max(1) as f64;
    let (mut ss_p, mut ss_n) = (0.0, 0.0);
    for (i, mi) in m.iter().enumerate() {
        match side_of(i) {
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

fn soft_assign(rs: &[Response<'_>], m: &[Vec<f64>], g_p: f64, g_n: f64) -> Vec<Vec<f64>> {
    m.iter()
        .enumerate()
        .map(|(i, mi)| {
            let g = match side(&rs[i]) {
                Side::Pos => g_p,
                Side::Neg => g_n,
                Side::None => return vec![0.0; mi.len()],
            };
            mi.iter().map(|x| sigmoid(x / g)).collect()
        })
        .collect()
}

/// DelTA coefficients for the responses of one scope (already in the fixed order).
///
/// Returns the normalised coefficients (0 for excluded responses) and the statistics.
pub fn delta_coefficients(
    s: &DeltaSettings,
    dim: usize,
    rs: &[Response<'_>],
) -> (Vec<Vec<f32>>, DeltaStats) {
    // 1. Initial advantage-weighted centroids.
    let (mu_p0, mu_n0) = centroids(dim, rs, None);
    let (mut mu_p, mut mu_n) = (mu_p0.clone(), mu_n0.clone());

    // 2. Margins and per-side scales against the initial centroids.
    let m = margins(dim, rs, &mu_p, &mu_n);
    let (mut g_p, mut g_n) = gammas(rs, &m);

    // 3. Refinement, in the authors' order: each pass assigns softly with the gamma
    //    carried in (step 2's for the first pass), refits the centroids, and only then
    //    takes gamma from this pass's margins (against the centroids before the refit).
    //    With K = 1 the assignment and the final gamma are both step 2's; with K >= 2
    //    each pass assigns with the previous pass's gamma.
    for _ in 0..s.refine_steps {
        let m = margins(dim, rs, &mu_p, &mu_n);
        let r = soft_assign(rs, &m, g_p, g_n);
        (mu_p, mu_n) = centroids(dim, rs, Some(&r));
        (g_p, g_n) = gammas(rs, &m);
    }

    // 4. Coefficients from margins against the final centroids and the last pass's gamma.
    let m = margins(dim, rs, &mu_p, &mu_n);
    let soft = soft_assign(rs, &m, g_p, g_n);
    let span = s.lam_max - s.lam_min;
    let raw: Vec<Vec<f64>> = rs
        .iter()
        .zip(&soft)
        .map(|(r, si)| match side(r) {
            Side::None => vec![s.lam_min; r.tokens()],
            _ => si.iter().map(|&x| s.lam_min + span * x).collect(),
        })
        .collect();

    // 5. Self-normalisation: the mean coefficient over the scope's valid tokens is 1.
    //    Excluded (kept = false) responses are not valid tokens.
    let (mut n_valid, mut sum_c) = (0usize, 0.0f64);
    let (mut tp, mut tn, mut tz) = (0, 0, 0);
    for (r, c) in rs.iter().zip(&raw) {
        if r.kept {
            n_valid += c.len();
            sum_c += c.iter().sum::<f64>();
        }
        match side(r) {
            Side::Pos => tp += c.len(),
            Side::Neg => tn += c.len(),
            Side::None if r.kept => tz += c.len(),
            Side::None => {}
        }
    }
    let norm = if sum_c > 0.0 {
        n_valid as f64 / sum_c
    } else {
        1.0
    };
    let coeffs = rs
        .iter()
        .zip(raw)
        .map(|(r, c)| {
            if r.kept {
                c.into_iter().map(|x| (norm * x) as f32).collect()
            } else {
                vec![0.0; r.tokens()]
            }
        })
        .collect();
    (
        coeffs,
        DeltaStats {
            mu_pos_init: mu_p0,
            mu_neg_init: mu_n0,
            mu_pos: mu_p,
            mu_neg: mu_n,
            gamma_pos: g_p,
            gamma_neg: g_n,
            norm,
            tokens_pos: tp,
            tokens_neg: tn,
            tokens_zero: tz,
        },
    )
}

/// Effective centroids `sum c |A| v / sum c |A|` per side, for the "after" cosine.
pub(crate) fn weighted_centroids(
    dim: usize,
    rs: &[Response<'_>],
    coeffs: &[Vec<f32>],
) -> (Vec<f64>, Vec<f64>) {
    let w: Vec<Vec<f64>> = coeffs
        .iter()
        .map(|c| c.iter().map(|&x| f64::from(x)).collect())
        .collect();
    centroids(dim, rs, Some(&w))
}

pub(crate) fn initial_centroids(dim: usize, rs: &[Response<'_>]) -> (Vec<f64>, Vec<f64>) {
    centroids(dim, rs, None)
}
