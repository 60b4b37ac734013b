//! Parquet writer and checked reader for [`Table`]s.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::vectors::VectorLayout;
use crate::{Error, Result, Table};

/// The schema version written into every file and required by every reader.
pub const SCHEMA_VERSION: &str = "1";
/// The tool version recorded in files and manifests.
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");

const KEY_VERSION: &str = "deltarl.schema_version";
const KEY_STAGE: &str = "deltarl.stage";
const KEY_CONFIG: &str = "deltarl.config_hash";
const KEY_TOOL: &str = "deltarl.version";
const PREFIX: &str = "deltarl.";

/// Rows per row group at most: small enough that a reader can stream, large enough to
/// compress.
pub const ROW_GROUP_ROWS: usize = 2048;

/// Rows a reader decodes at a time by default.
pub const READ_BATCH_ROWS: usize = 256;

/// The key-value metadata of a deltarl file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FileMeta {
    /// The stage that wrote the file.
    pub stage: String,
    /// Hash of the resolved configuration the stage ran with.
    pub config_hash: String,
    /// Tool version that wrote the file (filled in by the writer).
    pub version: String,
    /// Further entries (settings JSON, summaries), stored as `deltarl.<key>`.
    pub extra: BTreeMap<String, String>,
}

impl FileMeta {
    pub fn new(stage: &str, config_hash: &str) -> Self {
        FileMeta {
            stage: stage.to_string(),
            config_hash: config_hash.to_string(),
            version: TOOL_VERSION.to_string(),
            extra: BTreeMap::new(),
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.extra.insert(key.to_string(), value.into());
        self
    }

    fn to_kv(&self) -> Vec<KeyValue> {
        let mut kv = vec![
            KeyValue::new(KEY_VERSION.into(), SCHEMA_VERSION.to_string()),
            KeyValue::new(KEY_STAGE.into(), self.stage.clone()),
            KeyValue::new(KEY_CONFIG.into(), self.config_hash.clone()),
            KeyValue::new(KEY_TOOL.into(), TOOL_VERSION.to_string()),
        ];
        kv.extend(
            self.extra
                .iter()
                .map(|(k, v)| KeyValue::new(format!("{PREFIX}{k}"), v.clone())),
        );
        kv
    }

    fn from_kv(kv: &[KeyValue]) -> (Option<String>, Self) {
        let mut meta = FileMeta::default();
        let mut version = None;
        for e in kv {
            let v = e.value.clone().unwrap_or_default();
            match e.key.as_str() {
                KEY_VERSION => version = Some(v),
                KEY_STAGE => meta.stage = v,
                KEY_CONFIG => meta.config_hash = v,
                KEY_TOOL => meta.version = v,
                k => {
                    if let Some(rest) = k.strip_prefix(PREFIX) {
                        meta.extra.insert(rest.to_string(), v);
                    }
                }
            }
        }
        (version, meta)
    }
}

/// The writer settings of every deltarl file: zstd, bounded row groups, the metadata. A
/// vector column (a field with a [`VectorLayout`] in its metadata) is written as it is:
/// plain, uncompressed, no dictionary and no statistics, so a reader copies its bytes and
/// a value costs its precision's width on disk (`vectors.rs` says why).
pub(crate) fn writer_properties(meta: &FileMeta, schema: &Schema) -> Result<WriterProperties> {
    let build = |e: String| Error::Build {
        table: meta.stage.clone(),
        message: e,
    };
    let level = ZstdLevel::try_new(3).map_err(|e| build(e.to_string()))?;
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_key_value_metadata(Some(meta.to_kv()));
    for field in schema.fields() {
        if VectorLayout::of_field(field, &meta.stage)?.is_some() {
            let path = ColumnPath::new(vec![field.name().clone()]);
            props = props
                .set_column_compression(path.clone(), Compression::UNCOMPRESSED)
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path.clone(), Encoding::PLAIN)
                .set_column_statistics_enabled(path, EnabledStatistics::None);
        }
    }
    Ok(props.build())
}

