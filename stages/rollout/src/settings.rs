//! The rollout stage's settings: everything it reads from the configuration. Their
//! serialisation is the stage's hash.

use std::path::PathBuf;

use deltarl_model::Dtype;
use serde::Serialize;

use crate::options::{DataOptions, RolloutOptions, VllmOptions};

/// Everything the rollout reads from the configuration: the `[data]` and `[rollout]` tables
/// themselves (where prompts come from, how they are drawn and templated, how vLLM is
/// reached); the sampler draws the prompts it is given with a [`crate::Plan`] built from
/// these each iteration.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub seed: u64,
    pub data: DataOptions,
    /// With `vllm` reduced to what changes samples (its extra server arguments).
    pub rollout: RolloutOptions,
    pub dtype: Dtype,
    /// How to reach vLLM (interpreter, port, timeout, concurrency, url, whether the server
    /// is kept, the probe's tolerance): not hashed, the samples do not depend on them.
    #[serde(skip)]
    pub vllm: VllmOptions,
}

impl Settings {
    /// The prompt file, when prompts come from one.
    pub fn data_file(&self) -> Option<PathBuf> {
        self.data.source.file().map(std::path::Path::to_path_buf)
    }
}
