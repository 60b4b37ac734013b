//! One optimizer step (update.parquet).

use super::table::table;
use crate::Stage;

table! {
    /// One optimizer step (update.parquet).
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
    name = Stage::Update.output();
}
