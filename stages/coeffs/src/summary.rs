//! Diagnostics of one estimation (the stage's summary): centroid cosines, scales,
//! quantiles, extreme tokens.

use deltarl_schemas::{CoeffsSummary, Quantiles, TokenRef};

use crate::delta::DeltaStats;
use crate::margins::{side, Side};
use crate::Response;

/// How many highest- and lowest-coefficient tokens the summary lists.
const EXTREMES: usize = 20;

/// The quantiles of `xs` (nearest rank), all 0 when it is empty.
fn quantiles(mut xs: Vec<f64>) -> Quantiles {
    if xs.is_empty() {
        return Quantiles::default();
    }
    xs.sort_by(f64::total_cmp);
    let q = |p: f64| xs[((xs.len() - 1) as f64 * p).round() as usize];
    Quantiles {
        count: xs.len(),
        min: xs[0],
        p10: q(0.1),
        p50: q(0.5),
        p90: q(0.9),
        max: xs[xs.len() - 1],
        mean: xs.iter().sum::<f64>() / xs.len() as f64,
    }
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// The summary of coefficients `coeffs` of `sorted`, with the batch-wide centroids before
/// (advantage-weighted) and after (also coefficient-weighted) reweighting.
pub(crate) fn summarize(
    sorted: &[Response<'_>],
    coeffs: &[Vec<f32>],
    stats: &[DeltaStats],
    (p0, n0): (Vec<f64>, Vec<f64>),
    (p1, n1): (Vec<f64>, Vec<f64>),
) -> CoeffsSummary {
    let mean = |f: &dyn Fn(&DeltaStats) -> f64| {
        if stats.is_empty() {
            0.0
        } else {
            stats.iter().map(f).sum::<f64>() / stats.len() as f64
        }
    };
    let mut s = CoeffsSummary {
        cos_before: cosine(&p0, &n0),
        cos_after: cosine(&p1, &n1),
        gamma_pos: mean(&|d| d.gamma_pos),
        gamma_neg: mean(&|d| d.gamma_neg),
        norm: if stats.is_empty() {
            1.0
        } else {
            mean(&|d| d.norm)
        },
        scopes: stats.len(),
        ..CoeffsSummary::default()
    };
    let (mut pos, mut neg) = (Vec::new(), Vec::new());
    // (Σ c w, Σ w) per side, w = (1 - p) |A|.
    let (mut gpos, mut gneg) = ((0f64, 0f64), (0f64, 0f64));
    let weighted = |r: &Response<'_>, c: &[f32], acc: &mut (f64, f64)| {
        let a = f64::from(r.advantage.abs());
        for (t, &x) in c.iter().enumerate() {
            let p = r.token_prob.get(t).map_or(0.0, |&p| f64::from(p));
            let w = (1.0 - p).max(0.0) * a;
            acc.0 += f64::from(x) * w;
            acc.1 += w;
        }
    };
    let mut ranked: Vec<(f32, usize, usize)> = Vec::new();
    for (i, (r, c)) in sorted.iter().zip(coeffs).enumerate() {
        match side(r) {
            Side::Pos => {
                s.tokens_pos += c.len();
                pos.extend(c.iter().map(|&x| f64::from(x)));
                weighted(r, c, &mut gpos);
            }
            Side::Neg => {
                s.tokens_neg += c.len();
                neg.extend(c.iter().map(|&x| f64::from(x)));
                weighted(r, c, &mut gneg);
            }
            Side::None if r.kept => s.tokens_zero += c.len(),
            Side::None => s.tokens_excluded += c.len(),
        }
        if matches!(side(r), Side::Pos | Side::Neg) {
            ranked.extend(c.iter().enumerate().map(|(t, &x)| (x, i, t)));
        }
    }
    s.coeff_pos = quantiles(pos);
    s.coeff_neg = quantiles(neg);
    let ratio = |(num, den): (f64, f64)| if den > 0.0 { num / den } else { 0.0 };
    s.grad_coeff_pos = ratio(gpos);
    s.grad_coeff_neg = ratio(gneg);
    // Total order: coefficient, then the fixed (response, position) order.
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    let token = |&(c, i, t): &(f32, usize, usize)| TokenRef {
        prompt_id: sorted[i].prompt_id.to_string(),
        sample_idx: sorted[i].sample_idx,
        position: t,
        coeff: c,
        advantage: sorted[i].advantage,
        text: String::new(),
        context: String::new(),
    };
    s.bottom = ranked.iter().take(EXTREMES).map(token).collect();
    s.top = ranked.iter().rev().take(EXTREMES).map(token).collect();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response<'a>(advantage: f32, token_prob: &'a [f32]) -> Response<'a> {
        Response {
            prompt_id: "p",
            sample_idx: 0,
            advantage,
            reward: 0.0,
            token_ids: &[],
            kept: true,
            features: &[],
            entropy: &[],
            token_prob,
            shared: &[],
        }
    }

    #[test]
    fn gradient_weighted_coefficients_by_hand() {
        // Positive side: A = 1, c = [2, 0], p = [0, 1]: weights 1 and 0, so 2 (the plain
        // mean is 1). Negative side: A = -2, c = [1, 3], p = [0.5, 0.75]: weights 1 and 0.5,
        // so (1 + 1.5) / 1.5 = 5/3.
        let sorted = [response(1.0, &[0.0, 1.0]), response(-2.0, &[0.5, 0.75])];
        let coeffs = vec![vec![2.0, 0.0], vec![1.0, 3.0]];
        let s = summarize(&sorted, &coeffs, &[], (vec![], vec![]), (vec![], vec![]));
        // f64 ratios of small sums of exact values: ~1e-16; 1e-12 is slack.
        assert!((s.grad_coeff_pos - 2.0).abs() < 1e-12, "{s:?}");
        assert!((s.grad_coeff_neg - 5.0 / 3.0).abs() < 1e-12, "{s:?}");
        assert!((s.coeff_pos.mean - 1.0).abs() < 1e-12);
        // No gradient anywhere on a side (every p = 1): 0, not a division by zero.
        let sorted = [response(1.0, &[1.0, 1.0])];
        let s = summarize(
            &sorted,
            &coeffs[..1],
            &[],
            (vec![], vec![]),
            (vec![], vec![]),
        );
        assert_eq!(s.grad_coeff_pos, 0.0);
    }
}
