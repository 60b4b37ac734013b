//! The TOML options: every field documented, unknown keys rejected. What each key means to
//! a stage is decided once, in the stage's settings (the stage layer above this one). The
//! tables a single stage reads whole are that stage crate's own and are re-exported here:
//! `[data]`, `[rollout]` and `[rollout.vllm]` (deltarl-rollout), `[warmstart]` and
//! `[model.tiny]` (deltarl-warmstart), `[score.code]` (deltarl-code).

use serde::{Deserialize, Serialize};

use deltarl_coeffs::Scope;
use deltarl_features::Proxy;
use deltarl_schemas::Persist;

use super::by_algorithm::ByAlgorithm;
use super::eval::EvalOptions;
use deltarl_schemas::skip::{is_zero_f64, is_zero_u32};
pub use deltarl_warmstart::WarmstartOptions;

pub use super::fipo::FipoOptions;
pub use super::ktae::KtaeOptions;
pub use super::update::{SurrogateKind, UpdateOptions};
pub use deltarl_code::CodeOptions;
pub use deltarl_rollout::{DataOptions, RolloutOptions, VllmOptions};

/// The policy-gradient variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    Grpo,
    Dapo,
    Drgrpo,
    Delta,
}

impl Algorithm {
    /// The name in configs, on the command line and in run names.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Grpo => "grpo",
            Algorithm::Dapo => "dapo",
            Algorithm::Drgrpo => "drgrpo",
            Algorithm::Delta => "delta",
        }
    }
}

pub use deltarl_score::AdvantageKind;

/// Coefficient estimator name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EstimatorKind {
    Uniform,
    TopEntropy,
    Delta,
    /// A control on built-in tasks whose connective phrases are known.
    OracleTokens,
    /// The first-error oracle, a positive control on the built-in arithmetic tasks.
    OraclePrefix,
    /// The filler oracle of the dose-response test (`tiny-steps-filler`, `tiny-steps-filler-80`).
    OracleFiller,
    /// Key-token advantage estimation (`[coeffs.ktae]`).
    Ktae,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Auto,
    Cpu,
    Cuda,
}

/// Top-level options.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// Run seed: every random draw derives from it. 0 to 9223372036854775807 (the largest
    /// TOML integer).
    pub seed: u64,
    /// grpo | dapo | drgrpo | delta.
    pub algorithm: Algorithm,
    pub model: ModelOptions,
    pub warmstart: WarmstartOptions,
    pub data: DataOptions,
    pub rollout: RolloutOptions,
    pub score: ScoreOptions,
    pub features: FeatureOptions,
    pub coeffs: CoeffOptions,
    pub update: UpdateOptions,
    pub eval: EvalOptions,
    /// How policies are written.
    #[serde(default, skip_serializing_if = "CheckpointOptions::is_default")]
    pub checkpoint: CheckpointOptions,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointOptions {
    /// Largest weights file in MB (10^6 bytes): bigger models are written as shards with
    /// `model.safetensors.index.json`, as transformers does (5000 = its 5 GB default).
    pub shard_mb: u64,
    /// Keep the weights and optimizer state of only the last this many iterations (0 =
    /// all); older ones are deleted once an iteration completes, their hashes kept so the
    /// run stays complete (`runs/<run>/pruned.json`).
    pub keep_last: u32,
    /// And always keep every this-many-th iteration's (0 = none beyond keep_last).
    pub save_every: u32,
    /// Keep the features file (features.parquet, an iteration's bulk: ~84 GB at the 8B
    /// setting in bf16) of only the last this many iterations (0 = all). Older ones are
    /// deleted once an iteration completes, their hashes kept with the pruned weights', so
    /// the run stays complete; rerunning coeffs or update of such an iteration is refused.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub keep_features: u32,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        CheckpointOptions {
            shard_mb: 5000,
            keep_last: 0,
            save_every: 0,
            keep_features: 0,
        }
    }
}

impl CheckpointOptions {
    pub fn is_default(&self) -> bool {
        *self == CheckpointOptions::default()
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelOptions {
    /// "tiny" (built and warm-started here) or a Hugging Face model folder (a leading `~/`
    /// is the home folder, e.g. `~/.cache/deltarl/models/SmolLM2-135M-Instruct`).
    pub source: String,
    /// f32 | bf16.
    pub dtype: deltarl_model::Dtype,
    /// auto (CUDA when present) | cpu | cuda.
    pub device: DeviceKind,
    /// CPU threads for libtorch and rayon (0 = all cores).
    pub threads: usize,
    /// Shape of the tiny model (used when source = "tiny").
    pub tiny: deltarl_model::Shape,
    /// Most MB (10^6 bytes) of one `[tokens, vocabulary]` f32 buffer of the LM head in the
    /// features and update passes: a pass with more response tokens computes the head
    /// over chunks of tokens, the backward recomputing each chunk, so no buffer of the
    /// whole pass exists (0 = always the whole pass). Results equal the whole pass's to
    /// round-off (the head weight's gradient is summed in another order).
    #[serde(
        default = "default_head_chunk_mb",
        skip_serializing_if = "is_default_head_chunk_mb"
    )]
    pub head_chunk_mb: u64,
    /// How the features and update passes lay out their rows: "padded" (each row's prompt
    /// and response, right-padded) or "shared-prompt" (the samples of one prompt compute
    /// the prompt once and attend to its keys: G samples of a P-token prompt cost P + G x R
    /// positions instead of G x (P + R)). Same results to round-off; shared-prompt needs
    /// `update.activation_checkpointing = false`.
    #[serde(default, skip_serializing_if = "deltarl_teacher::Layout::is_padded")]
    pub layout: deltarl_teacher::Layout,
}

