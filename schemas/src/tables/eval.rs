//! One sampled answer to one benchmark problem (eval.parquet).

use super::finish::FinishReason;
use super::reward::CodeOutcome;
use super::table::{batch, f, nullable, Table};
use crate::arrays::{self, Columns};
use crate::Result;
use arrow::datatypes::{DataType, Field};
use arrow::record_batch::RecordBatch;

/// One sampled answer to one benchmark problem (eval.parquet).
#[derive(Clone, Debug, PartialEq)]
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

impl Table for EvalRow {
    const NAME: &'static str = "eval";

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("benchmark", DataType::Utf8),
            f("problem_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            f("correct", DataType::Boolean),
            f("response_len", DataType::UInt32),
            nullable("extracted", DataType::Utf8),
            f("finish_reason", DataType::Utf8),
            nullable("data_source", DataType::Utf8),
            nullable("outcome", DataType::Utf8),
        ]
    }

    const ADDED: &'static [&'static str] = &["data_source", "outcome"];

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::strings(rows.iter().map(|r| r.benchmark.as_str())),
                arrays::strings(rows.iter().map(|r| r.problem_id.as_str())),
                arrays::u32s(rows.iter().map(|r| r.sample_idx)),
                arrays::bools(rows.iter().map(|r| r.correct)),
                arrays::u32s(rows.iter().map(|r| r.response_len)),
                arrays::opt_strings(rows.iter().map(|r| r.extracted.as_deref())),
                arrays::strings(rows.iter().map(|r| r.finish_reason.as_str())),
                arrays::opt_strings(rows.iter().map(|r| r.data_source.as_deref())),
                arrays::opt_strings(rows.iter().map(|r| r.outcome.map(CodeOutcome::as_str))),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let bench = c.str("benchmark")?;
        let mut source = c.opt_str("data_source")?;
        let pid = c.str("problem_id")?;
        let sample_idx = c.u32("sample_idx")?;
        let correct = c.bool("correct")?;
        let len = c.u32("response_len")?;
        let extracted = c.opt_str("extracted")?;
        let finish = c.str("finish_reason")?;
        let outcome = c.opt_str("outcome")?;
        let mut out = Vec::with_capacity(bench.len());
        for (i, ((benchmark, problem_id), extracted)) in
            bench.into_iter().zip(pid).zip(extracted).enumerate()
        {
            out.push(EvalRow {
                benchmark,
                problem_id,
                sample_idx: sample_idx[i],
                correct: correct[i],
                response_len: len[i],
                extracted,
                finish_reason: FinishReason::parse(&finish[i], file, i)?,
                data_source: source[i].take(),
                outcome: CodeOutcome::parse(outcome[i].as_deref(), file, i)?,
            });
        }
        Ok(out)
    }
}
