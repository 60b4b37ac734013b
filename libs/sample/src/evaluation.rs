//! How evaluation samples: the configured part ([`Sampling`], hashed into the stages that
//! evaluate) and what one evaluation asks of a policy ([`Request`]).

use deltarl_verify::{ExtractOptions, Fallback, Policy};
use serde::Serialize;

/// How held-out answers are sampled: the rollout's prompt and length limits. The eval
/// stage and the warm start (which grades its base) both hash it.
#[derive(Clone, Debug, Serialize)]
pub struct Sampling {
    pub seed: u64,
    pub template: String,
    pub max_new_tokens: usize,
    pub stop: Vec<String>,
    pub max_batch_rows: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cache_tokens: Option<usize>,
    /// Samples decoded in sessions of at most this many (None = one session): the rollout's
    /// `session_rows`, which is what processes share out, so that N processes evaluate with
    /// the very batches one process does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_rows: Option<usize>,
    /// How answers are extracted for grading: the training rewards' policy
    /// (`score.extract`) and its single fallbacks (`score.extract_fallbacks`), so that
    /// held-out accuracy reads answers exactly as the rewards do. Left out of the hash at
    /// their defaults (boxed, none), which every configuration had before they were here.
    #[serde(skip_serializing_if = "Policy::is_boxed")]
    pub extract: Policy,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extract_fallbacks: Vec<Fallback>,
}

/// How many answers a problem gets and how each token is drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Draw {
    pub samples: u32,
    /// 0 = greedy.
    pub temperature: f64,
    /// Nucleus sampling (1 = off).
    pub top_p: f64,
    /// The k most probable tokens only (0 = off).
    pub top_k: usize,
}

impl Draw {
    /// `samples` answers at `temperature` from the whole distribution.
    pub fn plain(samples: u32, temperature: f64) -> Self {
        Draw {
            samples,
            temperature,
            top_p: 1.0,
            top_k: 0,
        }
    }
}

impl Sampling {
    /// The verifier's extraction: the policy with the fallbacks added (as the score stage
    /// forms it).
    pub fn extract_options(&self) -> ExtractOptions {
        self.extract_fallbacks
            .iter()
            .fold(self.extract.options(), |o, &f| o.with(f))
    }

    /// The request for answers drawn as `draw` says with the policy of iteration `iter`
    /// (0 = the base).
    pub fn at(&self, draw: Draw, iter: u32) -> Request {
        Request {
            template: self.template.clone(),
            samples: draw.samples,
            temperature: draw.temperature,
            top_p: draw.top_p,
            top_k: draw.top_k,
            max_new_tokens: self.max_new_tokens,
            stop: self.stop.clone(),
            max_batch_rows: self.max_batch_rows,
            max_cache_tokens: self.max_cache_tokens,
            session_rows: self.session_rows,
            shard: deltarl_schemas::Shard::WHOLE,
            extract: self.extract_options(),
            seed: self.seed,
            iter,
        }
    }
}

/// What one evaluation asks of a policy: how to prompt, sample and grade.
#[derive(Clone, Debug)]
pub struct Request {
    pub template: String,
    pub samples: u32,
    pub temperature: f64,
    pub top_p: f64,
    /// 0 = off.
    pub top_k: usize,
    pub max_new_tokens: usize,
    pub stop: Vec<String>,
    pub max_batch_rows: usize,
    /// The KV-cache budget in positions (None = no limit).
    pub max_cache_tokens: Option<usize>,
    /// Sessions of at most this many samples (None = one session).
    pub session_rows: Option<usize>,
    /// This process's share of the sessions (session i to rank i mod N); the others'
    /// samples are not drawn here.
    pub shard: deltarl_schemas::Shard,
    /// How answers are extracted from the responses.
    pub extract: ExtractOptions,
    pub seed: u64,
    pub iter: u32,
}
