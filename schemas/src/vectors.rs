//! How token vectors are stored: each response's `tokens x dim` values as one byte string,
//! row-major, little-endian, at the precision they were computed in (f32, or bf16 as the
//! high two bytes of the f32).
//!
//! Why bytes and not a nested list: a `list<fixed_size_list<float32>>` column carries a
//! repetition level for every value, and decoding those levels is what limited the
//! coefficient passes to tens of MB/s. A byte string a response has no levels at all
//! (the column is flat and required), so decoding it is a copy, and the column is written
//! uncompressed and unencoded (random mantissas do not compress): a value costs exactly its
//! precision's width on disk. The dimension and precision travel in the column's field
//! metadata, where any Arrow reader (polars, pyarrow) sees them.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, LargeBinaryArray};
use arrow::datatypes::{DataType, Field};

use crate::key::ResponseKey;
use crate::{Error, Result};

/// Values of a response's vectors one range of [`vector_sum`] holds at most (1 MB of f32):
/// the sum is formed range by range so that a pass can spread a long response over the
/// cores and still add in this one order.
pub const SUM_RANGE_VALUES: usize = 1 << 18;

/// Tokens in one range of [`vector_sum`] at dimension `dim` (at least one).
pub const fn sum_range_tokens(dim: usize) -> usize {
    let t = SUM_RANGE_VALUES / if dim == 0 { 1 } else { dim };
    if t == 0 {
        1
    } else {
        t
    }
}

/// `sum_t v_t` of one response's token-major vectors (`dim` values a token), in f64: the
/// tokens taken in ranges of [`sum_range_tokens`], each range's sum formed coordinate by
/// coordinate in token order from +0, and the ranges' sums added in order to the first's
/// (a response of one range: plain token order). The features writer stores it beside the
/// vectors (`vector_sum`), so DelTA's first centroids need no pass over them; the
/// coefficient passes form the same sum in the same order, so a stored sum and a recomputed
/// one agree bit for bit.
pub fn vector_sum(dim: usize, v: &[f32]) -> Vec<f64> {
    if dim == 0 {
        return Vec::new();
    }
    let mut total: Option<Vec<f64>> = None;
    for range in v.chunks(dim * sum_range_tokens(dim)) {
        let mut acc = vec![0.0f64; dim];
        for row in range.chunks_exact(dim) {
            for (a, &x) in acc.iter_mut().zip(row) {
                *a += f64::from(x);
            }
        }
        match &mut total {
            None => total = Some(acc),
            Some(t) => t.iter_mut().zip(&acc).for_each(|(t, a)| *t += a),
        }
    }
    total.unwrap_or_else(|| vec![0.0; dim])
}

/// The field-metadata key holding a vector column's dimension.
pub const DIM_KEY: &str = "deltarl.dim";
/// The field-metadata key holding a vector column's precision (`f32` or `bf16`).
pub const PRECISION_KEY: &str = "deltarl.precision";

/// The precision token vectors are stored at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// Four bytes a value, the f32 as computed.
    #[default]
    F32,
    /// Two bytes a value: the high half of an f32 whose low half is zero (a value the
    /// features stage rounded to bf16).
    Bf16,
}

