//! The update stage: the clipped policy-gradient loss family (GRPO, DAPO, Dr.GRPO, DelTA)
//! and its training loop, stepping `deltarl_optim`'s AdamW.

mod error;
mod loss;
mod settings;
pub mod shell;
mod train;

pub use error::{Error, Result};
pub use loss::{
    token_loss, token_weights, Aggregation, FutureKl, LossSettings, RatioLevel, Surrogate,
    TokenLoss,
};
pub use settings::{JoinSettings, OldLogprobs, Settings};
pub use train::{run, step_members, StepRow, TrainRow};
