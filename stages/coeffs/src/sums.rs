//! The per-response arithmetic over token vectors, spread over the cores inside a long
//! response without changing a bit.
//!
//! A pass is parallel over the responses of a batch; at the paper's lengths (20k tokens x
//! 4,096 dims is 335 MB of f32) a batch holds one response, so without this a pass would
//! use one core. Each result here is computed in the same order whichever thread computes
//! it — a token's own value, or a sum over the tokens formed range by range in token order
//! ([`deltarl_schemas::vector_sum`]'s order) — so the coefficients do not depend on the
//! split or the thread count. A sweep reads each token's row once: what a token needs of
//! its own row (its margin) and its share of the sums are taken while the row is in cache,
//! so a pass costs one read of the vectors from memory, not one per quantity.

use deltarl_schemas::sum_range_tokens;
use rayon::prelude::*;

/// Responses with at least this many floats of vectors are split over the cores.
const PARALLEL_FLOATS: usize = 1 << 20;

/// `f` of each token's vector (`v` is token-major, `dim` floats a token), in token order.
pub(crate) fn per_token<T: Send>(
    dim: usize,
    v: &[f32],
    f: impl Fn(&[f32]) -> T + Sync + Send,
) -> Vec<T> {
    if v.len() >= PARALLEL_FLOATS {
        v.par_chunks_exact(dim).map(f).collect()
    } else {
        v.chunks_exact(dim).map(f).collect()
    }
}

/// One sweep over a response's token-major vectors: `f(t, v_t) = (out_t, w_t)` for each
/// token `t`; returns the outs in token order and `sum_t w_t v_t` in f64, summed in
/// [`deltarl_schemas::vector_sum`]'s order (so with every `w_t = 1` it is that sum, bit
/// for bit: `1.0 * x` is `x`).
pub(crate) fn sweep<T: Send>(
    dim: usize,
    v: &[f32],
    f: impl Fn(usize, &[f32]) -> (T, f64) + Sync,
) -> (Vec<T>, Vec<f64>) {
    if dim == 0 {
        return (Vec::new(), Vec::new());
    }
    let per_range = sum_range_tokens(dim);
    let range = |(k, values): (usize, &[f32])| {
        let mut acc = vec![0.0f64; dim];
        let outs: Vec<T> = values
            .chunks_exact(dim)
            .enumerate()
            .map(|(i, row)| {
                let (out, w) = f(k * per_range + i, row);
                for (a, &x) in acc.iter_mut().zip(row) {
                    *a += w * f64::from(x);
                }
                out
            })
            .collect();
        (outs, acc)
    };
    let parts: Vec<(Vec<T>, Vec<f64>)> = if v.len() >= PARALLEL_FLOATS {
        v.par_chunks(dim * per_range)
            .enumerate()
            .map(range)
            .collect()
    } else {
        v.chunks(dim * per_range).enumerate().map(range).collect()
    };
    let mut outs = Vec::with_capacity(v.len() / dim);
    let mut total: Option<Vec<f64>> = None;
    for (o, acc) in parts {
        outs.extend(o);
        match &mut total {
            None => total = Some(acc),
            Some(t) => t.iter_mut().zip(&acc).for_each(|(t, a)| *t += a),
        }
    }
    (outs, total.unwrap_or_else(|| vec![0.0; dim]))
}

/// `sum_t w_t v_t` ([`sweep`] with the weights given).
pub(crate) fn weighted_sum(dim: usize, v: &[f32], w: &[f64]) -> Vec<f64> {
    sweep(dim, v, |t, _| ((), w[t])).1
}

/// `sum_t v_t`: [`deltarl_schemas::vector_sum`] bit for bit (the features writer's stored
/// sum), spread over the cores for a long response.
pub(crate) fn sum(dim: usize, v: &[f32]) -> Vec<f64> {
    sweep(dim, v, |_, _| ((), 1.0)).1
}

/// `x . d` in f64, the coordinates added in order from +0.
pub(crate) fn dot(x: &[f32], d: &[f64]) -> f64 {
    x.iter()
        .zip(d)
        .fold(0.0f64, |s, (&x, &d)| s + f64::from(x) * d)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Values whose f64 sums round differently in another order (mixed magnitudes).
    fn data(tokens: usize, dim: usize) -> (Vec<f32>, Vec<f64>) {
        let mut x = 0x9e37_79b9_u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let v = (0..tokens * dim)
            .map(|_| (next() as f32 / u32::MAX as f32 - 0.5) * 10f32.powi((next() % 7) as i32 - 3))
            .collect();
        let w = (0..tokens)
            .map(|_| f64::from(next()) / f64::from(u32::MAX))
            .collect();
        (v, w)
    }

    /// The sum of a response split over the cores (ranges in parallel) equals the one
    /// formed on one core, and both are the stated order by hand: each range in token
    /// order, the ranges added in order to the first.
    #[test]
    fn the_split_sum_equals_the_sequential_sum_bit_for_bit() {
        // 700 columns: 374 tokens a range, so 2,000 tokens are 5 ranges and a short one.
        let (tokens, dim) = (2000, 700);
        assert_eq!(sum_range_tokens(dim), 374);
        let (v, w) = data(tokens, dim);
        assert!(v.len() >= PARALLEL_FLOATS);
        let (idx, par) = sweep(dim, &v, |t, _| (t, w[t]));
        assert_eq!(idx, (0..tokens).collect::<Vec<_>>());
        let seq = pool(1).install(|| sweep(dim, &v, |t, _| ((), w[t])).1);
        assert_eq!((seq.len(), par.len()), (dim, dim));
        assert!(seq
            .iter()
            .zip(&par)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        let range_sum = |j: usize, ts: std::ops::Range<usize>| {
            let mut s = 0.0f64;
            for t in ts {
                s += w[t] * f64::from(v[t * dim + j]);
            }
            s
        };
        let by_hand = |j: usize| {
            let mut s = range_sum(j, 0..374);
            for k in 1..6 {
                s += range_sum(j, 374 * k..(374 * (k + 1)).min(tokens));
            }
            s
        };
        assert!((0..dim).all(|j| par[j].to_bits() == by_hand(j).to_bits()));
        // And the order matters for these values (so the checks above can fail).
        assert!((0..dim).any(|j| range_sum(j, 0..tokens).to_bits() != par[j].to_bits()));
    }

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
    }

    #[test]
    fn the_sum_is_the_stored_sum_bit_for_bit() {
        // Both paths of `sum` (a short and a split response) against the writer's.
        for tokens in [5, PARALLEL_FLOATS / 700 + 3, 4 * PARALLEL_FLOATS / 700] {
            let (v, _) = data(tokens, 700);
            let stored = deltarl_schemas::vector_sum(700, &v);
            let here = sum(700, &v);
            assert_eq!((stored.len(), here.len()), (700, 700));
            assert!(stored
                .iter()
                .zip(&here)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
    }

    #[test]
    fn per_token_keeps_token_order_on_both_paths() {
        let dim = 8;
        let (small, _) = data(10, dim);
        let (large, _) = data(PARALLEL_FLOATS / dim + 3, dim);
        for v in [&small, &large] {
            let firsts = per_token(dim, v, |t| t[0].to_bits());
            let expected: Vec<u32> = v.chunks_exact(dim).map(|t| t[0].to_bits()).collect();
            assert_eq!(firsts, expected);
        }
    }
}
