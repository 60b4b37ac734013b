//! Many processes, one iteration: the launch environment `torchrun` (or `srun` around it)
//! gives each process, and a process group on libtorch's c10d with the collectives deltarl
//! needs (sum all-reduce and reduce, broadcast, all-gather of bytes, barrier) plus the
//! store's key/value pairs for failure reports.
//!
//! Tensors on the CPU go through gloo, CUDA tensors through NCCL (with the `nccl` feature).
//! Without `WORLD_SIZE` (or with `WORLD_SIZE=1`) there is no group and nothing changes.
//!
//! The same C++ shim also reaches two things of libtorch's that tch does not expose
//! ([`empty_device_cache`], [`free_grad`]).

mod device;
mod error;
mod ffi;
mod group;
mod launch;
pub mod testing;

pub use device::{empty_device_cache, free_grad, CacheRelease};
pub use error::{Error, Result};
pub use group::{backends, Group};
pub use launch::Launch;
