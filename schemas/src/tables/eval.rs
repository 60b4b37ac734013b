//! One sampled answer to one benchmark problem (eval.parquet).

use super::finish::FinishReason;
use super::reward::CodeOutcome;
use super::table::table;
use crate::Stage;

table! {
    /// One sampled answer to one benchmark problem (eval.parquet).
    pub struct EvalRow {
        pub benchmark: String,
        pub problem_id: String,
        pub sample_idx: u32,
        pub correct: bool,
        pub response_len: u32,
        pub extracted: Option<String>,
        pub finish_reason: FinishReason,
        /// The problem's `data_source`, for per-source breakdowns of a benchmark.
        pub data_source: Option<String>,
        /// Code problems: how the program did (null for math).
        pub outcome: Option<CodeOutcome>,
    }
    name = Stage::Eval.output();
    added = [data_source, outcome];
}