impl Precision {
    /// Bytes a value.
    pub const fn width(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::Bf16 => 2,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "f32" => Some(Precision::F32),
            "bf16" => Some(Precision::Bf16),
            _ => None,
        }
    }

    /// `x` at this precision: itself, or for bf16 the nearest bf16 value (ties to even), as
    /// a cast to bf16 rounds.
    pub fn round(self, x: f32) -> f32 {
        match self {
            Precision::F32 => x,
            Precision::Bf16 if !x.is_finite() => x,
            Precision::Bf16 => {
                let bits = x.to_bits();
                let even = (bits >> 16) & 1;
                f32::from_bits(bits.wrapping_add(0x7fff + even) & 0xffff_0000)
            }
        }
    }

    /// Appends `values` to `out` at this precision. A bf16 value is an f32 whose low 16
    /// bits are zero; any other is refused (it would be stored rounded), and so is a
    /// non-finite value; the error names the value's index.
    pub fn encode(self, values: &[f32], out: &mut Vec<u8>) -> std::result::Result<(), String> {
        if let Some(i) = values.iter().position(|x| !x.is_finite()) {
            return Err(format!("value {i} is {}", values[i]));
        }
        match self {
            Precision::F32 => {
                out.reserve(values.len() * 4);
                for x in values {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
            Precision::Bf16 => {
                out.reserve(values.len() * 2);
                for (i, x) in values.iter().enumerate() {
                    let bits = x.to_bits();
                    if bits & 0xffff != 0 {
                        return Err(format!("value {i} ({x}) is not a bf16 value"));
                    }
                    out.extend_from_slice(&((bits >> 16) as u16).to_le_bytes());
                }
            }
        }
        Ok(())
    }

    /// The values of `bytes` (a whole number of values at this precision).
    pub fn decode(self, bytes: &[u8]) -> Vec<f32> {
        let mut out = Vec::with_capacity(bytes.len() / self.width());
        self.decode_into(bytes, &mut out);
        out
    }

    /// Appends the values of `bytes` to `out`.
    pub fn decode_into(self, bytes: &[u8], out: &mut Vec<f32>) {
        match self {
            Precision::F32 => out.extend(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            ),
            Precision::Bf16 => out.extend(
                bytes
                    .chunks_exact(2)
                    .map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)),
            ),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a vector column is laid out: values a token and bytes a value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VectorLayout {
    pub dim: usize,
    pub precision: Precision,
}

impl VectorLayout {
    /// The column's field: a required large binary (a response's bytes can pass 2 GiB in
    /// a batch) with the layout in its metadata.
    pub(crate) fn field(self, name: &str) -> Field {
        Field::new(name, DataType::LargeBinary, false).with_metadata(HashMap::from([
            (DIM_KEY.to_string(), self.dim.to_string()),
            (PRECISION_KEY.to_string(), self.precision.name().to_string()),
        ]))
    }

    /// The layout a field's metadata states; None when it states none (a column that is
    /// not a vector column).
    pub(crate) fn of_field(field: &Field, file: &str) -> Result<Option<Self>> {
        let meta = field.metadata();
        let (Some(dim), Some(precision)) = (meta.get(DIM_KEY), meta.get(PRECISION_KEY)) else {
            return Ok(None);
        };
        let bad = |message: String| Error::ColumnType {
            file: file.to_string(),
            column: field.name().clone(),
            expected: "a vector column's metadata (deltarl.dim, deltarl.precision)".into(),
            found: message,
        };
        let dim = dim
            .parse::<usize>()
            .map_err(|_| bad(format!("{DIM_KEY} = {dim:?}")))?;
        let precision = Precision::parse(precision)
            .ok_or_else(|| bad(format!("{PRECISION_KEY} = {precision:?}")))?;
        Ok(Some(VectorLayout { dim, precision }))
    }

    /// The column of `rows` (one flat `tokens * dim` slice a row, with the response's key,
    /// which names the row in an error and is formatted only then) at this layout.
    pub(crate) fn column<'a>(
        self,
        table: &str,
        rows: impl Iterator<Item = (&'a [f32], ResponseKey<'a>)>,
    ) -> Result<ArrayRef> {
        let mut values = Vec::new();
        let mut offsets = vec![0i64];
        for (v, key) in rows {
            if self.dim == 0 && !v.is_empty() || self.dim > 0 && v.len() % self.dim != 0 {
                return Err(Error::Build {
                    table: table.into(),
                    message: format!(
                        "{key}: {} values, not whole vectors of {}",
                        v.len(),
                        self.dim
                    ),
                });
            }
            self.precision
                .encode(v, &mut values)
                .map_err(|m| Error::Build {
                    table: table.into(),
                    message: format!("{key}: {m} ({} storage)", self.precision),
                })?;
            offsets.push(i64::try_from(values.len()).unwrap_or(i64::MAX));
        }
        let array = LargeBinaryArray::try_new(
            arrow::buffer::OffsetBuffer::new(offsets.into()),
            values.into(),
            None,
        )
        .map_err(|e| Error::Build {
            table: table.into(),
            message: e.to_string(),
        })?;
        Ok(Arc::new(array))
    }

    /// The rows of a vector column, decoded; `tokens` gives each row's token count, which
    /// its bytes must match.
    pub(crate) fn decode_column(
        self,
        file: &str,
        name: &str,
        col: &dyn Array,
        tokens: impl Fn(usize) -> Option<usize>,
    ) -> Result<Vec<Vec<f32>>> {
        let a = col
            .as_any()
            .downcast_ref::<LargeBinaryArray>()
            .ok_or_else(|| Error::ColumnType {
                file: file.to_string(),
                column: name.to_string(),
                expected: DataType::LargeBinary.to_string(),
                found: col.data_type().to_string(),
            })?;
        let row_bytes = self.dim * self.precision.width();
        (0..a.len())
            .map(|i| {
                if a.is_null(i) {
                    return Err(Error::Null {
                        file: file.to_string(),
                        column: name.to_string(),
                        row: i,
                    });
                }
                let b = a.value(i);
                let whole = if row_bytes == 0 {
                    b.is_empty()
                } else {
                    b.len() % row_bytes == 0
                };
                let n = b.len().checked_div(row_bytes).unwrap_or(0);
                // A column of no dimensions (a file that keeps no vectors) holds no bytes
                // for any number of tokens.
                if !whole || row_bytes > 0 && tokens(i).is_some_and(|t| t != n) {
                    return Err(Error::Value {
                        file: file.to_string(),
                        column: name.to_string(),
                        row: i,
                        message: format!(
                            "{} bytes: not {} tokens of {} {} values",
                            b.len(),
                            tokens(i).map_or_else(|| "whole".to_string(), |t| t.to_string()),
                            self.dim,
                            self.precision
                        ),
                    });
                }
                Ok(self.precision.decode(b))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn values_round_trip_at_each_precision_and_bf16_refuses_a_rounded_value() {
        // Values bf16 holds exactly (at most 8 significant bits), both signs, tiny and large.
        let v = [1.0f32, -2.5, 0.0, 2f32.powi(-70), 3.0 * 2f32.powi(40)];
        for p in [Precision::F32, Precision::Bf16] {
            let mut b = Vec::new();
            p.encode(&v, &mut b).unwrap();
            assert_eq!(b.len(), v.len() * p.width());
            assert_eq!(p.decode(&b), v);
        }
        // 1 + 2^-10 needs more than bf16's 7 mantissa bits.
        let err = Precision::Bf16.encode(&[1.0, 1.0 + 1.0 / 1024.0], &mut Vec::new());
        assert!(err.unwrap_err().contains("value 1"));
        // Rounding to nearest, ties to even, as torch's cast does.
        let b = Precision::Bf16;
        assert_eq!(b.round(1.0 + 1.0 / 1024.0), 1.0);
        assert_eq!(b.round(1.0 + 3.0 / 256.0), 1.0 + 1.0 / 64.0);
        assert_eq!(b.round(1.0 + 1.0 / 256.0), 1.0); // a tie, to the even 1.0
        assert_eq!(b.round(1.0 + 3.0 / 256.0 - 1.0 / 512.0), 1.0 + 1.0 / 128.0);
        let err = Precision::F32.encode(&[f32::NAN], &mut Vec::new());
        assert!(err.unwrap_err().contains("value 0 is NaN"));
    }
}
