//! Streaming Parquet I/O. [`TableReader`] reads a table from a file a bounded batch of rows
//! at a time, decoding only the table's own columns (a view such as `LogprobRow` reads one
//! column of features.parquet and never touches the vectors). [`TableWriter`] writes rows
//! as they are produced, a row group at a time: a group closes at [`ROW_GROUP_ROWS`] rows
//! or [`ROW_GROUP_BYTES`] of row data, whichever comes first, so a writer holds at most
//! one row group.
//!
//! A file written in one call and one written batch by batch are the same bytes when the
//! batches end on the same row-group boundaries: a row group is always handed to Arrow as
//! one batch.

use std::io::Write;
use std::marker::PhantomData;
use std::path::Path;

use arrow::datatypes::{Schema, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReader;
use parquet::arrow::ArrowWriter;

use crate::io::{
    canonical_batch, checked_reader, writer_properties, READ_BATCH_ROWS, ROW_GROUP_ROWS,
};
use crate::{atomic_write, Error, FileMeta, Result, Table};

/// Row data per row group at most (by [`Table::heap_bytes`]): a features row of a 20k-token
/// response is hundreds of MB, so rows alone would not bound a group.
pub const ROW_GROUP_BYTES: usize = 128 << 20;

/// A deltarl table read from a file batch by batch (version and columns checked at open).
pub struct TableReader<T: Table> {
    file: String,
    meta: FileMeta,
    rows: usize,
    /// Uncompressed bytes of the file's row groups.
    bytes: usize,
    reader: ParquetRecordBatchReader,
    table: PhantomData<T>,
}

impl<T: Table> TableReader<T> {
    /// Opens `path`; batches hold at most `batch_rows` rows.
    pub fn open(path: &Path, batch_rows: usize) -> Result<Self> {
        let file = path.display().to_string();
        let handle = std::fs::File::open(path).map_err(|source| Error::Io {
            file: file.clone(),
            source,
        })?;
        let (reader, meta, rows, bytes) = checked_reader::<T, _>(handle, &file, batch_rows)?;
        Ok(TableReader {
            file,
            meta,
            rows,
            bytes,
            reader,
            table: PhantomData,
        })
    }

    /// Opens `path` with batches of about `max_bytes` of (uncompressed) row data, going by
    /// the file's average row (at least one row a batch).
    pub fn open_bounded(path: &Path, max_bytes: usize) -> Result<Self> {
        let probe = Self::open(path, READ_BATCH_ROWS)?;
        let rows = probe.rows.max(1);
        let bytes = probe.bytes.max(1);
        let per_row = bytes.div_ceil(rows);
        Self::open(path, (max_bytes / per_row).max(1))
    }

    /// The file's deltarl metadata.
    pub fn meta(&self) -> &FileMeta {
        &self.meta
    }

    /// Rows in the file (from its footer).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Every remaining row (for tables small enough to hold).
    pub fn read_all(self) -> Result<(Vec<T>, FileMeta)> {
        let meta = self.meta.clone();
        let mut rows = Vec::with_capacity(self.rows);
        for batch in self {
            rows.extend(batch?);
        }
        Ok((rows, meta))
    }
}

impl<T: Table> Iterator for TableReader<T> {
    type Item = Result<Vec<T>>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = self.reader.next()?;
        Some(
            batch
                .map_err(|e| Error::Parquet {
                    file: self.file.clone(),
                    message: e.to_string(),
                })
                .and_then(|b| T::from_batch(&canonical_batch::<T>(&self.file, &b)?, &self.file)),
        )
    }
}

/// A deltarl table written batch by batch (see the module's doc for row groups).
pub struct TableWriter<T: Table, W: Write + Send> {
    /// Until the first row: the output and metadata (the schema needs the rows' vector
    /// dimension).
    out: Option<(W, FileMeta)>,
    writer: Option<ArrowWriter<W>>,
    /// The schema of the first rows written (every later group must have it).
    schema: Option<SchemaRef>,
    /// Rows of the row group in progress and their bytes.
    group: Vec<T>,
    group_bytes: usize,
    rows: usize,
    /// A row group closes at this many rows or bytes.
    max_rows: usize,
    max_bytes: usize,
}

impl<T: Table, W: Write + Send> TableWriter<T, W> {
    pub fn new(out: W, meta: &FileMeta) -> Self {
        Self::with_limits(out, meta, ROW_GROUP_ROWS, ROW_GROUP_BYTES)
    }

    /// A writer whose row groups close at `max_rows` rows or `max_bytes` of row data.
    pub fn with_limits(out: W, meta: &FileMeta, max_rows: usize, max_bytes: usize) -> Self {
        TableWriter {
            out: Some((out, meta.clone())),
            writer: None,
            schema: None,
            group: Vec::new(),
            group_bytes: 0,
            rows: 0,
            max_rows: max_rows.clamp(1, ROW_GROUP_ROWS),
            max_bytes: max_bytes.max(1),
        }
    }

