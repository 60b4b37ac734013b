//! The trait every table implements, the macro that declares a table's columns once, and
//! the schema helpers the tables share.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;

use crate::{Error, Result};

/// A table with a fixed Arrow schema and a typed row.
pub trait Table: Sized + Send + Sync + Clone {
    /// The table's name in errors: a stage's table is its stage's output file
    /// ([`crate::Stage::output`]).
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

/// Declares a table once: its row struct, whose fields are its columns in file order, and
/// from them its schema, its writer and its reader. Each field's type gives its column
/// ([`Column`]: the Arrow type, nullability, builder and reader), so a column's name, type
/// and value are one field and two columns cannot be swapped between writer and reader.
///
/// ```text
/// table! {
///     /// One thing (things.parquet).
///     pub struct ThingRow {
///         pub id: String,
///         /// Added after the first files: older files read it as null.
///         pub note: Option<String>,
///     }
///     name = "things";
///     added = [note];           // optional: columns older files lack (read as null)
///     check = ThingRow::check;  // optional: fn(&Self) -> Option<(column, message)>
/// }
/// ```
///
/// A column in `added` is nullable in the schema whatever its type, so files written before
/// it existed still read. `check` runs on every row written (an error names the table and
/// the row) and read (an error names the file, the column and the row).
///
/// [`Column`]: crate::tables::column::Column
macro_rules! table {
    (
        $(#[$doc:meta])*
        pub struct $row:ident {
            $( $(#[$fdoc:meta])* pub $field:ident : $ty:ty ),+ $(,)?
        }
        name = $name:expr;
        $(added = [$($added:ident),* $(,)?];)?
        $(check = $check:path;)?
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $row {
            $( $(#[$fdoc])* pub $field: $ty, )+
        }

        impl $crate::tables::table::Table for $row {
            const NAME: &'static str = $name;

            const ADDED: &'static [&'static str] = &[$($(stringify!($added)),*)?];

            fn fields(_: i32) -> Vec<arrow::datatypes::Field> {
                // Every name in `added` is a field (this does not compile otherwise).
                $(let _ = |r: &$row| { $(let _ = &r.$added;)* };)?
                vec![$(
                    arrow::datatypes::Field::new(
                        stringify!($field),
                        <$ty as $crate::tables::column::Column>::data_type(),
                        <$ty as $crate::tables::column::Column>::NULLABLE
                            || Self::ADDED.contains(&stringify!($field)),
                    ),
                )+]
            }

            fn to_batch(rows: &[Self]) -> $crate::Result<arrow::record_batch::RecordBatch> {
                $(for (i, r) in rows.iter().enumerate() {
                    if let Some((column, message)) = $check(r) {
                        return Err($crate::Error::Build {
                            table: Self::NAME.into(),
                            message: format!("row {i}, column `{column}`: {message}"),
                        });
                    }
                })?
                $crate::tables::table::batch(
                    Self::NAME,
                    Self::schema(0),
                    vec![$(
                        <$ty as $crate::tables::column::Column>::build(
                            rows.iter().map(|r| &r.$field),
                        ),
                    )+],
                )
            }

            fn from_batch(
                batch: &arrow::record_batch::RecordBatch,
                file: &str,
            ) -> $crate::Result<Vec<Self>> {
                let c = $crate::arrays::Columns { batch, file };
                $(let mut $field =
                    <$ty as $crate::tables::column::Column>::read(&c, stringify!($field))?
                        .into_iter();)+
                let mut rows = Vec::with_capacity(batch.num_rows());
                for row in 0..batch.num_rows() {
                    let r = $row {$(
                        // Every column of a record batch has its rows.
                        $field: $field.next().ok_or_else(|| $crate::Error::Value {
                            file: file.into(),
                            column: stringify!($field).into(),
                            row,
                            message: "the column is shorter than the batch".into(),
                        })?,
                    )+};
                    $(if let Some((column, message)) = $check(&r) {
                        return Err($crate::Error::Value {
                            file: file.into(),
                            column: column.into(),
                            row,
                            message,
                        });
                    })?
                    rows.push(r);
                }
                Ok(rows)
            }
        }
    };
}
pub(crate) use table;

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
