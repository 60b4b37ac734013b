//! Why generation of a response ended (a column of rollouts and eval).

use super::column::{named_column, Named};
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
}

impl Named for FinishReason {
    const ALL: &'static [Self] = &[FinishReason::Stop, FinishReason::Length];

    fn as_str(self) -> &'static str {
        self.as_str()
    }
}

named_column!(FinishReason);
