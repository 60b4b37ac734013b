//! How two sets of coefficients of the same tokens agree: Spearman's rank correlation and
//! the largest absolute difference (a sketch's coefficients against full width's).

use deltarl_schemas::SketchAgreement;

use crate::{Error, Result};

/// The agreement of `b` with `a` over the tokens of the responses `counted` says (each
/// response's coefficients as long in both); a response of another length is an error
/// naming its index.
pub fn agreement(
    dim: u32,
    a: &[Vec<f32>],
    b: &[Vec<f32>],
    counted: impl Fn(usize) -> bool,
) -> Result<SketchAgreement> {
    if a.len() != b.len() {
        return Err(Error::Input(format!(
            "{} responses of coefficients against {}",
            a.len(),
            b.len()
        )));
    }
    let mut x = Vec::new();
    let mut y = Vec::new();
    for (i, (ca, cb)) in a.iter().zip(b).enumerate() {
        if ca.len() != cb.len() {
            return Err(Error::Input(format!(
                "response {i}: {} coefficients against {}",
                ca.len(),
                cb.len()
            )));
        }
        if counted(i) {
            x.extend(ca.iter().map(|&c| f64::from(c)));
            y.extend(cb.iter().map(|&c| f64::from(c)));
        }
    }
    let max_abs_diff = x
        .iter()
        .zip(&y)
        .map(|(p, q)| (p - q).abs())
        .fold(0.0, f64::max);
    Ok(SketchAgreement {
        dim,
        tokens: x.len(),
        spearman: spearman(&x, &y),
        max_abs_diff,
    })
}

/// Spearman's rho: Pearson's correlation of the ranks, tied values at their mean rank. 1
/// when either side has every value tied (nothing to order: the sketch loses no order the
/// full width has) or fewer than two values.
pub fn spearman(x: &[f64], y: &[f64]) -> f64 {
    let (rx, ry) = (ranks(x), ranks(y));
    let n = rx.len() as f64;
    if rx.len() < 2 {
        return 1.0;
    }
    let mean = (n + 1.0) / 2.0;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mean) * (b - mean);
        sxx += (a - mean) * (a - mean);
        syy += (b - mean) * (b - mean);
    }
    if sxx == 0.0 || syy == 0.0 {
        return 1.0;
    }
    sxy / (sxx * syy).sqrt()
}

/// Ranks from 1, ties at their mean rank (values compared by total order).
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut out = vec![0.0; v.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i + 1;
        while j < order.len() && v[order[j]] == v[order[i]] {
            j += 1;
        }
        // Positions i..j (0-based) hold ranks i + 1 ..= j: their mean is (i + 1 + j) / 2.
        let r = (i + 1 + j) as f64 / 2.0;
        for &k in &order[i..j] {
            out[k] = r;
        }
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn hand_checked_ranks_and_correlations() {
        // Ties share their mean rank: 10 is 1st; the two 20s are 2nd and 3rd (2.5 each).
        assert_eq!(ranks(&[20.0, 10.0, 20.0, 30.0]), vec![2.5, 1.0, 2.5, 4.0]);
        // Any increasing map keeps the order: rho 1; reversed: -1.
        let x = [0.1, 0.5, 0.2, 0.9];
        assert_eq!(spearman(&x, &x.map(|v| v * v * 7.0)), 1.0);
        assert_eq!(spearman(&x, &x.map(|v| -v)), -1.0);
        // Ranks (1, 2, 3) against (1, 3, 2): sum of d^2 = 2, rho = 1 - 6 * 2 / (3 * 8) = 0.5.
        assert!((spearman(&[1.0, 2.0, 3.0], &[1.0, 3.0, 2.0]) - 0.5).abs() < 1e-15);
    }

    #[test]
    fn agreement_counts_the_chosen_responses_and_refuses_unequal_lengths() {
        let a = vec![vec![1.0f32, 2.0, 3.0], vec![5.0]];
        let b = vec![vec![1.5f32, 2.0, 2.75], vec![0.0]];
        let g = agreement(8, &a, &b, |i| i == 0).unwrap();
        assert_eq!((g.dim, g.tokens), (8, 3));
        assert_eq!(g.max_abs_diff, 0.5);
        assert_eq!(g.spearman, 1.0);
        // The second response counted: its difference of 5 is the largest.
        assert_eq!(agreement(8, &a, &b, |_| true).unwrap().max_abs_diff, 5.0);
        let short = vec![vec![1.0f32, 2.0], vec![5.0]];
        let e = agreement(8, &a, &short, |_| true).unwrap_err().to_string();
        assert!(e.contains("response 0: 3 coefficients against 2"), "{e}");
        assert!(agreement(8, &a, &b[..1], |_| true).is_err());
    }
}
