//! Where a response's tokens stand against the two centroids: its side, each token's
//! margin (`docs/method.md` §4 step 2) and, in one read of its vectors, its margins with its
//! share of a weighted centroid. The passes over a scope (`delta.rs`) are built on these.

use crate::sums;
use crate::Response;

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

/// One response's share of its side's weighted centroid: `(sum w |A|, sum w |A| v)` with
/// per-token weights `w`; None for side `None`.
pub(crate) type Partial = Option<(f64, Vec<f64>)>;

/// What a margin needs of the centroids: `d = mu+ - mu-` and `c = ||mu-||^2 - ||mu+||^2`.
/// The squared distances' `||v||^2` terms cancel, so a token's margin is one dot product:
/// `||v - mu-||^2 - ||v - mu+||^2 = 2 v.d + c`.
pub(crate) struct Discriminator {
    d: Vec<f64>,
    c: f64,
}

impl Discriminator {
    pub(crate) fn new(mu_p: &[f64], mu_n: &[f64]) -> Self {
        let sq = |m: &[f64]| m.iter().map(|x| x * x).sum::<f64>();
        Discriminator {
            d: mu_p.iter().zip(mu_n).map(|(p, n)| p - n).collect(),
            c: sq(mu_n) - sq(mu_p),
        }
    }

    /// A token's margin on side `sign` (+1 for P, -1 for N): positive = closer to its own
    /// side's centroid.
    pub(crate) fn margin(&self, sign: f64, row: &[f32]) -> f64 {
        sign * (2.0 * sums::dot(row, &self.d) + self.c)
    }

    /// Per-token margins of one response. Tokens of side `None` get 0 (unused).
    pub(crate) fn margins(&self, dim: usize, r: &Response<'_>, v: &[f32]) -> Vec<f64> {
        match sign(r) {
            Some(sign) if dim > 0 => sums::per_token(dim, v, |t| self.margin(sign, t)),
            _ => vec![0.0; r.tokens()],
        }
    }

    /// One sweep over a response of side P or N: each token's margin and its weight
    /// `g(margin)`, and the response's partial with those weights times `|A|`.
    pub(crate) fn sweep(
        &self,
        dim: usize,
        r: &Response<'_>,
        v: &[f32],
        g: impl Fn(f64) -> f64 + Sync,
    ) -> (Vec<(f64, f64)>, Partial) {
        let Some(sign) = sign(r).filter(|_| dim > 0) else {
            return (vec![(0.0, 0.0); r.tokens()], None);
        };
        let a = f64::from(r.advantage).abs();
        let (mw, acc) = sums::sweep(dim, v, |_, row| {
            let m = self.margin(sign, row);
            let w = g(m);
            ((m, w), a * w)
        });
        // Added in token order from +0, as the sums of the weights always were.
        let wsum = mw.iter().fold(0.0f64, |s, &(_, w)| s + a * w);
        (mw, Some((wsum, acc)))
    }
}

/// +1 for a response of side P, -1 for N, None for neither.
pub(crate) fn sign(r: &Response<'_>) -> Option<f64> {
    match side(r) {
        Side::Pos => Some(1.0),
        Side::Neg => Some(-1.0),
        Side::None => None,
    }
}

/// The margin scale of a response's side (1 for side None, whose tokens are not assigned).
pub(crate) fn gamma_of(r: &Response<'_>, g_p: f64, g_n: f64) -> f64 {
    match side(r) {
        Side::Pos => g_p,
        Side::Neg => g_n,
        Side::None => 1.0,
    }
}

pub(crate) fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}