/// Refuses a file whose schema version is missing or not the one this build writes, naming
/// the file and both versions.
fn check_version(file: &str, found: Option<String>) -> Result<()> {
    if found.as_deref() != Some(SCHEMA_VERSION) {
        return Err(Error::Version {
            file: file.to_string(),
            found,
            expected: SCHEMA_VERSION.to_string(),
        });
    }
    Ok(())
}

fn same_shape(expected: &DataType, found: &DataType) -> bool {
    match (expected, found) {
        (DataType::List(a), DataType::List(b) | DataType::LargeList(b)) => {
            same_shape(a.data_type(), b.data_type())
        }
        (DataType::FixedSizeList(a, _), DataType::FixedSizeList(b, _)) => {
            same_shape(a.data_type(), b.data_type())
        }
        (DataType::Utf8, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) => true,
        (
            DataType::LargeBinary,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView,
        ) => true,
        (a, b) => a == b,
    }
}

/// Casts large/view variants (as written by polars or pyarrow) to the canonical types and
/// fixes the fixed-size-list dimension to the file's.
fn canonical_type(expected: &DataType, found: &DataType) -> DataType {
    match (expected, found) {
        (DataType::List(a), DataType::List(b) | DataType::LargeList(b)) => {
            DataType::List(Arc::new(Field::new(
                "item",
                canonical_type(a.data_type(), b.data_type()),
                b.is_nullable(),
            )))
        }
        (DataType::FixedSizeList(a, _), DataType::FixedSizeList(b, n)) => DataType::FixedSizeList(
            Arc::new(Field::new(
                "item",
                canonical_type(a.data_type(), b.data_type()),
                b.is_nullable(),
            )),
            *n,
        ),
        (e, _) => e.clone(),
    }
}

fn check_columns<T: Table>(file: &str, schema: &Schema) -> Result<()> {
    for field in T::fields(0) {
        // Files written before a nullable column was added lack it (read as nulls).
        let added = T::ADDED.contains(&field.name().as_str());
        if added && field.is_nullable() && schema.field_with_name(field.name()).is_err() {
            continue;
        }
        let found = schema
            .field_with_name(field.name())
            .map_err(|_| Error::MissingColumn {
                file: file.to_string(),
                table: T::NAME.to_string(),
                column: field.name().clone(),
            })?;
        if !same_shape(field.data_type(), found.data_type()) {
            return Err(Error::ColumnType {
                file: file.to_string(),
                column: field.name().clone(),
                expected: field.data_type().to_string(),
                found: found.data_type().to_string(),
            });
        }
    }
    Ok(())
}

pub(crate) fn canonical_batch<T: Table>(file: &str, batch: &RecordBatch) -> Result<RecordBatch> {
    let mut fields = Vec::new();
    let mut cols: Vec<ArrayRef> = Vec::new();
    for field in T::fields(0) {
        if field.is_nullable() && batch.column_by_name(field.name()).is_none() {
            fields.push(Field::new(field.name(), field.data_type().clone(), true));
            cols.push(arrow::array::new_null_array(
                field.data_type(),
                batch.num_rows(),
            ));
            continue;
        }
        let col = batch
            .column_by_name(field.name())
            .ok_or_else(|| Error::MissingColumn {
                file: file.to_string(),
                table: T::NAME.to_string(),
                column: field.name().clone(),
            })?;
        let target = canonical_type(field.data_type(), col.data_type());
        let col = if &target == col.data_type() {
            col.clone()
        } else {
            arrow::compute::cast(col, &target).map_err(|e| Error::ColumnType {
                file: file.to_string(),
                column: field.name().clone(),
                expected: target.to_string(),
                found: format!("{} ({e})", col.data_type()),
            })?
        };
        // A vector column's layout lives in its field's metadata.
        let metadata = batch
            .schema()
            .field_with_name(field.name())
            .map(|f| f.metadata().clone())
            .unwrap_or_default();
        fields.push(Field::new(field.name(), target, true).with_metadata(metadata));
        cols.push(col);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(|e| Error::Parquet {
        file: file.to_string(),
        message: e.to_string(),
    })
}

/// Opens a Parquet file and splits its key-value metadata into (schema version, meta).
fn open<C: parquet::file::reader::ChunkReader + 'static>(
    data: C,
    file: &str,
) -> Result<(ParquetRecordBatchReaderBuilder<C>, Option<String>, FileMeta)> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(data).map_err(|e| Error::Parquet {
        file: file.to_string(),
        message: e.to_string(),
    })?;
    let kv = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .cloned()
        .unwrap_or_default();
    let (version, meta) = FileMeta::from_kv(&kv);
    Ok((builder, version, meta))
}

