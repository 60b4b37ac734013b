//! Per-token gradient proxies of one response (features.parquet).

use super::table::{batch, f, Table};
use crate::arrays::{self, list_of, Columns};
use crate::key::ResponseKey;
use crate::{Error, Precision, Result, VectorLayout};
use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;

/// The column of features.parquet holding each response's `sum_t v_t` ([`vector_sum`], f64):
/// derived from the vectors when written, never held in a row.
///
/// [`vector_sum`]: crate::vector_sum
pub const VECTOR_SUM: &str = "vector_sum";

/// The metadata key of features.parquet saying what it keeps of the vectors ([`Persist`]);
/// absent when it keeps them all, as every file before the key did.
pub const PERSIST_KEY: &str = "persist";

/// What features.parquet keeps of each token's vector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Persist {
    /// Every vector at full width: any estimator can run from the file.
    #[default]
    Full,
    /// A seeded low-dimensional sketch of each vector, for inspection; the coefficients are
    /// estimated at full width in the features stage.
    Projected,
    /// No vectors (the per-token scalars only); the coefficients are estimated in the
    /// features stage.
    None,
}

impl Persist {
    /// Whether every vector is kept (the default, skipped where settings are hashed).
    pub fn is_full(&self) -> bool {
        *self == Persist::Full
    }

    /// The name in configurations and in the file's metadata.
    pub fn name(self) -> &'static str {
        match self {
            Persist::Full => "full",
            Persist::Projected => "projected",
            Persist::None => "none",
        }
    }

    /// The value a file's metadata states (None: not a name this build writes).
    pub fn parse(name: &str) -> Option<Persist> {
        [Persist::Full, Persist::Projected, Persist::None]
            .into_iter()
            .find(|p| p.name() == name)
    }
}

impl std::fmt::Display for Persist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Per-token gradient proxies of one response (features.parquet).
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureRow {
    pub prompt_id: String,
    pub sample_idx: u32,
    /// The vector dimension `k` (after any projection).
    pub dim: u32,
    /// The precision the vectors are stored at (bf16: every value is a bf16 value).
    pub precision: Precision,
    /// `tokens * dim` floats, token-major.
    pub features: Vec<f32>,
    /// Probability of each response token at the rollout temperature.
    pub token_prob: Vec<f32>,
    /// Log-probability of each response token at the rollout temperature.
    pub logprob: Vec<f32>,
    /// Entropy of the next-token distribution at each response position.
    pub entropy: Vec<f32>,
}

impl FeatureRow {
    pub fn tokens(&self) -> usize {
        self.token_prob.len()
    }

    pub fn vector(&self, t: usize) -> &[f32] {
        let d = self.dim as usize;
        &self.features[t * d..(t + 1) * d]
    }

    /// The row's key and per-token scalars without its vectors (0 dimensions), copied
    /// without touching the vectors: what a file that keeps no vectors stores.
    pub fn without_vectors(&self) -> FeatureRow {
        FeatureRow {
            prompt_id: self.prompt_id.clone(),
            sample_idx: self.sample_idx,
            dim: 0,
            precision: self.precision,
            features: Vec::new(),
            token_prob: self.token_prob.clone(),
            logprob: self.logprob.clone(),
            entropy: self.entropy.clone(),
        }
    }

    fn keyed(&self) -> (ResponseKey<'_>, &[f32]) {
        let key = ResponseKey {
            prompt_id: &self.prompt_id,
            sample_idx: self.sample_idx,
        };
        (key, &self.features)
    }
}

/// The key columns and the vector column (at `layout`) of rows given as each response's key
/// and vectors: the first three columns of features.parquet and of its vectors' view.
pub(crate) fn keyed_vectors<'a>(
    table: &str,
    layout: VectorLayout,
    rows: impl Iterator<Item = (ResponseKey<'a>, &'a [f32])> + Clone,
) -> Result<Vec<ArrayRef>> {
    Ok(vec![
        arrays::strings(rows.clone().map(|(key, _)| key.prompt_id)),
        arrays::u32s(rows.clone().map(|(key, _)| key.sample_idx)),
        layout.column(table, rows.map(|(key, v)| (v, key)))?,
    ])
}

impl Table for FeatureRow {
    const NAME: &'static str = "features";

