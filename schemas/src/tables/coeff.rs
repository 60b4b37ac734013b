//! The token coefficients of one response (coeffs.parquet).

use super::table::{batch, f, nullable, Table};
use crate::arrays::{self, list_of, Columns};
use crate::Result;
use arrow::datatypes::{DataType, Field};
use arrow::record_batch::RecordBatch;

/// The final, normalised token coefficients of one response (coeffs.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct CoeffRow {
    pub prompt_id: String,
    pub sample_idx: u32,
    /// One coefficient per response token (same length as `response_token_ids`).
    pub coeff: Vec<f32>,
    /// The sequence advantage the coefficients multiply.
    pub advantage: f32,
    /// A term added to each token's advantage after the coefficient multiplies it (KTAE's
    /// key-token score), one per response token; null for the estimators that only
    /// reweight. A token's advantage is `advantage * coeff + shift`.
    pub shift: Option<Vec<f32>>,
}

impl Table for CoeffRow {
    const NAME: &'static str = "coeffs";
    const ADDED: &'static [&'static str] = &["shift"];

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("prompt_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            f("coeff", list_of(DataType::Float32)),
            f("advantage", DataType::Float32),
            nullable("shift", list_of(DataType::Float32)),
        ]
    }

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::strings(rows.iter().map(|r| r.prompt_id.as_str())),
                arrays::u32s(rows.iter().map(|r| r.sample_idx)),
                arrays::list_f32(rows.iter().map(|r| r.coeff.as_slice())),
                arrays::f32s(rows.iter().map(|r| r.advantage)),
                arrays::opt_list_f32(rows.iter().map(|r| r.shift.as_deref())),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let prompt_id = c.str("prompt_id")?;
        let sample_idx = c.u32("sample_idx")?;
        let coeff = c.list_f32("coeff")?;
        let adv = c.f32("advantage")?;
        let shift = c.opt_list_f32("shift")?;
        Ok(prompt_id
            .into_iter()
            .zip(coeff)
            .zip(shift)
            .enumerate()
            .map(|(i, ((prompt_id, coeff), shift))| CoeffRow {
                prompt_id,
                sample_idx: sample_idx[i],
                coeff,
                advantage: adv[i],
                shift,
            })
            .collect())
    }
}
