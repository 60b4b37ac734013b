//! A decoding session's weights packed once for the CPU's matrix product.
//!
//! libtorch's `linear` on the CPU calls MKL's `sgemm`, which copies (packs) the weight
//! into its kernel's blocked layout on every call, so each decoding step copies every
//! weight once more. MKL's packed interface (`sgemm_pack` once a session, `sgemm_compute`
//! each step) makes that copy once. The libtorch wheel exports it (Fortran names); it is
//! looked up when first wanted, so a libtorch without MKL (or a GPU, or a bf16 model)
//! decodes through `linear` as before. Only matrices of at least [`MIN_VALUES`] values
//! are packed: below that the copy is small and libtorch's own small-matrix kernels are
//! as fast or faster.
//!
//! The packed kernel is not the unpacked one: the two products differ by float round-off
//! (on SmolLM2's shapes, measured: equal at 512 rows, up to ~1e-4 on logits of size ~10
//! at a few rows), so a packed session samples what an unpacked one samples except where a
//! uniform falls within that round-off of a boundary. Which matrices are packed is a rule
//! of the model alone (their device, precision and size), never of timing, so reruns stay
//! byte-identical; a model with no matrix that large (the tiny configurations) decodes
//! exactly as before.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use tch::{nn, Device, Kind, Tensor};

// MKL's Fortran interface: every argument by reference, column-major matrices.
type GetSize =
    unsafe extern "C" fn(*const c_char, *const c_int, *const c_int, *const c_int) -> usize;
type Pack = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const c_int,
    *const c_int,
    *const c_int,
    *const f32,
    *const f32,
    *const c_int,
    *mut f32,
);
type Compute = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const c_int,
    *const c_int,
    *const c_int,
    *const f32,
    *const c_int,
    *const f32,
    *const c_int,
    *const f32,
    *mut f32,
    *const c_int,
);

/// MKL's packed GEMM, found in the process's libraries.
#[derive(Clone, Copy, Debug)]
struct Mkl {
    get_size: GetSize,
    pack: Pack,
    compute: Compute,
}

fn mkl() -> Option<Mkl> {
    static MKL: OnceLock<Option<Mkl>> = OnceLock::new();
    *MKL.get_or_init(|| {
        let find = crate::dl::symbol;
        let (g, p, c) = (
            find(c"SGEMM_PACK_GET_SIZE")?,
            find(c"SGEMM_PACK")?,
            find(c"SGEMM_COMPUTE")?,
        );
        // SAFETY: these are MKL's exported Fortran entry points, whose signatures the
        // three types above spell out (MKL's LP64 interface: 32-bit integers).
        unsafe {
            Some(Mkl {
                get_size: std::mem::transmute::<*mut c_void, GetSize>(g),
                pack: std::mem::transmute::<*mut c_void, Pack>(p),
                compute: std::mem::transmute::<*mut c_void, Compute>(c),
            })
        }
    })
}

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns packing off (or on again) for sessions started after the call: `deltarl bench
/// rollout --unpacked` times the unpacked engine beside the packed one, and tests
/// compare the two.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::SeqCst);
}

/// Whether this process can pack (MKL found and packing not turned off).
pub fn available() -> bool {
    ENABLED.load(Ordering::SeqCst) && mkl().is_some()
}

/// One weight W [out, in] (and its bias [out]) packed for y = x W^T + b.
#[derive(Debug)]
pub struct PackedMatrix {
    /// MKL's packed copy of W (bytes, kept as f32 words in a tensor: 64-byte aligned).
    buf: Tensor,
    out: i64,
    inner: i64,
    bias: Option<Tensor>,
}

/// The row count the packing is sized for; MKL's packed A serves any column count (our
/// rows) in `sgemm_compute`.
const PACK_ROWS: c_int = 512;

/// The smallest weight packed, in values. Below it, per-call packing is a small copy and
/// libtorch's unpacked kernels are as fast or faster (measured here with `deltarl bench
/// rollout --unpacked`: a 128-wide model decoded 0.73x as fast with every matrix packed;
/// SmolLM2's 576 x 1,536 MLP matrices and its head gain, its 576 x 576 and 576 x 192
/// attention projections do not at 512 rows).
pub const MIN_VALUES: i64 = 1 << 19;

impl PackedMatrix {
    /// Packs a linear layer's weight, or None when it is not a CPU f32 matrix of at least
    /// [`MIN_VALUES`] values (and sizes that fit 32 bits), or MKL is absent.
    pub fn new(w: &Tensor, bias: Option<&Tensor>) -> Option<PackedMatrix> {
        let mkl = mkl()?;
        let size = w.size();
        if w.device() != Device::Cpu || w.kind() != Kind::Float || size.len() != 2 {
            return None;
        }
        let (out, inner) = (size[0], size[1]);
        if out.saturating_mul(inner) < MIN_VALUES {
            return None;
        }
        let n = c_int::try_from(out).ok()?;
        let k = c_int::try_from(inner).ok()?;
        if bias.is_some_and(|b| b.size() != [out] || b.kind() != Kind::Float) {
            return None;
        }
        let w = w.contiguous();
        // Column-major, y^T [out, rows] = W [out, in] . x^T [in, rows]: W row-major is
        // W^T column-major, so it is packed as A transposed (lda = in).
        // SAFETY: the size query reads its four arguments only.
        let bytes = unsafe { (mkl.get_size)(c"A".as_ptr(), &n, &PACK_ROWS, &k) };
        let buf = Tensor::empty([(bytes / 4 + 16) as i64], (Kind::Float, Device::Cpu));
        let one = 1.0f32;
        // SAFETY: W is a contiguous f32 [out, in] matrix (lda = in), and `buf` holds at
        // least the bytes MKL asked for; both live across the call.
        unsafe {
            (mkl.pack)(
                c"A".as_ptr(),
                c"T".as_ptr(),
                &n,
                &PACK_ROWS,
                &k,
                &one,
                w.data_ptr() as *const f32,
                &k,
                buf.data_ptr() as *mut f32,
            );
        }
        Some(PackedMatrix {
            buf,
            out,
            inner,
            bias: bias.map(|b| b.contiguous()),
        })
    }

