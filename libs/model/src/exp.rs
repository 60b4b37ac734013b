//! The host sampler's exponential: exp(x) in f64 for the x ≤ 0 a softmax about its maximum
//! takes, written so that a row of them vectorises (with the row's other vector loops:
//! its maximum, its block sums).
//!
//! At a real vocabulary the sampler takes one exponential per row and vocabulary entry
//! each decoding step (512 rows × 49,152 = 25 M on SmolLM2), and libm's `exp`, one call
//! per value, was the larger part of the sampler's time. This one is branch-free IEEE
//! arithmetic (additions, multiplications, bit operations; never a fused multiply-add,
//! which Rust does not contract), so the compiler vectorises it, and it gives the same bits
//! on every machine and at every vector width: the 8-lane AVX-512 loop, the 4-lane AVX2
//! one and the portable one are one function compiled three times.
//!
//! The method (Cody and Waite's reduction, a Taylor polynomial):
//! 1. x ≥ -746 (below it exp(x) < 2^-1076, which rounds to 0; the clamp keeps k in
//!    range). NaN passes through.
//! 2. k = round(x / ln 2), by adding and subtracting 1.5·2^52 (round to nearest even);
//!    k ∈ [-1076, 0].
//! 3. r = x − k·ln 2 with ln 2 in two parts: k·LN2_HI is exact (LN2_HI has 32 significant
//!    bits, k at most 11, so the product fits in 53), so |r| ≤ ln 2 / 2 + 2^-40.
//! 4. exp(r) by its Taylor polynomial to degree 13 (Horner): the truncation is below
//!    r^14/14! ≤ 4.1e-18 < 2^-57 relative, the rounding within about one unit in the last
//!    place.
//! 5. exp(x) = exp(r)·2^k1·2^k2 with k1 = ⌊k/2⌋, k2 = k − k1 (both ≥ -538, so both powers
//!    are normal numbers and the first product is exact; the second rounds once, into the
//!    subnormals where exp(x) is one).
//!
//! Against glibc's `exp` (within ½ ulp of the exact value): at most 2 units in the last
//! place apart, tested below on two million points and the edges (measured: 1).
#![allow(unsafe_code)]

/// 1.5·2^52: adding and subtracting it rounds a double of magnitude below 2^51 to an
/// integer (its unit in the last place is 1).
const SHIFT: f64 = 6_755_399_441_055_744.0;
/// ln 2 in two parts (fdlibm's, by their bits): the high part's low 21 bits are zero.
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);
/// 1/n! for n = 2..=13, highest first (Horner's order).
const INV_FACT: [f64; 12] = [
    1.0 / 6_227_020_800.0,
    1.0 / 479_001_600.0,
    1.0 / 39_916_800.0,
    1.0 / 3_628_800.0,
    1.0 / 362_880.0,
    1.0 / 40_320.0,
    1.0 / 5_040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
];

/// exp(x) for x ≤ 0 (and -inf, which gives 0); NaN gives NaN. Steps as in the module
/// comment.
#[inline(always)]
pub fn exp_nonpositive(x: f64) -> f64 {
    // 1. Clamp (a comparison, so NaN is kept).
    let x = if x < -746.0 { -746.0 } else { x };
    // 2. k = round(x / ln 2), as a double and as an integer (the bits of SHIFT + k less
    //    those of SHIFT: both in [2^52, 2^53), where the bits count in units).
    let shifted = x * std::f64::consts::LOG2_E + SHIFT;
    let kf = shifted - SHIFT;
    let k = (shifted.to_bits() as i64).wrapping_sub(SHIFT.to_bits() as i64);
    // 3. r = x - k ln 2.
    let r = (x - kf * LN2_HI) - kf * LN2_LO;
    // 4. exp(r) = 1 + r (1 + r (1/2 + r (1/6 + ... + r/13!))).
    let mut p = INV_FACT[0];
    for c in &INV_FACT[1..] {
        p = p * r + c;
    }
    let p = 1.0 + r * (1.0 + r * p);
    // 5. Times 2^k in two normal factors.
    let k1 = k >> 1;
    let k2 = k - k1;
    let pow2 = |e: i64| f64::from_bits((e.wrapping_add(1023) as u64) << 52);
    p * pow2(k1) * pow2(k2)
}

