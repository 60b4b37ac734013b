use std::path::PathBuf;

/// Everything that can go wrong reading or writing a deltarl table.
///
/// Each variant names the file (and the column or key) so that a user can find the
/// problem without a debugger.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{file}: cannot read: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: not a readable Parquet file (missing or truncated?): {message}")]
    Parquet { file: String, message: String },
    #[error("{file}: schema version {found:?}, this build reads version {expected:?} (key `deltarl.schema_version`)")]
    Version {
        file: String,
        found: Option<String>,
        expected: String,
    },
    #[error("{file}: missing column `{column}` (table {table})")]
    MissingColumn {
        file: String,
        table: String,
        column: String,
    },
    #[error("{file}: column `{column}` has type {found}, expected {expected}")]
    ColumnType {
        file: String,
        column: String,
        expected: String,
        found: String,
    },
    #[error("{file}: column `{column}` has a null at row {row}, but the column is required")]
    Null {
        file: String,
        column: String,
        row: usize,
    },
    #[error("{file}: column `{column}`, row {row}: {message}")]
    Value {
        file: String,
        column: String,
        row: usize,
        message: String,
    },
    #[error("{file}: stage {found:?}, expected {expected:?} (key `deltarl.stage`)")]
    Stage {
        file: String,
        found: Option<String>,
        expected: String,
    },
    #[error("cannot build table {table}: {message}")]
    Build { table: String, message: String },
    #[error("{}: {message}", path.display())]
    Manifest { path: PathBuf, message: String },
    #[error("summary of stage {stage}, iteration {iter}: {message}")]
    Summary {
        stage: String,
        iter: u32,
        message: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
