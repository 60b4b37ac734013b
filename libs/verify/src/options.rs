//! How answers are read: the extraction options, the policies that name them, and the
//! limits on what is parsed.

/// Answers longer than this (after extraction) are never equal to anything.
pub const MAX_INPUT: usize = 2_000;
/// Numbers with more digits than this are not parsed.
pub const MAX_DIGITS: usize = 400;

/// Answer extraction policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtractOptions {
    /// Also accept "The answer is X" when there is no box.
    pub answer_is: bool,
    /// Also accept GSM8K's `#### X`.
    pub hashes: bool,
    /// Also accept the number the text ends with, or the final sentence's last math or
    /// number before a short, unhedged close.
    pub last_number: bool,
    /// Several boxes on the last line that has one are the answer together
    /// (`\boxed{1}` and `\boxed{-2}` -> `1, -2`).
    pub joined_boxes: bool,
}

/// The named extraction policies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Only the last complete `\boxed{}` counts (the training default: an answer merely
    /// mentioned earns nothing).
    #[default]
    Boxed,
    /// The last box, then an answer phrase ("The answer is", "Final Answer:",
    /// "**Answer:**", an `Answer` heading before math), then `####`, then the final
    /// sentence's number or math: for answers others wrote (`deltarl eval`,
    /// `deltarl verify`).
    Lenient,
}

/// One extraction fallback, added to a policy one by one (`score.extract_fallbacks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fallback {
    /// "The answer is 12", "Final Answer: 12", "**Answer:** 12".
    AnswerIs,
    /// GSM8K's `#### 12`.
    Hashes,
    /// The number the response ends with; else the final sentence's last math or
    /// number before a short, unhedged close ("So there are 12 apples left.").
    LastNumber,
}

impl ExtractOptions {
    /// These options with `f` on as well.
    pub fn with(mut self, f: Fallback) -> Self {
        match f {
            Fallback::AnswerIs => self.answer_is = true,
            Fallback::Hashes => self.hashes = true,
            Fallback::LastNumber => self.last_number = true,
        }
        self
    }
}

impl Policy {
    pub fn is_boxed(&self) -> bool {
        *self == Policy::Boxed
    }

    pub fn options(self) -> ExtractOptions {
        match self {
            Policy::Boxed => ExtractOptions::default(),
            Policy::Lenient => ExtractOptions {
                answer_is: true,
                hashes: true,
                last_number: true,
                joined_boxes: true,
            },
        }
    }
}
