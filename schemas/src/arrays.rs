//! Column builders and typed column accessors shared by the table definitions.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Float32Array, Float64Array, ListArray, StringArray, UInt32Array,
    UInt64Array,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field};
use arrow::record_batch::RecordBatch;

use crate::vectors::VectorLayout;
use crate::{Error, Result};

pub(crate) fn item(dt: DataType) -> Arc<Field> {
    Arc::new(Field::new("item", dt, false))
}

pub(crate) fn list_of(dt: DataType) -> DataType {
    DataType::List(item(dt))
}

pub(crate) fn strings<'a>(v: impl Iterator<Item = &'a str>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(v))
}

pub(crate) fn opt_strings<'a>(v: impl Iterator<Item = Option<&'a str>>) -> ArrayRef {
    Arc::new(StringArray::from_iter(v))
}

pub(crate) fn u32s(v: impl Iterator<Item = u32>) -> ArrayRef {
    Arc::new(UInt32Array::from_iter_values(v))
}

pub(crate) fn opt_u32s(v: impl Iterator<Item = Option<u32>>) -> ArrayRef {
    Arc::new(UInt32Array::from_iter(v))
}

pub(crate) fn u64s(v: impl Iterator<Item = u64>) -> ArrayRef {
    Arc::new(UInt64Array::from_iter_values(v))
}

pub(crate) fn f32s(v: impl Iterator<Item = f32>) -> ArrayRef {
    Arc::new(Float32Array::from_iter_values(v))
}

pub(crate) fn f64s(v: impl Iterator<Item = f64>) -> ArrayRef {
    Arc::new(Float64Array::from_iter_values(v))
}

pub(crate) fn bools(v: impl Iterator<Item = bool>) -> ArrayRef {
    Arc::new(BooleanArray::from_iter(v.map(Some)))
}

/// A `list<uint32>` column built from one slice per row.
pub(crate) fn list_u32<'a>(rows: impl Iterator<Item = &'a [u32]> + Clone) -> ArrayRef {
    let offsets = OffsetBuffer::from_lengths(rows.clone().map(<[u32]>::len));
    let values = UInt32Array::from_iter_values(rows.flat_map(|r| r.iter().copied()));
    Arc::new(ListArray::new(
        item(DataType::UInt32),
        offsets,
        Arc::new(values),
        None,
    ))
}

/// A `list<float32>` column built from one slice per row.
pub(crate) fn list_f32<'a>(rows: impl Iterator<Item = &'a [f32]> + Clone) -> ArrayRef {
    let offsets = OffsetBuffer::from_lengths(rows.clone().map(<[f32]>::len));
    let values = Float32Array::from_iter_values(rows.flat_map(|r| r.iter().copied()));
    Arc::new(ListArray::new(
        item(DataType::Float32),
        offsets,
        Arc::new(values),
        None,
    ))
}

/// A `list<float64>` column built from one slice per row.
pub(crate) fn list_f64<'a>(rows: impl Iterator<Item = &'a [f64]> + Clone) -> ArrayRef {
    let offsets = OffsetBuffer::from_lengths(rows.clone().map(<[f64]>::len));
    let values = Float64Array::from_iter_values(rows.flat_map(|r| r.iter().copied()));
    Arc::new(ListArray::new(
        item(DataType::Float64),
        offsets,
        Arc::new(values),
        None,
    ))
}

/// A nullable `list<float32>` column: `None` rows are null.
pub(crate) fn opt_list_f32<'a>(rows: impl Iterator<Item = Option<&'a [f32]>> + Clone) -> ArrayRef {
    let offsets = OffsetBuffer::from_lengths(rows.clone().map(|r| r.map_or(0, <[f32]>::len)));
    let values =
        Float32Array::from_iter_values(rows.clone().flatten().flat_map(|r| r.iter().copied()));
    let nulls = arrow::buffer::NullBuffer::from_iter(rows.map(|r| r.is_some()));
    Arc::new(ListArray::new(
        item(DataType::Float32),
        offsets,
        Arc::new(values),
        Some(nulls),
    ))
}

/// Typed, null-checked access to the columns of one record batch.
pub(crate) struct Columns<'a> {
    pub batch: &'a RecordBatch,
    pub file: &'a str,
}

