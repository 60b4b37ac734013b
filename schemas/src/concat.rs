//! A table written from pieces that are themselves Parquet files of it, each encoded where
//! its rows were computed (a rank, a pass): the pieces' column chunks are copied into the
//! output as they are, never decoded and encoded again, so the process that writes the
//! file moves bytes and the encoding is done where the rows are.
//!
//! The output's row groups are the pieces' (each piece cut at the row-group bounds of
//! [`crate::TableWriter`]), so a file depends on how its rows were cut into pieces: a
//! writer that keeps its files byte-identical whoever computed them cuts the pieces the
//! same way (the features stage: one piece a forward pass, on one process or many).

use std::io::Write;
use std::marker::PhantomData;
use std::sync::Arc;

use arrow::datatypes::Schema;
use bytes::Bytes;
use parquet::arrow::ARROW_SCHEMA_META_KEY;
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{KeyValue, PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::writer::SerializedFileWriter;

use crate::io::writer_properties;
use crate::{write_table, Error, FileMeta, Result, Table, TableWriter};

/// Encodes `rows` as a piece for [`PieceWriter`] (no bytes for no rows).
pub fn encode_piece<T: Table>(rows: &[T]) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    if !rows.is_empty() {
        write_table(&mut bytes, rows, &FileMeta::new("piece", ""))?;
    }
    Ok(bytes)
}

/// A table of `T` written from pieces ([`encode_piece`]), in the order given.
pub struct PieceWriter<T: Table, W: Write + Send> {
    /// Until the first piece: the output and metadata (the schema is the first piece's).
    out: Option<(W, FileMeta)>,
    writer: Option<SerializedFileWriter<W>>,
    /// The first piece's Arrow schema, as its footer states it (every later piece must
    /// have it).
    arrow_schema: Option<String>,
    rows: usize,
    table: PhantomData<T>,
}

impl<T: Table, W: Write + Send> PieceWriter<T, W> {
    pub fn new(out: W, meta: &FileMeta) -> Self {
        PieceWriter {
            out: Some((out, meta.clone())),
            writer: None,
            arrow_schema: None,
            rows: 0,
            table: PhantomData,
        }
    }

    /// Rows written so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    fn err(what: &str, e: impl std::fmt::Display) -> Error {
        Error::Build {
            table: T::NAME.into(),
            message: format!("{what}: {e}"),
        }
    }

    /// Appends a piece (`what` names it in an error): its row groups' column chunks are
    /// copied as they are. A piece of no bytes adds nothing.
    pub fn append(&mut self, piece: Vec<u8>, what: &str) -> Result<()> {
        if piece.is_empty() {
            return Ok(());
        }
        let bytes = Bytes::from(piece);
        // With the page indexes: copied along, they let readers find each row's bytes
        // (the coefficient stage's direct passes) as in a file written whole.
        let metadata = ParquetMetaDataReader::new()
            .with_page_index_policy(PageIndexPolicy::Optional)
            .parse_and_finish(&bytes)
            .map_err(|e| Self::err(what, e))?;
        let schema = arrow_schema_of(&metadata)
            .ok_or_else(|| Self::err(what, "a piece without its Arrow schema in its metadata"))?;
        match &self.arrow_schema {
            None => self.start(&metadata, &schema, what)?,
            Some(first) if *first == schema => {}
            Some(_) => {
                return Err(Self::err(
                    what,
                    "a piece of another layout (columns, vector dimension or precision) than \
                     the first",
                ))
            }
        }
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| Self::err(what, "writer already finished"))?;
        let index = metadata.page_index();
        for (g, rg) in metadata.row_groups().iter().enumerate() {
            let mut out = writer.next_row_group().map_err(|e| Self::err(what, e))?;
            for (c, column) in rg.columns().iter().enumerate() {
                let close = ColumnCloseResult {
                    bytes_written: column.compressed_size() as u64,
                    rows_written: rg.num_rows() as u64,
                    metadata: column.clone(),
                    bloom_filter: None,
                    column_index: index.and_then(|i| i.column_index(g, c)).cloned(),
                    offset_index: index.and_then(|i| i.offset_index(g, c)).cloned(),
                };
                out.append_column(&bytes, close)
                    .map_err(|e| Self::err(what, e))?;
            }
            out.close().map_err(|e| Self::err(what, e))?;
            self.rows += usize::try_from(rg.num_rows()).unwrap_or(0);
        }
        Ok(())
    }

    /// The output's writer, with the first piece's schema and the file's metadata (the
    /// properties a [`TableWriter`] gives the same schema, and the Arrow schema).
    fn start(&mut self, metadata: &ParquetMetaData, schema: &str, what: &str) -> Result<()> {
        let (out, meta) = self
            .out
            .take()
            .ok_or_else(|| Self::err(what, "writer already finished"))?;
        let arrow = parquet::arrow::parquet_to_arrow_schema(
            metadata.file_metadata().schema_descr(),
            metadata.file_metadata().key_value_metadata(),
        )
        .map_err(|e| Self::err(what, e))?;
        let mut kv = meta_kv(&meta, &arrow)?;
        kv.push(KeyValue::new(
            ARROW_SCHEMA_META_KEY.into(),
            schema.to_string(),
        ));
        let props = writer_properties(&meta, &arrow)?
            .into_builder()
            .set_key_value_metadata(Some(kv))
            .build();
        let root = metadata.file_metadata().schema_descr().root_schema_ptr();
        let writer = SerializedFileWriter::new(out, root, Arc::new(props))
            .map_err(|e| Self::err(what, e))?;
        self.writer = Some(writer);
        self.arrow_schema = Some(schema.to_string());
        Ok(())
    }

    /// Writes the footer; returns the output. A table of no pieces is written as a
    /// [`TableWriter`] writes one of no rows.
    pub fn finish(mut self) -> Result<W> {
        match self.writer.take() {
            Some(w) => w.into_inner().map_err(|e| Self::err("the footer", e)),
            None => {
                let (out, meta) = self
                    .out
                    .take()
                    .ok_or_else(|| Self::err("the footer", "writer already finished"))?;
                TableWriter::<T, W>::new(out, &meta).finish()
            }
        }
    }
}

