//! `[score.code]`: how the sandbox runs the programs of code prompts (the configuration's
//! options, kept with the grader they configure), and the grader's settings resolved from
//! them.

use std::path::PathBuf;

use crate::PassReward;
use serde::{Deserialize, Serialize};

/// Code rewards: how the sandbox runs the programs of code prompts.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CodeOptions {
    /// all (1 when every case passes; cases stop at the first failure) | fraction (the
    /// fraction of cases passed; every case runs).
    pub reward: PassReward,
    /// Programs run at once, each in its own sandbox.
    pub workers: usize,
    /// Seconds of one test case.
    pub case_timeout_s: f64,
    /// Seconds of one response's whole run.
    pub run_timeout_s: f64,
    /// Address space of each process of a program, in MiB.
    pub memory_mb: u64,
    /// The Python that runs programs; it must be under /usr (what the sandbox mounts).
    pub python: PathBuf,
}

impl Default for CodeOptions {
    fn default() -> Self {
        CodeOptions {
            reward: PassReward::All,
            workers: 4,
            case_timeout_s: 4.0,
            run_timeout_s: 30.0,
            memory_mb: 4096,
            python: PathBuf::from("/usr/bin/python3"),
        }
    }
}

impl CodeOptions {
    pub fn is_default(&self) -> bool {
        *self == CodeOptions::default()
    }

    /// The grader's settings; the error names the key whose value cannot be used.
    pub fn settings(&self) -> Result<crate::Settings, String> {
        let bad = |key: &str, value: String, expected: &str| {
            format!("config key `score.code.{key}` = {value}: expected {expected}")
        };
        let secs = |key: &str, v: f64| {
            (v.is_finite() && v > 0.0 && v <= 3600.0)
                .then(|| std::time::Duration::from_secs_f64(v))
                .ok_or_else(|| bad(key, v.to_string(), "seconds in (0, 3600]"))
        };
        if self.workers == 0 || self.workers > deltarl_sandbox::SLOTS {
            let range = format!("1 to {}", deltarl_sandbox::SLOTS);
            return Err(bad("workers", self.workers.to_string(), &range));
        }
        if self.memory_mb < 64 {
            return Err(bad("memory_mb", self.memory_mb.to_string(), "at least 64"));
        }
        Ok(crate::Settings {
            reward: self.reward,
            case_timeout: secs("case_timeout_s", self.case_timeout_s)?,
            run_timeout: secs("run_timeout_s", self.run_timeout_s)?,
            memory_bytes: self.memory_mb << 20,
            python: self.python.clone(),
            workers: self.workers,
        })
    }
}
