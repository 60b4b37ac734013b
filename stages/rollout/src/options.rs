//! The rollout's TOML options (`[data]`, `[rollout]`, `[rollout.vllm]`): the application's
//! configuration embeds them as they are, and the stage hashes them as they are (less what
//! does not change samples, see [`crate::Settings`]).

use std::collections::BTreeMap;

use deltarl_schemas::skip::{is_true, is_zero, is_zero_f64};
use deltarl_schemas::{Engine, RewardKind};
use serde::{Deserialize, Serialize};

/// `[data]`: where the training prompts come from and how they are rendered and rewarded.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DataOptions {
    /// A built-in task of the tiny model — "tiny-arith" (compact solutions), "tiny-steps"
    /// (the same problems, solutions written out with connective phrases),
    /// "tiny-steps-varied" (each phrase in one of three wordings drawn at random),
    /// "tiny-code" — or "word-problems" (short English word problems for a pretrained
    /// model), or a JSONL / Parquet file of prompts (read once into a typed source).
    pub source: deltarl_data::Source,
    /// Number of generated training problems (the built-in datasets).
    pub train_size: usize,
    /// Prompt template; `{question}` is replaced by the problem.
    pub template: String,
    /// Wrap the rendered template as the user message of the model's chat template
    /// (`tokenizer_config.json`), as `apply_chat_template(add_generation_prompt=True)`.
    #[serde(default)]
    pub chat_template: bool,
    /// The reward of each record by its `data_source`, e.g. `{ apps = "code" }` (math |
    /// code). A record's own `reward_kind` field comes first; then this map; then verl's
    /// `ability` when it is math or code; then whether the record carries code tests; then
    /// `default_reward`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rewards: BTreeMap<String, RewardKind>,
    /// The reward of a record nothing else decides (math | code).
    #[serde(default, skip_serializing_if = "is_math")]
    pub default_reward: RewardKind,
}

fn is_math(k: &RewardKind) -> bool {
    *k == RewardKind::Math
}

/// `[rollout]`: how many responses are drawn an iteration, and how.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutOptions {
    /// Prompts drawn per iteration.
    pub prompts_per_iter: usize,
    /// Responses per prompt (G).
    pub samples_per_prompt: u32,
    /// Maximum response length in tokens.
    pub max_new_tokens: usize,
    /// Sampling temperature (0 = greedy).
    pub temperature: f64,
    /// Nucleus sampling mass (1 = off).
    pub top_p: f64,
    /// Top-k (0 = off).
    pub top_k: usize,
    /// Stop strings (besides EOS).
    pub stop: Vec<String>,
    /// Rows decoded together at most (our engine's slots: a finished row's slot goes to
    /// the next waiting sample at once).
    pub max_batch_rows: usize,
    /// KV-cache budget in token positions over all rows decoded together (0 = no limit):
    /// a session whose longest prompt has L tokens decodes at most kv_cache_tokens / (L +
    /// max_new_tokens) rows. Size it from device memory with `deltarl plan`.
    #[serde(default)]
    pub kv_cache_tokens: usize,
    /// Our engine decodes the iteration's samples in sessions of at most this many, in
    /// prompt order (0 = one session of every sample). Sessions are what processes share
    /// out under torchrun (session i to rank i mod N), so N processes need at least N
    /// sessions to all have work; which process runs a session changes no sample.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub session_rows: usize,
    /// Longer prompts keep their last this many tokens (left truncation, as the authors' code
    /// does; 0 = no limit).
    #[serde(default)]
    pub max_prompt_tokens: usize,
    /// native (our KV-cache engine: per-sample seeds, byte-identical reruns) | vllm (a vLLM
    /// server on this iteration's policy folder; see [rollout.vllm]).
    #[serde(default, skip_serializing_if = "Engine::is_native")]
    pub engine: Engine,
    /// The vLLM engine (engine = "vllm").
    #[serde(default, skip_serializing_if = "VllmOptions::is_default")]
    pub vllm: VllmOptions,
}

/// `[rollout.vllm]`: how the rollout stage reaches vLLM. None of it changes which samples
/// a seed draws, so only `extra_args` enters the rollout's stage hash.
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
