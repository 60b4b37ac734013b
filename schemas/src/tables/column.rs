//! How a row field's Rust type is stored: its Arrow type, whether it holds nulls, the
//! column built from the rows' values and the values read back. The [`table!`] macro
//! declares a table's columns once, as its row struct's fields, and takes each column's
//! schema, writer and reader from here.
//!
//! [`table!`]: crate::tables::table::table

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;

use crate::arrays::{self, list_of, Columns};
use crate::{Error, Result};

/// A Rust type stored as one Arrow column.
pub(crate) trait Column: Sized {
    /// Whether a row may hold null (the type is an `Option`).
    const NULLABLE: bool;

    /// The column's Arrow type.
    fn data_type() -> DataType;

    /// The column holding these values, one a row.
    fn build<'a, I>(values: I) -> ArrayRef
    where
        I: Iterator<Item = &'a Self> + Clone,
        Self: 'a;

    /// The column's values, one a row; an error names the file and the column.
    fn read(c: &Columns, name: &str) -> Result<Vec<Self>>;
}

/// Implements [`Column`] for a plain type and its list, each by an Arrow type, a builder
/// and a reader of `arrays`.
macro_rules! plain {
    ($($ty:ty: $dt:expr, $nullable:literal, |$v:ident| $build:expr, $read:ident;)+) => {$(
        impl Column for $ty {
            const NULLABLE: bool = $nullable;

            fn data_type() -> DataType {
                $dt
            }

            fn build<'a, I>($v: I) -> ArrayRef
            where
                I: Iterator<Item = &'a Self> + Clone,
            {
                $build
            }

            fn read(c: &Columns, name: &str) -> Result<Vec<Self>> {
                c.$read(name)
            }
        }
    )+};
}

plain! {
    String: DataType::Utf8, false, |v| arrays::strings(v.map(String::as_str)), str;
    Option<String>: DataType::Utf8, true,
        |v| arrays::opt_strings(v.map(Option::as_deref)), opt_str;
    bool: DataType::Boolean, false, |v| arrays::bools(v.copied()), bool;
    u32: DataType::UInt32, false, |v| arrays::u32s(v.copied()), u32;
    Option<u32>: DataType::UInt32, true, |v| arrays::opt_u32s(v.copied()), opt_u32;
    u64: DataType::UInt64, false, |v| arrays::u64s(v.copied()), u64;
    f32: DataType::Float32, false, |v| arrays::f32s(v.copied()), f32;
    f64: DataType::Float64, false, |v| arrays::f64s(v.copied()), f64;
    Vec<u32>: list_of(DataType::UInt32), false,
        |v| arrays::list_u32(v.map(Vec::as_slice)), list_u32;
    Vec<f32>: list_of(DataType::Float32), false,
        |v| arrays::list_f32(v.map(Vec::as_slice)), list_f32;
    Vec<f64>: list_of(DataType::Float64), false,
        |v| arrays::list_f64(v.map(Vec::as_slice)), list_f64;
    Option<Vec<f32>>: list_of(DataType::Float32), true,
        |v| arrays::opt_list_f32(v.map(Option::as_deref)), opt_list_f32;
}

/// An enum stored as its name (a Utf8 column): every variant, its name, and what a null
/// means.
pub(crate) trait Named: Copy + 'static {
    /// Every variant, in the order errors list their names.
    const ALL: &'static [Self];

    /// What a null reads as in a required column of this type (`None`: a null is an error).
    /// A column added after files were written is null in those files.
    const NULL: Option<Self> = None;

    fn as_str(self) -> &'static str;
}

/// Each row's variant, `None` where the column is null; an unknown name is an error that
/// names the file, the column, the row and the names expected.
fn read_named<T: Named>(c: &Columns, name: &str) -> Result<Vec<Option<T>>> {
    c.opt_str(name)?
        .into_iter()
        .enumerate()
        .map(|(row, value)| {
            value
                .map(|value| {
                    T::ALL
                        .iter()
                        .copied()
                        .find(|v| v.as_str() == value)
                        .ok_or_else(|| Error::Value {
                            file: c.file.to_string(),
                            column: name.to_string(),
                            row,
                            message: format!(
                                "unknown value {value:?} (expected {})",
                                T::ALL
                                    .iter()
                                    .map(|v| v.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        })
                })
                .transpose()
        })
        .collect()
}

/// Implements [`Column`] for a [`Named`] enum and for its `Option`.
macro_rules! named_column {
    ($ty:ty) => {
        impl $crate::tables::column::Column for $ty {
            const NULLABLE: bool = false;

            fn data_type() -> arrow::datatypes::DataType {
                arrow::datatypes::DataType::Utf8
            }

            fn build<'a, I>(values: I) -> arrow::array::ArrayRef
            where
                I: Iterator<Item = &'a Self> + Clone,
            {
                $crate::tables::column::build_required(values.copied())
            }

            fn read(c: &$crate::arrays::Columns, name: &str) -> $crate::Result<Vec<Self>> {
                $crate::tables::column::read_required(c, name)
            }
        }

        impl $crate::tables::column::Column for Option<$ty> {
            const NULLABLE: bool = true;

            fn data_type() -> arrow::datatypes::DataType {
                arrow::datatypes::DataType::Utf8
            }

            fn build<'a, I>(values: I) -> arrow::array::ArrayRef
            where
                I: Iterator<Item = &'a Self> + Clone,
            {
                $crate::tables::column::build_named(values.copied())
            }

            fn read(c: &$crate::arrays::Columns, name: &str) -> $crate::Result<Vec<Self>> {
                $crate::tables::column::read_optional(c, name)
            }
        }
    };
}
pub(crate) use named_column;

/// The Utf8 column of these variants' names.
pub(crate) fn build_required<T: Named>(values: impl Iterator<Item = T>) -> ArrayRef {
    arrays::strings(values.map(T::as_str))
}

/// The Utf8 column of these variants' names (null for `None`).
pub(crate) fn build_named<T: Named>(values: impl Iterator<Item = Option<T>>) -> ArrayRef {
    arrays::opt_strings(values.map(|v| v.map(T::as_str)))
}

/// A required enum column: a null reads as [`Named::NULL`], or is an error naming the row.
pub(crate) fn read_required<T: Named>(c: &Columns, name: &str) -> Result<Vec<T>> {
    read_named::<T>(c, name)?
        .into_iter()
        .enumerate()
        .map(|(row, v)| {
            v.or(T::NULL).ok_or_else(|| Error::Null {
                file: c.file.to_string(),
                column: name.to_string(),
                row,
            })
        })
        .collect()
}

/// A nullable enum column.
pub(crate) fn read_optional<T: Named>(c: &Columns, name: &str) -> Result<Vec<Option<T>>> {
    read_named(c, name)
}
