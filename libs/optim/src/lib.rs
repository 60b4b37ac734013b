//! The optimizer the update and the warm start train with: AdamW with PyTorch's semantics
//! ([`AdamW`]), f32 master weights and gradient sums for bf16 parameters, sharded state
//! over processes (ZeRO-1), and its state on disk beside the policy so the next iteration
//! continues it (`optimizer.safetensors`, `optimizer.json`).

mod adamw;
mod state;

pub use adamw::{AdamW, AdamWSettings};

/// Errors of the optimizer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    #[error(transparent)]
    Model(#[from] deltarl_model::Error),
    #[error(transparent)]
    Dist(#[from] deltarl_dist::Error),
    #[error(transparent)]
    Table(#[from] deltarl_schemas::Error),
    /// Sharded state saved without its process group: each process holds only its part.
    #[error("sharded optimizer state is consolidated through its process group")]
    Unconsolidated,
    /// The saved state does not fit the policy (or cannot be read).
    #[error("{}: {message}", path.display())]
    State {
        path: std::path::PathBuf,
        message: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
