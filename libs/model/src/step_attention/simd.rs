//! The two products of a decoding step's attention, (row, kv head) at a time, at one
//! vector width: the scores q · k and the values' weighted sum. The element types they
//! read (f32, bf16) and the vector widths (portable, AVX-512) give the same bits.
#![allow(unsafe_code)]

/// A cache element: f32, or bf16 as its 16 bits.
pub(super) trait Elem: Copy + Send + Sync {
    fn load(self) -> f32;
    fn store(x: f32) -> Self;
    /// 16 elements from `p` as f32 lanes.
    ///
    /// # Safety
    /// `p..p + 16` is readable, and the CPU has AVX-512F (only called inlined into
    /// functions that enable it).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512;
}

impl Elem for f32 {
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> std::arch::x86_64::__m512 {
        // SAFETY: as the trait method's contract says.
        unsafe { std::arch::x86_64::_mm512_loadu_ps(p) }
    }
    #[inline(always)]
    fn load(self) -> f32 {
        self
    }
    #[inline(always)]
    fn store(x: f32) -> Self {
        x
    }
}

/// bf16: the high 16 bits of an f32.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(super) struct Bf16(pub(super) u16);

impl Elem for Bf16 {
    /// Widened to 32 bits and shifted into the high half: exactly [`Elem::load`].
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const Bf16) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: as the trait method's contract says.
        unsafe {
            let h = _mm256_loadu_si256(p.cast());
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
        }
    }
    #[inline(always)]
    fn load(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }
    /// Rounded to nearest, ties to even (as libtorch converts); NaN stays NaN.
    #[inline(always)]
    fn store(x: f32) -> Self {
        let b = x.to_bits();
        if x.is_nan() {
            return Bf16(((b >> 16) | 0x40) as u16);
        }
        let rounded = b.wrapping_add(0x7FFF + ((b >> 16) & 1));
        Bf16((rounded >> 16) as u16)
    }
}

/// Lanes of the dot products' partial sums.
const LANES: usize = 16;

/// The two products of a (row, kv head), at one vector width, reading the cache's
/// elements directly. Every implementation does the same arithmetic in the same order
/// (the portable one is the reference), so they give the same bits.
pub(super) trait Simd {
    /// s[g·n + j] = scale · (q_g · k_j) for the G queries q [G, d] and the n keys k [n, d]:
    /// lane l of a dot product sums the products of indices l, l + 16, ... in order; the
    /// lanes are then added in a fixed tree (8, 4, 2, 1 apart), the tail (d mod 16) last,
    /// in order.
    fn scores<E: Elem>(q: &[f32], k: &[E], d: usize, scale: f32, s: &mut [f32]);
    /// out[g·d + i] = Σ_j p[g·n + j] · v[j·d + i] for the G rows of weights p [G, n] and
    /// the n values v [n, d], each sum from 0 in key order.
    fn values<E: Elem>(p: &[f32], v: &[E], d: usize, out: &mut [f32]);
}

/// Scalar Rust (the compiler vectorises what it can).
pub(super) struct Portable;

impl Portable {
    #[inline(always)]
    fn dot<E: Elem>(q: &[f32], k: &[E]) -> f32 {
        let mut acc = [0f32; LANES];
        let ((qc, qt), (kc, kt)) = (q.as_chunks::<LANES>(), k.as_chunks::<LANES>());
        for (qs, ks) in qc.iter().zip(kc) {
            for l in 0..LANES {
                acc[l] += qs[l] * ks[l].load();
            }
        }
        let mut w = LANES / 2;
        while w > 0 {
            for l in 0..w {
                acc[l] += acc[l + w];
            }
            w /= 2;
        }
        let mut s = acc[0];
        for (a, b) in qt.iter().zip(kt) {
            s += a * b.load();
        }
        s
    }
}

impl Simd for Portable {
    #[inline(always)]
    fn scores<E: Elem>(q: &[f32], k: &[E], d: usize, scale: f32, s: &mut [f32]) {
        let n = k.len() / d.max(1);
        for (qg, sg) in q.chunks_exact(d).zip(s.chunks_exact_mut(n.max(1))) {
            for (x, kj) in sg.iter_mut().zip(k.chunks_exact(d)) {
                *x = scale * Self::dot(qg, kj);
            }
        }
    }

    #[inline(always)]
    fn values<E: Elem>(p: &[f32], v: &[E], d: usize, out: &mut [f32]) {
        let n = v.len() / d.max(1);
        for (pg, og) in p.chunks_exact(n.max(1)).zip(out.chunks_exact_mut(d)) {
            og.fill(0.0);
            for (&w, vj) in pg.iter().zip(v.chunks_exact(d)) {
                for (o, x) in og.iter_mut().zip(vj) {
                    *o += w * x.load();
                }
            }
        }
    }
}

/// AVX-512 intrinsics, for G ≤ 8 queries a kv head and d a multiple of 64 (else the
/// portable code): each key is read once, in order, and converted in registers; the G
/// queries' accumulators stay in registers (scores: across a key's chunks; values:
/// across the keys, 64 dimensions a pass). Separate multiplies and adds, no fused
/// multiply-add, as the portable code.
#[cfg(target_arch = "x86_64")]
pub(super) struct Avx512;

