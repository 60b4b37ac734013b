//! `tokenizer.json` through the `tokenizers` crate.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// A Hugging Face tokenizer plus the path it came from (for error messages and saving).
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    pub path: PathBuf,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .finish()
    }
}

impl Tokenizer {
    pub fn from_file(path: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| Error::Tokenizer {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        // A tokenizer without tokens encodes every prompt to nothing, which the engine
        // would report much later as an "empty prompt" naming no file.
        if inner.get_vocab_size(true) == 0 {
            return Err(Error::Tokenizer {
                path: path.to_path_buf(),
                message: "its vocabulary is empty (model.vocab and added_tokens)".into(),
            });
        }
        Ok(Tokenizer {
            inner,
            path: path.to_path_buf(),
        })
    }

    /// Number of tokens including added/special ones.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Encodes text without adding special tokens (prompts are templated explicitly).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.inner
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::Tokenizer {
                path: self.path.clone(),
                message: format!("cannot encode {:?}: {e}", truncate(text)),
            })
    }

    /// Decodes ids, skipping special tokens. An id the tokenizer has no token for (a
    /// model's embedding padded past its tokenizer, as Qwen's are) decodes to nothing, as in
    /// transformers; a decoder's failure is an error naming the file.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, true).map_err(|e| Error::Tokenizer {
            path: self.path.clone(),
            message: format!("cannot decode {} token ids: {e}", ids.len()),
        })
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(60).collect()
}
