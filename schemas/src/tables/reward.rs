//! How a response is rewarded (a column of prompts, rollouts and scores), and why a
//! program failed (scores).

use super::column::{named_column, Named};
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
}

impl Named for RewardKind {
    const ALL: &'static [Self] = &RewardKind::ALL;

    /// Files written before the column existed hold math prompts.
    const NULL: Option<Self> = Some(RewardKind::Math);

    fn as_str(self) -> &'static str {
        self.as_str()
    }
}

named_column!(RewardKind);

impl Named for CodeOutcome {
    const ALL: &'static [Self] = &CodeOutcome::ALL;

    fn as_str(self) -> &'static str {
        self.as_str()
    }
}

named_column!(CodeOutcome);

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
    }
}
