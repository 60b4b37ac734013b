/// Errors of the coefficient estimators and their Parquet shell.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid coefficient settings: {0}")]
    Setting(String),
    #[error("invalid coefficient input: {0}")]
    Input(String),
    #[error("exchanging results among processes: {0}")]
    Exchange(String),
    #[error(transparent)]
    Table(#[from] deltarl_schemas::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
