//! The eval stage's settings: everything it reads from the configuration. Their
//! serialisation is the stage's hash, so the field order and the fields skipped at their
//! defaults are part of every recorded run's identity.

use std::path::PathBuf;

use deltarl_code::CodeOptions;
use deltarl_model::Dtype;
use deltarl_schemas::skip::{is_one, is_zero};
use serde::Serialize;

use crate::{Draw, Request, Sampling};

/// The eval stage's settings.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// The training data source: held-out problems exist for the built-in tasks only.
    pub data_source: deltarl_data::Source,
    pub problems: usize,
    pub samples: u32,
    pub temperature: f64,
    #[serde(skip_serializing_if = "is_one")]
    pub top_p: f64,
    #[serde(skip_serializing_if = "is_zero")]
    pub top_k: usize,
    pub sampling: Sampling,
    pub dtype: Dtype,
    /// Benchmark files (their contents are inputs of the stage, hashed as such).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub benchmarks: Vec<String>,
    /// Wrap benchmark prompts in the policy's chat template, as training prompts are.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub chat_template: bool,
    /// How code problems run (only in the hash when set: math runs keep theirs).
    #[serde(skip_serializing_if = "CodeOptions::is_default")]
    pub code: CodeOptions,
}

impl Settings {
    /// How the stage draws its answers.
    pub fn draw(&self) -> Draw {
        Draw {
            samples: self.samples,
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
        }
    }

    /// What the stage asks of the policy of iteration `iter` (0 = the base).
    pub fn request(&self, iter: u32) -> Request {
        self.sampling.at(self.draw(), iter)
    }

    /// The benchmark files, as inputs of the stage.
    pub fn files(&self) -> Vec<PathBuf> {
        self.benchmarks.iter().map(PathBuf::from).collect()
    }
}
