//! The token coefficients of one response (coeffs.parquet).

use super::table::table;
use crate::Stage;

table! {
    /// The final, normalised token coefficients of one response (coeffs.parquet).
    pub struct CoeffRow {
        pub prompt_id: String,
        pub sample_idx: u32,
        /// One coefficient per response token (same length as `response_token_ids`).
        pub coeff: Vec<f32>,
        /// The sequence advantage the coefficients multiply.
        pub advantage: f32,
        /// A term added to each token's advantage after the coefficient multiplies it
        /// (KTAE's key-token score), one per response token; null for the estimators that
        /// only reweight. A token's advantage is `advantage * coeff + shift`.
        pub shift: Option<Vec<f32>>,
    }
    name = Stage::Coeffs.output();
    added = [shift];
}
