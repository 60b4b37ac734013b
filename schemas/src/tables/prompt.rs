//! One input problem (prompt files and the prompt draw).

use super::reward::RewardKind;
use super::table::{batch, f, nullable, Table};
use crate::arrays::{self, Columns};
use crate::Result;
use arrow::datatypes::{DataType, Field};
use arrow::record_batch::RecordBatch;

/// One input problem.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptRow {
    pub id: String,
    pub problem: String,
    pub answer: String,
    pub data_source: Option<String>,
    /// The system turn of a chat-format prompt (verl's and TRL's message lists), passed to
    /// the chat template before the question when one is applied.
    pub system: Option<String>,
    /// Which reward grades the responses; for code, `answer` holds the tests (JSON).
    pub reward_kind: RewardKind,
}

impl Table for PromptRow {
    const NAME: &'static str = "prompts";

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("id", DataType::Utf8),
            f("problem", DataType::Utf8),
            f("answer", DataType::Utf8),
            nullable("data_source", DataType::Utf8),
            nullable("system", DataType::Utf8),
            nullable("reward_kind", DataType::Utf8),
        ]
    }

    const ADDED: &'static [&'static str] = &["reward_kind"];

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::strings(rows.iter().map(|r| r.id.as_str())),
                arrays::strings(rows.iter().map(|r| r.problem.as_str())),
                arrays::strings(rows.iter().map(|r| r.answer.as_str())),
                arrays::opt_strings(rows.iter().map(|r| r.data_source.as_deref())),
                arrays::opt_strings(rows.iter().map(|r| r.system.as_deref())),
                arrays::strings(rows.iter().map(|r| r.reward_kind.as_str())),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let (id, problem, answer) = (c.str("id")?, c.str("problem")?, c.str("answer")?);
        let (source, system) = (c.opt_str("data_source")?, c.opt_str("system")?);
        let kind = c.opt_str("reward_kind")?;
        id.into_iter()
            .zip(problem)
            .zip(answer)
            .zip(source)
            .zip(system)
            .zip(kind)
            .enumerate()
            .map(
                |(i, (((((id, problem), answer), data_source), system), kind))| {
                    Ok(PromptRow {
                        id,
                        problem,
                        answer,
                        data_source,
                        system,
                        reward_kind: RewardKind::parse(kind.as_deref(), file, i)?,
                    })
                },
            )
            .collect()
    }
}