/// Entries a block sum of [`exps_into`] covers.
pub const BLOCK: usize = 64;

/// `out[i] = exp(row[i] / t - max)` (`out` sized to the row): a row's unnormalised probabilities at temperature
/// `t`, about its maximum `max` (so every argument is ≤ 0); and `sums[b]` the sum of
/// block b (entries 64·b .. 64·b + 64, the last block shorter): lane l (of 8) adds the
/// block's entries l, l + 8, ... in order, then the lanes are added 4, 2, 1 apart. The
/// widest vector unit the CPU has runs it; every width gives the same bits.
pub fn exps_into(row: &[f32], t: f64, max: f64, out: &mut Vec<f64>, sums: &mut Vec<f64>) {
    out.resize(row.len(), 0.0);
    sums.resize(row.len().div_ceil(BLOCK), 0.0);
    let (out, sums) = (out.as_mut_slice(), sums.as_mut_slice());
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F, the only feature the function enables.
            unsafe { exps_avx512(row, t, max, out, sums) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, the only feature the function enables.
            unsafe { exps_avx2(row, t, max, out, sums) };
            return;
        }
    }
    exps_portable(row, t, max, out, sums);
}

/// The largest entry of a row, or None when it holds a NaN or +inf (no distribution to
/// sample). Lanes of 16 keep their own maxima (a maximum is exact in any order); the
/// widest vector unit the CPU has runs it.
pub fn row_max(row: &[f32]) -> Option<f32> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F, the only feature the function enables.
            return unsafe { row_max_avx512(row) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, the only feature the function enables.
            return unsafe { row_max_avx2(row) };
        }
    }
    row_max_portable(row)
}

