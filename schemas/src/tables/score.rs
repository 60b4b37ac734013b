//! The verdict, reward and advantage of one response (scores.parquet).

use super::reward::{CodeOutcome, RewardKind};
use super::table::{batch, f, nullable, Table};
use crate::arrays::{self, Columns};
use crate::Result;
use arrow::datatypes::{DataType, Field};
use arrow::record_batch::RecordBatch;

/// The verdict, reward and advantage of one response (scores.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct ScoreRow {
    pub prompt_id: String,
    pub sample_idx: u32,
    pub gold: String,
    /// The answer extracted from the response (for code, the program run); null when none
    /// was found.
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
    /// Code: what went wrong, briefly (the exception, the first differing line); null when
    /// it passed.
    pub detail: Option<String>,
}

impl Table for ScoreRow {
    const NAME: &'static str = "scores";

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("prompt_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            f("gold", DataType::Utf8),
            nullable("extracted", DataType::Utf8),
            f("correct", DataType::Boolean),
            f("reward", DataType::Float32),
            f("advantage", DataType::Float32),
            f("kept", DataType::Boolean),
            f("response_len", DataType::UInt32),
            f("overlong_penalty", DataType::Float32),
            nullable("data_source", DataType::Utf8),
            nullable("reward_kind", DataType::Utf8),
            nullable("outcome", DataType::Utf8),
            nullable("cases_passed", DataType::UInt32),
            nullable("cases_total", DataType::UInt32),
            nullable("detail", DataType::Utf8),
        ]
    }

    const ADDED: &'static [&'static str] = &[
        "data_source",
        "reward_kind",
        "outcome",
        "cases_passed",
        "cases_total",
        "detail",
    ];

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::strings(rows.iter().map(|r| r.prompt_id.as_str())),
                arrays::u32s(rows.iter().map(|r| r.sample_idx)),
                arrays::strings(rows.iter().map(|r| r.gold.as_str())),
                arrays::opt_strings(rows.iter().map(|r| r.extracted.as_deref())),
                arrays::bools(rows.iter().map(|r| r.correct)),
                arrays::f32s(rows.iter().map(|r| r.reward)),
                arrays::f32s(rows.iter().map(|r| r.advantage)),
                arrays::bools(rows.iter().map(|r| r.kept)),
                arrays::u32s(rows.iter().map(|r| r.response_len)),
                arrays::f32s(rows.iter().map(|r| r.overlong_penalty)),
                arrays::opt_strings(rows.iter().map(|r| r.data_source.as_deref())),
                arrays::strings(rows.iter().map(|r| r.reward_kind.as_str())),
                arrays::opt_strings(rows.iter().map(|r| r.outcome.map(CodeOutcome::as_str))),
                arrays::opt_u32s(rows.iter().map(|r| r.cases_passed)),
                arrays::opt_u32s(rows.iter().map(|r| r.cases_total)),
                arrays::opt_strings(rows.iter().map(|r| r.detail.as_deref())),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let prompt_id = c.str("prompt_id")?;
        let sample_idx = c.u32("sample_idx")?;
        let gold = c.str("gold")?;
        let extracted = c.opt_str("extracted")?;
        let correct = c.bool("correct")?;
        let reward = c.f32("reward")?;
        let advantage = c.f32("advantage")?;
        let kept = c.bool("kept")?;
        let response_len = c.u32("response_len")?;
        let penalty = c.f32("overlong_penalty")?;
        let source = c.opt_str("data_source")?;
        let kind = c.opt_str("reward_kind")?;
        let outcome = c.opt_str("outcome")?;
        let (passed, total) = (c.opt_u32("cases_passed")?, c.opt_u32("cases_total")?);
        let mut detail = c.opt_str("detail")?;
        prompt_id
            .into_iter()
            .zip(gold)
            .zip(extracted)
            .zip(source)
            .enumerate()
            .map(|(i, (((prompt_id, gold), extracted), data_source))| {
                Ok(ScoreRow {
                    prompt_id,
                    sample_idx: sample_idx[i],
                    gold,
                    extracted,
                    correct: correct[i],
                    reward: reward[i],
                    advantage: advantage[i],
                    kept: kept[i],
                    response_len: response_len[i],
                    overlong_penalty: penalty[i],
                    data_source,
                    reward_kind: RewardKind::parse(kind[i].as_deref(), file, i)?,
                    outcome: CodeOutcome::parse(outcome[i].as_deref(), file, i)?,
                    cases_passed: passed[i],
                    cases_total: total[i],
                    detail: detail[i].take(),
                })
            })
            .collect()
    }
}
