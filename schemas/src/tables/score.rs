//! The verdict, reward and advantage of one response (scores.parquet).

use super::reward::{CodeOutcome, RewardKind};
use super::table::table;
use crate::Stage;

table! {
    /// The verdict, reward and advantage of one response (scores.parquet).
    pub struct ScoreRow {
        pub prompt_id: String,
        pub sample_idx: u32,
        pub gold: String,
        /// The answer extracted from the response (for code, the program run); null when
        /// none was found.
        pub extracted: Option<String>,
        pub correct: bool,
        /// Correctness reward plus the overlong penalty.
        pub reward: f32,
        /// The sequence advantage broadcast to every token of the response.
        pub advantage: f32,
        /// False when dynamic sampling dropped the response's group.
        pub kept: bool,
        pub response_len: u32,
        pub overlong_penalty: f32,
        /// The prompt's `data_source`, from the rollout.
        pub data_source: Option<String>,
        /// Which reward graded the response.
        pub reward_kind: RewardKind,
        /// Code: how the program did (null for math).
        pub outcome: Option<CodeOutcome>,
        /// Code: the test cases passed (before the first failure, unless every case is run).
        pub cases_passed: Option<u32>,
        /// Code: the test cases of the prompt.
        pub cases_total: Option<u32>,
        /// Code: what went wrong, briefly (the exception, the first differing line); null
        /// when it passed.
        pub detail: Option<String>,
    }
    name = Stage::Score.output();
    added = [data_source, reward_kind, outcome, cases_passed, cases_total, detail];
}