#[inline(always)]
fn row_max_portable(row: &[f32]) -> Option<f32> {
    const W: usize = 16;
    let (mut max, mut bad) = ([f32::NEG_INFINITY; W], [false; W]);
    let (chunks, tail) = row.as_chunks::<W>();
    for c in chunks {
        for l in 0..W {
            let x = c[l];
            bad[l] |= x.is_nan() | (x == f32::INFINITY);
            max[l] = if x > max[l] { x } else { max[l] };
        }
    }
    for (l, &x) in tail.iter().enumerate() {
        bad[l] |= x.is_nan() | (x == f32::INFINITY);
        max[l] = if x > max[l] { x } else { max[l] };
    }
    if bad.iter().any(|&b| b) {
        return None;
    }
    Some(
        max.iter()
            .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a }),
    )
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn row_max_avx512(row: &[f32]) -> Option<f32> {
    row_max_portable(row)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn row_max_avx2(row: &[f32]) -> Option<f32> {
    row_max_portable(row)
}

/// Lanes of a block sum.
const LANES: usize = 8;

/// One block's sum, in the lane order of [`exps_into`].
#[inline(always)]
fn block_sum(block: &[f64]) -> f64 {
    let mut acc = [0f64; LANES];
    let (chunks, tail) = block.as_chunks::<LANES>();
    for c in chunks {
        for l in 0..LANES {
            acc[l] += c[l];
        }
    }
    for (a, x) in acc.iter_mut().zip(tail) {
        *a += x;
    }
    let mut w = LANES / 2;
    while w > 0 {
        for l in 0..w {
            acc[l] += acc[l + w];
        }
        w /= 2;
    }
    acc[0]
}

#[inline(always)]
fn exps_portable(row: &[f32], t: f64, max: f64, out: &mut [f64], sums: &mut [f64]) {
    for ((o, x), s) in out
        .chunks_mut(BLOCK)
        .zip(row.chunks(BLOCK))
        .zip(sums.iter_mut())
    {
        for (o, &x) in o.iter_mut().zip(x) {
            *o = exp_nonpositive(f64::from(x) / t - max);
        }
        *s = block_sum(o);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn exps_avx512(row: &[f32], t: f64, max: f64, out: &mut [f64], sums: &mut [f64]) {
    exps_portable(row, t, max, out, sums);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn exps_avx2(row: &[f32], t: f64, max: f64, out: &mut [f64], sums: &mut [f64]) {
    exps_portable(row, t, max, out, sums);
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltarl_schemas::seed::Rng;

    /// Units in the last place between two non-negative doubles (their bit patterns are
    /// ordered as the values are).
    fn ulps(a: f64, b: f64) -> u64 {
        a.to_bits().abs_diff(b.to_bits())
    }

    #[test]
    fn within_two_ulps_of_libm_over_the_whole_range_and_at_its_edges() {
        // A million points uniform in [-746, 0], a million in [-1, 0] (where a softmax's
        // large terms are), and the edges: 0, the subnormal range, the underflow to 0.
        let mut rng = Rng::new(7);
        let mut xs: Vec<f64> = (0..1_000_000).map(|_| -746.0 * rng.uniform()).collect();
        xs.extend((0..1_000_000).map(|_| -rng.uniform()));
        xs.extend([
            0.0,
            -0.0,
            -1e-300,
            -f64::MIN_POSITIVE,
            -0.5 * std::f64::consts::LN_2,
            -708.0,
            -708.4,
            -709.0,
            -720.0,
            -744.0,
            -745.0,
            -745.13,
            -745.2,
            -746.0,
            -800.0,
            f64::NEG_INFINITY,
        ]);
        let mut worst = (0, 0.0);
        for &x in &xs {
            let (ours, libm) = (exp_nonpositive(x), x.exp());
            let d = ulps(ours, libm);
            if d > worst.0 {
                worst = (d, x);
            }
        }
        // Step 4's truncation (< 2^-57) and Horner's roundings (about 1 ulp) against
        // glibc's ½ ulp: at most 2 (measured here: 1).
        assert!(worst.0 <= 2, "{} ulps at x = {}", worst.0, worst.1);
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(f64::NEG_INFINITY), 0.0);
        assert!(exp_nonpositive(f64::NAN).is_nan());
    }

    #[test]
    fn row_max_finds_the_maximum_and_refuses_nan_and_infinity() {
        let mut row: Vec<f32> = (0..1000).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
        assert_eq!(row_max(&row), Some(50.0));
        row[999] = 75.0; // in the tail (1000 = 62·16 + 8)
        assert_eq!(row_max(&row), Some(75.0));
        assert_eq!(row_max(&[f32::NEG_INFINITY; 3]), Some(f32::NEG_INFINITY));
        for bad in [f32::NAN, f32::INFINITY] {
            for at in [0, 500, 999] {
                let mut r = row.clone();
                r[at] = bad;
                assert_eq!(row_max(&r), None, "{bad} at {at}");
            }
        }
    }

    #[test]
    fn every_vector_width_gives_the_same_bits() {
        // Rows whose lengths are not multiples of any width (the loops' tails too).
        let mut rng = Rng::new(11);
        for len in [1, 7, 8, 9, 63, 64, 65, 1000, 4099] {
            let row: Vec<f32> = (0..len)
                .map(|_| (40.0 * (rng.uniform() - 0.5)) as f32)
                .collect();
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            for t in [1.0, 0.7] {
                let zmax = f64::from(max) / t;
                let (mut fast, mut fast_sums) = (Vec::new(), Vec::new());
                exps_into(&row, t, zmax, &mut fast, &mut fast_sums);
                let mut portable = vec![0.0; len];
                let mut portable_sums = vec![0.0; len.div_ceil(BLOCK)];
                exps_portable(&row, t, zmax, &mut portable, &mut portable_sums);
                assert_eq!(fast.len(), portable.len());
                for (i, (a, b)) in fast.iter().zip(&portable).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "len {len} t {t} entry {i}");
                }
                assert_eq!(fast_sums.len(), len.div_ceil(BLOCK));
                assert_eq!(fast_sums.len(), portable_sums.len());
                for (b, (x, y)) in fast_sums.iter().zip(&portable_sums).enumerate() {
                    assert_eq!(x.to_bits(), y.to_bits(), "len {len} t {t} block {b}");
                }
            }
        }
    }
}
