//! One sampled response (rollouts.parquet).

use super::finish::FinishReason;
use super::reward::RewardKind;
use super::table::table;
use crate::Stage;

table! {
    /// One sampled response (rollouts.parquet).
    pub struct RolloutRow {
        pub prompt_id: String,
        pub sample_idx: u32,
        pub prompt: String,
        pub prompt_token_ids: Vec<u32>,
        pub response_token_ids: Vec<u32>,
        pub response_text: String,
        /// Log-probability of each response token under the sampling policy at the
        /// sampling temperature.
        pub old_logprobs: Vec<f32>,
        pub finish_reason: FinishReason,
        /// The iteration whose policy sampled this response (0 = base).
        pub policy_iter: u32,
        /// The gold answer, carried so that `score` needs only this file.
        pub gold: String,
        /// The prompt's `data_source` (verl's column), carried for per-source breakdowns.
        pub data_source: Option<String>,
        /// Which reward grades the response (from the prompt); for code, `gold` holds the
        /// tests.
        pub reward_kind: RewardKind,
    }
    name = Stage::Rollout.output();
    added = [data_source, reward_kind];
    check = RolloutRow::check;
}

impl RolloutRow {
    /// One log-prob a response token.
    fn check(&self) -> Option<(&'static str, String)> {
        (self.old_logprobs.len() != self.response_token_ids.len()).then(|| {
            (
                "old_logprobs",
                format!(
                    "{} values for {} response tokens",
                    self.old_logprobs.len(),
                    self.response_token_ids.len()
                ),
            )
        })
    }
}
