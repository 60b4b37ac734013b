//! One optimizer step (update.parquet).

use super::table::{batch, f, Table};
use crate::arrays::{self, Columns};
use crate::Result;
use arrow::datatypes::{DataType, Field};
use arrow::record_batch::RecordBatch;

/// One optimizer step (update.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct UpdateRow {
    pub step: u32,
    pub loss: f64,
    /// Fraction of tokens whose ratio was clipped.
    pub clip_frac: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Mean token entropy of the current policy on the mini-batch.
    pub entropy: f64,
    pub tokens: u64,
    pub lr: f64,
    /// Mean k3 KL to the base policy (0 when KL is off).
    pub kl: f64,
    /// Mean |log pi - log pi_old| over tokens.
    pub approx_kl_old: f64,
}

impl Table for UpdateRow {
    const NAME: &'static str = "update";

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("step", DataType::UInt32),
            f("loss", DataType::Float64),
            f("clip_frac", DataType::Float64),
            f("grad_norm", DataType::Float64),
            f("entropy", DataType::Float64),
            f("tokens", DataType::UInt64),
            f("lr", DataType::Float64),
            f("kl", DataType::Float64),
            f("approx_kl_old", DataType::Float64),
        ]
    }

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::u32s(rows.iter().map(|r| r.step)),
                arrays::f64s(rows.iter().map(|r| r.loss)),
                arrays::f64s(rows.iter().map(|r| r.clip_frac)),
                arrays::f64s(rows.iter().map(|r| r.grad_norm)),
                arrays::f64s(rows.iter().map(|r| r.entropy)),
                arrays::u64s(rows.iter().map(|r| r.tokens)),
                arrays::f64s(rows.iter().map(|r| r.lr)),
                arrays::f64s(rows.iter().map(|r| r.kl)),
                arrays::f64s(rows.iter().map(|r| r.approx_kl_old)),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let step = c.u32("step")?;
        let loss = c.f64("loss")?;
        let clip = c.f64("clip_frac")?;
        let gn = c.f64("grad_norm")?;
        let ent = c.f64("entropy")?;
        let tokens = c.u64("tokens")?;
        let lr = c.f64("lr")?;
        let kl = c.f64("kl")?;
        let akl = c.f64("approx_kl_old")?;
        Ok((0..step.len())
            .map(|i| UpdateRow {
                step: step[i],
                loss: loss[i],
                clip_frac: clip[i],
                grad_norm: gn[i],
                entropy: ent[i],
                tokens: tokens[i],
                lr: lr[i],
                kl: kl[i],
                approx_kl_old: akl[i],
            })
            .collect())
    }
}
