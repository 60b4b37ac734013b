//! What the C++ shim offers besides collectives: libtorch calls tch does not expose.

use tch::Tensor;

use crate::error::{Error, Result};
use crate::ffi;

/// What [`empty_device_cache`] released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheRelease {
    /// Whether this libtorch has an accelerator (CUDA, …); without one nothing is cached.
    pub accelerator: bool,
    /// The current device's bytes reserved by libtorch's caching allocator, before and after.
    pub reserved_before: u64,
    pub reserved_after: u64,
}

/// Hands the memory libtorch's caching allocator holds for reuse back to the device, so
/// that another process (a vLLM server waking beside the trainer) can take it: the memory
/// of tensors a finished stage dropped stays reserved by this process until then.
/// Tensors still alive keep theirs. On a build without an accelerator it does nothing.
pub fn empty_device_cache() -> Result<CacheRelease> {
    let (accelerator, before, after) = ffi::empty_device_cache().map_err(Error::Device)?;
    Ok(CacheRelease {
        accelerator,
        reserved_before: u64::try_from(before).unwrap_or(0),
        reserved_after: u64::try_from(after).unwrap_or(0),
    })
}

/// Drops `t`'s gradient: `t.grad()` is undefined afterwards and its buffer is released
/// (tch's `zero_grad` only zeroes it in place). The next backward allocates a new one.
/// ZeRO-2 uses it so that a gradient handed to its owner stops taking memory here.
pub fn free_grad(t: &mut Tensor) -> Result<()> {
    ffi::free_grad(t).map_err(Error::Device)
}

#[cfg(test)]
mod tests {
    use tch::{Kind, Tensor};

    use super::*;

    /// The CPU wheel has no accelerator: the call runs through the shim and releases
    /// nothing, after tensors were made and dropped (which a CUDA build would have cached).
    #[test]
    fn emptying_the_device_cache_runs_without_an_accelerator() {
        drop(Tensor::ones([1024, 1024], (Kind::Float, tch::Device::Cpu)));
        let r = empty_device_cache().unwrap();
        if tch::Cuda::is_available() {
            assert!(r.accelerator, "{r:?}");
        } else {
            assert_eq!((r.reserved_before, r.reserved_after), (0, 0));
        }
        assert!(r.reserved_after <= r.reserved_before);
    }

    /// A freed gradient is undefined and the next backward starts a new one (not adding
    /// to the old), while `zero_grad` leaves a buffer in place.
    #[test]
    fn a_freed_gradient_is_gone_and_the_next_backward_starts_afresh() {
        let mut w = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
        (&w * 3.0).sum(Kind::Float).backward();
        assert_eq!(Vec::<f32>::try_from(&w.grad()).unwrap(), vec![3.0, 3.0]);
        w.zero_grad();
        assert!(w.grad().defined());
        free_grad(&mut w).unwrap();
        assert!(!w.grad().defined());
        (&w * 5.0).sum(Kind::Float).backward();
        assert_eq!(Vec::<f32>::try_from(&w.grad()).unwrap(), vec![5.0, 5.0]);
    }
}
