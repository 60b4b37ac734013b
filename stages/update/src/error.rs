//! The update stage's errors.

/// Errors of the update stage.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    #[error(transparent)]
    Model(#[from] deltarl_model::Error),
    #[error(transparent)]
    Table(#[from] deltarl_schemas::Error),
    #[error(transparent)]
    Dist(#[from] deltarl_dist::Error),
    #[error(transparent)]
    Optim(#[from] deltarl_optim::Error),
    #[error("{0}")]
    Input(String),
    /// Every step's gradient norm was non-finite: the update learned nothing, something
    /// upstream is broken.
    #[error(
        "all {steps} optimizer steps had a non-finite gradient norm (loss {loss}); nothing \
         written. The config keys that scale the loss and its gradient: {keys}"
    )]
    NoFiniteStep {
        steps: usize,
        loss: f64,
        /// Each key that can make the loss non-finite, with its value.
        keys: String,
    },
    #[error("after the update, tensor {tensor} has non-finite values (nothing written)")]
    NonFiniteWeights { tensor: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
