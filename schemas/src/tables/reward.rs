//! How a response is rewarded (a column of prompts, rollouts and scores), and why a
//! program failed (scores).

use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Which reward grades a prompt's responses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RewardKind {
    /// The final answer against the gold answer (the math verifier).
    #[default]
    Math,
    /// The response's program run against the prompt's tests in the sandbox; the gold
    /// column holds the tests.
    Code,
}

impl RewardKind {
    pub const ALL: [RewardKind; 2] = [RewardKind::Math, RewardKind::Code];

    pub fn as_str(self) -> &'static str {
        match self {
            RewardKind::Math => "math",
            RewardKind::Code => "code",
        }
    }

    /// The kind a name (`math`, `code`) means, or `None`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// A column value: null means math (files written before the column existed).
    pub(crate) fn parse(s: Option<&str>, file: &str, row: usize) -> Result<Self> {
        match s {
            None => Ok(RewardKind::Math),
            Some(name) => Self::from_name(name).ok_or_else(|| Error::Value {
                file: file.to_string(),
                column: "reward_kind".into(),
                row,
                message: format!("unknown reward kind {name:?} (expected math or code)"),
            }),
        }
    }
}

/// How a response's program did against its tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CodeOutcome {
    /// Every case passed.
    Passed,
    /// A case's output or assertion was wrong.
    WrongAnswer,
    /// The program raised (a syntax error included) or exited non-zero.
    RuntimeError,
    /// A case, or the whole run, ran out of time.
    TimeLimit,
    /// The program ran out of its memory.
    MemoryLimit,
    /// The response has no program to run.
    NoProgram,
    /// The sandbox itself failed: the program's fault it was not.
    SandboxFailure,
}

impl CodeOutcome {
    pub const ALL: [CodeOutcome; 7] = [
        CodeOutcome::Passed,
        CodeOutcome::WrongAnswer,
        CodeOutcome::RuntimeError,
        CodeOutcome::TimeLimit,
        CodeOutcome::MemoryLimit,
        CodeOutcome::NoProgram,
        CodeOutcome::SandboxFailure,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CodeOutcome::Passed => "passed",
            CodeOutcome::WrongAnswer => "wrong_answer",
            CodeOutcome::RuntimeError => "runtime_error",
            CodeOutcome::TimeLimit => "time_limit",
            CodeOutcome::MemoryLimit => "memory_limit",
            CodeOutcome::NoProgram => "no_program",
            CodeOutcome::SandboxFailure => "sandbox_failure",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    pub(crate) fn parse(s: Option<&str>, file: &str, row: usize) -> Result<Option<Self>> {
        s.map(|name| {
            Self::from_name(name).ok_or_else(|| Error::Value {
                file: file.to_string(),
                column: "outcome".into(),
                row,
                message: format!("unknown code outcome {name:?}"),
            })
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_serde() {
        for k in RewardKind::ALL {
            assert_eq!(RewardKind::from_name(k.as_str()), Some(k));
            assert_eq!(
                serde_json::to_string(&k).unwrap(),
                format!("\"{}\"", k.as_str())
            );
        }
        for o in CodeOutcome::ALL {
            assert_eq!(CodeOutcome::from_name(o.as_str()), Some(o));
            assert_eq!(
                serde_json::to_string(&o).unwrap(),
                format!("\"{}\"", o.as_str())
            );
        }
        assert_eq!(RewardKind::parse(None, "f", 0).unwrap(), RewardKind::Math);
        let err = RewardKind::parse(Some("chess"), "f.parquet", 3)
            .unwrap_err()
            .to_string();
        assert!(err.contains("f.parquet") && err.contains("chess"), "{err}");
    }
}
