//! The vLLM engine's errors.

/// Errors of the vLLM engine; each names the server, the file or the prompt.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Setup(String),
    #[error("vLLM server {url}: {message}")]
    Server { url: String, message: String },
    #[error("vLLM request for prompt {prompt}: {message}")]
    Request { prompt: usize, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