    fn fields(dim: i32) -> Vec<Field> {
        vec![
            f("prompt_id", DataType::Utf8),
            f("sample_idx", DataType::UInt32),
            VectorLayout {
                dim: usize::try_from(dim).unwrap_or(0),
                precision: Precision::F32,
            }
            .field("features"),
            f("token_prob", list_of(DataType::Float32)),
            f("logprob", list_of(DataType::Float32)),
            f("entropy", list_of(DataType::Float32)),
            f(VECTOR_SUM, list_of(DataType::Float64)),
        ]
    }

    fn dim(rows: &[Self]) -> Result<i32> {
        let dim = rows.first().map_or(0, |r| r.dim);
        let precision = rows.first().map_or(Precision::F32, |r| r.precision);
        for (i, r) in rows.iter().enumerate() {
            let n = r.token_prob.len();
            if r.dim != dim
                || r.precision != precision
                || r.features.len() != n * dim as usize
                || r.logprob.len() != n
                || r.entropy.len() != n
            {
                return Err(Error::Build {
                    table: Self::NAME.into(),
                    message: format!(
                        "row {i}: dim {} (table dim {dim}), {} storage (table {precision}), {} floats, \
                         {} probs, {} logprobs, {} entropies",
                        r.dim,
                        r.precision,
                        r.features.len(),
                        n,
                        r.logprob.len(),
                        r.entropy.len()
                    ),
                });
            }
        }
        i32::try_from(dim).map_err(|_| Error::Build {
            table: Self::NAME.into(),
            message: format!("dimension {dim} too large"),
        })
    }

    fn heap_bytes(&self) -> usize {
        4 * (self.features.len() + 3 * self.token_prob.len())
            + 8 * self.dim as usize
            + self.prompt_id.len()
    }

    fn to_batch(rows: &[Self]) -> Result<RecordBatch> {
        let layout = VectorLayout {
            dim: Self::dim(rows)? as usize,
            precision: rows.first().map_or(Precision::F32, |r| r.precision),
        };
        let mut fields = Self::fields(layout.dim as i32);
        fields[2] = layout.field("features");
        let sums: Vec<Vec<f64>> = rows
            .iter()
            .map(|r| crate::vector_sum(layout.dim, &r.features))
            .collect();
        let mut columns = keyed_vectors(Self::NAME, layout, rows.iter().map(FeatureRow::keyed))?;
        columns.extend([
            arrays::list_f32(rows.iter().map(|r| r.token_prob.as_slice())),
            arrays::list_f32(rows.iter().map(|r| r.logprob.as_slice())),
            arrays::list_f32(rows.iter().map(|r| r.entropy.as_slice())),
            arrays::list_f64(sums.iter().map(Vec::as_slice)),
        ]);
        batch(Self::NAME, Schema::new(fields), columns)
    }

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>> {
        let c = Columns { batch, file };
        let prompt_id = c.str("prompt_id")?;
        let sample_idx = c.u32("sample_idx")?;
        let probs = c.list_f32("token_prob")?;
        let (layout, features) = c.vectors("features", |i| probs.get(i).map(Vec::len))?;
        let dim = layout.dim;
        let logprob = c.list_f32("logprob")?;
        let entropy = c.list_f32("entropy")?;
        let mut out = Vec::with_capacity(prompt_id.len());
        for (i, ((pid, feats), ((p, lp), e))) in prompt_id
            .into_iter()
            .zip(features)
            .zip(probs.into_iter().zip(logprob).zip(entropy))
            .enumerate()
        {
            if feats.len() != p.len() * dim || lp.len() != p.len() || e.len() != p.len() {
                return Err(Error::Value {
                    file: file.into(),
                    column: "features".into(),
                    row: i,
                    message: format!(
                        "{} vectors, {} probs, {} logprobs, {} entropies: lengths differ",
                        feats.len() / dim.max(1),
                        p.len(),
                        lp.len(),
                        e.len()
                    ),
                });
            }
            out.push(FeatureRow {
                prompt_id: pid,
                sample_idx: sample_idx[i],
                dim: dim as u32,
                precision: layout.precision,
                features: feats,
                token_prob: p,
                logprob: lp,
                entropy: e,
            });
        }
        Ok(out)
    }
}
