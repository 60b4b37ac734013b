use std::path::PathBuf;

/// Errors of model loading, saving and generation. Each names the file, tensor or value.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("{}: tensor `{name}`: {message}", path.display())]
    Tensor {
        path: PathBuf,
        name: String,
        message: String,
    },
    #[error("model config: {0}")]
    Config(String),
    #[error("tokenizer {}: {message}", path.display())]
    Tokenizer { path: PathBuf, message: String },
    #[error("generation: {0}")]
    Generate(String),
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    /// A file write (the error names the file).
    #[error(transparent)]
    Io(#[from] deltarl_schemas::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
