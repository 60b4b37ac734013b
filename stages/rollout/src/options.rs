//! The rollout's TOML options (`[data]`, `[rollout]`, `[rollout.vllm]`): the application's
//! configuration embeds them as they are, and the stage hashes them as they are (less what
//! does not change samples, see [`crate::Settings`]).

use std::collections::BTreeMap;

use deltarl_schemas::skip::is_zero;
use deltarl_schemas::{Engine, RewardKind};
pub use deltarl_vllm::VllmOptions;
use serde::{Deserialize, Serialize};

/// `[data]`: where the training prompts come from and how they are rendered and rewarded.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DataOptions {
    /// A built-in task of the tiny model — "tiny-arith" (compact solutions), "tiny-steps"
    /// (the same problems, solutions written out with connective phrases),
    /// "tiny-steps-varied" (each phrase in one of three wordings drawn at random),
    /// "tiny-steps-filler" (tiny-steps with 32 reward-blind filler words of random letters
    /// after its answer), "tiny-steps-filler-80" (the same with 80), "tiny-code" — or
    /// "word-problems" (short English word problems for a pretrained model), or a JSONL /
    /// Parquet file of prompts (read once into a typed source).
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
