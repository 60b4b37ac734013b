//! A generated math problem as a prompt row.

use deltarl_schemas::PromptRow;

/// A generated math problem as a prompt row of the built-in dataset `source`.
pub fn math_row(id: String, question: String, answer: u32, source: &str) -> PromptRow {
    PromptRow {
        id,
        problem: question,
        answer: answer.to_string(),
        data_source: Some(source.into()),
        system: None,
        reward_kind: Default::default(),
    }
}
