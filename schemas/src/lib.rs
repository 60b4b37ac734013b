//! Arrow schemas, typed rows and Parquet I/O for every table a deltarl iteration writes.
//!
//! Schemas are defined once, here. Every file carries its schema version, stage, config
//! hash and tool version in the Parquet key-value metadata; readers refuse files with an
//! unknown version or a missing column and name the file and column in the error.
//!
//! This crate never links libtorch, so it compiles and tests in seconds.

mod arrays;
mod atomic;
mod concat;
mod error;
mod io;
mod key;
mod keyed;
pub mod layout;
mod manifest;
pub mod number;
pub mod seed;
mod shard;
pub mod skip;
mod stream;
pub mod summary;
mod tables;
mod vector_file;
mod vectors;
mod views;

pub use atomic::{atomic_write, atomic_write_bytes, sha256_file, sha256_hex, temp_path};
pub use concat::{encode_piece, PieceWriter};
pub use error::{Error, Result};
pub use io::{
    read_meta, read_table, vector_layout, FileMeta, READ_BATCH_ROWS, ROW_GROUP_ROWS,
    SCHEMA_VERSION, TOOL_VERSION,
};
pub use keyed::{render_template, Index, Keyed, ResponseKey};
pub use layout::{PolicyUse, Stage};
pub use manifest::{Compute, Manifest};
pub use shard::Shard;
pub use stream::{read_path, write_path, write_table, TableReader, TableWriter, ROW_GROUP_BYTES};
pub use summary::{
    Acquired, BenchmarkSummary, CoeffsSummary, Engine, EvalSummary, FeaturesSummary, Mismatch,
    Quantiles, RolloutSummary, ScoreSummary, SketchAgreement, SourceAccuracy, StageSummary,
    TokenRef, UpdateSummary, WarmstartSummary,
};
pub use tables::{
    CodeOutcome, CoeffRow, EvalRow, FeatureRow, FinishReason, Persist, PromptRow, RewardKind,
    RolloutRow, ScoreRow, Table, UpdateRow, PERSIST_KEY, VECTOR_SUM,
};
pub use vector_file::{Batcher, VectorBatch, VectorFile};
pub use vectors::{sum_range_tokens, vector_sum, Precision, VectorLayout, SUM_RANGE_VALUES};
pub use views::{FeatureProbs, FeatureScalars, FeatureSums, FeatureVectors, LogprobRow};
