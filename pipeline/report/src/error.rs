//! Why a report cannot be made.

/// Errors of the report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("no runs given")]
    NoRuns,
    #[error("{0}")]
    RunName(String),
    #[error("run {0} is given twice (one run, one line of each table and curve)")]
    RepeatedRun(String),
    #[error("run directory {0} does not exist")]
    MissingRun(String),
    #[error("run directory {0} has no iterations yet (run `deltarl iterate` first)")]
    NoIterations(String),
    #[error("{file}: {message}")]
    Content { file: String, message: String },
    #[error("{file}: polars: {message}")]
    Polars { file: String, message: String },
    #[error(transparent)]
    Schema(#[from] deltarl_schemas::Error),
    #[error("plot: {0}")]
    Plot(#[from] deltarl_plot::PlotError),
}

pub type Result<T> = std::result::Result<T, ReportError>;
