//! The update stage: the clipped policy-gradient loss family (GRPO, DAPO, Dr.GRPO, DelTA),
//! and AdamW with persistent state (which the warm start trains with too).

mod adamw;
mod loss;
mod optimizer_state;
pub mod shell;
mod train;

pub use adamw::{AdamW, AdamWSettings};
pub use loss::{token_loss, token_weights, Aggregation, LossSettings, TokenLoss};
pub use shell::{JoinSettings, Mismatch, OldLogprobs};
pub use train::{run, Settings, TrainRow};

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
    #[error("{0}")]
    Input(String),
    #[error("{}: {message}", path.display())]
    State {
        path: std::path::PathBuf,
        message: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
