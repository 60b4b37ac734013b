//! Why generation of a response ended (a column of rollouts and eval).

use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Why generation of a response ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// Stopped on the end-of-sequence token or a stop string.
    Stop,
    /// Hit the maximum number of new tokens.
    Length,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }

    pub(crate) fn parse(s: &str, file: &str, row: usize) -> Result<Self> {
        match s {
            "stop" => Ok(FinishReason::Stop),
            "length" => Ok(FinishReason::Length),
            other => Err(Error::Value {
                file: file.to_string(),
                column: "finish_reason".into(),
                row,
                message: format!("unknown finish reason {other:?} (expected stop or length)"),
            }),
        }
    }
}
