//! What features.parquet keeps of the vectors when not all of them ([`Stored`]), and the
//! seeded sketch it keeps under `projected`.

use deltarl_schemas::seed::{seed_for, Rng};
use deltarl_schemas::{FeatureRow, Persist, Stage};
use rayon::prelude::*;
use serde::Serialize;

use crate::Settings;

/// What features.parquet keeps of each token's vector: [`Persist`] with the sketch's
/// dimension.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stored {
    /// Every vector (the default).
    #[default]
    Full,
    /// A seeded `dim`-dimensional sketch of each ([`sketch`]).
    Projected { dim: usize },
    /// None.
    None,
}

impl Stored {
    /// Whether every vector is kept.
    pub fn is_full(&self) -> bool {
        *self == Stored::Full
    }

    /// The file's [`Persist`].
    pub fn persist(self) -> Persist {
        match self {
            Stored::Full => Persist::Full,
            Stored::Projected { .. } => Persist::Projected,
            Stored::None => Persist::None,
        }
    }

    /// The dimension of the stored vectors when the pass's are `full` wide.
    pub fn dim(self, full: usize) -> usize {
        match self {
            Stored::Full => full,
            Stored::Projected { dim } => dim,
            Stored::None => 0,
        }
    }

    /// The rows as stored: the pass's own, sketched ([`sketch`], seeded by `seed`), or with
    /// no vectors.
    pub fn apply(self, rows: Vec<FeatureRow>, seed: u64) -> Vec<FeatureRow> {
        match self {
            Stored::Full => rows,
            Stored::Projected { dim } => sketch(&rows, dim, seed),
            Stored::None => rows
                .into_iter()
                .map(|r| FeatureRow {
                    dim: 0,
                    features: Vec::new(),
                    ..r
                })
                .collect(),
        }
    }
}

impl Settings {
    /// The seed of iteration `iter`'s sketch: drawn apart from the projection's, which a
    /// run may use as well.
    pub fn sketch_seed(&self, iter: u32) -> u64 {
        seed_for(self.seed, iter, Stage::Features.name(), "sketch", 0)
    }
}

/// Each row's vectors times a seeded Gaussian `[dim, k]` with entries N(0, 1/k) (drawn row
/// by row, as the pass's projection is), so dot products and distances are kept in
/// expectation (Johnson-Lindenstrauss). Each value is summed in f64 in coordinate order,
/// then rounded once to the rows' precision: the result is the same on any thread count.
pub fn sketch(rows: &[FeatureRow], k: usize, seed: u64) -> Vec<FeatureRow> {
    let dim = rows.first().map_or(0, |r| r.dim as usize);
    let mut rng = Rng::new(seed);
    let scale = 1.0 / (k as f64).sqrt();
    let m: Vec<f64> = (0..dim * k).map(|_| rng.normal() * scale).collect();
    // Column j of the matrix, contiguous: the dot product of a token's vector with it.
    let columns: Vec<Vec<f64>> = (0..k)
        .map(|j| (0..dim).map(|i| m[i * k + j]).collect())
        .collect();
    rows.par_iter()
        .map(|r| {
            let features = r
                .features
                .chunks_exact(dim.max(1))
                .flat_map(|v| {
                    columns.iter().map(move |c| {
                        let dot: f64 = v.iter().zip(c).map(|(&x, &w)| f64::from(x) * w).sum();
                        r.precision.round(dot as f32)
                    })
                })
                .collect();
            FeatureRow {
                dim: k as u32,
                features,
                ..r.clone()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use deltarl_schemas::Precision;

    fn row(dim: u32, features: Vec<f32>, precision: Precision) -> FeatureRow {
        let n = features.len() / dim as usize;
        FeatureRow {
            prompt_id: "p".into(),
            sample_idx: 0,
            dim,
            precision,
            features,
            token_prob: vec![0.5; n],
            logprob: vec![-0.7; n],
            entropy: vec![1.0; n],
        }
    }

    #[test]
    fn a_sketch_is_the_seeded_matrix_product_and_keeps_the_scalars() {
        // Two tokens, unit vectors e0 and e1: their sketches are the matrix's rows 0 and 1.
        let r = row(3, vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0], Precision::F32);
        let out = sketch(std::slice::from_ref(&r), 2, 7);
        let mut rng = Rng::new(7);
        let m: Vec<f32> = (0..6)
            .map(|_| (rng.normal() / 2f64.sqrt()) as f32)
            .collect();
        assert_eq!(out[0].features, m[..4].to_vec());
        assert_eq!(out[0].dim, 2);
        assert_eq!(out[0].token_prob, r.token_prob);
        assert_eq!(out[0].logprob, r.logprob);
        // Another seed, another matrix; the same seed, the same bytes.
        assert_ne!(sketch(std::slice::from_ref(&r), 2, 8)[0].features, m[..4]);
        assert_eq!(sketch(std::slice::from_ref(&r), 2, 7), out);
        // bf16 rows stay bf16 values.
        let b = row(3, vec![1.0, 2.0, 0.5], Precision::Bf16);
        for x in &sketch(&[b], 4, 1)[0].features {
            assert_eq!(Precision::Bf16.round(*x), *x);
        }
    }

    #[test]
    fn stored_rows_keep_what_the_setting_says() {
        let r = row(2, vec![1.0, 2.0, 3.0, 4.0], Precision::F32);
        assert_eq!(Stored::Full.apply(vec![r.clone()], 1), vec![r.clone()]);
        let none = Stored::None.apply(vec![r.clone()], 1);
        assert_eq!((none[0].dim, none[0].features.len()), (0, 0));
        assert_eq!(none[0].entropy, r.entropy);
        let p = Stored::Projected { dim: 5 }.apply(vec![r], 1);
        assert_eq!(p[0].features.len(), 2 * 5);
        assert_eq!(Stored::Projected { dim: 5 }.dim(2), 5);
        assert_eq!(Stored::None.dim(2), 0);
    }
}