impl<'a> Columns<'a> {
    fn column(&self, name: &str) -> Result<&'a ArrayRef> {
        self.batch
            .column_by_name(name)
            .ok_or_else(|| Error::MissingColumn {
                file: self.file.to_string(),
                table: String::new(),
                column: name.to_string(),
            })
    }

    fn typed<T: Array + 'static>(&self, name: &str, required: bool) -> Result<&'a T> {
        let col = self.column(name)?;
        if required && col.null_count() > 0 {
            let row = (0..col.len()).find(|&i| col.is_null(i)).unwrap_or(0);
            return Err(Error::Null {
                file: self.file.to_string(),
                column: name.to_string(),
                row,
            });
        }
        col.as_any()
            .downcast_ref::<T>()
            .ok_or_else(|| Error::ColumnType {
                file: self.file.to_string(),
                column: name.to_string(),
                expected: std::any::type_name::<T>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("?")
                    .to_string(),
                found: col.data_type().to_string(),
            })
    }

    pub fn str(&self, name: &str) -> Result<Vec<String>> {
        let a = self.typed::<StringArray>(name, true)?;
        Ok(a.iter()
            .map(|s| s.unwrap_or_default().to_string())
            .collect())
    }

    pub fn opt_str(&self, name: &str) -> Result<Vec<Option<String>>> {
        let a = self.typed::<StringArray>(name, false)?;
        Ok(a.iter().map(|s| s.map(str::to_string)).collect())
    }

    pub fn u32(&self, name: &str) -> Result<Vec<u32>> {
        Ok(self.typed::<UInt32Array>(name, true)?.values().to_vec())
    }

    pub fn opt_u32(&self, name: &str) -> Result<Vec<Option<u32>>> {
        Ok(self.typed::<UInt32Array>(name, false)?.iter().collect())
    }

    pub fn u64(&self, name: &str) -> Result<Vec<u64>> {
        Ok(self.typed::<UInt64Array>(name, true)?.values().to_vec())
    }

    pub fn f32(&self, name: &str) -> Result<Vec<f32>> {
        Ok(self.typed::<Float32Array>(name, true)?.values().to_vec())
    }

    pub fn f64(&self, name: &str) -> Result<Vec<f64>> {
        Ok(self.typed::<Float64Array>(name, true)?.values().to_vec())
    }

    pub fn bool(&self, name: &str) -> Result<Vec<bool>> {
        let a = self.typed::<BooleanArray>(name, true)?;
        Ok((0..a.len()).map(|i| a.value(i)).collect())
    }

    fn list_parts<T: Array + 'static>(
        &self,
        name: &str,
        required: bool,
    ) -> Result<(Vec<usize>, &'a T)> {
        let list = self.typed::<ListArray>(name, required)?;
        let offsets: Vec<usize> = list.value_offsets().iter().map(|&o| o as usize).collect();
        let values =
            list.values()
                .as_any()
                .downcast_ref::<T>()
                .ok_or_else(|| Error::ColumnType {
                    file: self.file.to_string(),
                    column: name.to_string(),
                    expected: format!("list of {}", std::any::type_name::<T>()),
                    found: list.data_type().to_string(),
                })?;
        Ok((offsets, values))
    }

    pub fn list_u32(&self, name: &str) -> Result<Vec<Vec<u32>>> {
        let (offsets, values) = self.list_parts::<UInt32Array>(name, true)?;
        let v = values.values();
        Ok(offsets.windows(2).map(|w| v[w[0]..w[1]].to_vec()).collect())
    }

    pub fn list_f32(&self, name: &str) -> Result<Vec<Vec<f32>>> {
        let (offsets, values) = self.list_parts::<Float32Array>(name, true)?;
        let v = values.values();
        Ok(offsets.windows(2).map(|w| v[w[0]..w[1]].to_vec()).collect())
    }

    pub fn list_f64(&self, name: &str) -> Result<Vec<Vec<f64>>> {
        let (offsets, values) = self.list_parts::<Float64Array>(name, true)?;
        let v = values.values();
        Ok(offsets.windows(2).map(|w| v[w[0]..w[1]].to_vec()).collect())
    }

    /// A nullable `list<float32>` column: null rows are `None`.
    pub fn opt_list_f32(&self, name: &str) -> Result<Vec<Option<Vec<f32>>>> {
        let list = self.typed::<ListArray>(name, false)?;
        let (offsets, values) = self.list_parts::<Float32Array>(name, false)?;
        let v = values.values();
        Ok(offsets
            .windows(2)
            .enumerate()
            .map(|(i, w)| (!list.is_null(i)).then(|| v[w[0]..w[1]].to_vec()))
            .collect())
    }

    /// A vector column's layout (from its field's metadata) and one flat `tokens * dim`
    /// vector a row; `tokens(row)`, when known, is the row's token count, which its bytes
    /// must match.
    pub fn vectors(
        &self,
        name: &str,
        tokens: impl Fn(usize) -> Option<usize>,
    ) -> Result<(VectorLayout, Vec<Vec<f32>>)> {
        let col = self.column(name)?;
        let schema = self.batch.schema();
        let field = schema
            .field_with_name(name)
            .map_err(|_| Error::MissingColumn {
                file: self.file.to_string(),
                table: String::new(),
                column: name.to_string(),
            })?;
        let layout =
            VectorLayout::of_field(field, self.file)?.ok_or_else(|| Error::ColumnType {
                file: self.file.to_string(),
                column: name.to_string(),
                expected:
                    "a vector column (deltarl.dim and deltarl.precision in its field's metadata)"
                        .into(),
                found: format!("{} without them", col.data_type()),
            })?;
        let rows = layout.decode_column(self.file, name, col.as_ref(), tokens)?;
        Ok((layout, rows))
    }
}
