//! `[rollout.vllm]`: how the stages that sample reach vLLM (the rollout, and the evaluation
//! when the rollout engine is vLLM).

use deltarl_schemas::skip::{is_true, is_zero_f64};
use serde::{Deserialize, Serialize};

/// `[rollout.vllm]`: how the stages that sample reach vLLM. None of it changes which samples
/// a seed draws, so only `extra_args` enters a stage's hash.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct VllmOptions {
    /// The Python of vLLM's virtual environment ("" = $DELTARL_VLLM_PYTHON, else
    /// ~/.cache/deltarl/vllm-venv/bin/python, which `make vllm` creates).
    pub python: String,
    /// Arguments added to the server's command line (e.g. ["--max-model-len", "22528"]);
    /// on a CPU `--enforce-eager` and `--gpu-memory-utilization 0.1` are added unless
    /// given here.
    pub extra_args: Vec<String>,
    /// Seconds to wait for the server to answer /health (0 = 600).
    pub start_timeout_s: u64,
    /// Requests in flight at once (0 = every prompt of the stage at once, one request of
    /// G samples each, so vLLM's scheduler batches as its offline `LLM.generate` does).
    pub concurrency: usize,
    /// A server already running ("" = start one); it must serve this iteration's policy
    /// folder, or the stage refuses.
    pub url: String,
    /// The port of the server started here (0 = a free one; with several processes each
    /// rank's server takes a free one).
    pub port: u16,
    /// Keep the server this process starts for its later rollouts: each later rollout
    /// loads the new policy into it in place, resets its prefix cache and checks the
    /// log-probs it serves for a probe sequence against the trainer's before any request
    /// (on CUDA it sleeps in between, freeing the device for training). false = a new
    /// server every rollout.
    #[serde(skip_serializing_if = "is_true")]
    pub keep_alive: bool,
    /// The largest difference between the served and the trainer's probe log-probs a
    /// reloaded server may show (0 = 1e-4 in float32, 5e-2 in bfloat16).
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub probe_tolerance: f64,
}

impl Default for VllmOptions {
    fn default() -> Self {
        VllmOptions {
            python: String::new(),
            extra_args: Vec::new(),
            start_timeout_s: 0,
            concurrency: 0,
            url: String::new(),
            port: 0,
            keep_alive: true,
            probe_tolerance: 0.0,
        }
    }
}

impl VllmOptions {
    pub fn is_default(&self) -> bool {
        *self == VllmOptions::default()
    }
}
