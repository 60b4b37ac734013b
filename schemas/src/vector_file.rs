//! Reading the token vectors of features.parquet pass after pass at the speed of a copy.
//!
//! The features writer stores each response's vectors as one plain, uncompressed byte
//! string on a data page of its own (`vectors.rs`, `io::writer_properties`). The file's
//! offset index gives each page's place, so a response's bytes are the last `tokens x dim
//! x width` bytes of its page, right after their 4-byte length: a pass reads them with
//! one positioned read into a buffer it reuses and widens them to f32, with no Parquet
//! decoding and no allocation a response. The length prefix is checked against the
//! row's token count; a file not laid out that way (one rewritten by another tool:
//! compressed, dictionary-encoded, several rows a page, no offset index) is read through
//! the Arrow reader instead, with the same results, only slower.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use parquet::basic::{Compression, Encoding};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataReader};

use crate::{
    Error, FeatureScalars, FeatureSums, FeatureVectors, Precision, Result, Table, TableReader,
    VectorLayout, VECTOR_SUM,
};

/// Where one response's vector bytes are in the file.
#[derive(Clone, Copy, Debug)]
struct Span {
    at: u64,
    len: usize,
}

/// A batch of a pass: (row of the response in the file, its token-major vectors).
pub type VectorBatch<'a> = [(usize, &'a [f32])];

/// Responses' vectors decoded into batches of about `max_bytes` of f32 (one response when
/// a single one is larger), each handed to `visit` when the next would overflow it: a pass
/// over a file's vectors, or over vectors held in memory. `floats` is the caller's buffer,
/// kept from one pass to the next.
pub struct Batcher<'b, 'v, E> {
    max_bytes: usize,
    floats: &'b mut Vec<f32>,
    /// (row, end of its values in `floats`) of the batch's responses.
    rows: Vec<(usize, usize)>,
    visit: &'v mut dyn FnMut(&VectorBatch<'_>) -> Result<(), E>,
}

impl<'b, 'v, E> Batcher<'b, 'v, E> {
    pub fn new(
        max_bytes: usize,
        floats: &'b mut Vec<f32>,
        visit: &'v mut dyn FnMut(&VectorBatch<'_>) -> Result<(), E>,
    ) -> Self {
        floats.clear();
        Batcher {
            max_bytes,
            floats,
            rows: Vec::new(),
            visit,
        }
    }

    /// Adds response `row`'s values, `bytes` at `precision`, first visiting the batch so
    /// far when they would overflow it.
    pub fn push(&mut self, row: usize, bytes: &[u8], precision: Precision) -> Result<(), E> {
        let values = bytes.len() / precision.width();
        if !self.floats.is_empty() && (self.floats.len() + values) * 4 > self.max_bytes {
            self.flush()?;
        }
        precision.decode_into(bytes, self.floats);
        self.rows.push((row, self.floats.len()));
        Ok(())
    }

    /// Visits what is left.
    pub fn finish(mut self) -> Result<(), E> {
        if self.rows.is_empty() {
            return Ok(());
        }
        self.flush()
    }

    fn flush(&mut self) -> Result<(), E> {
        let mut start = 0;
        let floats = &self.floats[..];
        let batch: Vec<(usize, &[f32])> = self
            .rows
            .iter()
            .map(|&(row, end)| {
                let v = &floats[start..end];
                start = end;
                (row, v)
            })
            .collect();
        (self.visit)(&batch)?;
        self.floats.clear();
        self.rows.clear();
        Ok(())
    }
}

/// The vectors of a features file, read in passes.
pub struct VectorFile {
    path: std::path::PathBuf,
    file: File,
    layout: VectorLayout,
    keys: Vec<(String, u32)>,
    /// Each row's `sum_t v_t` when the file stores it (`vector_sum`), checked to be `dim`
    /// finite values.
    sums: Option<Vec<Vec<f64>>>,
    /// Each row's bytes when the file has the features writer's layout, else None (the
    /// Arrow reader is used).
    spans: Option<Vec<Span>>,
    /// The buffers of a pass, kept from one pass to the next (a fresh buffer of hundreds of
    /// MB costs a page fault every 4 KiB on first touch).
    bytes: Vec<u8>,
    floats: Vec<f32>,
}

