//! Views of features.parquet: tables of some of its columns, so reading one decodes those
//! and never the rest. The update reads [`LogprobRow`] (its old log-probs); the coefficient
//! stage holds [`FeatureScalars`] (the entropies) and streams [`FeatureVectors`] (the
//! vectors alone, a batch at a time).

use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;

use crate::arrays::Columns;
use crate::key::ResponseKey;
use crate::tables::keyed_vectors;
use crate::tables::table::{batch, f, table};
use crate::{Precision, Result, Table, VectorLayout};

/// A view of features.parquet with the key and one list column: reading it decodes that
/// column and never the vectors.
macro_rules! list_column_view {
    ($(#[$doc:meta])* $name:ident, $table:literal, $column:ident: $ty:ty) => {
        table! {
            $(#[$doc])*
            pub struct $name {
                pub prompt_id: String,
                pub sample_idx: u32,
                pub $column: $ty,
            }
            name = $table;
        }
    };
}

list_column_view!(
    /// The log-probability of each response token under the pre-update policy, from the
    /// teacher-forced features pass (the `logprob` column of features.parquet): the update's
    /// old log-probs.
    LogprobRow,
    "features (log-probs)",
    logprob: Vec<f32>
);

list_column_view!(
    /// A response's per-token entropies (the `entropy` column of features.parquet).
    FeatureScalars,
    "features (entropies)",
    entropy: Vec<f32>
);

list_column_view!(
    /// The probability of each response token (the `token_prob` column of
    /// features.parquet): `1 - p` is how much gradient the token's log-prob can carry.
    FeatureProbs,
    "features (token probabilities)",
    token_prob: Vec<f32>
);

list_column_view!(
    /// A response's `sum_t v_t` (the `vector_sum` column of features.parquet, `dim`
    /// values): what DelTA's first centroids need of its vectors.
    FeatureSums,
    "features (vector sums)",
    vector_sum: Vec<f64>
);

impl From<&crate::FeatureRow> for FeatureScalars {
    /// The row's entropies, as the view reads them from its file.
    fn from(r: &crate::FeatureRow) -> Self {
        FeatureScalars {
            prompt_id: r.prompt_id.clone(),
            sample_idx: r.sample_idx,
            entropy: r.entropy.clone(),
        }
    }
}

impl From<&crate::FeatureRow> for FeatureProbs {
    /// The row's token probabilities, as the view reads them from its file.
    fn from(r: &crate::FeatureRow) -> Self {
        FeatureProbs {
            prompt_id: r.prompt_id.clone(),
            sample_idx: r.sample_idx,
            token_prob: r.token_prob.clone(),
        }
    }
}

/// A response's token vectors (the `features` column of features.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureVectors {
    pub prompt_id: String,
    pub sample_idx: u32,
    pub dim: u32,
    /// The precision the vectors are stored at.
    pub precision: Precision,
    /// `tokens * dim` floats, token-major.
    pub features: Vec<f32>,
}

impl Table for FeatureVectors {
    const NAME: &'static str = "features (vectors)";

    fn fields(dim: i32) -> Vec<Field> {
        vec![
            f("prompt_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            VectorLayout {
                dim: usize::try_from(dim).unwrap_or(0),
                precision: Precision::F32,
            }
            .field("features"),
        ]
    }

    fn heap_bytes(&self) -> usize {
        4 * self.features.len()
    }

    fn dim(rows: &[Self]) -> Result<i32> {
        Ok(rows.first().map_or(0, |r| r.dim as i32))
    }

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        let layout = VectorLayout {
            dim: Self::dim(rows)? as usize,
            precision: rows.first().map_or(Precision::F32, |r| r.precision),
        };
        let mut fields = Self::fields(layout.dim as i32);
        fields[2] = layout.field("features");
        let rows = rows.iter().map(|r| {
            let key = ResponseKey {
                prompt_id: &r.prompt_id,
                sample_idx: r.sample_idx,
            };
            (key, r.features.as_slice())
        });
        batch(
            Self::NAME,
            Schema::new(fields),
            keyed_vectors(Self::NAME, layout, rows)?,
        )
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let sample_idx = c.u32("sample_idx")?;
        let (layout, features) = c.vectors("features", |_| None)?;
        Ok(c.str("prompt_id")?
            .into_iter()
            .zip(features)
            .zip(sample_idx)
            .map(|((prompt_id, features), sample_idx)| FeatureVectors {
                prompt_id,
                sample_idx,
                dim: layout.dim as u32,
                precision: layout.precision,
                features,
            })
            .collect())
    }
}
