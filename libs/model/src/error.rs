use std::path::{Path, PathBuf};

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
    /// A request the engine cannot serve; `request` indexes the caller's requests.
    #[error("generation: request {request}: {problem}")]
    Request {
        request: usize,
        problem: RequestProblem,
    },
    /// Row `row` of a decoding step's logits is NaN or +inf (the engine maps the row to its
    /// request).
    #[error("generation: row {row}: the model's logits are not finite")]
    NonFiniteLogits { row: usize },
    #[error(transparent)]
    Torch(#[from] tch::TchError),
    /// A file write (the error names the file).
    #[error(transparent)]
    Io(#[from] deltarl_schemas::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error about a file as a whole (its header, its layout, its contents).
    pub(crate) fn file(path: &Path, message: impl Into<String>) -> Error {
        Error::File {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }
}

/// Why a generation request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestProblem {
    #[error("empty prompt")]
    EmptyPrompt,
    #[error(
        "prompt of {prompt} tokens + max_new_tokens {max_new_tokens} exceeds the context of \
         {context}"
    )]
    TooLong {
        prompt: usize,
        max_new_tokens: usize,
        context: usize,
    },
    #[error(
        "one response needs {} cache positions (prompt of {prompt} + max_new_tokens \
         {max_new_tokens}), more than the KV-cache budget of {budget} \
         (rollout.kv_cache_tokens)",
        prompt + max_new_tokens
    )]
    OverCacheBudget {
        prompt: usize,
        max_new_tokens: usize,
        budget: usize,
    },
    #[error("the model's logits are not finite at step {step}")]
    NonFiniteLogits { step: usize },
}