/// Dimensions a pass of [`values_avx512`] accumulates in registers (4 of 16 lanes).
#[cfg(target_arch = "x86_64")]
const BLOCK: usize = 64;

#[cfg(target_arch = "x86_64")]
impl Simd for Avx512 {
    #[inline(always)]
    fn scores<E: Elem>(q: &[f32], k: &[E], d: usize, scale: f32, s: &mut [f32]) {
        macro_rules! by_group {
            ($($g:literal)*) => {
                match q.len() / d.max(1) {
                    // SAFETY: only called under `attend_rows_avx512`, which runs only
                    // where the CPU has AVX-512F.
                    $($g => unsafe { scores_avx512::<E, $g>(q, k, d, scale, s) },)*
                    _ => Portable::scores(q, k, d, scale, s),
                }
            };
        }
        if d == 0 || !d.is_multiple_of(BLOCK) {
            return Portable::scores(q, k, d, scale, s);
        }
        by_group!(1 2 3 4 5 6 7 8)
    }

    #[inline(always)]
    fn values<E: Elem>(p: &[f32], v: &[E], d: usize, out: &mut [f32]) {
        macro_rules! by_group {
            ($($g:literal)*) => {
                match out.len() / d.max(1) {
                    // SAFETY: as for `scores`.
                    $($g => unsafe { values_avx512::<E, $g>(p, v, d, out) },)*
                    _ => Portable::values(p, v, d, out),
                }
            };
        }
        if d == 0 || !d.is_multiple_of(BLOCK) {
            return Portable::values(p, v, d, out);
        }
        by_group!(1 2 3 4 5 6 7 8)
    }
}

/// The portable dot product's lane tree on one register: lanes 0..8 += 8..16, 0..4 +=
/// 4..8, 0..2 += 2..4, 0 += 1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn reduce_tree(acc: std::arch::x86_64::__m512) -> f32 {
    use std::arch::x86_64::*;
    let lo = _mm512_castps512_ps256(acc);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
    let a8 = _mm256_add_ps(lo, hi);
    let a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
    let a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    let a1 = _mm_add_ss(a2, _mm_shuffle_ps(a2, a2, 1));
    _mm_cvtss_f32(a1)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn scores_avx512<E: Elem, const G: usize>(q: &[f32], k: &[E], d: usize, scale: f32, s: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = k.len() / d;
    // The loads below read q[..G·d], k[..n·d] and write s[..G·n]: checked here once.
    assert!(d.is_multiple_of(LANES) && q.len() >= G * d && s.len() >= G * n);
    let (qp, kp) = (q.as_ptr(), k.as_ptr());
    for j in 0..n {
        let mut acc = [_mm512_setzero_ps(); G];
        for c in (0..d).step_by(LANES) {
            // SAFETY: j·d + c + 16 ≤ n·d and g·d + c + 16 ≤ G·d (asserted above); the
            // CPU has AVX-512F (this function enables it).
            let kv = unsafe { E::load16(kp.add(j * d + c)) };
            for (g, a) in acc.iter_mut().enumerate() {
                let qv = unsafe { _mm512_loadu_ps(qp.add(g * d + c)) };
                *a = _mm512_add_ps(*a, _mm512_mul_ps(qv, kv));
            }
        }
        for (g, a) in acc.iter().enumerate() {
            s[g * n + j] = scale * reduce_tree(*a);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn values_avx512<E: Elem, const G: usize>(p: &[f32], v: &[E], d: usize, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = v.len() / d;
    // The loads below read p[..G·n], v[..n·d] and write out[..G·d]: checked here once.
    assert!(d.is_multiple_of(BLOCK) && p.len() >= G * n && out.len() >= G * d);
    let (pp, vp, op) = (p.as_ptr(), v.as_ptr(), out.as_mut_ptr());
    for b in (0..d).step_by(BLOCK) {
        let mut acc = [[_mm512_setzero_ps(); 4]; G];
        for j in 0..n {
            // SAFETY: j·d + b + 64 ≤ n·d and g·n + j < G·n (asserted above); the CPU has
            // AVX-512F (this function enables it).
            let x = unsafe {
                let at = vp.add(j * d + b);
                [
                    E::load16(at),
                    E::load16(at.add(16)),
                    E::load16(at.add(32)),
                    E::load16(at.add(48)),
                ]
            };
            for (g, a) in acc.iter_mut().enumerate() {
                let w = _mm512_set1_ps(unsafe { *pp.add(g * n + j) });
                for (a, x) in a.iter_mut().zip(&x) {
                    *a = _mm512_add_ps(*a, _mm512_mul_ps(w, *x));
                }
            }
        }
        for (g, a) in acc.iter().enumerate() {
            for (c, a) in a.iter().enumerate() {
                // SAFETY: g·d + b + 16c + 16 ≤ G·d (asserted above); `out` is borrowed
                // mutably.
                unsafe { _mm512_storeu_ps(op.add(g * d + b + c * LANES), *a) };
            }
        }
    }
}
