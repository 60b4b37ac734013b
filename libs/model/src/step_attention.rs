//! A decoding step's attention on the CPU, read straight out of the slot cache.
//!
//! At a decoding step each row's few query heads meet that row's own keys, so the step
//! reads the whole cache once and does little arithmetic per byte: at SmolLM2's shapes (512
//! rows, 3 kv heads of 64 dims, up to 176 positions) a layer reads up to 69 MB of bf16 keys
//! and values for 0.2 GFLOP. libtorch's fused attention ran it at 4-6 GB/s (its blocked
//! kernel sets up a product of 3 queries by the row's keys for each row and head), and it
//! took more of a step than every matrix product together. Here each (row, kv head) is one
//! pass over the row's own keys 0..=pos[r] (so the masked keys of shorter rows are not
//! read at all), in f32 with fixed-order sums.
//!
//! For row r, kv head h, and its query heads g = 0..G (head h·G + g, as grouped-query
//! attention pairs them), with n = pos[r] + 1 keys:
//! 1. s[g][j] = scale · (q[g] · k[j]), j < n: each dot product in 16 lanes and the lanes
//!    added in a fixed tree;
//! 2. e[g][j] = exp(s[g][j] − max_j s[g][j]) ([`crate::exp`]'s f64 exponential, rounded to
//!    f32), l[g] = Σ_j e[g][j] in key order;
//! 3. out[g] = (Σ_j e[g][j] · v[j]) / l[g], the sum in key order, per dimension.
//!
//! Every sum has one order whatever the machine, the vector width or the number of
//! threads (rows are split between threads, each row's arithmetic is its own), so a rerun
//! gives the same bits; against libtorch's kernel the output differs by f32 round-off (and
//! its rounding to bf16, which both do). The widest vector unit the CPU has runs it, as in
//! [`crate::exp`]. The rows are cut between libtorch's own threads ([`crate::omp`]).
//!
//! Measured in the engine (SmolLM2-135M at bf16, 64 prompts × 8 samples × 128 new tokens,
//! 512 rows in flight, 2 threads; six alternated runs each): 1,100 against 953 rollout
//! tokens/s with libtorch's attention, +15 %. The tiny default's rollout (head dim 32, the
//! portable code) was level.
#![allow(unsafe_code)]

use tch::{Device, Kind, Tensor};

use crate::exp::exp_nonpositive;

mod simd;

#[cfg(target_arch = "x86_64")]
use simd::Avx512;
use simd::{Bf16, Elem, Portable, Simd};

/// The shapes of one step: rows, kv heads, queries per kv head, head dim, cache
/// positions per row.
#[derive(Clone, Copy, Debug)]
struct Dims {
    rows: usize,
    kv: usize,
    group: usize,
    d: usize,
    capacity: usize,
}

/// What every row of the step reads: its shapes, the queries [R, kv, G, D], the layer's
/// caches [slots, kv, capacity, D], the rows' positions, and the scores' scale.
#[derive(Clone, Copy)]
struct Inputs<'a, E> {
    dims: Dims,
    q: &'a [E],
    k: &'a [E],
    v: &'a [E],
    pos: &'a [i64],
    scale: f32,
}

/// A thread's buffers: the query in f32 [G, D], scores [G, n], the exponentials' sums
/// [G], output sums [G, D].
#[derive(Default)]
struct Scratch {
    q: Vec<f32>,
    s: Vec<f32>,
    l: Vec<f32>,
    out: Vec<f32>,
}