    /// Rows written so far (buffered ones included).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Adds rows; every completed row group is written out.
    pub fn write(&mut self, rows: &[T]) -> Result<()> {
        let mut start = 0;
        while start < rows.len() {
            // A group in progress is completed row by row (those rows are copied).
            if !self.group.is_empty() {
                self.push(rows[start].clone())?;
                start += 1;
                continue;
            }
            // Whole groups go straight from the slice, uncopied; the tail waits.
            let (mut end, mut bytes) = (start, 0);
            while end < rows.len() && end - start < self.max_rows && bytes < self.max_bytes {
                bytes += rows[end].heap_bytes();
                end += 1;
            }
            if end - start < self.max_rows && bytes < self.max_bytes {
                return self.write_owned(rows[start..].to_vec());
            }
            self.rows += end - start;
            self.write_group(&rows[start..end])?;
            start = end;
        }
        Ok(())
    }

    fn push(&mut self, row: T) -> Result<()> {
        self.group_bytes += row.heap_bytes();
        self.group.push(row);
        self.rows += 1;
        if self.group.len() >= self.max_rows || self.group_bytes >= self.max_bytes {
            self.flush_group()?;
        }
        Ok(())
    }

    /// Like [`TableWriter::write`], taking the rows.
    pub fn write_owned(&mut self, rows: Vec<T>) -> Result<()> {
        for row in rows {
            self.push(row)?;
        }
        Ok(())
    }

    fn err(e: parquet::errors::ParquetError) -> Error {
        Error::Build {
            table: T::NAME.into(),
            message: e.to_string(),
        }
    }

    /// The Arrow writer, created with the schema of the first rows (their vector layout).
    fn writer(&mut self, schema: SchemaRef) -> Result<&mut ArrowWriter<W>> {
        if self.writer.is_none() {
            let Some((out, meta)) = self.out.take() else {
                return Err(Error::Build {
                    table: T::NAME.into(),
                    message: "writer already finished".into(),
                });
            };
            let props = writer_properties(&meta, &schema)?;
            let w = ArrowWriter::try_new(out, schema.clone(), Some(props)).map_err(Self::err)?;
            self.schema = Some(schema);
            self.writer = Some(w);
        }
        self.writer.as_mut().ok_or_else(|| Error::Build {
            table: T::NAME.into(),
            message: "no writer".into(),
        })
    }

    fn flush_group(&mut self) -> Result<()> {
        if self.group.is_empty() {
            return Ok(());
        }
        let group = std::mem::take(&mut self.group);
        self.group_bytes = 0;
        self.write_group(&group)
    }

    /// Writes `group` as one row group (one Arrow batch).
    fn write_group(&mut self, group: &[T]) -> Result<()> {
        let batch = T::to_batch(group)?;
        // Every group has the first one's columns, vector dimension and precision.
        if let Some(first) = &self.schema {
            if first.as_ref() != batch.schema().as_ref() {
                return Err(Error::Build {
                    table: T::NAME.into(),
                    message: format!(
                        "rows of another layout after the first rows: {} after {}",
                        layout_of(&batch.schema()),
                        layout_of(first)
                    ),
                });
            }
        }
        let w = self.writer(batch.schema())?;
        w.write(&batch).map_err(Self::err)?;
        w.flush().map_err(Self::err)?;
        Ok(())
    }

    /// Writes the last row group and the footer; returns the output.
    pub fn finish(mut self) -> Result<W> {
        self.flush_group()?;
        // A table without rows still gets its schema and metadata.
        self.writer(std::sync::Arc::new(T::schema(0)))?;
        let writer = self.writer.take().ok_or_else(|| Error::Build {
            table: T::NAME.into(),
            message: "no writer".into(),
        })?;
        writer.into_inner().map_err(Self::err)
    }
}

/// A schema's columns with their metadata, for a message.
fn layout_of(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .filter(|f| !f.metadata().is_empty())
        .map(|f| {
            let mut m: Vec<String> = f
                .metadata()
                .iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            m.sort();
            format!("{} ({})", f.name(), m.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Writes `rows` as one zstd-compressed Parquet file with deltarl metadata.
pub fn write_table<T: Table, W: Write + Send>(w: W, rows: &[T], meta: &FileMeta) -> Result<()> {
    let mut writer = TableWriter::new(w, meta);
    writer.write(rows)?;
    writer.finish()?;
    Ok(())
}

/// Writes a table to `path` atomically (temporary name, fsync, rename).
pub fn write_path<T: Table>(path: &Path, rows: &[T], meta: &FileMeta) -> Result<()> {
    atomic_write(path, |f| write_table(f, rows, meta))
}

/// Reads a deltarl table from a path (version and columns checked), decoding only the
/// table's own columns from the file (never the whole file into memory).
pub fn read_path<T: Table>(path: &Path) -> Result<(Vec<T>, FileMeta)> {
    TableReader::open(path, READ_BATCH_ROWS)?.read_all()
}
