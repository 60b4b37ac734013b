//! The features stage's settings: everything it reads from the configuration, validated
//! once; and its [`Job`], which iteration and which share of the passes this process
//! computes. The settings' serialisation is the stage's hash, so the field order and the
//! fields skipped at their defaults are part of every recorded run's identity.

use deltarl_model::Dtype;
use deltarl_schemas::seed::seed_for;
use deltarl_schemas::{Precision, Shard, Stage};
use serde::Serialize;

use deltarl_teacher::{is_default_head_chunk, Layout};

/// Which per-token vector stands in for the token's gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Proxy {
    /// `(1 - p) h`: the gradient of log p w.r.t. the token's LM-head row (the authors'
    /// proxy).
    LmHeadRow,
    /// `h` alone.
    Hidden,
}

/// The features stage's settings.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// The run's seed: each iteration's projection draws from it
    /// ([`Settings::projection_seed`]).
    pub seed: u64,
    pub proxy: Proxy,
    /// Project to this many dimensions when the hidden size is larger (None = never).
    pub project_dim: Option<usize>,
    /// The rollout temperature (probabilities are measured at it).
    pub temperature: f64,
    /// Responses per forward pass: memory is bounded by the chunk, not the batch.
    pub chunk_rows: usize,
    /// And at most this many tokens (prompt + response) per forward pass (None = no limit).
    pub chunk_tokens: Option<usize>,
    /// Most bytes of one `[tokens, vocabulary]` f32 buffer of the LM head
    /// ([`deltarl_teacher::head_chunk_tokens`]; 0 = the whole pass).
    #[serde(skip_serializing_if = "is_default_head_chunk")]
    pub head_chunk_bytes: u64,
    /// How a pass lays out its rows (padded, or each prompt once).
    #[serde(skip_serializing_if = "Layout::is_padded")]
    pub layout: Layout,
    /// The policy's precision. A bf16 model's vectors are stored at its precision: each
    /// value rounded to bf16 and written so it costs 2 bytes on disk (`deltarl_schemas`'s
    /// byte-stream split), the columns still f32.
    pub dtype: Dtype,
}

/// What one process of one run computes, beside the settings: not settings of the file,
/// so not hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// The iteration computed (it seeds the projection): part of the stage's inputs.
    pub iter: u32,
    /// The passes this process computes: which process does what changes no row.
    pub shard: Shard,
}

impl Job {
    /// Iteration `iter`, every pass in this process.
    pub fn whole(iter: u32) -> Job {
        Job {
            iter,
            shard: Shard::WHOLE,
        }
    }
}

impl Settings {
    /// The seed of iteration `iter`'s Gaussian projection.
    pub fn projection_seed(&self, iter: u32) -> u64 {
        seed_for(self.seed, iter, Stage::Features.name(), "projection", 0)
    }

    /// Whether the vectors are stored at bf16 precision (a bf16 model's).
    pub fn bf16_vectors(&self) -> bool {
        self.precision() == Precision::Bf16
    }

    /// The precision the vectors are rounded to and stored at: the model's own.
    pub fn precision(&self) -> Precision {
        match self.dtype {
            Dtype::Bf16 => Precision::Bf16,
            Dtype::F32 => Precision::F32,
        }
    }

    /// What features.parquet of iteration `iter` records as its `settings`, in the layout
    /// the files have always had.
    pub(crate) fn recorded(&self, iter: u32) -> Recorded {
        Recorded {
            proxy: self.proxy,
            project_dim: self.project_dim,
            projection_seed: self.projection_seed(iter),
            temperature: self.temperature,
            chunk_rows: self.chunk_rows,
            chunk_tokens: self.chunk_tokens,
            head_chunk_bytes: self.head_chunk_bytes,
            layout: self.layout,
            bf16_vectors: self.bf16_vectors(),
        }
    }
}

/// The serialised form of [`Settings::recorded`] (a layout, not a second set of settings).
#[derive(Serialize)]
pub(crate) struct Recorded {
    proxy: Proxy,
    project_dim: Option<usize>,
    projection_seed: u64,
    temperature: f64,
    chunk_rows: usize,
    chunk_tokens: Option<usize>,
    #[serde(skip_serializing_if = "is_default_head_chunk")]
    head_chunk_bytes: u64,
    #[serde(skip_serializing_if = "Layout::is_padded")]
    layout: Layout,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    bf16_vectors: bool,
}