/// A reader of `data` decoding only the table's own columns (a view such as `LogprobRow`
/// skips the rest) in batches of `batch_rows`, after checking the schema version and the
/// columns; with the file's metadata and row count.
pub(crate) fn checked_reader<T: Table, C: parquet::file::reader::ChunkReader + 'static>(
    data: C,
    file: &str,
    batch_rows: usize,
) -> Result<(ParquetRecordBatchReader, FileMeta, usize, usize)> {
    let (builder, version, meta) = open(data, file)?;
    check_version(file, version)?;
    check_columns::<T>(file, builder.schema())?;
    let rows = usize::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
    let bytes: i64 = builder
        .metadata()
        .row_groups()
        .iter()
        .map(|g| g.total_byte_size())
        .sum();
    let bytes = usize::try_from(bytes).unwrap_or(0);
    let roots: Vec<usize> = T::fields(0)
        .iter()
        .filter_map(|f| builder.schema().index_of(f.name()).ok())
        .collect();
    let mask = parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), roots);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(batch_rows.max(1))
        .build()
        .map_err(|e| Error::Parquet {
            file: file.to_string(),
            message: e.to_string(),
        })?;
    Ok((reader, meta, rows, bytes))
}

fn read_impl<T: Table>(data: Bytes, file: &str) -> Result<(Vec<T>, FileMeta)> {
    let (reader, meta, n, _) = checked_reader::<T, _>(data, file, READ_BATCH_ROWS)?;
    let mut rows = Vec::with_capacity(n);
    for batch in reader {
        let batch = batch.map_err(|e| Error::Parquet {
            file: file.to_string(),
            message: e.to_string(),
        })?;
        rows.extend(T::from_batch(&canonical_batch::<T>(file, &batch)?, file)?);
    }
    Ok((rows, meta))
}

/// Reads a deltarl table from any reader; `file` names it in errors. Fails on a missing
/// or wrong schema version, a missing column or a wrongly typed column.
pub fn read_table<T: Table, R: Read>(mut r: R, file: &str) -> Result<(Vec<T>, FileMeta)> {
    let mut buf = Vec::new();
    r.read_to_end(&mut buf).map_err(|source| Error::Io {
        file: file.to_string(),
        source,
    })?;
    read_impl(Bytes::from(buf), file)
}

/// Reads only the deltarl metadata of a file (its footer, not the data), checking its
/// version.
pub fn read_meta(path: &Path) -> Result<FileMeta> {
    let file = path.display().to_string();
    let handle = std::fs::File::open(path).map_err(|source| Error::Io {
        file: file.clone(),
        source,
    })?;
    let (_, version, meta) = open(handle, &file)?;
    check_version(&file, version)?;
    Ok(meta)
}

/// The layout of a file's vector `column` (dimension and precision, from its schema
/// alone); None when the file has no such column.
pub fn vector_layout(path: &Path, column: &str) -> Result<Option<VectorLayout>> {
    let file = path.display().to_string();
    let handle = std::fs::File::open(path).map_err(|source| Error::Io {
        file: file.clone(),
        source,
    })?;
    let (builder, version, _) = open(handle, &file)?;
    check_version(&file, version)?;
    match builder.schema().field_with_name(column) {
        Ok(field) => VectorLayout::of_field(field, &file),
        Err(_) => Ok(None),
    }
}