fn default_head_chunk_mb() -> u64 {
    deltarl_teacher::DEFAULT_HEAD_CHUNK_BYTES / 1_000_000
}

fn is_default_head_chunk_mb(mb: &u64) -> bool {
    *mb == default_head_chunk_mb()
}

impl ModelOptions {
    /// The model folder `source` names, a leading `~/` read as `$HOME/` (configurations
    /// that name the model `make smollm2` converts hold on every machine).
    pub fn folder(&self) -> std::path::PathBuf {
        match (self.source.strip_prefix("~/"), std::env::var_os("HOME")) {
            (Some(rest), Some(home)) => std::path::Path::new(&home).join(rest),
            _ => std::path::PathBuf::from(&self.source),
        }
    }

    /// The head chunk budget in bytes.
    pub fn head_chunk_bytes(&self) -> u64 {
        self.head_chunk_mb.saturating_mul(1_000_000)
    }
}

/// Who generates the rollouts (recorded in the rollout's summary too).
pub use deltarl_schemas::Engine;

/// A key where 0 means "off" (no limit, no projection, a free port), as an `Option`.
pub fn zero_is_off<T: Default + PartialEq>(value: T) -> Option<T> {
    (value != T::default()).then_some(value)
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreOptions {
    /// grpo | drgrpo (default from algorithm).
    #[serde(default)]
    pub advantage: ByAlgorithm<AdvantageKind>,
    /// DAPO overlong penalty (default from algorithm).
    #[serde(default)]
    pub overlong_penalty: ByAlgorithm<bool>,
    /// Penalty buffer Lbuf in tokens.
    pub overlong_buffer: usize,
    /// Penalty factor.
    pub overlong_factor: f64,
    /// Drop groups whose rewards are all equal (DAPO dynamic sampling).
    pub dynamic_sampling: bool,
    /// Answer extraction for rewards: boxed (only the last \boxed{} counts; the default) |
    /// lenient (then "The answer is" / "Final Answer:" phrases, `####`, the final
    /// sentence's number or math).
    #[serde(default)]
    pub extract: deltarl_verify::Policy,
    /// Single fallbacks added to that policy: answer-is, hashes, last-number.
    #[serde(default)]
    pub extract_fallbacks: Vec<deltarl_verify::Fallback>,
    /// Code rewards (prompts whose reward is code).
    #[serde(default, skip_serializing_if = "CodeOptions::is_default")]
    pub code: CodeOptions,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureOptions {
    /// lm-head-row ((1 - p) h, reference) | hidden.
    pub proxy: Proxy,
    /// Project to this many dimensions when the hidden size is larger (0 = never).
    pub project_dim: usize,
    /// Responses per forward pass.
    pub chunk_rows: usize,
    /// And at most this many tokens (prompt + response) per forward pass (0 = no limit).
    #[serde(default)]
    pub chunk_tokens: usize,
    /// What features.parquet keeps of the vectors: full (every vector: any estimator can
    /// rerun from the file) | projected (a seeded sketch of `persist_dim` dimensions, for
    /// inspection) | none (the per-token scalars only). Under projected and none the
    /// features stage holds the iteration's vectors in memory and estimates the
    /// coefficients there; the coeffs stage takes them over.
    #[serde(default, skip_serializing_if = "Persist::is_full")]
    pub persist: Persist,
    /// The sketch's dimension under `persist = "projected"` (below the vectors' own).
    #[serde(
        default = "default_persist_dim",
        skip_serializing_if = "is_default_persist_dim"
    )]
    pub persist_dim: usize,
}

/// The sketch's dimension unless a configuration says otherwise.
pub const DEFAULT_PERSIST_DIM: usize = 256;

fn default_persist_dim() -> usize {
    DEFAULT_PERSIST_DIM
}

fn is_default_persist_dim(k: &usize) -> bool {
    *k == DEFAULT_PERSIST_DIM
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CoeffOptions {
    /// uniform | top-entropy | delta | oracle-tokens | oracle-prefix | oracle-filler | ktae
    /// (default from algorithm). `oracle-tokens` needs a built-in task whose connective
    /// phrases are labelled (`tiny-steps`, `tiny-steps-varied`, `tiny-steps-filler[-80]`):
    /// `oracle_value` on their tokens, 1 elsewhere. `oracle-prefix` needs a built-in
    /// arithmetic task (`tiny-arith`, `tiny-steps`, `tiny-steps-varied`): `oracle_value` on
    /// the tokens of a negative-advantage response before its first error, 1 elsewhere.
    /// `oracle-filler` needs `tiny-steps-filler` or `tiny-steps-filler-80` (or `tiny-steps`,
    /// their dose 0): `oracle_value` on the tokens of its filler (the words after the graded
    /// answer), 1 elsewhere.
    /// `ktae` adds to each token's advantage a score of how its token id goes with right
    /// answers in its group (`[coeffs.ktae]`).
    #[serde(default)]
    pub estimator: ByAlgorithm<EstimatorKind>,
    /// DelTA refinement passes K.
    pub refine_steps: u32,
    /// Smallest coefficient before normalisation.
    pub lam_min: f64,
    /// Largest coefficient before normalisation.
    pub lam_max: f64,
    /// batch | group.
    pub scope: Scope,
    /// Kept fraction of the top-entropy estimator.
    pub top_entropy_keep: f64,
    /// The oracles' coefficient on their labelled tokens (0 = their gradient removed).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub oracle_value: f64,
    /// KTAE's hyper-parameters.
    #[serde(default, skip_serializing_if = "KtaeOptions::is_default")]
    pub ktae: KtaeOptions,
}
