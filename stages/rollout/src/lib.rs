//! The rollout stage: sample G responses per prompt with the policy of the previous
//! iteration (`deltarl_sample`, the sampler the evaluation shares) and record what the
//! update needs (token ids, old log-probs, finish reason) in rollouts.parquet.

mod options;
mod settings;
mod shell;

pub use deltarl_sample::{run, run_with, Engine, Error, Plan, Result};
pub use options::{DataOptions, RolloutOptions, VllmOptions};
pub use settings::Settings;
pub use shell::write;
