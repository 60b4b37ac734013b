//! The tables of one iteration: one row per response, keyed by (`prompt_id`, `sample_idx`),
//! except `update` (one row per optimizer step) and `eval` (one row per benchmark sample).
//!
//! One file a table; `table.rs` holds the trait, the `table!` macro that declares a table's
//! columns once, and the helpers they share; `column.rs` says how each field type is stored.

mod coeff;
pub(crate) mod column;
mod eval;
mod feature;
mod finish;
mod prompt;
mod reward;
mod rollout;
mod score;
pub(crate) mod table;
mod update;

pub use coeff::CoeffRow;
pub use eval::EvalRow;
pub(crate) use feature::keyed_vectors;
pub use feature::{FeatureRow, Persist, PERSIST_KEY, VECTOR_SUM};
pub use finish::FinishReason;
pub use prompt::PromptRow;
pub use reward::{CodeOutcome, RewardKind};
pub use rollout::RolloutRow;
pub use score::ScoreRow;
pub use table::Table;
pub use update::UpdateRow;