    /// Packs an `nn::Linear`.
    pub fn linear(l: &nn::Linear) -> Option<PackedMatrix> {
        PackedMatrix::new(&l.ws, l.bs.as_ref())
    }

    /// `l` applied to x through `packed` when there is one, else through libtorch.
    pub fn apply(l: &nn::Linear, packed: Option<&PackedMatrix>, x: &Tensor) -> Tensor {
        match packed {
            Some(p) => p.forward(x),
            None => nn::Module::forward(l, x),
        }
    }

    /// x [..., in] f32 on the CPU -> x W^T + b [..., out].
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let mut shape = x.size();
        let last = shape.len() - 1;
        shape[last] = self.out;
        let y = Tensor::empty(shape.as_slice(), (Kind::Float, Device::Cpu));
        self.forward_into(x, &y);
        y
    }

    /// As [`PackedMatrix::forward`], written into `y` (contiguous f32, [..., out]).
    pub fn forward_into(&self, x: &Tensor, y: &Tensor) {
        let x = x.to_kind(Kind::Float).contiguous();
        let rows = x.numel() as i64 / self.inner.max(1);
        assert!(
            x.size().last() == Some(&self.inner)
                && y.kind() == Kind::Float
                && y.is_contiguous()
                && y.numel() as i64 == rows * self.out,
            "a packed product's operands do not match its weight"
        );
        let Some(mkl) = mkl() else {
            unreachable!("a PackedMatrix exists only where MKL was found")
        };
        if rows == 0 {
            return;
        }
        let (n, k) = (self.out as c_int, self.inner as c_int);
        let Ok(m) = c_int::try_from(rows) else {
            unreachable!("a decoding step's rows fit in 32 bits")
        };
        // As libtorch's addmm: C starts as the bias broadcast over the rows (beta = 1),
        // else beta = 0 (C is only written).
        let beta = match &self.bias {
            Some(b) => {
                let mut y = y.shallow_clone();
                y.copy_(&b.expand([rows, self.out], false).reshape(y.size()));
                1.0f32
            }
            None => 0.0,
        };
        // (No alpha: MKL applies it when packing.)
        // SAFETY: x is a contiguous f32 [rows, in] (ldb = in), y a contiguous f32
        // [rows, out] (ldc = out), `buf` the packed [out, in] weight; all live across the
        // call, and MKL writes only y.
        unsafe {
            (mkl.compute)(
                c"P".as_ptr(),
                c"N".as_ptr(),
                &n,
                &m,
                &k,
                self.buf.data_ptr() as *const f32,
                &k,
                x.data_ptr() as *const f32,
                &k,
                &beta,
                y.data_ptr() as *mut f32,
                &n,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// f32's unit round-off.
    const U: f64 = f32::EPSILON as f64 / 2.0;

    #[test]
    fn a_packed_product_is_linear_within_round_off() {
        assert!(mkl().is_some(), "MKL's packed sgemm was not found");
        tch::manual_seed(3);
        let (out, inner) = (1024i64, 512i64);
        let w = Tensor::randn([out, inner], (Kind::Float, Device::Cpu));
        let b = Tensor::randn([out], (Kind::Float, Device::Cpu));
        for bias in [None, Some(&b)] {
            let p = PackedMatrix::new(&w, bias).unwrap();
            for shape in [
                vec![1, inner],
                vec![7, inner],
                vec![3, 5, inner],
                vec![513, inner],
            ] {
                let x = Tensor::randn(shape.as_slice(), (Kind::Float, Device::Cpu));
                let got = p.forward(&x).to_kind(Kind::Double);
                let want = x.linear(&w, bias).to_kind(Kind::Double);
                assert_eq!(got.size(), want.size());
                // Each of the two is a sum of K = 512 products (and the bias) rounded in
                // some order: |computed - exact| <= gamma_{K+1} * (|x| |W|^T + |b|), with
                // gamma_n = n u / (1 - n u) (the standard bound for a dot product in any
                // summation order), so they differ by at most twice that.
                let n = (inner + 1) as f64;
                let gamma = n * U / (1.0 - n * U);
                let mut scale = x
                    .abs()
                    .to_kind(Kind::Double)
                    .matmul(&w.abs().to_kind(Kind::Double).tr());
                if let Some(b) = bias {
                    scale += b.abs().to_kind(Kind::Double);
                }
                let excess = ((&got - &want).abs() - scale * (2.0 * gamma))
                    .max()
                    .double_value(&[]);
                assert!(
                    excess <= 0.0,
                    "{shape:?}, bias {}: beyond the bound by {excess:e}",
                    bias.is_some()
                );
            }
        }
    }

    #[test]
    fn only_large_cpu_f32_matrices_pack() {
        let big = Tensor::zeros([1024, 512], (Kind::Float, Device::Cpu));
        assert!(PackedMatrix::new(&big, None).is_some());
        // One value short of the rule, another precision, a bias of the wrong length.
        let small = Tensor::zeros([1024, 511], (Kind::Float, Device::Cpu));
        assert!(PackedMatrix::new(&small, None).is_none());
        assert!(PackedMatrix::new(&big.to_kind(Kind::BFloat16), None).is_none());
        let bad_bias = Tensor::zeros([512], (Kind::Float, Device::Cpu));
        assert!(PackedMatrix::new(&big, Some(&bad_bias)).is_none());
    }
}
