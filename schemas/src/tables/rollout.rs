//! One sampled response (rollouts.parquet).

use super::finish::FinishReason;
use super::reward::RewardKind;
use super::table::{batch, f, nullable, Table};
use crate::arrays::{self, list_of, Columns};
use crate::{Error, Result};
use arrow::datatypes::{DataType, Field};
use arrow::record_batch::RecordBatch;

/// One sampled response (rollouts.parquet).
#[derive(Clone, Debug, PartialEq)]
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
    /// Which reward grades the response (from the prompt); for code, `gold` holds the tests.
    pub reward_kind: RewardKind,
}

impl Table for RolloutRow {
    const NAME: &'static str = "rollouts";

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("prompt_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            f("prompt", DataType::Utf8),
            f("prompt_token_ids", list_of(DataType::UInt32)),
            f("response_token_ids", list_of(DataType::UInt32)),
            f("response_text", DataType::Utf8),
            f("old_logprobs", list_of(DataType::Float32)),
            f("finish_reason", DataType::Utf8),
            f("policy_iter", DataType::UInt32),
            f("gold", DataType::Utf8),
            nullable("data_source", DataType::Utf8),
            nullable("reward_kind", DataType::Utf8),
        ]
    }

    const ADDED: &'static [&'static str] = &["data_source", "reward_kind"];

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        for (i, r) in rows.iter().enumerate() {
            if r.old_logprobs.len() != r.response_token_ids.len() {
                return Err(Error::Build {
                    table: Self::NAME.into(),
                    message: format!(
                        "row {i}: {} old_logprobs for {} response tokens",
                        r.old_logprobs.len(),
                        r.response_token_ids.len()
                    ),
                });
            }
        }
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::strings(rows.iter().map(|r| r.prompt_id.as_str())),
                arrays::u32s(rows.iter().map(|r| r.sample_idx)),
                arrays::strings(rows.iter().map(|r| r.prompt.as_str())),
                arrays::list_u32(rows.iter().map(|r| r.prompt_token_ids.as_slice())),
                arrays::list_u32(rows.iter().map(|r| r.response_token_ids.as_slice())),
                arrays::strings(rows.iter().map(|r| r.response_text.as_str())),
                arrays::list_f32(rows.iter().map(|r| r.old_logprobs.as_slice())),
                arrays::strings(rows.iter().map(|r| r.finish_reason.as_str())),
                arrays::u32s(rows.iter().map(|r| r.policy_iter)),
                arrays::strings(rows.iter().map(|r| r.gold.as_str())),
                arrays::opt_strings(rows.iter().map(|r| r.data_source.as_deref())),
                arrays::strings(rows.iter().map(|r| r.reward_kind.as_str())),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let prompt_id = c.str("prompt_id")?;
        let sample_idx = c.u32("sample_idx")?;
        let mut prompt = c.str("prompt")?;
        let mut prompt_ids = c.list_u32("prompt_token_ids")?;
        let mut response_ids = c.list_u32("response_token_ids")?;
        let mut text = c.str("response_text")?;
        let mut logprobs = c.list_f32("old_logprobs")?;
        let finish = c.str("finish_reason")?;
        let policy_iter = c.u32("policy_iter")?;
        let mut gold = c.str("gold")?;
        let mut source = c.opt_str("data_source")?;
        let kind = c.opt_str("reward_kind")?;
        let mut out = Vec::with_capacity(prompt_id.len());
        for (i, pid) in prompt_id.into_iter().enumerate() {
            if logprobs[i].len() != response_ids[i].len() {
                return Err(Error::Value {
                    file: file.into(),
                    column: "old_logprobs".into(),
                    row: i,
                    message: format!(
                        "{} values for {} response tokens",
                        logprobs[i].len(),
                        response_ids[i].len()
                    ),
                });
            }
            out.push(RolloutRow {
                prompt_id: pid,
                sample_idx: sample_idx[i],
                prompt: std::mem::take(&mut prompt[i]),
                prompt_token_ids: std::mem::take(&mut prompt_ids[i]),
                response_token_ids: std::mem::take(&mut response_ids[i]),
                response_text: std::mem::take(&mut text[i]),
                old_logprobs: std::mem::take(&mut logprobs[i]),
                finish_reason: FinishReason::parse(&finish[i], file, i)?,
                policy_iter: policy_iter[i],
                gold: std::mem::take(&mut gold[i]),
                data_source: source[i].take(),
                reward_kind: RewardKind::parse(kind[i].as_deref(), file, i)?,
            });
        }
        Ok(out)
    }
}
