//! The trainer's old log-probs: a view of features.parquet with only the columns the
//! update needs, so reading it decodes the log-prob column and not the feature vectors.

use arrow::datatypes::{DataType, Field};
use arrow::record_batch::RecordBatch;

use crate::arrays::{self, list_of, Columns};
use crate::tables::table::{batch, f};
use crate::{Result, Table};

/// The log-probability of each response token under the pre-update policy, from the
/// teacher-forced features pass (the `logprob` column of features.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct LogprobRow {
    pub prompt_id: String,
    pub sample_idx: u32,
    pub logprob: Vec<f32>,
}

impl Table for LogprobRow {
    const NAME: &'static str = "features (log-probs)";

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("prompt_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            f("logprob", list_of(DataType::Float32)),
        ]
    }

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::strings(rows.iter().map(|r| r.prompt_id.as_str())),
                arrays::u32s(rows.iter().map(|r| r.sample_idx)),
                arrays::list_f32(rows.iter().map(|r| r.logprob.as_slice())),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let sample_idx = c.u32("sample_idx")?;
        Ok(c.str("prompt_id")?
            .into_iter()
            .zip(c.list_f32("logprob")?)
            .zip(sample_idx)
            .map(|((prompt_id, logprob), sample_idx)| LogprobRow {
                prompt_id,
                sample_idx,
                logprob,
            })
            .collect())
    }
}
