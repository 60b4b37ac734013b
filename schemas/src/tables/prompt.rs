//! One input problem (prompt files and the prompt draw).

use super::reward::RewardKind;
use super::table::table;

table! {
    /// One input problem.
    pub struct PromptRow {
        pub id: String,
        pub problem: String,
        pub answer: String,
        pub data_source: Option<String>,
        /// The system turn of a chat-format prompt (verl's and TRL's message lists), passed
        /// to the chat template before the question when one is applied.
        pub system: Option<String>,
        /// Which reward grades the responses; for code, `answer` holds the tests (JSON).
        pub reward_kind: RewardKind,
    }
    name = "prompts";
    added = [reward_kind];
}
