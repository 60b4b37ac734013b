//! Joining the per-response tables of an iteration on their key (`prompt_id`, `sample_idx`).

use std::collections::HashMap;

pub use crate::key::ResponseKey;

use crate::{
    CoeffRow, FeatureProbs, FeatureRow, FeatureScalars, FeatureVectors, LogprobRow, RolloutRow,
    ScoreRow,
};

/// A row of a per-response table.
pub trait Keyed {
    fn prompt_id(&self) -> &str;
    fn sample_idx(&self) -> u32;
    fn key(&self) -> (&str, u32) {
        (self.prompt_id(), self.sample_idx())
    }
    /// The key, for messages.
    fn response(&self) -> ResponseKey<'_> {
        ResponseKey {
            prompt_id: self.prompt_id(),
            sample_idx: self.sample_idx(),
        }
    }
}

macro_rules! keyed {
    ($($t:ty),*) => {$(
        impl Keyed for $t {
            fn prompt_id(&self) -> &str {
                &self.prompt_id
            }
            fn sample_idx(&self) -> u32 {
                self.sample_idx
            }
        }
    )*};
}
keyed!(
    RolloutRow,
    ScoreRow,
    FeatureRow,
    CoeffRow,
    LogprobRow,
    FeatureScalars,
    FeatureProbs,
    FeatureVectors
);

/// The rows of a table indexed by key, for lookups in the order of another table.
pub struct Index<'a, T>(HashMap<(&'a str, u32), &'a T>);

impl<'a, T: Keyed> Index<'a, T> {
    pub fn new(rows: &'a [T]) -> Self {
        Index(rows.iter().map(|r| (r.key(), r)).collect())
    }

    /// The row with `row`'s key, or an error message naming the key and `table`.
    pub fn get(&self, row: &impl Keyed, table: &str) -> Result<&'a T, String> {
        self.0
            .get(&row.key())
            .copied()
            .ok_or_else(|| format!("{}: no row in {table}", row.response()))
    }
}

/// Renders a prompt template: `{question}` is replaced by the problem.
pub fn render_template(template: &str, question: &str) -> String {
    template.replace("{question}", question)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coeff(id: &str, k: u32) -> CoeffRow {
        CoeffRow {
            prompt_id: id.into(),
            sample_idx: k,
            coeff: vec![1.0],
            advantage: 0.5,
            shift: None,
        }
    }

    #[test]
    fn index_finds_rows_by_key_and_names_missing_ones() {
        let rows = vec![coeff("a", 0), coeff("a", 1), coeff("b", 0)];
        let idx = Index::new(&rows);
        assert_eq!(
            idx.get(&coeff("a", 1), "coeffs").map(|r| r.sample_idx),
            Ok(1)
        );
        let err = idx.get(&coeff("b", 3), "coeffs").err().unwrap_or_default();
        assert_eq!(err, "prompt_id \"b\", sample_idx 3: no row in coeffs");
        assert_eq!(render_template("Q: {question}\nA:", "1+1"), "Q: 1+1\nA:");
    }
}
