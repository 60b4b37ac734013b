//! The optimizer's errors.

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
    #[error("sharded optimizer state is saved by every process of its group, each its part")]
    WithoutGroup,
    /// A call that does not fit how the state is sharded.
    #[error("{0}")]
    Sharding(&'static str),
    /// The saved state does not fit the policy (or cannot be read).
    #[error("{}: {message}", path.display())]
    State {
        path: std::path::PathBuf,
        message: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
