//! The update stage's settings: everything it reads from the configuration, validated once.
//! Their serialisation is the stage's hash, so the field order and the fields skipped at
//! their defaults are part of every recorded run's identity.

use deltarl_model::Dtype;
use deltarl_optim::AdamWSettings;
use deltarl_schemas::seed::seed_for;
use deltarl_schemas::Stage;
use serde::{Deserialize, Serialize};

use crate::LossSettings;

/// AdamW's moment decay rates and epsilon (the authors' values, not configurable).
const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const ADAM_EPS: f64 = 1e-8;

/// The update stage's settings.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// The run's seed: each iteration's mini-batch shuffle draws from it
    /// ([`Settings::shuffle_seed`]).
    pub seed: u64,
    /// Old log-probs and the mismatch correction.
    pub join: JoinSettings,
    pub loss: LossSettings,
    /// Optimizer steps per iteration (the batch is split into this many mini-batches of
    /// whole prompt groups).
    pub optimizer_steps: usize,
    /// Responses per forward/backward pass (gradient accumulation inside a mini-batch).
    pub micro_batch_rows: usize,
    /// And at most this many tokens (prompt + response) per pass (None = no limit).
    pub micro_batch_tokens: Option<usize>,
    /// Recompute each decoder layer's activations in the backward pass instead of keeping
    /// them (see `deltarl_model::Checkpointed`): same gradients, less memory, one more
    /// forward of the blocks.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub activation_checkpointing: bool,
    /// Linear warm-up length in optimizer steps (counted over the whole run).
    pub warmup_steps: u64,
    pub lr: f64,
    /// AdamW's decoupled weight decay.
    pub weight_decay: f64,
    /// Gradient clipping by global norm (0 = off).
    pub grad_clip: f64,
    /// The rollout temperature (log-probs are measured at it, like the old ones).
    pub temperature: f64,
    /// Most bytes of one `[tokens, vocabulary]` f32 buffer of the LM head: longer passes
    /// run the head in chunks (`deltarl_teacher::ChunkedHead`; 0 = the whole pass).
    #[serde(skip_serializing_if = "deltarl_teacher::is_default_head_chunk")]
    pub head_chunk_bytes: u64,
    /// How a pass lays out its rows (padded, or each prompt once); with activation
    /// checkpointing, padded only.
    #[serde(skip_serializing_if = "deltarl_teacher::Layout::is_padded")]
    pub layout: deltarl_teacher::Layout,
    pub dtype: Dtype,
    /// What the processes divide among themselves (ZeRO-1, ZeRO-2): how the step is
    /// computed, not what it is, so not hashed (see `deltarl_optim::Sharding`).
    #[serde(skip)]
    pub sharding: deltarl_optim::Sharding,
    /// Largest weights file written, in bytes.
    #[serde(skip_serializing_if = "is_default_shard")]
    pub shard_bytes: u64,
}

fn is_default_shard(b: &u64) -> bool {
    *b == deltarl_model::DEFAULT_SHARD_BYTES
}

impl Settings {
    /// The optimizer's settings.
    pub fn adamw(&self) -> AdamWSettings {
        AdamWSettings {
            beta1: BETA1,
            beta2: BETA2,
            eps: ADAM_EPS,
            weight_decay: self.weight_decay,
        }
    }

    /// The seed of iteration `iter`'s mini-batch shuffle.
    pub fn shuffle_seed(&self, iter: u32) -> u64 {
        seed_for(self.seed, iter, Stage::Update.name(), "", 0)
    }

    /// What update.parquet records as its `settings`: the training part of these settings
    /// and the iteration's shuffle seed, in the layout the files have always had.
    pub(crate) fn recorded(&self, iter: u32) -> Recorded<'_> {
        Recorded {
            loss: &self.loss,
            optimizer_steps: self.optimizer_steps,
            micro_batch_rows: self.micro_batch_rows,
            micro_batch_tokens: self.micro_batch_tokens,
            activation_checkpointing: self.activation_checkpointing,
            warmup_steps: self.warmup_steps,
            lr: self.lr,
            grad_clip: self.grad_clip,
            head_chunk_bytes: self.head_chunk_bytes,
            layout: self.layout,
            temperature: self.temperature,
            seed: self.shuffle_seed(iter),
        }
    }
}

/// The serialised form of [`Settings::recorded`] (a layout, not a second set of settings).
#[derive(Serialize)]
pub(crate) struct Recorded<'a> {
    loss: &'a LossSettings,
    optimizer_steps: usize,
    micro_batch_rows: usize,
    micro_batch_tokens: Option<usize>,
    activation_checkpointing: bool,
    warmup_steps: u64,
    lr: f64,
    grad_clip: f64,
    #[serde(skip_serializing_if = "deltarl_teacher::is_default_head_chunk")]
    head_chunk_bytes: u64,
    #[serde(skip_serializing_if = "deltarl_teacher::Layout::is_padded")]
    layout: deltarl_teacher::Layout,
    temperature: f64,
    seed: u64,
}

/// Which log-probs stand for the old policy in the ratio.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OldLogprobs {
    /// The training engine's teacher-forced pass of the pre-update policy (the features
    /// pass): the authors' choice, and the only right one with another sampler.
    #[default]
    Recompute,
    /// The sampler's own log-probs.
    Rollout,
}

/// How the rows are built: the old log-probs and the optional truncated importance
/// sampling (TIS) correction of the rollout/training mismatch.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct JoinSettings {
    pub old_logprobs: OldLogprobs,
    /// Each token's policy-gradient term is weighted by `min(pi_old / pi_rollout, cap)`
    /// (None = off).
    pub tis_cap: Option<f64>,
}
