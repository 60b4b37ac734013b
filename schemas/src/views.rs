//! Views of features.parquet for the coefficient stage, which holds the per-token scalars
//! and streams the vectors: [`FeatureScalars`] decodes the entropies and never the
//! vectors; [`FeatureVectors`] decodes the vectors alone, a batch at a time.

use arrow::datatypes::{DataType, Field};
use arrow::record_batch::RecordBatch;

use crate::arrays::{self, list_of, vectors_of, Columns};
use crate::tables::table::{batch, f};
use crate::{Result, Table};

/// A response's per-token entropies (the `entropy` column of features.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureScalars {
    pub prompt_id: String,
    pub sample_idx: u32,
    pub entropy: Vec<f32>,
}

impl Table for FeatureScalars {
    const NAME: &'static str = "features (entropies)";

    fn fields(_: i32) -> Vec<Field> {
        vec![
            f("prompt_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            f("entropy", list_of(DataType::Float32)),
        ]
    }

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        batch(
            Self::NAME,
            Self::schema(0),
            vec![
                arrays::strings(rows.iter().map(|r| r.prompt_id.as_str())),
                arrays::u32s(rows.iter().map(|r| r.sample_idx)),
                arrays::list_f32(rows.iter().map(|r| r.entropy.as_slice())),
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let sample_idx = c.u32("sample_idx")?;
        Ok(c.str("prompt_id")?
            .into_iter()
            .zip(c.list_f32("entropy")?)
            .zip(sample_idx)
            .map(|((prompt_id, entropy), sample_idx)| FeatureScalars {
                prompt_id,
                sample_idx,
                entropy,
            })
            .collect())
    }
}

/// A response's token vectors (the `features` column of features.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureVectors {
    pub prompt_id: String,
    pub sample_idx: u32,
    pub dim: u32,
    /// `tokens * dim` floats, token-major.
    pub features: Vec<f32>,
}

impl Table for FeatureVectors {
    const NAME: &'static str = "features (vectors)";

    fn fields(dim: i32) -> Vec<Field> {
        vec![
            f("prompt_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            f("features", vectors_of(dim)),
        ]
    }

    fn heap_bytes(&self) -> usize {
        4 * self.features.len()
    }

    fn dim(rows: &[Self]) -> Result<i32> {
        Ok(rows.first().map_or(0, |r| r.dim as i32))
    }

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        let dim = Self::dim(rows)?;
        batch(
            Self::NAME,
            Self::schema(dim),
            vec![
                arrays::strings(rows.iter().map(|r| r.prompt_id.as_str())),
                arrays::u32s(rows.iter().map(|r| r.sample_idx)),
                arrays::list_vectors(dim as usize, rows.iter().map(|r| r.features.as_slice()))?,
            ],
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let sample_idx = c.u32("sample_idx")?;
        let (dim, features) = c.list_vectors("features")?;
        Ok(c.str("prompt_id")?
            .into_iter()
            .zip(features)
            .zip(sample_idx)
            .map(|((prompt_id, features), sample_idx)| FeatureVectors {
                prompt_id,
                sample_idx,
                dim: dim as u32,
                features,
            })
            .collect())
    }
}