/// The file's key-value metadata as a [`TableWriter`] writes it for `schema`.
fn meta_kv(meta: &FileMeta, schema: &Schema) -> Result<Vec<KeyValue>> {
    Ok(writer_properties(meta, schema)?
        .key_value_metadata()
        .cloned()
        .unwrap_or_default())
}

/// The Arrow schema a piece's footer records.
fn arrow_schema_of(metadata: &ParquetMetaData) -> Option<String> {
    metadata
        .file_metadata()
        .key_value_metadata()?
        .iter()
        .find(|kv| kv.key == ARROW_SCHEMA_META_KEY)
        .and_then(|kv| kv.value.clone())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{read_table, FeatureRow, Precision, VectorLayout};

    fn row(i: u32, dim: u32, tokens: usize) -> FeatureRow {
        FeatureRow {
            prompt_id: format!("p{i}"),
            sample_idx: i,
            dim,
            precision: Precision::F32,
            features: (0..tokens * dim as usize).map(|x| x as f32 + 0.5).collect(),
            token_prob: vec![0.25; tokens],
            logprob: vec![-1.5; tokens],
            entropy: vec![i as f32; tokens],
        }
    }

    #[test]
    fn pieces_copied_read_back_as_the_rows_with_the_files_metadata() {
        let rows: Vec<FeatureRow> = (0..5).map(|i| row(i, 3, 2 + i as usize)).collect();
        let meta = FileMeta::new("features", "h").with("k", "3");
        let mut w = PieceWriter::<FeatureRow, _>::new(Vec::new(), &meta);
        w.append(encode_piece(&rows[..2]).unwrap(), "piece 0")
            .unwrap();
        w.append(encode_piece::<FeatureRow>(&[]).unwrap(), "piece 1")
            .unwrap();
        w.append(encode_piece(&rows[2..]).unwrap(), "piece 2")
            .unwrap();
        assert_eq!(w.rows(), 5);
        let bytes = w.finish().unwrap();
        let (back, m) = read_table::<FeatureRow, _>(bytes.as_slice(), "out").unwrap();
        assert_eq!(back, rows);
        assert_eq!(
            (m.stage.as_str(), m.config_hash.as_str()),
            ("features", "h")
        );
        assert_eq!(m.extra.get("k").map(String::as_str), Some("3"));
        // The vector column keeps its layout; the same pieces give the same bytes.
        let mut again = PieceWriter::<FeatureRow, _>::new(Vec::new(), &meta);
        again
            .append(encode_piece(&rows[..2]).unwrap(), "a")
            .unwrap();
        again
            .append(encode_piece(&rows[2..]).unwrap(), "b")
            .unwrap();
        assert_eq!(again.finish().unwrap(), bytes);
        let path = std::env::temp_dir().join(format!("deltarl-concat-{}", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let layout = crate::vector_layout(&path, "features").unwrap();
        // The page indexes came along: passes read each row's bytes straight from the file.
        let direct = crate::VectorFile::open(&path).unwrap().is_direct();
        std::fs::remove_file(&path).ok();
        assert!(direct);
        assert_eq!(
            layout,
            Some(VectorLayout {
                dim: 3,
                precision: Precision::F32
            })
        );
    }

    #[test]
    fn a_piece_of_another_layout_is_refused_and_no_pieces_is_an_empty_table() {
        let meta = FileMeta::new("features", "h");
        let mut w = PieceWriter::<FeatureRow, _>::new(Vec::new(), &meta);
        w.append(encode_piece(&[row(0, 3, 2)]).unwrap(), "first")
            .unwrap();
        let e = w
            .append(encode_piece(&[row(1, 4, 2)]).unwrap(), "rank 1's piece")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rank 1's piece") && e.contains("another layout"),
            "{e}"
        );
        let empty = PieceWriter::<FeatureRow, _>::new(Vec::new(), &meta)
            .finish()
            .unwrap();
        let (rows, m) = read_table::<FeatureRow, _>(empty.as_slice(), "empty").unwrap();
        assert!(rows.is_empty());
        assert_eq!(m.stage, "features");
    }
}
