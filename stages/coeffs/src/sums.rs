//! The per-response arithmetic over token vectors, spread over the cores inside a long
//! response without changing a bit.
//!
//! A pass is parallel over the responses of a batch; at the paper's lengths (20k tokens x
//! 4,096 dims is 335 MB of f32) a batch holds one response, so without this a pass would
//! use one core. Each result here is computed in the same order whichever thread computes
//! it — a token's own value, or one coordinate's sum over the tokens in token order — so
//! the coefficients do not depend on the split or the thread count.

use rayon::prelude::*;

/// Responses with at least this many floats of vectors are split over the cores.
const PARALLEL_FLOATS: usize = 1 << 20;
/// Columns of the weighted sum one task adds.
const COLUMNS: usize = 256;

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

/// `x . d` in f64, the coordinates added in order from +0.
pub(crate) fn dot(x: &[f32], d: &[f64]) -> f64 {
    x.iter()
        .zip(d)
        .fold(0.0f64, |s, (&x, &d)| s + f64::from(x) * d)
}

/// `sum_t w_t v_t` in f64, each coordinate summed over the tokens in order.
pub(crate) fn weighted_sum(dim: usize, v: &[f32], w: &[f64]) -> Vec<f64> {
    weighted_sum_in(dim, v, w, v.len() >= PARALLEL_FLOATS)
}

/// `sum_t v_t` in f64, each coordinate summed over the tokens in order: bit for bit
/// [`deltarl_schemas::vector_sum`] (the features writer's stored sum; `1.0 * x` is `x`),
/// spread over the cores for a long response.
pub(crate) fn sum(dim: usize, v: &[f32]) -> Vec<f64> {
    weighted_sum(dim, v, &vec![1.0; v.len() / dim.max(1)])
}

fn weighted_sum_in(dim: usize, v: &[f32], w: &[f64], parallel: bool) -> Vec<f64> {
    let mut acc = vec![0.0f64; dim];
    if dim == 0 {
        // No coordinates (an estimator given no vectors).
    } else if parallel {
        acc.par_chunks_mut(COLUMNS)
            .enumerate()
            .for_each(|(c, cols)| add_columns(cols, c * COLUMNS, dim, v, w));
    } else {
        add_columns(&mut acc, 0, dim, v, w);
    }
    acc
}

/// `cols[j] += sum_t w_t v[t][first + j]`, tokens in order.
fn add_columns(cols: &mut [f64], first: usize, dim: usize, v: &[f32], w: &[f64]) {
    let width = cols.len();
    for (row, &w) in v.chunks_exact(dim).zip(w) {
        for (acc, &x) in cols.iter_mut().zip(&row[first..first + width]) {
            *acc += w * f64::from(x);
        }
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn the_split_sum_equals_the_sequential_sum_bit_for_bit() {
        // 700 columns: two full tasks of 256 and a short last one.
        let (tokens, dim) = (300, 700);
        let (v, w) = data(tokens, dim);
        let seq = weighted_sum_in(dim, &v, &w, false);
        let par = weighted_sum_in(dim, &v, &w, true);
        assert_eq!(seq.len(), dim);
        assert!(seq
            .iter()
            .zip(&par)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        // By hand: one coordinate is its tokens' weighted values added in order.
        let mut by_hand = 0.0f64;
        for t in 0..tokens {
            by_hand += w[t] * f64::from(v[t * dim + 699]);
        }
        assert_eq!(par[699].to_bits(), by_hand.to_bits());
        // And the order matters for these values (so the checks above can fail).
        let differs = (0..dim).any(|j| {
            let mut r = 0.0f64;
            for t in (0..tokens).rev() {
                r += w[t] * f64::from(v[t * dim + j]);
            }
            r.to_bits() != seq[j].to_bits()
        });
        assert!(differs);
    }

    #[test]
    fn the_sum_is_the_stored_sum_bit_for_bit() {
        // Both paths of `sum` (a short and a split response) against the writer's.
        for tokens in [5, PARALLEL_FLOATS / 700 + 3] {
            let (v, _) = data(tokens, 700);
            let stored = deltarl_schemas::vector_sum(700, &v);
            let here = sum(700, &v);
            assert_eq!(stored.len(), 700);
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