impl VectorFile {
    /// Opens `path` (a features file: its `features` vector column and the keys and token
    /// counts of its rows, read once here).
    pub fn open(path: &Path) -> Result<Self> {
        let name = path.display().to_string();
        let io = |source| Error::Io {
            file: name.clone(),
            source,
        };
        let layout =
            crate::vector_layout(path, "features")?.ok_or_else(|| Error::MissingColumn {
                file: name.clone(),
                table: FeatureVectors::NAME.to_string(),
                column: "features".into(),
            })?;
        let (scalars, _) =
            TableReader::<FeatureScalars>::open(path, crate::READ_BATCH_ROWS)?.read_all()?;
        let tokens: Vec<usize> = scalars.iter().map(|r| r.entropy.len()).collect();
        let keys: Vec<(String, u32)> = scalars
            .into_iter()
            .map(|r| (r.prompt_id, r.sample_idx))
            .collect();
        let sums = stored_sums(path, layout, &keys)?;
        let file = File::open(path).map_err(io)?;
        let spans = spans(&file, layout, &tokens);
        Ok(VectorFile {
            path: path.to_path_buf(),
            file,
            layout,
            keys,
            sums,
            spans,
            bytes: Vec::new(),
            floats: Vec::new(),
        })
    }

    pub fn layout(&self) -> VectorLayout {
        self.layout
    }

    /// The rows' keys (`prompt_id`, `sample_idx`), in file order.
    pub fn keys(&self) -> &[(String, u32)] {
        &self.keys
    }

    /// Each row's stored `sum_t v_t` ([`crate::vector_sum`]), in file order, when the file
    /// has the `vector_sum` column (a file written by another tool may not).
    pub fn sums(&self) -> Option<&[Vec<f64>]> {
        self.sums.as_deref()
    }

    /// Whether passes read the bytes directly (the features writer's layout) rather than
    /// through the Arrow reader.
    pub fn is_direct(&self) -> bool {
        self.spans.is_some()
    }

