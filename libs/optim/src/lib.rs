//! The optimizer the update and the warm start train with: AdamW with PyTorch's semantics
//! ([`AdamW`]), f32 master weights and gradient sums for bf16 parameters, sharded state
//! over processes (ZeRO-1 and ZeRO-2), and its state on disk beside the policy so the next iteration
//! continues it (`optimizer.safetensors`, `optimizer.json`).

mod adamw;
mod error;
mod state;
mod zero2;

pub use adamw::{AdamW, AdamWSettings, Sharding};
pub use error::{Error, Result};
