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
    /// A response's vectors hold a value the held precision cannot keep exactly.
    #[error("the vectors of {key} at {precision}: {problem}", key = deltarl_schemas::ResponseKey { prompt_id, sample_idx: *sample_idx })]
    Vectors {
        prompt_id: String,
        sample_idx: u32,
        precision: deltarl_schemas::Precision,
        problem: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