    /// One pass over every row in file order: `visit` gets batches of about `max_bytes` of
    /// f32 values (one response when a single one is larger).
    /// `visit`'s own errors pass through unchanged.
    pub fn pass<E: From<Error>>(
        &mut self,
        max_bytes: usize,
        visit: &mut dyn FnMut(&VectorBatch<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some(spans) = &self.spans else {
            return self.pass_arrow(max_bytes, visit);
        };
        let name = || self.path.display().to_string();
        let precision = self.layout.precision;
        let bytes = &mut self.bytes;
        let mut batch = Batcher::new(max_bytes, &mut self.floats, visit);
        for (row, span) in spans.iter().enumerate() {
            bytes.resize(span.len, 0);
            self.file
                .read_exact_at(bytes, span.at)
                .map_err(|source| Error::Io {
                    file: name(),
                    source,
                })?;
            batch.push(row, bytes, precision)?;
        }
        batch.finish()
    }

    /// A pass through the Arrow reader (any layout Arrow reads).
    fn pass_arrow<E: From<Error>>(
        &self,
        max_bytes: usize,
        visit: &mut dyn FnMut(&VectorBatch<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut row = 0;
        for batch in TableReader::<FeatureVectors>::open_bounded(&self.path, max_bytes)? {
            let batch = batch?;
            let items: Vec<(usize, &[f32])> = batch
                .iter()
                .enumerate()
                .map(|(i, r)| (row + i, r.features.as_slice()))
                .collect();
            row += batch.len();
            visit(&items)?;
        }
        Ok(())
    }
}

/// The `vector_sum` column of `path` when it has one: a row's sum must be `dim` finite
/// values, and the rows must be those of `keys` in the same order.
fn stored_sums(
    path: &Path,
    layout: VectorLayout,
    keys: &[(String, u32)],
) -> Result<Option<Vec<Vec<f64>>>> {
    let rows = match TableReader::<FeatureSums>::open(path, crate::READ_BATCH_ROWS) {
        Ok(reader) => reader.read_all()?.0,
        Err(Error::MissingColumn { column, .. }) if column == VECTOR_SUM => return Ok(None),
        Err(e) => return Err(e),
    };
    let bad = |row: usize, message: String| Error::Value {
        file: path.display().to_string(),
        column: VECTOR_SUM.into(),
        row,
        message,
    };
    if rows.len() != keys.len() {
        return Err(bad(
            rows.len().min(keys.len()),
            format!("{} sums for {} rows of vectors", rows.len(), keys.len()),
        ));
    }
    rows.into_iter()
        .zip(keys)
        .enumerate()
        .map(|(i, (r, (prompt_id, sample_idx)))| {
            if (&r.prompt_id, r.sample_idx) != (prompt_id, *sample_idx) {
                return Err(bad(i, format!("row of {} #{}", r.prompt_id, r.sample_idx)));
            }
            if r.vector_sum.len() != layout.dim {
                return Err(bad(
                    i,
                    format!(
                        "{} #{}: {} values for vectors of dimension {}",
                        r.prompt_id,
                        r.sample_idx,
                        r.vector_sum.len(),
                        layout.dim
                    ),
                ));
            }
            if let Some(j) = r.vector_sum.iter().position(|x| !x.is_finite()) {
                return Err(bad(
                    i,
                    format!(
                        "{} #{}: coordinate {j} is {}",
                        r.prompt_id, r.sample_idx, r.vector_sum[j]
                    ),
                ));
            }
            Ok(r.vector_sum)
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Each row's vector bytes when the file has the features writer's layout: the vector
/// column plain, uncompressed and without a dictionary, and an offset index. A page's
/// body then ends with its rows' values, each a 4-byte length and the bytes, so walking
/// back from the page's end finds every row; each length must be its row's `tokens x dim
/// x width` and the walk must stay inside the page. None when anything differs.
fn spans(file: &File, layout: VectorLayout, tokens: &[usize]) -> Option<Vec<Span>> {
    let meta = ParquetMetaDataReader::new()
        .with_offset_index_policy(PageIndexPolicy::Optional)
        .parse_and_finish(file)
        .ok()?;
    let row_bytes = layout.dim * layout.precision.width();
    let mut out = vec![Span { at: 0, len: 0 }; tokens.len()];
    let mut first = 0usize;
    for g in 0..meta.num_row_groups() {
        let group = meta.row_group(g);
        let rows = usize::try_from(group.num_rows()).ok()?;
        let col = group
            .columns()
            .iter()
            .position(|c| c.column_path().string() == "features")?;
        let chunk = group.column(col);
        let dictionary = chunk
            .encodings()
            .any(|e| matches!(e, Encoding::PLAIN_DICTIONARY | Encoding::RLE_DICTIONARY));
        if chunk.compression() != Compression::UNCOMPRESSED
            || dictionary
            || chunk.dictionary_page_offset().is_some()
        {
            return None;
        }
        let index = meta.page_index_for_row_group(g);
        let pages = index.page_locations(col)?;
        for (p, page) in pages.iter().enumerate() {
            let begin = u64::try_from(page.offset).ok()?;
            let mut pos = begin + u64::try_from(page.compressed_page_size).ok()?;
            let start = usize::try_from(page.first_row_index).ok()?;
            let end = match pages.get(p + 1) {
                Some(next) => usize::try_from(next.first_row_index).ok()?,
                None => rows,
            };
            for row in (start..end).rev() {
                let n = tokens.get(first + row)?.checked_mul(row_bytes)?;
                let at = pos.checked_sub(n as u64)?;
                let len_at = at.checked_sub(4).filter(|&x| x >= begin)?;
                let mut prefix = [0u8; 4];
                file.read_exact_at(&mut prefix, len_at).ok()?;
                if u32::from_le_bytes(prefix) as usize != n {
                    return None;
                }
                out[first + row] = Span { at, len: n };
                pos = len_at;
            }
        }
        first += rows;
    }
    (first == tokens.len()).then_some(out)
}
