//! The trait every table implements, and the schema helpers the tables share.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;

use crate::{Error, Result};

/// A table with a fixed Arrow schema and a typed row.
pub trait Table: Sized + Send + Sync + Clone {
    /// The table's name, also the file stem (`rollouts` -> `rollouts.parquet`).
    const NAME: &'static str;

    /// The columns this table writes and every reader requires. `dim` is the vector
    /// dimension of `fixed_size_list` columns; readers accept any dimension.
    fn fields(dim: i32) -> Vec<Field>;

    /// Nullable columns added after files of this table were first written: a deltarl file
    /// without one reads as nulls there (every other column stays required).
    const ADDED: &'static [&'static str] = &[];

    /// The vector dimension of these rows (0 for tables without vectors).
    fn dim(_rows: &[Self]) -> Result<i32> {
        Ok(0)
    }

    /// Bytes of row data, roughly (what bounds a row group of [`crate::TableWriter`]); 0
    /// for tables whose rows are small.
    fn heap_bytes(&self) -> usize {
        0
    }

    fn schema(dim: i32) -> Schema {
        Schema::new(Self::fields(dim))
    }

    fn to_batch(rows: &[Self]) -> Result<RecordBatch>;

    fn from_batch(batch: &RecordBatch, file: &str) -> Result<Vec<Self>>;
}

pub(crate) fn batch(
    name: &str,
    schema: Schema,
    cols: Vec<arrow::array::ArrayRef>,
) -> Result<RecordBatch> {
    RecordBatch::try_new(Arc::new(schema), cols).map_err(|e| Error::Build {
        table: name.to_string(),
        message: e.to_string(),
    })
}

pub(crate) fn f(name: &str, dt: DataType) -> Field {
    Field::new(name, dt, false)
}

pub(crate) fn nullable(name: &str, dt: DataType) -> Field {
    Field::new(name, dt, true)
}