/// Rows `first..first + out.len() / (kv·G·D)` of the step (steps 1-3 of the module
/// comment). `for` loops over zipped slices, never `extend` or `fold`: those are
/// separate functions the compiler may leave un-inlined, which then run without the
/// caller's vector unit.
#[inline(always)]
fn attend_rows<E: Elem, S: Simd>(x: Inputs<'_, E>, first: usize, out: &mut [E]) {
    let Inputs {
        dims:
            Dims {
                kv,
                group,
                d,
                capacity,
                ..
            },
        q,
        k,
        v,
        pos,
        scale,
    } = x;
    let head = group * d;
    let mut sc = Scratch::default();
    for (i, out_row) in out.chunks_exact_mut(kv * head).enumerate() {
        let r = first + i;
        let n = usize::try_from(pos[r] + 1).unwrap_or(1).clamp(1, capacity);
        for h in 0..kv {
            let qh = &q[(r * kv + h) * head..][..head];
            let base = (r * kv + h) * capacity * d;
            sc.q.resize(head, 0.0);
            for (x, y) in sc.q.iter_mut().zip(qh) {
                *x = y.load();
            }
            // 1. Scores [G, n].
            sc.s.resize(group * n, 0.0);
            S::scores(&sc.q, &k[base..][..n * d], d, scale, &mut sc.s);
            // 2. Exponentials about each query's maximum, and their sums in key order.
            sc.l.resize(group, 0.0);
            for (sg, l) in sc.s.chunks_exact_mut(n).zip(sc.l.iter_mut()) {
                let mut m = f32::NEG_INFINITY;
                for &x in sg.iter() {
                    m = m.max(x);
                }
                for x in sg.iter_mut() {
                    *x = exp_nonpositive(f64::from(*x - m)) as f32;
                }
                let mut sum = 0.0;
                for &x in sg.iter() {
                    sum += x;
                }
                *l = sum;
            }
            // 3. Weighted values [G, D], normalised and stored.
            sc.out.resize(head, 0.0);
            S::values(&sc.s, &v[base..][..n * d], d, &mut sc.out);
            let dst = &mut out_row[h * head..][..head];
            for ((dg, og), &l) in dst
                .chunks_exact_mut(d)
                .zip(sc.out.chunks_exact(d))
                .zip(&sc.l)
            {
                for (x, y) in dg.iter_mut().zip(og) {
                    *x = E::store(y / l);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn attend_rows_avx512<E: Elem>(x: Inputs<'_, E>, first: usize, out: &mut [E]) {
    attend_rows::<E, Avx512>(x, first, out);
}

/// [`attend_rows`] at the CPU's widest vector unit.
fn attend_rows_best<E: Elem>(x: Inputs<'_, E>, first: usize, out: &mut [E]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F, the only feature the function enables.
            unsafe { attend_rows_avx512(x, first, out) };
            return;
        }
    }
    attend_rows::<E, Portable>(x, first, out);
}

/// A tensor's elements as a slice.
///
/// SAFETY (callers): `t` is a contiguous CPU tensor whose elements are `E` (checked by
/// [`attend`] before it calls), alive and not written elsewhere while the slice lives.
unsafe fn elems<E>(t: &Tensor) -> &[E] {
    // SAFETY: as the function's contract says; numel elements of E start at data_ptr.
    unsafe { std::slice::from_raw_parts(t.data_ptr() as *const E, t.numel()) }
}

/// The step on libtorch's own intra-op threads ([`crate::omp`]): rows cut into one
/// contiguous part per thread. Scoped threads of our own measured slower in the engine
/// than libtorch's kernel although faster alone: between libtorch's parallel regions its
/// worker threads keep spinning, so two more threads of ours had two busy cores to share.
fn run<E: Elem>(x: Inputs<'_, E>, out: &mut [E]) {
    let dims = x.dims;
    let per_row = dims.kv * dims.group * dims.d;
    let parts = (tch::get_num_threads().max(1) as usize).min(dims.rows.max(1));
    let rows_per = dims.rows.div_ceil(parts).max(1);
    let chunks: Vec<std::sync::Mutex<&mut [E]>> = out
        .chunks_mut(rows_per * per_row)
        .map(std::sync::Mutex::new)
        .collect();
    crate::omp::parallel(chunks.len(), &|i| {
        // Part i alone takes chunk i's lock: never contended, it only hands the slice over.
        let mut chunk = chunks[i]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        attend_rows_best(x, i * rows_per, &mut chunk);
    });
}

/// The step's tensors: queries, the layer's caches, and the output.
#[derive(Clone, Copy)]
struct Tensors<'a> {
    q: &'a Tensor,
    k: &'a Tensor,
    v: &'a Tensor,
    out: &'a Tensor,
}

/// [`run`] on the tensors' elements.
///
/// SAFETY (callers): as [`elems`] says, for every tensor of `t`, whose elements are `E`;
/// `t.out` is written by this call alone.
unsafe fn run_on<E: Elem>(dims: Dims, t: Tensors, pos: &[i64], scale: f32) {
    // SAFETY: as the function's contract says.
    unsafe {
        let x = Inputs {
            dims,
            q: elems(t.q),
            k: elems(t.k),
            v: elems(t.v),
            pos,
            scale,
        };
        let out = std::slice::from_raw_parts_mut(t.out.data_ptr() as *mut E, t.out.numel());
        run(x, out);
    }
}

/// Attention of one decoding step: q [R, kv, G, D] (the rows' query heads grouped by the
/// kv head they read), the layer's caches [slots, kv, capacity, D] (row r's keys in slot
/// r, positions 0..=pos[r] valid), `pos` the rows' positions. Returns [R, kv, G, D] in the
/// cache's kind, or None where this kernel does not apply (not the CPU, not f32 or bf16,
/// a cache that is not contiguous): the caller then runs libtorch's attention.
pub(crate) fn attend(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    pos: &[i64],
    scale: f64,
) -> Option<Tensor> {
    let kind = k_cache.kind();
    let cpu = |t: &Tensor| t.device() == Device::Cpu && t.kind() == kind;
    let applies = cpu(q)
        && cpu(k_cache)
        && cpu(v_cache)
        && matches!(kind, Kind::Float | Kind::BFloat16)
        && k_cache.is_contiguous()
        && v_cache.is_contiguous()
        && k_cache.size() == v_cache.size();
    if !applies {
        return None;
    }
    let (qs, cs) = (q.size(), k_cache.size());
    let [rows, kv, group, d] = qs[..] else {
        return None;
    };
    let [slots, ckv, capacity, cd] = cs[..] else {
        return None;
    };
    if ckv != kv || cd != d || rows > slots || pos.len() as i64 != rows {
        return None;
    }
    if pos.iter().any(|&p| p < 0 || p >= capacity) {
        return None;
    }
    let dims = Dims {
        rows: rows as usize,
        kv: kv as usize,
        group: group as usize,
        d: d as usize,
        capacity: capacity as usize,
    };
    let q = q.contiguous();
    let out = Tensor::empty(qs.as_slice(), (kind, Device::Cpu));
    let t = Tensors {
        q: &q,
        k: k_cache,
        v: v_cache,
        out: &out,
    };
    // SAFETY: every tensor is a contiguous CPU tensor of `kind` (checked above), alive
    // until this function returns; `out` is fresh, so only its slice writes it, and the
    // caches are not written while the step reads them.
    unsafe {
        match kind {
            Kind::Float => run_on::<f32>(dims, t, pos, scale as f32),
            _ => run_on::<Bf16>(dims, t, pos, scale as f32),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Against libtorch's attention with the step's mask, over rows at mixed positions,
    /// in f32 and bf16.
    #[test]
    fn equals_libtorch_attention_within_round_off() {
        tch::manual_seed(3);
        let (rows, slots, kv, group, d, cap) = (6i64, 8i64, 3i64, 3i64, 64i64, 20i64);
        let pos: Vec<i64> = vec![0, 5, 19, 7, 12, 3];
        for kind in [Kind::Float, Kind::BFloat16] {
            let k = Tensor::randn([slots, kv, cap, d], (Kind::Float, Device::Cpu)).to_kind(kind);
            let v = Tensor::randn([slots, kv, cap, d], (Kind::Float, Device::Cpu)).to_kind(kind);
            let q = Tensor::randn([rows, kv, group, d], (Kind::Float, Device::Cpu)).to_kind(kind);
            let scale = 1.0 / (d as f64).sqrt();
            let ours = attend(&q, &k, &v, &pos, scale).unwrap();
            // The reference in f64 from the same (rounded) inputs.
            let keys = 20;
            let p = Tensor::from_slice(&pos);
            let unseen = Tensor::arange(keys, (Kind::Int64, Device::Cpu))
                .unsqueeze(0)
                .gt_tensor(&p.unsqueeze(1))
                .view([rows, 1, 1, keys]);
            let f = |t: &Tensor| t.to_kind(Kind::Double);
            let kr = f(&k.narrow(0, 0, rows));
            let vr = f(&v.narrow(0, 0, rows));
            let s = f(&q).matmul(&kr.transpose(-1, -2)) * scale;
            let s = s.masked_fill(&unseen, f64::NEG_INFINITY);
            let reference = s.softmax(-1, Kind::Double).matmul(&vr);
            let gap = (f(&ours) - &reference).abs().max().double_value(&[]);
            // f32: each score sums d = 64 products (error ≤ 64·2^-24 relative to Σ|q_i
            // k_i| ≈ 8·|s| for unit normals, so ≤ 3e-5 on a score of ~8), the softmax
            // passes it on and adds n·2^-24, the values' sum n·2^-24·Σ|v|: all below 1e-4
            // on outputs of size ~1. bf16: the output's rounding, 2^-9 relative on values
            // up to ~4, dominates: 1e-2.
            let tol = if kind == Kind::Float { 1e-4 } else { 1e-2 };
            assert!(gap < tol, "{kind:?}: {gap}");
        }
    }

    /// The widest vector unit's code gives the portable code's bits, in f32 and bf16, for
    /// every group size it specialises (1..=8) and one it does not (9); and cutting the
    /// rows between threads changes nothing.
    #[test]
    fn every_vector_width_and_thread_count_gives_the_same_bits() {
        tch::manual_seed(5);
        let (rows, kv, d, cap) = (5usize, 2usize, 64usize, 12usize);
        let pos: Vec<i64> = vec![0, 11, 4, 7, 2];
        for group in [1usize, 3, 8, 9] {
            let dims = Dims {
                rows,
                kv,
                group,
                d,
                capacity: cap,
            };
            let randn = |n: usize| {
                Vec::<f32>::try_from(Tensor::randn([n as i64], (Kind::Float, Device::Cpu))).unwrap()
            };
            let n = rows * kv * group * d;
            let (q, k, v) = (
                randn(n),
                randn(rows * kv * cap * d),
                randn(rows * kv * cap * d),
            );
            // f32.
            let mut portable = vec![0f32; n];
            let x = Inputs {
                dims,
                q: &q,
                k: &k,
                v: &v,
                pos: &pos,
                scale: 0.125,
            };
            attend_rows::<f32, Portable>(x, 0, &mut portable);
            let mut best = vec![0f32; n];
            attend_rows_best(x, 0, &mut best);
            let bits = |x: &[f32]| x.iter().map(|y| y.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&portable), bits(&best), "f32, group {group}");
            let mut threads = vec![0f32; n];
            run(x, &mut threads);
            assert_eq!(
                bits(&portable),
                bits(&threads),
                "f32 on threads, group {group}"
            );
            // bf16.
            let b = |x: &[f32]| x.iter().map(|&y| Bf16::store(y)).collect::<Vec<_>>();
            let (qb, kb, vb) = (b(&q), b(&k), b(&v));
            let mut portable = vec![Bf16(0); n];
            let x = Inputs {
                dims,
                q: &qb,
                k: &kb,
                v: &vb,
                pos: &pos,
                scale: 0.125,
            };
            attend_rows::<Bf16, Portable>(x, 0, &mut portable);
            let mut best = vec![Bf16(0); n];
            attend_rows_best(x, 0, &mut best);
            let bits = |x: &[Bf16]| x.iter().map(|y| y.0).collect::<Vec<_>>();
            assert_eq!(bits(&portable), bits(&best), "bf16, group {group}");
        }
    }

    #[test]
    fn not_the_cpu_kinds_it_knows_falls_back() {
        let k = Tensor::zeros([2, 1, 4, 8], (Kind::Half, Device::Cpu));
        let q = Tensor::zeros([2, 1, 1, 8], (Kind::Half, Device::Cpu));
        assert!(attend(&q, &k, &k, &[0, 1], 1.0).is_none());
        // A position outside the cache.
        let k = Tensor::zeros([2, 1, 4, 8], (Kind::Float, Device::Cpu));
        let q = Tensor::zeros([2, 1, 1, 8], (Kind::Float, Device::Cpu));
        assert!(attend(&q, &k, &k, &[0, 4], 1.0).is_none());
    }

    #[test]
    fn bf16_rounds_to_nearest_even_as_libtorch() {
        // 1 + 2^-8 and 1 + 3·2^-8 lie halfway between two bf16 neighbours (bf16 keeps 7
        // fraction bits): ties, one rounding down to even and one up.
        for x in [
            1.0f32,
            1.0 + 1.0 / 256.0,
            1.0 + 3.0 / 256.0,
            -3.3,
            1e-40,
            65504.0,
            f32::INFINITY,
        ] {
            let ours = Bf16::store(x).0;
            let theirs = Tensor::from_slice(&[x]).to_kind(Kind::BFloat16);
            let theirs = theirs.view_dtype(Kind::Int16).int64_value(&[0]) as u16;
            assert_eq!(ours, theirs, "{x}");
        }
    }
}
